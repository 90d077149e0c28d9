"""2-D CNN lesson (cnn2d_pack, made by `pack new` from tests/packs/forward/slips_cnn2d.py): an
eighth slip corpus, TUNE half only (there is no other half).

What it is: rows of backward-pass code as a learner would type them into one step of the lesson.
Every RIGHT row passes the tutor's check; every WRONG row carries one slip that learners really
make with these operations and fails it. The slip families stay away from the ones tune5 / tune6
/ tune7 use: a sign error where the cross-entropy's subtraction is written the wrong way round
(one-hot minus probabilities); Python operator precedence (`P - Y1 / n` for the mean, the ReLU's
mask `dh * hpre > 0` and the max-pool's routing `up(dpooled) * where == up(idx)` that compare the
product); a reshape / view used where a transpose belongs on every product whose shapes let it
through (W for dflat, flat for dW, the unfolded image for dK, the kernel matrix for the unfolded
image's gradient); the max-pool's window argmax (max_pool2d's indices) and gradient spread back
by tiling (repeat) instead of repeating each entry (repeat_interleave), for both or for the
gradient only, and the argmax taken over the whole map instead of each 2x2 window; the ReLU's
slope replaced by another activation's derivative (sigmoid's h * (1 - h), tanh's 1 - h ** 2); an
in-place transpose_ on dhpre that clobbers it for the bias gradient; a broadcast parameter's
gradient (b, kb) taken from a single copy, the first example, instead of summed; the embedding's
repeated characters averaged instead of summed; and the embedding's indices and rows flattened in
two different orders. The same slip family is put on every step where its operation occurs.

Style: a mix within the file, as different learners would write it: plain `@` (batched against
F.unfold's columns for the convolution), torch.einsum for the bias sums, F.one_hot / F.softmax /
F.unfold / F.fold / F.conv_transpose2d / F.conv2d / F.max_pool2d(return_indices=True) helpers,
repeat_interleave to unpool, index_add_ and bincount for the embedding; short rows, a named
intermediate only where a learner would want one. It was written apart from the diagnosis code,
without reading it, and each row was checked with `backprop-tutor check --json` looking at
"passed" only: `words` are the writer's own guess at what a specific diagnosis of the slip would
say (any one of them is enough), not copied from the tutor's messages.

RIGHT = {name: (step_id, tensor, code, "")}
WRONG = {name: (step_id, tensor, code, slip, words)}
"""
S = "cnn2d_pack/"

W_SIGN = ("sign", "minus", "negative", "reversed", "subtract", "order")
W_PRECEDENCE = ("precedence", "parentheses", "brackets", "operator", "compare", "bool")
W_VIEW = ("reshape", "view", "transpose", "permute", "layout", "scrambled")
W_TILE = ("repeat", "repeat_interleave", "tile", "upsample", "window", "position")
W_ACT = ("relu", "sigmoid", "tanh", "derivative", "slope", "activation")
W_INPLACE = ("in-place", "inplace", "clobber", "transpose_", "overwritten", "alias")
W_COPY = ("sum", "broadcast", "batch", "one example", "copies", "first")
W_AVERAGE = ("repeat", "average", "mean", "count", "sum", "duplicate")
W_ORDER = ("flatten", "order", "index", "rows", "transpose", "mismatch")

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
LOGITS = ("P = F.softmax(logits, dim=1)\n"
          "Y1 = F.one_hot(Yb, vocab_size).float()\n"
          "dlogits = (P - Y1) / n\n")
FLAT = ("dflat = dlogits @ W.T\n"
        "dW = flat.T @ dlogits\n"
        "db = torch.einsum('nv->v', dlogits)\n")
POOLED = "dpooled = dflat.view(n, n_maps, block_size // 2, n_embd // 2)\n"
# the max-pool: max_pool2d's indices (flat positions in each 8x8 map) spread back over each window
H = ("_, idx = F.max_pool2d(h, 2, return_indices=True)\n"
     "up = lambda t: t.repeat_interleave(2, dim=2).repeat_interleave(2, dim=3)\n"
     "where = torch.arange(block_size * n_embd).view(block_size, n_embd)\n"
     "dh = up(dpooled) * (where == up(idx))\n")
