"""Learners' own notebooks for the gpt, lstm and conv lessons, with each step's truth: a sixth
corpus, tune half (the holdout half, notebook_corpus_lessons_holdout6, was written separately and
not read here).

Six notebooks: four for gpt, one for lstm, one for conv, in layouts that the earlier corpora do not
use, each the way a learner from another background would write it: a JAX learner's pure
functions over a nested-dict pytree, a Keras learner's Layer hierarchy with Sequential and
Residual containers, a 2-layer model kept in dataclasses, einsum everywhere with the backward as a
generator, a TensorFlow 1 learner's single kernel and (c, h) state, a fast.ai student's `.g`
attributes. Each is a learner's own notebook: the lesson's forward pass copied in (renamed and
re-laid-out), their own loading of 'names.txt' (the truth runner points it at data/names.txt),
their own seed and init, the backward pass in a layout matching the forward, their own comparison
helper, and where they train (four of the six), a loop of at most 300 steps on their own
gradients and an update of their own. Architecture sizes are the lessons' [lesson] sizes
throughout (gpt_t3 trains two blocks of them); batch sizes equal no other size of their lesson
(gpt 5, 9 / 10, 11 / 12, 13; lstm 19 / 21; conv 25 / 50).

Layouts:
  gpt_t1   a JAX learner: the parameters a nested-dict pytree made by init(seed), tree_map /
           tree_leaves of their own; every layer a pair of pure functions, xxx_apply(p, x) ->
           (y, residuals) and xxx_vjp(p, res, dy) -> (dx, dp, cot), returning new dicts; every
           cotangent kept in nested cot dicts, first branches under keys such as 'xc<-xhat' and
           'x0<-skip'; the encoder's backward a one-hot matmul; torch.autograd.grad over
           tree_leaves and maxdiff(). Exercise 1, every step.
  gpt_t2   a Keras learner: Layer subclasses (Embedding, LayerNorm, Dense, CausalAttention,
           GELU, TiedHead, SoftmaxXent) whose __call__ keeps inp / out and whose backward keeps
           dout / dinp, containers Sequential (backward walks the layers reversed) and Residual
           (keeps the skip's gradient); layers looked up by name, gradients collected into a dict
           'layer.weight' with the tied table summed there; report() against .grad. Exercise 1
           without the final layer norm's atoms (lnf_rstd, lnf_var, lnf_xc, lnf_mean not
           attempted); own adamw_update, 120 steps on the layers.
  gpt_t3   exercises 2 and 3: the seven functions (a unique-token mask loop, layer norm through
           its atoms, einsum, unflatten / permute / stack heads, GELU through cosh, scatter_add,
           addcmul_ / addcdiv_), checked with torch.autograd.functional.vjp by agree(); a 2-layer
           model in dataclasses (BlockW per layer for weights, gradients and moments, BlockActs per
           layer in a list), the backward walking the list reversed on the functions; 150 steps
           of adamw_update over a flat list of leaves.
  gpt_t4   einsum everywhere: parameters as globals under own names, the forward as top-level
           lines with every product, head permute and sum of squares a torch.einsum; the backward
           a generator yielding (name, gradient) pairs from the loss down, first branches under
           names of their own ('cf@n', 'r1@skip', ...), consumed by a loop into a dict d with
           rel_err() against retained .grad. Exercise 1, every step.
  lstm_t5  a TensorFlow 1 learner: trainable variables in a dict under TF-scoped names, one
           kernel [D + H, 4H] for cat([x, h]) (run_lstm on its two halves), torch.split into the
           gates, the state one tensor cat([c, h]) in TF's order instead of a stack; gradients in
           an attribute dict (Grads(dict) with __getattr__ / __setattr__), first branches held,
           close_enough() against retained .grad; fused gates by one torch.where slope over a
           column mask; lstm_step_backward on the concatenated kernel, lstm_backward over it
           collecting dx in a list; an own training forward and RMSprop, 150 steps.
  conv_t6  a fast.ai student: every gradient a `.g` attribute on its tensor, set by one
           xxx_grad(inp, out, ...) function per layer; each convolution F.conv1d with symmetric
           padding=d and the future sliced off; its backward F.conv_transpose1d for the input and
           a batch / channel-swapped conv1d (the gradient as the kernel, taps by [::d]) for the
           weights; dE by index_put_ accumulate; test_near(); SGD with momentum kept as p.mom on
           each parameter, 200 steps of a fwd_bwd function.

Slips (each case's "notes" says which): gpt_t4's dVh copies the forward's einsum pattern,
'bhts,bhsd->bhtd' (att @ datty, the transpose missing) (block/att wrong; qkv, ln1, ln1_affine,
x0, wpe, wte cascade, while preatt_masked, preatt and qk, fed by datt, stay right); lstm_t5's
lstm_step_backward computes dc_prev = dc * f before completing dc through h, the two lines in the
wrong order (fused/lstm_step_backward wrong; bptt/lstm_backward, built on it, and train/lstm,
built on that, cascade, while exercise 1 and the fused gates, written out separately, stay right).
The other four notebooks are right throughout. No notebook is shared with the earlier corpora.

Written apart from the grader: from the lessons' forward passes, pack.toml's [lesson] / [setup] /
[forward] tables, exercises/conv/forward.py, `backprop-tutor --pack X list / show` and the earlier
corpora's format only, without reading the tutor's code or the steps' solutions, mistakes, hints
or explanations, and without running the grader on these notebooks. Every label was measured by
running the notebook, not judged by eye:

    .venv/bin/python tests/lesson_corpus_truth.py notebook_corpus_lessons_tune6

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



# ================================================================================================
# GPT T1 (right throughout). A learner coming from JAX. Own data (torch.randperm shuffle under a
# Generator seeded 1337, rows through torch.nn.utils.rnn.pad_sequence, ids by ord(ch) - 96). The
# parameters a nested-dict pytree ({'embed': {'tokens', 'positions'}, 'block': {'norm1': {'scale',
# 'offset'}, 'attn': {'in': {'kernel', 'bias'}, 'out': ...}, 'norm2', 'mlp': {'up', 'down'}},
# 'norm_f'}) made by an init(seed) function, with tree_map / tree_leaves of the learner's own.
# Every layer a pair of pure functions: `xxx_apply(p, x) -> (y, residuals)` and
# `xxx_vjp(p, res, dy) -> (dx, dp, cot)`, where dp is a new dict shaped like p and cot a dict of
# every cotangent the function made on the way (first branches under keys such as 'xc<-xhat' and
# 'x<-skip'), kept for checking. model_apply returns (loss, R), a nested dict of residuals;
# model_vjp returns (grads, cots), grads a new pytree shaped like params. The encoder's backward
# is a one-hot matmul (no in-place scatter). Checked with torch.autograd.grad over tree_leaves
# and a `maxdiff` helper. Batch 5; exercise 1 only, every step.

GPTT1_CELLS = [
    md("# one transformer block, JAX style\nPure functions, params as a pytree, every layer "
       "`apply` + `vjp`. No `.grad` anywhere in my backward."),
    r'''
import math
import torch
import torch.nn.functional as F
from torch.nn.utils.rnn import pad_sequence
''',
    r'''
with open('names.txt') as fh:
    corpus = [ln.strip() for ln in fh if ln.strip()]
perm = torch.randperm(len(corpus), generator=torch.Generator().manual_seed(1337)).tolist()
corpus = [corpus[j] for j in perm]
cfg = dict(ctx=16, width=32, heads=4, vocab=27)

def encode(names):
    seqs = [torch.tensor([0] + [ord(ch) - 96 for ch in nm] + [0]) for nm in names]
    M = pad_sequence(seqs, batch_first=True, padding_value=0)
    M = F.pad(M, (0, max(0, cfg['ctx'] + 1 - M.shape[1])))[:, :cfg['ctx'] + 1]
    return M[:, :-1], M[:, -1]

cut = int(0.9 * len(corpus))
Xtrain, Ytrain = encode(corpus[:cut])
Xval, Yval = encode(corpus[cut:])
print(Xtrain.shape, Xtrain[0], Ytrain[:5])
''',
    md("### pytree helpers"),
    r'''
def tree_map(fn, *trees):
    if isinstance(trees[0], dict):
        return {k: tree_map(fn, *(t[k] for t in trees)) for k in trees[0]}
    return fn(*trees)

def tree_leaves(tree, prefix=''):
    if isinstance(tree, dict):
        out = []
        for k in tree:
            out += tree_leaves(tree[k], prefix + '/' + k)
        return out
    return [(prefix, tree)]

def init(seed):
    g = torch.Generator().manual_seed(seed)
    C, V, T = cfg['width'], cfg['vocab'], cfg['ctx']
    def dense(i, o, gain=1.0):
        return {'kernel': torch.randn(i, o, generator=g) * gain / math.sqrt(i),
                'bias': 0.1 * torch.randn(o, generator=g)}
    def norm():
        return {'scale': 1 + 0.1 * torch.randn(C, generator=g), 'offset': 0.1 * torch.randn(C, generator=g)}
    return {'embed': {'tokens': 0.1 * torch.randn(V, C, generator=g),
                      'positions': 0.1 * torch.randn(T, C, generator=g)},
            'block': {'norm1': norm(),
                      'attn': {'in': dense(C, 3 * C), 'out': dense(C, C, 0.5)},
                      'norm2': norm(),
                      'mlp': {'up': dense(C, 4 * C), 'down': dense(4 * C, C, 0.5)}},
            'norm_f': norm()}

params = init(31337)
params = tree_map(lambda a: a.requires_grad_(), params)
[(k, tuple(v.shape)) for k, v in tree_leaves(params)]
''',
    md("### apply functions: (p, x) -> (y, residuals)"),
    r'''
def dense_apply(p, x):
    y = x @ p['kernel'] + p['bias']
    return y, {'x': x, 'y': y}

def norm_apply(p, x, eps=1e-5):
    mu = x.mean(-1, keepdim=True)
    xc = x - mu
    var = (xc * xc).mean(-1, keepdim=True)
    inv = (var + eps) ** -0.5
    xhat = xc * inv
    y = xhat * p['scale'] + p['offset']
    return y, dict(x=x, mu=mu, xc=xc, var=var, inv=inv, xhat=xhat, y=y)

def split_heads(t, nh):
    B, T, C = t.shape
    return t.view(B, T, nh, C // nh).transpose(1, 2)

def merge_heads(t):
    B, nh, T, hs = t.shape
    return t.transpose(1, 2).reshape(B, T, nh * hs)

def attn_apply(p, x, nh):
    qkv, r_in = dense_apply(p['in'], x)
    C = qkv.shape[-1] // 3
    q, k, v = (split_heads(part, nh) for part in qkv.split(C, dim=-1))
    T = x.shape[1]
    keep = torch.ones(T, T).tril().bool()
    scores = q @ k.transpose(-1, -2) * (C // nh) ** -0.5
    masked = scores.masked_fill(~keep, float('-inf'))
    probs = torch.softmax(masked, dim=-1)
    ctx = probs @ v
    merged = merge_heads(ctx)
    y, r_out = dense_apply(p['out'], merged)
    return y, dict(**{'in': r_in, 'out': r_out}, q=q, k=k, v=v, keep=keep, scores=scores,
                   masked=masked, probs=probs, ctx=ctx, merged=merged)

GELU_C = math.sqrt(2 / math.pi)

def mlp_apply(p, x):
    u, r_up = dense_apply(p['up'], x)
    th = torch.tanh(GELU_C * (u + 0.044715 * u ** 3))
    act = 0.5 * u * (1 + th)
    y, r_down = dense_apply(p['down'], act)
    return y, dict(up=r_up, th=th, act=act, down=r_down)

def block_apply(p, x):
    a, r1 = norm_apply(p['norm1'], x)
    h, ra = attn_apply(p['attn'], a, cfg['heads'])
    x1 = x + h
    b, r2 = norm_apply(p['norm2'], x1)
    m, rm = mlp_apply(p['mlp'], b)
    x2 = x1 + m
    return x2, dict(norm1=r1, attn=ra, x1=x1, norm2=r2, mlp=rm, x2=x2)

def model_apply(params, X, Y):
    tok = params['embed']['tokens'][X]
    x0 = tok + params['embed']['positions'][:X.shape[1]]
    x2, rb = block_apply(params['block'], x0)
    z, rf = norm_apply(params['norm_f'], x2)
    logits = z @ params['embed']['tokens'].T
    targets = torch.cat([X[:, 1:], Y[:, None]], dim=1)
    loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
    return loss, dict(tok=tok, x0=x0, block=rb, norm_f=rf, z=z, logits=logits, targets=targets)
''',
    r'''
bix = torch.randint(0, len(Xtrain), (5,), generator=torch.Generator().manual_seed(5))
Xb, Yb = Xtrain[bix], Ytrain[bix]
loss, R = model_apply(params, Xb, Yb)
loss
''',
    md("### vjp functions: (p, residuals, dy) -> (dx, dp, cotangents)\nThe `cot` dicts keep "
       "every intermediate cotangent (a branch before it is summed gets its own key, `a<-b`)."),
    r'''
def dense_vjp(p, r, dy):
    x = r['x']
    dp = {'kernel': x.flatten(0, -2).T @ dy.flatten(0, -2), 'bias': dy.flatten(0, -2).sum(0)}
    return dy @ p['kernel'].T, dp, {'y': dy}

def norm_vjp(p, r, dy):
    C = r['x'].shape[-1]
    cot = {'y': dy}
    dp = {'scale': (dy * r['xhat']).sum((0, 1)), 'offset': dy.sum((0, 1))}
    cot['xhat'] = dy * p['scale']
    cot['inv'] = (cot['xhat'] * r['xc']).sum(-1, keepdim=True)
    cot['xc<-xhat'] = cot['xhat'] * r['inv']
    cot['var'] = -0.5 * (r['var'] + 1e-5) ** -1.5 * cot['inv']
    cot['xc'] = cot['xc<-xhat'] + cot['var'] * 2 * r['xc'] / C
    cot['mu'] = -cot['xc'].sum(-1, keepdim=True)
    cot['x<-xc'] = cot['xc']
    cot['x'] = cot['x<-xc'] + cot['mu'] / C
    return cot['x'], dp, cot

def attn_vjp(p, r, dy, nh):
    cot = {'y': dy}
    cot['merged'], dp_out, _ = dense_vjp(p['out'], r['out'], dy)
    hs = cot['merged'].shape[-1] // nh
    cot['ctx'] = split_heads(cot['merged'], nh)
    cot['probs'] = cot['ctx'] @ r['v'].transpose(-1, -2)
    cot['v'] = r['probs'].transpose(-1, -2) @ cot['ctx']
    P = r['probs']
    cot['masked'] = P * (cot['probs'] - (P * cot['probs']).sum(-1, keepdim=True))
    cot['scores'] = cot['masked'].masked_fill(~r['keep'], 0.0)
    cot['q'] = cot['scores'] @ r['k'] * hs ** -0.5
    cot['k'] = cot['scores'].transpose(-1, -2) @ r['q'] * hs ** -0.5
    cot['qkv'] = torch.cat([merge_heads(cot['q']), merge_heads(cot['k']), merge_heads(cot['v'])], -1)
    dx, dp_in, _ = dense_vjp(p['in'], r['in'], cot['qkv'])
    cot['x'] = dx
    return dx, {'in': dp_in, 'out': dp_out}, cot

def mlp_vjp(p, r, dy):
    cot = {'y': dy}
    cot['act'], dp_down, _ = dense_vjp(p['down'], r['down'], dy)
    u, th = r['up']['y'], r['th']
    dth_du = (1 - th ** 2) * GELU_C * (1 + 3 * 0.044715 * u ** 2)
    cot['u'] = cot['act'] * (0.5 * (1 + th) + 0.5 * u * dth_du)
    cot['x'], dp_up, _ = dense_vjp(p['up'], r['up'], cot['u'])
    return cot['x'], {'up': dp_up, 'down': dp_down}, cot

def block_vjp(p, r, dx2):
    cot = {'x2': dx2, 'm': dx2, 'x1<-skip': dx2}
    db, dp_mlp, cot['mlp'] = mlp_vjp(p['mlp'], r['mlp'], cot['m'])
    dx1_norm, dp_n2, cot['norm2'] = norm_vjp(p['norm2'], r['norm2'], db)
    cot['x1'] = cot['x1<-skip'] + dx1_norm
    cot['h'], cot['x0<-skip'] = cot['x1'], cot['x1']
    da, dp_attn, cot['attn'] = attn_vjp(p['attn'], r['attn'], cot['h'], cfg['heads'])
    dx0_norm, dp_n1, cot['norm1'] = norm_vjp(p['norm1'], r['norm1'], da)
    cot['x0'] = cot['x0<-skip'] + dx0_norm
    return cot['x0'], {'norm1': dp_n1, 'attn': dp_attn, 'norm2': dp_n2, 'mlp': dp_mlp}, cot

def model_vjp(params, R, X):
    V = params['embed']['tokens'].shape[0]
    logits, targets = R['logits'], R['targets']
    N = targets.numel()
    cot = {}
    onehot = F.one_hot(targets, V).to(logits.dtype)
    cot['logits'] = (torch.softmax(logits, -1) - onehot) / N
    cot['z'] = cot['logits'] @ params['embed']['tokens']
    cot['tokens<-head'] = cot['logits'].flatten(0, 1).T @ R['z'].flatten(0, 1)
    dx2, dp_f, cot['norm_f'] = norm_vjp(params['norm_f'], R['norm_f'], cot['z'])
    dx0, dp_block, cot['block'] = block_vjp(params['block'], R['block'], dx2)
    cot['tok'] = dx0
    onehot_in = F.one_hot(X, V).to(dx0.dtype)
    d_tokens = cot['tokens<-head'] + onehot_in.flatten(0, 1).T @ dx0.flatten(0, 1)
    d_positions = dx0.sum(0)
    grads = {'embed': {'tokens': d_tokens, 'positions': d_positions},
             'block': dp_block, 'norm_f': dp_f}
    return grads, cot
''',
    r'''
with torch.no_grad():
    grads, cots = model_vjp(tree_map(lambda a: a.detach(), params), R, Xb)
''',
    r'''
def maxdiff(a, b):
    return (a - b).abs().max().item()

names, leaves = zip(*tree_leaves(params))
auto = torch.autograd.grad(loss, leaves, retain_graph=True)
mine = [g for _, g in tree_leaves(grads)]
for nm, a, b in zip(names, mine, auto):
    print(f"{nm:28s} {maxdiff(a, b):.2e}")
''',
    r'''
rb = R['block']
acts = {'logits': (cots['logits'], R['logits']), 'z': (cots['z'], R['z']),
        'x2': (cots['block']['x2'], rb['x2']), 'u': (cots['block']['mlp']['u'], rb['mlp']['up']['y']),
        'x1': (cots['block']['x1'], rb['x1']), 'probs': (cots['block']['attn']['probs'], rb['attn']['probs']),
        'scores': (cots['block']['attn']['scores'], rb['attn']['scores']),
        'x0': (cots['block']['x0'], R['x0'])}
refs = torch.autograd.grad(loss, [t for _, t in acts.values()], retain_graph=True)
for (nm, (mine_, _)), ref in zip(acts.items(), refs):
    print(f"{nm:8s} {maxdiff(mine_, ref):.2e}")
''',
]

_T1R, _T1C = "R['block']", "cots['block']"
GPTT1_FWD = {
    "logits": "R['logits']", "lnf": "R['norm_f']['y']", "lnf_norm": "R['norm_f']['xhat']",
    "lnf_rstd": "R['norm_f']['inv']", "lnf_var": "R['norm_f']['var']",
    "lnf_xc": "R['norm_f']['xc']", "lnf_mean": "R['norm_f']['mu']", "x2": f"{_T1R}['x2']",
    "fcproj": f"{_T1R}['mlp']['down']['y']", "fch_gelu": f"{_T1R}['mlp']['act']",
    "fch": f"{_T1R}['mlp']['up']['y']", "ln2": f"{_T1R}['norm2']['y']",
    "ln2_norm": f"{_T1R}['norm2']['xhat']", "x1": f"{_T1R}['x1']",
    "attproj": f"{_T1R}['attn']['out']['y']", "y": f"{_T1R}['attn']['merged']",
    "atty": f"{_T1R}['attn']['ctx']", "att": f"{_T1R}['attn']['probs']",
    "v": f"{_T1R}['attn']['v']", "preatt_masked": f"{_T1R}['attn']['masked']",
    "preatt": f"{_T1R}['attn']['scores']", "q": f"{_T1R}['attn']['q']",
    "k": f"{_T1R}['attn']['k']", "qkv": f"{_T1R}['attn']['in']['y']",
    "ln1": f"{_T1R}['norm1']['y']", "ln1_norm": f"{_T1R}['norm1']['xhat']", "x0": "R['x0']",
    "tok": "R['tok']",
    "wte": "params['embed']['tokens']", "wpe": "params['embed']['positions']",
    "lnfw": "params['norm_f']['scale']", "lnfb": "params['norm_f']['offset']",
    "fcprojw": "params['block']['mlp']['down']['kernel']",
    "fcprojb": "params['block']['mlp']['down']['bias']",
    "fcw": "params['block']['mlp']['up']['kernel']", "fcb": "params['block']['mlp']['up']['bias']",
    "ln2w": "params['block']['norm2']['scale']", "ln2b": "params['block']['norm2']['offset']",
    "attprojw": "params['block']['attn']['out']['kernel']",
    "attprojb": "params['block']['attn']['out']['bias']",
    "qkvw": "params['block']['attn']['in']['kernel']",
    "qkvb": "params['block']['attn']['in']['bias']",
    "ln1w": "params['block']['norm1']['scale']", "ln1b": "params['block']['norm1']['offset']",
}
GPTT1_GRAD = {
    "logits": "cots['logits']", "lnf": "cots['norm_f']['y']", "lnf_norm": "cots['norm_f']['xhat']",
    "lnf_rstd": "cots['norm_f']['inv']", "lnf_var": "cots['norm_f']['var']",
    "lnf_xc": "cots['norm_f']['xc']", "lnf_mean": "cots['norm_f']['mu']", "x2": f"{_T1C}['x2']",
    "fcproj": f"{_T1C}['m']", "fch_gelu": f"{_T1C}['mlp']['act']", "fch": f"{_T1C}['mlp']['u']",
    "ln2": f"{_T1C}['mlp']['x']", "ln2_norm": f"{_T1C}['norm2']['xhat']", "x1": f"{_T1C}['x1']",
    "attproj": f"{_T1C}['h']", "y": f"{_T1C}['attn']['merged']", "atty": f"{_T1C}['attn']['ctx']",
    "att": f"{_T1C}['attn']['probs']", "v": f"{_T1C}['attn']['v']",
    "preatt_masked": f"{_T1C}['attn']['masked']", "preatt": f"{_T1C}['attn']['scores']",
    "q": f"{_T1C}['attn']['q']", "k": f"{_T1C}['attn']['k']", "qkv": f"{_T1C}['attn']['qkv']",
    "ln1": f"{_T1C}['attn']['x']", "ln1_norm": f"{_T1C}['norm1']['xhat']", "x0": f"{_T1C}['x0']",
    "tok": "cots['tok']",
    "wte": "grads['embed']['tokens']", "wpe": "grads['embed']['positions']",
    "lnfw": "grads['norm_f']['scale']", "lnfb": "grads['norm_f']['offset']",
    "fcprojw": "grads['block']['mlp']['down']['kernel']",
    "fcprojb": "grads['block']['mlp']['down']['bias']",
    "fcw": "grads['block']['mlp']['up']['kernel']", "fcb": "grads['block']['mlp']['up']['bias']",
    "ln2w": "grads['block']['norm2']['scale']", "ln2b": "grads['block']['norm2']['offset']",
    "attprojw": "grads['block']['attn']['out']['kernel']",
    "attprojb": "grads['block']['attn']['out']['bias']",
    "qkvw": "grads['block']['attn']['in']['kernel']",
    "qkvb": "grads['block']['attn']['in']['bias']",
    "ln1w": "grads['block']['norm1']['scale']", "ln1b": "grads['block']['norm1']['offset']",
}
# the first branches, each under a key of its own in the cotangent dicts
GPTT1_FIRST_GRAD = {"wte": "cots['tokens<-head']", "lnf_xc": "cots['norm_f']['xc<-xhat']",
                    "x2": "cots['norm_f']['x<-xc']", "x1": f"{_T1C}['x1<-skip']",
                    "x0": f"{_T1C}['x0<-skip']"}
_GPTT1_AFTER = "grads, cots = model_vjp("


def with_firsts(specs: dict, first_grad: dict) -> dict:
    """Points each first-branch spec at the learner's own expression for that branch."""
    out = {}
    for step, items in specs.items():
        names = GPT_CHECKS[step] if step in GPT_CHECKS else LSTM_CHECKS[step]
        out[step] = [(first_grad[nm[0]], sp[1], sp[2]) if isinstance(nm, tuple) else sp
                     for nm, sp in zip(names, items, strict=True)]
    return out


