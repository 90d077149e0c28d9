"""A notebook whose forward pass is its own (a model class, its own names, its own data and
seed) is graded on what it computes, found by value in its own frame (tutor/core/frame.py):
its parameters and batch are what the lesson's forward pass gives its loss with, and its
tensors are the lesson's where their values are."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tutor.course.program import own_source

ROOT = Path(__file__).resolve().parent.parent

DATA = '''import torch
import torch.nn.functional as F
import random
with open('names.txt') as f:
    names = [w.strip() for w in f if w.strip()]
random.seed(3)
random.shuffle(names)
s2i = {ch: k + 1 for k, ch in enumerate('abcdefghijklmnopqrstuvwxyz')}
T = 8
def build(ws):
    X, Y = [], []
    for w in ws:
        ctx = [0] * T
        for ch in w + '.':
            X.append(ctx)
            Y.append(s2i.get(ch, 0))
            ctx = ctx[1:] + [s2i.get(ch, 0)]
    return torch.tensor(X), torch.tensor(Y)
Xall, Yall = build(names[:2000])
'''

MODEL = '''gen = torch.Generator().manual_seed(1234)
class WaveNet:
    def __init__(self):
        self.E = torch.randn((27, 10), generator=gen)
        self.k = [torch.randn((64, 10, 2), generator=gen) * 0.3,
                  torch.randn((64, 64, 2), generator=gen) * 0.1,
                  torch.randn((64, 64, 2), generator=gen) * 0.1]
        self.c = [torch.randn(64, generator=gen) * 0.1 for _ in range(3)]
        self.Wout = torch.randn((64, 27), generator=gen) * 0.1
        self.bout = torch.randn(27, generator=gen) * 0.1
        for p in [self.E, self.Wout, self.bout, *self.k, *self.c]:
            p.requires_grad_()

    def _conv(self, a, j):
        d = 2 ** j
        return F.conv1d(F.pad(a, (d, 0)), self.k[j], self.c[j], dilation=d)

    def forward(self, xb, yb):
        self.acts = {'e': self.E[xb]}
        a = self.acts['e'].transpose(1, 2)
        self.acts['xt'] = a
        for j in range(3):
            self.acts[f'z{j}'] = self._conv(a, j)
            a = self.acts[f'a{j}'] = torch.tanh(self.acts[f'z{j}'])
        self.acts['fin'] = a[:, :, -1]
        self.acts['out'] = self.acts['fin'] @ self.Wout + self.bout
        return F.cross_entropy(self.acts['out'], yb)

net = WaveNet()
ix = torch.randint(0, Xall.shape[0], (20,), generator=gen)
xb, yb = Xall[ix], Yall[ix]
loss = net.forward(xb, yb)
loss.backward()
'''

BACKWARD = '''B = xb.shape[0]
g = {}
p = F.softmax(net.acts['out'], 1)
p[range(B), yb] -= 1
g['out'] = p / B
g['fin'] = g['out'] @ net.Wout.T
g['Wout'] = net.acts['fin'].T @ g['out']
g['bout'] = g['out'].sum(0)
g['a2'] = torch.zeros_like(net.acts['a2'])
g['a2'][:, :, -1] = g['fin']

def conv_back(dz, a_in, k, d):
    L = a_in.shape[2]
    ap = F.pad(a_in, (d, 0))
    dk = torch.stack([torch.einsum('bot,bit->oi', dz, ap[:, :, :L]),
                      torch.einsum('bot,bit->oi', dz, ap[:, :, d:d + L])], 2)
    dap = torch.zeros_like(ap)
    dap[:, :, :L] += torch.einsum('bot,oi->bit', dz, k[:, :, 0])
    dap[:, :, d:d + L] += torch.einsum('bot,oi->bit', dz, k[:, :, 1])
    return dap[:, :, d:], dk, dz.sum((0, 2))

ins = [net.acts['xt'], net.acts['a0'], net.acts['a1']]
for j in (2, 1, 0):
    g[f'z{j}'] = (1 - net.acts[f'a{j}'] ** 2) * g[f'a{j}']
    below = 'xt' if j == 0 else f'a{j - 1}'
    g[below], g[f'k{j}'], g[f'c{j}'] = conv_back(g[f'z{j}'], ins[j], net.k[j], 2 ** j)
g['e'] = g['xt'].transpose(1, 2)
g['E'] = torch.zeros_like(net.E).index_add_(0, xb.view(-1), g['e'].reshape(-1, 10))
for key in ['out', 'fin', 'a2', 'z2', 'a1', 'z1', 'a0', 'z0', 'xt', 'e']:
    print(key, torch.allclose(g[key], net.acts[key].grad, atol=1e-6))
'''


# The same network with its parameters as globals of the notebook's own names, its forward and
# backward passes as functions, and a training loop over its own list of them.
GLOBALS = '''gen = torch.Generator().manual_seed(99)
V, D, H = 27, 10, 64
E = torch.randn((V, D), generator=gen)
K0 = torch.randn((H, D, 2), generator=gen) * 0.3
K1 = torch.randn((H, H, 2), generator=gen) * 0.1
K2 = torch.randn((H, H, 2), generator=gen) * 0.1
c0 = torch.randn(H, generator=gen) * 0.1
c1 = torch.randn(H, generator=gen) * 0.1
c2 = torch.randn(H, generator=gen) * 0.1
Wout = torch.randn((H, V), generator=gen) * 0.1
bout = torch.randn(V, generator=gen) * 0.1
params = [E, K0, c0, K1, c1, K2, c2, Wout, bout]
for p in params:
    p.requires_grad_()

def run(xb, yb):
    acts = {'e': E[xb]}
    a = acts['xt'] = acts['e'].transpose(1, 2)
    for j, (k, c) in enumerate([(K0, c0), (K1, c1), (K2, c2)]):
        d = 2 ** j
        acts[f'z{j}'] = F.conv1d(F.pad(a, (d, 0)), k, c, dilation=d)
        a = acts[f'a{j}'] = torch.tanh(acts[f'z{j}'])
    acts['out'] = a[:, :, -1] @ Wout + bout
    return F.cross_entropy(acts['out'], yb), acts

def back(dz, a_in, k, d):
    L = a_in.shape[2]
    ap = F.pad(a_in, (d, 0))
    dk = torch.stack([torch.einsum('bot,bit->oi', dz, ap[:, :, :L]),
                      torch.einsum('bot,bit->oi', dz, ap[:, :, d:d + L])], 2)
    dap = torch.zeros_like(ap)
    dap[:, :, :L] += torch.einsum('bot,oi->bit', dz, k[:, :, 0])
    dap[:, :, d:d + L] += torch.einsum('bot,oi->bit', dz, k[:, :, 1])
    return dap[:, :, d:], dk, dz.sum((0, 2))

def grads_of(xb, yb, acts):
    B = xb.shape[0]
    p_ = F.softmax(acts['out'], 1)
    p_[range(B), yb] -= 1
    dout = p_ / B
    da = torch.zeros_like(acts['a2'])
    da[:, :, -1] = dout @ Wout.T
    dWout = acts['a2'][:, :, -1].T @ dout
    ks, ins, dk, dc = [K0, K1, K2], [acts['xt'], acts['a0'], acts['a1']], {}, {}
    for j in (2, 1, 0):
        dz = (1 - acts[f'a{j}'] ** 2) * da
        da, dk[j], dc[j] = back(dz, ins[j], ks[j], 2 ** j)
    dE = torch.zeros_like(E).index_add_(0, xb.view(-1), da.transpose(1, 2).reshape(-1, D))
    return [dE, dk[0], dc[0], dk[1], dc[1], dk[2], dc[2], dWout, dout.sum(0)]

ix = torch.randint(0, Xall.shape[0], (20,), generator=gen)
xb, yb = Xall[ix], Yall[ix]
loss, acts = run(xb, yb)
for t_ in acts.values():
    t_.retain_grad()
loss.backward()
grads = grads_of(xb, yb, acts)
print([torch.allclose(p.grad, g, atol=1e-6) for p, g in zip(params, grads)])
'''

TRAIN = '''for p in params:
    p.requires_grad_(False)
for i in range(100):
    bi = torch.randint(0, Xall.shape[0], (32,), generator=gen)
    xs, ys = Xall[bi], Yall[bi]
    loss, acts = run(xs, ys)
    grads = grads_of(xs, ys, acts)
    for p, g in zip(params, grads):
        p -= 0.1 * g
'''


def _notebook(path: Path, cells: list[str]) -> Path:
    path.write_text(json.dumps({
        "cells": [{"cell_type": "code", "execution_count": None, "id": f"c{i}",
                   "metadata": {}, "outputs": [], "source": c.splitlines(keepends=True)}
                  for i, c in enumerate(cells)],
        "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    return path


def _grade(path: Path, device: str = "cpu", env: dict | None = None, pack: str = "conv"
           ) -> dict:
    import os

    done = subprocess.run([sys.executable, "-m", "tutor", "--device", device, "--pack", pack,
                           "grade", "--json", "--train-steps", "1", str(path)],
                          capture_output=True, text=True, cwd=ROOT, timeout=600,
                          env={**os.environ, **(env or {})})
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    folder = tmp_path_factory.mktemp("frame")
    right = _grade(_notebook(folder / "own.ipynb", [DATA, MODEL, BACKWARD]))
    # One slip: the middle layer's tanh slope taken at its input, not its output.
    slipped = BACKWARD.replace("g[f'z{j}'] = (1 - net.acts[f'a{j}'] ** 2) * g[f'a{j}']",
                               "g[f'z{j}'] = (1 - (net.acts[f'a{j}'] if j != 1 else "
                               "net.acts['z1']) ** 2) * g[f'a{j}']")
    assert slipped != BACKWARD
    wrong = _grade(_notebook(folder / "slip.ipynb", [DATA, MODEL, slipped]))
    return {s["id"]: s for s in right["steps"]}, {s["id"]: s for s in wrong["steps"]}, right


def test_a_forward_pass_of_its_own_is_graded_by_value(graded):
    right, _, _ = graded
    steps = [sid for sid in right if sid != "conv/train"]
    assert all(right[sid]["score"] == right[sid]["max_score"] for sid in steps), {
        sid: right[sid]["message"] for sid in steps if not right[sid]["score"]}


def test_a_slip_in_its_own_layout_earns_nothing_and_costs_one_step(graded):
    right, wrong, _ = graded
    assert wrong["conv/h2pre"]["score"] == 0  # its z1: the slope taken at the wrong tensor
    # every other step earns what it did: one mistake costs one step
    others = [sid for sid in right if sid not in ("conv/train", "conv/h2pre")]
    assert all(wrong[sid]["score"] == right[sid]["score"] for sid in others), {
        sid: wrong[sid]["message"] for sid in others if wrong[sid]["score"] != right[sid]["score"]}


def test_a_parameter_kept_the_other_way_round_is_read_through_its_layout(tmp_path):
    # `Wout` as [vocab, hidden], read as `Wout.T` where the lesson keeps `W` as [hidden,
    # vocab]: its gradient, the other way round too, is the lesson's through the same op.
    model = MODEL.replace("self.Wout = torch.randn((64, 27)", "self.Wout = torch.randn((27, 64)")
    model = model.replace("self.acts['fin'] @ self.Wout", "self.acts['fin'] @ self.Wout.T")
    backward = BACKWARD.replace("g['out'] @ net.Wout.T", "g['out'] @ net.Wout").replace(
        "net.acts['fin'].T @ g['out']", "g['out'].T @ net.acts['fin']")
    assert model != MODEL and backward != BACKWARD
    steps = {s["id"]: s for s in _grade(_notebook(tmp_path / "t.ipynb",
                                                  [DATA, model, backward]))["steps"]}
    assert steps["conv/last"]["score"] == steps["conv/last"]["max_score"], steps["conv/last"]
    assert all(s["score"] == s["max_score"] for sid, s in steps.items() if sid != "conv/train")


def test_a_training_loop_over_its_own_names_trains_the_lesson_s_network(tmp_path):
    # Its loop reads the parameters by its own names (`K1`), which its own frame found to be
    # the lesson's (`w2`): the loop is read again with those names, its batch the tutor's.
    steps = {s["id"]: s for s in _grade(_notebook(tmp_path / "g.ipynb",
                                                  [DATA, GLOBALS, TRAIN]))["steps"]}
    assert steps["conv/train"]["score"] == steps["conv/train"]["max_score"], steps["conv/train"]
    assert all(s["score"] == s["max_score"] for s in steps.values()), {
        sid: s["message"] for sid, s in steps.items() if s["score"] != s["max_score"]}


def test_a_notebook_that_checks_nothing_is_still_refused(tmp_path):
    path = _notebook(tmp_path / "plain.ipynb", [DATA, "print(len(names))\n"])
    done = subprocess.run([sys.executable, "-m", "tutor", "--device", "cpu", "--pack", "conv",
                           "grade", str(path)], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)
    assert done.returncode != 0 and "has neither" in done.stderr + done.stdout


def test_its_own_frame_reads_its_data_and_leaves_autograd_s_marks_out():
    text = own_source(
        "import random\nfrom collections import deque\n"
        "words = open('names.txt', 'r').read().splitlines()\n"
        "with open('names.txt') as f:\n    lines = [w for w in f]\n"
        "g = torch.Generator().manual_seed(7)\ntorch.manual_seed(1)\n"
        "W = torch.randn(3, 4, generator=g, requires_grad=True)\nW.requires_grad_()\n"
        "c = self.cache = {}\nW.grad = None\n")
    assert "open(" not in text and "lesson_data_text.splitlines()" in text
    assert "[w for w in lesson_data_text.splitlines(True)]" in text
    assert "manual_seed" not in text and "requires_grad" not in text and ".grad" not in text
    assert "self.cache = {}\nc = self.cache" in text
    assert "deque = collections.deque" in text


def test_its_own_frame_runs_on_the_cpu_whatever_the_lesson_s_device(tmp_path):
    # The notebook's own generators are the CPU's: on an accelerator (here the simulated one)
    # its frame still runs where it was written, and the written code runs on the lesson's.
    from tutor.config import SIMULATED_DEVICE

    path = _notebook(tmp_path / "own.ipynb", [DATA, MODEL, BACKWARD])
    steps = {s["id"]: s for s in _grade(path, "cuda", {SIMULATED_DEVICE: "1"})["steps"]}
    assert all(s["score"] == s["max_score"] for sid, s in steps.items() if sid != "conv/train")


def test_a_parameter_drawn_again_in_place_is_read_as_drawn(tmp_path):
    # `nn.init.normal_(E)` after making it with zeros: what its forward pass reads is the
    # drawn value, which is the lesson's table.
    model = MODEL.replace("self.E = torch.randn((27, 10), generator=gen)",
                          "self.E = torch.zeros(27, 10)\n"
                          "        torch.nn.init.normal_(self.E, generator=gen)")
    assert model != MODEL
    steps = {s["id"]: s for s in _grade(_notebook(tmp_path / "n.ipynb",
                                                  [DATA, model, BACKWARD]))["steps"]}
    assert all(s["score"] == s["max_score"] for sid, s in steps.items() if sid != "conv/train"), {
        sid: s["message"] for sid, s in steps.items() if s["score"] != s["max_score"]}


def test_a_notebook_in_a_layout_of_its_own_throughout_is_read_in_its_own_frame(tmp_path):
    """Time first (`[T, B, C]`), each kernel kept as one (in, out) matrix per tap, a loop over
    positions: its `x` and `demb` are not the lesson's by their names, so what its own frame
    finds right stands (a tune corpus's notebook, measured by running it)."""
    import notebook_corpus_lessons_tune7 as corpus

    case = next(c for c in corpus.CASES if c["name"].startswith("conv_t6"))
    path = tmp_path / "taps.ipynb"
    path.write_text(json.dumps(case["notebook"]))
    steps = {s["id"]: s for s in _grade(path)["steps"]}
    right = [sid for sid in case["right"] if sid != "conv/train"]
    lost = {sid: steps[sid]["message"] for sid in right
            if steps[sid]["score"] != steps[sid]["max_score"]}
    assert right and not lost, lost


@pytest.mark.parametrize("case_name", ["gpt_u2", "gpt_u4"])
def test_weights_kept_out_in_and_parameters_in_a_parameter_dict_are_found(tmp_path, case_name):
    """`F.linear`'s (out, in) weights (square ones too), a norm's weight and bias read in the
    other order, parameters in an `nn.ParameterDict`: its own frame finds the lesson's
    parameters in them (a tune corpus's notebooks, measured by running them)."""
    import notebook_corpus_lessons_tune8 as corpus

    case = next(c for c in corpus.CASES if c["name"].startswith(case_name))
    path = tmp_path / "own.ipynb"
    path.write_text(json.dumps(case["notebook"]))
    steps = {s["id"]: s for s in _grade(path, pack="gpt")["steps"]}
    # gpt_u4's setup line (`nV, nT, nC, nH = len(chars), ...`) is cut into its logits step by
    # the names: what its own frame traces stands there.
    right = case["right"]
    lost = {sid: steps[sid]["message"] for sid in right
            if steps[sid]["score"] != steps[sid]["max_score"]}
    assert len(right) >= 15 and not lost, lost


@pytest.mark.parametrize("case_name, pack", [("gpt_u2", "gpt"), ("gpt_u4", "gpt"),
                                             ("lstm_u5", "lstm")])
def test_a_model_object_id_keys_and_a_bias_set_up_in_place_are_read(tmp_path, case_name, pack):
    """A model object whose parameters are first read by `zeros_like` (its gradients'
    buffers), a namedtuple of its own `locals()`, a data split by `zlib.crc32`; gradients in a
    dict keyed by `id(t)`; a forget gate's bias set up in place and a training loop's later
    values of each shape: its own frame finds the lesson's parameters and batch (a tune
    corpus's notebooks, measured by running them)."""
    import notebook_corpus_lessons_tune9 as corpus

    case = next(c for c in corpus.CASES if c["name"].startswith(case_name))
    path = tmp_path / "own.ipynb"
    path.write_text(json.dumps(case["notebook"]))
    steps = {s["id"]: s for s in _grade(path, pack=pack)["steps"]}
    right = [sid for sid in case["right"] if sid != "train/gpt"]  # a model object's loop
    lost = {sid: steps[sid]["message"] for sid in right
            if steps[sid]["score"] != steps[sid]["max_score"]}
    # A step wrong only by an earlier one's slip is right by its own line, and earns its point.
    wrong = [sid for sid in case["wrong"] if sid not in case["cascade"]
             and steps[sid]["score"] == steps[sid]["max_score"]]
    assert len(right) >= 9 and not lost and not wrong, (lost, wrong)


def test_a_stack_kept_reversed_and_merged_is_the_lesson_s_tensor_laid_out():
    """`cat([c, h], 1)` for the lesson's `stack([h, c])`: the code that lays the lesson's
    tensor out so, and its gradient laid out by reading that code (never evaluating it)."""
    import torch

    from tutor.core import frame

    h, c = torch.randn(5, 3), torch.randn(5, 3)
    state = torch.stack([h, c])
    code = frame._rearranged(state, torch.cat([c, h], 1))
    assert code == ".flip(0).permute(1, 0, 2).flatten(1)"
    g = torch.randn(2, 5, 3)
    assert torch.equal(frame._lay(g, code), g.flip(0).permute(1, 0, 2).flatten(1))
    assert frame._lay(g, ".narrow(0, 0, 1)") is None  # only the layout methods it writes
