"""2-D CNN lesson (cnn2d_pack, made by `pack new` from tests/packs/forward/slips_cnn2d.py):
a second slip corpus, TUNE half.

What it is: rows of backward-pass code as a learner would type them into one step of the lesson
(embedding -> 8x8 image -> 3x3 conv, padding 1 -> ReLU -> 2x2 max-pool -> flatten -> linear ->
cross-entropy). Every RIGHT row passes the tutor's check; every WRONG row carries one slip that
learners really make with these operations and fails it. Each row was checked with
`tutor check --json`, looking at "passed" only.

Style: plain code. Python loops over the 3x3 taps on a zero-padded image (for both the input
and the kernel gradient), F.conv_transpose2d, einsum for the linear layer, max_pool2d's indices
fed to scatter_add_, running maxima with torch.where, masks with torch.where / masked_fill,
embedding gradients with scatter_add_ and loops. It was written apart from the diagnosis code,
without reading it: `words` are the writer's own guess at what a specific diagnosis of the slip
would say (any one is enough), not copied from the tutor's messages.

RIGHT = {name: (step_id, tensor, code, "")}
WRONG = {name: (step_id, tensor, code, slip, words)}
"""
S = "cnn2d_pack/"

W_T = ("transpose", "swap", "order", "operand", ".t", "shape")
W_AXIS = ("sum", "axis", "axes", "dim", "batch", "shape")
W_LAYOUT = ("order", "axis", "view", "reshape", "layout", "flatten", "scramble")
W_POOL = ("argmax", "max", "window", "position", "corner", "index")
W_RELU = ("mask", "relu", "positive", "negative", "inverted", "slope")
W_FLIP = ("flip", "rotate", "180", "reverse", "taps", "kernel")
W_PAD = ("pad", "padding", "crop", "side", "shift", "offset", "border")
W_REPEAT = ("repeat", "accumulate", "overwrite", "duplicate", "add up", "+=")

RIGHT, WRONG = {}, {}


def right(name, step, tensor, code):
    assert name not in RIGHT
    RIGHT[name] = (S + step, tensor, code, "")


def wrong(name, step, tensor, code, slip, words):
    assert name not in WRONG
    assert 4 <= len(words) <= 7 and all(w == w.lower() for w in words), name
    WRONG[name] = (S + step, tensor, code, slip, tuple(words))


def sub(base, old, new):
    assert old in base, (old, base)
    return base.replace(old, new)


# ---- pieces a learner reuses inside one step ---------------------------------------
FLAT = ("dflat = dlogits @ W.T\n"
        "dW = flat.T @ dlogits\n"
        "db = dlogits.sum(0)\n")
# max-pool by a running maximum over the four taps of each window, first maximum wins
RUNMAX = (
    "taps = [(0, 0), (0, 1), (1, 0), (1, 1)]\n"
    "best = h[:, :, 0::2, 0::2]\n"
    "which = torch.zeros_like(best, dtype=torch.long)\n"
    "for t in range(1, 4):\n"
    "    i, j = taps[t]\n"
    "    cand = h[:, :, i::2, j::2]\n"
    "    which = torch.where(cand > best, t, which)\n"
    "    best = torch.maximum(best, cand)\n"
    "dh = torch.zeros_like(h)\n"
    "for t in range(4):\n"
    "    i, j = taps[t]\n"
    "    dh[:, :, i::2, j::2] = torch.where(which == t, dpooled, torch.zeros_like(dpooled))\n")
SCATTER = ("_, idx = F.max_pool2d(h, 2, return_indices=True)\n"
           "dh = torch.zeros_like(h).flatten(2)\n"
           "dh.scatter_add_(2, idx.flatten(2), dpooled.flatten(2))\n"
           "dh = dh.view_as(h)\n")
# conv by loops over the 3x3 taps of the zero-padded image
DIMG_LOOP = ("dpad = torch.zeros(n, 1, block_size + 2, n_embd + 2)\n"
             "for i in range(3):\n"
             "    for j in range(3):\n"
             "        dpad[:, 0, i:i + block_size, j:j + n_embd] += (dhpre * K[:, 0, i, j].view(1, -1, 1, 1)).sum(1)\n"
             "dimg = dpad[:, :, 1:-1, 1:-1]\n")
