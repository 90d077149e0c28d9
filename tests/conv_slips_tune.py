"""Conv lesson (exercises/conv): slip corpus, TUNE half.

Written independently of the tutor's diagnosis code.

Styles in this half (conv steps):
  d<input>:  F.conv1d on the right-padded gradient with flipped, transposed weights;
             explicit loops over the two taps with slicing; two explicit per-tap einsums.
  d<weight>: loops over taps with slicing; per-tap matrix products stacked on dim 2.
  d<bias>:   .sum((0, 2)) and friends.
The holdout half uses conv_transpose1d + crop, einsum/unfold and torch.zeros + slice += instead.

RIGHT = {name: (step_id, tensor, code, "")}
WRONG = {name: (step_id, tensor, code, slip, words)}
"""

# --------------------------------------------------------------------------- layers
# i: the conv's input, u: the upstream gradient, d: dilation, cin: input channels
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


def _grad(name):
    return "d" + name


# ---- right snippets, this half's styles ------------------------------------------
def dI_conv1d(L, d=None, pad=None, wexpr=None):
    d = L["d"] if d is None else d
    pad = f"(0, {d})" if pad is None else pad
    wexpr = f"{L['w']}.flip(2).transpose(0, 1)" if wexpr is None else wexpr
    dil = "" if d == 1 else f", dilation={d}"
    return f"d{L['i']} = F.conv1d(F.pad({L['u']}, {pad}), {wexpr}{dil})\n"


def dI_loop(L):
    i, w, u, d = L["i"], L["w"], L["u"], L["d"]
    return (f"d{i} = torch.zeros_like({i})\n"
            f"for k in range(2):\n"
            f"    s = {d} * (1 - k)\n"
            f"    d{i}[:, :, :block_size - s] += torch.einsum('oi,bot->bit', {w}[:, :, k], {u}[:, :, s:])\n")


def dI_taps(L):
    i, w, u, d = L["i"], L["w"], L["u"], L["d"]
    return (f"now = torch.einsum('oi,bot->bit', {w}[:, :, 1], {u})\n"
            f"ahead = torch.einsum('oi,bot->bit', {w}[:, :, 0], {u}[:, :, {d}:])\n"
            f"d{i} = now + F.pad(ahead, (0, {d}))\n")


def dW_loop(L):
    i, w, u, d = L["i"], L["w"], L["u"], L["d"]
    return (f"d{w} = torch.zeros_like({w})\n"
            f"p = F.pad({i}, ({d}, 0))\n"
            f"for k in range(2):\n"
            f"    d{w}[:, :, k] = torch.einsum('bot,bit->oi', {u}, p[:, :, {d} * k:{d} * k + block_size])\n")


def dW_stack(L):
    i, w, u, d, cin = L["i"], L["w"], L["u"], L["d"], L["cin"]
    return (f"p = F.pad({i}, ({d}, 0))\n"
            f"g = {u}.transpose(0, 1).reshape({u}.shape[1], -1)\n"
            f"cols = [p[:, :, k * {d}:k * {d} + block_size].transpose(0, 1).reshape({cin}, -1).T for k in range(2)]\n"
            f"d{w} = torch.stack([g @ c for c in cols], dim=2)\n")


def db_sum(L, style=0):
    b, u = L["b"], L["u"]
    return [f"d{b} = {u}.sum((0, 2))\n",
            f"d{b} = {u}.sum(dim=[0, 2])\n",
            f"d{b} = {u}.sum(0).sum(-1)\n"][style]


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
    right(f"L{n_}_conv1d_loop_sum", s, L["i"], dI_conv1d(L) + dW_loop(L) + db_sum(L, 0))
    right(f"L{n_}_loop_stack_sum0", s, L["i"], dI_loop(L) + dW_stack(L) + db_sum(L, 2))
    right(f"L{n_}_taps_loop_sumdims", s, L["i"], dI_taps(L) + dW_loop(L) + db_sum(L, 1))
    right(f"L{n_}_wtvar_stack", s, L["i"],
          f"wt = {L['w']}.transpose(0, 1).flip(-1)\n" + dI_conv1d(L, wexpr="wt") + dW_stack(L) + db_sum(L, 0))

right("logits_softmax_onehot", "conv/logits", "logits",
      "dlogits = (F.softmax(logits, 1) - F.one_hot(Yb, vocab_size)) / n\n")
