"""2-D CNN lesson (cnn2d_pack, made by `pack new` from tests/packs/forward/slips_cnn2d.py): a
sixth slip corpus, HOLDOUT half (its other half is tests/cnn2d_slips_tune6.py).

What it is: rows of backward-pass code as a learner would type them into one step of the lesson.
Every RIGHT row passes the tutor's check; every WRONG row carries one slip that learners really
make with these operations (the 1/n of the mean loss forgotten, taken over every entry or
applied again to a parameter's gradient, the flatten undone with rows and maps swapped, the
max-pool's gradient divided by the window size as if it were an average pool, the pool's second
unfold taken on the new window axis, windows put back by a reshape without the permute that
interleaves them, the ReLU's slope taken at another layer's tensor, at the pre-bias value or as
a sign, the kernel gradient with the input's and the output gradient's roles swapped, padding
and cropping by the wrong amount, the broadcast bias summed over the wrong axes, repeated
embedding rows written without accumulating) and fails it. The same slip family is put on every
step where its operation occurs.

Style: vectorised tensor code with no Python loops: Tensor.unfold windows of the padded image,
of the padded gradient and of the pool's input, contracted by torch.matmul with broadcasting or
by permute / reshape chains against the kernel as a matrix (no einsum); the max-pool's first
winner picked with `==` and a cumsum, or max_unpool2d on max_pool2d's indices;
F.conv_transpose2d cropped by hand for the input gradient; the ReLU's slope as a comparison
multiplied in; one-hot rows from `==` comparisons and index_put_ with accumulate=True for the
embedding. (as_strided windows were tried first, but correct code that calls
as_strided did not pass the check, so none is used.) It was written apart from the diagnosis
code, without reading it, and each row was checked with `backprop-tutor check --json` looking
at "passed" only: `words` are the writer's own guess at what a specific diagnosis of the slip
would say (any one of them is enough), not copied from the tutor's messages.

RIGHT = {name: (step_id, tensor, code, "")}
WRONG = {name: (step_id, tensor, code, slip, words)}
"""
S = "cnn2d_pack/"

W_MEAN = ("mean", "average", "divide", "1/n", "factor", "batch")
W_TWICE = ("mean", "divide", "twice", "1/n", "already", "factor")
W_PERM = ("permute", "reshape", "order", "layout", "flatten", "channel")
W_AVG = ("max", "average", "window", "pool", "divide", "winner", "4")
W_WINDOW = ("unfold", "window", "dim", "axis", "column", "2x2")
W_UNPERM = ("permute", "reshape", "interleave", "window", "order", "layout")
W_RELU = ("relu", "slope", "mask", "hpre", "wrong tensor", "derivative")
W_ROLES = ("swap", "roles", "input", "flip", "kernel", "correlation")
W_PAD = ("pad", "padding", "crop", "border", "offset", "shift")
W_BIAS = ("sum", "axis", "axes", "channel", "map", "bias")
W_REPEAT = ("repeat", "accumulate", "overwrite", "duplicate", "index_put", "add up")

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
# cross-entropy: a one-hot from a comparison
LOGITS_EQ = ("P = logits.softmax(1)\n"
             "dlogits = (P - (Yb.unsqueeze(1) == torch.arange(vocab_size)).to(P.dtype)) / n\n")
# cross-entropy: log_softmax exponentiated, -1 put at the targets by index_put
LOGITS_PUT = ("dlogits = logits.log_softmax(1).exp()\n"
              "dlogits = dlogits.index_put((torch.arange(n), Yb), torch.tensor(-1.0), accumulate=True)\n"
              "dlogits = dlogits / dlogits.shape[0]\n")
# logits = flat @ W + b
FLAT = ("dflat = torch.matmul(dlogits, W.mT)\n"
        "dW = torch.matmul(flat.mT, dlogits)\n"
        "db = dlogits.sum(0)\n")
