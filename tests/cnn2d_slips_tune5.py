"""2-D CNN lesson (cnn2d_pack, made by `pack new` from tests/packs/forward/slips_cnn2d.py): a
fifth slip corpus, TUNE half (its other half is tests/cnn2d_slips_holdout5.py).

What it is: rows of backward-pass code as a learner would type them into one step of the lesson.
Every RIGHT row passes the tutor's check; every WRONG row carries one slip that learners really
make with these operations (a kernel flip where none belongs, padding cropped from the wrong
side, the kernel's row and column taps swapped, out-channels and taps mixed, the bias averaged
over the positions, max-pool routing spread over the window, sent to every tied entry, to the
mirrored offset or to windows taken as dilated blocks, the ReLU's slope taken at the gradient,
inverted or replaced by the activation, the flatten undone in the wrong order, a loop that
overwrites instead of accumulating, the cross-entropy's average, repeated embedding rows) and
fails it. The same slip family is put on every step where its operation occurs.

Style: F.unfold / F.fold for the convolution with torch.bmm against the kernel as a matrix,
explicit Python loops over the 3x3 taps into a padded zero buffer, max-pool routing by a loop
over the four window offsets with torch.where and a `taken` mask for ties, helper lambdas for
the softmax and the ReLU's slope, loops over the batch into zero buffers for the linear layer,
unflatten / per-map slices for the flatten and index_add_ / a double loop for the embedding. It
was written apart from the diagnosis code, without reading it, and each row was checked with
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
W_CHANNEL = ("channel", "in_channels", "out_channels", "swap", "transpose", "axis", "reshape")
W_POOL = ("max", "argmax", "window", "pool", "route", "winner")
W_RELU = ("relu", "slope", "mask", "positive", "hpre", "derivative")
W_PERM = ("permute", "reshape", "order", "layout", "flatten", "channel")
W_MEAN = ("mean", "average", "divide", "batch", "factor", "/ n")
W_LOOP = ("accumulate", "+=", "overwrite", "last", "loop", "sum")
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
LOGITS = ("sm = lambda z: (z - z.logsumexp(1, keepdim=True)).exp()\n"
          "dlogits = sm(logits)\n"
          "dlogits[range(n), Yb] -= 1\n"
          "dlogits /= n\n")
LOGITS_WHERE = ("p = F.softmax(logits, 1)\n"
                "dlogits = torch.where(torch.arange(vocab_size) == Yb[:, None], p - 1, p) / n\n")
# logits = flat @ W + b: a loop over the batch into zero buffers
FLAT_LOOP = ("dflat = torch.zeros_like(flat)\n"
             "dW = torch.zeros_like(W)\n"
             "db = torch.zeros_like(b)\n"
             "for i in range(n):\n"
             "    dflat[i] = W @ dlogits[i]\n"
             "    dW += torch.outer(flat[i], dlogits[i])\n"
             "    db += dlogits[i]\n")
FLAT_MM = ("dflat = torch.mm(dlogits, W.t())\n"
           "dW = torch.mm(flat.t(), dlogits)\n"
           "db = dlogits.sum(0)\n")
# flat = pooled.flatten(1)
POOLED_UNFLATTEN = "dpooled = dflat.unflatten(1, (n_maps, block_size // 2, n_embd // 2))\n"
POOLED_LOOP = ("dpooled = torch.zeros_like(pooled)\n"
               "for c in range(n_maps):\n"
               "    dpooled[:, c] = dflat[:, 16 * c:16 * (c + 1)].view(n, 4, 4)\n")
# pooled = max_pool2d(h, 2): the four offsets of every window, first max wins on ties
H_LOOP = ("dh = torch.zeros_like(h)\n"
          "taken = torch.zeros_like(pooled, dtype=torch.bool)\n"
          "for a in range(2):\n"
          "    for c in range(2):\n"
          "        hit = (h[:, :, a::2, c::2] == pooled) & ~taken\n"
          "        dh[:, :, a::2, c::2] = torch.where(hit, dpooled, torch.zeros(()))\n"
          "        taken |= hit\n")
# max-pool: F.unfold the 2x2 windows, one-hot of the argmax, F.fold back
H_UNFOLD = ("cols = F.unfold(h, 2, stride=2).view(n, n_maps, 4, 16)\n"
            "win = F.one_hot(cols.argmax(2), 4).transpose(2, 3).to(h.dtype)\n"
            "g = win * dpooled.view(n, n_maps, 1, 16)\n"
            "dh = F.fold(g.reshape(n, n_maps * 4, 16), (block_size, n_embd), 2, stride=2)\n")
# h = relu(hpre)
HPRE_WHERE = "dhpre = torch.where(hpre > 0, dh, torch.zeros_like(dh))\n"
HPRE_LAMBDA = ("slope = lambda z: (z > 0).to(z.dtype)\n"
               "dhpre = dh * slope(hpre)\n")
# conv: F.unfold columns, the kernel as an (n_maps, 9) matrix, F.fold back
IMG_UNFOLD = ("cols = F.unfold(img, kernel_size, padding=1)\n"
              "g = dhpre.flatten(2)\n"
              "Km = K.view(n_maps, -1)\n"
              "dK = torch.bmm(g, cols.transpose(1, 2)).sum(0).view_as(K)\n"
              "dcols = torch.bmm(Km.t().expand(n, -1, -1), g)\n"
              "dimg = F.fold(dcols, (block_size, n_embd), kernel_size, padding=1)\n"
              "dkb = g.sum((0, 2))\n")
# conv: a loop over the nine taps, the input gradient gathered in a padded buffer
IMG_TAPS = ("P = F.pad(img, (1, 1, 1, 1))\n"
            "dP = torch.zeros_like(P)\n"
            "dK = torch.zeros_like(K)\n"
            "for i in range(3):\n"
            "    for j in range(3):\n"
            "        win = P[:, :, i:i + block_size, j:j + n_embd]\n"
            "        dK[:, 0, i, j] = (dhpre * win).sum((0, 2, 3))\n"
            "        dP[:, :, i:i + block_size, j:j + n_embd] += (dhpre * K[:, 0, i, j].view(1, -1, 1, 1)).sum(1, keepdim=True)\n"
            "dimg = dP[:, :, 1:-1, 1:-1]\n"
            "dkb = dhpre.sum((0, 2, 3))\n")
# emb = C[Xb]
C_INDEX_ADD = "dC = torch.zeros_like(C).index_add_(0, Xb.view(-1), demb.view(-1, n_embd))\n"
C_LOOP = ("dC = torch.zeros_like(C)\n"
          "for i in range(n):\n"
          "    for t in range(block_size):\n"
          "        dC[Xb[i, t]] += demb[i, t]\n")

# ---- RIGHT ---------------------------------------------------------------------------
right("logits_lambda_logsumexp", "logits", "logits", LOGITS)
right("logits_where_target", "logits", "logits", LOGITS_WHERE)
right("logits_loop_rows", "logits", "logits",
      "dlogits = torch.empty_like(logits)\n"
      "for i in range(n):\n"
      "    row = logits[i].softmax(0)\n"
      "    row[Yb[i]] -= 1\n"
      "    dlogits[i] = row / n\n")
right("flat_loop_outer", "flat", "W", FLAT_LOOP)
right("flat_mm", "flat", "flat", FLAT_MM)
right("pooled_unflatten", "pooled", "pooled", POOLED_UNFLATTEN)
right("pooled_loop_maps", "pooled", "pooled", POOLED_LOOP)
right("h_loop_offsets_taken", "h", "h", H_LOOP)
right("h_unfold_onehot_fold", "h", "h", H_UNFOLD)
right("hpre_where", "hpre", "hpre", HPRE_WHERE)
right("hpre_lambda_slope", "hpre", "hpre", HPRE_LAMBDA)
right("hpre_lambda_slope_of_h", "hpre", "hpre", sub(HPRE_LAMBDA, "slope(hpre)", "slope(h)"))
right("img_unfold_fold", "img", "img", IMG_UNFOLD)
right("img_tap_loop", "img", "K", IMG_TAPS)
right("emb_index", "emb", "emb", "demb = dimg[:, 0]\n")
right("emb_sum_channel", "emb", "emb", "demb = dimg.sum(1)\n")
right("C_index_add", "C", "C", C_INDEX_ADD)
right("C_double_loop", "C", "C", C_LOOP)

# ---- WRONG: cross-entropy ------------------------------------------------------------
wrong("logits_lambda_no_divide", "logits", "logits", sub(LOGITS, "dlogits /= n\n", ""),
      "the batch mean not divided out", W_MEAN)

# ---- WRONG: logits = flat @ W + b ----------------------------------------------------
wrong("flat_loop_dW_overwritten", "flat", "W", sub(FLAT_LOOP, "dW += torch.outer", "dW = torch.outer"),
      "dW assigned inside the loop: only the last example's outer product is kept", W_LOOP)
wrong("flat_loop_db_mean", "flat", "b", sub(FLAT_LOOP, "db += dlogits[i]", "db += dlogits[i] / n"),
      "each example's bias gradient divided by n: db averaged instead of summed", W_MEAN)

# ---- WRONG: flat = pooled.flatten(1) -------------------------------------------------
wrong("pooled_loop_interleaved", "pooled", "pooled",
      sub(POOLED_LOOP, "dflat[:, 16 * c:16 * (c + 1)]", "dflat[:, c::n_maps]"),
      "each map read as every n_maps-th entry: flatten(1) keeps each map's 16 entries together",
      W_PERM + ("interleave",))
wrong("pooled_unflatten_rows_cols", "pooled", "pooled", POOLED_UNFLATTEN.rstrip("\n") + ".transpose(2, 3)\n",
      "rows and columns of each map swapped after undoing the flatten", W_PERM + ("transpose",))

# ---- WRONG: pooled = max_pool2d(h, 2) ------------------------------------------------
wrong("h_loop_spread_window", "h", "h",
      "dh = torch.zeros_like(h)\n"
      "for a in range(2):\n"
      "    for c in range(2):\n"
      "        dh[:, :, a::2, c::2] = dpooled / 4\n",
      "each window's gradient shared by its four entries, as for an average pool",
      W_POOL + ("average",))
wrong("h_loop_every_tie", "h", "h", sub(sub(H_LOOP, " & ~taken", ""), "        taken |= hit\n", ""),
      "every entry equal to the max gets the gradient: tied windows (all zeros after the ReLU) pay it out several times",
      W_POOL + ("tie",))
wrong("h_loop_offset_mirrored", "h", "h", sub(H_LOOP, "dh[:, :, a::2, c::2] = torch.where", "dh[:, :, c::2, a::2] = torch.where"),
      "the winner's row and column offsets swapped when writing back: the gradient lands beside the max",
      W_POOL + ("row",))
wrong("h_loop_dilated_blocks", "h", "h",
      sub(sub(H_LOOP, "hit = (h[:, :, a::2, c::2] == pooled)", "hit = (h[:, :, 4 * a:4 * a + 4, 4 * c:4 * c + 4] == pooled)"),
          "dh[:, :, a::2, c::2] =", "dh[:, :, 4 * a:4 * a + 4, 4 * c:4 * c + 4] ="),
      "windows taken as 4x4 blocks, entries 4 apart (a dilation) instead of 2x2 windows stepped by the stride",
      ("stride", "dilation", "window", "2x2", "block", "adjacent"))

# ---- WRONG: h = relu(hpre) -----------------------------------------------------------
wrong("hpre_where_on_gradient", "hpre", "hpre", sub(HPRE_WHERE, "hpre > 0", "dh > 0"),
      "the ReLU's slope taken from the gradient dh instead of the input hpre", W_RELU)
wrong("hpre_lambda_times_activation", "hpre", "hpre", "dhpre = dh * h\n",
      "multiplied by the ReLU's output values instead of its 0/1 slope", W_RELU + ("indicator",))
wrong("hpre_where_inverted", "hpre", "hpre", sub(HPRE_WHERE, "hpre > 0", "hpre < 0"),
      "the gradient kept where the ReLU was off: mask inverted", W_RELU + ("inverted",))

# ---- WRONG: hpre = conv2d(img, K, kb, padding=1) -------------------------------------
wrong("img_fold_kernel_flipped", "img", "img", sub(IMG_UNFOLD, "Km = K.view(n_maps, -1)", "Km = K.flip(2, 3).view(n_maps, -1)"),
      "the kernel flipped for the fold: fold already puts every tap back where it came from",
      W_FLIP)
wrong("img_taps_crop_top_left", "img", "img", sub(IMG_TAPS, "dimg = dP[:, :, 1:-1, 1:-1]", "dimg = dP[:, :, :block_size, :n_embd]"),
      "the padded gradient cropped at the top-left corner instead of 1 on each side", W_PAD)
wrong("img_fold_no_padding_crop", "img", "img",
      sub(IMG_UNFOLD, "F.fold(dcols, (block_size, n_embd), kernel_size, padding=1)",
          "F.fold(dcols, (block_size + 2, n_embd + 2), kernel_size)[:, :, 2:, 2:]"),
      "folded into the padded size and cropped from the top-left: shifted by one",
      W_PAD)
wrong("img_taps_swapped", "img", "K", sub(IMG_TAPS, "dK[:, 0, i, j] =", "dK[:, 0, j, i] ="),
      "the tap (i, j) stored at (j, i): dK's rows and columns swapped", W_TAPS)
wrong("img_fold_dK_channels_taps_mixed", "img", "K",
      sub(IMG_UNFOLD, "torch.bmm(g, cols.transpose(1, 2)).sum(0).view_as(K)", "torch.bmm(cols, g.transpose(1, 2)).sum(0).reshape(K.shape)"),
      "dK built as (taps, maps) and reshaped: out-channels and taps mixed", W_CHANNEL)
wrong("img_fold_dkb_batch_only", "img", "kb", sub(IMG_UNFOLD, "dkb = g.sum((0, 2))", "dkb = g.sum(0).mean(1)"),
      "the bias gradient averaged over the positions instead of summed", ("sum", "position", "spatial", "axis", "mean", "average"))
wrong("img_taps_dK_from_dh", "img", "K", sub(IMG_TAPS, "(dhpre * win).sum", "(dh * win).sum"),
      "dK built from dh, the gradient before the ReLU's mask, instead of dhpre",
      ("dhpre", "relu", "mask", "dh", "before", "wrong tensor"))

# ---- WRONG: img = emb.unsqueeze(1) ---------------------------------------------------
wrong("emb_transposed", "emb", "emb", "demb = dimg.squeeze(1).transpose(1, 2)\n",
      "the image's rows and columns swapped on the way back: rows are positions, columns embedding dims",
      ("transpose", "swap", "squeeze", "unsqueeze", "order", "axis"))

# ---- WRONG: emb = C[Xb] --------------------------------------------------------------
wrong("C_loop_assign", "C", "C", sub(C_LOOP, "dC[Xb[i, t]] += demb[i, t]", "dC[Xb[i, t]] = demb[i, t]"),
      "= in the loop: a repeated character keeps only its last row", W_REPEAT)
