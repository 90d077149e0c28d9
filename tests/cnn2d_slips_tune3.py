"""2-D CNN lesson (cnn2d_pack, made by `pack new` from tests/packs/forward/slips_cnn2d.py): a
third slip corpus, TUNE half.

What it is: rows of backward-pass code as a learner would type them into one step of the lesson.
Every RIGHT row passes the tutor's check; every WRONG row carries one slip that learners really
make with these operations (the convolution's kernel flip, padding and cropping, channels and
taps of the weight gradient, the bias summed over batch and positions, max-pool routing, the
ReLU's slope, undoing the flatten, the cross-entropy's average, signs, repeated embedding rows)
and fails it. The same slip family is put on several steps where its operation occurs.

Style: F.conv_transpose2d and F.conv2d with transposed batch/channel axes, F.unfold / F.fold with
einsum, explicit loops over the kernel taps and the pooling windows, argmax over reshaped windows,
torch.where for the ReLU, index_add_ and loops for the embedding. It was written apart from the
diagnosis code, without reading it, and each row was checked with `backprop-tutor check --json`
looking at "passed" only: `words` are the writer's own guess at what a specific diagnosis of the
slip would say (any one of them is enough), not copied from the tutor's messages.

RIGHT = {name: (step_id, tensor, code, "")}
WRONG = {name: (step_id, tensor, code, slip, words)}
"""
S = "cnn2d_pack/"

W_FLIP = ("flip", "rotate", "180", "kernel", "correlation", "convolution")
W_PAD = ("pad", "padding", "crop", "border", "offset", "side")
W_TAPS = ("tap", "transpose", "kernel", "row", "column", "swap")
W_CHANNEL = ("channel", "in_channels", "out_channels", "swap", "transpose", "axis")
W_BIAS = ("sum", "position", "spatial", "axis", "axes", "dim", "batch")
W_POOL = ("max", "argmax", "window", "pool", "route", "winner")
W_RELU = ("relu", "slope", "mask", "positive", "hpre", "derivative")
W_PERM = ("permute", "reshape", "order", "layout", "flatten", "channel")
W_MEAN = ("mean", "average", "divide", "batch", "factor", "/ n")
W_AXIS = ("sum", "axis", "batch", "dim", "example", "axes")
W_SIGN = ("sign", "minus", "negative", "flipped", "opposite", "negated")
W_T = ("transpose", "swap", "order", "operand", "swapped", ".t")
W_REPEAT = ("repeat", "accumulate", "overwrite", "duplicate", "add up", "index_put")

RIGHT, WRONG = {}, {}


def right(name, step, tensor, code):
    assert name not in RIGHT
    RIGHT[name] = (S + step, tensor, code, "")


def wrong(name, step, tensor, code, slip, words):
    assert name not in WRONG
    assert 4 <= len(words) <= 7 and all(w == w.lower() for w in words), name
    WRONG[name] = (S + step, tensor, code, slip, tuple(words))


# ---- pieces a learner reuses inside one step ---------------------------------------
WINDOWS = ("w = h.reshape(n, n_maps, 4, 2, 4, 2).permute(0, 1, 2, 4, 3, 5)"
           ".reshape(n, n_maps, 4, 4, 4)\n")
UNWIN = ("dh = sel.reshape(n, n_maps, 4, 4, 2, 2).permute(0, 1, 2, 4, 3, 5)"
         ".reshape(h.shape)\n")
DK_CONV = "dK = F.conv2d(img.transpose(0, 1), dhpre.transpose(0, 1), padding=1).transpose(0, 1)\n"
DKB = "dkb = dhpre.sum((0, 2, 3))\n"
DIMG = "dimg = F.conv_transpose2d(dhpre, K, padding=1)\n"

# ---- RIGHT ---------------------------------------------------------------------------
right("logits_softmax_one_hot", "logits", "logits",
      "dlogits = (F.softmax(logits, 1) - F.one_hot(Yb, vocab_size)) / n\n")
right("logits_exp_normalise_index", "logits", "logits",
      "p = (logits - logits.max(1, keepdim=True).values).exp()\n"
      "p = p / p.sum(1, keepdim=True)\n"
      "p[range(n), Yb] -= 1\n"
      "dlogits = p / n\n")
right("flat_mm", "flat", "W",
      "dflat = dlogits @ W.T\n"
      "dW = flat.T @ dlogits\n"
      "db = dlogits.sum(0)\n")
