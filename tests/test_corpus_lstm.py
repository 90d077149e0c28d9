"""The LSTM lesson held to a corpus: right answers written the ways learners write them must pass
with the line's rule followed, and wrong ones learners really make must be refused with a
diagnosis that names the slip without handing over the answer.

Every checked step of exercises/lstm has at least three right answers that differ from the pack's
solution (the other forms of the derivatives, concatenations written as slice assignments,
chunk/split/view next to manual slicing, einsum, loops running down with range, the weights
summed after the loop, the loop built on the learner's own step function) and at least two wrong
ones (off by one in time, a path into the state dropped, the mask's count forgotten, the gate's
input where its output belongs, a sum over the wrong axis, transposes, `=` for `+=`, hard-coded
sizes). Each goes through `Engine.check` as the CLI sends it, on the lesson's batch and on the
fresh batch of 17 or the fresh sizes.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tutor.config import Settings
from tutor.pack.kinds import Function
from tutor.pack.model import load_pack

LSTM = Path(__file__).resolve().parent.parent / "exercises" / "lstm"
PACK = load_pack(LSTM)


@pytest.fixture(scope="module")
def engine():
    import os

    from tutor.core.engine import Engine

    isolation = os.environ.get("BACKPROP_TUTOR_ISOLATION") or "auto"
    return Engine(Settings(device="cpu", pack=str(LSTM), isolation=isolation))


# --- right answers ----------------------------------------------------------------------------

CORRECT: dict[str, dict[str, str]] = {
    "step/logits": {
        "exp-over-sum-in-place": """
counts = logits.exp()
probs = counts / counts.sum(-1, keepdim=True)
dlogits = probs.clone()
dlogits -= F.one_hot(Yb.clamp(min=0), vocab_size).float()
dlogits *= mask.unsqueeze(-1)
dlogits /= mask.sum()
""",
        "where-and-real-count": """
p = F.softmax(logits, dim=-1)
y = torch.where(Yb >= 0, Yb, torch.zeros_like(Yb))
dlogits = (p - F.one_hot(y, num_classes=vocab_size)) * (Yb >= 0)[..., None] / (Yb >= 0).sum()
""",
        "flat-rows-then-view": """
flat = logits.view(-1, vocab_size)
y = Yb.view(-1)
keep = y >= 0
d = F.softmax(flat, 1)
d[keep, y[keep]] -= 1
d[~keep] = 0
dlogits = (d / keep.sum()).view_as(logits)
""",
        "scatter-minus-one": """
dlogits = torch.softmax(logits, 2)
dlogits.scatter_add_(2, Yb.clamp(min=0).unsqueeze(2), -torch.ones_like(logits[..., :1]))
dlogits = dlogits * mask.unsqueeze(2) / mask.sum()
""",
        "log-softmax-exp": """
dlogits = F.log_softmax(logits, -1).exp()
dlogits[Yb >= 0] -= F.one_hot(Yb[Yb >= 0], vocab_size).float()
dlogits = dlogits * mask[:, :, None] / mask.sum()
""",
    },
    "step/hs": {
        "einsum": """
dhs = torch.einsum('ntv,hv->nth', dlogits, Wy)
dWy = torch.einsum('nth,ntv->hv', hs, dlogits)
dby = dlogits.sum(dim=(0, 1))
""",
        "batched-transpose-then-sum": """
dhs = dlogits @ Wy.transpose(0, 1)
dWy = (hs.transpose(1, 2) @ dlogits).sum(0)
dby = dlogits.sum(0).sum(0)
""",
        "views-from-shapes": """
dhs = dlogits.matmul(Wy.t())
dWy = hs.view(-1, hs.shape[-1]).T @ dlogits.view(-1, dlogits.shape[-1])
dby = dlogits.view(-1, vocab_size).sum(0)
""",
        "flatten": """
dhs = dlogits @ Wy.T
dWy = torch.flatten(hs, 0, 1).T @ torch.flatten(dlogits, 0, 1)
dby = dlogits.reshape(-1, vocab_size).sum(0)
""",
    },
    "step/h_out": {
        "split-three-ways": """
dhs_before, dh, dhs_after = dhs.split([t, 1, dhs.shape[1] - t - 1], 1)
dh = dh.squeeze(1).clone()
""",
        "explicit-slices": """
dhs_before = dhs[:, 0:t]
dh = dhs[:, t, :] * 1.0
dhs_after = dhs[:, t + 1:, :]
""",
        "narrow-and-add-into-zeros": """
dhs_before = dhs.narrow(1, 0, t)
dhs_after = dhs.narrow(1, t + 1, dhs.shape[1] - t - 1)
dh = torch.zeros_like(h)
dh += dhs[:, t]
""",
        "select-clones": """
dh = dhs.select(1, t).clone()
dhs_before = dhs[:, :t].clone()
dhs_after = dhs[:, t+1:].clone()
""",
    },
    "step/state": {
        "out-of-place": """
dh = dh + dstate[0]
dc = dstate[1] * 1
""",
        "unpack-the-stack": """
dh_next, dc_next = dstate
dh = dh + dh_next
dc = dc_next.clone()
""",
        "add-method": """
dh.add_(dstate[0])
dc = dstate[1].clone()
""",
        "unbind": """
dh_future, dc_future = dstate.unbind(0)
dh += dh_future
dc = torch.clone(dc_future)
""",
    },
    "step/h": {
        "tanh-kept": """
tc = torch.tanh(c)
do = dh * tc
dc += dh * o * (1 - tc * tc)
""",
        "cosh": """
