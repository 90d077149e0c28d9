"""Learners' own notebooks for the gpt, lstm and conv lessons, with each step's truth: a fifth
corpus, tune half (its other half is notebook_corpus_lessons_holdout5).

Six notebooks: three for gpt (where learners lose most), two for lstm, one for conv, in layouts
that the earlier corpora do not use: the whole forward and backward pass in one function, a
tape of (name, closure) pairs, torch.nn.Module subclasses with nn.Parameter but a manual
backward, attention as a loop over the heads, four separate gate matmuls, weights stored in
nn.LSTM's (4H, D) orientation, convolutions as explicit sums over their taps, a helper
redefined in a later cell. Each is a learner's own notebook: the lesson's forward pass copied
in (renamed and re-laid-out), their own loading of 'names.txt' (the truth runner points it at
data/names.txt), their own seed and init, the backward pass in a layout matching the forward,
their own comparison helper, and where they train, a loop of at most 300 steps on their own
gradients and an update of their own. Architecture sizes are the lessons' [lesson] sizes
throughout; batch sizes equal no other size of their lesson (gpt 3, 6 / 12, 20; lstm 22,
18 / 24; conv 36 / 45).

Layouts in this half:
  gpt_t1   `fwd_bwd(P, X, Y, peek=None)`: forward and backward in one function returning
           (loss, grads), called once, its locals dumped into `peek`; layer norm through
           var(unbiased=False) and torch.rsqrt; attention as a loop over the heads with per-head
           lists (Q, K, Vv, S, Sm, A, O), a boolean tril mask; g_xxx names; parameters' grads
           against .grad, a few activations against torch.autograd.grad. Exercise 1 only.
  gpt_t2   a tape of the learner's own: forward records (name, closure) pairs and keeps every
           activation in `acts` under own names; backward walks the tape reversed, adding into a
           dict `grad` through acc(); allclose loop; own adamw_update, 150 steps on the tape.
  gpt_t3   exercises 2 and 3: the seven functions (index_put_ accumulate, tensordot,
           chunk / permute heads), each tested by a vs_autograd helper; a torch.nn.Module
           `TinyGPT` with nn.Parameter attributes under own names and a registered mask buffer,
           forward returning (loss, saved), a manual_backward method on the functions; own
           adamw_update over named_parameters(), 200 steps.
  lstm_t4  the gates by four separate matmuls, weights / step-t clones / pre-activations in dicts
           keyed by gate letter (no `ifgo` exists: step/ifgo not attempted), the setup's run_lstm
           on the concatenated weights before and after t; grad_xxx names, first branches held,
           chk(); fused gates by torch.cat. No BPTT, no training.
  lstm_t5  parameters in nn.LSTM / nn.Linear orientation (W_ih [4H, D], W_hh [4H, H],
           W_out [V, H], `x @ W.T`), chunk(4); exercise 1 with d_xxx names and first branches
           held, report() relative errors; fused gates, lstm_step_backward, lstm_backward over it
           into a preallocated dxs; a training forward writing into preallocated hs / cs / gates;
           own Adam, 200 steps.
  conv_t6  each convolution an explicit sum over its two taps (`w[:, :, 0] @ shift(a, d) +
           w[:, :, 1] @ a + b`), g_xxx names; the backward helper causal_back first written with
           the shift the wrong way round for the input's gradient (mismatch printed), then
           redefined with the shift's adjoint and layer 3 recomputed, so the values the notebook
           ends with are right; SGD 300 steps on the helper.

Slips (each case's "notes" says which): gpt_t1 differentiates GELU's x**3 as x**2 (the 3
missing) (block/fch wrong; ln2, ln2_affine, x1, x1_residual, attproj, atty, att, preatt_masked,
preatt, qk, qkv, ln1, ln1_affine, x0, wpe, wte cascade); lstm_t4 overwrites dc when completing
it through h (`grad_c = grad_h * ...`), losing the future's share (step/h wrong; c, gates, g,
inputs and fused/gates cascade). The other four notebooks are right throughout (conv_t6's first,
wrong helper is replaced before any value it made is read as an answer). No notebook is shared
with the holdout half, nor with the earlier corpora.

Written apart from the grader: from the lessons' forward passes, pack.toml's [lesson] / [setup] /
[forward] tables, `backprop-tutor --pack X list / show` and the earlier corpora's format only,
without reading the tutor's code or the steps' solutions, mistakes, hints or explanations, and
without running the grader on these notebooks. Every label was measured by running the
notebook, not judged by eye:

    .venv/bin/python tests/lesson_corpus_truth.py notebook_corpus_lessons_tune5

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
# GPT T1 (a slip and its cascades). Own data (random.seed(2001) shuffle, rows padded by slicing),
# parameters in a dict under the learner's own names (tok_table, pos_table, n1_w, attn_w, proj_w,
# mlp_in_w, mlp_out_w, nf_w, ...); the whole forward AND backward pass in one function
# `fwd_bwd(P, X, Y, peek=None)` returning (loss, grads), called once; layer norm through
# `xc.var(unbiased=False)` and torch.rsqrt; attention as a Python loop over the heads, each head's
# q / k / v sliced out of the qkv activation and kept in lists (Q, K, Vv, S, Sm, A, O), the mask a
# boolean torch.tril; gradients named g_xxx, per-head gradients in lists; the function dumps its
# locals into `peek` (the learner's way to look inside it). Parameter gradients compared with
# .grad, a few activations with torch.autograd.grad. Batch 3; exercise 1 only. No first branch is
# ever held on its own (the function's locals are read at the end).
# Slip: GELU's backward differentiates x**3 as x**2 (the 3 is missing): block/fch is wrong, and
# ln2, ln2_affine, x1, x1_residual, attproj, atty, att, preatt_masked, preatt, qk, qkv, ln1,
# ln1_affine, x0, wpe, wte cascade.

GPTT1_CELLS = [
    md("## GPT block backward, all in one function\n"
       "Forward and backward live together so I can't mix up which tensors belong to which batch."),
    r'''
import math
import random
import torch
import torch.nn.functional as F
''',
    r'''
words = open('names.txt').read().splitlines()
random.seed(2001)
random.shuffle(words)
block_size, n_embd, n_head = 16, 32, 4
chars = sorted(set(''.join(words)))
enc = {c: i + 1 for i, c in enumerate(chars)}
enc['.'] = 0
V = len(enc)

def encode_rows(ws):
    X, Y = [], []
    for w in ws:
        r = [0] + [enc[c] for c in w] + [0]
        r = (r + [0] * block_size)[:block_size + 1]
        X.append(r[:-1])
        Y.append(r[-1])
    return torch.tensor(X), torch.tensor(Y)

Xtr, Ytr = encode_rows(words[:int(0.85 * len(words))])
Xtr.shape
''',
    r'''
def fwd_bwd(P, X, Y, peek=None):
    B, T = X.shape
    C, hd = n_embd, n_embd // n_head

    def norm(x, w, b):
        mu = x.mean(-1, keepdim=True)
        xc = x - mu
        var = xc.var(-1, keepdim=True, unbiased=False)
        rs = torch.rsqrt(var + 1e-5)
        xn = xc * rs
        return mu, xc, var, rs, xn, xn * w + b

    # forward
    emb = P['tok_table'][X]
    r0 = emb + P['pos_table']
    mu1, xc1, var1, rs1, xn1, a1 = norm(r0, P['n1_w'], P['n1_b'])
    z_qkv = a1 @ P['attn_w'] + P['attn_b']
    keep = torch.tril(torch.ones(T, T, dtype=torch.bool))
    Q, K, Vv, S, Sm, A, O = [], [], [], [], [], [], []
    for hh in range(n_head):
        q_ = z_qkv[:, :, hh * hd:(hh + 1) * hd]
        k_ = z_qkv[:, :, C + hh * hd:C + (hh + 1) * hd]
        v_ = z_qkv[:, :, 2 * C + hh * hd:2 * C + (hh + 1) * hd]
        s_ = q_ @ k_.transpose(1, 2) / math.sqrt(hd)
        sm_ = s_.masked_fill(~keep, float('-inf'))
        a_ = torch.softmax(sm_, dim=-1)
        Q.append(q_); K.append(k_); Vv.append(v_)
        S.append(s_); Sm.append(sm_); A.append(a_)
        O.append(a_ @ v_)
    cat = torch.cat(O, dim=-1)
    z_proj = cat @ P['proj_w'] + P['proj_b']
    r1 = r0 + z_proj
    mu2, xc2, var2, rs2, xn2, a2 = norm(r1, P['n2_w'], P['n2_b'])
    z_up = a2 @ P['mlp_in_w'] + P['mlp_in_b']
    u_act = 0.5 * z_up * (1 + torch.tanh(math.sqrt(2 / math.pi) * (z_up + 0.044715 * z_up**3)))
    z_down = u_act @ P['mlp_out_w'] + P['mlp_out_b']
    r2 = r1 + z_down
    muf, xcf, varf, rsf, xnf, af = norm(r2, P['nf_w'], P['nf_b'])
    out = af @ P['tok_table'].T
    tgt = torch.cat([X[:, 1:], Y[:, None]], dim=1)
    loss = F.cross_entropy(out.view(-1, V), tgt.view(-1))

    # backward
    with torch.no_grad():
        N = B * T
        g_out = torch.softmax(out, -1)
        g_out.view(-1, V)[torch.arange(N), tgt.view(-1)] -= 1
        g_out /= N
        g_af = g_out @ P['tok_table']
        g_tok_table = g_out.view(-1, V).T @ af.view(-1, C)
        g_xnf = g_af * P['nf_w']
        g_nf_w = (g_af * xnf).sum((0, 1))
        g_nf_b = g_af.sum((0, 1))
        g_rsf = (g_xnf * xcf).sum(-1, keepdim=True)
        g_varf = -0.5 * rsf**3 * g_rsf
        g_xcf = g_xnf * rsf + g_varf * 2 * xcf / C
        g_muf = -g_xcf.sum(-1, keepdim=True)
        g_r2 = g_xcf + g_muf / C

        g_z_down = g_r2
        g_u_act = g_z_down @ P['mlp_out_w'].T
        g_mlp_out_w = u_act.view(-1, 4 * C).T @ g_z_down.view(-1, C)
        g_mlp_out_b = g_z_down.sum((0, 1))
        kk = math.sqrt(2 / math.pi)
        th = torch.tanh(kk * (z_up + 0.044715 * z_up**3))
        g_z_up = g_u_act * (0.5 * (1 + th) + 0.5 * z_up * (1 - th**2) * kk * (1 + 0.044715 * z_up**2))
        g_a2 = g_z_up @ P['mlp_in_w'].T
        g_mlp_in_w = a2.view(-1, C).T @ g_z_up.view(-1, 4 * C)
        g_mlp_in_b = g_z_up.sum((0, 1))
        g_xn2 = g_a2 * P['n2_w']
        g_n2_w = (g_a2 * xn2).sum((0, 1))
        g_n2_b = g_a2.sum((0, 1))
        g_r1 = g_r2 + rs2 * (g_xn2 - g_xn2.mean(-1, keepdim=True)
                             - xn2 * (g_xn2 * xn2).mean(-1, keepdim=True))

        g_z_proj = g_r1
        g_cat = g_z_proj @ P['proj_w'].T
        g_proj_w = cat.view(-1, C).T @ g_z_proj.view(-1, C)
        g_proj_b = g_z_proj.sum((0, 1))
        g_O = list(g_cat.split(hd, dim=-1))
        g_A, g_Vv, g_Sm, g_S, g_Q, g_K = [], [], [], [], [], []
        for hh in range(n_head):
            g_A.append(g_O[hh] @ Vv[hh].transpose(1, 2))
            g_Vv.append(A[hh].transpose(1, 2) @ g_O[hh])
            g_Sm.append(A[hh] * (g_A[hh] - (A[hh] * g_A[hh]).sum(-1, keepdim=True)))
            g_S.append(g_Sm[hh].masked_fill(~keep, 0.0))
            g_Q.append(g_S[hh] @ K[hh] / math.sqrt(hd))
            g_K.append(g_S[hh].transpose(1, 2) @ Q[hh] / math.sqrt(hd))
        g_z_qkv = torch.cat(g_Q + g_K + g_Vv, dim=-1)
        g_a1 = g_z_qkv @ P['attn_w'].T
        g_attn_w = a1.view(-1, C).T @ g_z_qkv.view(-1, 3 * C)
        g_attn_b = g_z_qkv.sum((0, 1))
        g_xn1 = g_a1 * P['n1_w']
        g_n1_w = (g_a1 * xn1).sum((0, 1))
        g_n1_b = g_a1.sum((0, 1))
        g_r0 = g_r1 + rs1 * (g_xn1 - g_xn1.mean(-1, keepdim=True)
                             - xn1 * (g_xn1 * xn1).mean(-1, keepdim=True))
        g_emb = g_r0
        g_pos_table = g_r0.sum(0)
        g_tok_table = g_tok_table.index_add(0, X.view(-1), g_emb.reshape(-1, C))

    grads = {k[2:]: v for k, v in locals().items() if k.startswith('g_') and k[2:] in P}
    if peek is not None:
        peek.update(locals())
    return loss, grads
''',
    r'''
torch.manual_seed(1234)
C = n_embd
def lin(i, o, s=1.0):
    return torch.randn(i, o) * s / math.sqrt(i)
def near(n, base=0.0):
    return base + 0.1 * torch.randn(n)

P = dict(tok_table=0.1 * torch.randn(V, C), pos_table=0.1 * torch.randn(block_size, C),
         n1_w=near(C, 1.0), n1_b=near(C), attn_w=lin(C, 3 * C), attn_b=near(3 * C),
         proj_w=lin(C, C, 0.5), proj_b=near(C), n2_w=near(C, 1.0), n2_b=near(C),
         mlp_in_w=lin(C, 4 * C), mlp_in_b=near(4 * C), mlp_out_w=lin(4 * C, C, 0.5),
         mlp_out_b=near(C), nf_w=near(C, 1.0), nf_b=near(C))
for p in P.values():
    p.requires_grad_(True)

bix = torch.randint(0, len(Xtr), (3,))
Xb, Yb = Xtr[bix], Ytr[bix]
peek = {}
loss, grads = fwd_bwd(P, Xb, Yb, peek)
print(loss.item())
''',
    r'''
def rel(a, b):
    return ((a - b).abs().max() / (b.abs().max() + 1e-12)).item()

names = ['r2', 'z_up', 'r1', 'cat', 'z_qkv', 'r0']
auto = torch.autograd.grad(loss, [peek[k] for k in names], retain_graph=True)
for k, ag in zip(names, auto):
    print(f"{k:8s} {rel(peek['g_' + k], ag):.2e}")
''',
    r'''
loss.backward()
for k in P:
    print(f"{k:10s} {rel(grads[k], P[k].grad):.2e}")
''',
]

GPTT1_ACT = {"logits": "out", "lnf": "af", "lnf_norm": "xnf", "lnf_rstd": "rsf", "lnf_var": "varf",
             "lnf_xc": "xcf", "lnf_mean": "muf", "x2": "r2", "fcproj": "z_down",
             "fch_gelu": "u_act", "fch": "z_up", "ln2": "a2", "ln2_norm": "xn2", "x1": "r1",
             "attproj": "z_proj", "y": "cat", "x0": "r0", "qkv": "z_qkv", "ln1": "a1",
             "ln1_norm": "xn1", "tok": "emb"}
GPTT1_PAR = {"wte": "tok_table", "wpe": "pos_table", "lnfw": "nf_w", "lnfb": "nf_b",
             "fcprojw": "mlp_out_w", "fcprojb": "mlp_out_b", "fcw": "mlp_in_w", "fcb": "mlp_in_b",
             "ln2w": "n2_w", "ln2b": "n2_b", "attprojw": "proj_w", "attprojb": "proj_b",
             "qkvw": "attn_w", "qkvb": "attn_b", "ln1w": "n1_w", "ln1b": "n1_b"}
GPTT1_HEADS = {"atty": "O", "att": "A", "v": "Vv", "preatt_masked": "Sm", "preatt": "S",
               "q": "Q", "k": "K"}


def per_head(lst_mine: str, lst_fwd: str) -> tuple:
    """A per-head list of gradients against autograd's, stacked along a head dimension."""
    return (f"torch.stack({lst_mine}, 1)", f"torch.stack([G(u) for u in {lst_fwd}], 1)")


