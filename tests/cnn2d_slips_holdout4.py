"""2-D CNN lesson (cnn2d_pack, made by `pack new` from tests/packs/forward/slips_cnn2d.py): a
fourth slip corpus, HOLDOUT half (its other half is tests/cnn2d_slips_tune4.py).

What it is: rows of backward-pass code as a learner would type them into one step of the lesson.
Every RIGHT row passes the tutor's check; every WRONG row carries one slip that learners really
make with these operations (the convolution's kernel flip, padding and cropping, channels and
taps of the weight gradient, the bias summed over batch and positions, max-pool routing, windows
strided or dilated, the ReLU's slope and the tensor it is taken from, undoing the flatten, the
cross-entropy's average, signs, repeated embedding rows) and fails it. The same slip family is
put on every step where its operation occurs.

Style: torch.stack of per-example (and per-map) F.conv2d calls on F.pad-ded tensors, loops over
the 3x3 taps with `+=` into a zero buffer and einsum over the maps, max-pool windows gathered by
row/column index arithmetic and routed with gather / index_put_, a first-maximum mask built with
cumsum, torch.where and torch.heaviside for the ReLU, gather for the cross-entropy's target,
split + stack to undo the flatten, einsum with other letters for the linear layer, and index
arithmetic with index_add_ / bincount for the embedding. It was written apart from the diagnosis
code, without reading it, and each row was checked with `backprop-tutor check --json` looking at
"passed" only: `words` are the writer's own guess at what a specific diagnosis of the slip would
say (any one of them is enough), not copied from the tutor's messages.

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
LOGITS = ("p = F.softmax(logits, dim=1)\n"
          "at = Yb.view(-1, 1)\n"
          "p = p.scatter(1, at, p.gather(1, at) - 1)\n"
          "dlogits = p / n\n")
FLAT = ("dflat = torch.stack([W @ g for g in dlogits])\n"
        "dW = torch.einsum('zf,zc->fc', flat, dlogits)\n"
        "db = torch.einsum('zc->c', dlogits)\n")
POOLED = "dpooled = torch.stack(dflat.split(16, dim=1), dim=1).view(n, n_maps, 4, 4)\n"
# max-pool windows by index arithmetic: window (i, j) holds rows 2i + a and columns 2j + b
RC = ("a = torch.arange(2)\n"
      "rows = (2 * torch.arange(4).view(4, 1, 1, 1) + a.view(1, 1, 2, 1)).expand(4, 4, 2, 2).reshape(4, 4, 4)\n"
      "cols = (2 * torch.arange(4).view(1, 4, 1, 1) + a.view(1, 1, 1, 2)).expand(4, 4, 2, 2).reshape(4, 4, 4)\n")
H_GATHER = (RC
            + "win = h[:, :, rows, cols]\n"
              "k = win.argmax(-1, keepdim=True)\n"
              "r = rows.expand(n, n_maps, 4, 4, 4).gather(-1, k).squeeze(-1)\n"
              "c = cols.expand(n, n_maps, 4, 4, 4).gather(-1, k).squeeze(-1)\n"
              "bi = torch.arange(n).view(n, 1, 1, 1)\n"
              "mi = torch.arange(n_maps).view(1, n_maps, 1, 1)\n"
              "dh = torch.zeros_like(h)\n"
              "dh.index_put_((bi, mi, r, c), dpooled)\n")
H_CUMSUM = (RC
            + "win = h[:, :, rows, cols]\n"
              "top = win == win.amax(-1, keepdim=True)\n"
              "first = top & (top.cumsum(-1) == 1)\n"
              "g = first.to(h.dtype) * dpooled.unsqueeze(-1)\n"
              "dh = torch.zeros_like(h)\n"
              "dh[:, :, rows, cols] = g\n")
HPRE_WHERE = "dhpre = torch.where(hpre > 0, dh, 0.0)\n"
HPRE_HEAVI = "dhpre = dh * torch.heaviside(hpre, torch.zeros(()))\n"
# conv: per-example and per-map F.conv2d on padded tensors
KF = "Kf = K.flip(2, 3).transpose(0, 1)\n"
DIMG_STACK = "dimg = torch.stack([F.conv2d(F.pad(g, (1, 1, 1, 1)), Kf) for g in dhpre])\n"
DK_STACK = ("P = F.pad(img, (1, 1, 1, 1)).transpose(0, 1)\n"
            "dK = torch.stack([F.conv2d(P, dhpre[:, m:m + 1].transpose(0, 1)) for m in range(n_maps)])"
            ".view(K.shape)\n")
IMG_STACK = KF + DIMG_STACK + DK_STACK + "dkb = torch.einsum('nmyx->m', dhpre)\n"
# conv: loops over the 3x3 taps, += into a padded zero buffer
DIMG_TAPS = ("buf = torch.zeros(n, block_size + 2, n_embd + 2)\n"
             "for i in range(3):\n"
             "    for j in range(3):\n"
             "        buf[:, i:i + block_size, j:j + n_embd] += torch.einsum('nmyx,m->nyx', dhpre, K[:, 0, i, j])\n"
             "dimg = buf[:, 1:-1, 1:-1].unsqueeze(1)\n")
DK_TAPS = ("Q = F.pad(img[:, 0], (1, 1, 1, 1))\n"
           "dK = torch.zeros_like(K)\n"
           "for i in range(3):\n"
           "    for j in range(3):\n"
           "        dK[:, 0, i, j] += torch.einsum('nmyx,nyx->m', dhpre, Q[:, i:i + block_size, j:j + n_embd])\n")
IMG_TAPS = DIMG_TAPS + DK_TAPS + "dkb = dhpre.sum(-1).sum(-1).sum(0)\n"
C_FLAT = ("flat_ix = (Xb.reshape(-1, 1) * n_embd + torch.arange(n_embd)).reshape(-1)\n"
          "dC = torch.zeros(vocab_size * n_embd).index_add_(0, flat_ix, demb.reshape(-1))\n"
          "dC = dC.view(vocab_size, n_embd)\n")
C_BINCOUNT = ("cols = [torch.bincount(Xb.reshape(-1), weights=demb[..., e].reshape(-1), minlength=vocab_size)\n"
              "        for e in range(n_embd)]\n"
              "dC = torch.stack(cols, dim=1).to(demb.dtype)\n")

# ---- RIGHT ---------------------------------------------------------------------------
right("logits_gather_scatter", "logits", "logits", LOGITS)
right("flat_stack_einsum", "flat", "flat", FLAT)
right("pooled_split_stack", "pooled", "pooled", POOLED)
right("h_gather_index_put", "h", "h", H_GATHER)
right("h_cumsum_first_max", "h", "h", H_CUMSUM)
right("hpre_where_scalar", "hpre", "hpre", HPRE_WHERE)
right("hpre_heaviside", "hpre", "hpre", HPRE_HEAVI)
right("img_stack_conv2d", "img", "K", IMG_STACK)
right("img_tap_loops_einsum", "img", "img", IMG_TAPS)
right("emb_flatten_channel", "emb", "emb", "demb = dimg.flatten(1, 2)\n")
right("C_flat_index_add", "C", "C", C_FLAT)
right("C_bincount_weights", "C", "C", C_BINCOUNT)

# ---- WRONG: cross-entropy ------------------------------------------------------------
wrong("logits_no_mean", "logits", "logits", sub(LOGITS, "dlogits = p / n", "dlogits = p"),
      "the batch mean not divided out", W_MEAN)
wrong("logits_gather_plus_one", "logits", "logits", sub(LOGITS, "p.gather(1, at) - 1", "p.gather(1, at) + 1"),
      "one added at the target's probability instead of subtracted",
      ("sign", "subtract", "minus", "target", "one_hot", "plus"))
wrong("logits_over_classes_too", "logits", "logits", sub(LOGITS, "dlogits = p / n", "dlogits = p / (n * vocab_size)"),
      "divided by n * vocab_size: the loss averages over the examples only",
      ("divide", "mean", "vocab", "scale", "factor", "average"))

# ---- WRONG: logits = flat @ W + b ----------------------------------------------------
wrong("flat_db_over_classes", "flat", "b", sub(FLAT, "'zc->c'", "'zc->z'"),
      "db summed over the classes instead of the batch", W_AXIS + ("class",))
wrong("flat_dW_letters_swapped", "flat", "W", sub(FLAT, "'zf,zc->fc'", "'zf,zc->cf'"),
      "einsum output letters swapped: dW comes out transposed", W_T)
wrong("flat_dflat_over_n", "flat", "flat", sub(FLAT, "for g in dlogits])", "for g in dlogits]) / n"),
      "dflat divided by n again: dlogits already carries the mean", W_MEAN + ("again",))

# ---- WRONG: flat = pooled.flatten(1) -------------------------------------------------
wrong("pooled_split_stacked_last", "pooled", "pooled",
      sub(POOLED, "torch.stack(dflat.split(16, dim=1), dim=1)", "torch.stack(dflat.split(16, dim=1), dim=-1)"),
      "the maps' chunks stacked on the last axis: every map's entries interleaved", W_PERM)
wrong("pooled_rows_cols_swapped", "pooled", "pooled", "dpooled = dflat.view(n, n_maps, 4, 4).mT\n",
      "each map's rows and columns swapped after the view", W_PERM + ("transpose",))

# ---- WRONG: pooled = max_pool2d(h, 2) ------------------------------------------------
wrong("h_index_spread_evenly", "h", "h",
      RC + "dh = torch.zeros_like(h)\n"
           "dh[:, :, rows, cols] = dpooled.unsqueeze(-1).expand(n, n_maps, 4, 4, 4) / 4\n",
      "each window's gradient shared evenly by its four entries, as for an average pool",
      W_POOL + ("average",))
wrong("h_first_entry_of_window", "h", "h",
      sub(H_GATHER, "k = win.argmax(-1, keepdim=True)", "k = torch.zeros_like(win[..., :1], dtype=torch.long)"),
      "every window's gradient routed to its first (top-left) entry instead of its max",
      W_POOL + ("first",))
wrong("h_index_dilated", "h", "h",
      sub(sub(H_GATHER, "(2 * torch.arange(4).view(4, 1, 1, 1) + a.view(1, 1, 2, 1))",
              "(torch.arange(4).view(4, 1, 1, 1) + 4 * a.view(1, 1, 2, 1))"),
          "(2 * torch.arange(4).view(1, 4, 1, 1) + a.view(1, 1, 1, 2))",
          "(torch.arange(4).view(1, 4, 1, 1) + 4 * a.view(1, 1, 1, 2))"),
      "window entries taken 4 apart (the stride used as a dilation) instead of adjacent 2x2 blocks",
      ("stride", "dilation", "window", "2x2", "block", "adjacent"))
wrong("h_all_tied_maxima", "h", "h", sub(H_CUMSUM, "g = first.to(h.dtype)", "g = top.to(h.dtype)"),
      "every entry equal to the window's max gets the gradient: ties (zeros after the ReLU) counted many times",
      ("tie", "first", "once", "every", "argmax", "duplicate"))
wrong("h_winner_transposed_in_window", "h", "h",
      sub(H_GATHER, "win = h[:, :, rows, cols]", "win = h[:, :, cols, rows]"),
      "windows read with rows and columns swapped: the gradient goes to the transposed window's max",
      W_POOL + ("transpose",))

# ---- WRONG: h = relu(hpre) -----------------------------------------------------------
wrong("hpre_where_on_gradient", "hpre", "hpre", sub(HPRE_WHERE, "torch.where(hpre > 0", "torch.where(dh > 0"),
      "the ReLU's mask taken from the gradient's sign instead of the input hpre", W_RELU)
wrong("hpre_slope_only", "hpre", "hpre", sub(HPRE_WHERE, "torch.where(hpre > 0, dh, 0.0)", "torch.where(hpre > 0, 1.0, 0.0)"),
      "only the ReLU's 0/1 slope: not multiplied by the arriving gradient dh",
      ("dh", "upstream", "chain", "multiply", "slope", "relu"))
wrong("hpre_times_input", "hpre", "hpre", "dhpre = dh * hpre\n",
      "multiplied by the ReLU's input values instead of its 0/1 slope", W_RELU + ("indicator",))
wrong("hpre_no_mask", "hpre", "hpre", "dhpre = dh + 0\n",
      "the ReLU's mask missing: gradient passed where the input was negative", W_RELU + ("missing",))

# ---- WRONG: hpre = conv2d(img, K, kb, padding=1) -------------------------------------
wrong("img_stack_kernel_not_flipped", "img", "img", sub(IMG_STACK, KF, "Kf = K.transpose(0, 1)\n"),
      "the input gradient correlates with the kernel unflipped", W_FLIP)
wrong("img_stack_flip_rows_only", "img", "img", sub(IMG_STACK, KF, "Kf = K.flip(2).transpose(0, 1)\n"),
      "the kernel flipped top-bottom only, not rotated by 180 degrees", W_FLIP + ("axis",))
wrong("img_taps_crop_top_left", "img", "img", sub(IMG_TAPS, "buf[:, 1:-1, 1:-1]", "buf[:, :block_size, :n_embd]"),
      "the padded buffer cropped at the top-left instead of 1 on each side", W_PAD)
wrong("img_stack_pad_two", "img", "img", sub(IMG_STACK, "F.pad(g, (1, 1, 1, 1))", "F.pad(g, (2, 2, 2, 2))"),
      "the gradient padded by 2 on every side: a 10x10 input gradient", W_PAD + ("shape",))
wrong("img_taps_kernel_flipped_in_loop", "img", "img", sub(IMG_TAPS, "K[:, 0, i, j])", "K[:, 0, 2 - i, 2 - j])"),
      "the scatter loop reads the flipped kernel's taps: it already flips by scattering", W_FLIP)
wrong("img_dK_stack_flipped", "img", "K", sub(IMG_STACK, ".view(K.shape)\n", ".view(K.shape).flip(2, 3)\n"),
      "the weight gradient flipped: it needs no flip", W_FLIP)
wrong("img_dK_taps_transposed", "img", "K", sub(IMG_TAPS, "dK[:, 0, i, j] +=", "dK[:, 0, j, i] +="),
      "each tap's gradient written at (j, i): the kernel's rows and columns transposed", W_TAPS)
wrong("img_dK_channels_swapped", "img", "K", sub(IMG_STACK, ".view(K.shape)\n", ".view(K.shape).transpose(0, 1)\n"),
      "dK left as (in_channels, out_channels, ...) after the per-map stack", W_CHANNEL)
wrong("img_dK_pad_bottom_right", "img", "K", sub(IMG_TAPS, "F.pad(img[:, 0], (1, 1, 1, 1))", "F.pad(img[:, 0], (0, 2, 0, 2))"),
      "the image padded by 2 on the bottom/right only: every tap sees shifted windows", W_PAD)
wrong("img_dK_mean_positions", "img", "K",
      sub(IMG_STACK, ".view(K.shape)\n", ".view(K.shape) / (block_size * n_embd)\n"),
      "dK averaged over the positions instead of summed",
      ("sum", "position", "spatial", "mean", "average", "divide"))
wrong("img_dkb_rows_letter", "img", "kb", sub(IMG_STACK, "'nmyx->m'", "'nmyx->y'"),
      "the einsum keeps the row letter: the bias gradient summed over the maps instead of the rows",
      W_BIAS)
wrong("img_dkb_before_relu", "img", "kb", sub(IMG_TAPS, "dkb = dhpre.sum(-1)", "dkb = dh.sum(-1)"),
      "the bias gradient from dh, skipping the ReLU's mask",
      ("dhpre", "relu", "mask", "dh", "before", "wrong tensor"))

# ---- WRONG: img = emb.unsqueeze(1) ---------------------------------------------------
wrong("emb_transposed", "emb", "emb", "demb = dimg.flatten(1, 2).mT\n",
      "the image's rows and columns swapped when undoing the unsqueeze",
      ("transpose", "swap", "row", "column", "order", "undo"))

# ---- WRONG: emb = C[Xb] --------------------------------------------------------------
wrong("C_flat_index_copy", "C", "C", sub(C_FLAT, ".index_add_(0, flat_ix,", ".index_copy_(0, flat_ix,"),
      "index_copy_: a repeated character's rows overwrite each other instead of adding",
      W_REPEAT + ("index_copy",))
wrong("C_flat_index_column_major", "C", "C",
      sub(C_FLAT, "(Xb.reshape(-1, 1) * n_embd + torch.arange(n_embd))",
          "(torch.arange(n_embd) * vocab_size + Xb.reshape(-1, 1))"),
      "the flat index built column-major (feature * vocab_size + character) but read back row-major",
      ("index", "stride", "order", "layout", "transpose", "flat"))
