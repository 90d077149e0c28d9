"""2-D CNN lesson (cnn2d_pack, made by `pack new` from tests/packs/forward/slips_cnn2d.py): a
fifth slip corpus, HOLDOUT half (its other half is tests/cnn2d_slips_tune5.py).

What it is: rows of backward-pass code as a learner would type them into one step of the lesson.
Every RIGHT row passes the tutor's check; every WRONG row carries one slip that learners really
make with these operations (a kernel flip where none belongs or left out, padding and cropping
on the wrong side, the kernel's row and column taps swapped, the bias averaged instead of
summed, max-pool routing copied to the whole window or to the mirrored entry of each window,
the ReLU's slope taken at the gradient, replaced by the sign or inverted, the flatten undone as
if the maps came last, the image's rows and columns swapped when the unsqueeze is undone, the
cross-entropy's average, signs, repeated embedding rows) and fails it. The same slip family is
put on every step where its operation occurs.

Style: torch.einsum with unusual index letters ('zmuv,zcuvrs->mcrs', 'bk,fk->bf'), 3x3 windows
built by stacking shifted slices of the padded tensors (a comprehension inside torch.stack),
F.conv_transpose2d for the input gradient, max-pool routing by max_pool2d's indices with
scatter_ / F.max_unpool2d or by argmax over 2x2 blocks cut by reshape and permute,
torch.heaviside / torch.sign / masked_fill for the ReLU, torch.tensordot for the linear layer
and the embedding's one-hot, and scatter_add_ with an expanded index. It was written apart from
the diagnosis code, without reading it, and each row was checked with `backprop-tutor check
--json` looking at "passed" only: `words` are the writer's own guess at what a specific
diagnosis of the slip would say (any one of them is enough), not copied from the tutor's
messages.

RIGHT = {name: (step_id, tensor, code, "")}
WRONG = {name: (step_id, tensor, code, slip, words)}
"""
S = "cnn2d_pack/"

W_FLIP = ("flip", "rotate", "180", "kernel", "correlation", "convolution")
W_PAD = ("pad", "padding", "crop", "border", "offset", "side")
W_TAPS = ("tap", "transpose", "kernel", "row", "column", "swap")
W_POOL = ("max", "argmax", "window", "pool", "route", "winner")
W_RELU = ("relu", "slope", "mask", "positive", "hpre", "derivative")
W_PERM = ("permute", "reshape", "order", "layout", "flatten", "channel")
W_MEAN = ("mean", "average", "divide", "batch", "factor", "/ n")
W_SIGN = ("sign", "minus", "negative", "flipped", "opposite", "negated")
W_REPEAT = ("repeat", "accumulate", "overwrite", "duplicate", "add up", "scatter")

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
LOGITS = "dlogits = (logits.softmax(1) - torch.eye(vocab_size)[Yb]) / Yb.shape[0]\n"
# logits = flat @ W + b
FLAT_EIN = ("dflat = torch.einsum('bk,fk->bf', dlogits, W)\n"
            "dW = torch.einsum('bf,bk->fk', flat, dlogits)\n"
            "db = torch.einsum('bk->k', dlogits)\n")
FLAT_TD = ("dflat = torch.tensordot(dlogits, W, dims=([1], [1]))\n"
           "dW = torch.tensordot(flat, dlogits, dims=([0], [0]))\n"
           "db = dlogits.sum(0)\n")
# max-pool: max_pool2d's own indices, scattered back into the flattened maps
H_SCATTER = ("_, ix = F.max_pool2d(h, 2, return_indices=True)\n"
             "dh = torch.zeros_like(h).flatten(2).scatter_(2, ix.flatten(2), dpooled.flatten(2)).view_as(h)\n")
H_UNPOOL = ("_, ix = F.max_pool2d(h, 2, return_indices=True)\n"
            "dh = F.max_unpool2d(dpooled, ix, 2, output_size=h.shape[-2:])\n")
# max-pool: 2x2 blocks by reshape and permute, argmax (the first max on ties), one-hot back
H_BLOCKS = ("blk = h.reshape(n, n_maps, 4, 2, 4, 2).permute(0, 1, 2, 4, 3, 5).reshape(n, n_maps, 4, 4, 4)\n"
            "oh = F.one_hot(blk.argmax(-1), 4).to(h.dtype) * dpooled[..., None]\n"
            "dh = oh.view(n, n_maps, 4, 4, 2, 2).permute(0, 1, 2, 4, 3, 5).reshape(h.shape)\n")