DK_LOOP = ("xp = F.pad(img, (1, 1, 1, 1))\n"
           "dK = torch.zeros_like(K)\n"
           "for i in range(3):\n"
           "    for j in range(3):\n"
           "        dK[:, 0, i, j] = (dhpre * xp[:, :, i:i + block_size, j:j + n_embd]).sum((0, 2, 3))\n")
DKB = "dkb = dhpre.sum((0, 2, 3))\n"
IMG = DIMG_LOOP + DK_LOOP + DKB

# ---- RIGHT ---------------------------------------------------------------------------
right("logits_index_minus_one", "logits", "logits",
      "p = logits.softmax(1)\n"
      "p[torch.arange(n), Yb] -= 1\n"
      "dlogits = p / n\n")
right("flat_einsum", "flat", "W",
      "dflat = torch.einsum('bv,fv->bf', dlogits, W)\n"
      "dW = torch.einsum('bf,bv->fv', flat, dlogits)\n"
      "db = dlogits.sum(0, keepdim=True).squeeze(0)\n")
right("pooled_unflatten", "pooled", "pooled",
      "dpooled = dflat.unflatten(1, (n_maps, block_size // 2, n_embd // 2))\n")
right("h_running_max", "h", "h", RUNMAX)
right("h_indices_scatter_add", "h", "h", SCATTER)
right("hpre_where", "hpre", "hpre", "dhpre = torch.where(hpre > 0, dh, torch.zeros_like(dh))\n")
right("hpre_masked_fill", "hpre", "hpre", "dhpre = dh.masked_fill(hpre <= 0, 0.0)\n")
right("img_tap_loops", "img", "K", IMG)
right("img_conv_transpose", "img", "img",
      "dimg = F.conv_transpose2d(dhpre, K, padding=1)\n" + DK_LOOP + "dkb = dhpre.sum(3).sum(2).sum(0)\n")
right("emb_index", "emb", "emb", "demb = dimg[:, 0]\n")
right("C_scatter_add", "C", "C",
      "idx = Xb.reshape(-1, 1).expand(-1, n_embd)\n"
      "dC = torch.zeros_like(C).scatter_add_(0, idx, demb.reshape(-1, n_embd))\n")
right("C_loop", "C", "C",
      "dC = torch.zeros_like(C)\n"
      "for i in range(n):\n"
      "    for t in range(block_size):\n"
      "        dC[Xb[i, t]] += demb[i, t]\n")

# ---- WRONG ---------------------------------------------------------------------------
# loss = F.cross_entropy(logits, Yb)
wrong("logits_minus_one_everywhere", "logits", "logits", "dlogits = (F.softmax(logits, 1) - 1) / n\n",
      "one subtracted from every logit instead of only the true class's",
      ("one_hot", "target", "label", "true", "every", "class"))
wrong("logits_sign", "logits", "logits", "dlogits = (F.one_hot(Yb, vocab_size) - F.softmax(logits, 1)) / n\n",
      "sign flipped", ("sign", "minus", "negative", "flipped", "negated", "opposite"))
wrong("logits_log_probs", "logits", "logits",
      "dlogits = (F.log_softmax(logits, 1) - F.one_hot(Yb, vocab_size)) / n\n",
      "log-probabilities used where the probabilities belong", ("log", "log_softmax", "probabilities", "exp", "softmax"))
wrong("logits_over_nv", "logits", "logits",
      "dlogits = (F.softmax(logits, 1) - F.one_hot(Yb, vocab_size)) / (n * vocab_size)\n",
      "divided by n * vocab_size: the mean is over examples only",
      ("divide", "mean", "vocab", "scale", "factor", "average"))

# logits = flat @ W + b
wrong("flat_dflat_no_T", "flat", "flat", sub(FLAT, "dflat = dlogits @ W.T", "dflat = dlogits @ W"),
      "W not transposed (shape)", ("transpose", "w.t", "shape", "operand", "order"))
wrong("flat_dW_swapped", "flat", "W", sub(FLAT, "dW = flat.T @ dlogits", "dW = dlogits.T @ flat"),
      "weight gradient with operands swapped (dy.T @ x): [27, 128]", W_T)
