"""Learners' own notebooks for the gpt, lstm and conv lessons, with each step's truth: a seventh
corpus, holdout half (the tune half, notebook_corpus_lessons_tune7, was written separately and not
read here).

Six notebooks: four for gpt, one for lstm, one for conv, in layouts that the earlier corpora do not
use. Each is a learner's own notebook: the lesson's forward pass copied in (renamed and
re-laid-out), their own loading of 'names.txt' (the truth runner points it at data/names.txt),
their own seed and init, the backward pass in a layout matching the forward, their own comparison
helper (agree, same, rel, against_vjp, err, report), and where they train (four of the six), a
loop of at most 300 steps on their own gradients and an update of their own. Architecture sizes
are the lessons' [lesson] sizes throughout; batch sizes equal no other size of their lesson (gpt
5, 6 / 10, 9, 11; lstm 13 / 20; conv 40 / 56).

Layouts:
  gpt_h1   every parameter a named view into ONE flat 1-D tensor `theta`, carved by a layout table
           and initialised in place through the views; the gradient a flat `dtheta` of the same
           size carved the same way, each parameter's gradient added into its view (the tied
           table's head share first, the lookup's index_add_ later). The forward as top-level lines
           under own names, qkv cut by tensor_split and heads by unflatten / permute; the backward
           after torch.set_grad_enabled(False), adjoints named xxx_bar, first branches held;
           agree() against retained .grad and the carved theta.grad. Exercise 1, every step.
  gpt_h2   one class per OPERATION (Gather, Plus with sum_to_size, a fused LayerNorm keeping its
           xhat, the final norm's atoms as Mean / Minus / MeanSq / InvSqrt / Times / Affine, Linear,
           Heads, Scores, Causal, Softmax, Mix, Merge, Gelu, Tied, XEnt), each with __call__ (the
           forward, saving what it needs) and .back(grad) returning its inputs' gradients;
           instances chained by hand at top level forward and reversed, every returned branch
           held; same() against retained .grad. Exercise 1, every step; then the chain wrapped in
           chain() / unchain() and the learner's adamw_update, 120 steps.
  gpt_h3   the heads folded into the batch dimension, view(B, T, NH, HS).transpose(1, 2).reshape(
           B * NH, T, HS), every attention product a torch.bmm; parameters as globals under own
           names; every adjoint accumulated with += into one collections.defaultdict(float) keyed
           by the learner's names (a first branch is the entry right after its first +=); rel()
           of relative errors. Exercise 1, every step.
  gpt_h4   exercises 2 and 3: the seven functions (scatter_add_ over an expanded index,
           flatten(0, -2) matmuls, heads folded into the batch with bmm, a `sech2` variable in
           the GELU, one-hot by scatter_, lerp_ / addcdiv_ in AdamW), each checked against
           torch.func.vjp by against_vjp(); the training forward pushes each layer's residuals
           onto a plain list used as a STACK, the backward pops them (LIFO) through the functions;
           200 steps of adamw_update over a dict of own keys.
  lstm_h5  no run_lstm: the learner's own time loop over the whole sequence keeps every step's
           tensors in Python lists (PRE, AI..AO, I_..O_, C_, H_), step t on weight clones; the
           weights GATE-MAJOR (Ux [4, D, H], Uh [4, H, H], ub [4, H]) through einsum, the four
           pre-activations by unbind(0). Exercise 1 with the future's share of dh and dc from an
           own loop walking the lists reversed down to t + 1, first branches held; fused gates by
           one stack of slopes; lstm_step_backward; lstm_backward as its own reversed loop over
           unbind(1)'ed lists; training on an own list unroll through lstm_backward on the weights
           reshaped to the lesson's (D, 4H), SGD with clipping, 200 steps.
  conv_h6  parameters, activations and gradients in three dicts keyed alike by tuples (('w', l),
           ('pre', l), ('act', l), 'emb', ...); each convolution an im2col by F.unfold on a
           [N, C, 1, L + d] view times the kernel reshaped to [C_out, 2 C_in]; its backward F.fold
           of the patches' gradient with the padding cut off and an einsum for the kernel; the
           backward a top-level loop over the layers 3, 2, 1; report() of max differences; the same
           as forward / backward functions and SGD, 250 steps.

Slips (each case's "notes" says which): gpt_h3 un-merges the heads by viewing dy straight as
(B * NH, T, HS), without the transpose that folded them (block/atty wrong; att, preatt_masked,
preatt, qk, qkv, ln1, ln1_affine, x0, wpe, wte cascade); lstm_h5 takes df with the new cell state
C_[t] where the previous one, C_[t - 1], belongs, an off-by-one in its lists (step/c wrong;
gates, ifgo, inputs and fused/gates cascade, while h, g, the functions and the training, written
separately, stay right). The other four notebooks are right throughout. No notebook is shared
with the earlier corpora.

Written apart from the grader: from the lessons' forward passes, pack.toml's [lesson] / [setup] /
[forward] tables, exercises/conv/forward.py, `backprop-tutor --pack X list` and the earlier
corpora's format only, without reading the tutor's code or the steps' solutions, mistakes, hints
or explanations, and without running the grader on these notebooks. Every label was measured by
running the notebook, not judged by eye:

    .venv/bin/python tests/lesson_corpus_truth.py notebook_corpus_lessons_holdout7

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
# GPT H1 (right throughout). Own data (torch.randperm with a generator of its own, every row a
# '.'-padded string ljust to 17 characters), ALL parameters in one flat 1-D tensor `theta` with
# named views carved out of it by a layout table (`carve(flat)`), initialised in place through the
# views; the gradient `dtheta` a flat tensor of the same size carved the same way, every parameter's
# gradient written into its view with += / index_add_. The forward as top-level lines under the
# learner's own names (emb, r0, m1 / c1 / v1 / rs1 / nn1 / a1, u, qq / kk / vv, sc, sc_m, pr, ctx,
# cat, o, r1, ..., out); qkv cut with tensor_split and heads made with unflatten / permute; the
# backward after torch.set_grad_enabled(False) with adjoints named xxx_bar, first branches held
# (cf_bar before its +=, r2_bar / r1_bar / r0_bar as clones, the head's share of dtheta's E view
# before the lookup's index_add_). `agree(tag, mine, ref)` against retained .grad and the carved
# theta.grad. Batch 5; exercise 1 only.

GPTH1_CELLS = [
    md("# Backprop through one GPT block\nAll weights live in ONE flat vector (like an optimizer "
       "sees them); each matrix is a view into it. The gradient is a flat vector too."),
    r'''
import math
import torch
import torch.nn.functional as F
''',
    r'''
lines = [l.strip() for l in open('names.txt') if l.strip()]
gen = torch.Generator().manual_seed(5150)
lines = [lines[j] for j in torch.randperm(len(lines), generator=gen).tolist()]
alphabet = '.' + ''.join(sorted(set(''.join(lines))))
idx = {ch: k for k, ch in enumerate(alphabet)}
T_, E_, NH = 16, 32, 4
HD = E_ // NH
VOC = len(alphabet)
padded = [('.' + w + '.').ljust(T_ + 1, '.')[:T_ + 1] for w in lines[:int(0.9 * len(lines))]]
rows = torch.tensor([[idx[ch] for ch in s] for s in padded])
Xs, Ys = rows[:, :T_], rows[:, T_]
rows.shape
''',
    r'''
layout = [('E', (VOC, E_)), ('P', (T_, E_)),
          ('g1', (E_,)), ('s1', (E_,)), ('Wa', (E_, 3 * E_)), ('ba', (3 * E_,)),
          ('Wp', (E_, E_)), ('bp', (E_,)),
          ('g2', (E_,)), ('s2', (E_,)), ('Wu', (E_, 4 * E_)), ('bu', (4 * E_,)),
          ('Wd', (4 * E_, E_)), ('bd', (E_,)),
          ('gf', (E_,)), ('sf', (E_,))]
numels = [math.prod(s) for _, s in layout]
NPAR = sum(numels)

def carve(flat):
    views, at = {}, 0
    for (name, shape), k in zip(layout, numels):
        views[name] = flat[at:at + k].view(shape)
        at += k
    return views

print(NPAR, 'numbers in theta')
''',
    r'''
torch.manual_seed(5150)
theta = torch.empty(NPAR)
init = carve(theta)
init['E'].normal_(0, 0.1); init['P'].normal_(0, 0.1)
for name in ('g1', 'g2', 'gf'):
    init[name].normal_(1.0, 0.1)
for name in ('s1', 's2', 'sf', 'ba', 'bp', 'bu', 'bd'):
    init[name].normal_(0.0, 0.1)
init['Wa'].normal_(0, E_**-0.5); init['Wu'].normal_(0, E_**-0.5)
init['Wp'].normal_(0, 0.5 * E_**-0.5); init['Wd'].normal_(0, 0.5 * (4 * E_)**-0.5)
theta.requires_grad_(True)
pv = carve(theta)
E, P, g1, s1, Wa, ba, Wp, bp = (pv[k] for k in ('E', 'P', 'g1', 's1', 'Wa', 'ba', 'Wp', 'bp'))
g2, s2, Wu, bu, Wd, bd, gf, sf = (pv[k] for k in ('g2', 's2', 'Wu', 'bu', 'Wd', 'bd', 'gf', 'sf'))
''',
    md("## forward (my names)"),
    r'''
bix = torch.randint(0, len(Xs), (5,), generator=gen)
xb, yb = Xs[bix], Ys[bix]
B = xb.shape[0]
K0 = math.sqrt(2 / math.pi)
lower = torch.tril(torch.ones(T_, T_, dtype=torch.bool))

emb = E[xb]
r0 = emb + P
m1 = r0.mean(-1, keepdim=True)
c1 = r0 - m1
v1 = (c1**2).mean(-1, keepdim=True)
rs1 = (v1 + 1e-5)**-0.5
nn1 = c1 * rs1
a1 = nn1 * g1 + s1
u = a1 @ Wa + ba
qq, kk, vv = (z.unflatten(-1, (NH, HD)).permute(0, 2, 1, 3) for z in u.tensor_split(3, dim=-1))
sc = qq @ kk.transpose(-1, -2) / math.sqrt(HD)
sc_m = sc.masked_fill(~lower, -math.inf)
pr = sc_m.softmax(-1)
ctx = pr @ vv
cat = ctx.permute(0, 2, 1, 3).reshape(B, T_, E_)
o = cat @ Wp + bp
r1 = r0 + o
m2 = r1.mean(-1, keepdim=True)
c2 = r1 - m2
v2 = (c2**2).mean(-1, keepdim=True)
rs2 = (v2 + 1e-5)**-0.5
nn2 = c2 * rs2
a2 = nn2 * g2 + s2
u2 = a2 @ Wu + bu
act = 0.5 * u2 * (1 + torch.tanh(K0 * (u2 + 0.044715 * u2**3)))
dn = act @ Wd + bd
r2 = r1 + dn
mf = r2.mean(-1, keepdim=True)
cf = r2 - mf
vf = (cf**2).mean(-1, keepdim=True)
rsf = (vf + 1e-5)**-0.5
nf = cf * rsf
af = nf * gf + sf
out = af @ E.T
tg = torch.cat([xb[:, 1:], yb[:, None]], dim=1)
loss = F.cross_entropy(out.reshape(-1, VOC), tg.reshape(-1))
loss.item()
''',
    r'''
watched = dict(emb=emb, r0=r0, nn1=nn1, a1=a1, u=u, qq=qq, kk=kk, vv=vv, sc=sc, sc_m=sc_m,
               pr=pr, ctx=ctx, cat=cat, o=o, r1=r1, nn2=nn2, a2=a2, u2=u2, act=act, dn=dn,
               r2=r2, mf=mf, cf=cf, vf=vf, rsf=rsf, nf=nf, af=af, out=out)
for z in watched.values():
    z.retain_grad()
loss.backward()
ref = carve(theta.grad)

def agree(tag, mine, want):
    err = (mine - want).abs().max().item()
    print(f"{tag:>6}: {'ok' if err < 1e-6 else 'NO'}  {err:.1e}")
''',
    md("## backward, top to bottom\nNo graph from here on. `dtheta` is carved like `theta`."),
    r'''
torch.set_grad_enabled(False)
dtheta = torch.zeros(NPAR)
gv = carve(dtheta)
N = B * T_
out_bar = out.softmax(-1)
out_bar.view(N, VOC)[torch.arange(N), tg.view(N)] -= 1
out_bar /= N
agree('out', out_bar, out.grad)
''',
    r'''
af_bar = out_bar @ E
gv['E'] += out_bar.reshape(N, VOC).T @ af.reshape(N, E_)
agree('af', af_bar, af.grad)
''',
    r'''
nf_bar = af_bar * gf
gv['gf'] += (af_bar * nf).sum((0, 1))
gv['sf'] += af_bar.sum((0, 1))
rsf_bar = (nf_bar * cf).sum(-1, keepdim=True)
cf_bar = nf_bar * rsf
vf_bar = -0.5 * (vf + 1e-5)**-1.5 * rsf_bar
cf_bar += 2 * cf / E_ * vf_bar
mf_bar = -cf_bar.sum(-1, keepdim=True)
r2_bar = cf_bar.clone()
r2_bar += mf_bar / E_
for tag, mine, t in [('nf', nf_bar, nf), ('rsf', rsf_bar, rsf), ('vf', vf_bar, vf),
                     ('cf', cf_bar, cf), ('mf', mf_bar, mf), ('r2', r2_bar, r2)]:
    agree(tag, mine, t.grad)
agree('gf', gv['gf'], ref['gf']); agree('sf', gv['sf'], ref['sf'])
''',
    r'''
dn_bar = r2_bar
r1_bar = r2_bar.clone()
act_bar = dn_bar @ Wd.T
gv['Wd'] += act.reshape(N, -1).T @ dn_bar.reshape(N, -1)
gv['bd'] += dn_bar.sum((0, 1))
th = torch.tanh(K0 * (u2 + 0.044715 * u2**3))
u2_bar = act_bar * (0.5 * (1 + th) + 0.5 * u2 * (1 - th**2) * K0 * (1 + 3 * 0.044715 * u2**2))
a2_bar = u2_bar @ Wu.T
gv['Wu'] += a2.reshape(N, -1).T @ u2_bar.reshape(N, -1)
gv['bu'] += u2_bar.sum((0, 1))
nn2_bar = a2_bar * g2
gv['g2'] += (a2_bar * nn2).sum((0, 1))
gv['s2'] += a2_bar.sum((0, 1))
r1_bar += rs2 * (nn2_bar - nn2_bar.mean(-1, keepdim=True)
                 - nn2 * (nn2_bar * nn2).mean(-1, keepdim=True))
for tag, mine, t in [('dn', dn_bar, dn), ('act', act_bar, act), ('u2', u2_bar, u2),
                     ('a2', a2_bar, a2), ('nn2', nn2_bar, nn2), ('r1', r1_bar, r1)]:
    agree(tag, mine, t.grad)
for k in ('Wd', 'bd', 'Wu', 'bu', 'g2', 's2'):
    agree(k, gv[k], ref[k])
''',
    r'''
o_bar = r1_bar
r0_bar = r1_bar.clone()
cat_bar = o_bar @ Wp.T
gv['Wp'] += cat.reshape(N, E_).T @ o_bar.reshape(N, E_)
gv['bp'] += o_bar.sum((0, 1))
ctx_bar = cat_bar.unflatten(-1, (NH, HD)).permute(0, 2, 1, 3)
pr_bar = ctx_bar @ vv.transpose(-1, -2)
vv_bar = pr.transpose(-1, -2) @ ctx_bar
sc_m_bar = pr * (pr_bar - (pr * pr_bar).sum(-1, keepdim=True))
sc_bar = sc_m_bar.masked_fill(~lower, 0.0)
qq_bar = sc_bar @ kk / math.sqrt(HD)
kk_bar = sc_bar.transpose(-1, -2) @ qq / math.sqrt(HD)
u_bar = torch.cat([z.permute(0, 2, 1, 3).flatten(2) for z in (qq_bar, kk_bar, vv_bar)], dim=-1)
for tag, mine, t in [('o', o_bar, o), ('cat', cat_bar, cat), ('ctx', ctx_bar, ctx),
                     ('pr', pr_bar, pr), ('vv', vv_bar, vv), ('sc_m', sc_m_bar, sc_m),
                     ('sc', sc_bar, sc), ('qq', qq_bar, qq), ('kk', kk_bar, kk), ('u', u_bar, u)]:
    agree(tag, mine, t.grad)
''',
    r'''
a1_bar = u_bar @ Wa.T
gv['Wa'] += a1.reshape(N, E_).T @ u_bar.reshape(N, 3 * E_)
gv['ba'] += u_bar.sum((0, 1))
nn1_bar = a1_bar * g1
gv['g1'] += (a1_bar * nn1).sum((0, 1))
gv['s1'] += a1_bar.sum((0, 1))
r0_bar += rs1 * (nn1_bar - nn1_bar.mean(-1, keepdim=True)
                 - nn1 * (nn1_bar * nn1).mean(-1, keepdim=True))
emb_bar = r0_bar
gv['P'] += r0_bar.sum(0)
gv['E'].index_add_(0, xb.flatten(), emb_bar.reshape(N, E_))
agree('r0', r0_bar, r0.grad); agree('emb', emb_bar, emb.grad)
for k in ('Wp', 'bp', 'Wa', 'ba', 'g1', 's1', 'P', 'E'):
    agree(k, gv[k], ref[k])
agree('theta', dtheta, theta.grad)
torch.set_grad_enabled(True)   # done: graphs back on
''',
]

GPTH1_FWD = {"logits": "out", "lnf": "af", "lnf_norm": "nf", "lnf_rstd": "rsf", "lnf_var": "vf",
             "lnf_xc": "cf", "lnf_mean": "mf", "x2": "r2", "fcproj": "dn", "fch_gelu": "act",
             "fch": "u2", "ln2": "a2", "ln2_norm": "nn2", "x1": "r1", "attproj": "o",
             "y": "cat", "atty": "ctx", "att": "pr", "v": "vv", "preatt_masked": "sc_m",
             "preatt": "sc", "q": "qq", "k": "kk", "qkv": "u", "ln1": "a1", "ln1_norm": "nn1",
             "x0": "r0", "tok": "emb"}
GPTH1_PAR = {"wte": "E", "wpe": "P", "lnfw": "gf", "lnfb": "sf", "fcprojw": "Wd", "fcprojb": "bd",
             "fcw": "Wu", "fcb": "bu", "ln2w": "g2", "ln2b": "s2", "attprojw": "Wp",
             "attprojb": "bp", "qkvw": "Wa", "qkvb": "ba", "ln1w": "g1", "ln1b": "s1"}


def _h1_grad(k: str) -> str:
    if k in GPTH1_PAR:
        return f"gv['{GPTH1_PAR[k]}']"
    return GPTH1_FWD[k] + "_bar"


add("gpt_h1_flat_theta_views", "gpt", GPTH1_CELLS, GPT_STEPS,
    notes="own data (randperm with its own generator, ljust-padded strings), every parameter a "
          "named view into one flat theta, the gradient a flat dtheta carved the same way; "
          "forward as top-level lines under own names, heads by tensor_split / unflatten / "
          "permute; backward under set_grad_enabled(False), xxx_bar adjoints, first branches held "
          "(cf_bar before +=, r2_bar / r1_bar / r0_bar clones, E's head share before index_add_); "
          "agree() against retained .grad; batch 5; exercise 1 only; all right",
    where=where("gpt", GPT_STEPS, fwd={**GPTH1_FWD, **GPTH1_PAR}, grad=_h1_grad,
                first_after={"wte": "gv['E'] += out_bar.reshape", "lnf_xc": "cf_bar = nf_bar * rsf",
                             "x2": "r2_bar = cf_bar.clone()", "x1": "r1_bar = r2_bar.clone()",
                             "x0": "r0_bar = r1_bar.clone()"}))

# ================================================================================================
# GPT H2 (right throughout). Own data (names sorted by length then a random.Random(88) shuffle
# of the order, rows built with itertools.chain), parameters in a dict `prm` under dotted keys of
# the learner's own ('tok', 'pos', 'a.g', 'att.W', 'o.W', 'up.W', 'dn.W', 'f.g', ...). One class
# per OPERATION, each with __call__ (the forward, saving what it needs on self) and .back(grad)
# (returning the inputs' gradients): Gather, Plus (sum_to_size for broadcasting), LayerNorm (fused,
# keeping its own xhat), Mean / Minus / MeanSq / InvSqrt / Times / Affine for the final layer
# norm's atoms, Linear, Heads, Scores, Causal, Softmax, Mix, Merge, Gelu, Tied, XEnt. Instances
# chained by hand at top level in the forward and again, reversed, in the backward, every
# returned gradient held (the residual Plus returns both branches, so every first branch is a value
# of its own). `same(label, a, b)` against retained .grad. Batch 6 for exercise 1; then the
# chain wrapped in `chain(P, X, Y)` / `unchain(ops)` functions and the learner's adamw_update,
# 120 steps, batch 10.

GPTH2_CELLS = [
    r'''
import math, random, itertools
import torch
import torch.nn.functional as F
''',
    r'''
with open('names.txt') as f:
    nm = [w for w in f.read().split('\n') if w]
nm.sort(key=len)
random.Random(88).shuffle(nm)
chars = sorted(set(itertools.chain.from_iterable(nm)))
stoi = {c: i + 1 for i, c in enumerate(chars)}
stoi['.'] = 0
nvoc, ctx_len, width, heads = len(stoi), 16, 32, 4
hsz = width // heads
def row(w):
    r = list(itertools.chain([0], (stoi[c] for c in w), [0], itertools.repeat(0, ctx_len)))
    return r[:ctx_len + 1]
data = torch.tensor([row(w) for w in nm[:28000]])
Xd, Yd = data[:, :-1], data[:, -1]
''',
    md("## one class per operation\n`__call__` = forward (keeps what backward needs), "
       "`back(g)` = gradients of the inputs."),
    r'''
class Gather:
    def __call__(self, table, ix):
        self.ix, self.rows = ix, table.shape[0]
        return table[ix]
    def back(self, g):
        C = g.shape[-1]
        return torch.zeros(self.rows, C).index_add_(0, self.ix.reshape(-1), g.reshape(-1, C))

class Plus:
    def __call__(self, a, b):
        self.sa, self.sb = a.shape, b.shape
        return a + b
    def back(self, g):
        return g.sum_to_size(self.sa), g.sum_to_size(self.sb)

class Mean:
    def __call__(self, x):
        self.n = x.shape[-1]
        return x.mean(-1, keepdim=True)
    def back(self, g):
        return g.expand(*g.shape[:-1], self.n) / self.n

class Minus:
    def __call__(self, a, b):
        return a - b
    def back(self, g):
        return g, -g.sum(-1, keepdim=True)

class MeanSq:
    def __call__(self, x):
        self.x = x
        return (x**2).mean(-1, keepdim=True)
    def back(self, g):
        return g * 2 * self.x / self.x.shape[-1]

class InvSqrt:
    def __call__(self, v):
        self.v = v
        return (v + 1e-5)**-0.5
    def back(self, g):
        return g * -0.5 * (self.v + 1e-5)**-1.5

class Times:   # a * b, b broadcast over the last dim
    def __call__(self, a, b):
        self.a, self.b = a, b
        return a * b
    def back(self, g):
        return g * self.b, (g * self.a).sum(-1, keepdim=True)

class Affine:
    def __call__(self, x, w, b):
        self.x, self.w = x, w
        return x * w + b
    def back(self, g):
        return g * self.w, (g * self.x).sum((0, 1)), g.sum((0, 1))

class LayerNorm:
    def __call__(self, x, w, b):
        mu = x.mean(-1, keepdim=True)
        self.rstd = ((x - mu).pow(2).mean(-1, keepdim=True) + 1e-5)**-0.5
        self.xhat = (x - mu) * self.rstd
        self.w = w
        return self.xhat * w + b
    def back(self, g):
        self.g_xhat = g * self.w
        gw, gb = (g * self.xhat).sum((0, 1)), g.sum((0, 1))
        gx = self.g_xhat
        gx = self.rstd * (gx - gx.mean(-1, keepdim=True)
                          - self.xhat * (gx * self.xhat).mean(-1, keepdim=True))
        return gx, gw, gb

class Linear:
    def __call__(self, x, W, b):
        self.x, self.W = x, W
        return x @ W + b
    def back(self, g):
        x2 = self.x.reshape(-1, self.x.shape[-1])
        g2 = g.reshape(-1, g.shape[-1])
        return g @ self.W.T, x2.T @ g2, g2.sum(0)
''',
    r'''
class Heads:
    def __call__(self, z, nh):
        B, T, C3 = z.shape
        self.shape, C = z.shape, C3 // 3
        return [z[..., j * C:(j + 1) * C].reshape(B, T, nh, C // nh).transpose(1, 2)
                for j in range(3)]
    def back(self, gq, gk, gv):
        B, T, _ = self.shape
        return torch.cat([t.transpose(1, 2).reshape(B, T, -1) for t in (gq, gk, gv)], -1)

class Scores:
    def __call__(self, q, k):
        self.q, self.k, self.s = q, k, q.shape[-1]**-0.5
        return q @ k.transpose(-2, -1) * self.s
    def back(self, g):
        return g @ self.k * self.s, g.transpose(-2, -1) @ self.q * self.s

class Causal:
    def __call__(self, s):
        T = s.shape[-1]
        self.keep = torch.ones(T, T).tril() == 1
        return s.masked_fill(~self.keep, float('-inf'))
    def back(self, g):
        return g.masked_fill(~self.keep, 0.0)

class Softmax:
    def __call__(self, s):
        self.p = F.softmax(s, dim=-1)
        return self.p
    def back(self, g):
        return self.p * (g - (g * self.p).sum(-1, keepdim=True))

class Mix:
    def __call__(self, a, v):
        self.a, self.v = a, v
        return a @ v
    def back(self, g):
        return g @ self.v.transpose(-2, -1), self.a.transpose(-2, -1) @ g

class Merge:
    def __call__(self, y):
        self.shape = y.shape
        B, nh, T, hs = y.shape
        return y.transpose(1, 2).contiguous().view(B, T, nh * hs)
    def back(self, g):
        B, nh, T, hs = self.shape
        return g.view(B, T, nh, hs).transpose(1, 2)

class Gelu:
    k = math.sqrt(2 / math.pi)
    def __call__(self, x):
        self.x = x
        self.t = torch.tanh(self.k * (x + 0.044715 * x**3))
        return 0.5 * x * (1 + self.t)
    def back(self, g):
        x, t = self.x, self.t
        return g * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * self.k * (1 + 3 * 0.044715 * x * x))

class Tied:
    def __call__(self, x, table):
        self.x, self.table = x, table
        return x @ table.T
    def back(self, g):
        V = g.shape[-1]
        return g @ self.table, g.reshape(-1, V).T @ self.x.reshape(-1, self.x.shape[-1])

class XEnt:
    def __call__(self, logits, targets):
        self.logits, self.t = logits.reshape(-1, logits.shape[-1]), targets.reshape(-1)
        self.shape = logits.shape
        return F.cross_entropy(self.logits, self.t)
    def back(self):
        p = F.softmax(self.logits, -1)
        p[torch.arange(len(self.t)), self.t] -= 1
        return (p / len(self.t)).view(self.shape)
''',
    r'''
gen = torch.Generator().manual_seed(6060)
def rnd(*s, scale=1.0, base=0.0):
    return (base + scale * torch.randn(*s, generator=gen)).requires_grad_(True)
C = width
prm = {'tok': rnd(nvoc, C, scale=0.1), 'pos': rnd(ctx_len, C, scale=0.1),
       'a.g': rnd(C, scale=0.1, base=1.0), 'a.b': rnd(C, scale=0.1),
       'att.W': rnd(C, 3 * C, scale=C**-0.5), 'att.b': rnd(3 * C, scale=0.1),
       'o.W': rnd(C, C, scale=0.5 * C**-0.5), 'o.b': rnd(C, scale=0.1),
       'b.g': rnd(C, scale=0.1, base=1.0), 'b.b': rnd(C, scale=0.1),
       'up.W': rnd(C, 4 * C, scale=C**-0.5), 'up.b': rnd(4 * C, scale=0.1),
       'dn.W': rnd(4 * C, C, scale=0.5 * (4 * C)**-0.5), 'dn.b': rnd(C, scale=0.1),
       'f.g': rnd(C, scale=0.1, base=1.0), 'f.b': rnd(C, scale=0.1)}
''',
    md("## exercise 1: chain the ops by hand"),
    r'''
pick = torch.randint(0, len(Xd), (6,), generator=gen)
xb, yb = Xd[pick], Yd[pick]
gather, addpos, lnA, attlin = Gather(), Plus(), LayerNorm(), Linear()
heads_op, scores_op, causal_op, smax, mix, merge = Heads(), Scores(), Causal(), Softmax(), Mix(), Merge()
olin, res1, lnB, uplin, gelu, dnlin, res2 = Linear(), Plus(), LayerNorm(), Linear(), Gelu(), Linear(), Plus()
meanF, minusF, msqF, invF, timesF, affF = Mean(), Minus(), MeanSq(), InvSqrt(), Times(), Affine()
head, xent = Tied(), XEnt()

e = gather(prm['tok'], xb)
s0 = addpos(e, prm['pos'])
lnA_out = lnA(s0, prm['a.g'], prm['a.b'])
z3 = attlin(lnA_out, prm['att.W'], prm['att.b'])
Qh, Kh, Vh = heads_op(z3, heads)
raw = scores_op(Qh, Kh)
raw_m = causal_op(raw)
wts = smax(raw_m)
mixed = mix(wts, Vh)
merged = merge(mixed)
att_out = olin(merged, prm['o.W'], prm['o.b'])
s1 = res1(s0, att_out)
lnB_out = lnB(s1, prm['b.g'], prm['b.b'])
hid = uplin(lnB_out, prm['up.W'], prm['up.b'])
hid_act = gelu(hid)
mlp_out = dnlin(hid_act, prm['dn.W'], prm['dn.b'])
s2 = res2(s1, mlp_out)
mu_f = meanF(s2)
cen_f = minusF(s2, mu_f)
var_f = msqF(cen_f)
inv_f = invF(var_f)
norm_f = timesF(cen_f, inv_f)
out_f = affF(norm_f, prm['f.g'], prm['f.b'])
scores_v = head(out_f, prm['tok'])
targets = torch.cat([xb[:, 1:], yb[:, None]], dim=1)
loss = xent(scores_v, targets)
print(loss.item())
''',
    r'''
for t in [e, s0, lnA.xhat, lnA_out, z3, Qh, Kh, Vh, raw, raw_m, wts, mixed, merged, att_out, s1,
          lnB.xhat, lnB_out, hid, hid_act, mlp_out, s2, mu_f, cen_f, var_f, inv_f, norm_f, out_f,
          scores_v]:
    t.retain_grad()
loss.backward()

def same(label, a, b):
    ok = torch.allclose(a, b, rtol=1e-4, atol=1e-6)
    print(f"{label:10s}{'' if ok else '  <-- DIFFERENT'} {(a - b).abs().max():.2e}")
''',
    r'''
with torch.no_grad():
    g_scores = xent.back()
    g_outf, g_tok_head = head.back(g_scores)
    g_normf, g_fg, g_fb = affF.back(g_outf)
    g_cen_a, g_inv = timesF.back(g_normf)
    g_var = invF.back(g_inv)
    g_cen = g_cen_a + msqF.back(g_var)
    g_s2_a, g_mu = minusF.back(g_cen)
    g_s2 = g_s2_a + meanF.back(g_mu)
same('scores', g_scores, scores_v.grad); same('out_f', g_outf, out_f.grad)
same('norm_f', g_normf, norm_f.grad); same('f.g', g_fg, prm['f.g'].grad); same('f.b', g_fb, prm['f.b'].grad)
same('inv_f', g_inv, inv_f.grad); same('var_f', g_var, var_f.grad); same('cen_f', g_cen, cen_f.grad)
same('mu_f', g_mu, mu_f.grad); same('s2', g_s2, s2.grad)
''',
    r'''
with torch.no_grad():
    g_s1_a, g_mlp = res2.back(g_s2)
    g_hact, g_dnW, g_dnb = dnlin.back(g_mlp)
    g_hid = gelu.back(g_hact)
    g_lnB, g_upW, g_upb = uplin.back(g_hid)
    g_s1_b, g_bg, g_bb = lnB.back(g_lnB)
    g_s1 = g_s1_a + g_s1_b
for lab, a, t in [('mlp_out', g_mlp, mlp_out), ('hid_act', g_hact, hid_act), ('hid', g_hid, hid),
                  ('lnB_out', g_lnB, lnB_out), ('lnB.xhat', lnB.g_xhat, lnB.xhat), ('s1', g_s1, s1)]:
    same(lab, a, t.grad)
for lab, a in [('dn.W', g_dnW), ('dn.b', g_dnb), ('up.W', g_upW), ('up.b', g_upb), ('b.g', g_bg), ('b.b', g_bb)]:
    same(lab, a, prm[lab].grad)
''',
    r'''
with torch.no_grad():
    g_s0_a, g_att = res1.back(g_s1)
    g_merged, g_oW, g_ob = olin.back(g_att)
    g_mixed = merge.back(g_merged)
    g_wts, g_Vh = mix.back(g_mixed)
    g_raw_m = smax.back(g_wts)
    g_raw = causal_op.back(g_raw_m)
    g_Qh, g_Kh = scores_op.back(g_raw)
    g_z3 = heads_op.back(g_Qh, g_Kh, g_Vh)
    g_lnA, g_attW, g_attb = attlin.back(g_z3)
    g_s0_b, g_ag, g_ab = lnA.back(g_lnA)
    g_s0 = g_s0_a + g_s0_b
    g_e, g_pos = addpos.back(g_s0)
    g_tok = g_tok_head + gather.back(g_e)
for lab, a, t in [('att_out', g_att, att_out), ('merged', g_merged, merged), ('mixed', g_mixed, mixed),
                  ('wts', g_wts, wts), ('Vh', g_Vh, Vh), ('raw_m', g_raw_m, raw_m), ('raw', g_raw, raw),
                  ('Qh', g_Qh, Qh), ('Kh', g_Kh, Kh), ('z3', g_z3, z3), ('lnA_out', g_lnA, lnA_out),
                  ('lnA.xhat', lnA.g_xhat, lnA.xhat), ('s0', g_s0, s0), ('e', g_e, e)]:
    same(lab, a, t.grad)
for lab, a in [('o.W', g_oW), ('o.b', g_ob), ('att.W', g_attW), ('att.b', g_attb), ('a.g', g_ag),
               ('a.b', g_ab), ('pos', g_pos), ('tok', g_tok)]:
    same(lab, a, prm[lab].grad)
''',
    md("## exercise 3: the same chain in two functions, and my AdamW"),
    r'''
def chain(P, X, Y):
    ops = {k: cls() for k, cls in [('gather', Gather), ('addpos', Plus), ('lnA', LayerNorm),
           ('att', Linear), ('heads', Heads), ('scores', Scores), ('causal', Causal),
           ('smax', Softmax), ('mix', Mix), ('merge', Merge), ('o', Linear), ('res1', Plus),
           ('lnB', LayerNorm), ('up', Linear), ('gelu', Gelu), ('dn', Linear), ('res2', Plus),
           ('lnF', LayerNorm), ('head', Tied), ('xent', XEnt)]}
    s = ops['addpos'](ops['gather'](P['tok'], X), P['pos'])
    qkv_ = ops['att'](ops['lnA'](s, P['a.g'], P['a.b']), P['att.W'], P['att.b'])
    q_, k_, v_ = ops['heads'](qkv_, heads)
    w_ = ops['smax'](ops['causal'](ops['scores'](q_, k_)))
    y_ = ops['merge'](ops['mix'](w_, v_))
    s = ops['res1'](s, ops['o'](y_, P['o.W'], P['o.b']))
    h_ = ops['gelu'](ops['up'](ops['lnB'](s, P['b.g'], P['b.b']), P['up.W'], P['up.b']))
    s = ops['res2'](s, ops['dn'](h_, P['dn.W'], P['dn.b']))
    lg = ops['head'](ops['lnF'](s, P['f.g'], P['f.b']), P['tok'])
    return ops['xent'](lg, torch.cat([X[:, 1:], Y[:, None]], dim=1)), ops

def unchain(ops):
    g = {}
    d_lnF, g['tok'] = ops['head'].back(ops['xent'].back())
    d_s, g['f.g'], g['f.b'] = ops['lnF'].back(d_lnF)
    d_s1, d_mlp = ops['res2'].back(d_s)
    d_hid, g['dn.W'], g['dn.b'] = ops['dn'].back(d_mlp)
    d_lnB, g['up.W'], g['up.b'] = ops['up'].back(ops['gelu'].back(d_hid))
    d_x, g['b.g'], g['b.b'] = ops['lnB'].back(d_lnB)
    d_s0, d_att = ops['res1'].back(d_s1 + d_x)
    d_y, g['o.W'], g['o.b'] = ops['o'].back(d_att)
    d_w, d_v = ops['mix'].back(ops['merge'].back(d_y))
    d_q, d_k = ops['scores'].back(ops['causal'].back(ops['smax'].back(d_w)))
    d_lnA, g['att.W'], g['att.b'] = ops['att'].back(ops['heads'].back(d_q, d_k, d_v))
    d_x, g['a.g'], g['a.b'] = ops['lnA'].back(d_lnA)
    d_e, g['pos'] = ops['addpos'].back(d_s0 + d_x)
    g['tok'] = g['tok'] + ops['gather'].back(d_e)
    return g

def adamw_update(param, grad, m, v, t, lr, beta1, beta2, eps, weight_decay):
    m.mul_(beta1).add_(grad, alpha=1 - beta1)
    v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    param.mul_(1 - lr * weight_decay)
    step = lr / (1 - beta1**t)
    param.addcdiv_(m, (v / (1 - beta2**t)).sqrt() + eps, value=-step)
''',
    r'''
for p in prm.values():
    p.requires_grad_(False)
moms = {k: (torch.zeros_like(p), torch.zeros_like(p)) for k, p in prm.items()}
hist = []
for it in range(1, 121):
    pick = torch.randint(0, len(Xd), (10,), generator=gen)
    xb, yb = Xd[pick], Yd[pick]
    lv, ops = chain(prm, xb, yb)
    gr = unchain(ops)
    for key in prm:
        adamw_update(prm[key], gr[key], *moms[key], it, 1e-2, 0.9, 0.99, 1e-8, 0.01)
    hist.append(lv.item())
print(hist[:3], hist[-3:])
''',
]

GPTH2_FWD = {"logits": "scores_v", "lnf": "out_f", "lnf_norm": "norm_f", "lnf_rstd": "inv_f",
             "lnf_var": "var_f", "lnf_xc": "cen_f", "lnf_mean": "mu_f", "x2": "s2",
             "fcproj": "mlp_out", "fch_gelu": "hid_act", "fch": "hid", "ln2": "lnB_out",
             "ln2_norm": "lnB.xhat", "x1": "s1", "attproj": "att_out", "y": "merged",
             "atty": "mixed", "att": "wts", "v": "Vh", "preatt_masked": "raw_m", "preatt": "raw",
             "q": "Qh", "k": "Kh", "qkv": "z3", "ln1": "lnA_out", "ln1_norm": "lnA.xhat",
             "x0": "s0", "tok": "e",
             "wte": "prm['tok']", "wpe": "prm['pos']", "lnfw": "prm['f.g']", "lnfb": "prm['f.b']",
             "fcprojw": "prm['dn.W']", "fcprojb": "prm['dn.b']", "fcw": "prm['up.W']",
             "fcb": "prm['up.b']", "ln2w": "prm['b.g']", "ln2b": "prm['b.b']",
             "attprojw": "prm['o.W']", "attprojb": "prm['o.b']", "qkvw": "prm['att.W']",
             "qkvb": "prm['att.b']", "ln1w": "prm['a.g']", "ln1b": "prm['a.b']"}
GPTH2_GRAD = {"logits": "g_scores", "lnf": "g_outf", "lnf_norm": "g_normf", "lnf_rstd": "g_inv",
              "lnf_var": "g_var", "lnf_xc": "g_cen", "lnf_mean": "g_mu", "x2": "g_s2",
              "fcproj": "g_mlp", "fch_gelu": "g_hact", "fch": "g_hid", "ln2": "g_lnB",
              "ln2_norm": "lnB.g_xhat", "x1": "g_s1", "attproj": "g_att", "y": "g_merged",
              "atty": "g_mixed", "att": "g_wts", "v": "g_Vh", "preatt_masked": "g_raw_m",
              "preatt": "g_raw", "q": "g_Qh", "k": "g_Kh", "qkv": "g_z3", "ln1": "g_lnA",
              "ln1_norm": "lnA.g_xhat", "x0": "g_s0", "tok": "g_e",
              "wte": "g_tok", "wpe": "g_pos", "lnfw": "g_fg", "lnfb": "g_fb", "fcprojw": "g_dnW",
              "fcprojb": "g_dnb", "fcw": "g_upW", "fcb": "g_upb", "ln2w": "g_bg", "ln2b": "g_bb",
              "attprojw": "g_oW", "attprojb": "g_ob", "qkvw": "g_attW", "qkvb": "g_attb",
              "ln1w": "g_ag", "ln1b": "g_ab"}
GPTH2_FIRSTS = {"wte": "g_tok_head", "lnf_xc": "g_cen_a", "x2": "g_s2_a", "x1": "g_s1_a",
                "x0": "g_s0_a"}
GPTH2_KEYS = {"wte": "tok", "wpe": "pos", "lnfw": "f.g", "lnfb": "f.b", "fcprojw": "dn.W",
              "fcprojb": "dn.b", "fcw": "up.W", "fcb": "up.b", "ln2w": "b.g", "ln2b": "b.b",
              "attprojw": "o.W", "attprojb": "o.b", "qkvw": "att.W", "qkvb": "att.b",
              "ln1w": "a.g", "ln1b": "a.b"}


FIRST_OF_STEP = {"block/lnf": "wte", "block/lnf_rstd": "lnf_xc", "block/lnf_mean": "x2",
                 "block/x2_residual": "x1", "block/x1_residual": "x0"}


def _h2_specs():
    # every first branch is a variable of its own that is never changed afterwards
    specs = where("gpt", GPT_STEPS, fwd=GPTH2_FWD, grad=GPTH2_GRAD.__getitem__,
                  first_after={"wte": "g_scores = xent.back()", "lnf_xc": "g_scores = xent.back()",
                               "x2": "g_scores = xent.back()", "x1": "g_s1_a, g_mlp = res2",
                               "x0": "g_s0_a, g_att = res1"})
    for step, first in FIRST_OF_STEP.items():
        specs[step] = [(GPTH2_FIRSTS[first], sp[1], sp[2]) if len(sp) == 3 else sp
                       for sp in specs[step]]
    return specs


GPTH2_P = "{" + ", ".join(f"'{k}': prm['{v}']" for k, v in GPTH2_KEYS.items()) + "}"
GPTH2_G = "{" + ", ".join(f"'{k}': gr['{v}']" for k, v in GPTH2_KEYS.items()) + "}"

add("gpt_h2_op_classes_by_hand_adamw", "gpt", GPTH2_CELLS,
    GPT_STEPS + ["functions/adamw_update", "train/gpt"],
    notes="own data (length sort then Random(88) shuffle, itertools rows), parameters in a dict "
          "under dotted keys; one class per operation with __call__ / back(g) (Gather, Plus with "
          "sum_to_size, fused LayerNorm keeping xhat, the final norm's atoms as Mean / Minus / "
          "MeanSq / InvSqrt / Times / Affine ops, Linear, Heads, Scores, Causal, Softmax, Mix, "
          "Merge, Gelu, Tied, XEnt) chained by hand forward and reversed, every returned branch "
          "held; same() against retained .grad; batch 6; chain() / unchain() and own adamw_update, "
          "120 steps, batch 10; all right",
    where=_h2_specs(),
    checkpoint="for lab, a in [('o.W', g_oW)",
    functions={"functions/adamw_update": None},
    train={"cell": "for it in range(1, 121)", "probe": "for key in prm:",
           "params": GPTH2_P, "grads": GPTH2_G, "ref": "lambda Q: ref_gpt_loss(Q, xb, yb)",
           "losses": "hist"})

# ================================================================================================
# GPT H3 (a slip and its cascades). Own data (pathlib read_text, random.Random(404).sample, every
# seventh name held out, the rows a torch.full of zeros filled per name), parameters as globals
# under the learner's own names (tokE, posE, ln1_g / ln1_s, w_attn / b_attn, w_o / b_o, ln2_g /
# ln2_s, w_up / b_up, w_down / b_down, lnf_g / lnf_s); the heads folded into the batch dimension:
# `fold(z)` = view(B, T, NH, HS).transpose(1, 2).reshape(B * NH, T, HS), every attention product a
# torch.bmm on [B * NH, T, *] tensors, the mask a tril of ones compared with 0. The backward
# accumulates EVERY adjoint into one collections.defaultdict(float) `adj` keyed by the learner's
# activation / parameter names with `adj[k] += ...` (branches add up on their own; a first branch
# is adj[k] right after its first +=). `rel(a, b)` against retained .grad. Batch 9; exercise 1.
# Slip: un-merging the heads, the learner views adj['y_cat'] straight as [B * NH, T, HS], without
# the transpose that folded them (block/atty wrong; att, preatt_masked, preatt, qk, qkv, ln1,
# ln1_affine, x0, wpe, wte cascade).

GPTH3_CELLS = [
    r'''
import math, random
from pathlib import Path
from collections import defaultdict
import torch
import torch.nn.functional as F
''',
    r'''
names = Path('names.txt').read_text().split()
names = random.Random(404).sample(names, k=len(names))
train_names = [w for j, w in enumerate(names) if j % 7]
vocab = ['.'] + sorted({c for w in names for c in w})
code = {c: j for j, c in enumerate(vocab)}
T, C, NH = 16, 32, 4
HS, V = C // NH, len(vocab)
grid = torch.full((len(train_names), T + 1), 0, dtype=torch.long)
for r, w in enumerate(train_names):
    ids = [code[c] for c in w][:T]
    grid[r, 1:len(ids) + 1] = torch.tensor(ids)
X_all, Y_all = grid[:, :T], grid[:, T]
''',
    r'''
torch.manual_seed(31337)
def W_(fi, fo, s=1.0):
    return (torch.randn(fi, fo) * s / fi**0.5).requires_grad_()
def v_(n, mean=0.0):
    return (mean + 0.1 * torch.randn(n)).requires_grad_()
tokE = (0.1 * torch.randn(V, C)).requires_grad_()
posE = (0.1 * torch.randn(T, C)).requires_grad_()
ln1_g, ln1_s = v_(C, 1.0), v_(C)
w_attn, b_attn = W_(C, 3 * C), v_(3 * C)
w_o, b_o = W_(C, C, 0.5), v_(C)
ln2_g, ln2_s = v_(C, 1.0), v_(C)
w_up, b_up = W_(C, 4 * C), v_(4 * C)
w_down, b_down = W_(4 * C, C, 0.5), v_(C)
lnf_g, lnf_s = v_(C, 1.0), v_(C)
weights = [tokE, posE, ln1_g, ln1_s, w_attn, b_attn, w_o, b_o, ln2_g, ln2_s, w_up, b_up,
           w_down, b_down, lnf_g, lnf_s]
''',
    md("heads go into the batch dim: `(B, T, C) -> (B*NH, T, HS)` and every attention matmul is "
       "a `bmm`"),
    r'''
sel = torch.randint(0, len(X_all), (9,))
Xb, Yb = X_all[sel], Y_all[sel]
B = len(Xb)

def fold(z):
    return z.view(B, T, NH, HS).transpose(1, 2).reshape(B * NH, T, HS)

tri = torch.ones(T, T).tril()
tok_vec = tokE[Xb]
res0 = tok_vec + posE
mu_1 = res0.mean(-1, keepdim=True)
cen_1 = res0 - mu_1
var_1 = (cen_1**2).mean(-1, keepdim=True)
inv_1 = (var_1 + 1e-5)**-0.5
nrm_1 = cen_1 * inv_1
ln_1 = nrm_1 * ln1_g + ln1_s
qkv3 = ln_1 @ w_attn + b_attn
qf = fold(qkv3[..., :C])
kf = fold(qkv3[..., C:2 * C])
vf = fold(qkv3[..., 2 * C:])
att_logits = torch.bmm(qf, kf.transpose(1, 2)) * HS**-0.5
att_logits_m = att_logits.masked_fill(tri == 0, float('-inf'))
attw = F.softmax(att_logits_m, dim=-1)
yf = torch.bmm(attw, vf)
y_cat = yf.view(B, NH, T, HS).transpose(1, 2).reshape(B, T, C)
att_o = y_cat @ w_o + b_o
res1 = res0 + att_o
mu_2 = res1.mean(-1, keepdim=True)
cen_2 = res1 - mu_2
var_2 = (cen_2**2).mean(-1, keepdim=True)
inv_2 = (var_2 + 1e-5)**-0.5
nrm_2 = cen_2 * inv_2
ln_2 = nrm_2 * ln2_g + ln2_s
pre_gelu = ln_2 @ w_up + b_up
post_gelu = 0.5 * pre_gelu * (1 + torch.tanh(math.sqrt(2 / math.pi) * (pre_gelu + 0.044715 * pre_gelu**3)))
mlp_o = post_gelu @ w_down + b_down
res2 = res1 + mlp_o
mu_f = res2.mean(-1, keepdim=True)
cen_f = res2 - mu_f
var_f = (cen_f**2).mean(-1, keepdim=True)
inv_f = (var_f + 1e-5)**-0.5
nrm_f = cen_f * inv_f
ln_f = nrm_f * lnf_g + lnf_s
lg = ln_f @ tokE.T
tgt = torch.cat([Xb[:, 1:], Yb[:, None]], dim=1)
loss = F.cross_entropy(lg.view(-1, V), tgt.view(-1))
''',
    r'''
acts = {k: globals()[k] for k in ['tok_vec', 'res0', 'mu_1', 'cen_1', 'var_1', 'inv_1', 'nrm_1',
        'ln_1', 'qkv3', 'qf', 'kf', 'vf', 'att_logits', 'att_logits_m', 'attw', 'yf', 'y_cat',
        'att_o', 'res1', 'nrm_2', 'ln_2', 'pre_gelu', 'post_gelu', 'mlp_o', 'res2', 'mu_f',
        'cen_f', 'var_f', 'inv_f', 'nrm_f', 'ln_f', 'lg']}
for a in acts.values():
    a.retain_grad()
loss.backward()
print(loss.item())

def rel(a, b):
    return f"{((a - b).norm() / (b.norm() + 1e-12)).item():.1e}"
''',
    md("### backward: everything goes into `adj`, always with `+=`"),
    r'''
adj = defaultdict(float)
M = B * T
with torch.no_grad():
    p = F.softmax(lg, -1)
    p.view(M, V)[range(M), tgt.view(M)] -= 1
    adj['lg'] += p / M
''',
    r'''
adj['ln_f'] += adj['lg'] @ tokE.detach()
adj['tokE'] += (adj['lg'].view(M, V).T @ ln_f.view(M, C)).detach()
''',
    r'''
with torch.no_grad():
    adj['nrm_f'] += adj['ln_f'] * lnf_g
    adj['lnf_g'] += (adj['ln_f'] * nrm_f).sum((0, 1))
    adj['lnf_s'] += adj['ln_f'].sum((0, 1))
    adj['inv_f'] += (adj['nrm_f'] * cen_f).sum(-1, keepdim=True)
''',
    r'''
adj['cen_f'] += (adj['nrm_f'] * inv_f).detach()
''',
    r'''
with torch.no_grad():
    adj['var_f'] += adj['inv_f'] * -0.5 * (var_f + 1e-5)**-1.5
    adj['cen_f'] += adj['var_f'] * 2 * cen_f / C
    adj['mu_f'] += -adj['cen_f'].sum(-1, keepdim=True)
''',
    r'''
adj['res2'] += adj['cen_f'].clone()
''',
    r'''
with torch.no_grad():
    adj['res2'] += adj['mu_f'].expand(B, T, C) / C
    adj['mlp_o'] += adj['res2']
''',
    r'''
adj['res1'] += adj['res2'].clone()
''',
    r'''
with torch.no_grad():
    adj['post_gelu'] += adj['mlp_o'] @ w_down.T
    adj['w_down'] += post_gelu.view(M, -1).T @ adj['mlp_o'].view(M, -1)
    adj['b_down'] += adj['mlp_o'].sum((0, 1))
    kz = math.sqrt(2 / math.pi)
    tz = torch.tanh(kz * (pre_gelu + 0.044715 * pre_gelu**3))
    adj['pre_gelu'] += adj['post_gelu'] * (0.5 * (1 + tz) + 0.5 * pre_gelu * (1 - tz**2) * kz * (1 + 0.134145 * pre_gelu**2))
    adj['ln_2'] += adj['pre_gelu'] @ w_up.T
    adj['w_up'] += ln_2.view(M, -1).T @ adj['pre_gelu'].view(M, -1)
    adj['b_up'] += adj['pre_gelu'].sum((0, 1))
    adj['nrm_2'] += adj['ln_2'] * ln2_g
    adj['ln2_g'] += (adj['ln_2'] * nrm_2).sum((0, 1))
    adj['ln2_s'] += adj['ln_2'].sum((0, 1))
    gn = adj['nrm_2']
    adj['res1'] += inv_2 / C * (C * gn - gn.sum(-1, keepdim=True) - nrm_2 * (gn * nrm_2).sum(-1, keepdim=True))
    adj['att_o'] += adj['res1']
''',
    r'''
adj['res0'] += adj['res1'].clone()
''',
    r'''
with torch.no_grad():
    adj['y_cat'] += adj['att_o'] @ w_o.T
    adj['w_o'] += y_cat.view(M, C).T @ adj['att_o'].view(M, C)
    adj['b_o'] += adj['att_o'].sum((0, 1))
    adj['yf'] += adj['y_cat'].view(B * NH, T, HS)
    adj['attw'] += torch.bmm(adj['yf'], vf.transpose(1, 2))
    adj['vf'] += torch.bmm(attw.transpose(1, 2), adj['yf'])
    adj['att_logits_m'] += attw * (adj['attw'] - (attw * adj['attw']).sum(-1, keepdim=True))
    adj['att_logits'] += adj['att_logits_m'].masked_fill(tri == 0, 0.0)
    adj['qf'] += torch.bmm(adj['att_logits'], kf) * HS**-0.5
    adj['kf'] += torch.bmm(adj['att_logits'].transpose(1, 2), qf) * HS**-0.5
    unfold = lambda g: g.view(B, NH, T, HS).transpose(1, 2).reshape(B, T, C)
    adj['qkv3'] += torch.cat([unfold(adj['qf']), unfold(adj['kf']), unfold(adj['vf'])], dim=-1)
''',
    r'''
with torch.no_grad():
    adj['ln_1'] += adj['qkv3'] @ w_attn.T
    adj['w_attn'] += ln_1.view(M, C).T @ adj['qkv3'].view(M, 3 * C)
    adj['b_attn'] += adj['qkv3'].sum((0, 1))
    adj['nrm_1'] += adj['ln_1'] * ln1_g
    adj['ln1_g'] += (adj['ln_1'] * nrm_1).sum((0, 1))
    adj['ln1_s'] += adj['ln_1'].sum((0, 1))
    gn = adj['nrm_1']
    adj['res0'] += inv_1 / C * (C * gn - gn.sum(-1, keepdim=True) - nrm_1 * (gn * nrm_1).sum(-1, keepdim=True))
    adj['tok_vec'] += adj['res0']
    adj['posE'] += adj['res0'].sum(0)
    adj['tokE'] += torch.zeros(V, C).index_add_(0, Xb.view(-1), adj['tok_vec'].view(M, C))
''',
    r'''
for k, a in acts.items():
    if k in adj:
        print(f"{k:14s} {rel(adj[k], a.grad)}")
for k in ['tokE', 'posE', 'ln1_g', 'ln1_s', 'w_attn', 'b_attn', 'w_o', 'b_o', 'ln2_g', 'ln2_s',
          'w_up', 'b_up', 'w_down', 'b_down', 'lnf_g', 'lnf_s']:
    print(f"{k:14s} {rel(adj[k], globals()[k].grad)}")
''',
]

GPTH3_FWD = {"logits": "lg", "lnf": "ln_f", "lnf_norm": "nrm_f", "lnf_rstd": "inv_f",
             "lnf_var": "var_f", "lnf_xc": "cen_f", "lnf_mean": "mu_f", "x2": "res2",
             "fcproj": "mlp_o", "fch_gelu": "post_gelu", "fch": "pre_gelu", "ln2": "ln_2",
             "ln2_norm": "nrm_2", "x1": "res1", "attproj": "att_o", "y": "y_cat", "atty": "yf",
             "att": "attw", "v": "vf", "preatt_masked": "att_logits_m", "preatt": "att_logits",
             "q": "qf", "k": "kf", "qkv": "qkv3", "ln1": "ln_1", "ln1_norm": "nrm_1", "x0": "res0",
             "tok": "tok_vec", "wte": "tokE", "wpe": "posE", "lnfw": "lnf_g", "lnfb": "lnf_s",
             "fcprojw": "w_down", "fcprojb": "b_down", "fcw": "w_up", "fcb": "b_up",
             "ln2w": "ln2_g", "ln2b": "ln2_s", "attprojw": "w_o", "attprojb": "b_o",
             "qkvw": "w_attn", "qkvb": "b_attn", "ln1w": "ln1_g", "ln1b": "ln1_s"}

add("gpt_h3_bmm_folded_heads_defaultdict_unfold_slip", "gpt", GPTH3_CELLS, GPT_STEPS,
    wrong=["block/atty"],
    cascade=["block/att", "block/preatt_masked", "block/preatt", "block/qk", "block/qkv",
             "block/ln1", "block/ln1_affine", "block/x0", "block/wpe", "block/wte"],
    notes="own data (Path.read_text, Random(404).sample, every seventh name held out, rows a "
          "torch.full filled per name), parameters as globals under own names; heads folded into "
          "the batch dimension (B * NH, T, HS) with torch.bmm; every adjoint accumulated into a "
          "defaultdict(float) with +=, first branches read right after their first +=; rel() "
          "against retained .grad; batch 9; exercise 1. Slip: datty taken as dy viewed straight "
          "to (B * NH, T, HS), the heads' transpose missing; att down to wte cascade",
    where=where("gpt", GPT_STEPS, fwd=GPTH3_FWD,
                grad=lambda k: f"adj['{GPTH3_FWD[k]}']",
                first_after={"wte": "adj['tokE'] += (adj['lg']",
                             "lnf_xc": "adj['cen_f'] += (adj['nrm_f'] * inv_f)",
                             "x2": "adj['res2'] += adj['cen_f'].clone()",
                             "x1": "adj['res1'] += adj['res2'].clone()",
                             "x0": "adj['res0'] += adj['res1'].clone()"}),
    fix=[("adj['yf'] += adj['y_cat'].view(B * NH, T, HS)",
          "adj['yf'] += adj['y_cat'].view(B, T, NH, HS).transpose(1, 2).reshape(B * NH, T, HS)")])

# ================================================================================================
# GPT H4 (right throughout). Exercises 2 and 3 only. Own data (a stride-13 walk over the names for
# the order, rows from bytes: ord(c) - 96 with '.' as 0), the seven functions written with
# scatter_add_ over an expanded index (encoder), flatten(0, -2) matmuls (matmul), heads folded
# into the batch with bmm (attention), the GELU's slope through 1 - tanh**2 kept in a variable
# `sech2`, one-hot subtraction by scatter_ (cross-entropy), and
# in-place lerp_ / mul_ / addcdiv_ (AdamW); each checked by `against_vjp(fn_out, f, *inputs)`
# with torch.func.vjp. The training forward `forward(Wt, X, Y, tape)` pushes each layer's
# residuals onto a plain list used as a STACK, and `backward(Wt, tape)` pops them in reverse
# (LIFO) calling the functions; parameters in a dict `Wt` under own keys; 200 steps of
# adamw_update, batch 11.

GPTH4_CELLS = [
    md("# GPT, part 2: the layers as functions, then training on them"),
    r'''
import math
import torch
import torch.nn.functional as F
from torch.func import vjp
''',
    r'''
raw = open('names.txt').read().split('\n')
raw = [w for w in raw if w]
order = [(13 * j) % len(raw) for j in range(len(raw))]
seq = [raw[j] for j in order]
T = 16
def enc(w):
    ids = [0] + [ord(c) - 96 for c in w] + [0] * (T + 1)
    return ids[:T + 1]
tbl = torch.tensor([enc(w) for w in seq[:25000]])
Xtr, Ytr = tbl[:, :T], tbl[:, T]
V = 27
''',
    r'''
def encoder_backward(dout, inp, vocab_size):
    C = dout.shape[-1]
    flat = inp.reshape(-1, 1).expand(-1, C)
    dwte = torch.zeros(vocab_size, C).scatter_add_(0, flat, dout.reshape(-1, C))
    return dwte, dout.sum(0)

def layernorm_backward(dout, inp, weight, mean, rstd):
    xhat = (inp - mean) * rstd
    dxhat = dout * weight
    dinp = rstd * (dxhat - dxhat.mean(-1, keepdim=True) - xhat * (dxhat * xhat).mean(-1, keepdim=True))
    return dinp, (dout * xhat).flatten(0, -2).sum(0), dout.flatten(0, -2).sum(0)

def matmul_backward(dout, inp, weight):
    d2, i2 = dout.flatten(0, -2), inp.flatten(0, -2)
    return dout @ weight.T, i2.T @ d2, d2.sum(0)

def attention_backward(dout, qkv, att, n_head):
    B, T_, C3 = qkv.shape
    C = C3 // 3
    hs = C // n_head
    fold = lambda z: z.reshape(B, T_, n_head, hs).transpose(1, 2).reshape(B * n_head, T_, hs)
    unfold = lambda z: z.reshape(B, n_head, T_, hs).transpose(1, 2).reshape(B, T_, C)
    q, k, v = (fold(z) for z in qkv.split(C, dim=-1))
    a = att.reshape(B * n_head, T_, T_)
    dy = fold(dout)
    da = torch.bmm(dy, v.transpose(1, 2))
    dv = torch.bmm(a.transpose(1, 2), dy)
    ds = a * (da - (a * da).sum(-1, keepdim=True)) * hs**-0.5
    dq = torch.bmm(ds, k)
    dk = torch.bmm(ds.transpose(1, 2), q)
    return torch.cat([unfold(dq), unfold(dk), unfold(dv)], dim=-1)

def gelu_backward(dout, inp):
    c = math.sqrt(2 / math.pi)
    th = torch.tanh(c * (inp + 0.044715 * inp**3))
    sech2 = 1 - th * th
    return dout * (0.5 * (1 + th) + 0.5 * inp * sech2 * c * (1 + 3 * 0.044715 * inp**2))

def crossentropy_softmax_backward(logits, targets):
    n = logits.shape[0]
    onehot = torch.zeros_like(logits).scatter_(1, targets[:, None], 1.0)
    return (logits.softmax(1) - onehot) / n

def adamw_update(param, grad, m, v, t, lr, beta1, beta2, eps, weight_decay):
    m.lerp_(grad, 1 - beta1)
    v.mul_(beta2).add_((1 - beta2) * grad * grad)
    param.mul_(1 - lr * weight_decay)
    param.addcdiv_(m, (v / (1 - beta2**t)).sqrt() + eps, value=-lr / (1 - beta1**t))
''',
    r'''
def against_vjp(mine, f, *inputs, dout=None):
    out, pull = vjp(f, *inputs)
    ref = pull(torch.ones_like(out) if dout is None else dout)
    print(f.__name__ if hasattr(f, '__name__') else 'f',
          [f"{(a - b).abs().max().item():.1e}" for a, b in zip(mine, ref)])

torch.manual_seed(99)
B_, T_, C_, nh_ = 3, 6, 12, 2
ids = torch.randint(0, 9, (B_, T_)); ids[0, 0] = ids[1, 1]
wt, wp = torch.randn(9, C_), torch.randn(T_, C_)
d = torch.randn(B_, T_, C_)
against_vjp(encoder_backward(d, ids, 9), lambda a, b: a[ids] + b, wt, wp, dout=d)

x = torch.randn(B_, T_, C_) * 3 + 1
w, b = torch.randn(C_), torch.randn(C_)
mu = x.mean(-1, keepdim=True)
rs = ((x - mu).pow(2).mean(-1, keepdim=True) + 1e-5)**-0.5
def ln(x, w, b):
    m = x.mean(-1, keepdim=True)
    return (x - m) * ((x - m).pow(2).mean(-1, keepdim=True) + 1e-5)**-0.5 * w + b
against_vjp(layernorm_backward(d, x, w, mu, rs), ln, x, w, b, dout=d)

W2, b2 = torch.randn(C_, 5), torch.randn(5)
d5 = torch.randn(B_, T_, 5)
against_vjp(matmul_backward(d5, x, W2), lambda x, w, b: x @ w + b, x, W2, b2, dout=d5)

def attn(z):
    C = z.shape[-1] // 3
    q, k, v = (t.reshape(B_, T_, nh_, C // nh_).transpose(1, 2) for t in z.split(C, -1))
    s = (q @ k.transpose(-1, -2) / math.sqrt(C // nh_)).masked_fill(torch.ones(T_, T_).tril() == 0, -math.inf)
    return (s.softmax(-1) @ v).transpose(1, 2).reshape(B_, T_, C), s.softmax(-1)
z = torch.randn(B_, T_, 3 * C_)
_, A_ = attn(z)
against_vjp([attention_backward(d, z, A_, nh_)], lambda z: attn(z)[0], z, dout=d)

u = torch.randn(4, 7) * 2
du = torch.randn(4, 7)
against_vjp([gelu_backward(du, u)], lambda u: 0.5 * u * (1 + torch.tanh(math.sqrt(2 / math.pi) * (u + 0.044715 * u**3))), u, dout=du)

lz, tz = torch.randn(10, 6), torch.randint(0, 6, (10,))
against_vjp([crossentropy_softmax_backward(lz, tz)], lambda l: F.cross_entropy(l, tz), lz)
''',
    md("## training: forward pushes residuals on a stack, backward pops them"),
    r'''
gen = torch.Generator().manual_seed(2718)
C, nh = 32, 4
def gauss(*s, std=1.0, mean=0.0):
    return mean + std * torch.randn(*s, generator=gen)
Wt = {'wtok': gauss(V, C, std=0.1), 'wpos': gauss(T, C, std=0.1),
      'n1w': gauss(C, std=0.1, mean=1.0), 'n1b': gauss(C, std=0.1),
      'Wqkv': gauss(C, 3 * C, std=C**-0.5), 'bqkv': gauss(3 * C, std=0.1),
      'Wproj': gauss(C, C, std=0.5 * C**-0.5), 'bproj': gauss(C, std=0.1),
      'n2w': gauss(C, std=0.1, mean=1.0), 'n2b': gauss(C, std=0.1),
      'Wfc': gauss(C, 4 * C, std=C**-0.5), 'bfc': gauss(4 * C, std=0.1),
      'Wout': gauss(4 * C, C, std=0.5 * (4 * C)**-0.5), 'bout': gauss(C, std=0.1),
      'nfw': gauss(C, std=0.1, mean=1.0), 'nfb': gauss(C, std=0.1)}

def norm(x, w, b, tape):
    m = x.mean(-1, keepdim=True)
    r = ((x - m)**2).mean(-1, keepdim=True).add(1e-5).rsqrt()
    tape.append((x, w, m, r))
    return (x - m) * r * w + b

def forward(Wt, X, Y, tape):
    B = X.shape[0]
    tape.append(X)
    x = Wt['wtok'][X] + Wt['wpos']
    a = norm(x, Wt['n1w'], Wt['n1b'], tape)
    tape.append(a)
    qkv = a @ Wt['Wqkv'] + Wt['bqkv']
    q, k, v = (t.reshape(B, T, nh, C // nh).transpose(1, 2) for t in qkv.split(C, -1))
    s = (q @ k.transpose(-1, -2) * (C // nh)**-0.5).masked_fill(torch.ones(T, T).tril() == 0, -math.inf)
    att = s.softmax(-1)
    y = (att @ v).transpose(1, 2).reshape(B, T, C)
    tape.append((qkv, att, y))
    x = x + y @ Wt['Wproj'] + Wt['bproj']
    a = norm(x, Wt['n2w'], Wt['n2b'], tape)
    h = a @ Wt['Wfc'] + Wt['bfc']
    hg = 0.5 * h * (1 + torch.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h**3)))
    tape.append((a, h, hg))
    x = x + hg @ Wt['Wout'] + Wt['bout']
    a = norm(x, Wt['nfw'], Wt['nfb'], tape)
    tape.append(a)
    logits = (a @ Wt['wtok'].T).reshape(B * T, V)
    targets = torch.cat([X[:, 1:], Y[:, None]], 1).reshape(-1)
    tape.append((logits, targets))
    return F.cross_entropy(logits, targets)

def backward(Wt, tape):
    g = {}
    logits, targets = tape.pop()
    a = tape.pop()
    B, T_, C_ = a.shape
    dlog = crossentropy_softmax_backward(logits, targets).view(B, T_, V)
    da, dWtok_t, _ = matmul_backward(dlog, a, Wt['wtok'].T)
    x, w, m, r = tape.pop()
    dx, g['nfw'], g['nfb'] = layernorm_backward(da, x, w, m, r)
    a, h, hg = tape.pop()
    dhg, g['Wout'], g['bout'] = matmul_backward(dx, hg, Wt['Wout'])
    da, g['Wfc'], g['bfc'] = matmul_backward(gelu_backward(dhg, h), a, Wt['Wfc'])
    x, w, m, r = tape.pop()
    dx = dx + layernorm_backward(da, x, w, m, r)[0]
    g['n2w'], g['n2b'] = layernorm_backward(da, x, w, m, r)[1:]
    qkv, att, y = tape.pop()
    dy, g['Wproj'], g['bproj'] = matmul_backward(dx, y, Wt['Wproj'])
    dqkv = attention_backward(dy, qkv, att, nh)
    a = tape.pop()
    da, g['Wqkv'], g['bqkv'] = matmul_backward(dqkv, a, Wt['Wqkv'])
    x, w, m, r = tape.pop()
    dn, g['n1w'], g['n1b'] = layernorm_backward(da, x, w, m, r)
    dx = dx + dn
    X = tape.pop()
    assert not tape
    dtok, g['wpos'] = encoder_backward(dx, X, V)
    g['wtok'] = dtok + dWtok_t.T
    return g
''',
    r'''
state = {k: (torch.zeros_like(p), torch.zeros_like(p)) for k, p in Wt.items()}
losses = []
for t in range(1, 201):
    pick = torch.randint(0, len(Xtr), (11,), generator=gen)
    xb, yb = Xtr[pick], Ytr[pick]
    tape = []
    lossv = forward(Wt, xb, yb, tape)
    g = backward(Wt, tape)
    for k, p in Wt.items():
        adamw_update(p, g[k], state[k][0], state[k][1], t, 5e-3, 0.9, 0.999, 1e-8, 0.0)
    losses.append(lossv.item())
print(f"{losses[0]:.3f} -> {sum(losses[-20:]) / 20:.3f}")
''',
]

add("gpt_h4_functions_lifo_stack_adamw", "gpt", GPTH4_CELLS, GPT_FUNCS + ["train/gpt"],
    notes="exercises 2 and 3 only: own data (a stride-13 walk for the order, ids by ord(c) - 96); "
          "the seven functions (scatter_add_ over an expanded index, flatten(0, -2) matmuls, "
          "heads folded into the batch with bmm, a sech2 variable in the GELU, one-hot by "
          "scatter_, lerp_ / addcdiv_ AdamW) checked with torch.func.vjp by against_vjp(); the "
          "training forward pushes residuals on a list used as a stack and backward pops them "
          "(LIFO) through the functions; parameters in a dict under own keys; 200 steps of "
          "adamw_update, batch 11; all right",
    functions={s: None for s in GPT_FUNCS},
    train={"cell": "for t in range(1, 201)", "probe": "for k, p in Wt.items():",
           "params": "Wt", "grads": "g", "ref": "lambda Q: forward(Q, xb, yb, [])",
           "losses": "losses"})

# ================================================================================================
# LSTM H5 (a slip and its cascades). Own data (random.Random(7) shuffle, '.'-prefixed rows padded
# by list multiplication), no run_lstm: the learner's own time loop over the whole sequence keeps
# every step's tensors in Python lists (XIN, PRE, AI / AF / AG / AO, I_ / F_ / G_ / O_, C_, H_),
# step t using clones of the weights; the weights stored GATE-MAJOR, Ux [4, D, H], Uh [4, H, H],
# ub [4, H], the pre-activations a [4, n, H] tensor by torch.einsum('nd,gdh->gnh') and unbind(0)
# into the four gates. Exercise 1 at step t with d_xxx names: the future's share of dh and dc by
# the learner's own loop walking the lists reversed from the last step down to t + 1, first
# branches held; `err(a, b)` against retained .grad. Fused gates by one torch.stack of slopes;
# lstm_step_backward; lstm_backward as its own reversed loop over unbind(1)'ed lists; training:
# an own list-based unroll, lstm_backward on the gate-major weights reshaped to the lesson's
# (D, 4H), plain SGD with a clip, 200 steps, batch 20 (exercise 1's batch 13).
# Slip: exercise 1 takes df with the NEW cell state, C_[t], where the previous one, C_[t - 1],
# belongs (an off-by-one in the lists) (step/c wrong; gates, ifgo, inputs and fused/gates cascade;
# h and g stay right, the functions and the training are written separately and right).

LSTMH5_CELLS = [
    r'''
import random
import torch
import torch.nn.functional as F
''',
    r'''
words = open('names.txt', encoding='utf-8').read().splitlines()
random.Random(7).shuffle(words)
letters = sorted(set(''.join(words)))
ch2i = dict(zip(letters, range(1, len(letters) + 1)))
ch2i['.'] = 0
V = len(ch2i)
Lmax = max(len(w) for w in words) + 1
Xrows, Yrows = [], []
for w in words:
    ids = [ch2i[ch] for ch in w]
    Xrows.append(([0] + ids + [0] * Lmax)[:Lmax])
    Yrows.append((ids + [0] + [-1] * Lmax)[:Lmax])
Xall, Yall = torch.tensor(Xrows), torch.tensor(Yrows)
ntr = int(0.8 * len(words))

def get_batch(k, g=None):
    ix = torch.randint(0, ntr, (k,), generator=g)
    xb, yb = Xall[ix], Yall[ix]
    L = int((yb >= 0).sum(1).max())
    return xb[:, :L], yb[:, :L]
''',
    md("Gate-major weights: `Ux[0]` is the input gate's D x H matrix, then forget, cell, output."),
    r'''
D, H = 10, 32
rng = torch.Generator().manual_seed(8128)
Cm = torch.randn(V, D, generator=rng)
Ux = torch.randn(4, D, H, generator=rng) / D**0.5
Uh = torch.randn(4, H, H, generator=rng) / H**0.5
ub = 0.1 * torch.randn(4, H, generator=rng)
ub[1] += 1.0
Vout = torch.randn(H, V, generator=rng) / H**0.5
c_out = 0.1 * torch.randn(V, generator=rng)
for p in (Cm, Ux, Uh, ub, Vout, c_out):
    p.requires_grad_()
''',
    r'''
Xb, Yb = get_batch(13, rng)
n, L = Xb.shape
t = 3
Ux_t, Uh_t, ub_t = Ux.clone(), Uh.clone(), ub.clone()
xs = Cm[Xb]
h = c = torch.zeros(n, H)
XIN, PRE, AI, AF, AG, AO, I_, F_, G_, O_, C_, H_ = ([] for _ in range(12))
for s in range(L):
    wx, wh, bs = (Ux_t, Uh_t, ub_t) if s == t else (Ux, Uh, ub)
    xin = xs[:, s]
    pre = torch.einsum('nd,gdh->gnh', xin, wx) + torch.einsum('nk,gkh->gnh', h, wh) + bs[:, None]
    ai, af, ag, ao = pre.unbind(0)
    i, f, g, o = ai.sigmoid(), af.sigmoid(), ag.tanh(), ao.sigmoid()
    c = f * c + i * g
    h = o * c.tanh()
    for lst, val in zip((XIN, PRE, AI, AF, AG, AO, I_, F_, G_, O_, C_, H_),
                        (xin, pre, ai, af, ag, ao, i, f, g, o, c, h)):
        lst.append(val)
hs = torch.stack(H_, dim=1)
logits = hs @ Vout + c_out
loss = F.cross_entropy(logits.view(-1, V), Yb.reshape(-1), ignore_index=-1)
print(L, loss.item())
''',
    r'''
for tt in [logits, hs, *PRE, *AI, *AF, *AG, *AO, *I_, *F_, *G_, *O_, *C_, *H_, XIN[t], Ux_t, Uh_t, ub_t]:
    tt.retain_grad()
loss.backward()

def err(a, b):
    return f"{(a - b).abs().max().item():.1e}"
''',
    md("## step t, backwards"),
    r'''
with torch.no_grad():
    live = (Yb >= 0).float()
    d_logits = logits.softmax(-1)
    d_logits -= F.one_hot(Yb.clamp(min=0), V)
    d_logits *= (live / live.sum()).unsqueeze(-1)
    d_hs = d_logits @ Vout.T
    d_Vout = torch.einsum('nth,ntv->hv', hs, d_logits)
    d_c_out = d_logits.sum((0, 1))
print(err(d_logits, logits.grad), err(d_hs, hs.grad), err(d_Vout, Vout.grad), err(d_c_out, c_out.grad))
''',
    r'''
d_hs_before = d_hs[:, :t]
d_hs_after = d_hs[:, t + 1:]
d_h = d_hs[:, t].clone()
''',
    md("what comes back from the future: walk my lists from the end down to t+1"),
    r'''
with torch.no_grad():
    dh_nx = torch.zeros(n, H)
    dc_nx = torch.zeros(n, H)
    for s in range(L - 1, t, -1):
        dh_s = d_hs[:, s] + dh_nx
        tc = C_[s].tanh()
        dc_s = dc_nx + dh_s * O_[s] * (1 - tc**2)
        cprev = C_[s - 1]
        dpre_s = torch.stack([dc_s * G_[s] * I_[s] * (1 - I_[s]),
                              dc_s * cprev * F_[s] * (1 - F_[s]),
                              dc_s * I_[s] * (1 - G_[s]**2),
                              dh_s * tc * O_[s] * (1 - O_[s])])
        dh_nx = torch.einsum('gnh,gkh->nk', dpre_s, Uh)
        dc_nx = dc_s * F_[s]
''',
    r'''
d_h += dh_nx
d_c = dc_nx.clone()
print(err(d_h, H_[t].grad))
''',
    r'''
with torch.no_grad():
    th = C_[t].tanh()
    d_o = d_h * th
    d_c += d_h * O_[t] * (1 - th**2)
    d_f = d_c * C_[t]
    d_cprev = d_c * F_[t]
    d_i = d_c * G_[t]
    d_g = d_c * I_[t]
print(err(d_o, O_[t].grad), err(d_c, C_[t].grad), err(d_f, F_[t].grad), err(d_i, I_[t].grad), err(d_g, G_[t].grad))
''',
    r'''
with torch.no_grad():
    d_ai = d_i * I_[t] * (1 - I_[t])
    d_af = d_f * F_[t] * (1 - F_[t])
    d_ag = d_g * (1 - G_[t]**2)
    d_ao = d_o * O_[t] * (1 - O_[t])
    d_pre = torch.stack([d_ai, d_af, d_ag, d_ao])
    d_xin = torch.einsum('gnh,gdh->nd', d_pre, Ux_t)
    d_hprev = torch.einsum('gnh,gkh->nk', d_pre, Uh_t)
    d_Ux_t = torch.einsum('nd,gnh->gdh', XIN[t], d_pre)
    d_Uh_t = torch.einsum('nk,gnh->gkh', H_[t - 1], d_pre)
    d_ub_t = d_pre.sum(1)
print(err(d_pre, PRE[t].grad), err(d_xin, XIN[t].grad), err(d_Ux_t, Ux_t.grad), err(d_Uh_t, Uh_t.grad), err(d_ub_t, ub_t.grad))
''',
    md("## exercise 3: fused"),
    r'''
with torch.no_grad():
    slope = torch.stack([I_[t] * (1 - I_[t]), F_[t] * (1 - F_[t]), 1 - G_[t]**2, O_[t] * (1 - O_[t])])
    d_pre_fused = torch.stack([d_i, d_f, d_g, d_o]) * slope
print(err(d_pre_fused, PRE[t].grad))
''',
    r'''
def lstm_step_backward(dh, dc, x, h_prev, c_prev, c, gates, Wx, Wh):
    i, f, g, o = gates.split(gates.shape[1] // 4, dim=1)
    tc = torch.tanh(c)
    dc = dc + dh * o * (1 - tc * tc)
    d = torch.cat([dc * g * i * (1 - i), dc * c_prev * f * (1 - f), dc * i * (1 - g * g),
                   dh * tc * o * (1 - o)], dim=1)
    return d @ Wx.T, d @ Wh.T, dc * f, x.T @ d, h_prev.T @ d, d.sum(0)
''',
    md("## exercise 2: BPTT over lists"),
    r'''
def lstm_backward(dhs, xs, h0, c0, hs, cs, gates, Wx, Wh):
    Hn = h0.shape[1]
    hl = [h0, *hs.unbind(1)]
    cl = [c0, *cs.unbind(1)]
    dxl = []
    dWx, dWh, db = torch.zeros_like(Wx), torch.zeros_like(Wh), torch.zeros(Wx.shape[1])
    dh, dc = torch.zeros_like(h0), torch.zeros_like(c0)
    for s, (x, gt) in reversed(list(enumerate(zip(xs.unbind(1), gates.unbind(1))))):
        i, f, g, o = gt[:, :Hn], gt[:, Hn:2 * Hn], gt[:, 2 * Hn:3 * Hn], gt[:, 3 * Hn:]
        dh = dh + dhs[:, s]
        tc = cl[s + 1].tanh()
        dc = dc + dh * o * (1 - tc**2)
        d = torch.cat([dc * g * i * (1 - i), dc * cl[s] * f * (1 - f), dc * i * (1 - g**2),
                       dh * tc * o * (1 - o)], 1)
        dxl.append(d @ Wx.T)
        dWx += x.T @ d
        dWh += hl[s].T @ d
        db += d.sum(0)
        dh = d @ Wh.T
        dc = dc * f
    return torch.stack(dxl[::-1], 1), dh, dc, dWx, dWh, db
''',
    md("## exercise 4: train with my BPTT"),
    r'''
def unroll(P, X):
    n, L = X.shape
    h = c = torch.zeros(n, H)
    xs = P['Cm'][X]
    hl, cl, gl = [], [], []
    for s in range(L):
        a = torch.einsum('nd,gdh->gnh', xs[:, s], P['Ux']) + torch.einsum('nk,gkh->gnh', h, P['Uh']) + P['ub'][:, None]
        i, f, g, o = a[0].sigmoid(), a[1].sigmoid(), a[2].tanh(), a[3].sigmoid()
        c = f * c + i * g
        h = o * c.tanh()
        hl.append(h); cl.append(c); gl.append(torch.cat([i, f, g, o], 1))
    hs = torch.stack(hl, 1)
    return xs, hs, torch.stack(cl, 1), torch.stack(gl, 1), hs @ P['Vout'] + P['c_out']

def unroll_loss(P, X, Y):
    return F.cross_entropy(unroll(P, X)[-1].reshape(-1, V), Y.reshape(-1), ignore_index=-1)

to_lesson = lambda W: W.permute(1, 0, 2).reshape(W.shape[1], 4 * H)
from_lesson = lambda W: W.reshape(W.shape[0], 4, H).permute(1, 0, 2)
''',
    r'''
net = {k: v.detach().clone() for k, v in dict(Cm=Cm, Ux=Ux, Uh=Uh, ub=ub, Vout=Vout, c_out=c_out).items()}
curve = []
for step in range(200):
    xb, yb = get_batch(20, rng)
    xs_, hs_, cs_, gates_, lg = unroll(net, xb)
    curve.append(F.cross_entropy(lg.reshape(-1, V), yb.reshape(-1), ignore_index=-1).item())
    live = (yb >= 0).float()
    dlg = (lg.softmax(-1) - F.one_hot(yb.clamp(min=0), V)) * (live / live.sum())[..., None]
    z = torch.zeros(len(xb), H)
    dxs, _, _, dWx, dWh, db = lstm_backward(dlg @ net['Vout'].T, xs_, z, z, hs_, cs_, gates_,
                                            to_lesson(net['Ux']), to_lesson(net['Uh']))
    grads = {'Cm': torch.zeros_like(net['Cm']).index_add_(0, xb.flatten(), dxs.reshape(-1, D)),
             'Ux': from_lesson(dWx), 'Uh': from_lesson(dWh), 'ub': db.view(4, H),
             'Vout': hs_.reshape(-1, H).T @ dlg.reshape(-1, V), 'c_out': dlg.sum((0, 1))}
    total = torch.sqrt(sum((gv**2).sum() for gv in grads.values()))
    scale = min(1.0, 5.0 / total.item())
    for k in net:
        net[k] -= 1.0 * scale * grads[k]
print(sum(curve[:20]) / 20, sum(curve[-20:]) / 20)
''',
]

LSTMH5_SPECS = {
    "step/logits": [("d_logits", "G(logits)")],
    "step/hs": [("d_hs", "G(hs)"), ("d_Vout", "G(Vout)"), ("d_c_out", "G(c_out)")],
    "step/h_out": [("d_hs_before", "G(hs)[:, :t]"), ("d_hs_after", "G(hs)[:, t + 1:]"),
                   ("d_h", "G(hs)[:, t]", "d_h = d_hs[:, t].clone()")],
    "step/state": [("d_h", "G(H_[t])"),
                   ("d_c", "G(C_[t + 1]) * F_[t + 1]", "d_c = dc_nx.clone()")],
    "step/h": [("d_o", "G(O_[t])"), ("d_c", "G(C_[t])")],
    "step/c": [("d_f", "G(F_[t])"),
               ("d_cprev", "edge(lambda cp: F_[t].detach() * cp, C_[t - 1], G(C_[t]))"),
               ("d_i", "G(I_[t])"), ("d_g", "G(G_[t])")],
    "step/gates": [("d_ai", "G(AI[t])"), ("d_af", "G(AF[t])"), ("d_ao", "G(AO[t])")],
    "step/g": [("d_ag", "G(AG[t])")],
    "step/ifgo": [("d_pre", "G(PRE[t])")],
    "step/inputs": [("d_xin", "G(XIN[t])"),
                    ("d_hprev", "edge(lambda hp: torch.einsum('nk,gkh->gnh', hp, Uh_t.detach()), "
                                "H_[t - 1], G(PRE[t]))"),
                    ("d_Ux_t", "G(Ux_t)"), ("d_Uh_t", "G(Uh_t)"), ("d_ub_t", "G(ub_t)")],
    "fused/gates": [("d_pre_fused", "G(PRE[t])")],
}

add("lstm_h5_lists_gate_major_df_off_by_one_slip", "lstm", LSTMH5_CELLS, LSTM_ALL,
    wrong=["step/c"],
    cascade=["step/gates", "step/ifgo", "step/inputs", "fused/gates"],
    notes="own data (Random(7) shuffle), no run_lstm: an own time loop keeping every step's "
          "tensors in Python lists, step t on weight clones; weights gate-major (Ux [4, D, H], "
          "Uh [4, H, H], ub [4, H]) through einsum and unbind(0); exercise 1 with d_xxx names, "
          "the future's share by a loop walking the lists reversed, first branches held, err() "
          "against retained .grad; fused gates by a stack of slopes; lstm_step_backward; "
          "lstm_backward as its own reversed loop over unbind(1) lists; own list unroll, SGD with "
          "clipping on lstm_backward, 200 steps, batch 20 (check batch 13). Slip: df taken with "
          "C_[t] instead of C_[t - 1]; gates, ifgo, inputs and fused/gates cascade",
    where=LSTMH5_SPECS,
    checkpoint="print(err(d_pre_fused, PRE[t].grad))",
    functions={"bptt/lstm_backward": None, "fused/lstm_step_backward": None},
    train={"cell": "for step in range(200)", "probe": "for k in net:", "params": "net",
           "grads": "grads", "ref": "lambda Q: unroll_loss(Q, xb, yb)", "losses": "curve"},
    fix=[("    d_f = d_c * C_[t]\n", "    d_f = d_c * C_[t - 1]\n")])

# ================================================================================================
# CONV H6 (right throughout). Own data (sorted names, then torch.randperm with manual_seed(12);
# every name's contexts made by Tensor.unfold(0, 8, 1) over its ids with eight leading zeros),
# parameters AND activations AND gradients in three dicts keyed the same way, by tuples:
# P[('w', l)], P[('b', l)], P['emb'], P['W'], P['b']; A[('pre', l)], A[('act', l)], A['x'],
# A['emb'], A['last'], A['logits']; dA / dP under the same keys. Each convolution an im2col by
# F.unfold on a [N, C, 1, L + d] view (kernel (1, 2), dilation (1, d)) times the kernel reshaped to
# [C_out, 2 C_in]; its backward the patches' gradient put back with F.fold and the padding cut
# off, the kernel's by an einsum over the patches. The backward a loop over the layers (3, 2, 1)
# at top level; `report()` of max differences against retained .grad. Batch 40; then the same
# forward / backward as functions and SGD, 250 steps, batch 56.

CONVH6_CELLS = [
    r'''
import torch
import torch.nn.functional as F
''',
    r'''
words = sorted(open('names.txt').read().split())
torch.manual_seed(12)
words = [words[k] for k in torch.randperm(len(words)).tolist()]
alpha = '.abcdefghijklmnopqrstuvwxyz'
tok = {c: k for k, c in enumerate(alpha)}
span = 8
ctxs, nxt = [], []
for w in words[:int(0.8 * len(words))]:
    ids = torch.tensor([0] * span + [tok[c] for c in w] + [0])
    ctxs.append(ids[:-1].unfold(0, span, 1))
    nxt.append(ids[span:])
Xtr, Ytr = torch.cat(ctxs), torch.cat(nxt)
Xtr.shape, Ytr.shape
''',
    md("conv = unfold (im2col) + matmul. The patch rows come out as (channel, tap), which is "
       "exactly `w.reshape(C_out, -1)`."),
    r'''
dil = {1: 1, 2: 2, 3: 4}

def conv(a, w, b, d):
    L = a.shape[-1]
    cols = F.unfold(F.pad(a, (d, 0))[:, :, None, :], kernel_size=(1, 2), dilation=(1, d))
    return w.reshape(w.shape[0], -1) @ cols + b[:, None], cols

def conv_back(g, cols, w, d, L):
    dw = torch.einsum('nol,nkl->ok', g, cols).reshape(w.shape)
    db = g.sum((0, 2))
    dcols = w.reshape(w.shape[0], -1).T @ g
    da = F.fold(dcols, output_size=(1, L + d), kernel_size=(1, 2), dilation=(1, d))[:, :, 0, d:]
    return da, dw, db

gen = torch.Generator().manual_seed(777)
V, E, Hc = 27, 10, 64
P = {'emb': torch.randn(V, E, generator=gen)}
for l, cin in ((1, E), (2, Hc), (3, Hc)):
    P[('w', l)] = torch.randn(Hc, cin, 2, generator=gen) * (5 / 3) / (2 * cin)**0.5
    P[('b', l)] = 0.1 * torch.randn(Hc, generator=gen)
P['W'] = 0.1 * torch.randn(Hc, V, generator=gen)
P['b'] = 0.1 * torch.randn(V, generator=gen)
for p in P.values():
    p.requires_grad_(True)
''',
    r'''
pick = torch.randint(0, len(Xtr), (40,), generator=gen)
Xb, Yb = Xtr[pick], Ytr[pick]
A, cols = {}, {}
A['emb'] = P['emb'][Xb]
A['x'] = A['emb'].transpose(1, 2)
a = A['x']
for l in (1, 2, 3):
    A[('pre', l)], cols[l] = conv(a, P[('w', l)], P[('b', l)], dil[l])
    A[('act', l)] = torch.tanh(A[('pre', l)])
    a = A[('act', l)]
A['last'] = a[:, :, -1]
A['logits'] = A['last'] @ P['W'] + P['b']
loss = F.cross_entropy(A['logits'], Yb)
for v in A.values():
    v.retain_grad()
loss.backward()
print(loss.item())
''',
    r'''
def report(dX, ref):
    for k in dX:
        r = ref[k].grad
        print(k, f"{(dX[k] - r).abs().max().item():.1e}")
''',
    md("## backward, layer by layer"),
    r'''
dA, dP = {}, {}
with torch.no_grad():
    pr = A['logits'].softmax(1)
    pr[torch.arange(len(Yb)), Yb] -= 1
    dA['logits'] = pr / len(Yb)
    dA['last'] = dA['logits'] @ P['W'].T
    dP['W'] = A['last'].T @ dA['logits']
    dP['b'] = dA['logits'].sum(0)
    g = torch.zeros_like(A[('act', 3)])
    g[:, :, -1] = dA['last']
    for l in (3, 2, 1):
        dA[('act', l)] = g
        dA[('pre', l)] = g * (1 - A[('act', l)]**2)
        below = A[('act', l - 1)] if l > 1 else A['x']
        g, dP[('w', l)], dP[('b', l)] = conv_back(dA[('pre', l)], cols[l], P[('w', l)], dil[l], below.shape[-1])
    dA['x'] = g
    dA['emb'] = g.transpose(1, 2)
    dP['emb'] = torch.zeros_like(P['emb']).index_add_(0, Xb.reshape(-1), dA['emb'].reshape(-1, E))
report(dA, A)
report(dP, P)
''',
    md("## training on my backward"),
    r'''
def forward(P, X):
    A, cols = {'emb': P['emb'][X]}, {}
    a = A['x'] = A['emb'].transpose(1, 2)
    for l in (1, 2, 3):
        A[('pre', l)], cols[l] = conv(a, P[('w', l)], P[('b', l)], dil[l])
        a = A[('act', l)] = torch.tanh(A[('pre', l)])
    A['last'] = a[:, :, -1]
    A['logits'] = A['last'] @ P['W'] + P['b']
    return A, cols

def backward(P, A, cols, X, Y):
    dP = {}
    dl = A['logits'].softmax(1)
    dl[torch.arange(len(Y)), Y] -= 1
    dl /= len(Y)
    dP['W'], dP['b'] = A['last'].T @ dl, dl.sum(0)
    g = torch.zeros_like(A[('act', 3)])
    g[:, :, -1] = dl @ P['W'].T
    for l in (3, 2, 1):
        g = g * (1 - A[('act', l)]**2)
        L = A['x'].shape[-1]
        g, dP[('w', l)], dP[('b', l)] = conv_back(g, cols[l], P[('w', l)], dil[l], L)
    dP['emb'] = torch.zeros_like(P['emb']).index_add_(0, X.reshape(-1), g.transpose(1, 2).reshape(-1, E))
    return dP

def loss_of(P, X, Y):
    return F.cross_entropy(forward(P, X)[0]['logits'], Y)
''',
    r'''
for p in P.values():
    p.requires_grad_(False)
track = []
for i in range(250):
    pick = torch.randint(0, len(Xtr), (56,), generator=gen)
    xb, yb = Xtr[pick], Ytr[pick]
    A_, cols_ = forward(P, xb)
    track.append(F.cross_entropy(A_['logits'], yb).item())
    dP_ = backward(P, A_, cols_, xb, yb)
    lr = 0.2 if i < 200 else 0.05
    for key in P:
        P[key] -= lr * dP_[key]
print(sum(track[:25]) / 25, sum(track[-25:]) / 25)
''',
]

CONVH6_FWD = {"logits": "A['logits']", "last": "A['last']", "h3": "A[('act', 3)]",
              "h3pre": "A[('pre', 3)]", "h2": "A[('act', 2)]", "h2pre": "A[('pre', 2)]",
              "h1": "A[('act', 1)]", "h1pre": "A[('pre', 1)]", "x": "A['x']", "emb": "A['emb']",
              "C": "P['emb']", "W": "P['W']", "b": "P['b']", "w1": "P[('w', 1)]",
              "b1": "P[('b', 1)]", "w2": "P[('w', 2)]", "b2": "P[('b', 2)]", "w3": "P[('w', 3)]",
              "b3": "P[('b', 3)]"}
CONVH6_KEYS = {"C": "'emb'", "w1": "('w', 1)", "b1": "('b', 1)", "w2": "('w', 2)",
               "b2": "('b', 2)", "w3": "('w', 3)", "b3": "('b', 3)", "W": "'W'", "b": "'b'"}

add("conv_h6_unfold_fold_tuple_keyed_dicts_sgd", "conv", CONVH6_CELLS, CONV_ALL,
    notes="own data (sorted then randperm(seed 12), contexts by Tensor.unfold(0, 8, 1)); "
          "parameters, activations and gradients in dicts keyed by tuples (('w', l), ('pre', l), "
          "...); each conv an im2col by F.unfold on a [N, C, 1, L + d] view times the reshaped "
          "kernel, its backward F.fold with the padding cut off and an einsum for the kernel; "
          "the backward a loop over layers 3, 2, 1; report() against retained .grad; batch 40; "
          "SGD 250 steps on forward / backward functions, batch 56; all right",
    where=where("conv", CONV_STEPS, fwd=CONVH6_FWD,
                grad=lambda k: CONVH6_FWD[k].replace("A[", "dA[").replace("P[", "dP[")),
    checkpoint="report(dP, P)",
    train={"cell": "for i in range(250)", "probe": "for key in P:",
           "params": "{" + ", ".join(f"'{k}': P[{v}]" for k, v in CONVH6_KEYS.items()) + "}",
           "grads": "{" + ", ".join(f"'{k}': dP_[{v}]" for k, v in CONVH6_KEYS.items()) + "}",
           "ref": "lambda Q: ref_conv_loss(Q, xb, yb)", "losses": "track"})
