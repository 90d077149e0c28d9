"""Learners' own notebooks for the gpt, lstm and conv lessons, with each step's truth: a third
corpus, holdout half (its other half is notebook_corpus_lessons_tune3).

Six notebooks, two per lesson, in layouts that the first corpus (notebook_corpus_lessons_tune /
_holdout) does not use. Each is a learner's own notebook: the lesson's forward pass copied in
(wholly renamed in one), their own loading of 'names.txt' (the truth runner points it at
data/names.txt) or the lesson's setup copied, their own seed and init, the backward pass in their
own layout, and where they train, a loop of at most 300 steps on their own gradients. Architecture
sizes are the lessons' [lesson] sizes throughout; batch sizes vary (5, 12, 16, 20, 32, 40).

Layouts in this half:
  gpt_h1   a .py-style notebook of many small `# %%` cells; forward and parameters renamed
           throughout (E, Pos, s0 / s1 / s2, QKV, A, gu, scores, ...); heads split with reshape +
           permute; every gradient an attribute of a plain class instance, set with setattr by a
           `put(name, value)` helper that also checks it; three exercise-2 functions.
  gpt_h2   the top of exercise 1 through two functions of the learner's own returning tuples
           (dlnf_xc and dx2 come back completed: only the head's share of dwte is held as a first
           branch); the seven functions with index_add_, a Python loop for dwpe, einsum and an
           in-place AdamW; a relative-error print; a forward / backward pair of functions and
           their own adamw_update for training.
  lstm_h1  gradients as attributes of a types.SimpleNamespace (the gate g renamed to free the
           name); einsum for every product; a `chk(label, mine, t)` helper; a markdown cell per
           step; lstm_backward with einsum; SGD with value clipping inside torch.no_grad().
  lstm_h2  the setup copied whole; exercise 1 only down to c, several steps a cell, in a dict;
           exercise 3's fused gates straight from di, df, dg, do; `assert torch.allclose` helper;
           lstm_step_backward with torch.chunk and addmm_; lstm_backward with add_; training
           through a list of per-time-step Cell objects with caches, momentum SGD.
  conv_h1  a generic reverse-mode tape of closures over named values (vals / grads dicts), the
           model written as calls on it; the convolution's backward by an im2col of shifted
           slices and F.pad to add the taps back; SGD through the same tape.
  conv_h2  the backward done channels-last: activations permuted to (B, T, C), kernels as
           (tap, C_in, C_out), matmuls on shifted time slices in a tuple-returning function,
           gradients permuted back to compare; relative-error print; training on a function of
           their own driven by a list of dilations, SGD with a step decay.

Slips (each case's "notes" says which): gpt_h2's gelu_backward takes tanh's slope as
(1 - th)**2 (the function is wrong and the training loop on it cascades); lstm_h1 assigns
`g.c = ...` where the future's share must be kept (step/h wrong; c, gates, g, ifgo, inputs
cascade) and stops lstm_backward's loop before step 0 (wrong; training cascades); conv_h2 calls
the second convolution's backward with dilation 1 instead of 2 (conv/h1 wrong; h1pre, x, emb, C
cascade; its training loop is right). The other three notebooks are right throughout. No notebook
is shared with the tune half, nor with the first corpus.

Written apart from the grader: from the lessons' forward passes, pack.toml's [lesson] / [setup] /
[forward] tables, `backprop-tutor --pack X list / show` and the first corpus's format only, without
reading the tutor's code or the steps' solutions, mistakes, hints or explanations, and without
running the grader on these notebooks. Every label was measured by running the notebook, not
judged by eye:

    .venv/bin/python tests/lesson_corpus_truth.py notebook_corpus_lessons_holdout3

CASES: each {"name", "lesson", "notebook" (nbformat 4), "right", "wrong", "cascade", "notes"}; steps
in neither list were not attempted; "cascade" steps (own code right, value wrong only because an
earlier wrong gradient of the learner's feeds them) are in "wrong" too. The truth runner's keys:
"where" (step -> (learner's expression, autograd reference[, after which statement])), "checkpoint",
"functions" (function step -> the learner's function name, None for the name `show` gives),
"train" (the training loop's probe), and "fix" (the replacements that undo the slips; with them
every attempted step measures right, which is how the cascades are confirmed).
"""

from __future__ import annotations

# ------------------------------------------------------------------------------------------------
# building notebooks and cases


def nb(cells: list, title: str | None = None) -> dict:
    """cells: code strings, or ("md", text) for a markdown cell."""
    out = []
    if title:
        out.append({"cell_type": "markdown", "id": "t0", "metadata": {},
                    "source": [f"# {title}\n"]})
    for c in cells:
        if isinstance(c, tuple) and c[0] == "md":
            out.append({"cell_type": "markdown", "id": f"m{len(out)}", "metadata": {},
                        "source": c[1].strip("\n").splitlines(keepends=True)})
        else:
            out.append({"cell_type": "code", "execution_count": None, "id": f"c{len(out)}",
                        "metadata": {}, "outputs": [],
                        "source": c.strip("\n").splitlines(keepends=True)})
    return {"cells": out,
            "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python",
                                        "name": "python3"},
                         "language_info": {"name": "python", "version": "3.11.4"}},
            "nbformat": 4, "nbformat_minor": 5}


def md(text: str) -> tuple:
    return ("md", text)


GPT_STEPS = ["block/" + s for s in (
    "logits", "lnf", "lnf_affine", "lnf_rstd", "lnf_var", "lnf_xc", "lnf_mean", "x2",
    "x2_residual", "fcproj", "fch", "ln2", "ln2_affine", "x1", "x1_residual", "attproj", "atty",
    "att", "preatt_masked", "preatt", "qk", "qkv", "ln1", "ln1_affine", "x0", "wpe", "wte")]
GPT_FUNCS = ["functions/" + s for s in (
    "encoder_backward", "layernorm_backward", "matmul_backward", "attention_backward",
    "gelu_backward", "crossentropy_softmax_backward", "adamw_update")]
GPT_ALL = GPT_STEPS + GPT_FUNCS + ["train/gpt"]
LSTM_STEPS = ["step/" + s for s in (
    "logits", "hs", "h_out", "state", "h", "c", "gates", "g", "ifgo", "inputs")]
LSTM_ALL = LSTM_STEPS + ["bptt/lstm_backward", "fused/gates", "fused/lstm_step_backward",
                         "train/lstm"]
CONV_STEPS = ["conv/" + s for s in (
    "logits", "last", "h3", "h3pre", "h2", "h2pre", "h1", "h1pre", "x", "emb", "C")]
CONV_ALL = CONV_STEPS + ["conv/train"]
ORDER = {s: i for i, s in enumerate(GPT_ALL + LSTM_ALL + CONV_ALL)}

# which forward tensors each gradient step is judged on; ("name", "first") is a first branch
GPT_CHECKS = {
    "block/logits": ["logits"], "block/lnf": ["lnf", ("wte", "first")],
    "block/lnf_affine": ["lnf_norm", "lnfw", "lnfb"],
    "block/lnf_rstd": ["lnf_rstd", ("lnf_xc", "first")], "block/lnf_var": ["lnf_var"],
    "block/lnf_xc": ["lnf_xc"], "block/lnf_mean": ["lnf_mean", ("x2", "first")],
    "block/x2": ["x2"], "block/x2_residual": ["fcproj", ("x1", "first")],
    "block/fcproj": ["fch_gelu", "fcprojw", "fcprojb"], "block/fch": ["fch"],
    "block/ln2": ["ln2", "fcw", "fcb"], "block/ln2_affine": ["ln2_norm", "ln2w", "ln2b"],
    "block/x1": ["x1"], "block/x1_residual": ["attproj", ("x0", "first")],
    "block/attproj": ["y", "attprojw", "attprojb"], "block/atty": ["atty"],
    "block/att": ["att", "v"], "block/preatt_masked": ["preatt_masked"],
    "block/preatt": ["preatt"], "block/qk": ["q", "k"], "block/qkv": ["qkv"],
    "block/ln1": ["ln1", "qkvw", "qkvb"], "block/ln1_affine": ["ln1_norm", "ln1w", "ln1b"],
    "block/x0": ["x0"], "block/wpe": ["tok", "wpe"], "block/wte": ["wte"],
}
# autograd's first branch, in the lesson's names ({t} is replaced by the learner's expressions)
GPT_FIRST = {
    "wte": "edge(lambda W: {lnf}.detach() @ W.T, {wte}, G({logits}))",
    "lnf_xc": "edge(lambda a: a * {lnf_rstd}.detach(), {lnf_xc}, G({lnf_norm}))",
    "x2": "G({lnf_xc})", "x1": "G({x2})", "x0": "G({x1})",
}
LSTM_CHECKS = {
    "step/logits": ["logits"], "step/hs": ["hs", "Wy", "by"],
    "step/h_out": ["hs_before", "hs_after", ("h", "first")],
    "step/state": ["h", ("c", "first")], "step/h": ["o", "c"],
    "step/c": ["f", "c_prev", "i", "g"], "step/gates": ["ai", "af", "ao"], "step/g": ["ag"],
    "step/ifgo": ["ifgo"], "step/inputs": ["x_t", "h_prev", "Wx_t", "Wh_t", "b_t"],
}
LSTM_FIRST = {"h": "G({hs})[:, {t}]", "c": "G({state})[1]"}
CONV_CHECKS = {
    "conv/logits": ["logits"], "conv/last": ["last", "W", "b"], "conv/h3": ["h3"],
    "conv/h3pre": ["h3pre"], "conv/h2": ["h2", "w3", "b3"], "conv/h2pre": ["h2pre"],
    "conv/h1": ["h1", "w2", "b2"], "conv/h1pre": ["h1pre"], "conv/x": ["x", "w1", "b1"],
    "conv/emb": ["emb"], "conv/C": ["C"],
}
CHECKS = {"gpt": (GPT_CHECKS, GPT_FIRST), "lstm": (LSTM_CHECKS, LSTM_FIRST),
          "conv": (CONV_CHECKS, {})}


class _Names(dict):
    def __missing__(self, key):
        return key


def where(lesson: str, steps, fwd=None, grad=None, first_after=None, after=None) -> dict:
    """The truth runner's specs for gradient steps.

    fwd: lesson tensor name -> the learner's expression for that forward tensor (default: same).
    grad: lesson tensor name -> the learner's expression for its gradient (default: 'd' + name);
          a callable is called with the name.
    first_after: lesson tensor name -> text of the statement after which its first branch is read.
    after: step -> text of the statement after which the step's (complete) gradients are read
           (default: the case's checkpoint).
    """
    checks, firsts = CHECKS[lesson]
    fwd = _Names(fwd or {})
    fwd.setdefault("t", "t")
    gname = grad if callable(grad) else (lambda k, g=grad or {}: g.get(k, "d" + k))
    out = {}
    for step in steps:
        specs = []
        for item in checks[step]:
            if isinstance(item, tuple):
                name = item[0]
                ref = firsts[name].format_map(fwd)
                specs.append((gname(name), ref, first_after[name]))
            else:
                ref = f"G({fwd[item]})"
                if after and step in after:
                    specs.append((gname(item), ref, after[step]))
                else:
                    specs.append((gname(item), ref))
        out[step] = specs
    return out


CASES: list[dict] = []