right("logits_exp_norm", "conv/logits", "logits",
      "p = logits.exp()\np = p / p.sum(1, keepdim=True)\np[range(n), Yb] -= 1\ndlogits = p / n\n")
right("last_plain", "conv/last", "last", "dlast = dlogits @ W.T\ndW = last.T @ dlogits\ndb = dlogits.sum(0)\n")
right("h3_zeros", "conv/h3", "h3", "dh3 = torch.zeros_like(h3)\ndh3[:, :, -1] = dlast\n")
right("h3_pad", "conv/h3", "h3", "dh3 = F.pad(dlast.unsqueeze(-1), (block_size - 1, 0))\n")
for k in (1, 2, 3):
    right(f"h{k}pre_tanh", f"conv/h{k}pre", f"h{k}pre", f"dh{k}pre = (1 - h{k}**2) * dh{k}\n")
right("h2pre_tanh_recompute", "conv/h2pre", "h2pre", "dh2pre = dh2 * (1 - torch.tanh(h2pre) ** 2)\n")
right("emb_transpose", "conv/emb", "emb", "demb = dx.transpose(1, 2)\n")
right("emb_permute", "conv/emb", "emb", "demb = dx.permute(0, 2, 1)\n")
right("C_index_add", "conv/C", "C",
      "dC = torch.zeros_like(C)\ndC.index_add_(0, Xb.view(-1), demb.reshape(-1, n_embd))\n")
right("C_onehot", "conv/C", "C",
      "dC = F.one_hot(Xb, vocab_size).float().reshape(-1, vocab_size).T @ demb.reshape(-1, n_embd)\n")

# --------------------------------------------------------------------------- WRONG
L3, L2, L1 = LAYERS[3], LAYERS[2], LAYERS[1]


def conv_wrong(name, L, which, bad, slip, words, dI=None, dW=None, db=None):
    """Build a complete answer for a conv step in which only `which` ('i', 'w' or 'b') is `bad`."""
    parts = {"i": dI or dI_conv1d(L), "w": dW or dW_loop(L), "b": db or db_sum(L, 0)}
    parts[which] = bad
    tensor = {"i": L["i"], "w": L["w"], "b": L["b"]}[which]
    # the weight and bias lines use `p` freely, so the input line goes first
    wrong(name, L["step"], tensor, parts["i"] + parts["w"] + parts["b"], slip, words)


# ---- d<input> ----------------------------------------------------------------------
# kernel taps not swapped
for L in (L3, L1):
    conv_wrong(f"L{L['d']}_dI_noflip_conv1d", L, "i",
               dI_conv1d(L, wexpr=f"{L['w']}.transpose(0, 1)"),
               "kernel taps not swapped (no flip) in the backward convolution", W_TAPS)
conv_wrong("L2_dI_noflip_loop", L2, "i",
           dI_loop(L2).replace("w2[:, :, k]", "w2[:, :, 1 - k]"),
           "taps paired with the wrong shift (tap k used where tap 1-k belongs)", W_TAPS)
conv_wrong("L1_dI_noflip_taps", L1, "i",
           dI_taps(L1).replace("w1[:, :, 1]", "w1[:, :, TMP]").replace("w1[:, :, 0]", "w1[:, :, 1]").replace("TMP", "0"),
           "the present position multiplied by tap 0 and the next by tap 1 (taps not swapped)", W_TAPS)
conv_wrong("L3_dI_noflip_taps", L3, "i",
           dI_taps(L3).replace("w3[:, :, 1]", "w3[:, :, TMP]").replace("w3[:, :, 0]", "w3[:, :, 1]").replace("TMP", "0"),
           "taps exchanged between the present and the 4-ahead positions", W_TAPS)

# in/out channels not swapped (64x64 layers only)
conv_wrong("L3_dI_notransp_loop", L3, "i",
           dI_loop(L3).replace("'oi,bot->bit'", "'io,bot->bit'"),
           "weight matrix of each tap used untransposed (in/out channels not swapped)", W_CHAN)
conv_wrong("L2_dI_notransp_conv1d", L2, "i",
           dI_conv1d(L2, wexpr="w2.flip(2)"),
           "kernel flipped but in/out channels not swapped (no transpose(0, 1))", W_CHAN)
