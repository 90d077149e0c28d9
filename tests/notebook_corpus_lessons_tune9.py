"""Learners' own notebooks for the gpt, lstm and conv lessons, with each step's truth: a ninth
corpus, tune half (its holdout half, notebook_corpus_lessons_holdout8, if it exists, was written
separately and not read here).

Six notebooks: four for gpt, one for lstm, one for conv, in layouts that the earlier corpora do not
use: a learner who runs the batch one name at a time, a model object that drives its own training
through net.step() with its gradients in a list by parameter position, layers written as
coroutines that take their output's gradient by .send(), one adjoint dict keyed by id() of the
forward tensors, an LSTM in the learner's own gate order (g, i, f, o) with Greek-named gradients
and preallocated state buffers, and convolutions by explicit index arithmetic over the dilated
taps. Each is a learner's own notebook: the lesson's forward pass copied in (renamed and
re-laid-out), their own loading of 'names.txt' (the truth runner points it at data/names.txt),
their own seed and init, the backward pass in a layout matching the forward, their own comparison
helper (none named cmp), and where they train (four of the six), a loop of at most 300 steps on
their own gradients and an update of their own. Architecture sizes are the lessons' [lesson] sizes
throughout; batch sizes equal no other size of their lesson (gpt 11, 13 / 15, 14, 9; lstm 23 / 29;
conv 44 / 52).

Layouts:
  gpt_u1   the batch as a Python loop over the names: each sequence goes through the block on its
           own as 2-D [T, C] matrices with [NH, T, HS] heads, its activations in one dict per name
           (A[b]), the layer norms as norm_fwd() dicts of their atoms, the loss the per-name summed
           cross-entropies over B * T; the backward walks the same loop, one gradient dict per name
           (Gd[b]) with every first branch under a key of its own ('tokens<-head', 'nf.xc<-xh',
           'h2<-xc', 'h1<-skip', 'h0<-skip'), the parameters' gradients summed over the names into
           a dict dW (the lookup by index_add_); gap() against autograd on the stacked per-name
           activations and against .grad. Exercise 1, every step.
  gpt_u2   a model object: `Scribe` keeps its sixteen parameters in a list `theta` (names in a
           class tuple, positions through self.at) and the gradients in a parallel list `grads`
           written by position; forward(X, Y, theta=None) returns a namedtuple built from its own
           locals, qkv by torch.addmm on flattened rows, heads by reshape / permute, an
           upper-triangular boolean mask; a @torch.no_grad() backward method fills `grads` and a
           dict `d` of the activations' gradients (no first branch kept on its own); step(X, Y)
           runs both. diff() against .grad and autograd.grad. Exercise 1, then 200 steps of
           net.step with SGD with momentum, weight decay, a cosine learning rate and clipping by
           total norm.
  gpt_u3   exercises 2 and 3: the seven functions (scatter_add_, layer norm from xhat and two
           sums, a '...' einsum for the weight, chunk / transpose heads, GELU with 0.134145,
           softmax - one_hot, AdamW by mul_ / add_ / sub_), checked by agree() against
           torch.autograd.grad with random upstream gradients; then every layer a coroutine (a
           generator that yields its output, receives its output's gradient by .send() and yields
           (dinput, {parameter gradients}) through the functions), forward() starting them into a
           dict by layer name, backward() sending the gradients down in reverse with the residual
           sums and the tied head's share written out; checked once against autograd; 150 steps of
           adamw_update with a linear warmup, cosine decay and clipping by total norm.
  gpt_u4   the forward as top-level lines under own names (layer norm through 1 / torch.sqrt,
           heads by torch.stack(split) and merged by torch.cat(unbind), the softmax written out as
           exp over its sum, the mask by torch.where); every gradient in ONE dict keyed by id() of
           its forward tensor, written only by bump(t, g), which adds, and read by grad_of(t); one
           `with torch.no_grad():` cell per stretch of the backward, so the first branches are the
           dict's entries between cells; close_to() against retained .grad. Exercise 1, every
           step.
  lstm_u5  the learner's own gate order (g, i, f, o): one torch.split(H, 1) gives the four
           pre-activations, torch_order() / own_order() permute the weights' column blocks for the
           setup's run_lstm (copied in) and back; parameters as globals under own names,
           gradients as Greek-named globals (δlogits, δht, δct, δfg, δz, ...), first branches held
           by rebinding; report() with allclose against retained .grad. Fused gates as one
           expression on the four gate gradients; lstm_step_backward (chunk) and lstm_backward
           (into a preallocated dxs) in the exercise's (i, f, g, o) convention; a training forward
           writing its states into preallocated [T + 1, n, H] buffers, its caches in a
           namedtuple, lstm_backward on permuted weights with the gradients permuted back; SGD with
           a step-decayed rate and clipping by total norm, 150 steps.
  conv_u6  the layers as dicts in a list (d, K, bias) into which forward and backward write; each
           dilated causal convolution by explicit index arithmetic: tap k of output t reads input
           position t - d * (1 - k), clamped at 0 with a 0 / 1 mask before the start, the taps
           gathered by fancy indexing into [B, Cin, T, 2] and contracted with the kernel by
           einsum; the backward masks the taps' gradient and scatters it back onto the input by
           index_add_ along time; dE by index_put_ accumulate; worst() relative errors against
           retained .grad; 200 steps of SGD with Nesterov momentum, decoupled weight decay and
           one learning-rate cut.

Slips (each case's "notes" says which): gpt_u4's softmax backward sums P * dP over dim -2 (the
keys' axis) instead of over the row (block/preatt_masked wrong; preatt, qk, qkv, ln1, ln1_affine,
x0, wpe, wte cascade, while x1_residual, whose first branch of dx0 is taken above the attention,
and everything above stay right); lstm_u5 swaps the partners in the product rule of
c = f * c_prev + i * g (δfg = δct * cand, δig = δct * cp) (step/c wrong; gates, ifgo, inputs and
fused/gates cascade, while step/g, the two functions and the training, written afresh, stay
right). The other four notebooks are right throughout. No notebook is shared with the earlier
corpora.

Written apart from the grader: from the lessons' forward passes, pack.toml's [lesson] / [setup] /
[forward] tables, exercises/conv/forward.py, `backprop-tutor --pack X list / show`, the truth
runner and the earlier corpora's format only, without reading the tutor's code or the steps'
solutions, mistakes, hints or explanations, and without running the grader on these notebooks.
Every label was measured by running the notebook, not judged by eye:

    .venv/bin/python tests/lesson_corpus_truth.py notebook_corpus_lessons_tune9

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
# GPT U1 (right throughout). Own data (random.Random(77) shuffle, rows as [T + 1] windows
# padded with '.'), parameters in a dict W under own names (tokens, places, g1, s1, Wattn, battn,
# Wout, bout, g2, s2, Wup, bup, Wdown, bdown, gf, sf). The batch as a Python loop over the
# names: every sequence runs through the block on its own as 2-D [T, C] matrices, heads as
# [NH, T, HS], its activations in a dict per name (A[b]['h0'], A[b]['n1']['xc'], ...), the layer
# norms as norm_fwd() returning a dict of their atoms; the loss the per-name summed
# cross-entropies over B * T. The backward walks the same loop, one gradient dict per name
# (Gd[b]) with every first branch under a key of its own ('tokens<-head', 'nf.xc<-xh',
# 'h2<-xc', 'h1<-skip', 'h0<-skip'), the parameters' gradients summed over the names into dW
# (the lookup by index_add_). gap() against autograd on the stacked per-name activations and
# against .grad. Batch 11; exercise 1 only.

GPTU1_CELLS = [
    md("# one name at a time\nI find the batch dimension confusing, so every name goes through "
       "the block on its own and the gradients of the weights are summed over the names."),
    r'''
import math
import random
import torch
import torch.nn.functional as F
''',
    r'''
lines = [l.strip() for l in open('names.txt') if l.strip()]
rng = random.Random(77)
rng.shuffle(lines)
T, C, NH = 16, 32, 4
HS = C // NH
alphabet = '.' + ''.join(sorted(set(''.join(lines))))
V = len(alphabet)
idx = {ch: i for i, ch in enumerate(alphabet)}

def window(w):
    seq = [0] + [idx[c] for c in w] + [0] * (T + 1)
    return seq[:T + 1]

data = torch.tensor([window(w) for w in lines[:int(0.9 * len(lines))]])
data.shape, V
''',
    r'''
torch.manual_seed(4242)
def mat(i, o, s=1.0):
    return (torch.randn(i, o) * s / i**0.5).requires_grad_()
def vec(n, c=0.0):
    return (c + 0.1 * torch.randn(n)).requires_grad_()

W = {'tokens': (0.1 * torch.randn(V, C)).requires_grad_(),
     'places': (0.1 * torch.randn(T, C)).requires_grad_(),
     'g1': vec(C, 1.0), 's1': vec(C),
     'Wattn': mat(C, 3 * C), 'battn': vec(3 * C),
     'Wout': mat(C, C, 0.5), 'bout': vec(C),
     'g2': vec(C, 1.0), 's2': vec(C),
     'Wup': mat(C, 4 * C), 'bup': vec(4 * C),
     'Wdown': mat(4 * C, C, 0.5), 'bdown': vec(C),
     'gf': vec(C, 1.0), 'sf': vec(C)}
''',
    r'''
def norm_fwd(x, gain, shift):
    m = x.mean(-1, keepdim=True)
    xc = x - m
    v = (xc * xc).mean(-1, keepdim=True)
    r = (v + 1e-5) ** -0.5
    xh = xc * r
    return dict(m=m, xc=xc, v=v, r=r, xh=xh, out=xh * gain + shift)

def gelu(u):
    return 0.5 * u * (1 + torch.tanh(math.sqrt(2 / math.pi) * (u + 0.044715 * u**3)))

causal = torch.tril(torch.ones(T, T)) > 0
''',
    r'''
pick = torch.randint(0, len(data), (11,))
batch = data[pick]
Bn = len(batch)
A = []
for seq in batch:
    a = {'inp': seq[:-1], 'tgt': seq[1:]}
    a['e'] = W['tokens'][a['inp']]
    a['h0'] = a['e'] + W['places']
    a['n1'] = norm_fwd(a['h0'], W['g1'], W['s1'])
    a['z'] = a['n1']['out'] @ W['Wattn'] + W['battn']
    a['q'], a['k'], a['v'] = (a['z'][:, j * C:(j + 1) * C].view(T, NH, HS).transpose(0, 1)
                              for j in range(3))
    a['s'] = a['q'] @ a['k'].transpose(1, 2) / math.sqrt(HS)
    a['sm'] = a['s'].masked_fill(~causal, float('-inf'))
    a['p'] = torch.softmax(a['sm'], -1)
    a['o'] = a['p'] @ a['v']
    a['om'] = a['o'].transpose(0, 1).reshape(T, C)
    a['proj'] = a['om'] @ W['Wout'] + W['bout']
    a['h1'] = a['h0'] + a['proj']
    a['n2'] = norm_fwd(a['h1'], W['g2'], W['s2'])
    a['u'] = a['n2']['out'] @ W['Wup'] + W['bup']
    a['gu'] = gelu(a['u'])
    a['dn'] = a['gu'] @ W['Wdown'] + W['bdown']
    a['h2'] = a['h1'] + a['dn']
    a['nf'] = norm_fwd(a['h2'], W['gf'], W['sf'])
    a['lg'] = a['nf']['out'] @ W['tokens'].T
    a['nll'] = F.cross_entropy(a['lg'], a['tgt'], reduction='sum')
    A.append(a)
loss = sum(a['nll'] for a in A) / (Bn * T)
loss.item()
''',
    md("## backward, name by name"),
    r'''
def back_norm(dxh, nd):
    # the whole layer norm at once, from the gradient of its normalised output
    return nd['r'] * (dxh - dxh.mean(-1, keepdim=True)
                      - nd['xh'] * (dxh * nd['xh']).mean(-1, keepdim=True))

k0 = math.sqrt(2 / math.pi)
dW = {k: torch.zeros_like(p) for k, p in W.items()}
Gd = []
with torch.no_grad():
    N = Bn * T
    for a in A:
        g = {}
        pr = torch.softmax(a['lg'], -1)
        pr[torch.arange(T), a['tgt']] -= 1
        g['lg'] = pr / N
        g['nf'] = g['lg'] @ W['tokens']
        g['tokens<-head'] = g['lg'].T @ a['nf']['out']
        dW['tokens'] += g['tokens<-head']
        nf = a['nf']
        g['nf.xh'] = g['nf'] * W['gf']
        dW['gf'] += (g['nf'] * nf['xh']).sum(0)
        dW['sf'] += g['nf'].sum(0)
        g['nf.r'] = (g['nf.xh'] * nf['xc']).sum(-1, keepdim=True)
        g['nf.xc<-xh'] = g['nf.xh'] * nf['r']
        g['nf.v'] = -0.5 * nf['r']**3 * g['nf.r']
        g['nf.xc'] = g['nf.xc<-xh'] + g['nf.v'] * 2 * nf['xc'] / C
        g['nf.m'] = -g['nf.xc'].sum(-1, keepdim=True)
        g['h2<-xc'] = g['nf.xc'].clone()
        g['h2'] = g['h2<-xc'] + g['nf.m'] / C
        # MLP
        g['dn'] = g['h2']
        g['h1<-skip'] = g['h2'].clone()
        g['gu'] = g['dn'] @ W['Wdown'].T
        dW['Wdown'] += a['gu'].T @ g['dn']
        dW['bdown'] += g['dn'].sum(0)
        u = a['u']
        th = torch.tanh(k0 * (u + 0.044715 * u**3))
        g['u'] = g['gu'] * (0.5 * (1 + th) + 0.5 * u * (1 - th**2) * k0 * (1 + 3 * 0.044715 * u**2))
        g['n2'] = g['u'] @ W['Wup'].T
        dW['Wup'] += a['n2']['out'].T @ g['u']
        dW['bup'] += g['u'].sum(0)
        g['n2.xh'] = g['n2'] * W['g2']
        dW['g2'] += (g['n2'] * a['n2']['xh']).sum(0)
        dW['s2'] += g['n2'].sum(0)
        g['h1'] = g['h1<-skip'] + back_norm(g['n2.xh'], a['n2'])
        # attention
        g['proj'] = g['h1']
        g['h0<-skip'] = g['h1'].clone()
        g['om'] = g['proj'] @ W['Wout'].T
        dW['Wout'] += a['om'].T @ g['proj']
        dW['bout'] += g['proj'].sum(0)
        g['o'] = g['om'].view(T, NH, HS).transpose(0, 1)
        g['p'] = g['o'] @ a['v'].transpose(1, 2)
        g['v'] = a['p'].transpose(1, 2) @ g['o']
        g['sm'] = a['p'] * (g['p'] - (g['p'] * a['p']).sum(-1, keepdim=True))
        g['s'] = g['sm'].masked_fill(~causal, 0.0)
        g['q'] = g['s'] @ a['k'] / math.sqrt(HS)
        g['k'] = g['s'].transpose(1, 2) @ a['q'] / math.sqrt(HS)
        g['z'] = torch.cat([t_.transpose(0, 1).reshape(T, C) for t_ in (g['q'], g['k'], g['v'])], -1)
        g['n1'] = g['z'] @ W['Wattn'].T
        dW['Wattn'] += a['n1']['out'].T @ g['z']
        dW['battn'] += g['z'].sum(0)
        g['n1.xh'] = g['n1'] * W['g1']
        dW['g1'] += (g['n1'] * a['n1']['xh']).sum(0)
        dW['s1'] += g['n1'].sum(0)
        g['h0'] = g['h0<-skip'] + back_norm(g['n1.xh'], a['n1'])
        g['e'] = g['h0']
        dW['places'] += g['h0']
        dW['tokens'].index_add_(0, a['inp'], g['e'])
        Gd.append(g)
''',
    md("## check against autograd"),
    r'''
def gap(mine, ref):
    return f"{(mine - ref).abs().max().item():.2e}"

for path in [('lg',), ('h2',), ('u',), ('h1',), ('p',), ('s',), ('z',), ('h0',)]:
    acts = [a[path[0]] for a in A]
    refs = torch.autograd.grad(loss, acts, retain_graph=True)
    print(path[0], gap(torch.stack([g[path[0]] for g in Gd]), torch.stack(refs)))
''',
    r'''
loss.backward()
for k, p in W.items():
    print(k, gap(dW[k], p.grad))
''',
]

# the per-name gradient key (in Gd[b]) and the per-name forward path (in A[b]) of each lesson tensor
_U1_ACT = {"logits": ("lg", "['lg']"), "lnf": ("nf", "['nf']['out']"),
           "lnf_norm": ("nf.xh", "['nf']['xh']"), "lnf_rstd": ("nf.r", "['nf']['r']"),
           "lnf_var": ("nf.v", "['nf']['v']"), "lnf_xc": ("nf.xc", "['nf']['xc']"),
           "lnf_mean": ("nf.m", "['nf']['m']"), "x2": ("h2", "['h2']"),
           "fcproj": ("dn", "['dn']"), "fch_gelu": ("gu", "['gu']"), "fch": ("u", "['u']"),
           "ln2": ("n2", "['n2']['out']"), "ln2_norm": ("n2.xh", "['n2']['xh']"),
           "x1": ("h1", "['h1']"), "attproj": ("proj", "['proj']"), "y": ("om", "['om']"),
           "atty": ("o", "['o']"), "att": ("p", "['p']"), "v": ("v", "['v']"),
           "preatt_masked": ("sm", "['sm']"), "preatt": ("s", "['s']"), "q": ("q", "['q']"),
           "k": ("k", "['k']"), "qkv": ("z", "['z']"), "ln1": ("n1", "['n1']['out']"),
           "ln1_norm": ("n1.xh", "['n1']['xh']"), "x0": ("h0", "['h0']"), "tok": ("e", "['e']")}
_U1_PAR = {"wte": "tokens", "wpe": "places", "lnfw": "gf", "lnfb": "sf", "fcprojw": "Wdown",
           "fcprojb": "bdown", "fcw": "Wup", "fcb": "bup", "ln2w": "g2", "ln2b": "s2",
           "attprojw": "Wout", "attprojb": "bout", "qkvw": "Wattn", "qkvb": "battn",
           "ln1w": "g1", "ln1b": "s1"}
# first branches: (the learner's key, autograd's value per name)
_U1_FIRST = {
    "wte": ("sum(g['tokens<-head'] for g in Gd)",
            "sum(edge(lambda M, a=a: a['nf']['out'].detach() @ M.T, W['tokens'], G(a['lg'])) "
            "for a in A)"),
    "lnf_xc": ("torch.stack([g['nf.xc<-xh'] for g in Gd])",
               "torch.stack([edge(lambda z, a=a: z * a['nf']['r'].detach(), a['nf']['xc'], "
               "G(a['nf']['xh'])) for a in A])"),
    "x2": ("torch.stack([g['h2<-xc'] for g in Gd])", "torch.stack([G(a['nf']['xc']) for a in A])"),
    "x1": ("torch.stack([g['h1<-skip'] for g in Gd])", "torch.stack([G(a['h2']) for a in A])"),
    "x0": ("torch.stack([g['h0<-skip'] for g in Gd])", "torch.stack([G(a['h1']) for a in A])"),
}


def _u1_specs():
    out = {}
    for step in GPT_STEPS:
        specs = []
        for item in GPT_CHECKS[step]:
            if isinstance(item, tuple):
                specs.append(_U1_FIRST[item[0]])
            elif item in _U1_PAR:
                specs.append((f"dW['{_U1_PAR[item]}']", f"G(W['{_U1_PAR[item]}'])"))
            else:
                key, path = _U1_ACT[item]
                specs.append((f"torch.stack([g['{key}'] for g in Gd])",
                              f"torch.stack([G(a{path}) for a in A])"))
        out[step] = specs
    return out


add("gpt_u1_name_by_name_loop_per_name_dicts", "gpt", GPTU1_CELLS, GPT_STEPS,
    notes="own data (random.Random(77) shuffle, [T + 1] windows padded with '.'); parameters in "
          "a dict W under own names; the batch as a Python loop over the names, each a 2-D "
          "[T, C] pass with [NH, T, HS] heads, activations in one dict per name, layer norms as "
          "norm_fwd() dicts of atoms, the loss the summed per-name cross-entropies over B * T; "
          "the backward the same loop, one gradient dict per name with every first branch "
          "under its own key, parameter gradients summed into dW (index_add_ for the lookup); "
          "gap() against autograd and .grad; batch 11; exercise 1 only; all right",
    where=_u1_specs())
# ================================================================================================
# GPT U2 (right throughout). Own data (every name kept, the split by hash of the name into
# train / rest, rows built by a torch.full of '.' and slice assignment). A model object drives
# everything: `Scribe` keeps its sixteen parameters in a list `theta` in a fixed order (names in a
# class tuple, positions looked up through `self.at`), its gradients in a parallel list `grads`
# written by position; forward(X, Y, theta=None) returns a namedtuple `Acts` built from its own
# locals (tok, x0, mu1, xc1, var1, rs1, nrm1, ln1, qkv, q, k, v, sc, scm, pr, ctx, y, ao, x1,
# ..., logits, loss), qkv by torch.addmm on flattened rows, heads by reshape / permute, the
# causal mask an upper-triangular boolean; a @torch.no_grad() backward(acts) fills grads by
# position and the activations' gradients in a dict `self.d` (no first branch is kept on its
# own); step(X, Y) runs both and returns the loss. Checked by diff() against .grad and
# torch.autograd.grad. Batch 13; then 200 steps of net.step with SGD with momentum, weight decay,
# a cosine learning rate and gradient clipping by total norm, batch 15.

GPTU2_CELLS = [
    r'''
import math, zlib
from collections import namedtuple
import torch
import torch.nn.functional as F
''',
    r'''
names = open('names.txt').read().split()
keep = [w for w in names if zlib.crc32(w.encode()) % 10 < 8]
letters = sorted(set(''.join(names)))
char_id = {c: i + 1 for i, c in enumerate(letters)}
char_id['.'] = 0
ctx_len = 16
rows = torch.full((len(keep), ctx_len + 1), 0, dtype=torch.long)
for r, w in enumerate(keep):
    ids = torch.tensor([char_id[c] for c in w][:ctx_len])
    rows[r, 1:1 + len(ids)] = ids
Xall, Yall = rows[:, :-1], rows[:, -1]
nvocab = len(char_id)
''',
    r'''
Acts = namedtuple('Acts', 'X tgt tok x0 mu1 xc1 var1 rs1 nrm1 ln1 qkv q k v sc scm pr ctx y ao x1 '
                          'mu2 xc2 var2 rs2 nrm2 ln2 hid act mo x2 muf xcf varf rsf nrmf lnf logits loss')

class Scribe:
    names = ('emb', 'pos', 'a_g', 'a_b', 'qkv_w', 'qkv_b', 'o_w', 'o_b',
             'm_g', 'm_b', 'up_w', 'up_b', 'dn_w', 'dn_b', 'f_g', 'f_b')

    def __init__(self, V, T, C, nh, seed):
        gen = torch.Generator().manual_seed(seed)
        rn = lambda *s: torch.randn(*s, generator=gen)
        self.V, self.T, self.C, self.nh = V, T, C, nh
        self.theta = [rn(V, C) * 0.1, rn(T, C) * 0.1,
                      1 + 0.1 * rn(C), 0.1 * rn(C), rn(C, 3 * C) / C**0.5, 0.1 * rn(3 * C),
                      0.5 * rn(C, C) / C**0.5, 0.1 * rn(C),
                      1 + 0.1 * rn(C), 0.1 * rn(C), rn(C, 4 * C) / C**0.5, 0.1 * rn(4 * C),
                      0.5 * rn(4 * C, C) / (4 * C)**0.5, 0.1 * rn(C),
                      1 + 0.1 * rn(C), 0.1 * rn(C)]
        self.grads = [torch.zeros_like(p) for p in self.theta]
        self.at = {n: i for i, n in enumerate(self.names)}
        self.d = {}

    def forward(self, X, Y, theta=None):
        (emb, pos, a_g, a_b, qkv_w, qkv_b, o_w, o_b, m_g, m_b, up_w, up_b, dn_w, dn_b,
         f_g, f_b) = self.theta if theta is None else theta
        B, T = X.shape
        C, nh = self.C, self.nh
        hd = C // nh
        tok = emb[X]
        x0 = tok + pos
        mu1 = x0.mean(-1, keepdim=True)
        xc1 = x0 - mu1
        var1 = xc1.pow(2).mean(-1, keepdim=True)
        rs1 = (var1 + 1e-5).pow(-0.5)
        nrm1 = xc1 * rs1
        ln1 = nrm1 * a_g + a_b
        qkv = torch.addmm(qkv_b, ln1.reshape(B * T, C), qkv_w).reshape(B, T, 3 * C)
        q = qkv[..., :C].reshape(B, T, nh, hd).permute(0, 2, 1, 3)
        k = qkv[..., C:2 * C].reshape(B, T, nh, hd).permute(0, 2, 1, 3)
        v = qkv[..., 2 * C:].reshape(B, T, nh, hd).permute(0, 2, 1, 3)
        sc = q @ k.transpose(-2, -1) * hd**-0.5
        scm = sc.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float('-inf'))
        pr = scm.softmax(-1)
        ctx = pr @ v
        y = ctx.permute(0, 2, 1, 3).reshape(B, T, C)
        ao = y @ o_w + o_b
        x1 = x0 + ao
        mu2 = x1.mean(-1, keepdim=True)
        xc2 = x1 - mu2
        var2 = xc2.pow(2).mean(-1, keepdim=True)
        rs2 = (var2 + 1e-5).pow(-0.5)
        nrm2 = xc2 * rs2
        ln2 = nrm2 * m_g + m_b
        hid = ln2 @ up_w + up_b
        act = 0.5 * hid * (1 + torch.tanh(math.sqrt(2 / math.pi) * (hid + 0.044715 * hid**3)))
        mo = act @ dn_w + dn_b
        x2 = x1 + mo
        muf = x2.mean(-1, keepdim=True)
        xcf = x2 - muf
        varf = xcf.pow(2).mean(-1, keepdim=True)
        rsf = (varf + 1e-5).pow(-0.5)
        nrmf = xcf * rsf
        lnf = nrmf * f_g + f_b
        logits = lnf @ emb.T
        tgt = torch.cat([X[:, 1:], Y[:, None]], 1)
        loss = F.cross_entropy(logits.reshape(-1, self.V), tgt.reshape(-1))
        return Acts(**{f: v_ for f, v_ in locals().items() if f in Acts._fields})

    def _ln_back(self, dout, nrm, rs, gain, gi, bi):
        C = self.C
        self.grads[gi] = (dout * nrm).sum((0, 1))
        self.grads[bi] = dout.sum((0, 1))
        dn = dout * gain
        return rs / C * (C * dn - dn.sum(-1, keepdim=True) - nrm * (dn * nrm).sum(-1, keepdim=True))

    @torch.no_grad()
    def backward(self, a):
        P, at, d, gr = self.theta, self.at, self.d, self.grads
        B, T = a.X.shape
        C, nh = self.C, self.nh
        hd = C // nh
        rows = lambda t: t.reshape(B * T, -1)
        d['logits'] = (a.logits.softmax(-1) - F.one_hot(a.tgt, self.V)) / (B * T)
        d['lnf'] = d['logits'] @ P[at['emb']]
        head = rows(d['logits']).T @ rows(a.lnf)
        gr[at['f_g']] = (d['lnf'] * a.nrmf).sum((0, 1))
        gr[at['f_b']] = d['lnf'].sum((0, 1))
        d['nrmf'] = d['lnf'] * P[at['f_g']]
        d['rsf'] = (d['nrmf'] * a.xcf).sum(-1, keepdim=True)
        d['varf'] = -0.5 * a.rsf**3 * d['rsf']
        d['xcf'] = d['nrmf'] * a.rsf + d['varf'] * 2 * a.xcf / C
        d['muf'] = -d['xcf'].sum(-1, keepdim=True)
        d['x2'] = d['xcf'] + d['muf'] / C
        d['mo'] = d['x2']
        d['act'] = d['mo'] @ P[at['dn_w']].T
        gr[at['dn_w']] = rows(a.act).T @ rows(d['mo'])
        gr[at['dn_b']] = d['mo'].sum((0, 1))
        s2 = math.sqrt(2 / math.pi)
        th = torch.tanh(s2 * (a.hid + 0.044715 * a.hid**3))
        d['hid'] = d['act'] * (0.5 * (1 + th)
                               + 0.5 * a.hid * (1 - th * th) * s2 * (1 + 0.134145 * a.hid**2))
        d['ln2'] = d['hid'] @ P[at['up_w']].T
        gr[at['up_w']] = rows(a.ln2).T @ rows(d['hid'])
        gr[at['up_b']] = d['hid'].sum((0, 1))
        d['nrm2'] = d['ln2'] * P[at['m_g']]
        d['x1'] = d['x2'] + self._ln_back(d['ln2'], a.nrm2, a.rs2, P[at['m_g']], at['m_g'], at['m_b'])
        d['ao'] = d['x1']
        d['y'] = d['ao'] @ P[at['o_w']].T
        gr[at['o_w']] = rows(a.y).T @ rows(d['ao'])
        gr[at['o_b']] = d['ao'].sum((0, 1))
        d['ctx'] = d['y'].reshape(B, T, nh, hd).permute(0, 2, 1, 3)
        d['pr'] = d['ctx'] @ a.v.transpose(-2, -1)
        d['v'] = a.pr.transpose(-2, -1) @ d['ctx']
        d['scm'] = a.pr * (d['pr'] - (a.pr * d['pr']).sum(-1, keepdim=True))
        d['sc'] = d['scm'].masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), 0.0)
        d['q'] = d['sc'] @ a.k * hd**-0.5
        d['k'] = d['sc'].transpose(-2, -1) @ a.q * hd**-0.5
        d['qkv'] = torch.cat([d[n].permute(0, 2, 1, 3).reshape(B, T, C) for n in 'qkv'], -1)
        d['ln1'] = d['qkv'] @ P[at['qkv_w']].T
        gr[at['qkv_w']] = rows(a.ln1).T @ rows(d['qkv'])
        gr[at['qkv_b']] = d['qkv'].sum((0, 1))
        d['nrm1'] = d['ln1'] * P[at['a_g']]
        d['x0'] = d['x1'] + self._ln_back(d['ln1'], a.nrm1, a.rs1, P[at['a_g']], at['a_g'], at['a_b'])
        d['tok'] = d['x0']
        gr[at['pos']] = d['x0'].sum(0)
        gr[at['emb']] = head.index_add(0, a.X.reshape(-1), rows(d['x0']))

    def step(self, X, Y):
        acts = self.forward(X, Y)
        self.backward(acts)
        self.last = acts
        return acts.loss
''',
    r'''
net = Scribe(nvocab, ctx_len, 32, 4, seed=909)
for p in net.theta:
    p.requires_grad_(True)
draw_gen = torch.Generator().manual_seed(31)
def draw(n):
    ix = torch.randint(0, len(Xall), (n,), generator=draw_gen)
    return Xall[ix], Yall[ix]

Xb, Yb = draw(13)
loss = net.step(Xb, Yb)
a = net.last
loss.item()
''',
    r'''
def diff(tag, mine, ref):
    print(f"{tag:8s} {torch.allclose(mine, ref, atol=1e-6)} {(mine - ref).abs().max().item():.1e}")

acts_to_check = ['logits', 'x2', 'hid', 'x1', 'scm', 'qkv', 'x0']
autos = torch.autograd.grad(loss, [getattr(a, n) for n in acts_to_check], retain_graph=True)
for n, ref in zip(acts_to_check, autos):
    diff(n, net.d[n], ref)
loss.backward()
for n, p, g in zip(net.names, net.theta, net.grads):
    diff(n, g, p.grad)
''',
    md("## training with net.step"),
    r'''
for p in net.theta:
    p.requires_grad_(False)
vel = [torch.zeros_like(p) for p in net.theta]
hist = []
total_steps = 200
for it in range(total_steps):
    xb, yb = draw(15)
    lv = net.step(xb, yb)
    hist.append(lv.item())
    gnorm = torch.sqrt(sum((g * g).sum() for g in net.grads))
    clip = min(1.0, 1.0 / (gnorm.item() + 1e-6))
    lr = 0.02 + 0.08 * 0.5 * (1 + math.cos(math.pi * it / total_steps))
    for p, g, m in zip(net.theta, net.grads, vel):
        m.mul_(0.9).add_(g, alpha=clip)
        p.sub_(lr * (m + 1e-4 * p))
print(hist[0], sum(hist[-20:]) / 20)
''',
]

_U2_ACT = {"logits": "logits", "lnf": "lnf", "lnf_norm": "nrmf", "lnf_rstd": "rsf",
           "lnf_var": "varf", "lnf_xc": "xcf", "lnf_mean": "muf", "x2": "x2", "fcproj": "mo",
           "fch_gelu": "act", "fch": "hid", "ln2": "ln2", "ln2_norm": "nrm2", "x1": "x1",
           "attproj": "ao", "y": "y", "atty": "ctx", "att": "pr", "v": "v",
           "preatt_masked": "scm", "preatt": "sc", "q": "q", "k": "k", "qkv": "qkv",
           "ln1": "ln1", "ln1_norm": "nrm1", "x0": "x0", "tok": "tok"}
_U2_PAR = {"wte": "emb", "wpe": "pos", "lnfw": "f_g", "lnfb": "f_b", "fcprojw": "dn_w",
           "fcprojb": "dn_b", "fcw": "up_w", "fcb": "up_b", "ln2w": "m_g", "ln2b": "m_b",
           "attprojw": "o_w", "attprojb": "o_b", "qkvw": "qkv_w", "qkvb": "qkv_b",
           "ln1w": "a_g", "ln1b": "a_b"}


def _u2_specs():
    fwd = {**{k: f"a.{v}" for k, v in _U2_ACT.items()},
           **{k: f"net.theta[net.at['{v}']]" for k, v in _U2_PAR.items()}}
    grad = {**{k: f"net.d['{v}']" for k, v in _U2_ACT.items()},
            **{k: f"net.grads[net.at['{v}']]" for k, v in _U2_PAR.items()}}
    return keep_first(where("gpt", GPT_STEPS, fwd=fwd, grad=grad.__getitem__, first_after=DROP))


add("gpt_u2_model_object_theta_list_net_step_momentum", "gpt", GPTU2_CELLS, GPT_STEPS + ["train/gpt"],
    notes="own data (crc32 of the name picks the training 80%, rows by slice assignment into a "
          "torch.full); a Scribe object keeps its parameters in a list theta (names in a class "
          "tuple, positions by self.at) and the gradients in a parallel list written by "
          "position; forward returns a namedtuple built from its locals, qkv by addmm, heads by "
          "reshape / permute, an upper-triangular boolean mask; a no_grad backward method fills "
          "grads and a dict d of activation gradients (no first branch kept); step() runs both; "
          "diff() against .grad and autograd.grad; batch 13; 200 steps of net.step with SGD "
          "momentum, weight decay, a cosine learning rate and clipping by total norm, batch 15; "
          "all right",
    where=_u2_specs(),
    checkpoint="a = net.last",
    train={"cell": "for it in range(total_steps)", "probe": "gnorm = torch.sqrt(",
           "params": "dict(zip(net.names, net.theta))", "grads": "dict(zip(net.names, net.grads))",
           "ref": "lambda Q: net.forward(xb, yb, [Q[n] for n in net.names]).loss",
           "losses": "hist"})
# ================================================================================================
# GPT U3 (right throughout). Exercises 2 and 3. The seven functions (scatter_add_ for the
# encoder, layer norm from its normalised input and the two sums, einsum over '...' for the
# weight, chunk / transpose heads, GELU with 3 * 0.044715 folded into one constant,
# softmax - one_hot, AdamW by mul_ / add_ / sub_), each checked by agree() against
# torch.autograd.grad with a random upstream gradient. Then a model of coroutines: every layer a
# generator that yields its output, receives its output's gradient by .send() and yields back
# (dinput, {parameter gradients}) through the functions; forward(P, X, Y) starts the
# generators (kept in a dict by layer name) and returns (loss, state), backward(P, state) sends
# the gradients down in reverse, the residual sums and the tied head's share written out in the
# driver. Parameters in a dict under own keys (tok, pos, n1w, n1b, attw, attb, prw, prb, n2w,
# n2b, upw, upb, dnw, dnb, nfw, nfb). Checked once against autograd; 150 steps of the learner's
# adamw_update with a linear warmup and cosine decay and clipping by total norm, batch 14.

GPTU3_CELLS = [
    r'''
import math
import torch
import torch.nn.functional as F
torch.manual_seed(5150)
''',
    md("## exercise 2: the fused backward functions"),
    r'''
def encoder_backward(dout, inp, vocab_size):
    B, T, C = dout.shape
    dwte = torch.zeros(vocab_size, C, dtype=dout.dtype)
    dwte.scatter_add_(0, inp.reshape(-1, 1).expand(-1, C), dout.reshape(-1, C))
    dwpe = dout.sum(0)
    return dwte, dwpe


def layernorm_backward(dout, inp, weight, mean, rstd):
    C = inp.shape[-1]
    xhat = (inp - mean) * rstd
    dxhat = dout * weight
    dinp = rstd / C * (C * dxhat - dxhat.sum(-1, keepdim=True)
                       - xhat * (dxhat * xhat).sum(-1, keepdim=True))
    return dinp, (dout * xhat).sum((0, 1)), dout.sum((0, 1))


def matmul_backward(dout, inp, weight):
    dinp = torch.matmul(dout, weight.T)
    dweight = torch.einsum('...i,...o->io', inp, dout)
    dbias = dout.sum(tuple(range(dout.dim() - 1)))
    return dinp, dweight, dbias


def attention_backward(dout, qkv, att, n_head):
    B, T, C3 = qkv.shape
    C = C3 // 3
    hs = C // n_head
    split = lambda t: t.reshape(B, T, n_head, hs).transpose(1, 2)
    merge = lambda t: t.transpose(1, 2).reshape(B, T, C)
    q, k, v = (split(t) for t in qkv.chunk(3, dim=-1))
    dy = split(dout)
    datt = dy @ v.transpose(-1, -2)
    dv = att.transpose(-1, -2) @ dy
    dpre = att * (datt - (att * datt).sum(-1, keepdim=True)) * hs**-0.5
    dq = dpre @ k
    dk = dpre.transpose(-1, -2) @ q
    return torch.cat([merge(dq), merge(dk), merge(dv)], dim=-1)


def gelu_backward(dout, inp):
    s = math.sqrt(2 / math.pi)
    t = torch.tanh(s * (inp + 0.044715 * inp**3))
    return dout * (0.5 * (1 + t) + 0.5 * inp * (1 - t * t) * s * (1 + 0.134145 * inp**2))


def crossentropy_softmax_backward(logits, targets):
    N, V = logits.shape
    return (torch.softmax(logits, 1) - F.one_hot(targets, V).to(logits.dtype)) / N


def adamw_update(param, grad, m, v, t, lr, beta1, beta2, eps, weight_decay):
    m.mul_(beta1).add_(grad, alpha=1 - beta1)
    v.mul_(beta2).add_(grad * grad, alpha=1 - beta2)
    mhat = m / (1 - beta1**t)
    vhat = v / (1 - beta2**t)
    param.mul_(1 - lr * weight_decay)
    param.sub_(lr * mhat / (vhat.sqrt() + eps))
''',
    r'''
def agree(tag, mine, *refs):
    ok = all(torch.allclose(a, b, rtol=1e-4, atol=1e-5) for a, b in zip(mine, refs))
    print(tag, ok, max((a - b).abs().max().item() for a, b in zip(mine, refs)))

B_, T_, C_ = 3, 5, 12
x = torch.randn(B_, T_, C_, requires_grad=True)
w = torch.randn(C_, requires_grad=True)
b = torch.randn(C_, requires_grad=True)
mu = x.mean(-1, keepdim=True)
rs = ((x - mu).pow(2).mean(-1, keepdim=True) + 1e-5).rsqrt()
out = (x - mu) * rs * w + b
up = torch.randn_like(out)
agree('layernorm', layernorm_backward(up, x.detach(), w.detach(), mu.detach(), rs.detach()),
      *torch.autograd.grad(out, [x, w, b], up))

W2 = torch.randn(C_, 7, requires_grad=True)
b2 = torch.randn(7, requires_grad=True)
out = x @ W2 + b2
up = torch.randn_like(out)
agree('matmul', matmul_backward(up, x.detach(), W2.detach()), *torch.autograd.grad(out, [x, W2, b2], up))

out = 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
up = torch.randn_like(out)
agree('gelu', [gelu_backward(up, x.detach())], *torch.autograd.grad(out, [x], up))

lg = torch.randn(20, 9, requires_grad=True)
tg = torch.randint(0, 9, (20,))
agree('xent', [crossentropy_softmax_backward(lg.detach(), tg)],
      *torch.autograd.grad(F.cross_entropy(lg, tg), [lg]))

E = torch.randn(11, C_, requires_grad=True)
Pp = torch.randn(T_, C_, requires_grad=True)
ids = torch.randint(0, 11, (B_, T_))
out = E[ids] + Pp
up = torch.randn_like(out)
agree('encoder', encoder_backward(up, ids, 11), *torch.autograd.grad(out, [E, Pp], up))
''',
    r'''
def causal_attention(qkv, nh):
    B, T, C3 = qkv.shape
    C = C3 // 3
    hs = C // nh
    q, k, v = (t.reshape(B, T, nh, hs).transpose(1, 2) for t in qkv.chunk(3, dim=-1))
    s = q @ k.transpose(-1, -2) * hs**-0.5
    s = s.masked_fill(torch.ones(T, T).tril() == 0, float('-inf'))
    att = torch.softmax(s, -1)
    return (att @ v).transpose(1, 2).reshape(B, T, C), att

qkv = torch.randn(2, 6, 3 * 12, requires_grad=True)
y, att = causal_attention(qkv, 3)
up = torch.randn_like(y)
agree('attention', [attention_backward(up, qkv.detach(), att.detach(), 3)],
      *torch.autograd.grad(y, [qkv], up))

p0, g0 = torch.randn(4, 3), torch.randn(4, 3)
ref = p0.clone().requires_grad_()
ref.grad = g0.clone()
opt = torch.optim.AdamW([ref], lr=1e-2, weight_decay=0.1)
opt.step()
mine, m0, v0 = p0.clone(), torch.zeros(4, 3), torch.zeros(4, 3)
adamw_update(mine, g0, m0, v0, 1, 1e-2, 0.9, 0.999, 1e-8, 0.1)
agree('adamw', [mine], ref.detach())
''',
    md("## exercise 3: layers as coroutines\n"
       "`out = next(layer)` runs the forward, `dinp, grads = layer.send(dout)` the backward."),
    r'''
def embed_layer(P, X):
    T = X.shape[1]
    dout = yield P['tok'][X] + P['pos'][:T]
    dtok, dpos = encoder_backward(dout, X, P['tok'].shape[0])
    yield None, {'tok': dtok, 'pos': dpos}

def norm_layer(x, P, key):
    mean = x.mean(-1, keepdim=True)
    rstd = ((x - mean).pow(2).mean(-1, keepdim=True) + 1e-5).rsqrt()
    dout = yield (x - mean) * rstd * P[key + 'w'] + P[key + 'b']
    dx, dw, db = layernorm_backward(dout, x, P[key + 'w'], mean, rstd)
    yield dx, {key + 'w': dw, key + 'b': db}

def dense_layer(x, P, key):
    dout = yield x @ P[key + 'w'] + P[key + 'b']
    dx, dw, db = matmul_backward(dout, x, P[key + 'w'])
    yield dx, {key + 'w': dw, key + 'b': db}

def attn_layer(qkv, nh):
    y, att = causal_attention(qkv, nh)
    dout = yield y
    yield attention_backward(dout, qkv, att, nh), {}

def gelu_layer(x):
    dout = yield 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    yield gelu_backward(dout, x), {}
''',
    r'''
NH = 4

def forward(P, X, Y):
    live = {}
    def start(name, layer):
        live[name] = layer
        return next(layer)
    x0 = start('enc', embed_layer(P, X))
    h = start('n1', norm_layer(x0, P, 'n1'))
    h = start('att', dense_layer(h, P, 'att'))
    h = start('mix', attn_layer(h, NH))
    x1 = x0 + start('pr', dense_layer(h, P, 'pr'))
    h = start('n2', norm_layer(x1, P, 'n2'))
    h = start('up', dense_layer(h, P, 'up'))
    h = start('act', gelu_layer(h))
    x2 = x1 + start('dn', dense_layer(h, P, 'dn'))
    hf = start('nf', norm_layer(x2, P, 'nf'))
    logits = hf @ P['tok'].T
    targets = torch.cat([X[:, 1:], Y[:, None]], 1)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
    return loss, dict(live=live, hf=hf, logits=logits, targets=targets)

def backward(P, st):
    live, grads = st['live'], {}
    def back(name, dout):
        dinp, pg = live[name].send(dout)
        grads.update(pg)
        return dinp
    lg = st['logits']
    dlg = crossentropy_softmax_backward(lg.reshape(-1, lg.shape[-1]),
                                        st['targets'].reshape(-1)).view_as(lg)
    dhf, dtokT, _ = matmul_backward(dlg, st['hf'], P['tok'].T)
    dx2 = back('nf', dhf)
    dx1 = dx2 + back('n2', back('up', back('act', back('dn', dx2))))
    dx0 = dx1 + back('n1', back('att', back('mix', back('pr', dx1))))
    back('enc', dx0)
    grads['tok'] = grads['tok'] + dtokT.T
    return grads
''',
    r'''
words = open('names.txt', encoding='utf-8').read().splitlines()
perm = torch.randperm(len(words)).tolist()
words = [words[j] for j in perm]
vocab = ['.'] + sorted(set(''.join(words)))
to_id = {ch: i for i, ch in enumerate(vocab)}
T, C, V = 16, 32, len(vocab)
Xd = torch.zeros(len(words), T, dtype=torch.long)
Yd = torch.zeros(len(words), dtype=torch.long)
for r, w in enumerate(words):
    ids = [0] + [to_id[ch] for ch in w] + [0]
    ids = ids + [0] * (T + 1 - len(ids))
    Xd[r] = torch.tensor(ids[:T])
    Yd[r] = ids[T]
ntr = int(0.8 * len(words))

def init(seed):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g)
    P = {'tok': 0.1 * r(V, C), 'pos': 0.1 * r(T, C)}
    for key, (i, o, s) in {'att': (C, 3 * C, 1.0), 'pr': (C, C, 0.5),
                           'up': (C, 4 * C, 1.0), 'dn': (4 * C, C, 0.5)}.items():
        P[key + 'w'] = s * r(i, o) / i**0.5
        P[key + 'b'] = 0.1 * r(o)
    for key in ('n1', 'n2', 'nf'):
        P[key + 'w'] = 1 + 0.1 * r(C)
        P[key + 'b'] = 0.1 * r(C)
    return P

P = init(77)
''',
    r'''
Q = {k: v.clone().requires_grad_() for k, v in P.items()}
ib = torch.randint(0, ntr, (14,))
l_auto, _ = forward(Q, Xd[ib], Yd[ib])
l_auto.backward()
l_mine, st = forward(P, Xd[ib], Yd[ib])
mine = backward(P, st)
for k in P:
    agree(k, [mine[k]], Q[k].grad)
''',
    r'''
mom = {k: torch.zeros_like(v) for k, v in P.items()}
sq = {k: torch.zeros_like(v) for k, v in P.items()}
curve = []
n_steps, warm, peak = 150, 10, 3e-3
for step in range(1, n_steps + 1):
    ib = torch.randint(0, ntr, (14,))
    xb, yb = Xd[ib], Yd[ib]
    lv, st = forward(P, xb, yb)
    grads = backward(P, st)
    curve.append(lv.item())
    norm = torch.sqrt(sum((g**2).sum() for g in grads.values()))
    shrink = min(1.0, 1.0 / norm.item())
    if step <= warm:
        lr = peak * step / warm
    else:
        lr = 0.1 * peak + 0.9 * peak * 0.5 * (1 + math.cos(math.pi * (step - warm) / (n_steps - warm)))
    for k in P:
        adamw_update(P[k], grads[k] * shrink, mom[k], sq[k], step, lr, 0.9, 0.95, 1e-8, 0.01)
print(curve[0], sum(curve[-15:]) / 15)
''',
]

add("gpt_u3_coroutine_layers_send_functions_adamw_cosine_clip", "gpt", GPTU3_CELLS,
    GPT_FUNCS + ["train/gpt"],
    notes="exercises 2 and 3: the seven functions (scatter_add_, layer norm from xhat and two "
          "sums, '...' einsum, chunk / transpose heads, GELU with 0.134145, softmax - one_hot, "
          "AdamW by mul_ / add_ / sub_) checked by agree() against autograd.grad; a model of "
          "coroutine layers (a generator per layer yields its output, takes its output's "
          "gradient by send() and yields (dinput, parameter gradients) through the functions); "
          "forward / backward drivers with the residual sums and the tied head written out; "
          "parameters in a dict under own keys; own data (torch.randperm shuffle); checked once "
          "against autograd; 150 steps of adamw_update with warmup, cosine decay and clipping by "
          "total norm, batch 14; all right",
    functions={s: None for s in GPT_FUNCS},
    train={"cell": "for step in range(1, n_steps + 1)", "probe": "norm = torch.sqrt(",
           "params": "P", "grads": "grads", "ref": "lambda Q_: forward(Q_, xb, yb)[0]",
           "losses": "curve"})
# ================================================================================================
# GPT U4 (a slip and its cascades). Own data (names sorted by length then every fifth held out,
# rows by a padded join of strings). Parameters as globals under own names (Etok, Epos, gA, bA,
# Wqkv, cqkv, Wo, co, gB, bB, Wfc, cfc, Wpr, cpr, gF, bF); the forward as top-level lines with
# own names, layer norm through 1 / torch.sqrt, heads by torch.stack(part.split(hs, -1), 1) and
# merged by torch.cat(unbind(1)), the softmax written out (exp of the shifted scores over their
# sum), the mask by torch.where on a boolean tril. Every gradient lives in ONE dict keyed by
# id() of the forward tensor it belongs to, written only through bump(t, g) (which adds) and read
# through grad_of(t); one `with torch.no_grad():` cell per stretch of the backward, so that the
# first branches (the head's share of Etok, xcF's through the normalised output, x2's, x1's and
# x0's skips) are the dict's entries between cells. close_to() against retained .grad. Batch 9;
# exercise 1, every step.
# Slip: the softmax's backward takes the row sum over dim -2 ((P * dP).sum(-2)), the keys' axis
# instead of the queries' row: block/preatt_masked wrong; preatt, qk, qkv, ln1, ln1_affine, x0,
# wpe, wte cascade (x1_residual, whose first branch of dx0 is taken before attention, and
# everything above it stay right).

GPTU4_CELLS = [
    r'''
import math
import torch
import torch.nn.functional as F
''',
    r'''
corpus = open('names.txt', 'r').read().strip().split('\n')
corpus.sort(key=lambda w: (len(w), w))
fit = [w for j, w in enumerate(corpus) if j % 5]
S = '.abcdefghijklmnopqrstuvwxyz'
nV, nT, nC, nHd = len(S), 16, 32, 4
hs = nC // nHd
strings = [('.' + w + '.' + '.' * nT)[:nT + 1] for w in fit]
grid = torch.tensor([[S.index(ch) for ch in s] for s in strings])
''',
    r'''
g = torch.Generator().manual_seed(60606)
def rnd(*shape, scale=1.0, shift=0.0):
    return (shift + scale * torch.randn(*shape, generator=g)).requires_grad_()

Etok = rnd(nV, nC, scale=0.1)
Epos = rnd(nT, nC, scale=0.1)
gA, bA = rnd(nC, scale=0.1, shift=1.0), rnd(nC, scale=0.1)
Wqkv, cqkv = rnd(nC, 3 * nC, scale=nC**-0.5), rnd(3 * nC, scale=0.1)
Wo, co = rnd(nC, nC, scale=0.5 * nC**-0.5), rnd(nC, scale=0.1)
gB, bB = rnd(nC, scale=0.1, shift=1.0), rnd(nC, scale=0.1)
Wfc, cfc = rnd(nC, 4 * nC, scale=nC**-0.5), rnd(4 * nC, scale=0.1)
Wpr, cpr = rnd(4 * nC, nC, scale=0.5 * (4 * nC)**-0.5), rnd(nC, scale=0.1)
gF, bF = rnd(nC, scale=0.1, shift=1.0), rnd(nC, scale=0.1)
''',
    r'''
rows = grid[torch.randint(0, len(grid), (9,), generator=g)]
inp, nxt = rows[:, :nT], rows[:, nT]
n = inp.shape[0]
lower = torch.ones(nT, nT).tril().bool()

emb = Etok[inp]
r0 = emb + Epos
muA = r0.mean(-1, keepdim=True)
xcA = r0 - muA
varA = (xcA**2).mean(-1, keepdim=True)
rsA = 1 / torch.sqrt(varA + 1e-5)
nA = xcA * rsA
hA = nA * gA + bA
QKV = hA @ Wqkv + cqkv
Qh = torch.stack(QKV[..., :nC].split(hs, -1), 1)
Kh = torch.stack(QKV[..., nC:2 * nC].split(hs, -1), 1)
Vh = torch.stack(QKV[..., 2 * nC:].split(hs, -1), 1)
Sraw = Qh @ Kh.transpose(2, 3) * hs**-0.5
Smask = torch.where(lower, Sraw, torch.full_like(Sraw, float('-inf')))
Ex = torch.exp(Smask - Smask.amax(-1, keepdim=True))
Pm = Ex / Ex.sum(-1, keepdim=True)
Oh = Pm @ Vh
Ocat = torch.cat(Oh.unbind(1), -1)
Aout = Ocat @ Wo + co
r1 = r0 + Aout
muB = r1.mean(-1, keepdim=True)
xcB = r1 - muB
varB = (xcB**2).mean(-1, keepdim=True)
rsB = 1 / torch.sqrt(varB + 1e-5)
nB = xcB * rsB
hB = nB * gB + bB
U = hB @ Wfc + cfc
Ug = 0.5 * U * (1 + torch.tanh(math.sqrt(2 / math.pi) * (U + 0.044715 * U**3)))
M = Ug @ Wpr + cpr
r2 = r1 + M
muF = r2.mean(-1, keepdim=True)
xcF = r2 - muF
varF = (xcF**2).mean(-1, keepdim=True)
rsF = 1 / torch.sqrt(varF + 1e-5)
nF = xcF * rsF
hF = nF * gF + bF
scores = hF @ Etok.T
want = torch.cat([inp[:, 1:], nxt[:, None]], 1)
loss = F.cross_entropy(scores.view(-1, nV), want.view(-1))
every = [emb, r0, muA, xcA, varA, rsA, nA, hA, QKV, Qh, Kh, Vh, Sraw, Smask, Pm, Oh, Ocat, Aout,
         r1, muB, xcB, varB, rsB, nB, hB, U, Ug, M, r2, muF, xcF, varF, rsF, nF, hF, scores]
for t in every:
    t.retain_grad()
loss.backward()
loss.item()
''',
    md("every gradient in one dict keyed by id(tensor)"),
    r'''
adj = {}
def bump(t, gval):
    k = id(t)
    adj[k] = gval if k not in adj else adj[k] + gval
def grad_of(t):
    return adj[id(t)]
def close_to(*ts):
    for t in ts:
        print(tuple(t.shape), torch.allclose(grad_of(t), t.grad, rtol=1e-4, atol=1e-6),
              f"{(grad_of(t) - t.grad).abs().max().item():.1e}")
''',
    r'''
with torch.no_grad():
    sm = torch.softmax(scores, -1)
    sm.view(-1, nV)[torch.arange(n * nT), want.view(-1)] -= 1
    bump(scores, sm / (n * nT))
    bump(hF, grad_of(scores) @ Etok)
    bump(Etok, torch.einsum('btv,btc->vc', grad_of(scores), hF))
    bump(nF, grad_of(hF) * gF)
    bump(gF, (grad_of(hF) * nF).sum((0, 1)))
    bump(bF, grad_of(hF).sum((0, 1)))
    bump(rsF, (grad_of(nF) * xcF).sum(-1, keepdim=True))
    bump(xcF, grad_of(nF) * rsF)
close_to(scores, hF, nF, gF, bF, rsF)
''',
    r'''
with torch.no_grad():
    bump(varF, grad_of(rsF) * -0.5 * (varF + 1e-5)**-1.5)
    bump(xcF, grad_of(varF) * 2 * xcF / nC)
    bump(muF, -grad_of(xcF).sum(-1, keepdim=True))
    bump(r2, grad_of(xcF))
close_to(varF, xcF, muF)
''',
    r'''
with torch.no_grad():
    bump(r2, grad_of(muF).expand_as(r2) / nC)
    bump(M, grad_of(r2))
    bump(r1, grad_of(r2))
close_to(r2, M)
''',
    r'''
with torch.no_grad():
    bump(Ug, grad_of(M) @ Wpr.T)
    bump(Wpr, torch.einsum('bti,bto->io', Ug, grad_of(M)))
    bump(cpr, grad_of(M).sum((0, 1)))
    kk = math.sqrt(2 / math.pi)
    tU = torch.tanh(kk * (U + 0.044715 * U**3))
    bump(U, grad_of(Ug) * (0.5 * (1 + tU) + 0.5 * U * (1 - tU**2) * kk * (1 + 3 * 0.044715 * U**2)))
    bump(hB, grad_of(U) @ Wfc.T)
    bump(Wfc, torch.einsum('bti,bto->io', hB, grad_of(U)))
    bump(cfc, grad_of(U).sum((0, 1)))
    bump(nB, grad_of(hB) * gB)
    bump(gB, (grad_of(hB) * nB).sum((0, 1)))
    bump(bB, grad_of(hB).sum((0, 1)))
    dn = grad_of(nB)
    bump(r1, rsB * (dn - dn.mean(-1, keepdim=True) - nB * (dn * nB).mean(-1, keepdim=True)))
close_to(Ug, Wpr, U, hB, Wfc, nB, gB, r1)
''',
    r'''
with torch.no_grad():
    bump(Aout, grad_of(r1))
    bump(r0, grad_of(r1))
close_to(Aout)
''',
    r'''
with torch.no_grad():
    bump(Ocat, grad_of(Aout) @ Wo.T)
    bump(Wo, torch.einsum('bti,bto->io', Ocat, grad_of(Aout)))
    bump(co, grad_of(Aout).sum((0, 1)))
    bump(Oh, torch.stack(grad_of(Ocat).split(hs, -1), 1))
    bump(Pm, grad_of(Oh) @ Vh.transpose(2, 3))
    bump(Vh, Pm.transpose(2, 3) @ grad_of(Oh))
    dP = grad_of(Pm)
    bump(Smask, Pm * (dP - (Pm * dP).sum(-2, keepdim=True)))
    bump(Sraw, torch.where(lower, grad_of(Smask), torch.zeros_like(Sraw)))
    bump(Qh, grad_of(Sraw) @ Kh * hs**-0.5)
    bump(Kh, grad_of(Sraw).transpose(2, 3) @ Qh * hs**-0.5)
close_to(Ocat, Oh, Pm, Vh, Smask, Sraw, Qh, Kh)
''',
    r'''
with torch.no_grad():
    bump(QKV, torch.cat([torch.cat(grad_of(h_).unbind(1), -1) for h_ in (Qh, Kh, Vh)], -1))
    bump(hA, grad_of(QKV) @ Wqkv.T)
    bump(Wqkv, torch.einsum('bti,bto->io', hA, grad_of(QKV)))
    bump(cqkv, grad_of(QKV).sum((0, 1)))
    bump(nA, grad_of(hA) * gA)
    bump(gA, (grad_of(hA) * nA).sum((0, 1)))
    bump(bA, grad_of(hA).sum((0, 1)))
    dn = grad_of(nA)
    bump(r0, rsA * (dn - dn.mean(-1, keepdim=True) - nA * (dn * nA).mean(-1, keepdim=True)))
    bump(emb, grad_of(r0))
    bump(Epos, grad_of(r0).sum(0))
    bump(Etok, torch.zeros_like(Etok).index_add_(0, inp.reshape(-1), grad_of(emb).reshape(-1, nC)))
close_to(QKV, hA, Wqkv, r0, emb, Epos, Etok)
''',
]

_U4_F = {"logits": "scores", "lnf": "hF", "lnf_norm": "nF", "lnf_rstd": "rsF",
         "lnf_var": "varF", "lnf_xc": "xcF", "lnf_mean": "muF", "x2": "r2", "fcproj": "M",
         "fch_gelu": "Ug", "fch": "U", "ln2": "hB", "ln2_norm": "nB", "x1": "r1",
         "attproj": "Aout", "y": "Ocat", "atty": "Oh", "att": "Pm", "v": "Vh",
         "preatt_masked": "Smask", "preatt": "Sraw", "q": "Qh", "k": "Kh", "qkv": "QKV",
         "ln1": "hA", "ln1_norm": "nA", "x0": "r0", "tok": "emb",
         "wte": "Etok", "wpe": "Epos", "lnfw": "gF", "lnfb": "bF", "fcprojw": "Wpr",
         "fcprojb": "cpr", "fcw": "Wfc", "fcb": "cfc", "ln2w": "gB", "ln2b": "bB",
         "attprojw": "Wo", "attprojb": "co", "qkvw": "Wqkv", "qkvb": "cqkv", "ln1w": "gA",
         "ln1b": "bA"}

add("gpt_u4_id_keyed_adjoint_dict_softmax_axis_slip", "gpt", GPTU4_CELLS, GPT_STEPS,
    wrong=["block/preatt_masked"],
    cascade=["block/preatt", "block/qk", "block/qkv", "block/ln1", "block/ln1_affine", "block/x0",
             "block/wpe", "block/wte"],
    notes="own data (names sorted by length, every fifth held out, rows from padded strings); "
          "parameters as globals under own names; the forward as top-level lines, layer norm "
          "through 1 / sqrt, heads by stack(split) and cat(unbind), the softmax written out, "
          "the mask by torch.where; every gradient in one dict keyed by id() of its forward "
          "tensor, written by bump() (adding) and read by grad_of(); one no_grad cell per "
          "stretch, first branches as the dict's entries between cells; close_to() against "
          "retained .grad; batch 9; exercise 1, every step. Slip: the softmax's backward sums "
          "P * dP over dim -2 instead of the row; preatt, qk, qkv, ln1, ln1_affine, x0, wpe, "
          "wte cascade",
    where=where("gpt", GPT_STEPS, fwd=_U4_F, grad=lambda k: f"grad_of({_U4_F[k]})",
                first_after={"wte": "bump(Etok, torch.einsum('btv,btc->vc'",
                             "lnf_xc": "bump(xcF, grad_of(nF) * rsF)",
                             "x2": "bump(r2, grad_of(xcF))",
                             "x1": "bump(r1, grad_of(r2))",
                             "x0": "bump(r0, grad_of(r1))"}),
    fix=[("(Pm * dP).sum(-2, keepdim=True)", "(Pm * dP).sum(-1, keepdim=True)")])
# ================================================================================================
# LSTM U5 (a slip and its cascades). Own data (names filtered to those of at least two letters,
# a Generator(2718) permutation, X / Y rows built with F.pad to the longest name, Y padded with
# -1). The learner's own gate order: the columns of every gate weight are (g, i, f, o), one
# torch.split(H, 1) gives the four pre-activations, and torch_order() / own_order() permute the
# column blocks to PyTorch's (i, f, g, o) for the setup's run_lstm (copied in) before and after
# step t, and back. Parameters as globals under own names (Emb, Wxg, Whg, bg, Why, bhy), step
# t's clones Wxg_t, Whg_t, bg_t; gradients as Greek-named globals (δlogits, δhs, δht, δct, δog,
# δfg, δig, δcand, δc_prev, δz, δx_t, ...), first branches held by rebinding (δht, δct),
# report() with allclose against retained .grad. Fused gates as one expression on the four gate
# gradients. lstm_step_backward and lstm_backward written to the exercise's (i, f, g, o)
# convention; the training forward writes its states into preallocated [T + 1, n, H] buffers
# (the previous state read back by .clone()), keeps its (i, f, g, o) gates in a namedtuple, and
# runs lstm_backward with the weights permuted to PyTorch's order, the gradients permuted back;
# SGD with a step-decayed learning rate and clipping by total norm, 150 steps, batch 29.
# Exercise 1 on a batch of 23.
# Slip: the product rule of c = f * c_prev + i * g with the partners swapped: δfg = δct * cand
# and δig = δct * c_prev (step/c wrong; gates, ifgo, inputs and fused/gates cascade, while
# step/g, whose δcand = δct * ig is right, and the functions and training stay right).

LSTMU5_CELLS = [
    r'''
import torch
import torch.nn.functional as F
from collections import namedtuple
''',
    r'''
pool = [w for w in open('names.txt').read().splitlines() if len(w) >= 2]
gen = torch.Generator().manual_seed(2718)
pool = [pool[j] for j in torch.randperm(len(pool), generator=gen)]
abc = sorted(set(''.join(pool)))
enc = {ch: 1 + j for j, ch in enumerate(abc)}
V = len(abc) + 1
L = max(len(w) for w in pool) + 1

def rows(ws):
    X = torch.stack([F.pad(torch.tensor([0] + [enc[c] for c in w]), (0, L - len(w) - 1)) for w in ws])
    Y = torch.stack([F.pad(torch.tensor([enc[c] for c in w] + [0]), (0, L - len(w) - 1), value=-1)
                     for w in ws])
    return X, Y

Xtr, Ytr = rows(pool[:int(0.8 * len(pool))])

def batch_of(n):
    j = torch.randint(0, len(Xtr), (n,), generator=gen)
    xb, yb = Xtr[j], Ytr[j]
    Tn = int((yb >= 0).sum(1).max())
    return xb[:, :Tn], yb[:, :Tn]
''',
    r'''
LSTMRun = namedtuple("LSTMRun", ["hs", "h", "c"])

def run_lstm(xs, h, c, Wx, Wh, b):
    hs, h, c = torch.lstm(xs, (h[None], c[None]), (Wx.T, Wh.T, b, b * 0), True, 1, 0.0, False,
                          False, True)
    return LSTMRun(hs, h[0], c[0])

D, H = 10, 32

def torch_order(W):
    # my columns are (g, i, f, o); torch wants (i, f, g, o)
    g_, i_, f_, o_ = W.split(H, -1)
    return torch.cat([i_, f_, g_, o_], -1)

def own_order(W):
    i_, f_, g_, o_ = W.split(H, -1)
    return torch.cat([g_, i_, f_, o_], -1)
''',
    r'''
Emb = torch.randn(V, D, generator=gen)
Wxg = torch.randn(D, 4 * H, generator=gen) / D**0.5
Whg = torch.randn(H, 4 * H, generator=gen) / H**0.5
bg = 0.1 * torch.randn(4 * H, generator=gen)
bg[2 * H:3 * H] += 1.0          # forget gate (third block in my order) starts open
Why = torch.randn(H, V, generator=gen) / H**0.5
bhy = 0.1 * torch.randn(V, generator=gen)
params = [Emb, Wxg, Whg, bg, Why, bhy]
for p in params:
    p.requires_grad_()
''',
    r'''
t = 3
xb, yb = batch_of(23)
nb = xb.shape[0]
E_ = Emb[xb]
z0 = torch.zeros(nb, H)
early = run_lstm(E_[:, :t], z0, z0, torch_order(Wxg), torch_order(Whg), torch_order(bg))
hs_early, hp, cp = early.hs, early.h, early.c
x_t = E_[:, t]
Wxg_t, Whg_t, bg_t = Wxg.clone(), Whg.clone(), bg.clone()
z = x_t @ Wxg_t + hp @ Whg_t + bg_t
zg, zi, zf, zo = torch.split(z, H, dim=1)
cand = torch.tanh(zg)
ig = torch.sigmoid(zi)
fg = torch.sigmoid(zf)
og = torch.sigmoid(zo)
ct = fg * cp + ig * cand
ht = og * torch.tanh(ct)
hc = torch.stack([ht, ct])
late = run_lstm(E_[:, t + 1:], hc[0], hc[1], torch_order(Wxg), torch_order(Whg), torch_order(bg))
hs_late = late.hs
hs = torch.cat([hs_early, ht.unsqueeze(1), hs_late], dim=1)
logits = hs @ Why + bhy
loss = F.cross_entropy(logits.flatten(0, 1), yb.flatten(), ignore_index=-1)
for a in (logits, hs, hs_early, hs_late, hc, ht, ct, og, fg, ig, cand, zg, zi, zf, zo, z, x_t, hp, cp,
          Wxg_t, Whg_t, bg_t):
    a.retain_grad()
loss.backward()
print(xb.shape, loss.item())
''',
    r'''
def report(**kw):
    for k, (mine, a) in kw.items():
        print(f"{k:8s} {torch.allclose(mine, a.grad, rtol=1e-4, atol=1e-6)!s:5s} "
              f"{(mine - a.grad).abs().max().item():.1e}")
''',
    r'''
with torch.no_grad():
    real = (yb >= 0).float()
    sp = torch.softmax(logits, -1)
    oh = F.one_hot(yb.clamp(min=0), V).float()
    δlogits = (sp - oh) * real[..., None] / real.sum()
    δhs = δlogits @ Why.T
    δWhy = torch.einsum('bth,btv->hv', hs, δlogits)
    δbhy = δlogits.sum((0, 1))
    δhs_early, δhs_late = δhs[:, :t], δhs[:, t + 1:]
    δht = δhs[:, t]
report(logits=(δlogits, logits), hs=(δhs, hs), Why=(δWhy, Why), early=(δhs_early, hs_early))
''',
    r'''
δht = δht + hc.grad[0]
δct = hc.grad[1]
''',
    r'''
with torch.no_grad():
    th = torch.tanh(ct)
    δog = δht * th
    δct = δct + δht * og * (1 - th**2)
    δfg = δct * cand
    δc_prev = δct * fg
    δig = δct * cp
    δcand = δct * ig
report(ht=(δht, ht), ct=(δct, ct), og=(δog, og), fg=(δfg, fg), ig=(δig, ig), cand=(δcand, cand), cp=(δc_prev, cp))
''',
    r'''
with torch.no_grad():
    δzi = δig * ig * (1 - ig)
    δzf = δfg * fg * (1 - fg)
    δzo = δog * og * (1 - og)
    δzg = δcand * (1 - cand**2)
    δz = torch.cat([δzg, δzi, δzf, δzo], 1)
    δx_t = δz @ Wxg_t.T
    δhp = δz @ Whg_t.T
    δWxg_t = x_t.T @ δz
    δWhg_t = hp.T @ δz
    δbg_t = δz.sum(0)
report(zi=(δzi, zi), zg=(δzg, zg), z=(δz, z), x_t=(δx_t, x_t), hp=(δhp, hp), Wx=(δWxg_t, Wxg_t))
''',
    md("fused: all four gates in one line (my order g, i, f, o)"),
    r'''
with torch.no_grad():
    δz_fused = torch.cat([δcand, δig, δfg, δog], 1) * torch.cat(
        [1 - cand**2, ig * (1 - ig), fg * (1 - fg), og * (1 - og)], 1)
report(fused=(δz_fused, z))
''',
    md("## the step and BPTT as functions (exercise convention: gates i, f, g, o)"),
    r'''
def lstm_step_backward(dh, dc, x, h_prev, c_prev, c, gates, Wx, Wh):
    i, f, g, o = gates.chunk(4, dim=1)
    tc = torch.tanh(c)
    dc = dc + dh * o * (1 - tc * tc)
    dpre = torch.cat([dc * g * i * (1 - i), dc * c_prev * f * (1 - f),
                      dc * i * (1 - g * g), dh * tc * o * (1 - o)], 1)
    return dpre @ Wx.T, dpre @ Wh.T, dc * f, x.T @ dpre, h_prev.T @ dpre, dpre.sum(0)


def lstm_backward(dhs, xs, h0, c0, hs, cs, gates, Wx, Wh):
    n, T, _ = xs.shape
    dxs = torch.empty_like(xs)
    dWx, dWh = torch.zeros_like(Wx), torch.zeros_like(Wh)
    db = torch.zeros(Wx.shape[1], dtype=xs.dtype)
    dh, dc = torch.zeros_like(h0), torch.zeros_like(c0)
    for s in range(T - 1, -1, -1):
        h_prev = hs[:, s - 1] if s else h0
        c_prev = cs[:, s - 1] if s else c0
        dxs[:, s], dh, dc, a_, b_, c_ = lstm_step_backward(
            dhs[:, s] + dh, dc, xs[:, s], h_prev, c_prev, cs[:, s], gates[:, s], Wx, Wh)
        dWx += a_
        dWh += b_
        db += c_
    return dxs, dh, dc, dWx, dWh, db
''',
    md("## training"),
    r'''
Cache = namedtuple('Cache', 'xs hbuf cbuf gates logits')

def unroll(P, xb):
    Emb_, Wx_, Wh_, b_, Wy_, by_ = P
    n, Tn = xb.shape
    xs = Emb_[xb]
    hbuf = torch.zeros(Tn + 1, n, H)
    cbuf = torch.zeros(Tn + 1, n, H)
    gl = []
    for s in range(Tn):
        h_prev, c_prev = hbuf[s].clone(), cbuf[s].clone()
        a_g, a_i, a_f, a_o = torch.split(xs[:, s] @ Wx_ + h_prev @ Wh_ + b_, H, dim=1)
        gi, gf, gg, go = a_i.sigmoid(), a_f.sigmoid(), a_g.tanh(), a_o.sigmoid()
        c = gf * c_prev + gi * gg
        cbuf[s + 1] = c
        hbuf[s + 1] = go * c.tanh()
        gl.append(torch.cat([gi, gf, gg, go], 1))
    lg = hbuf[1:].transpose(0, 1) @ Wy_ + by_
    return Cache(xs, hbuf, cbuf, torch.stack(gl, 1), lg)

def loss_of(P, xb, yb):
    lg = unroll(P, xb).logits
    return F.cross_entropy(lg.flatten(0, 1), yb.flatten(), ignore_index=-1)
''',
    r'''
for p in params:
    p.requires_grad_(False)
names = ['Emb', 'Wxg', 'Whg', 'bg', 'Why', 'bhy']
track = []
for it in range(150):
    xb, yb = batch_of(29)
    ca = unroll(params, xb)
    ok = (yb >= 0).float()
    dlg = (torch.softmax(ca.logits, -1) - F.one_hot(yb.clamp(min=0), V)) * ok[..., None] / ok.sum()
    track.append(F.cross_entropy(ca.logits.flatten(0, 1), yb.flatten(), ignore_index=-1).item())
    hseq = ca.hbuf[1:].transpose(0, 1)
    z0 = torch.zeros(xb.shape[0], H)
    dxs, _, _, dWx, dWh, db = lstm_backward(dlg @ params[4].T, ca.xs, z0, z0, hseq,
                                            ca.cbuf[1:].transpose(0, 1), ca.gates,
                                            torch_order(params[1]), torch_order(params[2]))
    gr = [torch.zeros_like(params[0]).index_add_(0, xb.flatten(), dxs.flatten(0, 1)),
          own_order(dWx), own_order(dWh), own_order(db),
          hseq.flatten(0, 1).T @ dlg.flatten(0, 1), dlg.sum((0, 1))]
    clip = (sum((g_ * g_).sum() for g_ in gr).sqrt() / 5.0).clamp(min=1.0)
    lr = 1.0 if it < 100 else 0.3
    for p, g_ in zip(params, gr):
        p -= lr * g_ / clip
print(track[0], sum(track[-15:]) / 15)
''',
]

_L5_F = {"logits": "logits", "hs": "hs", "Wy": "Why", "by": "bhy", "hs_before": "hs_early",
         "hs_after": "hs_late", "h": "ht", "c": "ct", "state": "hc", "o": "og", "f": "fg",
         "i": "ig", "g": "cand", "c_prev": "cp", "ai": "zi", "af": "zf", "ag": "zg", "ao": "zo",
         "ifgo": "z", "x_t": "x_t", "h_prev": "hp", "Wx_t": "Wxg_t", "Wh_t": "Whg_t",
         "b_t": "bg_t"}
_L5_G = {"logits": "δlogits", "hs": "δhs", "Wy": "δWhy", "by": "δbhy", "hs_before": "δhs_early",
         "hs_after": "δhs_late", "h": "δht", "c": "δct", "o": "δog", "f": "δfg", "i": "δig",
         "g": "δcand", "c_prev": "δc_prev", "ai": "δzi", "af": "δzf", "ag": "δzg", "ao": "δzo",
         "ifgo": "δz", "x_t": "δx_t", "h_prev": "δhp", "Wx_t": "δWxg_t", "Wh_t": "δWhg_t",
         "b_t": "δbg_t"}


def _l5_specs():
    specs = where("lstm", LSTM_STEPS, fwd=_L5_F, grad=_L5_G.__getitem__,
                  first_after={"h": "δht = δhs[:, t]", "c": "δct = hc.grad[1]"})
    specs["fused/gates"] = [("δz_fused", "G(z)")]
    return specs


add("lstm_u5_own_gate_order_greek_names_state_buffers_clip", "lstm", LSTMU5_CELLS, LSTM_ALL,
    wrong=["step/c"],
    cascade=["step/gates", "step/ifgo", "step/inputs", "fused/gates"],
    notes="own data (names of two letters or more, Generator(2718) permutation, rows by F.pad); "
          "the learner's own gate order (g, i, f, o) with torch_order() / own_order() column "
          "permutations around the setup's run_lstm (copied in); parameters as globals under own "
          "names; gradients as Greek-named globals (δht, δct, ...), first branches held by "
          "rebinding; report() with allclose against retained .grad; batch 23; fused gates as "
          "one expression on the four gate gradients; lstm_step_backward / lstm_backward in the "
          "exercise's (i, f, g, o) convention; a training forward writing its states into "
          "preallocated [T + 1, n, H] buffers with its gates in a namedtuple, lstm_backward on "
          "permuted weights and permuted-back gradients; SGD with a step-decayed rate and "
          "clipping by total norm, 150 steps, batch 29. Slip: the product rule of c with the "
          "partners swapped (δfg = δct * cand, δig = δct * cp); gates, ifgo, inputs and "
          "fused/gates cascade",
    where=_l5_specs(),
    checkpoint="report(fused=(δz_fused, z))",
    functions={"bptt/lstm_backward": None, "fused/lstm_step_backward": None},
    train={"cell": "for it in range(150)", "probe": "clip = (sum(",
           "params": "dict(zip(names, params))", "grads": "dict(zip(names, gr))",
           "ref": "lambda Q: loss_of([Q[k] for k in names], xb, yb)", "losses": "track"},
    fix=[("δfg = δct * cand", "δfg = δct * cp"), ("δig = δct * cp", "δig = δct * cand")])
# ================================================================================================
# CONV U6 (right throughout). Own data (a Generator(99) permutation of the names, makemore
# windows of 8 built by a deque). The three layers as dicts in a list `net` (d, K, bias), the
# forward writing each layer's input, tap values, pre-activation and output into its dict. Each
# dilated causal convolution by explicit index arithmetic: tap_index(T, d) gives, for every
# output position t and tap k, the input position t - d * (1 - k) (clamped at 0) and a 0 / 1
# mask for positions before the start, the taps gathered by fancy indexing into [B, Cin, T, 2]
# and contracted with the kernel by torch.einsum. The backward writes into the same dicts: the
# kernel's gradient by einsum with the taps, the taps' gradient masked and scattered back onto
# the input positions by index_add_ along the time axis; dE by index_put_ with accumulate.
# worst() relative errors against retained .grad. Batch 44; then 200 steps of SGD with Nesterov
# momentum, decoupled weight decay and a learning rate cut once, batch 52.

CONVU6_CELLS = [
    md("# dilated convs with my own index arithmetic"),
    r'''
from collections import deque
import torch
import torch.nn.functional as F
''',
    r'''
src = open('names.txt').read().split('\n')
src = [w for w in src if w]
gen = torch.Generator().manual_seed(99)
order = torch.randperm(len(src), generator=gen).tolist()
letters = 'abcdefghijklmnopqrstuvwxyz'
pos = {c: i + 1 for i, c in enumerate(letters)}
W8 = 8
xs_, ys_ = [], []
for j in order[:int(0.8 * len(src))]:
    win = deque([0] * W8, maxlen=W8)
    for ch in src[j] + '.':
        nxt = pos.get(ch, 0)
        xs_.append(list(win))
        ys_.append(nxt)
        win.append(nxt)
Xtr, Ytr = torch.tensor(xs_), torch.tensor(ys_)
len(Xtr)
''',
    r'''
V, E, Hd = 27, 10, 64
def kernel(cout, cin):
    return torch.randn(cout, cin, 2, generator=gen) * (5 / 3) / (2 * cin) ** 0.5
Etab = torch.randn(V, E, generator=gen)
net = [dict(d=1, K=kernel(Hd, E), bias=0.1 * torch.randn(Hd, generator=gen)),
       dict(d=2, K=kernel(Hd, Hd), bias=0.1 * torch.randn(Hd, generator=gen)),
       dict(d=4, K=kernel(Hd, Hd), bias=0.1 * torch.randn(Hd, generator=gen))]
Wout = 0.1 * torch.randn(Hd, V, generator=gen)
bout = 0.1 * torch.randn(V, generator=gen)
leaves = [Etab, Wout, bout] + [l[k] for l in net for k in ('K', 'bias')]
for p in leaves:
    p.requires_grad_()
''',
    r'''
def tap_index(T, d):
    t = torch.arange(T)[:, None]
    k = torch.arange(2)[None, :]
    at = t - d * (1 - k)          # tap 0 looks d steps back, tap 1 at t itself
    return at.clamp(min=0), (at >= 0).float()

def conv_fwd(lay, a):
    T = a.shape[-1]
    where, live = tap_index(T, lay['d'])
    lay['inp'] = a
    lay['taps'] = a[:, :, where] * live          # [B, Cin, T, 2]
    lay['pre'] = torch.einsum('bitk,oik->bot', lay['taps'], lay['K']) + lay['bias'][:, None]
    lay['out'] = torch.tanh(lay['pre'])
    return lay['out']

def model(xb, yb, layers, Etab, Wout, bout):
    vec = Etab[xb]
    chan = vec.transpose(1, 2)
    h = chan
    for lay in layers:
        h = conv_fwd(lay, h)
    fin = h[:, :, -1]
    logit = fin @ Wout + bout
    return vec, chan, fin, logit, F.cross_entropy(logit, yb)
''',
    r'''
ib = torch.randint(0, len(Xtr), (44,), generator=gen)
xb, yb = Xtr[ib], Ytr[ib]
vec, chan, fin, logit, loss = model(xb, yb, net, Etab, Wout, bout)
for t_ in [vec, chan, fin, logit] + [l[k] for l in net for k in ('pre', 'out')]:
    t_.retain_grad()
loss.backward()
loss.item()
''',
    r'''
def worst(name, mine, ref):
    r = ((mine - ref.grad).abs().max() / ref.grad.abs().max().clamp(min=1e-12)).item()
    print(f"{name:10s} {r:.1e}", "" if r < 1e-4 else "<-- !!")
''',
    r'''
def conv_bwd(lay, dout):
    lay['dout'] = dout
    lay['dpre'] = dout * (1 - lay['out'] ** 2)
    lay['dK'] = torch.einsum('bot,bitk->oik', lay['dpre'], lay['taps'])
    lay['dbias'] = lay['dpre'].sum((0, 2))
    T = lay['dpre'].shape[-1]
    where, live = tap_index(T, lay['d'])
    dtaps = torch.einsum('bot,oik->bitk', lay['dpre'], lay['K']) * live
    lay['dinp'] = torch.zeros_like(lay['inp']).index_add_(2, where.flatten(), dtaps.flatten(2))
    return lay['dinp']

with torch.no_grad():
    B = xb.shape[0]
    dlogit = F.softmax(logit, -1)
    dlogit[torch.arange(B), yb] -= 1
    dlogit /= B
    dfin = dlogit @ Wout.T
    dWout = fin.T @ dlogit
    dbout = dlogit.sum(0)
    dh = torch.zeros_like(net[2]['out'])
    dh[:, :, -1] = dfin
    for lay in reversed(net):
        dh = conv_bwd(lay, dh)
    dchan = dh
    dvec = dchan.transpose(1, 2)
    dEtab = torch.zeros_like(Etab).index_put_((xb.flatten(),), dvec.reshape(-1, E), accumulate=True)
worst('logit', dlogit, logit); worst('fin', dfin, fin); worst('Wout', dWout, Wout)
for l, lay in enumerate(net, 1):
    worst(f'out{l}', lay['dout'], lay['out']); worst(f'pre{l}', lay['dpre'], lay['pre'])
    worst(f'K{l}', lay['dK'], lay['K']); worst(f'bias{l}', lay['dbias'], lay['bias'])
worst('chan', dchan, chan); worst('vec', dvec, vec); worst('Etab', dEtab, Etab)
''',
    md("## train"),
    r'''
def all_grads(xb, yb):
    vec, chan, fin, logit, l = model(xb, yb, net, Etab, Wout, bout)
    dl = (F.softmax(logit, -1) - F.one_hot(yb, V)) / len(yb)
    dh = torch.zeros_like(net[2]['out'])
    dh[:, :, -1] = dl @ Wout.T
    for lay in reversed(net):
        dh = conv_bwd(lay, dh)
    gE = torch.zeros_like(Etab).index_put_((xb.flatten(),), dh.transpose(1, 2).reshape(-1, E),
                                           accumulate=True)
    grads = [gE, fin.T @ dl, dl.sum(0)] + [lay[k] for lay in net for k in ('dK', 'dbias')]
    return l, grads

def loss_at(ps, xb, yb):
    layers = [dict(d=lay['d'], K=ps[3 + 2 * j], bias=ps[4 + 2 * j]) for j, lay in enumerate(net)]
    return model(xb, yb, layers, ps[0], ps[1], ps[2])[-1]
''',
    r'''
for p in leaves:
    p.requires_grad_(False)
tags = ['E', 'Wout', 'bout', 'K1', 'b1', 'K2', 'b2', 'K3', 'b3']
buf = [torch.zeros_like(p) for p in leaves]
lossi = []
for step in range(200):
    ib = torch.randint(0, len(Xtr), (52,), generator=gen)
    xb, yb = Xtr[ib], Ytr[ib]
    l, grads = all_grads(xb, yb)
    lossi.append(l.item())
    lr = 0.05 if step < 150 else 0.01
    for p, g_, m in zip(leaves, grads, buf):
        m.mul_(0.9).add_(g_)
        p.mul_(1 - lr * 1e-4)
        p.sub_(lr * (g_ + 0.9 * m))
print(lossi[0], sum(lossi[-20:]) / 20)
''',
]

_C6_F = {"logits": "logit", "last": "fin", "W": "Wout", "b": "bout", "h3": "net[2]['out']",
         "h3pre": "net[2]['pre']", "h2": "net[1]['out']", "w3": "net[2]['K']",
         "b3": "net[2]['bias']", "h2pre": "net[1]['pre']", "h1": "net[0]['out']",
         "w2": "net[1]['K']", "b2": "net[1]['bias']", "h1pre": "net[0]['pre']", "x": "chan",
         "w1": "net[0]['K']", "b1": "net[0]['bias']", "emb": "vec", "C": "Etab"}
_C6_G = {"logits": "dlogit", "last": "dfin", "W": "dWout", "b": "dbout", "h3": "net[2]['dout']",
         "h3pre": "net[2]['dpre']", "h2": "net[1]['dout']", "w3": "net[2]['dK']",
         "b3": "net[2]['dbias']", "h2pre": "net[1]['dpre']", "h1": "net[0]['dout']",
         "w2": "net[1]['dK']", "b2": "net[1]['dbias']", "h1pre": "net[0]['dpre']", "x": "dchan",
         "w1": "net[0]['dK']", "b1": "net[0]['dbias']", "emb": "dvec", "C": "dEtab"}

add("conv_u6_index_arithmetic_taps_layer_dicts_nesterov", "conv", CONVU6_CELLS, CONV_ALL,
    notes="own data (Generator(99) permutation, makemore windows by a deque); the layers as "
          "dicts in a list (d, K, bias) into which the forward and backward write; each dilated "
          "causal convolution by explicit index arithmetic (input position t - d * (1 - k), "
          "clamped, with a mask before the start), taps gathered into [B, Cin, T, 2] and "
          "contracted by einsum; the backward masks the taps' gradient and scatters it back by "
          "index_add_ along time; dE by index_put_ accumulate; worst() relative errors against "
          "retained .grad; batch 44; 200 steps of SGD with Nesterov momentum, decoupled weight "
          "decay and one learning-rate cut, batch 52; all right",
    where=where("conv", CONV_STEPS, fwd=_C6_F, grad=_C6_G.__getitem__),
    checkpoint="worst('chan', dchan, chan)",
    train={"cell": "for step in range(200)", "probe": "lossi.append(l.item())",
           "params": "dict(zip(tags, leaves))", "grads": "dict(zip(tags, grads))",
           "ref": "lambda Q: loss_at([Q[k] for k in tags], xb, yb)", "losses": "lossi"})