def add(name: str, lesson: str, cells: list, attempted, wrong=(), cascade=(), notes: str = "",
        title: str | None = None, **extra) -> None:
    attempted, wrong, cascade = set(attempted), set(wrong) | set(cascade), set(cascade)
    assert wrong <= attempted, (name, wrong - attempted)
    srt = lambda xs: sorted(xs, key=ORDER.__getitem__)  # noqa: E731
    CASES.append({"name": name, "lesson": lesson, "notebook": nb(cells, title),
                  "right": srt(attempted - wrong), "wrong": srt(wrong), "cascade": srt(cascade),
                  "notes": notes, **extra})



def no_first(specs: dict) -> dict:
    """Drops the first-branch specs (those read 'after' a statement) for a learner whose code never
    holds a first branch as a value of its own."""
    return {s: [sp for sp in v if len(sp) == 2] for s, v in specs.items()}


DROP = {"wte": "", "lnf_xc": "", "x2": "", "x1": "", "x0": "", "h": "", "c": ""}

# ================================================================================================
# GPT C (right throughout). A .py-style notebook of many small cells, `# %%` headers. Own data
# (a sorted-vocabulary build, the first 90% of an unshuffled-then-randperm'd list), torch.Generator
# (77) and a GPT-2-like init with random gains and biases, a batch of 5; the forward renamed
# entirely, parameters included (E / Pos for wte / wpe, g1 / b1, Wqkv / bqkv, Wo / bo, g2 / b2,
# Wfc / bfc, Wpr / bpr, gf / bf; s0 / s1 / s2 for the residual stream, mu / xc / var / rs / nrm
# for each layernorm's atoms, QKV, Q, K, Vh, S, Sm, A, AV, merged, o1, u, gu, o2, af, scores),
# the heads split with reshape + permute; every gradient an attribute of a plain class instance
# `gr` set with setattr by the forward tensor's name; a `same(label, mine, t)` helper. Exercise 1
# and three exercise-2 functions (layernorm_backward, gelu_backward,
# crossentropy_softmax_backward) tested on the block's own tensors. No training.

GPTC_CELLS = [
    r'''
# %% imports
import math
import torch
import torch.nn.functional as F
''',
    r'''
# %% data
raw = open('names.txt').read().splitlines()
perm = torch.randperm(len(raw), generator=torch.Generator().manual_seed(1)).tolist()
raw = [raw[j] for j in perm]
vocab = ['.'] + sorted(set(''.join(raw)))
enc = {ch: j for j, ch in enumerate(vocab)}
NV = len(vocab)
''',
    r'''
T, NE, NH = 16, 32, 4
HS = NE // NH
''',
    r'''
def windows(ws):
    X, Y = [], []
    for w_ in ws:
        ids = ([0] + [enc[ch] for ch in w_] + [0])[:T + 1]
        ids += [0] * (T + 1 - len(ids))
        X.append(ids[:T])
        Y.append(ids[T])
    return torch.tensor(X), torch.tensor(Y)

Xtr, Ytr = windows(raw[:int(0.9 * len(raw))])
''',
    r'''
# %% parameters
gg = torch.Generator().manual_seed(77)
def rnd(*shape, s=1.0):
    return torch.randn(*shape, generator=gg) * s
E = rnd(NV, NE, s=0.1)
Pos = rnd(T, NE, s=0.1)
g1, b1 = 1 + rnd(NE, s=0.1), rnd(NE, s=0.1)
Wqkv, bqkv = rnd(NE, 3 * NE, s=NE**-0.5), rnd(3 * NE, s=0.1)
Wo, bo = rnd(NE, NE, s=0.5 * NE**-0.5), rnd(NE, s=0.1)
g2, b2 = 1 + rnd(NE, s=0.1), rnd(NE, s=0.1)
Wfc, bfc = rnd(NE, 4 * NE, s=NE**-0.5), rnd(4 * NE, s=0.1)
Wpr, bpr = rnd(4 * NE, NE, s=0.5 * NE**-0.5), rnd(NE, s=0.1)
gf, bf = 1 + rnd(NE, s=0.1), rnd(NE, s=0.1)
weights = dict(E=E, Pos=Pos, g1=g1, b1=b1, Wqkv=Wqkv, bqkv=bqkv, Wo=Wo, bo=bo, g2=g2, b2=b2,
               Wfc=Wfc, bfc=bfc, Wpr=Wpr, bpr=bpr, gf=gf, bf=bf)
for w_ in weights.values():
    w_.requires_grad_()
''',
    r'''
# %% a batch
B = 5
rows = torch.randint(0, len(Xtr), (B,), generator=gg)
xb, yb = Xtr[rows], Ytr[rows]
''',
    r'''
# %% forward: embeddings
te = E[xb]
s0 = te + Pos
''',
    r'''
# %% layernorm 1
mu1 = s0.mean(-1, keepdim=True)
xc1 = s0 - mu1
var1 = (xc1**2).mean(-1, keepdim=True)
rs1 = (var1 + 1e-5)**-0.5
nrm1 = xc1 * rs1
a1 = nrm1 * g1 + b1
''',
    r'''
# %% attention
QKV = a1 @ Wqkv + bqkv
Q = QKV[..., :NE].reshape(B, T, NH, HS).permute(0, 2, 1, 3)
K = QKV[..., NE:2 * NE].reshape(B, T, NH, HS).permute(0, 2, 1, 3)
Vh = QKV[..., 2 * NE:].reshape(B, T, NH, HS).permute(0, 2, 1, 3)
S = Q @ K.permute(0, 1, 3, 2) * HS**-0.5
tri = torch.ones(T, T).tril()
Sm = S.masked_fill(tri == 0, float('-inf'))
A = F.softmax(Sm, dim=-1)
AV = A @ Vh
merged = AV.permute(0, 2, 1, 3).reshape(B, T, NE)
o1 = merged @ Wo + bo
s1 = s0 + o1
''',
    r'''
# %% layernorm 2 and the MLP
mu2 = s1.mean(-1, keepdim=True)
xc2 = s1 - mu2
var2 = (xc2**2).mean(-1, keepdim=True)
rs2 = (var2 + 1e-5)**-0.5
nrm2 = xc2 * rs2
a2 = nrm2 * g2 + b2
u = a2 @ Wfc + bfc
gu = 0.5 * u * (1 + torch.tanh(math.sqrt(2 / math.pi) * (u + 0.044715 * u**3)))
o2 = gu @ Wpr + bpr
s2 = s1 + o2
''',
    r'''
# %% final layernorm, tied head, loss
muf = s2.mean(-1, keepdim=True)
xcf = s2 - muf
varf = (xcf**2).mean(-1, keepdim=True)
rsf = (varf + 1e-5)**-0.5
nrmf = xcf * rsf
af = nrmf * gf + bf
scores = af @ E.T
tgt = torch.cat([xb[:, 1:], yb[:, None]], dim=1)
loss = F.cross_entropy(scores.reshape(-1, NV), tgt.reshape(-1))
''',
    r'''
acts = dict(te=te, s0=s0, mu1=mu1, xc1=xc1, var1=var1, rs1=rs1, nrm1=nrm1, a1=a1, QKV=QKV, Q=Q,
            K=K, Vh=Vh, S=S, Sm=Sm, A=A, AV=AV, merged=merged, o1=o1, s1=s1, mu2=mu2, xc2=xc2,
            var2=var2, rs2=rs2, nrm2=nrm2, a2=a2, u=u, gu=gu, o2=o2, s2=s2, muf=muf, xcf=xcf,
            varf=varf, rsf=rsf, nrmf=nrmf, af=af, scores=scores)
for a_ in acts.values():
    a_.retain_grad()
loss.backward()
print(loss.item())
''',
    r'''
# %% gradients live on a plain object
class Grads:
    pass

gr = Grads()

def same(label, mine, t):
    ok = torch.allclose(mine, t.grad, rtol=1e-4, atol=1e-6)
    print(label.ljust(8), ok, f"{(mine - t.grad).abs().max().item():.1e}")

def put(name, value):
    setattr(gr, name, value)
    same(name, value, acts.get(name, weights.get(name)))
''',
    r'''
# %% scores
N = B * T
sm = F.softmax(scores, -1).reshape(N, NV)
sm[torch.arange(N), tgt.reshape(-1)] -= 1
put('scores', (sm / N).reshape(B, T, NV))
''',
    r'''
# %% scores = af @ E.T
put('af', gr.scores @ E)
gr.E = gr.scores.reshape(N, NV).T @ af.reshape(N, NE)
''',
    r'''
# %% af = nrmf * gf + bf
put('nrmf', gr.af * gf)
put('gf', (gr.af * nrmf).sum((0, 1)))
put('bf', gr.af.sum((0, 1)))
''',
    r'''
# %% nrmf = xcf * rsf
put('rsf', (gr.af * gf * xcf).sum(-1, keepdim=True))
gr.xcf = gr.nrmf * rsf
''',
    r'''
put('varf', -0.5 * gr.rsf * (varf + 1e-5)**-1.5)
''',
    r'''
put('xcf', gr.xcf + gr.varf * 2 * xcf / NE)
''',
    r'''
# %% xcf = s2 - muf
put('muf', -gr.xcf.sum(-1, keepdim=True))
gr.s2 = gr.xcf.clone()
''',
    r'''
put('s2', gr.s2 + gr.muf / NE)
''',
    r'''
# %% s2 = s1 + o2
put('o2', gr.s2.clone())
gr.s1 = gr.s2.clone()
''',
    r'''
# %% o2 = gu @ Wpr + bpr
put('gu', gr.o2 @ Wpr.T)
put('Wpr', gu.reshape(N, 4 * NE).T @ gr.o2.reshape(N, NE))
put('bpr', gr.o2.sum((0, 1)))
''',
    r'''
# %% gelu
c0 = math.sqrt(2 / math.pi)
inner = c0 * (u + 0.044715 * u**3)
put('u', gr.gu * (0.5 * (1 + torch.tanh(inner))
                  + 0.5 * u * (1 - torch.tanh(inner)**2) * c0 * (1 + 3 * 0.044715 * u**2)))
''',
    r'''
# %% u = a2 @ Wfc + bfc
put('a2', gr.u @ Wfc.T)
put('Wfc', a2.reshape(N, NE).T @ gr.u.reshape(N, 4 * NE))
put('bfc', gr.u.sum((0, 1)))
''',
    r'''
put('nrm2', gr.a2 * g2)
put('g2', (gr.a2 * nrm2).sum((0, 1)))
put('b2', gr.a2.sum((0, 1)))
''',
    r'''
# %% through layernorm 2, all atoms in one line
dn = gr.nrm2
put('s1', gr.s1 + rs2 / NE * (NE * dn - dn.sum(-1, keepdim=True)
                              - nrm2 * (dn * nrm2).sum(-1, keepdim=True)))
''',
    r'''
# %% s1 = s0 + o1
put('o1', gr.s1.clone())
gr.s0 = gr.s1.clone()
''',
    r'''
put('merged', gr.o1 @ Wo.T)
put('Wo', merged.reshape(N, NE).T @ gr.o1.reshape(N, NE))
put('bo', gr.o1.sum((0, 1)))
''',
    r'''
# %% un-merge the heads
put('AV', gr.merged.reshape(B, T, NH, HS).permute(0, 2, 1, 3))
''',
    r'''
put('A', gr.AV @ Vh.permute(0, 1, 3, 2))
put('Vh', A.permute(0, 1, 3, 2) @ gr.AV)
''',
    r'''
# %% softmax backward, then the mask
put('Sm', A * gr.A - A * (A * gr.A).sum(-1, keepdim=True))
put('S', torch.where(tri.bool(), gr.Sm, torch.zeros_like(gr.Sm)))
''',
    r'''
put('Q', gr.S @ K * HS**-0.5)
put('K', gr.S.permute(0, 1, 3, 2) @ Q * HS**-0.5)
''',
    r'''
heads = [getattr(gr, z).permute(0, 2, 1, 3).reshape(B, T, NE) for z in ('Q', 'K', 'Vh')]
put('QKV', torch.cat(heads, dim=-1))
''',
    r'''
put('a1', gr.QKV @ Wqkv.T)
put('Wqkv', a1.reshape(N, NE).T @ gr.QKV.reshape(N, 3 * NE))
put('bqkv', gr.QKV.sum((0, 1)))
''',
    r'''
put('nrm1', gr.a1 * g1)
put('g1', (gr.a1 * nrm1).sum((0, 1)))
put('b1', gr.a1.sum((0, 1)))
''',
    r'''
dn = gr.nrm1
put('s0', gr.s0 + rs1 / NE * (NE * dn - dn.sum(-1, keepdim=True)
                              - nrm1 * (dn * nrm1).sum(-1, keepdim=True)))
''',
    r'''
# %% embeddings
put('te', gr.s0.clone())
put('Pos', gr.s0.sum(0))
''',
    r'''
dE = torch.zeros_like(E)
dE.index_put_((xb.reshape(-1),), gr.te.reshape(N, NE), accumulate=True)
put('E', gr.E + dE)
''',
    r'''
# %% exercise 2, three of them
def layernorm_backward(dout, inp, weight, mean, rstd):
    C = inp.shape[-1]
    xhat = (inp - mean) * rstd
    dxhat = dout * weight
    dinp = rstd / C * (C * dxhat - dxhat.sum(-1, keepdim=True) - xhat * (dxhat * xhat).sum(-1, keepdim=True))
    return dinp, (dout * xhat).sum(dim=tuple(range(dout.dim() - 1))), dout.sum(dim=tuple(range(dout.dim() - 1)))
''',
    r'''
di, dg, db_ = layernorm_backward(gr.a2, s1.detach(), g2.detach(), mu2.detach(), rs2.detach())
print(torch.allclose(di + gr.s2, s1.grad, atol=1e-6), torch.allclose(dg, g2.grad, atol=1e-6))
''',
    r'''
def gelu_backward(dout, inp):
    k0 = math.sqrt(2 / math.pi)
    th = torch.tanh(k0 * (inp + 0.044715 * inp**3))
    return dout * (0.5 * (1 + th) + 0.5 * inp * (1 - th**2) * k0 * (1 + 0.134145 * inp**2))

same('gelu fn', gelu_backward(gr.gu, u.detach()), u)
''',
    r'''
def crossentropy_softmax_backward(logits, targets):
    n_rows = logits.shape[0]
    p = logits.softmax(dim=1)
    p[torch.arange(n_rows), targets] -= 1
    return p / n_rows

same('xent fn', crossentropy_softmax_backward(scores.detach().reshape(-1, NV), tgt.reshape(-1)).reshape(B, T, NV), scores)
''',
]

