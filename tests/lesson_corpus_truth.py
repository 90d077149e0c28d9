"""Ground truth for the lesson notebook corpora (gpt, lstm, conv), measured by running them.

Never uses the tutor: imports only torch, the standard library and the corpus module it is given.

    .venv/bin/python tests/lesson_corpus_truth.py notebook_corpus_lessons_tune
    .venv/bin/python tests/lesson_corpus_truth.py notebook_corpus_lessons_holdout
    (add -v to see each notebook's own printout and every measured gradient)

How a notebook runs. A case's code cells run in order in one namespace, one top-level statement at a
time, as a kernel would run them: lines starting with `%` or `!` are dropped, the string literal
'names.txt' (either quote) becomes the absolute path of data/names.txt, and `matplotlib` is a stub
whose every attribute is a no-op. `torch.Tensor.backward` is wrapped to keep the graph
(retain_graph=True) so that the runner can ask autograd about the learner's own forward pass after
the learner has called backward; nothing else about the learner's code changes. torch.autograd.grad
would also add into the .grad of every tensor on its path that the learner marked with
retain_grad(), so after each measurement every .grad reachable from the namespace (through dicts,
lists, tuples, objects) is put back as it was: measuring never changes what the notebook sees.
torch runs on one thread; its global seed is set to 0 before each case. An exception anywhere is a
corpus error (every notebook must run top to bottom), not a label.

Gradient steps. A case's "where" maps a step id to a list of specs (mine, ref) or (mine, ref,
after). `mine` is an expression, evaluated in the notebook's namespace, for the learner's value of
one of the step's gradients (a variable, a dict entry, an attribute, whatever the learner used);
`ref` is an expression for autograd's value on the learner's own forward pass, evaluated in the
same namespace plus two helpers:
  G(t)            torch.autograd.grad(<loss>, t): the full gradient of the learner's loss (the
                  expression in case["loss"], default `loss`) with respect to the forward tensor t;
  edge(fn, x, g)  autograd through one forward line only: the gradient of fn(x) with respect to x,
                  with x detached from what made it and g flowing back; used for a step that asks
                  for only the first branch of a gradient (the head's share of dwte, the first
                  branch of dlnf_xc; for dx2, dx1, dx0, dh and dc the first branch is simply G of
                  the tensor the branch comes from, e.g. G(x2) for dx1's).
Both are evaluated at the same moment: a spec with `after` right after the first top-level statement
whose source contains that text (used for a first branch, which the learner later completes in
place, and for a gradient whose variable a later exercise reuses); a spec without it at the case's
checkpoint: after the statement containing case["checkpoint"] if given, else just before the
training loop's statement, else at the end of the notebook. That is the learner's final value of
the gradient. The learner's value is cloned when it is read. A gradient is right when it is a
tensor of the reference's exact shape, all finite, torch.allclose(mine, ref, rtol=1e-4, atol=1e-5)
holds (float32 throughout, the lessons' dtype; compared in float64), and, because some of these
gradients are far below 1e-5 in size, also max|mine - ref| <= 1e-3 * max|ref| (+1e-9 for an all-zero
reference). A step is right when all its specs are right, wrong when any is not; a step with no
spec was not attempted. Where a learner's code never holds a first branch as a value of its own
(a function that returns a layernorm's atoms already completed), the case leaves that spec out
and the step is judged on the gradients the learner has.

Function steps. case["functions"] maps a function step id to the name of the learner's function
(the names `show` gives). After the notebook has run, the function last bound to that name is
called on two inputs drawn here with a fixed seed, of two different sizes (listed in FUNC_CASES),
in float32, and each output is compared with autograd's gradient of the forward the function
inverts (written out below), with the closeness test above; right when every output of both calls
is close. adamw_update has no autograd: its reference is torch.optim.AdamW itself, given the same
grad and moments with its step counter at t - 1; the learner's param, m and v must match it after
the call (updated in place) and grad must be unchanged. A lesson function name bound in the
namespace but not listed in case["functions"] is a corpus error.

The training step. case["train"] = {"cell", "probe", "params", "grads", "ref", "losses"}. The
top-level statement containing "cell" (the training loop) runs under sys.settrace; the first time
a line containing "probe" is about to run (the learner's parameter update, after their gradients
are computed and before any parameter moves), "params" (a dict name -> parameter tensor) and
"grads" (a dict name -> the learner's gradient) are evaluated in that frame (its locals over the
notebook's globals). "ref" is an expression for a function of a dict of parameters returning the
loss of the learner's own training forward on the batch in scope (the learner's own forward
function where they wrote one, else REF_LOSSES' lesson forward below, which is the lesson's forward
as the learner wrote it); autograd of it at a detached copy of the parameters is the reference.
After the loop, "losses" is the list of losses the learner recorded. Right when the loop ran to the
end, the probe was hit, every parameter's gradient at that first iteration is close (test above),
every parameter moved, and the loss fell: the mean of the last k recorded losses is at least 0.1
below the mean of the first k, k = max(5, len // 10).

Cascades. A case's "cascade" steps must be in its "wrong". A case with wrong steps carries "fix":
a list of (old, new) source replacements (each applied to every occurrence) that undo its slips;
the runner then also runs the fixed notebook and requires every attempted step, those of "wrong"
(slips and cascades alike) as well as those of "right", to measure right there. A cascade step's
code is untouched by the fix, so this shows that its own code is right and that it is wrong only
through what feeds it.

The runner prints each case's measured labels, every mismatch with its labels, and exits 1 if any.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import io
import linecache
import math
import re
import sys
import time
import types
import warnings
from pathlib import Path

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

HERE = Path(__file__).resolve().parent
DATA = (HERE.parent / "data" / "names.txt").resolve()
RTOL, ATOL, SCALE = 1e-4, 1e-5, 1e-3

STEPS = {
    "gpt": ["block/" + s for s in (
        "logits", "lnf", "lnf_affine", "lnf_rstd", "lnf_var", "lnf_xc", "lnf_mean", "x2",
        "x2_residual", "fcproj", "fch", "ln2", "ln2_affine", "x1", "x1_residual", "attproj", "atty",
        "att", "preatt_masked", "preatt", "qk", "qkv", "ln1", "ln1_affine", "x0", "wpe", "wte")]
    + ["functions/" + s for s in (
        "encoder_backward", "layernorm_backward", "matmul_backward", "attention_backward",
        "gelu_backward", "crossentropy_softmax_backward", "adamw_update")] + ["train/gpt"],
    "lstm": ["step/" + s for s in (
        "logits", "hs", "h_out", "state", "h", "c", "gates", "g", "ifgo", "inputs")]
    + ["bptt/lstm_backward", "fused/gates", "fused/lstm_step_backward", "train/lstm"],
    "conv": ["conv/" + s for s in (
        "logits", "last", "h3", "h3pre", "h2", "h2pre", "h1", "h1pre", "x", "emb", "C", "train")],
}
TRAIN_STEP = {"gpt": "train/gpt", "lstm": "train/lstm", "conv": "conv/train"}
FUNCTION_NAMES = {
    "functions/encoder_backward": "encoder_backward",
    "functions/layernorm_backward": "layernorm_backward",
    "functions/matmul_backward": "matmul_backward",
    "functions/attention_backward": "attention_backward",
    "functions/gelu_backward": "gelu_backward",
    "functions/crossentropy_softmax_backward": "crossentropy_softmax_backward",
    "functions/adamw_update": "adamw_update",
    "bptt/lstm_backward": "lstm_backward",
    "fused/lstm_step_backward": "lstm_step_backward",
}


class CorpusError(Exception):
    pass


# ------------------------------------------------------------------------------------------------
# closeness

def close(mine, ref) -> tuple[bool, str]:
    if not isinstance(mine, torch.Tensor):
        return False, f"not a tensor: {type(mine).__name__}"
    if tuple(mine.shape) != tuple(ref.shape):
        return False, f"shape {tuple(mine.shape)} != {tuple(ref.shape)}"
    a, b = mine.detach().double(), ref.detach().double()
    if not torch.isfinite(a).all():
        return False, "not finite"
    diff = (a - b).abs().max().item() if a.numel() else 0.0
    scale = b.abs().max().item() if b.numel() else 0.0
    ok = torch.allclose(a, b, rtol=RTOL, atol=ATOL) and diff <= SCALE * scale + 1e-9
    return ok, f"maxdiff {diff:.2e} (scale {scale:.2e})"


# ------------------------------------------------------------------------------------------------
# reference forwards for the training check (the lessons' forward passes, written out)

def _ln(x, w, b):
    mean = x.mean(-1, keepdim=True)
    xc = x - mean
    var = (xc ** 2).mean(-1, keepdim=True)
    return xc * (var + 1e-5) ** -0.5 * w + b


def _gelu(x):
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def _attention(qkv, n_head):
    B, T, C3 = qkv.shape
    C = C3 // 3
    hs = C // n_head
    q, k, v = (qkv[:, :, j * C:(j + 1) * C].reshape(B, T, n_head, hs).transpose(1, 2)
               for j in range(3))
    preatt = q @ k.transpose(-2, -1) * hs ** -0.5
    causal = torch.ones(T, T, device=qkv.device).tril()
    att = F.softmax(preatt.masked_fill(causal == 0, float("-inf")), dim=-1)
    return (att @ v).transpose(1, 2).contiguous().view(B, T, C), att


def ref_gpt_loss(P, Xb, Yb=None, n_head=4, targets=None):
    """The lesson's GPT forward (one block, or n_layer blocks when the block parameters are
    stacked with a leading layer dimension); targets = Xb shifted by one with Yb appended, unless
    given."""
    wte, wpe = P["wte"], P["wpe"]
    n, T = Xb.shape
    x = wte[Xb] + wpe[:T]
    stacked = P["qkvw"].dim() == 3
    for l in range(P["qkvw"].shape[0] if stacked else 1):
        def get(k, l=l):
            return P[k][l] if stacked else P[k]
        y, _ = _attention(_ln(x, get("ln1w"), get("ln1b")) @ get("qkvw") + get("qkvb"), n_head)
        x = x + y @ get("attprojw") + get("attprojb")
        h = _gelu(_ln(x, get("ln2w"), get("ln2b")) @ get("fcw") + get("fcb"))
        x = x + h @ get("fcprojw") + get("fcprojb")
    logits = _ln(x, P["lnfw"], P["lnfb"]) @ wte.T
    if targets is None:
        targets = torch.cat([Xb[:, 1:], Yb[:, None]], dim=1)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def _lstm_run(xs, h, c, Wx, Wh, b):
    H = Wh.shape[0]
    hs, cs, gates = [], [], []
    for s in range(xs.shape[1]):
        ifgo = xs[:, s] @ Wx + h @ Wh + b
        i, f = torch.sigmoid(ifgo[:, :H]), torch.sigmoid(ifgo[:, H:2 * H])
        g, o = torch.tanh(ifgo[:, 2 * H:3 * H]), torch.sigmoid(ifgo[:, 3 * H:])
        c = f * c + i * g
        h = o * torch.tanh(c)
        hs.append(h), cs.append(c), gates.append(torch.cat([i, f, g, o], 1))
    return torch.stack(hs, 1), torch.stack(cs, 1), torch.stack(gates, 1)


def ref_lstm_loss(P, Xb, Yb):
    """The lesson's LSTM over every position from a zero state, masked cross-entropy (targets -1
    ignored, the mean over the real positions)."""
    emb = P["C"][Xb]
    H = P["Wh"].shape[0]
    zero = emb.new_zeros(Xb.shape[0], H)
    hs, _, _ = _lstm_run(emb, zero, zero, P["Wx"], P["Wh"], P["b"])
    logits = hs @ P["Wy"] + P["by"]
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), Yb.reshape(-1), ignore_index=-1)


def ref_conv_loss(P, Xb, Yb):
    """The lesson's dilated causal convolutions."""
    x = P["C"][Xb].transpose(1, 2)
    h1 = torch.tanh(F.conv1d(F.pad(x, (1, 0)), P["w1"], P["b1"]))
    h2 = torch.tanh(F.conv1d(F.pad(h1, (2, 0)), P["w2"], P["b2"], dilation=2))
    h3 = torch.tanh(F.conv1d(F.pad(h2, (4, 0)), P["w3"], P["b3"], dilation=4))
    return F.cross_entropy(h3[:, :, -1] @ P["W"] + P["b"], Yb)


