"""Learners' own notebooks for the gpt, lstm and conv lessons, with each step's truth: a fourth
corpus, holdout half (its other half is notebook_corpus_lessons_tune4).

Six notebooks, two per lesson, in layouts where the forward pass itself does not use the
lesson's names or plain variables: a class keeping its activations as attributes on itself or
on its layers, parameters in a dict under the learner's own names or on small holder objects,
activations in a dict filled at top level or returned by a forward function, einsum / matmul on
reshaped tensors / conv_transpose1d, the LSTM's other steps run by a loop of the learner's own.
Each is a learner's own notebook: the lesson's forward pass copied in (renamed and
re-laid-out), their own loading of 'names.txt' (the truth runner points it at data/names.txt),
their own seed and init, the backward pass in a layout matching the forward, and where they
train, a loop of at most 300 steps on their own gradients. Architecture sizes are the lessons'
[lesson] sizes throughout; batch sizes vary (3, 7 / 10, 28 / 24, 12, 36 / 32, 50).

Layouts in this half:
  gpt_w1   parameters in a dict under own names (tok_table, W_attn, W_fc, ...), the forward at
           top level into a dict `acts` of renamed activations, every product an einsum; the
           gradients in a parallel dict with every first branch held; torch.testing.assert_close.
  gpt_w2   a `Net` of parameter holders (net.attn.W_qkv, net.mlp.W_fc, net.ln_f.g, ...), every
           activation an attribute on the net under own names; the backward as five methods
           with d_<name> attributes; the seven functions asserted against autograd; 150 steps
           of the learner's adamw_update on gradients from the functions.
  lstm_w1  parameters in a dict under own names, the setup's run_lstm, the forward at top level
           into a dict `fwd` of renamed activations, the gradients in a parallel dict with every
           first branch held; fused gates; lstm_backward as one loop over an own torch.stack
           forward; SGD with clipping.
  lstm_w2  an `LSTMLM` class with its own per-step loop (torch.stack) before and after t, every
           activation an attribute, h_prev / c_prev read back from the stacked early states; the
           backward as eight methods with g_<name> attributes, first branches held between
           calls; lstm_step_backward.
  conv_w1  `forward(params, X, Y)` returning a dict of renamed activations, parameters in a dict
           under own names, each convolution a torch.matmul of the reshaped kernel with stacked
           taps; `backward(acts, params)` returning a dict; SGD on the pair.
  conv_w2  a `Net` whose parameters live on its parts (net.layers[i].w, net.head.W), F.conv1d
           forward with every activation stored on the layer that made it; per-layer backward
           methods with conv_transpose1d, gradients on the layers; assert torch.allclose.

Slips (each case's "notes" says which): gpt_w2 takes dv as att_p @ datt_y, the attention weights
not transposed (block/att wrong; qkv, ln1, ln1_affine, x0, wpe, wte cascade; its functions and
training are right); lstm_w1 writes `dfwd['c_t'] = ...` where `+=` belongs, dropping the
future's share of dc (step/h wrong; c, gates, g, ifgo, inputs and the fused gates cascade; its
lstm_backward and training are right). The other four notebooks are right throughout. No
notebook is shared with the tune half, nor with the earlier corpora.

Written apart from the grader: from the lessons' forward passes, pack.toml's [lesson] / [setup] /
[forward] tables, `backprop-tutor --pack X list / show` and the earlier corpora's format only,
without reading the tutor's code or the steps' solutions, mistakes, hints or explanations, and
without running the grader on these notebooks. Every label was measured by running the
notebook, not judged by eye:

    .venv/bin/python tests/lesson_corpus_truth.py notebook_corpus_lessons_holdout4

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
# GPT W1 (right throughout). Own data (random.seed(5150), rows padded by a helper), parameters in
# a dict under the learner's own names (tok_table, pos_table, ln1_g / ln1_b, W_attn, b_attn,
# W_proj, ..., W_fc, W_out, lnf_g / lnf_b), and the forward written at top level into a dict
# `acts` of renamed activations (x_in, ln1_mu / ln1_c / ln1_v / ln1_r / ln1_hat, scores,
# scores_masked, attn_w, ctx, heads_merged, attn_out, res1, fc_pre / fc_act, mlp_out, res2, ...),
# every product a torch.einsum. The backward cell by cell into a parallel dict `grads` with the
# same keys, every first branch held as a value of its own; a `check(key)` helper on
# torch.testing.assert_close(..., rtol=1e-4, atol=1e-5) against retained .grad. Batch 3;
# exercise 1 only.

GPTW1_CELLS = [
    md("## backprop by hand, everything in dicts\n`acts[k]` is a forward tensor, `grads[k]` its "
       "gradient."),
    r'''
import math
import random
import torch
import torch.nn.functional as F
''',
    r'''
names = open('names.txt').read().split('\n')
names = [nm for nm in names if nm]
random.seed(5150)
random.shuffle(names)
itos = ['.'] + sorted(set(''.join(names)))
stoi = {ch: j for j, ch in enumerate(itos)}
cfg = dict(vocab=len(itos), block=16, dim=32, heads=4)

def encode(nm):
    r = [0] + [stoi[ch] for ch in nm] + [0]
    r = r[:cfg['block'] + 1]
    return r + [0] * (cfg['block'] + 1 - len(r))

rows = torch.tensor([encode(nm) for nm in names])
Xtr, Ytr = rows[:30000, :-1], rows[:30000, -1]
''',
    r'''
torch.manual_seed(8080)
Vn, Tn, Cn, NH = cfg['vocab'], cfg['block'], cfg['dim'], cfg['heads']
HS = Cn // NH
params = {
    'tok_table': torch.randn(Vn, Cn) * 0.1, 'pos_table': torch.randn(Tn, Cn) * 0.1,
    'ln1_g': 1 + 0.1 * torch.randn(Cn), 'ln1_b': 0.1 * torch.randn(Cn),
    'W_attn': torch.randn(Cn, 3 * Cn) / Cn**0.5, 'b_attn': 0.1 * torch.randn(3 * Cn),
    'W_proj': 0.5 * torch.randn(Cn, Cn) / Cn**0.5, 'b_proj': 0.1 * torch.randn(Cn),
    'ln2_g': 1 + 0.1 * torch.randn(Cn), 'ln2_b': 0.1 * torch.randn(Cn),
    'W_fc': torch.randn(Cn, 4 * Cn) / Cn**0.5, 'b_fc': 0.1 * torch.randn(4 * Cn),
    'W_out': 0.5 * torch.randn(4 * Cn, Cn) / (4 * Cn)**0.5, 'b_out': 0.1 * torch.randn(Cn),
    'lnf_g': 1 + 0.1 * torch.randn(Cn), 'lnf_b': 0.1 * torch.randn(Cn)}
for t_ in params.values():
    t_.requires_grad_(True)
ix = torch.randint(0, len(Xtr), (3,))
Xb, Yb = Xtr[ix], Ytr[ix]
B = Xb.shape[0]
''',
    r'''
P = params
acts = {}
acts['tok'] = P['tok_table'][Xb]
acts['x_in'] = acts['tok'] + P['pos_table']
for tag, src in [('ln1', 'x_in')]:
    acts[tag + '_mu'] = acts[src].mean(-1, keepdim=True)
    acts[tag + '_c'] = acts[src] - acts[tag + '_mu']
    acts[tag + '_v'] = (acts[tag + '_c']**2).mean(-1, keepdim=True)
    acts[tag + '_r'] = (acts[tag + '_v'] + 1e-5)**-0.5
    acts[tag + '_hat'] = acts[tag + '_c'] * acts[tag + '_r']
    acts[tag] = acts[tag + '_hat'] * P[tag + '_g'] + P[tag + '_b']
acts['qkv'] = torch.einsum('btc,ck->btk', acts['ln1'], P['W_attn']) + P['b_attn']
acts['q'] = acts['qkv'][..., :Cn].reshape(B, Tn, NH, HS).transpose(1, 2)
acts['k'] = acts['qkv'][..., Cn:2 * Cn].reshape(B, Tn, NH, HS).transpose(1, 2)
acts['v'] = acts['qkv'][..., 2 * Cn:].reshape(B, Tn, NH, HS).transpose(1, 2)
acts['scores'] = torch.einsum('bhid,bhjd->bhij', acts['q'], acts['k']) * HS**-0.5
causal = torch.tril(torch.ones(Tn, Tn))
acts['scores_masked'] = acts['scores'].masked_fill(causal == 0, float('-inf'))
acts['attn_w'] = torch.softmax(acts['scores_masked'], dim=-1)
acts['ctx'] = torch.einsum('bhij,bhjd->bhid', acts['attn_w'], acts['v'])
acts['heads_merged'] = acts['ctx'].transpose(1, 2).reshape(B, Tn, Cn)
acts['attn_out'] = torch.einsum('btc,cd->btd', acts['heads_merged'], P['W_proj']) + P['b_proj']
acts['res1'] = acts['x_in'] + acts['attn_out']
for tag, src in [('ln2', 'res1')]:
    acts[tag + '_mu'] = acts[src].mean(-1, keepdim=True)
    acts[tag + '_c'] = acts[src] - acts[tag + '_mu']
    acts[tag + '_v'] = (acts[tag + '_c']**2).mean(-1, keepdim=True)
    acts[tag + '_r'] = (acts[tag + '_v'] + 1e-5)**-0.5
    acts[tag + '_hat'] = acts[tag + '_c'] * acts[tag + '_r']
    acts[tag] = acts[tag + '_hat'] * P[tag + '_g'] + P[tag + '_b']
acts['fc_pre'] = torch.einsum('btc,cf->btf', acts['ln2'], P['W_fc']) + P['b_fc']
u = acts['fc_pre']
acts['fc_act'] = 0.5 * u * (1 + torch.tanh(math.sqrt(2 / math.pi) * (u + 0.044715 * u**3)))
acts['mlp_out'] = torch.einsum('btf,fc->btc', acts['fc_act'], P['W_out']) + P['b_out']
acts['res2'] = acts['res1'] + acts['mlp_out']
for tag, src in [('lnf', 'res2')]:
    acts[tag + '_mu'] = acts[src].mean(-1, keepdim=True)
    acts[tag + '_c'] = acts[src] - acts[tag + '_mu']
    acts[tag + '_v'] = (acts[tag + '_c']**2).mean(-1, keepdim=True)
    acts[tag + '_r'] = (acts[tag + '_v'] + 1e-5)**-0.5
    acts[tag + '_hat'] = acts[tag + '_c'] * acts[tag + '_r']
    acts[tag] = acts[tag + '_hat'] * P[tag + '_g'] + P[tag + '_b']
acts['logits'] = torch.einsum('btc,vc->btv', acts['lnf'], P['tok_table'])
tgt = torch.cat([Xb[:, 1:], Yb[:, None]], dim=1)
loss = F.cross_entropy(acts['logits'].reshape(-1, Vn), tgt.reshape(-1))
''',
    r'''
for t_ in acts.values():
    t_.retain_grad()
loss.backward()
print(loss.item())
grads = {}

def check(key):
    ref = P[key].grad if key in P else acts[key].grad
    torch.testing.assert_close(grads[key], ref, rtol=1e-4, atol=1e-5)
    print(key, 'ok')
''',
    r'''
probs = torch.softmax(acts['logits'].detach(), -1)
grads['logits'] = (probs - F.one_hot(tgt, Vn)) / tgt.numel()
check('logits')
''',
    r'''
grads['lnf'] = torch.einsum('btv,vc->btc', grads['logits'], P['tok_table'].detach())
grads['tok_table'] = torch.einsum('btv,btc->vc', grads['logits'], acts['lnf'].detach())
check('lnf')
''',
    r'''
A = {k_: t_.detach() for k_, t_ in acts.items()}
grads['lnf_hat'] = grads['lnf'] * P['lnf_g'].detach()
grads['lnf_g'] = torch.einsum('btc,btc->c', grads['lnf'], A['lnf_hat'])
grads['lnf_b'] = torch.einsum('btc->c', grads['lnf'])
for key in ('lnf_hat', 'lnf_g', 'lnf_b'):
    check(key)
''',
    r'''
grads['lnf_r'] = torch.einsum('btc,btc->bt', grads['lnf_hat'], A['lnf_c'])[..., None]
grads['lnf_c'] = grads['lnf_hat'] * A['lnf_r']
check('lnf_r')
''',
    r'''
grads['lnf_v'] = -0.5 * grads['lnf_r'] * (A['lnf_v'] + 1e-5)**-1.5
check('lnf_v')
''',
    r'''
grads['lnf_c'] = grads['lnf_c'] + grads['lnf_v'] * 2 / Cn * A['lnf_c']
check('lnf_c')
''',
    r'''
grads['lnf_mu'] = -torch.einsum('btc->bt', grads['lnf_c'])[..., None]
grads['res2'] = grads['lnf_c'].clone()
check('lnf_mu')
''',
    r'''
grads['res2'] = grads['res2'] + grads['lnf_mu'] / Cn
check('res2')
''',
    r'''
grads['mlp_out'] = grads['res2'].clone()
grads['res1'] = grads['res2'].clone()
check('mlp_out')
''',
    r'''
grads['fc_act'] = torch.einsum('btc,fc->btf', grads['mlp_out'], P['W_out'].detach())
grads['W_out'] = torch.einsum('btf,btc->fc', A['fc_act'], grads['mlp_out'])
grads['b_out'] = torch.einsum('btc->c', grads['mlp_out'])
for key in ('fc_act', 'W_out', 'b_out'):
    check(key)
''',
    r'''
u = A['fc_pre']
s2pi = math.sqrt(2 / math.pi)
inner = s2pi * (u + 0.044715 * u**3)
grads['fc_pre'] = grads['fc_act'] * (0.5 * (1 + torch.tanh(inner))
                                     + 0.5 * u * (1 - torch.tanh(inner)**2) * s2pi * (1 + 0.134145 * u**2))
check('fc_pre')
''',
    r'''
grads['ln2'] = torch.einsum('btf,cf->btc', grads['fc_pre'], P['W_fc'].detach())
grads['W_fc'] = torch.einsum('btc,btf->cf', A['ln2'], grads['fc_pre'])
grads['b_fc'] = torch.einsum('btf->f', grads['fc_pre'])
for key in ('ln2', 'W_fc', 'b_fc'):
    check(key)
''',
    r'''
grads['ln2_hat'] = grads['ln2'] * P['ln2_g'].detach()
grads['ln2_g'] = torch.einsum('btc,btc->c', grads['ln2'], A['ln2_hat'])
grads['ln2_b'] = torch.einsum('btc->c', grads['ln2'])
for key in ('ln2_hat', 'ln2_g', 'ln2_b'):
    check(key)
''',
    r'''
gh, xh = grads['ln2_hat'], A['ln2_hat']
grads['res1'] = grads['res1'] + A['ln2_r'] / Cn * (Cn * gh - gh.sum(-1, keepdim=True)
                                                   - xh * (gh * xh).sum(-1, keepdim=True))
check('res1')
''',
    r'''
grads['attn_out'] = grads['res1'].clone()
grads['x_in'] = grads['res1'].clone()
check('attn_out')
''',
    r'''
grads['heads_merged'] = torch.einsum('btd,cd->btc', grads['attn_out'], P['W_proj'].detach())
grads['W_proj'] = torch.einsum('btc,btd->cd', A['heads_merged'], grads['attn_out'])
grads['b_proj'] = torch.einsum('btd->d', grads['attn_out'])
for key in ('heads_merged', 'W_proj', 'b_proj'):
    check(key)
''',
    r'''
grads['ctx'] = grads['heads_merged'].reshape(B, Tn, NH, HS).transpose(1, 2)
check('ctx')
''',
    r'''
grads['attn_w'] = torch.einsum('bhid,bhjd->bhij', grads['ctx'], A['v'])
grads['v'] = torch.einsum('bhij,bhid->bhjd', A['attn_w'], grads['ctx'])
check('attn_w')
check('v')
''',
    r'''
rowdot = torch.einsum('bhij,bhij->bhi', A['attn_w'], grads['attn_w'])[..., None]
grads['scores_masked'] = A['attn_w'] * (grads['attn_w'] - rowdot)
check('scores_masked')
''',
    r'''
grads['scores'] = grads['scores_masked'].masked_fill(causal == 0, 0.0)
check('scores')
''',
    r'''
grads['q'] = torch.einsum('bhij,bhjd->bhid', grads['scores'], A['k']) * HS**-0.5
grads['k'] = torch.einsum('bhij,bhid->bhjd', grads['scores'], A['q']) * HS**-0.5
check('q')
check('k')
''',
    r'''
grads['qkv'] = torch.cat([grads[z].transpose(1, 2).reshape(B, Tn, Cn) for z in ('q', 'k', 'v')], -1)
check('qkv')
''',
    r'''
grads['ln1'] = torch.einsum('btk,ck->btc', grads['qkv'], P['W_attn'].detach())
grads['W_attn'] = torch.einsum('btc,btk->ck', A['ln1'], grads['qkv'])
grads['b_attn'] = torch.einsum('btk->k', grads['qkv'])
for key in ('ln1', 'W_attn', 'b_attn'):
    check(key)
''',
    r'''
grads['ln1_hat'] = grads['ln1'] * P['ln1_g'].detach()
grads['ln1_g'] = torch.einsum('btc,btc->c', grads['ln1'], A['ln1_hat'])
grads['ln1_b'] = torch.einsum('btc->c', grads['ln1'])
for key in ('ln1_hat', 'ln1_g', 'ln1_b'):
    check(key)
''',
    r'''
gh, xh = grads['ln1_hat'], A['ln1_hat']
grads['x_in'] = grads['x_in'] + A['ln1_r'] / Cn * (Cn * gh - gh.sum(-1, keepdim=True)
                                                   - xh * (gh * xh).sum(-1, keepdim=True))
check('x_in')
''',
    r'''
grads['tok'] = grads['x_in'].clone()
grads['pos_table'] = grads['x_in'].sum(0)
grads['tok_table'] = grads['tok_table'] + torch.zeros(Vn, Cn).index_add_(0, Xb.view(-1), grads['tok'].view(-1, Cn))
for key in ('tok', 'pos_table', 'tok_table'):
    check(key)
''',
]

GPTW1_MAP = {
    "logits": "logits", "lnf": "lnf", "lnf_norm": "lnf_hat", "lnf_rstd": "lnf_r",
    "lnf_var": "lnf_v", "lnf_xc": "lnf_c", "lnf_mean": "lnf_mu", "x2": "res2",
    "fcproj": "mlp_out", "x1": "res1", "fch_gelu": "fc_act", "fch": "fc_pre", "ln2": "ln2",
    "ln2_norm": "ln2_hat", "attproj": "attn_out", "x0": "x_in", "y": "heads_merged",
    "atty": "ctx", "att": "attn_w", "v": "v", "preatt_masked": "scores_masked",
    "preatt": "scores", "q": "q", "k": "k", "qkv": "qkv", "ln1": "ln1", "ln1_norm": "ln1_hat",
    "tok": "tok"}
GPTW1_PARAMS = {
    "wte": "tok_table", "wpe": "pos_table", "ln1w": "ln1_g", "ln1b": "ln1_b", "qkvw": "W_attn",
    "qkvb": "b_attn", "attprojw": "W_proj", "attprojb": "b_proj", "ln2w": "ln2_g",
    "ln2b": "ln2_b", "fcw": "W_fc", "fcb": "b_fc", "fcprojw": "W_out", "fcprojb": "b_out",
    "lnfw": "lnf_g", "lnfb": "lnf_b"}
GPTW1_KEY = {**GPTW1_MAP, **GPTW1_PARAMS}

add("gpt_w1_param_and_act_dicts_einsum", "gpt", GPTW1_CELLS, GPT_STEPS,
    notes="own data (random.seed(5150)), manual_seed(8080), parameters in a dict under own "
          "names, forward at top level into a dict acts of renamed activations, every product "
          "an einsum; grads in a parallel dict, every first branch held, check(key) on "
          "torch.testing.assert_close; batch 3; exercise 1 only; all right",
    where=where("gpt", GPT_STEPS,
                fwd={**{k: f"acts['{v}']" for k, v in GPTW1_MAP.items()},
                     **{k: f"params['{v}']" for k, v in GPTW1_PARAMS.items()}},
                grad=lambda k: f"grads['{GPTW1_KEY[k]}']",
                first_after={"wte": "grads['tok_table'] = torch.einsum('btv,btc->vc'",
                             "lnf_xc": "grads['lnf_c'] = grads['lnf_hat'] * A['lnf_r']",
                             "x2": "grads['res2'] = grads['lnf_c'].clone()",
                             "x1": "grads['res1'] = grads['res2'].clone()",
                             "x0": "grads['x_in'] = grads['res1'].clone()"}),
    checkpoint="for key in ('tok', 'pos_table', 'tok_table'):")

# ================================================================================================
# GPT W2 (a slip and its cascade). Own data (a Generator(606) randperm, rows built into a list
# then one tensor), a `Net` class made of small parameter holders (net.embed.W_tok / W_pos,
# net.ln1.g / .b, net.attn.W_qkv / b_qkv / W_proj / b_proj, net.ln2, net.mlp.W_fc / b_fc / W_proj
# / b_proj, net.ln_f), its forward storing every activation as an attribute on the net under the
# learner's own names (e_tok, s0, n1_mean..n1_out, att_raw / att_masked / att_p / att_y, y_cat,
# att_proj, s1, fc_in / fc_gelu / fc_out, s2, nf_*, logits), products as `@` on reshaped
# tensors; the backward as five methods called in turn (back_head, back_final_norm, back_mlp,
# back_attention, back_embed), each gradient an attribute `d_<name>` on the object that owns the
# tensor; ln1 and ln2 in one formula, the final layernorm atom by atom; the head's share of the
# embedding's gradient held until back_embed adds the lookup's in place. Checks in a loop of
# `assert torch.allclose` over the names that are right, a print for the rest. Exercise 2's
# functions, each asserted against torch.autograd.grad, and exercise 3: 150 steps of the learner's
# adamw_update on gradients from the functions, batch 10 (the check batch 7).
# Slip: dv = att_p @ datt_y, the attention weights not transposed (square, so it runs):
# block/att is wrong and qkv, ln1, ln1_affine, x0, wpe, wte cascade; the functions and the
# training loop, which do not use the method, are right.

GPTW2_CELLS = [
    r'''
import math
import torch
import torch.nn.functional as F
''',
    r'''
all_names = open('names.txt').read().splitlines()
pp = torch.randperm(len(all_names), generator=torch.Generator().manual_seed(606))
all_names = [all_names[j] for j in pp.tolist()]
chars = sorted(set(''.join(all_names)))
enc = {ch: j + 1 for j, ch in enumerate(chars)}
enc['.'] = 0
vocab_size, block_size, n_embd, n_head = len(enc), 16, 32, 4
data = []
for nm in all_names:
    r = ([0] + [enc[ch] for ch in nm] + [0])[:block_size + 1]
    data.append(r + [0] * (block_size + 1 - len(r)))
data = torch.tensor(data)
split = int(0.85 * len(data))
Xtr, Ytr = data[:split, :block_size], data[:split, block_size]
''',
    r'''
class Holder:
    pass

def gelu(x):
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))

class Net:
    def __init__(self, V, T, C, nh, seed):
        gen = torch.Generator().manual_seed(seed)
        rn = lambda *s: torch.randn(*s, generator=gen)
        self.V, self.T, self.C, self.nh, self.hs = V, T, C, nh, C // nh
        self.embed, self.ln1, self.attn, self.ln2, self.mlp, self.ln_f = (Holder() for _ in range(6))
        self.embed.W_tok, self.embed.W_pos = 0.1 * rn(V, C), 0.1 * rn(T, C)
        for ln in (self.ln1, self.ln2, self.ln_f):
            ln.g, ln.b = 1 + 0.1 * rn(C), 0.1 * rn(C)
        self.attn.W_qkv, self.attn.b_qkv = rn(C, 3 * C) / C**0.5, 0.1 * rn(3 * C)
        self.attn.W_proj, self.attn.b_proj = 0.5 * rn(C, C) / C**0.5, 0.1 * rn(C)
        self.mlp.W_fc, self.mlp.b_fc = rn(C, 4 * C) / C**0.5, 0.1 * rn(4 * C)
        self.mlp.W_proj, self.mlp.b_proj = 0.5 * rn(4 * C, C) / (4 * C)**0.5, 0.1 * rn(C)
        self.causal = torch.ones(T, T).tril()

    def param_dict(self):
        return {'W_tok': self.embed.W_tok, 'W_pos': self.embed.W_pos,
                'ln1.g': self.ln1.g, 'ln1.b': self.ln1.b,
                'attn.W_qkv': self.attn.W_qkv, 'attn.b_qkv': self.attn.b_qkv,
                'attn.W_proj': self.attn.W_proj, 'attn.b_proj': self.attn.b_proj,
                'ln2.g': self.ln2.g, 'ln2.b': self.ln2.b,
                'mlp.W_fc': self.mlp.W_fc, 'mlp.b_fc': self.mlp.b_fc,
                'mlp.W_proj': self.mlp.W_proj, 'mlp.b_proj': self.mlp.b_proj,
                'ln_f.g': self.ln_f.g, 'ln_f.b': self.ln_f.b}

    def norm(self, pre, x, ln):
        mean = x.mean(-1, keepdim=True)
        cent = x - mean
        var = (cent**2).mean(-1, keepdim=True)
        rstd = (var + 1e-5)**-0.5
        nrm = cent * rstd
        out = nrm * ln.g + ln.b
        for k_, t_ in zip(['mean', 'cent', 'var', 'rstd', 'norm', 'out'], [mean, cent, var, rstd, nrm, out]):
            setattr(self, f'{pre}_{k_}', t_)
        return out

    def forward(self, X, Y):
        B, T = X.shape
        C, nh, hs = self.C, self.nh, self.hs
        self.X = X
        self.e_tok = self.embed.W_tok[X]
        self.s0 = self.e_tok + self.embed.W_pos
        h = self.norm('n1', self.s0, self.ln1)
        self.qkv = h @ self.attn.W_qkv + self.attn.b_qkv
        self.q, self.k, self.v = (self.qkv[:, :, j * C:(j + 1) * C].reshape(B, T, nh, hs).transpose(1, 2)
                                  for j in range(3))
        self.att_raw = self.q @ self.k.transpose(-2, -1) * hs**-0.5
        self.att_masked = self.att_raw.masked_fill(self.causal == 0, float('-inf'))
        self.att_p = F.softmax(self.att_masked, dim=-1)
        self.att_y = self.att_p @ self.v
        self.y_cat = self.att_y.transpose(1, 2).reshape(B, T, C)
        self.att_proj = self.y_cat @ self.attn.W_proj + self.attn.b_proj
        self.s1 = self.s0 + self.att_proj
        h = self.norm('n2', self.s1, self.ln2)
        self.fc_in = h @ self.mlp.W_fc + self.mlp.b_fc
        self.fc_gelu = gelu(self.fc_in)
        self.fc_out = self.fc_gelu @ self.mlp.W_proj + self.mlp.b_proj
        self.s2 = self.s1 + self.fc_out
        h = self.norm('nf', self.s2, self.ln_f)
        self.logits = h @ self.embed.W_tok.T
        self.targets = torch.cat([X[:, 1:], Y[:, None]], dim=1)
        return F.cross_entropy(self.logits.reshape(-1, self.V), self.targets.reshape(-1))

    # ---- backward, in five pieces -------------------------------------------------------
    @torch.no_grad()
    def back_head(self):
        B, T = self.X.shape
        p = F.softmax(self.logits, -1)
        self.d_logits = (p - F.one_hot(self.targets, self.V)) / (B * T)
        self.d_nf_out = self.d_logits @ self.embed.W_tok
        self.embed.dW_tok = self.d_logits.reshape(-1, self.V).T @ self.nf_out.reshape(-1, self.C)

    @torch.no_grad()
    def back_final_norm(self):
        C = self.C
        self.d_nf_norm = self.d_nf_out * self.ln_f.g
        self.ln_f.dg = (self.d_nf_out * self.nf_norm).sum((0, 1))
        self.ln_f.db = self.d_nf_out.sum((0, 1))
        self.d_nf_rstd = (self.d_nf_norm * self.nf_cent).sum(-1, keepdim=True)
        self.d_nf_var = self.d_nf_rstd * -0.5 * (self.nf_var + 1e-5)**-1.5
        self.d_nf_cent = self.d_nf_norm * self.nf_rstd + self.d_nf_var * 2 * self.nf_cent / C
        self.d_nf_mean = -self.d_nf_cent.sum(-1, keepdim=True)
        self.d_s2 = self.d_nf_cent + self.d_nf_mean / C

    def _norm_in_one(self, pre, dout, ln):
        nrm, rstd = getattr(self, pre + '_norm'), getattr(self, pre + '_rstd')
        dn = dout * ln.g
        setattr(self, 'd_' + pre + '_norm', dn)
        ln.dg = (dout * nrm).sum((0, 1))
        ln.db = dout.sum((0, 1))
        return rstd * (dn - dn.mean(-1, keepdim=True) - nrm * (dn * nrm).mean(-1, keepdim=True))

    @torch.no_grad()
    def back_mlp(self):
        C = self.C
        self.d_fc_out = self.d_s2
        self.d_fc_gelu = self.d_fc_out @ self.mlp.W_proj.T
        self.mlp.dW_proj = self.fc_gelu.reshape(-1, 4 * C).T @ self.d_fc_out.reshape(-1, C)
        self.mlp.db_proj = self.d_fc_out.sum((0, 1))
        x = self.fc_in
        kk = math.sqrt(2 / math.pi)
        th = torch.tanh(kk * (x + 0.044715 * x**3))
        self.d_fc_in = self.d_fc_gelu * (0.5 * (1 + th) + 0.5 * x * (1 - th**2) * kk * (1 + 0.134145 * x**2))
        self.d_n2_out = self.d_fc_in @ self.mlp.W_fc.T
        self.mlp.dW_fc = self.n2_out.reshape(-1, C).T @ self.d_fc_in.reshape(-1, 4 * C)
        self.mlp.db_fc = self.d_fc_in.sum((0, 1))
        self.d_s1 = self.d_s2 + self._norm_in_one('n2', self.d_n2_out, self.ln2)

    @torch.no_grad()
    def back_attention(self):
        B, T = self.X.shape
        C, nh, hs = self.C, self.nh, self.hs
        self.d_att_proj = self.d_s1
        self.d_y_cat = self.d_att_proj @ self.attn.W_proj.T
        self.attn.dW_proj = self.y_cat.reshape(-1, C).T @ self.d_att_proj.reshape(-1, C)
        self.attn.db_proj = self.d_att_proj.sum((0, 1))
        self.d_att_y = self.d_y_cat.reshape(B, T, nh, hs).transpose(1, 2)
        self.d_att_p = self.d_att_y @ self.v.transpose(-2, -1)
        self.d_v = self.att_p @ self.d_att_y
        s = (self.att_p * self.d_att_p).sum(-1, keepdim=True)
        self.d_att_masked = self.att_p * (self.d_att_p - s)
        self.d_att_raw = self.d_att_masked * self.causal
        self.d_q = self.d_att_raw @ self.k * hs**-0.5
        self.d_k = self.d_att_raw.transpose(-2, -1) @ self.q * hs**-0.5
        self.d_qkv = torch.cat([z.transpose(1, 2).reshape(B, T, C) for z in (self.d_q, self.d_k, self.d_v)], dim=2)
        self.d_n1_out = self.d_qkv @ self.attn.W_qkv.T
        self.attn.dW_qkv = self.n1_out.reshape(-1, C).T @ self.d_qkv.reshape(-1, 3 * C)
        self.attn.db_qkv = self.d_qkv.sum((0, 1))
        self.d_s0 = self.d_s1 + self._norm_in_one('n1', self.d_n1_out, self.ln1)

    @torch.no_grad()
    def back_embed(self):
        self.d_e_tok = self.d_s0
        self.embed.dW_pos = self.d_s0.sum(0)
        self.embed.dW_tok.index_add_(0, self.X.reshape(-1), self.d_s0.reshape(-1, self.C))
''',
    r'''
net = Net(vocab_size, block_size, n_embd, n_head, seed=9)
for t_ in net.param_dict().values():
    t_.requires_grad_(True)
g_b = torch.Generator().manual_seed(70)
bix = torch.randint(0, len(Xtr), (7,), generator=g_b)
Xb, Yb = Xtr[bix], Ytr[bix]
loss = net.forward(Xb, Yb)
fwd_names = ['e_tok', 's0', 'n1_norm', 'n1_out', 'qkv', 'q', 'k', 'v', 'att_raw', 'att_masked',
             'att_p', 'att_y', 'y_cat', 'att_proj', 's1', 'n2_norm', 'n2_out', 'fc_in', 'fc_gelu',
             'fc_out', 's2', 'nf_mean', 'nf_cent', 'nf_var', 'nf_rstd', 'nf_norm', 'nf_out',
             'logits']
for nm in fwd_names:
    getattr(net, nm).retain_grad()
loss.backward()
''',
    r'''
net.back_head()
net.back_final_norm()
net.back_mlp()
net.back_attention()
net.back_embed()
''',
    r'''
bad = []
for nm in fwd_names:
    if not torch.allclose(getattr(net, 'd_' + nm), getattr(net, nm).grad, rtol=1e-4, atol=1e-5):
        bad.append(nm)
for full, t_ in net.param_dict().items():
    owner, _, leaf = full.rpartition('.')
    mine = getattr(getattr(net, owner) if owner else net.embed, 'd' + leaf)
    if not torch.allclose(mine, t_.grad, rtol=1e-4, atol=1e-5):
        bad.append(full)
print('not matching yet:', bad)
''',
    ("md", "## exercise 2"),
    r'''
def encoder_backward(dout, inp, vocab_size):
    B, T, C = dout.shape
    dwte = torch.zeros(vocab_size, C)
    for b_ in range(B):
        for t_ in range(T):
            dwte[inp[b_, t_]] += dout[b_, t_]
    return dwte, dout.sum(dim=0)

def layernorm_backward(dout, inp, weight, mean, rstd):
    C = inp.shape[-1]
    cent = inp - mean
    dnorm = dout * weight
    drstd = (dnorm * cent).sum(-1, keepdim=True)
    dvar = drstd * -0.5 * rstd**3
    dcent = dnorm * rstd + dvar * 2 * cent / C
    dinp = dcent - dcent.mean(-1, keepdim=True)
    return dinp, (dout * cent * rstd).sum((0, 1)), dout.sum((0, 1))

def matmul_backward(dout, inp, weight):
    return (dout @ weight.T, torch.einsum('...i,...o->io', inp, dout),
            dout.reshape(-1, weight.shape[1]).sum(0))

def attention_backward(dout, qkv, att, n_head):
    B, T, C3 = qkv.shape
    C = C3 // 3
    hs = C // n_head
    q, k, v = (qkv[:, :, j * C:(j + 1) * C].reshape(B, T, n_head, hs).transpose(1, 2) for j in range(3))
    dy = dout.reshape(B, T, n_head, hs).transpose(1, 2)
    datt = dy @ v.transpose(-2, -1)
    dv = att.transpose(-2, -1) @ dy
    dpre = att * (datt - (att * datt).sum(-1, keepdim=True))
    dq = dpre @ k * hs**-0.5
    dk = dpre.transpose(-2, -1) @ q * hs**-0.5
    return torch.cat([z.transpose(1, 2).reshape(B, T, C) for z in (dq, dk, dv)], dim=2)

def gelu_backward(dout, inp):
    kk = math.sqrt(2 / math.pi)
    th = torch.tanh(kk * (inp + 0.044715 * inp**3))
    return dout * (0.5 * (1 + th) + 0.5 * inp * (1 - th**2) * kk * (1 + 0.134145 * inp**2))

def crossentropy_softmax_backward(logits, targets):
    return (F.softmax(logits, -1) - F.one_hot(targets, logits.shape[-1])) / logits.shape[0]

def adamw_update(param, grad, m, v, t, lr, beta1, beta2, eps, weight_decay):
    param.mul_(1 - lr * weight_decay)
    m.copy_(beta1 * m + (1 - beta1) * grad)
    v.copy_(beta2 * v + (1 - beta2) * grad**2)
    step = lr / (1 - beta1**t)
    param.addcdiv_(m, (v / (1 - beta2**t)).sqrt() + eps, value=-step)
''',
    r'''
# each function against autograd
xx = torch.randn(2, 5, 6, requires_grad=True)
ww = torch.randn(6, 4, requires_grad=True)
bb = torch.randn(4, requires_grad=True)
oo = xx @ ww + bb
go = torch.randn_like(oo)
for mine, ref in zip(matmul_backward(go, xx.detach(), ww.detach()), torch.autograd.grad(oo, [xx, ww, bb], go)):
    assert torch.allclose(mine, ref, atol=1e-5)
lw, lb = torch.randn(6, requires_grad=True), torch.randn(6, requires_grad=True)
mu = xx.mean(-1, keepdim=True)
rs = ((xx - mu)**2).mean(-1, keepdim=True).add(1e-5).rsqrt()
lo = (xx - mu) * rs * lw + lb
gl = torch.randn_like(lo)
for mine, ref in zip(layernorm_backward(gl, xx.detach(), lw.detach(), mu.detach(), rs.detach()),
                     torch.autograd.grad(lo, [xx, lw, lb], gl)):
    assert torch.allclose(mine, ref, atol=1e-5)
qq = torch.randn(2, 5, 12, requires_grad=True)
net_ = Net(7, 5, 4, 2, seed=0)
net_.attn.W_qkv, net_.attn.b_qkv = torch.eye(4).repeat(1, 3), torch.zeros(12)
att_ = F.softmax((qq[..., :4].reshape(2, 5, 2, 2).transpose(1, 2) @ qq[..., 4:8].reshape(2, 5, 2, 2).permute(0, 2, 3, 1))
                 * 2**-0.5 + torch.triu(torch.full((5, 5), float('-inf')), 1), -1)
ya = (att_ @ qq[..., 8:].reshape(2, 5, 2, 2).transpose(1, 2)).transpose(1, 2).reshape(2, 5, 4)
gy = torch.randn_like(ya)
assert torch.allclose(attention_backward(gy, qq.detach(), att_.detach(), 2), torch.autograd.grad(ya, qq, gy)[0], atol=1e-5)
print('functions agree with autograd')
''',
    ("md", "## exercise 3, training on the functions"),
    r'''
def grads_via_functions(net):
    B, T = net.X.shape
    V, C = net.V, net.C
    gr = {}
    dlog = crossentropy_softmax_backward(net.logits.reshape(-1, V), net.targets.reshape(-1)).reshape(B, T, V)
    dnf, dWT, _ = matmul_backward(dlog, net.nf_out, net.embed.W_tok.T)
    ds2, gr['ln_f.g'], gr['ln_f.b'] = layernorm_backward(dnf, net.s2, net.ln_f.g, net.nf_mean, net.nf_rstd)
    dg, gr['mlp.W_proj'], gr['mlp.b_proj'] = matmul_backward(ds2, net.fc_gelu, net.mlp.W_proj)
    dn2, gr['mlp.W_fc'], gr['mlp.b_fc'] = matmul_backward(gelu_backward(dg, net.fc_in), net.n2_out, net.mlp.W_fc)
    ds1, gr['ln2.g'], gr['ln2.b'] = layernorm_backward(dn2, net.s1, net.ln2.g, net.n2_mean, net.n2_rstd)
    ds1 = ds1 + ds2
    dy, gr['attn.W_proj'], gr['attn.b_proj'] = matmul_backward(ds1, net.y_cat, net.attn.W_proj)
    dqkv = attention_backward(dy, net.qkv, net.att_p, net.nh)
    dn1, gr['attn.W_qkv'], gr['attn.b_qkv'] = matmul_backward(dqkv, net.n1_out, net.attn.W_qkv)
    ds0, gr['ln1.g'], gr['ln1.b'] = layernorm_backward(dn1, net.s0, net.ln1.g, net.n1_mean, net.n1_rstd)
    dtok, gr['W_pos'] = encoder_backward(ds0 + ds1, net.X, V)
    gr['W_tok'] = dtok + dWT.T
    return gr

for t_ in net.param_dict().values():
    t_.requires_grad_(False)
    t_.grad = None
PD = net.param_dict()
m_st = {k_: torch.zeros_like(t_) for k_, t_ in PD.items()}
v_st = {k_: torch.zeros_like(t_) for k_, t_ in PD.items()}
losses = []
''',
    r'''
for step in range(150):
    bix = torch.randint(0, len(Xtr), (10,), generator=g_b)
    xb, yb = Xtr[bix], Ytr[bix]
    lossv = net.forward(xb, yb)
    gr = grads_via_functions(net)
    for k_ in PD:
        adamw_update(PD[k_], gr[k_], m_st[k_], v_st[k_], step + 1, 1e-2, 0.9, 0.999, 1e-8, 0.01)
    losses.append(lossv.item())
print(losses[0], losses[-1])
''',
]

GPTW2_ACT = {"logits": "logits", "lnf": "nf_out", "lnf_norm": "nf_norm", "lnf_rstd": "nf_rstd",
             "lnf_var": "nf_var", "lnf_xc": "nf_cent", "lnf_mean": "nf_mean", "x2": "s2",
             "fcproj": "fc_out", "x1": "s1", "fch_gelu": "fc_gelu", "fch": "fc_in",
             "ln2": "n2_out", "ln2_norm": "n2_norm", "attproj": "att_proj", "x0": "s0",
             "y": "y_cat", "atty": "att_y", "att": "att_p", "v": "v",
             "preatt_masked": "att_masked", "preatt": "att_raw", "q": "q", "k": "k",
             "qkv": "qkv", "ln1": "n1_out", "ln1_norm": "n1_norm", "tok": "e_tok"}
GPTW2_PAR = {"wte": ("embed", "W_tok"), "wpe": ("embed", "W_pos"), "ln1w": ("ln1", "g"),
             "ln1b": ("ln1", "b"), "qkvw": ("attn", "W_qkv"), "qkvb": ("attn", "b_qkv"),
             "attprojw": ("attn", "W_proj"), "attprojb": ("attn", "b_proj"),
             "ln2w": ("ln2", "g"), "ln2b": ("ln2", "b"), "fcw": ("mlp", "W_fc"),
             "fcb": ("mlp", "b_fc"), "fcprojw": ("mlp", "W_proj"), "fcprojb": ("mlp", "b_proj"),
             "lnfw": ("ln_f", "g"), "lnfb": ("ln_f", "b")}
GPTW2_FWD = {**{k: f"net.{v}" for k, v in GPTW2_ACT.items()},
             **{k: f"net.{o}.{a}" for k, (o, a) in GPTW2_PAR.items()}}
GPTW2_GRAD = {**{k: f"net.d_{v}" for k, v in GPTW2_ACT.items()},
              **{k: f"net.{o}.d{a}" for k, (o, a) in GPTW2_PAR.items()}}
GPTW2_TRAIN_KEYS = {k: (f"{o}.{a}" if o != "embed" else a) for k, (o, a) in GPTW2_PAR.items()}

add("gpt_w2_net_attributes_methods_dv_slip", "gpt", GPTW2_CELLS, GPT_ALL,
    wrong=["block/att"],
    cascade=["block/qkv", "block/ln1", "block/ln1_affine", "block/x0", "block/wpe", "block/wte"],
    notes="own data (randperm(606)), Net of parameter holders (net.attn.W_qkv, ...), every "
          "activation an attribute on the net under own names, @ on reshaped tensors; backward "
          "as five methods with d_<name> attributes, the head's share of dW_tok held until "
          "back_embed; assert-allclose loop; the seven functions asserted against autograd; "
          "150 steps of own adamw_update on the functions, batch 10 (check batch 7). Slip: dv "
          "= att_p @ datt_y (att not transposed); qkv, ln1, ln1_affine, x0, wpe, wte cascade; "
          "functions and training right",
    where=keep_first(where("gpt", GPT_STEPS, fwd=GPTW2_FWD, grad=GPTW2_GRAD.__getitem__,
                           first_after={**DROP, "wte": "net.back_head()"})),
    checkpoint="net.back_embed()",
    functions={s: None for s in GPT_FUNCS},
    train={"cell": "for step in range(150)", "probe": "for k_ in PD:",
           "params": "{L: PD[O] for L, O in " + repr(GPTW2_TRAIN_KEYS) + ".items()}",
           "grads": "{L: gr[O] for L, O in " + repr(GPTW2_TRAIN_KEYS) + ".items()}",
           "ref": "lambda Q: ref_gpt_loss(Q, xb, yb)", "losses": "losses"},
    fix=[("self.d_v = self.att_p @ self.d_att_y", "self.d_v = self.att_p.transpose(-2, -1) @ self.d_att_y")])

# ================================================================================================
# LSTM W1 (a slip and its cascade). Own data (random.seed(321), X / Y filled row by row into
# preallocated tensors), the setup's run_lstm copied; parameters in a dict under the learner's
# own names (E, W_ih, W_hh, b_g, W_dec, b_dec); the forward at top level into a dict `fwd` of
# renamed activations (x_seq, H_pre, h_tm1 / c_tm1, x_cur, W_ih_t / W_hh_t / b_g_t, a, a_i..a_o,
# in_gate / forget / cand / out_gate, c_t, h_t, hc_t, H_post, H, y); the backward cell by cell
# into a parallel dict `dfwd`, every first branch held; a `report(key)` helper printing the max
# difference. Exercise 3's fused gates; exercise 2's lstm_backward as one function over a
# per-step loop of its own, checked on an own torch.stack forward; 250 steps of SGD with
# gradient clipping on it, batch 24 (the check batch 28).
# Slip: `dfwd['c_t'] = ...` where the future's share already in dfwd['c_t'] must be added to
# (`+=`): step/h is wrong, and c, gates, g, ifgo, inputs and the fused gates cascade; exercise 2
# and the training loop are right.

LSTMW1_CELLS = [
    md("# LSTM step t backward\nParameters and activations in dicts; grads in `dfwd`."),
    r'''
import random
from collections import namedtuple
import torch
import torch.nn.functional as F
''',
    r'''
wl = open('names.txt').read().splitlines()
random.seed(321)
random.shuffle(wl)
vocab = ['.'] + sorted(set(''.join(wl)))
ix_of = {c: j for j, c in enumerate(vocab)}
Vsz = len(vocab)
maxlen = max(len(w) for w in wl) + 1
Xall = torch.zeros((len(wl), maxlen), dtype=torch.long)
Yall = torch.full((len(wl), maxlen), -1, dtype=torch.long)
for r, w in enumerate(wl):
    for j, c in enumerate(w):
        Xall[r, j + 1] = ix_of[c]
        Yall[r, j] = ix_of[c]
    Yall[r, len(w)] = 0
ntr = int(0.8 * len(wl))

def batch_of(n, g):
    sel = torch.randint(0, ntr, (n,), generator=g)
    xb, yb = Xall[sel], Yall[sel]
    T = int((yb >= 0).sum(1).max())
    return xb[:, :T].contiguous(), yb[:, :T].contiguous()
''',
    r'''
LSTMRun = namedtuple("LSTMRun", ["hs", "h", "c"])

def run_lstm(xs, h, c, Wx, Wh, b):
    hs, h, c = torch.lstm(xs, (h[None], c[None]), (Wx.T, Wh.T, b, b * 0), True, 1, 0.0, False,
                          False, True)
    return LSTMRun(hs, h[0], c[0])

D_E, D_H, T_STEP = 10, 32, 3
g0 = torch.Generator().manual_seed(1001)
prm = {'E': torch.randn(Vsz, D_E, generator=g0),
       'W_ih': torch.randn(D_E, 4 * D_H, generator=g0) / D_E**0.5,
       'W_hh': torch.randn(D_H, 4 * D_H, generator=g0) / D_H**0.5,
       'b_g': 0.1 * torch.randn(4 * D_H, generator=g0),
       'W_dec': torch.randn(D_H, Vsz, generator=g0) / D_H**0.5,
       'b_dec': 0.1 * torch.randn(Vsz, generator=g0)}
prm['b_g'][D_H:2 * D_H] += 1.0
for p in prm.values():
    p.requires_grad_(True)
''',
    r'''
Xb, Yb = batch_of(28, g0)
nb_ = Xb.shape[0]
fwd = {}
fwd['x_seq'] = prm['E'][Xb]
zeros = torch.zeros(nb_, D_H)
r0 = run_lstm(fwd['x_seq'][:, :T_STEP], zeros, zeros, prm['W_ih'], prm['W_hh'], prm['b_g'])
fwd['H_pre'], fwd['h_tm1'], fwd['c_tm1'] = r0.hs, r0.h, r0.c
fwd['x_cur'] = fwd['x_seq'][:, T_STEP]
fwd['W_ih_t'] = prm['W_ih'].clone()
fwd['W_hh_t'] = prm['W_hh'].clone()
fwd['b_g_t'] = prm['b_g'].clone()
fwd['a'] = fwd['x_cur'] @ fwd['W_ih_t'] + fwd['h_tm1'] @ fwd['W_hh_t'] + fwd['b_g_t']
for j, key in enumerate(['a_i', 'a_f', 'a_g', 'a_o']):
    fwd[key] = fwd['a'][:, j * D_H:(j + 1) * D_H]
fwd['in_gate'] = torch.sigmoid(fwd['a_i'])
fwd['forget'] = torch.sigmoid(fwd['a_f'])
fwd['cand'] = torch.tanh(fwd['a_g'])
fwd['out_gate'] = torch.sigmoid(fwd['a_o'])
fwd['c_t'] = fwd['forget'] * fwd['c_tm1'] + fwd['in_gate'] * fwd['cand']
fwd['h_t'] = fwd['out_gate'] * torch.tanh(fwd['c_t'])
fwd['hc_t'] = torch.stack([fwd['h_t'], fwd['c_t']])
r1 = run_lstm(fwd['x_seq'][:, T_STEP + 1:], fwd['hc_t'][0], fwd['hc_t'][1], prm['W_ih'], prm['W_hh'], prm['b_g'])
fwd['H_post'] = r1.hs
fwd['H'] = torch.cat([fwd['H_pre'], fwd['h_t'][:, None], fwd['H_post']], 1)
fwd['y'] = fwd['H'] @ prm['W_dec'] + prm['b_dec']
loss = F.cross_entropy(fwd['y'].view(-1, Vsz), Yb.view(-1), ignore_index=-1)
''',
    r'''
for t_ in fwd.values():
    t_.retain_grad()
loss.backward()
dfwd = {}

def report(key):
    ref = prm[key].grad if key in prm else fwd[key].grad
    mine = dfwd[key]
    print(f"{key:>8}: {(mine - ref).abs().max().item():.3e}  close={torch.allclose(mine, ref, atol=1e-7)}")
''',
    r'''
F_ = {k_: v_.detach() for k_, v_ in fwd.items()}
msk = (Yb >= 0).float()
dfwd['y'] = (torch.softmax(F_['y'], -1) - F.one_hot(Yb.clamp(min=0), Vsz)) * msk[..., None] / msk.sum()
report('y')
''',
    r'''
dfwd['H'] = dfwd['y'] @ prm['W_dec'].detach().T
dfwd['W_dec'] = torch.einsum('bth,btv->hv', F_['H'], dfwd['y'])
dfwd['b_dec'] = dfwd['y'].sum((0, 1))
for key in ['H', 'W_dec', 'b_dec']:
    report(key)
''',
    r'''
dfwd['H_pre'] = dfwd['H'][:, :T_STEP]
dfwd['H_post'] = dfwd['H'][:, T_STEP + 1:]
dfwd['h_t'] = dfwd['H'][:, T_STEP].clone()
report('H_pre'); report('H_post')
''',
    r'''
dfwd['h_t'] += fwd['hc_t'].grad[0]
dfwd['c_t'] = fwd['hc_t'].grad[1].clone()
report('h_t')
''',
    r'''
tanh_c = torch.tanh(F_['c_t'])
dfwd['out_gate'] = dfwd['h_t'] * tanh_c
dfwd['c_t'] = dfwd['h_t'] * F_['out_gate'] * (1 - tanh_c**2)
report('out_gate'); report('c_t')
''',
    r'''
dfwd['forget'] = dfwd['c_t'] * F_['c_tm1']
dfwd['c_tm1'] = dfwd['c_t'] * F_['forget']
dfwd['in_gate'] = dfwd['c_t'] * F_['cand']
dfwd['cand'] = dfwd['c_t'] * F_['in_gate']
for key in ['forget', 'c_tm1', 'in_gate', 'cand']:
    report(key)
''',
    r'''
for src, dst in [('in_gate', 'a_i'), ('forget', 'a_f'), ('out_gate', 'a_o')]:
    s_ = F_[src]
    dfwd[dst] = dfwd[src] * s_ * (1 - s_)
    report(dst)
dfwd['a_g'] = dfwd['cand'] * (1 - F_['cand']**2)
report('a_g')
''',
    r'''
dfwd['a'] = torch.cat([dfwd['a_i'], dfwd['a_f'], dfwd['a_g'], dfwd['a_o']], dim=1)
report('a')
''',
    r'''
dfwd['x_cur'] = dfwd['a'] @ F_['W_ih_t'].T
dfwd['h_tm1'] = dfwd['a'] @ F_['W_hh_t'].T
dfwd['W_ih_t'] = F_['x_cur'].T @ dfwd['a']
dfwd['W_hh_t'] = F_['h_tm1'].T @ dfwd['a']
dfwd['b_g_t'] = dfwd['a'].sum(0)
for key in ['x_cur', 'h_tm1', 'W_ih_t', 'W_hh_t', 'b_g_t']:
    report(key)
''',
    r'''
# exercise 3: the four gates at once
gates_now = torch.cat([F_['in_gate'], F_['forget'], F_['cand'], F_['out_gate']], 1)
local = torch.cat([gates_now[:, :2 * D_H] * (1 - gates_now[:, :2 * D_H]),
                   1 - gates_now[:, 2 * D_H:3 * D_H]**2,
                   gates_now[:, 3 * D_H:] * (1 - gates_now[:, 3 * D_H:])], 1)
da_fused = torch.cat([dfwd['in_gate'], dfwd['forget'], dfwd['cand'], dfwd['out_gate']], 1) * local
print((da_fused - fwd['a'].grad).abs().max())
''',
    ("md", "## exercise 2: through time"),
    r'''
def lstm_backward(dhs, xs, h0, c0, hs, cs, gates, Wx, Wh):
    B, T, H = hs.shape
    dxs = torch.zeros_like(xs)
    dWx, dWh = torch.zeros_like(Wx), torch.zeros_like(Wh)
    db = torch.zeros(4 * H)
    dh_next, dc_next = torch.zeros(B, H), torch.zeros(B, H)
    for s in reversed(range(T)):
        i, f, g, o = gates[:, s].split(H, dim=1)
        c_prev = cs[:, s - 1] if s > 0 else c0
        h_prev = hs[:, s - 1] if s > 0 else h0
        dh = dhs[:, s] + dh_next
        tc = torch.tanh(cs[:, s])
        dc = dc_next + dh * o * (1 - tc**2)
        da = torch.cat([dc * g * i * (1 - i), dc * c_prev * f * (1 - f), dc * i * (1 - g**2),
                        dh * tc * o * (1 - o)], 1)
        dxs[:, s] = da @ Wx.T
        dWx += xs[:, s].T @ da
        dWh += h_prev.T @ da
        db += da.sum(0)
        dh_next = da @ Wh.T
        dc_next = dc * f
    return dxs, dh_next, dc_next, dWx, dWh, db

def lstm_scan(xs, h, c, Wx, Wh, b):
    H = Wh.shape[0]
    hs, cs, gs = [], [], []
    for s in range(xs.shape[1]):
        a = xs[:, s] @ Wx + h @ Wh + b
        i, f, g, o = a[:, :H].sigmoid(), a[:, H:2 * H].sigmoid(), a[:, 2 * H:3 * H].tanh(), a[:, 3 * H:].sigmoid()
        c = f * c + i * g
        h = o * c.tanh()
        hs.append(h); cs.append(c); gs.append(torch.cat([i, f, g, o], 1))
    return torch.stack(hs, 1), torch.stack(cs, 1), torch.stack(gs, 1)
''',
    r'''
xs_ = torch.randn(4, 6, D_E, requires_grad=True)
h0_ = torch.randn(4, D_H, requires_grad=True)
c0_ = torch.randn(4, D_H, requires_grad=True)
W1_, W2_, b_ = (prm[k].detach().clone().requires_grad_() for k in ['W_ih', 'W_hh', 'b_g'])
hs_, cs_, gs_ = lstm_scan(xs_, h0_, c0_, W1_, W2_, b_)
dhs_ = torch.randn_like(hs_)
refs = torch.autograd.grad(hs_, [xs_, h0_, c0_, W1_, W2_, b_], dhs_)
mine = lstm_backward(dhs_, xs_.detach(), h0_.detach(), c0_.detach(), hs_.detach(), cs_.detach(), gs_.detach(), W1_.detach(), W2_.detach())
print([round((m - r).abs().max().item(), 8) for m, r in zip(mine, refs)])
''',
    r'''
for p in prm.values():
    p.requires_grad_(False)
track = []
for it in range(250):
    xb, yb = batch_of(24, g0)
    B = xb.shape[0]
    xe = prm['E'][xb]
    z_ = torch.zeros(B, D_H)
    hs_, cs_, gs_ = lstm_scan(xe, z_, z_, prm['W_ih'], prm['W_hh'], prm['b_g'])
    out_ = hs_ @ prm['W_dec'] + prm['b_dec']
    lv = F.cross_entropy(out_.view(-1, Vsz), yb.view(-1), ignore_index=-1)
    m_ = (yb >= 0).float()
    dout_ = (torch.softmax(out_, -1) - F.one_hot(yb.clamp(min=0), Vsz)) * m_[..., None] / m_.sum()
    gr = {'W_dec': torch.einsum('bth,btv->hv', hs_, dout_), 'b_dec': dout_.sum((0, 1))}
    dxe, _, _, gr['W_ih'], gr['W_hh'], gr['b_g'] = lstm_backward(dout_ @ prm['W_dec'].T, xe, z_, z_, hs_, cs_, gs_, prm['W_ih'], prm['W_hh'])
    gr['E'] = torch.zeros_like(prm['E']).index_add_(0, xb.reshape(-1), dxe.reshape(-1, D_E))
    norm = torch.sqrt(sum((v_**2).sum() for v_ in gr.values()))
    clip = min(1.0, 1.0 / (norm.item() + 1e-6))
    for k_ in prm:
        prm[k_] -= 0.5 * clip * gr[k_]
    track.append(lv.item())
print(sum(track[:25]) / 25, sum(track[-25:]) / 25)
''',
]

LSTMW1_MAP = {"logits": "y", "hs": "H", "hs_before": "H_pre", "hs_after": "H_post", "h": "h_t",
              "c": "c_t", "state": "hc_t", "o": "out_gate", "f": "forget", "i": "in_gate",
              "g": "cand", "c_prev": "c_tm1", "h_prev": "h_tm1", "ai": "a_i", "af": "a_f",
              "ag": "a_g", "ao": "a_o", "ifgo": "a", "x_t": "x_cur", "Wx_t": "W_ih_t",
              "Wh_t": "W_hh_t", "b_t": "b_g_t"}
LSTMW1_PN = {"C": "E", "Wx": "W_ih", "Wh": "W_hh", "b": "b_g", "Wy": "W_dec", "by": "b_dec"}

add("lstm_w1_dicts_run_lstm_c_assign_slip", "lstm", LSTMW1_CELLS,
    LSTM_STEPS + ["fused/gates", "bptt/lstm_backward", "train/lstm"],
    wrong=["step/h"],
    cascade=["step/c", "step/gates", "step/g", "step/ifgo", "step/inputs", "fused/gates"],
    notes="own data (random.seed(321)), setup's run_lstm, parameters in a dict under own names, "
          "forward at top level into a dict fwd of renamed activations, grads in a parallel "
          "dict dfwd with every first branch held, report(key) prints; fused gates; "
          "lstm_backward as one loop, checked on an own torch.stack forward; SGD with clipping "
          "250 steps, batch 24 (check batch 28). Slip: dfwd['c_t'] = ... where += belongs "
          "(the future's share dropped); c, gates, g, ifgo, inputs, fused gates cascade",
    where={**where("lstm", LSTM_STEPS,
                   fwd={**{k: f"fwd['{v}']" for k, v in LSTMW1_MAP.items()},
                        "Wy": "prm['W_dec']", "by": "prm['b_dec']", "t": "T_STEP"},
                   grad=lambda k: f"dfwd['{LSTMW1_MAP.get(k) or LSTMW1_PN[k]}']",
                   first_after={"h": "dfwd['h_t'] = dfwd['H'][:, T_STEP].clone()",
                                "c": "dfwd['c_t'] = fwd['hc_t'].grad[1].clone()"}),
           "fused/gates": [("da_fused", "G(fwd['a'])")]},
    checkpoint="print((da_fused - fwd['a'].grad).abs().max())",
    functions={"bptt/lstm_backward": None},
    train={"cell": "for it in range(250)", "probe": "for k_ in prm:",
           "params": "{L: prm[O] for L, O in " + repr(LSTMW1_PN) + ".items()}",
           "grads": "{L: gr[O] for L, O in " + repr(LSTMW1_PN) + ".items()}",
           "ref": "lambda Q: ref_lstm_loss(Q, xb, yb)", "losses": "track"},
    fix=[("dfwd['c_t'] = dfwd['h_t'] * F_['out_gate']", "dfwd['c_t'] += dfwd['h_t'] * F_['out_gate']")])

# ================================================================================================
# LSTM W2 (right throughout). Own data (torch.Generator(17) randperm, rows padded through a
# helper), an `LSTMLM` class: parameters as attributes under its own names (emb, Wx, Wh, bias,
# Wout, bout), a forward that runs the steps before and after t with its own per-time-step loop
# (torch.stack of the per-step h and c) and reads step t's inputs back as the last of the
# stacked early states (h_prev = H_early[:, -1], c_prev = C_early[:, -1]), every activation an
# attribute on the model (e, H_early, C_early, h_prev, c_prev, x_t, Wx_t, Wh_t, b_t, pre,
# pre_i..pre_o, gate_i / gate_f / gate_g / gate_o, c_t, h_t, ch, H_late, H_all, out); the
# backward as eight methods called in turn, each gradient an attribute `g_<name>`, the first
# branches of dh and dc held between calls, the early states' gradient completed with dh_prev at
# its last position; checks by `torch.testing.assert_close` in a loop. Exercise 3's
# lstm_step_backward, checked on step t. Batch 12; no training.

LSTMW2_CELLS = [
    r'''
import torch
import torch.nn.functional as F
''',
    r'''
names = open('names.txt', 'r').read().splitlines()
order = torch.randperm(len(names), generator=torch.Generator().manual_seed(17)).tolist()
names = [names[j] for j in order]
chars = sorted(set(''.join(names)))
stoi = {c: k + 1 for k, c in enumerate(chars)}
stoi['.'] = 0
V = len(stoi)
W_ = max(len(n_) for n_ in names) + 1

def pad_row(n_):
    ids = [stoi[c] for c in n_]
    return [0] + ids + [0] * (W_ - 1 - len(ids)), ids + [0] + [-1] * (W_ - 1 - len(ids))

rows = [pad_row(n_) for n_ in names]
X = torch.tensor([r[0] for r in rows])
Y = torch.tensor([r[1] for r in rows])
''',
    r'''
class LSTMLM:
    def __init__(self, V, D, H, seed):
        gg = torch.Generator().manual_seed(seed)
        self.H = H
        self.emb = torch.randn(V, D, generator=gg)
        self.Wx = torch.randn(D, 4 * H, generator=gg) * D**-0.5
        self.Wh = torch.randn(H, 4 * H, generator=gg) * H**-0.5
        self.bias = torch.randn(4 * H, generator=gg) * 0.1
        self.bias[H:2 * H] += 1.0
        self.Wout = torch.randn(H, V, generator=gg) * H**-0.5
        self.bout = torch.randn(V, generator=gg) * 0.1

    def params(self):
        return dict(emb=self.emb, Wx=self.Wx, Wh=self.Wh, bias=self.bias, Wout=self.Wout, bout=self.bout)

    def run(self, xs, h, c):
        H = self.H
        hs, cs = [], []
        for s in range(xs.shape[1]):
            z = xs[:, s] @ self.Wx + h @ self.Wh + self.bias
            c = torch.sigmoid(z[:, H:2 * H]) * c + torch.sigmoid(z[:, :H]) * torch.tanh(z[:, 2 * H:3 * H])
            h = torch.sigmoid(z[:, 3 * H:]) * torch.tanh(c)
            hs.append(h)
            cs.append(c)
        if not hs:
            return xs.new_zeros(xs.shape[0], 0, H), xs.new_zeros(xs.shape[0], 0, H)
        return torch.stack(hs, 1), torch.stack(cs, 1)

    def forward(self, Xb, Yb, t):
        H = self.H
        self.Yb, self.t = Yb, t
        self.e = self.emb[Xb]
        z0 = torch.zeros(Xb.shape[0], H)
        self.H_early, self.C_early = self.run(self.e[:, :t], z0, z0)
        self.h_prev, self.c_prev = self.H_early[:, -1], self.C_early[:, -1]
        self.x_t = self.e[:, t]
        self.Wx_t, self.Wh_t, self.b_t = self.Wx.clone(), self.Wh.clone(), self.bias.clone()
        self.pre = self.x_t @ self.Wx_t + self.h_prev @ self.Wh_t + self.b_t
        self.pre_i, self.pre_f, self.pre_g, self.pre_o = self.pre.split(H, dim=1)
        self.gate_i, self.gate_f = torch.sigmoid(self.pre_i), torch.sigmoid(self.pre_f)
        self.gate_g, self.gate_o = torch.tanh(self.pre_g), torch.sigmoid(self.pre_o)
        self.c_t = self.gate_f * self.c_prev + self.gate_i * self.gate_g
        self.h_t = self.gate_o * torch.tanh(self.c_t)
        self.ch = torch.stack([self.h_t, self.c_t])
        self.H_late, _ = self.run(self.e[:, t + 1:], self.ch[0], self.ch[1])
        self.H_all = torch.cat([self.H_early, self.h_t[:, None], self.H_late], 1)
        self.out = self.H_all @ self.Wout + self.bout
        return F.cross_entropy(self.out.reshape(-1, self.out.shape[-1]), Yb.reshape(-1), ignore_index=-1)

    def tensors(self):
        return ['out', 'H_all', 'H_early', 'H_late', 'h_t', 'c_t', 'ch', 'gate_o', 'gate_f', 'gate_i',
                'gate_g', 'c_prev', 'h_prev', 'pre_i', 'pre_f', 'pre_g', 'pre_o', 'pre', 'x_t', 'Wx_t',
                'Wh_t', 'b_t']

    @torch.no_grad()
    def back_loss(self):
        ok = (self.Yb >= 0).float()
        p = F.softmax(self.out, -1)
        p = p - F.one_hot(self.Yb.clamp(min=0), p.shape[-1])
        self.g_out = p * ok[..., None] / ok.sum()

    @torch.no_grad()
    def back_head(self):
        self.g_H_all = self.g_out @ self.Wout.T
        self.g_Wout = self.H_all.flatten(0, 1).T @ self.g_out.flatten(0, 1)
        self.g_bout = self.g_out.sum((0, 1))

    @torch.no_grad()
    def back_split(self):
        t = self.t
        self.g_H_early = self.g_H_all[:, :t].clone()
        self.g_H_late = self.g_H_all[:, t + 1:]
        self.g_h_t = self.g_H_all[:, t].clone()

    @torch.no_grad()
    def back_state(self, future):
        self.g_h_t = self.g_h_t + future[0]
        self.g_c_t = future[1].clone()

    @torch.no_grad()
    def back_h(self):
        th = torch.tanh(self.c_t)
        self.g_gate_o = self.g_h_t * th
        self.g_c_t = self.g_c_t + self.g_h_t * self.gate_o * (1 - th * th)

    @torch.no_grad()
    def back_cell(self):
        self.g_gate_f = self.g_c_t * self.c_prev
        self.g_c_prev = self.g_c_t * self.gate_f
        self.g_gate_i = self.g_c_t * self.gate_g
        self.g_gate_g = self.g_c_t * self.gate_i

    @torch.no_grad()
    def back_gates(self):
        self.g_pre_i = self.g_gate_i * self.gate_i * (1 - self.gate_i)
        self.g_pre_f = self.g_gate_f * self.gate_f * (1 - self.gate_f)
        self.g_pre_o = self.g_gate_o * self.gate_o * (1 - self.gate_o)
        self.g_pre_g = self.g_gate_g * (1 - self.gate_g**2)
        self.g_pre = torch.cat([self.g_pre_i, self.g_pre_f, self.g_pre_g, self.g_pre_o], 1)

    @torch.no_grad()
    def back_inputs(self):
        self.g_x_t = self.g_pre @ self.Wx_t.T
        self.g_h_prev = self.g_pre @ self.Wh_t.T
        self.g_Wx_t = self.x_t.T @ self.g_pre
        self.g_Wh_t = self.h_prev.T @ self.g_pre
        self.g_b_t = self.g_pre.sum(0)
        self.g_H_early[:, -1] += self.g_h_prev     # h_prev is the last early state
''',
    r'''
model = LSTMLM(V, 10, 32, seed=4242)
for p in model.params().values():
    p.requires_grad_(True)
sel = torch.randint(0, 25000, (12,), generator=torch.Generator().manual_seed(6))
Xb, Yb = X[sel], Y[sel]
Tmax = int((Yb >= 0).sum(1).max())
Xb, Yb = Xb[:, :Tmax], Yb[:, :Tmax]
loss = model.forward(Xb, Yb, t=3)
for nm in model.tensors():
    getattr(model, nm).retain_grad()
loss.backward()
print(loss.item())
''',
    r'''
model.back_loss()
model.back_head()
model.back_split()
model.back_state(model.ch.grad)
model.back_h()
model.back_cell()
model.back_gates()
model.back_inputs()
''',
    r'''
for nm in model.tensors():
    if nm != 'ch':
        torch.testing.assert_close(getattr(model, 'g_' + nm), getattr(model, nm).grad, rtol=1e-4, atol=1e-6)
torch.testing.assert_close(model.g_Wout, model.Wout.grad)
torch.testing.assert_close(model.g_bout, model.bout.grad)
print('step t: all match')
''',
    ("md", "### exercise 3: the step as a function"),
    r'''
def lstm_step_backward(dh, dc, x, h_prev, c_prev, c, gates, Wx, Wh):
    i, f, g, o = gates.chunk(4, dim=1)
    tc = torch.tanh(c)
    dc_tot = dc + dh * o * (1 - tc * tc)
    dpre = torch.cat((dc_tot * g * i * (1 - i), dc_tot * c_prev * f * (1 - f),
                      dc_tot * i * (1 - g * g), dh * tc * o * (1 - o)), dim=1)
    return dpre @ Wx.T, dpre @ Wh.T, dc_tot * f, x.T @ dpre, h_prev.T @ dpre, dpre.sum(0)

m = model
with torch.no_grad():
    res = lstm_step_backward(m.H_all.grad[:, 3] + m.ch.grad[0], m.ch.grad[1], m.x_t, m.h_prev, m.c_prev,
                             m.c_t, torch.cat([m.gate_i, m.gate_f, m.gate_g, m.gate_o], 1), m.Wx_t, m.Wh_t)
for got, nm in zip(res, ['x_t', 'h_prev', 'c_prev', 'Wx_t', 'Wh_t', 'b_t']):
    print(nm, torch.allclose(got, getattr(m, nm).grad, atol=1e-7))
''',
]

LSTMW2_MAP = {"logits": "out", "hs": "H_all", "hs_before": "H_early", "hs_after": "H_late",
              "h": "h_t", "c": "c_t", "state": "ch", "o": "gate_o", "f": "gate_f",
              "i": "gate_i", "g": "gate_g", "c_prev": "c_prev", "h_prev": "h_prev",
              "ai": "pre_i", "af": "pre_f", "ag": "pre_g", "ao": "pre_o", "ifgo": "pre",
              "x_t": "x_t", "Wx_t": "Wx_t", "Wh_t": "Wh_t", "b_t": "b_t", "Wy": "Wout",
              "by": "bout"}

add("lstm_w2_model_attributes_methods", "lstm", LSTMW2_CELLS,
    LSTM_STEPS + ["fused/lstm_step_backward"],
    notes="own data (randperm(17)), LSTMLM class with parameters and every activation as "
          "attributes under own names, its own per-step loop (torch.stack) before and after t, "
          "step t's inputs read back from the stacked early states; eight backward methods "
          "with g_<name> attributes, first branches held between calls, the early states' "
          "gradient completed with dh_prev; assert_close loop; lstm_step_backward; batch 12; "
          "no training; all right",
    where=where("lstm", LSTM_STEPS,
                fwd={**{k: f"model.{v}" for k, v in LSTMW2_MAP.items()}, "t": "3"},
                grad=lambda k: f"model.g_{LSTMW2_MAP[k]}",
                first_after={"h": "model.back_split()", "c": "model.back_state(model.ch.grad)"}),
    checkpoint="model.back_inputs()",
    functions={"fused/lstm_step_backward": None})

# ================================================================================================
# CONV W1 (right throughout). forward.py's examples / batch copied for the data (the lesson's
# split), torch.manual_seed(404) and an init of the learner's own; parameters in a dict under
# their own names (table, k1 / c1, k2 / c2, k3 / c3, W_cls, b_cls); `forward(params, X, Y)`
# returns a dict `acts` of renamed activations (E, xT, z1 / a1, z2 / a2, z3 / a3, feat, logits,
# loss), each convolution written as torch.matmul of the kernel reshaped to [C_out, 2 C_in]
# with the two taps stacked from the padded input; `backward(acts, params)` returns a dict of
# every gradient under the same keys (the taps' gradient split back and added into a padded
# buffer); checks in a loop of `print(name, torch.allclose(...))`. Training: 300 steps of SGD on
# forward / backward, batch 32 (the check batch 36).

CONVW1_CELLS = [
    r'''
import torch
import torch.nn.functional as F

block_size, n_embd, n_hidden = 8, 10, 64
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

def batch(n, seed, text, split="train"):
    X, Y = examples(text, split)
    ix = torch.randint(0, X.shape[0], (n,), generator=torch.Generator().manual_seed(seed))
    return {"X": X[ix], "Y": Y[ix]}

text = open("names.txt").read()
''',
    r'''
torch.manual_seed(404)
def kern(co, ci):
    return torch.randn(co, ci, 2) * (5 / 3) / (2 * ci)**0.5
params = {'table': torch.randn(27, n_embd),
          'k1': kern(n_hidden, n_embd), 'c1': 0.1 * torch.randn(n_hidden),
          'k2': kern(n_hidden, n_hidden), 'c2': 0.1 * torch.randn(n_hidden),
          'k3': kern(n_hidden, n_hidden), 'c3': 0.1 * torch.randn(n_hidden),
          'W_cls': 0.1 * torch.randn(n_hidden, 27), 'b_cls': 0.1 * torch.randn(27)}
DILS = {1: 1, 2: 2, 3: 4}
''',
    r'''
def stacked_taps(a, d):
    T = a.shape[2]
    ap = F.pad(a, (d, 0))
    return torch.cat([ap[:, :, :T], ap[:, :, d:d + T]], dim=1)     # [B, 2*C_in, T]: tap 0 then tap 1

def flat_kernel(k):
    return torch.cat([k[:, :, 0], k[:, :, 1]], dim=1)              # [C_out, 2*C_in]

def forward(params, X, Y):
    acts = {'X': X, 'Y': Y}
    acts['E'] = params['table'][X]
    acts['xT'] = acts['E'].transpose(1, 2)
    a = acts['xT']
    for l in (1, 2, 3):
        acts[f'z{l}'] = torch.matmul(flat_kernel(params[f'k{l}']), stacked_taps(a, DILS[l])) + params[f'c{l}'][:, None]
        acts[f'a{l}'] = torch.tanh(acts[f'z{l}'])
        a = acts[f'a{l}']
    acts['feat'] = a[:, :, -1]
    acts['logits'] = acts['feat'] @ params['W_cls'] + params['b_cls']
    acts['loss'] = F.cross_entropy(acts['logits'], Y)
    return acts

def backward(acts, params):
    g = {}
    n = acts['Y'].shape[0]
    g['logits'] = (F.softmax(acts['logits'], 1) - F.one_hot(acts['Y'], 27)) / n
    g['feat'] = g['logits'] @ params['W_cls'].T
    g['W_cls'] = acts['feat'].T @ g['logits']
    g['b_cls'] = g['logits'].sum(0)
    g['a3'] = torch.zeros_like(acts['a3'])
    g['a3'][:, :, -1] = g['feat']
    below = {3: 'a2', 2: 'a1', 1: 'xT'}
    for l in (3, 2, 1):
        d = DILS[l]
        g[f'z{l}'] = g[f'a{l}'] * (1 - acts[f'a{l}']**2)
        a_in = acts[below[l]]
        ci, T = a_in.shape[1], a_in.shape[2]
        dflat = torch.einsum('bot,bjt->oj', g[f'z{l}'], stacked_taps(a_in, d))
        g[f'k{l}'] = torch.stack([dflat[:, :ci], dflat[:, ci:]], dim=2)
        g[f'c{l}'] = g[f'z{l}'].sum((0, 2))
        dtaps = torch.matmul(flat_kernel(params[f'k{l}']).T, g[f'z{l}'])
        dpad = torch.zeros(a_in.shape[0], ci, T + d)
        dpad[:, :, :T] += dtaps[:, :ci]
        dpad[:, :, d:] += dtaps[:, ci:]
        g[below[l]] = dpad[:, :, d:]
    g['E'] = g['xT'].transpose(1, 2)
    g['table'] = torch.zeros_like(params['table']).index_add_(0, acts['X'].flatten(), g['E'].reshape(-1, n_embd))
    return g
''',
    r'''
for p in params.values():
    p.requires_grad_(True)
bt = batch(36, 2024, text)
acts = forward(params, bt['X'], bt['Y'])
for k_, v_ in acts.items():
    if k_ not in ('X', 'Y'):
        v_.retain_grad()
acts['loss'].backward()
with torch.no_grad():
    grads = backward(acts, params)
for k_, v_ in grads.items():
    ref = params[k_].grad if k_ in params else acts[k_].grad
    print(f"{k_:6s}", torch.allclose(v_, ref, rtol=1e-4, atol=1e-6))
''',
    r'''
for p in params.values():
    p.requires_grad_(False)
lossi = []
for it in range(300):
    bt = batch(32, 7000 + it, text)
    Xb, Yb = bt['X'], bt['Y']
    acts_ = forward(params, Xb, Yb)
    gs = backward(acts_, params)
    for k_ in params:
        params[k_] -= 0.1 * gs[k_]
    lossi.append(acts_['loss'].item())
print(sum(lossi[:30]) / 30, sum(lossi[-30:]) / 30)
''',
]

CONVW1_ACT = {"logits": "logits", "last": "feat", "h3": "a3", "h3pre": "z3", "h2": "a2",
              "h2pre": "z2", "h1": "a1", "h1pre": "z1", "x": "xT", "emb": "E"}
CONVW1_PAR = {"C": "table", "w1": "k1", "b1": "c1", "w2": "k2", "b2": "c2", "w3": "k3",
              "b3": "c3", "W": "W_cls", "b": "b_cls"}

add("conv_w1_dict_forward_matmul_taps", "conv", CONVW1_CELLS, CONV_ALL,
    notes="forward.py's examples / batch copied, manual_seed(404) own init, parameters in a dict "
          "under own names, forward(params, X, Y) returning a dict of renamed activations, each "
          "convolution a torch.matmul of the reshaped kernel with stacked taps; backward(acts, "
          "params) returning a dict; print(allclose) loop; SGD 300 steps, batch 32 (check batch "
          "36); all right",
    loss="acts['loss']",
    checkpoint="for k_, v_ in grads.items():",
    where=where("conv", CONV_STEPS,
                fwd={**{k: f"acts['{v}']" for k, v in CONVW1_ACT.items()},
                     **{k: f"params['{v}']" for k, v in CONVW1_PAR.items()}},
                grad=lambda k: f"grads['{CONVW1_ACT.get(k) or CONVW1_PAR[k]}']"),
    train={"cell": "for it in range(300)", "probe": "for k_ in params:",
           "params": "params", "grads": "gs", "ref": "lambda Q: forward(Q, Xb, Yb)['loss']",
           "losses": "lossi"})

# ================================================================================================
# CONV W2 (right throughout). Own data (random.seed(2), contexts built by slicing a padded id
# list), a `Net` whose parameters live on its parts (net.table, net.layers[i].w / .b for the
# three `Conv` layers, net.head.W / .b), its forward F.conv1d as in the lesson but every
# activation stored on the layer that made it (layer.inp, layer.z, layer.a; net.E, net.feat,
# net.logits); per-layer backward methods: each Conv layer's input gradient by
# F.conv_transpose1d with the layer's dilation, weight gradient by an einsum over the padded
# input's two taps, stored on the layer (layer.dz, layer.da, layer.dw, layer.db, layer.dinp);
# `assert torch.allclose` on each. Batch 50; exercise 1 only.

CONVW2_CELLS = [
    md("# dilated causal convs, gradients kept on the layers"),
    r'''
import random
import torch
import torch.nn.functional as F
''',
    r'''
words = [w for w in open('names.txt').read().split('\n') if w]
random.seed(2)
random.shuffle(words)
alpha = '.' + ''.join(sorted(set(''.join(words))))
ids = {c: j for j, c in enumerate(alpha)}
K = 8
Xl, Yl = [], []
for w in words[:25000]:
    seq = [0] * K + [ids[c] for c in w] + [0]
    for j in range(K, len(seq)):
        Xl.append(seq[j - K:j])
        Yl.append(seq[j])
Xtr, Ytr = torch.tensor(Xl), torch.tensor(Yl)
''',
    r'''
class Conv:
    def __init__(self, cin, cout, dil, g):
        self.dil = dil
        self.w = torch.randn(cout, cin, 2, generator=g) * (5 / 3) / (2 * cin)**0.5
        self.b = torch.randn(cout, generator=g) * 0.1

    def forward(self, inp):
        self.inp = inp
        self.z = F.conv1d(F.pad(inp, (self.dil, 0)), self.w, self.b, dilation=self.dil)
        self.a = torch.tanh(self.z)
        return self.a

    def backward(self, da):
        d, T = self.dil, self.inp.shape[2]
        self.da = da
        self.dz = da * (1 - self.a**2)
        padded = F.pad(self.inp, (d, 0))
        self.dw = torch.stack([torch.einsum('bot,bit->oi', self.dz, padded[:, :, k * d:k * d + T])
                               for k in range(2)], -1)
        self.db = self.dz.sum(dim=(0, 2))
        self.dinp = F.conv_transpose1d(self.dz, self.w, dilation=d)[:, :, d:]
        return self.dinp


class Head:
    def __init__(self, H, V, g):
        self.W = torch.randn(H, V, generator=g) * 0.1
        self.b = torch.randn(V, generator=g) * 0.1


class Net:
    def __init__(self, V, D, H, seed):
        g = torch.Generator().manual_seed(seed)
        self.table = torch.randn(V, D, generator=g)
        self.layers = [Conv(D, H, 1, g), Conv(H, H, 2, g), Conv(H, H, 4, g)]
        self.head = Head(H, V, g)

    def parameters(self):
        out = [self.table]
        for L_ in self.layers:
            out += [L_.w, L_.b]
        return out + [self.head.W, self.head.b]

    def forward(self, Xb, Yb):
        self.Xb, self.Yb = Xb, Yb
        self.E = self.table[Xb]
        self.xT = self.E.transpose(1, 2)
        h = self.xT
        for L_ in self.layers:
            h = L_.forward(h)
        self.feat = h[:, :, -1]
        self.logits = self.feat @ self.head.W + self.head.b
        return F.cross_entropy(self.logits, Yb)

    def backward_head(self):
        n = self.Yb.shape[0]
        self.dlogits = F.softmax(self.logits, dim=1)
        self.dlogits[torch.arange(n), self.Yb] -= 1
        self.dlogits /= n
        self.dfeat = self.dlogits @ self.head.W.T
        self.head.dW = self.feat.T @ self.dlogits
        self.head.db = self.dlogits.sum(0)

    def backward_convs(self):
        da = torch.zeros_like(self.layers[-1].a)
        da[:, :, -1] = self.dfeat
        for L_ in reversed(self.layers):
            da = L_.backward(da)
        self.dxT = da

    def backward_embedding(self):
        self.dE = self.dxT.transpose(1, 2)
        self.dtable = torch.zeros_like(self.table)
        self.dtable.index_add_(0, self.Xb.view(-1), self.dE.reshape(-1, self.dE.shape[-1]))
''',
    r'''
net = Net(len(alpha), 10, 64, seed=12)
for p in net.parameters():
    p.requires_grad_(True)
pick = torch.randint(0, len(Xtr), (50,), generator=torch.Generator().manual_seed(99))
loss = net.forward(Xtr[pick], Ytr[pick])
for t_ in [net.E, net.xT, net.feat, net.logits] + [L_.z for L_ in net.layers] + [L_.a for L_ in net.layers]:
    t_.retain_grad()
loss.backward()
''',
    r'''
with torch.no_grad():
    net.backward_head()
    net.backward_convs()
    net.backward_embedding()
''',
    r'''
def same(a, b):
    assert torch.allclose(a, b, rtol=1e-4, atol=1e-6), (a - b).abs().max()

same(net.dlogits, net.logits.grad)
same(net.dfeat, net.feat.grad)
same(net.head.dW, net.head.W.grad)
same(net.head.db, net.head.b.grad)
for L_ in net.layers:
    same(L_.da, L_.a.grad)
    same(L_.dz, L_.z.grad)
    same(L_.dw, L_.w.grad)
    same(L_.db, L_.b.grad)
same(net.dxT, net.xT.grad)
same(net.dE, net.E.grad)
same(net.dtable, net.table.grad)
print('every gradient matches')
''',
]

CONVW2_FWD = {"logits": "net.logits", "last": "net.feat", "h3": "net.layers[2].a",
              "h3pre": "net.layers[2].z", "h2": "net.layers[1].a", "h2pre": "net.layers[1].z",
              "h1": "net.layers[0].a", "h1pre": "net.layers[0].z", "x": "net.xT",
              "emb": "net.E", "C": "net.table", "W": "net.head.W", "b": "net.head.b",
              **{f"{p}{j}": f"net.layers[{j - 1}].{p}" for p in "wb" for j in (1, 2, 3)}}
CONVW2_GRAD = {"logits": "net.dlogits", "last": "net.dfeat", "h3": "net.layers[2].da",
               "h3pre": "net.layers[2].dz", "h2": "net.layers[1].da", "h2pre": "net.layers[1].dz",
               "h1": "net.layers[0].da", "h1pre": "net.layers[0].dz", "x": "net.dxT",
               "emb": "net.dE", "C": "net.dtable", "W": "net.head.dW", "b": "net.head.db",
               **{f"{p}{j}": f"net.layers[{j - 1}].d{p}" for p in "wb" for j in (1, 2, 3)}}

add("conv_w2_net_layer_attributes_conv_transpose", "conv", CONVW2_CELLS, CONV_STEPS,
    notes="own data (random.seed(2), contexts by slicing a padded id list), Net with parameters "
          "on its parts (net.layers[i].w / .b, net.head.W), activations stored on the layer that "
          "made them, F.conv1d forward; per-layer backward methods (conv_transpose1d for the "
          "input, einsum over taps for the weight), gradients on the layers; assert allclose; "
          "batch 50; exercise 1 only; all right",
    where=where("conv", CONV_STEPS, fwd=CONVW2_FWD, grad=CONVW2_GRAD.__getitem__),
    checkpoint="print('every gradient matches')")