do = torch.tanh(c) * dh
dc = dc + o * dh / torch.cosh(c)**2
""",
        "methods": """
do = dh * c.tanh()
dc = dc + dh * o * (1 - c.tanh().pow(2))
""",
        "factored-difference-of-squares": """
th = torch.tanh(c)
do = dh * th
dc += dh * o * (1 - th) * (1 + th)
""",
    },
    "step/c": {
        "factors-first": """
df = c_prev * dc
dc_prev = f * dc
di = g * dc
dg = i * dc
""",
        "one-tuple": """
df, dc_prev, di, dg = dc * c_prev, dc * f, dc * g, dc * i
""",
        "torch-mul": """
df = torch.mul(dc, c_prev)
dc_prev = torch.mul(dc, f)
di = torch.mul(dc, g)
dg = torch.mul(dc, i)
""",
        "clone-then-scale": """
dc_prev = dc.clone()
dc_prev *= f
df = dc * c_prev
di = dc * g
dg = dc * i
""",
    },
    "step/gates": {
        "sigmoid-of-the-input": """
dai = di * torch.sigmoid(ai) * (1 - torch.sigmoid(ai))
daf = df * torch.sigmoid(af) * (1 - torch.sigmoid(af))
dao = do * torch.sigmoid(ao) * (1 - torch.sigmoid(ao))
""",
        "expanded": """
dai = di * (i - i**2)
daf = df * (f - f**2)
dao = do * (o - o**2)
""",
        "sigmoid-of-minus": """
s = torch.sigmoid
dai = di * s(ai) * s(-ai)
daf = df * s(af) * s(-af)
dao = do * s(ao) * s(-ao)
""",
        "from-exp": """
dai = di * torch.exp(-ai) / (1 + torch.exp(-ai))**2
daf = df * torch.exp(-af) / (1 + torch.exp(-af))**2
dao = do * torch.exp(-ao) / (1 + torch.exp(-ao))**2
""",
    },
    "step/g": {
        "tanh-of-the-input": "dag = dg * (1 - torch.tanh(ag)**2)\n",
        "cosh": "dag = dg / torch.cosh(ag)**2\n",
        "output-times-itself": "dag = (1 - g * g) * dg\n",
        "pow-method": "dag = dg * (1 - g.pow(2))\n",
    },
    "step/ifgo": {
        "slices-of-zeros": """
difgo = torch.zeros_like(ifgo)
difgo[:, :n_hidden] = dai
difgo[:, n_hidden:2*n_hidden] = daf
difgo[:, 2*n_hidden:3*n_hidden] = dag
difgo[:, 3*n_hidden:] = dao
""",
        "hstack": "difgo = torch.hstack([dai, daf, dag, dao])\n",
        "tuple-last-dim": "difgo = torch.cat((dai, daf, dag, dao), dim=-1)\n",
        "stack-then-view": "difgo = torch.stack([dai, daf, dag, dao], 1).view(n, -1)\n",
        "loop-over-quarters": """
H = dai.shape[1]
difgo = torch.zeros_like(ifgo)
for k, d in enumerate([dai, daf, dag, dao]):
    difgo[:, k*H:(k+1)*H] = d
""",
    },
    "step/inputs": {
        "transpose-and-t": """
dx_t = difgo @ Wx_t.transpose(0, 1)
dh_prev = difgo.mm(Wh_t.t())
dWx_t = x_t.t() @ difgo
dWh_t = torch.mm(h_prev.T, difgo)
db_t = difgo.sum(dim=0)
""",
        "einsum": """
dx_t = torch.einsum('nk,dk->nd', difgo, Wx_t)
dh_prev = torch.einsum('nk,hk->nh', difgo, Wh_t)
dWx_t = torch.einsum('nd,nk->dk', x_t, difgo)
dWh_t = torch.einsum('nh,nk->hk', h_prev, difgo)
db_t = torch.einsum('nk->k', difgo)
""",
        "shared-weights-by-name": """
dx_t = difgo @ Wx.T
dh_prev = difgo @ Wh.T
dWx_t = x_t.T @ difgo
dWh_t = h_prev.T @ difgo
db_t = difgo.sum(0, keepdim=True).squeeze(0)
""",
        "outer-products-summed": """
