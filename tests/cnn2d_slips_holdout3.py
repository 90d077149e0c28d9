"""2-D CNN lesson (cnn2d_pack, made by `pack new` from tests/packs/forward/slips_cnn2d.py): a
third slip corpus, HELD-OUT half.

What it is: rows of backward-pass code as a learner would type them into one step of the lesson.
Every RIGHT row passes the tutor's check; every WRONG row carries one slip that learners really
make with these operations (the convolution's kernel flip, padding and cropping, channels and
taps of the weight gradient, the bias summed over batch and positions, max-pool routing, the
ReLU's slope, undoing the flatten, the cross-entropy's average, signs, repeated embedding rows)
and fails it. The same slip family is put on several steps where its operation occurs; rows
differ from the tune half's, in their code and mostly in which slip sits on which step.

Style: max_pool2d's return_indices with max_unpool2d / scatter_, F.interpolate, masked_fill,
conv_transpose2d and stacked padded windows with einsum, loops over the batch, one-hot products
and index_put_ for the embedding. It was written apart from the diagnosis code, without reading
it, and each row was checked with `backprop-tutor check --json` looking at "passed" only: `words`
are the writer's own guess at what a specific diagnosis of the slip would say (any one of them is
enough), not copied from the tutor's messages.

RIGHT = {name: (step_id, tensor, code, "")}
WRONG = {name: (step_id, tensor, code, slip, words)}
"""
S = "cnn2d_pack/"

W_FLIP = ("flip", "rotate", "180", "kernel", "correlation", "twice")
W_PAD = ("pad", "padding", "crop", "border", "offset", "side")
W_TAPS = ("tap", "transpose", "kernel", "row", "column", "swap")
W_CHANNEL = ("channel", "in_channels", "out_channels", "swap", "transpose", "axis")
W_BIAS = ("sum", "position", "spatial", "axis", "axes", "dim", "batch")
W_POOL = ("max", "argmax", "window", "pool", "route", "winner")
W_RELU = ("relu", "slope", "mask", "positive", "hpre", "derivative")
W_PERM = ("permute", "reshape", "order", "layout", "flatten", "transpose")
W_MEAN = ("mean", "average", "divide", "batch", "factor", "/ n")
W_AXIS = ("sum", "axis", "batch", "dim", "example", "axes")
W_SIGN = ("sign", "minus", "negative", "flipped", "opposite", "negated")
W_T = ("transpose", "swap", "order", "operand", "swapped", ".t")
W_REPEAT = ("repeat", "accumulate", "overwrite", "duplicate", "add up", "scatter_add")

RIGHT, WRONG = {}, {}


def right(name, step, tensor, code):
    assert name not in RIGHT
    RIGHT[name] = (S + step, tensor, code, "")


def wrong(name, step, tensor, code, slip, words):
    assert name not in WRONG
    assert 4 <= len(words) <= 7 and all(w == w.lower() for w in words), name
    WRONG[name] = (S + step, tensor, code, slip, tuple(words))


# ---- pieces a learner reuses inside one step ---------------------------------------
IDX = "_, idx = F.max_pool2d(h, 2, return_indices=True)\n"
WIN = ("pad = F.pad(img, (1, 1, 1, 1))\n"
       "win = torch.stack([pad[:, 0, i:i + block_size, j:j + n_embd]\n"
       "                   for i in range(kernel_size) for j in range(kernel_size)], 1)\n")
DK = "dK = torch.einsum('boyx,bpyx->op', dhpre, win).reshape(K.shape)\n"
DKB = "dkb = torch.einsum('boyx->o', dhpre)\n"
DIMG = "dimg = F.conv_transpose2d(dhpre, K, stride=1, padding=1)\n"
DK_LOOP = ("dK = torch.zeros_like(K)\n"
           "for bi in range(dhpre.shape[0]):\n"
           "    dK += F.conv2d(img[bi:bi + 1].transpose(0, 1), dhpre[bi:bi + 1].transpose(0, 1),"
           " padding=1).transpose(0, 1)\n")

# ---- RIGHT ---------------------------------------------------------------------------
right("logits_log_softmax_scatter", "logits", "logits",
      "t = torch.zeros_like(logits).scatter_(1, Yb[:, None], 1.0)\n"
      "dlogits = (F.log_softmax(logits, 1).exp() - t) / Yb.shape[0]\n")
