"""Learners' own notebooks for the gpt, lstm and conv lessons, with each step's truth: an eighth
corpus, tune half (a holdout half, if there is one, was written separately and not read here).

Six notebooks: four for gpt, one for lstm, one for conv, in layouts that the earlier corpora do not
use: one small class per operation (not per layer) chained by hand, a forward written in
torch.nn.functional calls on nn-oriented [out, in] weights with autograd's gradients caught by
tensor hooks, llm.c's own memory layout (every parameter a view into one flat buffer, AdamW once
over it), a learner who writes the softmax's and the layer norms' explicit Jacobians, a time-major
LSTM with its states keyed by (name, time step) and its BPTT over per-step Python lists, and
convolutions as im2col through F.unfold with F.fold as their adjoint. Each is a learner's own
notebook: the lesson's forward pass copied in (renamed and re-laid-out), their own loading of
'names.txt' (the truth runner points it at data/names.txt), their own seed and init, the backward
pass in a layout matching the forward, their own comparison helper, and where they train (three of
the six), a loop of at most 300 steps on their own gradients and an update of their own.
Architecture sizes are the lessons' [lesson] sizes throughout (gpt_u3 trains two blocks of them);
batch sizes equal no other size of their lesson (gpt 6, 10, 9 / 12, 5; lstm 22 / 19; conv 40 / 48).

Layouts:
  gpt_u1   one class per operation: Gather, Add, Sub, Mul, RowMean, MeanSq, InvSqrt, Dense,
           ToHeads, Scores, Causal, Softmax, Weigh, Merge, Gelu, Tied, XEnt, each with __call__
           (the forward, keeping what its backward needs) and a @torch.no_grad() .back(grad)
           returning its inputs' gradients, broadcasts undone by unbroadcast(); a layer norm is
           seven op objects on an LNOps holder. Forward and backward chained by hand one op a
           line, parameters as globals under own names (Wtok, Ga, Wattn, Wup, Gz, ...), the
           gradients in locals <activation>_g, first branches held by rebinding, the inner layer
           norms walked back by through_norm() over their op objects; agrees() against retained
           .grad. Exercise 1, every step.
  gpt_u2   the forward in torch.nn.functional / torch calls on weights kept as nn.Linear keeps
           them ([out, in]): F.embedding, F.linear (the tied head F.linear(hf, emb_w)),
           torch.rsqrt, torch.addcmul for the affine, qkv.split + unflatten heads, .mT, a boolean
           triu mask, F.softmax, F.gelu(approximate='tanh'), each undone by hand; autograd's
           gradients caught by register_hook into a dict `seen`; the learner's in a
           defaultdict(int) `d`, every gradient accumulated with += (a first branch is d[...]
           right after its first +=), grad mode switched off globally; off() max differences.
           Exercise 1, every step.
  gpt_u3   exercises 2 and 3 in llm.c's memory layout: a 2-layer model whose parameters are all
           views into one flat params_memory (carve() over a (name, shape) table, a leading [L]
           on layer parameters, own names), gradients views into an equally flat grads_memory
           written by copy_ / +=, and adamw_update called ONCE per step over the whole flat
           buffer with flat m / v, as llm.c's gpt2_update does. The seven functions (index_add_,
           llm.c's dnorm_mean / dnorm_norm_mean, flatten matmuls, attention with the heads folded
           into the batch and torch.bmm, 1 - tanh^2, softmax - one_hot, AdamW by lerp_ / mul_ /
           sub_) checked by torch.func.vjp in vjp_check(); gpt2_forward / gpt2_backward checked
           once against autograd on a flat leaf; 150 steps.
  gpt_u4   a learner who thinks in Jacobians: parameters in an nn.ParameterDict under short keys,
           the forward as top-level lines with capitalised names (X0, Xc1, R1, QKV, Sm, Att, Z,
           Hid, Gel, Lg); the softmax's backward through its explicit per-row Jacobian
           diag_embed(p) - p p^T, the inner layer norms through their explicit [C, C] Jacobian
           per position r (I - 1/C - n n^T / C), both applied by torch.einsum, GELU through its
           diagonal; gradients named dL_dXxx, one no_grad cell per step, first branches as
           variables of their own (dL_dE_head, dL_dXcf_direct, dL_dX1_skip, ...); rel_err().
           Exercise 1, every step.
  lstm_u5  time-major throughout, as nn.LSTM's default: batches [T, n], the setup's run_lstm
           (copied in) wrapped by transposes, the hidden states concatenated along dim 0;
           parameters in a dict under own names, ifgo by torch.addmm, gates by
           tensor_split(4); gradients in one dict `adj` whose state entries are keyed by (name,
           time step) tuples (adj['h', tt], adj['c', tt - 1]), the masked cross-entropy by boolean
           indexing, first branches held; close() with allclose. Fused gates by cat of the
           slopes; lstm_step_backward by tensor_split; lstm_backward over per-step Python lists
           (unbind(1), h_prev / c_prev as shifted lists) walked reversed; an own time-major
           unroll() and Adam of the learner's own, 150 steps.
  conv_u6  each dilated causal convolution as im2col: F.pad, then F.unfold on a [B, Cin, 1, T]
           view (kernel (1, 2), dilation (1, d)) and K.flatten(1) @ cols; the backward its
           adjoint, the kernel's gradient by einsum with the columns, the input's by F.fold of
           K^T dz with the padding cut off; layer 3 inline, layers 2 and 1 through a helper
           conv_back(); dE by index_add_; report() against retained .grad; SGD 200 steps on the
           helper.

Slips (each case's "notes" says which): gpt_u4 takes dk as dS @ q, the transpose of dS missing
(block/qk wrong; qkv, ln1, ln1_affine, x0, wpe, wte cascade, while everything above the scores
stays right); conv_u6's inline layer 3 cuts the padding from the wrong end of the folded gradient
(dpad3[:, :, :-4] where the real positions are [:, :, 4:]) (conv/h2 wrong; h2pre, h1, h1pre, x,
emb, C cascade, while the helper conv_back() and the training built on it stay right). The other
four notebooks are right throughout. No notebook is shared with the earlier corpora.

Written apart from the grader: from the lessons' forward passes, pack.toml's [lesson] / [setup] /
[forward] tables, exercises/conv/forward.py, `backprop-tutor --pack X list / show` and the earlier
corpora's format only, without reading the tutor's code or the steps' solutions, mistakes, hints
or explanations, and without running the grader on these notebooks. Every label was measured by
running the notebook, not judged by eye:

    .venv/bin/python tests/lesson_corpus_truth.py notebook_corpus_lessons_tune8

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
# GPT U1 (right throughout). Own data (random.Random(31337) shuffle, rows written into a zero
# tensor), parameters as globals under own names (Wtok, Wpos, Ga / Ba, Wattn, Wproj, Wup, Wdown,
# Gz / Bz, ...). One small class per OPERATION (not per layer): Gather, Add, Sub, Mul, RowMean,
# MeanSq, InvSqrt, Dense, ToHeads, Scores, Causal, Softmax, Weigh, Merge, Gelu, Tied, XEnt, each
# with __call__ (forward, keeping what its backward needs) and a @torch.no_grad() .back(grad)
# returning its inputs' gradients (broadcasts undone by unbroadcast()); a layer norm is seven op
# objects on an LNOps holder. The forward is chained by hand one op a line; so is the backward,
# into locals named <activation>_g, first branches held by rebinding (x_g = x_g + ...); the two
# inner layer norms walked back by through_norm() over their op objects. agrees() against
# retained .grad. Batch 6; exercise 1, every step.

GPTU1_CELLS = [
    md("# GPT block, one op at a time\n"
       "Each operation is an object: calling it runs the forward and remembers its inputs, "
       "`.back(g)` hands back the gradients of its inputs. I chain both directions by hand."),
    r'''
import math
import random
import torch
import torch.nn.functional as F
''',
    r'''
names = [ln.strip() for ln in open('names.txt') if ln.strip()]
rng = random.Random(31337)
rng.shuffle(names)
letters = sorted({ch for nm in names for ch in nm})
ch2i = {'.': 0, **{ch: j + 1 for j, ch in enumerate(letters)}}
NV = len(ch2i)
CTX, WIDTH, HEADS = 16, 32, 4
HD = WIDTH // HEADS

def rows_for(ws):
    data = torch.zeros(len(ws), CTX + 1, dtype=torch.long)
    for r, nm in enumerate(ws):
        seq = [ch2i[ch] for ch in nm][:CTX]
        data[r, 1:1 + len(seq)] = torch.tensor(seq)
    return data[:, :CTX], data[:, CTX]

cut = int(0.9 * len(names))
Xtrain, Ytrain = rows_for(names[:cut])
Xhold, Yhold = rows_for(names[cut:])
print(Xtrain.shape, NV)
''',
    md("## the ops"),
    r'''
def unbroadcast(g, shape):
    while g.dim() > len(shape):
        g = g.sum(0)
    for ax, s in enumerate(shape):
        if s == 1 and g.shape[ax] != 1:
            g = g.sum(ax, keepdim=True)
    return g


class Gather:
    def __call__(self, table, ids):
        self.shape, self.ids = table.shape, ids
        return table[ids]
    @torch.no_grad()
    def back(self, g):
        out = torch.zeros(self.shape)
        out.index_add_(0, self.ids.flatten(), g.flatten(0, -2))
        return out


class Add:
    def __call__(self, a, b):
        self.sa, self.sb = a.shape, b.shape
        return a + b
    @torch.no_grad()
    def back(self, g):
        return unbroadcast(g, self.sa), unbroadcast(g, self.sb)


class Sub:
    def __call__(self, a, b):
        self.sa, self.sb = a.shape, b.shape
        return a - b
    @torch.no_grad()
    def back(self, g):
        return unbroadcast(g, self.sa), unbroadcast(-g, self.sb)


class Mul:
    def __call__(self, a, b):
        self.a, self.b = a, b
        return a * b
    @torch.no_grad()
    def back(self, g):
        return unbroadcast(g * self.b, self.a.shape), unbroadcast(g * self.a, self.b.shape)


class RowMean:
    def __call__(self, a):
        self.shape = a.shape
        return a.mean(-1, keepdim=True)
    @torch.no_grad()
    def back(self, g):
        return (g / self.shape[-1]).expand(self.shape).clone()


class MeanSq:
    def __call__(self, a):
        self.a = a
        return (a**2).mean(-1, keepdim=True)
    @torch.no_grad()
    def back(self, g):
        return g * 2 * self.a / self.a.shape[-1]


class InvSqrt:
    def __call__(self, a):
        self.out = (a + 1e-5)**-0.5
        return self.out
    @torch.no_grad()
    def back(self, g):
        return -0.5 * g * self.out**3
''',
    r'''
class Dense:
    def __call__(self, x, W, b):
        self.x, self.W = x, W
        return x @ W + b
    @torch.no_grad()
    def back(self, g):
        g2 = g.reshape(-1, g.shape[-1])
        return g @ self.W.T, self.x.reshape(-1, self.x.shape[-1]).T @ g2, g2.sum(0)


class ToHeads:
    def __call__(self, qkv):
        self.n, self.T = qkv.shape[:2]
        return [qkv[:, :, j * WIDTH:(j + 1) * WIDTH].view(self.n, self.T, HEADS, HD).transpose(1, 2)
                for j in range(3)]
    @torch.no_grad()
    def back(self, gq, gk, gv):
        return torch.cat([u.transpose(1, 2).reshape(self.n, self.T, WIDTH) for u in (gq, gk, gv)], -1)


class Scores:
    def __call__(self, q, k):
        self.q, self.k = q, k
        return q @ k.transpose(-2, -1) * HD**-0.5
    @torch.no_grad()
    def back(self, g):
        return g @ self.k * HD**-0.5, g.transpose(-2, -1) @ self.q * HD**-0.5


class Causal:
    def __call__(self, s):
        T = s.shape[-1]
        self.hide = torch.ones(T, T).tril() == 0
        return s.masked_fill(self.hide, float('-inf'))
    @torch.no_grad()
    def back(self, g):
        return g.masked_fill(self.hide, 0.0)


class Softmax:
    def __call__(self, s):
        self.p = F.softmax(s, dim=-1)
        return self.p
    @torch.no_grad()
    def back(self, g):
        return self.p * (g - (g * self.p).sum(-1, keepdim=True))


class Weigh:
    def __call__(self, a, v):
        self.a, self.v = a, v
        return a @ v
    @torch.no_grad()
    def back(self, g):
        return g @ self.v.transpose(-2, -1), self.a.transpose(-2, -1) @ g


class Merge:
    def __call__(self, y):
        n, nh, T, hd = y.shape
        return y.transpose(1, 2).contiguous().view(n, T, nh * hd)
    @torch.no_grad()
    def back(self, g):
        n, T, _ = g.shape
        return g.view(n, T, HEADS, HD).transpose(1, 2)


class Gelu:
    K = math.sqrt(2 / math.pi)
    def __call__(self, u):
        self.u = u
        self.th = torch.tanh(self.K * (u + 0.044715 * u**3))
        return 0.5 * u * (1 + self.th)
    @torch.no_grad()
    def back(self, g):
        u, th = self.u, self.th
        return g * (0.5 * (1 + th) + 0.5 * u * (1 - th**2) * self.K * (1 + 3 * 0.044715 * u**2))


class Tied:
    def __call__(self, x, E):
        self.x, self.E = x, E
        return x @ E.T
    @torch.no_grad()
    def back(self, g):
        return g @ self.E, g.reshape(-1, g.shape[-1]).T @ self.x.reshape(-1, self.x.shape[-1])


class XEnt:
    def __call__(self, logits, tgt):
        self.logits, self.tgt = logits, tgt
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), tgt.view(-1))
    @torch.no_grad()
    def back(self):
        p = F.softmax(self.logits, -1)
        p -= F.one_hot(self.tgt, p.shape[-1]).float()
        return p / self.tgt.numel()


class LNOps:
    def __init__(self):
        self.mean, self.sub, self.msq, self.inv = RowMean(), Sub(), MeanSq(), InvSqrt()
        self.mul, self.scale, self.shift = Mul(), Mul(), Add()
''',
    md("## parameters and one batch"),
    r'''
torch.manual_seed(77)
C = WIDTH
def mat(r, c, s=1.0):
    return (torch.randn(r, c) * s / math.sqrt(r)).requires_grad_()
def vec(k, base=0.0):
    return (base + 0.1 * torch.randn(k)).requires_grad_()

Wtok, Wpos = (0.1 * torch.randn(NV, C)).requires_grad_(), (0.1 * torch.randn(CTX, C)).requires_grad_()
Ga, Ba = vec(C, 1.0), vec(C)
Wattn, Battn = mat(C, 3 * C), vec(3 * C)
Wproj, Bproj = mat(C, C, 0.5), vec(C)
Gb, Bb = vec(C, 1.0), vec(C)
Wup, Bup = mat(C, 4 * C), vec(4 * C)
Wdown, Bdown = mat(4 * C, C, 0.5), vec(C)
Gz, Bz = vec(C, 1.0), vec(C)
params = [Wtok, Wpos, Ga, Ba, Wattn, Battn, Wproj, Bproj, Gb, Bb, Wup, Bup, Wdown, Bdown, Gz, Bz]

pick = torch.randint(0, len(Xtrain), (6,))
xb, yb = Xtrain[pick], Ytrain[pick]
''',
    r'''
gather, add_pos = Gather(), Add()
la, lb, lz = LNOps(), LNOps(), LNOps()
qkv_lin, heads, scores, causal, smax, weigh, merge = Dense(), ToHeads(), Scores(), Causal(), Softmax(), Weigh(), Merge()
proj_lin, res1, up_lin, gelu, down_lin, res2 = Dense(), Add(), Dense(), Gelu(), Dense(), Add()
head, xent = Tied(), XEnt()

emb = gather(Wtok, xb)
s0 = add_pos(emb, Wpos)
a_mu = la.mean(s0)
a_c = la.sub(s0, a_mu)
a_var = la.msq(a_c)
a_inv = la.inv(a_var)
a_hat = la.mul(a_c, a_inv)
a_out = la.shift(la.scale(a_hat, Ga), Ba)
qkv = qkv_lin(a_out, Wattn, Battn)
q, k, v = heads(qkv)
S = scores(q, k)
Sm = causal(S)
P = smax(Sm)
O = weigh(P, v)
Om = merge(O)
pr = proj_lin(Om, Wproj, Bproj)
s1 = res1(s0, pr)
b_mu = lb.mean(s1)
b_c = lb.sub(s1, b_mu)
b_var = lb.msq(b_c)
b_inv = lb.inv(b_var)
b_hat = lb.mul(b_c, b_inv)
b_out = lb.shift(lb.scale(b_hat, Gb), Bb)
hid = up_lin(b_out, Wup, Bup)
act = gelu(hid)
dn = down_lin(act, Wdown, Bdown)
s2 = res2(s1, dn)
z_mu = lz.mean(s2)
z_c = lz.sub(s2, z_mu)
z_var = lz.msq(z_c)
z_inv = lz.inv(z_var)
z_hat = lz.mul(z_c, z_inv)
z_out = lz.shift(lz.scale(z_hat, Gz), Bz)
logit = head(z_out, Wtok)
tg = torch.cat([xb[:, 1:], yb[:, None]], 1)
loss = xent(logit, tg)
print(loss.item())
''',
    r'''
watch = dict(logit=logit, z_out=z_out, z_hat=z_hat, z_inv=z_inv, z_var=z_var, z_c=z_c, z_mu=z_mu,
             s2=s2, dn=dn, act=act, hid=hid, b_out=b_out, b_hat=b_hat, s1=s1, pr=pr, Om=Om, O=O,
             P=P, v=v, Sm=Sm, S=S, q=q, k=k, qkv=qkv, a_out=a_out, a_hat=a_hat, s0=s0, emb=emb)
for t_ in watch.values():
    t_.retain_grad()
loss.backward()

def agrees(label, mine, ref):
    ok = torch.allclose(mine, ref, rtol=1e-4, atol=1e-5)
    print(f"{label:>8}: {'ok' if ok else 'NO'}  {(mine - ref).abs().max().item():.2e}")
''',
    md("## backward, one op at a time"),
    r'''
logit_g = xent.back()
z_out_g, Wtok_g_head = head.back(logit_g)
z_sc_g, Bz_g = lz.shift.back(z_out_g)
z_hat_g, Gz_g = lz.scale.back(z_sc_g)
z_c_g, z_inv_g = lz.mul.back(z_hat_g)
z_var_g = lz.inv.back(z_inv_g)
z_c_g = z_c_g + lz.msq.back(z_var_g)
s2_g, z_mu_g = lz.sub.back(z_c_g)
s2_g = s2_g + lz.mean.back(z_mu_g)
agrees('logit', logit_g, logit.grad); agrees('z_c', z_c_g, z_c.grad); agrees('s2', s2_g, s2.grad)
''',
    r'''
def through_norm(L, hat_g):
    c_g, inv_g = L.mul.back(hat_g)
    c_g = c_g + L.msq.back(L.inv.back(inv_g))
    x_g, mu_g = L.sub.back(c_g)
    return x_g + L.mean.back(mu_g)

s1_g, dn_g = res2.back(s2_g)
act_g, Wdown_g, Bdown_g = down_lin.back(dn_g)
hid_g = gelu.back(act_g)
b_out_g, Wup_g, Bup_g = up_lin.back(hid_g)
b_sc_g, Bb_g = lb.shift.back(b_out_g)
b_hat_g, Gb_g = lb.scale.back(b_sc_g)
s1_g = s1_g + through_norm(lb, b_hat_g)
agrees('hid', hid_g, hid.grad); agrees('s1', s1_g, s1.grad)
''',
    r'''
s0_g, pr_g = res1.back(s1_g)
Om_g, Wproj_g, Bproj_g = proj_lin.back(pr_g)
O_g = merge.back(Om_g)
P_g, v_g = weigh.back(O_g)
Sm_g = smax.back(P_g)
S_g = causal.back(Sm_g)
q_g, k_g = scores.back(S_g)
qkv_g = heads.back(q_g, k_g, v_g)
a_out_g, Wattn_g, Battn_g = qkv_lin.back(qkv_g)
a_sc_g, Ba_g = la.shift.back(a_out_g)
a_hat_g, Ga_g = la.scale.back(a_sc_g)
s0_g = s0_g + through_norm(la, a_hat_g)
emb_g, Wpos_g = add_pos.back(s0_g)
Wtok_g = Wtok_g_head + gather.back(emb_g)
for nm in ['P', 'Sm', 'q', 'k', 'qkv', 's0']:
    agrees(nm, globals()[nm + '_g'], watch[nm].grad)
agrees('Wtok', Wtok_g, Wtok.grad); agrees('Wpos', Wpos_g, Wpos.grad); agrees('Ga', Ga_g, Ga.grad)
''',
]

_U1_F = {"logits": "logit", "lnf": "z_out", "wte": "Wtok", "lnf_norm": "z_hat", "lnfw": "Gz",
         "lnfb": "Bz", "lnf_rstd": "z_inv", "lnf_xc": "z_c", "lnf_var": "z_var",
         "lnf_mean": "z_mu", "x2": "s2", "fcproj": "dn", "x1": "s1", "fch_gelu": "act",
         "fcprojw": "Wdown", "fcprojb": "Bdown", "fch": "hid", "ln2": "b_out", "fcw": "Wup",
         "fcb": "Bup", "ln2_norm": "b_hat", "ln2w": "Gb", "ln2b": "Bb", "attproj": "pr",
         "x0": "s0", "y": "Om", "attprojw": "Wproj", "attprojb": "Bproj", "atty": "O",
         "att": "P", "v": "v", "preatt_masked": "Sm", "preatt": "S", "q": "q", "k": "k",
         "qkv": "qkv", "ln1": "a_out", "qkvw": "Wattn", "qkvb": "Battn", "ln1_norm": "a_hat",
         "ln1w": "Ga", "ln1b": "Ba", "tok": "emb", "wpe": "Wpos"}
_U1_G = {k: v + "_g" for k, v in _U1_F.items()}
_U1_G["wte"] = "Wtok_g"


def _u1_specs():
    specs = where("gpt", GPT_STEPS, fwd=_U1_F, grad=_U1_G.__getitem__,
                  first_after={"wte": "z_out_g, Wtok_g_head = head.back(logit_g)",
                               "lnf_xc": "z_c_g, z_inv_g = lz.mul.back(z_hat_g)",
                               "x2": "s2_g, z_mu_g = lz.sub.back(z_c_g)",
                               "x1": "s1_g, dn_g = res2.back(s2_g)",
                               "x0": "s0_g, pr_g = res1.back(s1_g)"})
    # the head's share of the tied table is a variable of its own
    specs["block/lnf"] = [("z_out_g", "G(z_out)"),
                          ("Wtok_g_head", "edge(lambda W: z_out.detach() @ W.T, Wtok, G(logit))")]
    return specs


add("gpt_u1_op_objects_call_back_chained_by_hand", "gpt", GPTU1_CELLS, GPT_STEPS,
    notes="own data (random.Random(31337) shuffle, rows written into a zero tensor), parameters "
          "as globals under own names; one class per operation (Gather, Add, Sub, Mul, RowMean, "
          "MeanSq, InvSqrt, Dense, ToHeads, Scores, Causal, Softmax, Weigh, Merge, Gelu, Tied, "
          "XEnt) with __call__ keeping its inputs and a @torch.no_grad() .back(g) returning its "
          "inputs' gradients, broadcasts undone by unbroadcast(); forward and backward chained by "
          "hand one op a line, gradients in locals <name>_g, first branches held by rebinding, "
          "the inner layer norms walked back by through_norm() over their op objects; agrees() "
          "against retained .grad; batch 6; exercise 1, every step; all right",
    where=_u1_specs())

# ================================================================================================
# GPT U2 (right throughout). Own data (torch.randperm(Generator 4242) over the names, rows built
# by an encode() that pads with a list multiply), parameters as globals in nn's orientation
# ([out, in]: attn_in, attn_out, fc_in, fc_out) and the forward written with torch.nn.functional
# and torch calls: F.embedding, F.linear (the tied head F.linear(hf, emb_w)), torch.rsqrt, the
# affine by torch.addcmul, qkv.split + unflatten heads, .mT, a boolean triu `future` mask,
# F.softmax, F.gelu(approximate='tanh'); the backward spells out each call's counterpart (g @ W
# for F.linear's input, g^T x for its [out, in] weight, GELU's tanh formula). Autograd's
# gradients are caught by tensor hooks (register_hook into a dict `seen`); the learner's own in a
# defaultdict(int) `d`, every gradient accumulated with += (so a first branch is d[...] right
# after its first +=), top-level lines with grad mode switched off. off() prints the max
# difference. Batch 10; exercise 1, every step.

GPTU2_CELLS = [
    r'''
import math
import torch
import torch.nn.functional as F
from collections import defaultdict
''',
    r'''
text = open('names.txt').read()
pool = text.split()
g = torch.Generator().manual_seed(4242)
perm = torch.randperm(len(pool), generator=g).tolist()
alphabet = '.' + ''.join(sorted(set(''.join(pool))))
idx = {c: i for i, c in enumerate(alphabet)}
Vn, T_, C_, NH = len(alphabet), 16, 32, 4
hs = C_ // NH

def encode(w):
    ids = ([0] + [idx[c] for c in w] + [0])[:T_ + 1]
    return ids + [0] * (T_ + 1 - len(ids))

rows = torch.tensor([encode(pool[j]) for j in perm[:int(0.8 * len(pool))]])
Xtr, Ytr = rows[:, :-1], rows[:, -1]
''',
    md("Weights the way `nn.Linear` keeps them, `[out, in]`, so the forward can use `F.linear`."),
    r'''
def P(*shape, std=1.0, mean=0.0):
    return (mean + std * torch.randn(*shape, generator=g)).requires_grad_()

emb_w, pos_w = P(Vn, C_, std=0.1), P(T_, C_, std=0.1)
ln_a_w, ln_a_b = P(C_, std=0.1, mean=1.0), P(C_, std=0.1)
attn_in, attn_in_b = P(3 * C_, C_, std=C_**-0.5), P(3 * C_, std=0.1)
attn_out, attn_out_b = P(C_, C_, std=0.5 * C_**-0.5), P(C_, std=0.1)
ln_b_w, ln_b_b = P(C_, std=0.1, mean=1.0), P(C_, std=0.1)
fc_in, fc_in_b = P(4 * C_, C_, std=C_**-0.5), P(4 * C_, std=0.1)
fc_out, fc_out_b = P(C_, 4 * C_, std=0.5 * (4 * C_)**-0.5), P(C_, std=0.1)
ln_f_w, ln_f_b = P(C_, std=0.1, mean=1.0), P(C_, std=0.1)
''',
    r'''
sel = torch.randint(0, len(Xtr), (10,), generator=g)
ids, nxt = Xtr[sel], Ytr[sel]
future = torch.triu(torch.ones(T_, T_, dtype=torch.bool), diagonal=1)

e = F.embedding(ids, emb_w)
r0 = e + pos_w
mu1 = r0.mean(-1, keepdim=True)
c1 = r0 - mu1
v1 = c1.pow(2).mean(-1, keepdim=True)
is1 = torch.rsqrt(v1 + 1e-5)
nrm1 = c1 * is1
h1 = torch.addcmul(ln_a_b, nrm1, ln_a_w)
qkv = F.linear(h1, attn_in, attn_in_b)
q, k, v = [t.unflatten(-1, (NH, hs)).transpose(1, 2) for t in qkv.split(C_, dim=-1)]
sc = torch.matmul(q, k.mT) / math.sqrt(hs)
scm = sc.masked_fill(future, float('-inf'))
pa = F.softmax(scm, dim=-1)
mix = torch.matmul(pa, v)
flat = mix.transpose(1, 2).flatten(2)
ao = F.linear(flat, attn_out, attn_out_b)
r1 = r0 + ao
mu2 = r1.mean(-1, keepdim=True)
c2 = r1 - mu2
v2 = c2.pow(2).mean(-1, keepdim=True)
is2 = torch.rsqrt(v2 + 1e-5)
nrm2 = c2 * is2
h2 = torch.addcmul(ln_b_b, nrm2, ln_b_w)
up = F.linear(h2, fc_in, fc_in_b)
act = F.gelu(up, approximate='tanh')
dn = F.linear(act, fc_out, fc_out_b)
r2 = r1 + dn
muf = r2.mean(-1, keepdim=True)
cf = r2 - muf
vf = cf.pow(2).mean(-1, keepdim=True)
isf = torch.rsqrt(vf + 1e-5)
nrmf = cf * isf
hf = torch.addcmul(ln_f_b, nrmf, ln_f_w)
logits = F.linear(hf, emb_w)
tgt = torch.cat([ids[:, 1:], nxt[:, None]], dim=1)
loss = F.cross_entropy(logits.flatten(0, 1), tgt.flatten())
loss
''',
    md("Hooks catch what autograd sends to each activation."),
    r'''
seen = {}
def tap(name):
    globals()[name].register_hook(lambda grad, name=name: seen.__setitem__(name, grad))

for name in ['logits', 'hf', 'nrmf', 'isf', 'vf', 'cf', 'muf', 'r2', 'dn', 'act', 'up', 'h2',
             'nrm2', 'r1', 'ao', 'flat', 'mix', 'pa', 'v', 'scm', 'sc', 'q', 'k', 'qkv', 'h1',
             'nrm1', 'r0', 'e']:
    tap(name)
loss.backward()
params = dict(emb_w=emb_w, pos_w=pos_w, ln_a_w=ln_a_w, ln_a_b=ln_a_b, attn_in=attn_in,
              attn_in_b=attn_in_b, attn_out=attn_out, attn_out_b=attn_out_b, ln_b_w=ln_b_w,
              ln_b_b=ln_b_b, fc_in=fc_in, fc_in_b=fc_in_b, fc_out=fc_out, fc_out_b=fc_out_b,
              ln_f_w=ln_f_w, ln_f_b=ln_f_b)

def off(*names):
    for nm in names:
        ref = params[nm].grad if nm in params else seen[nm]
        print(f"{nm:>10} {(d[nm] - ref).abs().max().item():.3e}")
''',
    md("## by hand\nEverything goes into `d` with `+=`, so a tensor with two uses just collects."),
    r'''
torch.set_grad_enabled(False)
d = defaultdict(int)
N = ids.numel()
d['logits'] += (F.softmax(logits, -1) - F.one_hot(tgt, Vn)) / N
d['hf'] += d['logits'] @ emb_w
d['emb_w'] += d['logits'].flatten(0, 1).T @ hf.flatten(0, 1)
d['nrmf'] += d['hf'] * ln_f_w
d['ln_f_w'] += (d['hf'] * nrmf).sum((0, 1))
d['ln_f_b'] += d['hf'].sum((0, 1))
d['isf'] += (d['nrmf'] * cf).sum(-1, keepdim=True)
d['cf'] += d['nrmf'] * isf
d['vf'] += -0.5 * isf**3 * d['isf']
d['cf'] += d['vf'] * 2 * cf / C_
d['muf'] += -d['cf'].sum(-1, keepdim=True)
d['r2'] += d['cf']
d['r2'] += d['muf'] / C_
off('logits', 'hf', 'cf', 'muf', 'r2', 'emb_w')
''',
    r'''
d['dn'] += d['r2']
d['r1'] += d['r2']
d['act'] += d['dn'] @ fc_out
d['fc_out'] += d['dn'].flatten(0, 1).T @ act.flatten(0, 1)
d['fc_out_b'] += d['dn'].sum((0, 1))
s2pi = math.sqrt(2 / math.pi)
th = torch.tanh(s2pi * (up + 0.044715 * up**3))
d['up'] += d['act'] * (0.5 * (1 + th) + 0.5 * up * (1 - th * th) * s2pi * (1 + 0.134145 * up**2))
d['h2'] += d['up'] @ fc_in
d['fc_in'] += d['up'].flatten(0, 1).T @ h2.flatten(0, 1)
d['fc_in_b'] += d['up'].sum((0, 1))
d['nrm2'] += d['h2'] * ln_b_w
d['ln_b_w'] += (d['h2'] * nrm2).sum((0, 1))
d['ln_b_b'] += d['h2'].sum((0, 1))
d['r1'] += is2 * (d['nrm2'] - d['nrm2'].mean(-1, keepdim=True)
                  - nrm2 * (d['nrm2'] * nrm2).mean(-1, keepdim=True))
off('act', 'up', 'h2', 'nrm2', 'r1', 'fc_in', 'fc_out')
''',
    r'''
d['ao'] += d['r1']
d['r0'] += d['r1']
d['flat'] += d['ao'] @ attn_out
d['attn_out'] += d['ao'].flatten(0, 1).T @ flat.flatten(0, 1)
d['attn_out_b'] += d['ao'].sum((0, 1))
d['mix'] += d['flat'].unflatten(-1, (NH, hs)).transpose(1, 2)
d['pa'] += d['mix'] @ v.mT
d['v'] += pa.mT @ d['mix']
d['scm'] += pa * (d['pa'] - (pa * d['pa']).sum(-1, keepdim=True))
d['sc'] += d['scm'].masked_fill(future, 0.0)
d['q'] += d['sc'] @ k / math.sqrt(hs)
d['k'] += d['sc'].mT @ q / math.sqrt(hs)
d['qkv'] += torch.cat([u.transpose(1, 2).flatten(2) for u in (d['q'], d['k'], d['v'])], dim=-1)
off('flat', 'pa', 'v', 'scm', 'q', 'k', 'qkv')
''',
    r'''
d['h1'] += d['qkv'] @ attn_in
d['attn_in'] += d['qkv'].flatten(0, 1).T @ h1.flatten(0, 1)
d['attn_in_b'] += d['qkv'].sum((0, 1))
d['nrm1'] += d['h1'] * ln_a_w
d['ln_a_w'] += (d['h1'] * nrm1).sum((0, 1))
d['ln_a_b'] += d['h1'].sum((0, 1))
d['r0'] += is1 * (d['nrm1'] - d['nrm1'].mean(-1, keepdim=True)
                  - nrm1 * (d['nrm1'] * nrm1).mean(-1, keepdim=True))
d['e'] += d['r0']
d['pos_w'] += d['r0'].sum(0)
d['emb_w'].index_add_(0, ids.flatten(), d['e'].flatten(0, 1))
torch.set_grad_enabled(True)
off('h1', 'r0', 'e', 'pos_w', 'emb_w', 'attn_in', 'ln_a_w')
''',
]

_U2_F = {"logits": "logits", "lnf": "hf", "wte": "emb_w", "lnf_norm": "nrmf", "lnfw": "ln_f_w",
         "lnfb": "ln_f_b", "lnf_rstd": "isf", "lnf_xc": "cf", "lnf_var": "vf", "lnf_mean": "muf",
         "x2": "r2", "fcproj": "dn", "x1": "r1", "fch_gelu": "act", "fcprojw": "fc_out",
         "fcprojb": "fc_out_b", "fch": "up", "ln2": "h2", "fcw": "fc_in", "fcb": "fc_in_b",
         "ln2_norm": "nrm2", "ln2w": "ln_b_w", "ln2b": "ln_b_b", "attproj": "ao", "x0": "r0",
         "y": "flat", "attprojw": "attn_out", "attprojb": "attn_out_b", "atty": "mix",
         "att": "pa", "v": "v", "preatt_masked": "scm", "preatt": "sc", "q": "q", "k": "k",
         "qkv": "qkv", "ln1": "h1", "qkvw": "attn_in", "qkvb": "attn_in_b", "ln1_norm": "nrm1",
         "ln1w": "ln_a_w", "ln1b": "ln_a_b", "tok": "e", "wpe": "pos_w"}

add("gpt_u2_functional_calls_out_in_weights_hooks_defaultdict", "gpt", GPTU2_CELLS, GPT_STEPS,
    notes="own data (randperm(Generator 4242), rows from encode() padded by a list multiply); "
          "parameters as globals in nn's [out, in] orientation, the forward through F.embedding, "
          "F.linear (tied head F.linear(hf, emb_w)), torch.rsqrt, torch.addcmul, split + "
          "unflatten heads, .mT, a boolean triu mask, F.softmax, F.gelu(approximate='tanh'), each "
          "undone by hand; autograd's gradients caught by register_hook into `seen`; the "
          "learner's in a defaultdict(int) `d`, every one accumulated with +=, first branches "
          "read right after their first +=, grad mode switched off globally; off() max "
          "differences; batch 10; exercise 1, every step; all right",
    where=where("gpt", GPT_STEPS, fwd=_U2_F, grad=lambda k: f"d['{_U2_F[k]}']",
                first_after={"wte": "d['emb_w'] += d['logits'].flatten(0, 1).T",
                             "lnf_xc": "d['cf'] += d['nrmf'] * isf",
                             "x2": "d['r2'] += d['cf']", "x1": "d['r1'] += d['r2']",
                             "x0": "d['r0'] += d['r1']"}))

# ================================================================================================
# GPT U3 (right throughout). Exercises 2 and 3 in llm.c's own memory layout: every parameter of
# a 2-layer model is a view into ONE flat tensor `params_memory` (a table of (name, shape) carved
# by carve(), layer parameters with a leading [L] dimension, names of the learner's own: tokemb,
# posemb, n1g, Wqkv, Wo, Wfc, Wpr, nfg, ...), the gradients views of an equally flat
# `grads_memory` carved the same way, written with .copy_() / +=, and AdamW run ONCE per step on
# the whole flat vector with flat m_memory / v_memory, as llm.c's gpt2_update does. The seven
# functions: index_add_ for the encoder, llm.c's dnorm_mean / dnorm_norm_mean layer norm,
# flatten(0, -2) matmuls, attention with the heads folded into the batch (reshape(B * NH, T, hs))
# and torch.bmm, GELU through 1 - tanh^2, softmax - F.one_hot, AdamW through lerp_ and
# in-place mul_ / sub_; each checked by torch.func.vjp through an own reference in vjp_check().
# gpt2_forward / gpt2_backward on the functions, checked once against autograd on the flat
# leaf; 150 steps of adamw_update, batch 12.

GPTU3_CELLS = [
    md("# llm.c in torch\nOne flat buffer for the parameters, one for their gradients, carved "
       "into named views, like `ParameterTensors` in train_gpt2.c."),
    r'''
import math
import random
import torch
import torch.nn.functional as F
''',
    r'''
lines = open('names.txt', encoding='utf-8').read().splitlines()
random.Random(8).shuffle(lines)
vocab = ['.'] + sorted(set(''.join(lines)))
tok_id = {c: i for i, c in enumerate(vocab)}
Vv, T, C, NH, L = len(vocab), 16, 32, 4, 2

def tokenize(ws):
    out = torch.zeros(len(ws), T + 1, dtype=torch.long)
    for i, w in enumerate(ws):
        ids = [tok_id[c] for c in w][:T]
        out[i, 1:len(ids) + 1] = torch.tensor(ids)
    return out

tokens = tokenize(lines[:int(0.9 * len(lines))])
tokens[:3]
''',
    r'''
layout = [('tokemb', (Vv, C)), ('posemb', (T, C)),
          ('n1g', (L, C)), ('n1b', (L, C)), ('Wqkv', (L, C, 3 * C)), ('bqkv', (L, 3 * C)),
          ('Wo', (L, C, C)), ('bo', (L, C)), ('n2g', (L, C)), ('n2b', (L, C)),
          ('Wfc', (L, C, 4 * C)), ('bfc', (L, 4 * C)), ('Wpr', (L, 4 * C, C)), ('bpr', (L, C)),
          ('nfg', (C,)), ('nfb', (C,))]
sizes = [math.prod(s) for _, s in layout]
num_parameters = sum(sizes)

def carve(mem):
    views, off = {}, 0
    for (name, shape), n in zip(layout, sizes):
        views[name] = mem[off:off + n].view(shape)
        off += n
    return views

params_memory = torch.empty(num_parameters)
Pm = carve(params_memory)
gen = torch.Generator().manual_seed(1999)
with torch.no_grad():
    for name, p in Pm.items():
        if name in ('tokemb', 'posemb'):
            p.copy_(0.1 * torch.randn(p.shape, generator=gen))
        elif name[0] == 'W':
            scale = 1.0 if name in ('Wqkv', 'Wfc') else 0.5
            p.copy_(torch.randn(p.shape, generator=gen) * scale / math.sqrt(p.shape[-2]))
        elif name.endswith('g'):
            p.copy_(1 + 0.1 * torch.randn(p.shape, generator=gen))
        else:
            p.copy_(0.1 * torch.randn(p.shape, generator=gen))
print(num_parameters, 'parameters')
''',
    md("## the functions"),
    r'''
def encoder_backward(dout, inp, vocab_size):
    B_, T_, C_ = dout.shape
    dwte = torch.zeros(vocab_size, C_)
    dwte.index_add_(0, inp.reshape(-1), dout.reshape(-1, C_))
    return dwte, dout.sum(0)


def layernorm_backward(dout, inp, weight, mean, rstd):
    norm = (inp - mean) * rstd
    dnorm = dout * weight
    dnorm_mean = dnorm.mean(-1, keepdim=True)
    dnorm_norm_mean = (dnorm * norm).mean(-1, keepdim=True)
    dinp = (dnorm - dnorm_mean - norm * dnorm_norm_mean) * rstd
    return dinp, (dout * norm).sum((0, 1)), dout.sum((0, 1))


def matmul_backward(dout, inp, weight):
    d2 = dout.flatten(0, -2)
    return dout @ weight.T, inp.flatten(0, -2).T @ d2, d2.sum(0)


def attention_backward(dout, qkv, att, n_head):
    B_, T_, C3 = qkv.shape
    C_ = C3 // 3
    hs = C_ // n_head
    fold = lambda z: z.reshape(B_, T_, n_head, hs).transpose(1, 2).reshape(B_ * n_head, T_, hs)
    unfold = lambda z: z.reshape(B_, n_head, T_, hs).transpose(1, 2).reshape(B_, T_, C_)
    q, k, v = (fold(z) for z in qkv.split(C_, dim=-1))
    a = att.reshape(B_ * n_head, T_, T_)
    dy = fold(dout)
    da = torch.bmm(dy, v.transpose(1, 2))
    dv = torch.bmm(a.transpose(1, 2), dy)
    dpre = a * (da - (a * da).sum(-1, keepdim=True)) * hs**-0.5
    dq = torch.bmm(dpre, k)
    dk = torch.bmm(dpre.transpose(1, 2), q)
    return torch.cat([unfold(dq), unfold(dk), unfold(dv)], dim=-1)


GELU_K = math.sqrt(2 / math.pi)

def gelu_backward(dout, inp):
    t = torch.tanh(GELU_K * (inp + 0.044715 * inp**3))
    slope = 0.5 * (1 + t) + 0.5 * inp * (1 - t * t) * GELU_K * (1 + 3 * 0.044715 * inp**2)
    return dout * slope


def crossentropy_softmax_backward(logits, targets):
    return (logits.softmax(-1) - F.one_hot(targets, logits.shape[-1])) / targets.numel()


def adamw_update(param, grad, m, v, t, lr, beta1, beta2, eps, weight_decay):
    m.lerp_(grad, 1 - beta1)
    v.lerp_(grad * grad, 1 - beta2)
    mhat = m / (1 - beta1**t)
    vhat = v / (1 - beta2**t)
    param.mul_(1 - lr * weight_decay)
    param.sub_(lr * mhat / (vhat.sqrt() + eps))
''',
    md("Each function against `torch.func.vjp` of a little forward of my own."),
    r'''
from torch.func import vjp

def ln_ref(x, w, b):
    mu = x.mean(-1, keepdim=True)
    return (x - mu) * ((x - mu).pow(2).mean(-1, keepdim=True) + 1e-5).rsqrt() * w + b

def attn_ref(qkv, nh):
    B_, T_, C3 = qkv.shape
    q, k, v = (z.reshape(B_, T_, nh, -1).transpose(1, 2) for z in qkv.split(C3 // 3, -1))
    s = (q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])).masked_fill(
        torch.ones(T_, T_).tril() == 0, float('-inf'))
    a = s.softmax(-1)
    return (a @ v).transpose(1, 2).reshape(B_, T_, C3 // 3), a

def vjp_check(label, mine, fn, primals, cot):
    _, pull = vjp(fn, *primals)
    ref = pull(cot)
    worst = max((a - b).abs().max().item() for a, b in zip(mine, ref))
    print(f"{label:10s} {worst:.2e}")

hg = torch.Generator().manual_seed(3)
x, w, b = torch.randn(3, 5, 12, generator=hg), torch.randn(12, generator=hg), torch.randn(12, generator=hg)
up = torch.randn(3, 5, 12, generator=hg)
mu = x.mean(-1, keepdim=True)
rs = ((x - mu).pow(2).mean(-1, keepdim=True) + 1e-5).rsqrt()
vjp_check('layernorm', layernorm_backward(up, x, w, mu, rs), ln_ref, (x, w, b), up)
W = torch.randn(12, 7, generator=hg)
bias = torch.randn(7, generator=hg)
up7 = torch.randn(3, 5, 7, generator=hg)
vjp_check('matmul', matmul_backward(up7, x, W), lambda a, m, c: a @ m + c, (x, W, bias), up7)
vjp_check('gelu', (gelu_backward(up, x),), lambda a: F.gelu(a, approximate='tanh'), (x,), up)
qkv = torch.randn(3, 5, 36, generator=hg)
_, att = attn_ref(qkv, 3)
vjp_check('attention', (attention_backward(up, qkv, att, 3),), lambda z: attn_ref(z, 3)[0], (qkv,), up)
ids = torch.randint(0, 9, (3, 5), generator=hg)
wte, wpe = torch.randn(9, 12, generator=hg), torch.randn(5, 12, generator=hg)
vjp_check('encoder', encoder_backward(up, ids, 9), lambda a, p: a[ids] + p, (wte, wpe), up)
lg, tg = torch.randn(15, 9, generator=hg), torch.randint(0, 9, (15,), generator=hg)
vjp_check('xent', (crossentropy_softmax_backward(lg, tg),), lambda z: F.cross_entropy(z, tg), (lg,), torch.tensor(1.0))
''',
    md("## the model on the flat buffer"),
    r'''
def ln_fwd(x, w, b):
    mean = x.mean(-1, keepdim=True)
    rstd = ((x - mean).pow(2).mean(-1, keepdim=True) + 1e-5).rsqrt()
    return (x - mean) * rstd * w + b, mean, rstd


def gpt2_forward(P, X, Y):
    B_, T_ = X.shape
    acts = {'x_in': [], 'ln1': [], 'm1': [], 'r1': [], 'qkv': [], 'att': [], 'y': [],
            'x_mid': [], 'ln2': [], 'm2': [], 'r2': [], 'fch': [], 'fch_gelu': []}
    x = P['tokemb'][X] + P['posemb'][:T_]
    for l in range(L):
        acts['x_in'].append(x)
        h, m, r = ln_fwd(x, P['n1g'][l], P['n1b'][l])
        acts['ln1'].append(h); acts['m1'].append(m); acts['r1'].append(r)
        qkv = h @ P['Wqkv'][l] + P['bqkv'][l]
        y, att = attn_ref(qkv, NH)
        acts['qkv'].append(qkv); acts['att'].append(att); acts['y'].append(y)
        x = x + y @ P['Wo'][l] + P['bo'][l]
        acts['x_mid'].append(x)
        h, m, r = ln_fwd(x, P['n2g'][l], P['n2b'][l])
        acts['ln2'].append(h); acts['m2'].append(m); acts['r2'].append(r)
        u = h @ P['Wfc'][l] + P['bfc'][l]
        gu = F.gelu(u, approximate='tanh')
        acts['fch'].append(u); acts['fch_gelu'].append(gu)
        x = x + gu @ P['Wpr'][l] + P['bpr'][l]
    acts['x_top'] = x
    acts['lnf'], acts['mf'], acts['rf'] = ln_fwd(x, P['nfg'], P['nfb'])
    logits = acts['lnf'] @ P['tokemb'].T
    acts['logits'] = logits
    acts['targets'] = torch.cat([X[:, 1:], Y[:, None]], 1)
    loss = F.cross_entropy(logits.reshape(-1, Vv), acts['targets'].reshape(-1))
    return loss, acts


def gpt2_backward(P, G, acts, X):
    B_, T_ = X.shape
    dlogits = crossentropy_softmax_backward(acts['logits'].reshape(-1, Vv),
                                            acts['targets'].reshape(-1)).view(B_, T_, Vv)
    dlnf, dtokT, _ = matmul_backward(dlogits, acts['lnf'], P['tokemb'].T)
    G['tokemb'].copy_(dtokT.T)
    dx, dg, db = layernorm_backward(dlnf, acts['x_top'], P['nfg'], acts['mf'], acts['rf'])
    G['nfg'].copy_(dg); G['nfb'].copy_(db)
    for l in reversed(range(L)):
        dgu, dW, db = matmul_backward(dx, acts['fch_gelu'][l], P['Wpr'][l])
        G['Wpr'][l].copy_(dW); G['bpr'][l].copy_(db)
        du = gelu_backward(dgu, acts['fch'][l])
        dh, dW, db = matmul_backward(du, acts['ln2'][l], P['Wfc'][l])
        G['Wfc'][l].copy_(dW); G['bfc'][l].copy_(db)
        dres, dg, db = layernorm_backward(dh, acts['x_mid'][l], P['n2g'][l], acts['m2'][l], acts['r2'][l])
        G['n2g'][l].copy_(dg); G['n2b'][l].copy_(db)
        dx = dx + dres
        dy, dW, db = matmul_backward(dx, acts['y'][l], P['Wo'][l])
        G['Wo'][l].copy_(dW); G['bo'][l].copy_(db)
        dqkv = attention_backward(dy, acts['qkv'][l], acts['att'][l], NH)
        dh, dW, db = matmul_backward(dqkv, acts['ln1'][l], P['Wqkv'][l])
        G['Wqkv'][l].copy_(dW); G['bqkv'][l].copy_(db)
        dres, dg, db = layernorm_backward(dh, acts['x_in'][l], P['n1g'][l], acts['m1'][l], acts['r1'][l])
        G['n1g'][l].copy_(dg); G['n1b'][l].copy_(db)
        dx = dx + dres
    dwte, dwpe = encoder_backward(dx, X, Vv)
    G['tokemb'] += dwte
    G['posemb'][:T_] += dwpe
''',
    r'''
grads_memory = torch.zeros(num_parameters)
Gm = carve(grads_memory)
rows = tokens[:9]
xb, yb = rows[:, :T], rows[:, T]
leaf = params_memory.clone().requires_grad_()
lv, _ = gpt2_forward(carve(leaf), xb, yb)
lv.backward()
with torch.no_grad():
    lv, acts = gpt2_forward(Pm, xb, yb)
    grads_memory.zero_()
    gpt2_backward(Pm, Gm, acts, xb)
print('flat grad max diff', (grads_memory - leaf.grad).abs().max().item())
''',
    md("## training: one AdamW call over the whole buffer"),
    r'''
m_memory = torch.zeros(num_parameters)
v_memory = torch.zeros(num_parameters)
history = []
bg = torch.Generator().manual_seed(77)
for step in range(1, 151):
    rows = tokens[torch.randint(0, len(tokens), (12,), generator=bg)]
    xb, yb = rows[:, :T], rows[:, T]
    with torch.no_grad():
        lv, acts = gpt2_forward(Pm, xb, yb)
        grads_memory.zero_()
        gpt2_backward(Pm, Gm, acts, xb)
        adamw_update(params_memory, grads_memory, m_memory, v_memory, step, 3e-3, 0.9, 0.95, 1e-8, 0.0)
    history.append(lv.item())
print(history[0], sum(history[-15:]) / 15)
''',
]

add("gpt_u3_llmc_flat_memory_bmm_heads_func_vjp_adamw", "gpt", GPTU3_CELLS,
    GPT_FUNCS + ["train/gpt"],
    notes="exercises 2 and 3 only: own data (random.Random(8) shuffle); a 2-layer model whose "
          "parameters are all views into one flat params_memory (carve() over a (name, shape) "
          "table, leading [L] on layer parameters, own names), gradients views of a flat "
          "grads_memory written by copy_ / +=; the seven functions (index_add_, llm.c's "
          "dnorm_mean / dnorm_norm_mean, flatten matmuls, heads folded into the batch with "
          "torch.bmm, 1 - tanh^2, softmax - one_hot, AdamW by lerp_ / mul_ / sub_) checked by "
          "torch.func.vjp in vjp_check(); gpt2_forward / gpt2_backward checked once against "
          "autograd on a flat leaf; 150 steps, one adamw_update over the whole flat buffer, "
          "batch 12; all right",
    functions={s: None for s in GPT_FUNCS},
    train={"cell": "for step in range(1, 151)", "probe": "adamw_update(params_memory,",
           "params": "{'flat': params_memory}", "grads": "{'flat': grads_memory}",
           "ref": "lambda Q: gpt2_forward(carve(Q['flat']), xb, yb)[0]", "losses": "history"})

# ================================================================================================
# GPT U4 (a slip and its cascades). Own data (names sorted by length then every 7th held out,
# rows by a list comprehension), parameters in a torch.nn.ParameterDict under own short keys
# (E, Pos, g1, b1, Wa, ba, Wc, bc, g2, b2, W1, c1, W2, c2, gf, bf), the forward as top-level
# lines with capitalised math names (X0, M1, Xc1, Var1, R1, N1, A1, QKV, Q, K, Vh, S, Sm, Att,
# Z, Y, Proj, X1, ..., Hid, Gel, Mlp, X2, ..., Lg). A learner who thinks in Jacobians: the
# softmax's backward through its explicit per-row Jacobian diag_embed(p) - p p^T, the two inner
# layer norms through their explicit [C, C] Jacobian per position rstd * (I - 1/C - n n^T / C),
# both applied by torch.einsum, GELU through its diagonal; gradients named dL_dXxx, one
# `with torch.no_grad():` cell per step, first branches held as variables of their own
# (dL_dXcf_direct, dL_dX2_via_xc, dL_dX1_skip, dL_dX0_skip); rel_err() against retained .grad.
# Batch 5; exercise 1, every step.
# Slip: dk taken as dS @ q (the transpose of dS missing): block/qk wrong; qkv, ln1, ln1_affine,
# x0, wpe and wte cascade.

GPTU4_CELLS = [
    md("# Jacobians\nEvery local derivative as an explicit matrix where it is small enough to "
       "write down, then a vector-Jacobian product."),
    r'''
import math
import torch
import torch.nn as nn
import torch.nn.functional as F
''',
    r'''
all_names = open('names.txt', 'r').read().splitlines()
by_len = sorted(all_names, key=lambda w: (len(w), w))
train_names = [w for j, w in enumerate(by_len) if j % 7]
chars = ['.'] + sorted(set(''.join(all_names)))
code = {ch: j for j, ch in enumerate(chars)}
nV, nT, nC, nH = len(chars), 16, 32, 4
dh = nC // nH
X_all = torch.tensor([([0] + [code[ch] for ch in w] + [0] * nT)[:nT] for w in train_names])
Y_all = torch.tensor([([0] + [code[ch] for ch in w] + [0] * (nT + 1))[nT] for w in train_names])
X_all.shape, Y_all[:5]
''',
    r'''
torch.manual_seed(5150)
def w_(i, o, s=1.0):
    return nn.Parameter(torch.randn(i, o) * s / i**0.5)
def b_(k, c=0.0):
    return nn.Parameter(c + 0.1 * torch.randn(k))

pd = nn.ParameterDict({
    'E': nn.Parameter(0.1 * torch.randn(nV, nC)), 'Pos': nn.Parameter(0.1 * torch.randn(nT, nC)),
    'g1': b_(nC, 1.0), 'b1': b_(nC), 'Wa': w_(nC, 3 * nC), 'ba': b_(3 * nC),
    'Wc': w_(nC, nC, 0.5), 'bc': b_(nC), 'g2': b_(nC, 1.0), 'b2': b_(nC),
    'W1': w_(nC, 4 * nC), 'c1': b_(4 * nC), 'W2': w_(4 * nC, nC, 0.5), 'c2': b_(nC),
    'gf': b_(nC, 1.0), 'bf': b_(nC)})
sum(p.numel() for p in pd.values())
''',
    r'''
rows = torch.randperm(len(X_all))[:5]
Xb, Yb = X_all[rows], Y_all[rows]
B = Xb.shape[0]

Tok = pd['E'][Xb]
X0 = Tok + pd['Pos']
M1 = X0.mean(-1, keepdim=True)
Xc1 = X0 - M1
Var1 = (Xc1**2).mean(-1, keepdim=True)
R1 = (Var1 + 1e-5)**-0.5
N1 = Xc1 * R1
A1 = N1 * pd['g1'] + pd['b1']
QKV = A1 @ pd['Wa'] + pd['ba']
Q = QKV[..., :nC].reshape(B, nT, nH, dh).permute(0, 2, 1, 3)
K = QKV[..., nC:2 * nC].reshape(B, nT, nH, dh).permute(0, 2, 1, 3)
Vh = QKV[..., 2 * nC:].reshape(B, nT, nH, dh).permute(0, 2, 1, 3)
S = Q @ K.transpose(-1, -2) * dh**-0.5
lower = torch.tril(torch.ones(nT, nT))
Sm = S.masked_fill(lower == 0, -float('inf'))
Att = torch.softmax(Sm, dim=-1)
Z = Att @ Vh
Y = Z.permute(0, 2, 1, 3).reshape(B, nT, nC)
Proj = Y @ pd['Wc'] + pd['bc']
X1 = X0 + Proj
M2 = X1.mean(-1, keepdim=True)
Xc2 = X1 - M2
Var2 = (Xc2**2).mean(-1, keepdim=True)
R2 = (Var2 + 1e-5)**-0.5
N2 = Xc2 * R2
A2 = N2 * pd['g2'] + pd['b2']
Hid = A2 @ pd['W1'] + pd['c1']
Gel = 0.5 * Hid * (1 + torch.tanh(math.sqrt(2 / math.pi) * (Hid + 0.044715 * Hid**3)))
Mlp = Gel @ pd['W2'] + pd['c2']
X2 = X1 + Mlp
Mf = X2.mean(-1, keepdim=True)
Xcf = X2 - Mf
Varf = (Xcf**2).mean(-1, keepdim=True)
Rf = (Varf + 1e-5)**-0.5
Nf = Xcf * Rf
Af = Nf * pd['gf'] + pd['bf']
Lg = Af @ pd['E'].T
Tgt = torch.cat([Xb[:, 1:], Yb[:, None]], dim=1)
loss = F.cross_entropy(Lg.view(-1, nV), Tgt.view(-1))
acts = [Lg, Af, Nf, Rf, Varf, Xcf, Mf, X2, Mlp, Gel, Hid, A2, N2, X1, Proj, Y, Z, Att, Vh, Sm, S,
        Q, K, QKV, A1, N1, X0, Tok]
for a in acts:
    a.retain_grad()
loss.backward()
print(loss.item())
''',
    r'''
def rel_err(name, mine, ref):
    r = ((mine - ref).norm() / ref.norm().clamp_min(1e-12)).item()
    print(f"{name:6s} rel err {r:.1e}", '' if r < 1e-4 else '<-- ???')
''',
    md("### the head and the final layer norm, atom by atom"),
    r'''
with torch.no_grad():
    Nrows = B * nT
    dL_dLg = torch.softmax(Lg, -1)
    dL_dLg -= F.one_hot(Tgt, nV)
    dL_dLg /= Nrows
    dL_dAf = dL_dLg @ pd['E']
    dL_dE_head = torch.einsum('btv,btc->vc', dL_dLg, Af)
    dL_dNf = dL_dAf * pd['gf']
    dL_dgf = torch.einsum('btc,btc->c', dL_dAf, Nf)
    dL_dbf = dL_dAf.sum((0, 1))
rel_err('Lg', dL_dLg, Lg.grad); rel_err('Af', dL_dAf, Af.grad); rel_err('gf', dL_dgf, pd['gf'].grad)
''',
    r'''
with torch.no_grad():
    dL_dRf = (dL_dNf * Xcf).sum(-1, keepdim=True)
    dL_dXcf_direct = dL_dNf * Rf
    dL_dVarf = dL_dRf * (-0.5) * (Varf + 1e-5)**-1.5
    dL_dXcf = dL_dXcf_direct + dL_dVarf * 2 * Xcf / nC
    dL_dMf = -dL_dXcf.sum(-1, keepdim=True)
    dL_dX2_via_xc = dL_dXcf.clone()
    dL_dX2 = dL_dX2_via_xc + dL_dMf.expand(-1, -1, nC) / nC
rel_err('Rf', dL_dRf, Rf.grad); rel_err('Varf', dL_dVarf, Varf.grad); rel_err('X2', dL_dX2, X2.grad)
''',
    md("### MLP: GELU is elementwise, so its Jacobian is a diagonal: keep the diagonal only"),
    r'''
with torch.no_grad():
    dL_dMlp = dL_dX2
    dL_dX1_skip = dL_dX2.clone()
    dL_dGel = dL_dMlp @ pd['W2'].T
    dL_dW2 = torch.einsum('bti,bto->io', Gel, dL_dMlp)
    dL_dc2 = dL_dMlp.sum((0, 1))
    kk = math.sqrt(2 / math.pi)
    inner = kk * (Hid + 0.044715 * Hid**3)
    jac_diag = 0.5 * (1 + torch.tanh(inner)) + 0.5 * Hid * (1 - torch.tanh(inner)**2) * kk * (1 + 3 * 0.044715 * Hid**2)
    dL_dHid = dL_dGel * jac_diag
    dL_dA2 = dL_dHid @ pd['W1'].T
    dL_dW1 = torch.einsum('bti,bto->io', A2, dL_dHid)
    dL_dc1 = dL_dHid.sum((0, 1))
    dL_dN2 = dL_dA2 * pd['g2']
    dL_dg2 = (dL_dA2 * N2).sum((0, 1))
    dL_db2 = dL_dA2.sum((0, 1))
rel_err('Hid', dL_dHid, Hid.grad); rel_err('A2', dL_dA2, A2.grad); rel_err('W1', dL_dW1, pd['W1'].grad)
''',
    md("### layer norm as one Jacobian per position\n"
       "$J_{ij} = \\partial n_i / \\partial x_j = r\\,(\\delta_{ij} - 1/C - n_i n_j / C)$"),
    r'''
def ln_jacobian(Nrm, R):
    C_ = Nrm.shape[-1]
    eye = torch.eye(C_)
    return R[..., None] * (eye - 1.0 / C_ - Nrm[..., :, None] * Nrm[..., None, :] / C_)

with torch.no_grad():
    J2 = ln_jacobian(N2, R2)
    dL_dX1 = dL_dX1_skip + torch.einsum('bti,btij->btj', dL_dN2, J2)
rel_err('X1', dL_dX1, X1.grad)
''',
    md("### attention; the softmax through its Jacobian $\\mathrm{diag}(p) - p p^T$"),
    r'''
with torch.no_grad():
    dL_dProj = dL_dX1
    dL_dX0_skip = dL_dX1.clone()
    dL_dY = dL_dProj @ pd['Wc'].T
    dL_dWc = torch.einsum('bti,bto->io', Y, dL_dProj)
    dL_dbc = dL_dProj.sum((0, 1))
    dL_dZ = dL_dY.reshape(B, nT, nH, dh).permute(0, 2, 1, 3)
    dL_dAtt = dL_dZ @ Vh.transpose(-1, -2)
    dL_dVh = Att.transpose(-1, -2) @ dL_dZ
    Jsm = torch.diag_embed(Att) - Att[..., :, None] * Att[..., None, :]
    dL_dSm = torch.einsum('bhti,bhtij->bhtj', dL_dAtt, Jsm)
    dL_dS = torch.where(lower == 0, torch.zeros_like(dL_dSm), dL_dSm)
    dL_dQ = dL_dS @ K * dh**-0.5
    dL_dK = dL_dS @ Q * dh**-0.5
rel_err('Att', dL_dAtt, Att.grad); rel_err('Sm', dL_dSm, Sm.grad)
rel_err('Q', dL_dQ, Q.grad); rel_err('K', dL_dK, K.grad)
''',
    r'''
with torch.no_grad():
    heads_back = lambda G_: G_.permute(0, 2, 1, 3).reshape(B, nT, nC)
    dL_dQKV = torch.cat([heads_back(dL_dQ), heads_back(dL_dK), heads_back(dL_dVh)], dim=-1)
    dL_dA1 = dL_dQKV @ pd['Wa'].T
    dL_dWa = torch.einsum('bti,bto->io', A1, dL_dQKV)
    dL_dba = dL_dQKV.sum((0, 1))
    dL_dN1 = dL_dA1 * pd['g1']
    dL_dg1 = (dL_dA1 * N1).sum((0, 1))
    dL_db1 = dL_dA1.sum((0, 1))
    dL_dX0 = dL_dX0_skip + torch.einsum('bti,btij->btj', dL_dN1, ln_jacobian(N1, R1))
    dL_dTok = dL_dX0
    dL_dPos = dL_dX0.sum(0)
    onehot = F.one_hot(Xb, nV).float()
    dL_dE = dL_dE_head + torch.einsum('btv,btc->vc', onehot, dL_dTok)
rel_err('QKV', dL_dQKV, QKV.grad); rel_err('X0', dL_dX0, X0.grad)
rel_err('Pos', dL_dPos, pd['Pos'].grad); rel_err('E', dL_dE, pd['E'].grad)
''',
]

_U4_F = {"logits": "Lg", "lnf": "Af", "wte": "pd['E']", "lnf_norm": "Nf", "lnfw": "pd['gf']",
         "lnfb": "pd['bf']", "lnf_rstd": "Rf", "lnf_xc": "Xcf", "lnf_var": "Varf",
         "lnf_mean": "Mf", "x2": "X2", "fcproj": "Mlp", "x1": "X1", "fch_gelu": "Gel",
         "fcprojw": "pd['W2']", "fcprojb": "pd['c2']", "fch": "Hid", "ln2": "A2",
         "fcw": "pd['W1']", "fcb": "pd['c1']", "ln2_norm": "N2", "ln2w": "pd['g2']",
         "ln2b": "pd['b2']", "attproj": "Proj", "x0": "X0", "y": "Y", "attprojw": "pd['Wc']",
         "attprojb": "pd['bc']", "atty": "Z", "att": "Att", "v": "Vh", "preatt_masked": "Sm",
         "preatt": "S", "q": "Q", "k": "K", "qkv": "QKV", "ln1": "A1", "qkvw": "pd['Wa']",
         "qkvb": "pd['ba']", "ln1_norm": "N1", "ln1w": "pd['g1']", "ln1b": "pd['b1']",
         "tok": "Tok", "wpe": "pd['Pos']"}
_U4_G = {k: "dL_d" + (v[4:-2] if v.startswith("pd[") else v) for k, v in _U4_F.items()}


def _u4_specs():
    specs = where("gpt", GPT_STEPS, fwd=_U4_F, grad=_U4_G.__getitem__,
                  first_after={"wte": "dL_dE_head = ", "lnf_xc": "dL_dXcf_direct = ",
                               "x2": "dL_dX2_via_xc = ", "x1": "dL_dX1_skip = ",
                               "x0": "dL_dX0_skip = "})
    firsts = {"wte": "dL_dE_head", "lnf_xc": "dL_dXcf_direct", "x2": "dL_dX2_via_xc",
              "x1": "dL_dX1_skip", "x0": "dL_dX0_skip"}
    for step, items in specs.items():
        specs[step] = [(firsts[next(k for k, v in _U4_G.items() if v == sp[0])]
                        if len(sp) == 3 else sp[0], *sp[1:]) for sp in items]
    return specs


add("gpt_u4_explicit_jacobians_parameterdict_dk_transpose_slip", "gpt", GPTU4_CELLS, GPT_STEPS,
    wrong=["block/qk"],
    cascade=["block/qkv", "block/ln1", "block/ln1_affine", "block/x0", "block/wpe", "block/wte"],
    notes="own data (names sorted by length, every 7th held out, rows by list comprehension); "
          "parameters in an nn.ParameterDict under short keys, the forward as top-level lines "
          "with capitalised names; explicit Jacobians: the softmax's diag_embed(p) - p p^T per "
          "row and the inner layer norms' [C, C] r (I - 1/C - n n^T / C) per position, applied "
          "by einsum, GELU through its diagonal; gradients named dL_dXxx, one no_grad cell per "
          "step, first branches as variables of their own; rel_err() against retained .grad; "
          "batch 5; exercise 1, every step. Slip: dk taken as dS @ q, the transpose of dS "
          "missing; qkv, ln1, ln1_affine, x0, wpe, wte cascade",
    where=_u4_specs(),
    fix=[("dL_dK = dL_dS @ Q * dh**-0.5", "dL_dK = dL_dS.transpose(-1, -2) @ Q * dh**-0.5")])

# ================================================================================================
# LSTM U5 (right throughout). Time-major throughout, the way nn.LSTM's default is: batches
# drawn as [T, n] (draw() transposes), embeddings [T, n, D], the setup's run_lstm (copied in,
# batch-first) wrapped by transposes, hidden states concatenated along dim 0 (Hall [T, n, H]).
# Parameters in a dict `theta` under own names (tab, Wi, Wr, bg, Wout, bout), step t's clones
# Wi_t / Wr_t / bg_t, ifgo by torch.addmm and split by tensor_split(4, dim=1). Gradients in one
# dict `adj` whose state entries are keyed by (name, time step) tuples: adj['h', tt],
# adj['c', tt], adj['h', tt - 1], adj['c', tt - 1]; the masked cross-entropy's gradient built by
# boolean indexing; dWout by einsum over 'tnh,tnv'; first branches held (the h slice cloned, the
# c slice of autograd's dstate cloned); close() with allclose. Fused gates by torch.cat of the
# four slopes; lstm_step_backward through tensor_split; lstm_backward turning the batch-first
# tensors into Python lists per time step (unbind(1)) with h_prev / c_prev as shifted lists, the
# loop walking them reversed, dx collected in a list and stacked. An own time-major unroll()
# keeping lists, Adam of the learner's own, 150 steps. Batch 22 (training 19).

LSTMU5_CELLS = [
    r'''
import random
import torch
import torch.nn.functional as F
from collections import namedtuple
''',
    r'''
with open('names.txt') as fh:
    nm = [w for w in fh.read().split('\n') if w]
random.Random(5).shuffle(nm)
syms = sorted(set(''.join(nm)))
code = {s: k + 1 for k, s in enumerate(syms)}
code['.'] = 0
V = len(code)
width = max(map(len, nm)) + 1

def pack(ws):
    X = torch.zeros(len(ws), width, dtype=torch.long)
    Y = torch.full((len(ws), width), -1, dtype=torch.long)
    for r_, w in enumerate(ws):
        ids = [code[c] for c in w]
        X[r_, 1:len(ids) + 1] = torch.tensor(ids)
        Y[r_, :len(ids)] = torch.tensor(ids)
        Y[r_, len(ids)] = 0
    return X, Y

Xs, Ys = pack(nm[:int(0.8 * len(nm))])

def draw(n, gen):
    """a batch, time-major: [T, n], cut to its longest name"""
    j = torch.randint(0, len(Xs), (n,), generator=gen)
    xb, yb = Xs[j], Ys[j]
    Tn = int((yb >= 0).sum(1).max())
    return xb[:, :Tn].T.contiguous(), yb[:, :Tn].T.contiguous()
''',
    r'''
LSTMRun = namedtuple("LSTMRun", ["hs", "h", "c"])

def run_lstm(xs, h, c, Wx, Wh, b):
    hs, h, c = torch.lstm(xs, (h[None], c[None]), (Wx.T, Wh.T, b, b * 0), True, 1, 0.0, False,
                          False, True)
    return LSTMRun(hs, h[0], c[0])

def run_tm(xs_tm, h, c, Wx, Wh, b):
    """the same, time-major in and out"""
    r = run_lstm(xs_tm.transpose(0, 1), h, c, Wx, Wh, b)
    return LSTMRun(r.hs.transpose(0, 1), r.h, r.c)
''',
    r'''
D, H = 10, 32
gen = torch.Generator().manual_seed(1717)
bias0 = 0.1 * torch.randn(4 * H, generator=gen)
bias0[H:2 * H] += 1.0
theta = {'tab': torch.randn(V, D, generator=gen),
         'Wi': torch.randn(D, 4 * H, generator=gen) / D**0.5,
         'Wr': torch.randn(H, 4 * H, generator=gen) / H**0.5,
         'bg': bias0,
         'Wout': torch.randn(H, V, generator=gen) / H**0.5,
         'bout': 0.1 * torch.randn(V, generator=gen)}
for p in theta.values():
    p.requires_grad_(True)
tab, Wi, Wr, bg, Wout, bout = (theta[k] for k in ['tab', 'Wi', 'Wr', 'bg', 'Wout', 'bout'])
''',
    r'''
tt = 3
xtm, ytm = draw(22, gen)
T_, n = xtm.shape
vec = tab[xtm]
zeros = vec.new_zeros(n, H)
pre_run = run_tm(vec[:tt], zeros, zeros, Wi, Wr, bg)
hs_pre = pre_run.hs
hp, cp = pre_run.h, pre_run.c
xin = vec[tt]
Wi_t, Wr_t, bg_t = Wi.clone(), Wr.clone(), bg.clone()
zz = torch.addmm(bg_t, xin, Wi_t) + hp @ Wr_t
zi, zf, zg, zo = zz.tensor_split(4, dim=1)
si, sf, so = zi.sigmoid(), zf.sigmoid(), zo.sigmoid()
tg = zg.tanh()
cnew = sf * cp + si * tg
hnew = so * torch.tanh(cnew)
pair = torch.stack([hnew, cnew])
post_run = run_tm(vec[tt + 1:], pair[0], pair[1], Wi, Wr, bg)
hs_post = post_run.hs
Hall = torch.cat([hs_pre, hnew[None], hs_post], 0)
out = Hall @ Wout + bout
loss = F.cross_entropy(out.reshape(-1, V), ytm.reshape(-1), ignore_index=-1)
for t_ in [out, Hall, hs_pre, hs_post, pair, hnew, cnew, si, sf, so, tg, zz, xin, hp, cp, Wi_t, Wr_t, bg_t]:
    t_.retain_grad()
loss.backward()
print(T_, n, loss.item())
''',
    r'''
def close(tag, mine, t_):
    print(tag, torch.allclose(mine, t_.grad, rtol=1e-4, atol=1e-6), f"{(mine - t_.grad).abs().max():.1e}")
''',
    r'''
adj = {}
with torch.no_grad():
    live = ytm >= 0
    p = out.softmax(-1)
    p[live] -= F.one_hot(ytm[live], V).float()
    p[~live] = 0
    adj['out'] = p / live.sum()
    adj['Hall'] = adj['out'] @ Wout.T
    adj['Wout'] = torch.einsum('tnh,tnv->hv', Hall, adj['out'])
    adj['bout'] = adj['out'].sum((0, 1))
close('out', adj['out'], out); close('Hall', adj['Hall'], Hall); close('Wout', adj['Wout'], Wout)
''',
    r'''
adj['hs_pre'], adj['hs_post'] = adj['Hall'][:tt], adj['Hall'][tt + 1:]
adj['h', tt] = adj['Hall'][tt].clone()
''',
    r'''
adj['h', tt] += pair.grad[0]
adj['c', tt] = pair.grad[1].clone()
''',
    r'''
with torch.no_grad():
    thc = torch.tanh(cnew)
    adj['so'] = adj['h', tt] * thc
    adj['c', tt] += adj['h', tt] * so * (1 - thc**2)
    adj['sf'] = adj['c', tt] * cp
    adj['c', tt - 1] = adj['c', tt] * sf
    adj['si'] = adj['c', tt] * tg
    adj['tg'] = adj['c', tt] * si
close('h', adj['h', tt], hnew); close('c', adj['c', tt], cnew); close('c_prev', adj['c', tt - 1], cp)
''',
    r'''
with torch.no_grad():
    adj['zi'] = adj['si'] * si * (1 - si)
    adj['zf'] = adj['sf'] * sf * (1 - sf)
    adj['zo'] = adj['so'] * so * (1 - so)
    adj['zg'] = adj['tg'] * (1 - tg**2)
    adj['zz'] = torch.hstack([adj['zi'], adj['zf'], adj['zg'], adj['zo']])
    adj['xin'] = adj['zz'] @ Wi_t.T
    adj['h', tt - 1] = adj['zz'] @ Wr_t.T
    adj['Wi_t'] = xin.T @ adj['zz']
    adj['Wr_t'] = hp.T @ adj['zz']
    adj['bg_t'] = adj['zz'].sum(0)
close('zz', adj['zz'], zz); close('xin', adj['xin'], xin); close('hp', adj['h', tt - 1], hp)
close('Wi_t', adj['Wi_t'], Wi_t)
''',
    md("## gates fused"),
    r'''
with torch.no_grad():
    slopes = torch.cat([si * (1 - si), sf * (1 - sf), 1 - tg**2, so * (1 - so)], dim=1)
    dzz_fused = torch.cat([adj['si'], adj['sf'], adj['tg'], adj['so']], dim=1) * slopes
close('fused', dzz_fused, zz)
''',
    r'''
def lstm_step_backward(dh, dc, x, h_prev, c_prev, c, gates, Wx, Wh):
    i, f, g, o = gates.tensor_split(4, dim=1)
    tc = torch.tanh(c)
    dc = dc + dh * o * (1 - tc**2)
    dgates = torch.cat([dc * g * i * (1 - i), dc * c_prev * f * (1 - f),
                        dc * i * (1 - g**2), dh * tc * o * (1 - o)], dim=1)
    return (dgates @ Wx.T, dgates @ Wh.T, dc * f, x.T @ dgates, h_prev.T @ dgates,
            dgates.sum(0))


def lstm_backward(dhs, xs, h0, c0, hs, cs, gates, Wx, Wh):
    x_l, h_l, c_l, g_l, dh_l = (list(z.unbind(1)) for z in (xs, hs, cs, gates, dhs))
    hprev_l = [h0] + h_l[:-1]
    cprev_l = [c0] + c_l[:-1]
    dWx, dWh = torch.zeros_like(Wx), torch.zeros_like(Wh)
    db = torch.zeros(Wx.shape[1])
    dx_l = [None] * len(x_l)
    dh_next, dc_next = torch.zeros_like(h0), torch.zeros_like(c0)
    for s in reversed(range(len(x_l))):
        dx_l[s], dh_next, dc_next, a, b_, c_ = lstm_step_backward(
            dh_l[s] + dh_next, dc_next, x_l[s], hprev_l[s], cprev_l[s], c_l[s], g_l[s], Wx, Wh)
        dWx += a
        dWh += b_
        db += c_
    return torch.stack(dx_l, 1), dh_next, dc_next, dWx, dWh, db
''',
    md("## training (time-major forward, my BPTT, my Adam)"),
    r'''
def unroll(P, xtm):
    Tn, nb = xtm.shape
    xs = P['tab'][xtm]
    h = c = xs.new_zeros(nb, H)
    hl, cl, gl = [], [], []
    for s in range(Tn):
        z = xs[s] @ P['Wi'] + h @ P['Wr'] + P['bg']
        a_i, a_f, a_g, a_o = z.tensor_split(4, dim=1)
        gt = torch.cat([a_i.sigmoid(), a_f.sigmoid(), a_g.tanh(), a_o.sigmoid()], 1)
        c = gt[:, H:2 * H] * c + gt[:, :H] * gt[:, 2 * H:3 * H]
        h = gt[:, 3 * H:] * torch.tanh(c)
        hl.append(h); cl.append(c); gl.append(gt)
    hs_tm = torch.stack(hl)
    return xs, hl, cl, gl, hs_tm @ P['Wout'] + P['bout']

def tm_loss(P, xtm, ytm):
    return F.cross_entropy(unroll(P, xtm)[-1].reshape(-1, V), ytm.reshape(-1), ignore_index=-1)
''',
    r'''
for p in theta.values():
    p.requires_grad_(False)
mom = {k: torch.zeros_like(p) for k, p in theta.items()}
sq = {k: torch.zeros_like(p) for k, p in theta.items()}
curve = []
for it in range(1, 151):
    xtm, ytm = draw(19, gen)
    xs, hl, cl, gl, lg = unroll(theta, xtm)
    curve.append(F.cross_entropy(lg.reshape(-1, V), ytm.reshape(-1), ignore_index=-1).item())
    ok = ytm >= 0
    dlg = lg.softmax(-1)
    dlg[ok] -= F.one_hot(ytm[ok], V).float()
    dlg[~ok] = 0
    dlg /= ok.sum()
    hs_tm = torch.stack(hl)
    z0 = torch.zeros(xtm.shape[1], H)
    dxs, _, _, dWi, dWr, dbg = lstm_backward(
        (dlg @ theta['Wout'].T).transpose(0, 1), xs.transpose(0, 1), z0, z0,
        hs_tm.transpose(0, 1), torch.stack(cl, 1), torch.stack(gl, 1), theta['Wi'], theta['Wr'])
    grads = {'tab': torch.zeros_like(theta['tab']).index_add_(0, xtm.T.reshape(-1), dxs.reshape(-1, D)),
             'Wi': dWi, 'Wr': dWr, 'bg': dbg,
             'Wout': torch.einsum('tnh,tnv->hv', hs_tm, dlg), 'bout': dlg.sum((0, 1))}
    for k in theta:
        mom[k].mul_(0.9).add_(grads[k], alpha=0.1)
        sq[k].mul_(0.999).addcmul_(grads[k], grads[k], value=0.001)
        theta[k] -= 0.01 * (mom[k] / (1 - 0.9**it)) / ((sq[k] / (1 - 0.999**it)).sqrt() + 1e-8)
print(curve[0], sum(curve[-15:]) / 15)
''',
]

_L5_F = {"logits": "out", "hs": "Hall", "Wy": "Wout", "by": "bout", "hs_before": "hs_pre",
         "hs_after": "hs_post", "h": "hnew", "c": "cnew", "state": "pair", "o": "so", "f": "sf",
         "i": "si", "g": "tg", "c_prev": "cp", "ai": "zi", "af": "zf", "ag": "zg", "ao": "zo",
         "ifgo": "zz", "x_t": "xin", "h_prev": "hp", "Wx_t": "Wi_t", "Wh_t": "Wr_t",
         "b_t": "bg_t", "t": "tt"}
_L5_G = {"logits": "adj['out']", "hs": "adj['Hall']", "Wy": "adj['Wout']", "by": "adj['bout']",
         "hs_before": "adj['hs_pre']", "hs_after": "adj['hs_post']", "h": "adj['h', tt]",
         "c": "adj['c', tt]", "o": "adj['so']", "f": "adj['sf']", "i": "adj['si']",
         "g": "adj['tg']", "c_prev": "adj['c', tt - 1]", "ai": "adj['zi']", "af": "adj['zf']",
         "ag": "adj['zg']", "ao": "adj['zo']", "ifgo": "adj['zz']", "x_t": "adj['xin']",
         "h_prev": "adj['h', tt - 1]", "Wx_t": "adj['Wi_t']", "Wh_t": "adj['Wr_t']",
         "b_t": "adj['bg_t']"}


def _l5u_specs():
    specs = where("lstm", LSTM_STEPS, fwd=_L5_F, grad=_L5_G.__getitem__,
                  first_after={"h": "adj['h', tt] = adj['Hall'][tt].clone()",
                               "c": "adj['c', tt] = pair.grad[1].clone()"})
    # time-major: the output's share of h is the slice at time tt along dim 0
    specs["step/h_out"] = [sp if len(sp) == 2 else (sp[0], "G(Hall)[tt]", sp[2])
                           for sp in specs["step/h_out"]]
    specs["fused/gates"] = [("dzz_fused", "G(zz)")]
    return specs


add("lstm_u5_time_major_tuple_keys_step_lists_adam", "lstm", LSTMU5_CELLS, LSTM_ALL,
    notes="own data (random.Random(5) shuffle, rows packed into zero / -1 tensors); time-major "
          "throughout: batches [T, n], the setup's run_lstm wrapped by transposes, Hall "
          "concatenated along dim 0; parameters in a dict theta under own names, ifgo by "
          "torch.addmm, tensor_split(4) gates; gradients in one dict adj with the states keyed "
          "by (name, time step) tuples, the masked cross-entropy by boolean indexing, first "
          "branches held; close() with allclose; batch 22; fused gates by cat of the slopes; "
          "lstm_step_backward by tensor_split, lstm_backward over per-step Python lists "
          "(unbind(1), shifted h_prev / c_prev lists) walked reversed; own time-major unroll() "
          "and Adam, 150 steps, batch 19; all right",
    where=_l5u_specs(),
    checkpoint="close('fused', dzz_fused, zz)",
    functions={"bptt/lstm_backward": None, "fused/lstm_step_backward": None},
    train={"cell": "for it in range(1, 151)", "probe": "for k in theta:", "params": "theta",
           "grads": "grads", "ref": "lambda Q: tm_loss(Q, xtm, ytm)", "losses": "curve"})

# ================================================================================================
# CONV U6 (a slip and its cascades). Own data (randperm(Generator 321) over the names, makemore
# windows of 8), parameters in a dict P under own names (E, K1, c1, K2, c2, K3, c3, Wo, bo).
# Each dilated causal convolution as im2col: taps() left-pads and calls F.unfold on a [B, Cin,
# 1, T] view with kernel (1, 2) and dilation (1, d), giving [B, Cin * 2, T] columns (cols1,
# cols2, cols3), and the layer is K.flatten(1) @ cols + c[:, None]. The backward is the adjoint:
# the kernel's gradient by einsum of the output gradient with the columns, viewed back as
# [Cout, Cin, 2], and the input's by K.flatten(1).T @ dz folded back with F.fold, then the
# padding cut off. Layer 3 written inline, then a helper conv_back() for layers 2 and 1 (and for
# training); dE by index_add_; report() max differences against retained .grad. Batch 40; SGD
# 200 steps on the helper, batch 48.
# Slip: in the inline layer 3 the padding is cut from the wrong end of the folded gradient
# (dpad3[:, :, :-4] where the real positions are [:, :, 4:]): conv/h2 wrong; h2pre, h1,
# h1pre, x, emb and C cascade (the helper, and the training built on it, are right).

CONVU6_CELLS = [
    md("# WaveNet backward with unfold / fold\n"
       "A dilated conv is a matmul on unfolded columns; its backward is a matmul and a fold."),
    r'''
import torch
import torch.nn.functional as F
''',
    r'''
raw = open('names.txt').read().splitlines()
g = torch.Generator().manual_seed(321)
order = torch.randperm(len(raw), generator=g).tolist()
ctx = 8
alpha = {c: i + 1 for i, c in enumerate('abcdefghijklmnopqrstuvwxyz')}
X, Y = [], []
for j in order[:int(0.8 * len(raw))]:
    window = [0] * ctx
    for ch in raw[j] + '.':
        k = alpha.get(ch, 0)
        X.append(window)
        Y.append(k)
        window = window[1:] + [k]
Xtr, Ytr = torch.tensor(X), torch.tensor(Y)
Xtr.shape
''',
    r'''
nv, ne, nh = 27, 10, 64
def kern(o, i):
    return torch.randn(o, i, 2, generator=g) * (5 / 3) / (2 * i) ** 0.5
P = {'E': torch.randn(nv, ne, generator=g),
     'K1': kern(nh, ne), 'c1': 0.1 * torch.randn(nh, generator=g),
     'K2': kern(nh, nh), 'c2': 0.1 * torch.randn(nh, generator=g),
     'K3': kern(nh, nh), 'c3': 0.1 * torch.randn(nh, generator=g),
     'Wo': 0.1 * torch.randn(nh, nv, generator=g), 'bo': 0.1 * torch.randn(nv, generator=g)}
for t_ in P.values():
    t_.requires_grad_()
''',
    r'''
def taps(a, d):
    """[B, Cin, T] -> [B, Cin*2, T]: for every t the values at t-d and t (zeros before the start)"""
    padded = F.pad(a, (d, 0))
    return F.unfold(padded[:, :, None, :], kernel_size=(1, 2), dilation=(1, d))

ib = torch.randint(0, len(Xtr), (40,), generator=g)
xb, yb = Xtr[ib], Ytr[ib]
B = len(xb)
vecs = P['E'][xb]
seq = vecs.permute(0, 2, 1)
cols1 = taps(seq, 1)
z1 = P['K1'].flatten(1) @ cols1 + P['c1'][:, None]
a1 = torch.tanh(z1)
cols2 = taps(a1, 2)
z2 = P['K2'].flatten(1) @ cols2 + P['c2'][:, None]
a2 = torch.tanh(z2)
cols3 = taps(a2, 4)
z3 = P['K3'].flatten(1) @ cols3 + P['c3'][:, None]
a3 = torch.tanh(z3)
top = a3[:, :, -1]
out = top @ P['Wo'] + P['bo']
loss = F.cross_entropy(out, yb)
for t_ in (vecs, seq, z1, a1, z2, a2, z3, a3, top, out):
    t_.retain_grad()
loss.backward()
loss.item()
''',
    r'''
def report(**pairs):
    for k, (mine, ref) in pairs.items():
        print(f"{k:>4}: {(mine - ref.grad).abs().max().item():.2e}")
''',
    r'''
with torch.no_grad():
    dout = (F.softmax(out, 1) - F.one_hot(yb, nv)) / B
    dtop = dout @ P['Wo'].T
    dWo = top.T @ dout
    dbo = dout.sum(0)
    da3 = torch.zeros_like(a3)
    da3[:, :, -1] = dtop
    dz3 = da3 * (1 - a3**2)
report(out=(dout, out), top=(dtop, top), Wo=(dWo, P['Wo']), a3=(da3, a3), z3=(dz3, z3))
''',
    md("layer 3 by hand: the kernel sees the columns, the columns fold back onto the padded input"),
    r'''
with torch.no_grad():
    dK3 = torch.einsum('bot,bkt->ok', dz3, cols3).view_as(P['K3'])
    dc3 = dz3.sum((0, 2))
    dcols3 = P['K3'].flatten(1).T @ dz3
    dpad3 = F.fold(dcols3, output_size=(1, ctx + 4), kernel_size=(1, 2), dilation=(1, 4))[:, :, 0]
    da2 = dpad3[:, :, :-4]
    dz2 = da2 * (1 - a2**2)
report(K3=(dK3, P['K3']), c3=(dc3, P['c3']), a2=(da2, a2), z2=(dz2, z2))
''',
    md("the same as a helper for the other two layers"),
    r'''
def conv_back(dz, cols, K, d):
    dK = torch.einsum('bot,bkt->ok', dz, cols).view_as(K)
    T = dz.shape[-1]
    full = F.fold(K.flatten(1).T @ dz, output_size=(1, T + d), kernel_size=(1, 2), dilation=(1, d))
    return full[:, :, 0, d:], dK, dz.sum((0, 2))

with torch.no_grad():
    da1, dK2, dc2 = conv_back(dz2, cols2, P['K2'], 2)
    dz1 = da1 * (1 - a1**2)
    dseq, dK1, dc1 = conv_back(dz1, cols1, P['K1'], 1)
    dvecs = dseq.permute(0, 2, 1)
    dE = torch.zeros_like(P['E']).index_add_(0, xb.flatten(), dvecs.reshape(-1, ne))
report(a1=(da1, a1), K2=(dK2, P['K2']), z1=(dz1, z1), seq=(dseq, seq), K1=(dK1, P['K1']), E=(dE, P['E']))
''',
    md("## training on conv_back"),
    r'''
def run(P, xb, yb):
    keep = {'x': xb}
    a = P['E'][xb].permute(0, 2, 1)
    for l, d in ((1, 1), (2, 2), (3, 4)):
        cols = taps(a, d)
        a = torch.tanh(P[f'K{l}'].flatten(1) @ cols + P[f'c{l}'][:, None])
        keep[l] = (cols, a)
    keep['top'] = a[:, :, -1]
    logits = keep['top'] @ P['Wo'] + P['bo']
    keep['logits'] = logits
    return F.cross_entropy(logits, yb), keep

def grads_of(P, keep, yb):
    gr = {}
    dl = (F.softmax(keep['logits'], 1) - F.one_hot(yb, nv)) / len(yb)
    gr['Wo'], gr['bo'] = keep['top'].T @ dl, dl.sum(0)
    da = torch.zeros_like(keep[3][1])
    da[:, :, -1] = dl @ P['Wo'].T
    for l, d in ((3, 4), (2, 2), (1, 1)):
        cols, a = keep[l]
        da, gr[f'K{l}'], gr[f'c{l}'] = conv_back(da * (1 - a**2), cols, P[f'K{l}'], d)
    gr['E'] = torch.zeros_like(P['E']).index_add_(0, keep['x'].flatten(), da.permute(0, 2, 1).reshape(-1, ne))
    return gr
''',
    r'''
for t_ in P.values():
    t_.requires_grad_(False)
lossi = []
for it in range(200):
    ib = torch.randint(0, len(Xtr), (48,), generator=g)
    xb, yb = Xtr[ib], Ytr[ib]
    lv, keep = run(P, xb, yb)
    gr = grads_of(P, keep, yb)
    for k in P:
        P[k] -= 0.1 * gr[k]
    lossi.append(lv.item())
print(lossi[0], sum(lossi[-20:]) / 20)
''',
]

_C6_F = {"logits": "out", "last": "top", "W": "P['Wo']", "b": "P['bo']", "h3": "a3",
         "h3pre": "z3", "h2": "a2", "w3": "P['K3']", "b3": "P['c3']", "h2pre": "z2", "h1": "a1",
         "w2": "P['K2']", "b2": "P['c2']", "h1pre": "z1", "x": "seq", "w1": "P['K1']",
         "b1": "P['c1']", "emb": "vecs", "C": "P['E']"}
_C6_G = {"logits": "dout", "last": "dtop", "W": "dWo", "b": "dbo", "h3": "da3", "h3pre": "dz3",
         "h2": "da2", "w3": "dK3", "b3": "dc3", "h2pre": "dz2", "h1": "da1", "w2": "dK2",
         "b2": "dc2", "h1pre": "dz1", "x": "dseq", "w1": "dK1", "b1": "dc1", "emb": "dvecs",
         "C": "dE"}

add("conv_u6_unfold_fold_im2col_pad_cut_slip", "conv", CONVU6_CELLS, CONV_ALL,
    wrong=["conv/h2"],
    cascade=["conv/h2pre", "conv/h1", "conv/h1pre", "conv/x", "conv/emb", "conv/C"],
    notes="own data (randperm(Generator 321), makemore windows); parameters in a dict P under "
          "own names; each convolution as im2col: F.pad then F.unfold on a [B, Cin, 1, T] view "
          "(kernel (1, 2), dilation (1, d)) and K.flatten(1) @ cols; the backward its adjoint, "
          "einsum for the kernel, F.fold of K^T dz for the input with the padding cut off; layer "
          "3 inline, layers 2 and 1 through conv_back(); dE by index_add_; report() against "
          "retained .grad; batch 40; SGD 200 steps on conv_back, batch 48. Slip: layer 3 cuts "
          "the padding from the wrong end of the folded gradient (dpad3[:, :, :-4]); h2pre, h1, "
          "h1pre, x, emb, C cascade; the helper and the training are right",
    where=where("conv", CONV_STEPS, fwd=_C6_F, grad=_C6_G.__getitem__),
    checkpoint="report(a1=(da1, a1)",
    train={"cell": "for it in range(200)", "probe": "for k in P:", "params": "P", "grads": "gr",
           "ref": "lambda Q: run(Q, xb, yb)[0]", "losses": "lossi"},
    fix=[("da2 = dpad3[:, :, :-4]", "da2 = dpad3[:, :, 4:]")])