def _t1_specs():
    return with_firsts(where("gpt", GPT_STEPS, fwd=GPTT1_FWD, grad=GPTT1_GRAD.__getitem__,
                             first_after={k: _GPTT1_AFTER for k in GPTT1_FIRST_GRAD}),
                       GPTT1_FIRST_GRAD)


add("gpt_t1_jax_pytree_apply_vjp", "gpt", GPTT1_CELLS, GPT_STEPS,
    notes="a JAX learner: own data (randperm under Generator(1337), pad_sequence, ord(ch) - 96), "
          "parameters a nested-dict pytree made by init(seed) with own tree_map / tree_leaves; "
          "every layer a pure xxx_apply(p, x) -> (y, residuals) and xxx_vjp(p, res, dy) -> (dx, "
          "dp, cot) returning new dicts, every cotangent (first branches under 'a<-b' keys) kept "
          "in nested cot dicts; encoder backward as a one-hot matmul; torch.autograd.grad over "
          "tree_leaves and maxdiff(); batch 5; exercise 1 only; all right",
    where=_t1_specs())

# ================================================================================================
# GPT T2 (right throughout). A Keras-minded learner. Own data (names sorted by a hash of
# themselves, hashlib.md5, then 85% for training; rows by str.ljust with '.' and a translate
# table). A Layer hierarchy: `Layer` with `__call__` keeping `self.inp` / `self.out`, `call()` and
# `grad_input()` per subclass, and `backward(dout)` keeping `self.dout` / `self.dinp`; Embedding,
# LayerNorm (keeps xhat, its dxhat), Dense (w['kernel'], w['bias'] into dw), CausalAttention (no
# weights, keeps every atom and its gradient on itself), GELU, TiedHead (its share of the table's
# gradient kept on the head as `dw_shared`), SoftmaxXent; containers Sequential (backward walks
# the layers reversed) and Residual (x + inner(x), keeping the skip's gradient `dskip`). Layers
# looked up by name in a dict `L`; gradients collected by `collect(model)` into a dict keyed
# 'layer.weight', the tied table summed there. No layer norm atom below dxhat is held
# (lnf_rstd, lnf_var, lnf_xc, lnf_mean not attempted). Check batch 9; own adamw_update, 120 steps
# on the layers, batch 10.