conv_wrong("L3_dI_notransp_conv1d", L3, "i",
           dI_conv1d(L3, wexpr="w3.flip(-1)"),
           "kernel flipped but in/out channels not swapped", W_CHAN)

# another layer's dilation
conv_wrong("L3_dI_dil2_conv1d", L3, "i", dI_conv1d(L3, d=2),
           "dilation 2 (layer 2's) used for layer 3", W_DIL)
conv_wrong("L2_dI_dil4_loop", L2, "i", dI_loop(L2).replace("s = 2 *", "s = 4 *"),
           "taps 4 apart (layer 3's dilation) in layer 2's backward pass", W_DIL)
conv_wrong("L1_dI_dil2_conv1d", L1, "i", dI_conv1d(L1, d=2),
           "dilation 2 used on the first layer, which has none", W_DIL)

# dilation ignored
conv_wrong("L3_dI_nodil_loop", L3, "i", dI_loop(L3).replace("s = 4 *", "s = 1 *"),
           "dilation ignored: taps treated as adjacent", W_DIL + ("adjacent",))
conv_wrong("L2_dI_nodil_conv1d", L2, "i", dI_conv1d(L2, d=1),
           "dilation ignored: padded by 1, no dilation", W_DIL)

# padded at the wrong end
for L in (L3, L2):
    conv_wrong(f"L{L['d']}_dI_padleft_conv1d", L, "i", dI_conv1d(L, pad=f"({L['d']}, 0)"),
               "gradient padded on the left (causal) instead of the right", W_END)
conv_wrong("L1_dI_wrongend_loop", L1, "i",
           dI_loop(L1).replace("d x[:, :, :block_size - s]", "dx[:, :, s:]").replace("dx[:, :, :block_size - s]", "dx[:, :, s:]")
           .replace("dh1pre[:, :, s:]", "dh1pre[:, :, :block_size - s]"),
           "each tap's contribution written at the wrong end (shifted back instead of forward)", W_END)

# forward convolution run on the gradient
for L in (L3, L2):
    d = L["d"]
    conv_wrong(f"L{d}_dI_forwardconv", L, "i",
               f"d{L['i']} = F.conv1d(F.pad({L['u']}, ({d}, 0)), {L['w']}, dilation={d})\n",
               "the forward convolution (left pad, same kernel) run on the gradient", W_FWD)
conv_wrong("L1_dI_forwardconv", L1, "i",
           "dx = F.conv1d(F.pad(dh1pre, (1, 0)), w1.transpose(0, 1))\n",
           "the forward (causal, unflipped) convolution run on the gradient, only transposed to fit", W_FWD)

# one of the two taps left out
conv_wrong("L3_dI_onetap_loop", L3, "i", dI_loop(L3).replace("range(2)", "range(1)"),
           "only tap 0 sent back; tap 1 (the present position) left out", W_ONE)
conv_wrong("L2_dI_onetap_taps", L2, "i", "dh1 = torch.einsum('oi,bot->bit', w2[:, :, 1], dh2pre)\n",
           "only the present-position tap sent back; the dilated tap left out", W_ONE)
conv_wrong("L1_dI_onetap_conv1d", L1, "i", "dx = F.conv1d(dh1pre, w1[:, :, 1:].transpose(0, 1))\n",
           "convolution with one tap of the kernel only", W_ONE)

# shifted by one position
for L in (L3, L1):
    d = L["d"]
    conv_wrong(f"L{d}_dI_shift1_conv1d", L, "i",
               dI_conv1d(L, pad=f"(0, {d + 1})").rstrip("\n") + "[:, :, 1:]\n",
               "result shifted by one position (padded one too many, then cropped at the start)", W_SHIFT)
conv_wrong("L2_dI_shift1_loop", L2, "i",
           dI_loop(L2).replace("dh1[:, :, :block_size - s]", "dh1[:, :, 1:block_size - s]")
           .replace("dh2pre[:, :, s:]", "dh2pre[:, :, s:-1]"),
           "every contribution written one position too far right", W_SHIFT)

# stride instead of dilation (runs only with a crop)
for L in (L3, L2):
    d = L["d"]
    conv_wrong(f"L{d}_dI_stride_ct", L, "i",
               f"d{L['i']} = F.conv_transpose1d({L['u']}, {L['w']}, stride={d})[:, :, -block_size:]\n",
               "stride used instead of dilation in the transposed convolution", W_STRIDE)