def _t1_specs():
    fwd = {**{k: f"peek['{v}']" for k, v in GPTT1_ACT.items()},
           **{k: f"P['{v}']" for k, v in GPTT1_PAR.items()}}
    grad = {**{k: f"peek['g_{v}']" for k, v in GPTT1_ACT.items()},
            **{k: f"peek['g_{v}']" for k, v in GPTT1_PAR.items()}}
    specs = no_first(where("gpt", GPT_STEPS, fwd=fwd, grad=lambda k: grad.get(k, "MISSING"),
                           first_after=DROP))
    for step, items in (("block/atty", ["atty"]), ("block/att", ["att", "v"]),
                        ("block/preatt_masked", ["preatt_masked"]),
                        ("block/preatt", ["preatt"]), ("block/qk", ["q", "k"])):
        specs[step] = [per_head(f"peek['g_{GPTT1_HEADS[i]}']", f"peek['{GPTT1_HEADS[i]}']")
                       for i in items]
    return specs


add("gpt_t1_one_function_per_head_gelu_cube_slip", "gpt", GPTT1_CELLS, GPT_STEPS,
    wrong=["block/fch"],
    cascade=["block/ln2", "block/ln2_affine", "block/x1", "block/x1_residual", "block/attproj",
             "block/atty", "block/att", "block/preatt_masked", "block/preatt", "block/qk",
             "block/qkv", "block/ln1", "block/ln1_affine", "block/x0", "block/wpe", "block/wte"],
    notes="own data (random.seed(2001)), parameters in a dict under own names; forward and "
          "backward in one function fwd_bwd(P, X, Y, peek) returning (loss, grads), called once; "
          "layer norm via var(unbiased=False) and rsqrt; attention as a loop over heads with "
          "per-head lists; g_xxx names; locals dumped into peek; batch 3; exercise 1 only. Slip: "
          "GELU's backward takes d(x**3) as x**2 (the 3 missing); ln2 down to wte cascade",
    where=_t1_specs(),
    fix=[("kk * (1 + 0.044715 * z_up**2))", "kk * (1 + 3 * 0.044715 * z_up**2))")])

# ================================================================================================
# GPT T2 (right throughout). Own data (no shuffle: every tenth name held out, rows filled into a
# zero tensor), parameters in a dict under the learner's own keys (E, P, n1.gain, Wqkv, Wo, Wup,
# Wdown, nf.bias, ...). A tape of the learner's own: `forward(W, X, Y)` records every op with
# `put(name, value, back)`, which keeps the value in a dict `acts` (renamed: tok, h0, n1.mu /
# n1.xc / n1.var / n1.rs / n1.norm / n1, scores, scores_m, probs, ctx, ctx_flat, attn_out, h1,
# up, up_act, down, h2, nf, logits) and appends (name, closure) to `tape`; `backward()` walks the
# tape reversed, each closure adding its inputs' gradients into a dict `grad` through
# `acc(name, g)` (so no first branch is ever held on its own). Checked against retained .grad by
# a loop. Exercise 1 on a batch of 6; the learner's adamw_update drives 150 steps of the tape,
# batch 12.

