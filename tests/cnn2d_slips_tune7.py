"""2-D CNN lesson (cnn2d_pack, made by `pack new` from tests/packs/forward/slips_cnn2d.py): a
seventh slip corpus, TUNE half (its other half is tests/cnn2d_slips_holdout7.py).

What it is: rows of backward-pass code as a learner would type them into one step of the lesson.
Every RIGHT row passes the tutor's check; every WRONG row carries one slip that learners really
make with these operations and fails it. The slip families lean away from the ones tune4 / tune5
use most: the cross-entropy's softmax left without its denominator (exp only) or taken over the
batch, the batch mean taken a second time on every layer's parameters (dW, dK, dkb), the bias
gradient summed over the wrong axes (db over the vocabulary, dkb over the maps and rows instead of
the batch and the positions), the flatten undone as if the maps came last or with the maps ahead of
the batch, the max-pool gradient spread over the whole window, the window's argmax taken along the
wrong axis, the windows cut out by a view without the permute that gathers each 2x2 block (in both
directions, or only when writing back); the ReLU's mask taken from the input of the previous layer
(the image), torch.where with its two branches swapped, or the 0/1 mask returned without the
incoming gradient; the kernel left unflipped for the input gradient, flipped along one axis only,
or flipped for the weight gradient where it must not be, or flipped over its channel axes; the
convolution's three gradients built from dh, the gradient above the ReLU, instead of dhpre (dimg,
dK, dkb); and `dC[Xb] += ...`, whose fancy-index add keeps one copy of a repeated character. The
same slip family is put on every step where its operation occurs.

Style: every backward written line by line mirroring the forward, one named intermediate per
line with d_<something> names of the writer's own (d_probs, d_onehot, d_win, d_pick, d_on,
d_K_b, ...), the final gradient under the lecture's name; the max-pool's windows cut out with
view / permute and routed by argmax and a one-hot, the ReLU's mask applied with torch.where, the
convolution's input gradient as F.conv2d with the kernel flipped and its channels transposed,
the weight gradient as F.conv2d on batch-transposed tensors, occasional in-place accumulation
(index_put_ with accumulate=True). No loops, no einsum, no helper functions. It was written
apart from the diagnosis code, without reading it, and each row was checked with
`backprop-tutor check --json` looking at "passed" only: `words` are the writer's own guess at
what a specific diagnosis of the slip would say (any one of them is enough), not copied from the
tutor's messages.

RIGHT = {name: (step_id, tensor, code, "")}
WRONG = {name: (step_id, tensor, code, slip, words)}
"""
S = "cnn2d_pack/"

W_NORM = ("softmax", "normalise", "exp", "denominator", "sum", "probabilities")
W_DIM = ("softmax", "dim", "axis", "batch", "row", "normalise")
W_MEAN = ("mean", "average", "divide", "batch", "twice", "factor")
W_AXES = ("sum", "axis", "axes", "dim", "bias", "batch")
W_PERM = ("permute", "reshape", "order", "layout", "flatten", "channel")
W_POOL = ("max", "argmax", "window", "pool", "route", "winner")
W_WINDOW = ("window", "permute", "view", "reshape", "2x2", "block")
W_RELU = ("relu", "mask", "slope", "hpre", "input", "derivative")
W_FLIP = ("flip", "rotate", "180", "kernel", "correlation", "convolution")
W_ABOVE = ("relu", "dhpre", "dh", "mask", "skipped", "before")
W_REPEAT = ("repeat", "accumulate", "index_put", "duplicate", "fancy", "add up")

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
# loss = cross_entropy(logits, Yb): the one-hot by scatter_
LOGITS = ("d_probs = logits.softmax(dim=1)\n"
          "d_onehot = torch.zeros_like(d_probs).scatter_(1, Yb.unsqueeze(1), 1.0)\n"
          "d_diff = d_probs - d_onehot\n"
          "dlogits = d_diff / n\n")