dx_t = difgo @ Wx_t.T
dh_prev = difgo @ Wh_t.T
dWx_t = (x_t[:, :, None] * difgo[:, None, :]).sum(0)
dWh_t = (h_prev.unsqueeze(2) * difgo.unsqueeze(1)).sum(0)
db_t = difgo.sum(0)
""",
    },
    "bptt/lstm_backward": {
        "range-down-chunk-out-of-place": '''
def lstm_backward(dhs, xs, h0, c0, hs, cs, gates, Wx, Wh):
    T = xs.shape[1]
    dxs = torch.zeros_like(xs)
    dWx = torch.zeros_like(Wx)
    dWh = torch.zeros_like(Wh)
    db = torch.zeros(Wx.shape[1])
    dh_next = torch.zeros_like(h0)
    dc_next = torch.zeros_like(c0)
    for s in range(T - 1, -1, -1):
        i, f, g, o = gates[:, s].chunk(4, 1)
        if s == 0:
            h_prev, c_prev = h0, c0
        else:
            h_prev, c_prev = hs[:, s - 1], cs[:, s - 1]
        dh = dh_next + dhs[:, s]
        tanh_c = cs[:, s].tanh()
        dc = dc_next + dh * o * (1 - tanh_c * tanh_c)
        dai = dc * g * i * (1 - i)
        daf = dc * c_prev * f * (1 - f)
        dag = dc * i * (1 - g * g)
        dao = dh * tanh_c * o * (1 - o)
        difgo = torch.cat([dai, daf, dag, dao], dim=1)
        dxs[:, s] = difgo @ Wx.t()
        dWx = dWx + xs[:, s].t() @ difgo
        dWh = dWh + h_prev.t() @ difgo
        db = db + difgo.sum(0)
        dh_next = difgo @ Wh.t()
        dc_next = f * dc
    return dxs, dh_next, dc_next, dWx, dWh, db
''',
        "weights-after-the-loop": '''
def lstm_backward(dhs, xs, h0, c0, hs, cs, gates, Wx, Wh):
    B, T, D = xs.shape
    H = hs.shape[2]
    difgos = []
    dh_next = torch.zeros(B, H)
    dc_next = torch.zeros(B, H)
    for s in reversed(range(T)):
        i = gates[:, s, :H]
        f = gates[:, s, H:2 * H]
        g = gates[:, s, 2 * H:3 * H]
        o = gates[:, s, 3 * H:]
        c_prev = cs[:, s - 1] if s > 0 else c0
        dh = dhs[:, s] + dh_next
        tc = torch.tanh(cs[:, s])
        dc = dc_next + dh * o * (1 - tc**2)
        difgo = torch.zeros(B, 4 * H)
        difgo[:, :H] = dc * g * i * (1 - i)
        difgo[:, H:2 * H] = dc * c_prev * f * (1 - f)
        difgo[:, 2 * H:3 * H] = dc * i * (1 - g**2)
        difgo[:, 3 * H:] = dh * tc * o * (1 - o)
        difgos.append(difgo)
        dh_next = difgo @ Wh.T
        dc_next = dc * f
    d = torch.stack(difgos[::-1], dim=1)              # [B, T, 4H], in time order
    h_prevs = torch.cat([h0.unsqueeze(1), hs[:, :-1]], dim=1)
    dxs = d @ Wx.T
    dWx = xs.reshape(-1, D).T @ d.reshape(-1, 4 * H)
    dWh = h_prevs.reshape(-1, H).T @ d.reshape(-1, 4 * H)
    db = d.sum(dim=(0, 1))
    return dxs, dh_next, dc_next, dWx, dWh, db
''',
        "own-step-function": '''
def step_back(dh, dc, x, h_prev, c_prev, c, gates, Wx, Wh):
    i, f, g, o = gates.chunk(4, dim=1)
    tc = torch.tanh(c)
    dc = dc + dh * o * (1 - tc**2)
    difgo = torch.cat([dc * g * i * (1 - i), dc * c_prev * f * (1 - f),
                       dc * i * (1 - g**2), dh * tc * o * (1 - o)], dim=1)
    return difgo @ Wx.T, difgo @ Wh.T, dc * f, x.T @ difgo, h_prev.T @ difgo, difgo.sum(0)


def lstm_backward(dhs, xs, h0, c0, hs, cs, gates, Wx, Wh):
    T = xs.shape[1]
    dxs = torch.zeros_like(xs)
    dWx, dWh = torch.zeros_like(Wx), torch.zeros_like(Wh)
    db = torch.zeros(Wx.shape[1])
    dh, dc = torch.zeros_like(h0), torch.zeros_like(c0)
    for s in range(T - 1, -1, -1):
        h_prev = h0 if s == 0 else hs[:, s - 1]
        c_prev = c0 if s == 0 else cs[:, s - 1]
        dx, dh, dc, dwx, dwh, dbs = step_back(dhs[:, s] + dh, dc, xs[:, s], h_prev, c_prev,
                                              cs[:, s], gates[:, s], Wx, Wh)
        dxs[:, s] = dx
        dWx += dwx
        dWh += dwh
        db += dbs
    return dxs, dh, dc, dWx, dWh, db
''',
        "while-loop-view-gates": '''
def lstm_backward(dhs, xs, h0, c0, hs, cs, gates, Wx, Wh):
    B, T, H = hs.shape
    dxs = []
    dWx = 0
    dWh = 0
    db = 0
    dh_carry = torch.zeros_like(h0)
    dc_carry = torch.zeros_like(c0)
    s = T
    while s > 0:
        s -= 1
        i, f, g, o = gates[:, s].view(B, 4, H).unbind(1)
        h_prev = hs[:, s - 1] if s else h0
        c_prev = cs[:, s - 1] if s else c0
        dh = dhs[:, s] + dh_carry
        t_c = torch.tanh(cs[:, s])
        dc = dc_carry + dh * o * (1 - t_c**2)
        difgo = torch.cat([dc * g * i * (1 - i), dc * c_prev * f * (1 - f),
                           dc * i * (1 - g**2), dh * t_c * o * (1 - o)], 1)
        dxs.insert(0, difgo @ Wx.T)
        dWx += torch.einsum('bd,bk->dk', xs[:, s], difgo)
        dWh += torch.einsum('bh,bk->hk', h_prev, difgo)
        db += difgo.sum(0)
        dh_carry = difgo @ Wh.T
        dc_carry = dc * f
    return torch.stack(dxs, 1), dh_carry, dc_carry, dWx, dWh, db
''',
    },
    "fused/gates": {
        "slices-of-zeros": """
H = n_hidden
difgo = torch.zeros_like(ifgo)
difgo[:, :H] = di * i * (1 - i)
difgo[:, H:2*H] = df * f * (1 - f)
difgo[:, 2*H:3*H] = dg * (1 - g**2)
difgo[:, 3*H:] = do * o * (1 - o)
""",
        "from-the-pre-activations": """