REF_LOSSES = {"ref_gpt_loss": ref_gpt_loss, "ref_lstm_loss": ref_lstm_loss,
              "ref_conv_loss": ref_conv_loss}


# ------------------------------------------------------------------------------------------------
# function steps: inputs of two sizes and autograd's outputs

def _leaf(t):
    return t.detach().clone().requires_grad_(True)


def _grads(out, inputs, gout):
    grads = torch.autograd.grad(out, inputs, gout, allow_unused=True)
    return [g if g is not None else torch.zeros_like(x)
            for g, x in zip(grads, inputs, strict=True)]


def fc_encoder(g, B, T, C, V):
    inp = torch.randint(0, V, (B, T), generator=g)
    inp[0, :2] = inp[-1, -1]   # a repeated token for sure
    wte, wpe = _leaf(torch.randn(V, C, generator=g)), _leaf(torch.randn(T, C, generator=g))
    dout = torch.randn(B, T, C, generator=g)
    out = wte[inp] + wpe[:T]
    return (dout, inp, V), _grads(out, [wte, wpe], dout)


def fc_layernorm(g, B, T, C):
    inp = _leaf(torch.randn(B, T, C, generator=g) * 2 + 0.5)
    w, b = _leaf(torch.randn(C, generator=g)), _leaf(torch.randn(C, generator=g))
    dout = torch.randn(B, T, C, generator=g)
    mean = inp.detach().mean(-1, keepdim=True)
    rstd = (((inp.detach() - mean) ** 2).mean(-1, keepdim=True) + 1e-5) ** -0.5
    out = _ln(inp, w, b)
    return (dout, inp.detach().clone(), w.detach().clone(), mean, rstd), _grads(out, [inp, w, b],
                                                                                 dout)