# flat = pooled.flatten(1)
POOLED = "dpooled = dflat.view(n, n_maps, block_size // 2, n_embd // 2)\n"
# max-pool: Tensor.unfold 2x2 windows, the first winner by == and a cumsum, windows put back by
# a permute that interleaves them
H_UNFOLD = ("win = h.unfold(2, 2, 2).unfold(3, 2, 2).reshape(n, n_maps, 4, 4, 4)\n"
            "hit = win == pooled.unsqueeze(-1)\n"
            "first = hit & (hit.cumsum(-1) == 1)\n"
            "g = first * dpooled.unsqueeze(-1)\n"
            "dh = g.reshape(n, n_maps, 4, 4, 2, 2).permute(0, 1, 2, 4, 3, 5).reshape(n, n_maps, block_size, n_embd)\n")
# max-pool: max_pool2d's own indices and max_unpool2d
H_UNPOOL = ("_, idx = F.max_pool2d(h, 2, return_indices=True)\n"
            "dh = F.max_unpool2d(dpooled, idx, 2, output_size=h.shape[-2:])\n")
# h = relu(hpre)
HPRE_CMP = "dhpre = dh * (hpre > 0)\n"
HPRE_SIGN = "dhpre = dh * hpre.sign().clamp(min=0)\n"
# conv, all by Tensor.unfold windows: dK by a broadcast matmul of each map's gradient against the
# padded image's windows, dimg by the padded gradient's windows against the flipped kernel
IMG_UNFOLD = ("Pw = F.pad(img, (1, 1, 1, 1)).unfold(2, 3, 1).unfold(3, 3, 1)\n"
              "Gw = F.pad(dhpre, (1, 1, 1, 1)).unfold(2, 3, 1).unfold(3, 3, 1)\n"
              "dK = torch.matmul(dhpre.reshape(n, n_maps, 1, -1), Pw.reshape(n, 1, -1, 9)).sum(0).view_as(K)\n"
              "cols = Gw.permute(0, 2, 3, 1, 4, 5).reshape(n, block_size * n_embd, -1)\n"
              "dimg = (cols @ K.flip(2, 3).reshape(-1, 1)).view_as(img)\n"
              "dkb = dhpre.sum((0, 2, 3))\n")
# conv: the input gradient by conv_transpose2d, dK by a (maps, rows) @ (rows, taps) product
IMG_TCONV = ("dimg = F.conv_transpose2d(dhpre, K)[:, :, 1:-1, 1:-1]\n"
             "taps = F.pad(img, (1, 1, 1, 1)).unfold(2, 3, 1).unfold(3, 3, 1).reshape(-1, 9)\n"
             "dK = (dhpre.permute(1, 0, 2, 3).reshape(n_maps, -1) @ taps).view_as(K)\n"
             "dkb = dhpre.transpose(0, 1).flatten(1).sum(1)\n")
# emb = C[Xb]
C_PUT = ("dC = torch.zeros_like(C)\n"
         "dC.index_put_((Xb.flatten(),), demb.flatten(0, 1), accumulate=True)\n")
C_EQ = ("onehot = (Xb.reshape(-1, 1) == torch.arange(vocab_size)).to(demb.dtype)\n"
        "dC = onehot.mT @ demb.reshape(-1, n_embd)\n")

# ---- RIGHT ---------------------------------------------------------------------------
right("logits_comparison_onehot", "logits", "logits", LOGITS_EQ)
right("logits_log_softmax_index_put", "logits", "logits", LOGITS_PUT)
right("flat_matmul_mT", "flat", "W", FLAT)
right("pooled_view", "pooled", "pooled", POOLED)
right("pooled_reshape_as", "pooled", "pooled", "dpooled = dflat.reshape_as(pooled)\n")
right("h_unfold_first_winner", "h", "h", H_UNFOLD)
right("h_max_unpool_indices", "h", "h", H_UNPOOL)
right("hpre_comparison", "hpre", "hpre", HPRE_CMP)
right("hpre_sign_clamped", "hpre", "hpre", HPRE_SIGN)
right("img_unfold_matmul", "img", "K", IMG_UNFOLD)
right("img_conv_transpose_taps", "img", "img", IMG_TCONV)
right("emb_squeeze", "emb", "emb", "demb = dimg.squeeze(1)\n")
right("emb_reshape", "emb", "emb", "demb = dimg.reshape(n, block_size, n_embd)\n")
right("C_index_put_accumulate", "C", "C", C_PUT)
right("C_comparison_onehot_matmul", "C", "C", C_EQ)