GPTC_FWD = {"tok": "te", "x0": "s0", "x1": "s1", "x2": "s2", "wte": "E", "wpe": "Pos",
            "ln1_norm": "nrm1", "ln1w": "g1", "ln1b": "b1", "ln1": "a1", "qkv": "QKV",
            "qkvw": "Wqkv", "qkvb": "bqkv", "q": "Q", "k": "K", "v": "Vh", "preatt": "S",
            "preatt_masked": "Sm", "att": "A", "atty": "AV", "y": "merged", "attproj": "o1",
            "attprojw": "Wo", "attprojb": "bo", "ln2_norm": "nrm2", "ln2w": "g2", "ln2b": "b2",
            "ln2": "a2", "fch": "u", "fcw": "Wfc", "fcb": "bfc", "fch_gelu": "gu", "fcproj": "o2",
            "fcprojw": "Wpr", "fcprojb": "bpr", "lnf_mean": "muf", "lnf_xc": "xcf",
            "lnf_var": "varf", "lnf_rstd": "rsf", "lnf_norm": "nrmf", "lnfw": "gf", "lnfb": "bf",
            "lnf": "af", "logits": "scores"}
GPTC_FUNCS = ["functions/layernorm_backward", "functions/gelu_backward",
              "functions/crossentropy_softmax_backward"]

add("gpt_h1_pystyle_renamed_plain_class", "gpt", GPTC_CELLS, GPT_STEPS + GPTC_FUNCS,
    notes=".py-style many small cells, own data (randperm(1)), Generator(77), n=5, forward and "
          "parameters renamed throughout, reshape/permute heads, grads as attributes of a plain "
          "class set by setattr in a put() helper that also checks; exercise 1 and three "
          "functions; all right; no training",
    where=where("gpt", GPT_STEPS, fwd=GPTC_FWD, grad=lambda k: f"gr.{GPTC_FWD.get(k, k)}",
                first_after={"wte": "gr.E = gr.scores.reshape(N, NV).T",
                             "lnf_xc": "gr.xcf = gr.nrmf * rsf",
                             "x2": "gr.s2 = gr.xcf.clone()",
                             "x1": "gr.s1 = gr.s2.clone()",
                             "x0": "gr.s0 = gr.s1.clone()"}),
    checkpoint="put('E', gr.E + dE)",
    functions={s: None for s in GPTC_FUNCS})

# ================================================================================================
# GPT D (a slip and its cascade). Exercises 2 and 3 plus the top of exercise 1. Own data,
# torch.manual_seed(2), the lesson-like init; the first eight steps of exercise 1 through two
# functions of the learner's own that return tuples (head_backward, lnf_atoms_backward, which
# return dlnf_xc and dx2 already completed, so only the head's share of dwte is held as a first
# branch); the seven functions with index_add_ / in-place accumulation, a relative-error print;
# training: a forward and a backward function of the learner's own over a dict of parameters,
# their own adamw_update, 150 steps, batch 12.
# Slip: gelu_backward takes tanh's slope as (1 - th)**2 instead of 1 - th**2; train/gpt, which
# runs on it, cascades.