wrong("flat_db_wrong_axis", "flat", "b", sub(FLAT, "db = dlogits.sum(0)", "db = dlogits.sum(1)"),
      "bias gradient summed over the classes instead of the batch (shape)", W_AXIS)
wrong("flat_db_not_summed", "flat", "b", sub(FLAT, "db = dlogits.sum(0)", "db = dlogits"),
      "bias gradient not summed over the batch (shape)", W_AXIS + ("broadcast",))
wrong("flat_dW_half", "flat", "W", sub(FLAT, "dW = flat.T @ dlogits", "dW = 0.5 * flat.T @ dlogits"),
      "stray factor 0.5", ("factor", "0.5", "half", "scale", "constant"))

# flat = pooled.flatten(1)
wrong("pooled_rows_maps_order", "pooled", "pooled", "dpooled = dflat.view(n, block_size // 2, n_maps, n_embd // 2).transpose(1, 2)\n",
      "un-flattened with rows before maps: entries land in the wrong places", W_LAYOUT)
wrong("pooled_transposed_flat", "pooled", "pooled", "dpooled = dflat.T.reshape(pooled.shape)\n",
      "transposed before the reshape, as if flatten were a matrix transpose", ("transpose",) + W_LAYOUT[:6])

# pooled = F.max_pool2d(h, 2)
wrong("h_bottom_right", "h", "h", "dh = torch.zeros_like(h)\ndh[:, :, 1::2, 1::2] = dpooled\n",
      "gradient always sent to the last (bottom-right) entry of each window", W_POOL + ("last",))
wrong("h_kron_even", "h", "h", "dh = torch.kron(dpooled, torch.ones(2, 2)) / 4\n",
      "gradient spread evenly over the window (average-pool's gradient)",
      ("spread", "evenly", "average", "argmax", "max", "window"))
wrong("h_windows_transposed", "h", "h", sub(SCATTER, "dpooled.flatten(2)", "dpooled.transpose(2, 3).flatten(2)"),
      "gradient of window (i, j) sent to the maximum of window (j, i)",
      ("window", "transpose", "order", "swap", "position", "index"))
wrong("h_indices_over_maps", "h", "h",
      "_, idx = F.max_pool2d(h, 2, return_indices=True)\n"
      "dh = torch.zeros_like(h).flatten(1)\n"
      "dh.scatter_add_(1, idx.flatten(1), dpooled.flatten(1))\n"
      "dh = dh.view_as(h)\n",
      "max_pool2d's indices are per map, but scattered over all maps flattened together",
      ("index", "indices", "plane", "channel", "map", "flatten"))
wrong("h_relu_mask_not_argmax", "h", "h", "dh = F.interpolate(dpooled, scale_factor=2) * (h > 0)\n",
      "every positive entry of the window gets the gradient, not only the maximum",
      ("argmax", "max", "window", "every", "mask", "positive"))
wrong("h_global_argmax", "h", "h",
      "idx = h.flatten(2).argmax(-1, keepdim=True)\n"
      "dh = torch.zeros_like(h).flatten(2)\n"
      "dh.scatter_(2, idx, dpooled.flatten(2).sum(-1, keepdim=True))\n"
      "dh = dh.view_as(h)\n",
      "all of a map's gradient sent to the maximum of the whole map, not of each 2x2 window",
      ("window", "argmax", "map", "whole", "global", "max"))

# h = torch.relu(hpre)
wrong("hpre_mask_inverted", "hpre", "hpre", "dhpre = dh.masked_fill(hpre > 0, 0.0)\n",
      "mask inverted: the gradient kept where the ReLU was off", W_RELU)
wrong("hpre_tanh_slope", "hpre", "hpre", "dhpre = dh * (1 - h ** 2)\n",
      "tanh's slope used for a ReLU", ("tanh", "relu", "slope", "derivative", "activation", "mask"))
wrong("hpre_leaky", "hpre", "hpre", "dhpre = torch.where(hpre > 0, dh, 0.01 * dh)\n",
      "leaky-ReLU slope where the ReLU gives zero", ("leaky", "slope", "0.01", "negative", "relu", "zero"))