difgo = torch.cat([di * torch.sigmoid(ai) * (1 - torch.sigmoid(ai)),
                   df * torch.sigmoid(af) * (1 - torch.sigmoid(af)),
                   dg / torch.cosh(ag)**2,
                   do * torch.sigmoid(ao) * (1 - torch.sigmoid(ao))], dim=1)
""",
        "all-gates-then-fix-the-candidate": """
gts = torch.cat([i, f, g, o], 1)
local = gts * (1 - gts)
local[:, 2*n_hidden:3*n_hidden] = 1 - g**2
difgo = torch.cat([di, df, dg, do], 1) * local
""",
        "stack-then-reshape": """
difgo = torch.stack([di*i*(1-i), df*f*(1-f), dg*(1-g*g), do*o*(1-o)], 1).reshape(n, 4*n_hidden)
""",
    },
    "fused/lstm_step_backward": {
        "chunk-einsum": '''
def lstm_step_backward(dh, dc, x, h_prev, c_prev, c, gates, Wx, Wh):
    i, f, g, o = gates.chunk(4, dim=1)
    tanh_c = torch.tanh(c)
    dc_total = dc + dh * o * (1 - tanh_c**2)
    difgo = torch.cat([dc_total * g * i * (1 - i), dc_total * c_prev * f * (1 - f),
                       dc_total * i * (1 - g * g), dh * tanh_c * o * (1 - o)], 1)
    dx = difgo @ Wx.t()
    dh_prev = difgo @ Wh.t()
    dc_prev = dc_total * f
    dWx = torch.einsum('bd,bk->dk', x, difgo)
    dWh = torch.einsum('bh,bk->hk', h_prev, difgo)
    db = difgo.sum(0)
    return dx, dh_prev, dc_prev, dWx, dWh, db
''',
        "manual-slices-in-place": '''
def lstm_step_backward(dh, dc, x, h_prev, c_prev, c, gates, Wx, Wh):
    B, H = dh.shape
    i = gates[:, :H]
    f = gates[:, H:2*H]
    g = gates[:, 2*H:3*H]
    o = gates[:, 3*H:]
    dc = dc.clone()
    dc += dh * o * (1 - torch.tanh(c)**2)
    difgo = torch.zeros(B, 4 * H)
    difgo[:, :H] = dc * g * i * (1 - i)
    difgo[:, H:2*H] = dc * c_prev * f * (1 - f)
    difgo[:, 2*H:3*H] = dc * i * (1 - g**2)
    difgo[:, 3*H:] = dh * torch.tanh(c) * o * (1 - o)
    return (difgo @ Wx.T, difgo @ Wh.T, dc * f,
            x.T @ difgo, h_prev.T @ difgo, difgo.sum(dim=0))
''',
        "view-unbind-cosh": '''
def lstm_step_backward(dh, dc, x, h_prev, c_prev, c, gates, Wx, Wh):
    B = x.shape[0]
    H = c.shape[1]
    i, f, g, o = gates.view(B, 4, H).unbind(1)
    dc = dc + dh * o / torch.cosh(c)**2
    dai = dc * g * i * (1 - i)
    daf = dc * c_prev * f * (1 - f)
    dag = dc * i * (1 - g**2)
    dao = dh * torch.tanh(c) * (o - o**2)
    difgo = torch.stack([dai, daf, dag, dao], 1).view(B, 4 * H)
    dx = difgo @ Wx.transpose(0, 1)
    dh_prev = difgo @ Wh.transpose(0, 1)
    dWx = x.transpose(0, 1) @ difgo
    dWh = h_prev.transpose(0, 1) @ difgo
    return dx, dh_prev, dc * f, dWx, dWh, difgo.sum(0)
''',
    },
}

CORRECT_CASES = [
    pytest.param(step_id, code.lstrip("\n"), id=f"{step_id}:{name}")
    for step_id, forms in CORRECT.items()
    for name, code in forms.items()
]


# --- wrong answers ----------------------------------------------------------------------------

# name: (step, graded tensor or None for the step's first check, code, words the diagnosis's
# message must hold: what points the learner at the slip)
WRONG: dict[str, tuple[str, str | None, str, tuple[str, ...]]] = {
    # --- the masked loss ---------------------------------------------------------------------
    "logits-mean-forgotten": (
        "step/logits", None,
        "p = logits.exp() / logits.exp().sum(-1, keepdim=True)\n"
        "dlogits = (p - F.one_hot(Yb.clamp(min=0), vocab_size)) * mask.unsqueeze(-1)\n",
        ("too large", "real positions"),
    ),
    "logits-divided-by-the-names": (
        "step/logits", None,
        "dlogits = F.softmax(logits, -1) - F.one_hot(Yb.clamp(min=0), vocab_size)\n"
        "dlogits *= mask[..., None]\ndlogits /= n\n",
        ("`n`", "position"),
    ),
    "logits-padding-left-in": (
        "step/logits", None,
        "p = F.softmax(logits, 2)\np[Yb >= 0] -= F.one_hot(Yb[Yb >= 0], vocab_size).float()\n"
        "dlogits = p / (Yb >= 0).sum()\n",
        ("padded", "mask"),
    ),
    "logits-count-per-row": (
        "step/logits", None,
        "dlogits = (F.softmax(logits, -1) - F.one_hot(Yb.clamp(min=0), vocab_size)) "
        "* mask[:, :, None] / mask.sum(1, keepdim=True)[:, :, None]\n",
        ("wrong axis",),
    ),
    "logits-softmax-over-time": (
        "step/logits", None,
        "dlogits = (F.softmax(logits, 1) - F.one_hot(Yb.clamp(min=0), vocab_size)) "
        "* mask[:, :, None] / mask.sum()\n",
        ("wrong axis", "dim 1"),
    ),
    # --- the output layer --------------------------------------------------------------------
    "by-summed-over-the-batch-only": (
        "step/hs", "by",
        "dhs = dlogits @ Wy.T\ndWy = torch.einsum('nth,ntv->hv', hs, dlogits)\n"
        "dby = dlogits.sum(dim=0)\n",
        ("time",),
    ),
    "Wy-transposed": (
        "step/hs", "Wy",
        "dhs = dlogits @ Wy.T\n"
        "dWy = dlogits.reshape(-1, vocab_size).T @ hs.reshape(-1, n_hidden)\n"
        "dby = dlogits.sum((0, 1))\n",
        ("transposed",),
    ),
    "Wy-averaged-over-the-batch": (
        "step/hs", "Wy",
        "dhs = dlogits @ Wy.T\ndWy = (hs.transpose(1, 2) @ dlogits).mean(0)\n"
        "dby = dlogits.sum((0, 1))\n",
        ("a sum, not a mean",),
    ),
    "by-summed-over-the-wrong-axes": (
        "step/hs", "by",
        "dhs = dlogits @ Wy.T\ndWy = hs.reshape(-1, n_hidden).T @ dlogits.reshape(-1, vocab_size)\n"
        "dby = dlogits.sum((1, 2))\n",
        ("wrong axis",),
    ),
    # --- dh from the output ------------------------------------------------------------------
    "h-one-step-late": (
        "step/h_out", "h",
        "dhs_before = dhs[:, :t]\ndhs_after = dhs[:, t+1:]\ndh = dhs[:, t + 1].clone()\n",
        ("`t + 1`", "one off"),
    ),
    "h-one-step-early": (
        "step/h_out", "h",
        "dhs_before, dhs_after = dhs[:, :t], dhs[:, t + 1:]\ndh = dhs[:, t - 1] * 1.0\n",
        ("Off by one",),
    ),
    "h-at-the-last-position": (
        "step/h_out", "h",
        "dhs_before = dhs[:, :t]\ndhs_after = dhs[:, t+1:]\n"
        "dh = dhs[:, dhs.shape[1] - 1].clone()\n",
        ("last position", "position `t`"),
    ),
    "hs_after-from-t": (
        "step/h_out", "hs_after",
        "dhs_before = dhs[:, :t]\ndhs_after = dhs[:, t:]\ndh = dhs[:, t].clone()\n",
        ("shape",),
    ),
    # --- the state handed on -----------------------------------------------------------------
    "state-halves-swapped-h": (
        "step/state", "h", "dh = dh + dstate[1]\ndc = dstate[0] * 1.0\n", ("swapped",),
    ),
    "state-halves-swapped-c": (
        "step/state", "c", "dh = dh + dstate[1]\ndc = dstate[0] * 1.0\n", ("swapped",),
    ),
    "state-output-branch-overwritten": (
        "step/state", "h", "dh = dstate[0] * 1.0\ndc = dstate[1].clone()\n", ("`+=`",),
    ),
    "state-both-halves-into-h": (
        "step/state", "h", "dh = dh + dstate.sum(dim=0)\ndc = dstate[1] * 1.0\n",
        ("Both halves",),
    ),
    "state-h-into-the-cell": (
        "step/state", "c", "dh = dh + dstate[0]\ndc = dh + dstate[1]\n", ("took `dh`",),
    ),
    "h-tanh-forgotten-in-do": (
        "step/h", "o", "do = c * dh\ndc += dh * o * (1 - torch.tanh(c)**2)\n",
        ("cell state itself",),
    ),
    "g-tanh-for-its-slope": (
        "step/g", "ag", "dag = torch.tanh(ag) * dg\n", ("slope",),
    ),
    # --- h = o * tanh(c) ---------------------------------------------------------------------
    "h-for-the-tanh": (
        "step/h", "c", "do = dh * torch.tanh(c)\ndc = dc + dh * o * (1 - h * h)\n",
        ("`h`", "o * tanh(c)"),
    ),
    "output-gate-dropped": (
        "step/h", "c", "tc = torch.tanh(c)\ndo = dh * tc\ndc += dh * (1 - tc**2)\n",
        ("left out", "`o`"),
    ),
    "sigmoid-derivative-for-the-tanh": (
        "step/h", "c",
        "tc = torch.tanh(c)\ndo = dh * tc\ndc += dh * o * tc * (1 - tc)\n",
        ("sigmoid",),
    ),
    "tanh-derivative-of-the-input": (
        "step/h", "c", "do = dh * torch.tanh(c)\ndc = dc + dh * o * (1 - c * c)\n",
        ("`torch.tanh(c)`",),
    ),
    "cell-branch-overwritten": (
        "step/h", "c",
        "do = dh * torch.tanh(c)\ndc = dh * o / torch.cosh(c)**2\n", ("`+=`",),
    ),
    # --- c = f * c_prev + i * g --------------------------------------------------------------
    "forget-gate-dropped": (
        "step/c", "c_prev",
        "df, di, dg = dc * c_prev, dc * g, dc * i\ndc_prev = dc * 1\n", ("forget gate",),
    ),
    "new-cell-for-the-old": (
        "step/c", "f",
        "df = dc * c\ndc_prev = dc * f\ndi = dc * g\ndg = dc * i\n", ("`c_prev`",),
    ),
    "c_prev-local-only": (
        "step/c", "c_prev",
        "df = dc * c_prev\ndc_prev = f\ndi = dc * g\ndg = dc * i\n", ("`dc`",),
    ),
    "partners-swapped": (
        "step/c", "g", "df, dc_prev = dc * c_prev, dc * f\ndi, dg = i * dc, g * dc\n",
        ("partner",),
    ),
    # --- the gates ---------------------------------------------------------------------------
    "sigmoid-applied-twice": (
        "step/gates", "ai",
        "dai = di * torch.sigmoid(i) * (1 - torch.sigmoid(i))\ndaf = df * f * (1 - f)\n"
        "dao = do * o * (1 - o)\n",
        ("once more", "`i`"),
    ),
    "forget-gate-from-the-input-gate": (
        "step/gates", "af",
        "dai = di * i * (1 - i)\ndaf = df * i * (1 - i)\ndao = do * o * (1 - o)\n",
        ("`f`", "`i`"),
    ),
    "output-gate-pre-activation": (
        "step/gates", "ao",
        "dai = di * i * (1 - i)\ndaf = df * f * (1 - f)\ndao = do * (ao - ao**2)\n",
        ("`ao`",),
    ),
    "forget-gate-upstream-dropped": (
        "step/gates", "af",
        "dai = di * i * (1 - i)\ndaf = f * (1 - f)\ndao = do * o * (1 - o)\n",
        ("chain rule", "`df`"),
    ),
    "candidate-tanh-twice": (
        "step/g", None, "dag = dg * (1 - torch.tanh(g)**2)\n", ("once more",),
    ),
    "candidate-upstream-dropped": ("step/g", None, "dag = 1 - g**2\n", ("`dg`",)),
    "candidate-power-of-the-difference": (
        "step/g", None, "dag = dg * (1 - g)**2\n", ("exponent",),
    ),
    "candidate-sigmoid-derivative": (
        "step/g", None, "dag = dg * (g - g**2)\n", ("sigmoid",),
    ),
    # --- the quarters together ---------------------------------------------------------------
    "quarters-out-of-order": (
        "step/ifgo", None,
        "difgo = torch.zeros_like(ifgo)\ndifgo[:, :n_hidden] = dai\n"
        "difgo[:, n_hidden:2*n_hidden] = daf\ndifgo[:, 2*n_hidden:3*n_hidden] = dao\n"
        "difgo[:, 3*n_hidden:] = dag\n",
        ("order",),
    ),
    "quarters-interleaved": (
        "step/ifgo", None, "difgo = torch.stack([dai, daf, dag, dao], 2).view(n, -1)\n",
        ("wrong axis",),
    ),
    "quarters-stacked-on-the-batch": (
        "step/ifgo", None, "difgo = torch.cat([dai, daf, dag, dao], 0)\n", ("dim 0", "dim 1"),
    ),
    "gate-outputs-for-pre-activations": (
        "step/ifgo", None, "difgo = torch.hstack([di, df, dg, do])\n", ("gates' outputs",),
    ),
    # --- the step's inputs and weights -------------------------------------------------------
    "Wx_t-transposed": (
        "step/inputs", "Wx_t",
        "dx_t = difgo @ Wx_t.T\ndh_prev = difgo @ Wh_t.T\ndWx_t = difgo.T @ x_t\n"
        "dWh_t = h_prev.T @ difgo\ndb_t = difgo.sum(0)\n",
        ("transposed",),
    ),
    "bias-not-summed": (
        "step/inputs", "b_t",
        "dx_t = difgo @ Wx_t.T\ndh_prev = difgo @ Wh_t.T\ndWx_t = x_t.T @ difgo\n"
        "dWh_t = h_prev.T @ difgo\ndb_t = difgo\n",
        ("sum",),
    ),
    "bias-summed-over-the-gates": (
        "step/inputs", "b_t",
        "dx_t = difgo @ Wx_t.T\ndh_prev = difgo @ Wh_t.T\ndWx_t = x_t.T @ difgo\n"
        "dWh_t = h_prev.T @ difgo\ndb_t = difgo.sum(1)\n",
        ("wrong axis",),
    ),
    "bias-kept-as-a-row": (
        "step/inputs", "b_t",
        "dx_t = difgo @ Wx_t.T\ndh_prev = difgo @ Wh_t.T\ndWx_t = x_t.T @ difgo\n"
        "dWh_t = h_prev.T @ difgo\ndb_t = difgo.sum(0, keepdim=True)\n",
        ("keepdim",),
    ),
    "Wh_t-from-the-new-state": (
        "step/inputs", "Wh_t",
        "dx_t = difgo @ Wx_t.T\ndh_prev = difgo @ Wh_t.T\ndWx_t = x_t.T @ difgo\n"
        "dWh_t = h.T @ difgo\ndb_t = difgo.sum(0)\n",
        ("`h`", "`h_prev`"),
    ),
    # --- the fused gates ---------------------------------------------------------------------
    "fused-pre-activations": (
        "fused/gates", None,
        "difgo = torch.cat((di * ai * (1 - ai), df * af * (1 - af), dg * (1 - ag * ag),"
        " do * ao * (1 - ao)), dim=1)\n",
        ("`ai`",),
    ),
    "fused-upstream-dropped": (
        "fused/gates", None,
        "difgo = torch.cat([i - i**2, f - f**2, 1 - g * g, o - o**2], 1)\n",
        ("chain rule",),
    ),
    "fused-output-gate-as-tanh": (
        "fused/gates", None,
        "difgo = torch.cat([di * i * (1 - i), df * f * (1 - f), dg * (1 - g * g),"
        " do * (1 - o * o)], -1)\n",
        ("sigmoid",),
    ),
    "fused-candidate-as-sigmoid": (
        "fused/gates", None,
        "difgo = torch.cat([di * i * (1 - i), df * f * (1 - f), dg * (g - g**2),"
        " do * o * (1 - o)], 1)\n",
        ("tanh",),
    ),
    "fused-quarters-out-of-order": (
        "fused/gates", None,
        "H = n_hidden\ndifgo = torch.zeros_like(ifgo)\ndifgo[:, :H] = di * i * (1 - i)\n"
        "difgo[:, H:2*H] = df * f * (1 - f)\ndifgo[:, 2*H:3*H] = do * o * (1 - o)\n"
        "difgo[:, 3*H:] = dg * (1 - g**2)\n",
        ("order",),
    ),
}

# Slips put into right answers of the corpus above, so that they are written the learners' way
# and not the way the catalogue wrote them.
_LOOP = CORRECT["bptt/lstm_backward"]["range-down-chunk-out-of-place"]
_STEP = CORRECT["fused/lstm_step_backward"]["chunk-einsum"]


def _slip(code: str, old: str, new: str) -> str:
    assert old in code, old
    return code.replace(old, new, 1)


WRONG.update({
    "loop-h_prev-one-step-late": (
        "bptt/lstm_backward", "dWh",
        _slip(_LOOP, "hs[:, s - 1], cs[:, s - 1]", "hs[:, s], cs[:, s - 1]"),
        ("Off by one", "`hs[:, s - 1]`"),
    ),
    "loop-c_prev-one-step-late": (
        "bptt/lstm_backward", "dxs", _slip(_LOOP, "hs[:, s - 1], cs[:, s - 1]",
                                           "hs[:, s - 1], cs[:, s]"),
        ("Off by one", "`c_prev`"),
    ),
    "loop-carried-dh-dropped": (
        "bptt/lstm_backward", "dxs", _slip(_LOOP, "dh = dh_next + dhs[:, s]", "dh = dhs[:, s]"),
        ("dropped",),
    ),
    "loop-carried-dc-dropped": (
        "bptt/lstm_backward", "dxs",
        _slip(_LOOP, "dc = dc_next + dh * o", "dc = dh * o"), ("`dc_next`",),
    ),
    "loop-forget-gate-dropped": (
        "bptt/lstm_backward", "dxs", _slip(_LOOP, "dc_next = f * dc", "dc_next = dc"),
        ("forget gate",),
    ),
    "loop-weights-overwritten": (
        "bptt/lstm_backward", "dWx",
        _slip(_slip(_slip(_LOOP, "dWx = dWx + xs", "dWx = xs"), "dWh = dWh + h_prev",
                    "dWh = h_prev"), "db = db + difgo", "db = difgo"),
        ("`=`", "every step"),
    ),
    "loop-forwards-in-time": (
        "bptt/lstm_backward", "dxs", _slip(_LOOP, "range(T - 1, -1, -1)", "range(T)"),
        ("forwards",),
    ),
    "loop-stops-before-the-first-step": (
        "bptt/lstm_backward", "dxs", _slip(_LOOP, "range(T - 1, -1, -1)", "range(T - 1, 0, -1)"),
        ("one step early", "`s = 0`"),
    ),
    "loop-output-gate-dropped": (
        "bptt/lstm_backward", "dxs",
        _slip(_LOOP, "dc = dc_next + dh * o * (1 - tanh_c * tanh_c)",
              "dc = dc_next + dh * (1 - tanh_c * tanh_c)"),
        ("output gate",),
    ),
    "step-fn-carried-dc-replaced": (
        "fused/lstm_step_backward", "dx",
        _slip(_STEP, "dc_total = dc + dh * o", "dc_total = dh * o"), ("replaced",),
    ),
    "step-fn-dc_prev-before-the-branch": (
        "fused/lstm_step_backward", "dc_prev",
        _slip(_STEP, "dc_prev = dc_total * f", "dc_prev = dc * f"), ("before its branch",),
    ),
    "step-fn-forget-gate-dropped": (
        "fused/lstm_step_backward", "dc_prev",
        _slip(_STEP, "dc_prev = dc_total * f", "dc_prev = dc_total"), ("forget gate",),
    ),
    "step-fn-output-gate-dropped": (
        "fused/lstm_step_backward", "dc_prev",
        _slip(_STEP, "dh * o * (1 - tanh_c**2)", "dh * (1 - tanh_c**2)"), ("output gate",),
    ),
    "step-fn-Wx-transposed": (
        "fused/lstm_step_backward", "dWx",
        _slip(_STEP, "torch.einsum('bd,bk->dk', x, difgo)", "difgo.t() @ x"), ("`x.T`",),
    ),
    "step-fn-new-cell-for-the-old": (
        "fused/lstm_step_backward", "dx",
        _slip(_STEP, "dc_total * c_prev * f", "dc_total * c * f"), ("`c`",),
    ),
})

# Sizes of the lesson written in: right on the lesson's batch, refused on the fresh one, with
# the size named.
HARD_CODED: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "logits-batch-of-32": (
        "step/logits",
        "dlogits = F.softmax(logits, -1) - F.one_hot(Yb.clamp(min=0), vocab_size)\n"
        "dlogits = dlogits * mask.view(32, -1, 1) / mask.sum()\n",
        ("batch size",),
    ),
    "ifgo-zeros-of-32": (
        "step/ifgo", "difgo = torch.zeros(32, 4 * n_hidden)\n"
        "difgo[:, :n_hidden], difgo[:, n_hidden:2*n_hidden] = dai, daf\n"
        "difgo[:, 2*n_hidden:3*n_hidden], difgo[:, 3*n_hidden:] = dag, dao\n",
        ("batch size",),
    ),
    "loop-lesson-width": (
        "bptt/lstm_backward", _slip(_LOOP, "T = xs.shape[1]", "T = xs.shape[1]\n    H = n_hidden")
        .replace("chunk(4, 1)", "split(H, 1)"),
        ("size of the lesson",),
    ),
    "step-fn-width-32": (
        "fused/lstm_step_backward",
        _slip(_STEP, "i, f, g, o = gates.chunk(4, dim=1)", "i, f, g, o = gates.split(32, 1)"),
        ("size of the lesson",),
    ),
}

WRONG_CASES = [pytest.param(*case, id=name) for name, case in WRONG.items()]
HARD_CODED_CASES = [pytest.param(*case, id=name) for name, case in HARD_CODED.items()]


# --- the tests --------------------------------------------------------------------------------

_REFERENCE_RULES: dict[str, str | None] = {}


def _reference_rule(engine, step_id: str) -> str | None:
    """The rule the pack's own solution gets: followed where the step has a probe, else None."""
    if step_id not in _REFERENCE_RULES:
        _REFERENCE_RULES[step_id] = engine.check(step_id, PACK.step(step_id).solution).to_dict()[
            "rule"]
    return _REFERENCE_RULES[step_id]


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


