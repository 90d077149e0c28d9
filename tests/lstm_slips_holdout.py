"""Wrong LSTM answers held out from tuning: other slips of the kinds tests/lstm_slips_tune.py
holds, written in other styles (the loop that sums the weights after it, a while loop over
`view`/`unbind`, stacked weights, einsum, `narrow`, the cosh form, slice assignments), so that
the figures measured on them say how the diagnoses do on answers nobody tuned them on.

name -> (step, graded tensor or None for the step's first check, code, words the message must
hold); the format of tests/lstm_slips_tune.py.
"""

from __future__ import annotations

from test_corpus_lstm import CORRECT

_AFTER = CORRECT["bptt/lstm_backward"]["weights-after-the-loop"]
_WHILE = CORRECT["bptt/lstm_backward"]["while-loop-view-gates"]
_SLICES = CORRECT["fused/lstm_step_backward"]["manual-slices-in-place"]
_COSH = CORRECT["fused/lstm_step_backward"]["view-unbind-cosh"]

# Two more ways to write the loop: the weights stacked into one matrix, and einsum with narrow.
_STACKED = '''
def lstm_backward(dhs, xs, h0, c0, hs, cs, gates, Wx, Wh):
    B, T, D = xs.shape
    H = h0.shape[1]
    W = torch.cat([Wx, Wh], 0)
    dW = torch.zeros_like(W)
    db = torch.zeros(4 * H)
    dxs = torch.zeros_like(xs)
    dh_next = torch.zeros(B, H)
    dc_next = torch.zeros(B, H)
    for s in reversed(range(T)):
        i, f, g, o = gates[:, s].split(H, 1)
        h_prev = hs[:, s - 1] if s > 0 else h0
        c_prev = cs[:, s - 1] if s > 0 else c0
        dh = dh_next + dhs[:, s]
        th = torch.tanh(cs[:, s])
        dc = dc_next + dh * o * (1 - th ** 2)
        difgo = torch.cat([dc * g * i * (1 - i), dc * c_prev * f * (1 - f),
                           dc * i * (1 - g ** 2), dh * th * o * (1 - o)], 1)
        z = torch.cat([xs[:, s], h_prev], 1)
        dW += z.T @ difgo
        db += difgo.sum(0)
        dz = difgo @ W.T
        dxs[:, s] = dz[:, :D]
        dh_next = dz[:, D:]
        dc_next = dc * f
    return dxs, dh_next, dc_next, dW[:D], dW[D:], db
'''

_EINSUM = '''
def lstm_backward(dhs, xs, h0, c0, hs, cs, gates, Wx, Wh):
    B, T, H = hs.shape
    dxs = xs.new_zeros(xs.shape)
    dWx = Wx.new_zeros(Wx.shape)
    dWh = Wh.new_zeros(Wh.shape)
    db = Wx.new_zeros(Wx.shape[1])
    carry_h = h0.new_zeros(B, H)
    carry_c = c0.new_zeros(B, H)
    for s in range(T - 1, -1, -1):
        gt = gates[:, s]
        i = gt.narrow(1, 0, H)
        f = gt.narrow(1, H, H)
        g = gt.narrow(1, 2 * H, H)
        o = gt.narrow(1, 3 * H, H)
        prev_h = h0 if s == 0 else hs[:, s - 1]
        prev_c = c0 if s == 0 else cs[:, s - 1]
        dh = dhs[:, s] + carry_h
        tanh_c = torch.tanh(cs[:, s])
        dc = carry_c + dh * o * (1 - tanh_c ** 2)
        da = torch.cat([dc * g * i * (1 - i), dc * prev_c * f * (1 - f),
                        dc * i * (1 - g ** 2), dh * tanh_c * o * (1 - o)], dim=1)
        dxs[:, s] = torch.einsum('bk,dk->bd', da, Wx)
        dWx += torch.einsum('bd,bk->dk', xs[:, s], da)
        dWh += torch.einsum('bh,bk->hk', prev_h, da)
        db += da.sum(0)
        carry_h = torch.einsum('bk,hk->bh', da, Wh)
        carry_c = dc * f
    return dxs, carry_h, carry_c, dWx, dWh, db
'''


def _slip(code: str, old: str, new: str) -> str:
    assert old in code, old
    return code.replace(old, new, 1)


# The two bases above are right answers: the holdout's test checks that before any slip.
BASES = {"stacked": _STACKED, "einsum": _EINSUM}