# hpre = F.conv2d(img, K, kb, padding=1)
wrong("img_loop_crop_corner", "img", "img", sub(IMG, "dimg = dpad[:, :, 1:-1, 1:-1]", "dimg = dpad[:, :, :-2, :-2]"),
      "padded gradient cropped from the bottom/right only: shifted by one", W_PAD)
wrong("img_loop_no_flip", "img", "img", sub(IMG, "K[:, 0, i, j].view", "K[:, 0, 2 - i, 2 - j].view"),
      "taps taken from the flipped kernel in the scatter loop", W_FLIP)
wrong("img_ct_no_padding", "img", "img", "dimg = F.conv_transpose2d(dhpre, K)\n" + DK_LOOP + DKB,
      "conv_transpose2d without padding=1: a 10x10 gradient (shape)", ("padding", "pad", "crop", "shape", "size"))
wrong("img_loop_mean_maps", "img", "img", sub(IMG, ").sum(1)\n", ").mean(1)\n"),
      "contributions of the feature maps averaged instead of summed",
      ("mean", "average", "sum", "map", "channel", "divide"))
wrong("K_pad_one_side", "img", "K", sub(IMG, "F.pad(img, (1, 1, 1, 1))", "F.pad(img, (0, 2, 0, 2))"),
      "image padded by 2 on the right/bottom only: taps shifted", W_PAD)
wrong("K_all_maps_same", "img", "K", sub(IMG, ".sum((0, 2, 3))\n", ".sum()\n"),
      "summed over the maps too: every map gets the same kernel gradient",
      ("sum", "map", "channel", "axis", "per", "axes"))
wrong("K_output_for_input", "img", "K", sub(IMG, "F.pad(img, (1, 1, 1, 1))", "F.pad(hpre, (1, 1, 1, 1))"),
      "the convolution's output hpre used where its input img belongs",
      ("input", "img", "output", "hpre", "image", "operand"))
wrong("kb_wrong_axes", "img", "kb", sub(IMG, DKB, "dkb = dhpre.sum((1, 2, 3))\n"),
      "bias gradient summed over maps and positions, leaving the batch (shape)", W_AXIS + ("map",))
wrong("kb_before_relu", "img", "kb", sub(IMG, DKB, "dkb = dh.sum((0, 2, 3))\n"),
      "bias gradient from dh, skipping the ReLU's mask", ("dhpre", "relu", "mask", "dh", "before"))

# img = emb.unsqueeze(1)
wrong("emb_squeeze_wrong_dim", "emb", "emb", "demb = dimg.squeeze(2)\n",
      "squeezed a dimension of size 8: nothing removed (shape)", ("squeeze", "dim", "axis", "shape", "unsqueeze"))

# emb = C[Xb]
wrong("C_index_order", "C", "C",
      "dC = torch.zeros_like(C)\n"
      "dC.index_add_(0, Xb.T.reshape(-1), demb.reshape(-1, n_embd))\n",
      "indices flattened in a different order from the gradient rows",
      ("order", "index", "transpose", "reshape", "match", "align"))
wrong("C_loop_assign", "C", "C",
      "dC = torch.zeros_like(C)\n"
      "for i in range(n):\n"
      "    for t in range(block_size):\n"
      "        dC[Xb[i, t]] = demb[i, t]\n",
      "= instead of += in the loop: repeated characters keep only their last gradient", W_REPEAT)
wrong("C_scatter_no_add", "C", "C",
      "idx = Xb.reshape(-1, 1).expand(-1, n_embd)\n"
      "dC = torch.zeros_like(C).scatter_(0, idx, demb.reshape(-1, n_embd))\n",
      "scatter_ instead of scatter_add_: repeats overwrite",
      ("repeat", "accumulate", "overwrite", "duplicate", "add up", "scatter_add"))
wrong("C_mean_repeats", "C", "C",
      "dC = torch.zeros_like(C)\n"
      "dC.index_add_(0, Xb.view(-1), demb.view(-1, n_embd))\n"
      "dC = dC / torch.bincount(Xb.view(-1), minlength=vocab_size).clamp(min=1).unsqueeze(1)\n",
      "gradient of a repeated character averaged over its uses instead of summed",
      ("average", "mean", "sum", "repeat", "count", "divide"))