def fc_matmul(g, B, T, C, OC):
    inp = _leaf(torch.randn(B, T, C, generator=g))
    w, b = _leaf(torch.randn(C, OC, generator=g)), _leaf(torch.randn(OC, generator=g))
    dout = torch.randn(B, T, OC, generator=g)
    out = inp @ w + b
    return (dout, inp.detach().clone(), w.detach().clone()), _grads(out, [inp, w, b], dout)


def fc_attention(g, B, T, C, NH):
    qkv = _leaf(torch.randn(B, T, 3 * C, generator=g))
    y, att = _attention(qkv, NH)
    dout = torch.randn(B, T, C, generator=g)
    return (dout, qkv.detach().clone(), att.detach().clone(), NH), _grads(y, [qkv], dout)


def fc_gelu(g, *shape):
    inp = _leaf(torch.randn(*shape, generator=g) * 2)
    dout = torch.randn(*shape, generator=g)
    return (dout, inp.detach().clone()), _grads(_gelu(inp), [inp], dout)


def fc_crossentropy(g, N, V):
    logits = _leaf(torch.randn(N, V, generator=g) * 2)
    targets = torch.randint(0, V, (N,), generator=g)
    loss = F.cross_entropy(logits, targets)
    return (logits.detach().clone(), targets), _grads(loss, [logits], None)


