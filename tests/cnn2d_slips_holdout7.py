"""2-D CNN lesson (cnn2d_pack, made by `pack new` from tests/packs/forward/slips_cnn2d.py): the
seventh slip corpus, HOLDOUT half (its other half is tests/cnn2d_slips_tune7.py).

What it is: rows of backward-pass code as a learner would type them into one step of the lesson.
Every RIGHT row passes the tutor's check; every WRONG row carries one slip that learners really
make with these operations and fails it. The slip families lean away from the ones tune4 / tune5 /
tune6 use most: the cross-entropy's gradient taken with respect to the probabilities (-1/p at the
target) instead of the logits, the softmax left unnormalised, one subtracted at the predicted
class (the argmax) instead of the target, the loss's 1/n divided a second time into the linear
layer's gradients, the gradient of a sum split in half between its two addends, the flatten undone
in column-major (reversed-axes) order, max-pool gradients sent to the last tied element of a
window instead of the first, split evenly among the tied elements, or routed inside "windows" read
by a plain reshape (four consecutive entries of a row instead of a 2x2 block), the ReLU's slope
taken as h >= 0 (true everywhere) or torch.where's else-branch passing hpre on instead of zero,
the conv's input gradient cropped at the wrong side (bottom-right) of the full transposed
convolution, the weight gradient's image padded on the wrong sides, the kernel flipped along one
axis only, the kernel and bias gradients averaged over the batch instead of summed, a tensor
reshaped where a permute is needed so the batch is folded into the maps / vocabulary (dK and the
embedding's one-hot product), the image's singleton channel squeezed after swapping it with the
columns, and repeated characters averaged instead of summed in the embedding. The same slip
family is put on every step where its operation occurs.

Style: compact functional code: small lambdas and local `def` helpers (window / unwindow views of
the 2x2 pooling windows), chained one-line expressions and tuple assignments,
torch.where with boolean masks, F.one_hot of an argmax and cumsum for the first tie, `.mT` /
`.swapaxes` instead of `.T`, keepdim reductions, F.conv_transpose2d / F.conv2d on batch-swapped
tensors and F.unfold / F.fold with `@` for the convolution, a boolean one-hot product for the
embedding. It was written apart from the diagnosis code, without reading it, and each row was
checked with `backprop-tutor check --json` looking at "passed" only: `words` are the writer's own
guess at what a specific diagnosis of the slip would say (any one of them is enough), not copied
from the tutor's messages.

RIGHT = {name: (step_id, tensor, code, "")}
WRONG = {name: (step_id, tensor, code, slip, words)}
"""
S = "cnn2d_pack/"

W_PROB = ("probability", "softmax", "logits", "chain", "1/p", "log")
W_NORM = ("normalise", "normalize", "softmax", "sum", "exp", "denominator")
W_TARGET = ("target", "label", "argmax", "prediction", "yb", "one-hot")
W_MEAN = ("mean", "average", "divide", "twice", "1/n", "batch")
W_SPLIT = ("half", "split", "sum", "add", "copy", "both")
W_ORDER = ("order", "flatten", "reshape", "permute", "layout", "column-major")
W_TIE = ("tie", "first", "last", "max", "argmax", "window")
W_WINDOW = ("window", "2x2", "reshape", "block", "pool", "stride")
W_RELU = ("relu", "slope", "mask", "zero", "hpre", "where")
W_PAD = ("pad", "padding", "crop", "border", "offset", "side")
W_FLIP = ("flip", "rotate", "180", "kernel", "axis", "convolution")
W_BATCH = ("sum", "batch", "mean", "average", "1/n", "examples")
W_SCRAMBLE = ("reshape", "permute", "transpose", "layout", "scrambled", "batch")
W_REPEAT = ("repeat", "sum", "average", "mean", "accumulate", "duplicate")

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
# cross-entropy: a stable softmax lambda and a boolean target mask
LOGITS = ("sm = lambda z: (e := (z - z.amax(1, keepdim=True)).exp()) / e.sum(1, keepdim=True)\n"
          "hit = Yb.unsqueeze(1) == torch.arange(vocab_size)\n"
          "dlogits = (sm(logits) - hit.float()) / n\n")