GPTT2_CELLS = [
    r'''
import hashlib
import math
import torch
import torch.nn.functional as F
''',
    r'''
raw = open('names.txt').read().split('\n')
raw = [w for w in raw if w]
raw.sort(key=lambda w: hashlib.md5(w.encode()).hexdigest())
ALPHA = '.abcdefghijklmnopqrstuvwxyz'
table = str.maketrans({ch: chr(i) for i, ch in enumerate(ALPHA)})
CTX = 16

def to_tensor(ws):
    rows = [('.' + w + '.').ljust(CTX + 1, '.')[:CTX + 1].translate(table) for w in ws]
    t = torch.tensor([[ord(c) for c in r] for r in rows])
    return t[:, :-1], t[:, -1]

n_tr = int(0.85 * len(raw))
Xtr, Ytr = to_tensor(raw[:n_tr])
Xva, Yva = to_tensor(raw[n_tr:])
Xtr[:2], Ytr[:2]
''',
    md("## Layers\nLike Keras: every layer owns its weights (`w`) and their gradients (`dw`), "
       "remembers its input and output, and knows its own backward."),
    r'''
torch.manual_seed(8080)

class Layer:
    def __init__(self, name):
        self.name, self.w, self.dw = name, {}, {}
    def __call__(self, x):
        self.inp = x
        self.out = self.call(x)
        return self.out
    def backward(self, dout):
        self.dout = dout
        self.dinp = self.grad_input(dout)
        return self.dinp
    def sublayers(self):
        return []

class Dense(Layer):
    def __init__(self, n_in, n_out, name, gain=1.0):
        super().__init__(name)
        self.w['kernel'] = torch.randn(n_in, n_out) * gain / n_in ** 0.5
        self.w['bias'] = torch.randn(n_out) * 0.1
    def call(self, x):
        return x @ self.w['kernel'] + self.w['bias']
    def grad_input(self, dout):
        x2d, d2d = self.inp.reshape(-1, self.inp.shape[-1]), dout.reshape(-1, dout.shape[-1])
        self.dw['kernel'] = x2d.T @ d2d
        self.dw['bias'] = d2d.sum(0)
        return dout @ self.w['kernel'].T

class LayerNorm(Layer):
    def __init__(self, dim, name):
        super().__init__(name)
        self.w['gamma'] = 1 + 0.1 * torch.randn(dim)
        self.w['beta'] = 0.1 * torch.randn(dim)
    def call(self, x):
        mu = x.mean(-1, keepdim=True)
        self.rstd = ((x - mu) ** 2).mean(-1, keepdim=True).add(1e-5).pow(-0.5)
        self.xhat = (x - mu) * self.rstd
        return self.xhat * self.w['gamma'] + self.w['beta']
    def grad_input(self, dout):
        self.dw['gamma'] = (dout * self.xhat).sum((0, 1))
        self.dw['beta'] = dout.sum((0, 1))
        self.dxhat = dout * self.w['gamma']
        avg = lambda t: t.mean(-1, keepdim=True)
        return self.rstd * (self.dxhat - avg(self.dxhat) - self.xhat * avg(self.dxhat * self.xhat))

class GELU(Layer):
    K = math.sqrt(2 / math.pi)
    def call(self, x):
        self.th = torch.tanh(self.K * (x + 0.044715 * x ** 3))
        return 0.5 * x * (1 + self.th)
    def grad_input(self, dout):
        x, th = self.inp, self.th
        return dout * 0.5 * ((1 + th) + x * (1 - th * th) * self.K * (1 + 0.134145 * x * x))

class CausalAttention(Layer):
    def __init__(self, n_head, name):
        super().__init__(name)
        self.nh = n_head
    def call(self, qkv):
        B, T, C3 = qkv.shape
        C = C3 // 3
        self.hs = C // self.nh
        self.q, self.k, self.v = [qkv[..., j * C:(j + 1) * C].view(B, T, self.nh, self.hs).transpose(1, 2)
                                  for j in range(3)]
        self.scores = self.q @ self.k.transpose(-2, -1) * self.hs ** -0.5
        self.tri = torch.ones(T, T).tril()
        self.masked = self.scores.masked_fill(self.tri == 0, float('-inf'))
        self.probs = F.softmax(self.masked, dim=-1)
        self.ctx = self.probs @ self.v
        return self.ctx.transpose(1, 2).contiguous().view(B, T, C)
    def grad_input(self, dout):
        B, T, C = dout.shape
        self.dctx = dout.view(B, T, self.nh, self.hs).transpose(1, 2)
        self.dprobs = self.dctx @ self.v.transpose(-2, -1)
        self.dv = self.probs.transpose(-2, -1) @ self.dctx
        self.dmasked = self.probs * (self.dprobs - (self.probs * self.dprobs).sum(-1, keepdim=True))
        self.dscores = self.dmasked.masked_fill(self.tri == 0, 0.0)
        self.dq = self.dscores @ self.k * self.hs ** -0.5
        self.dk = self.dscores.transpose(-2, -1) @ self.q * self.hs ** -0.5
        back = lambda t: t.transpose(1, 2).reshape(B, T, C)
        return torch.cat([back(self.dq), back(self.dk), back(self.dv)], dim=-1)

class Embedding(Layer):
    def __init__(self, vocab, ctx, dim, name):
        super().__init__(name)
        self.w['table'] = 0.1 * torch.randn(vocab, dim)
        self.w['pos'] = 0.1 * torch.randn(ctx, dim)
    def call(self, idx):
        self.tok = self.w['table'][idx]
        return self.tok + self.w['pos'][:idx.shape[1]]
    def grad_input(self, dout):
        C = dout.shape[-1]
        self.dw['table'] = torch.zeros_like(self.w['table']).index_add_(
            0, self.inp.reshape(-1), dout.reshape(-1, C))
        self.dw['pos'] = dout.sum(0)
        return None

class TiedHead(Layer):
    def __init__(self, emb, name):
        super().__init__(name)
        self.emb = emb
    def call(self, x):
        return x @ self.emb.w['table'].T
    def grad_input(self, dout):
        V, C = self.emb.w['table'].shape
        self.dw_shared = dout.reshape(-1, V).T @ self.inp.reshape(-1, C)
        return dout @ self.emb.w['table']

class Sequential(Layer):
    def __init__(self, layers, name):
        super().__init__(name)
        self.layers = layers
    def call(self, x):
        for layer in self.layers:
            x = layer(x)
        return x
    def grad_input(self, dout):
        for layer in reversed(self.layers):
            dout = layer.backward(dout)
        return dout
    def sublayers(self):
        return self.layers

class Residual(Layer):
    def __init__(self, inner, name):
        super().__init__(name)
        self.inner = inner
    def call(self, x):
        return x + self.inner(x)
    def grad_input(self, dout):
        self.dskip = dout
        return dout + self.inner.backward(dout)
    def sublayers(self):
        return [self.inner]

class SoftmaxXent:
    def __call__(self, logits, targets):
        self.logits, self.targets = logits, targets
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
    def backward(self):
        V = self.logits.shape[-1]
        p = F.softmax(self.logits.reshape(-1, V), dim=-1)
        p[torch.arange(p.shape[0]), self.targets.reshape(-1)] -= 1
        return (p / p.shape[0]).view_as(self.logits)
''',
    r'''
V, C, NH = 27, 32, 4
emb = Embedding(V, CTX, C, 'embed')
model = Sequential([
    emb,
    Residual(Sequential([LayerNorm(C, 'ln_a'), Dense(C, 3 * C, 'qkv'), CausalAttention(NH, 'attn'),
                         Dense(C, C, 'attn_out', gain=0.5)], 'attn_branch'), 'res_a'),
    Residual(Sequential([LayerNorm(C, 'ln_b'), Dense(C, 4 * C, 'up'), GELU('gelu'),
                         Dense(4 * C, C, 'down', gain=0.5)], 'mlp_branch'), 'res_b'),
    LayerNorm(C, 'ln_out'),
    TiedHead(emb, 'head'),
], 'gpt')
xent = SoftmaxXent()

def walk(layer):
    yield layer
    for sub in layer.sublayers():
        yield from walk(sub)

L = {layer.name: layer for layer in walk(model)}
weights = {f'{l.name}.{k}': (l, k) for l in L.values() for k in l.w}
list(weights)
''',
    r'''
def collect(model):
    out = {}
    for name, (layer, key) in weights.items():
        out[name] = layer.dw[key]
    out['embed.table'] = out['embed.table'] + L['head'].dw_shared
    return out

def targets_of(X, Y):
    return torch.cat([X[:, 1:], Y[:, None]], dim=1)
''',
    md("## check against autograd (batch of 9)"),
    r'''
for layer, key in weights.values():
    layer.w[key].requires_grad_(True)
g = torch.Generator().manual_seed(909)
ix = torch.randint(0, len(Xtr), (9,), generator=g)
Xb, Yb = Xtr[ix], Ytr[ix]
logits = model(Xb)
loss = xent(logits, targets_of(Xb, Yb))
loss.backward()
with torch.no_grad():
    model.backward(xent.backward())
grads = collect(model)
''',
    r'''
def report(label, mine, ref):
    err = (mine - ref).abs().max().item()
    flag = 'ok ' if err < 1e-5 * max(1.0, ref.abs().max().item()) else 'BAD'
    print(f"{flag} {label:18s} {err:.2e}")

for name, (layer, key) in weights.items():
    report(name, grads[name], layer.w[key].grad)
inner = [L['ln_out'], L['down'], L['gelu'], L['up'], L['ln_b'], L['attn_out'], L['attn'], L['qkv'], L['ln_a']]
refs = torch.autograd.grad(loss, [l.out for l in inner], retain_graph=True)
for l, r in zip(inner, refs):
    report(l.name + ' (out)', l.dout, r)
''',
    md("## my AdamW, then train"),
    r'''
def adamw_update(param, grad, m, v, t, lr, beta1, beta2, eps, weight_decay):
    param.sub_(lr * weight_decay * param)
    m.mul_(beta1).add_((1 - beta1) * grad)
    v.mul_(beta2).add_((1 - beta2) * grad * grad)
    mhat = m / (1 - beta1 ** t)
    vhat = v / (1 - beta2 ** t)
    param.sub_(lr * mhat / (vhat.sqrt() + eps))
''',
    r'''
for layer, key in weights.values():
    layer.w[key].requires_grad_(False)
    layer.w[key].grad = None
state = {name: (torch.zeros_like(l.w[k]), torch.zeros_like(l.w[k])) for name, (l, k) in weights.items()}
history = []
for step in range(1, 121):
    ix = torch.randint(0, len(Xtr), (10,), generator=g)
    xb, yb = Xtr[ix], Ytr[ix]
    lg = model(xb)
    lossv = xent(lg, targets_of(xb, yb))
    model.backward(xent.backward())
    grads = collect(model)
    for wname, (layer, key) in weights.items():
        m_, v_ = state[wname]
        adamw_update(layer.w[key], grads[wname], m_, v_, step, 1e-2, 0.9, 0.99, 1e-8, 1e-4)
    history.append(lossv.item())
print(history[0], sum(history[-12:]) / 12)
''',
]

GPTT2_LAYER = {"logits": "head", "lnf": "ln_out", "x2": "res_b", "fcproj": "down",
               "fch_gelu": "gelu", "fch": "up", "ln2": "ln_b", "x1": "res_a",
               "attproj": "attn_out", "y": "attn", "qkv": "qkv", "ln1": "ln_a", "x0": "embed"}