right("logits_eye_rows", "logits", "logits",
      "dlogits = (torch.softmax(logits, -1) - torch.eye(vocab_size)[Yb]) / logits.shape[0]\n")
right("flat_loop_outer", "flat", "W",
      "dflat = dlogits @ W.T\n"
      "dW = torch.zeros_like(W)\n"
      "db = torch.zeros_like(b)\n"
      "for i in range(flat.shape[0]):\n"
      "    dW += torch.outer(flat[i], dlogits[i])\n"
      "    db += dlogits[i]\n")
right("flat_matmul_mT", "flat", "b",
      "dflat = torch.matmul(dlogits, W.mT)\n"
      "dW = torch.matmul(flat.mT, dlogits)\n"
      "db = dlogits.sum(dim=0, keepdim=True).squeeze(0)\n")
right("pooled_reshape", "pooled", "pooled",
      "dpooled = dflat.reshape(-1, n_maps, 4, 4)\n")
right("h_max_unpool", "h", "h",
      IDX + "dh = F.max_unpool2d(dpooled, idx, 2, output_size=h.shape[-2:])\n")
right("h_scatter_indices", "h", "h",
      IDX
      + "dh = torch.zeros_like(h).flatten(2)\n"
        "dh.scatter_(2, idx.flatten(2), dpooled.flatten(2))\n"
        "dh = dh.view_as(h)\n")
right("hpre_gt_cast", "hpre", "hpre",
      "dhpre = dh * (hpre > 0).to(dh.dtype)\n")
right("hpre_masked_fill", "hpre", "hpre",
      "dhpre = dh.masked_fill(hpre <= 0, 0.0)\n")
right("img_stacked_windows", "img", "K",
      WIN + DIMG + DK + DKB)
right("img_batch_loop", "img", "img",
      "dimg = F.conv2d(dhpre, torch.rot90(K, 2, (2, 3)).permute(1, 0, 2, 3), padding=1)\n"
      + DK_LOOP
      + "dkb = dhpre.transpose(0, 1).reshape(n_maps, -1).sum(1)\n")
right("img_full_then_crop", "img", "kb",
      "full = F.conv_transpose2d(dhpre, K)\n"
      "dimg = full[:, :, 1:-1, 1:-1]\n"
      + WIN + DK
      + "dkb = dhpre.flatten(2).sum(-1).sum(0)\n")
right("emb_index_channel", "emb", "emb",
      "demb = dimg[:, 0]\n")
right("emb_sum_channel", "emb", "emb",
      "demb = dimg.sum(1)\n")
right("C_one_hot_matmul", "C", "C",
      "oh = F.one_hot(Xb.reshape(-1), vocab_size).to(demb.dtype)\n"
      "dC = oh.T @ demb.reshape(-1, n_embd)\n")
right("C_index_put_accumulate", "C", "C",
      "dC = torch.zeros_like(C)\n"
      "dC.index_put_((Xb.reshape(-1),), demb.reshape(-1, n_embd), accumulate=True)\n")

# ---- WRONG: cross-entropy ------------------------------------------------------------
wrong("logits_log_probs", "logits", "logits",
      "t = torch.zeros_like(logits).scatter_(1, Yb[:, None], 1.0)\n"
      "dlogits = (F.log_softmax(logits, 1) - t) / Yb.shape[0]\n",
      "log-probabilities used where the probabilities belong",
      ("log", "exp", "probabilit", "softmax", "log_softmax", "instead"))
wrong("logits_plus_one_at_target", "logits", "logits",
      "p = torch.softmax(logits, -1)\n"
      "p[torch.arange(p.shape[0]), Yb] += 1\n"
      "dlogits = p / p.shape[0]\n",
      "one added at the target instead of subtracted", W_SIGN)
wrong("logits_not_averaged", "logits", "logits",
      "dlogits = torch.softmax(logits, -1) - torch.eye(vocab_size)[Yb]\n",
      "the mean over the batch not divided out", W_MEAN)