# ---- d<weight> ---------------------------------------------------------------------
conv_wrong("L3_dW_tapswap_loop", L3, "w", dW_loop(L3).replace("dw3[:, :, k]", "dw3[:, :, 1 - k]"),
           "tap gradients stored in swapped order", W_TAPS)
conv_wrong("L2_dW_tapswap_stack", L2, "w", dW_stack(L2).replace("for k in range(2)", "for k in (1, 0)"),
           "taps stacked in reverse order", W_TAPS)
conv_wrong("L1_dW_tapswap_loop", L1, "w", dW_loop(L1).replace("dw1[:, :, k]", "dw1[:, :, 1 - k]"),
           "tap gradients stored in swapped order", W_TAPS)

conv_wrong("L3_dW_inout_loop", L3, "w", dW_loop(L3).replace("'bot,bit->oi'", "'bot,bit->io'"),
           "each tap's gradient has in/out channel axes swapped", W_CHAN)
conv_wrong("L2_dW_inout_stack", L2, "w", dW_stack(L2).replace("g @ c for", "(g @ c).T for"),
           "each tap's gradient transposed (in/out swapped)", W_CHAN)

conv_wrong("L3_dW_adjacent_loop", L3, "w",
           dW_loop(L3).replace("F.pad(h2, (4, 0))", "F.pad(h2, (1, 0))").replace("4 * k:4 * k", "k:k"),
           "windows taken from adjacent positions (dilation ignored)", W_ADJ)
conv_wrong("L2_dW_adjacent_stack", L2, "w",
           dW_stack(L2).replace("F.pad(h1, (2, 0))", "F.pad(h1, (1, 0))").replace("k * 2:k * 2", "k:k"),
           "windows of neighbouring positions (dilation ignored)", W_ADJ)
conv_wrong("L3_dW_adjacent_partial", L3, "w",
           dW_loop(L3).replace("4 * k:4 * k", "k:k"),
           "padded by the dilation but the second tap read from the next position instead of 4 ahead", W_ADJ)

conv_wrong("L3_dW_shift1_stack", L3, "w", dW_stack(L3).replace("F.pad(h2, (4, 0))", "F.pad(h2, (5, 0))"),
           "windows shifted by one position (padded by one too many)", W_SHIFT)
conv_wrong("L2_dW_shift1_loop", L2, "w",
           dW_loop(L2).replace("2 * k:2 * k + block_size", "2 * k + 1:2 * k + 1 + block_size").replace("(2, 0)", "(2, 1)"),
           "windows start one position late", W_SHIFT)
conv_wrong("L1_dW_shift1_loop", L1, "w", dW_loop(L1).replace("F.pad(x, (1, 0))", "F.pad(x, (2, 0))"),
           "windows shifted one position back", W_SHIFT)

conv_wrong("L3_dW_dil2_loop", L3, "w",
           dW_loop(L3).replace("F.pad(h2, (4, 0))", "F.pad(h2, (2, 0))").replace("4 * k:4 * k", "2 * k:2 * k"),
           "layer 2's dilation used for layer 3's weight gradient", W_DIL)
conv_wrong("L2_dW_dil4_stack", L2, "w",
           dW_stack(L2).replace("F.pad(h1, (2, 0))", "F.pad(h1, (4, 0))").replace("k * 2:k * 2", "k * 4:k * 4"),
           "layer 3's dilation used for layer 2's weight gradient", W_DIL)
conv_wrong("L1_dW_dil2_loop", L1, "w",
           dW_loop(L1).replace("F.pad(x, (1, 0))", "F.pad(x, (2, 0))").replace("1 * k:1 * k", "2 * k:2 * k"),
           "dilation 2 used for the first layer's weight gradient", W_DIL)

conv_wrong("L3_dW_onetap_loop", L3, "w", dW_loop(L3).replace("range(2)", "range(1)"),
           "only tap 0's gradient computed, tap 1 left zero", W_ONE)
conv_wrong("L2_dW_onetap", L2, "w",
           "dw2 = torch.zeros_like(w2)\ndw2[:, :, 1] = torch.einsum('bot,bit->oi', dh2pre, h1)\n",
           "only the present-position tap's gradient; the dilated tap left zero", W_ONE)