GPTT2_CELLS = [
    r'''
import math
import torch
import torch.nn.functional as F
''',
    r'''
with open('names.txt') as fh:
    allw = fh.read().split()
train_w = [w for j, w in enumerate(allw) if j % 10 != 0]
itos = ['.'] + sorted(set(''.join(allw)))
stoi = {ch: i for i, ch in enumerate(itos)}
Tctx, nh, C = 16, 4, 32
vocab = len(itos)
rows = torch.zeros(len(train_w), Tctx + 1, dtype=torch.long)
for r, w in enumerate(train_w):
    ids = [stoi[ch] for ch in w][:Tctx]
    rows[r, 1:1 + len(ids)] = torch.tensor(ids)
Xall, Yall = rows[:, :Tctx], rows[:, Tctx]
''',
    md("### a tape\nEvery op of the forward pushes `(name, backward closure)`; backward walks it "
       "in reverse and adds into `grad`."),
    r'''
tape, acts, grad = [], {}, {}

def put(name, value, back):
    acts[name] = value
    tape.append((name, back))
    return value

def acc(name, g):
    grad[name] = grad[name] + g if name in grad else g

def backward():
    grad.clear()
    grad['loss'] = torch.ones(())
    with torch.no_grad():
        for name, back in reversed(tape):
            if name in grad:
                back(grad[name])
''',
    r'''
def layernorm(tag, xname, W, gname, bname):
    x = acts[xname]
    D = x.shape[-1]
    mu = put(tag + '.mu', x.mean(-1, keepdim=True), lambda g: acc(xname, g.expand_as(x) / D))
    def b_xc(g):
        acc(xname, g)
        acc(tag + '.mu', -g.sum(-1, keepdim=True))
    xc = put(tag + '.xc', x - mu, b_xc)
    var = put(tag + '.var', (xc**2).mean(-1, keepdim=True), lambda g: acc(tag + '.xc', g * 2 * xc / D))
    rs = put(tag + '.rs', (var + 1e-5)**-0.5, lambda g: acc(tag + '.var', -0.5 * g * (var + 1e-5)**-1.5))
    def b_norm(g):
        acc(tag + '.xc', g * rs)
        acc(tag + '.rs', (g * xc).sum(-1, keepdim=True))
    nrm = put(tag + '.norm', xc * rs, b_norm)
    def b_out(g):
        acc(tag + '.norm', g * W[gname])
        acc(gname, (g * nrm).sum((0, 1)))
        acc(bname, g.sum((0, 1)))
    return put(tag, nrm * W[gname] + W[bname], b_out)

def linear(name, xname, W, wname, bname):
    x, w = acts[xname], W[wname]
    def back(g):
        acc(xname, g @ w.T)
        acc(wname, x.reshape(-1, x.shape[-1]).T @ g.reshape(-1, g.shape[-1]))
        acc(bname, g.reshape(-1, g.shape[-1]).sum(0))
    return put(name, x @ w + W[bname], back)

def add(name, a, b):
    def back(g):
        acc(a, g)
        acc(b, g)
    return put(name, acts[a] + acts[b], back)
''',
    r'''
K_GELU = math.sqrt(2 / math.pi)

def forward(W, X, Y):
    tape.clear()
    acts.clear()
    B, T = X.shape
    hs = C // nh
    tok = put('tok', W['E'][X], lambda g: acc('E', torch.zeros_like(W['E']).index_add_(
        0, X.reshape(-1), g.reshape(-1, C))))
    def b_h0(g):
        acc('tok', g)
        acc('P', g.sum(0))
    put('h0', tok + W['P'], b_h0)
    layernorm('n1', 'h0', W, 'n1.gain', 'n1.bias')
    qkv = linear('qkv', 'n1', W, 'Wqkv', 'bqkv')
    def split(j, name):
        def back(g):
            full = torch.zeros(B, T, 3 * C)
            full[:, :, j * C:(j + 1) * C] = g.transpose(1, 2).reshape(B, T, C)
            acc('qkv', full)
        return put(name, qkv[:, :, j * C:(j + 1) * C].view(B, T, nh, hs).transpose(1, 2), back)
    q, k, v = split(0, 'q'), split(1, 'k'), split(2, 'v')
    def b_scores(g):
        acc('q', g @ k * hs**-0.5)
        acc('k', g.transpose(-2, -1) @ q * hs**-0.5)
    scores = put('scores', q @ k.transpose(-2, -1) * hs**-0.5, b_scores)
    tri = torch.ones(T, T).tril()
    sm = put('scores_m', scores.masked_fill(tri == 0, float('-inf')),
             lambda g: acc('scores', g.masked_fill(tri == 0, 0.0)))
    probs = put('probs', F.softmax(sm, dim=-1),
                lambda g: acc('scores_m', probs * (g - (g * probs).sum(-1, keepdim=True))))
    def b_ctx(g):
        acc('probs', g @ v.transpose(-2, -1))
        acc('v', probs.transpose(-2, -1) @ g)
    ctx = put('ctx', probs @ v, b_ctx)
    put('ctx_flat', ctx.transpose(1, 2).contiguous().view(B, T, C),
        lambda g: acc('ctx', g.view(B, T, nh, hs).transpose(1, 2)))
    linear('attn_out', 'ctx_flat', W, 'Wo', 'bo')
    add('h1', 'h0', 'attn_out')
    layernorm('n2', 'h1', W, 'n2.gain', 'n2.bias')
    up = linear('up', 'n2', W, 'Wup', 'bup')
    th = torch.tanh(K_GELU * (up + 0.044715 * up**3))
    put('up_act', 0.5 * up * (1 + th), lambda g: acc('up', g * (
        0.5 * (1 + th) + 0.5 * up * (1 - th**2) * K_GELU * (1 + 3 * 0.044715 * up**2))))
    linear('down', 'up_act', W, 'Wdown', 'bdown')
    add('h2', 'h1', 'down')
    nf = layernorm('nf', 'h2', W, 'nf.gain', 'nf.bias')
    def b_logits(g):
        acc('nf', g @ W['E'])
        acc('E', g.reshape(-1, vocab).T @ nf.reshape(-1, C))
    logits = put('logits', nf @ W['E'].T, b_logits)
    tgt = torch.cat([X[:, 1:], Y[:, None]], dim=1).reshape(-1)
    def b_loss(g):
        p = F.softmax(logits.reshape(-1, vocab), -1)
        p[torch.arange(len(tgt)), tgt] -= 1
        acc('logits', (g * p / len(tgt)).view(B, T, vocab))
    return put('loss', F.cross_entropy(logits.reshape(-1, vocab), tgt), b_loss)
''',
    r'''
gen = torch.Generator().manual_seed(77)
def rn(*shape):
    return torch.randn(*shape, generator=gen)
W = {'E': rn(vocab, C) * 0.1, 'P': rn(Tctx, C) * 0.1,
     'n1.gain': 1 + 0.1 * rn(C), 'n1.bias': 0.1 * rn(C),
     'Wqkv': rn(C, 3 * C) / C**0.5, 'bqkv': 0.1 * rn(3 * C),
     'Wo': rn(C, C) * 0.5 / C**0.5, 'bo': 0.1 * rn(C),
     'n2.gain': 1 + 0.1 * rn(C), 'n2.bias': 0.1 * rn(C),
     'Wup': rn(C, 4 * C) / C**0.5, 'bup': 0.1 * rn(4 * C),
     'Wdown': rn(4 * C, C) * 0.5 / (4 * C)**0.5, 'bdown': 0.1 * rn(C),
     'nf.gain': 1 + 0.1 * rn(C), 'nf.bias': 0.1 * rn(C)}
for p in W.values():
    p.requires_grad_(True)

ix = torch.randint(0, len(Xall), (6,), generator=gen)
Xb, Yb = Xall[ix], Yall[ix]
loss = forward(W, Xb, Yb)
for a in acts.values():
    if a.requires_grad:
        a.retain_grad()
loss.backward()
backward()
print(len(tape), 'ops on the tape, loss', loss.item())
''',
    r'''
bad = 0
for name in list(acts) + list(W):
    ref = acts[name].grad if name in acts else W[name].grad
    if name not in grad or ref is None:
        continue
    ok = torch.allclose(grad[name], ref, rtol=1e-4, atol=1e-6)
    bad += not ok
    if not ok:
        print('mismatch', name, (grad[name] - ref).abs().max().item())
print('mismatches:', bad)
''',
    md("### training on the tape"),
    r'''
def adamw_update(param, grad, m, v, t, lr, beta1, beta2, eps, weight_decay):
    param.mul_(1 - lr * weight_decay)
    m.lerp_(grad, 1 - beta1)
    v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    denom = (v / (1 - beta2**t)).sqrt().add_(eps)
    param.addcdiv_(m, denom, value=-lr / (1 - beta1**t))
''',
    r'''
for p in W.values():
    p.requires_grad_(False)
mom = {k: torch.zeros_like(p) for k, p in W.items()}
sq = {k: torch.zeros_like(p) for k, p in W.items()}
curve = []
for it in range(1, 151):
    ix = torch.randint(0, len(Xall), (12,), generator=gen)
    xb, yb = Xall[ix], Yall[ix]
    lv = forward(W, xb, yb)
    backward()
    for k in W:
        adamw_update(W[k], grad[k], mom[k], sq[k], it, 1e-2, 0.9, 0.99, 1e-8, 0.01)
    curve.append(lv.item())
print(curve[0], sum(curve[-15:]) / 15)
''',
]

GPTT2_ACT = {"logits": "logits", "lnf": "nf", "lnf_norm": "nf.norm", "lnf_rstd": "nf.rs",
             "lnf_var": "nf.var", "lnf_xc": "nf.xc", "lnf_mean": "nf.mu", "x2": "h2",
             "fcproj": "down", "fch_gelu": "up_act", "fch": "up", "ln2": "n2",
             "ln2_norm": "n2.norm", "x1": "h1", "attproj": "attn_out", "y": "ctx_flat",
             "atty": "ctx", "att": "probs", "v": "v", "preatt_masked": "scores_m",
             "preatt": "scores", "q": "q", "k": "k", "qkv": "qkv", "ln1": "n1",
             "ln1_norm": "n1.norm", "x0": "h0", "tok": "tok"}
GPTT2_PAR = {"wte": "E", "wpe": "P", "lnfw": "nf.gain", "lnfb": "nf.bias", "fcprojw": "Wdown",
             "fcprojb": "bdown", "fcw": "Wup", "fcb": "bup", "ln2w": "n2.gain", "ln2b": "n2.bias",
             "attprojw": "Wo", "attprojb": "bo", "qkvw": "Wqkv", "qkvb": "bqkv",
             "ln1w": "n1.gain", "ln1b": "n1.bias"}
GPTT2_P = "{" + ", ".join(f"'{k}': W['{v}']" for k, v in GPTT2_PAR.items()) + "}"
GPTT2_G = "{" + ", ".join(f"'{k}': grad['{v}']" for k, v in GPTT2_PAR.items()) + "}"

add("gpt_t2_own_tape_closures_adamw", "gpt", GPTT2_CELLS,
    GPT_STEPS + ["functions/adamw_update", "train/gpt"],
    notes="own data (every tenth name held out, no shuffle), parameters in a dict under own keys; "
          "a tape of the learner's own: forward records (name, closure) pairs with every "
          "activation in acts under own names, backward walks it reversed adding into a dict "
          "grad (no first branch held); allclose loop against retained .grad; batch 6; own "
          "adamw_update, 150 steps on the tape, batch 12; all right",
    where=no_first(where("gpt", GPT_STEPS,
                         fwd={**{k: f"acts['{v}']" for k, v in GPTT2_ACT.items()},
                              **{k: f"W['{v}']" for k, v in GPTT2_PAR.items()}},
                         grad=lambda k: f"grad['{GPTT2_ACT.get(k) or GPTT2_PAR[k]}']",
                         first_after=DROP)),
    checkpoint="print('mismatches:', bad)",
    functions={"functions/adamw_update": None},
    train={"cell": "for it in range(1, 151)", "probe": "for k in W:",
           "params": GPTT2_P, "grads": GPTT2_G, "ref": "lambda Q: ref_gpt_loss(Q, xb, yb)",
           "losses": "curve"})

