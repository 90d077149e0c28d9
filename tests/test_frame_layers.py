"""A gpt notebook of layer objects (tutor/core/frame.py, tutor/core/trace.py): each layer
keeps what its backward needs and returns only its input's gradient, so several of the
lesson's steps are worked in one go (a layer norm's backward in one formula), a residual's
branch is handed on as it arrives, and a name of the notebook's own (`dtok`, the embedding
table's gradient) is not the lesson's `tok`. What it computes is graded wherever it is:
a step done inside a larger formula is checked from the earlier gradient the formula starts
from, by the fork probe."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

DATA = '''import math, random
import torch
import torch.nn.functional as F

words = open('names.txt').read().splitlines()
chars = sorted(set(''.join(words)))
stoi = {c: i + 1 for i, c in enumerate(chars)}; stoi['.'] = 0
T, C, NH = 16, 32, 4
HS = C // NH
V = len(stoi)
def rows(ws):
    X, Y = [], []
    for w in ws:
        r = ([0] + [stoi[c] for c in w] + [0])[:T + 1]
        r = r + [0] * (T + 1 - len(r))
        X.append(r[:T]); Y.append(r[T])
    return torch.tensor(X), torch.tensor(Y)
random.seed(1); random.shuffle(words)
Xtr, Ytr = rows(words[:3000])

'''

LAYERS = '''gen = torch.Generator().manual_seed(7)
def rn(*s, scale=1.0):
    return (torch.randn(*s, generator=gen) * scale).requires_grad_()

class LayerNorm:
    def __init__(self, d):
        self.w = (1 + 0.1 * torch.randn(d, generator=gen)).requires_grad_()
        self.b = rn(d, scale=0.1)
    def __call__(self, x):
        self.x = x
        self.mu = x.mean(-1, keepdim=True)
        self.xc = x - self.mu
        self.var = (self.xc ** 2).mean(-1, keepdim=True)
        self.rstd = (self.var + 1e-5) ** -0.5
        self.xn = self.xc * self.rstd
        self.out = self.xn * self.w + self.b
        return self.out
    def backward(self, dout):
        self.dw = (dout * self.xn).sum((0, 1))
        self.db = dout.sum((0, 1))
        dxn = dout * self.w
        dx = self.rstd * (dxn - dxn.mean(-1, keepdim=True)
                          - self.xn * (dxn * self.xn).mean(-1, keepdim=True))
        return dx

class Linear:
    def __init__(self, i, o, s=1.0):
        self.W = rn(i, o, scale=s * i ** -0.5)
        self.b = rn(o, scale=0.1)
    def __call__(self, x):
        self.x = x
        self.out = x @ self.W + self.b
        return self.out
    def backward(self, dout):
        self.dW = (self.x.reshape(-1, self.x.shape[-1]).T @ dout.reshape(-1, dout.shape[-1]))
        self.db = dout.sum((0, 1))
        return dout @ self.W.T

class Attention:
    def __call__(self, qkv):
        B = qkv.shape[0]
        self.B = B
        q, k, v = qkv.split(C, dim=-1)
        self.q = q.view(B, T, NH, HS).transpose(1, 2)
        self.k = k.view(B, T, NH, HS).transpose(1, 2)
        self.v = v.view(B, T, NH, HS).transpose(1, 2)
        self.s = self.q @ self.k.transpose(-2, -1) * HS ** -0.5
        mask = torch.tril(torch.ones(T, T))
        self.sm = self.s.masked_fill(mask == 0, float('-inf'))
        self.p = F.softmax(self.sm, dim=-1)
        self.o = self.p @ self.v
        self.out = self.o.transpose(1, 2).contiguous().view(B, T, C)
        return self.out
    def backward(self, dout):
        B = self.B
        do = dout.view(B, T, NH, HS).transpose(1, 2)
        dp = do @ self.v.transpose(-2, -1)
        dv = self.p.transpose(-2, -1) @ do
        dsm = self.p * (dp - (dp * self.p).sum(-1, keepdim=True))
        ds = dsm.masked_fill(torch.tril(torch.ones(T, T)) == 0, 0.0)
        dq = ds @ self.k * HS ** -0.5
        dk = ds.transpose(-2, -1) @ self.q * HS ** -0.5
        merge = lambda t: t.transpose(1, 2).contiguous().view(B, T, C)
        return torch.cat([merge(dq), merge(dk), merge(dv)], dim=-1)

class Gelu:
    def __call__(self, x):
        self.x = x
        self.out = 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
        return self.out
    def backward(self, dout):
        x = self.x
        u = math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)
        th = torch.tanh(u)
        slope = math.sqrt(2 / math.pi) * (1 + 3 * 0.044715 * x ** 2)
        return dout * (0.5 * (1 + th) + 0.5 * x * (1 - th ** 2) * slope)

class Model:
    def __init__(self):
        self.tok = rn(V, C, scale=0.1)
        self.pos = rn(T, C, scale=0.1)
        self.ln1 = LayerNorm(C)
        self.attn_in = Linear(C, 3 * C)
        self.attn = Attention()
        self.attn_out = Linear(C, C, 0.5)
        self.ln2 = LayerNorm(C)
        self.fc = Linear(C, 4 * C)
        self.act = Gelu()
        self.proj = Linear(4 * C, C, 0.5)
        self.lnf = LayerNorm(C)
    def params(self):
        out = [self.tok, self.pos]
        for m in (self.ln1, self.ln2, self.lnf):
            out += [m.w, m.b]
        for m in (self.attn_in, self.attn_out, self.fc, self.proj):
            out += [m.W, m.b]
        return out
    def __call__(self, X, Y):
        self.X = X
        self.h0 = self.tok[X] + self.pos
        a = self.attn_out(self.attn(self.attn_in(self.ln1(self.h0))))
        self.h1 = self.h0 + a
        f = self.proj(self.act(self.fc(self.ln2(self.h1))))
        self.h2 = self.h1 + f
        self.logits = self.lnf(self.h2) @ self.tok.T
        self.tg = torch.cat([X[:, 1:], Y[:, None]], 1)
        self.loss = F.cross_entropy(self.logits.view(-1, V), self.tg.view(-1))
        return self.loss
    def backward(self):
        B = self.X.shape[0]
        P = F.softmax(self.logits, -1)
        dlog = P.clone()
        dlog.scatter_add_(-1, self.tg[..., None], -torch.ones(B, T, 1))
        self.dlog = dlog / (B * T)
        dlnf = self.dlog @ self.tok
        self.dtok = self.dlog.reshape(-1, V).T @ self.lnf.out.reshape(-1, C)
        dh2 = self.lnf.backward(dlnf)
        self.dh2 = dh2
        dh1 = dh2 + self.ln2.backward(self.fc.backward(self.act.backward(self.proj.backward(dh2))))
        self.dh1 = dh1
        dattn = self.attn.backward(self.attn_out.backward(dh1))
        dh0 = dh1 + self.ln1.backward(self.attn_in.backward(dattn))
        self.dh0 = dh0
        self.dtok = self.dtok.index_add(0, self.X.view(-1), dh0.view(-1, C))
        self.dpos = dh0.sum(0)

'''

RUN = '''m = Model()
ix = torch.randint(0, Xtr.shape[0], (5,), generator=gen)
xb, yb = Xtr[ix], Ytr[ix]
loss = m(xb, yb)
for t in [m.logits, m.h0, m.h1, m.h2, m.lnf.out]:
    t.retain_grad()
loss.backward()
m.backward()

def agree(label, mine, ref):
    gap = (mine - ref).abs().max().item()
    print(f'{label:10s} {torch.allclose(mine, ref, atol=1e-5)} {gap:.2e}')

agree('logits', m.dlog, m.logits.grad)
agree('h2', m.dh2, m.h2.grad)
agree('h1', m.dh1, m.h1.grad)
agree('h0', m.dh0, m.h0.grad)
agree('tok', m.dtok, m.tok.grad)
agree('pos', m.dpos, m.pos.grad)
for name, mod in [('ln1', m.ln1), ('ln2', m.ln2), ('lnf', m.lnf)]:
    agree(name + '.w', mod.dw, mod.w.grad)
    agree(name + '.b', mod.db, mod.b.grad)
for name, mod in [('qkv', m.attn_in), ('aproj', m.attn_out), ('fc', m.fc), ('proj', m.proj)]:
    agree(name + '.W', mod.dW, mod.W.grad)
    agree(name + '.b', mod.db, mod.b.grad)

'''

# The same network of torch.nn's layers (the sandbox's, tutor/sandbox/layers.py): weights kept
# as (out, in) and read through `F.linear`, three layer norms whose scales start as ones (equal
# in value: each is the one its own layer reads), the gradients kept as `.g` notes.
NN_LAYERS = '''import torch.nn as nn
torch.manual_seed(5)

def ln_back(x, w, dout):
    mu = x.mean(-1, keepdim=True)
    rstd = ((x - mu) ** 2).mean(-1, keepdim=True).add(1e-5).rsqrt()
    xh = (x - mu) * rstd
    dxh = dout * w
    dx = rstd * (dxh - dxh.mean(-1, keepdim=True) - xh * (dxh * xh).mean(-1, keepdim=True))
    return dx, (dout * xh).sum((0, 1)), dout.sum((0, 1))

def lin_back(layer, x, dout):
    layer.weight.g = dout.reshape(-1, dout.shape[-1]).T @ x.reshape(-1, x.shape[-1])
    layer.bias.g = dout.sum((0, 1))
    return dout @ layer.weight

class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(V, C)
        self.pos = nn.Parameter(torch.randn(T, C) * 0.1)
        self.ln1 = nn.LayerNorm(C)
        self.qkv = nn.Linear(C, 3 * C)
        self.proj = nn.Linear(C, C)
        self.ln2 = nn.LayerNorm(C)
        self.fc = nn.Linear(C, 4 * C)
        self.out = nn.Linear(4 * C, C)
        self.lnf = nn.LayerNorm(C)
    def forward(self, X, Y):
        B = X.shape[0]
        self.X = X
        self.x0 = self.tok(X) + self.pos
        self.a = self.ln1(self.x0)
        self.qkv_out = self.qkv(self.a)
        q, k, v = self.qkv_out.split(C, -1)
        self.q = q.view(B, T, NH, HS).transpose(1, 2)
        self.k = k.view(B, T, NH, HS).transpose(1, 2)
        self.v = v.view(B, T, NH, HS).transpose(1, 2)
        s = self.q @ self.k.transpose(-2, -1) * HS ** -0.5
        s = s.masked_fill(torch.tril(torch.ones(T, T)) == 0, float('-inf'))
        self.p = F.softmax(s, -1)
        self.y = (self.p @ self.v).transpose(1, 2).contiguous().view(B, T, C)
        self.x1 = self.x0 + self.proj(self.y)
        self.b = self.ln2(self.x1)
        self.h = self.fc(self.b)
        u = math.sqrt(2 / math.pi) * (self.h + 0.044715 * self.h ** 3)
        self.hg = 0.5 * self.h * (1 + torch.tanh(u))
        self.x2 = self.x1 + self.out(self.hg)
        self.f = self.lnf(self.x2)
        self.logits = self.f @ self.tok.weight.T
        self.tg = torch.cat([X[:, 1:], Y[:, None]], 1)
        return F.cross_entropy(self.logits.view(-1, V), self.tg.view(-1))
    def backward(self):
        B = self.X.shape[0]
        g = F.softmax(self.logits, -1)
        g = g - F.one_hot(self.tg, V).float()
        g = g / (B * T)
        self.logits.g = g
        self.tok.weight.g = g.reshape(-1, V).T @ self.f.reshape(-1, C)
        df = g @ self.tok.weight
        dx2, self.lnf.weight.g, self.lnf.bias.g = ln_back(self.x2, self.lnf.weight, df)
        dhg = lin_back(self.out, self.hg, dx2)
        u = math.sqrt(2 / math.pi) * (self.h + 0.044715 * self.h ** 3)
        th = torch.tanh(u)
        slope = math.sqrt(2 / math.pi) * (1 + 3 * 0.044715 * self.h ** 2)
        dh = dhg * (0.5 * (1 + th) + 0.5 * self.h * (1 - th ** 2) * slope)
        db = lin_back(self.fc, self.b, dh)
        d, self.ln2.weight.g, self.ln2.bias.g = ln_back(self.x1, self.ln2.weight, db)
        dx1 = dx2 + d
        dy = lin_back(self.proj, self.y, dx1)
        do = dy.view(B, T, NH, HS).transpose(1, 2)
        dp = do @ self.v.transpose(-2, -1)
        dv = self.p.transpose(-2, -1) @ do
        ds = self.p * (dp - (dp * self.p).sum(-1, keepdim=True)) * HS ** -0.5
        dq = ds @ self.k
        dk = ds.transpose(-2, -1) @ self.q
        m = lambda t: t.transpose(1, 2).reshape(B, T, C)
        da = lin_back(self.qkv, self.a, torch.cat([m(dq), m(dk), m(dv)], -1))
        d, self.ln1.weight.g, self.ln1.bias.g = ln_back(self.x0, self.ln1.weight, da)
        dx0 = dx1 + d
        self.x0.g = dx0
        self.pos.g = dx0.sum(0)
        self.tok.weight.g = self.tok.weight.g.index_add(0, self.X.view(-1), dx0.view(-1, C))

'''

NN_RUN = '''model = GPT()
ix = torch.randint(0, Xtr.shape[0], (5,))
loss = model(Xtr[ix], Ytr[ix])
model.x0.retain_grad(); model.logits.retain_grad()
loss.backward()
model.backward()
for name, p in [('tok', model.tok.weight), ('pos', model.pos), ('qkv', model.qkv.weight),
                ('fc.b', model.fc.bias), ('ln1', model.ln1.weight)]:
    print(name, torch.allclose(p.g, p.grad, atol=1e-5))
print('x0', torch.allclose(model.x0.g, model.x0.grad, atol=1e-6))
'''

ATOMS = ("block/lnf_rstd", "block/lnf_var", "block/lnf_xc", "block/lnf_mean")


def _graded(folder: Path, cells: list[str]) -> dict:
    path = folder / "layers.ipynb"
    path.write_text(json.dumps({
        "cells": [{"cell_type": "code", "execution_count": None, "id": f"c{i}",
                   "metadata": {}, "outputs": [], "source": c.splitlines(keepends=True)}
                  for i, c in enumerate(cells)],
        "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    done = subprocess.run([sys.executable, "-m", "tutor", "--device", "cpu", "--pack", "gpt",
                           "grade", "--json", str(path)], capture_output=True, text=True,
                          cwd=ROOT, timeout=600)
    return {s["id"]: s for s in json.loads(done.stdout)["steps"]}


@pytest.fixture(scope="module")
def steps(tmp_path_factory):
    return _graded(tmp_path_factory.mktemp("layers"), [DATA, LAYERS, RUN])


def _earned(step: dict) -> bool:
    return step["score"] == step["max_score"]


@pytest.mark.slow
def test_a_layer_norm_s_backward_in_one_formula_earns_the_gradient_it_completes(steps):
    # dx2 is the fused formula's result, computed from dlnf_norm, not from dlnf_mean
    assert _earned(steps["block/x2"]), steps["block/x2"]["message"]
    assert _earned(steps["block/x1"]), steps["block/x1"]["message"]
    # the atoms it never wrote are missing, not failed
    for sid in ATOMS:
        assert steps[sid]["score"] == 0 and steps[sid]["status"] == "missing", steps[sid]


@pytest.mark.slow
def test_a_residual_s_branch_handed_on_as_it_arrives_is_its_own(steps):
    for sid in ("block/x2_residual", "block/x1_residual"):
        assert _earned(steps[sid]), steps[sid]["message"]


@pytest.mark.slow
def test_a_name_of_its_own_of_another_shape_is_no_answer(steps):
    # `self.dtok` is the table's gradient ([27, 32]); the lesson's `tok` is [n, 16, 32]
    assert _earned(steps["block/wpe"]), steps["block/wpe"]["message"]
    everything = [sid for sid in steps if sid.startswith("block/") and sid not in ATOMS]
    assert all(_earned(steps[sid]) for sid in everything), {
        sid: steps[sid]["message"] for sid in everything if not _earned(steps[sid])}


@pytest.mark.slow
def test_a_model_of_torch_s_layers_is_graded_as_the_lesson_s(tmp_path):
    steps = _graded(tmp_path, [DATA, NN_LAYERS, NN_RUN])
    everything = [sid for sid in steps if sid.startswith("block/") and sid not in ATOMS]
    assert all(_earned(steps[sid]) for sid in everything), {
        sid: steps[sid]["message"] for sid in everything if not _earned(steps[sid])}