def fc_lstm(g, B, T, D, H):
    xs = _leaf(torch.randn(B, T, D, generator=g))
    h0, c0 = _leaf(torch.randn(B, H, generator=g) * 0.5), _leaf(torch.randn(B, H, generator=g))
    Wx = _leaf(torch.randn(D, 4 * H, generator=g) * D ** -0.5)
    Wh = _leaf(torch.randn(H, 4 * H, generator=g) * H ** -0.5)
    b = _leaf(torch.randn(4 * H, generator=g) * 0.3)
    hs, cs, gates = _lstm_run(xs, h0, c0, Wx, Wh, b)
    dhs = torch.randn(B, T, H, generator=g)
    refs = _grads(hs, [xs, h0, c0, Wx, Wh, b], dhs)
    args = (dhs, xs.detach().clone(), h0.detach().clone(), c0.detach().clone(), hs.detach().clone(),
            cs.detach().clone(), gates.detach().clone(), Wx.detach().clone(), Wh.detach().clone())
    return args, refs


def fc_lstm_step(g, B, D, H):
    x = _leaf(torch.randn(B, D, generator=g))
    h_prev = _leaf(torch.randn(B, H, generator=g) * 0.5)
    c_prev = _leaf(torch.randn(B, H, generator=g))
    Wx = _leaf(torch.randn(D, 4 * H, generator=g) * D ** -0.5)
    Wh = _leaf(torch.randn(H, 4 * H, generator=g) * H ** -0.5)
    b = _leaf(torch.randn(4 * H, generator=g) * 0.3)
    hs, cs, gates = _lstm_run(x[:, None], h_prev, c_prev, Wx, Wh, b)
    h, c = hs[:, 0], cs[:, 0]
    dh, dc = torch.randn(B, H, generator=g), torch.randn(B, H, generator=g)
    loss = (h * dh).sum() + (c * dc).sum()
    refs = _grads(loss, [x, h_prev, c_prev, Wx, Wh, b], None)
    args = (dh, dc, x.detach().clone(), h_prev.detach().clone(), c_prev.detach().clone(),
            c.detach().clone(), gates[:, 0].detach().clone(), Wx.detach().clone(),
            Wh.detach().clone())
    return args, refs