right("flat_einsum", "flat", "flat",
      "dflat = torch.einsum('bv,fv->bf', dlogits, W)\n"
      "dW = torch.einsum('bf,bv->fv', flat, dlogits)\n"
      "db = torch.einsum('bv->v', dlogits)\n")
right("pooled_view", "pooled", "pooled",
      "dpooled = dflat.view(pooled.shape)\n")
right("pooled_unflatten", "pooled", "pooled",
      "dpooled = dflat.unflatten(1, (n_maps, 4, 4))\n")
right("h_argmax_windows", "h", "h",
      WINDOWS
      + "sel = F.one_hot(w.argmax(-1), 4).to(h.dtype) * dpooled.unsqueeze(-1)\n"
      + UNWIN)
right("h_loop_windows", "h", "h",
      "dh = torch.zeros_like(h)\n"
      "for i in range(4):\n"
      "    for j in range(4):\n"
      "        win = h[:, :, 2 * i:2 * i + 2, 2 * j:2 * j + 2].reshape(n, n_maps, 4)\n"
      "        one = F.one_hot(win.argmax(-1), 4).to(h.dtype) * dpooled[:, :, i, j, None]\n"
      "        dh[:, :, 2 * i:2 * i + 2, 2 * j:2 * j + 2] = one.view(n, n_maps, 2, 2)\n")
right("hpre_where", "hpre", "hpre",
      "dhpre = torch.where(hpre > 0, dh, torch.zeros_like(dh))\n")
right("hpre_mask_from_h", "hpre", "hpre",
      "dhpre = dh * (h > 0).float()\n")
right("img_conv_transpose_and_conv2d", "img", "K",
      DIMG + DK_CONV + DKB)
right("img_flip_conv2d_tap_loop", "img", "img",
      "dimg = F.conv2d(dhpre, K.flip(-1, -2).transpose(0, 1), padding=1)\n"
      "pad = F.pad(img, (1, 1, 1, 1))\n"
      "dK = torch.zeros_like(K)\n"
      "for i in range(kernel_size):\n"
      "    for j in range(kernel_size):\n"
      "        dK[:, 0, i, j] = (dhpre * pad[:, :, i:i + 8, j:j + 8]).sum((0, 2, 3))\n"
      "dkb = dhpre.sum(0).sum(-1).sum(-1)\n")
right("img_unfold_fold", "img", "kb",
      "cols = F.unfold(img, kernel_size, padding=1)\n"
      "g = dhpre.reshape(n, n_maps, -1)\n"
      "dK = torch.einsum('bok,bpk->op', g, cols).reshape(K.shape)\n"
      "dcols = torch.einsum('bok,op->bpk', g, K.reshape(n_maps, -1))\n"
      "dimg = F.fold(dcols, (block_size, n_embd), kernel_size, padding=1)\n"
      "dkb = g.sum((0, 2))\n")
right("emb_squeeze", "emb", "emb",
      "demb = dimg.squeeze(1)\n")
right("C_index_add", "C", "C",
      "dC = torch.zeros_like(C).index_add_(0, Xb.flatten(), demb.reshape(-1, n_embd))\n")
right("C_loop", "C", "C",
      "dC = torch.zeros_like(C)\n"
      "for i in range(Xb.shape[0]):\n"
      "    for t in range(block_size):\n"
      "        dC[Xb[i, t]] += demb[i, t]\n")

# ---- WRONG: cross-entropy ------------------------------------------------------------
wrong("logits_no_divide", "logits", "logits",
      "dlogits = F.softmax(logits, 1) - F.one_hot(Yb, vocab_size)\n",
      "the batch average not divided out", W_MEAN)
wrong("logits_softmax_over_batch", "logits", "logits",
      "dlogits = (F.softmax(logits, 0) - F.one_hot(Yb, vocab_size)) / n\n",
      "softmax over the batch (dim 0) instead of the classes",
      ("axis", "dim", "softmax", "class", "batch", "row"))
wrong("logits_sign", "logits", "logits",
      "p = (logits - logits.max(1, keepdim=True).values).exp()\n"
      "p = p / p.sum(1, keepdim=True)\n"
      "p[range(n), Yb] -= 1\n"
      "dlogits = -p / n\n",
      "the whole gradient negated", W_SIGN)

# ---- WRONG: logits = flat @ W + b ----------------------------------------------------
wrong("flat_db_mean", "flat", "b",
      "dflat = dlogits @ W.T\n"
      "dW = flat.T @ dlogits\n"
      "db = dlogits.mean(0)\n",
      "db averaged over the batch instead of summed", W_MEAN)
