"""Conv lesson (exercises/conv): slip corpus, HOLDOUT half.

Written independently of the tutor's diagnosis code.

Styles in this half (conv steps):
  d<input>:  F.conv_transpose1d then cropping; einsum over unfolded windows of the right-padded
             gradient; a torch.zeros buffer of the padded input's length filled tap by tap with
             slice += and cropped.
  d<weight>: einsum over unfold windows; F.conv1d with the batch as channels (a correlation over
             lags); a zeros tensor filled tap by tap with +=.
  d<bias>:   einsum / reshape+sum / sum(2).sum(0).
The tune half uses conv1d with flipped weights, loops over taps and stacked matmuls instead.

RIGHT = {name: (step_id, tensor, code, "")}
WRONG = {name: (step_id, tensor, code, slip, words)}
"""

LAYERS = {
    3: dict(step="conv/h2", i="h2", w="w3", b="b3", u="dh3pre", d=4, cin=64),
    2: dict(step="conv/h1", i="h1", w="w2", b="b2", u="dh2pre", d=2, cin=64),
    1: dict(step="conv/x", i="x", w="w1", b="b1", u="dh1pre", d=1, cin=10),
}

W_TAPS = ("flip", "tap", "reverse", "order", "swap")
W_CHAN = ("transpose", "channel", "in/out", "input and output")
W_DIL = ("dilation",)
W_END = ("right", "end", "shift", "side", "position", "left", "crop")
W_FWD = ("forward", "causal", "same convolution", "direction", "anti-causal")
W_ONE = ("tap", "both", "one", "missing", "only", "left out", "two")
W_SHIFT = ("shift", "off by one", "off-by-one", "one position", "offset", "position")
W_STRIDE = ("stride",)
W_ADJ = ("dilation", "adjacent", "neighbour", "neighbor")
W_BATCH = ("batch", "sum", "shape")
W_MEAN = ("mean", "average", "divide", "divided", "scale", "factor")
W_BAXIS = ("axis", "axes", "dim", "sum", "shape", "position", "batch")
W_SQ = ("square", "squared", "power", "twice")
W_MISS = ("slope", "derivative", "missing", "forgot", "1 - ", "tanh")
W_SIG = ("sigmoid",)
W_EARLY = ("early", "twice", "already", "tanh", "slope", "derivative", "step")


# ---- right snippets, this half's styles ------------------------------------------
def dI_ct(L, d=None, crop=None, wexpr=None, extra=""):
    d = L["d"] if d is None else d
    crop = f"[:, :, {d}:]" if crop is None else crop
    wexpr = L["w"] if wexpr is None else wexpr
    dil = "" if d == 1 else f", dilation={d}"
    return f"d{L['i']} = F.conv_transpose1d({L['u']}, {wexpr}{dil}{extra}){crop}\n"


def dI_unf(L, d=None, pad=None, wexpr=None, spec="'botk,oik->bit'", sel=None):
    d = L["d"] if d is None else d
    pad = f"(0, {d})" if pad is None else pad
    wexpr = f"{L['w']}.flip(2)" if wexpr is None else wexpr
    sel = f"[..., ::{d}]" if sel is None else sel
    return (f"win = F.pad({L['u']}, {pad}).unfold(2, {d + 1}, 1){sel}\n"
            f"d{L['i']} = torch.einsum({spec}, win, {wexpr})\n")


def dI_buf(L, d=None, spec="'oi,bot->bit'", lines=(0, 1), crop=None):
    i, w, u, cin = L["i"], L["w"], L["u"], L["cin"]
    d = L["d"] if d is None else d
    crop = f"[:, :, {d}:]" if crop is None else crop
    where = {0: ":block_size", 1: f"{d}:"}
    code = f"dp = torch.zeros(n, {cin}, block_size + {d})\n"
    for k in lines:
        code += f"dp[:, :, {where[k]}] += torch.einsum({spec}, {w}[:, :, {k}], {u})\n"
    return code + f"d{i} = dp{crop}\n"