GPTT2_WEIGHT = {"wte": ("embed", "table"), "wpe": ("embed", "pos"), "lnfw": ("ln_out", "gamma"),
                "lnfb": ("ln_out", "beta"), "fcprojw": ("down", "kernel"),
                "fcprojb": ("down", "bias"), "fcw": ("up", "kernel"), "fcb": ("up", "bias"),
                "ln2w": ("ln_b", "gamma"), "ln2b": ("ln_b", "beta"),
                "attprojw": ("attn_out", "kernel"), "attprojb": ("attn_out", "bias"),
                "qkvw": ("qkv", "kernel"), "qkvb": ("qkv", "bias"), "ln1w": ("ln_a", "gamma"),
                "ln1b": ("ln_a", "beta")}
GPTT2_FWD = {**{k: f"L['{v}'].out" for k, v in GPTT2_LAYER.items()},
             **{k: f"L['{l}'].w['{w}']" for k, (l, w) in GPTT2_WEIGHT.items()},
             "lnf_norm": "L['ln_out'].xhat", "ln2_norm": "L['ln_b'].xhat",
             "ln1_norm": "L['ln_a'].xhat", "atty": "L['attn'].ctx", "att": "L['attn'].probs",
             "v": "L['attn'].v", "preatt_masked": "L['attn'].masked",
             "preatt": "L['attn'].scores", "q": "L['attn'].q", "k": "L['attn'].k",
             "tok": "L['embed'].tok"}
GPTT2_GRAD = {**{k: f"L['{v}'].dout" for k, v in GPTT2_LAYER.items()},
              **{k: f"L['{l}'].dw['{w}']" for k, (l, w) in GPTT2_WEIGHT.items()},
              "x2": "L['ln_out'].dinp", "x1": "L['res_b'].dinp", "x0": "L['res_a'].dinp",
              "fch_gelu": "L['down'].dinp", "fch": "L['gelu'].dinp", "ln2": "L['up'].dinp",
              "y": "L['attn_out'].dinp", "qkv": "L['attn'].dinp", "ln1": "L['qkv'].dinp",
              "lnf": "L['head'].dinp", "wte": "grads['embed.table']",
              "lnf_norm": "L['ln_out'].dxhat", "ln2_norm": "L['ln_b'].dxhat",
              "ln1_norm": "L['ln_a'].dxhat", "atty": "L['attn'].dctx", "att": "L['attn'].dprobs",
              "v": "L['attn'].dv", "preatt_masked": "L['attn'].dmasked",
              "preatt": "L['attn'].dscores", "q": "L['attn'].dq", "k": "L['attn'].dk",
              "tok": "L['embed'].dout"}
GPTT2_FIRST_GRAD = {"wte": "L['head'].dw_shared", "x1": "L['res_b'].dskip",
                    "x0": "L['res_a'].dskip"}
GPTT2_STEPS = [s for s in GPT_STEPS
               if s not in ("block/lnf_rstd", "block/lnf_var", "block/lnf_xc", "block/lnf_mean")]
GPTT2_P = "{" + ", ".join(f"'{k}': L['{l}'].w['{w}']" for k, (l, w) in GPTT2_WEIGHT.items()) + "}"
GPTT2_G = "{" + ", ".join(f"'{k}': grads['{l}.{w}']" for k, (l, w) in GPTT2_WEIGHT.items()) + "}"


def _t2_specs():
    specs = where("gpt", GPTT2_STEPS, fwd=GPTT2_FWD, grad=GPTT2_GRAD.__getitem__,
                  first_after={k: "grads = collect(model)" for k in GPTT2_FIRST_GRAD})
    specs = with_firsts(specs, GPTT2_FIRST_GRAD)
    # dfcproj is the branch's share of dx2: the gradient the residual hands its inner Sequential
    specs["block/x2_residual"] = [sp if sp[0] != "L['down'].dout" else
                                  ("L['mlp_branch'].dout", sp[1])
                                  for sp in specs["block/x2_residual"]]
    return specs


add("gpt_t2_keras_layers_sequential_residual_adamw", "gpt", GPTT2_CELLS,
    GPTT2_STEPS + ["functions/adamw_update", "train/gpt"],
    notes="a Keras-minded learner: own data (md5-sorted names, ljust rows, a translate table); a "
          "Layer hierarchy with __call__ keeping inp / out and backward keeping dout / dinp "
          "(Embedding, LayerNorm, Dense, CausalAttention keeping its atoms, GELU, TiedHead with "
          "its share of the table's gradient, SoftmaxXent), containers Sequential (reversed "
          "backward) and Residual (keeps dskip); gradients collected into a dict by layer name; no "
          "layer norm atom below dxhat (lnf_rstd / var / xc / mean not attempted); batch 9; own "
          "adamw_update, 120 steps, batch 10; all right",
    where=_t2_specs(),
    checkpoint="grads = collect(model)",
    functions={"functions/adamw_update": None},
    train={"cell": "for step in range(1, 121)",
           "probe": "for wname, (layer, key) in weights.items():",
           "params": GPTT2_P, "grads": GPTT2_G, "ref": "lambda Q: ref_gpt_loss(Q, xb, yb)",
           "losses": "history"})

# ================================================================================================
# GPT T3 (right throughout). Exercises 2 and 3 only. Own data (names bucketed by length, every
# bucket shuffled by random.Random(77), rows built through bytes and a lookup tensor). The seven
# functions written first (encoder_backward by a loop over the batch's unique tokens with a
# boolean mask, layernorm_backward through the atoms rstd / var / xc, matmul_backward by einsum,
# attention_backward with unflatten / permute and one torch.stack for q, k, v, gelu_backward
# through cosh (sech squared), the cross-entropy by scatter_add, adamw_update with addcmul_ /
# addcdiv_), each checked with torch.autograd.functional.vjp by an `agree` helper. The model a
# 2-layer stack kept in dataclasses: one `BlockW` per layer for its weights (and the same class for
# its gradients and Adam moments), one `BlockActs` per layer for its activations, the forward a
# loop appending BlockActs to a list; the backward walks the list reversed on the functions and
# returns a list of BlockW gradients. Check against autograd on batch 11; 150 steps of
# adamw_update over a flat list of leaves, batch 12.