HPRE = "dhpre = dh * (hpre > 0)\n"
# the convolution through unfold: cols is (n, 9, 64), the kernel a (n_maps, 9) matrix
IMG_UNFOLD = ("cols = F.unfold(img, kernel_size, padding=1)\n"
              "g = dhpre.flatten(2)\n"
              "Km = K.view(n_maps, -1)\n"
              "dK = (g @ cols.transpose(1, 2)).sum(0).view_as(K)\n"
              "dimg = F.fold(Km.T @ g, (block_size, n_embd), kernel_size, padding=1)\n"
              "dkb = torch.einsum('nmyx->m', dhpre)\n")
# the convolution through conv_transpose2d / conv2d
IMG_CONV = ("dimg = F.conv_transpose2d(dhpre, K, padding=1)\n"
            "dK = F.conv2d(img.transpose(0, 1), dhpre.transpose(0, 1), padding=1).transpose(0, 1)\n"
            "dkb = dhpre.sum(dim=(0, 2, 3))\n")
EMB = "demb = dimg[:, 0]\n"
C_INDEX_ADD = "dC = torch.zeros_like(C).index_add_(0, Xb.reshape(-1), demb.reshape(-1, n_embd))\n"
C_ONE_HOT = "dC = F.one_hot(Xb, vocab_size).float().flatten(0, 1).T @ demb.flatten(0, 1)\n"

# ---- RIGHT ---------------------------------------------------------------------------
right("logits_one_hot", "logits", "logits", LOGITS)
right("flat_einsum_bias", "flat", "W", FLAT)
right("pooled_view", "pooled", "pooled", POOLED)
right("h_repeat_interleave", "h", "h", H)
right("hpre_mask", "hpre", "hpre", HPRE)
right("img_unfold_fold", "img", "K", IMG_UNFOLD)
right("img_conv_transpose", "img", "img", IMG_CONV)
right("emb_index_channel", "emb", "emb", EMB)
right("C_one_hot_matmul", "C", "C", C_ONE_HOT)

# ---- WRONG: the cross-entropy ---------------------------------------------------------
wrong("logits_one_hot_minus_probs", "logits", "logits", sub(LOGITS, "(P - Y1)", "(Y1 - P)"),
      "one-hot minus probabilities: the subtraction is the wrong way round, every entry's sign is flipped",
      W_SIGN)
wrong("logits_divide_precedence", "logits", "logits", sub(LOGITS, "(P - Y1) / n", "P - Y1 / n"),
      "`P - Y1 / n` divides only the one-hot by n: parentheses missing around P - Y1",
      W_PRECEDENCE + ("divide",))

# ---- WRONG: a reshape / view where a transpose belongs ------------------------------
wrong("flat_dflat_W_viewed", "flat", "flat", sub(FLAT, "dlogits @ W.T", "dlogits @ W.view(vocab_size, -1)"),
      "W.view(vocab_size, -1) reshapes W instead of transposing it: the entries are scrambled", W_VIEW)
wrong("flat_dW_flat_reshaped", "flat", "W", sub(FLAT, "flat.T @ dlogits", "flat.reshape(-1, n) @ dlogits"),
      "flat.reshape(-1, n) as flat^T: reshaping is not transposing", W_VIEW)
wrong("img_dK_cols_viewed", "img", "K", sub(IMG_UNFOLD, "cols.transpose(1, 2)", "cols.view(n, -1, kernel_size * kernel_size)"),
      "the unfolded image viewed as (n, 64, 9) instead of transposed: dK pairs the wrong windows with the taps",
      W_VIEW + ("unfold",))
wrong("img_dimg_kernel_matrix_viewed", "img", "img", sub(IMG_UNFOLD, "Km.T @ g", "Km.view(-1, n_maps) @ g"),
      "the kernel matrix viewed as (9, n_maps) instead of transposed: the taps and maps are scrambled",
      W_VIEW + ("kernel",))