FUNC_CASES = {
    "encoder_backward": (fc_encoder, [(3, 5, 8, 11), (2, 9, 6, 13)]),
    "layernorm_backward": (fc_layernorm, [(3, 5, 8), (2, 7, 12)]),
    "matmul_backward": (fc_matmul, [(3, 5, 7, 11), (2, 4, 6, 3)]),
    "attention_backward": (fc_attention, [(2, 5, 8, 2), (3, 7, 12, 3)]),
    "gelu_backward": (fc_gelu, [(3, 5, 7), (4, 9)]),
    "crossentropy_softmax_backward": (fc_crossentropy, [(10, 7), (23, 13)]),
    "lstm_backward": (fc_lstm, [(3, 5, 4, 6), (2, 8, 3, 5)]),
    "lstm_step_backward": (fc_lstm_step, [(4, 3, 5), (6, 7, 2)]),
}
ADAMW_CASES = [((5, 3), 1, 1e-2, 0.9, 0.999, 1e-8, 0.1), ((7,), 4, 3e-3, 0.8, 0.99, 1e-6, 0.0)]


def check_adamw(fn) -> tuple[bool, str]:
    g = torch.Generator().manual_seed(1234)
    notes = []
    for shape, t, lr, b1, b2, eps, wd in ADAMW_CASES:
        param = torch.randn(*shape, generator=g)
        grad = torch.randn(*shape, generator=g)
        m = torch.randn(*shape, generator=g) * 0.1 if t > 1 else torch.zeros(*shape)
        v = torch.rand(*shape, generator=g) * 0.1 if t > 1 else torch.zeros(*shape)
        p_ref = param.clone().requires_grad_(True)
        p_ref.grad = grad.clone()
        opt = torch.optim.AdamW([p_ref], lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd,
                                foreach=False)
        opt.state[p_ref] = {"step": torch.tensor(float(t - 1)), "exp_avg": m.clone(),
                            "exp_avg_sq": v.clone()}
        opt.step()
        st = opt.state[p_ref]
        mine_p, mine_m, mine_v, mine_g = param.clone(), m.clone(), v.clone(), grad.clone()
        fn(mine_p, mine_g, mine_m, mine_v, t, lr, b1, b2, eps, wd)
        for label, a, b in (("param", mine_p, p_ref.detach()), ("m", mine_m, st["exp_avg"]),
                            ("v", mine_v, st["exp_avg_sq"]), ("grad unchanged", mine_g, grad)):
            ok, why = close(a, b)
            notes.append(f"{label} {shape}: {why}")
            if not ok:
                return False, "; ".join(notes)
    return True, "; ".join(notes)


def check_function(name: str, fn) -> tuple[bool, str]:
    if not callable(fn):
        return False, f"{name} is not a function"
    if name == "adamw_update":
        try:
            return check_adamw(fn)
        except Exception as e:  # the learner's function raising is a wrong answer
            return False, f"raised {type(e).__name__}: {e}"
    make, sizes = FUNC_CASES[name]
    g = torch.Generator().manual_seed(4321)
    notes = []
    for size in sizes:
        args, refs = make(g, *size)
        try:
            with torch.no_grad():
                out = fn(*args)
        except Exception as e:
            return False, f"{size}: raised {type(e).__name__}: {e}"
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        if len(outs) != len(refs):
            return False, f"{size}: returned {len(outs)} values, not {len(refs)}"
        for j, (a, b) in enumerate(zip(outs, refs, strict=True)):
            ok, why = close(a, b)
            notes.append(f"{size}[{j}]: {why}")
            if not ok:
                return False, "; ".join(notes)
    return True, "; ".join(notes)


# ------------------------------------------------------------------------------------------------
# running a notebook

def _matplotlib_stub():
    def noop(*args, **kwargs):
        return None

    class Stub(types.ModuleType):
        def __getattr__(self, name):
            if name.startswith("__"):
                raise AttributeError(name)
            return noop

    mpl, plt = Stub("matplotlib"), Stub("matplotlib.pyplot")
    mpl.pyplot = plt
    sys.modules["matplotlib"], sys.modules["matplotlib.pyplot"] = mpl, plt


_ORIG_BACKWARD = torch.Tensor.backward


def _backward_keep_graph(self, gradient=None, retain_graph=None, create_graph=False,
                         inputs=None):
    return _ORIG_BACKWARD(self, gradient, True, create_graph, inputs)