LOGITS_WHERE = ("p = logits.softmax(1)\n"
                "dlogits = torch.where(F.one_hot(Yb, vocab_size).bool(), p - 1, p).div(n)\n")
# logits = flat @ W + b: one tuple assignment
FLAT = "dflat, dW, db = dlogits @ W.mT, flat.mT @ dlogits, dlogits.sum(0)\n"
# flat = pooled.flatten(1)
POOLED = "dpooled = dflat.unflatten(1, pooled.shape[1:])\n"
# pooled = max_pool2d(h, 2): the 2x2 windows as a last axis of 4, the first max of each wins
WIN = ("win = lambda t: t.unflatten(3, (4, 2)).unflatten(2, (4, 2)).swapaxes(3, 4).flatten(-2)\n"
       "unwin = lambda w: w.unflatten(-1, (2, 2)).swapaxes(3, 4).flatten(4, 5).flatten(2, 3)\n"
       "w = win(h)\n")
H_ARGMAX = WIN + ("first = F.one_hot(w.argmax(-1), 4).bool()\n"
                  "dh = unwin(torch.where(first, dpooled.unsqueeze(-1), 0.0))\n")
H_CUMSUM = WIN + ("hit = w == w.amax(-1, keepdim=True)\n"
                  "first = hit & (hit.cumsum(-1) == 1)\n"
                  "dh = unwin(first * dpooled.unsqueeze(-1))\n")
# h = relu(hpre)
HPRE = "dhpre = torch.where(hpre > 0, dh, 0.0)\n"
# conv: a full transposed convolution for dimg, a conv of batch-swapped tensors for dK
IMG = ("dimg = F.conv_transpose2d(dhpre, K)[..., 1:-1, 1:-1]\n"
       "swap = lambda t: t.swapaxes(0, 1)\n"
       "dK = swap(F.conv2d(swap(F.pad(img, (1, 1, 1, 1))), swap(dhpre)))\n"
       "dkb = dhpre.sum((0, 2, 3))\n")
# conv: dimg as a convolution with the flipped, channel-swapped kernel
IMG_FLIP = ("dimg = F.conv2d(dhpre, K.flip(-2, -1).swapaxes(0, 1), padding=1)\n"
            "dK = (dhpre.flatten(2).unsqueeze(2) * F.unfold(img, kernel_size, padding=1).unsqueeze(1)).sum((0, -1)).view_as(K)\n"
            "dkb = dhpre.sum((0, 2, 3))\n")
# conv: F.unfold columns, the kernel as a matrix, F.fold back
IMG_UNFOLD = ("cols = F.unfold(img, kernel_size, padding=1)\n"
              "g = dhpre.flatten(2)\n"
              "dK = (g @ cols.mT).sum(0).view_as(K)\n"
              "dimg = F.fold(K.flatten(1).mT @ g, img.shape[-2:], kernel_size, padding=1)\n"
              "dkb = g.sum(-1).sum(0)\n")
# emb = C[Xb]
C_ONEHOT = ("oh = (Xb.unsqueeze(-1) == torch.arange(vocab_size)).float()\n"
            "dC = oh.flatten(0, 1).mT @ demb.flatten(0, 1)\n")

# ---- RIGHT ---------------------------------------------------------------------------
right("logits_lambda_walrus_softmax", "logits", "logits", LOGITS)
right("logits_where_one_hot", "logits", "logits", LOGITS_WHERE)
right("flat_tuple", "flat", "W", FLAT)
right("pooled_unflatten_shape", "pooled", "pooled", POOLED)
right("h_window_argmax_one_hot", "h", "h", H_ARGMAX)
right("h_window_cumsum_first_tie", "h", "h", H_CUMSUM)
right("hpre_where", "hpre", "hpre", HPRE)
right("hpre_masked_fill_h_zero", "hpre", "hpre", "dhpre = dh.masked_fill(h == 0, 0.0)\n")
right("img_transpose_conv_crop", "img", "img", IMG)
right("img_unfold_fold", "img", "K", IMG_UNFOLD)
right("img_flipped_kernel_broadcast_dK", "img", "img", IMG_FLIP)
right("emb_squeeze", "emb", "emb", "demb = dimg.squeeze(1)\n")
right("C_bool_one_hot", "C", "C", C_ONEHOT)