GPTT3_CELLS = [
    r'''
import math
import random
from dataclasses import dataclass, fields
import torch
import torch.nn.functional as F
''',
    r'''
names = open('names.txt').read().splitlines()
buckets = {}
for nm in names:
    buckets.setdefault(len(nm), []).append(nm)
rng = random.Random(77)
ordered = []
for ln_ in sorted(buckets):
    rng.shuffle(buckets[ln_])
    ordered += buckets[ln_]
rng.shuffle(ordered)
lut = torch.zeros(256, dtype=torch.long)
lut[torch.arange(97, 123)] = torch.arange(1, 27)
T_CTX = 16

def rows_of(ws):
    buf = torch.zeros(len(ws), T_CTX + 1, dtype=torch.long)
    for r, w in enumerate(ws):
        ids = lut[torch.tensor(list(w.encode()))][:T_CTX]
        buf[r, 1:1 + len(ids)] = ids
    return buf[:, :T_CTX], buf[:, T_CTX]

Xtr, Ytr = rows_of(ordered[:25000])
Xte, Yte = rows_of(ordered[25000:])
''',
    md("## the fused functions"),
    r'''
def encoder_backward(dout, inp, vocab_size):
    dwte = dout.new_zeros(vocab_size, dout.shape[-1])
    for tok in inp.unique().tolist():
        dwte[tok] = dout[inp == tok].sum(0)
    return dwte, dout.sum(0)

def layernorm_backward(dout, inp, weight, mean, rstd):
    N = inp.shape[-1]
    xc = inp - mean
    xhat = xc * rstd
    dxhat = dout * weight
    drstd = (dxhat * xc).sum(-1, keepdim=True)
    dvar = -0.5 * rstd ** 3 * drstd
    dxc = dxhat * rstd + dvar * 2 * xc / N
    dinp = dxc - dxc.mean(-1, keepdim=True)
    return dinp, (dout * xhat).sum((0, 1)), dout.sum((0, 1))

def matmul_backward(dout, inp, weight):
    dinp = torch.einsum('bto,io->bti', dout, weight)
    dweight = torch.einsum('bti,bto->io', inp, dout)
    return dinp, dweight, torch.einsum('bto->o', dout)

def attention_backward(dout, qkv, att, n_head):
    B, T, C3 = qkv.shape
    hs = C3 // 3 // n_head
    q, k, v = qkv.unflatten(-1, (3, n_head, hs)).permute(2, 0, 3, 1, 4)
    datty = dout.unflatten(-1, (n_head, hs)).transpose(1, 2)
    datt = datty @ v.transpose(-1, -2)
    dv = att.transpose(-1, -2) @ datty
    dpre = att * (datt - (att * datt).sum(-1, keepdim=True)) * hs ** -0.5
    dq, dk = dpre @ k, dpre.transpose(-1, -2) @ q
    return torch.stack([dq, dk, dv]).permute(1, 3, 0, 2, 4).reshape(B, T, C3)

def gelu_backward(dout, inp):
    a = math.sqrt(2 / math.pi)
    u = a * (inp + 0.044715 * inp ** 3)
    sech2 = torch.cosh(u).pow(-2)
    return dout * (0.5 * (1 + torch.tanh(u)) + 0.5 * inp * sech2 * a * (1 + 3 * 0.044715 * inp ** 2))

def crossentropy_softmax_backward(logits, targets):
    N = logits.shape[0]
    minus_one = torch.full((N, 1), -1.0, dtype=logits.dtype)
    return torch.softmax(logits, 1).scatter_add(1, targets[:, None], minus_one) / N

def adamw_update(param, grad, m, v, t, lr, beta1, beta2, eps, weight_decay):
    with torch.no_grad():
        m.mul_(beta1).add_(grad, alpha=1 - beta1)
        v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        denom = v.div(1 - beta2 ** t).sqrt_().add_(eps)
        param.mul_(1 - lr * weight_decay).addcdiv_(m, denom, value=-lr / (1 - beta1 ** t))
''',
    r'''
from torch.autograd.functional import vjp

def agree(label, f, inputs, v, mine):
    _, ref = vjp(f, inputs, v)
    ref = ref if isinstance(ref, tuple) else (ref,)
    mine = mine if isinstance(mine, tuple) else (mine,)
    print(label, all(torch.allclose(a, b, atol=1e-6) for a, b in zip(mine, ref)))

torch.manual_seed(12)
Bt, Tt, Ct = 2, 5, 12
x_ = torch.randn(Bt, Tt, Ct)
W_, b_ = torch.randn(Ct, 7), torch.randn(7)
d7 = torch.randn(Bt, Tt, 7)
agree('matmul', lambda x, w, b: x @ w + b, (x_, W_, b_), d7, matmul_backward(d7, x_, W_))

g_, s_ = torch.randn(Ct), torch.randn(Ct)
def ln_(x, g, s):
    mu = x.mean(-1, keepdim=True)
    return (x - mu) / ((x - mu).pow(2).mean(-1, keepdim=True) + 1e-5).sqrt() * g + s
mu_ = x_.mean(-1, keepdim=True)
rs_ = ((x_ - mu_).pow(2).mean(-1, keepdim=True) + 1e-5).rsqrt()
dC = torch.randn(Bt, Tt, Ct)
agree('layernorm', ln_, (x_, g_, s_), dC, layernorm_backward(dC, x_, g_, mu_, rs_))

ids_ = torch.randint(0, 6, (Bt, Tt))
agree('encoder', lambda e, p: e[ids_] + p, (torch.randn(6, Ct), torch.randn(Tt, Ct)), dC,
      encoder_backward(dC, ids_, 6))

u_ = 2 * torch.randn(4, 9)
d49 = torch.randn(4, 9)
agree('gelu', lambda z: 0.5 * z * (1 + torch.tanh(math.sqrt(2 / math.pi) * (z + 0.044715 * z ** 3))),
      (u_,), d49, gelu_backward(d49, u_))

lg_, tg_ = torch.randn(9, 6), torch.randint(0, 6, (9,))
agree('xent', lambda z: F.cross_entropy(z, tg_), (lg_,), torch.tensor(1.0),
      crossentropy_softmax_backward(lg_, tg_))

def attn_(qkv, nh=3):
    B, T, C3 = qkv.shape
    C = C3 // 3
    q, k, v = (t.view(B, T, nh, C // nh).transpose(1, 2) for t in qkv.split(C, -1))
    a = (q @ k.transpose(-1, -2) / math.sqrt(C // nh)).masked_fill(
        torch.ones(T, T).tril() == 0, float('-inf')).softmax(-1)
    return (a @ v).transpose(1, 2).reshape(B, T, C), a
qkv_ = torch.randn(Bt, Tt, 3 * Ct)
agree('attention', lambda t: attn_(t)[0], (qkv_,), dC,
      attention_backward(dC, qkv_, attn_(qkv_)[1], 3))
''',
    md("## two blocks, kept in dataclasses"),
    r'''
@dataclass
class BlockW:
    n1_g: torch.Tensor
    n1_b: torch.Tensor
    w_qkv: torch.Tensor
    b_qkv: torch.Tensor
    w_o: torch.Tensor
    b_o: torch.Tensor
    n2_g: torch.Tensor
    n2_b: torch.Tensor
    w_up: torch.Tensor
    b_up: torch.Tensor
    w_dn: torch.Tensor
    b_dn: torch.Tensor

    def tensors(self):
        return [getattr(self, f.name) for f in fields(self)]

@dataclass
class BlockActs:
    x_in: torch.Tensor = None
    mean1: torch.Tensor = None
    rstd1: torch.Tensor = None
    a1: torch.Tensor = None
    qkv: torch.Tensor = None
    att: torch.Tensor = None
    y: torch.Tensor = None
    x_mid: torch.Tensor = None
    mean2: torch.Tensor = None
    rstd2: torch.Tensor = None
    a2: torch.Tensor = None
    up: torch.Tensor = None
    act: torch.Tensor = None
    x_out: torch.Tensor = None

V, C, NH, NL = 27, 32, 4, 2
gen = torch.Generator().manual_seed(2024)
def rnd(*shape, scale=1.0, base=0.0):
    return base + scale * torch.randn(*shape, generator=gen)

emb = {'tok': rnd(V, C, scale=0.1), 'pos': rnd(T_CTX, C, scale=0.1)}
blocks = [BlockW(rnd(C, scale=0.1, base=1.0), rnd(C, scale=0.1),
                 rnd(C, 3 * C, scale=C ** -0.5), rnd(3 * C, scale=0.1),
                 rnd(C, C, scale=0.5 * C ** -0.5), rnd(C, scale=0.1),
                 rnd(C, scale=0.1, base=1.0), rnd(C, scale=0.1),
                 rnd(C, 4 * C, scale=C ** -0.5), rnd(4 * C, scale=0.1),
                 rnd(4 * C, C, scale=0.5 * (4 * C) ** -0.5), rnd(C, scale=0.1))
          for _ in range(NL)]
fin = {'g': rnd(C, scale=0.1, base=1.0), 'b': rnd(C, scale=0.1)}
''',
    r'''
def norm(x, g, b):
    mean = x.mean(-1, keepdim=True)
    rstd = ((x - mean) ** 2).mean(-1, keepdim=True).add(1e-5).rsqrt()
    return (x - mean) * rstd * g + b, mean, rstd

def self_attend(qkv):
    B, T, _ = qkv.shape
    q, k, v = qkv.unflatten(-1, (3, NH, C // NH)).permute(2, 0, 3, 1, 4)
    sc = q @ k.transpose(-1, -2) * (C // NH) ** -0.5
    att = sc.masked_fill(torch.ones(T, T).tril() == 0, float('-inf')).softmax(-1)
    return (att @ v).transpose(1, 2).reshape(B, T, C), att

def forward(emb, blocks, fin, X, Y):
    acts = []
    x = emb['tok'][X] + emb['pos']
    for bw in blocks:
        a = BlockActs(x_in=x)
        a.a1, a.mean1, a.rstd1 = norm(x, bw.n1_g, bw.n1_b)
        a.qkv = a.a1 @ bw.w_qkv + bw.b_qkv
        a.y, a.att = self_attend(a.qkv)
        a.x_mid = x + a.y @ bw.w_o + bw.b_o
        a.a2, a.mean2, a.rstd2 = norm(a.x_mid, bw.n2_g, bw.n2_b)
        a.up = a.a2 @ bw.w_up + bw.b_up
        a.act = 0.5 * a.up * (1 + torch.tanh(math.sqrt(2 / math.pi) * (a.up + 0.044715 * a.up ** 3)))
        a.x_out = a.x_mid + a.act @ bw.w_dn + bw.b_dn
        acts.append(a)
        x = a.x_out
    z, mf, rf = norm(x, fin['g'], fin['b'])
    logits = z @ emb['tok'].T
    targets = torch.cat([X[:, 1:], Y[:, None]], 1)
    loss = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))
    return loss, acts, dict(x=x, mean=mf, rstd=rf, z=z, logits=logits, targets=targets)

def backward(emb, blocks, fin, X, acts, top):
    B, T = X.shape
    dlogits = crossentropy_softmax_backward(top['logits'].reshape(B * T, V),
                                            top['targets'].reshape(-1)).view(B, T, V)
    dz, dtokT, _ = matmul_backward(dlogits, top['z'], emb['tok'].T)
    dx, dfg, dfb = layernorm_backward(dz, top['x'], fin['g'], top['mean'], top['rstd'])
    gblocks = [None] * len(blocks)
    for l in reversed(range(len(blocks))):
        bw, a = blocks[l], acts[l]
        dact, dw_dn, db_dn = matmul_backward(dx, a.act, bw.w_dn)
        dup = gelu_backward(dact, a.up)
        da2, dw_up, db_up = matmul_backward(dup, a.a2, bw.w_up)
        dmid, dn2_g, dn2_b = layernorm_backward(da2, a.x_mid, bw.n2_g, a.mean2, a.rstd2)
        dmid = dmid + dx
        dy, dw_o, db_o = matmul_backward(dmid, a.y, bw.w_o)
        dqkv = attention_backward(dy, a.qkv, a.att, NH)
        da1, dw_qkv, db_qkv = matmul_backward(dqkv, a.a1, bw.w_qkv)
        dxin, dn1_g, dn1_b = layernorm_backward(da1, a.x_in, bw.n1_g, a.mean1, a.rstd1)
        dx = dxin + dmid
        gblocks[l] = BlockW(dn1_g, dn1_b, dw_qkv, db_qkv, dw_o, db_o, dn2_g, dn2_b,
                            dw_up, db_up, dw_dn, db_dn)
    dtok, dpos = encoder_backward(dx, X, V)
    return {'tok': dtok + dtokT.T, 'pos': dpos}, gblocks, {'g': dfg, 'b': dfb}

def leaves(emb, blocks, fin):
    out = [emb['tok'], emb['pos']]
    for bw in blocks:
        out += bw.tensors()
    return out + [fin['g'], fin['b']]
''',
    r'''
for p in leaves(emb, blocks, fin):
    p.requires_grad_(True)
ix = torch.randint(0, len(Xtr), (11,), generator=gen)
loss, acts, top = forward(emb, blocks, fin, Xtr[ix], Ytr[ix])
auto = torch.autograd.grad(loss, leaves(emb, blocks, fin))
with torch.no_grad():
    g_emb, g_blocks, g_fin = backward(emb, blocks, fin, Xtr[ix], acts, top)
worst = max((a - b).abs().max().item() for a, b in zip(leaves(g_emb, g_blocks, g_fin), auto))
print('loss', loss.item(), 'worst diff', worst)
for p in leaves(emb, blocks, fin):
    p.requires_grad_(False)
''',
    r'''
mom = [torch.zeros_like(p) for p in leaves(emb, blocks, fin)]
sq = [torch.zeros_like(p) for p in leaves(emb, blocks, fin)]
curve = []
for it in range(1, 151):
    ix = torch.randint(0, len(Xtr), (12,), generator=gen)
    xb, yb = Xtr[ix], Ytr[ix]
    loss_it, acts_it, top_it = forward(emb, blocks, fin, xb, yb)
    g_emb, g_blocks, g_fin = backward(emb, blocks, fin, xb, acts_it, top_it)
    for p, gp, m_, v_ in zip(leaves(emb, blocks, fin), leaves(g_emb, g_blocks, g_fin), mom, sq):
        adamw_update(p, gp, m_, v_, it, 5e-3, 0.9, 0.98, 1e-8, 0.01)
    curve.append(loss_it.item())
print(curve[0], sum(curve[-15:]) / 15)
''',
]

GPTT3_BLOCK = {"ln1w": "n1_g", "ln1b": "n1_b", "qkvw": "w_qkv", "qkvb": "b_qkv",
               "attprojw": "w_o", "attprojb": "b_o", "ln2w": "n2_g", "ln2b": "n2_b",
               "fcw": "w_up", "fcb": "b_up", "fcprojw": "w_dn", "fcprojb": "b_dn"}


def _t3_tree(e: str, bl: str, f: str) -> str:
    parts = [f"'wte': {e}['tok']", f"'wpe': {e}['pos']"]
    parts += [f"'{k}': torch.stack([b_.{v} for b_ in {bl}])" for k, v in GPTT3_BLOCK.items()]
    parts += [f"'lnfw': {f}['g']", f"'lnfb': {f}['b']"]
    return "{" + ", ".join(parts) + "}"


add("gpt_t3_functions_dataclass_two_blocks_adamw", "gpt", GPTT3_CELLS, GPT_FUNCS + ["train/gpt"],
    notes="exercises 2 and 3 only: own data (length buckets shuffled by Random(77), bytes through a "
          "lookup tensor); the seven functions (unique-token mask loop, layer norm through its "
          "atoms, einsum matmul, unflatten / permute / stack attention, GELU via cosh, scatter_add "
          "cross-entropy, addcmul_ / addcdiv_ AdamW), checked with torch.autograd.functional.vjp; a "
          "2-layer model in dataclasses (BlockW weights / gradients per layer, BlockActs per layer "
          "in a list), backward walking the list reversed on the functions; batch 11 check; 150 "
          "steps of adamw_update over a flat list of leaves, batch 12; all right",
    functions={s: None for s in GPT_FUNCS},
    train={"cell": "for it in range(1, 151)",
           "probe": "for p, gp, m_, v_ in zip(leaves(emb, blocks, fin)",
           "params": _t3_tree("emb", "blocks", "fin"),
           "grads": _t3_tree("g_emb", "g_blocks", "g_fin"),
           "ref": "lambda Q: ref_gpt_loss(Q, xb, yb)", "losses": "curve"})

# ================================================================================================
# GPT T4 (a slip and its cascades). einsum everywhere. Own data (pathlib read, random.Random(2718)
# shuffle, each row the string '.' + name + '.' * 17 cut to 17 characters). Parameters as globals
# under the learner's own names (E_tok, E_pos, gam1 / bet1, Wa / ba, Wp / bp, gam2 / bet2, Wi /
# bi, Wj / bj, gamf / betf); the forward as top-level lines with every product, the head
# permutes and the variance's sum of squares written as torch.einsum, heads cut with chunk(3);
# activations renamed (e_tok, r0, m1 / c1 / v1 / inv1 / n1 / h1, QKV, Qh / Kh / Vh, S, S_m, P_,
# O_h, O, A, r1, ..., U, Ug, Dn, r2, mf / cf / vf / invf / nf / hf, Z). The backward a generator
# `backprop()` that yields (name, gradient) pairs from the loss down, first branches under names
# of their own ('E_tok@head', 'cf@n', 'r2@c', 'r1@skip', 'r0@skip'), layer norms 1 and 2 in one
# go through a helper; consumed by a loop that files every pair in a dict `d` and prints the
# relative error against the retained .grad of the tensors it watches. Batch 13; exercise 1 only.
# Slip: dVh copies the forward's einsum pattern, 'bhts,bhsd->bhtd' (att @ datty, the transpose
# missing): block/att is wrong, and qkv, ln1, ln1_affine, x0, wpe, wte cascade; preatt_masked,
# preatt and qk (through datt) stay right.