def dW_unf(L, d=None, pad=None, spec="'bot,bitk->oik'", post=""):
    i, w, u = L["i"], L["w"], L["u"]
    d = L["d"] if d is None else d
    pad = f"({d}, 0)" if pad is None else pad
    return (f"cols = F.pad({i}, {pad}).unfold(2, {d + 1}, 1)[..., ::{d}]\n"
            f"d{w} = torch.einsum({spec}, {u}, cols){post}\n")


def dW_corr(L, d=None, pad=None, sel=None, post=".transpose(0, 1)"):
    i, w, u = L["i"], L["w"], L["u"]
    d = L["d"] if d is None else d
    pad = f"({d}, 0)" if pad is None else pad
    sel = f"[:, :, ::{d}]" if sel is None else sel
    return (f"lags = F.conv1d(F.pad({i}, {pad}).transpose(0, 1), {u}.transpose(0, 1))\n"
            f"d{w} = lags{sel}{post}\n")


def dW_buf(L, d=None, pad=None, slices=None, lines=(0, 1), idx=(0, 1), scale=""):
    i, w, u = L["i"], L["w"], L["u"]
    d = L["d"] if d is None else d
    pad = f"({d}, 0)" if pad is None else pad
    slices = (":block_size", f"{d}:") if slices is None else slices
    code = f"q = F.pad({i}, {pad})\nd{w} = torch.zeros_like({w})\n"
    for k in lines:
        code += f"d{w}[:, :, {idx[k]}] += torch.einsum('bot,bit->oi', {u}, q[:, :, {slices[k]}]){scale}\n"
    return code


def db_h(L, style=0):
    b, u = L["b"], L["u"]
    return [f"d{b} = torch.einsum('bot->o', {u})\n",
            f"d{b} = {u}.transpose(0, 1).reshape({u}.shape[1], -1).sum(1)\n",
            f"d{b} = {u}.sum(2).sum(0)\n"][style]


RIGHT = {}
WRONG = {}


def right(name, step, tensor, code):
    assert name not in RIGHT, name
    RIGHT[name] = (step, tensor, code, "")


def wrong(name, step, tensor, code, slip, words):
    assert name not in WRONG, name
    WRONG[name] = (step, tensor, code, slip, tuple(words))


# --------------------------------------------------------------------------- RIGHT
for n_, L in LAYERS.items():
    s = L["step"]
    right(f"L{n_}_ct_unf_einsum", s, L["i"], dI_ct(L) + dW_unf(L) + db_h(L, 0))
    right(f"L{n_}_unf_corr_reshape", s, L["i"], dI_unf(L) + dW_corr(L) + db_h(L, 1))
    right(f"L{n_}_buf_buf_sum", s, L["i"], dI_buf(L) + dW_buf(L) + db_h(L, 2))
    right(f"L{n_}_ctlen_corr", s, L["i"],
          dI_ct(L, crop=f"[:, :, -block_size:]") + dW_corr(L) + db_h(L, 0))
    right(f"L{n_}_bufzeroslike_unf", s, L["i"],
          dI_buf(L).replace(f"torch.zeros(n, {L['cin']}, block_size + {L['d']})",
                            f"torch.zeros_like(F.pad({L['i']}, ({L['d']}, 0)))") + dW_unf(L) + db_h(L, 1))

right("logits_log_softmax", "conv/logits", "logits",
      "dlogits = F.softmax(logits, dim=-1)\ndlogits[torch.arange(n), Yb] -= 1\ndlogits /= n\n")
right("last_mm", "conv/last", "last",
      "dlast = torch.mm(dlogits, W.t())\ndW = torch.mm(last.t(), dlogits)\ndb = dlogits.sum(0, keepdim=False)\n")
right("last_einsum", "conv/last", "W",
      "dlast = torch.einsum('bv,hv->bh', dlogits, W)\ndW = torch.einsum('bh,bv->hv', last, dlogits)\ndb = torch.einsum('bv->v', dlogits)\n")
right("h3_cat", "conv/h3", "h3",
      "dh3 = torch.cat([torch.zeros(n, n_hidden, block_size - 1), dlast.unsqueeze(2)], dim=2)\n")
