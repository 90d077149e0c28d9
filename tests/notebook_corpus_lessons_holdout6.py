"""Learners' own notebooks for the gpt, lstm and conv lessons, with each step's truth: a sixth
corpus, holdout half (written without reading its tune half, notebook_corpus_lessons_tune6).

Six notebooks: four for gpt, one for lstm, one for conv, in layouts that the earlier corpora
(notebook_corpus_lessons_tune, _tune3, _tune4, _tune5 as their docstrings describe them) do not
use: a flat script of numbered temporaries, CS231n-style (out, cache) layers whose namedtuple
caches are the backward's arguments, two mirrored dataclasses with the attention heads folded
into the batch dimension, a forward from torch.nn.functional with a backward looping over the
examples of the batch, one Karpathy-style LSTM weight matrix with exercise 1 as a generator, and
convolutions as dense Toeplitz matrices. Each is a learner's own notebook: the lesson's forward
pass copied in (renamed and re-laid-out), their own loading of 'names.txt' (the truth runner
points it at data/names.txt), their own seed and init, the backward pass in a layout matching
the forward, their own comparison helper (none named cmp), and in four of the six a training
loop of at most 300 steps on their own gradients with an update of their own. Architecture
sizes are the lessons' [lesson] sizes throughout (gpt_h2 trains the lesson's n-layer model with
n_layer = 2); batch sizes equal no other size of their lesson (gpt 5, 9 / 12, 6, 3 / 10;
lstm 19 / 25; conv 30 / 40).

Layouts in this half:
  gpt_h1   a flat script: the forward pass as numbered temporaries t1 ... t36, each commented
           with the lecture tensor it is, parameters as plain globals under own short names
           (E_tok, s1 / o1, W_in, W_dn, ...); every temporary's .grad retained by a loop over
           globals(); the backward pass as numbered d1 ... d36 at top level with no no_grad (as
           in the lecture), first branches held and completed in place with +=; agree() helper.
           Exercise 1 only.
  gpt_h2   exercises 2 and 3 only: `*_forward` functions returning (out, cache), each cache a
           namedtuple whose fields are the matching backward's other arguments
           (Norm(inp, weight, mean, rstd), Attn(qkv, att, n_head), ...), so the model calls
           `layernorm_backward(dx, *cache)`; scatter_add_ in the encoder; agrees() against
           torch.autograd.grad and adamw against torch.optim.AdamW; a 2-layer model in a flat dict
           keyed '0.qkv.w', ..., per-layer cache dicts, gpt_backward walking the layers
           reversed; 120 steps of the learner's adamw_update.
  gpt_h3   parameters in a dataclass Params and activations in a dataclass Acts under own field
           names; the heads folded into the batch dimension (torch.cat(u.split(HS, -1), 0),
           [NH * n, T, HS]) and unfolded again, as some TensorFlow transformer code does; the
           backward on a detached copy, gradients in a second Acts instance and a zero Params
           instance filled in place (scatter_add_ for the logits, addcmul_, masked_fill_,
           index_add_), first branches held; verdict() helper. Exercise 1 only.
  gpt_h4   parameters in a nested dict (P['attn']['qkv']['w']) with nn.Linear's (out, in)
           weights; the forward from torch.nn.functional (F.embedding, F.layer_norm without
           affine plus the learner's own gain and bias, F.linear, F.gelu(approximate='tanh'))
           into a nested cache dict, so lnf's mean / xc / var / rstd never exist (those four
           steps not attempted); one @torch.no_grad backward function looping over the examples
           of the batch, writing each example's activation gradients at [b] into a preallocated
           nested dict and summing the parameter gradients, the head's share of dwte kept in
           `head`; gap() helper; 150 steps of SGD with momentum on it.
  lstm_h5  the weights in one matrix as in Karpathy's lstm.py, WLSTM [1 + D + H, 4H] (bias row,
           input rows, recurrent rows), step t as `Hin @ W_now` with Hin = [1, x_t, h_prev], the
           setup's run_lstm fed the pieces cut out of it; exercise 1 as a generator yielding one
           step's gradients at a time as (label, dict), each cell calling take() (next(), merge
           into a dict d, compare with retained .grad), the first branches under keys of their
           own; fused gates through torch.where on a candidate-gate mask; lstm_step_backward, and
           lstm_backward collecting per-step pieces in lists; 200 steps of Adagrad on it.
  conv_h6  each dilated causal convolution as one dense Toeplitz matrix [C_in * T, C_out * T],
           built by torch.einsum from the lesson-shaped taps [out, in, 2] and two [T, T] shift
           matrices (torch.diag(ones, d) and the identity), applied to the flattened activations;
           its backward the matrix's gradient folded back onto the taps by the same einsum the
           other way round; gradients in one dict keyed by tuples (('u', 3), ('r', 0), ...),
           layers 3..1 in a loop, dC as a one-hot matmul; off_by() helper; 200 steps of SGD with
           momentum through a step function on the same matrices.

Slips (each case's "notes" says which): gpt_h1 writes dv = att @ datty, the transpose of att
missing (block/att wrong; qkv, ln1, ln1_affine, x0, wpe, wte cascade, while preatt_masked,
preatt and qk, fed by datt alone, stay right); lstm_h5 takes df = dc * c with the new cell state
where c_prev belongs (step/c wrong; gates, ifgo, inputs and fused/gates cascade; its
lstm_step_backward, lstm_backward and training have code of their own and are right). The other
four notebooks are right throughout. No notebook is copied from the other corpora.

Written apart from the grader: from the lessons' forward passes, pack.toml's [lesson] / [setup] /
[forward] tables, exercises/conv/forward.py, `backprop-tutor --pack X list / show` and the earlier
corpora's format only, without reading the tutor's code or the steps' solutions, mistakes, hints
or explanations, and without running the grader on these notebooks. Every label was measured by
running the notebook, not judged by eye:

    .venv/bin/python tests/lesson_corpus_truth.py notebook_corpus_lessons_holdout6

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
# GPT H1 (a slip and its cascades). Own data (a torch.randperm shuffle from Generator(31337), rows
# cut from '.' + name + a run of '.' padding, strings mapped through a dict), parameters as plain
# globals under the learner's own short names (E_tok, E_pos, s1 / o1, W_in, W_o, W_up, W_dn,
# s3 / o3, ...). A flat script: the forward pass as numbered temporaries t1 ... t36, each with a
# comment naming the lecture's tensor; every temporary's .grad retained by a loop over globals();
# then the backward pass as numbered d1 ... d36 at top level (no no_grad, as in the lecture),
# first branches held (completed later in place with +=), an `agree(label, mine, ref)` helper.
# Batch 5; exercise 1 only.
# Slip: through atty = att @ v the learner writes dv = att @ datty (the transpose of att
# missing): block/att is wrong, and qkv, ln1, ln1_affine, x0, wpe, wte cascade (preatt_masked,
# preatt and qk, fed by datt alone, stay right).

GPTH1_CELLS = [
    md("# transformer block, backward by hand\n"
       "Numbered temporaries: `tK` forward, `dK` its gradient. The comment says which lecture "
       "tensor it is."),
    r'''
import math
import torch
import torch.nn.functional as F
''',
    r'''
text = open('names.txt').read()
names = [w for w in text.split('\n') if w]
order = torch.randperm(len(names), generator=torch.Generator().manual_seed(31337)).tolist()
names = [names[j] for j in order]
alphabet = '.' + ''.join(sorted(set(''.join(names))))
code = {ch: j for j, ch in enumerate(alphabet)}
V = len(alphabet)
T, C, NH = 16, 32, 4
HS = C // NH
padded = [('.' + w + '.' * (T + 1))[:T + 1] for w in names]
seq = torch.tensor([[code[ch] for ch in row] for row in padded])
ntr = int(0.9 * len(seq))
print(seq.shape, V, padded[0])
''',
    r'''
torch.manual_seed(8)

def mat(i, o, s=1.0):
    return (torch.randn(i, o) * s / i**0.5).requires_grad_()

def vec(k, around=0.0):
    return (around + 0.1 * torch.randn(k)).requires_grad_()

E_tok = (0.1 * torch.randn(V, C)).requires_grad_()
E_pos = (0.1 * torch.randn(T, C)).requires_grad_()
s1, o1 = vec(C, 1.0), vec(C)        # ln1 scale / offset
W_in, b_in = mat(C, 3 * C), vec(3 * C)
W_o, b_o = mat(C, C, 0.5), vec(C)
s2, o2 = vec(C, 1.0), vec(C)        # ln2
W_up, b_up = mat(C, 4 * C), vec(4 * C)
W_dn, b_dn = mat(4 * C, C, 0.5), vec(C)
s3, o3 = vec(C, 1.0), vec(C)        # final ln
params = [E_tok, E_pos, s1, o1, W_in, b_in, W_o, b_o, s2, o2, W_up, b_up, W_dn, b_dn, s3, o3]
print(sum(p.numel() for p in params))
''',
    md("## forward"),
    r'''
B = 5
ix = torch.randint(0, ntr, (B,))
Xb, Yb = seq[ix, :T], seq[ix, T]

t1 = E_tok[Xb]                                            # tok
t2 = t1 + E_pos                                           # x0
t3 = t2.mean(-1, keepdim=True)                            # ln1_mean
t4 = t2 - t3                                              # ln1_xc
t5 = (t4**2).mean(-1, keepdim=True)                       # ln1_var
t6 = (t5 + 1e-5)**-0.5                                    # ln1_rstd
t7 = t4 * t6                                              # ln1_norm
t8 = t7 * s1 + o1                                         # ln1
t9 = t8 @ W_in + b_in                                     # qkv
t10 = t9[:, :, :C].view(B, T, NH, HS).transpose(1, 2)     # q
t11 = t9[:, :, C:2*C].view(B, T, NH, HS).transpose(1, 2)  # k
t12 = t9[:, :, 2*C:].view(B, T, NH, HS).transpose(1, 2)   # v
t13 = t10 @ t11.transpose(-2, -1) * HS**-0.5              # preatt
tri = torch.tril(torch.ones(T, T))
t14 = t13.masked_fill(tri == 0, float('-inf'))            # preatt_masked
t15 = F.softmax(t14, dim=-1)                              # att
t16 = t15 @ t12                                           # atty
t17 = t16.transpose(1, 2).contiguous().view(B, T, C)      # y
t18 = t17 @ W_o + b_o                                     # attproj
t19 = t2 + t18                                            # x1
t20 = t19.mean(-1, keepdim=True)                          # ln2_mean
t21 = t19 - t20                                           # ln2_xc
t22 = (t21**2).mean(-1, keepdim=True)                     # ln2_var
t23 = (t22 + 1e-5)**-0.5                                  # ln2_rstd
t24 = t21 * t23                                           # ln2_norm
t25 = t24 * s2 + o2                                       # ln2
t26 = t25 @ W_up + b_up                                   # fch
t27 = 0.5 * t26 * (1 + torch.tanh(math.sqrt(2 / math.pi) * (t26 + 0.044715 * t26**3)))  # fch_gelu
t28 = t27 @ W_dn + b_dn                                   # fcproj
t29 = t19 + t28                                           # x2
t30 = t29.mean(-1, keepdim=True)                          # lnf_mean
t31 = t29 - t30                                           # lnf_xc
t32 = (t31**2).mean(-1, keepdim=True)                     # lnf_var
t33 = (t32 + 1e-5)**-0.5                                  # lnf_rstd
t34 = t31 * t33                                           # lnf_norm
t35 = t34 * s3 + o3                                       # lnf
t36 = t35 @ E_tok.T                                       # logits
tgt = torch.cat([Xb[:, 1:], Yb[:, None]], dim=1)
loss = F.cross_entropy(t36.view(-1, V), tgt.view(-1))
print(loss.item())
''',
    r'''
temps = {k: v for k, v in globals().items() if k[0] == 't' and k[1:].isdigit()}
for v in temps.values():
    v.retain_grad()
loss.backward()
print(len(temps), 'temporaries kept')
''',
    r'''
def agree(label, mine, ref):
    err = (mine - ref).abs().max().item()
    ok = torch.allclose(mine, ref, rtol=1e-4, atol=1e-6)
    print(f"{label:6s} {'ok' if ok else 'NO'}  {err:.1e}")
''',
    md("## backward, top down"),
    r'''
# logits
d36 = F.softmax(t36, -1)
d36.view(-1, V)[torch.arange(B * T), tgt.view(-1)] -= 1
d36 /= B * T
agree('t36', d36, t36.grad)
''',
    r'''
# lnf, and what the head gives E_tok
d35 = d36 @ E_tok
dE_tok = d36.view(-1, V).T @ t35.view(-1, C)
agree('t35', d35, t35.grad)
''',
    r'''
# lnf = lnf_norm * s3 + o3
d34 = d35 * s3
ds3 = (d35 * t34).sum((0, 1))
do3 = d35.sum((0, 1))
agree('t34', d34, t34.grad); agree('s3', ds3, s3.grad); agree('o3', do3, o3.grad)
''',
    r'''
# lnf_norm = lnf_xc * lnf_rstd
d33 = (d34 * t31).sum(-1, keepdim=True)
d31 = d34 * t33
agree('t33', d33, t33.grad)
''',
    r'''
# lnf_rstd = (lnf_var + eps)**-0.5
d32 = -0.5 * (t32 + 1e-5)**-1.5 * d33
agree('t32', d32, t32.grad)
''',
    r'''
# lnf_var = mean(lnf_xc**2): second branch into lnf_xc
d31 += 2 * t31 / C * d32
agree('t31', d31, t31.grad)
''',
    r'''
# lnf_xc = x2 - lnf_mean
d30 = -d31.sum(-1, keepdim=True)
d29 = d31.clone()
agree('t30', d30, t30.grad)
''',
    r'''
# lnf_mean = x2.mean(-1)
d29 += d30 / C
agree('t29', d29, t29.grad)
''',
    r'''
# x2 = x1 + fcproj
d28 = d29
d19 = d29.clone()
agree('t28', d28, t28.grad)
''',
    r'''
# fcproj = gelu @ W_dn + b_dn
d27 = d28 @ W_dn.T
dW_dn = t27.view(-1, 4 * C).T @ d28.view(-1, C)
db_dn = d28.sum((0, 1))
agree('t27', d27, t27.grad); agree('W_dn', dW_dn, W_dn.grad); agree('b_dn', db_dn, b_dn.grad)
''',
    r'''
# gelu
k0 = math.sqrt(2 / math.pi)
u = torch.tanh(k0 * (t26 + 0.044715 * t26**3))
d26 = d27 * (0.5 * (1 + u) + 0.5 * t26 * (1 - u**2) * k0 * (1 + 3 * 0.044715 * t26**2))
agree('t26', d26, t26.grad)
''',
    r'''
# fch = ln2 @ W_up + b_up
d25 = d26 @ W_up.T
dW_up = t25.view(-1, C).T @ d26.view(-1, 4 * C)
db_up = d26.sum((0, 1))
agree('t25', d25, t25.grad); agree('W_up', dW_up, W_up.grad); agree('b_up', db_up, b_up.grad)
''',
    r'''
# ln2 = ln2_norm * s2 + o2
d24 = d25 * s2
ds2 = (d25 * t24).sum((0, 1))
do2 = d25.sum((0, 1))
agree('t24', d24, t24.grad); agree('s2', ds2, s2.grad); agree('o2', do2, o2.grad)
''',
    r'''
# the whole of ln2 back into x1 in one line (mean and var both depend on x1)
d19 += t23 * (d24 - d24.mean(-1, keepdim=True) - t24 * (d24 * t24).mean(-1, keepdim=True))
agree('t19', d19, t19.grad)
''',
    r'''
# x1 = x0 + attproj
d18 = d19
d2 = d19.clone()
# attproj = y @ W_o + b_o
d17 = d18 @ W_o.T
dW_o = t17.view(-1, C).T @ d18.view(-1, C)
db_o = d18.sum((0, 1))
agree('t18', d18, t18.grad); agree('t17', d17, t17.grad); agree('W_o', dW_o, W_o.grad)
''',
    r'''
# y = atty re-joined: split it into heads again
d16 = d17.view(B, T, NH, HS).transpose(1, 2)
agree('t16', d16, t16.grad)
''',
    r'''
# atty = att @ v
d15 = d16 @ t12.transpose(-2, -1)
d12 = t15 @ d16
agree('t15', d15, t15.grad); agree('t12', d12, t12.grad)
''',
    r'''
# softmax along the last dim
d14 = t15 * (d15 - (t15 * d15).sum(-1, keepdim=True))
# mask: nothing flows into the masked places
d13 = d14.masked_fill(tri == 0, 0.0)
# preatt = q @ k^T / sqrt(HS)
d10 = d13 @ t11 * HS**-0.5
d11 = d13.transpose(-2, -1) @ t10 * HS**-0.5
agree('t14', d14, t14.grad); agree('t13', d13, t13.grad); agree('t10', d10, t10.grad); agree('t11', d11, t11.grad)
''',
    r'''
# q, k, v back into qkv
d9 = torch.cat([dd.transpose(1, 2).reshape(B, T, C) for dd in (d10, d11, d12)], dim=-1)
d8 = d9 @ W_in.T
dW_in = t8.view(-1, C).T @ d9.view(-1, 3 * C)
db_in = d9.sum((0, 1))
agree('t9', d9, t9.grad); agree('t8', d8, t8.grad); agree('W_in', dW_in, W_in.grad)
''',
    r'''
# ln1
d7 = d8 * s1
ds1 = (d8 * t7).sum((0, 1))
do1 = d8.sum((0, 1))
d2 += t6 * (d7 - d7.mean(-1, keepdim=True) - t7 * (d7 * t7).mean(-1, keepdim=True))
agree('t7', d7, t7.grad); agree('s1', ds1, s1.grad); agree('t2', d2, t2.grad)
''',
    r'''
# x0 = tok + E_pos, tok = E_tok[Xb]
d1 = d2
dE_pos = d2.sum(0)
dE_tok.index_add_(0, Xb.view(-1), d1.view(-1, C))
agree('t1', d1, t1.grad); agree('E_pos', dE_pos, E_pos.grad); agree('E_tok', dE_tok, E_tok.grad)
''',
]

GPTH1_T = {"tok": 1, "x0": 2, "ln1_mean": 3, "ln1_xc": 4, "ln1_var": 5, "ln1_rstd": 6,
           "ln1_norm": 7, "ln1": 8, "qkv": 9, "q": 10, "k": 11, "v": 12, "preatt": 13,
           "preatt_masked": 14, "att": 15, "atty": 16, "y": 17, "attproj": 18, "x1": 19,
           "ln2_mean": 20, "ln2_xc": 21, "ln2_var": 22, "ln2_rstd": 23, "ln2_norm": 24,
           "ln2": 25, "fch": 26, "fch_gelu": 27, "fcproj": 28, "x2": 29, "lnf_mean": 30,
           "lnf_xc": 31, "lnf_var": 32, "lnf_rstd": 33, "lnf_norm": 34, "lnf": 35, "logits": 36}
GPTH1_PAR = {"wte": "E_tok", "wpe": "E_pos", "ln1w": "s1", "ln1b": "o1", "qkvw": "W_in",
             "qkvb": "b_in", "attprojw": "W_o", "attprojb": "b_o", "ln2w": "s2", "ln2b": "o2",
             "fcw": "W_up", "fcb": "b_up", "fcprojw": "W_dn", "fcprojb": "b_dn", "lnfw": "s3",
             "lnfb": "o3"}

add("gpt_h1_numbered_temporaries_dv_untransposed_slip", "gpt", GPTH1_CELLS, GPT_STEPS,
    wrong=["block/att"],
    cascade=["block/qkv", "block/ln1", "block/ln1_affine", "block/x0", "block/wpe", "block/wte"],
    notes="own data (Generator(31337) randperm, rows cut from '.' + name + '.' padding), "
          "parameters as plain globals under own short names; a flat script of numbered "
          "temporaries t1..t36 commented with the lecture's names, .grad retained by a loop over "
          "globals(), then d1..d36 at top level with first branches "
          "held and completed in place; agree() helper; batch 5; exercise 1 only. Slip: "
          "dv = att @ datty (att's transpose missing); qkv, ln1, ln1_affine, x0, wpe, wte cascade",
    where=where("gpt", GPT_STEPS,
                fwd={**{k: f"t{j}" for k, j in GPTH1_T.items()}, **GPTH1_PAR},
                grad={**{k: f"d{j}" for k, j in GPTH1_T.items()},
                      **{k: "d" + v for k, v in GPTH1_PAR.items()}},
                first_after={"wte": "dE_tok = d36.view(-1, V).T", "lnf_xc": "d31 = d34 * t33",
                             "x2": "d29 = d31.clone()", "x1": "d19 = d29.clone()",
                             "x0": "d2 = d19.clone()"}),
    fix=[("d12 = t15 @ d16", "d12 = t15.transpose(-2, -1) @ d16")])


# ================================================================================================
# GPT H2 (right throughout). Exercises 2 and 3 only. Own data (random.seed(5) shuffle, rows made
# by torch.nn.utils.rnn.pad_sequence and F.pad), CS231n-style layers: each `*_forward` returns
# (out, cache) where the cache is a namedtuple whose fields are exactly the matching backward's
# other arguments (Norm(inp, weight, mean, rstd), Lin(inp, weight), Attn(qkv, att, n_head), ...),
# so the model's backward calls `layernorm_backward(dx, *cache)`; scatter_add_ in
# encoder_backward, flatten(0, -2) sums; each function tested by an `agrees` helper against
# torch.autograd.grad. A 2-layer model (n_layer = 2) with parameters in a flat dict keyed
# '0.qkv.w', '1.fc.b', ...; gpt_forward returns (loss, Caches) with one dict of caches per layer;
# gpt_backward walks the layers reversed. Checked once against .grad (batch 9), then 120 steps
# of the learner's adamw_update, batch 12.

GPTH2_CELLS = [
    r'''
import math
import random
from collections import namedtuple
from pathlib import Path
import torch
import torch.nn.functional as F
from torch.nn.utils.rnn import pad_sequence
''',
    r'''
words = Path('names.txt').read_text().split()
random.seed(5)
random.shuffle(words)
chars = ['.'] + sorted(set(''.join(words)))
stoi = {c: i for i, c in enumerate(chars)}
VOCAB, BLOCK, WIDTH, HEADS = len(chars), 16, 32, 4

def to_rows(ws):
    seqs = [torch.tensor([0] + [stoi[c] for c in w] + [0]) for w in ws]
    rows = pad_sequence(seqs, batch_first=True, padding_value=0)
    return F.pad(rows, (0, max(0, BLOCK + 1 - rows.shape[1])))[:, :BLOCK + 1]

train_rows = to_rows(words[:int(0.9 * len(words))])
train_rows.shape
''',
    md("## layers: forward returns (out, cache), backward takes (dout, *cache)"),
    r'''
Enc = namedtuple('Enc', 'inp vocab_size')
Norm = namedtuple('Norm', 'inp weight mean rstd')
Lin = namedtuple('Lin', 'inp weight')
Attn = namedtuple('Attn', 'qkv att n_head')
Gelu = namedtuple('Gelu', 'inp')
Xent = namedtuple('Xent', 'logits targets')
GC = math.sqrt(2 / math.pi)

def encoder_forward(wte, wpe, inp):
    return wte[inp] + wpe[:inp.shape[1]], Enc(inp, wte.shape[0])

def layernorm_forward(inp, weight, bias):
    mean = inp.mean(-1, keepdim=True)
    rstd = ((inp - mean).pow(2).mean(-1, keepdim=True) + 1e-5).rsqrt()
    return (inp - mean) * rstd * weight + bias, Norm(inp, weight, mean, rstd)

def matmul_forward(inp, weight, bias=None):
    out = inp @ weight
    return (out if bias is None else out + bias), Lin(inp, weight)

def attention_forward(qkv, n_head):
    B, T, C3 = qkv.shape
    C = C3 // 3
    hs = C // n_head
    q, k, v = (u.view(B, T, n_head, hs).transpose(1, 2) for u in qkv.split(C, -1))
    pre = (q @ k.transpose(-2, -1)) * hs**-0.5
    pre = pre.masked_fill(torch.ones(T, T).tril() == 0, float('-inf'))
    att = pre.softmax(-1)
    y = (att @ v).transpose(1, 2).reshape(B, T, C)
    return y, Attn(qkv, att, n_head)

def gelu_forward(inp):
    return 0.5 * inp * (1 + torch.tanh(GC * (inp + 0.044715 * inp**3))), Gelu(inp)

def crossentropy_forward(logits, targets):
    return F.cross_entropy(logits, targets), Xent(logits, targets)
''',
    r'''
def encoder_backward(dout, inp, vocab_size):
    C = dout.shape[-1]
    dwte = torch.zeros(vocab_size, C, dtype=dout.dtype)
    dwte.scatter_add_(0, inp.reshape(-1, 1).expand(-1, C), dout.reshape(-1, C))
    return dwte, dout.sum(0)

def layernorm_backward(dout, inp, weight, mean, rstd):
    C = inp.shape[-1]
    xhat = (inp - mean) * rstd
    dxhat = dout * weight
    # straight through xhat, then the mean's share, then rstd's share
    dinp = (dxhat - dxhat.sum(-1, keepdim=True) / C
            - xhat * (dxhat * xhat).sum(-1, keepdim=True) / C) * rstd
    return dinp, (dout * xhat).flatten(0, -2).sum(0), dout.flatten(0, -2).sum(0)

def matmul_backward(dout, inp, weight):
    d2 = dout.reshape(-1, weight.shape[1])
    return dout @ weight.T, inp.reshape(-1, weight.shape[0]).T @ d2, d2.sum(0)

def attention_backward(dout, qkv, att, n_head):
    B, T, C3 = qkv.shape
    C = C3 // 3
    hs = C // n_head
    heads = lambda u: u.reshape(B, T, n_head, hs).transpose(1, 2)
    q, k, v = (heads(u) for u in qkv.split(C, -1))
    dy = heads(dout)
    datt = dy @ v.transpose(-2, -1)
    dv = att.transpose(-2, -1) @ dy
    dpre = att * (datt - (att * datt).sum(-1, keepdim=True)) * hs**-0.5
    dq = dpre @ k
    dk = dpre.transpose(-2, -1) @ q
    return torch.cat([u.transpose(1, 2).reshape(B, T, C) for u in (dq, dk, dv)], -1)

def gelu_backward(dout, inp):
    th = torch.tanh(GC * (inp + 0.044715 * inp**3))
    sech2 = 1 - th * th
    return dout * (0.5 * (1 + th) + 0.5 * inp * sech2 * GC * (1 + 3 * 0.044715 * inp * inp))

def crossentropy_softmax_backward(logits, targets):
    N = logits.shape[0]
    d = logits.softmax(-1)
    d[torch.arange(N), targets] -= 1
    return d / N

def adamw_update(param, grad, m, v, t, lr, beta1, beta2, eps, weight_decay):
    m *= beta1
    m += (1 - beta1) * grad
    v *= beta2
    v += (1 - beta2) * grad.square()
    step = lr * (m / (1 - beta1**t)) / ((v / (1 - beta2**t)).sqrt() + eps)
    param *= 1 - lr * weight_decay
    param -= step
''',
    r'''
def agrees(label, got, want):
    got = got if isinstance(got, (tuple, list)) else [got]
    worst = max((a - b).abs().max().item() for a, b in zip(got, want))
    print(f"{label:10s} worst {worst:.1e}", 'ok' if worst < 1e-4 else 'CHECK')

gt = torch.Generator().manual_seed(11)
rnd = lambda *s: torch.randn(*s, generator=gt)

ids = torch.randint(0, 9, (2, 5), generator=gt)
E_, P_ = rnd(9, 6).requires_grad_(), rnd(5, 6).requires_grad_()
out, cache = encoder_forward(E_, P_, ids)
dout = rnd(*out.shape)
agrees('encoder', encoder_backward(dout, *cache), torch.autograd.grad(out, [E_, P_], dout))

x_ = (rnd(2, 5, 6) * 3 + 1).requires_grad_()
w_, b_ = rnd(6).requires_grad_(), rnd(6).requires_grad_()
out, cache = layernorm_forward(x_, w_, b_)
dout = rnd(*out.shape)
agrees('layernorm', layernorm_backward(dout, *cache), torch.autograd.grad(out, [x_, w_, b_], dout))

W_, c_ = rnd(6, 7).requires_grad_(), rnd(7).requires_grad_()
out, cache = matmul_forward(x_, W_, c_)
dout = rnd(*out.shape)
agrees('matmul', matmul_backward(dout, *cache), torch.autograd.grad(out, [x_, W_, c_], dout))

qkv_ = rnd(2, 5, 18).requires_grad_()
out, cache = attention_forward(qkv_, 3)
dout = rnd(*out.shape)
agrees('attention', attention_backward(dout, *cache), torch.autograd.grad(out, [qkv_], dout))

out, cache = gelu_forward(x_)
dout = rnd(*out.shape)
agrees('gelu', gelu_backward(dout, *cache), torch.autograd.grad(out, [x_], dout))

lg_ = rnd(11, 9).requires_grad_()
out, cache = crossentropy_forward(lg_, torch.randint(0, 9, (11,), generator=gt))
agrees('xent', crossentropy_softmax_backward(*cache), torch.autograd.grad(out, [lg_]))
''',
    r'''
# adamw against torch's own, two steps
p0, g0 = rnd(4, 3), rnd(4, 3)
ref = p0.clone().requires_grad_()
opt = torch.optim.AdamW([ref], lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
mine, m0, v0 = p0.clone(), torch.zeros(4, 3), torch.zeros(4, 3)
for t_ in (1, 2):
    ref.grad = g0.clone()
    opt.step()
    adamw_update(mine, g0, m0, v0, t_, 1e-2, 0.9, 0.95, 1e-8, 0.1)
print('adamw', (mine - ref.detach()).abs().max().item())
''',
    md("## the model: two blocks, caches per layer"),
    r'''
N_LAYER = 2
Caches = namedtuple('Caches', 'enc blocks lnf head xent')

def init_params(seed):
    gen = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=gen)
    res = (2 * N_LAYER) ** -0.5
    P = {'tok': 0.1 * r(VOCAB, WIDTH), 'pos': 0.1 * r(BLOCK, WIDTH)}
    for l in range(N_LAYER):
        P[f'{l}.ln1.w'], P[f'{l}.ln1.b'] = 1 + 0.1 * r(WIDTH), 0.1 * r(WIDTH)
        P[f'{l}.qkv.w'], P[f'{l}.qkv.b'] = r(WIDTH, 3 * WIDTH) / WIDTH**0.5, 0.1 * r(3 * WIDTH)
        P[f'{l}.proj.w'], P[f'{l}.proj.b'] = res * r(WIDTH, WIDTH) / WIDTH**0.5, 0.1 * r(WIDTH)
        P[f'{l}.ln2.w'], P[f'{l}.ln2.b'] = 1 + 0.1 * r(WIDTH), 0.1 * r(WIDTH)
        P[f'{l}.fc.w'], P[f'{l}.fc.b'] = r(WIDTH, 4 * WIDTH) / WIDTH**0.5, 0.1 * r(4 * WIDTH)
        P[f'{l}.down.w'], P[f'{l}.down.b'] = res * r(4 * WIDTH, WIDTH) / (4 * WIDTH)**0.5, 0.1 * r(WIDTH)
    P['lnf.w'], P['lnf.b'] = 1 + 0.1 * r(WIDTH), 0.1 * r(WIDTH)
    return P

def gpt_forward(P, X, Y):
    B, T = X.shape
    x, enc = encoder_forward(P['tok'], P['pos'], X)
    blocks = []
    for l in range(N_LAYER):
        c = {}
        h, c['ln1'] = layernorm_forward(x, P[f'{l}.ln1.w'], P[f'{l}.ln1.b'])
        h, c['qkv'] = matmul_forward(h, P[f'{l}.qkv.w'], P[f'{l}.qkv.b'])
        h, c['attn'] = attention_forward(h, HEADS)
        h, c['proj'] = matmul_forward(h, P[f'{l}.proj.w'], P[f'{l}.proj.b'])
        x = x + h
        h, c['ln2'] = layernorm_forward(x, P[f'{l}.ln2.w'], P[f'{l}.ln2.b'])
        h, c['fc'] = matmul_forward(h, P[f'{l}.fc.w'], P[f'{l}.fc.b'])
        h, c['gelu'] = gelu_forward(h)
        h, c['down'] = matmul_forward(h, P[f'{l}.down.w'], P[f'{l}.down.b'])
        x = x + h
        blocks.append(c)
    h, lnf = layernorm_forward(x, P['lnf.w'], P['lnf.b'])
    logits, head = matmul_forward(h, P['tok'].T)
    targets = torch.cat([X[:, 1:], Y[:, None]], dim=1)
    loss, xent = crossentropy_forward(logits.reshape(B * T, VOCAB), targets.reshape(B * T))
    return loss, Caches(enc, blocks, lnf, head, xent)

def gpt_backward(P, cc):
    B, T = cc.enc.inp.shape
    gr = {}
    dlogits = crossentropy_softmax_backward(*cc.xent).view(B, T, VOCAB)
    dh, dtokT, _ = matmul_backward(dlogits, *cc.head)
    dx, gr['lnf.w'], gr['lnf.b'] = layernorm_backward(dh, *cc.lnf)
    for l in reversed(range(N_LAYER)):
        c = cc.blocks[l]
        dh, gr[f'{l}.down.w'], gr[f'{l}.down.b'] = matmul_backward(dx, *c['down'])
        dh = gelu_backward(dh, *c['gelu'])
        dh, gr[f'{l}.fc.w'], gr[f'{l}.fc.b'] = matmul_backward(dh, *c['fc'])
        dh, gr[f'{l}.ln2.w'], gr[f'{l}.ln2.b'] = layernorm_backward(dh, *c['ln2'])
        dx = dx + dh
        dh, gr[f'{l}.proj.w'], gr[f'{l}.proj.b'] = matmul_backward(dx, *c['proj'])
        dh = attention_backward(dh, *c['attn'])
        dh, gr[f'{l}.qkv.w'], gr[f'{l}.qkv.b'] = matmul_backward(dh, *c['qkv'])
        dh, gr[f'{l}.ln1.w'], gr[f'{l}.ln1.b'] = layernorm_backward(dh, *c['ln1'])
        dx = dx + dh
    dtok, gr['pos'] = encoder_backward(dx, *cc.enc)
    gr['tok'] = dtok + dtokT.T
    return gr
''',
    r'''
P = init_params(2025)
for p in P.values():
    p.requires_grad_(True)
rows = train_rows[:9]
loss, cc = gpt_forward(P, rows[:, :BLOCK], rows[:, BLOCK])
loss.backward()
with torch.no_grad():
    mine = gpt_backward(P, cc)
for k in P:
    print(f"{k:12s} {(mine[k] - P[k].grad).abs().max().item():.1e}")
''',
    md("## training: my backward, my AdamW"),
    r'''
for p in P.values():
    p.requires_grad_(False)
    p.grad = None
m1 = {k: torch.zeros_like(p) for k, p in P.items()}
m2 = {k: torch.zeros_like(p) for k, p in P.items()}
losses = []
for step in range(1, 121):
    rows = train_rows[torch.randint(0, len(train_rows), (12,))]
    xb, yb = rows[:, :BLOCK], rows[:, BLOCK]
    loss, cc = gpt_forward(P, xb, yb)
    grads = gpt_backward(P, cc)
    for k in P:   # one AdamW step per tensor
        adamw_update(P[k], grads[k], m1[k], m2[k], step, 3e-3, 0.9, 0.95, 1e-8, 0.01)
    losses.append(loss.item())
print(losses[0], sum(losses[-12:]) / 12)
''',
]

add("gpt_h2_cs231n_caches_two_layers_adamw", "gpt", GPTH2_CELLS, GPT_FUNCS + ["train/gpt"],
    notes="exercises 2 and 3 only: own data (random.seed(5), pad_sequence rows); *_forward "
          "functions returning (out, cache) with namedtuple caches whose fields are the "
          "backward's other arguments, called as layernorm_backward(dx, *cache); scatter_add_ "
          "encoder; agrees() against autograd; a 2-layer model in a flat dict keyed '0.qkv.w', "
          "gpt_backward walking the layers reversed, checked at batch 9; own adamw_update, 120 "
          "steps, batch 12; all right",
    functions={s: None for s in GPT_FUNCS},
    train={"cell": "for step in range(1, 121)", "probe": "# one AdamW step per tensor",
           "params": "P", "grads": "grads", "ref": "lambda Q: gpt_forward(Q, xb, yb)[0]",
           "losses": "losses"})


# ================================================================================================
# GPT H3 (right throughout). Own data (random.Random(1861).shuffle of stripped lines, rows built
# by an `encode` function), parameters in a dataclass `Params` under the learner's own field names
# (emb, pos, g_a / b_a, w_qkv / c_qkv, w_out, w_up, w_dn, g_f / b_f, ...), every activation a
# field of a dataclass `Acts` (emb, s0, avg_a / dev_a / msq_a / inv_a / unit_a / out_a, mix, Q, K,
# Vv, S, S_m, A, Z, Zcat, o, s1, up, act, down, s2, ..._f, z) filled by `forward`. The heads are
# folded into the batch dimension, torch.cat(u.split(HS, -1), 0) -> [NH * n, T, HS], and
# unfolded with torch.cat(u.split(n, 0), -1), as some TensorFlow transformer code does. The
# backward works on a detached copy of the activations: gradients fill a second `Acts` instance
# `d` and a zero `Params` instance `dp` in place (scatter_add_ for the logits, addcmul_,
# masked_fill_, index_add_ for the embedding), first branches held. `verdict` helper against
# .grad. Batch 6; exercise 1 only.

GPTH3_CELLS = [
    r'''
import math
import random
from dataclasses import dataclass, fields
import torch
import torch.nn.functional as F
''',
    r'''
with open('names.txt') as fh:
    pool = [ln.strip() for ln in fh if ln.strip()]
random.Random(1861).shuffle(pool)
letters = sorted({c for w in pool for c in w})
ID = {c: i + 1 for i, c in enumerate(letters)}
ID['.'] = 0
V = len(ID)
CTX, C, NH = 16, 32, 4
HS = C // NH

def encode(w):
    ids = [0] + [ID[c] for c in w] + [0]
    ids += [0] * (CTX + 1 - len(ids))
    return ids[:CTX + 1]

grid = torch.tensor([encode(w) for w in pool])
train_grid = grid[:int(0.8 * len(grid))]
''',
    md("Everything lives in two dataclasses; gradients get a second instance of the same class."),
    r'''
@dataclass
class Params:
    emb: torch.Tensor
    pos: torch.Tensor
    g_a: torch.Tensor
    b_a: torch.Tensor
    w_qkv: torch.Tensor
    c_qkv: torch.Tensor
    w_out: torch.Tensor
    c_out: torch.Tensor
    g_b: torch.Tensor
    b_b: torch.Tensor
    w_up: torch.Tensor
    c_up: torch.Tensor
    w_dn: torch.Tensor
    c_dn: torch.Tensor
    g_f: torch.Tensor
    b_f: torch.Tensor

    def tensors(self):
        return [getattr(self, f.name) for f in fields(self)]


@dataclass
class Acts:
    emb: torch.Tensor = None
    s0: torch.Tensor = None
    avg_a: torch.Tensor = None
    dev_a: torch.Tensor = None
    msq_a: torch.Tensor = None
    inv_a: torch.Tensor = None
    unit_a: torch.Tensor = None
    out_a: torch.Tensor = None
    mix: torch.Tensor = None
    Q: torch.Tensor = None
    K: torch.Tensor = None
    Vv: torch.Tensor = None
    S: torch.Tensor = None
    S_m: torch.Tensor = None
    A: torch.Tensor = None
    Z: torch.Tensor = None
    Zcat: torch.Tensor = None
    o: torch.Tensor = None
    s1: torch.Tensor = None
    avg_b: torch.Tensor = None
    dev_b: torch.Tensor = None
    msq_b: torch.Tensor = None
    inv_b: torch.Tensor = None
    unit_b: torch.Tensor = None
    out_b: torch.Tensor = None
    up: torch.Tensor = None
    act: torch.Tensor = None
    down: torch.Tensor = None
    s2: torch.Tensor = None
    avg_f: torch.Tensor = None
    dev_f: torch.Tensor = None
    msq_f: torch.Tensor = None
    inv_f: torch.Tensor = None
    unit_f: torch.Tensor = None
    out_f: torch.Tensor = None
    z: torch.Tensor = None
    tgt: torch.Tensor = None
    loss: torch.Tensor = None
''',
    r'''
GK = math.sqrt(2 / math.pi)
FUTURE = torch.ones(CTX, CTX).triu(1).bool()

def norm(x, g, b):
    avg = x.mean(-1, keepdim=True)
    dev = x - avg
    msq = dev.pow(2).mean(-1, keepdim=True)
    inv = (msq + 1e-5).pow(-0.5)
    unit = dev * inv
    return avg, dev, msq, inv, unit, unit * g + b

def fold(u):      # [n, T, C] -> [NH * n, T, HS], head-major
    return torch.cat(u.split(HS, dim=-1), dim=0)

def unfold(u, n):  # [NH * n, T, HS] -> [n, T, C]
    return torch.cat(u.split(n, dim=0), dim=-1)

def forward(p, X, Y):
    a = Acts()
    n, T = X.shape
    a.emb = p.emb[X]
    a.s0 = a.emb + p.pos
    a.avg_a, a.dev_a, a.msq_a, a.inv_a, a.unit_a, a.out_a = norm(a.s0, p.g_a, p.b_a)
    a.mix = a.out_a @ p.w_qkv + p.c_qkv
    a.Q, a.K, a.Vv = (fold(u) for u in a.mix.split(C, dim=-1))
    a.S = a.Q @ a.K.transpose(1, 2) * HS**-0.5
    a.S_m = a.S.masked_fill(FUTURE[:T, :T], float('-inf'))
    a.A = torch.softmax(a.S_m, dim=-1)
    a.Z = a.A @ a.Vv
    a.Zcat = unfold(a.Z, n)
    a.o = a.Zcat @ p.w_out + p.c_out
    a.s1 = a.s0 + a.o
    a.avg_b, a.dev_b, a.msq_b, a.inv_b, a.unit_b, a.out_b = norm(a.s1, p.g_b, p.b_b)
    a.up = a.out_b @ p.w_up + p.c_up
    a.act = 0.5 * a.up * (1 + torch.tanh(GK * (a.up + 0.044715 * a.up**3)))
    a.down = a.act @ p.w_dn + p.c_dn
    a.s2 = a.s1 + a.down
    a.avg_f, a.dev_f, a.msq_f, a.inv_f, a.unit_f, a.out_f = norm(a.s2, p.g_f, p.b_f)
    a.z = a.out_f @ p.emb.T
    a.tgt = torch.cat([X[:, 1:], Y[:, None]], dim=1)
    a.loss = F.cross_entropy(a.z.reshape(-1, V), a.tgt.reshape(-1))
    return a
''',
    r'''
torch.manual_seed(1861)
def r_(*s, scale=1.0, base=0.0):
    return (base + scale * torch.randn(*s)).requires_grad_()

p = Params(emb=r_(V, C, scale=0.1), pos=r_(CTX, C, scale=0.1),
           g_a=r_(C, scale=0.1, base=1.0), b_a=r_(C, scale=0.1),
           w_qkv=r_(C, 3 * C, scale=C**-0.5), c_qkv=r_(3 * C, scale=0.1),
           w_out=r_(C, C, scale=0.5 * C**-0.5), c_out=r_(C, scale=0.1),
           g_b=r_(C, scale=0.1, base=1.0), b_b=r_(C, scale=0.1),
           w_up=r_(C, 4 * C, scale=C**-0.5), c_up=r_(4 * C, scale=0.1),
           w_dn=r_(4 * C, C, scale=0.5 * (4 * C)**-0.5), c_dn=r_(C, scale=0.1),
           g_f=r_(C, scale=0.1, base=1.0), b_f=r_(C, scale=0.1))

rows = train_grid[torch.randint(0, len(train_grid), (6,))]
Xb, Yb = rows[:, :CTX], rows[:, CTX]
fw = forward(p, Xb, Yb)
for f in fields(fw):
    val = getattr(fw, f.name)
    if val.requires_grad and f.name != 'loss':
        val.retain_grad()
fw.loss.backward()
print(fw.loss.item(), fw.A.shape)
''',
    r'''
# a detached copy to do my own arithmetic on, and empty gradient holders
a = Acts(**{f.name: getattr(fw, f.name).detach() for f in fields(fw)})
w = Params(*[t.detach() for t in p.tensors()])
d = Acts()
dp = Params(*[torch.zeros_like(t) for t in w.tensors()])
n, T = Xb.shape
N = n * T

def verdict(name, holder=None):
    mine = getattr(d if holder is None else dp, name)
    ref = getattr(fw if holder is None else p, name).grad
    ok = torch.allclose(mine, ref, rtol=1e-4, atol=1e-6)
    print(f"{name:7s} {'fine' if ok else 'WRONG'} {(mine - ref).abs().max().item():.1e}")
''',
    md("### output end"),
    r'''
d.z = torch.softmax(a.z, -1).reshape(N, V)
d.z.scatter_add_(1, a.tgt.reshape(N, 1), -torch.ones(N, 1))
d.z = d.z.view(n, T, V) / N
verdict('z')
''',
    r'''
d.out_f = d.z @ w.emb
dp.emb += d.z.reshape(N, V).T @ a.out_f.reshape(N, C)
verdict('out_f')
''',
    r'''
d.unit_f = d.out_f * w.g_f
dp.g_f += (d.out_f * a.unit_f).sum((0, 1))
dp.b_f += d.out_f.sum((0, 1))
verdict('unit_f'); verdict('g_f', 1); verdict('b_f', 1)
''',
    r'''
d.inv_f = (d.unit_f * a.dev_f).sum(-1, keepdim=True)
d.dev_f = d.unit_f * a.inv_f
verdict('inv_f')
''',
    r'''
d.msq_f = -0.5 * a.inv_f**3 * d.inv_f
verdict('msq_f')
''',
    r'''
d.dev_f.addcmul_(a.dev_f, d.msq_f, value=2 / C)
verdict('dev_f')
''',
    r'''
d.avg_f = -d.dev_f.sum(-1, keepdim=True)
d.s2 = d.dev_f.clone()
verdict('avg_f')
''',
    r'''
d.s2.add_(d.avg_f / C)
verdict('s2')
''',
    md("### MLP"),
    r'''
d.down = d.s2
d.s1 = d.s2.clone()
d.act = d.down @ w.w_dn.T
dp.w_dn += a.act.reshape(N, 4 * C).T @ d.down.reshape(N, C)
dp.c_dn += d.down.sum((0, 1))
verdict('down'); verdict('act'); verdict('w_dn', 1); verdict('c_dn', 1)
''',
    r'''
th = torch.tanh(GK * (a.up + 0.044715 * a.up**3))
d.up = d.act * 0.5 * ((1 + th) + a.up * (1 - th * th) * GK * (1 + 3 * 0.044715 * a.up**2))
verdict('up')
''',
    r'''
d.out_b = d.up @ w.w_up.T
dp.w_up += a.out_b.reshape(N, C).T @ d.up.reshape(N, 4 * C)
dp.c_up += d.up.sum((0, 1))
d.unit_b = d.out_b * w.g_b
dp.g_b += (d.out_b * a.unit_b).sum((0, 1))
dp.b_b += d.out_b.sum((0, 1))
verdict('out_b'); verdict('unit_b'); verdict('w_up', 1); verdict('g_b', 1)
''',
    r'''
du = d.unit_b
d.s1 += a.inv_b * (du - du.mean(-1, keepdim=True) - a.unit_b * (du * a.unit_b).mean(-1, keepdim=True))
verdict('s1')
''',
    md("### attention, heads folded into the batch"),
    r'''
d.o = d.s1
d.s0 = d.s1.clone()
d.Zcat = d.o @ w.w_out.T
dp.w_out += a.Zcat.reshape(N, C).T @ d.o.reshape(N, C)
dp.c_out += d.o.sum((0, 1))
verdict('o'); verdict('Zcat'); verdict('w_out', 1)
''',
    r'''
d.Z = fold(d.Zcat)
d.A = d.Z @ a.Vv.transpose(1, 2)
d.Vv = a.A.transpose(1, 2) @ d.Z
verdict('Z'); verdict('A'); verdict('Vv')
''',
    r'''
d.S_m = a.A * (d.A - (a.A * d.A).sum(-1, keepdim=True))
d.S = d.S_m.clone()
d.S.masked_fill_(FUTURE[:T, :T], 0.0)
verdict('S_m'); verdict('S')
''',
    r'''
d.Q = d.S @ a.K * HS**-0.5
d.K = d.S.transpose(1, 2) @ a.Q * HS**-0.5
d.mix = torch.cat([unfold(d.Q, n), unfold(d.K, n), unfold(d.Vv, n)], dim=-1)
verdict('Q'); verdict('K'); verdict('mix')
''',
    r'''
d.out_a = d.mix @ w.w_qkv.T
dp.w_qkv += a.out_a.reshape(N, C).T @ d.mix.reshape(N, 3 * C)
dp.c_qkv += d.mix.sum((0, 1))
d.unit_a = d.out_a * w.g_a
dp.g_a += (d.out_a * a.unit_a).sum((0, 1))
dp.b_a += d.out_a.sum((0, 1))
du = d.unit_a
d.s0 += a.inv_a * (du - du.mean(-1, keepdim=True) - a.unit_a * (du * a.unit_a).mean(-1, keepdim=True))
verdict('out_a'); verdict('w_qkv', 1); verdict('unit_a'); verdict('s0')
''',
    r'''
d.emb = d.s0
dp.pos += d.s0.sum(0)
dp.emb.index_add_(0, Xb.flatten(), d.emb.reshape(N, C))
verdict('emb'); verdict('pos', 1); verdict('emb', 1)
''',
]

GPTH3_ACT = {"tok": "emb", "x0": "s0", "ln1_norm": "unit_a", "ln1": "out_a", "qkv": "mix",
             "q": "Q", "k": "K", "v": "Vv", "preatt": "S", "preatt_masked": "S_m", "att": "A",
             "atty": "Z", "y": "Zcat", "attproj": "o", "x1": "s1", "ln2_norm": "unit_b",
             "ln2": "out_b", "fch": "up", "fch_gelu": "act", "fcproj": "down", "x2": "s2",
             "lnf_mean": "avg_f", "lnf_xc": "dev_f", "lnf_var": "msq_f", "lnf_rstd": "inv_f",
             "lnf_norm": "unit_f", "lnf": "out_f", "logits": "z"}
GPTH3_PAR = {"wte": "emb", "wpe": "pos", "ln1w": "g_a", "ln1b": "b_a", "qkvw": "w_qkv",
             "qkvb": "c_qkv", "attprojw": "w_out", "attprojb": "c_out", "ln2w": "g_b",
             "ln2b": "b_b", "fcw": "w_up", "fcb": "c_up", "fcprojw": "w_dn", "fcprojb": "c_dn",
             "lnfw": "g_f", "lnfb": "b_f"}

add("gpt_h3_dataclasses_heads_folded_into_batch", "gpt", GPTH3_CELLS, GPT_STEPS,
    notes="own data (Random(1861) shuffle, encode()), parameters in a dataclass Params and "
          "activations in a dataclass Acts under own field names; heads folded into the batch "
          "dimension (cat of split(HS) along dim 0) and unfolded again; backward on a detached "
          "copy, gradients in a second Acts instance d and a zero Params dp filled in place "
          "(scatter_add_, addcmul_, masked_fill_, index_add_), first branches held; verdict() "
          "helper; batch 6; exercise 1 only; all right",
    loss="fw.loss",
    where=where("gpt", GPT_STEPS,
                fwd={**{k: f"fw.{v}" for k, v in GPTH3_ACT.items()},
                     **{k: f"p.{v}" for k, v in GPTH3_PAR.items()}},
                grad={**{k: f"d.{v}" for k, v in GPTH3_ACT.items()},
                      **{k: f"dp.{v}" for k, v in GPTH3_PAR.items()}},
                first_after={"wte": "dp.emb += d.z.reshape(N, V).T",
                             "lnf_xc": "d.dev_f = d.unit_f * a.inv_f",
                             "x2": "d.s2 = d.dev_f.clone()", "x1": "d.s1 = d.s2.clone()",
                             "x0": "d.s0 = d.s1.clone()"}))


# ================================================================================================
# GPT H4 (right throughout). Own data (Generator(5150) randperm, rows from a `row` function),
# parameters in a nested dict (P['attn']['qkv']['w'], P['mlp']['ln']['g'], P['ln_f']['b'], ...)
# with the weights in nn.Linear's (out, in) orientation; the forward built from torch.nn.functional
# (F.embedding, F.layer_norm without affine followed by the learner's own gain and bias,
# F.linear, F.gelu(approximate='tanh'), F.softmax, F.cross_entropy) keeping its activations in a
# nested cache dict (c['attn']['probs'], c['mlp']['fc'], ...), so the layer norms' mean / xc /
# var / rstd never exist (lnf_mean, lnf_xc, lnf_var, lnf_rstd not attempted). The backward is
# one function that loops over the examples of the batch: each example's gradients are computed
# on its own ([T, ...] slices, the layer norm's rstd recomputed from x.var(unbiased=False)),
# written into a preallocated nested dict of activation gradients at [b] and summed into a nested
# dict of parameter gradients; the head's share of the embedding kept apart in `head` and added
# at the end; no other first branch held. Checked on a batch of 3 with a `gap` helper; then 150
# steps of SGD with momentum on that function, batch 10.

GPTH4_CELLS = [
    r'''
import math
import torch
import torch.nn.functional as F
''',
    r'''
names = open('names.txt', encoding='utf-8').read().splitlines()
perm = torch.randperm(len(names), generator=torch.Generator().manual_seed(5150))
names = [names[k] for k in perm]
vocab = ['.'] + sorted(set(''.join(names)))
lookup = {ch: k for k, ch in enumerate(vocab)}
SEQ, D_, NH = 16, 32, 4
HD = D_ // NH
NV = len(vocab)

def row(w):
    r = [lookup[ch] for ch in '.' + w + '.']
    return (r + [0] * SEQ)[:SEQ + 1]

data = torch.tensor([row(w) for w in names])
tr = data[:int(0.9 * len(data))]
print(tr.shape)
''',
    r'''
torch.manual_seed(4096)

def lin(o, i, s=1.0):
    return {'w': torch.randn(o, i) * s / math.sqrt(i), 'b': 0.1 * torch.randn(o)}

def ln(k):
    return {'g': 1 + 0.1 * torch.randn(k), 'b': 0.1 * torch.randn(k)}

P = {'wte': 0.1 * torch.randn(NV, D_), 'wpe': 0.1 * torch.randn(SEQ, D_),
     'attn': {'ln': ln(D_), 'qkv': lin(3 * D_, D_), 'proj': lin(D_, D_, 0.5)},
     'mlp': {'ln': ln(D_), 'fc': lin(4 * D_, D_), 'proj': lin(D_, 4 * D_, 0.5)},
     'ln_f': ln(D_)}

def leaves(tree, prefix=''):
    for k, v in tree.items():
        if isinstance(v, dict):
            yield from leaves(v, prefix + k + '.')
        else:
            yield prefix + k, v

def zeros_like_tree(tree):
    return {k: zeros_like_tree(v) if isinstance(v, dict) else torch.zeros_like(v)
            for k, v in tree.items()}

for _, t_ in leaves(P):
    t_.requires_grad_(True)
print([k for k, _ in leaves(P)])
''',
    md("forward with torch.nn.functional, everything I need later goes in `c`"),
    r'''
CAUSAL = torch.tril(torch.ones(SEQ, SEQ))

def forward(P, X, Y):
    n, T = X.shape
    A, M = P['attn'], P['mlp']
    c = {'attn': {}, 'mlp': {}, 'ln_f': {}}
    ca, cm, cf = c['attn'], c['mlp'], c['ln_f']
    c['tok'] = F.embedding(X, P['wte'])
    c['x0'] = c['tok'] + P['wpe']
    ca['hat'] = F.layer_norm(c['x0'], (D_,), eps=1e-5)
    ca['ln'] = ca['hat'] * A['ln']['g'] + A['ln']['b']
    ca['qkv'] = F.linear(ca['ln'], A['qkv']['w'], A['qkv']['b'])
    q, k, v = ca['qkv'].split(D_, dim=-1)
    ca['q'] = q.view(n, T, NH, HD).transpose(1, 2)
    ca['k'] = k.view(n, T, NH, HD).transpose(1, 2)
    ca['v'] = v.view(n, T, NH, HD).transpose(1, 2)
    ca['scores'] = ca['q'] @ ca['k'].transpose(-2, -1) / math.sqrt(HD)
    ca['masked'] = ca['scores'].masked_fill(CAUSAL[:T, :T] == 0, float('-inf'))
    ca['probs'] = F.softmax(ca['masked'], dim=-1)
    ca['ctx'] = ca['probs'] @ ca['v']
    ca['merged'] = ca['ctx'].transpose(1, 2).reshape(n, T, D_)
    ca['out'] = F.linear(ca['merged'], A['proj']['w'], A['proj']['b'])
    c['x1'] = c['x0'] + ca['out']
    cm['hat'] = F.layer_norm(c['x1'], (D_,), eps=1e-5)
    cm['ln'] = cm['hat'] * M['ln']['g'] + M['ln']['b']
    cm['fc'] = F.linear(cm['ln'], M['fc']['w'], M['fc']['b'])
    cm['gelu'] = F.gelu(cm['fc'], approximate='tanh')
    cm['out'] = F.linear(cm['gelu'], M['proj']['w'], M['proj']['b'])
    c['x2'] = c['x1'] + cm['out']
    cf['hat'] = F.layer_norm(c['x2'], (D_,), eps=1e-5)
    cf['ln'] = cf['hat'] * P['ln_f']['g'] + P['ln_f']['b']
    c['logits'] = F.linear(cf['ln'], P['wte'])
    c['targets'] = torch.cat([X[:, 1:], Y[:, None]], dim=1)
    loss = F.cross_entropy(c['logits'].flatten(0, 1), c['targets'].flatten())
    return loss, c
''',
    md("backward one example at a time (easier to think about), parameter grads summed"),
    r'''
K0 = math.sqrt(2 / math.pi)

def ln_back(dhat, x, hat):
    rstd = (x.var(-1, keepdim=True, unbiased=False) + 1e-5).rsqrt()
    return rstd * (dhat - dhat.mean(-1, keepdim=True) - hat * (dhat * hat).mean(-1, keepdim=True))

@torch.no_grad()
def backward(P, c, X):
    n, T = X.shape
    A, M = P['attn'], P['mlp']
    ca, cm, cf = c['attn'], c['mlp'], c['ln_f']
    gp = zeros_like_tree(P)
    ga = zeros_like_tree(c)
    head = torch.zeros_like(P['wte'])
    for b in range(n):
        prob = F.softmax(c['logits'][b], dim=-1)
        prob[torch.arange(T), c['targets'][b]] -= 1
        dlog = prob / (n * T)
        ga['logits'][b] = dlog
        # tied head
        dlnf = dlog @ P['wte']
        head += dlog.T @ cf['ln'][b]
        ga['ln_f']['ln'][b] = dlnf
        dhat = dlnf * P['ln_f']['g']
        ga['ln_f']['hat'][b] = dhat
        gp['ln_f']['g'] += (dlnf * cf['hat'][b]).sum(0)
        gp['ln_f']['b'] += dlnf.sum(0)
        dx2 = ln_back(dhat, c['x2'][b], cf['hat'][b])
        ga['x2'][b] = dx2
        # MLP
        ga['mlp']['out'][b] = dx2
        dgelu = dx2 @ M['proj']['w']
        gp['mlp']['proj']['w'] += dx2.T @ cm['gelu'][b]
        gp['mlp']['proj']['b'] += dx2.sum(0)
        ga['mlp']['gelu'][b] = dgelu
        u = cm['fc'][b]
        th = torch.tanh(K0 * (u + 0.044715 * u**3))
        dfc = dgelu * (0.5 * (1 + th) + 0.5 * u * (1 - th**2) * K0 * (1 + 3 * 0.044715 * u**2))
        ga['mlp']['fc'][b] = dfc
        dln2 = dfc @ M['fc']['w']
        gp['mlp']['fc']['w'] += dfc.T @ cm['ln'][b]
        gp['mlp']['fc']['b'] += dfc.sum(0)
        ga['mlp']['ln'][b] = dln2
        dhat2 = dln2 * M['ln']['g']
        ga['mlp']['hat'][b] = dhat2
        gp['mlp']['ln']['g'] += (dln2 * cm['hat'][b]).sum(0)
        gp['mlp']['ln']['b'] += dln2.sum(0)
        dx1 = dx2 + ln_back(dhat2, c['x1'][b], cm['hat'][b])
        ga['x1'][b] = dx1
        # attention
        ga['attn']['out'][b] = dx1
        dmerged = dx1 @ A['proj']['w']
        gp['attn']['proj']['w'] += dx1.T @ ca['merged'][b]
        gp['attn']['proj']['b'] += dx1.sum(0)
        ga['attn']['merged'][b] = dmerged
        dctx = dmerged.view(T, NH, HD).transpose(0, 1)
        ga['attn']['ctx'][b] = dctx
        probs = ca['probs'][b]
        dprobs = dctx @ ca['v'][b].transpose(-2, -1)
        dv = probs.transpose(-2, -1) @ dctx
        ga['attn']['probs'][b] = dprobs
        ga['attn']['v'][b] = dv
        dmasked = probs * (dprobs - (probs * dprobs).sum(-1, keepdim=True))
        ga['attn']['masked'][b] = dmasked
        dscores = dmasked.masked_fill(CAUSAL[:T, :T] == 0, 0.0)
        ga['attn']['scores'][b] = dscores
        dq = dscores @ ca['k'][b] / math.sqrt(HD)
        dk = dscores.transpose(-2, -1) @ ca['q'][b] / math.sqrt(HD)
        ga['attn']['q'][b] = dq
        ga['attn']['k'][b] = dk
        dqkv = torch.cat([g_.transpose(0, 1).reshape(T, D_) for g_ in (dq, dk, dv)], dim=-1)
        ga['attn']['qkv'][b] = dqkv
        dln1 = dqkv @ A['qkv']['w']
        gp['attn']['qkv']['w'] += dqkv.T @ ca['ln'][b]
        gp['attn']['qkv']['b'] += dqkv.sum(0)
        ga['attn']['ln'][b] = dln1
        dhat1 = dln1 * A['ln']['g']
        ga['attn']['hat'][b] = dhat1
        gp['attn']['ln']['g'] += (dln1 * ca['hat'][b]).sum(0)
        gp['attn']['ln']['b'] += dln1.sum(0)
        dx0 = dx1 + ln_back(dhat1, c['x0'][b], ca['hat'][b])
        ga['x0'][b] = dx0
        ga['tok'][b] = dx0
        gp['wpe'] += dx0
        gp['wte'].index_add_(0, X[b], dx0)
    gp['wte'] += head
    return gp, ga, head
''',
    r'''
bx = tr[torch.randint(0, len(tr), (3,))]
Xb, Yb = bx[:, :SEQ], bx[:, SEQ]
loss, c = forward(P, Xb, Yb)

def walk(tree, prefix=''):
    for k, v in tree.items():
        if isinstance(v, dict):
            yield from walk(v, prefix + k + '.')
        elif v.requires_grad:
            yield prefix + k, v

acts = dict(walk(c))
for v in acts.values():
    v.retain_grad()
loss.backward()
gp, ga, head = backward(P, c, Xb)
''',
    r'''
def gap(x, y):
    return (x - y).abs().max().item()

ga_flat = dict(leaves(ga))
for k, v in acts.items():
    print(f"{k:14s} {gap(ga_flat[k], v.grad):.1e}")
gp_flat = dict(leaves(gp))
for k, v in leaves(P):
    print(f"{k:14s} {gap(gp_flat[k], v.grad):.1e}")
''',
    md("## train on it"),
    r'''
for _, t_ in leaves(P):
    t_.requires_grad_(False)
    t_.grad = None
vel = {k: torch.zeros_like(t_) for k, t_ in leaves(P)}
curve = []
for it in range(150):
    bx = tr[torch.randint(0, len(tr), (10,))]
    xb, yb = bx[:, :SEQ], bx[:, SEQ]
    lv, cache = forward(P, xb, yb)
    g_tree, _, _ = backward(P, cache, xb)
    g_flat = dict(leaves(g_tree))
    for name, t_ in leaves(P):
        vel[name].mul_(0.9).add_(g_flat[name])
        t_.sub_(0.05 * vel[name])
    curve.append(lv.item())
print(curve[0], sum(curve[-15:]) / 15)
''',
]

GPTH4_ACT = {"logits": "['logits']", "lnf": "['ln_f']['ln']", "lnf_norm": "['ln_f']['hat']",
             "x2": "['x2']", "fcproj": "['mlp']['out']", "fch_gelu": "['mlp']['gelu']",
             "fch": "['mlp']['fc']", "ln2": "['mlp']['ln']", "ln2_norm": "['mlp']['hat']",
             "x1": "['x1']", "attproj": "['attn']['out']", "y": "['attn']['merged']",
             "atty": "['attn']['ctx']", "att": "['attn']['probs']", "v": "['attn']['v']",
             "preatt_masked": "['attn']['masked']", "preatt": "['attn']['scores']",
             "q": "['attn']['q']", "k": "['attn']['k']", "qkv": "['attn']['qkv']",
             "ln1": "['attn']['ln']", "ln1_norm": "['attn']['hat']", "x0": "['x0']",
             "tok": "['tok']"}
GPTH4_PAR = {"wte": "['wte']", "wpe": "['wpe']", "lnfw": "['ln_f']['g']",
             "lnfb": "['ln_f']['b']", "fcprojw": "['mlp']['proj']['w']",
             "fcprojb": "['mlp']['proj']['b']", "fcw": "['mlp']['fc']['w']",
             "fcb": "['mlp']['fc']['b']", "ln2w": "['mlp']['ln']['g']",
             "ln2b": "['mlp']['ln']['b']", "attprojw": "['attn']['proj']['w']",
             "attprojb": "['attn']['proj']['b']", "qkvw": "['attn']['qkv']['w']",
             "qkvb": "['attn']['qkv']['b']", "ln1w": "['attn']['ln']['g']",
             "ln1b": "['attn']['ln']['b']"}
GPTH4_STEPS = [s for s in GPT_STEPS
               if s not in ("block/lnf_rstd", "block/lnf_var", "block/lnf_xc", "block/lnf_mean")]
# the lesson's parameters in the learner's nested dict, (out, in) weights transposed back
GPTH4_REF = ("lambda Q: ref_gpt_loss({'wte': Q['wte'], 'wpe': Q['wpe'], "
             "'ln1w': Q['attn.ln.g'], 'ln1b': Q['attn.ln.b'], "
             "'qkvw': Q['attn.qkv.w'].T, 'qkvb': Q['attn.qkv.b'], "
             "'attprojw': Q['attn.proj.w'].T, 'attprojb': Q['attn.proj.b'], "
             "'ln2w': Q['mlp.ln.g'], 'ln2b': Q['mlp.ln.b'], "
             "'fcw': Q['mlp.fc.w'].T, 'fcb': Q['mlp.fc.b'], "
             "'fcprojw': Q['mlp.proj.w'].T, 'fcprojb': Q['mlp.proj.b'], "
             "'lnfw': Q['ln_f.g'], 'lnfb': Q['ln_f.b']}, xb, yb)")


def _h4_specs():
    fwd = {**{k: "c" + v for k, v in GPTH4_ACT.items()},
           **{k: "P" + v for k, v in GPTH4_PAR.items()}}
    grad = {**{k: "ga" + v for k, v in GPTH4_ACT.items()},
            **{k: "gp" + v for k, v in GPTH4_PAR.items()}}
    specs = no_first(where("gpt", GPTH4_STEPS, fwd=fwd, grad=grad, first_after=DROP))
    # the head's share of dwte is a value of its own, `head`, complete when backward returns
    specs["block/lnf"].append(("head", GPT_FIRST["wte"].format_map(fwd)))
    return specs


add("gpt_h4_nested_dicts_functional_per_example_loop_sgd", "gpt", GPTH4_CELLS,
    GPTH4_STEPS + ["train/gpt"],
    notes="own data (Generator(5150) randperm, row()), parameters in a nested dict with (out, in) "
          "weights; forward from torch.nn.functional (F.layer_norm without affine, F.linear, "
          "F.gelu tanh) with a nested cache dict, so lnf_mean / xc / var / rstd are not attempted; "
          "a @no_grad backward function looping over the examples of the batch, writing each "
          "example's activation gradients into a preallocated nested dict and summing parameter "
          "gradients, the head's share of dwte kept in `head`; gap() helper; batch 3; SGD with "
          "momentum on it, 150 steps, batch 10; all right",
    where=_h4_specs(),
    checkpoint="gp_flat = dict(leaves(gp))",
    train={"cell": "for it in range(150)", "probe": "for name, t_ in leaves(P):",
           "params": "dict(leaves(P))", "grads": "dict(leaves(g_tree))", "ref": GPTH4_REF,
           "losses": "curve"})


# ================================================================================================
# LSTM H5 (a slip and its cascades). Own data (names ordered by their md5 digest, rows padded in
# an `encode` function), the setup's run_lstm copied; the weights in one matrix the way
# Karpathy's lstm.py keeps them: WLSTM [1 + D + H, 4H], the bias its first row, the input and
# recurrent weights below it, step t computed as `Hin @ W_now` with Hin = [1, x_t, h_prev]
# (run_lstm gets the three pieces cut out of it by `unpack`). Exercise 1 as a generator
# `walk_back` that yields one lesson step's gradients at a time, as (label, dict); each cell does
# `take()`, which calls next(), merges the dict into `d` and compares what it got with retained
# .grad (the first branches are kept under their own keys, 'h_now<-Hs' and 'c_now<-future').
# Exercise 3's fused gates through a torch.where on a candidate-gate mask; lstm_step_backward,
# and lstm_backward collecting per-step pieces in lists; a training forward `unroll` on the same
# Hin layout; 200 steps of Adagrad (min-char-rnn's update), batch 25 (check batch 19).
# Slip: through c = f * c_prev + i * g the learner takes df = dc * c (the new cell state instead
# of c_prev): step/c is wrong, and gates, ifgo, inputs and fused/gates cascade (g and h are not
# fed by df; lstm_step_backward, lstm_backward and training have their own, right, code).

LSTMH5_CELLS = [
    r'''
import hashlib
import torch
import torch.nn.functional as F
from collections import namedtuple
''',
    r'''
lines = open('names.txt').read().splitlines()
lines.sort(key=lambda w: hashlib.md5(w.encode()).hexdigest())
abc = sorted(set(''.join(lines)))
to_id = {ch: k + 1 for k, ch in enumerate(abc)}
to_id['.'] = 0
V = len(to_id)
L = 1 + max(len(w) for w in lines)

def encode(w):
    ids = [to_id[ch] for ch in w]
    pad = L - 1 - len(ids)
    return [0] + ids + [0] * pad, ids + [0] + [-1] * pad

pairs = [encode(w) for w in lines]
Xall = torch.tensor([x for x, _ in pairs])
Yall = torch.tensor([y for _, y in pairs])
cut = int(0.8 * len(lines))

def batch(bs):
    ix = torch.randint(0, cut, (bs,))
    xb, yb = Xall[ix], Yall[ix]
    keep = int((yb >= 0).sum(1).max())
    return xb[:, :keep].contiguous(), yb[:, :keep].contiguous()
''',
    r'''
LSTMRun = namedtuple("LSTMRun", ["hs", "h", "c"])

def run_lstm(xs, h, c, Wx, Wh, b):
    hs, h, c = torch.lstm(xs, (h[None], c[None]), (Wx.T, Wh.T, b, b * 0), True, 1, 0.0, False,
                          False, True)
    return LSTMRun(hs, h[0], c[0])
''',
    md("One weight matrix like karpathy's lstm.py: row 0 the bias, then D input rows, then H "
       "recurrent rows. Gate order i, f, g, o."),
    r'''
torch.manual_seed(1123)
D, H = 10, 32
E = torch.randn(V, D)
WLSTM = torch.cat([0.1 * torch.randn(1, 4 * H),
                   torch.randn(D, 4 * H) / D**0.5,
                   torch.randn(H, 4 * H) / H**0.5])
WLSTM[0, H:2 * H] += 1.0
Wout = torch.randn(H, V) / H**0.5
bout = 0.1 * torch.randn(V)
for p_ in (E, WLSTM, Wout, bout):
    p_.requires_grad_()

def unpack(W):
    return W[1:1 + D], W[1 + D:], W[0]
''',
    r'''
Xb, Yb = batch(19)
n, t = Xb.shape[0], 3
emb = E[Xb]
zero = emb.new_zeros(n, H)
early = run_lstm(emb[:, :t], zero, zero, *unpack(WLSTM))
x_now = emb[:, t]
W_now = WLSTM.clone()
Hin = torch.cat([torch.ones(n, 1), x_now, early.h], 1)
IFGO = Hin @ W_now
pi, pf, pg, po = IFGO.split(H, 1)
si, sf, so = pi.sigmoid(), pf.sigmoid(), po.sigmoid()
tg = pg.tanh()
c_now = sf * early.c + si * tg
h_now = so * c_now.tanh()
hc = torch.stack([h_now, c_now])
late = run_lstm(emb[:, t + 1:], hc[0], hc[1], *unpack(WLSTM))
Hs = torch.cat([early.hs, h_now[:, None], late.hs], 1)
scores = Hs @ Wout + bout
loss = F.cross_entropy(scores.view(-1, V), Yb.view(-1), ignore_index=-1)

fw = dict(scores=scores, Hs=Hs, hs_early=early.hs, hs_late=late.hs, hc=hc, h_now=h_now,
          c_now=c_now, si=si, sf=sf, tg=tg, so=so, pi=pi, pf=pf, pg=pg, po=po, IFGO=IFGO,
          Hin=Hin, x_now=x_now, h_in=early.h, c_in=early.c, W_now=W_now)
for v_ in fw.values():
    v_.retain_grad()
loss.backward()
print(loss.item(), Xb.shape)
''',
    md("## exercise 1: a generator that hands me one step's gradients per `next()`"),
    r'''
def walk_back():
    v = {k: x.detach() for k, x in fw.items()}
    Wo = Wout.detach()
    keep = (Yb >= 0).float()
    dscores = F.softmax(v['scores'], -1) - F.one_hot(Yb.clamp(min=0), V)
    dscores = dscores * (keep / keep.sum())[..., None]
    yield 'logits', {'scores': dscores}

    dHs = dscores @ Wo.T
    yield 'hs', {'Hs': dHs, 'Wout': v['Hs'].flatten(0, 1).T @ dscores.flatten(0, 1),
                 'bout': dscores.sum((0, 1))}

    dh = dHs[:, t]
    yield 'h_out', {'hs_early': dHs[:, :t], 'hs_late': dHs[:, t + 1:], 'h_now<-Hs': dh}

    dhc = fw['hc'].grad           # the steps after t: autograd's part
    dh = dh + dhc[0]
    dc = dhc[1]
    yield 'state', {'h_now': dh, 'c_now<-future': dc}

    tc = v['c_now'].tanh()
    do = dh * tc
    dc = dc + dh * v['so'] * (1 - tc**2)
    yield 'h', {'so': do, 'c_now': dc}

    df = dc * v['c_now']
    dc_in = dc * v['sf']
    di = dc * v['tg']
    dg = dc * v['si']
    yield 'c', {'sf': df, 'c_in': dc_in, 'si': di, 'tg': dg}

    dpi = di * v['si'] * (1 - v['si'])
    dpf = df * v['sf'] * (1 - v['sf'])
    dpo = do * v['so'] * (1 - v['so'])
    yield 'gates', {'pi': dpi, 'pf': dpf, 'po': dpo}

    dpg = dg * (1 - v['tg']**2)
    yield 'g', {'pg': dpg}

    dIFGO = torch.cat([dpi, dpf, dpg, dpo], 1)
    yield 'ifgo', {'IFGO': dIFGO}

    dHin = dIFGO @ v['W_now'].T
    yield 'inputs', {'Hin': dHin, 'x_now': dHin[:, 1:1 + D], 'h_in': dHin[:, 1 + D:],
                     'W_now': v['Hin'].T @ dIFGO}

steps = walk_back()
d = {}
params = {'Wout': Wout, 'bout': bout}

def take():
    label, got = next(steps)
    d.update(got)
    for k, g_ in got.items():
        if '<-' in k:
            continue   # a partial gradient, nothing to compare it with yet
        ref = params[k].grad if k in params else fw[k].grad
        print(f"{label:7s} {k:9s} {(g_ - ref).abs().max().item():.2e}")
''',
    r'''
take()   # logits
''',
    r'''
take()   # Hs, Wout, bout
''',
    r'''
take()   # the output's share
''',
    r'''
take()   # state
''',
    r'''
take()   # through h = o * tanh(c)
''',
    r'''
take()   # c = f * c_prev + i * g
''',
    r'''
take()   # sigmoids
take()   # tanh of the candidate
''',
    r'''
take()   # ifgo
take()   # Hin, W_now
print('bias row', (d['W_now'][0] - W_now.grad[0]).abs().max().item())
''',
    md("## exercise 3: all four gates at once"),
    r'''
acts_t = torch.cat([si, sf, tg, so], 1).detach()
cand = torch.zeros(4 * H, dtype=torch.bool)
cand[2 * H:3 * H] = True
slope = torch.where(cand, 1 - acts_t**2, acts_t * (1 - acts_t))
d_fused = torch.cat([d['si'], d['sf'], d['tg'], d['so']], 1) * slope
print('fused', (d_fused - IFGO.grad).abs().max().item())
''',
    r'''
def lstm_step_backward(dh, dc, x, h_prev, c_prev, c, gates, Wx, Wh):
    Hh = dh.shape[1]
    i, f, g, o = (gates[:, k * Hh:(k + 1) * Hh] for k in range(4))
    tc = torch.tanh(c)
    dc = dc + dh * o * (1 - tc**2)
    up = torch.cat([dc * g, dc * c_prev, dc * i, dh * tc], 1)
    slope = gates * (1 - gates)
    slope[:, 2 * Hh:3 * Hh] = 1 - g**2
    da = up * slope
    return da @ Wx.T, da @ Wh.T, dc * f, x.T @ da, h_prev.T @ da, da.sum(0)

with torch.no_grad():
    Wx_, Wh_, _ = unpack(W_now)
    got = lstm_step_backward(d['h_now'], d['c_now<-future'], x_now, early.h, early.c, c_now,
                             acts_t, Wx_, Wh_)
for lab, g_, ref in zip(['x', 'h_prev', 'c_prev', 'Wx', 'Wh', 'b'], got,
                        [x_now.grad, early.h.grad, early.c.grad, W_now.grad[1:1 + D],
                         W_now.grad[1 + D:], W_now.grad[0]]):
    print(lab, (g_ - ref).abs().max().item())
''',
    md("## exercise 2: through time"),
    r'''
def lstm_backward(dhs, xs, h0, c0, hs, cs, gates, Wx, Wh):
    n, T, _ = xs.shape
    dx_rev, dWx_parts, dWh_parts, db_parts = [], [], [], []
    dh_next = torch.zeros_like(h0)
    dc_next = torch.zeros_like(c0)
    for s in range(T - 1, -1, -1):
        hp = h0 if s == 0 else hs[:, s - 1]
        cp = c0 if s == 0 else cs[:, s - 1]
        dx, dh_next, dc_next, gWx, gWh, gb = lstm_step_backward(
            dhs[:, s] + dh_next, dc_next, xs[:, s], hp, cp, cs[:, s], gates[:, s], Wx, Wh)
        dx_rev.append(dx)
        dWx_parts.append(gWx)
        dWh_parts.append(gWh)
        db_parts.append(gb)
    dxs = torch.stack(dx_rev[::-1], 1)
    return dxs, dh_next, dc_next, sum(dWx_parts), sum(dWh_parts), sum(db_parts)
''',
    r'''
def unroll(net, X):
    n, T = X.shape
    xs = net['E'][X]
    h = c = xs.new_zeros(n, H)
    ones = xs.new_ones(n, 1)
    hs, cs, gs = [], [], []
    for s in range(T):
        a = torch.cat([ones, xs[:, s], h], 1) @ net['W']
        gt = torch.cat([a[:, :2 * H].sigmoid(), a[:, 2 * H:3 * H].tanh(), a[:, 3 * H:].sigmoid()], 1)
        c = gt[:, H:2 * H] * c + gt[:, :H] * gt[:, 2 * H:3 * H]
        h = gt[:, 3 * H:] * c.tanh()
        hs.append(h)
        cs.append(c)
        gs.append(gt)
    hs, cs, gs = (torch.stack(u, 1) for u in (hs, cs, gs))
    return xs, hs, cs, gs, hs @ net['Wout'] + net['bout']

def seq_loss(net, X, Y):
    return F.cross_entropy(unroll(net, X)[-1].reshape(-1, V), Y.reshape(-1), ignore_index=-1)

# lstm_backward against autograd on the whole sequence
net = {'E': E, 'W': WLSTM, 'Wout': Wout, 'bout': bout}
xs_, hs_, cs_, gs_, lg_ = unroll(net, Xb)
dhs_ = torch.randn_like(hs_)
auto = torch.autograd.grad((hs_ * dhs_).sum(), [xs_, WLSTM])
z_ = torch.zeros(n, H)
with torch.no_grad():
    dxs_, _, _, dWx_, dWh_, db_ = lstm_backward(dhs_, xs_, z_, z_, hs_, cs_, gs_,
                                                *unpack(WLSTM)[:2])
print((dxs_ - auto[0]).abs().max().item(),
      (torch.cat([db_[None], dWx_, dWh_]) - auto[1]).abs().max().item())
''',
    md("## exercise 4: Adagrad on my BPTT"),
    r'''
for p_ in net.values():
    p_.requires_grad_(False)
mem = {k: torch.zeros_like(p_) for k, p_ in net.items()}
curve = []
for it in range(200):
    xb, yb = batch(25)
    xs, hs_, cs_, gs_, lg = unroll(net, xb)
    curve.append(F.cross_entropy(lg.reshape(-1, V), yb.reshape(-1), ignore_index=-1).item())
    ok_ = (yb >= 0).float()
    dlg = (F.softmax(lg, -1) - F.one_hot(yb.clamp(min=0), V)) * (ok_ / ok_.sum())[..., None]
    z_ = xs.new_zeros(len(xb), H)
    dxs, _, _, dWx, dWh, db = lstm_backward(dlg @ net['Wout'].T, xs, z_, z_, hs_, cs_, gs_,
                                            *unpack(net['W'])[:2])
    grads = {'E': torch.zeros_like(net['E']).index_add_(0, xb.flatten(), dxs.flatten(0, 1)),
             'W': torch.cat([db[None], dWx, dWh]),
             'Wout': hs_.flatten(0, 1).T @ dlg.flatten(0, 1),
             'bout': dlg.sum((0, 1))}
    for k, p_ in net.items():   # adagrad
        mem[k] += grads[k]**2
        p_ -= 0.1 * grads[k] / (mem[k] + 1e-8).sqrt()
print(curve[0], sum(curve[-20:]) / 20)
''',
]


def _h5_specs():
    G_ = lambda e: f"G({e})"  # noqa: E731
    return {
        "step/logits": [("d['scores']", G_("scores"))],
        "step/hs": [("d['Hs']", G_("Hs")), ("d['Wout']", G_("Wout")), ("d['bout']", G_("bout"))],
        "step/h_out": [("d['hs_early']", G_("early.hs")), ("d['hs_late']", G_("late.hs")),
                       ("d['h_now<-Hs']", "G(Hs)[:, t]")],
        "step/state": [("d['h_now']", G_("h_now")), ("d['c_now<-future']", "G(hc)[1]")],
        "step/h": [("d['so']", G_("so")), ("d['c_now']", G_("c_now"))],
        "step/c": [("d['sf']", G_("sf")), ("d['c_in']", G_("early.c")), ("d['si']", G_("si")),
                   ("d['tg']", G_("tg"))],
        "step/gates": [("d['pi']", G_("pi")), ("d['pf']", G_("pf")), ("d['po']", G_("po"))],
        "step/g": [("d['pg']", G_("pg"))],
        "step/ifgo": [("d['IFGO']", G_("IFGO"))],
        "step/inputs": [("d['x_now']", G_("x_now")), ("d['h_in']", G_("early.h")),
                        ("d['W_now'][1:1 + D]", "G(W_now)[1:1 + D]"),
                        ("d['W_now'][1 + D:]", "G(W_now)[1 + D:]"),
                        ("d['W_now'][0]", "G(W_now)[0]")],
        "fused/gates": [("d_fused", G_("IFGO"))],
    }


add("lstm_h5_wlstm_matrix_generator_steps_adagrad", "lstm", LSTMH5_CELLS, LSTM_ALL,
    wrong=["step/c"],
    cascade=["step/gates", "step/ifgo", "step/inputs", "fused/gates"],
    notes="own data (names ordered by md5 digest), setup's run_lstm; weights in one matrix "
          "WLSTM [1 + D + H, 4H] as in karpathy's lstm.py (bias row, input rows, recurrent rows), "
          "step t as Hin @ W_now with Hin = [1, x_t, h_prev]; exercise 1 as a generator yielding "
          "(label, dict) per step, take() merging into d with first branches under own keys; "
          "fused gates via torch.where on a candidate mask; lstm_step_backward, lstm_backward "
          "collecting per-step lists; unroll() on the Hin layout; Adagrad 200 steps, batch 25 "
          "(check batch 19). Slip: df = dc * c (the new cell state, not c_prev); gates, ifgo, "
          "inputs and fused/gates cascade",
    where=_h5_specs(),
    checkpoint="print('fused', (d_fused - IFGO.grad)",
    functions={"bptt/lstm_backward": None, "fused/lstm_step_backward": None},
    train={"cell": "for it in range(200)", "probe": "# adagrad",
           "params": "net", "grads": "grads", "ref": "lambda Q: seq_loss(Q, xb, yb)",
           "losses": "curve"},
    fix=[("df = dc * v['c_now']", "df = dc * v['c_in']")])


# ================================================================================================
# CONV H6 (right throughout). Own data (a torch.randperm shuffle under manual_seed(12), each
# example a window cut from the string '.' * 8 + name + '.'), parameters as globals under the
# learner's own names (Ctab, k1 / k2 / k3 in the lesson's [out, in, 2] shape, bias1..3, Wfc,
# bfc). Each dilated causal convolution written as ONE dense matrix product: the layer's taps
# spread into a [C_in * T, C_out * T] Toeplitz matrix by torch.einsum with two [T, T] shift
# matrices (torch.diag(ones, d) for the tap that looks d back, the identity for the other), the
# activations flattened to [n, C_in * T]; activations renamed (e, xin, u1 / r1, u2 / r2, u3 / r3,
# tail, out). The backward: the Toeplitz matrix's gradient a_flat.T @ g_flat, folded back onto the
# taps by the same einsum the other way round; gradients in one `grad` dict keyed by tuples
# (('u', 3), ('r', 2), ('k', 1), ('bias', 1), ('r', 0) for the input), layers 3..1 in a loop; dC
# as a one-hot matmul. `off_by` prints against .grad. Batch 30; then 200 steps of SGD with momentum
# through a step function on the same matrices, batch 40.

CONVH6_CELLS = [
    r'''
import torch
import torch.nn.functional as F
''',
    r'''
names = [w.strip() for w in open('names.txt') if w.strip()]
torch.manual_seed(12)
names = [names[k] for k in torch.randperm(len(names)).tolist()]
ctx = 8
letters = '.abcdefghijklmnopqrstuvwxyz'
pos = {ch: k for k, ch in enumerate(letters)}
xs_, ys_ = [], []
for w in names[:int(0.8 * len(names))]:
    s = '.' * ctx + w + '.'
    for j in range(len(w) + 1):
        xs_.append([pos[ch] for ch in s[j:j + ctx]])
        ys_.append(pos[s[j + ctx]])
Xtr, Ytr = torch.tensor(xs_), torch.tensor(ys_)
print(Xtr.shape)
''',
    md("A causal conv is a linear map of the whole sequence, so I write it as one matrix:\n"
       "`M[i, s, o, t] = sum_k w[o, i, k] * S[k, s, t]` with `S[0]` the shift by the dilation "
       "and `S[1]` the identity."),
    r'''
T = ctx
SHIFT = {d: torch.stack([torch.diag(torch.ones(T - d), d), torch.eye(T)]) for d in (1, 2, 4)}

def dense(w, d):
    cout, cin, _ = w.shape
    return torch.einsum('oik,kst->isot', w, SHIFT[d]).reshape(cin * T, cout * T)

torch.manual_seed(2024)
nE, nH = 10, 64
Ctab = torch.randn(27, nE)
k1 = torch.randn(nH, nE, 2) * (5 / 3) / (2 * nE)**0.5
k2 = torch.randn(nH, nH, 2) * (5 / 3) / (2 * nH)**0.5
k3 = torch.randn(nH, nH, 2) * (5 / 3) / (2 * nH)**0.5
bias1, bias2, bias3 = (0.1 * torch.randn(nH) for _ in range(3))
Wfc = 0.1 * torch.randn(nH, 27)
bfc = 0.1 * torch.randn(27)
params = {'Ctab': Ctab, 'k1': k1, 'bias1': bias1, 'k2': k2, 'bias2': bias2, 'k3': k3,
          'bias3': bias3, 'Wfc': Wfc, 'bfc': bfc}
for p in params.values():
    p.requires_grad_(True)
''',
    r'''
bi = torch.randint(0, len(Xtr), (30,))
Xb, Yb = Xtr[bi], Ytr[bi]
n = len(Xb)
e = Ctab[Xb]
xin = e.transpose(1, 2)
M1 = dense(k1, 1)
u1 = (xin.reshape(n, -1) @ M1).view(n, nH, T) + bias1[:, None]
r1 = u1.tanh()
M2 = dense(k2, 2)
u2 = (r1.reshape(n, -1) @ M2).view(n, nH, T) + bias2[:, None]
r2 = u2.tanh()
M3 = dense(k3, 4)
u3 = (r2.reshape(n, -1) @ M3).view(n, nH, T) + bias3[:, None]
r3 = u3.tanh()
tail = r3[:, :, -1]
out = tail @ Wfc + bfc
loss = F.cross_entropy(out, Yb)
# same thing as the lecture's conv1d?
print((u2 - F.conv1d(F.pad(r1, (2, 0)), k2, bias2, dilation=2)).abs().max().item())
for a_ in (e, xin, u1, r1, u2, r2, u3, r3, tail, out):
    a_.retain_grad()
loss.backward()
''',
    r'''
def off_by(a, b):
    return f"{(a - b).abs().max().item():.1e}"

grad = {}
with torch.no_grad():
    sm = out.softmax(1)
    sm[torch.arange(n), Yb] -= 1
    grad['out'] = sm / n
    grad['tail'] = grad['out'] @ Wfc.T
    grad['Wfc'] = tail.T @ grad['out']
    grad['bfc'] = grad['out'].sum(0)
    grad['r', 3] = F.pad(grad['tail'][:, :, None], (T - 1, 0))
print(off_by(grad['out'], out.grad), off_by(grad['tail'], tail.grad), off_by(grad['Wfc'], Wfc.grad),
      off_by(grad['r', 3], r3.grad))
''',
    r'''
def dense_back(g_u, a_in, w, d, M):
    m = g_u.shape[0]
    g_flat = g_u.reshape(m, -1)
    g_M = a_in.reshape(m, -1).T @ g_flat
    g_w = torch.einsum('isot,kst->oik', g_M.view(w.shape[1], T, w.shape[0], T), SHIFT[d])
    g_a = (g_flat @ M.T).view(a_in.shape)
    return g_a, g_w, g_u.sum((0, 2))

acts = {0: xin, 1: r1, 2: r2, 3: r3}
ks = {1: k1, 2: k2, 3: k3}
Ms = {1: M1, 2: M2, 3: M3}
dil = {1: 1, 2: 2, 3: 4}
with torch.no_grad():
    for l in (3, 2, 1):
        grad['u', l] = grad['r', l] * (1 - acts[l]**2)
        grad['r', l - 1], grad['k', l], grad['bias', l] = dense_back(
            grad['u', l], acts[l - 1], ks[l], dil[l], Ms[l])
    grad['e'] = grad['r', 0].transpose(1, 2)
    grad['Ctab'] = F.one_hot(Xb, 27).float().flatten(0, 1).T @ grad['e'].flatten(0, 1)
for l in (3, 2, 1):
    print(l, off_by(grad['u', l], [u1, u2, u3][l - 1].grad), off_by(grad['r', l - 1], acts[l - 1].grad),
          off_by(grad['k', l], ks[l].grad), off_by(grad['bias', l], [bias1, bias2, bias3][l - 1].grad))
print(off_by(grad['e'], e.grad), off_by(grad['Ctab'], Ctab.grad))
''',
    md("## training with the matrices"),
    r'''
biases = {1: bias1, 2: bias2, 3: bias3}

@torch.no_grad()
def step_grads(xb, yb):
    m = len(xb)
    a = {0: Ctab[xb].transpose(1, 2)}
    mats = {l: dense(ks[l], dil[l]) for l in (1, 2, 3)}
    for l in (1, 2, 3):
        a[l] = ((a[l - 1].reshape(m, -1) @ mats[l]).view(m, nH, T) + biases[l][:, None]).tanh()
    lg = a[3][:, :, -1] @ Wfc + bfc
    lv = F.cross_entropy(lg, yb).item()
    g_out = lg.softmax(1)
    g_out[torch.arange(m), yb] -= 1
    g_out /= m
    gr = {'Wfc': a[3][:, :, -1].T @ g_out, 'bfc': g_out.sum(0)}
    g_r = F.pad((g_out @ Wfc.T)[:, :, None], (T - 1, 0))
    for l in (3, 2, 1):
        g_r, gr[f'k{l}'], gr[f'bias{l}'] = dense_back(g_r * (1 - a[l]**2), a[l - 1], ks[l],
                                                     dil[l], mats[l])
    gr['Ctab'] = F.one_hot(xb, 27).float().flatten(0, 1).T @ g_r.transpose(1, 2).flatten(0, 1)
    return lv, gr

for p in params.values():
    p.requires_grad_(False)
mom = {k: torch.zeros_like(p) for k, p in params.items()}
hist = []
for it in range(200):
    bi = torch.randint(0, len(Xtr), (40,))
    xb, yb = Xtr[bi], Ytr[bi]
    lv, gr = step_grads(xb, yb)
    hist.append(lv)
    lr = 0.05 if it < 160 else 0.01
    for name, prm in params.items():
        mom[name].mul_(0.9).add_(gr[name])
        prm.sub_(lr * mom[name])
print(sum(hist[:20]) / 20, sum(hist[-20:]) / 20)
''',
]

CONVH6_FWD = {"logits": "out", "last": "tail", "h3": "r3", "h3pre": "u3", "h2": "r2",
              "h2pre": "u2", "h1": "r1", "h1pre": "u1", "x": "xin", "emb": "e", "C": "Ctab",
              "W": "Wfc", "b": "bfc", "w1": "k1", "b1": "bias1", "w2": "k2", "b2": "bias2",
              "w3": "k3", "b3": "bias3"}
CONVH6_GRAD = {"logits": "grad['out']", "last": "grad['tail']", "W": "grad['Wfc']",
               "b": "grad['bfc']", "h3": "grad['r', 3]", "h3pre": "grad['u', 3]",
               "h2": "grad['r', 2]", "w3": "grad['k', 3]", "b3": "grad['bias', 3]",
               "h2pre": "grad['u', 2]", "h1": "grad['r', 1]", "w2": "grad['k', 2]",
               "b2": "grad['bias', 2]", "h1pre": "grad['u', 1]", "x": "grad['r', 0]",
               "w1": "grad['k', 1]", "b1": "grad['bias', 1]", "emb": "grad['e']",
               "C": "grad['Ctab']"}
CONVH6_REF = ("lambda Q: ref_conv_loss({'C': Q['Ctab'], 'w1': Q['k1'], 'b1': Q['bias1'], "
              "'w2': Q['k2'], 'b2': Q['bias2'], 'w3': Q['k3'], 'b3': Q['bias3'], "
              "'W': Q['Wfc'], 'b': Q['bfc']}, xb, yb)")

add("conv_h6_toeplitz_matrices_tuple_keyed_grads_momentum", "conv", CONVH6_CELLS, CONV_ALL,
    notes="own data (randperm under manual_seed(12), windows cut from '.' * 8 + name + '.'), "
          "parameters as globals under own names; each dilated causal conv as one dense Toeplitz "
          "matrix [C_in * T, C_out * T] built by einsum with shift matrices, activations "
          "flattened; backward through the matrix's gradient folded back onto the taps by the "
          "same einsum; gradients in a dict keyed by tuples, layers 3..1 in a loop, dC as a "
          "one-hot matmul; batch 30; SGD with momentum 200 steps through step_grads, batch 40; "
          "all right",
    where=where("conv", CONV_STEPS, fwd=CONVH6_FWD, grad=CONVH6_GRAD.__getitem__),
    checkpoint="print(off_by(grad['e'], e.grad)",
    train={"cell": "for it in range(200)", "probe": "for name, prm in params.items():",
           "params": "params", "grads": "gr", "ref": CONVH6_REF, "losses": "hist"})
