"""Learners' own notebooks for the gpt, lstm and conv lessons, with each step's truth: a seventh
corpus, tune half (the holdout half, notebook_corpus_lessons_holdout7, was written separately and
not read here).

Six notebooks: four for gpt, one for lstm, one for conv, in layouts that the earlier corpora do not
use: a torch.nn model built from nn.Embedding / nn.LayerNorm / nn.Linear read through forward
hooks, activations as [B*T, C] rows with a dict keyed by the forward tensors themselves, a 2-layer
model on functions with a sparse one-hot and per-(batch, head) loops, the forward as a list of
instructions run by an interpreter, an LSTM on one [D + H + 1, 4H] matrix with the bias as its last
row, time-major convolutions with each kernel as two tap matrices, looped and then vectorised. Each
is a learner's own notebook: the lesson's forward pass copied in (renamed and re-laid-out), their
own loading of 'names.txt' (the truth runner points it at data/names.txt), their own seed and init,
the backward pass in a layout matching the forward, their own comparison helper, and where they
train (four of the six), a loop of at most 300 steps on their own gradients and an update of their
own. Architecture sizes are the lessons' [lesson] sizes throughout (gpt_t3 trains two blocks of
them); batch sizes equal no other size of their lesson (gpt 6 / 10, 5, 9 / 12, 3; lstm 20 / 26;
conv 24 / 40).

Layouts:
  gpt_t1   a torch.nn learner: CharGPT(nn.Module) of nn.Embedding (tokens, positions), a Block of
           nn.LayerNorm, an Attn module (nn.Linear qkv / out, a registered boolean tril buffer,
           unflatten heads, its internals kept in self.mem) and nn.Sequential(nn.Linear,
           nn.GELU('tanh'), nn.Linear), a tied head by F.linear; every leaf module's input and
           output captured by register_forward_hook into ins / outs; hand_backward() reads
           .weight / .bias (nn.Linear's [out, in]), parameter gradients keyed by
           named_parameters() names, activation gradients keyed by module name; agree() against
           .grad. Layer norm stays a module, so its atoms do not exist: the seven atom / affine
           steps are not attempted, no first branch is held. SGD with momentum, 150 steps on
           hand_backward.
  gpt_t2   every activation as [B*T, C] rows (positions by Epos.repeat(B, 1)), heads as
           [B*nh, T, hs] through torch.bmm, an upper-triangular boolean mask, parameters as globals
           under own names; gradients in one dict D keyed by the forward tensors themselves
           (D[s2], D[Etok]), written with grad mode switched off globally, first branches held
           (.clone() then +=), the encoder by scatter_add_; gap() against retained .grad.
           Exercise 1, every step.
  gpt_t3   exercises 2 and 3: the seven functions (encoder by a sparse one-hot torch.sparse.mm,
           layer norm through xhat, torch.mm, attention as a double loop over batch and head on
           2-D slices of qkv, GELU's slope through its sigmoid form, torch.eye rows for the
           targets, in-place AdamW), checked by diffcheck() with a random upstream gradient; a
           2-layer model with stacked [L, ...] parameters in a dict under own names, gpt2()
           returning per-layer caches, gpt2_grads() on the functions, checked once against
           autograd; 120 steps of adamw_update.
  gpt_t4   the forward as a program: a list of instructions (op, out, inputs, args) built by
           emit() / layer_norm() / dense() under own names (emb, h0, na.mu, Q, S.m, AVm, up.act,
           nz, scores), run() interpreting it through a table of lambdas into `val`; reverse()
           walks the program backwards, one back_rule per op (index_put_ accumulate for the
           gather, the masked output's isinf for the mask) adding into `adj`, every broadcast
           undone by fold(); no first branch held; off_by() relative errors. Exercise 1, every
           step.
  lstm_t5  one weight matrix W [D + H + 1, 4H] applied to cat([x, h, 1]) (the bias its last row,
           the forget bias added there), sliced for the setup's run_lstm before and after t; step
           t's clone W_t of the whole matrix (its gradient judged whole in step/inputs, with dx_t
           and dh_prev), gates by view(n, 4, H).unbind(1); gradients in a dict dd under short
           keys, first branches held, dWout by einsum; same() with allclose; fused gates by an
           in-place slope; lstm_step_backward on cat([Wx, Wh]), lstm_backward over it; an own
           unroll() forward and SGD with norm clipping, 150 steps.
  conv_t6  sequences time-major [T, B, C]; each convolution's kernel two [in, out] matrices in
           lists old[l] (the tap d steps back) and new[l] (the tap at t) with bias[l], the forward
           a Python loop over positions stacking rows; the backward a loop over positions
           accumulating into da[t] and da[t - d]; gradients in per-layer dicts g_lay[l]; err()
           against retained .grad; then vectorised with a shifted copy, checked against the loops,
           and SGD 150 steps on it.

Slips (each case's "notes" says which): gpt_t2's final layer norm sends the variance's gradient
into xc without the factor 2 (D[cf] += D[vf] * cf / C) (block/lnf_xc wrong; lnf_mean, x2,
x2_residual, fcproj, fch, ln2, ln2_affine, x1, x1_residual, attproj, atty, att, preatt_masked,
preatt, qk, qkv, ln1, ln1_affine, x0, wpe, wte cascade, while logits, lnf, lnf_affine, lnf_rstd
and lnf_var stay right); lstm_t5 copies the input gate's sigmoid slope into the forget gate's line
(dd['af'] = dd['f'] * gi * (1 - gi)) (step/gates wrong; ifgo and inputs cascade, while the fused
exercise, written afresh, lstm_step_backward, lstm_backward and the training stay right). The
other four notebooks are right throughout. No notebook is shared with the earlier corpora.

Written apart from the grader: from the lessons' forward passes, pack.toml's [lesson] / [setup] /
[forward] tables, exercises/conv/forward.py, `backprop-tutor --pack X list / show` and the earlier
corpora's format only, without reading the tutor's code or the steps' solutions, mistakes, hints
or explanations, and without running the grader on these notebooks. Every label was measured by
running the notebook, not judged by eye:

    .venv/bin/python tests/lesson_corpus_truth.py notebook_corpus_lessons_tune7

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
GPTT1_CELLS = [
    md("# GPT block, torch.nn style\nI build the model out of `nn.Embedding`, `nn.LayerNorm`, "
       "`nn.Linear`, `nn.GELU` like I normally would, grab what each module saw with forward "
       "hooks, and write the backward by hand from `.weight` / `.bias`."),
    r'''
import math
import torch
import torch.nn as nn
import torch.nn.functional as F
''',
    r'''
lines = open('names.txt').read().splitlines()
perm = torch.randperm(len(lines), generator=torch.Generator().manual_seed(808)).tolist()
lines = [lines[j] for j in perm]
alphabet = '.' + ''.join(sorted(set(''.join(lines))))
ctoi = {c: i for i, c in enumerate(alphabet)}
CTX = 16

def pack(ws):
    data = torch.zeros(len(ws), CTX + 1, dtype=torch.long)
    for r, w in enumerate(ws):
        ids = torch.tensor([ctoi[c] for c in w + '.'])[:CTX]
        data[r, 1:1 + len(ids)] = ids
    return data[:, :-1], data[:, -1]

cut = int(0.9 * len(lines))
Xtrain, Ytrain = pack(lines[:cut])
Xval, Yval = pack(lines[cut:])
print(Xtrain.shape, len(alphabet))
''',
    r'''
class Attn(nn.Module):
    def __init__(self, d, heads, ctx):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.register_buffer('tri', torch.tril(torch.ones(ctx, ctx, dtype=torch.bool)))
        self.mem = {}

    def forward(self, z):
        B, T, d = z.shape
        hd = d // self.heads
        packed = self.qkv(z)
        qh, kh, vh = (u.unflatten(-1, (self.heads, hd)).transpose(1, 2) for u in packed.split(d, -1))
        sc = qh @ kh.transpose(-1, -2) * hd**-0.5
        sc_m = sc.masked_fill(~self.tri[:T, :T], float('-inf'))
        pr = F.softmax(sc_m, dim=-1)
        mix = pr @ vh
        self.mem = dict(q=qh, k=kh, v=vh, sc=sc, sc_m=sc_m, pr=pr, mix=mix)
        return self.out(mix.transpose(1, 2).reshape(B, T, d))


class Block(nn.Module):
    def __init__(self, d, heads, ctx):
        super().__init__()
        self.norm_a = nn.LayerNorm(d)
        self.attn = Attn(d, heads, ctx)
        self.norm_b = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(approximate='tanh'), nn.Linear(4 * d, d))

    def forward(self, x):
        x = x + self.attn(self.norm_a(x))
        return x + self.mlp(self.norm_b(x))


class CharGPT(nn.Module):
    def __init__(self, vocab, ctx, d, heads):
        super().__init__()
        self.wtok = nn.Embedding(vocab, d)
        self.wpos = nn.Embedding(ctx, d)
        self.blk = Block(d, heads, ctx)
        self.ln_f = nn.LayerNorm(d)

    def forward(self, idx, nxt):
        B, T = idx.shape
        x = self.wtok(idx) + self.wpos(torch.arange(T))
        h = self.ln_f(self.blk(x))
        logits = F.linear(h, self.wtok.weight)   # tied head
        tgt = torch.cat([idx[:, 1:], nxt[:, None]], 1)
        return logits, F.cross_entropy(logits.flatten(0, 1), tgt.flatten())
''',
    r'''
torch.manual_seed(31)
model = CharGPT(len(alphabet), CTX, 32, 4)
with torch.no_grad():
    for name, p in model.named_parameters():
        if name.startswith('w'):
            p.normal_(0, 0.1)
        elif name.endswith('bias'):
            p.normal_(0, 0.1)
        elif 'norm' in name or 'ln_f' in name:
            p.normal_(1, 0.1)

ins, outs = {}, {}
def remember(name):
    def hook(mod, args, out):
        ins[name], outs[name] = args[0], out
    return hook
for name, mod in model.named_modules():
    if name and not list(mod.children()):
        mod.register_forward_hook(remember(name))
sorted(outs)
''',
    r'''
ix = torch.randint(0, len(Xtrain), (6,))
Xb, Yb = Xtrain[ix], Ytrain[ix]
logits, loss = model(Xb, Yb)
for t_ in list(outs.values()) + list(model.blk.attn.mem.values()):
    if t_.requires_grad:
        t_.retain_grad()
logits.retain_grad()
model.zero_grad()
loss.backward()
print(loss.item())
''',
    md("## backward by hand\n`pg[name]` for every `named_parameters()` name, `og[module]` for the "
       "gradient of what a module returned (plus the residual stream, `x0`..`x2`)."),
    r'''
def lin_back(mod, x, dy):
    dx = dy @ mod.weight
    dW = dy.flatten(0, -2).T @ x.flatten(0, -2)
    return dx, dW, dy.flatten(0, -2).sum(0)

def ln_back(mod, x, dy):
    mu = x.mean(-1, keepdim=True)
    var = x.var(-1, keepdim=True, unbiased=False)
    rstd = (var + mod.eps).rsqrt()
    xhat = (x - mu) * rstd
    dxhat = dy * mod.weight
    dx = rstd * (dxhat - dxhat.mean(-1, keepdim=True) - xhat * (dxhat * xhat).mean(-1, keepdim=True))
    return dx, (dy * xhat).sum((0, 1)), dy.sum((0, 1))

def gelu_slope(u):
    k = math.sqrt(2 / math.pi)
    th = torch.tanh(k * (u + 0.044715 * u**3))
    return 0.5 * (1 + th) + 0.5 * u * (1 - th**2) * k * (1 + 3 * 0.044715 * u**2)

@torch.no_grad()
def hand_backward(model, logits, X, Y):
    pg, og = {}, {}
    B, T, V = logits.shape
    blk, at = model.blk, model.blk.attn
    tgt = torch.cat([X[:, 1:], Y[:, None]], 1)
    p = logits.softmax(-1)
    og['logits'] = (p - F.one_hot(tgt, V)) / (B * T)
    og['ln_f'] = og['logits'] @ model.wtok.weight
    head_share = og['logits'].flatten(0, 1).T @ outs['ln_f'].flatten(0, 1)
    og['x2'], pg['ln_f.weight'], pg['ln_f.bias'] = ln_back(model.ln_f, ins['ln_f'], og['ln_f'])
    og['blk.mlp.2'] = og['x2']
    og['blk.mlp.1'], pg['blk.mlp.2.weight'], pg['blk.mlp.2.bias'] = lin_back(
        blk.mlp[2], ins['blk.mlp.2'], og['blk.mlp.2'])
    og['blk.mlp.0'] = og['blk.mlp.1'] * gelu_slope(outs['blk.mlp.0'])
    og['blk.norm_b'], pg['blk.mlp.0.weight'], pg['blk.mlp.0.bias'] = lin_back(
        blk.mlp[0], ins['blk.mlp.0'], og['blk.mlp.0'])
    dx1, pg['blk.norm_b.weight'], pg['blk.norm_b.bias'] = ln_back(
        blk.norm_b, ins['blk.norm_b'], og['blk.norm_b'])
    og['x1'] = og['x2'] + dx1
    og['blk.attn.out'] = og['x1']
    og['flat'], pg['blk.attn.out.weight'], pg['blk.attn.out.bias'] = lin_back(
        at.out, ins['blk.attn.out'], og['blk.attn.out'])
    m = at.mem
    hd = m['q'].shape[-1]
    og['mix'] = og['flat'].unflatten(-1, (at.heads, hd)).transpose(1, 2)
    og['pr'] = og['mix'] @ m['v'].transpose(-1, -2)
    og['v'] = m['pr'].transpose(-1, -2) @ og['mix']
    og['sc_m'] = m['pr'] * (og['pr'] - (og['pr'] * m['pr']).sum(-1, keepdim=True))
    og['sc'] = og['sc_m'].masked_fill(~at.tri[:T, :T], 0.0)
    og['q'] = og['sc'] @ m['k'] * hd**-0.5
    og['k'] = og['sc'].transpose(-1, -2) @ m['q'] * hd**-0.5
    og['blk.attn.qkv'] = torch.cat([og[s].transpose(1, 2).flatten(-2) for s in 'qkv'], -1)
    og['blk.norm_a'], pg['blk.attn.qkv.weight'], pg['blk.attn.qkv.bias'] = lin_back(
        at.qkv, ins['blk.attn.qkv'], og['blk.attn.qkv'])
    dx0, pg['blk.norm_a.weight'], pg['blk.norm_a.bias'] = ln_back(
        blk.norm_a, ins['blk.norm_a'], og['blk.norm_a'])
    og['x0'] = og['x1'] + dx0
    og['wtok'] = og['x0']
    pg['wpos.weight'] = og['x0'].sum(0)
    pg['wtok.weight'] = head_share.index_add(0, X.flatten(), og['wtok'].flatten(0, 1))
    return pg, og

pg, og = hand_backward(model, logits, Xb, Yb)
''',
    r'''
def agree(tag, mine, ref):
    err = (mine - ref).abs().max().item()
    print(f"{tag:24s} {'ok ' if err < 1e-5 else 'BAD'} {err:.1e}")

for name, p in model.named_parameters():
    agree(name, pg[name], p.grad)
for name in ['blk.mlp.0', 'blk.norm_b', 'blk.attn.qkv', 'blk.norm_a', 'wtok']:
    agree(name, og[name], outs[name].grad)
for name in ['pr', 'sc', 'q']:
    agree(name, og[name], model.blk.attn.mem[name].grad)
agree('logits', og['logits'], logits.grad)
''',
    md("## training on my gradients (SGD with momentum)"),
    r'''
vel = {n: torch.zeros_like(p) for n, p in model.named_parameters()}
history = []
for it in range(150):
    ix = torch.randint(0, len(Xtrain), (10,))
    xb, yb = Xtrain[ix], Ytrain[ix]
    with torch.no_grad():
        lg, lv = model(xb, yb)
    grads, _ = hand_backward(model, lg, xb, yb)
    with torch.no_grad():
        for n, p in model.named_parameters():
            vel[n].mul_(0.9).add_(grads[n])
            p.sub_(0.3 * vel[n])
    history.append(lv.item())
print(history[0], sum(history[-15:]) / 15)
''',
]

GPTT1_FWD = {"logits": "logits", "lnf": "outs['ln_f']", "x2": "ins['ln_f']",
             "fcproj": "outs['blk.mlp.2']", "fch_gelu": "outs['blk.mlp.1']",
             "fch": "outs['blk.mlp.0']", "ln2": "outs['blk.norm_b']", "x1": "ins['blk.norm_b']",
             "attproj": "outs['blk.attn.out']", "y": "ins['blk.attn.out']",
             "atty": "model.blk.attn.mem['mix']", "att": "model.blk.attn.mem['pr']",
             "v": "model.blk.attn.mem['v']", "preatt_masked": "model.blk.attn.mem['sc_m']",
             "preatt": "model.blk.attn.mem['sc']", "q": "model.blk.attn.mem['q']",
             "k": "model.blk.attn.mem['k']", "qkv": "outs['blk.attn.qkv']",
             "ln1": "outs['blk.norm_a']", "x0": "ins['blk.norm_a']", "tok": "outs['wtok']",
             "wte": "model.wtok.weight", "wpe": "model.wpos.weight",
             "lnfw": "model.ln_f.weight", "lnfb": "model.ln_f.bias",
             "fcprojw": "model.blk.mlp[2].weight", "fcprojb": "model.blk.mlp[2].bias",
             "fcw": "model.blk.mlp[0].weight", "fcb": "model.blk.mlp[0].bias",
             "ln2w": "model.blk.norm_b.weight", "ln2b": "model.blk.norm_b.bias",
             "attprojw": "model.blk.attn.out.weight", "attprojb": "model.blk.attn.out.bias",
             "qkvw": "model.blk.attn.qkv.weight", "qkvb": "model.blk.attn.qkv.bias"}
GPTT1_GRAD = {"logits": "og['logits']", "lnf": "og['ln_f']", "x2": "og['x2']",
              "fcproj": "og['blk.mlp.2']", "fch_gelu": "og['blk.mlp.1']",
              "fch": "og['blk.mlp.0']", "ln2": "og['blk.norm_b']", "x1": "og['x1']",
              "attproj": "og['blk.attn.out']", "y": "og['flat']",
              "atty": "og['mix']", "att": "og['pr']", "v": "og['v']",
              "preatt_masked": "og['sc_m']", "preatt": "og['sc']", "q": "og['q']",
              "k": "og['k']", "qkv": "og['blk.attn.qkv']", "ln1": "og['blk.norm_a']",
              "x0": "og['x0']", "tok": "og['wtok']", "wte": "pg['wtok.weight']",
              "wpe": "pg['wpos.weight']", "lnfw": "pg['ln_f.weight']", "lnfb": "pg['ln_f.bias']",
              "fcprojw": "pg['blk.mlp.2.weight']", "fcprojb": "pg['blk.mlp.2.bias']",
              "fcw": "pg['blk.mlp.0.weight']", "fcb": "pg['blk.mlp.0.bias']",
              "ln2w": "pg['blk.norm_b.weight']", "ln2b": "pg['blk.norm_b.bias']",
              "attprojw": "pg['blk.attn.out.weight']", "attprojb": "pg['blk.attn.out.bias']",
              "qkvw": "pg['blk.attn.qkv.weight']", "qkvb": "pg['blk.attn.qkv.bias']"}
GPTT1_STEPS = [s for s in GPT_STEPS if s not in (
    "block/lnf_affine", "block/lnf_rstd", "block/lnf_var", "block/lnf_xc", "block/lnf_mean",
    "block/ln2_affine", "block/ln1_affine")]

add("gpt_t1_nn_modules_hooks_named_grads_momentum", "gpt", GPTT1_CELLS,
    GPTT1_STEPS + ["train/gpt"],
    notes="own data (torch.randperm shuffle, rows filled into a zero tensor); a torch.nn model "
          "(CharGPT of nn.Embedding / nn.LayerNorm / nn.Linear / nn.Sequential with "
          "nn.GELU('tanh'), an Attn module keeping its internals in self.mem), tied head by "
          "F.linear; module inputs / outputs captured with forward hooks; hand_backward() reads "
          ".weight / .bias, parameter gradients keyed by named_parameters() names, activation "
          "gradients keyed by module name; no layer-norm atoms exist (the seven atom / affine "
          "steps not attempted), no first branch held; batch 6; SGD with momentum 150 steps "
          "on hand_backward, batch 10; all right",
    where=no_first(where("gpt", GPTT1_STEPS, fwd=GPTT1_FWD, grad=GPTT1_GRAD.__getitem__,
                         first_after=DROP)),
    checkpoint="pg, og = hand_backward(model, logits, Xb, Yb)",
    train={"cell": "for it in range(150)", "probe": "for n, p in model.named_parameters():",
           "params": "dict(model.named_parameters())", "grads": "grads",
           "ref": "lambda Q: torch.func.functional_call(model, Q, (xb, yb))[1]",
           "losses": "history"})

# ================================================================================================
GPTT2_CELLS = [
    md("# transformer block, every position a row\nI keep activations as `[B*T, C]` rows (it's "
       "all matmuls then), heads as `[B*nh, T, hs]` for `torch.bmm`. Gradients go in one dict "
       "`D` keyed by the forward tensor itself: `D[x]` is dloss/dx."),
    r'''
import math
import random
import torch
import torch.nn.functional as F
''',
    r'''
raw = [w.strip() for w in open('names.txt', encoding='utf-8') if w.strip()]
random.Random(1717).shuffle(raw)
held = [w for w in raw if sum(map(ord, w)) % 10 == 0]
fit = [w for w in raw if sum(map(ord, w)) % 10 != 0]
itos = ['.'] + sorted({c for w in raw for c in w})
stoi = {c: i for i, c in enumerate(itos)}
T_, C, nh = 16, 32, 4
hs = C // nh
Vsz = len(itos)

def windows(ws):
    xs, ys = [], []
    for w in ws:
        seq = [0] + [stoi[c] for c in w] + [0]
        seq = seq[:T_ + 1]
        seq += [0] * (T_ + 1 - len(seq))
        xs.append(seq[:-1])
        ys.append(seq[-1])
    return torch.tensor(xs), torch.tensor(ys)

Xfit, Yfit = windows(fit)
Xheld, Yheld = windows(held)
len(fit), len(held)
''',
    r'''
torch.manual_seed(90210)
Etok = (torch.randn(Vsz, C) * 0.1).requires_grad_()
Epos = (torch.randn(T_, C) * 0.1).requires_grad_()
def gain():
    return (1 + 0.1 * torch.randn(C)).requires_grad_()
def shift(k):
    return (0.1 * torch.randn(k)).requires_grad_()
def mat(i, o, s=1.0):
    return (torch.randn(i, o) * s / i**0.5).requires_grad_()
a1_g, a1_b = gain(), shift(C)
Wqkv, bqkv = mat(C, 3 * C), shift(3 * C)
Wo, bo = mat(C, C, 0.5), shift(C)
a2_g, a2_b = gain(), shift(C)
Win, b_in = mat(C, 4 * C), shift(4 * C)
Wout, bout = mat(4 * C, C, 0.5), shift(C)
af_g, af_b = gain(), shift(C)
weights = [Etok, Epos, a1_g, a1_b, Wqkv, bqkv, Wo, bo, a2_g, a2_b, Win, b_in, Wout, bout, af_g, af_b]
sum(p.numel() for p in weights)
''',
    r'''
pick = torch.randint(0, len(Xfit), (5,))
Xb, Yb = Xfit[pick], Yfit[pick]
B, T = Xb.shape
R = B * T
ids = Xb.reshape(-1)
upper = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)

e = Etok[ids]
s0 = e + Epos.repeat(B, 1)
m1 = s0.mean(1, keepdim=True)
c1 = s0 - m1
v1 = c1.pow(2).mean(1, keepdim=True)
r1 = (v1 + 1e-5).pow(-0.5)
n1 = c1 * r1
a1 = n1 * a1_g + a1_b
z = a1 @ Wqkv + bqkv
q_, k_, v_ = z.split(C, 1)
Q = q_.view(B, T, nh, hs).permute(0, 2, 1, 3).reshape(B * nh, T, hs)
K = k_.view(B, T, nh, hs).permute(0, 2, 1, 3).reshape(B * nh, T, hs)
Vh = v_.view(B, T, nh, hs).permute(0, 2, 1, 3).reshape(B * nh, T, hs)
S = torch.bmm(Q, K.transpose(1, 2)) / math.sqrt(hs)
Sm = S.masked_fill(upper, float('-inf'))
A = torch.softmax(Sm, 2)
Oh = torch.bmm(A, Vh)
o_rows = Oh.view(B, nh, T, hs).permute(0, 2, 1, 3).reshape(R, C)
pj = o_rows @ Wo + bo
s1 = s0 + pj
m2 = s1.mean(1, keepdim=True)
c2 = s1 - m2
v2 = c2.pow(2).mean(1, keepdim=True)
r2 = (v2 + 1e-5).pow(-0.5)
n2 = c2 * r2
a2 = n2 * a2_g + a2_b
u = a2 @ Win + b_in
gu = 0.5 * u * (1 + torch.tanh(math.sqrt(2 / math.pi) * (u + 0.044715 * u**3)))
dn = gu @ Wout + bout
s2 = s1 + dn
mf = s2.mean(1, keepdim=True)
cf = s2 - mf
vf = cf.pow(2).mean(1, keepdim=True)
rf = (vf + 1e-5).pow(-0.5)
nf = cf * rf
af = nf * af_g + af_b
lg = af @ Etok.T
tg = torch.cat([Xb[:, 1:], Yb[:, None]], 1).reshape(-1)
loss = F.cross_entropy(lg, tg)
acts = [e, s0, a1, z, Q, K, Vh, S, Sm, A, Oh, o_rows, pj, s1, n2, a2, u, gu, dn, s2, mf, cf, vf, rf, nf, af, lg]
for t_ in acts:
    t_.retain_grad()
loss.backward()
loss.item()
''',
    r'''
def gap(t):
    ref = t.grad
    err = (D[t] - ref).abs().max().item()
    print(tuple(t.shape), f"{err:.2e}", 'ok' if err <= 1e-5 + 1e-4 * ref.abs().max().item() else 'XX')

torch.set_grad_enabled(False)   # everything below is by hand
D = {}
''',
    md("### head and final layer norm"),
    r'''
D[lg] = F.softmax(lg, 1)
D[lg][torch.arange(R), tg] -= 1
D[lg] /= R
D[af] = D[lg] @ Etok
D[Etok] = D[lg].T @ af
D[nf] = D[af] * af_g
D[af_g] = (D[af] * nf).sum(0)
D[af_b] = D[af].sum(0)
D[rf] = (D[nf] * cf).sum(1, keepdim=True)
D[cf] = D[nf] * rf
D[vf] = D[rf] * -0.5 * (vf + 1e-5).pow(-1.5)
D[cf] += D[vf] * cf / C
D[mf] = -D[cf].sum(1, keepdim=True)
D[s2] = D[cf].clone()
D[s2] += D[mf] / C
for t_ in [lg, af, nf, rf, vf, cf, mf, s2]:
    gap(t_)
''',
    md("### MLP and second layer norm"),
    r'''
D[dn] = D[s2]
D[s1] = D[s2].clone()
D[gu] = D[dn] @ Wout.T
D[Wout] = gu.T @ D[dn]
D[bout] = D[dn].sum(0)
kk = math.sqrt(2 / math.pi)
th = torch.tanh(kk * (u + 0.044715 * u**3))
D[u] = D[gu] * (0.5 * (1 + th) + 0.5 * u * (1 - th * th) * kk * (1 + 3 * 0.044715 * u * u))
D[a2] = D[u] @ Win.T
D[Win] = a2.T @ D[u]
D[b_in] = D[u].sum(0)
D[n2] = D[a2] * a2_g
D[a2_g] = (D[a2] * n2).sum(0)
D[a2_b] = D[a2].sum(0)
D[s1] += r2 * (D[n2] - D[n2].mean(1, keepdim=True) - n2 * (D[n2] * n2).mean(1, keepdim=True))
for t_ in [dn, gu, u, a2, n2, s1, Wout, Win]:
    gap(t_)
''',
    md("### attention"),
    r'''
def unheads(t):
    return t.view(B, nh, T, hs).permute(0, 2, 1, 3).reshape(R, C)

D[pj] = D[s1]
D[s0] = D[s1].clone()
D[o_rows] = D[pj] @ Wo.T
D[Wo] = o_rows.T @ D[pj]
D[bo] = D[pj].sum(0)
D[Oh] = D[o_rows].view(B, T, nh, hs).permute(0, 2, 1, 3).reshape(B * nh, T, hs)
D[A] = torch.bmm(D[Oh], Vh.transpose(1, 2))
D[Vh] = torch.bmm(A.transpose(1, 2), D[Oh])
D[Sm] = A * (D[A] - (A * D[A]).sum(2, keepdim=True))
D[S] = D[Sm].masked_fill(upper, 0.0)
D[Q] = torch.bmm(D[S], K) / math.sqrt(hs)
D[K] = torch.bmm(D[S].transpose(1, 2), Q) / math.sqrt(hs)
D[z] = torch.cat([unheads(D[Q]), unheads(D[K]), unheads(D[Vh])], 1)
for t_ in [pj, o_rows, Oh, A, Vh, Sm, S, Q, K, z]:
    gap(t_)
''',
    md("### first layer norm and the embeddings"),
    r'''
D[a1] = D[z] @ Wqkv.T
D[Wqkv] = a1.T @ D[z]
D[bqkv] = D[z].sum(0)
D[n1] = D[a1] * a1_g
D[a1_g] = (D[a1] * n1).sum(0)
D[a1_b] = D[a1].sum(0)
D[s0] += r1 * (D[n1] - D[n1].mean(1, keepdim=True) - n1 * (D[n1] * n1).mean(1, keepdim=True))
D[e] = D[s0]
D[Epos] = D[s0].view(B, T, C).sum(0)
D[Etok].scatter_add_(0, ids[:, None].expand(-1, C), D[e])
for t_ in [a1, s0, e] + weights:
    gap(t_)
torch.set_grad_enabled(True)
''',
]

_T2_F = {"logits": "lg", "lnf": "af", "lnf_norm": "nf", "lnf_rstd": "rf", "lnf_var": "vf",
         "lnf_xc": "cf", "lnf_mean": "mf", "x2": "s2", "fcproj": "dn", "fch_gelu": "gu",
         "fch": "u", "ln2": "a2", "ln2_norm": "n2", "x1": "s1", "attproj": "pj", "y": "o_rows",
         "atty": "Oh", "att": "A", "v": "Vh", "preatt_masked": "Sm", "preatt": "S", "q": "Q",
         "k": "K", "qkv": "z", "ln1": "a1", "ln1_norm": "n1", "x0": "s0", "tok": "e",
         "wte": "Etok", "wpe": "Epos", "lnfw": "af_g", "lnfb": "af_b", "fcprojw": "Wout",
         "fcprojb": "bout", "fcw": "Win", "fcb": "b_in", "ln2w": "a2_g", "ln2b": "a2_b",
         "attprojw": "Wo", "attprojb": "bo", "qkvw": "Wqkv", "qkvb": "bqkv", "ln1w": "a1_g",
         "ln1b": "a1_b"}

add("gpt_t2_position_rows_bmm_tensor_keyed_dict_var_slip", "gpt", GPTT2_CELLS, GPT_STEPS,
    wrong=["block/lnf_xc"],
    cascade=["block/lnf_mean", "block/x2", "block/x2_residual", "block/fcproj", "block/fch",
             "block/ln2", "block/ln2_affine", "block/x1", "block/x1_residual", "block/attproj",
             "block/atty", "block/att", "block/preatt_masked", "block/preatt", "block/qk",
             "block/qkv", "block/ln1", "block/ln1_affine", "block/x0", "block/wpe", "block/wte"],
    notes="own data (Random(1717) shuffle, held-out split by sum of the name's ords mod 10); "
          "parameters as globals under own names; every activation as [B*T, C] rows, position "
          "embeddings by Epos.repeat(B, 1), heads as [B*nh, T, hs] through torch.bmm, an upper "
          "triangular boolean mask; gradients in one dict D keyed by the forward tensors "
          "themselves (D[s2]), first branches held; gap() against retained .grad; batch 5; "
          "exercise 1 only. Slip: the final layer norm's variance branch into xc drops the "
          "factor 2 (D[cf] += D[vf] * cf / C); lnf_mean and everything below cascade",
    where=where("gpt", GPT_STEPS, fwd=_T2_F, grad=lambda k: f"D[{_T2_F[k]}]",
                first_after={"wte": "D[Etok] = D[lg].T @ af", "lnf_xc": "D[cf] = D[nf] * rf",
                             "x2": "D[s2] = D[cf].clone()", "x1": "D[s1] = D[s2].clone()",
                             "x0": "D[s0] = D[s1].clone()"}),
    checkpoint="D[Etok].scatter_add_(0, ids[:, None].expand(-1, C), D[e])",
    fix=[("D[cf] += D[vf] * cf / C", "D[cf] += D[vf] * 2 * cf / C")])

# ================================================================================================
GPTT3_CELLS = [
    md("# llm.c functions, then a 2-layer model on them\nEach function first, checked against "
       "autograd with `diffcheck`; then two stacked blocks trained with my AdamW."),
    r'''
import math
import torch
import torch.nn.functional as F

txt = open('names.txt').read()
names = sorted(set(txt.split()))
g0 = torch.Generator().manual_seed(2024)
names = [names[i] for i in torch.randperm(len(names), generator=g0)]
voc = ['.'] + sorted(set(''.join(names)))
enc = {c: i for i, c in enumerate(voc)}
T, C, NH, L = 16, 32, 4, 2
rows = []
for w in names[:int(0.8 * len(names))]:
    r = ([0] + [enc[c] for c in w] + [0] * (T + 1))[:T + 1]
    rows.append(r)
rows = torch.tensor(rows)
Xs, Ys = rows[:, :T], rows[:, T]
''',
    md("## the functions"),
    r'''
def encoder_backward(dout, inp, vocab_size):
    B, T, C = dout.shape
    n = B * T
    onehot = torch.sparse_coo_tensor(torch.stack([inp.reshape(-1), torch.arange(n)]),
                                     torch.ones(n, dtype=dout.dtype), (vocab_size, n))
    dwte = torch.sparse.mm(onehot, dout.reshape(n, C))
    return dwte, dout.sum(0)


def layernorm_backward(dout, inp, weight, mean, rstd):
    xhat = (inp - mean) * rstd
    g = dout * weight
    N = inp.shape[-1]
    dinp = (N * g - g.sum(-1, keepdim=True) - xhat * (g * xhat).sum(-1, keepdim=True)) * rstd / N
    return dinp, (dout * xhat).flatten(0, -2).sum(0), dout.flatten(0, -2).sum(0)


def matmul_backward(dout, inp, weight):
    d2 = dout.reshape(-1, dout.shape[-1])
    dweight = torch.mm(inp.reshape(-1, inp.shape[-1]).t(), d2)
    return torch.matmul(dout, weight.t()), dweight, d2.sum(0)


def attention_backward(dout, qkv, att, n_head):
    B, T, C3 = qkv.shape
    C = C3 // 3
    hs = C // n_head
    dqkv = torch.zeros_like(qkv)
    for b in range(B):
        for h in range(n_head):
            cq = slice(h * hs, (h + 1) * hs)
            ck = slice(C + h * hs, C + (h + 1) * hs)
            cv = slice(2 * C + h * hs, 2 * C + (h + 1) * hs)
            P = att[b, h]
            dy = dout[b, :, cq]
            dP = dy.mm(qkv[b, :, cv].t())
            dqkv[b, :, cv] = P.t().mm(dy)
            dS = P * (dP - (P * dP).sum(1, keepdim=True)) / math.sqrt(hs)
            dqkv[b, :, cq] = dS.mm(qkv[b, :, ck])
            dqkv[b, :, ck] = dS.t().mm(qkv[b, :, cq])
    return dqkv


def gelu_backward(dout, inp):
    # gelu(x) = x * sigmoid(2a), a = sqrt(2/pi) (x + 0.044715 x^3)
    c = math.sqrt(2 / math.pi)
    s = torch.sigmoid(2 * c * (inp + 0.044715 * inp**3))
    return dout * (s + inp * 2 * s * (1 - s) * c * (1 + 3 * 0.044715 * inp**2))


def crossentropy_softmax_backward(logits, targets):
    N, V = logits.shape
    return (logits.softmax(1) - torch.eye(V, dtype=logits.dtype)[targets]) / N


def adamw_update(param, grad, m, v, t, lr, beta1, beta2, eps, weight_decay):
    m.mul_(beta1).add_(grad, alpha=1 - beta1)
    v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    step = lr * (m / (1 - beta1**t)) / ((v / (1 - beta2**t)).sqrt() + eps)
    param.mul_(1 - lr * weight_decay).sub_(step)
''',
    r'''
def diffcheck(label, f_out, leaves, mine, seed=None):
    up = torch.randn_like(f_out) if seed is None else seed
    refs = torch.autograd.grad(f_out, leaves, up)
    mine = mine(up)
    mine = mine if isinstance(mine, tuple) else (mine,)
    print(label, ['%.1e' % (a - r).abs().max().item() for a, r in zip(mine, refs)])

x = torch.randn(3, 6, 12, requires_grad=True)
w = torch.randn(12, 5, requires_grad=True)
bb = torch.randn(5, requires_grad=True)
diffcheck('matmul', x @ w + bb, [x, w, bb], lambda d: matmul_backward(d, x.detach(), w.detach()))
gw, gb = torch.randn(12, requires_grad=True), torch.randn(12, requires_grad=True)
mu = x.detach().mean(-1, keepdim=True)
rs = (x.detach().var(-1, keepdim=True, unbiased=False) + 1e-5).rsqrt()
ln = (x - x.mean(-1, keepdim=True)) / (x.var(-1, keepdim=True, unbiased=False) + 1e-5).sqrt() * gw + gb
diffcheck('layernorm', ln, [x, gw, gb], lambda d: layernorm_backward(d, x.detach(), gw.detach(), mu, rs))
tab, pp = torch.randn(11, 12, requires_grad=True), torch.randn(6, 12, requires_grad=True)
tk = torch.randint(0, 11, (3, 6))
diffcheck('encoder', tab[tk] + pp, [tab, pp], lambda d: encoder_backward(d, tk, 11))
z = torch.randn(4, 9, requires_grad=True)
diffcheck('gelu', F.gelu(z, approximate='tanh'), [z], lambda d: gelu_backward(d, z.detach()))
lo, tt = torch.randn(10, 7, requires_grad=True), torch.randint(0, 7, (10,))
(dl,) = torch.autograd.grad(F.cross_entropy(lo, tt), lo)
print('xent', (crossentropy_softmax_backward(lo.detach(), tt) - dl).abs().max().item())
qkv_ = torch.randn(2, 6, 36, requires_grad=True)
qh, kh, vh = (u.view(2, 6, 3, 4).transpose(1, 2) for u in qkv_.split(12, -1))
at = ((qh @ kh.transpose(-1, -2)) / 2.0).masked_fill(torch.ones(6, 6).tril() == 0, float('-inf')).softmax(-1)
yy = (at @ vh).transpose(1, 2).reshape(2, 6, 12)
diffcheck('attention', yy, [qkv_], lambda d: attention_backward(d, qkv_.detach(), at.detach(), 3))
''',
    md("## two blocks, stacked parameters, my backward on the functions"),
    r'''
def init_net(seed):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g)
    proj = (2 * L)**-0.5
    return {'tok': 0.1 * r(len(voc), C), 'pos': 0.1 * r(T, C),
            'n1w': 1 + 0.1 * r(L, C), 'n1b': 0.1 * r(L, C),
            'aw': r(L, C, 3 * C) / C**0.5, 'ab': 0.1 * r(L, 3 * C),
            'pw': proj * r(L, C, C) / C**0.5, 'pb': 0.1 * r(L, C),
            'n2w': 1 + 0.1 * r(L, C), 'n2b': 0.1 * r(L, C),
            'uw': r(L, C, 4 * C) / C**0.5, 'ub': 0.1 * r(L, 4 * C),
            'dw': proj * r(L, 4 * C, C) / (4 * C)**0.5, 'db': 0.1 * r(L, C),
            'nfw': 1 + 0.1 * r(C), 'nfb': 0.1 * r(C)}

def norm_fwd(x, w, b):
    mean = x.mean(-1, keepdim=True)
    rstd = ((x - mean).pow(2).mean(-1, keepdim=True) + 1e-5).rsqrt()
    return (x - mean) * rstd * w + b, mean, rstd

def gpt2(net, X, Y):
    B, Tn = X.shape
    hs = C // NH
    keep = []
    x = net['tok'][X] + net['pos'][:Tn]
    for l in range(L):
        s = {'x_in': x}
        s['ln1'], s['m1'], s['r1'] = norm_fwd(x, net['n1w'][l], net['n1b'][l])
        s['qkv'] = s['ln1'] @ net['aw'][l] + net['ab'][l]
        q, k, v = (u.view(B, Tn, NH, hs).transpose(1, 2) for u in s['qkv'].split(C, -1))
        a = (q @ k.transpose(-1, -2) * hs**-0.5).masked_fill(
            torch.ones(Tn, Tn).tril() == 0, float('-inf'))
        s['att'] = a.softmax(-1)
        s['y'] = (s['att'] @ v).transpose(1, 2).reshape(B, Tn, C)
        x = x + s['y'] @ net['pw'][l] + net['pb'][l]
        s['x_mid'] = x
        s['ln2'], s['m2'], s['r2'] = norm_fwd(x, net['n2w'][l], net['n2b'][l])
        s['u'] = s['ln2'] @ net['uw'][l] + net['ub'][l]
        s['gu'] = F.gelu(s['u'], approximate='tanh')
        x = x + s['gu'] @ net['dw'][l] + net['db'][l]
        keep.append(s)
    top = {'x': x}
    top['lnf'], top['m'], top['r'] = norm_fwd(x, net['nfw'], net['nfb'])
    top['logits'] = top['lnf'] @ net['tok'].T
    top['tgt'] = torch.cat([X[:, 1:], Y[:, None]], 1)
    loss = F.cross_entropy(top['logits'].reshape(-1, len(voc)), top['tgt'].reshape(-1))
    return loss, keep, top

def gpt2_grads(net, X, keep, top):
    B, Tn = X.shape
    gr = {k: torch.zeros_like(p) for k, p in net.items()}
    dlog = crossentropy_softmax_backward(top['logits'].reshape(-1, len(voc)),
                                         top['tgt'].reshape(-1)).view(B, Tn, -1)
    dlnf, dtokT, _ = matmul_backward(dlog, top['lnf'], net['tok'].T)
    dx, gr['nfw'], gr['nfb'] = layernorm_backward(dlnf, top['x'], net['nfw'], top['m'], top['r'])
    for l in reversed(range(L)):
        s = keep[l]
        dgu, gr['dw'][l], gr['db'][l] = matmul_backward(dx, s['gu'], net['dw'][l])
        du = gelu_backward(dgu, s['u'])
        dln2, gr['uw'][l], gr['ub'][l] = matmul_backward(du, s['ln2'], net['uw'][l])
        dmid, gr['n2w'][l], gr['n2b'][l] = layernorm_backward(dln2, s['x_mid'], net['n2w'][l],
                                                              s['m2'], s['r2'])
        dx = dx + dmid
        dy, gr['pw'][l], gr['pb'][l] = matmul_backward(dx, s['y'], net['pw'][l])
        dqkv = attention_backward(dy, s['qkv'], s['att'], NH)
        dln1, gr['aw'][l], gr['ab'][l] = matmul_backward(dqkv, s['ln1'], net['aw'][l])
        din, gr['n1w'][l], gr['n1b'][l] = layernorm_backward(dln1, s['x_in'], net['n1w'][l],
                                                             s['m1'], s['r1'])
        dx = dx + din
    dtok, dpos = encoder_backward(dx, X, len(voc))
    gr['tok'] = dtok + dtokT.T
    gr['pos'][:Tn] = dpos
    return gr
''',
    r'''
net = init_net(606)
leaf = {k: p.clone().requires_grad_() for k, p in net.items()}
xb, yb = Xs[:9], Ys[:9]
lv, keep, top = gpt2(leaf, xb, yb)
auto = dict(zip(leaf, torch.autograd.grad(lv, list(leaf.values()))))
with torch.no_grad():
    lv, keep, top = gpt2(net, xb, yb)
    mine = gpt2_grads(net, xb, keep, top)
print({k: '%.0e' % (mine[k] - auto[k]).abs().max().item() for k in net})
''',
    r'''
mo = {k: torch.zeros_like(p) for k, p in net.items()}
ve = {k: torch.zeros_like(p) for k, p in net.items()}
gen = torch.Generator().manual_seed(5)
curve = []
for step in range(1, 121):
    ix = torch.randint(0, len(Xs), (12,), generator=gen)
    xb, yb = Xs[ix], Ys[ix]
    with torch.no_grad():
        lv, keep, top = gpt2(net, xb, yb)
        gr = gpt2_grads(net, xb, keep, top)
        for k in net:
            adamw_update(net[k], gr[k], mo[k], ve[k], step, 4e-3, 0.9, 0.98, 1e-8, 0.01)
    curve.append(lv.item())
print(curve[0], sum(curve[-12:]) / 12)
''',
]

_T3_MAP = {"wte": "tok", "wpe": "pos", "ln1w": "n1w", "ln1b": "n1b", "qkvw": "aw", "qkvb": "ab",
           "attprojw": "pw", "attprojb": "pb", "ln2w": "n2w", "ln2b": "n2b", "fcw": "uw",
           "fcb": "ub", "fcprojw": "dw", "fcprojb": "db", "lnfw": "nfw", "lnfb": "nfb"}

add("gpt_t3_sparse_loops_sigmoid_gelu_two_layer_adamw", "gpt", GPTT3_CELLS,
    GPT_FUNCS + ["train/gpt"],
    notes="exercises 2 and 3 only: own data (set of names, torch.randperm(Generator 2024)); the "
          "seven functions (a sparse one-hot torch.sparse.mm for the encoder, torch.mm, attention "
          "as a double loop over batch and head on 2-D slices of qkv written into a zeros_like, "
          "GELU's slope through its sigmoid form, torch.eye rows for the targets, in-place "
          "AdamW), checked by diffcheck() with a random upstream; a 2-layer model with stacked "
          "[L, ...] parameters in a dict under own names, gpt2() returning per-layer caches, "
          "gpt2_grads() on the functions checked once against autograd on a batch of 9; 120 "
          "steps of adamw_update, batch 12; all right",
    functions={s: None for s in GPT_FUNCS},
    train={"cell": "for step in range(1, 121)", "probe": "for k in net:",
           "params": "{" + ", ".join(f"'{a}': net['{b}']" for a, b in _T3_MAP.items()) + "}",
           "grads": "{" + ", ".join(f"'{a}': gr['{b}']" for a, b in _T3_MAP.items()) + "}",
           "ref": "lambda Q: ref_gpt_loss(Q, xb, yb)", "losses": "curve"})

# ================================================================================================
GPTT4_CELLS = [
    md("# the block as a program\nThe forward is a list of instructions `(op, out, inputs, "
       "args)`; `run()` interprets it into `val`, `reverse()` walks it backwards with one rule per "
       "op into `adj`. Broadcasting is undone in one place, `fold()`."),
    r'''
import math
import torch
import torch.nn.functional as F
''',
    r'''
corpus = open('names.txt').read().splitlines()
gperm = torch.Generator().manual_seed(4)
corpus = [corpus[i] for i in torch.randperm(len(corpus), generator=gperm).tolist()]
sym = ['.'] + sorted(set(''.join(corpus)))
code = {ch: i for i, ch in enumerate(sym)}
NCTX, NE, NHEAD = 16, 32, 4
HS = NE // NHEAD
seqs = torch.zeros(len(corpus), NCTX + 1, dtype=torch.long)
for r, w in enumerate(corpus):
    ids = [code[ch] for ch in w][:NCTX]
    seqs[r, 1:len(ids) + 1] = torch.tensor(ids)
Xall, Yall = seqs[:, :-1], seqs[:, -1]
''',
    r'''
prog = []

def emit(op, out, ins, **args):
    prog.append((op, out, ins, args))
    return out

def layer_norm(tag, src, w, b):
    mu = emit('mean', tag + '.mu', [src])
    xc = emit('sub', tag + '.xc', [src, mu])
    var = emit('sqmean', tag + '.var', [xc])
    rs = emit('rsqrt', tag + '.rs', [var], eps=1e-5)
    nrm = emit('mul', tag + '.n', [xc, rs])
    sc = emit('mul', tag + '.sc', [nrm, w])
    return emit('add', tag, [sc, b])

def dense(tag, src, w, b):
    return emit('add', tag, [emit('matmul', tag + '.raw', [src, w]), b])

emit('gather', 'emb', ['E', 'ids'])
emit('add', 'h0', ['emb', 'Pz'])
layer_norm('na', 'h0', 'na.g', 'na.b')
dense('qkv', 'na', 'Wqkv', 'bqkv')
for j, nm in enumerate(['Q', 'K', 'Vv']):
    emit('heads', nm, ['qkv'], part=j)
emit('matmul_t', 'QK', ['Q', 'K'])
emit('scale', 'S', ['QK'], by=HS**-0.5)
emit('causal', 'S.m', ['S'])
emit('softmax', 'A', ['S.m'])
emit('matmul', 'AV', ['A', 'Vv'])
emit('merge', 'AVm', ['AV'])
dense('proj', 'AVm', 'Wproj', 'bproj')
emit('add', 'h1', ['h0', 'proj'])
layer_norm('nb', 'h1', 'nb.g', 'nb.b')
dense('up', 'nb', 'Wup', 'bup')
emit('gelu', 'up.act', ['up'])
dense('down', 'up.act', 'Wdown', 'bdown')
emit('add', 'h2', ['h1', 'down'])
layer_norm('nz', 'h2', 'nz.g', 'nz.b')
emit('matmul_t', 'scores', ['nz', 'E'])
emit('xent', 'L', ['scores', 'tgt'])
len(prog)
''',
    r'''
GC = math.sqrt(2 / math.pi)

def split_heads(t, j):
    B, T, _ = t.shape
    return t[:, :, j * NE:(j + 1) * NE].view(B, T, NHEAD, HS).transpose(1, 2)

FWD = {
    'gather': lambda a, i, **k: a[i],
    'add': lambda a, b, **k: a + b,
    'sub': lambda a, b, **k: a - b,
    'mul': lambda a, b, **k: a * b,
    'mean': lambda a, **k: a.mean(-1, keepdim=True),
    'sqmean': lambda a, **k: (a * a).mean(-1, keepdim=True),
    'rsqrt': lambda a, eps, **k: (a + eps)**-0.5,
    'matmul': lambda a, b, **k: a @ b,
    'matmul_t': lambda a, b, **k: a @ b.transpose(-2, -1),
    'scale': lambda a, by, **k: a * by,
    'heads': lambda a, part, **k: split_heads(a, part),
    'causal': lambda a, **k: a.masked_fill(torch.ones(a.shape[-2:]).tril() == 0, float('-inf')),
    'softmax': lambda a, **k: F.softmax(a, dim=-1),
    'merge': lambda a, **k: a.transpose(1, 2).contiguous().view(a.shape[0], a.shape[2], NE),
    'gelu': lambda a, **k: 0.5 * a * (1 + torch.tanh(GC * (a + 0.044715 * a**3))),
    'xent': lambda a, t, **k: F.cross_entropy(a.view(-1, a.shape[-1]), t.view(-1)),
}

def run(val):
    for op, out, ins, args in prog:
        val[out] = FWD[op](*[val[n] for n in ins], **args)
    return val
''',
    r'''
torch.manual_seed(4242)
prm = {'E': 0.1 * torch.randn(len(sym), NE), 'Pz': 0.1 * torch.randn(NCTX, NE)}
for ln_ in ['na', 'nb', 'nz']:
    prm[ln_ + '.g'] = 1 + 0.1 * torch.randn(NE)
    prm[ln_ + '.b'] = 0.1 * torch.randn(NE)
for w, b, i, o, s in [('Wqkv', 'bqkv', NE, 3 * NE, 1.0), ('Wproj', 'bproj', NE, NE, 0.5),
                      ('Wup', 'bup', NE, 4 * NE, 1.0), ('Wdown', 'bdown', 4 * NE, NE, 0.5)]:
    prm[w] = torch.randn(i, o) * s / i**0.5
    prm[b] = 0.1 * torch.randn(o)
for p in prm.values():
    p.requires_grad_()

rows = torch.randint(0, len(Xall), (3,))
Xb, Yb = Xall[rows], Yall[rows]
val = dict(prm, ids=Xb, tgt=torch.cat([Xb[:, 1:], Yb[:, None]], 1))
run(val)
loss = val['L']
for k in val:
    if k not in prm and val[k].requires_grad:
        val[k].retain_grad()
loss.backward()
loss.item()
''',
    md("one rule per op: given the output's gradient `g` and the node, add into the inputs"),
    r'''
def fold(g, shape):
    while g.dim() > len(shape):
        g = g.sum(0)
    for d, s in enumerate(shape):
        if s == 1 and g.shape[d] != 1:
            g = g.sum(d, keepdim=True)
    return g

def unheads(g, part, shape):
    B, T, _ = shape
    full = torch.zeros(shape)
    full[:, :, part * NE:(part + 1) * NE] = g.transpose(1, 2).reshape(B, T, NE)
    return full

def back_rule(op, g, ins, out, args):
    a = [val[n] for n in ins]
    y = val[out]
    if op == 'gather':
        return [torch.zeros_like(a[0]).index_put_((a[1],), g, accumulate=True), None]
    if op == 'add':
        return [g, g]
    if op == 'sub':
        return [g, -g]
    if op == 'mul':
        return [g * a[1], g * a[0]]
    if op == 'mean':
        return [g.expand_as(a[0]) / a[0].shape[-1]]
    if op == 'sqmean':
        return [g * 2 * a[0] / a[0].shape[-1]]
    if op == 'rsqrt':
        return [-0.5 * g * (a[0] + args['eps'])**-1.5]
    if op == 'matmul':
        return [g @ a[1].transpose(-2, -1), a[0].transpose(-2, -1) @ g]
    if op == 'matmul_t':
        return [g @ a[1], g.transpose(-2, -1) @ a[0]]
    if op == 'scale':
        return [g * args['by']]
    if op == 'heads':
        return [unheads(g, args['part'], a[0].shape)]
    if op == 'causal':
        return [g.masked_fill(torch.isinf(y), 0.0)]
    if op == 'softmax':
        return [y * (g - (g * y).sum(-1, keepdim=True))]
    if op == 'merge':
        return [g.view(a[0].shape[0], a[0].shape[2], NHEAD, HS).transpose(1, 2)]
    if op == 'gelu':
        x = a[0]
        th = torch.tanh(GC * (x + 0.044715 * x**3))
        return [g * (0.5 * (1 + th) + 0.5 * x * (1 - th**2) * GC * (1 + 0.134145 * x**2))]
    if op == 'xent':
        p = F.softmax(a[0], -1)
        return [g * (p - F.one_hot(a[1], p.shape[-1])) / a[1].numel(), None]
    raise KeyError(op)

@torch.no_grad()
def reverse(adj):
    adj['L'] = torch.ones(())
    for op, out, ins, args in reversed(prog):
        if out not in adj:
            continue
        for name, gi in zip(ins, back_rule(op, adj[out], ins, out, args)):
            if gi is None:
                continue
            gi = fold(gi, val[name].shape)
            adj[name] = adj[name] + gi if name in adj else gi
    return adj

adj = reverse({})
''',
    r'''
def off_by(name):
    ref = val[name].grad
    return ((adj[name] - ref).abs().max() / ref.abs().max()).item()

report = {k: off_by(k) for k in val if k in adj and val[k].grad is not None}
worst = max(report, key=report.get)
print(len(report), 'tensors checked; worst', worst, report[worst])
''',
]

_T4_F = {"logits": "scores", "lnf": "nz", "lnf_norm": "nz.n", "lnf_rstd": "nz.rs",
         "lnf_var": "nz.var", "lnf_xc": "nz.xc", "lnf_mean": "nz.mu", "x2": "h2",
         "fcproj": "down", "fch_gelu": "up.act", "fch": "up", "ln2": "nb", "ln2_norm": "nb.n",
         "x1": "h1", "attproj": "proj", "y": "AVm", "atty": "AV", "att": "A", "v": "Vv",
         "preatt_masked": "S.m", "preatt": "S", "q": "Q", "k": "K", "qkv": "qkv", "ln1": "na",
         "ln1_norm": "na.n", "x0": "h0", "tok": "emb", "wte": "E", "wpe": "Pz",
         "lnfw": "nz.g", "lnfb": "nz.b", "fcprojw": "Wdown", "fcprojb": "bdown", "fcw": "Wup",
         "fcb": "bup", "ln2w": "nb.g", "ln2b": "nb.b", "attprojw": "Wproj",
         "attprojb": "bproj", "qkvw": "Wqkv", "qkvb": "bqkv", "ln1w": "na.g", "ln1b": "na.b"}

add("gpt_t4_instruction_list_interpreter_fold", "gpt", GPTT4_CELLS, GPT_STEPS,
    notes="own data (torch.randperm(Generator 4) shuffle, rows filled into a zero tensor); the "
          "forward as a list of instructions (op, out, inputs, args) built by emit() / "
          "layer_norm() / dense() under own names (emb, h0, na.mu, Q, S.m, AVm, up.act, nz, "
          "scores, ...), run() interpreting it through a table of lambdas into `val`; reverse() "
          "walks the program backwards with one back_rule per op (index_put_ accumulate for the "
          "gather, isinf of the masked output for the mask) into `adj`, every broadcast undone "
          "by fold(); no first branch held; off_by() relative errors against retained .grad; "
          "batch 3; exercise 1 only; all right",
    where=no_first(where("gpt", GPT_STEPS, fwd={k: f"val['{v}']" for k, v in _T4_F.items()},
                         grad=lambda k: f"adj['{_T4_F[k]}']", first_after=DROP)),
    checkpoint="adj = reverse({})")

# ================================================================================================
LSTMT5_CELLS = [
    md("# LSTM, one weight matrix\nI fold everything into one matrix `W` of shape `[D + H + 1, 4H]` "
       "applied to `cat([x, h, 1])` (the last row is the bias), gates i, f, g, o."),
    r'''
import torch
import torch.nn.functional as F
from collections import namedtuple
''',
    r'''
ws = open('names.txt').read().split()
gsh = torch.Generator().manual_seed(99)
ws = [ws[i] for i in torch.randperm(len(ws), generator=gsh)]
letters = '.' + ''.join(sorted(set(''.join(ws))))
idx_of = {ch: i for i, ch in enumerate(letters)}
V = len(letters)
span = max(len(w) for w in ws) + 1
Xall = torch.zeros(len(ws), span, dtype=torch.long)
Yall = torch.full((len(ws), span), -1, dtype=torch.long)
for r, w in enumerate(ws):
    ids = torch.tensor([idx_of[ch] for ch in w])
    Xall[r, 1:len(w) + 1] = ids
    Yall[r, :len(w)] = ids
    Yall[r, len(w)] = 0
ntr = int(0.8 * len(ws))

def batch_of(n, gen):
    ix = torch.randint(0, ntr, (n,), generator=gen)
    xb, yb = Xall[ix], Yall[ix]
    L = int((yb >= 0).sum(1).max())
    return xb[:, :L].contiguous(), yb[:, :L].contiguous()
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
gw = torch.Generator().manual_seed(7)
W0 = torch.cat([torch.randn(D, 4 * H, generator=gw) / D**0.5,
                torch.randn(H, 4 * H, generator=gw) / H**0.5,
                0.1 * torch.randn(1, 4 * H, generator=gw)])
W0[-1, H:2 * H] += 1.0   # forget bias
theta = {'E': torch.randn(V, D, generator=gw), 'W': W0,
         'Wout': torch.randn(H, V, generator=gw) / H**0.5, 'bout': 0.1 * torch.randn(V, generator=gw)}
for p in theta.values():
    p.requires_grad_(True)
''',
    r'''
Xb, Yb = batch_of(20, gw)
n, tt = Xb.shape[0], 3
W = theta['W']
emb = theta['E'][Xb]
zero = emb.new_zeros(n, H)
early = run_lstm(emb[:, :tt], zero, zero, W[:D], W[D:D + H], W[D + H])
x_t = emb[:, tt]
W_t = W.clone()
xh1 = torch.cat([x_t, early.h, torch.ones(n, 1)], 1)
ifgo = xh1 @ W_t
ai, af, ag, ao = ifgo.view(n, 4, H).unbind(1)
gi, gf, go = ai.sigmoid(), af.sigmoid(), ao.sigmoid()
gg = ag.tanh()
c_t = gf * early.c + gi * gg
h_t = go * c_t.tanh()
st = torch.stack([h_t, c_t])
late = run_lstm(emb[:, tt + 1:], st[0], st[1], W[:D], W[D:D + H], W[D + H])
hs = torch.cat([early.hs, h_t[:, None], late.hs], 1)
logits = hs @ theta['Wout'] + theta['bout']
loss = F.cross_entropy(logits.view(-1, V), Yb.view(-1), ignore_index=-1)
for t_ in [logits, hs, h_t, c_t, st, gi, gf, gg, go, ai, af, ag, ao, ifgo, x_t, W_t, early.hs,
           early.h, early.c, late.hs]:
    t_.retain_grad()
loss.backward()
print(loss.item(), Xb.shape)
''',
    r'''
def same(label, mine, t_):
    ok = torch.allclose(mine, t_.grad, rtol=1e-4, atol=1e-6)
    print(f"{label:7s}", 'same' if ok else 'DIFFERENT', f"{(mine - t_.grad).abs().max().item():.1e}")

dd = {}
live = (Yb >= 0).float()
dd['logits'] = (logits.detach().softmax(-1) - F.one_hot(Yb.clamp(min=0), V)) * (live / live.sum())[..., None]
dd['hs'] = dd['logits'] @ theta['Wout'].detach().T
dd['Wout'] = torch.einsum('ntv,nth->hv', dd['logits'], hs.detach())
dd['bout'] = dd['logits'].sum((0, 1))
same('logits', dd['logits'], logits); same('hs', dd['hs'], hs)
''',
    r'''
dd['hs_early'], dd['hs_late'] = dd['hs'][:, :tt], dd['hs'][:, tt + 1:]
dd['h'] = dd['hs'][:, tt].clone()
''',
    r'''
dd['h'] += st.grad[0]
dd['c'] = st.grad[1].clone()
''',
    r'''
with torch.no_grad():
    th_c = c_t.tanh()
    dd['o'] = dd['h'] * th_c
    dd['c'] += dd['h'] * go * (1 - th_c**2)
    dd['f'] = dd['c'] * early.c
    dd['c_prev'] = dd['c'] * gf
    dd['i'] = dd['c'] * gg
    dd['g'] = dd['c'] * gi
same('c', dd['c'], c_t); same('c_prev', dd['c_prev'], early.c)
''',
    r'''
with torch.no_grad():
    dd['ai'] = dd['i'] * gi * (1 - gi)
    dd['af'] = dd['f'] * gi * (1 - gi)
    dd['ao'] = dd['o'] * go * (1 - go)
    dd['ag'] = dd['g'] * (1 - gg**2)
    dd['ifgo'] = torch.stack([dd['ai'], dd['af'], dd['ag'], dd['ao']], 1).view(n, 4 * H)
    dxh1 = dd['ifgo'] @ W_t.T
    dd['x_t'], dd['h_prev'] = dxh1[:, :D], dxh1[:, D:D + H]
    dd['W_t'] = xh1.T @ dd['ifgo']
for k, t_ in [('ai', ai), ('af', af), ('ag', ag), ('ao', ao), ('ifgo', ifgo), ('x_t', x_t),
              ('h_prev', early.h), ('W_t', W_t)]:
    same(k, dd[k], t_)
''',
    md("## fused: the gates in one go"),
    r'''
with torch.no_grad():
    gates = torch.cat([gi, gf, gg, go], 1)
    slope = gates * (1 - gates)
    slope[:, 2 * H:3 * H] = 1 - gg**2
    d_ifgo_fused = torch.cat([dd['i'], dd['f'], dd['g'], dd['o']], 1) * slope
same('fused', d_ifgo_fused, ifgo)
''',
    r'''
def lstm_step_backward(dh, dc, x, h_prev, c_prev, c, gates, Wx, Wh):
    Hn = Wh.shape[0]
    i, f, g, o = gates.split(Hn, 1)
    tc = c.tanh()
    dc = dc + dh * o * (1 - tc * tc)
    sl = gates * (1 - gates)
    sl[:, 2 * Hn:3 * Hn] = 1 - g * g
    d = torch.cat([dc * g, dc * c_prev, dc * i, dh * tc], 1) * sl
    Wcat = torch.cat([Wx, Wh])
    dxh = d @ Wcat.T
    dW = torch.cat([x, h_prev], 1).T @ d
    nx = x.shape[1]
    return dxh[:, :nx], dxh[:, nx:], dc * f, dW[:nx], dW[nx:], d.sum(0)


def lstm_backward(dhs, xs, h0, c0, hs, cs, gates, Wx, Wh):
    T = xs.shape[1]
    dxs = torch.zeros_like(xs)
    dWx, dWh = torch.zeros_like(Wx), torch.zeros_like(Wh)
    db = torch.zeros(Wx.shape[1])
    dh, dc = torch.zeros_like(h0), torch.zeros_like(c0)
    for s in range(T - 1, -1, -1):
        hp = h0 if s == 0 else hs[:, s - 1]
        cp = c0 if s == 0 else cs[:, s - 1]
        dx, dh, dc, a, b_, c_ = lstm_step_backward(dhs[:, s] + dh, dc, xs[:, s], hp, cp,
                                                   cs[:, s], gates[:, s], Wx, Wh)
        dxs[:, s] = dx
        dWx += a
        dWh += b_
        db += c_
    return dxs, dh, dc, dWx, dWh, db
''',
    md("## training with my BPTT"),
    r'''
def unroll(P, X):
    nb, T = X.shape
    xs = P['E'][X]
    h = c = xs.new_zeros(nb, H)
    ones = xs.new_ones(nb, 1)
    hl, cl, gl = [], [], []
    for s in range(T):
        z = torch.cat([xs[:, s], h, ones], 1) @ P['W']
        gt = torch.cat([z[:, :2 * H].sigmoid(), z[:, 2 * H:3 * H].tanh(), z[:, 3 * H:].sigmoid()], 1)
        c = gt[:, H:2 * H] * c + gt[:, :H] * gt[:, 2 * H:3 * H]
        h = gt[:, 3 * H:] * c.tanh()
        hl.append(h), cl.append(c), gl.append(gt)
    hs_ = torch.stack(hl, 1)
    return xs, hs_, torch.stack(cl, 1), torch.stack(gl, 1), hs_ @ P['Wout'] + P['bout']

def seq_loss(P, X, Y):
    return F.cross_entropy(unroll(P, X)[-1].reshape(-1, V), Y.reshape(-1), ignore_index=-1)
''',
    r'''
for p in theta.values():
    p.requires_grad_(False)
losses = []
for it in range(150):
    xb, yb = batch_of(26, gw)
    xs, hs_, cs_, gates_, lg = unroll(theta, xb)
    losses.append(F.cross_entropy(lg.reshape(-1, V), yb.reshape(-1), ignore_index=-1).item())
    ok = (yb >= 0).float()
    dlg = (lg.softmax(-1) - F.one_hot(yb.clamp(min=0), V)) * (ok / ok.sum())[..., None]
    z0 = torch.zeros(len(xb), H)
    dxs, _, _, dWx, dWh, db = lstm_backward(dlg @ theta['Wout'].T, xs, z0, z0, hs_, cs_, gates_,
                                            theta['W'][:D], theta['W'][D:D + H])
    grads = {'E': torch.zeros_like(theta['E']).index_add_(0, xb.flatten(), dxs.flatten(0, 1)),
             'W': torch.cat([dWx, dWh, db[None]]),
             'Wout': hs_.flatten(0, 1).T @ dlg.flatten(0, 1), 'bout': dlg.sum((0, 1))}
    norm = torch.sqrt(sum((g_ * g_).sum() for g_ in grads.values()))
    scale = min(1.0, 5.0 / norm.item())
    for k in theta:
        theta[k] -= 0.8 * scale * grads[k]
print(losses[0], sum(losses[-15:]) / 15)
''',
]

_L5_F = {"logits": "logits", "hs": "hs", "Wy": "theta['Wout']", "by": "theta['bout']",
         "hs_before": "early.hs", "hs_after": "late.hs", "h": "h_t", "c": "c_t", "state": "st",
         "o": "go", "f": "gf", "i": "gi", "g": "gg", "c_prev": "early.c", "ai": "ai", "af": "af",
         "ag": "ag", "ao": "ao", "ifgo": "ifgo", "t": "tt"}
_L5_G = {"logits": "dd['logits']", "hs": "dd['hs']", "Wy": "dd['Wout']", "by": "dd['bout']",
         "hs_before": "dd['hs_early']", "hs_after": "dd['hs_late']", "h": "dd['h']",
         "c": "dd['c']", "o": "dd['o']", "f": "dd['f']", "i": "dd['i']", "g": "dd['g']",
         "c_prev": "dd['c_prev']", "ai": "dd['ai']", "af": "dd['af']", "ag": "dd['ag']",
         "ao": "dd['ao']", "ifgo": "dd['ifgo']"}


def _l5_specs():
    steps = [s for s in LSTM_STEPS if s != "step/inputs"]
    specs = where("lstm", steps, fwd=_L5_F, grad=_L5_G.__getitem__,
                  first_after={"h": "dd['h'] = dd['hs'][:, tt].clone()",
                               "c": "dd['c'] = st.grad[1].clone()"})
    # one matrix for Wx_t, Wh_t and b_t: its gradient is judged whole
    specs["step/inputs"] = [("dd['x_t']", "G(x_t)"), ("dd['h_prev']", "G(early.h)"),
                            ("dd['W_t']", "G(W_t)")]
    specs["fused/gates"] = [("d_ifgo_fused", "G(ifgo)")]
    return specs


add("lstm_t5_one_matrix_bias_row_forget_copy_slip", "lstm", LSTMT5_CELLS, LSTM_ALL,
    wrong=["step/gates"], cascade=["step/ifgo", "step/inputs"],
    notes="own data (randperm(Generator 99), rows filled into zero / -1 tensors); one weight "
          "matrix W [D + H + 1, 4H] on cat([x, h, 1]) (the bias its last row), sliced for the "
          "setup's run_lstm before and after t; step t's W_t a clone of the whole matrix (its "
          "gradient judged whole for step/inputs), gates by view(n, 4, H).unbind(1); gradients in "
          "a dict dd under short keys, first branches held, dWout by einsum; same() with "
          "allclose against retained .grad; batch 20; fused gates by an in-place slope; "
          "lstm_step_backward on cat([Wx, Wh]), lstm_backward over it; an own unroll() forward, "
          "SGD with norm clipping 150 steps, batch 26. Slip: the forget gate's sigmoid slope "
          "copied from the input gate's line (dd['af'] = dd['f'] * gi * (1 - gi)); ifgo and "
          "inputs cascade, the fused exercise (written afresh) stays right",
    where=_l5_specs(),
    checkpoint="same('fused', d_ifgo_fused, ifgo)",
    functions={"bptt/lstm_backward": None, "fused/lstm_step_backward": None},
    train={"cell": "for it in range(150)", "probe": "for k in theta:", "params": "theta",
           "grads": "grads", "ref": "lambda Q: seq_loss(Q, xb, yb)", "losses": "losses"},
    fix=[("dd['af'] = dd['f'] * gi * (1 - gi)", "dd['af'] = dd['f'] * gf * (1 - gf)")])

# ================================================================================================
CONVT6_CELLS = [
    md("# dilated causal convs, time-major\nI keep sequences as `[T, B, C]` and write each "
       "convolution as what it is: at every position, the current input times one matrix plus "
       "the input `d` steps back times another. Loops first, vectorised once it checks out."),
    r'''
import torch
import torch.nn.functional as F
''',
    r'''
names = open('names.txt').read().splitlines()
gd = torch.Generator().manual_seed(123)
names = [names[i] for i in torch.randperm(len(names), generator=gd)]
abc = 'abcdefghijklmnopqrstuvwxyz'
num = {ch: i + 1 for i, ch in enumerate(abc)}
WIN = 8
ctx, nxt = [], []
for nm in names[:int(0.8 * len(names))]:
    window = [0] * WIN
    for ch in nm + '.':
        k = num.get(ch, 0)
        ctx.append(list(window))
        nxt.append(k)
        window = window[1:] + [k]
ctx, nxt = torch.tensor(ctx), torch.tensor(nxt)
ctx.shape
''',
    r'''
NE, NH, NV = 10, 64, 27
gp = torch.Generator().manual_seed(2718)
def rnd(*s):
    return torch.randn(*s, generator=gp)
E = rnd(NV, NE)
fan = [NE, NH, NH]
old = [rnd(fan[l], NH) * (5 / 3) / (2 * fan[l])**0.5 for l in range(3)]   # tap d steps back
new = [rnd(fan[l], NH) * (5 / 3) / (2 * fan[l])**0.5 for l in range(3)]   # tap at t
bias = [0.1 * rnd(NH) for l in range(3)]
Wo, bo = 0.1 * rnd(NH, NV), 0.1 * rnd(NV)
params = [E, *old, *new, *bias, Wo, bo]
pnames = ['E', 'old0', 'old1', 'old2', 'new0', 'new1', 'new2', 'bias0', 'bias1', 'bias2', 'Wo', 'bo']
for p in params:
    p.requires_grad_()
DIL = [1, 2, 4]
''',
    r'''
def causal_layer(a, Wold, Wnew, b, d):
    rows = []
    for t in range(a.shape[0]):
        r = a[t] @ Wnew + b
        if t >= d:
            r = r + a[t - d] @ Wold
        rows.append(r)
    return torch.stack(rows)

pick = torch.randint(0, len(ctx), (24,), generator=gd)
Xb, Yb = ctx[pick], nxt[pick]
emb = E[Xb]
x = emb.transpose(0, 1)
p1 = causal_layer(x, old[0], new[0], bias[0], DIL[0])
a1 = torch.tanh(p1)
p2 = causal_layer(a1, old[1], new[1], bias[1], DIL[1])
a2 = torch.tanh(p2)
p3 = causal_layer(a2, old[2], new[2], bias[2], DIL[2])
a3 = torch.tanh(p3)
fin = a3[-1]
out = fin @ Wo + bo
loss = F.cross_entropy(out, Yb)
for t_ in [emb, x, p1, a1, p2, a2, p3, a3, fin, out]:
    t_.retain_grad()
loss.backward()
loss.item()
''',
    r'''
def err(mine, t_):
    return f"{(mine - t_.grad).abs().max().item():.1e}"

def causal_layer_back(a, Wold, Wnew, dp, d):
    da = torch.zeros_like(a)
    dWold, dWnew = torch.zeros_like(Wold), torch.zeros_like(Wnew)
    for t in range(a.shape[0]):
        da[t] += dp[t] @ Wnew.T
        dWnew += a[t].T @ dp[t]
        if t >= d:
            da[t - d] += dp[t] @ Wold.T
            dWold += a[t - d].T @ dp[t]
    return da, dWold, dWnew, dp.sum((0, 1))
''',
    r'''
with torch.no_grad():
    g_out = F.softmax(out, 1)
    g_out[torch.arange(len(Yb)), Yb] -= 1
    g_out /= len(Yb)
    g_fin = g_out @ Wo.T
    g_Wo = fin.T @ g_out
    g_bo = g_out.sum(0)
    g_lay = [dict(), dict(), dict()]
    g_lay[2]['act'] = torch.zeros_like(a3)
    g_lay[2]['act'][-1] = g_fin
print(err(g_out, out), err(g_fin, fin), err(g_Wo, Wo), err(g_bo, bo))
''',
    r'''
acts, pres, ins_ = [a1, a2, a3], [p1, p2, p3], [x, a1, a2]
with torch.no_grad():
    for l in (2, 1, 0):
        gl = g_lay[l]
        gl['pre'] = gl['act'] * (1 - acts[l]**2)
        da, gl['old'], gl['new'], gl['bias'] = causal_layer_back(ins_[l], old[l], new[l], gl['pre'], DIL[l])
        if l > 0:
            g_lay[l - 1]['act'] = da
        else:
            g_x = da
    g_emb = g_x.transpose(0, 1)
    g_E = torch.zeros_like(E)
    g_E.index_add_(0, Xb.flatten(), g_emb.reshape(-1, NE))
for l in range(3):
    print(l, err(g_lay[l]['act'], acts[l]), err(g_lay[l]['pre'], pres[l]), err(g_lay[l]['old'], old[l]),
          err(g_lay[l]['new'], new[l]), err(g_lay[l]['bias'], bias[l]))
print(err(g_x, x), err(g_emb, emb), err(g_E, E))
''',
    md("## vectorised, then train"),
    r'''
def fast_layer(a, Wold, Wnew, b, d):
    prev = torch.cat([torch.zeros_like(a[:d]), a[:-d]])
    return prev @ Wold + a @ Wnew + b

def fast_layer_back(a, Wold, Wnew, dp, d):
    prev = torch.cat([torch.zeros_like(a[:d]), a[:-d]])
    dprev = dp @ Wold.T
    da = dp @ Wnew.T
    da[:-d] += dprev[d:]
    return (da, prev.flatten(0, 1).T @ dp.flatten(0, 1), a.flatten(0, 1).T @ dp.flatten(0, 1),
            dp.sum((0, 1)))

with torch.no_grad():
    print((fast_layer(a1, old[1], new[1], bias[1], 2) - p2).abs().max().item())
    slow = causal_layer_back(a1, old[1], new[1], g_lay[1]['pre'], 2)
    quick = fast_layer_back(a1, old[1], new[1], g_lay[1]['pre'], 2)
    print([(s - q).abs().max().item() for s, q in zip(slow, quick)])
''',
    r'''
def forward_all(P, X, Y):
    h = P['E'][X].transpose(0, 1)
    for l in range(3):
        h = torch.tanh(fast_layer(h, P[f'old{l}'], P[f'new{l}'], P[f'bias{l}'], DIL[l]))
    return F.cross_entropy(h[-1] @ P['Wo'] + P['bo'], Y)

def backward_all(P, X, Y):
    hs = [P['E'][X].transpose(0, 1)]
    for l in range(3):
        hs.append(torch.tanh(fast_layer(hs[-1], P[f'old{l}'], P[f'new{l}'], P[f'bias{l}'], DIL[l])))
    lg = hs[-1][-1] @ P['Wo'] + P['bo']
    gr = {}
    dlg = (lg.softmax(1) - F.one_hot(Y, NV)) / len(Y)
    gr['Wo'], gr['bo'] = hs[-1][-1].T @ dlg, dlg.sum(0)
    dh = torch.zeros_like(hs[-1])
    dh[-1] = dlg @ P['Wo'].T
    for l in (2, 1, 0):
        dp = dh * (1 - hs[l + 1]**2)
        dh, gr[f'old{l}'], gr[f'new{l}'], gr[f'bias{l}'] = fast_layer_back(
            hs[l], P[f'old{l}'], P[f'new{l}'], dp, DIL[l])
    gr['E'] = torch.zeros_like(P['E']).index_add_(0, X.flatten(), dh.transpose(0, 1).reshape(-1, NE))
    return F.cross_entropy(lg, Y), gr
''',
    r'''
P = dict(zip(pnames, params))
for p in params:
    p.requires_grad_(False)
lossi = []
for step in range(150):
    ix = torch.randint(0, len(ctx), (40,), generator=gd)
    xb, yb = ctx[ix], nxt[ix]
    lv, gr = backward_all(P, xb, yb)
    for k in pnames:
        P[k] -= 0.2 * gr[k]
    lossi.append(lv.item())
print(lossi[0], sum(lossi[-15:]) / 15)
''',
]

_C6_F = {"logits": "out", "last": "fin", "W": "Wo", "b": "bo", "h3": "a3", "h3pre": "p3",
         "h2": "a2", "h2pre": "p2", "h1": "a1", "h1pre": "p1", "x": "x", "emb": "emb", "C": "E"}
_C6_G = {"logits": "g_out", "last": "g_fin", "W": "g_Wo", "b": "g_bo",
         "h3": "g_lay[2]['act']", "h3pre": "g_lay[2]['pre']", "h2": "g_lay[1]['act']",
         "h2pre": "g_lay[1]['pre']", "h1": "g_lay[0]['act']", "h1pre": "g_lay[0]['pre']",
         "x": "g_x", "emb": "g_emb", "C": "g_E"}


def _c6_specs():
    specs = where("conv", CONV_STEPS, fwd=_C6_F, grad=lambda k: _C6_G.get(k, "MISSING"))
    # each layer's kernel is two matrices (its taps) and a bias: judged on all three
    for step, act, l in (("conv/h2", "a2", 2), ("conv/h1", "a1", 1), ("conv/x", "x", 0)):
        specs[step] = [(_C6_G[{"a2": "h2", "a1": "h1", "x": "x"}[act]], f"G({act})"),
                       (f"g_lay[{l}]['old']", f"G(old[{l}])"),
                       (f"g_lay[{l}]['new']", f"G(new[{l}])"),
                       (f"g_lay[{l}]['bias']", f"G(bias[{l}])")]
    return specs


add("conv_t6_time_major_tap_matrices_loops_then_vectorised", "conv", CONVT6_CELLS, CONV_ALL,
    notes="own data (randperm(Generator 123), contexts of 8 built in a loop); sequences "
          "time-major [T, B, C] (x = emb.transpose(0, 1)); each convolution's kernel kept as two "
          "[in, out] matrices in lists old[l] (the tap d steps back) / new[l] (the tap at t) and "
          "bias[l], the forward a Python loop over positions stacking rows; the backward a loop "
          "over positions accumulating into da[t] / da[t - d]; gradients in per-layer dicts "
          "g_lay[l] ('act', 'pre', 'old', 'new', 'bias'), err() against retained .grad; batch "
          "24; then vectorised with a shifted copy (cat of zeros and a[:-d]) checked against the "
          "loops, and SGD 150 steps on it, batch 40; all right",
    where=_c6_specs(),
    checkpoint="print(err(g_x, x), err(g_emb, emb), err(g_E, E))",
    train={"cell": "for step in range(150)", "probe": "for k in pnames:", "params": "P",
           "grads": "gr", "ref": "lambda Q: forward_all(Q, xb, yb)", "losses": "lossi"})