for k in (1, 2, 3):
    right(f"h{k}pre_minus_prod", f"conv/h{k}pre", f"h{k}pre", f"dh{k}pre = dh{k} - dh{k} * h{k} * h{k}\n")
right("emb_mT", "conv/emb", "emb", "demb = dx.transpose(2, 1).contiguous()\n")
right("C_loop", "conv/C", "C",
      "dC = torch.zeros_like(C)\nflat = Xb.flatten()\ng = demb.reshape(-1, n_embd)\nfor r in range(flat.shape[0]):\n    dC[flat[r]] += g[r]\n")
right("C_index_put", "conv/C", "C",
      "dC = torch.zeros_like(C).index_put_((Xb,), demb, accumulate=True)\n")

# --------------------------------------------------------------------------- WRONG
L3, L2, L1 = LAYERS[3], LAYERS[2], LAYERS[1]


def conv_wrong(name, L, which, bad, slip, words, dI=None, dW=None, db=None):
    parts = {"i": dI or dI_ct(L), "w": dW or dW_unf(L), "b": db or db_h(L, 0)}
    parts[which] = bad
    tensor = {"i": L["i"], "w": L["w"], "b": L["b"]}[which]
    wrong(name, L["step"], tensor, parts["i"] + parts["w"] + parts["b"], slip, words)


# ---- d<input> ----------------------------------------------------------------------
conv_wrong("L3_dI_flip_ct", L3, "i", dI_ct(L3, wexpr="w3.flip(2)"),
           "kernel flipped before conv_transpose1d, which already reverses the taps", W_TAPS)
conv_wrong("L2_dI_noflip_unf", L2, "i", dI_unf(L2, wexpr="w2"),
           "windows of the gradient matched to the kernel's taps unflipped", W_TAPS)
conv_wrong("L1_dI_tapswap_buf", L1, "i",
           "dp = torch.zeros(n, 10, block_size + 1)\n"
           "dp[:, :, :block_size] += torch.einsum('oi,bot->bit', w1[:, :, 1], dh1pre)\n"
           "dp[:, :, 1:] += torch.einsum('oi,bot->bit', w1[:, :, 0], dh1pre)\n"
           "dx = dp[:, :, 1:]\n",
           "each tap's contribution written at the other tap's offset", W_TAPS)
conv_wrong("L3_dI_tapswap_buf", L3, "i",
           "dp = torch.zeros(n, 64, block_size + 4)\n"
           "dp[:, :, :block_size] += torch.einsum('oi,bot->bit', w3[:, :, 1], dh3pre)\n"
           "dp[:, :, 4:] += torch.einsum('oi,bot->bit', w3[:, :, 0], dh3pre)\n"
           "dh2 = dp[:, :, 4:]\n",
           "taps exchanged between the two offsets", W_TAPS)

conv_wrong("L3_dI_chan_ct", L3, "i", dI_ct(L3, wexpr="w3.transpose(0, 1)"),
           "weights transposed before conv_transpose1d, which already swaps in/out channels", W_CHAN)
conv_wrong("L2_dI_chan_buf", L2, "i", dI_buf(L2, spec="'io,bot->bit'"),
           "each tap's matrix used untransposed (in/out channels not swapped)", W_CHAN)
conv_wrong("L3_dI_chan_unf", L3, "i", dI_unf(L3, spec="'botk,iok->bit'"),
           "einsum pairs the gradient's channel with the weight's input axis (channels not swapped)", W_CHAN)

conv_wrong("L3_dI_dil2_ct", L3, "i", dI_ct(L3, d=2), "layer 2's dilation (2) used for layer 3", W_DIL)
conv_wrong("L2_dI_dil4_unf", L2, "i", dI_unf(L2, d=4), "layer 3's dilation (4) used for layer 2", W_DIL)
conv_wrong("L1_dI_dil4_ct", L1, "i", dI_ct(L1, d=4), "dilation 4 used on the first layer", W_DIL)