GPTD_CELLS = [
    md("# GPT: functions, then training on them"),
    r'''
import math, random
import torch
import torch.nn.functional as F
torch.manual_seed(2)
''',
    r'''
words = open("names.txt").read().splitlines()
random.seed(3)
random.shuffle(words)
stoi = {ch: j + 1 for j, ch in enumerate("abcdefghijklmnopqrstuvwxyz")}
stoi["."] = 0
vocab_size, block_size, n_embd, n_head = 27, 16, 32, 4
head_size = n_embd // n_head
data = []
for w in words:
    r = [0] + [stoi[ch] for ch in w] + [0]
    r = (r + [0] * block_size)[:block_size + 1]
    data.append(r)
data = torch.tensor(data)
Xtr, Ytr = data[:28000, :block_size], data[:28000, block_size]
''',
    r'''
C = n_embd
P = {
    'wte': torch.randn(vocab_size, C) * 0.1, 'wpe': torch.randn(block_size, C) * 0.1,
    'ln1w': 1 + 0.1 * torch.randn(C), 'ln1b': 0.1 * torch.randn(C),
    'qkvw': torch.randn(C, 3 * C) / C**0.5, 'qkvb': 0.1 * torch.randn(3 * C),
    'attprojw': 0.5 * torch.randn(C, C) / C**0.5, 'attprojb': 0.1 * torch.randn(C),
    'ln2w': 1 + 0.1 * torch.randn(C), 'ln2b': 0.1 * torch.randn(C),
    'fcw': torch.randn(C, 4 * C) / C**0.5, 'fcb': 0.1 * torch.randn(4 * C),
    'fcprojw': 0.5 * torch.randn(4 * C, C) / (4 * C)**0.5, 'fcprojb': 0.1 * torch.randn(C),
    'lnfw': 1 + 0.1 * torch.randn(C), 'lnfb': 0.1 * torch.randn(C),
}
for p in P.values():
    p.requires_grad_(True)
globals().update(P)
n = 12
ix = torch.randint(0, len(Xtr), (n,))
Xb, Yb = Xtr[ix], Ytr[ix]
''',
    r'''
tok = wte[Xb]
x0 = tok + wpe
ln1_mean = x0.mean(-1, keepdim=True)
ln1_xc = x0 - ln1_mean
ln1_var = (ln1_xc**2).mean(-1, keepdim=True)
ln1_rstd = (ln1_var + 1e-5)**-0.5
ln1_norm = ln1_xc * ln1_rstd
ln1 = ln1_norm * ln1w + ln1b
qkv = ln1 @ qkvw + qkvb
q = qkv[:, :, :n_embd].view(n, block_size, n_head, head_size).transpose(1, 2)
k = qkv[:, :, n_embd:2*n_embd].view(n, block_size, n_head, head_size).transpose(1, 2)
v = qkv[:, :, 2*n_embd:].view(n, block_size, n_head, head_size).transpose(1, 2)
preatt = q @ k.transpose(-2, -1) * head_size**-0.5
causal = torch.ones(block_size, block_size, device=Xb.device).tril()
preatt_masked = preatt.masked_fill(causal == 0, float("-inf"))
att = F.softmax(preatt_masked, dim=-1)
atty = att @ v
y = atty.transpose(1, 2).contiguous().view(n, block_size, n_embd)
attproj = y @ attprojw + attprojb
x1 = x0 + attproj
ln2_mean = x1.mean(-1, keepdim=True)
ln2_xc = x1 - ln2_mean
ln2_var = (ln2_xc**2).mean(-1, keepdim=True)
ln2_rstd = (ln2_var + 1e-5)**-0.5
ln2_norm = ln2_xc * ln2_rstd
ln2 = ln2_norm * ln2w + ln2b
fch = ln2 @ fcw + fcb
fch_gelu = 0.5 * fch * (1 + torch.tanh(math.sqrt(2 / math.pi) * (fch + 0.044715 * fch**3)))
fcproj = fch_gelu @ fcprojw + fcprojb
x2 = x1 + fcproj
lnf_mean = x2.mean(-1, keepdim=True)
lnf_xc = x2 - lnf_mean
lnf_var = (lnf_xc**2).mean(-1, keepdim=True)
lnf_rstd = (lnf_var + 1e-5)**-0.5
lnf_norm = lnf_xc * lnf_rstd
lnf = lnf_norm * lnfw + lnfb
logits = lnf @ wte.T
targets = torch.cat([Xb[:, 1:], Yb[:, None]], dim=1)
loss = F.cross_entropy(logits.view(-1, vocab_size), targets.view(-1))
''',
    r'''
for t_ in [logits, lnf, lnf_norm, lnf_rstd, lnf_var, lnf_xc, lnf_mean, x2]:
    t_.retain_grad()
loss.backward()

def relerr(label, a, b_):
    e = ((a - b_).abs().max() / b_.abs().max().clamp(min=1e-12)).item()
    print(f"{label:12s} {e:.2e}")
''',
    md("## The top of exercise 1, as two functions"),
    r'''
def head_backward(logits, targets, lnf, wte):
    B, T, V = logits.shape
    dlogits = F.softmax(logits, -1)
    dlogits = dlogits - F.one_hot(targets, V).to(dlogits.dtype)
    dlogits = dlogits / (B * T)
    return dlogits, dlogits @ wte, torch.einsum('btv,btc->vc', dlogits, lnf)

def lnf_atoms_backward(dlnf, lnf_norm, lnf_xc, lnf_var, lnf_rstd, w):
    C = lnf_xc.shape[-1]
    dnorm = dlnf * w
    dw = (dlnf * lnf_norm).sum((0, 1))
    db = dlnf.sum((0, 1))
    drstd = (dnorm * lnf_xc).sum(-1, keepdim=True)
    dvar = drstd * -0.5 * (lnf_var + 1e-5)**-1.5
    dxc = dnorm * lnf_rstd + dvar * 2 * lnf_xc / C
    dmean = -dxc.sum(-1, keepdim=True)
    dx = dxc + dmean / C
    return dnorm, dw, db, drstd, dvar, dxc, dmean, dx
''',
    r'''
with torch.no_grad():
    dlogits, dlnf, dwte_head = head_backward(logits, targets, lnf, wte)
    (dlnf_norm, dlnfw, dlnfb, dlnf_rstd, dlnf_var, dlnf_xc, dlnf_mean,
     dx2) = lnf_atoms_backward(dlnf, lnf_norm, lnf_xc, lnf_var, lnf_rstd, lnfw)
for label, a, t_ in [('logits', dlogits, logits), ('lnf', dlnf, lnf), ('lnf_norm', dlnf_norm, lnf_norm),
                     ('lnfw', dlnfw, lnfw), ('lnfb', dlnfb, lnfb), ('lnf_rstd', dlnf_rstd, lnf_rstd),
                     ('lnf_var', dlnf_var, lnf_var), ('lnf_xc', dlnf_xc, lnf_xc),
                     ('lnf_mean', dlnf_mean, lnf_mean), ('x2', dx2, x2)]:
    relerr(label, a, t_.grad)
''',
    md("## Exercise 2"),
    r'''
def encoder_backward(dout, inp, vocab_size):
    C = dout.shape[-1]
    dwte = torch.zeros(vocab_size, C)
    dwte.index_add_(0, inp.flatten(), dout.reshape(-1, C))
    dwpe = torch.zeros(dout.shape[1], C)
    for b_ in range(dout.shape[0]):
        dwpe += dout[b_]
    return dwte, dwpe

def layernorm_backward(dout, inp, weight, mean, rstd):
    norm = (inp - mean) * rstd
    dnorm = dout * weight
    dinp = (dnorm - dnorm.mean(-1, keepdim=True) - norm * (dnorm * norm).mean(-1, keepdim=True)) * rstd
    return dinp, torch.einsum('btc,btc->c', dout, norm), torch.einsum('btc->c', dout)

def matmul_backward(dout, inp, weight):
    return (torch.einsum('bto,co->btc', dout, weight), torch.einsum('btc,bto->co', inp, dout),
            torch.einsum('bto->o', dout))
''',
    r'''
def attention_backward(dout, qkv, att, n_head):
    B, T, C3 = qkv.shape
    C = C3 // 3
    hs = C // n_head
    split = lambda z: z.reshape(B, T, n_head, hs).permute(0, 2, 1, 3)
    q, k, v = split(qkv[..., :C]), split(qkv[..., C:2 * C]), split(qkv[..., 2 * C:])
    da = split(dout)
    datt = torch.einsum('bhtd,bhsd->bhts', da, v)
    dv = torch.einsum('bhts,bhtd->bhsd', att, da)
    dpre = att * (datt - (att * datt).sum(-1, keepdim=True)) / math.sqrt(hs)
    dq = torch.einsum('bhts,bhsd->bhtd', dpre, k)
    dk = torch.einsum('bhts,bhtd->bhsd', dpre, q)
    merge = lambda z: z.permute(0, 2, 1, 3).reshape(B, T, C)
    return torch.cat([merge(dq), merge(dk), merge(dv)], -1)

def gelu_backward(dout, inp):
    s = math.sqrt(2 / math.pi)
    th = torch.tanh(s * (inp + 0.044715 * inp**3))
    return dout * (0.5 * (1 + th) + 0.5 * inp * (1 - th)**2 * s * (1 + 3 * 0.044715 * inp**2))

def crossentropy_softmax_backward(logits, targets):
    N = logits.shape[0]
    d = logits.softmax(-1)
    d[range(N), targets] -= 1.0
    d /= N
    return d

def adamw_update(param, grad, m, v, t, lr, beta1, beta2, eps, weight_decay):
    m *= beta1
    m += (1 - beta1) * grad
    v *= beta2
    v += (1 - beta2) * grad * grad
    update = (m / (1 - beta1**t)) / ((v / (1 - beta2**t)).sqrt() + eps)
    param -= lr * (update + weight_decay * param)
''',
    r'''
with torch.no_grad():
    dq_ = crossentropy_softmax_backward(logits.reshape(-1, vocab_size), targets.reshape(-1))
relerr('xent fn', dq_.reshape(logits.shape), logits.grad)
xx = torch.randn(3, 4, 6, requires_grad=True)
ww = torch.randn(6, 5, requires_grad=True)
oo = xx @ ww
go_ = torch.randn_like(oo)
gx, gw = torch.autograd.grad(oo, [xx, ww], go_)
mm = matmul_backward(go_, xx.detach(), ww.detach())
relerr('matmul dx', mm[0], gx)
relerr('matmul dw', mm[1], gw)
''',
    md("## Exercise 3: training"),
    r'''
def gpt_forward(P, X, Y):
    B, T = X.shape
    c = {}
    x = P['wte'][X] + P['wpe'][:T]
    def ln(x, w, b, key):
        mean = x.mean(-1, keepdim=True)
        rstd = ((x - mean)**2).mean(-1, keepdim=True).add(1e-5)**-0.5
        c[key] = (x, mean, rstd)
        return (x - mean) * rstd * P[w] + P[b]
    c['x0'] = x
    h = ln(x, 'ln1w', 'ln1b', 'ln1')
    c['ln1_out'] = h
    qkv = h @ P['qkvw'] + P['qkvb']
    q, k, v = (qkv[..., j * C:(j + 1) * C].reshape(B, T, n_head, head_size).transpose(1, 2) for j in range(3))
    pre = q @ k.transpose(-2, -1) * head_size**-0.5
    att = pre.masked_fill(torch.ones(T, T).tril() == 0, float('-inf')).softmax(-1)
    yy = (att @ v).transpose(1, 2).reshape(B, T, C)
    c.update(qkv=qkv, att=att, y=yy)
    x = x + yy @ P['attprojw'] + P['attprojb']
    h = ln(x, 'ln2w', 'ln2b', 'ln2')
    c['ln2_out'] = h
    f = h @ P['fcw'] + P['fcb']
    fg = 0.5 * f * (1 + torch.tanh(math.sqrt(2 / math.pi) * (f + 0.044715 * f**3)))
    c.update(fch=f, fch_gelu=fg)
    x = x + fg @ P['fcprojw'] + P['fcprojb']
    h = ln(x, 'lnfw', 'lnfb', 'lnf')
    c['lnf_out'] = h
    lg = h @ P['wte'].T
    tg = torch.cat([X[:, 1:], Y[:, None]], dim=1)
    c.update(logits=lg, targets=tg)
    return F.cross_entropy(lg.reshape(-1, vocab_size), tg.reshape(-1)), c

def gpt_backward(P, X, c):
    B, T = X.shape
    g = {}
    dlg = crossentropy_softmax_backward(c['logits'].reshape(-1, vocab_size),
                                        c['targets'].reshape(-1)).reshape(B, T, vocab_size)
    dh = dlg @ P['wte']
    dwte_head = torch.einsum('btv,btc->vc', dlg, c['lnf_out'])
    dx, g['lnfw'], g['lnfb'] = layernorm_backward(dh, c['lnf'][0], P['lnfw'], *c['lnf'][1:])
    dfg, g['fcprojw'], g['fcprojb'] = matmul_backward(dx, c['fch_gelu'], P['fcprojw'])
    df = gelu_backward(dfg, c['fch'])
    dh, g['fcw'], g['fcb'] = matmul_backward(df, c['ln2_out'], P['fcw'])
    dln, g['ln2w'], g['ln2b'] = layernorm_backward(dh, c['ln2'][0], P['ln2w'], *c['ln2'][1:])
    dx += dln
    dyy, g['attprojw'], g['attprojb'] = matmul_backward(dx, c['y'], P['attprojw'])
    dqkv = attention_backward(dyy, c['qkv'], c['att'], n_head)
    dh, g['qkvw'], g['qkvb'] = matmul_backward(dqkv, c['ln1_out'], P['qkvw'])
    dln, g['ln1w'], g['ln1b'] = layernorm_backward(dh, c['ln1'][0], P['ln1w'], *c['ln1'][1:])
    dx += dln
    g['wte'], g['wpe'] = encoder_backward(dx, X, vocab_size)
    g['wte'] += dwte_head
    return g
''',
    r'''
W = {k_: p.detach().clone() for k_, p in P.items()}
m1 = {k_: torch.zeros_like(p) for k_, p in W.items()}
m2 = {k_: torch.zeros_like(p) for k_, p in W.items()}
losses = []
for step in range(1, 151):
    ix = torch.randint(0, len(Xtr), (12,))
    Xb, Yb = Xtr[ix], Ytr[ix]
    lossv, cache = gpt_forward(W, Xb, Yb)
    grads = gpt_backward(W, Xb, cache)
    for name in W:
        adamw_update(W[name], grads[name], m1[name], m2[name], step, 1e-2, 0.9, 0.99, 1e-8, 0.0)
    losses.append(lossv.item())
print(sum(losses[:15]) / 15, sum(losses[-15:]) / 15)
''',
]

GPTD_TOP = ["block/logits", "block/lnf", "block/lnf_affine", "block/lnf_rstd", "block/lnf_var",
            "block/lnf_xc", "block/lnf_mean", "block/x2"]
_gd = where("gpt", GPTD_TOP, grad={"wte": "dwte_head"}, first_after=DROP)
_gd["block/lnf"] = [("dlnf", "G(lnf)"),
                    ("dwte_head", GPT_FIRST["wte"].format(lnf="lnf", wte="wte", logits="logits"),
                     "dlogits, dlnf, dwte_head = head_backward")]

add("gpt_h2_tuple_functions_gelu_slip", "gpt", GPTD_CELLS, GPTD_TOP + GPT_FUNCS + ["train/gpt"],
    wrong=["functions/gelu_backward"], cascade=["train/gpt"],
    notes="own data, manual_seed(2), globals().update(P), n=12; exercise 1's first eight steps "
          "through two tuple-returning functions (dlnf_xc and dx2 come back completed: only the "
          "head's share of dwte is held as a first branch), the seven functions (index_add_, a "
          "loop for dwpe, einsum, in-place AdamW), relerr() prints, own forward/backward pair "
          "and adamw_update, 150 steps, batch 12. Slip: gelu_backward with (1 - th)**2 for "
          "1 - th**2; the training loop cascades",
    where={**no_first(_gd), "block/lnf": _gd["block/lnf"]},
    checkpoint="relerr(label, a, t_.grad)",
    functions={s: None for s in GPT_FUNCS},
    train={"cell": "for step in range(1, 151)", "probe": "for name in W:",
           "params": "W", "grads": "grads", "ref": "lambda Q: gpt_forward(Q, Xb, Yb)[0]",
           "losses": "losses"},
    fix=[("0.5 * inp * (1 - th)**2 * s", "0.5 * inp * (1 - th**2) * s")])