# h = relu(hpre)
HPRE_HEAVISIDE = "dhpre = dh * torch.heaviside(hpre, torch.zeros(()))\n"
HPRE_FILL = "dhpre = dh.masked_fill(hpre <= 0, 0.0)\n"
# conv: the input gradient by conv_transpose2d, the weight gradient from windows of shifted slices
WIN = ("Pi = F.pad(img, (1, 1, 1, 1))\n"
       "win = torch.stack([torch.stack([Pi[:, :, r:r + block_size, s:s + n_embd] for s in range(3)], -1)\n"
       "                   for r in range(3)], -2)\n")
IMG_CT = ("dimg = F.conv_transpose2d(dhpre, K, padding=1)\n"
          + WIN +
          "dK = torch.einsum('zmuv,zcuvrs->mcrs', dhpre, win)\n"
          "dkb = torch.einsum('zmuv->m', dhpre)\n")
# conv: the input gradient from shifted-slice windows of the padded gradient, kernel flipped
IMG_SHIFTS = ("Gp = F.pad(dhpre, (1, 1, 1, 1))\n"
              "gw = torch.stack([torch.stack([Gp[..., r:r + block_size, s:s + n_embd] for s in range(3)], -1)\n"
              "                  for r in range(3)], -2)\n"
               "dimg = torch.einsum('zmuvrs,mrs->zuv', gw, K[:, 0].flip(1, 2)).unsqueeze(1)\n"
               + WIN +
               "dK = torch.einsum('zmuv,zuvrs->mrs', dhpre, win[:, 0]).unsqueeze(1)\n"
               "dkb = dhpre.sum(dim=(0, 2, 3))\n")
# emb = C[Xb]
C_SCATTER = ("idx = Xb.reshape(-1)[:, None].expand(-1, n_embd)\n"
             "dC = torch.zeros_like(C).scatter_add_(0, idx, demb.reshape(-1, n_embd))\n")
C_TD = "dC = torch.tensordot(F.one_hot(Xb, vocab_size).to(demb.dtype), demb, dims=([0, 1], [0, 1]))\n"

# ---- RIGHT ---------------------------------------------------------------------------
right("logits_eye_rows", "logits", "logits", LOGITS)
right("flat_einsum", "flat", "flat", FLAT_EIN)
right("flat_tensordot", "flat", "W", FLAT_TD)
right("pooled_view_as", "pooled", "pooled", "dpooled = dflat.view_as(pooled)\n")
right("pooled_reshape_shape", "pooled", "pooled", "dpooled = dflat.reshape(pooled.shape)\n")
right("h_indices_scatter", "h", "h", H_SCATTER)
right("h_max_unpool", "h", "h", H_UNPOOL)
right("h_blocks_argmax", "h", "h", H_BLOCKS)
right("hpre_heaviside", "hpre", "hpre", HPRE_HEAVISIDE)
right("hpre_masked_fill", "hpre", "hpre", HPRE_FILL)
right("hpre_sign_of_h", "hpre", "hpre", "dhpre = dh * torch.sign(h)\n")
right("img_conv_transpose_shifts", "img", "img", IMG_CT)
right("img_shifts_both", "img", "K", IMG_SHIFTS)
right("emb_squeeze", "emb", "emb", "demb = dimg.squeeze(1)\n")
right("emb_einsum", "emb", "emb", "demb = torch.einsum('zcuv->zuv', dimg)\n")
right("C_scatter_add", "C", "C", C_SCATTER)
right("C_tensordot_onehot", "C", "C", C_TD)

# ---- WRONG: cross-entropy ------------------------------------------------------------
wrong("logits_eye_minus_probs", "logits", "logits",
      sub(LOGITS, "(logits.softmax(1) - torch.eye(vocab_size)[Yb])", "(torch.eye(vocab_size)[Yb] - logits.softmax(1))"),
      "the one-hot minus the probabilities: the sign is flipped", W_SIGN)
wrong("logits_softmax_over_batch", "logits", "logits", sub(LOGITS, "logits.softmax(1)", "logits.softmax(0)"),
      "the softmax taken over the batch (dim 0) instead of the classes",
      ("axis", "dim", "softmax", "class", "batch", "row"))

# ---- WRONG: logits = flat @ W + b ----------------------------------------------------
wrong("flat_einsum_dW_mean", "flat", "W", sub(FLAT_EIN, "dW = torch.einsum('bf,bk->fk', flat, dlogits)",
                                              "dW = torch.einsum('bf,bk->fk', flat, dlogits) / n"),
      "dW averaged over the batch instead of summed", W_MEAN)
wrong("flat_tensordot_dflat_negated", "flat", "flat", sub(FLAT_TD, "dflat = torch.tensordot(", "dflat = -torch.tensordot("),
      "dflat negated", W_SIGN)

# ---- WRONG: flat = pooled.flatten(1) -------------------------------------------------
wrong("pooled_maps_last", "pooled", "pooled", "dpooled = dflat.view(n, 4, 4, n_maps).permute(0, 3, 1, 2)\n",
      "reshaped as if the maps came last: flatten(1) keeps the maps first", W_PERM)