conv_wrong("L3_dI_nodil_ct", L3, "i", dI_ct(L3, d=1), "dilation left out of conv_transpose1d (crop by 1)", W_DIL)
conv_wrong("L2_dI_nodil_buf", L2, "i", dI_buf(L2, d=1), "taps treated as adjacent (dilation ignored)", W_DIL + ("adjacent",))
conv_wrong("L3_dI_nodil_unf", L3, "i", dI_unf(L3, d=1), "windows of adjacent positions (dilation ignored)", W_DIL + ("adjacent",))

conv_wrong("L3_dI_cropright_ct", L3, "i", dI_ct(L3, crop="[:, :, :block_size]"),
           "cropped at the right end instead of the left", W_END)
conv_wrong("L2_dI_cropright_ct", L2, "i", dI_ct(L2, crop="[:, :, :-2]"),
           "the extra positions cut from the right end", W_END)
conv_wrong("L1_dI_padleft_unf", L1, "i", dI_unf(L1, pad="(1, 0)"),
           "gradient padded on the left instead of the right", W_END)
conv_wrong("L2_dI_cropright_buf", L2, "i", dI_buf(L2, crop="[:, :, :block_size]"),
           "buffer cropped at the wrong end", W_END)

for L in (L3, L2):
    d = L["d"]
    conv_wrong(f"L{d}_dI_forward_unf", L, "i",
               dI_unf(L, pad=f"({d}, 0)", wexpr=L["w"], spec="'bitk,oik->bot'"),
               "the forward convolution (left-padded windows, same kernel) applied to the gradient", W_FWD)
conv_wrong("L1_dI_forward_unf", L1, "i",
           dI_unf(L1, pad="(1, 0)", wexpr="w1"),
           "causal windows (left pad) and unflipped kernel: the forward convolution's pattern", W_FWD)

conv_wrong("L3_dI_onetap_buf", L3, "i", dI_buf(L3, lines=(0,)), "tap 1 (the present position) left out", W_ONE)
conv_wrong("L2_dI_onetap_ct", L2, "i", dI_ct(L2, crop="", wexpr="w2[:, :, 1:]"),
           "transposed convolution with only one tap of the kernel", W_ONE)
conv_wrong("L1_dI_onetap_unf", L1, "i", dI_unf(L1, sel="[..., :1]", wexpr="w1.flip(2)[:, :, :1]"),
           "only the first window entry and tap used", W_ONE)

conv_wrong("L3_dI_shift_ct", L3, "i", dI_ct(L3, crop="[:, :, 3:3 + block_size]"),
           "cropped one position too early (shifted by one)", W_SHIFT)
conv_wrong("L2_dI_shift_ct", L2, "i",
           "dh1 = F.pad(F.conv_transpose1d(dh2pre, w2, dilation=2)[:, :, 3:], (0, 1))\n",
           "cropped one position too many, shifting the gradient by one", W_SHIFT)
conv_wrong("L1_dI_shift_buf", L1, "i", dI_buf(L1, crop="[:, :, 2:]").replace("dx = dp[:, :, 2:]", "dx = F.pad(dp[:, :, 2:], (0, 1))"),
           "buffer cropped one position too far, shifting by one", W_SHIFT)

for L in (L3, L2):
    d = L["d"]
    conv_wrong(f"L{d}_dI_stride_ct", L, "i",
               f"d{L['i']} = F.conv_transpose1d({L['u']}, {L['w']}, stride={d})[:, :, {d}:{d} + block_size]\n",
               "stride used instead of dilation", W_STRIDE)

# ---- d<weight> ---------------------------------------------------------------------
conv_wrong("L3_dW_tapswap_unf", L3, "w", dW_unf(L3, post=".flip(-1)"), "tap gradients in reverse order", W_TAPS)
conv_wrong("L2_dW_tapswap_buf", L2, "w", dW_buf(L2, idx=(1, 0)), "each window added to the other tap", W_TAPS)
conv_wrong("L1_dW_tapswap_corr", L1, "w", dW_corr(L1, post=".transpose(0, 1).flip(2)"),
           "lags 0 and 1 assigned to taps 1 and 0", W_TAPS)