wrong("flat_dW_first_example", "flat", "W",
      "dflat = dlogits @ W.T\n"
      "dW = flat[:1].T @ dlogits[:1]\n"
      "db = dlogits.sum(0)\n",
      "dW from the first example only", W_AXIS)
wrong("flat_dflat_sign", "flat", "flat",
      "dflat = -torch.einsum('bv,fv->bf', dlogits, W)\n"
      "dW = torch.einsum('bf,bv->fv', flat, dlogits)\n"
      "db = dlogits.sum(0)\n",
      "dflat negated", W_SIGN)
wrong("flat_dW_operands_swapped", "flat", "W",
      "dflat = dlogits @ W.T\n"
      "dW = dlogits.T @ flat\n"
      "db = dlogits.sum(0)\n",
      "dW = dlogits^T @ flat: operands swapped, the shape comes out transposed", W_T)

# ---- WRONG: flat = pooled.flatten(1) -------------------------------------------------
wrong("pooled_channels_last", "pooled", "pooled",
      "dpooled = dflat.view(n, 4, 4, n_maps).permute(0, 3, 1, 2)\n",
      "unflattened as channels-last: flatten(1) keeps the channel first", W_PERM)

# ---- WRONG: pooled = max_pool2d(h, 2) ------------------------------------------------
wrong("h_spread_evenly", "h", "h",
      "up = dpooled.repeat_interleave(2, 2).repeat_interleave(2, 3)\n"
      "dh = up / 4\n",
      "the window's gradient spread evenly like an average pool", W_POOL + ("average",))
wrong("h_fixed_top_left", "h", "h",
      "dh = torch.zeros_like(h)\n"
      "dh[:, :, ::2, ::2] = dpooled\n",
      "every window's gradient sent to its top-left entry, not to its max", W_POOL)
wrong("h_argmin", "h", "h",
      WINDOWS
      + "sel = F.one_hot(w.argmin(-1), 4).to(h.dtype) * dpooled.unsqueeze(-1)\n"
      + UNWIN,
      "the gradient routed to the window's minimum", W_POOL + ("min",))
wrong("h_tiled_not_interleaved", "h", "h",
      "up = dpooled.repeat(1, 1, 2, 2)\n"
      "mask = h == pooled.repeat(1, 1, 2, 2)\n"
      "dh = up * mask\n",
      "repeat tiles the pooled map instead of upsampling each entry into its window",
      ("repeat", "repeat_interleave", "tile", "upsample", "window", "position"))
wrong("h_equality_mask_ties", "h", "h",
      "up = F.interpolate(pooled, scale_factor=2, mode='nearest')\n"
      "dup = F.interpolate(dpooled, scale_factor=2, mode='nearest')\n"
      "dh = dup * (h == up)\n",
      "an equality mask sends the gradient to every tied entry (ReLU zeros), not once per window",
      ("tie", "first", "once", "every", "argmax", "duplicate"))

# ---- WRONG: h = relu(hpre) -----------------------------------------------------------
wrong("hpre_no_slope", "hpre", "hpre",
      "dhpre = dh.clone()\n",
      "the ReLU's slope left out: gradient passed where the input was negative", W_RELU)
wrong("hpre_mask_from_gradient", "hpre", "hpre",
      "dhpre = torch.where(dh > 0, dh, torch.zeros_like(dh))\n",
      "the ReLU mask taken from the gradient dh instead of the input hpre", W_RELU)
wrong("hpre_times_output", "hpre", "hpre",
      "dhpre = dh * h\n",
      "multiplied by the output h instead of the 0/1 slope", W_RELU + ("indicator",))
wrong("hpre_mask_inverted", "hpre", "hpre",
      "dhpre = dh * (hpre < 0).float()\n",
      "the ReLU mask inverted", W_RELU + ("inverted",))

# ---- WRONG: hpre = conv2d(img, K, kb, padding=1) -------------------------------------
wrong("img_kernel_not_flipped", "img", "img",
      "dimg = F.conv2d(dhpre, K.transpose(0, 1), padding=1)\n" + DK_CONV + DKB,
      "the input gradient correlates with the kernel unflipped", W_FLIP)
wrong("img_flip_one_axis", "img", "img",
      "dimg = F.conv2d(dhpre, K.flip(-1).transpose(0, 1), padding=1)\n" + DK_CONV + DKB,
      "the kernel flipped along its width only, not rotated 180 degrees", W_FLIP)