GPTT4_CELLS = [
    r'''
import math
import random
from pathlib import Path
import torch
import torch.nn.functional as F
''',
    r'''
words = Path('names.txt').read_text().split()
random.Random(2718).shuffle(words)
itos = ['.'] + list('abcdefghijklmnopqrstuvwxyz')
stoi = {c: i for i, c in enumerate(itos)}
rows = torch.tensor([[stoi[c] for c in ('.' + w + '.' * 17)[:17]] for w in words])
Xall, Yall = rows[:, :16], rows[:, 16]
n_train = int(0.8 * len(words))
print(rows.shape, ''.join(itos[i] for i in rows[0]))
''',
    r'''
T, C, NH, V = 16, 32, 4, 27
HD = C // NH
torch.manual_seed(4444)
E_tok = 0.1 * torch.randn(V, C)
E_pos = 0.1 * torch.randn(T, C)
gam1, bet1 = 1 + 0.1 * torch.randn(C), 0.1 * torch.randn(C)
Wa, ba = torch.randn(C, 3 * C) / C ** 0.5, 0.1 * torch.randn(3 * C)
Wp, bp = 0.5 * torch.randn(C, C) / C ** 0.5, 0.1 * torch.randn(C)
gam2, bet2 = 1 + 0.1 * torch.randn(C), 0.1 * torch.randn(C)
Wi, bi = torch.randn(C, 4 * C) / C ** 0.5, 0.1 * torch.randn(4 * C)
Wj, bj = 0.5 * torch.randn(4 * C, C) / (4 * C) ** 0.5, 0.1 * torch.randn(C)
gamf, betf = 1 + 0.1 * torch.randn(C), 0.1 * torch.randn(C)
weights = dict(E_tok=E_tok, E_pos=E_pos, gam1=gam1, bet1=bet1, Wa=Wa, ba=ba, Wp=Wp, bp=bp,
               gam2=gam2, bet2=bet2, Wi=Wi, bi=bi, Wj=Wj, bj=bj, gamf=gamf, betf=betf)
for w in weights.values():
    w.requires_grad_(True)
''',
    md("## forward, einsum only"),
    r'''
pick = torch.randint(0, n_train, (13,))
xb, yb = Xall[pick], Yall[pick]
B = xb.shape[0]
k0 = math.sqrt(2 / math.pi)

e_tok = E_tok[xb]
r0 = e_tok + E_pos
m1 = r0.mean(-1, keepdim=True)
c1 = r0 - m1
v1 = torch.einsum('btc,btc->bt', c1, c1)[..., None] / C
inv1 = (v1 + 1e-5) ** -0.5
n1 = c1 * inv1
h1 = n1 * gam1 + bet1
QKV = torch.einsum('btc,cd->btd', h1, Wa) + ba
Qh, Kh, Vh = (torch.einsum('bthd->bhtd', part.reshape(B, T, NH, HD)) for part in QKV.chunk(3, dim=-1))
S = torch.einsum('bhtd,bhsd->bhts', Qh, Kh) * HD ** -0.5
S_m = S.masked_fill(torch.ones(T, T).tril() == 0, float('-inf'))
P_ = torch.softmax(S_m, dim=-1)
O_h = torch.einsum('bhts,bhsd->bhtd', P_, Vh)
O = torch.einsum('bhtd->bthd', O_h).reshape(B, T, C)
A = torch.einsum('btc,cd->btd', O, Wp) + bp
r1 = r0 + A
m2 = r1.mean(-1, keepdim=True)
c2 = r1 - m2
v2 = torch.einsum('btc,btc->bt', c2, c2)[..., None] / C
inv2 = (v2 + 1e-5) ** -0.5
n2 = c2 * inv2
h2 = n2 * gam2 + bet2
U = torch.einsum('btc,cf->btf', h2, Wi) + bi
Ug = 0.5 * U * (1 + torch.tanh(k0 * (U + 0.044715 * U ** 3)))
Dn = torch.einsum('btf,fc->btc', Ug, Wj) + bj
r2 = r1 + Dn
mf = r2.mean(-1, keepdim=True)
cf = r2 - mf
vf = torch.einsum('btc,btc->bt', cf, cf)[..., None] / C
invf = (vf + 1e-5) ** -0.5
nf = cf * invf
hf = nf * gamf + betf
Z = torch.einsum('btc,vc->btv', hf, E_tok)
tgt = torch.cat([xb[:, 1:], yb[:, None]], dim=1)
loss = F.cross_entropy(Z.reshape(-1, V), tgt.reshape(-1))
print(loss.item())
''',
    r'''
watch = dict(Z=Z, hf=hf, nf=nf, invf=invf, vf=vf, cf=cf, mf=mf, r2=r2, Dn=Dn, Ug=Ug, U=U, h2=h2,
             n2=n2, r1=r1, A=A, O=O, O_h=O_h, P_=P_, Vh=Vh, S_m=S_m, S=S, Qh=Qh, Kh=Kh, QKV=QKV,
             h1=h1, n1=n1, r0=r0, e_tok=e_tok)
for t_ in watch.values():
    t_.retain_grad()
loss.backward()
''',
    md("## backward as a generator\nEach gradient is yielded the moment it exists, so I can look "
       "at them one by one."),
    r'''
def ln_back(dh, n, inv, gam):
    dn = dh * gam
    proj = torch.einsum('btc,btc->bt', dn, n)[..., None] / C
    return dn, inv * (dn - dn.mean(-1, keepdim=True) - n * proj)

def heads_back(g):
    return torch.einsum('bhtd->bthd', g).reshape(B, T, C)

@torch.no_grad()
def backprop():
    N = B * T
    dZ = (torch.softmax(Z, -1) - F.one_hot(tgt, V)) / N
    yield 'Z', dZ
    dhf = torch.einsum('btv,vc->btc', dZ, E_tok)
    yield 'hf', dhf
    yield 'E_tok@head', torch.einsum('btv,btc->vc', dZ, hf)
    dnf = dhf * gamf
    yield 'nf', dnf
    yield 'gamf', torch.einsum('btc,btc->c', dhf, nf)
    yield 'betf', torch.einsum('btc->c', dhf)
    dinvf = torch.einsum('btc,btc->bt', dnf, cf)[..., None]
    yield 'invf', dinvf
    yield 'cf@n', dnf * invf
    dvf = -0.5 * (vf + 1e-5) ** -1.5 * dinvf
    yield 'vf', dvf
    dcf = dnf * invf + dvf * 2 * cf / C
    yield 'cf', dcf
    yield 'mf', -torch.einsum('btc->bt', dcf)[..., None]
    yield 'r2@c', dcf
    dr2 = dcf - dcf.mean(-1, keepdim=True)
    yield 'r2', dr2
    yield 'Dn', dr2
    yield 'r1@skip', dr2
    dUg = torch.einsum('btc,fc->btf', dr2, Wj)
    yield 'Ug', dUg
    yield 'Wj', torch.einsum('btf,btc->fc', Ug, dr2)
    yield 'bj', torch.einsum('btc->c', dr2)
    th = torch.tanh(k0 * (U + 0.044715 * U ** 3))
    dU = dUg * (0.5 * (1 + th) + 0.5 * U * (1 - th ** 2) * k0 * (1 + 3 * 0.044715 * U ** 2))
    yield 'U', dU
    dh2 = torch.einsum('btf,cf->btc', dU, Wi)
    yield 'h2', dh2
    yield 'Wi', torch.einsum('btc,btf->cf', h2, dU)
    yield 'bi', torch.einsum('btf->f', dU)
    dn2, dr1_ln = ln_back(dh2, n2, inv2, gam2)
    yield 'n2', dn2
    yield 'gam2', torch.einsum('btc,btc->c', dh2, n2)
    yield 'bet2', torch.einsum('btc->c', dh2)
    dr1 = dr2 + dr1_ln
    yield 'r1', dr1
    yield 'A', dr1
    yield 'r0@skip', dr1
    dO = torch.einsum('btd,cd->btc', dr1, Wp)
    yield 'O', dO
    yield 'Wp', torch.einsum('btc,btd->cd', O, dr1)
    yield 'bp', torch.einsum('btd->d', dr1)
    dO_h = torch.einsum('bthd->bhtd', dO.reshape(B, T, NH, HD))
    yield 'O_h', dO_h
    dP = torch.einsum('bhtd,bhsd->bhts', dO_h, Vh)
    dVh = torch.einsum('bhts,bhsd->bhtd', P_, dO_h)
    yield 'P_', dP
    yield 'Vh', dVh
    dS_m = P_ * (dP - torch.einsum('bhts,bhts->bht', P_, dP)[..., None])
    yield 'S_m', dS_m
    dS = dS_m.masked_fill(torch.ones(T, T).tril() == 0, 0.0)
    yield 'S', dS
    dQh = torch.einsum('bhts,bhsd->bhtd', dS, Kh) * HD ** -0.5
    dKh = torch.einsum('bhts,bhtd->bhsd', dS, Qh) * HD ** -0.5
    yield 'Qh', dQh
    yield 'Kh', dKh
    dQKV = torch.cat([heads_back(dQh), heads_back(dKh), heads_back(dVh)], dim=-1)
    yield 'QKV', dQKV
    dh1 = torch.einsum('btd,cd->btc', dQKV, Wa)
    yield 'h1', dh1
    yield 'Wa', torch.einsum('btc,btd->cd', h1, dQKV)
    yield 'ba', torch.einsum('btd->d', dQKV)
    dn1, dr0_ln = ln_back(dh1, n1, inv1, gam1)
    yield 'n1', dn1
    yield 'gam1', torch.einsum('btc,btc->c', dh1, n1)
    yield 'bet1', torch.einsum('btc->c', dh1)
    dr0 = dr1 + dr0_ln
    yield 'r0', dr0
    yield 'e_tok', dr0
    yield 'E_pos', torch.einsum('btc->tc', dr0)
    dE = torch.zeros(V, C).index_add_(0, xb.reshape(-1), dr0.reshape(-1, C))
    yield 'E_tok', dE + torch.einsum('btv,btc->vc', dZ, hf)
''',
    r'''
def rel_err(mine, ref):
    return ((mine - ref).norm() / (ref.norm() + 1e-12)).item()

d = {}
for name, g in backprop():
    d[name] = g
    ref = watch[name].grad if name in watch else weights[name].grad if name in weights else None
    if ref is not None:
        print(f"{name:8s} {rel_err(g, ref):.1e}")
''',
]

GPTT4_FWD = {"logits": "Z", "lnf": "hf", "lnf_norm": "nf", "lnf_rstd": "invf", "lnf_var": "vf",
             "lnf_xc": "cf", "lnf_mean": "mf", "x2": "r2", "fcproj": "Dn", "fch_gelu": "Ug",
             "fch": "U", "ln2": "h2", "ln2_norm": "n2", "x1": "r1", "attproj": "A", "y": "O",
             "atty": "O_h", "att": "P_", "v": "Vh", "preatt_masked": "S_m", "preatt": "S",
             "q": "Qh", "k": "Kh", "qkv": "QKV", "ln1": "h1", "ln1_norm": "n1", "x0": "r0",
             "tok": "e_tok", "wte": "E_tok", "wpe": "E_pos", "lnfw": "gamf", "lnfb": "betf",
             "fcprojw": "Wj", "fcprojb": "bj", "fcw": "Wi", "fcb": "bi", "ln2w": "gam2",
             "ln2b": "bet2", "attprojw": "Wp", "attprojb": "bp", "qkvw": "Wa", "qkvb": "ba",
             "ln1w": "gam1", "ln1b": "bet1"}
GPTT4_FIRST = {"wte": "E_tok@head", "lnf_xc": "cf@n", "x2": "r2@c", "x1": "r1@skip",
               "x0": "r0@skip"}


def _t4_specs():
    specs = where("gpt", GPT_STEPS, fwd=GPTT4_FWD, grad=lambda k: f"d['{GPTT4_FWD[k]}']",
                  first_after={k: "for name, g in backprop():" for k in GPTT4_FIRST})
    return with_firsts(specs, {k: f"d['{v}']" for k, v in GPTT4_FIRST.items()})


add("gpt_t4_einsum_generator_dv_slip", "gpt", GPTT4_CELLS, GPT_STEPS,
    wrong=["block/att"],
    cascade=["block/qkv", "block/ln1", "block/ln1_affine", "block/x0", "block/wpe", "block/wte"],
    notes="own data (pathlib, Random(2718), rows as '.' + name + '.' * 17 cut to 17); parameters "
          "as globals under own names; the forward as top-level lines, every product / head "
          "permute / sum of squares a torch.einsum, heads by chunk(3); the backward a generator "
          "yielding (name, gradient) pairs, first branches under names of their own, ln1 / ln2 in "
          "one go through a helper; a loop files them in a dict d and prints relative errors "
          "against retained .grad; batch 13; exercise 1 only. Slip: dVh copies the forward's "
          "einsum pattern 'bhts,bhsd->bhtd' (att @ datty, the transpose missing); qkv, ln1, "
          "ln1_affine, x0, wpe, wte cascade; preatt_masked, preatt, qk stay right",
    where=_t4_specs(),
    fix=[("dVh = torch.einsum('bhts,bhsd->bhtd', P_, dO_h)",
          "dVh = torch.einsum('bhts,bhtd->bhsd', P_, dO_h)")])

# ================================================================================================
# LSTM T5 (a slip and its cascades). A learner who learnt LSTMs from TensorFlow 1. Own data (even
# lines for training, odd ones held out; rows filled into torch.full(-1) buffers by slicing), the
# setup's run_lstm copied; the trainable variables in a dict `tvars` under TF-scoped names
# ('embedding', 'lstm/kernel' [D + H, 4H] with the input's rows above the state's, 'lstm/bias',
# 'softmax_w', 'softmax_b'), run_lstm called on the kernel's two halves. Step t as TF writes it:
# xh = cat([x_t, h_prev]) @ kernel_t + bias_t, torch.split into zi / zf / zg / zo, and the state
# kept as one tensor `ch = cat([c, h])` in TF's (c, h) order (no `state` stack; the future's share
# of dc is ch.grad[:, :H]). Gradients in an attribute dict `d` (class Grads(dict) with
# __getattr__ / __setattr__): d.logits, d.outputs, d.h_from_out, d.c_future, d.zi, d.z, d.xh,
# d.kernel_t, ...; first branches held under names of their own; a `close_enough` helper against
# retained .grad. Exercise 3's fused gates with one slope tensor chosen by torch.where over a
# column mask; lstm_step_backward on the concatenated kernel; exercise 2's lstm_backward as a
# reversed loop over it collecting dx into a list stacked at the end; a training forward of the
# learner's own (lists of h, c, gates stacked); 150 steps of RMSprop of the learner's own, batch
# 21 (the check batch 19).
# Slip: in lstm_step_backward the learner computes dc_prev = dc * f before completing dc through
# h (the two lines in the wrong order), so dc_prev misses h's share: fused/lstm_step_backward is
# wrong, and bptt/lstm_backward (built on it) and train/lstm (built on that) cascade; exercise 1
# and the fused gates, written out separately, stay right.

