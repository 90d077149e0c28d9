"""Learners' own notebooks for the gpt, lstm and conv lessons, with each step's truth: an eighth
corpus, holdout half (written separately from the tune half, notebook_corpus_lessons_tune9, which
was not read here).

Six notebooks: four for gpt, one for lstm, one for conv, in layouts that the earlier corpora do not
use: layers as stages over a whole activation dict, a model object whose step() drives training
with namedtuple caches and gradients keyed by id(p), layers as generators (coroutines) driven by
next() / send(), a block written for one sequence and looped over the batch with parameters in a
list, an LSTM whose gate blocks are kept in the learner's own order g, i, f, o with states in
preallocated [T + 1, B, H] tensors, and convolutions through [T, T] shift matrices. Each is a
learner's own notebook: the lesson's forward pass copied in (renamed and re-laid-out), their own
loading of 'names.txt' (the truth runner points it at data/names.txt), their own seed and init,
the backward pass in a layout matching the forward, their own comparison helper (none named cmp),
and where they train (four of the six), a loop of at most 300 steps on their own gradients and an
update of their own. Architecture sizes are the lessons' [lesson] sizes throughout; batch sizes
equal no other size of their lesson (gpt 5, 6 / 9, 3 / 10, 3; lstm 24 / 20; conv 40 / 50).

Layouts:
  gpt_h1   every layer a STAGE: a function taking the whole activation dict S and returning a new
           one ({**S, ...}), the forward the list of stages folded by functools.reduce; the
           backward a list of back-stages (S, D) -> {**D, ...}, parameter gradients under
           'P:<key>', first branches under keys of their own ('r1<-skip', 'fxc<-n',
           'P:E<-head') that later stages never overwrite; parameters in a dict under own keys
           (E, Pos, g1 / s1, Wqkv, Wo, Wup, Wdn, gf / sf, ...); heads kept as [B, T, nh, hs]
           (never transposed), every product a torch.einsum, a boolean triu mask; gap() max
           differences against torch.autograd.grad. Exercise 1, every step.
  gpt_h2   a model object MiniGPT: parameters as attributes under own names listed by named(),
           one namedtuple cache per layer (LNC, ATC, MLPC, HC), heads by permute, the mask by
           torch.where, the softmax written out (max-shifted exp over its sum); backward() builds
           per-layer gradient namedtuples (LNG, ATG, MLPG) and a dict of parameter gradients
           keyed by id(p), the head's share of the table and the final layer norm's first
           branches held, the residual first branches not; diffs() against
           torch.autograd.grad. Exercise 1, every step; then net.step(xb, yb, lr) under no_grad,
           clipping to a total norm of 1, momentum 0.9 and a cosine learning-rate schedule, 200
           steps.
  gpt_h3   exercises 2 and 3: the seven functions (scatter_add_ encoder, closed-form layer norm,
           reshape matmuls, split / view heads, GELU's slope through its tanh, an in-place -1 at
           the targets, AdamW with the decay inside the step) checked by against() on random
           upstream gradients; every layer a GENERATOR that yields its output, is sent its
           output's gradient and yields its inputs' and parameters' gradients from the
           functions; run() pushes the generators, backprop() sends through them in reverse with
           the residual sums and the tied head by hand; parameters under dotted keys; 150 steps
           of adamw_update with a linear warmup and a linear decay.
  gpt_h4   the block written for ONE sequence ([T, C] rows, heads [nh, T, hs], an additive 0 /
           -inf mask) and looped over the batch, the loss the mean of the per-sequence losses;
           parameters in a list theta read through index constants, gradients in a parallel list
           dtheta accumulated with +=; every activation appended per sequence by keep() to a list
           in A, every gradient to a list in D, first branches in lists of their own and
           dE_head; a relative-error table on the stacked lists. Exercise 1, every step.
  lstm_h5  the gate blocks in the learner's own order g, i, f, o (Ux, Uh, bias), torch.split
           into zg, zi, zf, zo; loops of its own before and after t, step t written out with
           cloned handles h_prev / c_prev, the state stacked as hc, the future's share of its
           gradient by torch.autograd.grad through the later steps; dxxx names, first branches
           held; near() with torch.allclose; fused gates by one torch.cat; to_ifgo / to_gifo
           reorder helpers; lstm_step_backward in the lesson's order and lstm_backward over it
           with the states in preallocated [T + 1, B, H] tensors; a no_grad unroll writing into
           preallocated [T + 1, B, H] buffers, clipping by total norm and an Adam of the
           learner's own, 150 steps.
  conv_h6  each dilated causal convolution through a [T, T] shift matrix diag(ones(T - d), -d):
           K[:, :, 0] @ (a @ S.T) + K[:, :, 1] @ a + c, the three layers a loop over (layer,
           dilation); activations and gradients in dicts keyed by tuples ('z', l) / ('a', l) and
           parameter names; the backward the adjoint (the shifted input's gradient times S), the
           two taps by einsum, stacked; fwd() / bwd(); worst() relative errors against
           torch.autograd.grad; SGD with weight decay and a step schedule, 200 steps.

Slips (each case's "notes" says which): gpt_h1's softmax backward subtracts the plain row sum of
dprobs where the probability-weighted sum(p * dp) belongs (block/preatt_masked wrong; preatt, qk,
qkv, ln1, ln1_affine, x0, wpe, wte cascade, while everything above the softmax stays right);
lstm_h5 takes the candidate's tanh slope at its pre-activation, (1 - zg_t**2) where
(1 - cand**2) belongs (step/g wrong; ifgo and inputs cascade, while the fused gates, written
afresh, the two functions and the training stay right). The other four notebooks are right
throughout. No notebook is shared with the earlier corpora.

Written apart from the grader: from the lessons' forward passes, pack.toml's [lesson] / [setup] /
[forward] tables, exercises/conv/forward.py, `backprop-tutor --pack X list / show` and the earlier
corpora's format only, without reading the tutor's code or the steps' solutions, mistakes, hints
or explanations, and without running the grader on these notebooks. Every label was measured by
running the notebook, not judged by eye:

    .venv/bin/python tests/lesson_corpus_truth.py notebook_corpus_lessons_holdout8

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




def swap_first(specs: dict, mine: dict) -> dict:
    """Replaces the learner's expression of each step's first-branch spec (the one read 'after' a
    statement) by the expression given for that step; drops it where the step maps to None."""
    out = {}
    for step, items in specs.items():
        new = []
        for sp in items:
            if len(sp) == 3:
                if mine.get(step) is None:
                    continue
                sp = (mine[step], sp[1], sp[2])
            new.append(sp)
        out[step] = new
    return out


# ================================================================================================
# GPT H1 (a slip and its cascades). Own data (torch.randperm with a seeded generator, the rows
# built from a padded string), parameters in a dict under own keys; every layer a STAGE: a function
# taking the whole activation dict S and returning a new one ({**S, ...}), the forward a list of
# stages folded over S; the backward likewise a list of back-stages, each taking (S, D) and
# returning a new gradient dict D, parameter gradients under 'P:<key>', first branches under keys
# of their own ('r1<-skip', 'fxc<-n', 'P:E<-head', ...) that later stages never overwrite; heads
# kept as [B, T, nh, hs] (never transposed), products by torch.einsum; gap() against
# torch.autograd.grad. Batch 5; exercise 1, every step.
# Slip: the softmax's backward subtracts the plain row sum of dprobs, sum(dp), where the
# probability-weighted sum(p * dp) belongs: block/preatt_masked wrong; preatt, qk, qkv, ln1,
# ln1_affine, x0, wpe, wte cascade (everything above the softmax stays right).

GPTH1_CELLS = [
    md("# Transformer block, stage by stage\n"
       "Each stage gets the whole state dict and hands back a bigger one. No globals change."),
    r'''
import math
import torch
import torch.nn.functional as F
from functools import reduce
''',
    r'''
raw = open('names.txt', 'r').read().strip().split('\n')
perm = torch.randperm(len(raw), generator=torch.Generator().manual_seed(31337)).tolist()
raw = [raw[j] for j in perm]
alphabet = '.' + ''.join(sorted(set(''.join(raw))))
ctoi = {ch: j for j, ch in enumerate(alphabet)}
CTX, C, NH = 16, 32, 4
HS = C // NH
NV = len(alphabet)
def as_row(w):
    s = ('.' + w + '.' + '.' * CTX)[:CTX + 1]
    return [ctoi[ch] for ch in s]
cut = int(0.9 * len(raw))
grid = torch.tensor([as_row(w) for w in raw[:cut]])
Xtr, Ytr = grid[:, :CTX], grid[:, CTX]
print(grid.shape, NV)
''',
    r'''
torch.manual_seed(8080)
def w_(i, o, gain=1.0):
    return (torch.randn(i, o) * gain / math.sqrt(i)).requires_grad_()
def v_(n, mean=0.0):
    return (mean + 0.1 * torch.randn(n)).requires_grad_()
P = {
    'E': (0.1 * torch.randn(NV, C)).requires_grad_(), 'Pos': (0.1 * torch.randn(CTX, C)).requires_grad_(),
    'g1': v_(C, 1.0), 's1': v_(C), 'Wqkv': w_(C, 3 * C), 'bqkv': v_(3 * C),
    'Wo': w_(C, C, 0.5), 'bo': v_(C), 'g2': v_(C, 1.0), 's2': v_(C),
    'Wup': w_(C, 4 * C), 'bup': v_(4 * C), 'Wdn': w_(4 * C, C, 0.5), 'bdn': v_(C),
    'gf': v_(C, 1.0), 'sf': v_(C),
}
FUTURE = torch.triu(torch.ones(CTX, CTX, dtype=torch.bool), diagonal=1)
''',
    md("## forward stages"),
    r'''
def embed(S):
    tok = P['E'][S['ids']]
    return {**S, 'tok': tok, 'r0': tok + P['Pos']}

def norm(src, pre, gain, shift):
    def stage(S):
        x = S[src]
        mu = x.mean(-1, keepdim=True)
        xc = x - mu
        var = xc.pow(2).mean(-1, keepdim=True)
        rs = (var + 1e-5) ** -0.5
        n_ = xc * rs
        return {**S, pre + 'mu': mu, pre + 'xc': xc, pre + 'var': var, pre + 'rs': rs,
                pre + 'n': n_, pre + 'out': n_ * P[gain] + P[shift]}
    return stage

def attend(S):
    z = S['a1out'] @ P['Wqkv'] + P['bqkv']
    q, k, v = (u.unflatten(-1, (NH, HS)) for u in z.split(C, dim=-1))
    sc = torch.einsum('bqhd,bkhd->bhqk', q, k) * HS ** -0.5
    scm = sc.masked_fill(FUTURE, float('-inf'))
    pr = scm.softmax(dim=-1)
    ctx = torch.einsum('bhqk,bkhd->bqhd', pr, v)
    cat = ctx.flatten(2)
    ao = cat @ P['Wo'] + P['bo']
    return {**S, 'z': z, 'q': q, 'k': k, 'v': v, 'sc': sc, 'scm': scm, 'pr': pr,
            'ctx': ctx, 'cat': cat, 'ao': ao, 'r1': S['r0'] + ao}

def mlp(S):
    u = S['a2out'] @ P['Wup'] + P['bup']
    act = 0.5 * u * (1 + torch.tanh(math.sqrt(2 / math.pi) * (u + 0.044715 * u ** 3)))
    dn = act @ P['Wdn'] + P['bdn']
    return {**S, 'u': u, 'act': act, 'dn': dn, 'r2': S['r1'] + dn}

def head(S):
    logits = S['fout'] @ P['E'].T
    tgt = torch.cat([S['ids'][:, 1:], S['nxt'][:, None]], dim=1)
    return {**S, 'logits': logits, 'tgt': tgt,
            'loss': F.cross_entropy(logits.reshape(-1, NV), tgt.reshape(-1))}

STAGES = [embed, norm('r0', 'a1', 'g1', 's1'), attend, norm('r1', 'a2', 'g2', 's2'), mlp,
          norm('r2', 'f', 'gf', 'sf'), head]
''',
    r'''
pick = torch.randint(0, len(Xtr), (5,), generator=torch.Generator().manual_seed(5))
S = reduce(lambda s, f: f(s), STAGES, {'ids': Xtr[pick], 'nxt': Ytr[pick]})
print('loss', S['loss'].item())
''',
    md("## backward stages\nSame idea backwards: (S, D) -> new D."),
    r'''
def b_head(S, D):
    B, T, V = S['logits'].shape
    p = S['logits'].softmax(-1) - F.one_hot(S['tgt'], V)
    dlog = p / (B * T)
    return {**D, 'logits': dlog, 'fout': dlog @ P['E'],
            'P:E<-head': torch.einsum('btv,btc->vc', dlog, S['fout'])}

def b_affine(pre, gain, shift):
    def stage(S, D):
        g = D[pre + 'out']
        return {**D, pre + 'n': g * P[gain], 'P:' + gain: (g * S[pre + 'n']).sum((0, 1)),
                'P:' + shift: g.sum((0, 1))}
    return stage

def b_atoms(pre, src):
    def stage(S, D):
        g = D[pre + 'n']
        d_rs = (g * S[pre + 'xc']).sum(-1, keepdim=True)
        first = g * S[pre + 'rs']
        d_var = -0.5 * S[pre + 'rs'] ** 3 * d_rs
        d_xc = first + d_var * 2 * S[pre + 'xc'] / C
        d_mu = -d_xc.sum(-1, keepdim=True)
        return {**D, pre + 'rs': d_rs, pre + 'xc<-n': first, pre + 'var': d_var,
                pre + 'xc': d_xc, pre + 'mu': d_mu, src + '<-xc': d_xc,
                src: D.get(src, 0) + d_xc + d_mu / C}
    return stage

def b_mlp(S, D):
    g = D['r2']
    u = S['u']
    th = torch.tanh(math.sqrt(2 / math.pi) * (u + 0.044715 * u ** 3))
    d_act = g @ P['Wdn'].T
    slope = 0.5 * (1 + th) + 0.5 * u * (1 - th ** 2) * math.sqrt(2 / math.pi) * (1 + 3 * 0.044715 * u ** 2)
    d_u = d_act * slope
    return {**D, 'dn': g, 'r1<-skip': g, 'r1': g, 'act': d_act,
            'P:Wdn': torch.einsum('btj,btc->jc', S['act'], g), 'P:bdn': g.sum((0, 1)),
            'u': d_u, 'a2out': d_u @ P['Wup'].T,
            'P:Wup': torch.einsum('btc,btj->cj', S['a2out'], d_u), 'P:bup': d_u.sum((0, 1))}

def b_attend(S, D):
    g = D['r1']
    d_cat = g @ P['Wo'].T
    d_ctx = d_cat.unflatten(-1, (NH, HS))
    d_pr = torch.einsum('bqhd,bkhd->bhqk', d_ctx, S['v'])
    d_v = torch.einsum('bhqk,bqhd->bkhd', S['pr'], d_ctx)
    d_scm = S['pr'] * (d_pr - d_pr.sum(-1, keepdim=True))
    d_sc = d_scm.masked_fill(FUTURE, 0.0)
    d_q = torch.einsum('bhqk,bkhd->bqhd', d_sc, S['k']) * HS ** -0.5
    d_k = torch.einsum('bhqk,bqhd->bkhd', d_sc, S['q']) * HS ** -0.5
    d_z = torch.cat([d_q.flatten(2), d_k.flatten(2), d_v.flatten(2)], dim=-1)
    return {**D, 'ao': g, 'r0<-skip': g, 'r0': g, 'cat': d_cat,
            'P:Wo': torch.einsum('btc,btj->cj', S['cat'], g), 'P:bo': g.sum((0, 1)),
            'ctx': d_ctx, 'pr': d_pr, 'v': d_v, 'scm': d_scm, 'sc': d_sc, 'q': d_q, 'k': d_k,
            'z': d_z, 'a1out': d_z @ P['Wqkv'].T,
            'P:Wqkv': torch.einsum('btc,btj->cj', S['a1out'], d_z), 'P:bqkv': d_z.sum((0, 1))}

def b_embed(S, D):
    g = D['r0']
    dE = D['P:E<-head'].index_add(0, S['ids'].reshape(-1), g.reshape(-1, C))
    return {**D, 'tok': g, 'P:Pos': g.sum(0), 'P:E': dE}

BACK = [b_head, b_affine('f', 'gf', 'sf'), b_atoms('f', 'r2'), b_mlp,
        b_affine('a2', 'g2', 's2'), b_atoms('a2', 'r1'), b_attend,
        b_affine('a1', 'g1', 's1'), b_atoms('a1', 'r0'), b_embed]
''',
    r'''
with torch.no_grad():
    D = reduce(lambda d, f: f(S, d), BACK, {})
print(len(D), 'gradients')
''',
    r'''
def gap(keys):
    refs = torch.autograd.grad(S['loss'], [S[k] for k in keys], retain_graph=True)
    for k, r in zip(keys, refs):
        print(f'{k:6s} {(D[k] - r).abs().max().item():.3e}')

gap(['logits', 'fout', 'fn', 'frs', 'fvar', 'fxc', 'fmu', 'r2', 'act', 'u', 'a2out'])
gap(['r1', 'cat', 'ctx', 'pr', 'scm', 'sc', 'q', 'k', 'v', 'z', 'a1out', 'r0', 'tok'])
''',
    r'''
prefs = torch.autograd.grad(S['loss'], list(P.values()), retain_graph=True)
for (name, _), r in zip(P.items(), prefs):
    print(f'{name:5s} {(D["P:" + name] - r).abs().max().item():.3e}')
''',
]

GPTH1_ACT = {"logits": "logits", "lnf": "fout", "lnf_norm": "fn", "lnf_rstd": "frs",
             "lnf_var": "fvar", "lnf_xc": "fxc", "lnf_mean": "fmu", "x2": "r2", "fcproj": "dn",
             "fch_gelu": "act", "fch": "u", "ln2": "a2out", "ln2_norm": "a2n", "x1": "r1",
             "attproj": "ao", "y": "cat", "atty": "ctx", "att": "pr", "v": "v",
             "preatt_masked": "scm", "preatt": "sc", "q": "q", "k": "k", "qkv": "z",
             "ln1": "a1out", "ln1_norm": "a1n", "x0": "r0", "tok": "tok"}
GPTH1_PAR = {"wte": "E", "wpe": "Pos", "lnfw": "gf", "lnfb": "sf", "fcprojw": "Wdn",
             "fcprojb": "bdn", "fcw": "Wup", "fcb": "bup", "ln2w": "g2", "ln2b": "s2",
             "attprojw": "Wo", "attprojb": "bo", "qkvw": "Wqkv", "qkvb": "bqkv", "ln1w": "g1",
             "ln1b": "s1"}
GPTH1_CHECK = "prefs = torch.autograd.grad(S['loss']"


def _h1_specs():
    fwd = {**{k: f"S['{v}']" for k, v in GPTH1_ACT.items()},
           **{k: f"P['{v}']" for k, v in GPTH1_PAR.items()}}
    grad = {**{k: f"D['{v}']" for k, v in GPTH1_ACT.items()},
            **{k: f"D['P:{v}']" for k, v in GPTH1_PAR.items()}}
    specs = where("gpt", GPT_STEPS, fwd=fwd, grad=grad.__getitem__,
                  first_after={k: GPTH1_CHECK for k in ("wte", "lnf_xc", "x2", "x1", "x0")})
    return swap_first(specs, {"block/lnf": "D['P:E<-head']", "block/lnf_rstd": "D['fxc<-n']",
                              "block/lnf_mean": "D['r2<-xc']", "block/x2_residual": "D['r1<-skip']",
                              "block/x1_residual": "D['r0<-skip']"})


add("gpt_h1_dict_stages_einsum_softmax_rowsum_slip", "gpt", GPTH1_CELLS, GPT_STEPS,
    wrong=["block/preatt_masked"],
    cascade=["block/preatt", "block/qk", "block/qkv", "block/ln1", "block/ln1_affine",
             "block/x0", "block/wpe", "block/wte"],
    notes="own data (randperm with seed 31337, rows from a padded string), parameters in a dict "
          "under own keys; every layer a stage S -> {**S, ...} folded by functools.reduce, the "
          "backward a list of (S, D) -> {**D, ...} stages, parameter gradients under 'P:<key>', "
          "first branches under keys of their own; heads as [B, T, nh, hs] with torch.einsum; "
          "gap() against torch.autograd.grad; batch 5; exercise 1 only. Slip: the softmax's "
          "backward subtracts sum(dprobs) where sum(probs * dprobs) belongs; preatt down to wte "
          "cascade",
    loss="S['loss']",
    where=_h1_specs(),
    checkpoint=GPTH1_CHECK,
    fix=[("S['pr'] * (d_pr - d_pr.sum(-1, keepdim=True))",
          "S['pr'] * (d_pr - (S['pr'] * d_pr).sum(-1, keepdim=True))")])

# ================================================================================================
# GPT H2 (right throughout). Own data (pathlib read, random.Random(7) shuffle, rows filled into a
# torch.full tensor); a model object `MiniGPT` holding its parameters as attributes under own names
# (tokens, places, n1g / n1b, Wa / ba, Wp / bp, n2g / n2b, W1 / b1, W2 / b2, nfg / nfb), listed by
# a named() method; the forward keeps one namedtuple cache per layer (LNC for each layer norm, ATC
# for attention, MLPC for the MLP, HC for the head), heads by permute, the mask by torch.where and
# the softmax written out (max-shifted exp over its sum); backward() returns per-layer gradient
# namedtuples (LNG / ATG / MLPG) and puts parameter gradients in a dict keyed by id(p); only the
# head's share of the table and the layer norms' first branches are held. diffs() prints max
# differences against torch.autograd.grad. Batch 6. Then `net.step(xb, yb, lr)` drives 200 steps,
# batch 9: forward and backward under no_grad, clipping to a total norm of 1, momentum 0.9 and a
# cosine learning-rate schedule.

GPTH2_CELLS = [
    r'''
import math, random
from collections import namedtuple
from pathlib import Path
import torch
import torch.nn.functional as F
''',
    r'''
names = Path('names.txt').read_text().split()
random.Random(7).shuffle(names)
SEQ, WIDTH, HEADS = 16, 32, 4
HD = WIDTH // HEADS
vocab = ['.'] + sorted({c for nm in names for c in nm})
lookup = {c: i for i, c in enumerate(vocab)}
NTOK = len(vocab)
tr = names[: int(len(names) * 0.8)]
rows = torch.full((len(tr), SEQ + 1), 0, dtype=torch.long)
for r, nm in enumerate(tr):
    code = [lookup[c] for c in nm][:SEQ]
    rows[r, 1:len(code) + 1] = torch.tensor(code)
inputs, nexts = rows[:, :SEQ], rows[:, SEQ]
''',
    r'''
LNC = namedtuple('LNC', 'x mu xc var rs xhat out')
ATC = namedtuple('ATC', 'inp qkv q k v s s_m a o y out')
MLPC = namedtuple('MLPC', 'inp pre act out')
HC = namedtuple('HC', 'inp logits targets')
LNG = namedtuple('LNG', 'dout dxhat dg db drs dxc1 dvar dxc dmu dx')
ATG = namedtuple('ATG', 'dout dy dWp dbp do da dv ds_m ds dq dk dqkv dWa dba dinp')
MLPG = namedtuple('MLPG', 'dout dact dW2 db2 dpre dinp dW1 db1')
K0 = math.sqrt(2 / math.pi)


class MiniGPT:
    def __init__(self, seed):
        gen = torch.Generator().manual_seed(seed)
        r = lambda *s: torch.randn(*s, generator=gen)
        C = WIDTH
        self.tokens = r(NTOK, C) * 0.1
        self.places = r(SEQ, C) * 0.1
        self.n1g, self.n1b = 1 + 0.1 * r(C), 0.1 * r(C)
        self.Wa, self.ba = r(C, 3 * C) * C ** -0.5, 0.1 * r(3 * C)
        self.Wp, self.bp = r(C, C) * 0.5 * C ** -0.5, 0.1 * r(C)
        self.n2g, self.n2b = 1 + 0.1 * r(C), 0.1 * r(C)
        self.W1, self.b1 = r(C, 4 * C) * C ** -0.5, 0.1 * r(4 * C)
        self.W2, self.b2 = r(4 * C, C) * 0.5 * (4 * C) ** -0.5, 0.1 * r(C)
        self.nfg, self.nfb = 1 + 0.1 * r(C), 0.1 * r(C)
        self.pnames = [k for k, v in vars(self).items() if torch.is_tensor(v)]
        self.grads, self.vel = {}, {}
        self.low = torch.tril(torch.ones(SEQ, SEQ, dtype=torch.bool))

    def named(self):
        return [(k, getattr(self, k)) for k in self.pnames]

    def ln(self, x, g, b):
        mu = x.mean(-1, keepdim=True)
        xc = x - mu
        var = (xc * xc).mean(-1, keepdim=True)
        rs = 1.0 / torch.sqrt(var + 1e-5)
        xhat = xc * rs
        return LNC(x, mu, xc, var, rs, xhat, xhat * g + b)

    def attn(self, inp):
        B, T, C = inp.shape
        qkv = inp @ self.Wa + self.ba
        q, k, v = [qkv[..., j * C:(j + 1) * C].reshape(B, T, HEADS, HD).permute(0, 2, 1, 3)
                   for j in range(3)]
        s = (q @ k.transpose(2, 3)) / math.sqrt(HD)
        s_m = torch.where(self.low[:T, :T], s, torch.tensor(float('-inf')))
        e = (s_m - s_m.amax(-1, keepdim=True)).exp()
        a = e / e.sum(-1, keepdim=True)
        o = a @ v
        y = o.permute(0, 2, 1, 3).reshape(B, T, C)
        return ATC(inp, qkv, q, k, v, s, s_m, a, o, y, y @ self.Wp + self.bp)

    def mlp(self, inp):
        pre = inp @ self.W1 + self.b1
        act = 0.5 * pre * (1 + torch.tanh(K0 * (pre + 0.044715 * pre ** 3)))
        return MLPC(inp, pre, act, act @ self.W2 + self.b2)

    def forward(self, X, Y):
        self.X = X
        self.tok = self.tokens[X]
        self.h0 = self.tok + self.places
        self.c1 = self.ln(self.h0, self.n1g, self.n1b)
        self.ca = self.attn(self.c1.out)
        self.h1 = self.h0 + self.ca.out
        self.c2 = self.ln(self.h1, self.n2g, self.n2b)
        self.cm = self.mlp(self.c2.out)
        self.h2 = self.h1 + self.cm.out
        self.cf = self.ln(self.h2, self.nfg, self.nfb)
        logits = self.cf.out @ self.tokens.T
        tg = torch.cat([X[:, 1:], Y[:, None]], 1)
        self.ch = HC(self.cf.out, logits, tg)
        return F.cross_entropy(logits.reshape(-1, NTOK), tg.reshape(-1))
''',
    r'''
def _ln_back(self, c, dout, g):
    C = dout.shape[-1]
    dxhat = dout * g
    dg = (dout * c.xhat).sum((0, 1))
    db = dout.sum((0, 1))
    drs = (dxhat * c.xc).sum(-1, keepdim=True)
    dxc1 = dxhat * c.rs
    dvar = drs * -0.5 * c.rs ** 3
    dxc = dxc1 + dvar * 2.0 * c.xc / C
    dmu = -dxc.sum(-1, keepdim=True)
    return LNG(dout, dxhat, dg, db, drs, dxc1, dvar, dxc, dmu, dxc + dmu / C)

def _attn_back(self, c, dout):
    B, T, C = dout.shape
    dy = dout @ self.Wp.T
    dWp = torch.einsum('btc,btd->cd', c.y, dout)
    dbp = dout.sum((0, 1))
    do = dy.reshape(B, T, HEADS, HD).permute(0, 2, 1, 3)
    da = do @ c.v.transpose(2, 3)
    dv = c.a.transpose(2, 3) @ do
    ds_m = c.a * da - c.a * (c.a * da).sum(-1, keepdim=True)
    ds = torch.where(self.low[:T, :T], ds_m, torch.zeros(()))
    dq = ds @ c.k / math.sqrt(HD)
    dk = ds.transpose(2, 3) @ c.q / math.sqrt(HD)
    dqkv = torch.cat([t.permute(0, 2, 1, 3).reshape(B, T, C) for t in (dq, dk, dv)], -1)
    dWa = torch.einsum('btc,btd->cd', c.inp, dqkv)
    dba = dqkv.sum((0, 1))
    return ATG(dout, dy, dWp, dbp, do, da, dv, ds_m, ds, dq, dk, dqkv, dWa, dba, dqkv @ self.Wa.T)

def _mlp_back(self, c, dout):
    dact = dout @ self.W2.T
    dW2 = c.act.flatten(0, 1).T @ dout.flatten(0, 1)
    th = torch.tanh(K0 * (c.pre + 0.044715 * c.pre ** 3))
    dpre = dact * (0.5 * (1 + th) + 0.5 * c.pre * (1 - th * th) * K0 * (1 + 0.134145 * c.pre ** 2))
    dW1 = c.inp.flatten(0, 1).T @ dpre.flatten(0, 1)
    return MLPG(dout, dact, dW2, dout.sum((0, 1)), dpre, dpre @ self.W1.T, dW1, dpre.sum((0, 1)))

def backward(self):
    B, T, V = self.ch.logits.shape
    dlogits = F.softmax(self.ch.logits, -1)
    dlogits.scatter_add_(-1, self.ch.targets[..., None], -torch.ones(B, T, 1))
    dlogits /= B * T
    self.dlogits = dlogits
    self.dE_head = dlogits.flatten(0, 1).T @ self.ch.inp.flatten(0, 1)
    self.gf = self._ln_back(self.cf, dlogits @ self.tokens, self.nfg)
    self.gm = self._mlp_back(self.cm, self.gf.dx)
    self.g2 = self._ln_back(self.c2, self.gm.dinp, self.n2g)
    dh1 = self.gf.dx + self.g2.dx
    self.dh1 = dh1
    self.ga = self._attn_back(self.ca, dh1)
    self.g1 = self._ln_back(self.c1, self.ga.dinp, self.n1g)
    dh0 = dh1 + self.g1.dx
    self.dh0 = dh0
    dtokens = self.dE_head.index_put((self.X.reshape(-1),), dh0.reshape(-1, WIDTH), accumulate=True)
    G = self.grads
    for p, gr in [(self.tokens, dtokens), (self.places, dh0.sum(0)),
                  (self.n1g, self.g1.dg), (self.n1b, self.g1.db), (self.Wa, self.ga.dWa),
                  (self.ba, self.ga.dba), (self.Wp, self.ga.dWp), (self.bp, self.ga.dbp),
                  (self.n2g, self.g2.dg), (self.n2b, self.g2.db), (self.W1, self.gm.dW1),
                  (self.b1, self.gm.db1), (self.W2, self.gm.dW2), (self.b2, self.gm.db2),
                  (self.nfg, self.gf.dg), (self.nfb, self.gf.db)]:
        G[id(p)] = gr

MiniGPT._ln_back, MiniGPT._attn_back, MiniGPT._mlp_back = _ln_back, _attn_back, _mlp_back
MiniGPT.backward = backward
''',
    r'''
net = MiniGPT(seed=4242)
for _, p in net.named():
    p.requires_grad_(True)
bg = torch.Generator().manual_seed(99)
ix = torch.randint(0, len(inputs), (6,), generator=bg)
xb, yb = inputs[ix], nexts[ix]
loss = net.forward(xb, yb)
with torch.no_grad():
    net.backward()
print(loss.item())
''',
    r'''
def diffs(pairs):
    refs = torch.autograd.grad(loss, [t for _, _, t in pairs], retain_graph=True)
    worst = 0.0
    for (name, mine, _), r in zip(pairs, refs):
        d = (mine - r).abs().max().item()
        worst = max(worst, d)
        print(f'{name:10s} {d:.2e}')
    return worst

acts = [('logits', net.dlogits, net.ch.logits), ('lnf', net.gf.dout, net.cf.out),
        ('xhat_f', net.gf.dxhat, net.cf.xhat), ('rs_f', net.gf.drs, net.cf.rs),
        ('var_f', net.gf.dvar, net.cf.var), ('xc_f', net.gf.dxc, net.cf.xc),
        ('mu_f', net.gf.dmu, net.cf.mu), ('h2', net.gf.dx, net.h2),
        ('act', net.gm.dact, net.cm.act), ('pre', net.gm.dpre, net.cm.pre),
        ('ln2', net.gm.dinp, net.c2.out), ('h1', net.dh1, net.h1),
        ('y', net.ga.dy, net.ca.y), ('o', net.ga.do, net.ca.o), ('a', net.ga.da, net.ca.a),
        ('s_m', net.ga.ds_m, net.ca.s_m), ('s', net.ga.ds, net.ca.s), ('qkv', net.ga.dqkv, net.ca.qkv),
        ('h0', net.dh0, net.h0)]
print('worst activation', diffs(acts))
print('worst parameter', diffs([(k, net.grads[id(p)], p) for k, p in net.named()]))
''',
    md("## training through `net.step`"),
    r'''
def step(self, xb, yb, lr):
    with torch.no_grad():
        loss = self.forward(xb, yb)
        self.backward()
        total = math.sqrt(sum(float((self.grads[id(p)] ** 2).sum()) for _, p in self.named()))
        scale = min(1.0, 1.0 / (total + 1e-6))
        for _, p in self.named():
            buf = self.vel.setdefault(id(p), torch.zeros_like(p))
            buf.mul_(0.9).add_(self.grads[id(p)], alpha=scale)
            p.sub_(lr * buf)
    return loss.item()

MiniGPT.step = step
for _, p in net.named():
    p.requires_grad_(False)
hist = []
N_IT = 200
for it in range(N_IT):
    lr = 0.02 + 0.5 * 0.18 * (1 + math.cos(math.pi * it / N_IT))
    j = torch.randint(0, len(inputs), (9,), generator=bg)
    hist.append(net.step(inputs[j], nexts[j], lr))
print(hist[0], sum(hist[-20:]) / 20)
''',
]

GPTH2_FWD = {"logits": "net.ch.logits", "lnf": "net.cf.out", "lnf_norm": "net.cf.xhat",
             "lnf_rstd": "net.cf.rs", "lnf_var": "net.cf.var", "lnf_xc": "net.cf.xc",
             "lnf_mean": "net.cf.mu", "x2": "net.h2", "fcproj": "net.cm.out",
             "fch_gelu": "net.cm.act", "fch": "net.cm.pre", "ln2": "net.c2.out",
             "ln2_norm": "net.c2.xhat", "x1": "net.h1", "attproj": "net.ca.out", "y": "net.ca.y",
             "atty": "net.ca.o", "att": "net.ca.a", "v": "net.ca.v",
             "preatt_masked": "net.ca.s_m", "preatt": "net.ca.s", "q": "net.ca.q",
             "k": "net.ca.k", "qkv": "net.ca.qkv", "ln1": "net.c1.out", "ln1_norm": "net.c1.xhat",
             "x0": "net.h0", "tok": "net.tok",
             "wte": "net.tokens", "wpe": "net.places", "lnfw": "net.nfg", "lnfb": "net.nfb",
             "fcprojw": "net.W2", "fcprojb": "net.b2", "fcw": "net.W1", "fcb": "net.b1",
             "ln2w": "net.n2g", "ln2b": "net.n2b", "attprojw": "net.Wp", "attprojb": "net.bp",
             "qkvw": "net.Wa", "qkvb": "net.ba", "ln1w": "net.n1g", "ln1b": "net.n1b"}
GPTH2_GRAD = {"logits": "net.dlogits", "lnf": "net.gf.dout", "lnf_norm": "net.gf.dxhat",
              "lnf_rstd": "net.gf.drs", "lnf_var": "net.gf.dvar", "lnf_xc": "net.gf.dxc",
              "lnf_mean": "net.gf.dmu", "x2": "net.gf.dx", "fcproj": "net.gm.dout",
              "fch_gelu": "net.gm.dact", "fch": "net.gm.dpre", "ln2": "net.g2.dout",
              "ln2_norm": "net.g2.dxhat", "x1": "net.dh1", "attproj": "net.ga.dout",
              "y": "net.ga.dy", "atty": "net.ga.do", "att": "net.ga.da", "v": "net.ga.dv",
              "preatt_masked": "net.ga.ds_m", "preatt": "net.ga.ds", "q": "net.ga.dq",
              "k": "net.ga.dk", "qkv": "net.ga.dqkv", "ln1": "net.g1.dout",
              "ln1_norm": "net.g1.dxhat", "x0": "net.dh0", "tok": "net.dh0",
              "lnfw": "net.gf.dg", "lnfb": "net.gf.db", "fcprojw": "net.gm.dW2",
              "fcprojb": "net.gm.db2", "fcw": "net.gm.dW1", "fcb": "net.gm.db1",
              "ln2w": "net.g2.dg", "ln2b": "net.g2.db", "attprojw": "net.ga.dWp",
              "attprojb": "net.ga.dbp", "qkvw": "net.ga.dWa", "qkvb": "net.ga.dba",
              "ln1w": "net.g1.dg", "ln1b": "net.g1.db"}
GPTH2_GRAD.update({k: f"net.grads[id({GPTH2_FWD[k]})]" for k in ("wte", "wpe")})
GPTH2_MAP = {"wte": "tokens", "wpe": "places", "ln1w": "n1g", "ln1b": "n1b", "qkvw": "Wa",
             "qkvb": "ba", "attprojw": "Wp", "attprojb": "bp", "ln2w": "n2g", "ln2b": "n2b",
             "fcw": "W1", "fcb": "b1", "fcprojw": "W2", "fcprojb": "b2", "lnfw": "nfg",
             "lnfb": "nfb"}
GPTH2_REF = ("lambda Q: ref_gpt_loss({" + ", ".join(f"'{k}': Q['{v}']" for k, v in
                                                     GPTH2_MAP.items()) + "}, xb, yb)")


def _h2_specs():
    specs = where("gpt", GPT_STEPS, fwd=GPTH2_FWD, grad=GPTH2_GRAD.__getitem__,
                  first_after={k: "print('worst parameter'" for k in
                               ("wte", "lnf_xc", "x2", "x1", "x0")})
    return swap_first(specs, {"block/lnf": "net.dE_head", "block/lnf_rstd": "net.gf.dxc1",
                              "block/lnf_mean": "net.gf.dxc"})


add("gpt_h2_model_object_namedtuple_caches_momentum_clip", "gpt", GPTH2_CELLS,
    GPT_STEPS + ["train/gpt"],
    notes="own data (pathlib, Random(7) shuffle, torch.full rows); a MiniGPT object with "
          "parameters as attributes under own names and a named() method; one namedtuple cache "
          "per layer, heads by permute, torch.where mask, a written-out max-shifted softmax; "
          "backward() returns per-layer gradient namedtuples and keys parameter gradients by "
          "id(p); the head's share of the table and the final layer norm's first branches held, "
          "the residual first branches not; diffs() against torch.autograd.grad; batch 6; "
          "net.step(xb, yb, lr) under no_grad with clipping to total norm 1, momentum 0.9 and a "
          "cosine schedule, 200 steps, batch 9; all right",
    where=_h2_specs(),
    checkpoint="print('worst parameter'",
    train={"cell": "for it in range(N_IT)", "probe": "total = math.sqrt(",
           "params": "dict(net.named())",
           "grads": "{k: net.grads[id(p)] for k, p in net.named()}",
           "ref": GPTH2_REF, "losses": "hist"})

# ================================================================================================
# GPT H3 (right throughout). Exercises 2 and 3. Own data (every name, sorted by a hash-like key
# (len * 31 + first letter) % 97, rows by str.ljust); the seven functions (scatter_add_ for the
# encoder, layer norm in its one-line closed form, reshape matmuls, heads by split / view /
# transpose, GELU's slope through its tanh, the cross-entropy by an in-place -1 at the targets,
# AdamW as one expression with the decay inside the step), each checked by `against()` on a random
# upstream gradient; then every layer a GENERATOR (coroutine): it yields its output, receives its
# output's gradient by send() and yields its inputs' and parameters' gradients from the
# functions; run() pushes the generators, backprop() sends the gradients through them in reverse
# with the residual sums and the tied head by hand. Parameters in a dict under dotted keys
# ('tokE', 'lnA.w', 'qkv.w', 'out.b', 'fc1.w', 'lnF.b', ...). Checked once against autograd
# (batch 3); 150 steps of adamw_update with a linear warmup and a linear decay, batch 10.

GPTH3_CELLS = [
    r'''
import math
import torch
import torch.nn.functional as F
''',
    r'''
ws = open('names.txt').read().splitlines()
ws = sorted(ws, key=lambda w: ((len(w) * 31 + ord(w[0])) % 97, w))
L, C, NH = 16, 32, 4
letters = sorted(set(''.join(ws)))
to_id = {c: i + 1 for i, c in enumerate(letters)}
to_id['.'] = 0
V = len(to_id)
data = torch.tensor([[to_id[c] for c in ('.' + w + '.').ljust(L + 1, '.')[:L + 1]] for w in ws])
Xd, Yd = data[:, :L], data[:, L]
''',
    md("## the seven functions"),
    r'''
def encoder_backward(dout, inp, vocab_size):
    Cc = dout.shape[-1]
    dwte = torch.zeros(vocab_size, Cc)
    dwte.scatter_add_(0, inp.reshape(-1, 1).expand(-1, Cc), dout.reshape(-1, Cc))
    return dwte, dout.sum(0)

def layernorm_backward(dout, inp, weight, mean, rstd):
    Cc = inp.shape[-1]
    xhat = (inp - mean) * rstd
    g = dout * weight
    dinp = rstd * (g - g.mean(-1, keepdim=True) - xhat * (g * xhat).mean(-1, keepdim=True))
    return dinp, (dout * xhat).reshape(-1, Cc).sum(0), dout.reshape(-1, Cc).sum(0)

def matmul_backward(dout, inp, weight):
    d2 = dout.reshape(-1, weight.shape[1])
    return dout @ weight.T, inp.reshape(-1, weight.shape[0]).T @ d2, d2.sum(0)

def attention_backward(dout, qkv, att, n_head):
    B, T, C3 = qkv.shape
    Cc = C3 // 3
    hs = Cc // n_head
    q, k, v = (t.reshape(B, T, n_head, hs).transpose(1, 2) for t in qkv.split(Cc, dim=-1))
    d_o = dout.reshape(B, T, n_head, hs).transpose(1, 2)
    d_att = d_o @ v.transpose(-1, -2)
    d_v = att.transpose(-1, -2) @ d_o
    d_pre = att * (d_att - (att * d_att).sum(-1, keepdim=True)) * hs ** -0.5
    d_q = d_pre @ k
    d_k = d_pre.transpose(-1, -2) @ q
    return torch.cat([t.transpose(1, 2).reshape(B, T, Cc) for t in (d_q, d_k, d_v)], dim=-1)

def gelu_backward(dout, inp):
    a = math.sqrt(2 / math.pi)
    th = torch.tanh(a * (inp + 0.044715 * inp ** 3))
    return dout * 0.5 * (1 + th + inp * (1 - th ** 2) * a * (1 + 3 * 0.044715 * inp ** 2))

def crossentropy_softmax_backward(logits, targets):
    N = logits.shape[0]
    p = torch.softmax(logits, dim=1)
    p[torch.arange(N), targets] -= 1
    return p / N

def adamw_update(param, grad, m, v, t, lr, beta1, beta2, eps, weight_decay):
    m.mul_(beta1).add_(grad, alpha=1 - beta1)
    v.mul_(beta2).add_(grad * grad, alpha=1 - beta2)
    step = (m / (1 - beta1 ** t)) / ((v / (1 - beta2 ** t)).sqrt() + eps)
    param.sub_(lr * (step + weight_decay * param))
''',
    r'''
def against(label, fwd, args, grad_of, mine):
    leaves = [a.detach().clone().requires_grad_() if j in grad_of else a for j, a in enumerate(args)]
    out = fwd(*leaves)
    up = torch.randn_like(out)
    refs = torch.autograd.grad(out, [leaves[j] for j in grad_of], up)
    got = mine(up, *args)
    got = got if isinstance(got, tuple) else (got,)
    print(label, ['%.1e' % (a - b).abs().max().item() for a, b in zip(got, refs)])

torch.manual_seed(11)
ids = torch.randint(0, V, (2, 5))
against('encoder', lambda E, Pp: E[ids] + Pp, [torch.randn(V, 6), torch.randn(5, 6)], [0, 1],
        lambda up, E, Pp: encoder_backward(up, ids, V))
x_, w_, b_ = torch.randn(2, 5, 6), torch.randn(6), torch.randn(6)
mu_ = x_.mean(-1, keepdim=True)
rs_ = ((x_ - mu_).pow(2).mean(-1, keepdim=True) + 1e-5).rsqrt()
against('layernorm', lambda x, w, b: (x - x.mean(-1, keepdim=True)) * ((x - x.mean(-1, keepdim=True)).pow(2).mean(-1, keepdim=True) + 1e-5).rsqrt() * w + b,
        [x_, w_, b_], [0, 1, 2], lambda up, x, w, b: layernorm_backward(up, x, w, mu_, rs_))
against('matmul', lambda x, w, b: x @ w + b, [x_, torch.randn(6, 3), torch.randn(3)], [0, 1, 2],
        lambda up, x, w, b: matmul_backward(up, x, w))
against('gelu', lambda x: F.gelu(x, approximate='tanh'), [x_], [0], lambda up, x: gelu_backward(up, x))
lg, tt = torch.randn(7, 4), torch.randint(0, 4, (7,))
print('xent', (crossentropy_softmax_backward(lg, tt)
               - torch.autograd.grad(F.cross_entropy(lg.requires_grad_(), tt), lg)[0]).abs().max())
''',
    md("## every layer a generator\n`next()` runs it forward, `send(dout)` runs it backward."),
    r'''
TRI = torch.ones(L, L).tril()

def g_embed(E, Pp, X):
    dout = yield E[X] + Pp
    yield encoder_backward(dout, X, E.shape[0])

def g_norm(x, w, b):
    mean = x.mean(-1, keepdim=True)
    rstd = ((x - mean).pow(2).mean(-1, keepdim=True) + 1e-5) ** -0.5
    dout = yield (x - mean) * rstd * w + b
    yield layernorm_backward(dout, x, w, mean, rstd)

def g_dense(x, W, b):
    dout = yield x @ W + b
    yield matmul_backward(dout, x, W)

def g_gelu(x):
    dout = yield 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    yield (gelu_backward(dout, x),)

def g_attn(qkv):
    B, T, _ = qkv.shape
    hs = C // NH
    q, k, v = (t.reshape(B, T, NH, hs).transpose(1, 2) for t in qkv.split(C, dim=-1))
    s = (q @ k.transpose(-1, -2)) * hs ** -0.5
    att = F.softmax(s.masked_fill(TRI[:T, :T] == 0, float('-inf')), dim=-1)
    dout = yield (att @ v).transpose(1, 2).reshape(B, T, C)
    yield (attention_backward(dout, qkv, att, NH),)

def run(P, X, Y):
    stack = []
    def push(gen):
        stack.append(gen)
        return next(gen)
    h = push(g_embed(P['tokE'], P['posE'], X))
    a = push(g_norm(h, P['lnA.w'], P['lnA.b']))
    a = push(g_dense(a, P['qkv.w'], P['qkv.b']))
    a = push(g_attn(a))
    h = h + push(g_dense(a, P['out.w'], P['out.b']))
    m = push(g_norm(h, P['lnB.w'], P['lnB.b']))
    m = push(g_gelu(push(g_dense(m, P['fc1.w'], P['fc1.b']))))
    h = h + push(g_dense(m, P['fc2.w'], P['fc2.b']))
    f = push(g_norm(h, P['lnF.w'], P['lnF.b']))
    logits = f @ P['tokE'].T
    tgt = torch.cat([X[:, 1:], Y[:, None]], dim=1)
    loss = F.cross_entropy(logits.reshape(-1, V), tgt.reshape(-1))
    return loss, (stack, f, logits, tgt)

def backprop(P, saved):
    stack, f, logits, tgt = saved
    B, T, _ = logits.shape
    gr = {}
    dlog = crossentropy_softmax_backward(logits.reshape(-1, V), tgt.reshape(-1))
    head_share = dlog.T @ f.reshape(-1, C)
    emb, ln1, qkv, att, proj, ln2, fc1, gelu, fc2, lnf = stack
    dh, gr['lnF.w'], gr['lnF.b'] = lnf.send(dlog.reshape(B, T, V) @ P['tokE'])
    dm, gr['fc2.w'], gr['fc2.b'] = fc2.send(dh)
    (dm,) = gelu.send(dm)
    dm, gr['fc1.w'], gr['fc1.b'] = fc1.send(dm)
    dm, gr['lnB.w'], gr['lnB.b'] = ln2.send(dm)
    dh = dh + dm
    da, gr['out.w'], gr['out.b'] = proj.send(dh)
    (da,) = att.send(da)
    da, gr['qkv.w'], gr['qkv.b'] = qkv.send(da)
    da, gr['lnA.w'], gr['lnA.b'] = ln1.send(da)
    dtok, gr['posE'] = emb.send(dh + da)
    gr['tokE'] = dtok + head_share
    return gr
''',
    r'''
gen = torch.Generator().manual_seed(606)
def rnd(*s, scale=1.0):
    return torch.randn(*s, generator=gen) * scale
P = {'tokE': rnd(V, C, scale=0.1), 'posE': rnd(L, C, scale=0.1),
     'lnA.w': 1 + rnd(C, scale=0.1), 'lnA.b': rnd(C, scale=0.1),
     'qkv.w': rnd(C, 3 * C, scale=C ** -0.5), 'qkv.b': rnd(3 * C, scale=0.1),
     'out.w': rnd(C, C, scale=0.5 * C ** -0.5), 'out.b': rnd(C, scale=0.1),
     'lnB.w': 1 + rnd(C, scale=0.1), 'lnB.b': rnd(C, scale=0.1),
     'fc1.w': rnd(C, 4 * C, scale=C ** -0.5), 'fc1.b': rnd(4 * C, scale=0.1),
     'fc2.w': rnd(4 * C, C, scale=0.5 * (4 * C) ** -0.5), 'fc2.b': rnd(C, scale=0.1),
     'lnF.w': 1 + rnd(C, scale=0.1), 'lnF.b': rnd(C, scale=0.1)}

leaf = {k: p.clone().requires_grad_() for k, p in P.items()}
j = torch.randint(0, len(Xd), (3,), generator=gen)
l0, saved = run(leaf, Xd[j], Yd[j])
with torch.no_grad():
    mine = backprop(leaf, saved)
auto = dict(zip(leaf, torch.autograd.grad(l0, list(leaf.values()))))
print(max((mine[k] - auto[k]).abs().max().item() for k in leaf))
''',
    md("## training"),
    r'''
M = {k: torch.zeros_like(p) for k, p in P.items()}
S2 = {k: torch.zeros_like(p) for k, p in P.items()}
losses = []
TOTAL, WARM, PEAK = 150, 15, 1e-2
for step in range(1, TOTAL + 1):
    lr = PEAK * step / WARM if step <= WARM else PEAK * (1 - 0.9 * (step - WARM) / (TOTAL - WARM))
    j = torch.randint(0, len(Xd), (10,), generator=gen)
    xb, yb = Xd[j], Yd[j]
    loss, saved = run(P, xb, yb)
    g = backprop(P, saved)
    for name in P:
        adamw_update(P[name], g[name], M[name], S2[name], step, lr, 0.9, 0.95, 1e-8, 0.1)
    losses.append(loss.item())
print(sum(losses[:10]) / 10, sum(losses[-10:]) / 10)
''',
]

add("gpt_h3_generator_layers_functions_adamw_warmup", "gpt", GPTH3_CELLS,
    GPT_FUNCS + ["train/gpt"],
    notes="exercises 2 and 3: own data (names sorted by a hash-like key, rows by str.ljust); "
          "the seven functions (scatter_add_, closed-form layer norm, reshape matmuls, split / "
          "view heads, tanh GELU slope, in-place -1 cross-entropy, AdamW with the decay inside "
          "the step), checked by against() on random upstream gradients; every layer a "
          "generator that yields its output and, sent its gradient, yields its inputs' and "
          "parameters' gradients from the functions; run() / backprop() drive them; parameters "
          "under dotted keys; checked once against autograd (batch 3); 150 steps of "
          "adamw_update with warmup and linear decay, batch 10; all right",
    functions={s: None for s in GPT_FUNCS},
    train={"cell": "for step in range(1, TOTAL + 1)", "probe": "for name in P:",
           "params": "P", "grads": "g", "ref": "lambda Q: run(Q, xb, yb)[0]",
           "losses": "losses"})

# ================================================================================================
# GPT H4 (right throughout). Own data (names with an index divisible by 9 held out, no shuffle,
# rows through bytes / str.translate); parameters in a LIST `theta` read through index constants
# (TE, PE, G1, ...) and gradients in a parallel list `dtheta`, accumulated with +=. The block
# written for ONE sequence ([T, C] rows, heads as [nh, T, hs] by reshape / transpose, the mask
# additive: a [T, T] tensor of 0 and -inf), run by a Python loop over the batch; every
# per-sequence activation appended by keep() to a list under its own key in `A`; the loss the mean
# of the per-sequence losses. The backward loops over the sequences too, per-sequence gradients
# appended to lists in `D`, first branches kept in lists of their own ('fxc_direct', 'r1_skip',
# 'r0_skip') and the head's share of the table in `dE_head`. A max-relative-error table against
# torch.autograd.grad on the stacked lists. Batch 3; exercise 1, every step.

GPTH4_CELLS = [
    r'''
import math
import torch
import torch.nn.functional as F
from collections import defaultdict
''',
    r'''
lines = open("names.txt", encoding="ascii").read().split("\n")
lines = [w for w in lines if w]
train_names = [w for i, w in enumerate(lines) if i % 9]
T_, C_, H_ = 16, 32, 4
D_ = C_ // H_
symbols = "." + "".join(sorted(set("".join(lines))))
table = {ord(ch): i for i, ch in enumerate(symbols)}
NV = len(symbols)
def encode(w):
    padded = ("." + w + "." * (T_ + 1))[:T_ + 1]
    return list(padded.encode().translate(bytes(table.get(b, 0) for b in range(256))))
Xall = torch.tensor([encode(w) for w in train_names])
inputs, after = Xall[:, :T_], Xall[:, T_]
''',
    r'''
torch.manual_seed(2718)
TE, PE, G1, S1, WQ, BQ, WO, BO, G2, S2, WU, BU, WD, BD, GF, SF = range(16)
def mat(i, o, k=1.0):
    return torch.randn(i, o) * k / i ** 0.5
def vec(n, c=0.0):
    return torch.randn(n) * 0.1 + c
theta = [torch.randn(NV, C_) * 0.1, torch.randn(T_, C_) * 0.1, vec(C_, 1.0), vec(C_),
         mat(C_, 3 * C_), vec(3 * C_), mat(C_, C_, 0.5), vec(C_), vec(C_, 1.0), vec(C_),
         mat(C_, 4 * C_), vec(4 * C_), mat(4 * C_, C_, 0.5), vec(C_), vec(C_, 1.0), vec(C_)]
for p in theta:
    p.requires_grad_()
NEG = torch.full((T_, T_), float('-inf')).triu(1)
''',
    md("### forward, one name at a time"),
    r'''
A = defaultdict(list)
def keep(key, t):
    A[key].append(t)
    return t

def norm_rows(tag, x, g, s):
    mu = keep(tag + 'mu', x.mean(1, keepdim=True))
    xc = keep(tag + 'xc', x - mu)
    var = keep(tag + 'var', (xc ** 2).mean(1, keepdim=True))
    rs = keep(tag + 'rs', (var + 1e-5) ** -0.5)
    nn_ = keep(tag + 'n', xc * rs)
    return keep(tag + 'out', nn_ * g + s)

def one_sequence(ids, nxt):
    th = theta
    e = keep('e', th[TE][ids])
    r0 = keep('r0', e + th[PE])
    n1 = norm_rows('a', r0, th[G1], th[S1])
    qkv = keep('qkv', n1 @ th[WQ] + th[BQ])
    q = keep('q', qkv[:, :C_].reshape(T_, H_, D_).transpose(0, 1))
    k = keep('k', qkv[:, C_:2 * C_].reshape(T_, H_, D_).transpose(0, 1))
    v = keep('v', qkv[:, 2 * C_:].reshape(T_, H_, D_).transpose(0, 1))
    sc = keep('sc', q @ k.transpose(1, 2) * D_ ** -0.5)
    scm = keep('scm', sc + NEG)
    pr = keep('pr', torch.softmax(scm, dim=-1))
    o = keep('o', pr @ v)
    y = keep('y', o.transpose(0, 1).reshape(T_, C_))
    ap = keep('ap', y @ th[WO] + th[BO])
    r1 = keep('r1', r0 + ap)
    n2 = norm_rows('b', r1, th[G2], th[S2])
    u = keep('u', n2 @ th[WU] + th[BU])
    gu = keep('gu', 0.5 * u * (1 + torch.tanh(math.sqrt(2 / math.pi) * (u + 0.044715 * u ** 3))))
    dn = keep('dn', gu @ th[WD] + th[BD])
    r2 = keep('r2', r1 + dn)
    fo = norm_rows('f', r2, th[GF], th[SF])
    lg = keep('logits', fo @ th[TE].T)
    tgt = keep('tgt', torch.cat([ids[1:], nxt.view(1)]))
    return F.cross_entropy(lg, tgt)

g = torch.Generator().manual_seed(3)
pick = torch.randint(0, len(inputs), (3,), generator=g)
Xb, Yb = inputs[pick], after[pick]
loss = torch.stack([one_sequence(Xb[b], Yb[b]) for b in range(len(Xb))]).mean()
print(loss)
''',
    md("### backward, one name at a time"),
    r'''
D = defaultdict(list)
dtheta = [torch.zeros_like(p) for p in theta]
dE_head = torch.zeros_like(theta[TE])
KG = math.sqrt(2 / math.pi)

def norm_rows_back(tag, dout, g, b, skip=None):
    xc, rs, nn_ = A[tag + 'xc'][b], A[tag + 'rs'][b], A[tag + 'n'][b]
    D[tag + 'out'].append(dout)
    dn_ = D_append(tag + 'n', dout * g)
    drs = D_append(tag + 'rs', (dn_ * xc).sum(1, keepdim=True))
    direct = D_append(tag + 'xc_direct', dn_ * rs)
    dvar = D_append(tag + 'var', -0.5 * rs ** 3 * drs)
    dxc = D_append(tag + 'xc', direct + dvar * 2 * xc / C_)
    dmu = D_append(tag + 'mu', -dxc.sum(1, keepdim=True))
    full = dxc + dmu / C_
    return full if skip is None else skip + full

def D_append(key, t):
    D[key].append(t)
    return t

with torch.no_grad():
    th = theta
    for b in range(len(Xb)):
        nb_ = len(Xb) * T_
        dlg = D_append('logits', (torch.softmax(A['logits'][b], -1) - F.one_hot(A['tgt'][b], NV)) / nb_)
        dE_head += dlg.T @ A['fout'][b]
        dfo = dlg @ th[TE]
        dtheta[GF] += (dfo * A['fn'][b]).sum(0)
        dtheta[SF] += dfo.sum(0)
        dr2 = D_append('r2', norm_rows_back('f', dfo, th[GF], b))
        D['dn'].append(dr2)
        dgu = D_append('gu', dr2 @ th[WD].T)
        dtheta[WD] += A['gu'][b].T @ dr2
        dtheta[BD] += dr2.sum(0)
        u = A['u'][b]
        t_ = torch.tanh(KG * (u + 0.044715 * u ** 3))
        du = D_append('u', dgu * (0.5 * (1 + t_) + 0.5 * u * (1 - t_ ** 2) * KG * (1 + 3 * 0.044715 * u ** 2)))
        dn2 = du @ th[WU].T
        dtheta[WU] += A['bout'][b].T @ du
        dtheta[BU] += du.sum(0)
        dtheta[G2] += (dn2 * A['bn'][b]).sum(0)
        dtheta[S2] += dn2.sum(0)
        D['r1_skip'].append(dr2)
        dr1 = D_append('r1', norm_rows_back('b', dn2, th[G2], b, skip=dr2))
        D['ap'].append(dr1)
        dy = D_append('y', dr1 @ th[WO].T)
        dtheta[WO] += A['y'][b].T @ dr1
        dtheta[BO] += dr1.sum(0)
        do = D_append('o', dy.reshape(T_, H_, D_).transpose(0, 1))
        pr, q, k, v = A['pr'][b], A['q'][b], A['k'][b], A['v'][b]
        dpr = D_append('pr', do @ v.transpose(1, 2))
        dv = D_append('v', pr.transpose(1, 2) @ do)
        dscm = D_append('scm', pr * (dpr - (pr * dpr).sum(-1, keepdim=True)))
        dsc = D_append('sc', dscm.clone())
        dq = D_append('q', dsc @ k * D_ ** -0.5)
        dk = D_append('k', dsc.transpose(1, 2) @ q * D_ ** -0.5)
        dqkv = D_append('qkv', torch.cat([t.transpose(0, 1).reshape(T_, C_) for t in (dq, dk, dv)], 1))
        dn1 = dqkv @ th[WQ].T
        dtheta[WQ] += A['aout'][b].T @ dqkv
        dtheta[BQ] += dqkv.sum(0)
        dtheta[G1] += (dn1 * A['an'][b]).sum(0)
        dtheta[S1] += dn1.sum(0)
        D['r0_skip'].append(dr1)
        dr0 = D_append('r0', norm_rows_back('a', dn1, th[G1], b, skip=dr1))
        D['e'].append(dr0)
        dtheta[PE] += dr0
        dtheta[TE].index_add_(0, Xb[b], dr0)
    dtheta[TE] += dE_head
''',
    r'''
def rel_table(keys):
    flat = [u for k in keys for u in A[k]]
    refs = torch.autograd.grad(loss, flat, retain_graph=True)
    j = 0
    for k in keys:
        ref = torch.stack(refs[j:j + len(A[k])])
        j += len(A[k])
        mine = torch.stack(D[k])
        print(f'{k:7s} {((mine - ref).abs().max() / ref.abs().max().clamp_min(1e-12)).item():.2e}')

rel_table(['logits', 'fout', 'fn', 'frs', 'fvar', 'fxc', 'fmu', 'r2', 'gu', 'u', 'bout', 'r1', 'y',
           'o', 'pr', 'scm', 'sc', 'q', 'k', 'v', 'qkv', 'aout', 'r0', 'e'])
''',
    r'''
auto = torch.autograd.grad(loss, theta, retain_graph=True)
print([f'{((a - m).abs().max() / a.abs().max()).item():.1e}' for a, m in zip(auto, dtheta)])
''',
]

GPTH4_ACT = {"logits": "logits", "lnf": "fout", "lnf_norm": "fn", "lnf_rstd": "frs",
             "lnf_var": "fvar", "lnf_xc": "fxc", "lnf_mean": "fmu", "x2": "r2", "fcproj": "dn",
             "fch_gelu": "gu", "fch": "u", "ln2": "bout", "ln2_norm": "bn", "x1": "r1",
             "attproj": "ap", "y": "y", "atty": "o", "att": "pr", "v": "v",
             "preatt_masked": "scm", "preatt": "sc", "q": "q", "k": "k", "qkv": "qkv",
             "ln1": "aout", "ln1_norm": "an", "x0": "r0", "tok": "e"}
GPTH4_PAR = {"wte": "TE", "wpe": "PE", "lnfw": "GF", "lnfb": "SF", "fcprojw": "WD",
             "fcprojb": "BD", "fcw": "WU", "fcb": "BU", "ln2w": "G2", "ln2b": "S2",
             "attprojw": "WO", "attprojb": "BO", "qkvw": "WQ", "qkvb": "BQ", "ln1w": "G1",
             "ln1b": "S1"}
GPTH4_CHECK = "auto = torch.autograd.grad(loss, theta"
GPTH4_FIRST = {
    "wte": ("dE_head", "sum(edge(lambda W: f.detach() @ W.T, theta[TE], G(l)) "
                       "for f, l in zip(A['fout'], A['logits']))"),
    "lnf_xc": ("torch.stack(D['fxc_direct'])",
               "torch.stack([edge(lambda a: a * r.detach(), xc, G(n_)) "
               "for xc, r, n_ in zip(A['fxc'], A['frs'], A['fn'])])"),
    "x2": ("torch.stack(D['fxc'])", "torch.stack([G(u) for u in A['fxc']])"),
    "x1": ("torch.stack(D['r1_skip'])", "torch.stack([G(u) for u in A['r2']])"),
    "x0": ("torch.stack(D['r0_skip'])", "torch.stack([G(u) for u in A['r1']])"),
}


def _h4_specs():
    out = {}
    for step in GPT_STEPS:
        specs = []
        for item in GPT_CHECKS[step]:
            if isinstance(item, tuple):
                mine, ref = GPTH4_FIRST[item[0]]
                specs.append((mine, ref, GPTH4_CHECK))
            elif item in GPTH4_PAR:
                specs.append((f"dtheta[{GPTH4_PAR[item]}]", f"G(theta[{GPTH4_PAR[item]}])"))
            else:
                specs.append((f"torch.stack(D['{GPTH4_ACT[item]}'])",
                              f"torch.stack([G(u) for u in A['{GPTH4_ACT[item]}']])"))
        out[step] = specs
    return out


add("gpt_h4_per_sequence_loop_param_list", "gpt", GPTH4_CELLS, GPT_STEPS,
    notes="own data (every ninth name held out, rows through bytes.translate); parameters in a "
          "list theta read through index constants, gradients in a parallel list dtheta (+=); "
          "the block written for one sequence ([T, C] rows, heads [nh, T, hs], an additive -inf "
          "mask) and looped over the batch, activations appended per sequence by keep() to "
          "lists in A, the loss the mean of per-sequence losses; the backward looped the same "
          "way into lists in D, first branches in lists of their own and dE_head; relative "
          "errors on the stacked lists; batch 3; exercise 1 only; all right",
    where=_h4_specs(),
    checkpoint=GPTH4_CHECK)

# ================================================================================================
# LSTM H5 (a slip and its cascades). Own data (random.Random(99) shuffle, X / Y rows built by
# list padding, a batch cut to its longest name by a mask); the learner keeps the four gate
# blocks in its OWN order g, i, f, o (Ux [D, 4H], Uh [H, 4H], bias [4H]), torch.split into
# zg, zi, zf, zo; the steps before and after t by a loop of its own (lists, torch.stack), step t
# written out, the state stacked as hc; the future's share of hc's gradient by
# torch.autograd.grad through the later steps. Gradients named dxxx, first branches held
# (d_ht_out, dc_future); near() with torch.allclose. Fused gates by one torch.cat; to_ifgo /
# to_gifo reorder helpers; lstm_step_backward in the lesson's order, lstm_backward over it with
# the states in preallocated [T + 1, B, H] tensors; a no_grad training forward writing into
# preallocated [T + 1, B, H] buffers, lstm_backward on reordered weights, dEmb by index_add_,
# clipping to a total norm and Adam of the learner's own, 150 steps. Batch 24 (training 20).
# Slip: the candidate's tanh slope taken at its pre-activation, (1 - zg_t**2) where
# (1 - cand**2) belongs: step/g wrong; ifgo and inputs cascade (the fused gates, written afresh,
# and the functions and training stay right).

LSTMH5_CELLS = [
    r'''
import random
import torch
import torch.nn.functional as F
''',
    r'''
words = open('names.txt').read().splitlines()
random.Random(99).shuffle(words)
chars = sorted(set(''.join(words)))
stoi = {ch: i + 1 for i, ch in enumerate(chars)}
stoi['.'] = 0
V = len(stoi)
W_ = max(map(len, words)) + 1
def rows(ws):
    X, Y = [], []
    for w in ws:
        ids = [stoi[ch] for ch in w]
        X.append([0] + ids + [0] * (W_ - 1 - len(ids)))
        Y.append(ids + [0] + [-1] * (W_ - 1 - len(ids)))
    return torch.tensor(X), torch.tensor(Y)
Xtr, Ytr = rows(words[:int(0.8 * len(words))])
gb = torch.Generator().manual_seed(123)
def get_batch(n):
    ix = torch.randint(0, len(Xtr), (n,), generator=gb)
    xb, yb = Xtr[ix], Ytr[ix]
    Tn = int((yb >= 0).any(0).nonzero().max()) + 1
    return xb[:, :Tn].contiguous(), yb[:, :Tn].contiguous()
''',
    r'''
D, H, t = 10, 32, 3
torch.manual_seed(55)
P = {'Emb': torch.randn(V, D),
     'Ux': torch.randn(D, 4 * H) / D ** 0.5,
     'Uh': torch.randn(H, 4 * H) / H ** 0.5,
     'bias': torch.randn(4 * H) * 0.1,
     'Wout': torch.randn(H, V) / H ** 0.5,
     'bout': torch.randn(V) * 0.1}
P['bias'][2 * H:3 * H] += 1.0   # my order is g, i, f, o: the forget block is the third
for p in P.values():
    p.requires_grad_()
''',
    md("## forward, gates in my order g, i, f, o"),
    r'''
Xb, Yb = get_batch(24)
Emb, Ux, Uh, bias, Wout, bout = P['Emb'], P['Ux'], P['Uh'], P['bias'], P['Wout'], P['bout']
xs = Emb[Xb]
Tn = Xb.shape[1]
h = xs.new_zeros(len(Xb), H)
c = xs.new_zeros(len(Xb), H)
early = []
for s in range(t):
    zg, zi, zf, zo = (xs[:, s] @ Ux + h @ Uh + bias).split(H, 1)
    c = torch.sigmoid(zf) * c + torch.sigmoid(zi) * torch.tanh(zg)
    h = torch.sigmoid(zo) * torch.tanh(c)
    early.append(h)
early_hs = torch.stack(early, 1)
h_prev, c_prev = h.clone(), c.clone()   # own handles, so step t's share is theirs alone
x_t = xs[:, t]
Ux_t, Uh_t, bias_t = Ux.clone(), Uh.clone(), bias.clone()
z_t = x_t @ Ux_t + h_prev @ Uh_t + bias_t
zg_t, zi_t, zf_t, zo_t = z_t.split(H, 1)
cand = torch.tanh(zg_t)
ig = torch.sigmoid(zi_t)
fg = torch.sigmoid(zf_t)
og = torch.sigmoid(zo_t)
c_t = fg * c_prev + ig * cand
h_t = og * torch.tanh(c_t)
hc = torch.stack([h_t, c_t])
h, c = hc[0], hc[1]
late = []
for s in range(t + 1, Tn):
    zg, zi, zf, zo = (xs[:, s] @ Ux + h @ Uh + bias).split(H, 1)
    c = torch.sigmoid(zf) * c + torch.sigmoid(zi) * torch.tanh(zg)
    h = torch.sigmoid(zo) * torch.tanh(c)
    late.append(h)
late_hs = torch.stack(late, 1)
H_all = torch.cat([early_hs, h_t[:, None], late_hs], 1)
logits = H_all @ Wout + bout
loss = F.cross_entropy(logits.view(-1, V), Yb.view(-1), ignore_index=-1)
loss
''',
    md("## backward through step t"),
    r'''
with torch.no_grad():
    valid = (Yb >= 0)
    dlogits = (F.softmax(logits, -1) - F.one_hot(Yb.clamp(min=0), V)) * valid[..., None] / valid.sum()
    dWout = torch.einsum('bth,btv->hv', H_all, dlogits)
    dbout = dlogits.sum((0, 1))
    dH_all = dlogits @ Wout.T
    dearly, d_ht_out, dlate = dH_all[:, :t], dH_all[:, t], dH_all[:, t + 1:]
dhc = torch.autograd.grad(late_hs, hc, dlate, retain_graph=True)[0]
with torch.no_grad():
    dh_t = d_ht_out + dhc[0]
    dc_future = dhc[1]
    tc = torch.tanh(c_t)
    dog = dh_t * tc
    dc_t = dc_future + dh_t * og * (1 - tc ** 2)
    dfg = dc_t * c_prev
    dc_prev = dc_t * fg
    dig = dc_t * cand
    dcand = dc_t * ig
    dzi = dig * ig * (1 - ig)
    dzf = dfg * fg * (1 - fg)
    dzo = dog * og * (1 - og)
    dzg = dcand * (1 - zg_t ** 2)
    dz_t = torch.cat([dzg, dzi, dzf, dzo], 1)
    dx_t = dz_t @ Ux_t.T
    dh_prev = dz_t @ Uh_t.T
    dUx_t = x_t.T @ dz_t
    dUh_t = h_prev.T @ dz_t
    dbias_t = dz_t.sum(0)
''',
    r'''
def near(label, mine, ref):
    print(f'{label:8s} {torch.allclose(mine, ref, atol=1e-6)!s:5s} {(mine - ref).abs().max().item():.2e}')

pairs = [('logits', dlogits, logits), ('H_all', dH_all, H_all), ('early', dearly, early_hs),
         ('late', dlate, late_hs), ('h_t', dh_t, h_t), ('c_t', dc_t, c_t), ('og', dog, og),
         ('fg', dfg, fg), ('ig', dig, ig), ('cand', dcand, cand), ('c_prev', dc_prev, c_prev),
         ('zi', dzi, zi_t), ('zf', dzf, zf_t), ('zo', dzo, zo_t), ('zg', dzg, zg_t),
         ('z_t', dz_t, z_t), ('x_t', dx_t, x_t), ('h_prev', dh_prev, h_prev),
         ('Ux_t', dUx_t, Ux_t), ('Uh_t', dUh_t, Uh_t), ('bias_t', dbias_t, bias_t),
         ('Wout', dWout, Wout), ('bout', dbout, bout)]
refs = torch.autograd.grad(loss, [r for _, _, r in pairs], retain_graph=True)
for (lab, mine, _), r in zip(pairs, refs):
    near(lab, mine, r)
''',
    md("## fused gates"),
    r'''
with torch.no_grad():
    dz_fused = torch.cat([dcand * (1 - cand ** 2), dig * ig * (1 - ig), dfg * fg * (1 - fg),
                          dog * og * (1 - og)], 1)
near('fused', dz_fused, torch.autograd.grad(loss, z_t, retain_graph=True)[0])
''',
    md("## step and BPTT as functions (the lesson's order i, f, g, o)"),
    r'''
def to_ifgo(w):
    g_, i_, f_, o_ = w.split(w.shape[-1] // 4, -1)
    return torch.cat([i_, f_, g_, o_], -1)

def to_gifo(w):
    i_, f_, g_, o_ = w.split(w.shape[-1] // 4, -1)
    return torch.cat([g_, i_, f_, o_], -1)

def lstm_step_backward(dh, dc, x, h_prev, c_prev, c, gates, Wx, Wh):
    i, f, g, o = gates.split(dh.shape[1], 1)
    tc = torch.tanh(c)
    dc = dc + dh * o * (1 - tc ** 2)
    dpre = torch.cat([dc * g * i * (1 - i), dc * c_prev * f * (1 - f), dc * i * (1 - g ** 2),
                      dh * tc * o * (1 - o)], 1)
    return dpre @ Wx.T, dpre @ Wh.T, dc * f, x.T @ dpre, h_prev.T @ dpre, dpre.sum(0)

def lstm_backward(dhs, xs, h0, c0, hs, cs, gates, Wx, Wh):
    B, T, _ = xs.shape
    Hn = h0.shape[1]
    Hst, Cst = torch.empty(T + 1, B, Hn), torch.empty(T + 1, B, Hn)
    Hst[0], Cst[0] = h0, c0
    Hst[1:], Cst[1:] = hs.transpose(0, 1), cs.transpose(0, 1)
    dxs = torch.empty_like(xs)
    dWx, dWh, db = torch.zeros_like(Wx), torch.zeros_like(Wh), torch.zeros(4 * Hn)
    dh_next, dc_next = torch.zeros(B, Hn), torch.zeros(B, Hn)
    for s in reversed(range(T)):
        dxs[:, s], dh_next, dc_next, a, b, e = lstm_step_backward(
            dhs[:, s] + dh_next, dc_next, xs[:, s], Hst[s], Cst[s], Cst[s + 1], gates[:, s], Wx, Wh)
        dWx += a
        dWh += b
        db += e
    return dxs, dh_next, dc_next, dWx, dWh, db
''',
    r'''
def unroll(P, xb):
    B, T = xb.shape
    xs = P['Emb'][xb]
    Hst, Cst = torch.zeros(T + 1, B, H), torch.zeros(T + 1, B, H)
    gates = torch.empty(B, T, 4 * H)
    for s in range(T):
        zg, zi, zf, zo = (xs[:, s] @ P['Ux'] + Hst[s] @ P['Uh'] + P['bias']).split(H, 1)
        i_, f_, g_, o_ = torch.sigmoid(zi), torch.sigmoid(zf), torch.tanh(zg), torch.sigmoid(zo)
        gates[:, s] = torch.cat([i_, f_, g_, o_], 1)
        Cst[s + 1] = f_ * Cst[s] + i_ * g_
        Hst[s + 1] = o_ * torch.tanh(Cst[s + 1])
    return xs, Hst, Cst, gates

for p in P.values():
    p.requires_grad_(False)
m1 = {k: torch.zeros_like(p) for k, p in P.items()}
m2 = {k: torch.zeros_like(p) for k, p in P.items()}
curve = []
for it in range(150):
    xb, yb = get_batch(20)
    B, T = xb.shape
    xs_, Hst, Cst, gates = unroll(P, xb)
    hs_ = Hst[1:].transpose(0, 1)
    lg = hs_ @ P['Wout'] + P['bout']
    ok = (yb >= 0)
    lv = F.cross_entropy(lg.reshape(-1, V), yb.reshape(-1), ignore_index=-1)
    dlg = (F.softmax(lg, -1) - F.one_hot(yb.clamp(min=0), V)) * ok[..., None] / ok.sum()
    dxs, _, _, dWx, dWh, db = lstm_backward(dlg @ P['Wout'].T, xs_, Hst[0], Cst[0], hs_,
                                            Cst[1:].transpose(0, 1), gates,
                                            to_ifgo(P['Ux']), to_ifgo(P['Uh']))
    grads = {'Emb': torch.zeros_like(P['Emb']).index_add_(0, xb.reshape(-1), dxs.reshape(-1, D)),
             'Ux': to_gifo(dWx), 'Uh': to_gifo(dWh), 'bias': to_gifo(db),
             'Wout': hs_.reshape(-1, H).T @ dlg.reshape(-1, V), 'bout': dlg.sum((0, 1))}
    tot = torch.sqrt(sum((gr ** 2).sum() for gr in grads.values()))
    clip = min(1.0, 5.0 / float(tot))
    for k in P:
        gr = grads[k] * clip
        m1[k].mul_(0.9).add_(0.1 * gr)
        m2[k].mul_(0.999).add_(0.001 * gr * gr)
        P[k] -= 1e-2 * (m1[k] / (1 - 0.9 ** (it + 1))) / ((m2[k] / (1 - 0.999 ** (it + 1))).sqrt() + 1e-8)
    curve.append(lv.item())
print(sum(curve[:15]) / 15, sum(curve[-15:]) / 15)
''',
]

LSTMH5_FWD = {"logits": "logits", "hs": "H_all", "hs_before": "early_hs", "hs_after": "late_hs",
              "h": "h_t", "c": "c_t", "state": "hc", "o": "og", "f": "fg", "i": "ig",
              "g": "cand", "c_prev": "c_prev", "h_prev": "h_prev", "ai": "zi_t", "af": "zf_t",
              "ag": "zg_t", "ao": "zo_t", "ifgo": "z_t", "x_t": "x_t", "Wx_t": "Ux_t",
              "Wh_t": "Uh_t", "b_t": "bias_t", "Wy": "Wout", "by": "bout"}
LSTMH5_GRAD = {"logits": "dlogits", "hs": "dH_all", "hs_before": "dearly", "hs_after": "dlate",
               "h": "dh_t", "c": "dc_t", "o": "dog", "f": "dfg", "i": "dig", "g": "dcand",
               "c_prev": "dc_prev", "h_prev": "dh_prev", "ai": "dzi", "af": "dzf", "ag": "dzg",
               "ao": "dzo", "ifgo": "dz_t", "x_t": "dx_t", "Wx_t": "dUx_t", "Wh_t": "dUh_t",
               "b_t": "dbias_t", "Wy": "dWout", "by": "dbout"}
LSTMH5_CHECK = "near('fused', dz_fused"


def _h5_specs():
    specs = where("lstm", LSTM_STEPS, fwd=LSTMH5_FWD, grad=LSTMH5_GRAD.__getitem__,
                  first_after={"h": LSTMH5_CHECK, "c": LSTMH5_CHECK})
    specs = swap_first(specs, {"step/h_out": "d_ht_out", "step/state": "dc_future"})
    specs["fused/gates"] = [("dz_fused", "G(z_t)")]
    return specs


LSTMH5_REF = ("lambda Q: ref_lstm_loss({'C': Q['Emb'], 'Wx': to_ifgo(Q['Ux']), "
              "'Wh': to_ifgo(Q['Uh']), 'b': to_ifgo(Q['bias']), 'Wy': Q['Wout'], "
              "'by': Q['bout']}, xb, yb)")

add("lstm_h5_gifo_split_prealloc_states_tanh_at_preact_slip", "lstm", LSTMH5_CELLS, LSTM_ALL,
    wrong=["step/g"], cascade=["step/ifgo", "step/inputs"],
    notes="own data (Random(99) shuffle, list-padded rows, batch cut by a mask); gate blocks in "
          "the learner's own order g, i, f, o, torch.split into zg, zi, zf, zo; own loops before "
          "and after t, step t written out, the state stacked as hc, the future's share by "
          "torch.autograd.grad through the later steps; dxxx names, first branches held; near() "
          "with allclose; fused gates by torch.cat; to_ifgo / to_gifo helpers; "
          "lstm_step_backward in the lesson's order, lstm_backward over it with states in "
          "preallocated [T + 1, B, H] tensors; a no_grad unroll into preallocated buffers, "
          "clipping by total norm and an own Adam, 150 steps, batch 20 (check batch 24). Slip: "
          "the candidate's tanh slope taken at the pre-activation (1 - zg_t**2); ifgo and inputs "
          "cascade",
    where=_h5_specs(),
    checkpoint=LSTMH5_CHECK,
    functions={"bptt/lstm_backward": None, "fused/lstm_step_backward": None},
    train={"cell": "for it in range(150)", "probe": "tot = torch.sqrt(", "params": "P",
           "grads": "grads", "ref": LSTMH5_REF, "losses": "curve"},
    fix=[("dzg = dcand * (1 - zg_t ** 2)", "dzg = dcand * (1 - cand ** 2)")])

# ================================================================================================
# CONV H6 (right throughout). Own data (a Generator(2024) randperm split, every context of 8
# sliced from a name padded with eight dots); a linear-algebra learner: each dilated causal
# convolution through a [T, T] SHIFT MATRIX S_d = diag(ones(T - d), -d), z = K[:, :, 0] @ (a @ S_d.T)
# + K[:, :, 1] @ a + c (broadcast matmuls; the causal padding is the matrix's empty first rows), the
# three layers a loop over (layer, dilation); activations in one dict keyed by tuples ('z', l),
# ('a', l), parameters in a dict under own names (E, K1 / c1, K2 / c2, K3 / c3, Wf, bf). The
# backward the adjoint: the shifted input's gradient multiplied by S_d (not its transpose), the
# kernel's two taps by einsum and stacked; fwd() / bwd() functions return a gradient dict with the
# same tuple and name keys; worst() relative errors against torch.autograd.grad. Batch 40; then SGD
# with weight decay in the update and a step schedule (0.1, then 0.03), 200 steps, batch 50.

CONVH6_CELLS = [
    r'''
import torch
import torch.nn.functional as F
''',
    r'''
names = [w.strip() for w in open('names.txt') if w.strip()]
order = torch.randperm(len(names), generator=torch.Generator().manual_seed(2024)).tolist()
ctx_len = 8
alpha = {ch: k for k, ch in enumerate('.abcdefghijklmnopqrstuvwxyz')}
def contexts(ws):
    X, Y = [], []
    for w in ws:
        ids = [0] * ctx_len + [alpha[ch] for ch in w] + [0]
        for j in range(len(w) + 1):
            X.append(ids[j:j + ctx_len])
            Y.append(ids[j + ctx_len])
    return torch.tensor(X), torch.tensor(Y)
Xtr, Ytr = contexts([names[j] for j in order[:int(0.8 * len(names))]])
print(Xtr.shape)
''',
    r'''
emb_dim, chans, n_out, taps = 10, 64, 27, 2
g = torch.Generator().manual_seed(77)
def kern(o, i):
    return torch.randn(o, i, taps, generator=g) * (5 / 3) / (i * taps) ** 0.5
prm = {'E': torch.randn(n_out, emb_dim, generator=g),
       'K1': kern(chans, emb_dim), 'c1': torch.randn(chans, generator=g) * 0.1,
       'K2': kern(chans, chans), 'c2': torch.randn(chans, generator=g) * 0.1,
       'K3': kern(chans, chans), 'c3': torch.randn(chans, generator=g) * 0.1,
       'Wf': torch.randn(chans, n_out, generator=g) * 0.1,
       'bf': torch.randn(n_out, generator=g) * 0.1}
LAYERS = [(1, 1), (2, 2), (3, 4)]
SHIFT = {d: torch.diag(torch.ones(ctx_len - d), -d) for _, d in LAYERS}
SHIFT[1] @ torch.arange(ctx_len).float()
''',
    md("Layer l: `z = K0 @ (a S^T) + K1 @ a + c`, S shifts the time axis right by the dilation."),
    r'''
def fwd(P, X, Y):
    act = {}
    act['e'] = P['E'][X]
    act[('a', 0)] = act['e'].transpose(1, 2)
    for l, d in LAYERS:
        a, K = act[('a', l - 1)], P[f'K{l}']
        act[('z', l)] = K[:, :, 0] @ (a @ SHIFT[d].T) + K[:, :, 1] @ a + P[f'c{l}'][:, None]
        act[('a', l)] = torch.tanh(act[('z', l)])
    act['last'] = act[('a', 3)][:, :, -1]
    act['logits'] = act['last'] @ P['Wf'] + P['bf']
    return F.cross_entropy(act['logits'], Y), act

def bwd(P, act, Y):
    gr = {}
    n = len(Y)
    p = F.softmax(act['logits'], 1)
    p[torch.arange(n), Y] -= 1
    gr['logits'] = p / n
    gr['last'] = gr['logits'] @ P['Wf'].T
    gr['Wf'] = act['last'].T @ gr['logits']
    gr['bf'] = gr['logits'].sum(0)
    top = torch.zeros_like(act[('a', 3)])
    top[:, :, -1] = gr['last']
    gr[('a', 3)] = top
    for l, d in reversed(LAYERS):
        dz = gr[('a', l)] * (1 - act[('a', l)] ** 2)
        gr[('z', l)] = dz
        a, K = act[('a', l - 1)], P[f'K{l}']
        a_sh = a @ SHIFT[d].T
        gr[f'K{l}'] = torch.stack([torch.einsum('bot,bit->oi', dz, a_sh),
                                   torch.einsum('bot,bit->oi', dz, a)], dim=-1)
        gr[f'c{l}'] = dz.sum((0, 2))
        gr[('a', l - 1)] = (K[:, :, 0].T @ dz) @ SHIFT[d] + K[:, :, 1].T @ dz
    gr['e'] = gr[('a', 0)].transpose(1, 2)
    gr['E'] = torch.zeros_like(P['E']).index_add_(0, act_X.reshape(-1), gr['e'].reshape(-1, emb_dim))
    return gr
''',
    r'''
for v in prm.values():
    v.requires_grad_(True)
ix = torch.randint(0, len(Xtr), (40,), generator=g)
act_X, Yb = Xtr[ix], Ytr[ix]
loss, act = fwd(prm, act_X, Yb)
with torch.no_grad():
    gr = bwd(prm, act, Yb)
''',
    r'''
def worst(keys, tensors):
    refs = torch.autograd.grad(loss, tensors, retain_graph=True)
    for k, r in zip(keys, refs):
        print(k, f'{((gr[k] - r).abs().max() / r.abs().max()).item():.2e}')

akeys = ['logits', 'last', ('a', 3), ('z', 3), ('a', 2), ('z', 2), ('a', 1), ('z', 1), ('a', 0), 'e']
worst(akeys, [act[k] for k in akeys])
worst(list(prm), list(prm.values()))
''',
    md("## SGD with weight decay"),
    r'''
for v in prm.values():
    v.requires_grad_(False)
trace = []
for step in range(200):
    lr = 0.1 if step < 150 else 0.03
    ix = torch.randint(0, len(Xtr), (50,), generator=g)
    act_X, yb = Xtr[ix], Ytr[ix]
    lossv, act = fwd(prm, act_X, yb)
    gr = bwd(prm, act, yb)
    for name in prm:
        prm[name] -= lr * (gr[name] + 1e-4 * prm[name])
    trace.append(lossv.item())
print(sum(trace[:20]) / 20, sum(trace[-20:]) / 20)
''',
]

CONVH6_FWD = {"logits": "act['logits']", "last": "act['last']", "h3": "act[('a', 3)]",
              "h3pre": "act[('z', 3)]", "h2": "act[('a', 2)]", "h2pre": "act[('z', 2)]",
              "h1": "act[('a', 1)]", "h1pre": "act[('z', 1)]", "x": "act[('a', 0)]",
              "emb": "act['e']", "C": "prm['E']", "W": "prm['Wf']", "b": "prm['bf']",
              "w1": "prm['K1']", "b1": "prm['c1']", "w2": "prm['K2']", "b2": "prm['c2']",
              "w3": "prm['K3']", "b3": "prm['c3']"}

add("conv_h6_shift_matrices_tuple_keys_sgd_decay", "conv", CONVH6_CELLS, CONV_ALL,
    notes="own data (Generator(2024) randperm split, contexts sliced from dot-padded names); "
          "each dilated causal conv through a [T, T] shift matrix diag(ones(T - d), -d): "
          "K0 @ (a @ S.T) + K1 @ a + c, a loop over (layer, dilation); activations and gradients "
          "in dicts keyed by tuples ('z', l) / ('a', l) and parameter names; the backward the "
          "adjoint (@ S), taps by einsum stacked; fwd() / bwd(); worst() relative errors against "
          "torch.autograd.grad; batch 40; SGD with weight decay and a step schedule, 200 steps, "
          "batch 50; all right",
    where=where("conv", CONV_STEPS, fwd=CONVH6_FWD,
                grad=lambda k: CONVH6_FWD[k].replace("act[", "gr[").replace("prm['", "gr['")),
    checkpoint="worst(list(prm), list(prm.values()))",
    train={"cell": "for step in range(200)", "probe": "for name in prm:", "params": "prm",
           "grads": "gr", "ref": "lambda Q: fwd(Q, act_X, yb)[0]", "losses": "trace"})