# ================================================================================================
# GPT T3 (right throughout). Exercises 2 and 3 only. Own data (random.Random(3) shuffle through
# sorted(key=...), rows built with list padding); the seven functions written first, each tested
# against torch.autograd.grad by a `vs_autograd` helper (index_put_ with accumulate for the
# encoder, tensordot for the matmul, chunk / permute for the heads); the model a torch.nn.Module
# subclass `TinyGPT` with nn.Parameter attributes under the learner's own names (tok, pos, g1 /
# s1, w_attn, w_out, w_fc, w_mlp, gf / sf, ...), the mask a registered buffer, forward returning
# (loss, saved) and a `manual_backward` method built on the functions; 200 steps of the learner's
# adamw_update over model.named_parameters(), batch 20.

GPTT3_CELLS = [
    r'''
import math
import random
import torch
import torch.nn as nn
import torch.nn.functional as F
''',
    r'''
ws = open('names.txt', 'r').read().split()
rnd = random.Random(3)
ws = sorted(ws, key=lambda _: rnd.random())
stoi = {ch: i for i, ch in enumerate('.' + ''.join(sorted(set(''.join(ws)))))}
vocab = len(stoi)

def to_rows(names, T=16):
    xs, ys = [], []
    for nm in names:
        seq = [0] + [stoi[c] for c in nm] + [0]
        seq = seq + [0] * (T + 1 - len(seq))
        xs.append(seq[:T])
        ys.append(seq[T])
    return torch.tensor(xs), torch.tensor(ys)

Xtr, Ytr = to_rows(ws[:26000])
''',
    md("## Exercise 2: the layers as functions"),
    r'''
def encoder_backward(dout, inp, vocab_size):
    B, T, C = dout.shape
    dwte = torch.zeros(vocab_size, C, dtype=dout.dtype)
    dwte.index_put_((inp.flatten(),), dout.reshape(B * T, C), accumulate=True)
    return dwte, dout.sum(dim=0)

def layernorm_backward(dout, inp, weight, mean, rstd):
    C = inp.shape[-1]
    xhat = (inp - mean) * rstd
    dweight = (dout * xhat).sum(dim=(0, 1))
    dbias = dout.sum(dim=(0, 1))
    dxhat = dout * weight
    dinp = rstd / C * (C * dxhat - dxhat.sum(-1, keepdim=True)
                       - xhat * (dxhat * xhat).sum(-1, keepdim=True))
    return dinp, dweight, dbias

def matmul_backward(dout, inp, weight):
    dinp = torch.tensordot(dout, weight, dims=([2], [1]))
    dweight = torch.tensordot(inp, dout, dims=([0, 1], [0, 1]))
    return dinp, dweight, dout.sum(dim=(0, 1))

def attention_backward(dout, qkv, att, n_head):
    B, T, C3 = qkv.shape
    C = C3 // 3
    hs = C // n_head
    def heads(t):
        return t.reshape(B, T, n_head, hs).permute(0, 2, 1, 3)
    q, k, v = (heads(t) for t in qkv.chunk(3, dim=-1))
    datty = heads(dout)
    datt = datty @ v.transpose(-1, -2)
    dv = att.transpose(-1, -2) @ datty
    dpre = att * (datt - (att * datt).sum(-1, keepdim=True)) / math.sqrt(hs)
    dq = dpre @ k
    dk = dpre.transpose(-1, -2) @ q
    merge = lambda t: t.permute(0, 2, 1, 3).reshape(B, T, C)
    return torch.cat([merge(dq), merge(dk), merge(dv)], dim=-1)

def gelu_backward(dout, inp):
    s = math.sqrt(2 / math.pi)
    t = torch.tanh(s * (inp + 0.044715 * inp**3))
    du = s * (1 + 0.134145 * inp**2)
    return dout * (0.5 * (1 + t) + 0.5 * inp * (1 - t * t) * du)

def crossentropy_softmax_backward(logits, targets):
    d = torch.softmax(logits, dim=1) - F.one_hot(targets, logits.shape[1]).to(logits.dtype)
    return d / logits.shape[0]

def adamw_update(param, grad, m, v, t, lr, beta1, beta2, eps, weight_decay):
    m.copy_(beta1 * m + (1 - beta1) * grad)
    v.copy_(beta2 * v + (1 - beta2) * grad**2)
    m_hat = m / (1 - beta1**t)
    v_hat = v / (1 - beta2**t)
    param.copy_(param - lr * (m_hat / (v_hat.sqrt() + eps) + weight_decay * param))
''',
    r'''
def vs_autograd(label, out, inputs, mine, dout=None):
    refs = torch.autograd.grad(out, inputs, dout)
    errs = [(a - b).abs().max().item() for a, b in zip(mine, refs)]
    print(f"{label:10s}", ' '.join(f"{e:.1e}" for e in errs))

B_, T_, C_, NH_ = 2, 6, 12, 3
x = torch.randn(B_, T_, C_, requires_grad=True)
w = torch.randn(C_, 5, requires_grad=True)
b = torch.randn(5, requires_grad=True)
d = torch.randn(B_, T_, 5)
vs_autograd('matmul', x @ w + b, [x, w, b], matmul_backward(d, x.detach(), w.detach()), d)

g_, bb = torch.randn(C_, requires_grad=True), torch.randn(C_, requires_grad=True)
mu = x.mean(-1, keepdim=True)
rs = ((x - mu).pow(2).mean(-1, keepdim=True) + 1e-5).rsqrt()
ln = (x - mu) * rs * g_ + bb
d = torch.randn_like(ln)
vs_autograd('layernorm', ln, [x, g_, bb],
            layernorm_backward(d, x.detach(), g_.detach(), mu.detach(), rs.detach()), d)

tab, pos = torch.randn(9, C_, requires_grad=True), torch.randn(T_, C_, requires_grad=True)
ids = torch.randint(0, 9, (B_, T_))
e = tab[ids] + pos
d = torch.randn_like(e)
vs_autograd('encoder', e, [tab, pos], encoder_backward(d, ids, 9), d)

qkv = torch.randn(B_, T_, 3 * C_, requires_grad=True)
q, k, v = [t.reshape(B_, T_, NH_, C_ // NH_).transpose(1, 2) for t in qkv.split(C_, -1)]
sc = (q @ k.transpose(-1, -2) / math.sqrt(C_ // NH_)).masked_fill(
    torch.ones(T_, T_).tril() == 0, float('-inf'))
att = sc.softmax(-1)
yy = (att @ v).transpose(1, 2).reshape(B_, T_, C_)
d = torch.randn_like(yy)
vs_autograd('attention', yy, [qkv], [attention_backward(d, qkv.detach(), att.detach(), NH_)], d)

z = torch.randn(7, 11, requires_grad=True)
gz = 0.5 * z * (1 + torch.tanh(math.sqrt(2 / math.pi) * (z + 0.044715 * z**3)))
d = torch.randn_like(gz)
vs_autograd('gelu', gz, [z], [gelu_backward(d, z.detach())], d)

lg, tg = torch.randn(13, 9, requires_grad=True), torch.randint(0, 9, (13,))
vs_autograd('xent', F.cross_entropy(lg, tg), [lg], [crossentropy_softmax_backward(lg.detach(), tg)])
''',
    md("## Exercise 3: a module, my backward, my AdamW"),
    r'''
class TinyGPT(nn.Module):
    def __init__(self, V, T, C, nh):
        super().__init__()
        self.V, self.C, self.nh = V, C, nh
        def par(*shape, scale=1.0, base=0.0):
            return nn.Parameter(base + scale * torch.randn(*shape))
        self.tok = par(V, C, scale=0.1)
        self.pos = par(T, C, scale=0.1)
        self.g1, self.s1 = par(C, scale=0.1, base=1.0), par(C, scale=0.1)
        self.w_attn, self.b_attn = par(C, 3 * C, scale=C**-0.5), par(3 * C, scale=0.1)
        self.w_out, self.b_out = par(C, C, scale=0.5 * C**-0.5), par(C, scale=0.1)
        self.g2, self.s2 = par(C, scale=0.1, base=1.0), par(C, scale=0.1)
        self.w_fc, self.b_fc = par(C, 4 * C, scale=C**-0.5), par(4 * C, scale=0.1)
        self.w_mlp, self.b_mlp = par(4 * C, C, scale=0.5 * (4 * C)**-0.5), par(C, scale=0.1)
        self.gf, self.sf = par(C, scale=0.1, base=1.0), par(C, scale=0.1)
        self.register_buffer('mask', torch.tril(torch.ones(T, T)))

    @staticmethod
    def _ln(x, w, b):
        mean = x.mean(-1, keepdim=True)
        rstd = ((x - mean).pow(2).mean(-1, keepdim=True) + 1e-5).rsqrt()
        return (x - mean) * rstd * w + b, mean, rstd

    def forward(self, X, Y):
        B, T = X.shape
        C, nh = self.C, self.nh
        s = {'x0': self.tok[X] + self.pos}
        s['ln1'], s['m1'], s['r1'] = self._ln(s['x0'], self.g1, self.s1)
        s['qkv'] = s['ln1'] @ self.w_attn + self.b_attn
        q, k, v = [t.reshape(B, T, nh, C // nh).transpose(1, 2) for t in s['qkv'].split(C, dim=2)]
        sc = q @ k.transpose(-2, -1) / math.sqrt(C // nh)
        s['att'] = sc.masked_fill(self.mask[:T, :T] == 0, float('-inf')).softmax(-1)
        s['y'] = (s['att'] @ v).transpose(1, 2).reshape(B, T, C)
        s['x1'] = s['x0'] + s['y'] @ self.w_out + self.b_out
        s['ln2'], s['m2'], s['r2'] = self._ln(s['x1'], self.g2, self.s2)
        s['fc'] = s['ln2'] @ self.w_fc + self.b_fc
        f = s['fc']
        s['act'] = 0.5 * f * (1 + torch.tanh(math.sqrt(2 / math.pi) * (f + 0.044715 * f**3)))
        s['x2'] = s['x1'] + s['act'] @ self.w_mlp + self.b_mlp
        s['lnf'], s['mf'], s['rf'] = self._ln(s['x2'], self.gf, self.sf)
        s['logits'] = s['lnf'] @ self.tok.T
        s['targets'] = torch.cat([X[:, 1:], Y[:, None]], dim=1)
        loss = F.cross_entropy(s['logits'].reshape(-1, self.V), s['targets'].reshape(-1))
        return loss, s

    @torch.no_grad()
    def manual_backward(self, X, s):
        B, T = X.shape
        gr = {}
        dlog = crossentropy_softmax_backward(s['logits'].reshape(-1, self.V),
                                             s['targets'].reshape(-1)).view(B, T, self.V)
        dlnf, dtokT, _ = matmul_backward(dlog, s['lnf'], self.tok.T)
        dx2, gr['gf'], gr['sf'] = layernorm_backward(dlnf, s['x2'], self.gf, s['mf'], s['rf'])
        dact, gr['w_mlp'], gr['b_mlp'] = matmul_backward(dx2, s['act'], self.w_mlp)
        dfc = gelu_backward(dact, s['fc'])
        dln2, gr['w_fc'], gr['b_fc'] = matmul_backward(dfc, s['ln2'], self.w_fc)
        dx1, gr['g2'], gr['s2'] = layernorm_backward(dln2, s['x1'], self.g2, s['m2'], s['r2'])
        dx1 = dx1 + dx2
        dy, gr['w_out'], gr['b_out'] = matmul_backward(dx1, s['y'], self.w_out)
        dqkv = attention_backward(dy, s['qkv'], s['att'], self.nh)
        dln1, gr['w_attn'], gr['b_attn'] = matmul_backward(dqkv, s['ln1'], self.w_attn)
        dx0, gr['g1'], gr['s1'] = layernorm_backward(dln1, s['x0'], self.g1, s['m1'], s['r1'])
        dx0 = dx0 + dx1
        dtok, gr['pos'] = encoder_backward(dx0, X, self.V)
        gr['tok'] = dtok + dtokT.T
        return gr
''',
    r'''
torch.manual_seed(2468)
model = TinyGPT(vocab, 16, 32, 4)
xb, yb = Xtr[:20], Ytr[:20]
loss, saved = model(xb, yb)
loss.backward()
mine = model.manual_backward(xb, saved)
for n, p in model.named_parameters():
    print(n, torch.allclose(mine[n], p.grad, atol=1e-6), (mine[n] - p.grad).abs().max().item())
model.zero_grad()
''',
    r'''
def get_batch(n):
    ix = torch.randint(0, len(Xtr), (n,))
    return Xtr[ix], Ytr[ix]

opt_state = {n: (torch.zeros_like(p), torch.zeros_like(p)) for n, p in model.named_parameters()}
losses = []
for step in range(1, 201):
    xb, yb = get_batch(20)
    with torch.no_grad():
        loss, saved = model(xb, yb)
    grads = model.manual_backward(xb, saved)
    with torch.no_grad():
        for name, p in model.named_parameters():
            m, v = opt_state[name]
            adamw_update(p, grads[name], m, v, step, 3e-3, 0.9, 0.95, 1e-8, 0.0)
    losses.append(loss.item())
print(losses[0], sum(losses[-20:]) / 20)
''',
]

