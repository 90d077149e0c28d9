"""Learners' own notebooks for the gpt, lstm and conv lessons, with each step's truth: a fifth
corpus, holdout half (its other half is notebook_corpus_lessons_tune5).

Six notebooks: three for gpt (where learners lose most), two for lstm, one for conv, in layouts
that the earlier corpora do not use: attention on 3-D tensors with torch.bmm, GELU written out
over several lines, per-head loops, an additive -inf mask, a function redefined in a later cell,
torch.nn.Module subclasses with nn.Parameter and a manual backward writing `.g` onto the tensors,
one long cell of exercise 1, convolutions as a matmul on an as_strided view. Each is a learner's
own notebook: the lesson's forward pass copied in (renamed and re-laid-out), their own loading
of 'names.txt' (the truth runner points it at data/names.txt), their own seed and init, the
backward pass in a layout matching the forward, their own comparison helper, and where they
train, a loop of at most 300 steps on their own gradients and an update of their own.
Architecture sizes are the lessons' [lesson] sizes throughout; batch sizes equal no other size
of their lesson (gpt 9, 24 / 5, 11 / 14; lstm 21, 26; conv 50).

Layouts in this half:
  gpt_h1   parameters as globals under own names, activations abbreviated (t0, r0, mu1, xc1,
           rs1, xn1, l1, q3, sc, scm, p3, o3, ap, f1, u, th, f1g, ...); heads folded into the
           batch, (n * nh, T, hs), every attention product a torch.bmm, the mask a comparison of
           two aranges; GELU over three lines and its backward in the same three; exercise 1
           cell by cell with grad_xxx names (on tensors that still require grad), every first
           branch held and completed with +=; same() helper. Exercise 1 only.
  gpt_h2   exercises 2 and 3: each function in its own cell with its own autograd check (the
           encoder as a loop over unique tokens, layernorm atom by atom inside, attention as a
           loop over heads on slices of qkv); gelu_backward first written for the exact (erf)
           GELU, the check printing a mismatch, then redefined for the tanh form (the last
           definition is the one judged); forward_pass with the causal mask added as a triu of
           -inf; backward_pass on the functions; the batch helper defined late; own adamw_update,
           200 steps.
  gpt_h3   torch.nn.Module subclasses (Linear, LayerNorm, Gelu, CausalSelfAttention, GPT) with
           nn.Parameter weights and a mask buffer, each keeping its input, output and
           intermediates as attributes; manual backward() methods writing `.g` onto the tensors
           themselves (fastai style), the residual branches added after the layer norms wrote
           theirs; a .g-vs-.grad loop; SGD with momentum on .g, 120 steps.
  lstm_h4  the forward a function returning a dict of abbreviated activations (e, Hb, hp, cp, xt,
           z, zi..zo, s, Ha, H, lg), detached once; exercise 1 as one long cell with xxx_grad
           names, first branches held; one checking cell of assert allclose over triples; fused
           gates and lstm_step_backward (split(H, 1)). No BPTT, no training.
  lstm_h5  exercises 2, 3 (the step function) and 4: lstm_step_backward and an independent
           lstm_backward loop, each checked against autograd on small random tensors; an
           nn.Module CharLSTM with nn.Parameter weights under own names, its forward a Python
           time loop with torch.stack, manual_backward on lstm_backward; SGD with global-norm
           clipping, 250 steps.
  conv_h6  each convolution a matmul on a strided view: the padded input's two taps gathered by
           as_strided into patches [B, T, C_in * 2] against the kernel flattened to
           [C_out, C_in * 2]; gradients in a dict keyed by the learner's names; conv_back folding
           the patches back with two slice-adds, the tanh layers one by one; rel() printout.
           Exercise 1 only.

Slips (each case's "notes" says which): gpt_h1 merges the heads' gradient back with a bare
reshape where the forward transposed (`grad_o3 = grad_y.reshape(n * nh, T, hs)`) (block/atty
wrong; att, preatt_masked, preatt, qk, qkv, ln1, ln1_affine, x0, wpe, wte cascade); conv_h6
takes layer 2's tanh backward from the pre-activation (`1 - p2**2`) (conv/h2pre wrong; h1,
h1pre, x, emb, C cascade). The other four notebooks are right throughout (gpt_h2's first,
erf-based gelu_backward is replaced before anything uses it). No notebook is shared with the
tune half, nor with the earlier corpora.

Written apart from the grader: from the lessons' forward passes, pack.toml's [lesson] / [setup] /
[forward] tables, `backprop-tutor --pack X list / show` and the earlier corpora's format only,
without reading the tutor's code or the steps' solutions, mistakes, hints or explanations, and
without running the grader on these notebooks. Every label was measured by running the
notebook, not judged by eye:

    .venv/bin/python tests/lesson_corpus_truth.py notebook_corpus_lessons_holdout5

CASES: each {"name", "lesson", "notebook" (nbformat 4), "right", "wrong", "cascade", "notes"}; steps
in neither list were not attempted; "cascade" steps (own code right, value wrong only because an
earlier wrong gradient of the learner's feeds them) are in "wrong" too. The truth runner's keys:
"where" (step -> (learner's expression, autograd reference[, after which statement])), "loss"
(the expression for the learner's loss where it is not `loss`), "checkpoint", "functions"
(function step -> the learner's function name, None for the name `show` gives), "train" (the
training loop's probe), and "fix" (the replacements that undo the slips; with them every
attempted step measures right, which is how the cascades are confirmed).
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


def keep_first(specs: dict) -> dict:
    """Drops the first-branch specs whose statement text is empty (a branch the learner's code
    never holds as a value of its own), keeps the others."""
    return {s: [sp for sp in v if len(sp) == 2 or sp[2]] for s, v in specs.items()}



# ================================================================================================
# GPT H1 (a slip and its cascades). Own data (random.Random(271828) shuffle, rows padded with a
# list comprehension), parameters as globals under the learner's own names (Wtok, Wpos, ln1_g,
# W_qkv, W_proj, W_fc, W_fc2, lnf_b, ...), activations abbreviated (t0, r0 / r1 / r2, mu1, xc1,
# var1, rs1, xn1, l1, q3 / k3 / v3, sc, scm, p3, o3, ap, f1, u, th, f1g, f2, lf); attention on 3-D
# tensors, heads folded into the batch (n * nh, T, hs) and every product a torch.bmm, the mask a
# `future` comparison of two aranges; GELU written out over three lines (u, th, f1g) and its
# backward in the same three. Exercise 1 cell by cell with grad_xxx
# names (computed outside no_grad, on tensors that still require grad), every first branch held
# and completed later with +=, a `same(name, mine, t)` helper against retained .grad. Batch 9;
# exercise 1 only.
# Slip: the heads are merged back with a bare reshape where the forward transposed
# (`grad_o3 = grad_y.reshape(n * nh, T, hs)`): block/atty is wrong, and att, preatt_masked, preatt,
# qk, qkv, ln1, ln1_affine, x0, wpe, wte cascade.

GPTH1_CELLS = [
    r'''
import math
import random
import torch
import torch.nn.functional as F
''',
    r'''
names = open('names.txt').read().strip().split('\n')
random.Random(271828).shuffle(names)
V, T, C, nh = 27, 16, 32, 4
hs = C // nh
alpha = '.abcdefghijklmnopqrstuvwxyz'
ids = lambda w: [alpha.index(ch) for ch in '.' + w + '.']
rows = torch.tensor([(ids(w) + [0] * (T + 1))[:T + 1] for w in names])
Xtr, Ytr = rows[:28000, :T], rows[:28000, T]
''',
    r'''
g = torch.Generator().manual_seed(1999)
def mat(a, b, s=1.0):
    return torch.randn(a, b, generator=g) * s * a**-0.5
def vec(a, around=0.0):
    return around + 0.1 * torch.randn(a, generator=g)

Wtok, Wpos = 0.1 * torch.randn(V, C, generator=g), 0.1 * torch.randn(T, C, generator=g)
ln1_g, ln1_b = vec(C, 1.0), vec(C)
W_qkv, b_qkv = mat(C, 3 * C), vec(3 * C)
W_proj, b_proj = mat(C, C, 0.5), vec(C)
ln2_g, ln2_b = vec(C, 1.0), vec(C)
W_fc, b_fc = mat(C, 4 * C), vec(4 * C)
W_fc2, b_fc2 = mat(4 * C, C, 0.5), vec(C)
lnf_g, lnf_b = vec(C, 1.0), vec(C)
params = [Wtok, Wpos, ln1_g, ln1_b, W_qkv, b_qkv, W_proj, b_proj, ln2_g, ln2_b, W_fc, b_fc,
          W_fc2, b_fc2, lnf_g, lnf_b]
for p in params:
    p.requires_grad = True
''',
    r'''
bix = torch.randint(0, len(Xtr), (9,), generator=g)
Xb, Yb = Xtr[bix], Ytr[bix]
n = Xb.shape[0]

t0 = Wtok[Xb]
r0 = t0 + Wpos
mu1 = r0.mean(-1, keepdim=True)
xc1 = r0 - mu1
var1 = (xc1**2).mean(-1, keepdim=True)
rs1 = (var1 + 1e-5)**-0.5
xn1 = xc1 * rs1
l1 = xn1 * ln1_g + ln1_b
qkv = l1 @ W_qkv + b_qkv
q3 = qkv[:, :, :C].view(n, T, nh, hs).transpose(1, 2).reshape(n * nh, T, hs)
k3 = qkv[:, :, C:2 * C].view(n, T, nh, hs).transpose(1, 2).reshape(n * nh, T, hs)
v3 = qkv[:, :, 2 * C:].view(n, T, nh, hs).transpose(1, 2).reshape(n * nh, T, hs)
sc = torch.bmm(q3, k3.transpose(1, 2)) * hs**-0.5
future = torch.arange(T)[None, :] > torch.arange(T)[:, None]
scm = sc.masked_fill(future, float('-inf'))
p3 = torch.softmax(scm, dim=-1)
o3 = torch.bmm(p3, v3)
y = o3.view(n, nh, T, hs).transpose(1, 2).reshape(n, T, C)
ap = y @ W_proj + b_proj
r1 = r0 + ap
mu2 = r1.mean(-1, keepdim=True)
xc2 = r1 - mu2
var2 = (xc2**2).mean(-1, keepdim=True)
rs2 = (var2 + 1e-5)**-0.5
xn2 = xc2 * rs2
l2 = xn2 * ln2_g + ln2_b
f1 = l2 @ W_fc + b_fc
u = f1 + 0.044715 * f1**3
th = torch.tanh(math.sqrt(2 / math.pi) * u)
f1g = 0.5 * f1 * (1 + th)
f2 = f1g @ W_fc2 + b_fc2
r2 = r1 + f2
muf = r2.mean(-1, keepdim=True)
xcf = r2 - muf
varf = (xcf**2).mean(-1, keepdim=True)
rsf = (varf + 1e-5)**-0.5
xnf = xcf * rsf
lf = xnf * lnf_g + lnf_b
logits = lf @ Wtok.T
targets = torch.cat([Xb[:, 1:], Yb[:, None]], dim=1)
loss = F.cross_entropy(logits.view(-1, V), targets.view(-1))

acts = [t0, r0, l1, xn1, qkv, q3, k3, v3, sc, scm, p3, o3, y, ap, r1, l2, xn2, f1, f1g, f2, r2,
        muf, xcf, varf, rsf, xnf, lf, logits]
for a in acts:
    a.retain_grad()
loss.backward()
print(loss.item())
''',
    r'''
def same(name, mine, tt):
    ok = torch.allclose(mine, tt.grad, rtol=1e-4, atol=1e-6)
    print(f"{name:7s} {ok} {(mine - tt.grad).abs().max().item():.2e}")
''',
    r'''
N = n * T
grad_logits = torch.softmax(logits, -1).view(N, V)
grad_logits[torch.arange(N), targets.view(-1)] -= 1
grad_logits = (grad_logits / N).view(n, T, V)
same('logits', grad_logits, logits)
''',
    r'''
grad_lf = grad_logits @ Wtok
grad_Wtok = grad_logits.view(-1, V).T @ lf.view(-1, C)
same('lf', grad_lf, lf)
''',
    r'''
grad_xnf = grad_lf * lnf_g
grad_lnf_g = (grad_lf * xnf).sum((0, 1))
grad_lnf_b = grad_lf.sum((0, 1))
same('xnf', grad_xnf, xnf); same('lnf_g', grad_lnf_g, lnf_g); same('lnf_b', grad_lnf_b, lnf_b)
''',
    r'''
grad_rsf = (grad_xnf * xcf).sum(-1, keepdim=True)
grad_xcf = grad_xnf * rsf
same('rsf', grad_rsf, rsf)
''',
    r'''
grad_varf = -0.5 * (varf + 1e-5)**-1.5 * grad_rsf
same('varf', grad_varf, varf)
''',
    r'''
grad_xcf += 2 * xcf / C * grad_varf
same('xcf', grad_xcf, xcf)
''',
    r'''
grad_muf = -grad_xcf.sum(-1, keepdim=True)
grad_r2 = grad_xcf.clone()
same('muf', grad_muf, muf)
''',
    r'''
grad_r2 += grad_muf / C
same('r2', grad_r2, r2)
''',
    r'''
grad_f2 = grad_r2
grad_r1 = grad_r2.clone()
same('f2', grad_f2, f2)
''',
    r'''
grad_f1g = grad_f2 @ W_fc2.T
grad_W_fc2 = f1g.view(-1, 4 * C).T @ grad_f2.view(-1, C)
grad_b_fc2 = grad_f2.sum((0, 1))
same('f1g', grad_f1g, f1g); same('W_fc2', grad_W_fc2, W_fc2); same('b_fc2', grad_b_fc2, b_fc2)
''',
    r'''
# back through the three gelu lines
grad_th = grad_f1g * 0.5 * f1
grad_u = grad_th * (1 - th**2) * math.sqrt(2 / math.pi)
grad_f1 = grad_f1g * 0.5 * (1 + th) + grad_u * (1 + 3 * 0.044715 * f1**2)
same('f1', grad_f1, f1)
''',
    r'''
grad_l2 = grad_f1 @ W_fc.T
grad_W_fc = l2.view(-1, C).T @ grad_f1.view(-1, 4 * C)
grad_b_fc = grad_f1.sum((0, 1))
same('l2', grad_l2, l2); same('W_fc', grad_W_fc, W_fc); same('b_fc', grad_b_fc, b_fc)
''',
    r'''
grad_xn2 = grad_l2 * ln2_g
grad_ln2_g = (grad_l2 * xn2).sum((0, 1))
grad_ln2_b = grad_l2.sum((0, 1))
same('xn2', grad_xn2, xn2)
''',
    r'''
grad_r1 += rs2 * (grad_xn2 - grad_xn2.mean(-1, keepdim=True)
                  - xn2 * (grad_xn2 * xn2).mean(-1, keepdim=True))
same('r1', grad_r1, r1)
''',
    r'''
grad_ap = grad_r1
grad_r0 = grad_r1.clone()
grad_y = grad_ap @ W_proj.T
grad_W_proj = y.view(-1, C).T @ grad_ap.view(-1, C)
grad_b_proj = grad_ap.sum((0, 1))
same('ap', grad_ap, ap); same('y', grad_y, y)
''',
    r'''
grad_o3 = grad_y.reshape(n * nh, T, hs)
same('o3', grad_o3, o3)
''',
    r'''
grad_p3 = torch.bmm(grad_o3, v3.transpose(1, 2))
grad_v3 = torch.bmm(p3.transpose(1, 2), grad_o3)
grad_scm = p3 * (grad_p3 - (p3 * grad_p3).sum(-1, keepdim=True))
grad_sc = grad_scm.masked_fill(future, 0.0)
same('p3', grad_p3, p3); same('v3', grad_v3, v3); same('scm', grad_scm, scm); same('sc', grad_sc, sc)
''',
    r'''
grad_q3 = torch.bmm(grad_sc, k3) * hs**-0.5
grad_k3 = torch.bmm(grad_sc.transpose(1, 2), q3) * hs**-0.5

def merge(t3):
    return t3.view(n, nh, T, hs).transpose(1, 2).reshape(n, T, C)

grad_qkv = torch.cat([merge(grad_q3), merge(grad_k3), merge(grad_v3)], dim=-1)
same('q3', grad_q3, q3); same('k3', grad_k3, k3); same('qkv', grad_qkv, qkv)
''',
    r'''
grad_l1 = grad_qkv @ W_qkv.T
grad_W_qkv = l1.view(-1, C).T @ grad_qkv.view(-1, 3 * C)
grad_b_qkv = grad_qkv.sum((0, 1))
grad_xn1 = grad_l1 * ln1_g
grad_ln1_g = (grad_l1 * xn1).sum((0, 1))
grad_ln1_b = grad_l1.sum((0, 1))
grad_r0 += rs1 * (grad_xn1 - grad_xn1.mean(-1, keepdim=True)
                  - xn1 * (grad_xn1 * xn1).mean(-1, keepdim=True))
same('l1', grad_l1, l1); same('xn1', grad_xn1, xn1); same('r0', grad_r0, r0)
''',
    r'''
grad_t0 = grad_r0
grad_Wpos = grad_r0.sum(0)
grad_Wtok = grad_Wtok + torch.zeros_like(Wtok).index_add_(0, Xb.view(-1), grad_t0.view(-1, C))
same('t0', grad_t0, t0); same('Wpos', grad_Wpos, Wpos); same('Wtok', grad_Wtok, Wtok)
''',
]

GPTH1_FWD = {"logits": "logits", "lnf": "lf", "lnf_norm": "xnf", "lnf_rstd": "rsf",
             "lnf_var": "varf", "lnf_xc": "xcf", "lnf_mean": "muf", "x2": "r2", "fcproj": "f2",
             "fch_gelu": "f1g", "fch": "f1", "ln2": "l2", "ln2_norm": "xn2", "x1": "r1",
             "attproj": "ap", "y": "y", "atty": "o3", "att": "p3", "v": "v3",
             "preatt_masked": "scm", "preatt": "sc", "q": "q3", "k": "k3", "qkv": "qkv",
             "ln1": "l1", "ln1_norm": "xn1", "x0": "r0", "tok": "t0",
             "wte": "Wtok", "wpe": "Wpos", "lnfw": "lnf_g", "lnfb": "lnf_b",
             "fcprojw": "W_fc2", "fcprojb": "b_fc2", "fcw": "W_fc", "fcb": "b_fc",
             "ln2w": "ln2_g", "ln2b": "ln2_b", "attprojw": "W_proj", "attprojb": "b_proj",
             "qkvw": "W_qkv", "qkvb": "b_qkv", "ln1w": "ln1_g", "ln1b": "ln1_b"}

add("gpt_h1_bmm_heads_expanded_gelu_merge_slip", "gpt", GPTH1_CELLS, GPT_STEPS,
    wrong=["block/atty"],
    cascade=["block/att", "block/preatt_masked", "block/preatt", "block/qk", "block/qkv",
             "block/ln1", "block/ln1_affine", "block/x0", "block/wpe", "block/wte"],
    notes="own data (Random(271828)), parameters as globals under own names, abbreviated "
          "activations; heads folded into the batch and every attention product a torch.bmm, "
          "mask from two aranges; GELU over three lines, backward in the same three; "
          "grad_xxx names, every first branch "
          "held; same() helper; batch 9; exercise 1 only. Slip: the heads merged back with a bare "
          "reshape (no transpose); att down to wte cascade",
    where=where("gpt", GPT_STEPS, fwd=GPTH1_FWD, grad=lambda k: "grad_" + GPTH1_FWD[k],
                first_after={"wte": "grad_Wtok = grad_logits.view(-1, V).T @ lf.view(-1, C)",
                             "lnf_xc": "grad_xcf = grad_xnf * rsf",
                             "x2": "grad_r2 = grad_xcf.clone()",
                             "x1": "grad_r1 = grad_r2.clone()",
                             "x0": "grad_r0 = grad_r1.clone()"}),
    fix=[("grad_o3 = grad_y.reshape(n * nh, T, hs)",
          "grad_o3 = grad_y.view(n, T, nh, hs).transpose(1, 2).reshape(n * nh, T, hs)")])

# ================================================================================================
# GPT H2 (right throughout). Exercises 2 and 3 only. Own data (random.seed(8) shuffle, rows built
# by a generator function), parameters in a dict under the learner's own long names (tok_emb,
# pos_emb, attn_norm_w, qkv_w, out_w, mlp_norm_w, up_w, down_w, final_norm_b, ...). The seven
# functions one per cell, each followed by its own check against torch.autograd.grad: the encoder
# as a loop over the batch's unique tokens, layernorm_backward atom by atom inside, attention_backward
# as a loop over the heads on slices of qkv; gelu_backward first written for the exact (erf) GELU,
# the check printing a mismatch, then redefined in a later cell for the tanh form. A
# `forward_pass(W, X, Y)` with the causal mask added as a triu of -inf (no masked_fill) returning
# (loss, keep), a `backward_pass` driver on the functions checked once against autograd, the batch
# helper defined late (just before the loop); 200 steps of the learner's adamw_update, batch 24.

GPTH2_CELLS = [
    r'''
import math
import random
import torch
import torch.nn.functional as F
''',
    r'''
lines = open("names.txt").read().splitlines()
random.seed(8)
random.shuffle(lines)
vocab = ["."] + sorted({ch for w in lines for ch in w})
stoi = {ch: i for i, ch in enumerate(vocab)}
VOCAB, CTX, EMBD, HEADS = len(vocab), 16, 32, 4

def make_rows(ws):
    for w in ws:
        seq = [0] + [stoi[ch] for ch in w] + [0]
        yield (seq + [0] * CTX)[:CTX + 1]

table = torch.tensor(list(make_rows(lines[:25600])))
Xtr, Ytr = table[:, :CTX], table[:, CTX]
''',
    md("## encoder"),
    r'''
def encoder_backward(dout, inp, vocab_size):
    dwte = torch.zeros(vocab_size, dout.shape[-1])
    for tok in inp.unique():
        dwte[tok] = dout[inp == tok].sum(0)
    dwpe = dout.sum(0)
    return dwte, dwpe

wte_ = torch.randn(11, 6, requires_grad=True)
wpe_ = torch.randn(5, 6, requires_grad=True)
inp_ = torch.randint(0, 11, (3, 5))
out_ = wte_[inp_] + wpe_
d_ = torch.randn_like(out_)
ref_ = torch.autograd.grad(out_, [wte_, wpe_], d_)
print([torch.allclose(a, b) for a, b in zip(encoder_backward(d_, inp_, 11), ref_)])
''',
    md("## layernorm"),
    r'''
def layernorm_backward(dout, inp, weight, mean, rstd):
    C = inp.shape[-1]
    xc = inp - mean
    norm = xc * rstd
    dweight = (dout * norm).flatten(0, -2).sum(0)
    dbias = dout.flatten(0, -2).sum(0)
    dnorm = dout * weight
    drstd = (dnorm * xc).sum(-1, keepdim=True)
    dvar = -0.5 * rstd**3 * drstd
    dxc = dnorm * rstd + dvar * 2 * xc / C
    dinp = dxc - dxc.mean(-1, keepdim=True)
    return dinp, dweight, dbias

x_ = torch.randn(2, 5, 7, requires_grad=True)
w_, b_ = torch.randn(7, requires_grad=True), torch.randn(7, requires_grad=True)
m_ = x_.mean(-1, keepdim=True)
r_ = ((x_ - m_)**2).mean(-1, keepdim=True).add(1e-5).rsqrt()
o_ = (x_ - m_) * r_ * w_ + b_
d_ = torch.randn_like(o_)
ref_ = torch.autograd.grad(o_, [x_, w_, b_], d_)
mine_ = layernorm_backward(d_, x_.detach(), w_.detach(), m_.detach(), r_.detach())
print([torch.allclose(a, b, atol=1e-6) for a, b in zip(mine_, ref_)])
''',
    md("## matmul"),
    r'''
def matmul_backward(dout, inp, weight):
    dinp = dout @ weight.T
    dweight = inp.flatten(0, -2).T @ dout.flatten(0, -2)
    dbias = dout.flatten(0, -2).sum(0)
    return dinp, dweight, dbias

x_ = torch.randn(2, 3, 4, requires_grad=True)
w_, b_ = torch.randn(4, 6, requires_grad=True), torch.randn(6, requires_grad=True)
o_ = x_ @ w_ + b_
d_ = torch.randn_like(o_)
print([torch.allclose(a, b, atol=1e-6) for a, b in
       zip(matmul_backward(d_, x_.detach(), w_.detach()), torch.autograd.grad(o_, [x_, w_, b_], d_))])
''',
    md("## attention, one head at a time"),
    r'''
def attention_backward(dout, qkv, att, n_head):
    B, T, C3 = qkv.shape
    C = C3 // 3
    hs = C // n_head
    dqkv = torch.zeros_like(qkv)
    for h in range(n_head):
        cols = slice(h * hs, (h + 1) * hs)
        q = qkv[:, :, :C][:, :, cols]
        k = qkv[:, :, C:2 * C][:, :, cols]
        v = qkv[:, :, 2 * C:][:, :, cols]
        a = att[:, h]
        dy = dout[:, :, cols]
        da = dy @ v.transpose(1, 2)
        dv = a.transpose(1, 2) @ dy
        ds = a * (da - (a * da).sum(-1, keepdim=True)) / math.sqrt(hs)
        dqkv[:, :, h * hs:(h + 1) * hs] = ds @ k
        dqkv[:, :, C + h * hs:C + (h + 1) * hs] = ds.transpose(1, 2) @ q
        dqkv[:, :, 2 * C + h * hs:2 * C + (h + 1) * hs] = dv
    return dqkv

def attention_fwd(qkv, n_head):
    B, T, C3 = qkv.shape
    C = C3 // 3
    q, k, v = [z.view(B, T, n_head, C // n_head).transpose(1, 2) for z in qkv.split(C, 2)]
    mask = torch.triu(torch.full((T, T), float('-inf')), diagonal=1)
    att = F.softmax(q @ k.transpose(-2, -1) / math.sqrt(C // n_head) + mask, dim=-1)
    return (att @ v).transpose(1, 2).reshape(B, T, C), att

qkv_ = torch.randn(2, 6, 3 * 12, requires_grad=True)
y_, att_ = attention_fwd(qkv_, 3)
d_ = torch.randn_like(y_)
print(torch.allclose(attention_backward(d_, qkv_.detach(), att_.detach(), 3),
                     torch.autograd.grad(y_, qkv_, d_)[0], atol=1e-6))
''',
    md("## gelu"),
    r'''
def gelu_backward(dout, inp):
    cdf = 0.5 * (1 + torch.erf(inp / math.sqrt(2)))
    pdf = torch.exp(-0.5 * inp**2) / math.sqrt(2 * math.pi)
    return dout * (cdf + inp * pdf)

def gelu(x):
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))

x_ = torch.randn(4, 9, requires_grad=True) * 2
d_ = torch.randn(4, 9)
ref_ = torch.autograd.grad(gelu(x_), x_, d_)[0]
print((gelu_backward(d_, x_.detach()) - ref_).abs().max())
''',
    md("off by ~1e-3: the lesson's GELU is the tanh one, not erf. Redo it:"),
    r'''
def gelu_backward(dout, inp):
    k = math.sqrt(2 / math.pi)
    th = torch.tanh(k * (inp + 0.044715 * inp**3))
    sech2 = 1 - th**2
    return dout * (0.5 * (1 + th) + 0.5 * inp * sech2 * k * (1 + 3 * 0.044715 * inp**2))

print((gelu_backward(d_, x_.detach()) - ref_).abs().max())
''',
    md("## cross-entropy and AdamW"),
    r'''
def crossentropy_softmax_backward(logits, targets):
    N = logits.shape[0]
    d = torch.softmax(logits, dim=-1)
    d[range(N), targets] -= 1
    return d / N

def adamw_update(param, grad, m, v, t, lr, beta1, beta2, eps, weight_decay):
    m *= beta1
    m += (1 - beta1) * grad
    v *= beta2
    v += (1 - beta2) * grad * grad
    param *= 1 - lr * weight_decay
    param -= lr * (m / (1 - beta1**t)) / ((v / (1 - beta2**t)).sqrt() + eps)

lg_ = torch.randn(15, 8, requires_grad=True)
tg_ = torch.randint(0, 8, (15,))
print(torch.allclose(crossentropy_softmax_backward(lg_.detach(), tg_),
                     torch.autograd.grad(F.cross_entropy(lg_, tg_), lg_)[0]))
''',
    md("## exercise 3"),
    r'''
def layer_norm(x, w, b):
    mean = x.mean(-1, keepdim=True)
    rstd = (((x - mean)**2).mean(-1, keepdim=True) + 1e-5)**-0.5
    return (x - mean) * rstd * w + b, mean, rstd

def forward_pass(W, X, Y):
    k = {}
    k['x0'] = W['tok_emb'][X] + W['pos_emb']
    k['ln1'], k['ln1_mean'], k['ln1_rstd'] = layer_norm(k['x0'], W['attn_norm_w'], W['attn_norm_b'])
    k['qkv'] = k['ln1'] @ W['qkv_w'] + W['qkv_b']
    k['y'], k['att'] = attention_fwd(k['qkv'], HEADS)
    k['x1'] = k['x0'] + k['y'] @ W['out_w'] + W['out_b']
    k['ln2'], k['ln2_mean'], k['ln2_rstd'] = layer_norm(k['x1'], W['mlp_norm_w'], W['mlp_norm_b'])
    k['up'] = k['ln2'] @ W['up_w'] + W['up_b']
    k['act'] = gelu(k['up'])
    k['x2'] = k['x1'] + k['act'] @ W['down_w'] + W['down_b']
    k['lnf'], k['lnf_mean'], k['lnf_rstd'] = layer_norm(k['x2'], W['final_norm_w'], W['final_norm_b'])
    k['logits'] = k['lnf'] @ W['tok_emb'].T
    k['targets'] = torch.cat([X[:, 1:], Y[:, None]], dim=1)
    loss = F.cross_entropy(k['logits'].reshape(-1, VOCAB), k['targets'].reshape(-1))
    return loss, k

def backward_pass(W, k, X):
    B, T = X.shape
    g = {}
    dlogits = crossentropy_softmax_backward(k['logits'].reshape(-1, VOCAB), k['targets'].reshape(-1))
    dlnf, dwteT, _ = matmul_backward(dlogits.view(B, T, VOCAB), k['lnf'], W['tok_emb'].T)
    dx2, g['final_norm_w'], g['final_norm_b'] = layernorm_backward(
        dlnf, k['x2'], W['final_norm_w'], k['lnf_mean'], k['lnf_rstd'])
    dact, g['down_w'], g['down_b'] = matmul_backward(dx2, k['act'], W['down_w'])
    dln2, g['up_w'], g['up_b'] = matmul_backward(gelu_backward(dact, k['up']), k['ln2'], W['up_w'])
    dx1, g['mlp_norm_w'], g['mlp_norm_b'] = layernorm_backward(
        dln2, k['x1'], W['mlp_norm_w'], k['ln2_mean'], k['ln2_rstd'])
    dx1 += dx2
    dy, g['out_w'], g['out_b'] = matmul_backward(dx1, k['y'], W['out_w'])
    dqkv = attention_backward(dy, k['qkv'], k['att'], HEADS)
    dln1, g['qkv_w'], g['qkv_b'] = matmul_backward(dqkv, k['ln1'], W['qkv_w'])
    dx0, g['attn_norm_w'], g['attn_norm_b'] = layernorm_backward(
        dln1, k['x0'], W['attn_norm_w'], k['ln1_mean'], k['ln1_rstd'])
    dx0 += dx1
    g['tok_emb'], g['pos_emb'] = encoder_backward(dx0, X, VOCAB)
    g['tok_emb'] += dwteT.T
    return g
''',
    r'''
gen = torch.Generator().manual_seed(31)
def init(*shape, scale, base=0.0):
    return base + scale * torch.randn(*shape, generator=gen)

E = EMBD
W = {'tok_emb': init(VOCAB, E, scale=0.1), 'pos_emb': init(CTX, E, scale=0.1),
     'attn_norm_w': init(E, scale=0.1, base=1.0), 'attn_norm_b': init(E, scale=0.1),
     'qkv_w': init(E, 3 * E, scale=E**-0.5), 'qkv_b': init(3 * E, scale=0.1),
     'out_w': init(E, E, scale=0.5 * E**-0.5), 'out_b': init(E, scale=0.1),
     'mlp_norm_w': init(E, scale=0.1, base=1.0), 'mlp_norm_b': init(E, scale=0.1),
     'up_w': init(E, 4 * E, scale=E**-0.5), 'up_b': init(4 * E, scale=0.1),
     'down_w': init(4 * E, E, scale=0.5 * (4 * E)**-0.5), 'down_b': init(E, scale=0.1),
     'final_norm_w': init(E, scale=0.1, base=1.0), 'final_norm_b': init(E, scale=0.1)}

Wg = {n: p.clone().requires_grad_() for n, p in W.items()}
l_, k_ = forward_pass(Wg, Xtr[:5], Ytr[:5])
l_.backward()
with torch.no_grad():
    g_ = backward_pass(W, forward_pass(W, Xtr[:5], Ytr[:5])[1], Xtr[:5])
print(max((g_[n] - Wg[n].grad).abs().max().item() for n in W))
''',
    r'''
def get_batch(bs):
    ix = torch.randint(0, len(Xtr), (bs,), generator=gen)
    return Xtr[ix], Ytr[ix]

M = {n: torch.zeros_like(p) for n, p in W.items()}
S = {n: torch.zeros_like(p) for n, p in W.items()}
hist = []
for t in range(1, 201):
    xb, yb = get_batch(24)
    lossv, kept = forward_pass(W, xb, yb)
    grads = backward_pass(W, kept, xb)
    for name in W:
        adamw_update(W[name], grads[name], M[name], S[name], t, 5e-3, 0.9, 0.999, 1e-8, 0.01)
    hist.append(lossv.item())
print(hist[0], hist[-1])
''',
]

add("gpt_h2_functions_redefined_gelu_additive_mask_adamw", "gpt", GPTH2_CELLS,
    GPT_FUNCS + ["train/gpt"],
    notes="exercises 2 and 3 only: own data (random.seed(8)), parameters in a dict under own long "
          "names; each function in its own cell with an autograd check: encoder as a loop over "
          "unique tokens, layernorm atom by atom inside, attention as a loop over heads; "
          "gelu_backward first for the erf GELU (mismatch printed) then redefined for the tanh "
          "form; forward_pass with an additive triu(-inf) mask returning (loss, keep); "
          "backward_pass on the functions; get_batch defined late; own adamw_update 200 steps, "
          "batch 24; all right (the final gelu_backward is the one judged)",
    functions={s: None for s in GPT_FUNCS},
    train={"cell": "for t in range(1, 201)", "probe": "for name in W:", "params": "W",
           "grads": "grads", "ref": "lambda Q: forward_pass(Q, xb, yb)[0]", "losses": "hist"})

# ================================================================================================
# GPT H3 (right throughout). Own data (names sorted by a seeded random key, rows via torch.full
# and slicing), the model as torch.nn.Module subclasses (Linear, LayerNorm, Gelu,
# CausalSelfAttention, GPT) with nn.Parameter weights (w / b) and the mask a registered buffer;
# each module keeps its input and output (and, for the layer norms and the attention, every
# intermediate) as attributes, and its manual `backward()` reads `self.out.g` and writes `.g`
# attributes onto the tensors themselves (the input's, the parameters', the intermediates'), in
# the "fastai" style; the GPT's backward chains them, adding the residual branches onto x1.g /
# x0.g after the layer norms wrote theirs (no first branch held on its own). A loop comparing
# every `.g` with `.grad`. Exercise 1 on a batch of 11; then 120 steps of SGD with momentum on
# the `.g` gradients, batch 14.

GPTH3_CELLS = [
    r'''
import math
import random
import torch
import torch.nn as nn
import torch.nn.functional as F
''',
    r'''
words = open('names.txt').read().split()
rng = random.Random(41)
words.sort(key=lambda w: rng.random())
letters = sorted(set(''.join(words)))
stoi = {c: i + 1 for i, c in enumerate(letters)}
stoi['.'] = 0
V, T, C, NH = len(stoi), 16, 32, 4
data = torch.full((len(words), T + 1), 0, dtype=torch.long)
for r, w in enumerate(words):
    data[r, 1:len(w) + 1] = torch.tensor([stoi[c] for c in w])
Xtr, Ytr = data[:27000, :T], data[:27000, T]
''',
    md("Every module remembers what it saw; `backward()` reads `out.g` and sets `.g` on its "
       "inputs and parameters."),
    r'''
class Linear(nn.Module):
    def __init__(self, i, o, scale=1.0):
        super().__init__()
        self.w = nn.Parameter(torch.randn(i, o) * scale / i**0.5)
        self.b = nn.Parameter(0.1 * torch.randn(o))

    def forward(self, x):
        self.inp = x
        self.out = x @ self.w + self.b
        return self.out

    @torch.no_grad()
    def backward(self):
        self.inp.g = self.out.g @ self.w.T
        self.w.g = self.inp.flatten(0, 1).T @ self.out.g.flatten(0, 1)
        self.b.g = self.out.g.sum((0, 1))


class LayerNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.w = nn.Parameter(1 + 0.1 * torch.randn(dim))
        self.b = nn.Parameter(0.1 * torch.randn(dim))

    def forward(self, x):
        self.inp = x
        self.mean = x.mean(-1, keepdim=True)
        self.xc = x - self.mean
        self.var = (self.xc**2).mean(-1, keepdim=True)
        self.rstd = (self.var + 1e-5)**-0.5
        self.norm = self.xc * self.rstd
        self.out = self.norm * self.w + self.b
        return self.out

    @torch.no_grad()
    def backward(self):
        D = self.inp.shape[-1]
        self.norm.g = self.out.g * self.w
        self.w.g = (self.out.g * self.norm).sum((0, 1))
        self.b.g = self.out.g.sum((0, 1))
        self.rstd.g = (self.norm.g * self.xc).sum(-1, keepdim=True)
        self.var.g = -0.5 * (self.var + 1e-5)**-1.5 * self.rstd.g
        self.xc.g = self.norm.g * self.rstd + 2 * self.xc * self.var.g / D
        self.mean.g = -self.xc.g.sum(-1, keepdim=True)
        self.inp.g = self.xc.g + self.mean.g / D


class Gelu(nn.Module):
    K = math.sqrt(2 / math.pi)

    def forward(self, x):
        self.inp = x
        self.out = 0.5 * x * (1 + torch.tanh(self.K * (x + 0.044715 * x**3)))
        return self.out

    @torch.no_grad()
    def backward(self):
        x = self.inp
        th = torch.tanh(self.K * (x + 0.044715 * x**3))
        self.inp.g = self.out.g * (0.5 * (1 + th)
                                   + 0.5 * x * (1 - th**2) * self.K * (1 + 3 * 0.044715 * x**2))
''',
    r'''
class CausalSelfAttention(nn.Module):
    def __init__(self, dim, nh, T):
        super().__init__()
        self.nh = nh
        self.qkv = Linear(dim, 3 * dim)
        self.proj = Linear(dim, dim, scale=0.5)
        self.register_buffer('causal', torch.ones(T, T).tril())

    def forward(self, x):
        B, T, D = x.shape
        hs = D // self.nh
        self.qkv_out = self.qkv(x)
        self.q, self.k, self.v = [self.qkv_out[:, :, j * D:(j + 1) * D].view(B, T, self.nh, hs)
                                  .transpose(1, 2) for j in range(3)]
        self.pre = self.q @ self.k.transpose(-2, -1) * hs**-0.5
        self.pre_m = self.pre.masked_fill(self.causal[:T, :T] == 0, float('-inf'))
        self.att = F.softmax(self.pre_m, dim=-1)
        self.atty = self.att @ self.v
        self.y = self.atty.transpose(1, 2).contiguous().view(B, T, D)
        return self.proj(self.y)

    @torch.no_grad()
    def backward(self):
        self.proj.backward()
        B, T, D = self.y.shape
        hs = D // self.nh
        self.atty.g = self.y.g.view(B, T, self.nh, hs).transpose(1, 2)
        self.att.g = self.atty.g @ self.v.transpose(-2, -1)
        self.v.g = self.att.transpose(-2, -1) @ self.atty.g
        self.pre_m.g = self.att * (self.att.g - (self.att * self.att.g).sum(-1, keepdim=True))
        self.pre.g = self.pre_m.g * self.causal[:T, :T]
        self.q.g = self.pre.g @ self.k * hs**-0.5
        self.k.g = self.pre.g.transpose(-2, -1) @ self.q * hs**-0.5
        self.qkv_out.g = torch.cat([t.g.transpose(1, 2).reshape(B, T, D)
                                    for t in (self.q, self.k, self.v)], dim=-1)
        self.qkv.backward()


class GPT(nn.Module):
    def __init__(self, V, T, dim, nh):
        super().__init__()
        self.V = V
        self.wte = nn.Parameter(0.1 * torch.randn(V, dim))
        self.wpe = nn.Parameter(0.1 * torch.randn(T, dim))
        self.ln1 = LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, nh, T)
        self.ln2 = LayerNorm(dim)
        self.fc = Linear(dim, 4 * dim)
        self.gelu = Gelu()
        self.fcproj = Linear(4 * dim, dim, scale=0.5)
        self.lnf = LayerNorm(dim)

    def forward(self, X, Y):
        self.X = X
        self.tok = self.wte[X]
        self.x0 = self.tok + self.wpe
        self.x1 = self.x0 + self.attn(self.ln1(self.x0))
        self.x2 = self.x1 + self.fcproj(self.gelu(self.fc(self.ln2(self.x1))))
        self.logits = self.lnf(self.x2) @ self.wte.T
        self.targets = torch.cat([X[:, 1:], Y[:, None]], dim=1)
        return F.cross_entropy(self.logits.reshape(-1, self.V), self.targets.reshape(-1))

    @torch.no_grad()
    def backward(self):
        N = self.X.numel()
        p = F.softmax(self.logits, -1)
        self.logits.g = (p - F.one_hot(self.targets, self.V)) / N
        self.lnf.out.g = self.logits.g @ self.wte
        self.wte.g = self.logits.g.flatten(0, 1).T @ self.lnf.out.flatten(0, 1)
        self.lnf.backward()
        self.fcproj.out.g = self.x2.g
        self.fcproj.backward()
        self.gelu.backward()
        self.fc.backward()
        self.ln2.backward()
        self.x1.g = self.x1.g + self.x2.g
        self.attn.proj.out.g = self.x1.g
        self.attn.backward()
        self.ln1.backward()
        self.x0.g = self.x0.g + self.x1.g
        self.tok.g = self.x0.g
        self.wpe.g = self.x0.g.sum(0)
        self.wte.g = self.wte.g + torch.zeros_like(self.wte).index_add_(
            0, self.X.flatten(), self.tok.g.flatten(0, 1))
''',
    r'''
torch.manual_seed(73)
model = GPT(V, T, C, NH)
ix = torch.randint(0, len(Xtr), (11,))
Xb, Yb = Xtr[ix], Ytr[ix]
loss = model(Xb, Yb)
m, a = model, model.attn
watch = {'logits': m.logits, 'lnf': m.lnf.out, 'lnf.norm': m.lnf.norm, 'lnf.rstd': m.lnf.rstd,
         'lnf.var': m.lnf.var, 'lnf.xc': m.lnf.xc, 'lnf.mean': m.lnf.mean, 'x2': m.x2,
         'fcproj': m.fcproj.out, 'gelu': m.gelu.out, 'fc': m.fc.out, 'ln2': m.ln2.out,
         'ln2.norm': m.ln2.norm, 'x1': m.x1, 'proj': a.proj.out, 'y': a.y, 'atty': a.atty,
         'att': a.att, 'v': a.v, 'pre_m': a.pre_m, 'pre': a.pre, 'q': a.q, 'k': a.k,
         'qkv': a.qkv_out, 'ln1': m.ln1.out, 'ln1.norm': m.ln1.norm, 'x0': m.x0, 'tok': m.tok}
for t_ in watch.values():
    t_.retain_grad()
loss.backward()
model.backward()
''',
    r'''
worst = 0.0
for name, t_ in list(watch.items()) + list(model.named_parameters()):
    err = (t_.g - t_.grad).abs().max().item()
    worst = max(worst, err / (t_.grad.abs().max().item() + 1e-12))
    if err > 1e-6:
        print(name, err)
print('worst relative error', worst)
''',
    md("## a short run with my gradients"),
    r'''
for p in model.parameters():
    p.requires_grad_(False)
vel = {n_: torch.zeros_like(p) for n_, p in model.named_parameters()}
losses = []
for step in range(120):
    ix = torch.randint(0, len(Xtr), (14,))
    xb, yb = Xtr[ix], Ytr[ix]
    loss_ = model(xb, yb)
    model.backward()
    for n_, p in model.named_parameters():
        vel[n_].mul_(0.9).add_(p.g)
        p -= 0.05 * vel[n_]
    losses.append(loss_.item())
print(losses[0], sum(losses[-12:]) / 12)
''',
]

GPTH3_FWD = {"logits": "model.logits", "lnf": "model.lnf.out", "lnf_norm": "model.lnf.norm",
             "lnf_rstd": "model.lnf.rstd", "lnf_var": "model.lnf.var", "lnf_xc": "model.lnf.xc",
             "lnf_mean": "model.lnf.mean", "x2": "model.x2", "fcproj": "model.fcproj.out",
             "fch_gelu": "model.gelu.out", "fch": "model.fc.out", "ln2": "model.ln2.out",
             "ln2_norm": "model.ln2.norm", "x1": "model.x1", "attproj": "model.attn.proj.out",
             "y": "model.attn.y", "atty": "model.attn.atty", "att": "model.attn.att",
             "v": "model.attn.v", "preatt_masked": "model.attn.pre_m", "preatt": "model.attn.pre",
             "q": "model.attn.q", "k": "model.attn.k", "qkv": "model.attn.qkv_out",
             "ln1": "model.ln1.out", "ln1_norm": "model.ln1.norm", "x0": "model.x0",
             "tok": "model.tok", "wte": "model.wte", "wpe": "model.wpe", "lnfw": "model.lnf.w",
             "lnfb": "model.lnf.b", "fcprojw": "model.fcproj.w", "fcprojb": "model.fcproj.b",
             "fcw": "model.fc.w", "fcb": "model.fc.b", "ln2w": "model.ln2.w",
             "ln2b": "model.ln2.b", "attprojw": "model.attn.proj.w",
             "attprojb": "model.attn.proj.b", "qkvw": "model.attn.qkv.w",
             "qkvb": "model.attn.qkv.b", "ln1w": "model.ln1.w", "ln1b": "model.ln1.b"}

add("gpt_h3_nn_modules_dot_g_momentum", "gpt", GPTH3_CELLS, GPT_STEPS + ["train/gpt"],
    notes="own data (Random(41) sort key, torch.full rows); nn.Module subclasses (Linear, "
          "LayerNorm, Gelu, CausalSelfAttention, GPT) with nn.Parameter weights and a mask buffer, "
          "activations kept as module attributes; manual backward() methods writing .g onto the "
          "tensors themselves (fastai style), residual branches added after the layer norms "
          "wrote theirs (no first branch held); .g vs .grad loop; batch 11; SGD with momentum on "
          ".g, 120 steps, batch 14; all right",
    where=no_first(where("gpt", GPT_STEPS, fwd=GPTH3_FWD, grad=lambda k: GPTH3_FWD[k] + ".g",
                         first_after=DROP)),
    checkpoint="print('worst relative error', worst)",
    train={"cell": "for step in range(120)",
           "probe": "for n_, p in model.named_parameters():",
           "params": "dict(model.named_parameters())",
           "grads": "{n_: p.g for n_, p in model.named_parameters()}",
           "ref": "lambda Q: torch.func.functional_call(model, Q, (xb, yb))",
           "losses": "losses"})

# ================================================================================================
# LSTM H4 (right throughout). Own data (random.Random(1618) shuffle, rows padded by a list
# comprehension), the setup's run_lstm copied, parameters in a dict under the learner's own keys
# (E, Wx, Wh, bias, Wout, bout); the lesson's forward as a function `lstm_step(P, X, Y, t)`
# returning a dict of abbreviated activations (e, Hb, hp, cp, xt, Wxt, Wht, bt, z, zi..zo,
# i / f / g / o, c, h, s, Ha, H, lg, loss), detached once into `d` for the backward. Exercise 1
# as ONE long cell of top-level statements with gradients named xxx_grad, every first branch held
# and completed with +=; one checking cell: a list of (name, mine, tensor) triples and
# `assert torch.allclose`. Exercise 3's fused gates (from the four gates) and lstm_step_backward
# (split(H, 1)), checked on step t's tensors. Batch 21; no BPTT, no training.

LSTMH4_CELLS = [
    r'''
import random
import torch
import torch.nn.functional as F
from collections import namedtuple
''',
    r'''
with open('names.txt') as f:
    names = [ln.strip() for ln in f if ln.strip()]
random.Random(1618).shuffle(names)
chars = sorted({c for nm in names for c in nm})
stoi = {c: k + 1 for k, c in enumerate(chars)}
stoi['.'] = 0
vocab = len(stoi)
W_ = max(len(nm) for nm in names) + 1
X = torch.tensor([[0] + [stoi[c] for c in nm] + [0] * (W_ - len(nm) - 1) for nm in names])
Y = torch.tensor([[stoi[c] for c in nm] + [0] + [-1] * (W_ - len(nm) - 1) for nm in names])
ntr = int(0.8 * len(names))
''',
    r'''
LSTMRun = namedtuple("LSTMRun", ["hs", "h", "c"])

def run_lstm(xs, h, c, Wx, Wh, b):
    hs, h, c = torch.lstm(xs, (h[None], c[None]), (Wx.T, Wh.T, b, b * 0), True, 1, 0.0, False,
                          False, True)
    return LSTMRun(hs, h[0], c[0])
''',
    r'''
nE, nH = 10, 32
torch.manual_seed(90210)
P = {'E': torch.randn(vocab, nE), 'Wx': torch.randn(nE, 4 * nH) * nE**-0.5,
     'Wh': torch.randn(nH, 4 * nH) * nH**-0.5, 'bias': torch.randn(4 * nH) * 0.1,
     'Wout': torch.randn(nH, vocab) * nH**-0.5, 'bout': torch.randn(vocab) * 0.1}
P['bias'][nH:2 * nH] += 1.0
for v in P.values():
    v.requires_grad_()

def lstm_step(P, X, Y, t):
    a = {}
    n = X.shape[0]
    a['e'] = P['E'][X]
    z0 = a['e'].new_zeros(n, nH)
    b4 = run_lstm(a['e'][:, :t], z0, z0, P['Wx'], P['Wh'], P['bias'])
    a['Hb'], a['hp'], a['cp'] = b4.hs, b4.h, b4.c
    a['xt'] = a['e'][:, t]
    a['Wxt'], a['Wht'], a['bt'] = P['Wx'].clone(), P['Wh'].clone(), P['bias'].clone()
    a['z'] = a['xt'] @ a['Wxt'] + a['hp'] @ a['Wht'] + a['bt']
    a['zi'], a['zf'], a['zg'], a['zo'] = a['z'].split(nH, dim=1)
    a['i'], a['f'], a['o'] = a['zi'].sigmoid(), a['zf'].sigmoid(), a['zo'].sigmoid()
    a['g'] = a['zg'].tanh()
    a['c'] = a['f'] * a['cp'] + a['i'] * a['g']
    a['h'] = a['o'] * a['c'].tanh()
    a['s'] = torch.stack([a['h'], a['c']])
    a['Ha'] = run_lstm(a['e'][:, t + 1:], a['s'][0], a['s'][1], P['Wx'], P['Wh'], P['bias']).hs
    a['H'] = torch.cat([a['Hb'], a['h'][:, None], a['Ha']], 1)
    a['lg'] = a['H'] @ P['Wout'] + P['bout']
    a['loss'] = F.cross_entropy(a['lg'].view(-1, vocab), Y.view(-1), ignore_index=-1)
    return a
''',
    r'''
ix = torch.randint(0, ntr, (21,))
Xb, Yb = X[ix], Y[ix]
Tb = int((Yb >= 0).sum(1).max())
Xb, Yb = Xb[:, :Tb].contiguous(), Yb[:, :Tb].contiguous()
t = 3
fw = lstm_step(P, Xb, Yb, t)
for k, v in fw.items():
    if v.requires_grad and k != 'loss':
        v.retain_grad()
fw['loss'].backward()
d = {k: v.detach() for k, v in fw.items()}
''',
    md("### exercise 1, top to bottom"),
    r'''
valid = (Yb >= 0).float()
lg_grad = d['lg'].softmax(-1) - F.one_hot(Yb.clamp(min=0), vocab).float()
lg_grad = lg_grad * valid[:, :, None] / valid.sum()
H_grad = lg_grad @ P['Wout'].detach().T
Wout_grad = torch.einsum('nth,ntv->hv', d['H'], lg_grad)
bout_grad = lg_grad.sum((0, 1))
Hb_grad = H_grad[:, :t]
Ha_grad = H_grad[:, t + 1:]
h_grad = H_grad[:, t].clone()
s_grad = fw['s'].grad
h_grad += s_grad[0]
c_grad = s_grad[1].clone()
o_grad = h_grad * d['c'].tanh()
c_grad += h_grad * d['o'] * (1 - d['c'].tanh()**2)
f_grad = c_grad * d['cp']
cp_grad = c_grad * d['f']
i_grad = c_grad * d['g']
g_grad = c_grad * d['i']
zi_grad = i_grad * d['i'] * (1 - d['i'])
zf_grad = f_grad * d['f'] * (1 - d['f'])
zo_grad = o_grad * d['o'] * (1 - d['o'])
zg_grad = g_grad * (1 - d['g']**2)
z_grad = torch.cat([zi_grad, zf_grad, zg_grad, zo_grad], dim=1)
xt_grad = z_grad @ d['Wxt'].T
hp_grad = z_grad @ d['Wht'].T
Wxt_grad = d['xt'].T @ z_grad
Wht_grad = d['hp'].T @ z_grad
bt_grad = z_grad.sum(0)
''',
    r'''
pairs = [('lg', lg_grad, fw['lg']), ('H', H_grad, fw['H']), ('Wout', Wout_grad, P['Wout']),
         ('bout', bout_grad, P['bout']), ('Hb', Hb_grad, fw['Hb']), ('Ha', Ha_grad, fw['Ha']),
         ('h', h_grad, fw['h']), ('o', o_grad, fw['o']), ('c', c_grad, fw['c']),
         ('f', f_grad, fw['f']), ('cp', cp_grad, fw['cp']), ('i', i_grad, fw['i']),
         ('g', g_grad, fw['g']), ('zi', zi_grad, fw['zi']), ('zf', zf_grad, fw['zf']),
         ('zg', zg_grad, fw['zg']), ('zo', zo_grad, fw['zo']), ('z', z_grad, fw['z']),
         ('xt', xt_grad, fw['xt']), ('hp', hp_grad, fw['hp']), ('Wxt', Wxt_grad, fw['Wxt']),
         ('Wht', Wht_grad, fw['Wht']), ('bt', bt_grad, fw['bt'])]
for name, mine, ref in pairs:
    assert torch.allclose(mine, ref.grad, rtol=1e-4, atol=1e-6), name
print('all', len(pairs), 'match')
''',
    md("### exercise 3"),
    r'''
gates = torch.cat([d['i'], d['f'], d['g'], d['o']], dim=1)
i4, f4, g4, o4 = gates.split(nH, dim=1)
z_grad_fused = torch.cat([i_grad, f_grad, g_grad, o_grad], 1) * torch.cat(
    [i4 * (1 - i4), f4 * (1 - f4), 1 - g4 * g4, o4 * (1 - o4)], 1)
assert torch.allclose(z_grad_fused, fw['z'].grad, atol=1e-7)
''',
    r'''
def lstm_step_backward(dh, dc, x, h_prev, c_prev, c, gates, Wx, Wh):
    H = h_prev.shape[1]
    i, f, g, o = gates.split(H, dim=1)
    tanh_c = torch.tanh(c)
    dc_full = dc + dh * o * (1 - tanh_c**2)
    dz = torch.cat([dc_full * g * i * (1 - i), dc_full * c_prev * f * (1 - f),
                    dc_full * i * (1 - g**2), dh * tanh_c * o * (1 - o)], dim=1)
    return dz @ Wx.T, dz @ Wh.T, dc_full * f, x.T @ dz, h_prev.T @ dz, dz.sum(dim=0)

res = lstm_step_backward(h_grad, s_grad[1], d['xt'], d['hp'], d['cp'], d['c'], gates,
                         d['Wxt'], d['Wht'])
for mine, key in zip(res, ['xt', 'hp', 'cp', 'Wxt', 'Wht', 'bt']):
    print(key, torch.allclose(mine, fw[key].grad, atol=1e-7))
''',
]

LSTMH4_KEY = {"logits": "lg", "hs": "H", "hs_before": "Hb", "hs_after": "Ha", "h": "h", "c": "c",
              "state": "s", "o": "o", "f": "f", "i": "i", "g": "g", "c_prev": "cp",
              "h_prev": "hp", "ai": "zi", "af": "zf", "ag": "zg", "ao": "zo", "ifgo": "z",
              "x_t": "xt", "Wx_t": "Wxt", "Wh_t": "Wht", "b_t": "bt"}
LSTMH4_FWD = {**{k: f"fw['{v}']" for k, v in LSTMH4_KEY.items()},
              "Wy": "P['Wout']", "by": "P['bout']"}
LSTMH4_GRAD = {**{k: f"{v}_grad" for k, v in LSTMH4_KEY.items()},
               "Wy": "Wout_grad", "by": "bout_grad"}

add("lstm_h4_abbreviated_dict_one_cell_grad_suffix", "lstm", LSTMH4_CELLS,
    LSTM_STEPS + ["fused/gates", "fused/lstm_step_backward"],
    notes="own data (Random(1618)), setup's run_lstm, parameters in a dict under own keys, the "
          "forward a function returning a dict of abbreviated activations, detached once; "
          "exercise 1 as one long cell with xxx_grad names and first branches held; one check "
          "cell of assert allclose over (name, mine, tensor) triples; fused gates and "
          "lstm_step_backward (split(H, 1)); batch 21; no BPTT or training; all right",
    loss="fw['loss']",
    where={**where("lstm", LSTM_STEPS, fwd=LSTMH4_FWD, grad=LSTMH4_GRAD.__getitem__,
                   first_after={"h": "h_grad = H_grad[:, t].clone()",
                                "c": "c_grad = s_grad[1].clone()"}),
           "fused/gates": [("z_grad_fused", "G(fw['z'])")]},
    functions={"fused/lstm_step_backward": None})

# ================================================================================================
# LSTM H5 (right throughout). Exercises 2, 3 (the step function) and 4 only. Own data (a
# torch.Generator(12) randperm over a list, the batch helper cutting to the longest name), the
# model a torch.nn.Module subclass `CharLSTM` with nn.Parameter weights under the learner's own
# names (embed, W_x, W_h, bias, W_out, b_out) in the lesson's layout, its forward a Python time
# loop collecting lists and torch.stack-ing them (hs, cs, gates kept on self); lstm_step_backward
# and lstm_backward written separately (the BPTT loop not built on the step function), both
# checked against autograd on small random tensors; a `manual_backward` method returning a dict
# keyed like named_parameters(); 250 steps of SGD with global-norm clipping, batch 26.

LSTMH5_CELLS = [
    r'''
import torch
import torch.nn as nn
import torch.nn.functional as F
''',
    r'''
words = open('names.txt').read().splitlines()
order = torch.randperm(len(words), generator=torch.Generator().manual_seed(12)).tolist()
words = [words[k] for k in order]
stoi = {c: k for k, c in enumerate('.abcdefghijklmnopqrstuvwxyz')}
L = 16
Xs = torch.zeros(len(words), L, dtype=torch.long)
Ys = torch.full((len(words), L), -1, dtype=torch.long)
for r, w in enumerate(words):
    ids = torch.tensor([stoi[c] for c in w])
    Xs[r, 1:len(w) + 1] = ids
    Ys[r, :len(w)] = ids
    Ys[r, len(w)] = 0
Xtr, Ytr = Xs[:25600], Ys[:25600]

def batch(bs):
    ix = torch.randint(0, len(Xtr), (bs,))
    xb, yb = Xtr[ix], Ytr[ix]
    T = int((yb >= 0).sum(1).max())
    return xb[:, :T].contiguous(), yb[:, :T].contiguous()
''',
    r'''
def lstm_step_backward(dh, dc, x, h_prev, c_prev, c, gates, Wx, Wh):
    H = dh.shape[1]
    i, f, g, o = gates[:, :H], gates[:, H:2 * H], gates[:, 2 * H:3 * H], gates[:, 3 * H:]
    tc = c.tanh()
    dc = dc + dh * o * (1 - tc * tc)
    dai = dc * g * i * (1 - i)
    daf = dc * c_prev * f * (1 - f)
    dag = dc * i * (1 - g * g)
    dao = dh * tc * o * (1 - o)
    dz = torch.cat([dai, daf, dag, dao], 1)
    return dz @ Wx.T, dz @ Wh.T, dc * f, x.T @ dz, h_prev.T @ dz, dz.sum(0)


def lstm_backward(dhs, xs, h0, c0, hs, cs, gates, Wx, Wh):
    B, T, D = xs.shape
    H = h0.shape[1]
    dxs = []
    dWx = torch.zeros_like(Wx)
    dWh = torch.zeros_like(Wh)
    db = torch.zeros(4 * H)
    dh_next = torch.zeros(B, H)
    dc_next = torch.zeros(B, H)
    for s in range(T - 1, -1, -1):
        i, f, g, o = gates[:, s].split(H, 1)
        c_prev = cs[:, s - 1] if s else c0
        h_prev = hs[:, s - 1] if s else h0
        dh = dhs[:, s] + dh_next
        tc = torch.tanh(cs[:, s])
        dc = dc_next + dh * o * (1 - tc**2)
        dz = torch.cat([dc * g * i * (1 - i), dc * c_prev * f * (1 - f), dc * i * (1 - g**2),
                        dh * tc * o * (1 - o)], 1)
        dxs.append(dz @ Wx.T)
        dWx += xs[:, s].T @ dz
        dWh += h_prev.T @ dz
        db += dz.sum(0)
        dh_next = dz @ Wh.T
        dc_next = dc * f
    return torch.stack(dxs[::-1], 1), dh_next, dc_next, dWx, dWh, db
''',
    r'''
# against autograd on a small random case
B_, T_, D_, H_ = 3, 6, 5, 7
xs_ = torch.randn(B_, T_, D_, requires_grad=True)
h0_ = torch.randn(B_, H_, requires_grad=True)
c0_ = torch.randn(B_, H_, requires_grad=True)
Wx_ = (torch.randn(D_, 4 * H_) * 0.4).requires_grad_()
Wh_ = (torch.randn(H_, 4 * H_) * 0.4).requires_grad_()
b_ = (torch.randn(4 * H_) * 0.1).requires_grad_()
h, c = h0_, c0_
hs_, cs_, gs_ = [], [], []
for s in range(T_):
    z = xs_[:, s] @ Wx_ + h @ Wh_ + b_
    gt = torch.cat([z[:, :2 * H_].sigmoid(), z[:, 2 * H_:3 * H_].tanh(), z[:, 3 * H_:].sigmoid()], 1)
    c = gt[:, H_:2 * H_] * c + gt[:, :H_] * gt[:, 2 * H_:3 * H_]
    h = gt[:, 3 * H_:] * c.tanh()
    hs_.append(h); cs_.append(c); gs_.append(gt)
hs_, cs_, gs_ = torch.stack(hs_, 1), torch.stack(cs_, 1), torch.stack(gs_, 1)
dhs_ = torch.randn_like(hs_)
ref = torch.autograd.grad(hs_, [xs_, h0_, c0_, Wx_, Wh_, b_], dhs_, retain_graph=True)
mine = lstm_backward(dhs_, xs_.detach(), h0_.detach(), c0_.detach(), hs_.detach(), cs_.detach(),
                     gs_.detach(), Wx_.detach(), Wh_.detach())
print('bptt', [round((a - r).abs().max().item(), 7) for a, r in zip(mine, ref)])

dh1, dc1 = torch.randn(B_, H_), torch.randn(B_, H_)
ref1 = torch.autograd.grad((hs_[:, 0] * dh1).sum() + (cs_[:, 0] * dc1).sum(),
                           [xs_, h0_, c0_, Wx_, Wh_, b_])
mine1 = lstm_step_backward(dh1, dc1, xs_[:, 0].detach(), h0_.detach(), c0_.detach(),
                           cs_[:, 0].detach(), gs_[:, 0].detach(), Wx_.detach(), Wh_.detach())
print('step', [round((a - r).abs().max().item(), 7) for a, r in zip(mine1, [ref1[0][:, 0], *ref1[1:]])])
''',
    r'''
class CharLSTM(nn.Module):
    def __init__(self, V, D, H):
        super().__init__()
        self.H = H
        self.embed = nn.Parameter(torch.randn(V, D))
        self.W_x = nn.Parameter(torch.randn(D, 4 * H) / D**0.5)
        self.W_h = nn.Parameter(torch.randn(H, 4 * H) / H**0.5)
        self.bias = nn.Parameter(0.1 * torch.randn(4 * H))
        with torch.no_grad():
            self.bias[H:2 * H] += 1.0
        self.W_out = nn.Parameter(torch.randn(H, V) / H**0.5)
        self.b_out = nn.Parameter(0.1 * torch.randn(V))

    def forward(self, X, Y):
        H = self.H
        self.xs = self.embed[X]
        h = c = self.xs.new_zeros(X.shape[0], H)
        hs, cs, gs = [], [], []
        for s in range(X.shape[1]):
            z = self.xs[:, s] @ self.W_x + h @ self.W_h + self.bias
            zi, zf, zg, zo = z.chunk(4, 1)
            gt = torch.cat([zi.sigmoid(), zf.sigmoid(), zg.tanh(), zo.sigmoid()], 1)
            c = gt[:, H:2 * H] * c + gt[:, :H] * gt[:, 2 * H:3 * H]
            h = gt[:, 3 * H:] * torch.tanh(c)
            hs.append(h); cs.append(c); gs.append(gt)
        self.hs, self.cs, self.gates = torch.stack(hs, 1), torch.stack(cs, 1), torch.stack(gs, 1)
        self.logits = self.hs @ self.W_out + self.b_out
        return F.cross_entropy(self.logits.flatten(0, 1), Y.flatten(), ignore_index=-1)

    @torch.no_grad()
    def manual_backward(self, X, Y):
        keep = (Y >= 0).float()
        dlog = F.softmax(self.logits, -1)
        dlog -= F.one_hot(Y.clamp(min=0), dlog.shape[-1]).float()
        dlog *= (keep / keep.sum()).unsqueeze(-1)
        g = {'W_out': self.hs.flatten(0, 1).T @ dlog.flatten(0, 1), 'b_out': dlog.sum((0, 1))}
        zero = torch.zeros(X.shape[0], self.H)
        dxs, _, _, g['W_x'], g['W_h'], g['bias'] = lstm_backward(
            dlog @ self.W_out.T, self.xs, zero, zero, self.hs, self.cs, self.gates, self.W_x,
            self.W_h)
        g['embed'] = torch.zeros_like(self.embed).index_add_(0, X.flatten(), dxs.flatten(0, 1))
        return g
''',
    r'''
torch.manual_seed(1312)
model = CharLSTM(27, 10, 32)
xb, yb = batch(26)
loss = model(xb, yb)
loss.backward()
g = model.manual_backward(xb, yb)
print({k: f"{(g[k] - p.grad).abs().max().item():.1e}" for k, p in model.named_parameters()})
model.zero_grad(set_to_none=True)
''',
    r'''
lossi = []
for it in range(250):
    xb, yb = batch(26)
    with torch.no_grad():
        lv = model(xb, yb)
    grads = model.manual_backward(xb, yb)
    norm = torch.sqrt(sum((v**2).sum() for v in grads.values()))
    scale = min(1.0, 5.0 / norm.item())
    with torch.no_grad():
        for k, p in model.named_parameters():
            p -= 1.0 * scale * grads[k]
    lossi.append(lv.item())
print(sum(lossi[:25]) / 25, sum(lossi[-25:]) / 25)
''',
]

add("lstm_h5_nn_module_bptt_clipped_sgd", "lstm", LSTMH5_CELLS,
    ["bptt/lstm_backward", "fused/lstm_step_backward", "train/lstm"],
    notes="exercises 2, 3 (the step function) and 4 only: own data (Generator(12) randperm); "
          "lstm_step_backward and an independent lstm_backward loop, each checked against "
          "autograd on small random tensors; an nn.Module CharLSTM with nn.Parameter weights "
          "under own names, forward a Python time loop with torch.stack, manual_backward on "
          "lstm_backward; SGD with global-norm clipping 250 steps, batch 26; all right",
    functions={"bptt/lstm_backward": None, "fused/lstm_step_backward": None},
    train={"cell": "for it in range(250)",
           "probe": "for k, p in model.named_parameters():",
           "params": "dict(model.named_parameters())", "grads": "grads",
           "ref": "lambda Q: torch.func.functional_call(model, Q, (xb, yb))",
           "losses": "lossi"})

# ================================================================================================
# CONV H6 (a slip and its cascades). Own data (torch.manual_seed(5) randperm; every name padded
# with eight dots in front and its contexts cut as windows of the padded sequence), parameters as
# globals under the learner's own names (table, k1 / c1, k2 / c2, k3 / c3, Wo, bo); each
# convolution a matmul on a strided view: the padded input's two taps gathered with
# `as_strided` into patches [B, T, C_in * 2] and multiplied by the kernel flattened to
# [C_out, C_in * 2]; activations abbreviated (emb, xin, p1 / a1, p2 / a2, p3 / a3, last, out);
# gradients in a dict `grads` keyed by those names and by the parameters'; the convolution's
# backward a helper `conv_back` (patches' gradient folded back with two slice-adds), the three
# tanh layers written out one by one; a `rel(name)` printout. Batch 50; exercise 1 only.
# Slip: layer 2's tanh backward uses the pre-activation (`1 - p2**2`) where the output belongs:
# conv/h2pre is wrong, and h1, h1pre, x, emb, C cascade.

CONVH6_CELLS = [
    r'''
import torch
import torch.nn.functional as F
''',
    r'''
words = open('names.txt').read().split()
torch.manual_seed(5)
words = [words[k] for k in torch.randperm(len(words)).tolist()]
stoi = {c: k for k, c in enumerate('.abcdefghijklmnopqrstuvwxyz')}
block = 8
X, Y = [], []
for w in words[:25000]:
    seq = [0] * block + [stoi[c] for c in w] + [0]
    for j in range(len(w) + 1):
        X.append(seq[j:j + block])
        Y.append(seq[j + block])
X, Y = torch.tensor(X), torch.tensor(Y)
print(X.shape)
''',
    r'''
def patches(a, d):
    # [B, C, T] -> [B, T, C * 2]: for each t, (a[:, c, t - d], a[:, c, t]) for every channel c
    B, Cin, T = a.shape
    ap = F.pad(a, (d, 0)).contiguous()
    p = ap.as_strided((B, Cin, T, 2), (Cin * (T + d), T + d, 1, d))
    return p.permute(0, 2, 1, 3).reshape(B, T, Cin * 2)

def conv(a, w, b, d):
    return (patches(a, d) @ w.reshape(w.shape[0], -1).T).transpose(1, 2) + b[:, None]

gen = torch.Generator().manual_seed(777)
nE, nH = 10, 64
table = torch.randn(27, nE, generator=gen)
k1 = torch.randn(nH, nE, 2, generator=gen) * (5 / 3) / (2 * nE)**0.5
k2 = torch.randn(nH, nH, 2, generator=gen) * (5 / 3) / (2 * nH)**0.5
k3 = torch.randn(nH, nH, 2, generator=gen) * (5 / 3) / (2 * nH)**0.5
c1, c2, c3 = (torch.randn(nH, generator=gen) * 0.1 for _ in range(3))
Wo = torch.randn(nH, 27, generator=gen) * 0.1
bo = torch.randn(27, generator=gen) * 0.1
for p in (table, k1, c1, k2, c2, k3, c3, Wo, bo):
    p.requires_grad_()
''',
    r'''
ix = torch.randint(0, len(X), (50,), generator=gen)
Xb, Yb = X[ix], Y[ix]
emb = table[Xb]
xin = emb.transpose(1, 2)
p1 = conv(xin, k1, c1, 1)
a1 = torch.tanh(p1)
p2 = conv(a1, k2, c2, 2)
a2 = torch.tanh(p2)
p3 = conv(a2, k3, c3, 4)
a3 = torch.tanh(p3)
last = a3[:, :, -1]
out = last @ Wo + bo
loss = F.cross_entropy(out, Yb)
acts = dict(emb=emb, xin=xin, p1=p1, a1=a1, p2=p2, a2=a2, p3=p3, a3=a3, last=last, out=out)
for v in acts.values():
    v.retain_grad()
loss.backward()
print(loss.item())
''',
    r'''
def conv_back(dp, a, w, d):
    B, Cout, T = dp.shape
    Cin = a.shape[1]
    dpt = dp.transpose(1, 2)
    P = patches(a, d)
    dw = (dpt.reshape(-1, Cout).T @ P.reshape(-1, Cin * 2)).view(Cout, Cin, 2)
    db = dp.sum((0, 2))
    dP = (dpt @ w.reshape(Cout, -1)).view(B, T, Cin, 2).permute(0, 2, 1, 3)
    dap = torch.zeros(B, Cin, T + d)
    dap[:, :, :T] += dP[..., 0]
    dap[:, :, d:] += dP[..., 1]
    return dap[:, :, d:], dw, db

params = dict(table=table, k1=k1, c1=c1, k2=k2, c2=c2, k3=k3, c3=c3, Wo=Wo, bo=bo)
def rel(name):
    ref = acts[name].grad if name in acts else params[name].grad
    return f"{name} {((grads[name] - ref).norm() / ref.norm()).item():.1e}"
''',
    r'''
grads = {}
with torch.no_grad():
    probs = F.softmax(out, 1)
    probs[torch.arange(len(Yb)), Yb] -= 1
    grads['out'] = probs / len(Yb)
    grads['last'] = grads['out'] @ Wo.T
    grads['Wo'] = last.T @ grads['out']
    grads['bo'] = grads['out'].sum(0)
    grads['a3'] = torch.zeros_like(a3)
    grads['a3'][:, :, -1] = grads['last']
    grads['p3'] = grads['a3'] * (1 - a3**2)
    grads['a2'], grads['k3'], grads['c3'] = conv_back(grads['p3'], a2, k3, 4)
    grads['p2'] = grads['a2'] * (1 - p2**2)
    grads['a1'], grads['k2'], grads['c2'] = conv_back(grads['p2'], a1, k2, 2)
    grads['p1'] = grads['a1'] * (1 - a1**2)
    grads['xin'], grads['k1'], grads['c1'] = conv_back(grads['p1'], xin, k1, 1)
    grads['emb'] = grads['xin'].transpose(1, 2)
    grads['table'] = torch.zeros_like(table)
    grads['table'].index_add_(0, Xb.view(-1), grads['emb'].reshape(-1, nE))
print(' | '.join(rel(k) for k in grads))
''',
]

CONVH6_KEY = {"logits": "out", "last": "last", "h3": "a3", "h3pre": "p3", "h2": "a2",
              "h2pre": "p2", "h1": "a1", "h1pre": "p1", "x": "xin", "emb": "emb", "C": "table",
              "W": "Wo", "b": "bo", "w1": "k1", "b1": "c1", "w2": "k2", "b2": "c2", "w3": "k3",
              "b3": "c3"}

add("conv_h6_as_strided_matmul_tanh_pre_slip", "conv", CONVH6_CELLS, CONV_STEPS,
    wrong=["conv/h2pre"],
    cascade=["conv/h1", "conv/h1pre", "conv/x", "conv/emb", "conv/C"],
    notes="own data (manual_seed(5) randperm, windows of a dot-padded sequence), parameters as "
          "globals under own names; each conv a matmul on as_strided patches [B, T, C_in * 2] "
          "against the flattened kernel; abbreviated activations, gradients in a dict keyed by "
          "name; conv_back folding the patches back with two slice-adds, tanh layers one by one; "
          "rel() printout; batch 50; exercise 1 only. Slip: layer 2's tanh backward uses the "
          "pre-activation (1 - p2**2); h1, h1pre, x, emb, C cascade",
    where=where("conv", CONV_STEPS, fwd=CONVH6_KEY, grad=lambda k: f"grads['{CONVH6_KEY[k]}']"),
    fix=[("grads['a2'] * (1 - p2**2)", "grads['a2'] * (1 - a2**2)")])