# ---- WRONG: cross-entropy ------------------------------------------------------------
wrong("logits_gradient_of_probs", "logits", "logits",
      sub(LOGITS, "dlogits = (sm(logits) - hit.float()) / n", "dlogits = torch.where(hit, -1 / sm(logits), 0.0) / n"),
      "-1/p at the target: the gradient of -log p with respect to the probabilities, the softmax's own backward skipped",
      W_PROB)
wrong("logits_softmax_unnormalised", "logits", "logits",
      sub(LOGITS, "sm = lambda z: (e := (z - z.amax(1, keepdim=True)).exp()) / e.sum(1, keepdim=True)",
          "sm = lambda z: (z - z.amax(1, keepdim=True)).exp()"),
      "exp(z - max) used as the probabilities: the division by the row sum forgotten", W_NORM)
wrong("logits_one_at_prediction", "logits", "logits",
      sub(LOGITS_WHERE, "F.one_hot(Yb, vocab_size).bool()", "F.one_hot(logits.argmax(1), vocab_size).bool()"),
      "one subtracted at the predicted class (argmax of logits) instead of the target Yb", W_TARGET)

# ---- WRONG: logits = flat @ W + b ----------------------------------------------------
wrong("flat_dW_mean_twice", "flat", "W", sub(FLAT, "flat.mT @ dlogits", "flat.mT @ dlogits / n"),
      "dW divided by n again: dlogits already carries the loss's mean", W_MEAN)
wrong("flat_dflat_mean_twice", "flat", "flat", sub(FLAT, "dlogits @ W.mT", "dlogits @ W.mT / n"),
      "dflat divided by n again: dlogits already carries the loss's mean", W_MEAN)
wrong("flat_split_in_half", "flat", "b", "dlogits = dlogits / 2\n" + FLAT,
      "the gradient of the sum flat @ W + b split in half between its two addends: each addend gets all of it",
      W_SPLIT)

# ---- WRONG: flat = pooled.flatten(1) -------------------------------------------------
wrong("pooled_column_major", "pooled", "pooled", "dpooled = dflat.view(n, *pooled.shape[:0:-1]).permute(0, 3, 2, 1)\n",
      "undone in column-major order: viewed with the axes reversed and permuted back, so maps, rows and columns are mixed",
      W_ORDER)

# ---- WRONG: pooled = max_pool2d(h, 2) ------------------------------------------------
wrong("h_last_tie", "h", "h",
      sub(H_ARGMAX, "first = F.one_hot(w.argmax(-1), 4).bool()",
          "first = F.one_hot(((w == w.amax(-1, keepdim=True)) * torch.arange(4)).argmax(-1), 4).bool()"),
      "the gradient sent to the last tied element of a window (the largest index among the maxima) instead of the first",
      W_TIE)
wrong("h_cumsum_last_tie", "h", "h", sub(H_CUMSUM, "hit.cumsum(-1) == 1", "hit.flip(-1).cumsum(-1).flip(-1) == 1"),
      "the cumsum taken from the right: the last tied maximum of each window gets the gradient instead of the first",
      W_TIE)
wrong("h_ties_split_evenly", "h", "h",
      sub(H_CUMSUM, "first = hit & (hit.cumsum(-1) == 1)\n", "first = hit / hit.sum(-1, keepdim=True)\n"),
      "a window's gradient split evenly among its tied maxima instead of going to one of them", W_TIE + ("split",))
wrong("h_windows_by_reshape", "h", "h",
      sub(sub(H_ARGMAX, "win = lambda t: t.unflatten(3, (4, 2)).unflatten(2, (4, 2)).swapaxes(3, 4).flatten(-2)",
              "win = lambda t: t.reshape(n, n_maps, 4, 4, 4)"),
          "unwin = lambda w: w.unflatten(-1, (2, 2)).swapaxes(3, 4).flatten(4, 5).flatten(2, 3)", "unwin = lambda w: w.reshape_as(h)"),
      "the windows read by a plain reshape: four consecutive entries of a row, not a 2x2 block", W_WINDOW)