add("gpt_t3_nn_module_functions_adamw", "gpt", GPTT3_CELLS, GPT_FUNCS + ["train/gpt"],
    notes="exercises 2 and 3 only: own data (Random(3) sort-key shuffle); the seven functions "
          "(index_put_ accumulate, tensordot, chunk/permute heads) tested by vs_autograd; an "
          "nn.Module TinyGPT with nn.Parameter attributes under own names and a registered mask "
          "buffer, forward returning (loss, saved), manual_backward on the functions; own "
          "adamw_update over named_parameters, 200 steps, batch 20; all right",
    functions={s: None for s in GPT_FUNCS},
    train={"cell": "for step in range(1, 201)",
           "probe": "for name, p in model.named_parameters():",
           "params": "dict(model.named_parameters())", "grads": "grads",
           "ref": "lambda Q: torch.func.functional_call(model, Q, (xb, yb))[0]",
           "losses": "losses"})

# ================================================================================================
# LSTM T4 (a slip and its cascades). Own data (a stride shuffle: sorted by (j * 7919) % N), the
# setup's run_lstm copied; the gates computed by four separate matmuls: the weights in dicts keyed
# by gate letter (Wx['i'], Wh['f'], bias['g'], ...), concatenated only to call run_lstm for the
# steps before and after t; step t's clones in dicts too (Wx_t, Wh_t, b_t), the pre-activations
# in a dict `pre`, so the lesson's `ifgo` never exists (step/ifgo not attempted). Exercise 1 cell
# by cell with gradients named grad_xxx (per-gate dicts for the gates and the weights), first
# branches held; a `chk(name, mine, t)` helper against retained .grad. Exercise 3's fused gates
# (a torch.cat of the four). Batch 22.
# Slip: completing dc through h, the learner overwrites dc (`grad_c = grad_h * ...`) and loses
# the future's share: step/h is wrong, and c, gates, g, inputs and fused/gates cascade.

LSTMT4_CELLS = [
    r'''
import torch
import torch.nn.functional as F
from collections import namedtuple
''',
    r'''
names = open('names.txt').read().splitlines()
N = len(names)
names = [names[j] for j in sorted(range(N), key=lambda j: (j * 7919) % N)]
letters = sorted(set(''.join(names)))
stoi = {ch: k + 1 for k, ch in enumerate(letters)}
stoi['.'] = 0
V = len(stoi)
width = max(len(w) for w in names) + 1
X, Y = [], []
for w in names:
    ix = [stoi[ch] for ch in w]
    X.append([0] + ix + [0] * (width - len(ix) - 1))
    Y.append(ix + [0] + [-1] * (width - len(ix) - 1))
X, Y = torch.tensor(X), torch.tensor(Y)
Xtr, Ytr = X[:int(0.8 * N)], Y[:int(0.8 * N)]
''',
    r'''
LSTMRun = namedtuple("LSTMRun", ["hs", "h", "c"])

def run_lstm(xs, h, c, Wx, Wh, b):
    hs, h, c = torch.lstm(xs, (h[None], c[None]), (Wx.T, Wh.T, b, b * 0), True, 1, 0.0, False,
                          False, True)
    return LSTMRun(hs, h[0], c[0])
''',
    md("one matmul per gate (that's how I understand the LSTM equations)"),
    r'''
D, H = 10, 32
gen = torch.Generator().manual_seed(99)
C = torch.randn(V, D, generator=gen)
Wx = {q: torch.randn(D, H, generator=gen) * D**-0.5 for q in 'ifgo'}
Wh = {q: torch.randn(H, H, generator=gen) * H**-0.5 for q in 'ifgo'}
bias = {q: torch.randn(H, generator=gen) * 0.1 for q in 'ifgo'}
bias['f'] += 1.0
Wy = torch.randn(H, V, generator=gen) * H**-0.5
by = torch.randn(V, generator=gen) * 0.1
params = [C, *Wx.values(), *Wh.values(), *bias.values(), Wy, by]
for p in params:
    p.requires_grad_(True)

def cat4(d):
    return torch.cat([d[q] for q in 'ifgo'], dim=-1)
''',
    r'''
ix = torch.randint(0, len(Xtr), (22,), generator=gen)
Xb, Yb = Xtr[ix], Ytr[ix]
L = int((Yb >= 0).sum(1).max())
Xb, Yb = Xb[:, :L].contiguous(), Yb[:, :L].contiguous()
n, t = Xb.shape[0], 3

emb = C[Xb]
zero = torch.zeros(n, H)
early = run_lstm(emb[:, :t], zero, zero, cat4(Wx), cat4(Wh), cat4(bias))
hs_early, h_prev, c_prev = early
x_t = emb[:, t]
Wx_t = {q: w.clone() for q, w in Wx.items()}
Wh_t = {q: w.clone() for q, w in Wh.items()}
b_t = {q: v.clone() for q, v in bias.items()}
pre = {q: x_t @ Wx_t[q] + h_prev @ Wh_t[q] + b_t[q] for q in 'ifgo'}
gi, gf = torch.sigmoid(pre['i']), torch.sigmoid(pre['f'])
gg, go = torch.tanh(pre['g']), torch.sigmoid(pre['o'])
c_t = gf * c_prev + gi * gg
h_t = go * torch.tanh(c_t)
state = torch.stack([h_t, c_t])
late = run_lstm(emb[:, t + 1:], state[0], state[1], cat4(Wx), cat4(Wh), cat4(bias))
hs_late = late.hs
hs_all = torch.cat([hs_early, h_t[:, None], hs_late], 1)
logits = hs_all @ Wy + by
loss = F.cross_entropy(logits.view(-1, V), Yb.view(-1), ignore_index=-1)

keep = [logits, hs_all, hs_early, hs_late, h_t, c_t, state, gi, gf, gg, go, c_prev, h_prev, x_t,
        *pre.values(), *Wx_t.values(), *Wh_t.values(), *b_t.values()]
for tt in keep:
    tt.retain_grad()
loss.backward()
print(loss.item(), Xb.shape)
''',
    r'''
def chk(name, mine, tt):
    err = (mine - tt.grad).abs().max().item()
    print(f"{name:12s} {'ok' if torch.allclose(mine, tt.grad, atol=1e-6) else 'XX'} {err:.2e}")
''',
    r'''
with torch.no_grad():
    valid = (Yb >= 0).float()
    grad_logits = F.softmax(logits, -1) - F.one_hot(Yb.clamp(min=0), V)
    grad_logits *= (valid / valid.sum())[..., None]
chk('logits', grad_logits, logits)
''',
    r'''
with torch.no_grad():
    grad_hs_all = grad_logits @ Wy.T
    grad_Wy = hs_all.flatten(0, 1).T @ grad_logits.flatten(0, 1)
    grad_by = grad_logits.sum((0, 1))
chk('hs_all', grad_hs_all, hs_all); chk('Wy', grad_Wy, Wy); chk('by', grad_by, by)
''',
    r'''
grad_hs_early = grad_hs_all[:, :t]
grad_hs_late = grad_hs_all[:, t + 1:]
grad_h = grad_hs_all[:, t].clone()
chk('hs_early', grad_hs_early, hs_early); chk('hs_late', grad_hs_late, hs_late)
''',
    r'''
grad_state = state.grad   # from autograd: everything after t
grad_h = grad_h + grad_state[0]
grad_c = grad_state[1].clone()
chk('h_t', grad_h, h_t)
''',
    r'''
with torch.no_grad():
    tc = torch.tanh(c_t)
    grad_o = grad_h * tc
    grad_c = grad_h * go * (1 - tc**2)
chk('o', grad_o, go); chk('c_t', grad_c, c_t)
''',
    r'''
with torch.no_grad():
    grad_f = grad_c * c_prev
    grad_c_prev = grad_c * gf
    grad_i = grad_c * gg
    grad_g = grad_c * gi
for nm, a, b in [('f', grad_f, gf), ('c_prev', grad_c_prev, c_prev), ('i', grad_i, gi), ('g', grad_g, gg)]:
    chk(nm, a, b)
''',
    r'''
with torch.no_grad():
    grad_pre = {'i': grad_i * gi * (1 - gi), 'f': grad_f * gf * (1 - gf),
                'o': grad_o * go * (1 - go)}
    grad_pre['g'] = grad_g * (1 - gg**2)
for q in 'ifgo':
    chk('pre_' + q, grad_pre[q], pre[q])
''',
    r'''
with torch.no_grad():
    grad_x_t = sum(grad_pre[q] @ Wx_t[q].T for q in 'ifgo')
    grad_h_prev = sum(grad_pre[q] @ Wh_t[q].T for q in 'ifgo')
    grad_Wx_t = {q: x_t.T @ grad_pre[q] for q in 'ifgo'}
    grad_Wh_t = {q: h_prev.T @ grad_pre[q] for q in 'ifgo'}
    grad_b_t = {q: grad_pre[q].sum(0) for q in 'ifgo'}
chk('x_t', grad_x_t, x_t); chk('h_prev', grad_h_prev, h_prev)
for q in 'ifgo':
    chk('Wx_' + q, grad_Wx_t[q], Wx_t[q]); chk('Wh_' + q, grad_Wh_t[q], Wh_t[q]); chk('b_' + q, grad_b_t[q], b_t[q])
''',
    md("### exercise 3, fused gates: all four at once"),
    r'''
with torch.no_grad():
    slopes = torch.cat([gi * (1 - gi), gf * (1 - gf), 1 - gg**2, go * (1 - go)], 1)
    grad_pre_fused = torch.cat([grad_i, grad_f, grad_g, grad_o], 1) * slopes
print((grad_pre_fused - cat4({q: pre[q].grad for q in 'ifgo'})).abs().max())
''',
]