# logits = flat @ W + b
FLAT = ("dflat = dlogits @ W.mT\n"
        "d_W_sum = flat.mT @ dlogits\n"
        "dW = d_W_sum\n"
        "db = dlogits.sum(dim=0)\n")
# flat = pooled.flatten(1)
POOLED = ("d_maps = dflat.view(n, n_maps, block_size // 2, n_embd // 2)\n"
          "dpooled = d_maps\n")
# pooled = max_pool2d(h, 2): each 2x2 window cut out by view / permute, routed by argmax
H = ("d_blocks = h.view(n, n_maps, 4, 2, 4, 2)\n"
     "d_win = d_blocks.permute(0, 1, 2, 4, 3, 5).reshape(n, n_maps, 4, 4, 4)\n"
     "d_pick = d_win.argmax(dim=-1)\n"
     "d_onehot = F.one_hot(d_pick, 4).to(dpooled.dtype)\n"
     "d_routed = d_onehot * dpooled.unsqueeze(-1)\n"
     "d_back = d_routed.view(n, n_maps, 4, 4, 2, 2).permute(0, 1, 2, 4, 3, 5)\n"
     "dh = d_back.reshape(n, n_maps, block_size, n_embd)\n")
# h = relu(hpre)
HPRE = ("d_on = hpre > 0\n"
        "dhpre = torch.where(d_on, dh, torch.zeros_like(dh))\n")
# hpre = conv2d(img, K, kb, padding=1)
IMG = ("d_K_flip = K.flip(2, 3)\n"
       "d_K_io = d_K_flip.transpose(0, 1)\n"
       "dimg = F.conv2d(dhpre, d_K_io, padding=1)\n"
       "d_img_b = img.transpose(0, 1)\n"
       "d_g_b = dhpre.transpose(0, 1)\n"
       "d_K_b = F.conv2d(d_img_b, d_g_b, padding=1)\n"
       "dK = d_K_b.transpose(0, 1)\n"
       "dkb = dhpre.sum(dim=(0, 2, 3))\n")
# img = emb.unsqueeze(1)
EMB = "demb = dimg.squeeze(1)\n"
# emb = C[Xb]
C_PUT = ("dC = torch.zeros_like(C)\n"
         "dC.index_put_((Xb,), demb, accumulate=True)\n")
C_PUT_FLAT = ("d_rows = demb.reshape(-1, n_embd)\n"
              "d_ix = Xb.reshape(-1)\n"
              "dC = torch.zeros_like(C).index_put_((d_ix,), d_rows, accumulate=True)\n")

# ---- RIGHT ---------------------------------------------------------------------------
right("logits_scatter_onehot", "logits", "logits", LOGITS)
right("flat_mT_products", "flat", "W", FLAT)
right("pooled_view_maps", "pooled", "pooled", POOLED)
right("h_view_permute_argmax", "h", "h", H)
right("hpre_where_on_hpre", "hpre", "hpre", HPRE)
# h > 0 exactly where hpre > 0, so the mask may be read from the ReLU's output
right("hpre_where_on_h", "hpre", "hpre", sub(HPRE, "d_on = hpre > 0", "d_on = h > 0"))
right("img_flipped_kernel_batch_transposed", "img", "K", IMG)
right("emb_squeeze", "emb", "emb", EMB)
right("C_index_put_accumulate", "C", "C", C_PUT)
right("C_index_put_flat_rows", "C", "C", C_PUT_FLAT)

# ---- WRONG: cross-entropy ------------------------------------------------------------
wrong("logits_exp_without_denominator", "logits", "logits",
      sub(LOGITS, "d_probs = logits.softmax(dim=1)", "d_probs = logits.exp()"),
      "exp(logits) used as the probabilities: the softmax's denominator (the row sum) is forgotten",
      W_NORM)
wrong("logits_softmax_over_batch", "logits", "logits", sub(LOGITS, "logits.softmax(dim=1)", "logits.softmax(dim=0)"),
      "the softmax taken over dim=0, down the batch, instead of over each row's vocabulary", W_DIM)

