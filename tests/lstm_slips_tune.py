"""Wrong LSTM answers, one slip each, for tuning the diagnoses (tests/test_lstm_slips.py).

Each is a right answer of tests/test_corpus_lstm.py CORRECT (or one written the same way) with
one slip put in: the same slip in a line step, a fused step, `lstm_step_backward` and inside the
loop of `lstm_backward`; a factor or a term the line does not have; a wrong function in the
loss's step; a slip inside one long `torch.cat`; and the slips whose message used to point
elsewhere (a reshape of the stacked state, `cat` along the batch, a count typed in, zeros for the
start state). tests/lstm_slips_holdout.py holds other slips of the same kinds, written in other
styles, which the diagnoses were not tuned on.

name -> (step, graded tensor or None for the step's first check, code, words the message must
hold). Where the lesson's own case is right and only the fresh batch or the fresh sizes are
wrong, the words are looked for in that verdict's message.
"""

from __future__ import annotations

from test_corpus_lstm import CORRECT

_LOOP = CORRECT["bptt/lstm_backward"]["range-down-chunk-out-of-place"]
_OWN = CORRECT["bptt/lstm_backward"]["own-step-function"]
_STEP = CORRECT["fused/lstm_step_backward"]["chunk-einsum"]
_SLICES = CORRECT["fused/lstm_step_backward"]["manual-slices-in-place"]


def _slip(code: str, old: str, new: str) -> str:
    assert old in code, old
    return code.replace(old, new, 1)