# ================================================================================================
# LSTM C (two slips and their cascades). Own data (the lesson's build copied into one function,
# its own random.seed(11) split), the setup's run_lstm, torch.manual_seed(4) init, batch 20; the
# lesson's forward and names; every gradient an attribute of a `types.SimpleNamespace` `g`; the
# products as torch.einsum; a `chk(label, mine, t)` helper printing allclose and the max error;
# a markdown cell per step. Exercise 1, lstm_backward, training on lstm_backward with SGD, 200
# steps. Exercise 3 not attempted.
# Slips: at h = o * tanh(c) the cell's gradient is assigned, `g.c = ...`, where it must be added
# to the future's share already in g.c, so step/h is wrong and step/c, gates, g, ifgo, inputs
# cascade; lstm_backward's loop stops one step early, `range(T - 1, 0, -1)`, so step 0 is never
# back-propagated (wrong), and the training loop on it cascades.

LSTMC_CELLS = [
    md("# LSTM: one step by hand, then through time"),
    r'''
import random
from types import SimpleNamespace
import torch
import torch.nn.functional as F
from collections import namedtuple
''',
    r'''
def load(path):
    words = open(path).read().splitlines()
    random.seed(11)
    random.shuffle(words)
    chars = sorted(set(''.join(words)))
    stoi = {s: j + 1 for j, s in enumerate(chars)}
    stoi['.'] = 0
    width = max(len(w) for w in words) + 1
    X, Y = [], []
    for w in words:
        ix = [stoi[ch] for ch in w]
        x, y = [0] + ix, ix + [0]
        X.append(x + [0] * (width - len(x)))
        Y.append(y + [-1] * (width - len(y)))
    n1 = int(0.8 * len(words))
    return torch.tensor(X[:n1]), torch.tensor(Y[:n1]), len(stoi)

Xtr, Ytr, vocab_size = load('names.txt')

def sample(bs):
    ix = torch.randint(0, Xtr.shape[0], (bs,))
    xb, yb = Xtr[ix], Ytr[ix]
    L = int((yb >= 0).sum(1).max())
    return xb[:, :L].contiguous(), yb[:, :L].contiguous()
''',
    r'''
LSTMRun = namedtuple("LSTMRun", ["hs", "h", "c"])

def run_lstm(xs, h, c, Wx, Wh, b):
    hs, h, c = torch.lstm(xs, (h[None], c[None]), (Wx.T, Wh.T, b, b * 0), True, 1, 0.0, False,
                          False, True)
    return LSTMRun(hs, h[0], c[0])

torch.manual_seed(4)
n_embd, n_hidden, t = 10, 32, 3
C = torch.randn(vocab_size, n_embd)
Wx = torch.randn(n_embd, 4 * n_hidden) / n_embd**0.5
Wh = torch.randn(n_hidden, 4 * n_hidden) / n_hidden**0.5
b = 0.1 * torch.randn(4 * n_hidden)
b[n_hidden:2 * n_hidden] += 1
Wy = torch.randn(n_hidden, vocab_size) / n_hidden**0.5
by = 0.1 * torch.randn(vocab_size)
P = dict(C=C, Wx=Wx, Wh=Wh, b=b, Wy=Wy, by=by)
for p in P.values():
    p.requires_grad_()
Xb, Yb = sample(20)
n = Xb.shape[0]
''',
    r'''
emb = C[Xb]
mask = (Yb >= 0).float()
h0 = emb.new_zeros(n, n_hidden)
c0 = emb.new_zeros(n, n_hidden)
before = run_lstm(emb[:, :t], h0, c0, Wx, Wh, b)
hs_before = before.hs
h_prev = before.h
c_prev = before.c
x_t = emb[:, t]
Wx_t = Wx.clone()
Wh_t = Wh.clone()
b_t = b.clone()
ifgo = x_t @ Wx_t + h_prev @ Wh_t + b_t
ai = ifgo[:, :n_hidden]
af = ifgo[:, n_hidden:2*n_hidden]
ag = ifgo[:, 2*n_hidden:3*n_hidden]
ao = ifgo[:, 3*n_hidden:]
i = torch.sigmoid(ai)
f = torch.sigmoid(af)
g = torch.tanh(ag)
o = torch.sigmoid(ao)
c = f * c_prev + i * g
h = o * torch.tanh(c)
state = torch.stack([h, c])
after = run_lstm(emb[:, t+1:], state[0], state[1], Wx, Wh, b)
hs_after = after.hs
hs = torch.cat([hs_before, h[:, None], hs_after], 1)
logits = hs @ Wy + by
loss = F.cross_entropy(logits.view(-1, vocab_size), Yb.view(-1), ignore_index=-1)
''',
    r'''
kept = [emb, hs_before, h_prev, c_prev, x_t, Wx_t, Wh_t, b_t, ifgo, ai, af, ag, ao, i, f, g, o,
        c, h, state, hs_after, hs, logits]
for z in kept:
    z.retain_grad()
loss.backward()

def chk(label, mine, t_):
    print(f"{label:9s} {str(torch.allclose(mine, t_.grad, atol=1e-6)):5s} "
          f"{(mine - t_.grad).abs().max().item():.2e}")

gate_g = g           # I need the name g for the namespace
g = SimpleNamespace()
''',
    md("### cross-entropy with the padding masked"),
    r'''
probs = logits.softmax(-1)
onehot = F.one_hot(Yb.clamp(min=0), vocab_size).float()
g.logits = (probs - onehot) * mask.unsqueeze(-1) / mask.sum()
chk('logits', g.logits, logits)
''',
    md("### head"),
    r'''
g.hs = torch.einsum('ntv,hv->nth', g.logits, Wy)
g.Wy = torch.einsum('nth,ntv->hv', hs, g.logits)
g.by = torch.einsum('ntv->v', g.logits)
chk('hs', g.hs, hs)
chk('Wy', g.Wy, Wy)
chk('by', g.by, by)
''',
    md("### the concatenation"),
    r'''
g.hs_before = g.hs[:, :t]
g.hs_after = g.hs[:, t+1:]
g.h = g.hs[:, t].clone()
chk('hs_before', g.hs_before, hs_before)
chk('hs_after', g.hs_after, hs_after)
''',
    md("### what the later steps send back"),
    r'''
g.h = g.h + state.grad[0]
g.c = state.grad[1].clone()
chk('h', g.h, h)
''',
    md("### h = o * tanh(c)"),
    r'''
tanh_c = torch.tanh(c)
g.o = g.h * tanh_c
g.c = g.h * o * (1 - tanh_c**2)
chk('o', g.o, o)
chk('c', g.c, c)
''',
    md("### c = f * c_prev + i * g"),
    r'''
g.f = g.c * c_prev
g.c_prev = g.c * f
g.i = g.c * gate_g
g.g = g.c * i
chk('f', g.f, f)
chk('c_prev', g.c_prev, c_prev)
chk('i', g.i, i)
chk('g', g.g, gate_g)
''',
    md("### the gates"),
    r'''
g.ai = g.i * i * (1 - i)
g.af = g.f * f * (1 - f)
g.ao = g.o * o * (1 - o)
chk('ai', g.ai, ai)
chk('af', g.af, af)
chk('ao', g.ao, ao)
g.ag = g.g * (1 - gate_g**2)
chk('ag', g.ag, ag)
''',
    md("### back into ifgo and its inputs"),
    r'''
g.ifgo = torch.cat([g.ai, g.af, g.ag, g.ao], dim=1)
chk('ifgo', g.ifgo, ifgo)
g.x_t = torch.einsum('nk,dk->nd', g.ifgo, Wx_t)
g.h_prev = torch.einsum('nk,hk->nh', g.ifgo, Wh_t)
g.Wx_t = torch.einsum('nd,nk->dk', x_t, g.ifgo)
g.Wh_t = torch.einsum('nh,nk->hk', h_prev, g.ifgo)
g.b_t = torch.einsum('nk->k', g.ifgo)
for label, mine, t_ in [('x_t', g.x_t, x_t), ('h_prev', g.h_prev, h_prev), ('Wx_t', g.Wx_t, Wx_t),
                        ('Wh_t', g.Wh_t, Wh_t), ('b_t', g.b_t, b_t)]:
    chk(label, mine, t_)
''',
    md("## Exercise 2"),
    r'''
def lstm_backward(dhs, xs, h0, c0, hs, cs, gates, Wx, Wh):
    N, T, H = hs.shape
    dxs = torch.zeros_like(xs)
    dWx = torch.zeros_like(Wx)
    dWh = torch.zeros_like(Wh)
    db = torch.zeros(4 * H)
    dh_next = torch.zeros(N, H)
    dc_next = torch.zeros(N, H)
    for s in range(T - 1, 0, -1):
        gi, gf, gg, go = gates[:, s].split(H, dim=1)
        hp = hs[:, s - 1] if s > 0 else h0
        cp = cs[:, s - 1] if s > 0 else c0
        tc = torch.tanh(cs[:, s])
        dh = dhs[:, s] + dh_next
        dc = dc_next + dh * go * (1 - tc**2)
        dz = torch.cat([dc * gg * gi * (1 - gi), dc * cp * gf * (1 - gf),
                        dc * gi * (1 - gg**2), dh * tc * go * (1 - go)], 1)
        dxs[:, s] = torch.einsum('nk,dk->nd', dz, Wx)
        dWx += torch.einsum('nd,nk->dk', xs[:, s], dz)
        dWh += torch.einsum('nh,nk->hk', hp, dz)
        db += dz.sum(0)
        dh_next = torch.einsum('nk,hk->nh', dz, Wh)
        dc_next = dc * gf
    return dxs, dh_next, dc_next, dWx, dWh, db
''',
    r'''
def lstm_forward(xs, h0, c0, Wx, Wh, b):
    N, T, _ = xs.shape
    H = Wh.shape[0]
    hs = torch.zeros(N, T, H)
    cs = torch.zeros(N, T, H)
    gates = torch.zeros(N, T, 4 * H)
    hh, cc = h0, c0
    for s in range(T):
        z = xs[:, s] @ Wx + hh @ Wh + b
        gi, gf, gg, go = torch.sigmoid(z[:, :H]), torch.sigmoid(z[:, H:2*H]), torch.tanh(z[:, 2*H:3*H]), torch.sigmoid(z[:, 3*H:])
        cc = gf * cc + gi * gg
        hh = go * torch.tanh(cc)
        hs[:, s], cs[:, s] = hh, cc
        gates[:, s] = torch.cat([gi, gf, gg, go], 1)
    return hs, cs, gates
''',
    md("## Exercise 4: SGD"),
    r'''
lossi = []
with torch.no_grad():
    for it in range(200):
        xb, yb = sample(20)
        N, T = xb.shape
        xe = P['C'][xb]
        zero = torch.zeros(N, n_hidden)
        hs_, cs_, gates_ = lstm_forward(xe, zero, zero, P['Wx'], P['Wh'], P['b'])
        out = hs_ @ P['Wy'] + P['by']
        lv = F.cross_entropy(out.reshape(-1, vocab_size), yb.reshape(-1), ignore_index=-1)
        m_ = (yb >= 0).float()
        dout = (out.softmax(-1) - F.one_hot(yb.clamp(min=0), vocab_size)) * (m_ / m_.sum())[..., None]
        G = {'Wy': torch.einsum('nth,ntv->hv', hs_, dout), 'by': dout.sum((0, 1))}
        dxe, _, _, G['Wx'], G['Wh'], G['b'] = lstm_backward(dout @ P['Wy'].T, xe, zero, zero, hs_, cs_, gates_, P['Wx'], P['Wh'])
        G['C'] = torch.zeros_like(P['C']).index_add_(0, xb.reshape(-1), dxe.reshape(-1, n_embd))
        for k in P:
            P[k] -= 0.5 * G[k].clamp(-2, 2)
        lossi.append(lv.item())
print(lossi[0], sum(lossi[-20:]) / 20)
''',
]

LSTMC_FWD = {"g": "gate_g"}