def cell_sources(notebook: dict) -> list[str]:
    out = []
    for cell in notebook["cells"]:
        if cell["cell_type"] != "code":
            continue
        src = cell["source"]
        src = "".join(src) if isinstance(src, list) else src
        lines = [ln for ln in src.splitlines() if not ln.lstrip().startswith(("%", "!"))]
        src = "\n".join(lines) + "\n"
        src = re.sub(r"""(['"])names\.txt\1""", repr(str(DATA)), src)
        out.append(src)
    return out


def _tensors(obj, depth=0, seen=None):
    """Every tensor reachable from obj through dicts, lists, tuples and plain objects."""
    seen = set() if seen is None else seen
    if id(obj) in seen or depth > 4:
        return
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for v in list(obj.values()):
            yield from _tensors(v, depth + 1, seen)
    elif isinstance(obj, (list, tuple, set)):
        for v in list(obj):
            yield from _tensors(v, depth + 1, seen)
    elif (hasattr(obj, "__dict__") and not isinstance(obj, (type, types.ModuleType,
                                                           types.FunctionType))):
        yield from _tensors(vars(obj), depth + 1, seen)


@contextlib.contextmanager
def _grads_untouched(ns):
    """torch.autograd.grad accumulates into the .grad of every tensor on its path that
    retains its grad; put every such .grad the notebook can reach back as it was."""
    saved = []
    for t in _tensors({k: v for k, v in ns.items() if not k.startswith("__")}):
        if t.requires_grad and (t.retains_grad or t.is_leaf):
            g = t.grad
            saved.append((t, g, None if g is None else g.detach().clone()))
    try:
        yield
    finally:
        for t, g, data in saved:
            if g is not None:
                with torch.no_grad():
                    g.copy_(data)
            t.grad = g