WRONG: dict[str, tuple[str, str | None, str, tuple[str, ...]]] = {
    # --- one slip, every kind of step: tanh' at the old cell state --------------------------
    "line-tanh-slope-at-c_prev": (
        "step/h", "c",
        "tc = torch.tanh(c)\ndo = dh * tc\ndc += dh * o * (1 - torch.tanh(c_prev)**2)\n",
        ("`c_prev`", "`c`"),
    ),
    "step-fn-tanh-slope-at-c_prev": (
        "fused/lstm_step_backward", "dc_prev",
        _slip(_STEP, "dh * o * (1 - tanh_c**2)", "dh * o * (1 - torch.tanh(c_prev)**2)"),
        ("`c_prev`", "`c`"),
    ),
    "loop-tanh-slope-at-c_prev": (
        "bptt/lstm_backward", "dxs",
        _slip(_LOOP, "dh * o * (1 - tanh_c * tanh_c)",
              "dh * o * (1 - torch.tanh(c_prev) ** 2)"),
        ("t = ", "`c_prev`", "`cs[:, s]`"),
    ),
    # --- sigma' written s * (1 + s) ---------------------------------------------------------
    "line-sigmoid-slope-plus": (
        "step/gates", "af",
        "dai = di * i * (1 - i)\ndaf = df * f * (1 + f)\ndao = do * o * (1 - o)\n",
        ("sign",),
    ),
    "fused-sigmoid-slope-plus": (
        "fused/gates", None,
        "difgo = torch.cat([di * i * (1 - i), df * f * (1 - f), dg * (1 - g**2),"
        " do * o * (1 + o)], 1)\n",
        ("sign",),
    ),
    "step-fn-sigmoid-slope-plus": (
        "fused/lstm_step_backward", "dx",
        _slip(_STEP, "dc_total * g * i * (1 - i)", "dc_total * g * i * (1 + i)"),
        ("sign",),
    ),
    "loop-sigmoid-slope-plus": (
        "bptt/lstm_backward", "dxs",
        _slip(_LOOP, "dao = dh * tanh_c * o * (1 - o)", "dao = dh * tanh_c * o * (1 + o)"),
        ("t = ", "sign"),
    ),
    # --- the gates read in the order i, f, o, g ---------------------------------------------
    "line-quarters-ifog": (
        "step/ifgo", None, "difgo = torch.hstack([dai, daf, dao, dag])\n", ("order",),
    ),
    "step-fn-gates-unpacked-ifog": (
        "fused/lstm_step_backward", "dx",
        _slip(_STEP, "i, f, g, o = gates.chunk(4, dim=1)", "i, f, o, g = gates.chunk(4, dim=1)"),
        ("order",),
    ),
    "loop-gates-unpacked-ifog": (
        "bptt/lstm_backward", "dxs",
        _slip(_LOOP, "i, f, g, o = gates[:, s].chunk(4, 1)",
              "i, f, o, g = gates[:, s].chunk(4, 1)"),
        ("t = ", "order"),
    ),
    # --- h where tanh(c) belongs --------------------------------------------------------------
    "line-h-for-tanh-in-do": (
        "step/h", "o", "do = dh * h\ndc += dh * o * (1 - torch.tanh(c)**2)\n",
        ("`h`", "`torch.tanh(c)`"),
    ),
    "loop-h-for-tanh": (
        "bptt/lstm_backward", "dxs",
        _slip(_LOOP, "dh * o * (1 - tanh_c * tanh_c)", "dh * o * (1 - hs[:, s] ** 2)"),
        ("t = ", "`hs[:, s]`", "`torch.tanh(cs[:, s])`"),
    ),
    # --- a factor the line does not have: the next line's derivative a line early -----------
    "line-do-times-sigmoid-slope": (
        "step/h", "o",
        "tc = torch.tanh(c)\ndo = dh * tc * o * (1 - o)\ndc += dh * o * (1 - tc**2)\n",
        ("extra factor",),
    ),
    "line-df-times-sigmoid-slope": (
        "step/c", "f",
        "df = dc * c_prev * f * (1 - f)\ndc_prev = dc * f\ndi = dc * g\ndg = dc * i\n",
        ("extra factor",),
    ),
    "line-dag-times-input-gate": (
        "step/g", None, "dag = dg * (1 - g**2) * i\n", ("extra factor", "`i`"),
    ),
    "loop-dao-times-gate": (
        "bptt/lstm_backward", "dxs",
        _slip(_LOOP, "dao = dh * tanh_c * o * (1 - o)", "dao = dh * tanh_c * o * (1 - o) * o"),
        ("t = ", "extra factor"),
    ),
    # --- a term the line does not have ----------------------------------------------------
    "line-dh_prev-plus-dh": (
        "step/inputs", "h_prev",
        "dx_t = difgo @ Wx_t.T\ndh_prev = difgo @ Wh_t.T + dh\ndWx_t = x_t.T @ difgo\n"
        "dWh_t = h_prev.T @ difgo\ndb_t = difgo.sum(0)\n",
        ("extra term", "`dh`"),
    ),
    "step-fn-dh_prev-plus-dh": (
        "fused/lstm_step_backward", "dh_prev",
        _slip(_STEP, "dh_prev = difgo @ Wh.t()", "dh_prev = difgo @ Wh.t() + dh"),
        ("extra term", "`dh`"),
    ),
    "loop-carried-dh-plus-dh": (
        "bptt/lstm_backward", "dxs",
        _slip(_LOOP, "dh_next = difgo @ Wh.t()", "dh_next = difgo @ Wh.t() + dh"),
        ("t = ", "extra term", "`dh`"),
    ),
    # --- a wrong function in the loss's step --------------------------------------------------
    "logits-no-softmax": (
        "step/logits", None,
        "dlogits = (logits - F.one_hot(Yb.clamp(min=0), vocab_size)) * mask[..., None]"
        " / mask.sum()\n",
        ("softmax",),
    ),
    "logits-log-softmax": (
        "step/logits", None,
        "dlogits = F.log_softmax(logits, -1) - F.one_hot(Yb.clamp(min=0), vocab_size)\n"
        "dlogits = dlogits * mask[:, :, None] / mask.sum()\n",
        ("log_softmax", "softmax"),
    ),
    "logits-softmax-over-the-batch": (
        "step/logits", None,
        "p = torch.softmax(logits, dim=0)\n"
        "dlogits = (p - F.one_hot(Yb.clamp(min=0), vocab_size)) * mask[:, :, None] / mask.sum()\n",
        ("wrong axis", "dim 0"),
    ),
    "logits-mean-per-name": (
        "step/logits", None,
        "dlogits = F.softmax(logits, -1) - F.one_hot(Yb.clamp(min=0), vocab_size)\n"
        "dlogits = dlogits * mask[:, :, None] / (n * mask.sum(1, keepdim=True)[:, :, None])\n",
        ("per row", "`mask`"),
    ),
    "logits-mask-drops-the-end": (
        "step/logits", None,
        "keep = (Yb > 0).float()\n"
        "dlogits = (F.softmax(logits, -1) - F.one_hot(Yb.clamp(min=0), vocab_size))"
        " * keep[:, :, None] / keep.sum()\n",
        ("`Yb > 0`", "`Yb >= 0`"),
    ),
    # --- a slip inside one long torch.cat -----------------------------------------------------
    "fused-candidate-power-of-the-difference": (
        "fused/gates", None,
        "difgo = torch.cat([di * i * (1 - i), df * f * (1 - f), dg * (1 - g)**2,"
        " do * o * (1 - o)], 1)\n",
        ("exponent",),
    ),
    "fused-forget-gate-from-the-input-gate": (
        "fused/gates", None,
        "difgo = torch.cat([di * i * (1 - i), df * f * (1 - i), dg * (1 - g**2),"
        " do * o * (1 - o)], 1)\n",
        ("`f`", "`i`"),
    ),
    "step-fn-cat-partner-swapped": (
        "fused/lstm_step_backward", "dx",
        _slip(_STEP, "dc_total * i * (1 - g * g)", "dc_total * g * (1 - g * g)"),
        ("`g`", "`i`"),
    ),
    "loop-cat-c_prev-dropped": (
        "bptt/lstm_backward", "dxs",
        _slip(_LOOP, "daf = dc * c_prev * f * (1 - f)", "daf = dc * f * (1 - f)"),
        ("t = ", "left out", "`c_prev`"),
    ),
    "own-step-fn-cat-tanh-for-the-output-gate": (
        "bptt/lstm_backward", "dxs",
        _slip(_OWN, "dh * tc * o * (1 - o)", "dh * tc * (1 - o**2)"),
        ("t = ", "sigmoid"),
    ),
    # --- messages that used to point elsewhere ------------------------------------------------
    "state-reshaped-not-indexed": (
        "step/state", "h",
        "dh += dstate.reshape(n, 2, n_hidden)[:, 0]\ndc = dstate[1].clone()\n",
        ("reshape", "transpose"),
    ),
    "fused-quarters-cat-on-the-batch": (
        "fused/gates", None,
        "difgo = torch.cat([di * i * (1 - i), df * f * (1 - f), dg * (1 - g**2),"
        " do * o * (1 - o)], 0)\n",
        ("dim 0", "dim 1"),
    ),
    "logits-count-typed-in": (
        "step/logits", None,
        "dlogits = (F.softmax(logits, -1) - F.one_hot(Yb.clamp(min=0), vocab_size))"
        " * mask[:, :, None] / 239\n",
        ("239",),
    ),
    "loop-zeros-for-h0": (
        "bptt/lstm_backward", "dWh",
        _slip(_LOOP, "h_prev, c_prev = h0, c0", "h_prev, c_prev = torch.zeros_like(h0), c0"),
        ("`h0`", "start"),
    ),
    "loop-zeros-for-c0": (
        "bptt/lstm_backward", "dxs",
        _slip(_LOOP, "h_prev, c_prev = h0, c0", "h_prev, c_prev = h0, torch.zeros_like(c0)"),
        ("`c0`", "start"),
    ),
    # --- more slips inside the loop, localised and then named ---------------------------------
    "loop-forget-slope-of-the-input": (
        "bptt/lstm_backward", "dxs",
        _slip(_LOOP, "daf = dc * c_prev * f * (1 - f)", "daf = dc * c_prev * f * (1 - i)"),
        ("t = ", "`f`", "`i`"),
    ),
    "loop-candidate-sigmoid-slope": (
        "bptt/lstm_backward", "dxs",
        _slip(_LOOP, "dag = dc * i * (1 - g * g)", "dag = dc * i * g * (1 - g)"),
        ("t = ", "sigmoid"),
    ),
    "loop-dc-without-the-output-gate-branch-dh": (
        "bptt/lstm_backward", "dxs",
        _slip(_LOOP, "dao = dh * tanh_c * o * (1 - o)", "dao = dhs[:, s] * tanh_c * o * (1 - o)"),
        ("t = ", "`dhs[:, s]`"),
    ),
    "loop-input-gate-pre-activation": (
        "bptt/lstm_backward", "dxs",
        _slip(_LOOP, "dai = dc * g * i * (1 - i)",
              "ai = torch.logit(i)\n        dai = dc * g * ai * (1 - ai)"),
        ("t = ", "`ai`"),
    ),
    "step-fn-bias-summed-over-the-gates": (
        "fused/lstm_step_backward", "db",
        _slip(_SLICES, "difgo.sum(dim=0)", "difgo.sum(dim=1)"),
        ("wrong axis",),
    ),
}