conv_wrong("L3_dW_inout_corr", L3, "w", dW_corr(L3, post=""),
           "batch-as-channels result not transposed back (in/out axes swapped)", W_CHAN)
conv_wrong("L2_dW_inout_unf", L2, "w", dW_unf(L2, spec="'bot,bitk->iok'"), "output written as [in, out, tap]", W_CHAN)

conv_wrong("L3_dW_adjacent_unf", L3, "w", dW_unf(L3, d=1), "windows of neighbouring positions (dilation ignored)", W_ADJ)
conv_wrong("L2_dW_adjacent_corr", L2, "w", dW_corr(L2, sel="[:, :, :2]"),
           "lags 0 and 1 kept instead of 0 and 2 (dilation ignored)", W_ADJ)

conv_wrong("L3_dW_shift_unf", L3, "w", dW_unf(L3, pad="(3, 1)"), "windows shifted one position ahead", W_SHIFT)
conv_wrong("L2_dW_shift_buf", L2, "w", dW_buf(L2, pad="(2, 1)", slices=("1:block_size + 1", "3:")),
           "windows start one position late", W_SHIFT)
conv_wrong("L1_dW_shift_corr", L1, "w", dW_corr(L1, pad="(2, 0)", sel="[:, :, :2]"),
           "padded by one too many: windows shifted one position back", W_SHIFT)

conv_wrong("L3_dW_dil2_unf", L3, "w", dW_unf(L3, d=2), "layer 2's dilation used for layer 3", W_DIL)
conv_wrong("L2_dW_dil4_corr", L2, "w", dW_corr(L2, d=4), "layer 3's dilation used for layer 2", W_DIL)
conv_wrong("L1_dW_dil4_buf", L1, "w", dW_buf(L1, d=4), "dilation 4 used for the first layer", W_DIL)

conv_wrong("L3_dW_onetap_corr", L3, "w", dW_corr(L3, sel="[:, :, :1]", post=".transpose(0, 1)").replace(
    "dw3 = lags", "dw3 = F.pad(lags").replace(".transpose(0, 1)\n", ".transpose(0, 1), (0, 1))\n"),
           "only lag 0 (tap 0) computed, tap 1 padded with zeros", W_ONE)
conv_wrong("L2_dW_onetap_unf", L2, "w", dW_unf(L2, post=" * torch.tensor([0.0, 1.0])"),
           "tap 0's gradient zeroed", W_ONE)
conv_wrong("L1_dW_onetap_buf", L1, "w", dW_buf(L1, lines=(1,)), "tap 0's gradient never added", W_ONE)

conv_wrong("L3_dW_nobatch_unf", L3, "w", dW_unf(L3, spec="'bot,bitk->boik'"),
           "batch axis kept (not summed over examples)", W_BATCH)
conv_wrong("L2_dW_nobatch_unf", L2, "w", dW_unf(L2, spec="'bot,bitk->boik'"),
           "batch axis kept (not summed over examples)", W_BATCH)

conv_wrong("L3_dW_mean_unf", L3, "w", dW_unf(L3, spec="'bot,bitk->boik'", post=".mean(0)"),
           "mean over the batch instead of sum", W_MEAN)
conv_wrong("L2_dW_mean_corr", L2, "w", dW_corr(L2, post=".transpose(0, 1) / n"), "divided by the batch size", W_MEAN)
conv_wrong("L1_dW_mean_buf", L1, "w", dW_buf(L1, scale=" / block_size"), "mean over positions instead of sum", W_MEAN)

# ---- d<bias> -----------------------------------------------------------------------
conv_wrong("L3_db_batchonly", L3, "b", "db3 = torch.einsum('bot->ot', dh3pre)\n",
           "summed over the batch only", W_BAXIS)
conv_wrong("L2_db_posonly", L2, "b", "db2 = torch.einsum('bot->bo', dh2pre)\n",
           "summed over positions only", W_BAXIS)
conv_wrong("L1_db_firstex", L1, "b", "db1 = dh1pre.sum(2)[0]\n",
           "summed over positions of the first example only (batch not summed)", W_BAXIS)