LSTMT5_CELLS = [
    md("# LSTM step, TF1 style\nOne kernel for `[x, h]`, state as `[c, h]` (like "
       "`state_is_tuple=False`)."),
    r'''
import torch
import torch.nn.functional as F
from collections import namedtuple
''',
    r'''
lines = open('names.txt').read().splitlines()
train_names, held_names = lines[0::2], lines[1::2]
vocab = ['.'] + sorted(set(''.join(lines)))
char2id = {c: k for k, c in enumerate(vocab)}
V = len(vocab)
W = max(len(w) for w in lines) + 1

def tensorize(ws):
    X = torch.zeros(len(ws), W, dtype=torch.long)
    Y = torch.full((len(ws), W), -1, dtype=torch.long)
    for r, w in enumerate(ws):
        ids = torch.tensor([char2id[c] for c in w])
        X[r, 1:len(ids) + 1] = ids
        Y[r, :len(ids)] = ids
        Y[r, len(ids)] = 0
    return X, Y

Xtrain, Ytrain = tensorize(train_names)
Xheld, Yheld = tensorize(held_names)

def minibatch(bs, gen):
    ix = torch.randint(0, len(Xtrain), (bs,), generator=gen)
    X, Y = Xtrain[ix], Ytrain[ix]
    T = int((Y >= 0).sum(1).max())
    return X[:, :T].contiguous(), Y[:, :T].contiguous()
''',
    r'''
LSTMRun = namedtuple("LSTMRun", ["hs", "h", "c"])

def run_lstm(xs, h, c, Wx, Wh, b):
    hs, h, c = torch.lstm(xs, (h[None], c[None]), (Wx.T, Wh.T, b, b * 0), True, 1, 0.0, False,
                          False, True)
    return LSTMRun(hs, h[0], c[0])
''',
    r'''
D, H = 10, 32
gen = torch.Generator().manual_seed(1701)
tvars = {
    'embedding': torch.randn(V, D, generator=gen),
    'lstm/kernel': torch.cat([torch.randn(D, 4 * H, generator=gen) / D ** 0.5,
                              torch.randn(H, 4 * H, generator=gen) / H ** 0.5]),
    'lstm/bias': 0.1 * torch.randn(4 * H, generator=gen),
    'softmax_w': torch.randn(H, V, generator=gen) / H ** 0.5,
    'softmax_b': 0.1 * torch.randn(V, generator=gen),
}
tvars['lstm/bias'][H:2 * H] += 1.0      # forget_bias=1.0, as in BasicLSTMCell
for v_ in tvars.values():
    v_.requires_grad_(True)
kernel, bias = tvars['lstm/kernel'], tvars['lstm/bias']
''',
    r'''
Xb, Yb = minibatch(19, gen)
n, t = Xb.shape[0], 3
inputs = tvars['embedding'][Xb]
zeros = inputs.new_zeros(n, H)
pre = run_lstm(inputs[:, :t], zeros, zeros, kernel[:D], kernel[D:], bias)
x_t = inputs[:, t]
kernel_t, bias_t = kernel.clone(), bias.clone()
xh = torch.cat([x_t, pre.h], dim=1)
z = xh @ kernel_t + bias_t
zi, zf, zg, zo = torch.split(z, H, dim=1)
ig, fg, og = torch.sigmoid(zi), torch.sigmoid(zf), torch.sigmoid(zo)
cand = torch.tanh(zg)
new_c = fg * pre.c + ig * cand
new_h = og * torch.tanh(new_c)
ch = torch.cat([new_c, new_h], dim=1)
post = run_lstm(inputs[:, t + 1:], ch[:, H:], ch[:, :H], kernel[:D], kernel[D:], bias)
outputs = torch.cat([pre.hs, new_h[:, None], post.hs], dim=1)
logits = outputs @ tvars['softmax_w'] + tvars['softmax_b']
loss = F.cross_entropy(logits.view(-1, V), Yb.view(-1), ignore_index=-1)
for tt in (logits, outputs, new_h, new_c, ch, ig, fg, og, cand, zi, zf, zg, zo, z, xh, x_t,
           kernel_t, bias_t, pre.hs, post.hs, pre.c, pre.h):
    tt.retain_grad()
loss.backward()
print(Xb.shape, loss.item())
''',
    r'''
class Grads(dict):
    __getattr__ = dict.__getitem__
    __setattr__ = dict.__setitem__

def close_enough(tag, mine, tensor):
    ok = torch.allclose(mine, tensor.grad, rtol=1e-4, atol=1e-6)
    print(f"{tag:10s} {'ok' if ok else 'DIFF'} {(mine - tensor.grad).abs().max().item():.1e}")

d = Grads()
''',
    r'''
with torch.no_grad():
    real = (Yb >= 0).float()
    d.logits = torch.softmax(logits, -1)
    d.logits[Yb >= 0] -= F.one_hot(Yb[Yb >= 0], V).float()
    d.logits *= real[..., None] / real.sum()
    d.outputs = d.logits @ tvars['softmax_w'].T
    d.softmax_w = outputs.reshape(-1, H).T @ d.logits.reshape(-1, V)
    d.softmax_b = d.logits.sum((0, 1))
close_enough('logits', d.logits, logits)
close_enough('outputs', d.outputs, outputs)
close_enough('softmax_w', d.softmax_w, tvars['softmax_w'])
''',
    r'''
d.pre_hs = d.outputs[:, :t]
d.post_hs = d.outputs[:, t + 1:]
d.h_from_out = d.outputs[:, t]
d.c_future = ch.grad[:, :H]
d.h = d.h_from_out + ch.grad[:, H:]
close_enough('pre_hs', d.pre_hs, pre.hs)
close_enough('post_hs', d.post_hs, post.hs)
close_enough('new_h', d.h, new_h)
''',
    r'''
with torch.no_grad():
    tanh_c = torch.tanh(new_c)
    d.og = d.h * tanh_c
    d.c = d.c_future + d.h * og * (1 - tanh_c ** 2)
    d.fg = d.c * pre.c
    d.c_prev = d.c * fg
    d.ig = d.c * cand
    d.cand = d.c * ig
    d.zi = d.ig * ig * (1 - ig)
    d.zf = d.fg * fg * (1 - fg)
    d.zo = d.og * og * (1 - og)
    d.zg = d.cand * (1 - cand ** 2)
    d.z = torch.cat([d.zi, d.zf, d.zg, d.zo], dim=1)
    d.xh = d.z @ kernel_t.T
    d.x_t, d.h_prev = d.xh.split([D, H], dim=1)
    d.kernel_t = xh.T @ d.z
    d.bias_t = d.z.sum(0)
for tag, mine, tensor in [('og', d.og, og), ('new_c', d.c, new_c), ('fg', d.fg, fg),
                          ('c_prev', d.c_prev, pre.c), ('ig', d.ig, ig), ('cand', d.cand, cand),
                          ('zi', d.zi, zi), ('zf', d.zf, zf), ('zg', d.zg, zg), ('zo', d.zo, zo),
                          ('z', d.z, z), ('x_t', d.x_t, x_t), ('h_prev', d.h_prev, pre.h),
                          ('kernel_t', d.kernel_t, kernel_t), ('bias_t', d.bias_t, bias_t)]:
    close_enough(tag, mine, tensor)
''',
    md("## fused: every gate's slope in one tensor"),
    r'''
is_cand = torch.zeros(4 * H, dtype=torch.bool)
is_cand[2 * H:3 * H] = True
with torch.no_grad():
    acts = torch.cat([ig, fg, cand, og], dim=1)
    slope = torch.where(is_cand, 1 - acts ** 2, acts * (1 - acts))
    d.z_fused = torch.cat([d.ig, d.fg, d.cand, d.og], dim=1) * slope
close_enough('z fused', d.z_fused, z)
''',
    r'''
def lstm_step_backward(dh, dc, x, h_prev, c_prev, c, gates, Wx, Wh):
    Hn, Dn = h_prev.shape[1], x.shape[1]
    i, f, g, o = gates.split(Hn, dim=1)
    tc = torch.tanh(c)
    dc_prev = dc * f
    dc = dc + dh * o * (1 - tc ** 2)
    dz = torch.cat([dc * g * i * (1 - i), dc * c_prev * f * (1 - f),
                    dc * i * (1 - g ** 2), dh * tc * o * (1 - o)], dim=1)
    xh_ = torch.cat([x, h_prev], dim=1)
    K = torch.cat([Wx, Wh], dim=0)
    dxh = dz @ K.T
    dK = xh_.T @ dz
    return dxh[:, :Dn], dxh[:, Dn:], dc_prev, dK[:Dn], dK[Dn:], dz.sum(0)

with torch.no_grad():
    step_out = lstm_step_backward(d.h, d.c_future, x_t, pre.h, pre.c, new_c, acts,
                                  kernel_t[:D], kernel_t[D:])
close_enough('step dx', step_out[0], x_t)
close_enough('step dh', step_out[1], pre.h)
close_enough('step dWx', torch.cat([step_out[3], step_out[4]]), kernel_t)
''',
    md("## BPTT"),
    r'''
def lstm_backward(dhs, xs, h0, c0, hs, cs, gates, Wx, Wh):
    T = xs.shape[1]
    dh, dc = torch.zeros_like(h0), torch.zeros_like(c0)
    dWx, dWh, db = 0, 0, 0
    dx_rev = []
    for s in range(T - 1, -1, -1):
        h_in = hs[:, s - 1] if s else h0
        c_in = cs[:, s - 1] if s else c0
        dx, dh, dc, gWx, gWh, gb = lstm_step_backward(dhs[:, s] + dh, dc, xs[:, s], h_in, c_in,
                                                      cs[:, s], gates[:, s], Wx, Wh)
        dx_rev.append(dx)
        dWx, dWh, db = dWx + gWx, dWh + gWh, db + gb
    return torch.stack(dx_rev[::-1], dim=1), dh, dc, dWx, dWh, db
''',
    r'''
def unroll(tv, X):
    xs = tv['embedding'][X]
    K, b = tv['lstm/kernel'], tv['lstm/bias']
    h = c = xs.new_zeros(X.shape[0], H)
    hs, cs, gs = [], [], []
    for s in range(X.shape[1]):
        zz = torch.cat([xs[:, s], h], 1) @ K + b
        i, f, g, o = zz.split(H, 1)
        i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
        c = f * c + i * g
        h = o * c.tanh()
        hs.append(h), cs.append(c), gs.append(torch.cat([i, f, g, o], 1))
    hs, cs, gs = torch.stack(hs, 1), torch.stack(cs, 1), torch.stack(gs, 1)
    return xs, hs, cs, gs, hs @ tv['softmax_w'] + tv['softmax_b']

def unroll_loss(tv, X, Y):
    lg = unroll(tv, X)[-1]
    return F.cross_entropy(lg.reshape(-1, V), Y.reshape(-1), ignore_index=-1)
''',
    r'''
for v_ in tvars.values():
    v_.requires_grad_(False)
msq = {k: torch.zeros_like(v_) for k, v_ in tvars.items()}
losses = []
for it in range(150):
    xb, yb = minibatch(21, gen)
    xs, hs, cs, gs, lg = unroll(tvars, xb)
    lv = F.cross_entropy(lg.reshape(-1, V), yb.reshape(-1), ignore_index=-1)
    real = (yb >= 0).float()
    dlg = (torch.softmax(lg, -1) - F.one_hot(yb.clamp(min=0), V)) * (real / real.sum())[..., None]
    zero = torch.zeros(len(xb), H)
    Kx, Kh = tvars['lstm/kernel'][:D], tvars['lstm/kernel'][D:]
    dxs, _, _, dKx, dKh, dbias = lstm_backward(dlg @ tvars['softmax_w'].T, xs, zero, zero, hs, cs,
                                               gs, Kx, Kh)
    gv = {'embedding': torch.zeros(V, D).index_add_(0, xb.flatten(), dxs.reshape(-1, D)),
          'lstm/kernel': torch.cat([dKx, dKh]), 'lstm/bias': dbias,
          'softmax_w': hs.reshape(-1, H).T @ dlg.reshape(-1, V), 'softmax_b': dlg.sum((0, 1))}
    for key in tvars:
        msq[key].mul_(0.9).add_(0.1 * gv[key] ** 2)
        tvars[key] -= 3e-3 * gv[key] / (msq[key].sqrt() + 1e-8)
    losses.append(lv.item())
print(losses[0], sum(losses[-15:]) / 15)
''',
]

LSTMT5_FWD = {"logits": "logits", "hs": "outputs", "hs_before": "pre.hs", "hs_after": "post.hs",
              "h": "new_h", "c": "new_c", "o": "og", "f": "fg", "i": "ig", "g": "cand",
              "c_prev": "pre.c", "h_prev": "pre.h", "ai": "zi", "af": "zf", "ag": "zg",
              "ao": "zo", "ifgo": "z", "x_t": "x_t", "Wy": "tvars['softmax_w']",
              "by": "tvars['softmax_b']"}