# ---- WRONG: the max-pool ---------------------------------------------------------------
wrong("h_tiled_not_interleaved", "h", "h",
      sub(H, "t.repeat_interleave(2, dim=2).repeat_interleave(2, dim=3)", "t.repeat(1, 1, 2, 2)"),
      "unpooled with repeat, which tiles the whole 4x4 map twice, instead of repeating each entry over its 2x2 window",
      W_TILE)
wrong("h_gradient_tiled_only", "h", "h", sub(H, "dh = up(dpooled)", "dh = dpooled.repeat(1, 1, 2, 2)"),
      "the argmax spread per window, but dpooled tiled with repeat: each window gets another window's gradient",
      W_TILE)
wrong("h_routing_precedence", "h", "h", sub(H, "up(dpooled) * (where == up(idx))", "up(dpooled) * where == up(idx)"),
      "`up(dpooled) * where == up(idx)` compares the product: parentheses missing around where == up(idx)",
      W_PRECEDENCE + ("max",))
wrong("h_max_over_whole_map", "h", "h",
      sub(H, "(where == up(idx))", "(where == h.flatten(2).argmax(-1, keepdim=True).unsqueeze(-1))"),
      "the max taken over the whole 8x8 map instead of each 2x2 window: only one entry per map gets a gradient",
      ("window", "max", "global", "2x2", "map", "argmax"))

# ---- WRONG: the ReLU -------------------------------------------------------------------
wrong("hpre_sigmoid_derivative", "hpre", "hpre", "dhpre = dh * h * (1 - h)\n",
      "h * (1 - h) is the sigmoid's derivative: the ReLU's is 1 where hpre > 0 and 0 elsewhere", W_ACT)
wrong("hpre_tanh_derivative", "hpre", "hpre", "dhpre = dh * (1 - h ** 2)\n",
      "1 - h ** 2 is tanh's derivative: the ReLU's is 1 where hpre > 0 and 0 elsewhere", W_ACT)
wrong("hpre_mask_precedence", "hpre", "hpre", "dhpre = dh * hpre > 0\n",
      "`dh * hpre > 0` compares the product with 0: parentheses missing around hpre > 0",
      W_PRECEDENCE + ("mask",))

# ---- WRONG: an in-place transpose clobbers dhpre ------------------------------------
wrong("img_transpose_in_place", "img", "kb",
      sub(IMG_CONV, "dhpre.transpose(0, 1), padding=1)", "dhpre.transpose_(0, 1), padding=1)"),
      "transpose_ swaps dhpre's batch and maps in place: the bias gradient is then summed over the wrong axes",
      W_INPLACE)

# ---- WRONG: a broadcast parameter's gradient from one copy ---------------------------
wrong("flat_db_first_example", "flat", "b", sub(FLAT, "db = torch.einsum('nv->v', dlogits)", "db = dlogits[0]"),
      "db taken from the first example: b is added to every example, the copies must be summed",
      W_COPY)
wrong("img_dkb_first_example", "img", "kb", sub(IMG_CONV, "dkb = dhpre.sum(dim=(0, 2, 3))", "dkb = dhpre[0].sum(dim=(1, 2))"),
      "dkb summed over the positions of the first example only: kb is added at every example",
      W_COPY)

# ---- WRONG: the embedding ------------------------------------------------------------
wrong("C_repeats_averaged", "C", "C",
      C_INDEX_ADD + "dC /= torch.bincount(Xb.reshape(-1), minlength=vocab_size).clamp(min=1)[:, None]\n",
      "each row of dC divided by how often the character occurs: repeated characters are averaged, not summed",
      W_AVERAGE)
wrong("C_indices_flattened_transposed", "C", "C", sub(C_INDEX_ADD, "Xb.reshape(-1)", "Xb.t().reshape(-1)"),
      "indices flattened position-major, rows of demb batch-major: each row lands on another example's character",
      W_ORDER)
