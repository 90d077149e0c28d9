"""2-D CNN lesson (cnn2d_pack, made by `pack new` from tests/packs/forward/slips_cnn2d.py): a
fourth slip corpus, TUNE half (its other half is tests/cnn2d_slips_holdout4.py).

What it is: rows of backward-pass code as a learner would type them into one step of the lesson.
Every RIGHT row passes the tutor's check; every WRONG row carries one slip that learners really
make with these operations (the convolution's kernel flip, padding and cropping, channels and
taps of the weight gradient, the bias summed over batch and positions, max-pool routing, windows
strided or dilated, the ReLU's slope and the tensor it is taken from, undoing the flatten, the
cross-entropy's average, signs, repeated embedding rows) and fails it. The same slip family is
put on every step where its operation occurs.

Style: F.pad followed by F.conv2d with a flipped kernel (also inside a small helper function),
Tensor.unfold windows contracted with einsum, max-pool routing by argmax with row/column index
arithmetic and scatter_add_, F.conv_transpose2d with stride 2 as an upsampler matched against
max_pool2d's indices, boolean-index copies for the ReLU, a broadcast outer product for the
linear layer and one-hot einsum / a zip loop with `+=` for the embedding. It was written apart
from the diagnosis code, without reading it, and each row was checked with
`backprop-tutor check --json` looking at "passed" only: `words` are the writer's own guess at
what a specific diagnosis of the slip would say (any one of them is enough), not copied from the
tutor's messages.

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


def sub(base, old, new):
    assert old in base, (old, base)
    return base.replace(old, new)


# ---- pieces a learner reuses inside one step ---------------------------------------
LOGITS = ("def softmax_rows(z):\n"
          "    e = torch.exp(z - z.max(dim=1, keepdim=True).values)\n"
          "    return e / e.sum(1, keepdim=True)\n"
          "g = softmax_rows(logits)\n"
          "g.scatter_add_(1, Yb.unsqueeze(1), -torch.ones(n, 1))\n"
          "dlogits = g / n\n")
FLAT = ("dflat = torch.matmul(dlogits, W.transpose(-2, -1))\n"
        "dW = (flat.unsqueeze(2) * dlogits.unsqueeze(1)).sum(0)\n"
        "db = torch.ones(n) @ dlogits\n")
POOLED = "dpooled = dflat.reshape(n, n_maps, block_size // 2, n_embd // 2)\n"
# max-pool: argmax of Tensor.unfold windows, the winner's row and column by index arithmetic
H_SCATTER = ("win = h.unfold(2, 2, 2).unfold(3, 2, 2).flatten(-2)\n"
             "k = win.argmax(-1)\n"
             "i = torch.arange(4).view(4, 1)\n"
             "j = torch.arange(4).view(1, 4)\n"
             "row = 2 * i + k // 2\n"
             "col = 2 * j + k % 2\n"
             "dh = torch.zeros(n, n_maps, block_size * n_embd)\n"
             "dh.scatter_add_(2, (row * n_embd + col).flatten(2), dpooled.flatten(2))\n"
             "dh = dh.view_as(h)\n")
# max-pool: a stride-2 transposed convolution with a ones kernel copies each entry to its window
H_UPSAMPLE = ("def up(t):\n"
              "    t = t.reshape(-1, 1, 4, 4)\n"
              "    return F.conv_transpose2d(t, torch.ones(1, 1, 2, 2), stride=2).view(n, n_maps, 8, 8)\n"
              "_, idx = F.max_pool2d(h, 2, return_indices=True)\n"
              "where = torch.arange(block_size * n_embd, dtype=h.dtype).view(block_size, n_embd)\n"
              "dh = up(dpooled) * (up(idx.to(h.dtype)) == where)\n")
HPRE_HELPER = ("def relu_back(g, z):\n"
               "    return g * z.gt(0).to(g.dtype)\n"
               "dhpre = relu_back(dh, hpre)\n")
HPRE_INDEX = ("dhpre = torch.zeros_like(dh)\n"
              "on = hpre > 0\n"
              "dhpre[on] = dh[on]\n")
# conv: a helper that pads by one and correlates
IMG_HELPER = ("def corr(x, w):\n"
              "    return F.conv2d(F.pad(x, (1, 1, 1, 1)), w)\n"
              "dimg = corr(dhpre, K.transpose(0, 1).flip(2, 3))\n"
              "dK = corr(img.transpose(0, 1), dhpre.transpose(0, 1)).transpose(0, 1)\n"
              "dkb = dhpre.sum(dim=[0, 2, 3])\n")
# conv: Tensor.unfold windows of the padded tensors, contracted with einsum
WINDOWS = "P = F.pad(img, (1, 1, 1, 1)).unfold(2, 3, 1).unfold(3, 3, 1)\n"
DK_EIN = "dK = torch.einsum('nmyx,ncyxij->mcij', dhpre, P)\n"
IMG_UNFOLD = ("G = F.pad(dhpre, (1, 1, 1, 1)).unfold(2, 3, 1).unfold(3, 3, 1)\n"
              "dimg = torch.einsum('nmyxij,mij->nyx', G, K[:, 0].flip(-2, -1)).unsqueeze(1)\n"
              + WINDOWS + DK_EIN
              + "dkb = dhpre.transpose(0, 1).reshape(n_maps, -1).sum(1)\n")
C_ONEHOT = ("oh = F.one_hot(Xb, vocab_size).to(demb.dtype)\n"
            "dC = torch.einsum('ntv,nte->ve', oh, demb)\n")
C_ZIP = ("dC = torch.zeros_like(C)\n"
         "for ix, row in zip(Xb.reshape(-1).tolist(), demb.reshape(-1, n_embd)):\n"
         "    dC[ix] += row\n")

# ---- RIGHT ---------------------------------------------------------------------------
right("logits_helper_scatter_add", "logits", "logits", LOGITS)
right("flat_matmul_outer_ones", "flat", "W", FLAT)
right("pooled_reshape_sizes", "pooled", "pooled", POOLED)
right("h_unfold_index_arithmetic", "h", "h", H_SCATTER)
right("h_stride2_upsample_indices", "h", "h", H_UPSAMPLE)
right("hpre_helper_gt", "hpre", "hpre", HPRE_HELPER)
right("hpre_boolean_copy", "hpre", "hpre", HPRE_INDEX)
right("img_pad_conv2d_helper", "img", "img", IMG_HELPER)
right("img_unfold_einsum", "img", "K", IMG_UNFOLD)
right("emb_select", "emb", "emb", "demb = dimg.select(1, 0)\n")
right("C_onehot_einsum", "C", "C", C_ONEHOT)
right("C_zip_loop", "C", "C", C_ZIP)

# ---- WRONG: cross-entropy ------------------------------------------------------------
wrong("logits_no_divide", "logits", "logits", sub(LOGITS, "dlogits = g / n", "dlogits = g"),
      "the batch mean not divided out", W_MEAN)
wrong("logits_one_added", "logits", "logits", sub(LOGITS, "-torch.ones(n, 1)", "torch.ones(n, 1)"),
      "one added at the target instead of subtracted: the target term's sign flipped",
      ("sign", "subtract", "minus", "target", "one_hot", "plus"))
wrong("logits_helper_over_batch", "logits", "logits",
      sub(sub(LOGITS, "z.max(dim=1, keepdim=True)", "z.max(dim=0, keepdim=True)"),
          "e.sum(1, keepdim=True)", "e.sum(0, keepdim=True)"),
      "the helper's softmax normalises over the batch (dim 0) instead of the classes",
      ("axis", "dim", "softmax", "class", "batch", "row"))

# ---- WRONG: logits = flat @ W + b ----------------------------------------------------
wrong("flat_db_ones_over_n", "flat", "b", sub(FLAT, "torch.ones(n) @ dlogits", "torch.ones(n) / n @ dlogits"),
      "a row of 1/n: db averaged over the batch instead of summed", W_MEAN)
wrong("flat_dW_outer_transposed", "flat", "W",
      sub(FLAT, "(flat.unsqueeze(2) * dlogits.unsqueeze(1))", "(dlogits.unsqueeze(2) * flat.unsqueeze(1))"),
      "the outer product built dlogits-first: dW comes out transposed", W_T)
wrong("flat_dflat_negated", "flat", "flat", sub(FLAT, "dflat = torch.matmul(", "dflat = -torch.matmul("),
      "dflat negated", W_SIGN)

# ---- WRONG: flat = pooled.flatten(1) -------------------------------------------------
wrong("pooled_movedim_channels_last", "pooled", "pooled", "dpooled = dflat.reshape(n, 4, 4, n_maps).movedim(-1, 1)\n",
      "reshaped as if the maps came last: flatten(1) keeps the maps first", W_PERM)
wrong("pooled_maps_before_batch", "pooled", "pooled", "dpooled = dflat.reshape(n_maps, n, 4, 4).transpose(0, 1)\n",
      "reshaped with the maps before the batch, then swapped: entries of different examples mixed",
      W_PERM + ("batch",))

# ---- WRONG: pooled = max_pool2d(h, 2) ------------------------------------------------
wrong("h_upsample_spread_evenly", "h", "h",
      sub(H_UPSAMPLE, "dh = up(dpooled) * (up(idx.to(h.dtype)) == where)", "dh = up(dpooled) / 4"),
      "each window's gradient shared evenly by its four entries, as for an average pool",
      W_POOL + ("average",))
wrong("h_tile_not_upsample", "h", "h",
      sub(H_UPSAMPLE, "dh = up(dpooled) *", "dh = dpooled.tile((1, 1, 2, 2)) *"),
      "tile repeats the whole 4x4 map instead of copying each entry into its own window",
      ("tile", "repeat", "upsample", "window", "position", "interleave"))
wrong("h_winner_row_col_swapped", "h", "h",
      sub(sub(H_SCATTER, "row = 2 * i + k // 2", "row = 2 * i + k % 2"), "col = 2 * j + k % 2", "col = 2 * j + k // 2"),
      "the winner's row and column inside the window swapped: the gradient lands beside the max",
      W_POOL + ("row",))
wrong("h_windows_dilated", "h", "h",
      "win = h.reshape(n, n_maps, 2, 4, 2, 4).permute(0, 1, 3, 5, 2, 4).reshape(n, n_maps, 4, 4, 4)\n"
      "k = win.argmax(-1)\n"
      "i = torch.arange(4).view(4, 1)\n"
      "j = torch.arange(4).view(1, 4)\n"
      "row = i + 4 * (k // 2)\n"
      "col = j + 4 * (k % 2)\n"
      "dh = torch.zeros(n, n_maps, block_size * n_embd)\n"
      "dh.scatter_add_(2, (row * n_embd + col).flatten(2), dpooled.flatten(2))\n"
      "dh = dh.view_as(h)\n",
      "windows taken 4 apart (a dilation) instead of 2x2 blocks stepped by the stride",
      ("stride", "dilation", "window", "2x2", "block", "adjacent"))
wrong("h_first_entry_always", "h", "h", sub(H_SCATTER, "k = win.argmax(-1)", "k = torch.zeros_like(win[..., 0], dtype=torch.long)"),
      "every window's gradient routed to its first entry instead of its max", W_POOL + ("first",))

# ---- WRONG: h = relu(hpre) -----------------------------------------------------------
wrong("hpre_helper_mask_of_gradient", "hpre", "hpre", sub(HPRE_HELPER, "relu_back(dh, hpre)", "relu_back(dh, dh)"),
      "the ReLU's slope taken from the gradient dh instead of the input hpre", W_RELU)
wrong("hpre_helper_no_slope", "hpre", "hpre", sub(HPRE_HELPER, "return g * z.gt(0).to(g.dtype)", "return g"),
      "the helper passes the gradient through: the ReLU's mask is missing", W_RELU + ("missing",))
wrong("hpre_times_clamped_input", "hpre", "hpre", "dhpre = dh * hpre.clamp(min=0)\n",
      "multiplied by the ReLU's output values instead of its 0/1 slope", W_RELU + ("indicator",))
wrong("hpre_boolean_copy_inverted", "hpre", "hpre", sub(HPRE_INDEX, "on = hpre > 0", "on = hpre <= 0"),
      "the gradient copied where the ReLU was off: mask inverted", W_RELU + ("inverted",))

# ---- WRONG: hpre = conv2d(img, K, kb, padding=1) -------------------------------------
wrong("img_helper_kernel_not_flipped", "img", "img",
      sub(IMG_HELPER, "corr(dhpre, K.transpose(0, 1).flip(2, 3))", "corr(dhpre, K.transpose(0, 1))"),
      "the input gradient correlates with the kernel unflipped", W_FLIP)
wrong("img_unfold_flip_columns_only", "img", "img", sub(IMG_UNFOLD, "K[:, 0].flip(-2, -1)", "K[:, 0].flip(-1)"),
      "the kernel flipped left-right only, not rotated by 180 degrees", W_FLIP + ("axis",))
wrong("img_pad_top_left", "img", "img", sub(IMG_HELPER, "dimg = corr(dhpre,", "dimg = F.conv2d(F.pad(dhpre, (2, 0, 2, 0)),"),
      "the gradient padded by 2 on the top/left only instead of 1 on every side: shifted", W_PAD)
wrong("img_full_then_crop_top_left", "img", "img",
      sub(IMG_HELPER, "dimg = corr(dhpre, K.transpose(0, 1).flip(2, 3))",
          "dimg = F.conv2d(F.pad(dhpre, (2, 2, 2, 2)), K.transpose(0, 1).flip(2, 3))[:, :, :block_size, :n_embd]"),
      "the full convolution cropped at the top-left corner instead of 1 on each side", W_PAD)
wrong("img_dK_flipped", "img", "K", sub(IMG_UNFOLD, DK_EIN, DK_EIN.rstrip("\n") + ".flip(-2, -1)\n"),
      "the weight gradient flipped: it needs no flip", W_FLIP)
wrong("img_dK_taps_transposed", "img", "K", sub(IMG_UNFOLD, "->mcij'", "->mcji'"),
      "the kernel's row and column taps swapped in the einsum output", W_TAPS)
wrong("img_dK_channels_swapped", "img", "K", sub(IMG_UNFOLD, "->mcij'", "->cmij'"),
      "dK laid out (in_channels, out_channels, ...) instead of (out, in, ...)", W_CHANNEL)
wrong("img_dK_pad_top_left", "img", "K", sub(IMG_UNFOLD, "F.pad(img, (1, 1, 1, 1))", "F.pad(img, (2, 0, 2, 0))"),
      "the image padded by 2 on the top/left only: every tap sees shifted windows", W_PAD)
wrong("img_dK_mean_batch", "img", "K", sub(IMG_UNFOLD, DK_EIN, DK_EIN.rstrip("\n") + " / n\n"),
      "dK averaged over the batch instead of summed", W_MEAN)
wrong("img_dK_before_relu", "img", "K", sub(IMG_HELPER, "dhpre.transpose(0, 1)).transpose(0, 1)", "dh.transpose(0, 1)).transpose(0, 1)"),
      "dK built from dh, the gradient before the ReLU's mask, instead of dhpre",
      ("dhpre", "relu", "mask", "dh", "before", "wrong tensor"))
wrong("img_dkb_reshape_mixes_batch", "img", "kb",
      sub(IMG_UNFOLD, "dhpre.transpose(0, 1).reshape(n_maps, -1)", "dhpre.reshape(n_maps, -1)"),
      "reshaped to (n_maps, -1) without moving the maps first: each row mixes examples and maps",
      ("sum", "axis", "batch", "reshape", "transpose", "channel", "map"))
wrong("img_dkb_mean_positions", "img", "kb", sub(IMG_HELPER, "dhpre.sum(dim=[0, 2, 3])", "dhpre.sum(0).mean(dim=[1, 2])"),
      "the bias gradient averaged over the positions instead of summed",
      ("sum", "position", "spatial", "mean", "average", "divide"))

# ---- WRONG: img = emb.unsqueeze(1) ---------------------------------------------------
wrong("emb_flipped", "emb", "emb", "demb = dimg[:, 0].flip(-1)\n",
      "a flip added where only the unsqueeze needs undoing",
      ("flip", "reverse", "squeeze", "unsqueeze", "undo", "order"))

# ---- WRONG: emb = C[Xb] --------------------------------------------------------------
wrong("C_zip_loop_assign", "C", "C", sub(C_ZIP, "dC[ix] += row", "dC[ix] = row"),
      "= in the loop: a repeated character keeps only its last row", W_REPEAT)
wrong("C_onehot_flatten_order", "C", "C",
      "oh = F.one_hot(Xb, vocab_size).to(demb.dtype).reshape(-1, vocab_size)\n"
      "dC = oh.t() @ demb.transpose(0, 1).reshape(-1, n_embd)\n",
      "the gradient rows flattened time-major, the one-hot rows batch-major: they don't line up",
      ("order", "transpose", "reshape", "flatten", "align", "match"))