conv_wrong("L1_dW_onetap_stack", L1, "w",
           "dw1 = torch.stack([torch.zeros_like(w1[:, :, 0]), torch.einsum('bot,bit->oi', dh1pre, x)], 2)\n",
           "tap 0's gradient left zero", W_ONE)

conv_wrong("L3_dW_nobatchsum_loop", L3, "w",
           "p = F.pad(h2, (4, 0))\n"
           "dw3 = torch.stack([torch.einsum('bot,bit->boi', dh3pre, p[:, :, 4 * k:4 * k + block_size]) for k in range(2)], -1)\n",
           "forgot to sum over the batch (one weight gradient per example)", W_BATCH)
conv_wrong("L1_dW_nobatchsum_stack", L1, "w",
           "p = F.pad(x, (1, 0))\n"
           "dw1 = torch.stack([dh1pre @ p[:, :, k:k + block_size].transpose(1, 2) for k in range(2)], -1)\n",
           "per-example matrix products not summed over the batch", W_BATCH)

conv_wrong("L3_dW_mean_loop", L3, "w",
           dW_loop(L3).replace("block_size])", "block_size]) / n"),
           "averaged over the batch instead of summed", W_MEAN)
conv_wrong("L2_dW_mean_stack", L2, "w",
           dW_stack(L2).replace("dim=2)", "dim=2) / (n * block_size)"),
           "divided by the number of examples and positions (mean instead of sum)", W_MEAN)
conv_wrong("L1_dW_mean_loop", L1, "w",
           "dw1 = torch.zeros_like(w1)\np = F.pad(x, (1, 0))\nfor k in range(2):\n"
           "    dw1[:, :, k] = (dh1pre.unsqueeze(2) * p[:, :, k:k + block_size].unsqueeze(1)).mean(0).sum(-1)\n",
           "mean over the batch instead of sum", W_MEAN)

# ---- d<bias> -----------------------------------------------------------------------
conv_wrong("L3_db_sum0", L3, "b", "db3 = dh3pre.sum(0)\n", "summed over the batch only (positions left)", W_BAXIS)
conv_wrong("L2_db_sum2", L2, "b", "db2 = dh2pre.sum(2)\n", "summed over positions only (batch left)", W_BAXIS)
conv_wrong("L1_db_lastpos", L1, "b", "db1 = dh1pre[:, :, -1].sum(0)\n",
           "summed over the batch at the last position only", W_BAXIS)
conv_wrong("L2_db_lastpos", L2, "b", "db2 = dh2pre.sum(0)[:, -1]\n",
           "summed over the batch, positions not summed (last one taken)", W_BAXIS)
conv_wrong("L3_db_mean", L3, "b", "db3 = dh3pre.mean((0, 2))\n", "mean instead of sum", W_MEAN)
conv_wrong("L2_db_meanbatch", L2, "b", "db2 = dh2pre.sum(2).mean(0)\n", "mean over the batch instead of sum", W_MEAN)
conv_wrong("L1_db_meanpos", L1, "b", "db1 = dh1pre.mean(2).sum(0)\n", "mean over positions instead of sum", W_MEAN)

# ---- tanh steps --------------------------------------------------------------------
for k in (3, 2, 1):
    wrong(f"h{k}pre_slope_of_pre", f"conv/h{k}pre", f"h{k}pre", f"dh{k}pre = (1 - h{k}pre**2) * dh{k}\n",
          f"tanh slope computed from h{k}pre instead of h{k}",
          (f"h{k}pre", "pre-activation", "preactivation", "output", "input"))
for k in (3, 1):
    wrong(f"h{k}pre_slope_squared", f"conv/h{k}pre", f"h{k}pre", f"dh{k}pre = (1 - h{k}**2)**2 * dh{k}\n",
          "tanh slope squared", W_SQ)
wrong("h2pre_slope_missing", "conv/h2pre", "h2pre", "dh2pre = dh2\n", "tanh slope missing", W_MISS)
wrong("h1pre_slope_missing", "conv/h1pre", "h1pre", "dh1pre = dh1.clone()\n", "tanh slope missing", W_MISS)
wrong("h3pre_sigmoid", "conv/h3pre", "h3pre", "dh3pre = h3 * (1 - h3) * dh3\n", "sigmoid's slope used for tanh", W_SIG)
wrong("h2pre_sigmoid", "conv/h2pre", "h2pre", "dh2pre = dh2 * torch.sigmoid(h2pre) * (1 - torch.sigmoid(h2pre))\n",
      "sigmoid's slope used for tanh", W_SIG)