def test_every_checked_step_has_its_corpus():
    checked = {s.id for s in PACK.gradient_steps}
    assert len(checked) == 13
    assert set(CORRECT) == checked
    assert all(len(forms) >= 3 for forms in CORRECT.values())
    for step_id, forms in CORRECT.items():
        solution = _squash(PACK.step(step_id).solution)
        assert all(_squash(code) != solution for code in forms.values()), step_id
    wrong_per_step = {s: sum(1 for w in WRONG.values() if w[0] == s) for s in checked}
    assert all(count >= 2 for count in wrong_per_step.values()), wrong_per_step


@pytest.mark.parametrize("step_id, code", CORRECT_CASES)
def test_correct_answer_passes_with_the_rule(engine, step_id, code):
    result = engine.check(step_id, code).to_dict()
    assert result["error"] is None, result["error"]
    failing = [(c["grad"], c["verdict"], c["diagnosis"], c["message"]) for c in result["checks"]
               if c["verdict"] not in ("exact", "approximate") or c["diagnosis"]]
    assert result["passed"], failing or result.get("heldout")
    assert result["heldout"]["passed"], result["heldout"]
    if isinstance(PACK.step(step_id).kind, Function):
        assert result["heldout"]["what"].startswith("fresh sizes (")
    else:
        assert result["heldout"]["batch_size"] == 17
    # Where the step has a rule probe, a right answer follows the rule, not only the numbers.
    expected = _reference_rule(engine, step_id)
    assert result["rule"] == expected, [(c["tensor"], c["rule"], c["note"])
                                        for c in result["checks"]]