# ---- WRONG: logits = flat @ W + b ----------------------------------------------------
wrong("flat_dW_batch_mean_again", "flat", "W", sub(FLAT, "dW = d_W_sum\n", "dW = d_W_sum / n\n"),
      "dW divided by n again: dlogits already carries the batch mean, so it is divided twice", W_MEAN)
wrong("flat_db_summed_over_vocab", "flat", "b", sub(FLAT, "db = dlogits.sum(dim=0)", "db = dlogits.sum(dim=1)"),
      "db summed over the vocabulary (dim=1) instead of over the batch (dim=0)", W_AXES)

# ---- WRONG: flat = pooled.flatten(1) -------------------------------------------------
wrong("pooled_maps_taken_last", "pooled", "pooled",
      sub(POOLED, "dflat.view(n, n_maps, block_size // 2, n_embd // 2)",
          "dflat.view(n, block_size // 2, n_embd // 2, n_maps).movedim(-1, 1)"),
      "the flatten undone as if the maps came last: flatten(1) keeps each map's 16 entries together",
      W_PERM)
wrong("pooled_maps_ahead_of_batch", "pooled", "pooled",
      sub(POOLED, "dflat.view(n, n_maps, block_size // 2, n_embd // 2)",
          "dflat.view(n_maps, n, block_size // 2, n_embd // 2).transpose(0, 1)"),
      "the maps put ahead of the batch in the view: each example's 128 entries are cut across eight examples",
      W_PERM + ("batch",))

# ---- WRONG: pooled = max_pool2d(h, 2) ------------------------------------------------
wrong("h_spread_over_window", "h", "h",
      sub(H, "d_routed = d_onehot * dpooled.unsqueeze(-1)", "d_routed = dpooled.unsqueeze(-1).expand_as(d_onehot) / 4"),
      "each window's gradient spread over its four entries, as an average pool would, instead of sent to the max",
      W_POOL + ("average",))
wrong("h_argmax_wrong_axis", "h", "h", sub(H, "d_win.argmax(dim=-1)", "d_win.argmax(dim=2)"),
      "the argmax taken along the window rows' axis (dim=2) instead of within each window (dim=-1)",
      W_POOL + ("axis",))
wrong("h_windows_without_permute", "h", "h",
      sub(sub(H, "d_blocks.permute(0, 1, 2, 4, 3, 5).reshape", "d_blocks.reshape"),
          "d_routed.view(n, n_maps, 4, 4, 2, 2).permute(0, 1, 2, 4, 3, 5)", "d_routed.view(n, n_maps, 4, 2, 4, 2)"),
      "the windows cut out by a view alone: without the permute the four entries are not a 2x2 block",
      W_WINDOW)
wrong("h_write_back_without_permute", "h", "h",
      sub(H, "d_routed.view(n, n_maps, 4, 4, 2, 2).permute(0, 1, 2, 4, 3, 5)", "d_routed.view(n, n_maps, 4, 2, 4, 2)"),
      "the windows gathered with a permute but written back without undoing it: the gradient lands outside its window",
      W_WINDOW + ("max",))

# ---- WRONG: h = relu(hpre) -----------------------------------------------------------
wrong("hpre_mask_from_image", "hpre", "hpre", sub(HPRE, "d_on = hpre > 0", "d_on = img > 0"),
      "the ReLU's mask taken from the image, the input of the previous layer, instead of hpre", W_RELU + ("img",))
wrong("hpre_where_branches_swapped", "hpre", "hpre",
      sub(HPRE, "torch.where(d_on, dh, torch.zeros_like(dh))", "torch.where(d_on, torch.zeros_like(dh), dh)"),
      "torch.where's two branches swapped: the gradient kept where the ReLU was off", W_RELU + ("swapped",))