wrong("img_crop_wrong_side", "img", "img",
      "full = F.conv_transpose2d(dhpre, K)\n"
      "dimg = full[:, :, :block_size, :n_embd]\n" + DK_CONV + DKB,
      "the full transposed convolution cropped at the top-left instead of 1 on every side",
      W_PAD)
wrong("img_dK_flipped", "img", "K",
      DIMG
      + "dK = F.conv2d(img.transpose(0, 1), dhpre.transpose(0, 1), padding=1)"
        ".transpose(0, 1).flip(-1, -2)\n" + DKB,
      "the weight gradient flipped: it needs no flip", W_FLIP)
wrong("img_dK_taps_transposed", "img", "K",
      DIMG
      + "dK = F.conv2d(img.transpose(0, 1), dhpre.transpose(0, 1), padding=1)"
        ".transpose(0, 1).transpose(-1, -2)\n" + DKB,
      "the kernel's rows and columns transposed in dK", W_TAPS)
wrong("img_dK_channels_swapped_view", "img", "K",
      "cols = F.unfold(img, kernel_size, padding=1)\n"
      "g = dhpre.reshape(n, n_maps, -1)\n"
      "dK = torch.einsum('bok,bpk->po', g, cols).reshape(K.shape)\n"
      "dcols = torch.einsum('bok,op->bpk', g, K.reshape(n_maps, -1))\n"
      "dimg = F.fold(dcols, (block_size, n_embd), kernel_size, padding=1)\n"
      "dkb = g.sum((0, 2))\n",
      "dK built as (taps, maps) and reshaped: output channels and taps swapped", W_CHANNEL)
wrong("img_dK_pad_one_side", "img", "K",
      DIMG
      + "pad = F.pad(img, (0, 2, 0, 2))\n"
        "dK = torch.zeros_like(K)\n"
        "for i in range(kernel_size):\n"
        "    for j in range(kernel_size):\n"
        "        dK[:, 0, i, j] = (dhpre * pad[:, :, i:i + 8, j:j + 8]).sum((0, 2, 3))\n" + DKB,
      "the input padded by 2 on the bottom/right instead of 1 on every side", W_PAD)
wrong("img_dK_mean_batch", "img", "K",
      DIMG
      + "pad = F.pad(img, (1, 1, 1, 1))\n"
        "dK = torch.zeros_like(K)\n"
        "for i in range(kernel_size):\n"
        "    for j in range(kernel_size):\n"
        "        dK[:, 0, i, j] = (dhpre * pad[:, :, i:i + 8, j:j + 8]).sum((2, 3)).mean(0)\n"
      + DKB,
      "dK averaged over the batch instead of summed", W_MEAN)
wrong("img_dK_first_example", "img", "K",
      DIMG
      + "dK = F.conv2d(img[:1].transpose(0, 1), dhpre[:1].transpose(0, 1), padding=1)"
        ".transpose(0, 1)\n" + DKB,
      "dK from the first example only: no sum over the batch", W_AXIS)
wrong("img_dkb_wrong_axes", "img", "kb",
      DIMG + DK_CONV + "dkb = dhpre.sum(dim=(0, 1, 2))\n",
      "the bias gradient summed over the maps instead of the width", W_BIAS)
wrong("img_dkb_mean_positions", "img", "kb",
      DIMG + DK_CONV + "dkb = dhpre.sum(0).mean((1, 2))\n",
      "the bias gradient averaged over the positions instead of summed",
      ("sum", "position", "spatial", "mean", "average", "divide"))

# ---- WRONG: img = emb.unsqueeze(1) ---------------------------------------------------
wrong("emb_transposed", "emb", "emb",
      "demb = dimg.squeeze(1).transpose(1, 2)\n",
      "a transpose added where unsqueeze only needs undoing",
      ("transpose", "squeeze", "permute", "axis", "order", "undo"))

# ---- WRONG: emb = C[Xb] --------------------------------------------------------------
wrong("C_index_put_overwrites", "C", "C",
      "dC = torch.zeros_like(C)\n"
      "dC.index_put_((Xb,), demb, accumulate=False)\n",
      "index_put_ without accumulate: repeated characters overwrite", W_REPEAT)
wrong("C_loop_assign", "C", "C",
      "dC = torch.zeros_like(C)\n"
      "for i in range(Xb.shape[0]):\n"
      "    for t in range(block_size):\n"
      "        dC[Xb[i, t]] = demb[i, t]\n",
      "= instead of += in the loop: repeats overwrite", W_REPEAT)