add("lstm_h1_namespace_einsum_assign_offbyone", "lstm", LSTMC_CELLS,
    LSTM_STEPS + ["bptt/lstm_backward", "train/lstm"],
    wrong=["step/h", "bptt/lstm_backward"],
    cascade=["step/c", "step/gates", "step/g", "step/ifgo", "step/inputs", "train/lstm"],
    notes="own data (random.seed(11)), manual_seed(4), batch 20, lesson forward, grads in a "
          "SimpleNamespace (the gate g renamed gate_g), einsum, chk() helper, md per step; "
          "exercises 1, 2, 4. Slips: `g.c = ...` for `+=` at h = o * tanh(c) (step/h wrong; "
          "c, gates, g, ifgo, inputs cascade); lstm_backward's loop stops before step 0 "
          "(wrong; the training loop cascades)",
    where=where("lstm", LSTM_STEPS, fwd=LSTMC_FWD, grad=lambda k: f"g.{k}",
                first_after={"h": "g.h = g.hs[:, t].clone()",
                             "c": "g.c = state.grad[1].clone()"}),
    checkpoint="('Wh_t', g.Wh_t, Wh_t), ('b_t', g.b_t, b_t)]",
    functions={"bptt/lstm_backward": None},
    train={"cell": "for it in range(200)", "probe": "for k in P:", "params": "P",
           "grads": "G", "ref": "lambda Q: ref_lstm_loss(Q, xb, yb)", "losses": "lossi"},
    fix=[("g.c = g.h * o * (1 - tanh_c**2)", "g.c = g.c + g.h * o * (1 - tanh_c**2)"),
         ("for s in range(T - 1, 0, -1):", "for s in range(T - 1, -1, -1):")])

# ================================================================================================
# LSTM D (right throughout). The lesson's setup copied (make_data, init_params, sample_batch,
# run_lstm) with Generator(2718) and batch 16; exercise 1 done only down to c (several steps in
# one cell, gradients in a dict `dd`), then exercise 3's fused gates straight from di, df, dg, do;
# an `assert torch.allclose(..., atol=1e-6), label` helper; markdown between steps.
# lstm_step_backward with torch.chunk and addmm; lstm_backward with in-place addmm_ accumulation;
# training through a list of per-time-step Cell objects (forward keeps a cache, backward calls
# lstm_step_backward), SGD with momentum, 200 steps.

LSTMD_CELLS = [
    md("# LSTM, the fused way"),
    r'''
import torch
import torch.nn.functional as F
from collections import namedtuple

LSTMRun = namedtuple("LSTMRun", ["hs", "h", "c"])

def run_lstm(xs, h, c, Wx, Wh, b):
    hs, h, c = torch.lstm(xs, (h[None], c[None]), (Wx.T, Wh.T, b, b * 0), True, 1, 0.0, False,
                          False, True)
    return LSTMRun(hs, h[0], c[0])

def build_vocab(words):
    chars = sorted(set("".join(words)))
    stoi = {s: i + 1 for i, s in enumerate(chars)}
    stoi["."] = 0
    itos = {i: s for s, i in stoi.items()}
    return stoi, itos

def build_dataset(words, stoi, width):
    X, Y = [], []
    for w in words:
        ix = [stoi[ch] for ch in w]
        x, y = [0] + ix, ix + [0]
        X.append(x + [0] * (width - len(x)))
        Y.append(y + [-1] * (width - len(y)))
    return torch.tensor(X), torch.tensor(Y)

def make_data(text, sizes, seed=42):
    import random
    words = text.splitlines()
    random.seed(seed)
    random.shuffle(words)
    stoi, itos = build_vocab(words)
    n1, n2 = int(0.8 * len(words)), int(0.9 * len(words))
    width = max(len(w) for w in words) + 1
    return {"vocab_size": len(itos), "stoi": stoi, "itos": itos,
            "train": build_dataset(words[:n1], stoi, width),
            "val": build_dataset(words[n1:n2], stoi, width)}

def init_params(g, sizes):
    V, D, H = sizes["vocab_size"], sizes["n_embd"], sizes["n_hidden"]
    b = torch.randn(4 * H, generator=g) * 0.1
    b[H:2 * H] += 1.0
    return {"C": torch.randn((V, D), generator=g),
            "Wx": torch.randn((D, 4 * H), generator=g) * D ** -0.5,
            "Wh": torch.randn((H, 4 * H), generator=g) * H ** -0.5,
            "b": b,
            "Wy": torch.randn((H, V), generator=g) * H ** -0.5,
            "by": torch.randn(V, generator=g) * 0.1}

def sample_batch(X, Y, batch_size, g):
    ix = torch.randint(0, X.shape[0], (batch_size,), generator=g)
    Xb, Yb = X[ix], Y[ix]
    T = int((Yb >= 0).sum(1).max())
    return Xb[:, :T].contiguous(), Yb[:, :T].contiguous()
''',
    r'''
text = open('names.txt').read()
sizes = {"n_embd": 10, "n_hidden": 32, "t": 3}
data = make_data(text, sizes)
sizes["vocab_size"] = data["vocab_size"]
vocab_size, n_embd, n_hidden, t = sizes["vocab_size"], 10, 32, 3
g0 = torch.Generator().manual_seed(2718)
params = init_params(g0, sizes)
for p in params.values():
    p.requires_grad = True
C, Wx, Wh, b, Wy, by = (params[k] for k in ["C", "Wx", "Wh", "b", "Wy", "by"])
Xb, Yb = sample_batch(*data["train"], 16, g0)
n = Xb.shape[0]
''',
    r'''
emb = C[Xb]
mask = (Yb >= 0).float()
h0 = emb.new_zeros(n, n_hidden)
c0 = emb.new_zeros(n, n_hidden)
before = run_lstm(emb[:, :t], h0, c0, Wx, Wh, b)
hs_before = before.hs
h_prev = before.h
c_prev = before.c
x_t = emb[:, t]
Wx_t = Wx.clone()
Wh_t = Wh.clone()
b_t = b.clone()
ifgo = x_t @ Wx_t + h_prev @ Wh_t + b_t
ai = ifgo[:, :n_hidden]
af = ifgo[:, n_hidden:2*n_hidden]
ag = ifgo[:, 2*n_hidden:3*n_hidden]
ao = ifgo[:, 3*n_hidden:]
i = torch.sigmoid(ai)
f = torch.sigmoid(af)
g = torch.tanh(ag)
o = torch.sigmoid(ao)
c = f * c_prev + i * g
h = o * torch.tanh(c)
state = torch.stack([h, c])
after = run_lstm(emb[:, t+1:], state[0], state[1], Wx, Wh, b)
hs_after = after.hs
hs = torch.cat([hs_before, h[:, None], hs_after], 1)
logits = hs @ Wy + by
loss = F.cross_entropy(logits.view(-1, vocab_size), Yb.view(-1), ignore_index=-1)
for z in [hs_before, h_prev, c_prev, x_t, ifgo, i, f, g, o, c, h, state, hs_after, hs, logits]:
    z.retain_grad()
loss.backward()
''',
    r'''
def expect(label, mine, t_):
    assert torch.allclose(mine, t_.grad, atol=1e-6), label
    print(label, 'ok')

dd = {}
''',
    md("## Exercise 1, down to the cell"),
    r'''
dd['logits'] = F.softmax(logits, -1)
dd['logits'] = dd['logits'] - F.one_hot(Yb.clamp(min=0), vocab_size)
dd['logits'] = dd['logits'] * (mask / mask.sum())[..., None]
dd['hs'] = dd['logits'] @ Wy.T
dd['Wy'] = torch.einsum('bth,btv->hv', hs, dd['logits'])
dd['by'] = dd['logits'].sum((0, 1))
for k_, t_ in [('logits', logits), ('hs', hs), ('Wy', Wy), ('by', by)]:
    expect(k_, dd[k_], t_)
''',
    r'''
dd['hs_before'], dd['h'], dd['hs_after'] = dd['hs'][:, :t], dd['hs'][:, t].clone(), dd['hs'][:, t + 1:]
expect('hs_before', dd['hs_before'], hs_before)
expect('hs_after', dd['hs_after'], hs_after)
dd['h'] += state.grad[0]
dd['c'] = state.grad[1].clone()
expect('h', dd['h'], h)
''',
    r'''
th = torch.tanh(c)
dd['o'] = dd['h'] * th
dd['c'] += dd['h'] * o * (1 - th * th)
dd['f'], dd['c_prev'], dd['i'], dd['g'] = dd['c'] * c_prev, dd['c'] * f, dd['c'] * g, dd['c'] * i
for k_, t_ in [('o', o), ('c', c), ('f', f), ('c_prev', c_prev), ('i', i), ('g', g)]:
    expect(k_, dd[k_], t_)
''',
    md("## Exercise 3: fused"),
    r'''
acts = torch.cat([i, f, g, o], dim=1)
slopes = acts * (1 - acts)
slopes[:, 2 * n_hidden:3 * n_hidden] = 1 - g**2
difgo = torch.cat([dd['i'], dd['f'], dd['g'], dd['o']], dim=1) * slopes
expect('ifgo (fused)', difgo, ifgo)
''',
    r'''
def lstm_step_backward(dh, dc, x, h_prev, c_prev, c, gates, Wx, Wh):
    i, f, g, o = torch.chunk(gates, 4, dim=1)
    tc = torch.tanh(c)
    dc_tot = dc + dh * o * (1 - tc * tc)
    local = torch.cat([i * (1 - i), f * (1 - f), 1 - g * g, o * (1 - o)], dim=1)
    dz = torch.cat([dc_tot * g, dc_tot * c_prev, dc_tot * i, dh * tc], dim=1) * local
    dWx = torch.zeros_like(Wx).addmm_(x.T, dz)
    dWh = torch.zeros_like(Wh).addmm_(h_prev.T, dz)
    return dz @ Wx.T, dz @ Wh.T, dc_tot * f, dWx, dWh, dz.sum(0)
''',
    r'''
gates_t = torch.cat([i, f, g, o], 1).detach()
with torch.no_grad():
    dx_, dhp_, dcp_, dWx_, dWh_, db_ = lstm_step_backward(dd['h'], state.grad[1], x_t, h_prev, c_prev,
                                                         c, gates_t, Wx, Wh)
expect('x_t', dx_, x_t)
expect('h_prev', dhp_, h_prev)
expect('c_prev', dcp_, c_prev)
''',
    md("## Exercise 2, with the step function"),
    r'''
def lstm_backward(dhs, xs, h0, c0, hs, cs, gates, Wx, Wh):
    B, T, H = hs.shape
    dxs = torch.zeros_like(xs)
    dWx = torch.zeros_like(Wx)
    dWh = torch.zeros_like(Wh)
    db = torch.zeros(4 * H)
    dh = torch.zeros(B, H)
    dc = torch.zeros(B, H)
    for s in range(T - 1, -1, -1):
        hp = h0 if s == 0 else hs[:, s - 1]
        cp = c0 if s == 0 else cs[:, s - 1]
        dxs[:, s], dh, dc, gWx, gWh, gb = lstm_step_backward(dhs[:, s] + dh, dc, xs[:, s], hp, cp,
                                                             cs[:, s], gates[:, s], Wx, Wh)
        dWx.add_(gWx)
        dWh.add_(gWh)
        db.add_(gb)
    return dxs, dh, dc, dWx, dWh, db
''',
    md("## Exercise 4: a Cell object per time step"),
    r'''
class Cell:
    def forward(self, x, h, c, Wx, Wh, b):
        H = Wh.shape[0]
        z = x @ Wx + h @ Wh + b
        gates = torch.cat([torch.sigmoid(z[:, :2 * H]), torch.tanh(z[:, 2 * H:3 * H]),
                           torch.sigmoid(z[:, 3 * H:])], dim=1)
        i, f, g, o = gates.chunk(4, dim=1)
        c_new = f * c + i * g
        h_new = o * torch.tanh(c_new)
        self.cache = (x, h, c, c_new, gates)
        return h_new, c_new

    def backward(self, dh, dc, Wx, Wh):
        x, h, c, c_new, gates = self.cache
        return lstm_step_backward(dh, dc, x, h, c, c_new, gates, Wx, Wh)
''',
    r'''
P = {k: v.detach().clone() for k, v in params.items()}
vel = {k: torch.zeros_like(v) for k, v in P.items()}
gtrain = torch.Generator().manual_seed(99)
lossi = []
for it in range(200):
    xb, yb = sample_batch(*data["train"], 16, gtrain)
    B, T = xb.shape
    xe = P['C'][xb]
    cells = [Cell() for _ in range(T)]
    hh = torch.zeros(B, n_hidden)
    cc = torch.zeros(B, n_hidden)
    outs = []
    for s in range(T):
        hh, cc = cells[s].forward(xe[:, s], hh, cc, P['Wx'], P['Wh'], P['b'])
        outs.append(hh)
    H_all = torch.stack(outs, 1)
    lg = H_all @ P['Wy'] + P['by']
    lv = F.cross_entropy(lg.reshape(-1, vocab_size), yb.reshape(-1), ignore_index=-1)
    mk = (yb >= 0).float()
    dlg = (F.softmax(lg, -1) - F.one_hot(yb.clamp(min=0), vocab_size)) * (mk / mk.sum())[..., None]
    grads = {'Wy': torch.einsum('bth,btv->hv', H_all, dlg), 'by': dlg.sum((0, 1)),
             'Wx': torch.zeros_like(P['Wx']), 'Wh': torch.zeros_like(P['Wh']),
             'b': torch.zeros_like(P['b'])}
    dH = dlg @ P['Wy'].T
    dxe = torch.zeros_like(xe)
    dh = torch.zeros(B, n_hidden)
    dc = torch.zeros(B, n_hidden)
    for s in reversed(range(T)):
        dxe[:, s], dh, dc, gWx, gWh, gb = cells[s].backward(dH[:, s] + dh, dc, P['Wx'], P['Wh'])
        grads['Wx'] += gWx
        grads['Wh'] += gWh
        grads['b'] += gb
    grads['C'] = torch.zeros_like(P['C']).index_add_(0, xb.reshape(-1), dxe.reshape(-1, n_embd))
    for k in P:  # momentum SGD
        vel[k].mul_(0.9).add_(grads[k])
        P[k] -= 0.1 * vel[k]
    lossi.append(lv.item())
print(sum(lossi[:20]) / 20, sum(lossi[-20:]) / 20)
''',
]