wrong("hpre_mask_without_gradient", "hpre", "hpre",
      sub(HPRE, "torch.where(d_on, dh, torch.zeros_like(dh))", "torch.where(d_on, 1.0, 0.0)"),
      "the ReLU's 0/1 slope returned alone: the incoming gradient dh is never multiplied in",
      ("relu", "slope", "chain", "dh", "multiply", "gradient"))

# ---- WRONG: hpre = conv2d(img, K, kb, padding=1) -------------------------------------
wrong("img_dimg_kernel_not_flipped", "img", "img", sub(IMG, "d_K_flip = K.flip(2, 3)", "d_K_flip = K"),
      "the kernel not flipped for the input gradient: a correlation with K where the flipped kernel belongs",
      W_FLIP)
wrong("img_dimg_kernel_flipped_one_axis", "img", "img", sub(IMG, "K.flip(2, 3)", "K.flip(3)"),
      "the kernel flipped along its columns only: the input gradient needs both axes flipped (a 180 degree turn)",
      W_FLIP + ("axis",))
wrong("img_dK_flipped", "img", "K", sub(IMG, "dK = d_K_b.transpose(0, 1)", "dK = d_K_b.transpose(0, 1).flip(2, 3)"),
      "the weight gradient flipped: correlating the image with dhpre already gives dK in the kernel's orientation",
      W_FLIP)
wrong("img_dkb_wrong_axes", "img", "kb", sub(IMG, "dhpre.sum(dim=(0, 2, 3))", "dhpre.sum(dim=(0, 1, 2))"),
      "dkb summed over the maps and rows, keeping the columns, instead of over the batch and both positions",
      W_AXES + ("map",))
wrong("img_dimg_from_dh", "img", "img", sub(IMG, "dimg = F.conv2d(dhpre, d_K_io", "dimg = F.conv2d(dh, d_K_io"),
      "dimg built from dh, the gradient above the ReLU, instead of dhpre", W_ABOVE)
wrong("img_dK_from_dh", "img", "K", sub(IMG, "d_g_b = dhpre.transpose(0, 1)", "d_g_b = dh.transpose(0, 1)"),
      "dK built from dh, the gradient above the ReLU, instead of dhpre", W_ABOVE)
wrong("img_dkb_from_dh", "img", "kb", sub(IMG, "dkb = dhpre.sum", "dkb = dh.sum"),
      "dkb built from dh, the gradient above the ReLU, instead of dhpre", W_ABOVE + ("bias",))

wrong("img_kernel_flipped_over_channels", "img", "img", sub(IMG, "K.flip(2, 3)", "K.flip(0, 1)"),
      "the kernel flipped over its channel axes (0, 1) instead of its two spatial axes (2, 3)",
      W_FLIP + ("axis",))
wrong("img_dK_batch_mean_again", "img", "K", sub(IMG, "dK = d_K_b.transpose(0, 1)", "dK = d_K_b.transpose(0, 1) / n"),
      "dK divided by n: dlogits already carries the batch mean, so it is divided twice", W_MEAN)
wrong("img_dkb_batch_mean_again", "img", "kb", sub(IMG, "dhpre.sum(dim=(0, 2, 3))", "dhpre.sum(dim=(2, 3)).mean(dim=0)"),
      "dkb averaged over the batch after summing the positions: the batch mean taken a second time", W_MEAN + ("bias",))

# ---- WRONG: emb = C[Xb] --------------------------------------------------------------
wrong("C_fancy_index_plus_equals", "C", "C", "dC = torch.zeros_like(C)\ndC[Xb] += demb\n",
      "dC[Xb] += demb: the fancy-index add writes each repeated character once instead of summing its rows",
      W_REPEAT)
wrong("C_flat_fancy_index_plus_equals", "C", "C",
      sub(C_PUT_FLAT, "dC = torch.zeros_like(C).index_put_((d_ix,), d_rows, accumulate=True)\n",
          "dC = torch.zeros_like(C)\ndC[d_ix] += d_rows\n"),
      "dC[ix] += rows on the flattened indices: a repeated character keeps one row instead of the sum",
      W_REPEAT)