# ---- WRONG: logits = flat @ W + b ----------------------------------------------------
wrong("flat_dW_divided_by_n", "flat", "W",
      "dflat = torch.matmul(dlogits, W.mT)\n"
      "dW = torch.matmul(flat.mT, dlogits) / n\n"
      "db = dlogits.sum(0)\n",
      "dW divided by the batch size", W_MEAN)
wrong("flat_db_first_example", "flat", "b",
      "dflat = dlogits @ W.T\n"
      "dW = flat.T @ dlogits\n"
      "db = dlogits[0]\n",
      "db taken from the first example: the broadcast bias not summed over the batch", W_AXIS)
wrong("flat_W_not_transposed", "flat", "flat",
      "dflat = dlogits @ W\n"
      "dW = flat.T @ dlogits\n"
      "db = dlogits.sum(0)\n",
      "dflat = dlogits @ W: W not transposed (the shapes do not fit)", W_T)
wrong("flat_loop_db_overwrites", "flat", "b",
      "dflat = dlogits @ W.T\n"
      "dW = torch.zeros_like(W)\n"
      "db = torch.zeros_like(b)\n"
      "for i in range(flat.shape[0]):\n"
      "    dW += torch.outer(flat[i], dlogits[i])\n"
      "    db = dlogits[i]\n",
      "db overwritten in the batch loop instead of accumulated",
      ("accumulate", "overwrite", "+=", "sum", "batch", "loop"))

# ---- WRONG: flat = pooled.flatten(1) -------------------------------------------------
wrong("pooled_spatial_transposed", "pooled", "pooled",
      "dpooled = dflat.reshape(-1, n_maps, 4, 4).transpose(2, 3)\n",
      "rows and columns of each map swapped when undoing the flatten", W_PERM)
wrong("pooled_from_transposed_dflat", "pooled", "pooled",
      "dpooled = dflat.T.reshape(n, n_maps, 4, 4)\n",
      "dflat transposed before the reshape: entries land in the wrong places", W_PERM)

# ---- WRONG: pooled = max_pool2d(h, 2) ------------------------------------------------
wrong("h_nearest_quarter", "h", "h",
      "dh = F.interpolate(dpooled, scale_factor=2, mode='nearest') * 0.25\n",
      "a quarter of the gradient to every entry: average pooling's backward",
      W_POOL + ("average",))
wrong("h_upsample_no_mask", "h", "h",
      "dh = dpooled.repeat_interleave(2, dim=2).repeat_interleave(2, dim=3)\n",
      "the gradient copied to all four entries of each window, not only the max", W_POOL)
wrong("h_bottom_right", "h", "h",
      "dh = torch.zeros_like(h)\n"
      "dh[:, :, 1::2, 1::2] = dpooled\n",
      "the gradient sent to a fixed corner of each window", W_POOL)
wrong("h_argmax_of_negated", "h", "h",
      "_, idx = F.max_pool2d(-h, 2, return_indices=True)\n"
      "dh = F.max_unpool2d(dpooled, idx, 2, output_size=h.shape[-2:])\n",
      "indices of the max of -h: the gradient goes to each window's minimum", W_POOL + ("min",))
wrong("h_max_along_one_window_axis", "h", "h",
      "w6 = h.view(n, n_maps, 4, 2, 4, 2)\n"
      "m = (w6 == w6.amax(dim=3, keepdim=True)).to(h.dtype)\n"
      "dh = (m * dpooled[:, :, :, None, :, None]).view(h.shape)\n",
      "the max taken down each column of the window only: two winners per window",
      W_POOL + ("axis",))
wrong("h_mask_without_upstream", "h", "h",
      IDX + "dh = F.max_unpool2d(torch.ones_like(dpooled), idx, 2, output_size=h.shape[-2:])\n",
      "the max positions marked with 1, the arriving gradient dpooled never multiplied in",
      ("dpooled", "upstream", "chain", "multiply", "gradient", "ones"))

# ---- WRONG: h = relu(hpre) -----------------------------------------------------------
wrong("hpre_mask_h_ge_zero", "hpre", "hpre",
      "dhpre = dh * (h >= 0).to(dh.dtype)\n",
      "h >= 0 is true everywhere after a ReLU: the slope never stops anything", W_RELU)