add("lstm_h2_fused_cells_momentum", "lstm", LSTMD_CELLS,
    ["step/logits", "step/hs", "step/h_out", "step/state", "step/h", "step/c", "fused/gates",
     "fused/lstm_step_backward", "bptt/lstm_backward", "train/lstm"],
    notes="setup copied (make_data, init_params, sample_batch), Generator(2718), batch 16; "
          "exercise 1 only down to c, several steps a cell, grads dict dd; fused gates from "
          "di, df, dg, do; assert-allclose helper; lstm_step_backward with chunk/addmm_, "
          "lstm_backward with add_; training through per-time-step Cell objects, momentum SGD, "
          "200 steps; all right",
    where={**where("lstm", ["step/logits", "step/hs", "step/h_out", "step/state", "step/h",
                            "step/c"], grad=lambda k: f"dd['{k}']",
                   first_after={"h": "dd['hs_before'], dd['h'], dd['hs_after'] =",
                                "c": "dd['c'] = state.grad[1].clone()"}),
           "fused/gates": [("difgo", "G(ifgo)")]},
    checkpoint="expect('ifgo (fused)', difgo, ifgo)",
    functions={"bptt/lstm_backward": None, "fused/lstm_step_backward": None},
    train={"cell": "for it in range(200)", "probe": "for k in P:  # momentum SGD",
           "params": "P", "grads": "grads", "ref": "lambda Q: ref_lstm_loss(Q, xb, yb)",
           "losses": "lossi"})

# ================================================================================================
# CONV C (right throughout). A generic reverse-mode tape of the learner's own: each forward op
# (lookup, transpose, causal_conv, tanh, take_last, linear, xent) computes its value with torch,
# stores it under a name in `vals`, and pushes a closure onto `tape` that, run later, adds its
# inputs' gradients into `grads[name]`; backward() seeds the loss and runs the tape reversed. The
# convolution's backward through an im2col of shifted slices: weights by einsum over the stacked
# taps, the input by adding each tap's share back at its shift (F.pad). The lesson's setup(31)
# and batch copied; a markdown cell between the parts; the same tape under torch.no_grad()
# trains with plain SGD, 300 steps, batch 32.

CONVC_CELLS = [
    md("# A tiny tape for the WaveNet\n\nI record every op; backward replays the closures in "
       "reverse."),
    r'''
import torch
import torch.nn.functional as F

block_size, vocab_size, n_embd, n_hidden, kernel_size = 8, 27, 10, 64, 2
CACHE = {}

def examples(text, split):
    if split not in CACHE:
        words = text.splitlines()
        order = torch.randperm(len(words), generator=torch.Generator().manual_seed(42))
        n1, n2 = int(0.8 * len(words)), int(0.9 * len(words))
        picked = {"train": order[:n1], "val": order[n1:n2], "test": order[n2:]}[split]
        stoi = {c: i + 1 for i, c in enumerate("abcdefghijklmnopqrstuvwxyz")}
        X, Y = [], []
        for i in picked.tolist():
            context = [0] * block_size
            for ch in words[i] + ".":
                ix = stoi.get(ch, 0)
                X.append(context)
                Y.append(ix)
                context = context[1:] + [ix]
        CACHE[split] = (torch.tensor(X), torch.tensor(Y))
    return CACHE[split]

def setup(seed):
    g = torch.Generator().manual_seed(seed)
    def conv(c_out, c_in):
        fan_in = c_in * kernel_size
        return torch.randn((c_out, c_in, kernel_size), generator=g) * (5 / 3) / fan_in ** 0.5
    return {
        "C": torch.randn((vocab_size, n_embd), generator=g),
        "w1": conv(n_hidden, n_embd), "b1": torch.randn(n_hidden, generator=g) * 0.1,
        "w2": conv(n_hidden, n_hidden), "b2": torch.randn(n_hidden, generator=g) * 0.1,
        "w3": conv(n_hidden, n_hidden), "b3": torch.randn(n_hidden, generator=g) * 0.1,
        "W": torch.randn((n_hidden, vocab_size), generator=g) * 0.1,
        "b": torch.randn(vocab_size, generator=g) * 0.1,
    }

def batch(n, seed, text, split="train"):
    X, Y = examples(text, split)
    ix = torch.randint(0, X.shape[0], (n,), generator=torch.Generator().manual_seed(seed))
    return {"X": X[ix], "Y": Y[ix]}
''',
    md("## the tape"),
    r'''
vals, grads, tape = {}, {}, []

def reset():
    vals.clear()
    grads.clear()
    tape.clear()

def add_grad(name, g):
    if name in grads:
        grads[name] = grads[name] + g
    else:
        grads[name] = g

def param(name, p):
    vals[name] = p
    return name

def lookup(out, table, idx):
    vals[out] = vals[table][idx]
    def back():
        gt = torch.zeros_like(vals[table])
        gt.index_add_(0, idx.reshape(-1), grads[out].reshape(-1, gt.shape[1]))
        add_grad(table, gt)
    tape.append(back)
    return out

def transpose(out, a):
    vals[out] = vals[a].transpose(1, 2)
    tape.append(lambda: add_grad(a, grads[out].transpose(1, 2)))
    return out

def causal_conv(out, a, w, bias, d):
    vals[out] = F.conv1d(F.pad(vals[a], (d, 0)), vals[w], vals[bias], dilation=d)
    def back():
        x, wt, go = vals[a], vals[w], grads[out]
        T = x.shape[2]
        xp = F.pad(x, (d, 0))
        cols = torch.stack([xp[:, :, :T], xp[:, :, d:d + T]], dim=2)       # B, Cin, 2, T
        add_grad(w, torch.einsum('bot,bikt->oik', go, cols))
        add_grad(bias, go.sum((0, 2)))
        dcols = torch.einsum('oik,bot->bikt', wt, go)
        add_grad(a, dcols[:, :, 1] + F.pad(dcols[:, :, 0, d:], (0, d)))
    tape.append(back)
    return out

def tanh(out, a):
    vals[out] = torch.tanh(vals[a])
    tape.append(lambda: add_grad(a, grads[out] * (1 - vals[out]**2)))
    return out

def take_last(out, a):
    vals[out] = vals[a][:, :, -1]
    def back():
        g = torch.zeros_like(vals[a])
        g[:, :, -1] = grads[out]
        add_grad(a, g)
    tape.append(back)
    return out

def linear(out, a, w, bias):
    vals[out] = vals[a] @ vals[w] + vals[bias]
    def back():
        add_grad(a, grads[out] @ vals[w].T)
        add_grad(w, vals[a].T @ grads[out])
        add_grad(bias, grads[out].sum(0))
    tape.append(back)
    return out

def xent(out, a, targets):
    vals[out] = F.cross_entropy(vals[a], targets)
    def back():
        p = F.softmax(vals[a], dim=1)
        p[torch.arange(len(targets)), targets] -= 1
        add_grad(a, p / len(targets))
    tape.append(back)
    return out

def backward(out):
    grads[out] = torch.ones(())
    for fn in reversed(tape):
        fn()
''',
    md("## the model, written on the tape"),
    r'''
def model(P, Xb, Yb):
    reset()
    for k, v in P.items():
        param(k, v)
    lookup('emb', 'C', Xb)
    transpose('x', 'emb')
    causal_conv('h1pre', 'x', 'w1', 'b1', 1)
    tanh('h1', 'h1pre')
    causal_conv('h2pre', 'h1', 'w2', 'b2', 2)
    tanh('h2', 'h2pre')
    causal_conv('h3pre', 'h2', 'w3', 'b3', 4)
    tanh('h3', 'h3pre')
    take_last('last', 'h3')
    linear('logits', 'last', 'W', 'b')
    return vals[xent('loss', 'logits', Yb)]
''',
    r'''
text = open('names.txt').read()
params = setup(31)
for p in params.values():
    p.requires_grad_(True)
bt = batch(32, 17, text)
Xb, Yb = bt['X'], bt['Y']
loss = model(params, Xb, Yb)
for k in ['emb', 'x', 'h1pre', 'h1', 'h2pre', 'h2', 'h3pre', 'h3', 'last', 'logits']:
    vals[k].retain_grad()
loss.backward()
''',
    md("## replay the tape and compare with autograd"),
    r'''
with torch.no_grad():
    backward('loss')
for k in ['logits', 'last', 'W', 'b', 'h3', 'h3pre', 'h2', 'w3', 'b3', 'h2pre', 'h1', 'w2', 'b2',
          'h1pre', 'x', 'w1', 'b1', 'emb', 'C']:
    print(f"{k:6s} max|diff| = {(grads[k] - vals[k].grad).abs().max().item():.3e}")
''',
    md("## Exercise 2: SGD through the tape"),
    r'''
P = {k: v.detach().clone() for k, v in params.items()}
lossi = []
for step in range(300):
    bt = batch(32, 5000 + step, text)
    Xb, Yb = bt['X'], bt['Y']
    with torch.no_grad():
        lv = model(P, Xb, Yb)
        backward('loss')
        for k in P:
            P[k] -= 0.1 * grads[k]
    lossi.append(lv.item())
print(sum(lossi[:30]) / 30, sum(lossi[-30:]) / 30)
''',
]