conv_wrong("L1_db_channels", L1, "b", "db1 = dh1pre.sum(0).sum(0)\n",
           "summed over batch and channels instead of batch and positions", W_BAXIS + ("channel",))
conv_wrong("L3_db_mean", L3, "b", "db3 = torch.einsum('bot->o', dh3pre) / (n * block_size)\n",
           "divided by the count (mean instead of sum)", W_MEAN)
conv_wrong("L2_db_mean", L2, "b", "db2 = dh2pre.transpose(0, 1).reshape(64, -1).mean(1)\n", "mean instead of sum", W_MEAN)
conv_wrong("L1_db_meanbatch", L1, "b", "db1 = dh1pre.sum(2).mean(0)\n", "mean over the batch", W_MEAN)

# ---- tanh steps --------------------------------------------------------------------
wrong("h3pre_slope_of_pre", "conv/h3pre", "h3pre", "dh3pre = dh3 - dh3 * h3pre**2\n",
      "slope computed from h3pre instead of h3", ("h3pre", "pre-activation", "preactivation", "output", "input"))
wrong("h2pre_slope_of_pre", "conv/h2pre", "h2pre", "dh2pre = dh2 * (1 - h2pre.pow(2))\n",
      "slope computed from h2pre instead of h2", ("h2pre", "pre-activation", "preactivation", "output", "input"))
wrong("h1pre_slope_of_pre", "conv/h1pre", "h1pre", "dh1pre = (1 - h1pre * h1pre) * dh1\n",
      "slope computed from h1pre instead of h1", ("h1pre", "pre-activation", "preactivation", "output", "input"))
wrong("h2pre_slope_squared", "conv/h2pre", "h2pre", "dh2pre = dh2 * (1 - h2 * h2) ** 2\n", "slope squared", W_SQ)
wrong("h3pre_slope_twice", "conv/h3pre", "h3pre", "dh3pre = dh3 * (1 - h3**2) * (1 - h3**2)\n",
      "slope multiplied in twice", W_SQ)
wrong("h3pre_slope_missing", "conv/h3pre", "h3pre", "dh3pre = dh3.clone()\n", "tanh slope missing", W_MISS)
wrong("h1pre_slope_missing", "conv/h1pre", "h1pre", "dh1pre = 1.0 * dh1\n", "tanh slope missing", W_MISS)
wrong("h1pre_sigmoid", "conv/h1pre", "h1pre", "dh1pre = h1 * (1 - h1) * dh1\n", "sigmoid's slope", W_SIG)
wrong("h3pre_sigmoid", "conv/h3pre", "h3pre",
      "s = torch.sigmoid(h3pre)\ndh3pre = dh3 * s * (1 - s)\n", "sigmoid's slope", W_SIG)
wrong("h2pre_sign", "conv/h2pre", "h2pre", "dh2pre = (1 + h2**2) * dh2\n",
      "plus instead of minus in the slope", ("sign", "plus", "minus", "1 +"))
wrong("h1pre_wrong_layer", "conv/h1pre", "h1pre", "dh1pre = (1 - h2**2) * dh1\n",
      "slope from the next layer's output h2 instead of h1", ("h2", "layer", "wrong tensor", "h1"))
wrong("last_tanh_early", "conv/last", "last",
      "dlast = dlogits @ W.T * (1 - last * last)\ndW = last.T @ dlogits\ndb = dlogits.sum(0)\n",
      "tanh slope applied a step early (in the linear layer's step)", W_EARLY)
wrong("h3_tanh_early", "conv/h3", "h3",
      "dh3 = torch.zeros_like(h3)\ndh3[:, :, -1] = dlast * (1 - h3[:, :, -1] ** 2)\n",
      "tanh slope applied while scattering, a step early", W_EARLY)
wrong("L2_dI_tanh_early", "conv/h1", "h1",
      "dh1 = F.conv_transpose1d(dh2pre, w2, dilation=2)[:, :, 2:] * (1 - h1**2)\n" + dW_unf(L2) + db_h(L2, 0),
      "layer 1's tanh slope applied in the convolution's step", W_EARLY)