@pytest.mark.parametrize("step_id, tensor, code, words", WRONG_CASES)
def test_wrong_answer_is_refused_and_named(engine, step_id, tensor, code, words):
    result = engine.check(step_id, code.lstrip("\n")).to_dict()
    assert result["error"] is None, result["error"]
    assert not result["passed"]
    name = tensor or PACK.step(step_id).checks[0]
    check = next(c for c in result["checks"] if c["tensor"] == name)
    assert check["verdict"] in ("wrong", "shape"), check
    assert check["diagnosis"] is not None, check["message"]
    assert check["diagnosis"]["kind"] in {"shape", "sign", "scale", "transpose", "partial",
                                          "known_mistake", "derived", "nan"}, check["diagnosis"]
    message = check["diagnosis"]["message"]
    for word in words:
        assert word in message, (word, message)
    # A diagnosis names the slip; it does not hand over the step's solution.
    assert _squash(PACK.step(step_id).solution) not in _squash(message)


@pytest.mark.parametrize("step_id, code, words", HARD_CODED_CASES)
def test_a_size_of_the_lesson_is_refused_on_fresh_data(engine, step_id, code, words):
    result = engine.check(step_id, code.lstrip("\n")).to_dict()
    assert result["error"] is None, result["error"]
    assert not result["passed"]
    heldout = result["heldout"]
    assert heldout["passed"] is False, heldout
    for word in words:
        assert word in heldout["message"], (word, heldout["message"])


def _message(engine, name: str) -> str:
    step_id, tensor, code, _ = WRONG[name]
    result = engine.check(step_id, code.lstrip("\n")).to_dict()
    name = tensor or PACK.step(step_id).checks[0]
    return next(c for c in result["checks"] if c["tensor"] == name)["diagnosis"]["message"]


def test_the_general_messages_say_only_what_is_true_here(engine):
    # A time step counts from 0: a count one off does not claim that counts start at 1.
    assert "t = 1" not in _message(engine, "h-one-step-late")
    # `o` dropped from `dh * o * (1 - tc**2)` leaves more than the gradient from above.
    assert "only the gradient from above" not in _message(engine, "output-gate-dropped")


def test_a_broadcast_error_speaks_of_broadcasting_not_of_matmuls(engine):
    code = _slip(_LOOP, "db = db + difgo.sum(0)", "db = db + difgo.sum(1)")
    error = engine.check("bptt/lstm_backward", code).to_dict()["error"]
    assert error["kind"] == "runtime" and "broadcast" in error["message"]
    assert "matmul" not in error["message"]