# ---- WRONG: cross-entropy (the mean's 1/n) -------------------------------------------
wrong("logits_eq_no_mean", "logits", "logits", sub(LOGITS_EQ, ").to(P.dtype)) / n\n", ").to(P.dtype))\n"),
      "the 1/n of the mean loss forgotten: the gradient of the summed loss", W_MEAN)
wrong("logits_put_over_every_entry", "logits", "logits",
      sub(LOGITS_PUT, "dlogits / dlogits.shape[0]", "dlogits / dlogits.numel()"),
      "divided by every entry of logits (batch times classes) instead of the batch size",
      W_MEAN + ("numel",))

# ---- WRONG: logits = flat @ W + b (the 1/n applied again) ----------------------------
wrong("flat_dW_mean_again", "flat", "W", sub(FLAT, "torch.matmul(flat.mT, dlogits)", "torch.matmul(flat.mT, dlogits) / n"),
      "dW divided by n again: dlogits already carries the mean's 1/n", W_TWICE)
wrong("flat_db_mean_again", "flat", "b", sub(FLAT, "db = dlogits.sum(0)", "db = dlogits.sum(0) / n"),
      "db divided by n again: dlogits already carries the mean's 1/n", W_TWICE)

# ---- WRONG: flat = pooled.flatten(1) -------------------------------------------------
wrong("pooled_rows_before_maps", "pooled", "pooled",
      "dpooled = dflat.view(n, block_size // 2, n_maps, n_embd // 2).transpose(1, 2)\n",
      "dflat read as (rows, maps, columns) and swapped: flatten(1) keeps each map's 4x4 block together",
      W_PERM)

# ---- WRONG: pooled = max_pool2d(h, 2) ------------------------------------------------
wrong("h_unfold_winner_over_four", "h", "h",
      sub(H_UNFOLD, "g = first * dpooled.unsqueeze(-1)", "g = first * dpooled.unsqueeze(-1) / 4"),
      "the winner's gradient divided by the window size, as for an average pool", W_AVG)
wrong("h_unpool_over_four", "h", "h", sub(H_UNPOOL, "F.max_unpool2d(dpooled, idx", "F.max_unpool2d(dpooled / 4, idx"),
      "dpooled divided by the window size before unpooling, as for an average pool", W_AVG)
wrong("h_unfold_second_on_last_dim", "h", "h",
      sub(H_UNFOLD, "h.unfold(2, 2, 2).unfold(3, 2, 2)", "h.unfold(2, 2, 2).unfold(-1, 2, 2)"),
      "the second unfold on dim -1, the new window axis, instead of the columns: the windows are not 2x2 blocks",
      W_WINDOW)
wrong("h_unfold_no_interleave", "h", "h",
      sub(H_UNFOLD, ".permute(0, 1, 2, 4, 3, 5).reshape(n, n_maps, block_size, n_embd)",
          ".reshape(n, n_maps, block_size, n_embd)"),
      "the (rows, cols, 2, 2) windows reshaped straight to 8x8: the window offsets are not interleaved back",
      W_UNPERM)

# ---- WRONG: h = relu(hpre) -----------------------------------------------------------
wrong("hpre_slope_of_image", "hpre", "hpre", sub(HPRE_CMP, "(hpre > 0)", "(img > 0)"),
      "the slope taken at the convolution's input img (another layer's tensor, broadcast over the maps) instead of hpre",
      W_RELU + ("img",))
wrong("hpre_slope_before_bias", "hpre", "hpre",
      sub(HPRE_CMP, "(hpre > 0)", "(F.conv2d(img, K, padding=1) > 0)"),
      "the slope taken at the convolution recomputed without its bias: hpre includes kb",
      W_RELU + ("bias",))
wrong("hpre_sign_not_clamped", "hpre", "hpre", sub(HPRE_SIGN, "hpre.sign().clamp(min=0)", "hpre.sign()"),
      "the sign used as the slope: -1 where the ReLU is off instead of 0", W_RELU + ("sign",))