# ---- other steps -------------------------------------------------------------------
wrong("logits_no_div_n", "conv/logits", "logits",
      "dlogits = F.softmax(logits, dim=-1)\ndlogits[torch.arange(n), Yb] -= 1\n",
      "forgot to divide by n", ("mean", "divide", "/ n", "batch", "average", "scale"))
wrong("logits_sign", "conv/logits", "logits", "dlogits = (F.one_hot(Yb, vocab_size) - F.softmax(logits, 1)) / n\n",
      "sign flipped (one-hot minus probabilities)", ("sign", "negative", "minus", "flip", "opposite"))
wrong("logits_log_softmax", "conv/logits", "logits",
      "dlogits = (F.log_softmax(logits, 1) - F.one_hot(Yb, vocab_size)) / n\n",
      "log-probabilities used instead of probabilities", ("log", "softmax", "probabilit"))
wrong("logits_div_all", "conv/logits", "logits",
      "dlogits = (F.softmax(logits, 1) - F.one_hot(Yb, vocab_size)) / (n * vocab_size)\n",
      "divided by every entry's count (n * vocab_size) instead of n", ("mean", "divide", "scale", "factor", "vocab", "/ n"))
wrong("last_dW_wrong_order", "conv/last", "W", "dlast = dlogits @ W.T\ndW = dlogits.T @ last\ndb = dlogits.sum(0)\n",
      "dW written as dlogits.T @ last (transposed result, shape error)", ("transpose", "shape", "order"))
wrong("last_db_mean", "conv/last", "b", "dlast = dlogits @ W.T\ndW = last.T @ dlogits\ndb = dlogits.mean(0)\n",
      "mean over the batch instead of sum", W_MEAN)
wrong("last_dlast_extra_n", "conv/last", "last", "dlast = dlogits @ W.T / n\ndW = last.T @ dlogits\ndb = dlogits.sum(0)\n",
      "divided by n again", ("twice", "/ n", "divide", "scale", "mean", "factor"))
wrong("h3_second_to_last", "conv/h3", "h3", "dh3 = torch.zeros_like(h3)\ndh3[:, :, -2] = dlast\n",
      "gradient put at position -2 instead of the last", ("last", "position", "index", "-1", "shift"))
wrong("h3_spread", "conv/h3", "h3", "dh3 = dlast.unsqueeze(-1).repeat(1, 1, block_size) / block_size\n",
      "gradient spread evenly over all positions", ("last", "position", "every", "all", "spread", "zero"))
wrong("emb_view", "conv/emb", "emb", "demb = dx.view(n, block_size, n_embd)\n",
      "view instead of transpose (entries scrambled)", ("reshape", "view", "transpose", "scramble", "order"))
wrong("emb_no_transpose", "conv/emb", "emb", "demb = dx\n", "gradient not transposed back (shape error)",
      ("transpose", "shape", "swap", "axes"))
wrong("C_assign_flat", "conv/C", "C",
      "dC = torch.zeros_like(C)\ndC[Xb.view(-1)] = demb.reshape(-1, n_embd)\n",
      "assignment: repeated characters keep only one gradient",
      ("repeat", "accumulate", "index_add", "duplicate", "overwrite", "add up", "+="))
wrong("C_index_copy", "conv/C", "C",
      "dC = torch.zeros_like(C).index_copy_(0, Xb.view(-1), demb.reshape(-1, n_embd))\n",
      "index_copy_ instead of index_add_: repeats overwrite each other",
      ("repeat", "accumulate", "index_add", "duplicate", "overwrite", "add up", "copy"))
wrong("C_mean_per_char", "conv/C", "C",
      "dC = torch.zeros_like(C).index_add_(0, Xb.view(-1), demb.reshape(-1, n_embd))\n"
      "counts = torch.bincount(Xb.view(-1), minlength=vocab_size).clamp(min=1)\n"
      "dC = dC / counts.unsqueeze(1)\n",
      "averaged over each character's occurrences instead of summed",
      ("mean", "average", "divide", "count", "sum"))
