"""Learners' own notebooks for the gpt, lstm and conv lessons, with each step's truth: a fourth
corpus, tune half (its other half is notebook_corpus_lessons_holdout4).

Six notebooks, two per lesson, in layouts where the forward pass itself does not use the
lesson's names or plain variables: a class keeping its activations on itself or in a cache dict,
a namedtuple or dataclass returned by a forward function, parameters in a dict or a list under
the learner's own names, lists indexed by layer, einsum / matmul / unfold where the lesson
writes `@` or F.conv1d, the LSTM's other steps run by a loop of the learner's own. Each is a
learner's own notebook: the lesson's forward pass copied in (renamed and re-laid-out), their own
loading of 'names.txt' (the truth runner points it at data/names.txt), their own seed and init,
the backward pass in a layout matching the forward, and where they train, a loop of at most 300
steps on their own gradients. Architecture sizes are the lessons' [lesson] sizes throughout;
batch sizes vary (5, 6 / 8, 20, 16, 40 / 32, 24).

Layouts in this half:
  gpt_v1   a `Model` class: parameters as attributes under own names (W_emb, g1, W_qkv, W_up,
           ...), every activation in `self.cache` under own names, attention as torch.einsum;
           one `backward()` method filling `self.dc` / `self.dp`; a check(name, mine, ref) loop.
  gpt_v2   `gpt_forward(P, X, Y)` returning a namedtuple of renamed activations, parameters in a
           dict under own names, torch.matmul products; exercise 1 from logits down to x1 in a
           dict with every first branch held; the seven functions; model_backward on them and
           200 steps of the learner's adamw_update.
  lstm_v1  an `LSTMNet` class with its own per-step loop (torch.stack) before and after t, every
           activation in `self.cache`, h_prev / c_prev read back from the stacked early states;
           one backward() method into a dict, the early states' gradient completed with dh_prev;
           fused gates as a method.
  lstm_v2  `step_forward` returning a dataclass of renamed activations, parameters in a list
           read through index constants, the setup's run_lstm; exercise 1 as tuple-returning
           functions, torch.testing.assert_close; lstm_step_backward, lstm_backward on it over
           an own torch.stack'ed forward, SGD.
  conv_v1  a `WaveNet` class of CausalConv objects (net.convs[i].w), convolutions as a manual
           unfold + einsum, activations in `net.cache`; per-layer backward methods, the taps
           folded back with index_add_; SGD on the class.
  conv_v2  parameters and activations in lists indexed by layer (ws[l], acts[l], pres[l]), the
           forward a loop of F.conv1d; gradients in parallel lists; layer 3 inline, layers 2
           and 1 through a helper; print((a - b).abs().max()).

Slips (each case's "notes" says which): gpt_v1 takes the softmax's backward with .mean(-1)
where the row's sum belongs (block/preatt_masked wrong; preatt, qk, qkv, ln1, ln1_affine, x0,
wpe, wte cascade); conv_v2 multiplies layer 3's output gradient by w3's taps without transposing
them (conv/h2 wrong; h2pre, h1, h1pre, x, emb, C cascade). The other four notebooks are right
throughout. No notebook is shared with the holdout half, nor with the earlier corpora.

Written apart from the grader: from the lessons' forward passes, pack.toml's [lesson] / [setup] /
[forward] tables, `backprop-tutor --pack X list / show` and the earlier corpora's format only,
without reading the tutor's code or the steps' solutions, mistakes, hints or explanations, and
without running the grader on these notebooks. Every label was measured by running the
notebook, not judged by eye:

    .venv/bin/python tests/lesson_corpus_truth.py notebook_corpus_lessons_tune4

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
# GPT V1 (a slip and its cascade). Own data (a torch.randperm shuffle, rows filled into a zero
# tensor), a `Model` class whose __init__ draws the parameters as attributes under the learner's
# own names (W_emb, W_pos, g1 / beta1, W_qkv, W_o, W_up, W_down, g_f / beta_f, ...) and whose
# forward keeps every activation in a `self.cache` dict under the learner's own names (tok_emb,
# h0, mu1 / cen1 / var1 / inv1 / nrm1, scores, masked, attn_w, ctx, merged, attn_out, h1, up, act,
# down, h2, ...), the attention products as torch.einsum; one `backward()` method filling
# `self.dc` (activations) and `self.dp` (parameters), ln1 and ln2 through a `_norm_back` helper in
# one formula, the final layernorm atom by atom; a `check(name, mine, ref)` helper. Exercise 1
# only, batch of 5. No first branch is ever held on its own (one method call).
# Slip: the softmax's backward with a mean where the sum over the row belongs: block/preatt_masked
# is wrong, and preatt, qk, qkv, ln1, ln1_affine, x0, wpe, wte cascade.

GPTV1_CELLS = [
    md("# A transformer block as a class\n\nThe forward keeps everything in `self.cache`; "
       "`backward()` fills `self.dc` for the activations and `self.dp` for the parameters."),
    r'''
import math
import torch
import torch.nn.functional as F
''',
    r'''
raw = open('names.txt').read().splitlines()
order = torch.randperm(len(raw), generator=torch.Generator().manual_seed(2718)).tolist()
raw = [raw[j] for j in order]
letters = sorted(set(''.join(raw)))
ch2id = {ch: j + 1 for j, ch in enumerate(letters)}
ch2id['.'] = 0
VOCAB = len(ch2id)
CTX, EMB, HEADS = 16, 32, 4

def pack_rows(ws):
    rows = torch.zeros(len(ws), CTX + 1, dtype=torch.long)
    for r, w_ in enumerate(ws):
        ids = ([0] + [ch2id[ch] for ch in w_] + [0])[:CTX + 1]
        rows[r, :len(ids)] = torch.tensor(ids)
    return rows[:, :CTX], rows[:, CTX]

Xtr, Ytr = pack_rows(raw[:int(0.9 * len(raw))])
print(Xtr.shape, VOCAB)
''',
    r'''
class Model:
    PNAMES = ['W_emb', 'W_pos', 'g1', 'beta1', 'W_qkv', 'b_qkv', 'W_o', 'b_o', 'g2', 'beta2',
              'W_up', 'b_up', 'W_down', 'b_down', 'g_f', 'beta_f']

    def __init__(self, V, T, C, nh, seed):
        gen = torch.Generator().manual_seed(seed)
        def r(*shape):
            return torch.randn(*shape, generator=gen)
        self.V, self.T, self.C, self.nh, self.hd = V, T, C, nh, C // nh
        self.W_emb = 0.1 * r(V, C)
        self.W_pos = 0.1 * r(T, C)
        self.g1, self.beta1 = 1 + 0.1 * r(C), 0.1 * r(C)
        self.W_qkv, self.b_qkv = r(C, 3 * C) / C**0.5, 0.1 * r(3 * C)
        self.W_o, self.b_o = 0.5 * r(C, C) / C**0.5, 0.1 * r(C)
        self.g2, self.beta2 = 1 + 0.1 * r(C), 0.1 * r(C)
        self.W_up, self.b_up = r(C, 4 * C) / C**0.5, 0.1 * r(4 * C)
        self.W_down, self.b_down = 0.5 * r(4 * C, C) / (4 * C)**0.5, 0.1 * r(C)
        self.g_f, self.beta_f = 1 + 0.1 * r(C), 0.1 * r(C)
        self.tril = torch.ones(T, T).tril()
        self.cache = {}

    def parameters(self):
        return {k: getattr(self, k) for k in self.PNAMES}

    def _norm(self, tag, x, gain, bias):
        c = self.cache
        c['mu' + tag] = x.mean(-1, keepdim=True)
        c['cen' + tag] = x - c['mu' + tag]
        c['var' + tag] = (c['cen' + tag]**2).mean(-1, keepdim=True)
        c['inv' + tag] = (c['var' + tag] + 1e-5)**-0.5
        c['nrm' + tag] = c['cen' + tag] * c['inv' + tag]
        c['ln' + tag] = c['nrm' + tag] * gain + bias
        return c['ln' + tag]

    def forward(self, X, Y):
        B, T = X.shape
        C, nh, hd = self.C, self.nh, self.hd
        c = self.cache = {'X': X}
        c['tok_emb'] = self.W_emb[X]
        c['h0'] = c['tok_emb'] + self.W_pos
        a = self._norm('1', c['h0'], self.g1, self.beta1)
        c['qkv'] = torch.matmul(a, self.W_qkv) + self.b_qkv
        for j, name in enumerate('qkv'):
            c[name] = c['qkv'][:, :, j*C:(j+1)*C].reshape(B, T, nh, hd).permute(0, 2, 1, 3)
        c['scores'] = torch.einsum('bhtd,bhsd->bhts', c['q'], c['k']) * hd**-0.5
        c['masked'] = c['scores'].masked_fill(self.tril == 0, float('-inf'))
        c['attn_w'] = F.softmax(c['masked'], dim=-1)
        c['ctx'] = torch.einsum('bhts,bhsd->bhtd', c['attn_w'], c['v'])
        c['merged'] = c['ctx'].permute(0, 2, 1, 3).reshape(B, T, C)
        c['attn_out'] = c['merged'] @ self.W_o + self.b_o
        c['h1'] = c['h0'] + c['attn_out']
        a = self._norm('2', c['h1'], self.g2, self.beta2)
        c['up'] = a @ self.W_up + self.b_up
        u = c['up']
        c['act'] = 0.5 * u * (1 + torch.tanh(math.sqrt(2 / math.pi) * (u + 0.044715 * u**3)))
        c['down'] = c['act'] @ self.W_down + self.b_down
        c['h2'] = c['h1'] + c['down']
        a = self._norm('f', c['h2'], self.g_f, self.beta_f)
        c['logits'] = a @ self.W_emb.T
        c['targets'] = torch.cat([X[:, 1:], Y[:, None]], dim=1)
        return F.cross_entropy(c['logits'].reshape(-1, self.V), c['targets'].reshape(-1))

    def _norm_back(self, d, tag, gain):
        c = self.cache
        d['nrm' + tag] = d['ln' + tag] * gain
        dgain = (d['ln' + tag] * c['nrm' + tag]).sum((0, 1))
        dbias = d['ln' + tag].sum((0, 1))
        g, nrm = d['nrm' + tag], c['nrm' + tag]
        dx = c['inv' + tag] * (g - g.mean(-1, keepdim=True) - nrm * (g * nrm).mean(-1, keepdim=True))
        return dx, dgain, dbias

    def backward(self):
        c = self.cache
        B, T = c['X'].shape
        C, nh, hd, V = self.C, self.nh, self.hd, self.V
        d, p = {}, {}
        # loss -> logits
        probs = F.softmax(c['logits'], dim=-1)
        d['logits'] = (probs - F.one_hot(c['targets'], V).float()) / (B * T)
        # logits = lnf @ W_emb.T
        d['lnf'] = d['logits'] @ self.W_emb
        p['W_emb'] = torch.einsum('btv,btc->vc', d['logits'], c['lnf'])
        # final layernorm, atom by atom
        d['nrmf'] = d['lnf'] * self.g_f
        p['g_f'] = (d['lnf'] * c['nrmf']).sum((0, 1))
        p['beta_f'] = d['lnf'].sum((0, 1))
        d['invf'] = (d['nrmf'] * c['cenf']).sum(-1, keepdim=True)
        d['varf'] = -0.5 * (c['varf'] + 1e-5)**-1.5 * d['invf']
        d['cenf'] = d['nrmf'] * c['invf'] + 2 * c['cenf'] * d['varf'] / C
        d['muf'] = -d['cenf'].sum(-1, keepdim=True)
        d['h2'] = d['cenf'] + d['muf'] / C
        # h2 = h1 + down
        d['down'] = d['h2']
        d['act'] = d['down'] @ self.W_down.T
        p['W_down'] = torch.einsum('bti,bto->io', c['act'], d['down'])
        p['b_down'] = d['down'].sum((0, 1))
        u = c['up']
        kk = math.sqrt(2 / math.pi)
        th = torch.tanh(kk * (u + 0.044715 * u**3))
        d['up'] = d['act'] * (0.5 * (1 + th) + 0.5 * u * (1 - th**2) * kk * (1 + 3 * 0.044715 * u**2))
        d['ln2'] = d['up'] @ self.W_up.T
        p['W_up'] = torch.einsum('bti,bto->io', c['ln2'], d['up'])
        p['b_up'] = d['up'].sum((0, 1))
        dx, p['g2'], p['beta2'] = self._norm_back(d, '2', self.g2)
        d['h1'] = d['h2'] + dx
        # h1 = h0 + attn_out
        d['attn_out'] = d['h1']
        d['merged'] = d['attn_out'] @ self.W_o.T
        p['W_o'] = torch.einsum('bti,bto->io', c['merged'], d['attn_out'])
        p['b_o'] = d['attn_out'].sum((0, 1))
        d['ctx'] = d['merged'].reshape(B, T, nh, hd).permute(0, 2, 1, 3)
        d['attn_w'] = torch.einsum('bhtd,bhsd->bhts', d['ctx'], c['v'])
        d['v'] = torch.einsum('bhts,bhtd->bhsd', c['attn_w'], d['ctx'])
        A = c['attn_w']
        d['masked'] = A * (d['attn_w'] - (A * d['attn_w']).mean(-1, keepdim=True))
        d['scores'] = d['masked'] * self.tril
        d['q'] = torch.einsum('bhts,bhsd->bhtd', d['scores'], c['k']) * hd**-0.5
        d['k'] = torch.einsum('bhts,bhtd->bhsd', d['scores'], c['q']) * hd**-0.5
        d['qkv'] = torch.cat([d[z].permute(0, 2, 1, 3).reshape(B, T, C) for z in 'qkv'], dim=-1)
        d['ln1'] = d['qkv'] @ self.W_qkv.T
        p['W_qkv'] = torch.einsum('bti,bto->io', c['ln1'], d['qkv'])
        p['b_qkv'] = d['qkv'].sum((0, 1))
        dx, p['g1'], p['beta1'] = self._norm_back(d, '1', self.g1)
        d['h0'] = d['h1'] + dx
        # h0 = tok_emb + W_pos, tok_emb = W_emb[X]
        d['tok_emb'] = d['h0']
        p['W_pos'] = d['h0'].sum(0)
        p['W_emb'] = p['W_emb'].index_add(0, c['X'].reshape(-1), d['h0'].reshape(-1, C))
        self.dc, self.dp = d, p
''',
    r'''
M = Model(VOCAB, CTX, EMB, HEADS, seed=77)
for t_ in M.parameters().values():
    t_.requires_grad_(True)
bgen = torch.Generator().manual_seed(1)
ix = torch.randint(0, len(Xtr), (5,), generator=bgen)
Xb, Yb = Xtr[ix], Ytr[ix]
loss = M.forward(Xb, Yb)
for t_ in M.cache.values():
    if t_.requires_grad:
        t_.retain_grad()
loss.backward()
print('loss', loss.item())
''',
    r'''
with torch.no_grad():
    M.backward()
''',
    r'''
def check(name, mine, ref):
    ok = torch.allclose(mine, ref, rtol=1e-4, atol=1e-5)
    print(f"{name:>9} {'ok ' if ok else 'NO '} {(mine - ref).abs().max().item():.2e}")

for key, g_ in M.dc.items():
    check(key, g_, M.cache[key].grad)
for key, g_ in M.dp.items():
    check(key, g_, getattr(M, key).grad)
''',
]

GPTV1_MAP = {
    "logits": "logits", "lnf": "lnf", "lnf_norm": "nrmf", "lnf_rstd": "invf", "lnf_var": "varf",
    "lnf_xc": "cenf", "lnf_mean": "muf", "x2": "h2", "fcproj": "down", "x1": "h1",
    "fch_gelu": "act", "fch": "up", "ln2": "ln2", "ln2_norm": "nrm2", "attproj": "attn_out",
    "x0": "h0", "y": "merged", "atty": "ctx", "att": "attn_w", "v": "v",
    "preatt_masked": "masked", "preatt": "scores", "q": "q", "k": "k", "qkv": "qkv",
    "ln1": "ln1", "ln1_norm": "nrm1", "tok": "tok_emb"}
GPTV1_PARAMS = {
    "wte": "W_emb", "wpe": "W_pos", "ln1w": "g1", "ln1b": "beta1", "qkvw": "W_qkv",
    "qkvb": "b_qkv", "attprojw": "W_o", "attprojb": "b_o", "ln2w": "g2", "ln2b": "beta2",
    "fcw": "W_up", "fcb": "b_up", "fcprojw": "W_down", "fcprojb": "b_down", "lnfw": "g_f",
    "lnfb": "beta_f"}


def _v1_grad(k):
    if k in GPTV1_PARAMS:
        return f"M.dp['{GPTV1_PARAMS[k]}']"
    return f"M.dc['{GPTV1_MAP[k]}']"


add("gpt_v1_model_class_cache_softmax_mean_slip", "gpt", GPTV1_CELLS, GPT_STEPS,
    wrong=["block/preatt_masked"],
    cascade=["block/preatt", "block/qk", "block/qkv", "block/ln1", "block/ln1_affine",
             "block/x0", "block/wpe", "block/wte"],
    notes="own data (randperm(2718) shuffle), Model class: parameters as attributes under own "
          "names, every activation in self.cache under own names, einsum attention; one "
          "backward() method filling self.dc / self.dp; check(name, mine, ref); batch 5; "
          "exercise 1 only. Slip: the softmax's backward with .mean(-1) where the row's sum "
          "belongs; preatt, qk, qkv, ln1, ln1_affine, x0, wpe, wte cascade",
    where=no_first(where("gpt", GPT_STEPS,
                         fwd={**{k: f"M.cache['{v}']" for k, v in GPTV1_MAP.items()},
                              **{k: f"M.{v}" for k, v in GPTV1_PARAMS.items()}},
                         grad=_v1_grad, first_after=DROP)),
    checkpoint="M.backward()",
    fix=[("(A * d['attn_w']).mean(-1, keepdim=True)", "(A * d['attn_w']).sum(-1, keepdim=True)")])

# ================================================================================================
# GPT V2 (right throughout). Own data (random.Random(99) shuffle, a list-comprehension of padded
# rows), parameters in a dict under the learner's own names (E, Pos, n1_g, Wqkv, Wo, W1, W2, nf_g,
# ...), a `gpt_forward(P, X, Y)` function returning a namedtuple `Acts` of every activation under
# renamed fields (z0 / z1 / z2 for the residual stream, m / xc / var / r / nrm per layernorm, hid /
# hid_act for the MLP, scores / scores_m / probs / heads / merged / proj for attention), products
# as torch.matmul on reshaped tensors. Exercise 1's top half (logits down to x1) step by step, the
# gradients in a dict `g` keyed by the field names, checked by `check(name, mine, ref)` against
# retained .grad; every first branch held as a value of its own. Exercise 2's seven functions in
# one cell, each compared with torch.autograd.grad by `print(torch.allclose(...))`; exercise 3: a
# `model_backward(P, fw, X)` built on them, 200 steps of the learner's adamw_update, batch 8.

GPTV2_CELLS = [
    r'''
import math
import random
from collections import namedtuple
import torch
import torch.nn.functional as F
''',
    r'''
names = [ln.strip() for ln in open("names.txt") if ln.strip()]
random.Random(99).shuffle(names)
vocab = ['.'] + sorted(set(''.join(names)))
tok_id = {ch: j for j, ch in enumerate(vocab)}
VS, BLK, D, NH = len(vocab), 16, 32, 4
HD = D // NH

def row(w):
    ids = [0] + [tok_id[ch] for ch in w] + [0]
    ids = (ids + [0] * BLK)[:BLK + 1]
    return ids

data = torch.tensor([row(w) for w in names])
Xtr, Ytr = data[:28000, :BLK], data[:28000, BLK]
''',
    r'''
Acts = namedtuple('Acts', 'tok z0 m1 xc1 var1 r1 nrm1 a1 qkv q k v scores scores_m probs heads '
                          'merged proj z1 m2 xc2 var2 r2 nrm2 a2 hid hid_act mlp z2 mf xcf varf '
                          'rf nrmf af logits targets loss')
GELU_K = math.sqrt(2 / math.pi)
MASK = torch.tril(torch.ones(BLK, BLK))

def layer_norm(x, gain, bias):
    m = x.mean(-1, keepdim=True)
    xc = x - m
    var = (xc**2).mean(-1, keepdim=True)
    r = (var + 1e-5)**-0.5
    nrm = xc * r
    return m, xc, var, r, nrm, nrm * gain + bias

def gpt_forward(P, X, Y):
    B, T = X.shape
    tok = P['E'][X]
    z0 = tok + P['Pos']
    m1, xc1, var1, r1, nrm1, a1 = layer_norm(z0, P['n1_g'], P['n1_b'])
    qkv = torch.matmul(a1, P['Wqkv']) + P['bqkv']
    q, k, v = [t.reshape(B, T, NH, HD).transpose(1, 2) for t in qkv.split(D, dim=-1)]
    scores = torch.matmul(q, k.transpose(-1, -2)) * HD**-0.5
    scores_m = scores.masked_fill(MASK == 0, float('-inf'))
    probs = scores_m.softmax(-1)
    heads = torch.matmul(probs, v)
    merged = heads.transpose(1, 2).reshape(B, T, D)
    proj = torch.matmul(merged, P['Wo']) + P['bo']
    z1 = z0 + proj
    m2, xc2, var2, r2, nrm2, a2 = layer_norm(z1, P['n2_g'], P['n2_b'])
    hid = torch.matmul(a2, P['W1']) + P['b1']
    hid_act = 0.5 * hid * (1 + torch.tanh(GELU_K * (hid + 0.044715 * hid**3)))
    mlp = torch.matmul(hid_act, P['W2']) + P['b2']
    z2 = z1 + mlp
    mf, xcf, varf, rf, nrmf, af = layer_norm(z2, P['nf_g'], P['nf_b'])
    logits = torch.matmul(af, P['E'].T)
    targets = torch.cat([X[:, 1:], Y[:, None]], dim=1)
    loss = F.cross_entropy(logits.reshape(-1, VS), targets.reshape(-1))
    return Acts(tok, z0, m1, xc1, var1, r1, nrm1, a1, qkv, q, k, v, scores, scores_m, probs,
                heads, merged, proj, z1, m2, xc2, var2, r2, nrm2, a2, hid, hid_act, mlp, z2, mf,
                xcf, varf, rf, nrmf, af, logits, targets, loss)
''',
    r'''
torch.manual_seed(4)
def lin(i, o, s=1.0):
    return torch.randn(i, o) * s / i**0.5
def vec(n_, base=0.0):
    return base + 0.1 * torch.randn(n_)

P = {'E': 0.1 * torch.randn(VS, D), 'Pos': 0.1 * torch.randn(BLK, D),
     'n1_g': vec(D, 1.0), 'n1_b': vec(D), 'Wqkv': lin(D, 3 * D), 'bqkv': vec(3 * D),
     'Wo': lin(D, D, 0.5), 'bo': vec(D), 'n2_g': vec(D, 1.0), 'n2_b': vec(D),
     'W1': lin(D, 4 * D), 'b1': vec(4 * D), 'W2': lin(4 * D, D, 0.5), 'b2': vec(D),
     'nf_g': vec(D, 1.0), 'nf_b': vec(D)}
for t_ in P.values():
    t_.requires_grad_(True)
ix = torch.randint(0, len(Xtr), (6,))
Xb, Yb = Xtr[ix], Ytr[ix]
fw = gpt_forward(P, Xb, Yb)
for t_ in fw:
    if isinstance(t_, torch.Tensor) and t_.requires_grad:
        t_.retain_grad()
fw.loss.backward()
print(fw.loss.item())
''',
    r'''
def check(name, mine, ref):
    err = (mine - ref).abs().max().item()
    print(f"{name:<8} {'ok' if torch.allclose(mine, ref, rtol=1e-4, atol=1e-5) else 'WRONG'} {err:.1e}")

g = {}
N = Xb.numel()
''',
    r'''
with torch.no_grad():
    g['logits'] = fw.logits.softmax(-1)
    g['logits'].view(-1, VS)[torch.arange(N), fw.targets.view(-1)] -= 1
    g['logits'] /= N
check('logits', g['logits'], fw.logits.grad)
''',
    r'''
g['af'] = torch.matmul(g['logits'], P['E'].detach())
g['E'] = torch.matmul(g['logits'].reshape(-1, VS).T, fw.af.detach().reshape(-1, D))
check('af', g['af'], fw.af.grad)
''',
    r'''
g['nrmf'] = g['af'] * P['nf_g'].detach()
g['nf_g'] = (g['af'] * fw.nrmf.detach()).sum((0, 1))
g['nf_b'] = g['af'].sum((0, 1))
check('nrmf', g['nrmf'], fw.nrmf.grad)
check('nf_g', g['nf_g'], P['nf_g'].grad)
check('nf_b', g['nf_b'], P['nf_b'].grad)
''',
    r'''
g['rf'] = (g['nrmf'] * fw.xcf.detach()).sum(-1, keepdim=True)
g['xcf'] = g['nrmf'] * fw.rf.detach()
check('rf', g['rf'], fw.rf.grad)
''',
    r'''
g['varf'] = g['rf'] * -0.5 * (fw.varf.detach() + 1e-5)**-1.5
check('varf', g['varf'], fw.varf.grad)
''',
    r'''
g['xcf'] = g['xcf'] + g['varf'] * 2 * fw.xcf.detach() / D
check('xcf', g['xcf'], fw.xcf.grad)
''',
    r'''
g['mf'] = -g['xcf'].sum(-1, keepdim=True)
g['z2'] = g['xcf'].clone()
check('mf', g['mf'], fw.mf.grad)
''',
    r'''
g['z2'] = g['z2'] + g['mf'] / D
check('z2', g['z2'], fw.z2.grad)
''',
    r'''
g['mlp'] = g['z2']
g['z1'] = g['z2'].clone()
check('mlp', g['mlp'], fw.mlp.grad)
''',
    r'''
g['hid_act'] = torch.matmul(g['mlp'], P['W2'].detach().T)
g['W2'] = torch.matmul(fw.hid_act.detach().reshape(-1, 4 * D).T, g['mlp'].reshape(-1, D))
g['b2'] = g['mlp'].sum((0, 1))
check('hid_act', g['hid_act'], fw.hid_act.grad)
check('W2', g['W2'], P['W2'].grad)
check('b2', g['b2'], P['b2'].grad)
''',
    r'''
x_ = fw.hid.detach()
th = torch.tanh(GELU_K * (x_ + 0.044715 * x_**3))
g['hid'] = g['hid_act'] * (0.5 * (1 + th) + 0.5 * x_ * (1 - th**2) * GELU_K * (1 + 3 * 0.044715 * x_**2))
check('hid', g['hid'], fw.hid.grad)
''',
    r'''
g['a2'] = torch.matmul(g['hid'], P['W1'].detach().T)
g['W1'] = torch.matmul(fw.a2.detach().reshape(-1, D).T, g['hid'].reshape(-1, 4 * D))
g['b1'] = g['hid'].sum((0, 1))
check('a2', g['a2'], fw.a2.grad)
check('W1', g['W1'], P['W1'].grad)
check('b1', g['b1'], P['b1'].grad)
''',
    r'''
g['nrm2'] = g['a2'] * P['n2_g'].detach()
g['n2_g'] = (g['a2'] * fw.nrm2.detach()).sum((0, 1))
g['n2_b'] = g['a2'].sum((0, 1))
check('nrm2', g['nrm2'], fw.nrm2.grad)
check('n2_g', g['n2_g'], P['n2_g'].grad)
check('n2_b', g['n2_b'], P['n2_b'].grad)
''',
    r'''
dn = g['nrm2']
nrm2 = fw.nrm2.detach()
g['z1'] = g['z1'] + fw.r2.detach() * (dn - dn.mean(-1, keepdim=True) - nrm2 * (dn * nrm2).mean(-1, keepdim=True))
check('z1', g['z1'], fw.z1.grad)
''',
    ("md", "## the functions (exercise 2)"),
    r'''
def encoder_backward(dout, inp, vocab_size):
    C = dout.shape[-1]
    dwte = torch.zeros(vocab_size, C).index_add_(0, inp.reshape(-1), dout.reshape(-1, C))
    return dwte, dout.sum(0)

def layernorm_backward(dout, inp, weight, mean, rstd):
    C = inp.shape[-1]
    nrm = (inp - mean) * rstd
    dn = dout * weight
    dinp = rstd * (dn - dn.mean(-1, keepdim=True) - nrm * (dn * nrm).mean(-1, keepdim=True))
    return dinp, (dout * nrm).reshape(-1, C).sum(0), dout.reshape(-1, C).sum(0)

def matmul_backward(dout, inp, weight):
    C, OC = weight.shape
    return (torch.matmul(dout, weight.T), torch.matmul(inp.reshape(-1, C).T, dout.reshape(-1, OC)),
            dout.reshape(-1, OC).sum(0))

def attention_backward(dout, qkv, att, n_head):
    B, T, C3 = qkv.shape
    C = C3 // 3
    hd = C // n_head
    q, k, v = [t.reshape(B, T, n_head, hd).transpose(1, 2) for t in qkv.split(C, dim=-1)]
    dheads = dout.reshape(B, T, n_head, hd).transpose(1, 2)
    dprobs = torch.matmul(dheads, v.transpose(-1, -2))
    dv = torch.matmul(att.transpose(-1, -2), dheads)
    dsc = att * (dprobs - (att * dprobs).sum(-1, keepdim=True)) * hd**-0.5
    dq = torch.matmul(dsc, k)
    dk = torch.matmul(dsc.transpose(-1, -2), q)
    return torch.cat([t.transpose(1, 2).reshape(B, T, C) for t in (dq, dk, dv)], dim=-1)

def gelu_backward(dout, inp):
    th = torch.tanh(GELU_K * (inp + 0.044715 * inp**3))
    return dout * (0.5 * (1 + th) + 0.5 * inp * (1 - th**2) * GELU_K * (1 + 3 * 0.044715 * inp**2))

def crossentropy_softmax_backward(logits, targets):
    p_ = logits.softmax(-1)
    p_[torch.arange(len(targets)), targets] -= 1
    return p_ / len(targets)

def adamw_update(param, grad, m, v, t, lr, beta1, beta2, eps, weight_decay):
    m.mul_(beta1).add_((1 - beta1) * grad)
    v.mul_(beta2).add_((1 - beta2) * grad * grad)
    mh = m / (1 - beta1**t)
    vh = v / (1 - beta2**t)
    param.sub_(lr * (mh / (vh.sqrt() + eps) + weight_decay * param))
''',
    r'''
# each against autograd
x_ = torch.randn(2, 5, 3 * 8, requires_grad=True)
def attn_fwd(qkv, nh):
    B, T, C3 = qkv.shape
    C = C3 // 3
    q, k, v = [t.reshape(B, T, nh, C // nh).transpose(1, 2) for t in qkv.split(C, dim=-1)]
    s = (torch.matmul(q, k.transpose(-1, -2)) * (C // nh)**-0.5).masked_fill(
        torch.tril(torch.ones(T, T)) == 0, float('-inf'))
    att = s.softmax(-1)
    return torch.matmul(att, v).transpose(1, 2).reshape(B, T, C), att
y_, att_ = attn_fwd(x_, 2)
dy_ = torch.randn_like(y_)
print('attention', torch.allclose(attention_backward(dy_, x_.detach(), att_.detach(), 2),
                                  torch.autograd.grad(y_, x_, dy_)[0], atol=1e-5))
h_ = torch.randn(4, 6, requires_grad=True)
gelu_ = 0.5 * h_ * (1 + torch.tanh(GELU_K * (h_ + 0.044715 * h_**3)))
dg_ = torch.randn(4, 6)
print('gelu', torch.allclose(gelu_backward(dg_, h_.detach()), torch.autograd.grad(gelu_, h_, dg_)[0]))
lg_ = torch.randn(9, 5, requires_grad=True)
tg_ = torch.randint(0, 5, (9,))
print('xent', torch.allclose(crossentropy_softmax_backward(lg_.detach(), tg_),
                             torch.autograd.grad(F.cross_entropy(lg_, tg_), lg_)[0]))
''',
    ("md", "## exercise 3: train on the functions"),
    r'''
def model_backward(P, fw, X):
    B, T = X.shape
    gr = {}
    dlog = crossentropy_softmax_backward(fw.logits.reshape(-1, VS), fw.targets.reshape(-1))
    daf, dET, _ = matmul_backward(dlog.reshape(B, T, VS), fw.af, P['E'].T)
    dz2, gr['nf_g'], gr['nf_b'] = layernorm_backward(daf, fw.z2, P['nf_g'], fw.mf, fw.rf)
    dhid_act, gr['W2'], gr['b2'] = matmul_backward(dz2, fw.hid_act, P['W2'])
    da2, gr['W1'], gr['b1'] = matmul_backward(gelu_backward(dhid_act, fw.hid), fw.a2, P['W1'])
    dz1, gr['n2_g'], gr['n2_b'] = layernorm_backward(da2, fw.z1, P['n2_g'], fw.m2, fw.r2)
    dz1 = dz1 + dz2
    dmerged, gr['Wo'], gr['bo'] = matmul_backward(dz1, fw.merged, P['Wo'])
    dqkv = attention_backward(dmerged, fw.qkv, fw.probs, NH)
    da1, gr['Wqkv'], gr['bqkv'] = matmul_backward(dqkv, fw.a1, P['Wqkv'])
    dz0, gr['n1_g'], gr['n1_b'] = layernorm_backward(da1, fw.z0, P['n1_g'], fw.m1, fw.r1)
    dz0 = dz0 + dz1
    dE, gr['Pos'] = encoder_backward(dz0, X, VS)
    gr['E'] = dE + dET.T
    return gr

for t_ in P.values():
    t_.requires_grad_(False)
    t_.grad = None
mom = {k_: torch.zeros_like(t_) for k_, t_ in P.items()}
sec = {k_: torch.zeros_like(t_) for k_, t_ in P.items()}
history = []
''',
    r'''
for step in range(1, 201):
    bi = torch.randint(0, len(Xtr), (8,))
    xb, yb = Xtr[bi], Ytr[bi]
    acts_ = gpt_forward(P, xb, yb)
    grads = model_backward(P, acts_, xb)
    for k_ in P:
        adamw_update(P[k_], grads[k_], mom[k_], sec[k_], step, 1e-2, 0.9, 0.99, 1e-8, 0.0)
    history.append(acts_.loss.item())
print(history[0], sum(history[-20:]) / 20)
''',
]

GPTV2_FWD = {"x0": "fw.z0", "x1": "fw.z1", "x2": "fw.z2", "tok": "fw.tok", "lnf": "fw.af",
             "lnf_norm": "fw.nrmf", "lnf_rstd": "fw.rf", "lnf_var": "fw.varf", "lnf_xc": "fw.xcf",
             "lnf_mean": "fw.mf", "fcproj": "fw.mlp", "fch_gelu": "fw.hid_act", "fch": "fw.hid",
             "ln2": "fw.a2", "ln2_norm": "fw.nrm2", "logits": "fw.logits",
             "wte": "P['E']", "lnfw": "P['nf_g']", "lnfb": "P['nf_b']", "fcprojw": "P['W2']",
             "fcprojb": "P['b2']", "fcw": "P['W1']", "fcb": "P['b1']", "ln2w": "P['n2_g']",
             "ln2b": "P['n2_b']"}
GPTV2_KEY = {"x1": "z1", "x2": "z2", "lnf": "af", "lnf_norm": "nrmf", "lnf_rstd": "rf",
             "lnf_var": "varf", "lnf_xc": "xcf", "lnf_mean": "mf", "fcproj": "mlp",
             "fch_gelu": "hid_act", "fch": "hid", "ln2": "a2", "ln2_norm": "nrm2",
             "logits": "logits", "wte": "E", "lnfw": "nf_g", "lnfb": "nf_b", "fcprojw": "W2",
             "fcprojb": "b2", "fcw": "W1", "fcb": "b1", "ln2w": "n2_g", "ln2b": "n2_b"}
GPTV2_STEPS = GPT_STEPS[:GPT_STEPS.index("block/x1") + 1]

add("gpt_v2_namedtuple_forward_functions_adamw", "gpt", GPTV2_CELLS,
    GPTV2_STEPS + GPT_FUNCS + ["train/gpt"],
    notes="own data (Random(99)), parameters in a dict under own names, gpt_forward returning a "
          "namedtuple Acts of renamed activations, torch.matmul products; exercise 1 from logits "
          "down to x1 in a dict g with every first branch held, check(name, mine, ref); the "
          "seven functions, print(torch.allclose(...)); model_backward on them, 200 steps of "
          "own adamw_update, batch 8 (the check batch 6); all right",
    loss="fw.loss",
    where=where("gpt", GPTV2_STEPS, fwd=GPTV2_FWD, grad=lambda k: f"g['{GPTV2_KEY[k]}']",
                first_after={"wte": "g['E'] = torch.matmul(g['logits']",
                             "lnf_xc": "g['xcf'] = g['nrmf'] * fw.rf.detach()",
                             "x2": "g['z2'] = g['xcf'].clone()",
                             "x1": "g['z1'] = g['z2'].clone()"}),
    checkpoint="check('z1', g['z1'], fw.z1.grad)",
    functions={s: None for s in GPT_FUNCS},
    train={"cell": "for step in range(1, 201)", "probe": "for k_ in P:",
           "params": "P", "grads": "grads", "ref": "lambda Q: gpt_forward(Q, xb, yb).loss",
           "losses": "history"})

# ================================================================================================
# LSTM V1 (right throughout). Own data (random.seed(11), rows built in a loop and padded with -1
# targets), an `LSTMNet` class holding its parameters as attributes under its own names (table,
# W_in, W_rec, bias, W_head, b_head) whose forward runs the steps before and after t with a
# per-time-step Python loop of its own (`unroll`, torch.stack of the per-step states) where the
# lesson calls run_lstm, and keeps every activation in `self.cache` under its own names (x_emb,
# early / late, h_in / c_in, x_now, Wx_now, pre, pre_i..pre_o, gi / gf / gg / go, cell, hid,
# pair, all_h, scores), h_in / c_in read back as the last of the stacked early states; one
# `backward()` method filling a dict `self.d`, the future's share read from `pair.grad`, the
# early states' gradient completed with step t's dh_in at their last position; exercise 3's fused gates as a second method. Checks by a loop printing
# `(mine - ref).abs().max()`. Batch 20; exercises 1 and 3's fused gates only.

LSTMV1_CELLS = [
    md("# LSTM, one step by hand\nThe network is a class; the forward keeps its tensors in "
       "`self.cache`. Steps before and after t are my own loop."),
    r'''
import random
import torch
import torch.nn.functional as F
''',
    r'''
with open('names.txt') as fh:
    words = fh.read().split()
random.seed(11)
random.shuffle(words)
abc = sorted(set(''.join(words)))
s2i = {ch: j + 1 for j, ch in enumerate(abc)}
s2i['.'] = 0
V = len(s2i)
width = max(map(len, words)) + 1
Xs, Ys = [], []
for w in words:
    ids = [s2i[ch] for ch in w]
    Xs.append([0] + ids + [0] * (width - len(ids) - 1))
    Ys.append(ids + [0] + [-1] * (width - len(ids) - 1))
Xs, Ys = torch.tensor(Xs), torch.tensor(Ys)
n_train = int(0.8 * len(words))
''',
    r'''
class LSTMNet:
    def __init__(self, V, D, H, seed):
        gen = torch.Generator().manual_seed(seed)
        self.V, self.D, self.H = V, D, H
        self.table = torch.randn(V, D, generator=gen)
        self.W_in = torch.randn(D, 4 * H, generator=gen) * D**-0.5
        self.W_rec = torch.randn(H, 4 * H, generator=gen) * H**-0.5
        self.bias = torch.randn(4 * H, generator=gen) * 0.1
        self.bias[H:2 * H] += 1.0
        self.W_head = torch.randn(H, V, generator=gen) * H**-0.5
        self.b_head = torch.randn(V, generator=gen) * 0.1
        self.cache = {}

    def params(self):
        return [self.table, self.W_in, self.W_rec, self.bias, self.W_head, self.b_head]

    def cell_step(self, x, h, c):
        H = self.H
        z = x @ self.W_in + h @ self.W_rec + self.bias
        i, f = torch.sigmoid(z[:, :H]), torch.sigmoid(z[:, H:2 * H])
        g, o = torch.tanh(z[:, 2 * H:3 * H]), torch.sigmoid(z[:, 3 * H:])
        c = f * c + i * g
        return o * torch.tanh(c), c

    def unroll(self, xs, h, c):
        if xs.shape[1] == 0:
            return xs.new_zeros(xs.shape[0], 0, self.H), xs.new_zeros(xs.shape[0], 0, self.H)
        hs, cs = [], []
        for s in range(xs.shape[1]):
            h, c = self.cell_step(xs[:, s], h, c)
            hs.append(h)
            cs.append(c)
        return torch.stack(hs, 1), torch.stack(cs, 1)

    def forward(self, X, Y, t):
        H = self.H
        c = self.cache = {'t': t, 'Y': Y}
        c['x_emb'] = self.table[X]
        zero = c['x_emb'].new_zeros(X.shape[0], H)
        c['early'], cs_early = self.unroll(c['x_emb'][:, :t], zero, zero)
        c['h_in'], c['c_in'] = c['early'][:, -1], cs_early[:, -1]
        c['x_now'] = c['x_emb'][:, t]
        c['Wx_now'] = self.W_in.clone()
        c['Wh_now'] = self.W_rec.clone()
        c['b_now'] = self.bias.clone()
        c['pre'] = c['x_now'] @ c['Wx_now'] + c['h_in'] @ c['Wh_now'] + c['b_now']
        for j, nm in enumerate(['pre_i', 'pre_f', 'pre_g', 'pre_o']):
            c[nm] = c['pre'][:, j * H:(j + 1) * H]
        c['gi'] = torch.sigmoid(c['pre_i'])
        c['gf'] = torch.sigmoid(c['pre_f'])
        c['gg'] = torch.tanh(c['pre_g'])
        c['go'] = torch.sigmoid(c['pre_o'])
        c['cell'] = c['gf'] * c['c_in'] + c['gi'] * c['gg']
        c['hid'] = c['go'] * torch.tanh(c['cell'])
        c['pair'] = torch.stack([c['hid'], c['cell']])
        c['late'], _ = self.unroll(c['x_emb'][:, t + 1:], c['pair'][0], c['pair'][1])
        c['all_h'] = torch.cat([c['early'], c['hid'][:, None], c['late']], 1)
        c['scores'] = c['all_h'] @ self.W_head + self.b_head
        return F.cross_entropy(c['scores'].reshape(-1, self.V), Y.reshape(-1), ignore_index=-1)

    def backward(self):
        c, t, V = self.cache, self.cache['t'], self.V
        d = {}
        valid = (c['Y'] >= 0).float()
        onehot = F.one_hot(c['Y'].clamp(min=0), V).float()
        d['scores'] = (F.softmax(c['scores'], -1) - onehot) * (valid / valid.sum())[:, :, None]
        d['all_h'] = d['scores'] @ self.W_head.T
        d['W_head'] = torch.einsum('bth,btv->hv', c['all_h'], d['scores'])
        d['b_head'] = d['scores'].sum((0, 1))
        d['early'] = d['all_h'][:, :t].clone()
        d['late'] = d['all_h'][:, t + 1:]
        future = c['pair'].grad        # autograd's, through the steps after t
        d['hid'] = d['all_h'][:, t] + future[0]
        tc = torch.tanh(c['cell'])
        d['go'] = d['hid'] * tc
        d['cell'] = future[1] + d['hid'] * c['go'] * (1 - tc**2)
        d['gf'] = d['cell'] * c['c_in']
        d['c_in'] = d['cell'] * c['gf']
        d['gi'] = d['cell'] * c['gg']
        d['gg'] = d['cell'] * c['gi']
        d['pre_i'] = d['gi'] * c['gi'] * (1 - c['gi'])
        d['pre_f'] = d['gf'] * c['gf'] * (1 - c['gf'])
        d['pre_o'] = d['go'] * c['go'] * (1 - c['go'])
        d['pre_g'] = d['gg'] * (1 - c['gg']**2)
        d['pre'] = torch.cat([d['pre_i'], d['pre_f'], d['pre_g'], d['pre_o']], dim=1)
        d['x_now'] = d['pre'] @ c['Wx_now'].T
        d['h_in'] = d['pre'] @ c['Wh_now'].T
        d['Wx_now'] = c['x_now'].T @ d['pre']
        d['Wh_now'] = c['h_in'].T @ d['pre']
        d['b_now'] = d['pre'].sum(0)
        d['early'][:, -1] += d['h_in']     # h_in is early's last step in my forward
        self.d = d

    def fused_gates(self):
        c, d = self.cache, self.d
        slopes = torch.cat([c['gi'] * (1 - c['gi']), c['gf'] * (1 - c['gf']), 1 - c['gg']**2,
                            c['go'] * (1 - c['go'])], dim=1)
        return torch.cat([d['gi'], d['gf'], d['gg'], d['go']], dim=1) * slopes
''',
    r'''
net = LSTMNet(V, 10, 32, seed=2023)
for p in net.params():
    p.requires_grad_(True)
gb = torch.Generator().manual_seed(3)
rows = torch.randint(0, n_train, (20,), generator=gb)
Xb, Yb = Xs[rows], Ys[rows]
Tb = int((Yb >= 0).sum(1).max())
Xb, Yb = Xb[:, :Tb], Yb[:, :Tb]
loss = net.forward(Xb, Yb, t=3)
for v_ in net.cache.values():
    if isinstance(v_, torch.Tensor) and v_.requires_grad:
        v_.retain_grad()
loss.backward()
print(loss.item(), Xb.shape)
''',
    r'''
with torch.no_grad():
    net.backward()
    dpre_fused = net.fused_gates()
''',
    r'''
owners = {'W_head': net.W_head, 'b_head': net.b_head}
for key, mine in net.d.items():
    ref = owners[key].grad if key in owners else net.cache[key].grad
    print(f"{key:8s}", (mine - ref).abs().max().item())
print('fused', (dpre_fused - net.cache['pre'].grad).abs().max().item())
''',
]

LSTMV1_MAP = {"logits": "scores", "hs": "all_h", "hs_before": "early", "hs_after": "late",
              "h": "hid", "c": "cell", "state": "pair", "o": "go", "f": "gf", "i": "gi",
              "g": "gg", "c_prev": "c_in", "h_prev": "h_in", "ai": "pre_i", "af": "pre_f",
              "ag": "pre_g", "ao": "pre_o", "ifgo": "pre", "x_t": "x_now", "Wx_t": "Wx_now",
              "Wh_t": "Wh_now", "b_t": "b_now"}
LSTMV1_FWD = {**{k: f"net.cache['{v}']" for k, v in LSTMV1_MAP.items()},
              "Wy": "net.W_head", "by": "net.b_head", "t": "3"}
LSTMV1_GRAD = {**{k: f"net.d['{v}']" for k, v in LSTMV1_MAP.items()},
               "Wy": "net.d['W_head']", "by": "net.d['b_head']"}

add("lstm_v1_class_cache_own_unroll", "lstm", LSTMV1_CELLS, LSTM_STEPS + ["fused/gates"],
    notes="own data (random.seed(11)), LSTMNet class with parameters as attributes under own "
          "names, its own per-step loop (torch.stack) before and after t, every activation in "
          "self.cache under own names; one backward() method into a dict, future share from "
          "pair.grad; fused gates as a method; max-abs-diff prints; batch 20; exercises 1 and "
          "3's fused gates; all right",
    where={**no_first(where("lstm", LSTM_STEPS, fwd=LSTMV1_FWD, grad=LSTMV1_GRAD.__getitem__,
                            first_after=DROP)),
           "fused/gates": [("dpre_fused", "G(net.cache['pre'])")]},
    checkpoint="dpre_fused = net.fused_gates()")

# ================================================================================================
# LSTM V2 (right throughout). Own data (a Generator(404) randperm, one padded tensor built by
# slicing), the setup's run_lstm copied for the steps before and after t; the parameters in a
# list `theta` read through index constants (EMB, WX, WH, BIAS, WY, BY); a `step_forward(theta,
# X, Y, t)` function returning a dataclass `StepCache` of renamed activations (e, H_early, h_m1,
# c_m1, x3, Wx3, Wh3, b3, z, zi / zf / zg / zo, si / sf / tg / so, c3, h3, hc, H_late, H_all,
# out). Exercise 1 as small functions each returning a tuple the caller unpacks, every first
# branch held; `torch.testing.assert_close` on each step. Exercise 3 (fused gates,
# lstm_step_backward), exercise 2's lstm_backward on lstm_step_backward over a torch.stack'ed
# own per-step forward, and 200 steps of SGD on it, batch 16.

LSTMV2_CELLS = [
    r'''
from dataclasses import dataclass
from collections import namedtuple
import torch
import torch.nn.functional as F
''',
    r'''
text = open("names.txt", "r").read()
names = text.splitlines()
perm = torch.randperm(len(names), generator=torch.Generator().manual_seed(404))
names = [names[j] for j in perm]
chars = sorted(set("".join(names)))
stoi = {c: j + 1 for j, c in enumerate(chars)}
stoi["."] = 0
vocab_size = len(stoi)
L = max(len(nm) for nm in names) + 1
X_all = torch.zeros(len(names), L, dtype=torch.long)
Y_all = torch.full((len(names), L), -1, dtype=torch.long)
for r, nm in enumerate(names):
    ids = torch.tensor([stoi[c] for c in nm])
    X_all[r, 1:len(nm) + 1] = ids
    Y_all[r, :len(nm)] = ids
    Y_all[r, len(nm)] = 0
X_tr, Y_tr = X_all[:25000], Y_all[:25000]

def draw(bs, gen):
    pick = torch.randint(0, len(X_tr), (bs,), generator=gen)
    xb, yb = X_tr[pick], Y_tr[pick]
    T = int((yb >= 0).sum(1).max())
    return xb[:, :T].contiguous(), yb[:, :T].contiguous()
''',
    r'''
LSTMRun = namedtuple("LSTMRun", ["hs", "h", "c"])

def run_lstm(xs, h, c, Wx, Wh, b):
    hs, h, c = torch.lstm(xs, (h[None], c[None]), (Wx.T, Wh.T, b, b * 0), True, 1, 0.0, False,
                          False, True)
    return LSTMRun(hs, h[0], c[0])
''',
    r'''
EMB, WX, WH, BIAS, WY, BY = range(6)
n_embd, n_hidden, t_mid = 10, 32, 3
gen = torch.Generator().manual_seed(777)
theta = [torch.randn(vocab_size, n_embd, generator=gen),
         torch.randn(n_embd, 4 * n_hidden, generator=gen) * n_embd**-0.5,
         torch.randn(n_hidden, 4 * n_hidden, generator=gen) * n_hidden**-0.5,
         torch.randn(4 * n_hidden, generator=gen) * 0.1,
         torch.randn(n_hidden, vocab_size, generator=gen) * n_hidden**-0.5,
         torch.randn(vocab_size, generator=gen) * 0.1]
theta[BIAS][n_hidden:2 * n_hidden] += 1.0
for p in theta:
    p.requires_grad_()
''',
    r'''
@dataclass
class StepCache:
    e: torch.Tensor
    H_early: torch.Tensor
    h_m1: torch.Tensor
    c_m1: torch.Tensor
    x3: torch.Tensor
    Wx3: torch.Tensor
    Wh3: torch.Tensor
    b3: torch.Tensor
    z: torch.Tensor
    zi: torch.Tensor
    zf: torch.Tensor
    zg: torch.Tensor
    zo: torch.Tensor
    si: torch.Tensor
    sf: torch.Tensor
    tg: torch.Tensor
    so: torch.Tensor
    c3: torch.Tensor
    h3: torch.Tensor
    hc: torch.Tensor
    H_late: torch.Tensor
    H_all: torch.Tensor
    out: torch.Tensor
    loss: torch.Tensor

def step_forward(theta, X, Y, t):
    H = n_hidden
    e = theta[EMB][X]
    zero = e.new_zeros(X.shape[0], H)
    early = run_lstm(e[:, :t], zero, zero, theta[WX], theta[WH], theta[BIAS])
    x3 = e[:, t]
    Wx3, Wh3, b3 = theta[WX].clone(), theta[WH].clone(), theta[BIAS].clone()
    z = x3 @ Wx3 + early.h @ Wh3 + b3
    zi, zf, zg, zo = z[:, :H], z[:, H:2 * H], z[:, 2 * H:3 * H], z[:, 3 * H:]
    si, sf, tg, so = zi.sigmoid(), zf.sigmoid(), zg.tanh(), zo.sigmoid()
    c3 = sf * early.c + si * tg
    h3 = so * c3.tanh()
    hc = torch.stack([h3, c3])
    late = run_lstm(e[:, t + 1:], hc[0], hc[1], theta[WX], theta[WH], theta[BIAS])
    H_all = torch.cat([early.hs, h3[:, None], late.hs], 1)
    out = H_all @ theta[WY] + theta[BY]
    loss = F.cross_entropy(out.view(-1, vocab_size), Y.view(-1), ignore_index=-1)
    return StepCache(e, early.hs, early.h, early.c, x3, Wx3, Wh3, b3, z, zi, zf, zg, zo, si, sf,
                     tg, so, c3, h3, hc, late.hs, H_all, out, loss)
''',
    r'''
Xb, Yb = draw(16, gen)
sc = step_forward(theta, Xb, Yb, t_mid)
for v_ in vars(sc).values():
    if v_.requires_grad:
        v_.retain_grad()
sc.loss.backward()
print(sc.loss.item(), Xb.shape)

def same(mine, t):
    torch.testing.assert_close(mine, t.grad, rtol=1e-4, atol=1e-6)
''',
    r'''
def xent_back(out, Y):
    keep = (Y >= 0).float()
    p = out.softmax(-1)
    p = p - F.one_hot(Y.clamp(min=0), vocab_size).float()
    return p * keep.unsqueeze(-1) / keep.sum()

def head_back(dout, H_all, Wy):
    return dout @ Wy.T, torch.einsum("bth,btv->hv", H_all, dout), dout.sum((0, 1))

def split_back(dH_all, t):
    return dH_all[:, :t], dH_all[:, t].clone(), dH_all[:, t + 1:]

with torch.no_grad():
    dout = xent_back(sc.out, Yb)
    dH_all, dWy, dby = head_back(dout, sc.H_all, theta[WY])
    dH_early, dh3, dH_late = split_back(dH_all, t_mid)
same(dout, sc.out)
same(dH_all, sc.H_all); same(dWy, theta[WY]); same(dby, theta[BY])
same(dH_early, sc.H_early); same(dH_late, sc.H_late)
''',
    r'''
dh3 = dh3 + sc.hc.grad[0]
dc3 = sc.hc.grad[1].clone()
same(dh3, sc.h3)
''',
    r'''
def h_back(dh, dc, so, c3):
    tc = c3.tanh()
    return dh * tc, dc + dh * so * (1 - tc * tc)

def c_back(dc, sf, c_m1, si, tg):
    return dc * c_m1, dc * sf, dc * tg, dc * si

with torch.no_grad():
    dso, dc3 = h_back(dh3, dc3, sc.so, sc.c3)
    dsf, dc_m1, dsi, dtg = c_back(dc3, sc.sf, sc.c_m1, sc.si, sc.tg)
same(dso, sc.so); same(dc3, sc.c3)
same(dsf, sc.sf); same(dc_m1, sc.c_m1); same(dsi, sc.si); same(dtg, sc.tg)
''',
    r'''
def sig_back(dy, y):
    return dy * y * (1 - y)

with torch.no_grad():
    dzi, dzf, dzo = sig_back(dsi, sc.si), sig_back(dsf, sc.sf), sig_back(dso, sc.so)
    dzg = dtg * (1 - sc.tg**2)
    dz = torch.cat([dzi, dzf, dzg, dzo], 1)
for mine, t_ in [(dzi, sc.zi), (dzf, sc.zf), (dzo, sc.zo), (dzg, sc.zg), (dz, sc.z)]:
    same(mine, t_)
''',
    r'''
def affine_back(dz, x, h, Wx, Wh):
    return dz @ Wx.T, dz @ Wh.T, x.T @ dz, h.T @ dz, dz.sum(0)

with torch.no_grad():
    dx3, dh_m1, dWx3, dWh3, db3 = affine_back(dz, sc.x3, sc.h_m1, sc.Wx3, sc.Wh3)
for mine, t_ in [(dx3, sc.x3), (dh_m1, sc.h_m1), (dWx3, sc.Wx3), (dWh3, sc.Wh3), (db3, sc.b3)]:
    same(mine, t_)
print("exercise 1 passes")
''',
    ("md", "## exercise 3"),
    r'''
with torch.no_grad():
    gates3 = torch.cat([sc.si, sc.sf, sc.tg, sc.so], 1)
    dz_one = torch.cat([dsi, dsf, dtg, dso], 1) * torch.cat(
        [sc.si * (1 - sc.si), sc.sf * (1 - sc.sf), 1 - sc.tg**2, sc.so * (1 - sc.so)], 1)
same(dz_one, sc.z)
''',
    r'''
def lstm_step_backward(dh, dc, x, h_prev, c_prev, c, gates, Wx, Wh):
    H = h_prev.shape[1]
    i, f, g, o = gates[:, :H], gates[:, H:2 * H], gates[:, 2 * H:3 * H], gates[:, 3 * H:]
    tc = torch.tanh(c)
    do = dh * tc
    dc = dc + dh * o * (1 - tc**2)
    dz = torch.cat([dc * g * i * (1 - i), dc * c_prev * f * (1 - f), dc * i * (1 - g**2),
                    do * o * (1 - o)], 1)
    return dz @ Wx.T, dz @ Wh.T, dc * f, x.T @ dz, h_prev.T @ dz, dz.sum(0)

with torch.no_grad():
    got = lstm_step_backward(dh3, sc.hc.grad[1], sc.x3, sc.h_m1, sc.c_m1, sc.c3, gates3, sc.Wx3,
                             sc.Wh3)
for mine, t_ in zip(got, [sc.x3, sc.h_m1, sc.c_m1, sc.Wx3, sc.Wh3, sc.b3]):
    same(mine, t_)
''',
    ("md", "## exercise 2 and training"),
    r'''
def lstm_seq(xs, h, c, Wx, Wh, b):
    H = Wh.shape[0]
    hs, cs, gs = [], [], []
    for s in range(xs.shape[1]):
        z = xs[:, s] @ Wx + h @ Wh + b
        g4 = torch.cat([z[:, :2 * H].sigmoid(), z[:, 2 * H:3 * H].tanh(), z[:, 3 * H:].sigmoid()], 1)
        c = g4[:, H:2 * H] * c + g4[:, :H] * g4[:, 2 * H:3 * H]
        h = g4[:, 3 * H:] * c.tanh()
        hs.append(h)
        cs.append(c)
        gs.append(g4)
    return torch.stack(hs, 1), torch.stack(cs, 1), torch.stack(gs, 1)

def lstm_backward(dhs, xs, h0, c0, hs, cs, gates, Wx, Wh):
    T = xs.shape[1]
    dxs = [None] * T
    dWx, dWh, db = 0, 0, 0
    dh, dc = torch.zeros_like(h0), torch.zeros_like(c0)
    for s in range(T - 1, -1, -1):
        hp, cp = (hs[:, s - 1], cs[:, s - 1]) if s > 0 else (h0, c0)
        dxs[s], dh, dc, gWx, gWh, gb = lstm_step_backward(dh + dhs[:, s], dc, xs[:, s], hp, cp,
                                                          cs[:, s], gates[:, s], Wx, Wh)
        dWx, dWh, db = dWx + gWx, dWh + gWh, db + gb
    return torch.stack(dxs, 1), dh, dc, dWx, dWh, db
''',
    r'''
for p in theta:
    p.requires_grad_(False)
curve = []
for it in range(200):
    xb, yb = draw(16, gen)
    B = xb.shape[0]
    xe = theta[EMB][xb]
    zeros = torch.zeros(B, n_hidden)
    hs_, cs_, gs_ = lstm_seq(xe, zeros, zeros, theta[WX], theta[WH], theta[BIAS])
    logit_ = hs_ @ theta[WY] + theta[BY]
    lv = F.cross_entropy(logit_.view(-1, vocab_size), yb.view(-1), ignore_index=-1)
    dlog = xent_back(logit_, yb)
    dhs_, gWy, gby = head_back(dlog, hs_, theta[WY])
    dxe, _, _, gWx, gWh, gb = lstm_backward(dhs_, xe, zeros, zeros, hs_, cs_, gs_, theta[WX],
                                            theta[WH])
    gE = torch.zeros_like(theta[EMB]).index_add_(0, xb.flatten(), dxe.reshape(-1, n_embd))
    grads = [gE, gWx, gWh, gb, gWy, gby]
    for j in range(6):
        theta[j] -= 1.0 * grads[j]
    curve.append(lv.item())
print(curve[0], sum(curve[-20:]) / 20)
''',
]

LSTMV2_FWD = {"logits": "sc.out", "hs": "sc.H_all", "hs_before": "sc.H_early",
              "hs_after": "sc.H_late", "h": "sc.h3", "c": "sc.c3", "state": "sc.hc",
              "o": "sc.so", "f": "sc.sf", "i": "sc.si", "g": "sc.tg", "c_prev": "sc.c_m1",
              "h_prev": "sc.h_m1", "ai": "sc.zi", "af": "sc.zf", "ag": "sc.zg", "ao": "sc.zo",
              "ifgo": "sc.z", "x_t": "sc.x3", "Wx_t": "sc.Wx3", "Wh_t": "sc.Wh3", "b_t": "sc.b3",
              "Wy": "theta[WY]", "by": "theta[BY]", "t": "t_mid"}
LSTMV2_GRAD = {"logits": "dout", "hs": "dH_all", "hs_before": "dH_early", "hs_after": "dH_late",
               "h": "dh3", "c": "dc3", "o": "dso", "f": "dsf", "i": "dsi", "g": "dtg",
               "c_prev": "dc_m1", "h_prev": "dh_m1", "ai": "dzi", "af": "dzf", "ag": "dzg",
               "ao": "dzo", "ifgo": "dz", "x_t": "dx3", "Wx_t": "dWx3", "Wh_t": "dWh3",
               "b_t": "db3", "Wy": "dWy", "by": "dby"}
LSTMV2_PN = "['C', 'Wx', 'Wh', 'b', 'Wy', 'by']"

add("lstm_v2_dataclass_theta_list_tuples_sgd", "lstm", LSTMV2_CELLS, LSTM_ALL,
    notes="own data (randperm(404)), setup's run_lstm, parameters in a list theta read by index "
          "constants, step_forward returning a dataclass of renamed activations; exercise 1 as "
          "tuple-returning functions with every first branch held, torch.testing.assert_close; "
          "fused gates and lstm_step_backward; lstm_backward on the step over its own "
          "torch.stack'ed forward; SGD 200 steps, batch 16; all right",
    where={**where("lstm", LSTM_STEPS, fwd=LSTMV2_FWD, grad=LSTMV2_GRAD.__getitem__,
                   first_after={"h": "dH_early, dh3, dH_late = split_back(dH_all, t_mid)",
                                "c": "dc3 = sc.hc.grad[1].clone()"}),
           "fused/gates": [("dz_one", "G(sc.z)")]},
    loss="sc.loss",
    checkpoint="same(dz_one, sc.z)",
    functions={"bptt/lstm_backward": None, "fused/lstm_step_backward": None},
    train={"cell": "for it in range(200)", "probe": "for j in range(6):",
           "params": f"dict(zip({LSTMV2_PN}, theta))", "grads": f"dict(zip({LSTMV2_PN}, grads))",
           "ref": "lambda Q: ref_lstm_loss(Q, xb, yb)", "losses": "curve"})

# ================================================================================================
# CONV V1 (right throughout). Own data (random.seed(123), contexts of 8 built in a loop), a
# `WaveNet` class whose parameters are attributes (net.table, net.convs[i].w / .b, net.W_out,
# net.b_out) and whose forward, written with a manual unfold (`xp.unfold(2, d + 1, 1)[..., ::d]`)
# and torch.einsum where the lesson calls F.conv1d, keeps every activation in `net.cache` under
# its own names (E, xT, z1 / a1, z2 / a2, z3 / a3, feat, logits); per-layer backward methods (each
# CausalConv's backward stores dw / db on itself and returns the input's gradient, built by
# folding the taps back with index_add_); activation gradients in a parallel dict `net.dcache`;
# a `check(name, mine, ref)` helper. Training: 300 steps of SGD on net.step(), batch 32 (the
# check batch 40).

CONVV1_CELLS = [
    md("# WaveNet backward, class edition\nConvolutions written as unfold + einsum so I can see "
       "the taps."),
    r'''
import random
import torch
import torch.nn.functional as F
''',
    r'''
words = open('names.txt').read().splitlines()
random.seed(123)
random.shuffle(words)
itos = ['.'] + sorted(set(''.join(words)))
stoi = {ch: j for j, ch in enumerate(itos)}
CTX = 8
X, Y = [], []
for w in words[:int(0.8 * len(words))]:
    ctx = [0] * CTX
    for ch in w + '.':
        X.append(ctx)
        Y.append(stoi[ch])
        ctx = ctx[1:] + [stoi[ch]]
Xtr, Ytr = torch.tensor(X), torch.tensor(Y)
print(Xtr.shape, len(itos))
''',
    r'''
class CausalConv:
    def __init__(self, c_in, c_out, dil, gen):
        self.dil = dil
        self.w = torch.randn(c_out, c_in, 2, generator=gen) * (5 / 3) / (2 * c_in)**0.5
        self.b = 0.1 * torch.randn(c_out, generator=gen)

    def taps(self, x):
        d = self.dil
        xp = F.pad(x, (d, 0))
        return xp.unfold(2, d + 1, 1)[..., ::d]          # [B, C_in, T, 2]: x[t - d], x[t]

    def __call__(self, x):
        self.x = x
        return torch.einsum('bitk,oik->bot', self.taps(x), self.w) + self.b[None, :, None]

    def backward(self, dz):
        d, T = self.dil, self.x.shape[2]
        self.dw = torch.einsum('bitk,bot->oik', self.taps(self.x), dz)
        self.db = dz.sum((0, 2))
        dtaps = torch.einsum('bot,oik->bitk', dz, self.w)
        dxp = torch.zeros(self.x.shape[0], self.x.shape[1], T + d)
        dxp.index_add_(2, torch.arange(T), dtaps[..., 0])
        dxp.index_add_(2, torch.arange(T) + d, dtaps[..., 1])
        return dxp[:, :, d:]


class WaveNet:
    def __init__(self, V, D, H, seed):
        gen = torch.Generator().manual_seed(seed)
        self.table = torch.randn(V, D, generator=gen)
        self.convs = [CausalConv(D, H, 1, gen), CausalConv(H, H, 2, gen), CausalConv(H, H, 4, gen)]
        self.W_out = 0.1 * torch.randn(H, V, generator=gen)
        self.b_out = 0.1 * torch.randn(V, generator=gen)

    def parameters(self):
        return {'C': self.table, 'w1': self.convs[0].w, 'b1': self.convs[0].b,
                'w2': self.convs[1].w, 'b2': self.convs[1].b, 'w3': self.convs[2].w,
                'b3': self.convs[2].b, 'W': self.W_out, 'b': self.b_out}

    def forward(self, idx, targets):
        c = self.cache = {'idx': idx, 'targets': targets}
        c['E'] = self.table[idx]
        c['xT'] = c['E'].transpose(1, 2)
        a = c['xT']
        for j, conv in enumerate(self.convs, start=1):
            c[f'z{j}'] = conv(a)
            c[f'a{j}'] = torch.tanh(c[f'z{j}'])
            a = c[f'a{j}']
        c['feat'] = a[:, :, -1]
        c['logits'] = c['feat'] @ self.W_out + self.b_out
        return F.cross_entropy(c['logits'], targets)

    def backward(self):
        c = self.cache
        d = self.dcache = {}
        n = c['targets'].shape[0]
        d['logits'] = F.softmax(c['logits'], dim=1)
        d['logits'][torch.arange(n), c['targets']] -= 1
        d['logits'] /= n
        d['feat'] = d['logits'] @ self.W_out.T
        self.dW_out = c['feat'].T @ d['logits']
        self.db_out = d['logits'].sum(0)
        da = torch.zeros_like(c['a3'])
        da[:, :, -1] = d['feat']
        for j in (3, 2, 1):
            d[f'a{j}'] = da
            d[f'z{j}'] = da * (1 - c[f'a{j}']**2)
            da = self.convs[j - 1].backward(d[f'z{j}'])
        d['xT'] = da
        d['E'] = da.transpose(1, 2)
        self.dtable = torch.zeros_like(self.table).index_add_(0, c['idx'].reshape(-1),
                                                              d['E'].reshape(-1, self.table.shape[1]))

    def grads(self):
        return {'C': self.dtable, 'w1': self.convs[0].dw, 'b1': self.convs[0].db,
                'w2': self.convs[1].dw, 'b2': self.convs[1].db, 'w3': self.convs[2].dw,
                'b3': self.convs[2].db, 'W': self.dW_out, 'b': self.db_out}
''',
    r'''
net = WaveNet(len(itos), 10, 64, seed=31)
for p in net.parameters().values():
    p.requires_grad_(True)
torch.manual_seed(8)
ix = torch.randint(0, len(Xtr), (40,))
Xb, Yb = Xtr[ix], Ytr[ix]
loss = net.forward(Xb, Yb)
for v_ in net.cache.values():
    if v_.requires_grad:
        v_.retain_grad()
loss.backward()
print(loss.item())
''',
    r'''
with torch.no_grad():
    net.backward()

def check(name, mine, ref):
    print(f"{name:7s} {torch.allclose(mine, ref, atol=1e-6)} {(mine - ref).abs().max().item():.2e}")

for key in ['logits', 'feat', 'a3', 'z3', 'a2', 'z2', 'a1', 'z1', 'xT', 'E']:
    check(key, net.dcache[key], net.cache[key].grad)
for key, g_ in net.grads().items():
    check(key, g_, net.parameters()[key].grad)
''',
    md("## training on my backward"),
    r'''
for p in net.parameters().values():
    p.requires_grad_(False)
lossi = []
for step in range(300):
    ix = torch.randint(0, len(Xtr), (32,))
    xb, yb = Xtr[ix], Ytr[ix]
    lv = net.forward(xb, yb)
    net.backward()
    lr = 0.1 if step < 250 else 0.03
    P_, G_ = net.parameters(), net.grads()
    for k in P_:
        P_[k] -= lr * G_[k]
    lossi.append(lv.item())
print(sum(lossi[:30]) / 30, sum(lossi[-30:]) / 30)
''',
]

CONVV1_FWD = {"logits": "net.cache['logits']", "last": "net.cache['feat']",
              "h3": "net.cache['a3']", "h3pre": "net.cache['z3']", "h2": "net.cache['a2']",
              "h2pre": "net.cache['z2']", "h1": "net.cache['a1']", "h1pre": "net.cache['z1']",
              "x": "net.cache['xT']", "emb": "net.cache['E']", "C": "net.table",
              "W": "net.W_out", "b": "net.b_out", "w1": "net.convs[0].w", "b1": "net.convs[0].b",
              "w2": "net.convs[1].w", "b2": "net.convs[1].b", "w3": "net.convs[2].w",
              "b3": "net.convs[2].b"}
CONVV1_GRAD = {k: v.replace("net.cache", "net.dcache") for k, v in CONVV1_FWD.items()
               if "cache" in v}
CONVV1_GRAD.update({"C": "net.dtable", "W": "net.dW_out", "b": "net.db_out",
                    **{f"{p}{j}": f"net.convs[{j - 1}].d{p}" for p in "wb" for j in (1, 2, 3)}})

add("conv_v1_wavenet_class_unfold_einsum", "conv", CONVV1_CELLS, CONV_ALL,
    notes="own data (random.seed(123)), WaveNet class with CausalConv objects (w / b attributes), "
          "forward as manual unfold + einsum, activations in net.cache under own names, "
          "per-layer backward methods (taps folded back with index_add_), activation grads in "
          "net.dcache; check(); SGD 300 steps, batch 32 (check batch 40); all right",
    where=where("conv", CONV_STEPS, fwd=CONVV1_FWD, grad=CONVV1_GRAD.__getitem__),
    checkpoint="net.backward()",
    train={"cell": "for step in range(300)", "probe": "for k in P_:",
           "params": "P_", "grads": "G_", "ref": "lambda Q: ref_conv_loss(Q, xb, yb)",
           "losses": "lossi"})

# ================================================================================================
# CONV V2 (a slip and its cascade). Own data (a Generator(55) randperm, contexts built with a
# deque), a plain torch.manual_seed(21) init with the parameters in lists (ws[l], bs[l] for the
# three convolutions, Wout / bout for the head); the forward as a loop over layers with
# F.conv1d and dilation 2**l, activations in lists indexed by layer (acts[0] is the input x,
# pres[l] / acts[l] for layer l), the gradients in parallel lists (dacts, dpres, dws, dbs); layer
# 3's backward written out inline (taps as matmuls), layers 2 and 1 through a helper written
# after it; checks by `print((a - b).abs().max())`. Batch 24; exercise 1 only.
# Slip: layer 3's input gradient multiplies by w3's taps without transposing them (w3 is square,
# so it runs): conv/h2 is wrong and h2pre, h1, h1pre, x, emb, C cascade.

CONVV2_CELLS = [
    r'''
import collections
import torch
import torch.nn.functional as F
''',
    r'''
lines = open("names.txt").read().splitlines()
perm = torch.randperm(len(lines), generator=torch.Generator().manual_seed(55)).tolist()
lines = [lines[j] for j in perm]
alphabet = "." + "".join(sorted(set("".join(lines))))
idx_of = {ch: j for j, ch in enumerate(alphabet)}
block = 8
xs_, ys_ = [], []
for nm in lines[:int(0.8 * len(lines))]:
    window = collections.deque([0] * block, maxlen=block)
    for ch in nm + ".":
        xs_.append(list(window))
        ys_.append(idx_of[ch])
        window.append(idx_of[ch])
Xtr, Ytr = torch.tensor(xs_), torch.tensor(ys_)
''',
    r'''
torch.manual_seed(21)
V, D, Hn = len(alphabet), 10, 64
C = torch.randn(V, D)
ws = [torch.randn(Hn, cin, 2) * (5 / 3) / (2 * cin)**0.5 for cin in (D, Hn, Hn)]
bs = [0.1 * torch.randn(Hn) for _ in range(3)]
Wout = 0.1 * torch.randn(Hn, V)
bout = 0.1 * torch.randn(V)
for p in [C, *ws, *bs, Wout, bout]:
    p.requires_grad_()
''',
    r'''
ix = torch.randint(0, len(Xtr), (24,))
Xb, Yb = Xtr[ix], Ytr[ix]
emb = C[Xb]
acts = [emb.transpose(1, 2)]
pres = [None]
for l in range(3):
    dil = 2**l
    pres.append(F.conv1d(F.pad(acts[-1], (dil, 0)), ws[l], bs[l], dilation=dil))
    acts.append(torch.tanh(pres[-1]))
last = acts[3][:, :, -1]
logits = last @ Wout + bout
loss = F.cross_entropy(logits, Yb)
for t_ in [emb, last, logits, *acts, *pres[1:]]:
    t_.retain_grad()
loss.backward()
print(loss.item())
''',
    r'''
dacts, dpres, dws, dbs = [None] * 4, [None] * 4, [None] * 3, [None] * 3
n = len(Yb)
dlogits = F.softmax(logits.detach(), 1)
dlogits[torch.arange(n), Yb] -= 1
dlogits /= n
dlast = dlogits @ Wout.detach().T
dWout = last.detach().T @ dlogits
dbout = dlogits.sum(0)
print((dlogits - logits.grad).abs().max(), (dlast - last.grad).abs().max())
print((dWout - Wout.grad).abs().max(), (dbout - bout.grad).abs().max())
''',
    r'''
dacts[3] = torch.zeros_like(acts[3])
dacts[3][:, :, -1] = dlast
dpres[3] = dacts[3] * (1 - acts[3].detach()**2)
print((dacts[3] - acts[3].grad).abs().max(), (dpres[3] - pres[3].grad).abs().max())
''',
    r'''
# layer 3: pres[3][:, :, t] = w[:, :, 0] @ a2[:, :, t - 4] + w[:, :, 1] @ a2[:, :, t] + b
a2p = F.pad(acts[2].detach(), (4, 0))
T = acts[2].shape[2]
w3_ = ws[2].detach()
dws[2] = torch.stack([torch.einsum('bot,bit->oi', dpres[3], a2p[:, :, k * 4:k * 4 + T])
                      for k in range(2)], dim=2)
dbs[2] = dpres[3].sum((0, 2))
da2p = torch.zeros_like(a2p)
for k in range(2):
    da2p[:, :, k * 4:k * 4 + T] += w3_[:, :, k] @ dpres[3]
dacts[2] = da2p[:, :, 4:]
print((dacts[2] - acts[2].grad).abs().max())
print((dws[2] - ws[2].grad).abs().max(), (dbs[2] - bs[2].grad).abs().max())
''',
    r'''
dpres[2] = dacts[2] * (1 - acts[2].detach()**2)
print((dpres[2] - pres[2].grad).abs().max())
''',
    r'''
def conv_back(dz, a_in, w, dil):
    T = a_in.shape[2]
    ap = F.pad(a_in, (dil, 0))
    dw = torch.stack([torch.einsum('bot,bit->oi', dz, ap[:, :, k * dil:k * dil + T])
                      for k in range(2)], dim=2)
    dap = torch.zeros_like(ap)
    for k in range(2):
        dap[:, :, k * dil:k * dil + T] += w[:, :, k].T @ dz
    return dap[:, :, dil:], dw, dz.sum((0, 2))

dacts[1], dws[1], dbs[1] = conv_back(dpres[2], acts[1].detach(), ws[1].detach(), 2)
dpres[1] = dacts[1] * (1 - acts[1].detach()**2)
dacts[0], dws[0], dbs[0] = conv_back(dpres[1], acts[0].detach(), ws[0].detach(), 1)
for l in range(3):
    print(l, (dacts[l] - acts[l].grad).abs().max(), (dws[l] - ws[l].grad).abs().max(),
          (dbs[l] - bs[l].grad).abs().max())
print((dpres[1] - pres[1].grad).abs().max())
''',
    r'''
demb = dacts[0].transpose(1, 2)
dC = torch.zeros_like(C)
dC.index_put_((Xb.reshape(-1),), demb.reshape(-1, D), accumulate=True)
print((demb - emb.grad).abs().max(), (dC - C.grad).abs().max())
''',
]

CONVV2_FWD = {"x": "acts[0]", "h1pre": "pres[1]", "h1": "acts[1]", "h2pre": "pres[2]",
              "h2": "acts[2]", "h3pre": "pres[3]", "h3": "acts[3]", "W": "Wout", "b": "bout",
              "w1": "ws[0]", "b1": "bs[0]", "w2": "ws[1]", "b2": "bs[1]", "w3": "ws[2]",
              "b3": "bs[2]"}
CONVV2_GRAD = {"x": "dacts[0]", "h1pre": "dpres[1]", "h1": "dacts[1]", "h2pre": "dpres[2]",
               "h2": "dacts[2]", "h3pre": "dpres[3]", "h3": "dacts[3]", "W": "dWout",
               "b": "dbout", "w1": "dws[0]", "b1": "dbs[0]", "w2": "dws[1]", "b2": "dbs[1]",
               "w3": "dws[2]", "b3": "dbs[2]"}

add("conv_v2_layer_lists_w3_transpose_slip", "conv", CONVV2_CELLS, CONV_STEPS,
    wrong=["conv/h2"],
    cascade=["conv/h2pre", "conv/h1", "conv/h1pre", "conv/x", "conv/emb", "conv/C"],
    notes="own data (randperm(55), deque contexts), manual_seed(21), parameters and activations "
          "in lists indexed by layer (acts / pres, ws / bs), forward as a loop of F.conv1d, "
          "gradients in parallel lists; layer 3 inline, layers 2 and 1 via a helper; "
          "print((a - b).abs().max()); batch 24; exercise 1 only. Slip: layer 3's input "
          "gradient uses w3's taps untransposed; h2pre, h1, h1pre, x, emb, C cascade",
    where=where("conv", CONV_STEPS, fwd=CONVV2_FWD,
                grad=lambda k: CONVV2_GRAD.get(k, "d" + k)),
    fix=[("da2p[:, :, k * 4:k * 4 + T] += w3_[:, :, k] @ dpres[3]",
          "da2p[:, :, k * 4:k * 4 + T] += w3_[:, :, k].T @ dpres[3]")])