# ---- WRONG: hpre = conv2d(img, K, kb, padding=1) -------------------------------------
wrong("img_unfold_dK_roles_swapped", "img", "K",
      sub(IMG_UNFOLD, "torch.matmul(dhpre.reshape(n, n_maps, 1, -1), Pw.reshape(n, 1, -1, 9))",
          "torch.matmul(img.reshape(n, 1, 1, -1), Gw.reshape(n, n_maps, -1, 9))"),
      "dK slides the padded gradient over the image instead of the padded image over the gradient: it comes out flipped",
      W_ROLES)
wrong("img_tconv_dK_conv2d_roles_swapped", "img", "K",
      sub(IMG_TCONV, "dK = (dhpre.permute(1, 0, 2, 3).reshape(n_maps, -1) @ taps).view_as(K)",
          "dK = F.conv2d(dhpre.transpose(0, 1), img.transpose(0, 1), padding=1)"),
      "conv2d called with the gradient as the input and the image as the kernel: roles swapped, dK flipped",
      W_ROLES)
wrong("img_unfold_dimg_pad_two", "img", "img", sub(IMG_UNFOLD, "Gw = F.pad(dhpre, (1, 1, 1, 1)).unfold(2, 3, 1).unfold(3, 3, 1)",
          "Gw = F.pad(dhpre, (2, 2, 2, 2)).unfold(2, 3, 1).unfold(3, 3, 1)[:, :, :block_size, :n_embd]"),
      "the gradient padded by kernel_size - 1 = 2 as for a full convolution and the first 8x8 windows kept: shifted by one",
      W_PAD)
wrong("img_unfold_dK_pad_two", "img", "K", sub(IMG_UNFOLD, "Pw = F.pad(img, (1, 1, 1, 1)).unfold(2, 3, 1).unfold(3, 3, 1)",
          "Pw = F.pad(img, (2, 2, 2, 2)).unfold(2, 3, 1).unfold(3, 3, 1)[:, :, :block_size, :n_embd]"),
      "the image padded by 2 instead of the forward's 1 and the first 8x8 windows kept: every tap sees shifted windows",
      W_PAD)
wrong("img_tconv_crop_two_top_left", "img", "img",
      sub(IMG_TCONV, "F.conv_transpose2d(dhpre, K)[:, :, 1:-1, 1:-1]", "F.conv_transpose2d(dhpre, K)[:, :, 2:, 2:]"),
      "the 10x10 full result cropped by 2 at the top/left and 0 at the bottom/right instead of 1 on every side",
      W_PAD)
wrong("img_unfold_dimg_no_permute", "img", "img",
      sub(IMG_UNFOLD, "Gw.permute(0, 2, 3, 1, 4, 5).reshape(n, block_size * n_embd, -1)",
          "Gw.reshape(n, block_size * n_embd, -1)"),
      "the windows reshaped to (positions, maps * taps) without moving the maps after the positions",
      W_UNPERM + ("channel",))
wrong("img_unfold_dkb_wrong_axes", "img", "kb", sub(IMG_UNFOLD, "dhpre.sum((0, 2, 3))", "dhpre.sum((0, 1, 2))"),
      "the bias gradient summed over the maps and kept per column: it is per map, summed over batch and positions",
      W_BIAS)
wrong("img_tconv_dkb_mean_again", "img", "kb", sub(IMG_TCONV, "flatten(1).sum(1)", "flatten(1).sum(1) / n"),
      "dkb divided by n again: the gradient already carries the mean's 1/n", W_TWICE)
wrong("img_tconv_dK_mean_again", "img", "K", sub(IMG_TCONV, "@ taps).view_as(K)", "@ taps).view_as(K) / n"),
      "dK divided by n again: the gradient already carries the mean's 1/n", W_TWICE)

# ---- WRONG: emb = C[Xb] --------------------------------------------------------------
wrong("C_index_put_no_accumulate", "C", "C", sub(C_PUT, ", accumulate=True)", ")"),
      "index_put_ without accumulate=True: a repeated character keeps one row instead of the sum",
      W_REPEAT)
wrong("C_fancy_index_plus_equals", "C", "C",
      "dC = torch.zeros_like(C)\n"
      "dC[Xb.flatten()] += demb.flatten(0, 1)\n",
      "dC[Xb] += ...: advanced-index += does not add up repeated indices", W_REPEAT)