wrong("pooled_mT_positions_maps", "pooled", "pooled", "dpooled = dflat.view(n, 16, n_maps).mT.reshape(n, n_maps, 4, 4)\n",
      "read as (positions, maps) and transposed: flatten(1) laid the maps out first",
      W_PERM + ("transpose",))

# ---- WRONG: pooled = max_pool2d(h, 2) ------------------------------------------------
wrong("h_nearest_upsample", "h", "h", "dh = F.interpolate(dpooled, scale_factor=2, mode='nearest')\n",
      "each window's gradient copied to all four entries instead of only the max",
      W_POOL + ("copy",))
wrong("h_blocks_window_transposed", "h", "h",
      sub(H_BLOCKS, "permute(0, 1, 2, 4, 3, 5).reshape(n, n_maps, 4, 4, 4)", "permute(0, 1, 2, 4, 5, 3).reshape(n, n_maps, 4, 4, 4)"),
      "each window flattened column-first but written back row-first: the gradient lands on the mirrored entry",
      W_POOL + ("row",))
wrong("h_unpool_spread_quarter", "h", "h",
      "dh = F.interpolate(dpooled, scale_factor=2, mode='nearest') / 4\n",
      "each window's gradient shared evenly by its four entries, as for an average pool",
      W_POOL + ("average",))

# ---- WRONG: h = relu(hpre) -----------------------------------------------------------
wrong("hpre_heaviside_of_gradient", "hpre", "hpre", sub(HPRE_HEAVISIDE, "heaviside(hpre,", "heaviside(dh,"),
      "the ReLU's slope taken from the gradient dh instead of the input hpre", W_RELU)
wrong("hpre_sign_of_hpre", "hpre", "hpre", "dhpre = dh * torch.sign(hpre)\n",
      "sign(hpre) is -1 where the ReLU is off: the gradient is negated there instead of zeroed",
      W_RELU + ("sign",))
wrong("hpre_masked_fill_inverted", "hpre", "hpre", sub(HPRE_FILL, "hpre <= 0", "hpre > 0"),
      "the gradient zeroed where the ReLU was on: mask inverted", W_RELU + ("inverted",))

# ---- WRONG: hpre = conv2d(img, K, kb, padding=1) -------------------------------------
wrong("img_conv_transpose_flipped", "img", "img", sub(IMG_CT, "F.conv_transpose2d(dhpre, K, padding=1)",
                                                       "F.conv_transpose2d(dhpre, K.flip(2, 3), padding=1)"),
      "the kernel flipped for conv_transpose2d, which already applies the flip", W_FLIP)
wrong("img_shifts_not_flipped", "img", "img", sub(IMG_SHIFTS, "K[:, 0].flip(1, 2)", "K[:, 0]"),
      "the gradient's windows contracted with the kernel unflipped", W_FLIP)
wrong("img_conv_transpose_crop_top_left", "img", "img",
      sub(IMG_CT, "F.conv_transpose2d(dhpre, K, padding=1)",
          "F.conv_transpose2d(dhpre, K)[:, :, :block_size, :n_embd]"),
      "the full transposed convolution cropped at the top-left instead of 1 on each side", W_PAD)
wrong("img_shifts_pad_top_left", "img", "K", sub(IMG_SHIFTS, "F.pad(img, (1, 1, 1, 1))", "F.pad(img, (2, 0, 2, 0))"),
      "the image padded by 2 on the top/left only: every tap sees shifted windows", W_PAD)
wrong("img_conv_transpose_taps_swapped", "img", "K", sub(IMG_CT, "->mcrs'", "->mcsr'"),
      "the kernel's row and column taps swapped in the einsum output", W_TAPS)
wrong("img_dkb_mean_positions", "img", "kb",
      sub(IMG_CT, "dkb = torch.einsum('zmuv->m', dhpre)", "dkb = torch.einsum('zmuv->m', dhpre) / (block_size * n_embd)"),
      "the bias gradient averaged over the positions instead of summed",
      ("sum", "position", "spatial", "mean", "average", "divide"))

# ---- WRONG: img = emb.unsqueeze(1) ---------------------------------------------------
wrong("emb_einsum_transposed", "emb", "emb", "demb = torch.einsum('zcuv->zvu', dimg)\n",
      "the output letters written in the wrong order: positions and embedding dims swapped",
      ("transpose", "swap", "squeeze", "unsqueeze", "order", "axis"))

# ---- WRONG: emb = C[Xb] --------------------------------------------------------------
wrong("C_scatter_no_add", "C", "C", sub(C_SCATTER, "scatter_add_(", "scatter_("),
      "scatter_ instead of scatter_add_: a repeated character keeps one row only", W_REPEAT)