# ---- WRONG: h = relu(hpre) -----------------------------------------------------------
wrong("hpre_slope_h_geq_zero", "hpre", "hpre", "dhpre = torch.where(h >= 0, dh, 0.0)\n",
      "the slope taken as h >= 0: true everywhere after the ReLU, so nothing is masked", W_RELU)
wrong("hpre_where_else_hpre", "hpre", "hpre", sub(HPRE, "dh, 0.0)", "dh, hpre)"),
      "torch.where's else-branch passes hpre on where the ReLU was off instead of zero", W_RELU)

# ---- WRONG: hpre = conv2d(img, K, kb, padding=1) -------------------------------------
wrong("img_crop_bottom_right", "img", "img", sub(IMG, "[..., 1:-1, 1:-1]", "[..., 2:, 2:]"),
      "the full transposed convolution cropped at the bottom-right (2:) instead of 1 on every side", W_PAD)
wrong("img_dK_pad_bottom_right", "img", "K", sub(IMG, "F.pad(img, (1, 1, 1, 1))", "F.pad(img, (0, 2, 0, 2))"),
      "the image padded by 2 on the right and bottom only instead of 1 on every side: dK shifted", W_PAD)
wrong("img_fold_crop_bottom_right", "img", "img",
      sub(IMG_UNFOLD, "F.fold(K.flatten(1).mT @ g, img.shape[-2:], kernel_size, padding=1)",
          "F.fold(K.flatten(1).mT @ g, (block_size + 2, n_embd + 2), kernel_size)[..., 2:, 2:]"),
      "folded into the padded 10x10 image and cropped at the bottom-right (2:) instead of 1 on every side", W_PAD)
wrong("img_unfold_pad_bottom_right", "img", "K",
      sub(IMG_UNFOLD, "F.unfold(img, kernel_size, padding=1)", "F.unfold(F.pad(img, (0, 2, 0, 2)), kernel_size)"),
      "the columns unfolded from an image padded by 2 on the right and bottom only: dK shifted", W_PAD)
wrong("img_kernel_flipped_one_axis", "img", "img", sub(IMG_FLIP, "K.flip(-2, -1)", "K.flip(-1)"),
      "the kernel flipped along its columns only: the input gradient needs it rotated by 180 degrees", W_FLIP)
wrong("img_dK_batch_mean", "img", "K", sub(IMG_UNFOLD, "(g @ cols.mT).sum(0)", "(g @ cols.mT).mean(0)"),
      "dK averaged over the batch instead of summed", W_BATCH)
wrong("img_dkb_batch_mean", "img", "kb", sub(IMG_UNFOLD, "dkb = g.sum(-1).sum(0)", "dkb = g.sum(-1).mean(0)"),
      "dkb summed over the positions but averaged over the batch", W_BATCH)
wrong("img_dK_reshape_not_permute", "img", "K", sub(IMG_UNFOLD, "dK = (g @ cols.mT).sum(0).view_as(K)",
                                                   "dK = (g.reshape(n_maps, -1) @ cols.reshape(9, -1).mT).view_as(K)"),
      "reshape(n_maps, -1) where a permute is needed: the batch is folded into the maps and taps, rows scrambled",
      W_SCRAMBLE)

# ---- WRONG: img = emb.unsqueeze(1) ---------------------------------------------------
wrong("emb_squeeze_after_swap", "emb", "emb", "demb = dimg.swapaxes(1, -1).squeeze(-1)\n",
      "the channel swapped with the columns before squeezing: rows and columns of each image transposed",
      ("transpose", "swap", "squeeze", "unsqueeze", "axis", "channel"))

# ---- WRONG: emb = C[Xb] --------------------------------------------------------------
wrong("C_repeats_averaged", "C", "C",
      "dC = torch.zeros_like(C).index_reduce_(0, Xb.flatten(), demb.flatten(0, 1), 'mean', include_self=False)\n",
      "index_reduce_ with 'mean': a character used several times gets the average of its rows, not their sum",
      W_REPEAT)
wrong("C_one_hot_reshape_not_permute", "C", "C", sub(C_ONEHOT, "oh.flatten(0, 1).mT", "oh.reshape(vocab_size, -1)"),
      "oh.reshape(vocab_size, -1) where a transpose is needed: the one-hot's rows scrambled against demb's", W_SCRAMBLE)