wrong("h1pre_one_minus_h", "conv/h1pre", "h1pre", "dh1pre = (1 - h1) * dh1\n",
      "tanh slope without the square (1 - h)", W_SQ + ("square",))
wrong("last_tanh_early", "conv/last", "last", "dlast = (dlogits @ W.T) * (1 - last**2)\ndW = last.T @ dlogits\ndb = dlogits.sum(0)\n",
      "tanh slope applied in the linear layer's step, a step early", W_EARLY)
wrong("h3_tanh_early", "conv/h3", "h3", "dh3 = torch.zeros_like(h3)\ndh3[:, :, -1] = dlast * (1 - last**2)\n",
      "tanh slope applied while scattering into h3, a step early", W_EARLY)
wrong("L3_dI_tanh_early", "conv/h2", "h2",
      dI_conv1d(L3).rstrip("\n") + " * (1 - h2**2)\n" + dW_loop(L3) + db_sum(L3, 0),
      "layer 2's tanh slope applied in the convolution's step", W_EARLY)

# ---- other steps -------------------------------------------------------------------
wrong("logits_no_div_n", "conv/logits", "logits", "dlogits = F.softmax(logits, 1) - F.one_hot(Yb, vocab_size)\n",
      "forgot to divide by n (the mean over the batch)", ("mean", "divide", "/ n", "batch", "average", "scale"))
wrong("logits_softmax_dim0", "conv/logits", "logits",
      "dlogits = (F.softmax(logits, 0) - F.one_hot(Yb, vocab_size)) / n\n",
      "softmax taken over the batch (dim 0) instead of each row", ("dim", "axis", "row", "column", "softmax"))
wrong("logits_no_onehot", "conv/logits", "logits", "dlogits = F.softmax(logits, 1) / n\n",
      "forgot to subtract one at the true character", ("one", "one_hot", "true", "subtract", "label", "target"))
wrong("last_dW_extra_n", "conv/last", "W", "dlast = dlogits @ W.T\ndW = last.T @ dlogits / n\ndb = dlogits.sum(0)\n",
      "divided by n again (already in dlogits)", ("twice", "/ n", "divide", "scale", "mean", "factor"))
wrong("last_db_sum1", "conv/last", "b", "dlast = dlogits @ W.T\ndW = last.T @ dlogits\ndb = dlogits.sum(1)\n",
      "bias gradient summed over the wrong axis (shape error)", ("axis", "dim", "sum", "shape", "broadcast", "row"))
wrong("last_dlast_notransp", "conv/last", "last", "dlast = dlogits @ W\ndW = last.T @ dlogits\ndb = dlogits.sum(0)\n",
      "W not transposed (shape error)", ("transpose", "shape", ".t"))
wrong("h3_first_position", "conv/h3", "h3", "dh3 = torch.zeros_like(h3)\ndh3[:, :, 0] = dlast\n",
      "gradient scattered to position 0 instead of the last", ("last", "position", "first", "index", "-1"))
wrong("h3_all_positions", "conv/h3", "h3", "dh3 = dlast.unsqueeze(-1).expand_as(h3).clone()\n",
      "gradient broadcast to every position instead of the last only", ("last", "position", "every", "all", "broadcast", "zero"))
wrong("emb_reshape", "conv/emb", "emb", "demb = dx.reshape(n, block_size, n_embd)\n",
      "reshape instead of transpose (entries scrambled)", ("reshape", "view", "transpose", "scramble", "order"))
wrong("C_assign", "conv/C", "C", "dC = torch.zeros_like(C)\ndC[Xb] = demb\n",
      "plain assignment: repeated characters overwrite each other instead of adding up",
      ("repeat", "accumulate", "index_add", "duplicate", "overwrite", "add up", "+="))
wrong("C_plus_equals", "conv/C", "C", "dC = torch.zeros_like(C)\ndC[Xb] += demb\n",
      "advanced-index += does not accumulate repeated characters",
      ("repeat", "accumulate", "index_add", "duplicate", "overwrite", "add up", "+="))