add("conv_h1_closure_tape_im2col", "conv", CONVC_CELLS, CONV_ALL,
    notes="forward.py's examples/setup/batch copied, setup(31); a reverse-mode tape of "
          "closures over named values (vals / grads dicts), the model written on it; conv "
          "backward by im2col of shifted slices (einsum) and F.pad to add the taps back; md "
          "between parts; SGD through the tape, 300 steps, batch 32; all right",
    where=where("conv", CONV_STEPS, fwd=_Names({k: f"vals['{k}']" for k in
                                                ["emb", "x", "h1pre", "h1", "h2pre", "h2",
                                                 "h3pre", "h3", "last", "logits", "C", "w1",
                                                 "b1", "w2", "b2", "w3", "b3", "W", "b"]}),
                grad=lambda k: f"grads['{k}']"),
    checkpoint="backward('loss')",
    train={"cell": "for step in range(300)", "probe": "for k in P:", "params": "P",
           "grads": "grads", "ref": "lambda Q: ref_conv_loss(Q, Xb, Yb)", "losses": "lossi"})

# ================================================================================================
# CONV D (a slip and its cascade). Own data (makemore-style contexts, random.seed(5)), a
# Generator(13) init, batch 40; the lesson's forward, then the backward done channels-last: the
# learner permutes every activation to (B, T, C), keeps the kernels as (tap, C_in, C_out), and
# writes each convolution's backward as matmuls on shifted time slices in a function
# returning a tuple; gradients are permuted back to the lesson's layout to compare, with a
# relative-error print; training with a backward function of the learner's own over a list of
# dilations, plain SGD with a step decay, 300 steps.
# Slip: the second convolution's backward is called with dilation 1 instead of 2 (a mixup with
# the first layer's), so conv/h1 is wrong and h1pre, x, emb, C cascade; the training loop reads
# its dilations from a list and is right.

CONVD_CELLS = [
    r'''
import random
import torch
import torch.nn.functional as F
''',
    r'''
words = open('names.txt').read().splitlines()
random.seed(5)
random.shuffle(words)
stoi = {ch: j + 1 for j, ch in enumerate(sorted(set(''.join(words))))}
stoi['.'] = 0
block_size, vocab_size, n_embd, n_hidden = 8, len(stoi), 10, 64
X, Y = [], []
for w in words[:int(0.8 * len(words))]:
    ctx = [0] * block_size
    for ch in w + '.':
        X.append(ctx)
        Y.append(stoi[ch])
        ctx = ctx[1:] + [stoi[ch]]
Xtr, Ytr = torch.tensor(X), torch.tensor(Y)
''',
    r'''
gen = torch.Generator().manual_seed(13)
def conv_w(co, ci):
    return torch.randn(co, ci, 2, generator=gen) * (5 / 3) / (2 * ci) ** 0.5
C = torch.randn(vocab_size, n_embd, generator=gen)
w1, b1 = conv_w(n_hidden, n_embd), 0.1 * torch.randn(n_hidden, generator=gen)
w2, b2 = conv_w(n_hidden, n_hidden), 0.1 * torch.randn(n_hidden, generator=gen)
w3, b3 = conv_w(n_hidden, n_hidden), 0.1 * torch.randn(n_hidden, generator=gen)
W, b = 0.1 * torch.randn(n_hidden, vocab_size, generator=gen), 0.1 * torch.randn(vocab_size, generator=gen)
parameters = [C, w1, b1, w2, b2, w3, b3, W, b]
for p in parameters:
    p.requires_grad = True
ix = torch.randint(0, len(Xtr), (40,), generator=gen)
Xb, Yb = Xtr[ix], Ytr[ix]
''',
    r'''
emb = C[Xb]
x = emb.transpose(1, 2)
h1pre = F.conv1d(F.pad(x, (1, 0)), w1, b1)
h1 = torch.tanh(h1pre)
h2pre = F.conv1d(F.pad(h1, (2, 0)), w2, b2, dilation=2)
h2 = torch.tanh(h2pre)
h3pre = F.conv1d(F.pad(h2, (4, 0)), w3, b3, dilation=4)
h3 = torch.tanh(h3pre)
last = h3[:, :, -1]
logits = last @ W + b
loss = F.cross_entropy(logits, Yb)
for t in [emb, x, h1pre, h1, h2pre, h2, h3pre, h3, last, logits]:
    t.retain_grad()
loss.backward()
''',
    r'''
def rel(name, mine, t):
    r = ((mine - t.grad).norm() / t.grad.norm()).item()
    print(f"{name:6s} {r:.1e}")

def cl(a):
    """(B, C, T) -> (B, T, C)"""
    return a.permute(0, 2, 1)
''',
    r'''
def conv_back_cl(dout_l, x_l, w, d):
    """channels-last backward of conv1d(pad(x, (d, 0)), w, b, dilation=d), kernel size 2
    dout_l: (B, T, Co), x_l: (B, T, Ci), w: (Co, Ci, 2)"""
    B, T, Ci = x_l.shape
    Wl = w.permute(2, 1, 0)                       # (2, Ci, Co)
    xp = F.pad(x_l, (0, 0, d, 0))                 # (B, d + T, Ci), zeros in front
    taps = [xp[:, :T], xp[:, d:d + T]]            # what tap 0 and tap 1 read at each t
    dWl = torch.stack([torch.einsum('bti,bto->io', taps[k], dout_l) for k in range(2)])
    dxp = torch.zeros_like(xp)
    dxp[:, :T] += dout_l @ Wl[0].T
    dxp[:, d:d + T] += dout_l @ Wl[1].T
    return dxp[:, d:], dWl.permute(2, 1, 0), dout_l.sum((0, 1))
''',
    r'''
n = Xb.shape[0]
with torch.no_grad():
    dlogits = F.softmax(logits, 1)
    dlogits[torch.arange(n), Yb] -= 1
    dlogits /= n
    dlast = dlogits @ W.T
    dW = last.T @ dlogits
    db = dlogits.sum(0)
    dh3_l = torch.zeros(n, block_size, n_hidden)
    dh3_l[:, -1, :] = dlast
    dh3pre_l = dh3_l * (1 - cl(h3)**2)
    dh2_l, dw3, db3 = conv_back_cl(dh3pre_l, cl(h2), w3, 4)
    dh2pre_l = dh2_l * (1 - cl(h2)**2)
    dh1_l, dw2, db2 = conv_back_cl(dh2pre_l, cl(h1), w2, 1)
    dh1pre_l = dh1_l * (1 - cl(h1)**2)
    dx_l, dw1, db1 = conv_back_cl(dh1pre_l, cl(x), w1, 1)
    demb = dx_l.clone()
    dC = torch.zeros_like(C).index_add_(0, Xb.view(-1), demb.reshape(-1, n_embd))
''',
    r'''
dh3, dh3pre, dh2, dh2pre, dh1, dh1pre, dx = (cl(a) for a in (dh3_l, dh3pre_l, dh2_l, dh2pre_l,
                                                             dh1_l, dh1pre_l, dx_l))
for name, mine, t in [('logits', dlogits, logits), ('last', dlast, last), ('W', dW, W), ('b', db, b),
                      ('h3', dh3, h3), ('h3pre', dh3pre, h3pre), ('h2', dh2, h2), ('w3', dw3, w3),
                      ('b3', db3, b3), ('h2pre', dh2pre, h2pre), ('h1', dh1, h1), ('w2', dw2, w2),
                      ('b2', db2, b2), ('h1pre', dh1pre, h1pre), ('x', dx, x), ('w1', dw1, w1),
                      ('b1', db1, b1), ('emb', demb, emb), ('C', dC, C)]:
    rel(name, mine, t)
''',
    r'''
dils = [1, 2, 4]

def loss_and_grads(ps, Xb, Yb):
    C, w1, b1, w2, b2, w3, b3, W, b = ps
    n = Xb.shape[0]
    acts = [C[Xb]]                                   # channels-last from the start
    for j, (w, bb) in enumerate([(w1, b1), (w2, b2), (w3, b3)]):
        a = acts[-1].permute(0, 2, 1)
        z = F.conv1d(F.pad(a, (dils[j], 0)), w, bb, dilation=dils[j])
        acts.append(torch.tanh(z).permute(0, 2, 1))
    lg = acts[-1][:, -1] @ W + b
    lossv = F.cross_entropy(lg, Yb)
    dlg = F.softmax(lg, 1)
    dlg[torch.arange(n), Yb] -= 1
    dlg /= n
    gr = [None] * 9
    gr[7], gr[8] = acts[-1][:, -1].T @ dlg, dlg.sum(0)
    d = torch.zeros_like(acts[-1])
    d[:, -1] = dlg @ W.T
    for j in (2, 1, 0):
        d = d * (1 - acts[j + 1]**2)
        d, gr[1 + 2 * j], gr[2 + 2 * j] = conv_back_cl(d, acts[j], ps[1 + 2 * j], dils[j])
    gr[0] = torch.zeros_like(C).index_add_(0, Xb.view(-1), d.reshape(-1, n_embd))
    return lossv, gr
''',
    r'''
names = ['C', 'w1', 'b1', 'w2', 'b2', 'w3', 'b3', 'W', 'b']
ps = [p.detach().clone() for p in parameters]
lossi = []
for k in range(300):
    ix = torch.randint(0, len(Xtr), (40,), generator=gen)
    xb, yb = Xtr[ix], Ytr[ix]
    lossv, gr = loss_and_grads(ps, xb, yb)
    lr = 0.1 if k < 200 else 0.03
    for p, g in zip(ps, gr):
        p -= lr * g
    lossi.append(lossv.item())
print(lossi[0], sum(lossi[-30:]) / 30)
''',
]

add("conv_h2_channels_last_dilation_slip", "conv", CONVD_CELLS, CONV_ALL,
    wrong=["conv/h1"], cascade=["conv/h1pre", "conv/x", "conv/emb", "conv/C"],
    notes="own data (random.seed(5)), Generator(13), batch 40, lesson forward; backward "
          "channels-last (permute to B,T,C, kernels as tap x Cin x Cout, matmuls on shifted "
          "time slices) in a tuple-returning function, grads permuted back, relative-error "
          "print; training on its own loss_and_grads with a dilation list, SGD with step decay, "
          "300 steps. Slip: layer 2's backward called with dilation 1 instead of 2 (h1 wrong; "
          "h1pre, x, emb, C cascade); the training loop is right",
    where=where("conv", CONV_STEPS),
    checkpoint="('b1', db1, b1), ('emb', demb, emb)",
    train={"cell": "for k in range(300)", "probe": "for p, g in zip(ps, gr):",
           "params": "dict(zip(names, ps))", "grads": "dict(zip(names, gr))",
           "ref": "lambda Q: loss_and_grads([Q[k_] for k_ in names], xb, yb)[0]",
           "losses": "lossi"},
    fix=[("conv_back_cl(dh2pre_l, cl(h1), w2, 1)", "conv_back_cl(dh2pre_l, cl(h1), w2, 2)")])