LSTMT4_FWD = {"logits": "logits", "hs": "hs_all", "hs_before": "hs_early", "hs_after": "hs_late",
              "h": "h_t", "c": "c_t", "state": "state", "o": "go", "f": "gf", "i": "gi",
              "g": "gg", "c_prev": "c_prev", "h_prev": "h_prev", "ai": "pre['i']",
              "af": "pre['f']", "ag": "pre['g']", "ao": "pre['o']", "x_t": "x_t",
              "Wy": "Wy", "by": "by"}
LSTMT4_GRAD = {"logits": "grad_logits", "hs": "grad_hs_all", "hs_before": "grad_hs_early",
               "hs_after": "grad_hs_late", "h": "grad_h", "c": "grad_c", "o": "grad_o",
               "f": "grad_f", "i": "grad_i", "g": "grad_g", "c_prev": "grad_c_prev",
               "h_prev": "grad_h_prev", "ai": "grad_pre['i']", "af": "grad_pre['f']",
               "ag": "grad_pre['g']", "ao": "grad_pre['o']", "x_t": "grad_x_t", "Wy": "grad_Wy",
               "by": "grad_by"}
LSTMT4_STEPS = [s for s in LSTM_STEPS if s != "step/ifgo"]


def gate_cat(mine: str, fwd: str) -> tuple:
    """A per-gate dict of gradients, put side by side in the lesson's order i, f, g, o."""
    return (f"torch.cat([{mine}[q] for q in 'ifgo'], -1)",
            f"torch.cat([G({fwd}[q]) for q in 'ifgo'], -1)")


def _t4_specs():
    specs = where("lstm", [s for s in LSTMT4_STEPS if s != "step/inputs"], fwd=LSTMT4_FWD,
                  grad=LSTMT4_GRAD.__getitem__,
                  first_after={"h": "grad_h = grad_hs_all[:, t].clone()",
                               "c": "grad_c = grad_state[1].clone()"})
    specs["step/inputs"] = [("grad_x_t", "G(x_t)"), ("grad_h_prev", "G(h_prev)"),
                            gate_cat("grad_Wx_t", "Wx_t"), gate_cat("grad_Wh_t", "Wh_t"),
                            gate_cat("grad_b_t", "b_t")]
    specs["fused/gates"] = [("grad_pre_fused", "torch.cat([G(pre[q]) for q in 'ifgo'], 1)")]
    return specs


add("lstm_t4_four_matmuls_dc_overwrite_slip", "lstm", LSTMT4_CELLS,
    LSTMT4_STEPS + ["fused/gates"],
    wrong=["step/h"],
    cascade=["step/c", "step/gates", "step/g", "step/inputs", "fused/gates"],
    notes="own data (stride shuffle (j * 7919) % N), setup's run_lstm on the concatenated "
          "weights before and after t; step t by four separate matmuls, weights / clones / "
          "pre-activations in dicts keyed by gate (no ifgo: step/ifgo not attempted); grad_xxx "
          "names, first branches held, chk() against retained .grad; fused gates by torch.cat; "
          "batch 22. Slip: dc overwritten through h (`grad_c = grad_h * ...`), the future's share "
          "lost; c, gates, g, inputs and fused/gates cascade",
    where=_t4_specs(),
    fix=[("    grad_c = grad_h * go * (1 - tc**2)", "    grad_c = grad_c + grad_h * go * (1 - tc**2)")])

# ================================================================================================
# LSTM T5 (right throughout). Own data (random.seed(4242) shuffle, rows padded in a loop), the
# setup's run_lstm copied; parameters in a dict `net` stored the other way round, PyTorch's
# nn.LSTM / nn.Linear orientation: W_ih [4H, D], W_hh [4H, H], W_out [V, H], every product
# written `x @ W.T`; step t's pre-activations cut with .chunk(4). Exercise 1 cell by cell with
# d_xxx names, first branches held, a `report(label, mine, t)` helper printing the relative error
# against retained .grad; exercise 3's fused gates and lstm_step_backward; exercise 2's
# lstm_backward as a reversed loop over lstm_step_backward writing into a preallocated dxs; a
# training forward `seq_forward` whose time loop writes into preallocated hs / cs / gates tensors;
# 200 steps of the learner's own Adam, batch 24 (the check batch 18).