wrong("hpre_times_input", "hpre", "hpre",
      "dhpre = dh * hpre\n",
      "multiplied by the input hpre instead of the 0/1 slope", W_RELU + ("indicator",))
wrong("hpre_relu_of_gradient", "hpre", "hpre",
      "dhpre = torch.relu(dh)\n",
      "ReLU applied to the gradient instead of masking by the input's sign", W_RELU)

# ---- WRONG: hpre = conv2d(img, K, kb, padding=1) -------------------------------------
wrong("img_sign", "img", "img",
      "dimg = -F.conv_transpose2d(dhpre, K, padding=1)\n" + WIN + DK + DKB,
      "the input gradient negated", W_SIGN)
wrong("img_channels_not_swapped", "img", "img",
      "dimg = F.conv2d(dhpre, K.flip(2, 3), padding=1)\n" + WIN + DK + DKB,
      "the flipped kernel used without swapping its in/out channels (the shapes do not fit)",
      W_CHANNEL)
wrong("img_flipped_twice", "img", "img",
      "dimg = F.conv_transpose2d(dhpre, K.flip(2, 3), padding=1)\n" + WIN + DK + DKB,
      "conv_transpose2d flips already: flipping the kernel as well undoes it", W_FLIP)
wrong("img_crop_bottom_right", "img", "img",
      "full = F.conv_transpose2d(dhpre, K)\n"
      "dimg = full[:, :, 2:, 2:]\n" + WIN + DK + DKB,
      "the full result cropped by 2 at the top/left instead of 1 on every side", W_PAD)
wrong("img_dK_taps_transposed", "img", "K",
      WIN + DIMG
      + "dK = torch.einsum('boyx,bpyx->op', dhpre, win).reshape(n_maps, 1, kernel_size,"
        " kernel_size).mT\n" + DKB,
      "dK's kernel rows and columns transposed", W_TAPS)
wrong("img_dK_roles_swapped", "img", "K",
      DIMG
      + "dK = F.conv2d(dhpre.transpose(0, 1), img.transpose(0, 1), padding=1)\n" + DKB,
      "gradient and input swapped in the weight-gradient convolution: dK comes out flipped",
      W_FLIP + ("swap",))
wrong("img_dK_loop_overwrites", "img", "K",
      DIMG
      + "dK = torch.zeros_like(K)\n"
        "for bi in range(dhpre.shape[0]):\n"
        "    dK = F.conv2d(img[bi:bi + 1].transpose(0, 1), dhpre[bi:bi + 1].transpose(0, 1),"
        " padding=1).transpose(0, 1)\n" + DKB,
      "each example's dK replaces the last instead of adding to it",
      ("accumulate", "overwrite", "+=", "sum", "batch", "loop"))
wrong("img_dkb_mean_batch", "img", "kb",
      WIN + DIMG + DK + "dkb = dhpre.flatten(2).sum(-1).mean(0)\n",
      "the bias gradient averaged over the batch instead of summed", W_MEAN)
wrong("img_dkb_wrong_axes", "img", "kb",
      WIN + DIMG + DK + "dkb = dhpre.sum(dim=(0, 1, 3))\n",
      "the bias gradient summed over the maps instead of the height", W_BIAS)

# ---- WRONG: img = emb.unsqueeze(1) ---------------------------------------------------
wrong("emb_permuted", "emb", "emb",
      "demb = dimg.permute(0, 1, 3, 2).reshape(n, block_size, n_embd)\n",
      "height and width swapped while removing the channel axis",
      ("transpose", "permute", "squeeze", "axis", "order", "swap"))

# ---- WRONG: emb = C[Xb] --------------------------------------------------------------
wrong("C_scatter_overwrites", "C", "C",
      "idx = Xb.reshape(-1, 1).expand(-1, n_embd)\n"
      "dC = torch.zeros_like(C).scatter_(0, idx, demb.reshape(-1, n_embd))\n",
      "scatter_ instead of scatter_add_: repeats overwrite", W_REPEAT)
wrong("C_fancy_plus_equals", "C", "C",
      "dC = torch.zeros_like(C)\n"
      "dC[Xb] += demb\n",
      "+= with advanced indexing does not add up repeated characters", W_REPEAT)