WRONG: dict[str, tuple[str, str | None, str, tuple[str, ...]]] = {
    # --- tanh' at the old cell state ---------------------------------------------------------
    "line-cosh-at-c_prev": (
        "step/h", "c", "do = torch.tanh(c) * dh\ndc = dc + o * dh / torch.cosh(c_prev)**2\n",
        ("`c_prev`", "`c`"),
    ),
    "step-fn-cosh-at-c_prev": (
        "fused/lstm_step_backward", "dc_prev",
        _slip(_COSH, "dh * o / torch.cosh(c)**2", "dh * o / torch.cosh(c_prev)**2"),
        ("`c_prev`", "`c`"),
    ),
    "while-tanh-slope-at-c_prev": (
        "bptt/lstm_backward", "dxs",
        _slip(_WHILE, "dc = dc_carry + dh * o * (1 - t_c**2)",
              "dc = dc_carry + dh * o * (1 - torch.tanh(c_prev)**2)"),
        ("t = ", "`c_prev`"),
    ),
    # --- sigma' written s * (1 + s) -----------------------------------------------------------
    "line-sigmoid-slope-plus-expanded": (
        "step/gates", "ao",
        "dai = di * (i - i**2)\ndaf = df * (f - f**2)\ndao = do * (o + o**2)\n",
        ("sign",),
    ),
    "fused-slices-sigmoid-slope-plus": (
        "fused/gates", None,
        "H = n_hidden\ndifgo = torch.zeros_like(ifgo)\ndifgo[:, :H] = di * i * (1 + i)\n"
        "difgo[:, H:2*H] = df * f * (1 - f)\ndifgo[:, 2*H:3*H] = dg * (1 - g**2)\n"
        "difgo[:, 3*H:] = do * o * (1 - o)\n",
        ("sign",),
    ),
    "step-fn-slices-sigmoid-slope-plus": (
        "fused/lstm_step_backward", "dx",
        _slip(_SLICES, "dc * c_prev * f * (1 - f)", "dc * c_prev * f * (1 + f)"),
        ("sign",),
    ),
    "after-sigmoid-slope-plus": (
        "bptt/lstm_backward", "dxs",
        _slip(_AFTER, "dc * g * i * (1 - i)", "dc * g * i * (1 + i)"),
        ("t = ", "sign"),
    ),
    # --- the gates read in the order i, f, o, g -----------------------------------------------
    "line-quarters-ifog-tuple": (
        "step/ifgo", None, "difgo = torch.cat((dai, daf, dao, dag), dim=-1)\n", ("order",),
    ),
    "step-fn-unbind-ifog": (
        "fused/lstm_step_backward", "dx",
        _slip(_COSH, "i, f, g, o = gates.view(B, 4, H).unbind(1)",
              "i, f, o, g = gates.view(B, 4, H).unbind(1)"),
        ("order",),
    ),
    "after-slices-ifog": (
        "bptt/lstm_backward", "dxs",
        _slip(_slip(_AFTER, "g = gates[:, s, 2 * H:3 * H]", "g = gates[:, s, 3 * H:]"),
              "o = gates[:, s, 3 * H:]", "o = gates[:, s, 2 * H:3 * H]"),
        ("t = ", "order"),
    ),
    # --- h where tanh(c) belongs --------------------------------------------------------------
    "line-h-for-tanh-in-both": (
        "step/h", "o", "do = h * dh\ndc = dc + dh * o * (1 - h.pow(2))\n",
        ("`h`", "o * tanh(c)"),
    ),
    "while-h-for-tanh": (
        "bptt/lstm_backward", "dxs",
        _slip(_WHILE, "t_c = torch.tanh(cs[:, s])", "t_c = hs[:, s]"),
        ("t = ", "`h`"),
    ),
    # --- a factor the line does not have --------------------------------------------------
    "line-dai-times-candidate": (
        "step/gates", "ai",
        "dai = di * i * (1 - i) * g\ndaf = df * f * (1 - f)\ndao = do * o * (1 - o)\n",
        ("extra factor", "`g`"),
    ),
    "line-di-times-sigmoid-slope": (
        "step/c", "i",
        "df, dc_prev, di, dg = dc * c_prev, dc * f, dc * g * i * (1 - i), dc * i\n",
        ("extra factor",),
    ),
    "line-dc-times-forget-gate": (
        "step/h", "c",
        "th = torch.tanh(c)\ndo = dh * th\ndc += dh * o * (1 - th) * (1 + th) * f\n",
        ("extra factor", "`f`"),
    ),
    "after-dag-times-input-gate": (
        "bptt/lstm_backward", "dxs",
        _slip(_AFTER, "dc * i * (1 - g**2)", "dc * i * (1 - g**2) * i"),
        ("t = ", "extra factor", "`i`"),
    ),
    "step-fn-slices-dao-times-gate": (
        "fused/lstm_step_backward", "dx",
        _slip(_SLICES, "dh * torch.tanh(c) * o * (1 - o)", "dh * torch.tanh(c) * o * (1 - o) * o"),
        ("extra factor",),
    ),
    # --- a term the line does not have ------------------------------------------------------
    "line-dc-plus-the-future-h": (
        "step/state", "c", "dh_future, dc_future = dstate.unbind(0)\ndh += dh_future\n"
        "dc = dc_future + dh_future\n",
        ("extra term",),
    ),
    "line-dc_prev-plus-dc": (
        "step/c", "c_prev", "df = torch.mul(dc, c_prev)\ndc_prev = torch.mul(dc, f) + dc\n"
        "di = torch.mul(dc, g)\ndg = torch.mul(dc, i)\n",
        ("extra term", "`dc`"),
    ),
    "while-carried-dc-plus-old": (
        "bptt/lstm_backward", "dxs",
        _slip(_WHILE, "dc_carry = dc * f", "dc_carry = dc * f + dc_carry"),
        ("t = ", "extra term"),
    ),
    "step-fn-cosh-dc_prev-plus-dc": (
        "fused/lstm_step_backward", "dc_prev",
        _slip(_COSH, "return dx, dh_prev, dc * f,", "return dx, dh_prev, dc * f + dc,"),
        ("extra term", "`dc`"),
    ),
    # --- a wrong function in the loss's step --------------------------------------------------
    "logits-flat-no-softmax": (
        "step/logits", None,
        "flat = logits.view(-1, vocab_size)\ny = Yb.view(-1)\nkeep = y >= 0\nd = flat.clone()\n"
        "d[keep, y[keep]] -= 1\nd[~keep] = 0\ndlogits = (d / keep.sum()).view_as(logits)\n",
        ("softmax",),
    ),
    "logits-where-log-softmax": (
        "step/logits", None,
        "p = F.log_softmax(logits, dim=-1)\ny = torch.where(Yb >= 0, Yb, torch.zeros_like(Yb))\n"
        "dlogits = (p - F.one_hot(y, num_classes=vocab_size)) * (Yb >= 0)[..., None]"
        " / (Yb >= 0).sum()\n",
        ("log_softmax", "softmax"),
    ),
    "logits-scatter-softmax-over-time": (
        "step/logits", None,
        "dlogits = torch.softmax(logits, 1)\n"
        "dlogits.scatter_add_(2, Yb.clamp(min=0).unsqueeze(2), -torch.ones_like(logits[..., :1]))\n"
        "dlogits = dlogits * mask.unsqueeze(2) / mask.sum()\n",
        ("wrong axis", "dim 1"),
    ),
    "logits-mean-per-name-then-names": (
        "step/logits", None,
        "dlogits = F.softmax(logits, -1) - F.one_hot(Yb.clamp(min=0), vocab_size)\n"
        "dlogits = dlogits * mask.unsqueeze(2) / mask.sum(1).view(-1, 1, 1) / n\n",
        ("row",),
    ),
    "logits-where-mask-drops-the-end": (
        "step/logits", None,
        "p = F.softmax(logits, dim=-1)\ny = torch.where(Yb >= 0, Yb, torch.zeros_like(Yb))\n"
        "dlogits = (p - F.one_hot(y, num_classes=vocab_size)) * (Yb > 0)[..., None]"
        " / (Yb > 0).sum()\n",
        ("`Yb > 0`",),
    ),
    "logits-exp-not-normalised": (
        "step/logits", None,
        "counts = logits.exp()\ndlogits = counts.clone()\n"
        "dlogits -= F.one_hot(Yb.clamp(min=0), vocab_size).float()\n"
        "dlogits *= mask.unsqueeze(-1)\ndlogits /= mask.sum()\n",
        ("softmax",),
    ),
    # --- a slip inside one long torch.cat -----------------------------------------------------
    "fused-cosh-power-missing": (
        "fused/gates", None,
        "difgo = torch.cat([di * torch.sigmoid(ai) * (1 - torch.sigmoid(ai)),\n"
        "                   df * torch.sigmoid(af) * (1 - torch.sigmoid(af)),\n"
        "                   dg / torch.cosh(ag),\n"
        "                   do * torch.sigmoid(ao) * (1 - torch.sigmoid(ao))], dim=1)\n",
        ("cosh",),
    ),
    "fused-output-slope-of-the-forget-gate": (
        "fused/gates", None,
        "difgo = torch.stack([di*i*(1-i), df*f*(1-f), dg*(1-g*g), do*o*(1-f)], 1)"
        ".reshape(n, 4*n_hidden)\n",
        ("`o`", "`f`"),
    ),
    "while-cat-input-gate-dropped": (
        "bptt/lstm_backward", "dxs",
        _slip(_WHILE, "dc * i * (1 - g**2)", "dc * (1 - g**2)"),
        ("t = ", "left out", "`i`"),
    ),
    "stacked-cat-forget-gate-dropped": (
        "bptt/lstm_backward", "dxs",
        _slip(_STACKED, "dc * c_prev * f * (1 - f)", "dc * c_prev * (1 - f)"),
        ("t = ", "left out", "`f`"),
    ),
    # --- messages that used to point elsewhere ------------------------------------------------
    "state-reshaped-and-unbound": (
        "step/state", "h",
        "dh_next, dc_next = dstate.reshape(n, 2, -1).unbind(1)\ndh = dh + dh_next\n"
        "dc = dc_next.clone()\n",
        ("reshape",),
    ),
    "ifgo-cat-default-dim": (
        "step/ifgo", None, "difgo = torch.cat((dai, daf, dag, dao))\n", ("dim 0", "dim 1"),
    ),
    "logits-count-typed-in-place": (
        "step/logits", None,
        "counts = logits.exp()\nprobs = counts / counts.sum(-1, keepdim=True)\n"
        "dlogits = probs.clone()\ndlogits -= F.one_hot(Yb.clamp(min=0), vocab_size).float()\n"
        "dlogits *= mask.unsqueeze(-1)\ndlogits /= 239.0\n",
        ("239",),
    ),
    "after-zeros-for-h0": (
        "bptt/lstm_backward", "dWh",
        _slip(_AFTER, "h_prevs = torch.cat([h0.unsqueeze(1)",
              "h_prevs = torch.cat([torch.zeros_like(h0).unsqueeze(1)"),
        ("`h0`", "start"),
    ),
    "while-zeros-for-c0": (
        "bptt/lstm_backward", "dxs",
        _slip(_WHILE, "c_prev = cs[:, s - 1] if s else c0",
              "c_prev = cs[:, s - 1] if s else torch.zeros_like(c0)"),
        ("`c0`", "start"),
    ),
    # --- more slips inside the loop, in the two other styles ----------------------------------
    "stacked-sigmoid-slope-plus": (
        "bptt/lstm_backward", "dxs",
        _slip(_STACKED, "dh * th * o * (1 - o)", "dh * th * o * (1 + o)"),
        ("t = ", "sign"),
    ),
    "stacked-carried-dh-plus-dh": (
        "bptt/lstm_backward", "dxs",
        _slip(_STACKED, "dh_next = dz[:, D:]", "dh_next = dz[:, D:] + dh"),
        ("t = ", "extra term", "`dh`"),
    ),
    "einsum-tanh-slope-at-c_prev": (
        "bptt/lstm_backward", "dxs",
        _slip(_EINSUM, "dh * o * (1 - tanh_c ** 2)", "dh * o * (1 - torch.tanh(prev_c) ** 2)"),
        ("t = ", "`prev_c`"),
    ),
    "einsum-candidate-sigmoid-slope": (
        "bptt/lstm_backward", "dxs",
        _slip(_EINSUM, "dc * i * (1 - g ** 2)", "dc * i * g * (1 - g)"),
        ("t = ", "sigmoid"),
    ),
    "einsum-dao-times-forget": (
        "bptt/lstm_backward", "dxs",
        _slip(_EINSUM, "dh * tanh_c * o * (1 - o)", "dh * tanh_c * o * (1 - o) * f"),
        ("t = ", "extra factor", "`f`"),
    ),
}