LSTMT5_CELLS = [
    md("# LSTM backward\nWeights kept the way `nn.LSTM` keeps them: `(4H, D)`, gates i, f, g, o."),
    r'''
import random
import torch
import torch.nn.functional as F
from collections import namedtuple
''',
    r'''
words = open('names.txt').read().splitlines()
random.seed(4242)
random.shuffle(words)
itos = ['.'] + sorted(set(''.join(words)))
stoi = {s: k for k, s in enumerate(itos)}
V = len(itos)
maxlen = max(map(len, words)) + 1
rows_x, rows_y = [], []
for w in words:
    ids = [stoi[s] for s in w]
    pad = maxlen - len(ids) - 1
    rows_x.append([0] + ids + [0] * pad)
    rows_y.append(ids + [0] + [-1] * pad)
data_x, data_y = torch.tensor(rows_x), torch.tensor(rows_y)
split = int(0.9 * len(words))

def sample(bs):
    ix = torch.randint(0, split, (bs,))
    x, y = data_x[ix], data_y[ix]
    T = int((y >= 0).sum(1).max())
    return x[:, :T].contiguous(), y[:, :T].contiguous()
''',
    r'''
LSTMRun = namedtuple("LSTMRun", ["hs", "h", "c"])

def run_lstm(xs, h, c, Wx, Wh, b):
    hs, h, c = torch.lstm(xs, (h[None], c[None]), (Wx.T, Wh.T, b, b * 0), True, 1, 0.0, False,
                          False, True)
    return LSTMRun(hs, h[0], c[0])
''',
    r'''
torch.manual_seed(515)
D, H = 10, 32
net = {'emb': torch.randn(V, D),
       'W_ih': torch.randn(4 * H, D) / D**0.5,
       'W_hh': torch.randn(4 * H, H) / H**0.5,
       'b': 0.1 * torch.randn(4 * H),
       'W_out': torch.randn(V, H) / H**0.5,
       'b_out': 0.1 * torch.randn(V)}
net['b'][H:2 * H] += 1
for p in net.values():
    p.requires_grad_()
''',
    r'''
Xb, Yb = sample(18)
n, t = Xb.shape[0], 3
emb = net['emb'][Xb]
z0 = emb.new_zeros(n, H)
bef = run_lstm(emb[:, :t], z0, z0, net['W_ih'].T, net['W_hh'].T, net['b'])
x_t = emb[:, t]
W_ih_t, W_hh_t, b_t = net['W_ih'].clone(), net['W_hh'].clone(), net['b'].clone()
pre = x_t @ W_ih_t.T + bef.h @ W_hh_t.T + b_t
a_i, a_f, a_g, a_o = pre.chunk(4, dim=1)
i_, f_, o_ = torch.sigmoid(a_i), torch.sigmoid(a_f), torch.sigmoid(a_o)
g_ = torch.tanh(a_g)
c_t = f_ * bef.c + i_ * g_
h_t = o_ * torch.tanh(c_t)
st = torch.stack([h_t, c_t])
aft = run_lstm(emb[:, t + 1:], st[0], st[1], net['W_ih'].T, net['W_hh'].T, net['b'])
hs = torch.cat([bef.hs, h_t[:, None], aft.hs], 1)
logits = hs @ net['W_out'].T + net['b_out']
loss = F.cross_entropy(logits.view(-1, V), Yb.view(-1), ignore_index=-1)
checked = dict(logits=logits, hs=hs, hs_bef=bef.hs, hs_aft=aft.hs, h_t=h_t, c_t=c_t, st=st,
               i_=i_, f_=f_, g_=g_, o_=o_, c_prev=bef.c, h_prev=bef.h, a_i=a_i, a_f=a_f,
               a_g=a_g, a_o=a_o, pre=pre, x_t=x_t, W_ih_t=W_ih_t, W_hh_t=W_hh_t, b_t=b_t)
for v_ in checked.values():
    v_.retain_grad()
loss.backward()
loss.item()
''',
    r'''
def report(label, mine, tt):
    r = ((mine - tt.grad).norm() / tt.grad.norm()).item()
    print(f"{label:8s} rel {r:.1e}")
''',
    r'''
with torch.no_grad():
    m = (Yb >= 0).float()
    d_logits = F.softmax(logits, -1)
    d_logits -= F.one_hot(Yb.clamp(min=0), V).float()
    d_logits *= m[..., None] / m.sum()
    d_hs = d_logits @ net['W_out']
    d_W_out = d_logits.reshape(-1, V).T @ hs.reshape(-1, H)
    d_b_out = d_logits.sum((0, 1))
report('logits', d_logits, logits); report('hs', d_hs, hs)
report('W_out', d_W_out, net['W_out']); report('b_out', d_b_out, net['b_out'])
''',
    r'''
d_hs_bef, d_hs_aft = d_hs[:, :t], d_hs[:, t + 1:]
d_h = d_hs[:, t].clone()
''',
    r'''
d_st = st.grad
d_h += d_st[0]
d_c = d_st[1].clone()
report('hs_bef', d_hs_bef, bef.hs); report('hs_aft', d_hs_aft, aft.hs); report('h_t', d_h, h_t)
''',
    r'''
with torch.no_grad():
    tanh_c = torch.tanh(c_t)
    d_o = d_h * tanh_c
    d_c += d_h * o_ * (1 - tanh_c**2)
    d_f = d_c * bef.c
    d_c_prev = d_c * f_
    d_i = d_c * g_
    d_g = d_c * i_
report('o', d_o, o_); report('c_t', d_c, c_t)
report('f', d_f, f_); report('c_prev', d_c_prev, bef.c); report('i', d_i, i_); report('g', d_g, g_)
''',
    r'''
with torch.no_grad():
    d_a_i = d_i * i_ * (1 - i_)
    d_a_f = d_f * f_ * (1 - f_)
    d_a_o = d_o * o_ * (1 - o_)
    d_a_g = d_g * (1 - g_**2)
    d_pre = torch.cat([d_a_i, d_a_f, d_a_g, d_a_o], dim=1)
    d_x_t = d_pre @ W_ih_t
    d_h_prev = d_pre @ W_hh_t
    d_W_ih_t = d_pre.T @ x_t
    d_W_hh_t = d_pre.T @ bef.h
    d_b_t = d_pre.sum(0)
for lab, mine, tt in [('a_i', d_a_i, a_i), ('a_f', d_a_f, a_f), ('a_g', d_a_g, a_g),
                      ('a_o', d_a_o, a_o), ('pre', d_pre, pre), ('x_t', d_x_t, x_t),
                      ('h_prev', d_h_prev, bef.h), ('W_ih_t', d_W_ih_t, W_ih_t),
                      ('W_hh_t', d_W_hh_t, W_hh_t), ('b_t', d_b_t, b_t)]:
    report(lab, mine, tt)
''',
    md("## fused"),
    r'''
with torch.no_grad():
    gates_t = torch.cat([i_, f_, g_, o_], 1)
    d_pre_fused = torch.cat([d_i, d_f, d_g, d_o], 1) * torch.cat(
        [i_ * (1 - i_), f_ * (1 - f_), 1 - g_**2, o_ * (1 - o_)], 1)
report('fused', d_pre_fused, pre)
''',
    r'''
def lstm_step_backward(dh, dc, x, h_prev, c_prev, c, gates, Wx, Wh):
    i, f, g, o = gates.chunk(4, dim=1)
    tc = torch.tanh(c)
    dc = dc + dh * o * (1 - tc**2)
    d = torch.cat([dc * g * i * (1 - i), dc * c_prev * f * (1 - f), dc * i * (1 - g**2),
                   dh * tc * o * (1 - o)], dim=1)
    return d @ Wx.T, d @ Wh.T, dc * f, x.T @ d, h_prev.T @ d, d.sum(0)

with torch.no_grad():
    outs = lstm_step_backward(d_h, d_st[1], x_t, bef.h, bef.c, c_t, gates_t, W_ih_t.T, W_hh_t.T)
for lab, mine, tt in zip(['x', 'h_prev', 'c_prev'], outs, [x_t, bef.h, bef.c]):
    report(lab, mine, tt)
report('Wx', outs[3].T, W_ih_t)
''',
    md("## BPTT"),
    r'''
def lstm_backward(dhs, xs, h0, c0, hs, cs, gates, Wx, Wh):
    n, T, _ = xs.shape
    dxs = torch.empty_like(xs)
    dWx, dWh, db = torch.zeros_like(Wx), torch.zeros_like(Wh), torch.zeros(Wx.shape[1])
    dh_next, dc_next = torch.zeros_like(h0), torch.zeros_like(c0)
    for s in reversed(range(T)):
        h_in = hs[:, s - 1] if s > 0 else h0
        c_in = cs[:, s - 1] if s > 0 else c0
        dxs[:, s], dh_next, dc_next, gx, gh, gb = lstm_step_backward(
            dhs[:, s] + dh_next, dc_next, xs[:, s], h_in, c_in, cs[:, s], gates[:, s], Wx, Wh)
        dWx += gx
        dWh += gh
        db += gb
    return dxs, dh_next, dc_next, dWx, dWh, db
''',
    r'''
def seq_forward(P, X):
    n, T = X.shape
    xs = P['emb'][X]
    hs = xs.new_zeros(n, T, H)
    cs = xs.new_zeros(n, T, H)
    gates = xs.new_zeros(n, T, 4 * H)
    h = c = xs.new_zeros(n, H)
    for s in range(T):
        a = xs[:, s] @ P['W_ih'].T + h @ P['W_hh'].T + P['b']
        gt = torch.cat([a[:, :2 * H].sigmoid(), a[:, 2 * H:3 * H].tanh(), a[:, 3 * H:].sigmoid()], 1)
        c = gt[:, H:2 * H] * c + gt[:, :H] * gt[:, 2 * H:3 * H]
        h = gt[:, 3 * H:] * c.tanh()
        gates[:, s], cs[:, s], hs[:, s] = gt, c, h
    return xs, hs, cs, gates, hs @ P['W_out'].T + P['b_out']

def seq_loss(P, X, Y):
    return F.cross_entropy(seq_forward(P, X)[-1].reshape(-1, V), Y.reshape(-1), ignore_index=-1)
''',
    r'''
for p in net.values():
    p.requires_grad_(False)
m1 = {k: torch.zeros_like(v) for k, v in net.items()}
m2 = {k: torch.zeros_like(v) for k, v in net.items()}
trace = []
for it in range(200):
    xb, yb = sample(24)
    xs, hs_, cs_, gates_, lg = seq_forward(net, xb)
    lv = F.cross_entropy(lg.reshape(-1, V), yb.reshape(-1), ignore_index=-1)
    valid = (yb >= 0).float()
    dl = (F.softmax(lg, -1) - F.one_hot(yb.clamp(min=0), V)) * (valid / valid.sum())[..., None]
    g = {'W_out': dl.reshape(-1, V).T @ hs_.reshape(-1, H), 'b_out': dl.sum((0, 1))}
    zz = torch.zeros(len(xb), H)
    dxs, _, _, dWx, dWh, db = lstm_backward(dl @ net['W_out'], xs, zz, zz, hs_, cs_, gates_,
                                            net['W_ih'].T, net['W_hh'].T)
    g['W_ih'], g['W_hh'], g['b'] = dWx.T, dWh.T, db
    g['emb'] = torch.zeros_like(net['emb']).index_add_(0, xb.reshape(-1), dxs.reshape(-1, D))
    for k in net:
        m1[k] = 0.9 * m1[k] + 0.1 * g[k]
        m2[k] = 0.999 * m2[k] + 0.001 * g[k]**2
        net[k] -= 0.01 * (m1[k] / (1 - 0.9**(it + 1))) / ((m2[k] / (1 - 0.999**(it + 1))).sqrt() + 1e-8)
    trace.append(lv.item())
print(trace[0], sum(trace[-20:]) / 20)
''',
]

LSTMT5_FWD = {"logits": "logits", "hs": "hs", "hs_before": "bef.hs", "hs_after": "aft.hs",
              "h": "h_t", "c": "c_t", "state": "st", "o": "o_", "f": "f_", "i": "i_", "g": "g_",
              "c_prev": "bef.c", "h_prev": "bef.h", "ai": "a_i", "af": "a_f", "ag": "a_g",
              "ao": "a_o", "ifgo": "pre", "x_t": "x_t", "Wx_t": "W_ih_t", "Wh_t": "W_hh_t",
              "b_t": "b_t", "Wy": "net['W_out']", "by": "net['b_out']"}
LSTMT5_GRAD = {"logits": "d_logits", "hs": "d_hs", "hs_before": "d_hs_bef",
               "hs_after": "d_hs_aft", "h": "d_h", "c": "d_c", "o": "d_o", "f": "d_f",
               "i": "d_i", "g": "d_g", "c_prev": "d_c_prev", "h_prev": "d_h_prev",
               "ai": "d_a_i", "af": "d_a_f", "ag": "d_a_g", "ao": "d_a_o", "ifgo": "d_pre",
               "x_t": "d_x_t", "Wx_t": "d_W_ih_t", "Wh_t": "d_W_hh_t", "b_t": "d_b_t",
               "Wy": "d_W_out", "by": "d_b_out"}

add("lstm_t5_pytorch_orientation_prealloc_adam", "lstm", LSTMT5_CELLS, LSTM_ALL,
    notes="own data (random.seed(4242)), setup's run_lstm, parameters in a dict in nn.LSTM's "
          "orientation (W_ih [4H, D], W_hh [4H, H], W_out [V, H], x @ W.T), chunk(4); exercise 1 "
          "with d_xxx names and first branches held, report() relative errors; fused gates, "
          "lstm_step_backward, lstm_backward over it into a preallocated dxs; a training forward "
          "writing into preallocated hs / cs / gates; own Adam 200 steps, batch 24 (check batch "
          "18); all right",
    where={**where("lstm", LSTM_STEPS, fwd=LSTMT5_FWD, grad=LSTMT5_GRAD.__getitem__,
                   first_after={"h": "d_h = d_hs[:, t].clone()",
                                "c": "d_c = d_st[1].clone()"}),
           "fused/gates": [("d_pre_fused", "G(pre)")]},
    checkpoint="report('fused', d_pre_fused, pre)",
    functions={"bptt/lstm_backward": None, "fused/lstm_step_backward": None},
    train={"cell": "for it in range(200)", "probe": "for k in net:", "params": "net",
           "grads": "g", "ref": "lambda Q: seq_loss(Q, xb, yb)", "losses": "trace"})