LSTMT5_GRAD = {"logits": "d.logits", "hs": "d.outputs", "hs_before": "d.pre_hs",
               "hs_after": "d.post_hs", "h": "d.h", "c": "d.c", "o": "d.og", "f": "d.fg",
               "i": "d.ig", "g": "d.cand", "c_prev": "d.c_prev", "h_prev": "d.h_prev",
               "ai": "d.zi", "af": "d.zf", "ag": "d.zg", "ao": "d.zo", "ifgo": "d.z",
               "x_t": "d.x_t", "Wy": "d.softmax_w", "by": "d.softmax_b"}


def _t5_specs():
    steps = [s for s in LSTM_STEPS if s != "step/inputs"]
    specs = where("lstm", steps, fwd=LSTMT5_FWD, grad=LSTMT5_GRAD.__getitem__,
                  first_after={"h": "d.h_from_out = d.outputs[:, t]",
                               "c": "d.c_future = ch.grad[:, :H]"})
    specs = with_firsts(specs, {"h": "d.h_from_out", "c": "d.c_future"})
    # no `state` stack: the state is ch = cat([c, h]), c first
    specs["step/state"] = [sp if len(sp) == 2 else (sp[0], "G(ch)[:, :H]", sp[2])
                           for sp in specs["step/state"]]
    # one kernel for [x, h]: step t's dWx_t and dWh_t are the two halves of dkernel_t
    specs["step/inputs"] = [("d.x_t", "G(x_t)"), ("d.h_prev", "G(pre.h)"),
                            ("d.kernel_t", "G(kernel_t)"), ("d.bias_t", "G(bias_t)")]
    specs["fused/gates"] = [("d.z_fused", "G(z)")]
    return specs


add("lstm_t5_tf1_kernel_ch_state_attrdict_step_order_slip", "lstm", LSTMT5_CELLS, LSTM_ALL,
    wrong=["fused/lstm_step_backward"],
    cascade=["bptt/lstm_backward", "train/lstm"],
    notes="a TF1 learner: own data (even lines train, odd held out), setup's run_lstm on the two "
          "halves of one kernel [D + H, 4H] in a dict tvars under TF-scoped names; step t as "
          "cat([x_t, h_prev]) @ kernel_t, torch.split, the state one tensor ch = cat([c, h]) (c "
          "first, no stack); gradients in an attribute dict d, first branches held, close_enough() "
          "against retained .grad; fused gates by one torch.where slope over a column mask; "
          "lstm_step_backward on the concatenated kernel, lstm_backward over it collecting dx in a "
          "list; own training forward, RMSprop 150 steps, batch 21 (check batch 19). Slip: "
          "dc_prev = dc * f computed before dc is completed through h; lstm_backward and the "
          "training cascade; exercise 1 and the fused gates stay right",
    where=_t5_specs(),
    checkpoint="close_enough('z fused', d.z_fused, z)",
    functions={"bptt/lstm_backward": None, "fused/lstm_step_backward": None},
    train={"cell": "for it in range(150)", "probe": "for key in tvars:", "params": "tvars",
           "grads": "gv", "ref": "lambda Q: unroll_loss(Q, xb, yb)", "losses": "losses"},
    fix=[("    dc_prev = dc * f\n    dc = dc + dh * o * (1 - tc ** 2)\n",
          "    dc = dc + dh * o * (1 - tc ** 2)\n    dc_prev = dc * f\n")])

# ================================================================================================
# CONV T6 (right throughout). A fast.ai student: gradients stored as a `.g` attribute on the
# tensors themselves (`inp.g = out.g @ w.T`, as in "from the foundations"), one small
# `xxx_grad(inp, out, ...)` function per layer. Own data (names read through a generator
# expression, the split by a running counter, every third name held out; contexts of 8 by a
# deque(maxlen=8)). Parameters as globals under own names (E, filt1..3, shift1..3, Wh, bh), each
# convolution written as F.conv1d with symmetric padding=d, dilation=d and the future sliced off
# (`[:, :, :-d]`); activations renamed (e, sig0, pre1 / act1, pre2 / act2, pre3 / act3, feat,
# out). The convolution's backward: the input's gradient by F.conv_transpose1d with the same
# padding and dilation on the gradient padded back to full length, the kernel's gradient as a
# conv1d of the padded input (batch and channels swapped) with the gradient as its kernel, taps
# picked with [::d]; dE by index_put_ with accumulate. test_near() against autograd's .grad.
# Batch 25; then 200 steps of SGD with momentum kept as `p.mom` on each parameter, the forward
# and backward in one fwd_bwd function, batch 50.

CONVT6_CELLS = [
    r'''
from collections import deque
import torch
import torch.nn.functional as F
''',
    r'''
train_ws, valid_ws = [], []
for k, w in enumerate(ln.strip() for ln in open('names.txt')):
    (valid_ws if k % 3 == 2 else train_ws).append(w)
atoi = {c: i for i, c in enumerate('.abcdefghijklmnopqrstuvwxyz')}

def contexts(ws, n=8):
    xs, ys = [], []
    for w in ws:
        window = deque([0] * n, maxlen=n)
        for c in w + '.':
            xs.append(list(window))
            ys.append(atoi[c])
            window.append(atoi[c])
    return torch.tensor(xs), torch.tensor(ys)

x_train, y_train = contexts(train_ws)
x_valid, y_valid = contexts(valid_ws)
x_train.shape, x_valid.shape
''',
    r'''
torch.manual_seed(5150)
nv, ne, nh = 27, 10, 64
def kaiming(c_out, c_in):
    return torch.randn(c_out, c_in, 2) * (5 / 3) / (2 * c_in) ** 0.5
E = torch.randn(nv, ne)
filt1, shift1 = kaiming(nh, ne), 0.1 * torch.randn(nh)
filt2, shift2 = kaiming(nh, nh), 0.1 * torch.randn(nh)
filt3, shift3 = kaiming(nh, nh), 0.1 * torch.randn(nh)
Wh, bh = 0.1 * torch.randn(nh, nv), 0.1 * torch.randn(nv)
params = [E, filt1, shift1, filt2, shift2, filt3, shift3, Wh, bh]
for p_ in params:
    p_.requires_grad_()

def causal_conv(x, w, b, d):
    # pad both sides, then throw away the d outputs that peeked into the future
    return F.conv1d(x, w, b, padding=d, dilation=d)[:, :, :-d]
''',
    r'''
ix = torch.randint(0, len(x_train), (25,))
xb, yb = x_train[ix], y_train[ix]
e = E[xb]
sig0 = e.transpose(1, 2)
pre1 = causal_conv(sig0, filt1, shift1, 1)
act1 = pre1.tanh()
pre2 = causal_conv(act1, filt2, shift2, 2)
act2 = pre2.tanh()
pre3 = causal_conv(act2, filt3, shift3, 4)
act3 = pre3.tanh()
feat = act3[:, :, -1]
out = feat @ Wh + bh
loss = F.cross_entropy(out, yb)
for t_ in [e, sig0, pre1, act1, pre2, act2, pre3, act3, feat, out]:
    t_.retain_grad()
loss.backward()
loss
''',
    md("### backward, fast.ai style: every gradient lives in `.g`"),
    r'''
def xent_grad(out, targ):
    p = out.softmax(-1)
    p[torch.arange(len(targ)), targ] -= 1
    out.g = p / len(targ)

def lin_grad(inp, out, w, b):
    inp.g = out.g @ w.T
    w.g = inp.T @ out.g
    b.g = out.g.sum(0)

def last_grad(inp, out):
    inp.g = torch.zeros_like(inp)
    inp.g[:, :, -1] = out.g

def tanh_grad(inp, out):
    inp.g = out.g * (1 - out ** 2)

def conv_grad(inp, out, w, b, d):
    gy = F.pad(out.g, (0, d))                       # the sliced-off outputs got no gradient
    inp.g = F.conv_transpose1d(gy, w, padding=d, dilation=d)
    xp = F.pad(inp, (d, d))
    w.g = F.conv1d(xp.transpose(0, 1), gy.transpose(0, 1))[:, :, ::d].transpose(0, 1)
    b.g = out.g.sum((0, 2))

def emb_grad(idx, table, inp):
    table.g = torch.zeros_like(table).index_put_((idx,), inp.g, accumulate=True)
''',
    r'''
with torch.no_grad():
    xent_grad(out, yb)
    lin_grad(feat, out, Wh, bh)
    last_grad(act3, feat)
    tanh_grad(pre3, act3)
    conv_grad(act2, pre3, filt3, shift3, 4)
    tanh_grad(pre2, act2)
    conv_grad(act1, pre2, filt2, shift2, 2)
    tanh_grad(pre1, act1)
    conv_grad(sig0, pre1, filt1, shift1, 1)
    e.g = sig0.g.transpose(1, 2)
    emb_grad(xb, E, e)
''',
    r'''
def test_near(a, b, tag=''):
    print(tag, torch.allclose(a, b, rtol=1e-3, atol=1e-6), f"{(a - b).abs().max().item():.1e}")

for tag, t_ in [('out', out), ('feat', feat), ('act3', act3), ('pre3', pre3), ('act2', act2),
                ('pre2', pre2), ('act1', act1), ('pre1', pre1), ('sig0', sig0), ('e', e),
                ('E', E), ('filt1', filt1), ('shift1', shift1), ('filt2', filt2),
                ('shift2', shift2), ('filt3', filt3), ('shift3', shift3), ('Wh', Wh), ('bh', bh)]:
    test_near(t_.g, t_.grad, tag)
''',
    md("### train on my own `.g`"),
    r'''
def fwd_bwd(xb, yb):
    e = E[xb]
    sig0 = e.transpose(1, 2)
    pre1 = causal_conv(sig0, filt1, shift1, 1); act1 = pre1.tanh()
    pre2 = causal_conv(act1, filt2, shift2, 2); act2 = pre2.tanh()
    pre3 = causal_conv(act2, filt3, shift3, 4); act3 = pre3.tanh()
    feat = act3[:, :, -1]
    out = feat @ Wh + bh
    loss = F.cross_entropy(out, yb)
    xent_grad(out, yb)
    lin_grad(feat, out, Wh, bh)
    last_grad(act3, feat)
    tanh_grad(pre3, act3); conv_grad(act2, pre3, filt3, shift3, 4)
    tanh_grad(pre2, act2); conv_grad(act1, pre2, filt2, shift2, 2)
    tanh_grad(pre1, act1); conv_grad(sig0, pre1, filt1, shift1, 1)
    e.g = sig0.g.transpose(1, 2)
    emb_grad(xb, E, e)
    return loss.item()

for p_ in params:
    p_.requires_grad_(False)
    p_.mom = torch.zeros_like(p_)
track = []
for step in range(200):
    ix = torch.randint(0, len(x_train), (50,))
    xb, yb = x_train[ix], y_train[ix]
    track.append(fwd_bwd(xb, yb))
    for q in params:
        q.mom = 0.9 * q.mom + q.g
        q -= 0.02 * q.mom
print(sum(track[:20]) / 20, sum(track[-20:]) / 20)
''',
]

CONVT6_FWD = {"logits": "out", "last": "feat", "h3": "act3", "h3pre": "pre3", "h2": "act2",
              "h2pre": "pre2", "h1": "act1", "h1pre": "pre1", "x": "sig0", "emb": "e", "C": "E",
              "W": "Wh", "b": "bh", "w1": "filt1", "b1": "shift1", "w2": "filt2", "b2": "shift2",
              "w3": "filt3", "b3": "shift3"}
CONVT6_NAMES = ["C", "w1", "b1", "w2", "b2", "w3", "b3", "W", "b"]
CONVT6_P = "{" + ", ".join(f"'{k}': {CONVT6_FWD[k]}" for k in CONVT6_NAMES) + "}"
CONVT6_G = "{" + ", ".join(f"'{k}': {CONVT6_FWD[k]}.g" for k in CONVT6_NAMES) + "}"

add("conv_t6_fastai_dot_g_padded_conv_transpose_momentum", "conv", CONVT6_CELLS, CONV_ALL,
    notes="a fast.ai student: every gradient a .g attribute on its tensor, one xxx_grad(inp, out, "
          "...) function per layer; own data (every third name held out, deque(maxlen=8) "
          "contexts); parameters as globals under own names; each conv F.conv1d with symmetric "
          "padding=d and the future sliced off; backward by conv_transpose1d for the input and a "
          "batch/channel-swapped conv1d for the kernel, taps by [::d]; dE by index_put_ "
          "accumulate; test_near() against .grad; batch 25; SGD with momentum kept as p.mom, 200 "
          "steps of fwd_bwd, batch 50; all right",
    where=where("conv", CONV_STEPS, fwd=CONVT6_FWD, grad=lambda k: CONVT6_FWD[k] + ".g"),
    checkpoint="emb_grad(xb, E, e)",
    train={"cell": "for step in range(200)", "probe": "for q in params:", "params": CONVT6_P,
           "grads": CONVT6_G, "ref": "lambda Q: ref_conv_loss(Q, xb, yb)", "losses": "track"})