class Run:
    """Runs one notebook and measures every step the case lists."""

    def __init__(self, case: dict, notebook: dict, verbose: bool = False):
        self.case, self.notebook, self.verbose = case, notebook, verbose
        self.ns: dict = {"__name__": "__main__"}
        self.results: dict[str, list[tuple[bool, str]]] = {}
        self.lesson = case["lesson"]
        self.train = case.get("train")
        self.pending = []   # (step, mine, ref, after or None)
        for step, specs in case.get("where", {}).items():
            if step not in STEPS[self.lesson]:
                raise CorpusError(f"unknown step {step}")
            for spec in specs:
                mine, ref, after = tuple(spec) if len(spec) == 3 else (*spec, None)
                self.pending.append((step, mine, ref, after))
        self.train_result = None
        self._done = []   # the specs with `after` already measured

    # helpers the reference expressions see
    def _env(self, base: dict) -> dict:
        loss_expr = self.case.get("loss", "loss")

        def G(t):
            loss = eval(loss_expr, base)
            (g,) = torch.autograd.grad(loss, t, retain_graph=True, allow_unused=True)
            return torch.zeros_like(t) if g is None else g

        def edge(fn, x, gout):
            x_ = x.detach().clone().requires_grad_(True)
            (g,) = torch.autograd.grad(fn(x_), x_, gout)
            return g

        env = dict(base)
        env.update(G=G, edge=edge, torch=torch, F=F, math=math, **REF_LOSSES)
        return env

    @torch.enable_grad()
    def _measure(self, specs):
        with _grads_untouched(self.ns):
            self._measure_specs(specs)

    def _measure_specs(self, specs):
        for step, mine_expr, ref_expr, _after in specs:
            try:
                mine = eval(mine_expr, self.ns)
                mine = mine.detach().clone() if isinstance(mine, torch.Tensor) else mine
                ref = eval(ref_expr, self._env(self.ns))
                ok, why = close(mine, ref)
            except Exception as e:
                raise CorpusError(f"{step}: measuring {mine_expr!r} / {ref_expr!r}: "
                                  f"{type(e).__name__}: {e}") from e
            self.results.setdefault(step, []).append((ok, f"{mine_expr}: {why}"))

    def _default_specs(self):
        return [s for s in self.pending if s[3] is None]

    def _run_train(self, code, fname):
        spec = self.train
        state = {"hit": False, "probe": None}

        def local(frame, event, arg):
            if state["hit"]:
                return None
            if event == "line":
                src = linecache.getline(frame.f_code.co_filename, frame.f_lineno)
                if spec["probe"] in src:
                    state["hit"] = True
                    sys.settrace(None)
                    state["probe"] = self._probe({**frame.f_globals, **frame.f_locals})
                    return None
            return local

        def tracer(frame, event, arg):
            if state["hit"] or not frame.f_code.co_filename.startswith("<cell"):
                return None
            return local

        sys.settrace(tracer)
        try:
            exec(code, self.ns)
        finally:
            sys.settrace(None)
        return state

    @torch.enable_grad()
    def _probe(self, base):
        spec = self.train
        params = eval(spec["params"], base)
        grads = eval(spec["grads"], base)
        leaves = {k: v.detach().clone().requires_grad_(True) for k, v in params.items()}
        env = dict(torch=torch, F=F, math=math, **REF_LOSSES)
        env.update(base)
        loss = eval(spec["ref"], env)(leaves)
        refs = torch.autograd.grad(loss, list(leaves.values()), allow_unused=True)
        out = {"before": {k: v.detach().clone() for k, v in params.items()}, "grads": {}}
        for (k, leaf), r in zip(leaves.items(), refs, strict=True):
            r = torch.zeros_like(leaf) if r is None else r
            mine = grads.get(k) if hasattr(grads, "get") else None
            out["grads"][k] = close(mine, r) if mine is not None else (False, "missing")
        return out

    def run(self):
        torch.manual_seed(0)
        sources = cell_sources(self.notebook)
        checkpoint = self.case.get("checkpoint")
        train_cell = self.train["cell"] if self.train else None
        defaults_done = False
        train_done = False
        out = io.StringIO()
        torch.Tensor.backward = _backward_keep_graph
        try:
            with contextlib.redirect_stdout(out):
                for k, src in enumerate(sources):
                    fname = f"<cell{k}>"
                    linecache.cache[fname] = (len(src), None, src.splitlines(True), fname)
                    try:
                        tree = ast.parse(src)
                    except SyntaxError as e:
                        raise CorpusError(f"cell {k}: {e}") from e
                    for stmt in tree.body:
                        seg = ast.get_source_segment(src, stmt) or ""
                        is_train = (train_cell is not None and not train_done
                                    and train_cell in seg)
                        if is_train and not defaults_done and checkpoint is None:
                            self._measure(self._default_specs())
                            defaults_done = True
                        code = compile(ast.Module([stmt], []), fname, "exec")
                        try:
                            if is_train:
                                t0 = time.time()
                                state = self._run_train(code, fname)
                                self.train_result = (state, time.time() - t0)
                                train_done = True
                            else:
                                exec(code, self.ns)
                        except CorpusError:
                            raise
                        except Exception as e:
                            raise CorpusError(f"cell {k} raised {type(e).__name__}: {e}\n"
                                              f"--- statement:\n{seg[:400]}") from e
                        now = [s for s in self.pending
                               if s[3] is not None and s[3] in seg
                               and not any(r is s for r in self._done)]
                        if now:
                            self._done += now
                            self._measure(now)
                        if checkpoint is not None and not defaults_done and checkpoint in seg:
                            self._measure(self._default_specs())
                            defaults_done = True
                if not defaults_done:
                    self._measure(self._default_specs())
                if self.train and not train_done:
                    raise CorpusError(f"training statement {train_cell!r} not found")
        finally:
            torch.Tensor.backward = _ORIG_BACKWARD
        missing = [s for s in self.pending
                   if s[3] is not None and not any(r is s for r in self._done)]
        if missing:
            raise CorpusError(f"'after' text never matched: {[(s[0], s[3]) for s in missing]}")
        if self.verbose:
            print(textwrap_indent(out.getvalue()))
        self._functions()
        self._training()
        return self.summary()

    def _functions(self):
        listed = self.case.get("functions", {})
        for step, name in FUNCTION_NAMES.items():
            if step not in STEPS[self.lesson]:
                continue
            if step in listed:
                fn_name = listed[step] or name
                if fn_name not in self.ns:
                    raise CorpusError(f"{step}: {fn_name} is not defined")
                self.results[step] = [check_function(name, self.ns[fn_name])]
            elif name in self.ns and callable(self.ns[name]):
                raise CorpusError(f"{name} is defined but {step} is not in case['functions']")

    def _training(self):
        if not self.train:
            return
        step = TRAIN_STEP[self.lesson]
        state, secs = self.train_result
        notes = [f"{secs:.1f}s"]
        ok = True
        if not state["hit"]:
            self.results[step] = [(False, "probe never hit")]
            return
        probe = state["probe"]
        for k, (good, why) in probe["grads"].items():
            if not good:
                ok = False
                notes.append(f"d{k}: {why}")
        params = eval(self.train["params"], self.ns)
        moved = all(not torch.equal(params[k].detach(), v) for k, v in probe["before"].items())
        if not moved:
            ok = False
            notes.append("some parameter never moved")
        losses = [float(x) for x in eval(self.train["losses"], self.ns)]
        k = max(5, len(losses) // 10)
        if len(losses) < 2 * k:
            raise CorpusError(f"{step}: only {len(losses)} losses recorded")
        first, last = sum(losses[:k]) / k, sum(losses[-k:]) / k
        notes.append(f"loss {first:.3f} -> {last:.3f} over {len(losses)}")
        if not first - last >= 0.1:
            ok = False
            notes.append("loss did not fall by 0.1")
        self.results[step] = [(ok, ", ".join(notes))]

    def summary(self):
        right = {s for s, rs in self.results.items() if all(ok for ok, _ in rs)}
        wrong = set(self.results) - right
        return right, wrong


def textwrap_indent(text: str) -> str:
    return "\n".join("      | " + ln for ln in text.splitlines()[-60:])


def apply_fix(notebook: dict, fixes) -> dict:
    cells = []
    for cell in notebook["cells"]:
        cell = dict(cell)
        src = cell["source"]
        src = "".join(src) if isinstance(src, list) else src
        cells.append((cell, src))
    for old, new in fixes:
        hits = [i for i, (_, s) in enumerate(cells) if old in s]
        if not hits:
            raise CorpusError(f"fix {old!r} matches nothing")
        for i in hits:
            c, s = cells[i]
            cells[i] = (c, s.replace(old, new))
    out = dict(notebook)
    out["cells"] = [dict(c, source=s.splitlines(True)) for c, s in cells]
    return out


def check_case(case: dict, verbose: bool) -> list[str]:
    problems = []
    steps = STEPS[case["lesson"]]
    right, wrong = set(case["right"]), set(case["wrong"])
    cascade = set(case.get("cascade", []))
    for s in right | wrong:
        if s not in steps:
            problems.append(f"unknown step id {s}")
    if right & wrong:
        problems.append(f"both right and wrong: {sorted(right & wrong)}")
    if not cascade <= wrong:
        problems.append(f"cascade not in wrong: {sorted(cascade - wrong)}")
    t0 = time.time()
    run = Run(case, case["notebook"], verbose)
    m_right, m_wrong = run.run()
    secs = time.time() - t0
    order = {s: i for i, s in enumerate(steps)}
    srt = lambda xs: sorted(xs, key=order.get)   # noqa: E731
    print(f"  {case['name']} [{case['lesson']}] {secs:.1f}s: measured right {len(m_right)}, "
          f"wrong {srt(m_wrong)}")
    if m_right != right:
        problems.append(f"right: measured-not-labelled {srt(m_right - right)}, "
                        f"labelled-not-measured {srt(right - m_right)}")
    if m_wrong != wrong:
        problems.append(f"wrong: measured-not-labelled {srt(m_wrong - wrong)}, "
                        f"labelled-not-measured {srt(wrong - m_wrong)}")
    if verbose or problems:
        for s in srt(run.results):
            for ok, why in run.results[s]:
                if verbose or not ok:
                    print(f"      {'ok ' if ok else 'BAD'} {s}: {why}")
    if case.get("fix"):
        f_right, f_wrong = Run(case, apply_fix(case["notebook"], case["fix"])).run()
        if f_wrong:
            problems.append(f"with its fix, still wrong: {srt(f_wrong)}")
        if f_right != right | wrong:
            problems.append(f"with its fix, attempted differs: {srt(f_right ^ (right | wrong))}")
    elif wrong:
        problems.append("wrong steps but no 'fix' to confirm the cascade")
    return problems


def main(argv: list[str]) -> int:
    verbose = "-v" in argv
    names = [a for a in argv if not a.startswith("-")]
    if not names:
        print(__doc__.split("\n\n")[1])
        return 2
    sys.path.insert(0, str(HERE))
    _matplotlib_stub()
    torch.set_num_threads(1)
    failed = 0
    for name in names:
        mod = importlib.import_module(name)
        print(f"{name}: {len(mod.CASES)} cases")
        seen = set()
        for case in mod.CASES:
            if case["name"] in seen:
                print(f"  duplicate case name {case['name']}")
                failed += 1
            seen.add(case["name"])
            try:
                problems = check_case(case, verbose)
            except CorpusError as e:
                problems = [f"corpus error: {e}"]
            for p in problems:
                print(f"    MISMATCH {case['name']}: {p}")
            failed += bool(problems)
    print("all labels agree" if not failed else f"{failed} case(s) disagree")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