# ================================================================================================
# CONV T6 (right throughout). Own data (random.Random(31).sample shuffle, contexts of 8 built in
# a loop), parameters as globals under the learner's own names (E, K1 / c1, K2 / c2, K3 / c3,
# Wout, bout); each convolution written as an explicit sum over its two taps,
# `w[:, :, 0] @ shift(a, d) + w[:, :, 1] @ a + b[:, None]` (a broadcast matmul against a shifted
# copy), activations renamed (e, xT, z1 / a1, z2 / a2, z3 / a3, feat); gradients named g_xxx.
# The convolution's backward is a helper `causal_back` written once with the shift the wrong way
# round for the input's gradient, compared (mismatch printed), then redefined in a later cell with
# the shift's adjoint and layer 3 recomputed; layers 2 and 1 through the redefined helper. Batch 36;
# then 300 steps of SGD on the helper, batch 45.

CONVT6_CELLS = [
    r'''
import random
import torch
import torch.nn.functional as F
''',
    r'''
words = open('names.txt').read().splitlines()
words = random.Random(31).sample(words, len(words))
chars = sorted(set(''.join(words)))
stoi = {c: j + 1 for j, c in enumerate(chars)}
stoi['.'] = 0
ctx_len = 8
xs, ys = [], []
for w in words[:int(0.8 * len(words))]:
    ctx = [0] * ctx_len
    for c in w + '.':
        xs.append(ctx)
        ys.append(stoi[c])
        ctx = ctx[1:] + [stoi[c]]
Xtr, Ytr = torch.tensor(xs), torch.tensor(ys)
''',
    md("each conv = two taps: `w[:,:,0]` looks `d` steps back, `w[:,:,1]` at the current step"),
    r'''
def shift(a, d):
    # a[:, :, t - d], zero where t < d
    return F.pad(a, (d, 0))[:, :, :a.shape[2]]

def causal(a, w, b, d):
    return w[:, :, 0] @ shift(a, d) + w[:, :, 1] @ a + b[:, None]

torch.manual_seed(606)
V, nE, nH = 27, 10, 64
E = torch.randn(V, nE)
K1 = torch.randn(nH, nE, 2) * (5 / 3) / (2 * nE)**0.5
K2 = torch.randn(nH, nH, 2) * (5 / 3) / (2 * nH)**0.5
K3 = torch.randn(nH, nH, 2) * (5 / 3) / (2 * nH)**0.5
c1, c2, c3 = 0.1 * torch.randn(nH), 0.1 * torch.randn(nH), 0.1 * torch.randn(nH)
Wout = 0.1 * torch.randn(nH, V)
bout = 0.1 * torch.randn(V)
params = [E, K1, c1, K2, c2, K3, c3, Wout, bout]
for p in params:
    p.requires_grad_(True)
''',
    r'''
bi = torch.randint(0, len(Xtr), (36,))
Xb, Yb = Xtr[bi], Ytr[bi]
e = E[Xb]
xT = e.transpose(1, 2)
z1 = causal(xT, K1, c1, 1)
a1 = torch.tanh(z1)
z2 = causal(a1, K2, c2, 2)
a2 = torch.tanh(z2)
z3 = causal(a2, K3, c3, 4)
a3 = torch.tanh(z3)
feat = a3[:, :, -1]
logits = feat @ Wout + bout
loss = F.cross_entropy(logits, Yb)
for t_ in (e, xT, z1, a1, z2, a2, z3, a3, feat, logits):
    t_.retain_grad()
loss.backward()
print(loss.item(), (z3 - F.conv1d(F.pad(a2, (4, 0)), K3, c3, dilation=4)).abs().max().item())
''',
    r'''
def diff(a, b):
    return f"{(a - b).abs().max().item():.1e}"

with torch.no_grad():
    g_logits = F.softmax(logits, 1)
    g_logits[range(len(Yb)), Yb] -= 1
    g_logits /= len(Yb)
    g_feat = g_logits @ Wout.T
    g_Wout = feat.T @ g_logits
    g_bout = g_logits.sum(0)
    g_a3 = torch.zeros_like(a3)
    g_a3[:, :, -1] = g_feat
    g_z3 = g_a3 * (1 - a3**2)
print(diff(g_logits, logits.grad), diff(g_feat, feat.grad), diff(g_Wout, Wout.grad),
      diff(g_bout, bout.grad), diff(g_a3, a3.grad), diff(g_z3, z3.grad))
''',
    r'''
def causal_back(g_z, a, w, d):
    g_w = torch.stack([(g_z @ shift(a, d).transpose(1, 2)).sum(0),
                       (g_z @ a.transpose(1, 2)).sum(0)], dim=2)
    g_b = g_z.sum((0, 2))
    g_a = w[:, :, 1].T @ g_z + shift(w[:, :, 0].T @ g_z, d)
    return g_a, g_w, g_b

with torch.no_grad():
    g_a2, g_K3, g_c3 = causal_back(g_z3, a2, K3, 4)
print(diff(g_a2, a2.grad), diff(g_K3, K3.grad), diff(g_c3, c3.grad))
''',
    md("g_a2 is off. The tap that looks back sends its gradient *forward* in time: the "
       "backward of a shift right is a shift left."),
    r'''
def unshift(u, d):
    return F.pad(u[:, :, d:], (0, d))

def causal_back(g_z, a, w, d):
    g_w = torch.stack([(g_z @ shift(a, d).transpose(1, 2)).sum(0),
                       (g_z @ a.transpose(1, 2)).sum(0)], dim=2)
    g_b = g_z.sum((0, 2))
    g_a = w[:, :, 1].T @ g_z + unshift(w[:, :, 0].T @ g_z, d)
    return g_a, g_w, g_b

with torch.no_grad():
    g_a2, g_K3, g_c3 = causal_back(g_z3, a2, K3, 4)
print(diff(g_a2, a2.grad), diff(g_K3, K3.grad), diff(g_c3, c3.grad))
''',
    r'''
with torch.no_grad():
    g_z2 = g_a2 * (1 - a2**2)
    g_a1, g_K2, g_c2 = causal_back(g_z2, a1, K2, 2)
    g_z1 = g_a1 * (1 - a1**2)
    g_xT, g_K1, g_c1 = causal_back(g_z1, xT, K1, 1)
    g_e = g_xT.transpose(1, 2)
    g_E = torch.zeros_like(E).index_add_(0, Xb.flatten(), g_e.reshape(-1, nE))
for mine, t_ in [(g_z2, z2), (g_a1, a1), (g_K2, K2), (g_c2, c2), (g_z1, z1), (g_xT, xT),
                 (g_K1, K1), (g_c1, c1), (g_e, e), (g_E, E)]:
    print(diff(mine, t_.grad), end='  ')
''',
    md("## train with these"),
    r'''
for p in params:
    p.requires_grad_(False)
lossi = []
for i in range(300):
    bi = torch.randint(0, len(Xtr), (45,))
    xb, yb = Xtr[bi], Ytr[bi]
    xT_ = E[xb].transpose(1, 2)
    a1_ = torch.tanh(causal(xT_, K1, c1, 1))
    a2_ = torch.tanh(causal(a1_, K2, c2, 2))
    a3_ = torch.tanh(causal(a2_, K3, c3, 4))
    lg = a3_[:, :, -1] @ Wout + bout
    lossi.append(F.cross_entropy(lg, yb).item())
    dlg = F.softmax(lg, 1)
    dlg[range(len(yb)), yb] -= 1
    dlg /= len(yb)
    da3 = torch.zeros_like(a3_)
    da3[:, :, -1] = dlg @ Wout.T
    da2, dK3, dc3 = causal_back(da3 * (1 - a3_**2), a2_, K3, 4)
    da1, dK2, dc2 = causal_back(da2 * (1 - a2_**2), a1_, K2, 2)
    dxT, dK1, dc1 = causal_back(da1 * (1 - a1_**2), xT_, K1, 1)
    dE = torch.zeros_like(E).index_add_(0, xb.flatten(), dxT.transpose(1, 2).reshape(-1, nE))
    grads = [dE, dK1, dc1, dK2, dc2, dK3, dc3, a3_[:, :, -1].T @ dlg, dlg.sum(0)]
    lr = 0.1 if i < 225 else 0.01
    for p, gp in zip(params, grads):
        p -= lr * gp
print(sum(lossi[:30]) / 30, sum(lossi[-30:]) / 30)
''',
]

CONVT6_FWD = {"logits": "logits", "last": "feat", "h3": "a3", "h3pre": "z3", "h2": "a2",
              "h2pre": "z2", "h1": "a1", "h1pre": "z1", "x": "xT", "emb": "e", "C": "E",
              "W": "Wout", "b": "bout", "w1": "K1", "b1": "c1", "w2": "K2", "b2": "c2",
              "w3": "K3", "b3": "c3"}
CONVT6_NAMES = "['C', 'w1', 'b1', 'w2', 'b2', 'w3', 'b3', 'W', 'b']"

add("conv_t6_tap_sums_redefined_helper_sgd", "conv", CONVT6_CELLS, CONV_ALL,
    notes="own data (Random(31).sample), parameters as globals under own names, each conv an "
          "explicit sum over its two taps (broadcast matmul against a shifted copy), activations "
          "renamed, g_xxx names; causal_back written first with the shift the wrong way for the "
          "input's gradient, then redefined with its adjoint and layer 3 recomputed; batch 36; SGD "
          "300 steps on the helper, batch 45; all right (the first attempt's values overwritten)",
    where=where("conv", CONV_STEPS, fwd=CONVT6_FWD,
                grad=lambda k: "g_" + CONVT6_FWD[k]),
    checkpoint="for mine, t_ in [(g_z2, z2)",
    train={"cell": "for i in range(300)", "probe": "for p, gp in zip(params, grads):",
           "params": f"dict(zip({CONVT6_NAMES}, params))",
           "grads": f"dict(zip({CONVT6_NAMES}, grads))",
           "ref": "lambda Q: ref_conv_loss(Q, xb, yb)", "losses": "lossi"})
