"""2-D CNN lesson (cnn2d_pack, made by `pack new` from tests/packs/forward/slips_cnn2d.py): a
tenth slip corpus, TUNE half only (there is no other half).

What it is: rows of backward-pass code as a learner would type them into one step of the lesson.
Every RIGHT row passes the tutor's check; every WRONG row carries one slip that learners really
make with these operations and fails it. The slip families stay away from the ones tune5 / tune6
/ tune7 / tune8 / tune9 use: a loop whose range is off by one, so the first or the last example,
map, window row, kernel tap row, position or vocabulary entry is left out of the gradient
(`range(n - 1)`, `range(1, n)`, `range(1, n_maps)`, `range(block_size // 2 - 1)`,
`range(kernel_size - 1)`, `range(block_size - 1)`, `range(1, vocab_size)`; on every step: the
cross-entropy's targets, the linear layer's sums, the flatten undone map by map, the max-pool's
windows, the kernel's taps, the unsqueeze undone position by position and dC); an accumulator
started as a view of the gradient it sums (`db = dlogits[0]`, `dkb = dhpre[0]`), so its in-place
`+=` writes into that gradient and corrupts the other gradients computed from it (dflat / dW, dimg
/ dK); the model's prediction (the argmax of the logits) one-hot coded where the target belongs;
a slice `:` where the row index belongs when the target's 1 is subtracted (`dlogits[:, Yb] -= 1`);
floor division `//` where the mean's true division belongs; the softmax differentiated
elementwise as p (1 - p), like a sigmoid; the ReLU's 0/1 step written as hpre.clamp(0, 1), which
keeps the size of the pre-activations between 0 and 1; the max-pool's windows walked with stride
1 (`i:i + 2` instead of `2 * i:2 * i + 2`) when the gradient is routed back; and the zero padding
of the convolution's gradients done with another padding mode (replicate for dK's image, reflect
for dimg's padded dhpre). The same slip family is put on every step where its operation occurs
and the shapes let it through.

Style: a mix within the file, as different learners would write it: explicit Python loops over
the batch, the maps, the pool's windows, the kernel's 3x3 taps (into a padded zeros buffer) or the
vocabulary, with `+=` for the sums; fancy indexing and F.one_hot for the target, F.softmax, plain
`@` with .T and torch.outer for the linear layer, argmax + F.one_hot routing inside each pool
window, torch.where / a float mask for the ReLU, F.pad + F.conv2d with a flipped kernel and
batch-transposed tensors, F.conv_transpose2d, boolean masks for the embedding. It was written
apart from the diagnosis code, without reading it, and each row was checked with
`backprop-tutor check --json` looking at "passed" only: `words` are the writer's own guess at
what a specific diagnosis of the slip would say (any one of them is enough), not copied from the
tutor's messages.

RIGHT = {name: (step_id, tensor, code, "")}
WRONG = {name: (step_id, tensor, code, slip, words)}
"""
S = "cnn2d_pack/"

W_OFF_BY_ONE = ("loop", "range", "first", "last", "missing", "off")
W_ALIAS = ("view", "alias", "place", "clone", "corrupted", "accumulator")
W_ARGMAX = ("prediction", "argmax", "target", "label", "instead", "one-hot")
W_SLICE = ("slice", "every", "row", "index", "target", "arange")
W_FLOORDIV = ("floor", "division", "integer", "true", "rounded", "mean")
W_ELEMENTWISE = ("elementwise", "sigmoid", "jacobian", "diagonal", "off-diagonal", "softmax")
W_CLAMP = ("clamp", "step", "mask", "relu", "slope", "comparison")
W_STRIDE = ("stride", "window", "overlap", "pool", "offset", "position")
W_PAD_MODE = ("padding", "zero", "replicate", "reflect", "mode", "border")

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
LOGITS = ("dlogits = F.softmax(logits, 1)\n"
          "dlogits[torch.arange(n), Yb] -= 1\n"
          "dlogits /= n\n")
LOGITS_LOOP = ("dlogits = logits.softmax(dim=1)\n"
               "for i in range(n):\n"
               "    dlogits[i, Yb[i]] -= 1\n"
               "dlogits = dlogits / n\n")
LOGITS_ONE_HOT = ("P = F.softmax(logits, dim=1)\n"
                  "Y1 = F.one_hot(Yb, vocab_size).float()\n"
                  "dlogits = (P - Y1) / n\n")
# -log p[target], then the softmax's backward written out
LOGITS_CHAIN = ("P = F.softmax(logits, dim=1)\n"
                "dP = -F.one_hot(Yb, vocab_size).float() / (n * P)\n"
                "dlogits = P * (dP - (P * dP).sum(1, keepdim=True))\n")
FLAT_LOOP = ("dflat = dlogits @ W.T\n"
             "dW = torch.zeros_like(W)\n"
             "db = torch.zeros_like(b)\n"
             "for i in range(n):\n"
             "    dW += torch.outer(flat[i], dlogits[i])\n"
             "    db += dlogits[i]\n")
FLAT_ALIAS = ("db = dlogits[0]\n"
              "for i in range(1, n):\n"
              "    db += dlogits[i]\n"
              "dflat = dlogits @ W.T\n"
              "dW = flat.T @ dlogits\n")
POOLED_LOOP = ("side = (block_size // 2) * (n_embd // 2)\n"
               "dpooled = torch.zeros_like(pooled)\n"
               "for m in range(n_maps):\n"
               "    dpooled[:, m] = dflat[:, m * side:(m + 1) * side].view(n, block_size // 2, n_embd // 2)\n")
H_LOOP = ("dh = torch.zeros_like(h)\n"
          "for i in range(block_size // 2):\n"
          "    for j in range(n_embd // 2):\n"
          "        win = h[:, :, 2 * i:2 * i + 2, 2 * j:2 * j + 2].reshape(n, n_maps, 4)\n"
          "        pick = F.one_hot(win.argmax(-1), 4).float().view(n, n_maps, 2, 2)\n"
          "        dh[:, :, 2 * i:2 * i + 2, 2 * j:2 * j + 2] = pick * dpooled[:, :, i:i + 1, j:j + 1]\n")
HPRE = "dhpre = dh * (hpre > 0).float()\n"
HPRE_WHERE = "dhpre = torch.where(hpre > 0, dh, 0.0)\n"
# the convolution's backward tap by tap into a padded buffer
IMG_TAPS = ("pad = F.pad(img, (1, 1, 1, 1))\n"
            "dpad = torch.zeros_like(pad)\n"
            "dK = torch.zeros_like(K)\n"
            "for a in range(kernel_size):\n"
            "    for c in range(kernel_size):\n"
            "        patch = pad[:, :, a:a + block_size, c:c + n_embd]\n"
            "        dK[:, 0, a, c] = (dhpre * patch).sum((0, 2, 3))\n"
            "        dpad[:, 0, a:a + block_size, c:c + n_embd] += torch.einsum('nmij,m->nij', dhpre, K[:, 0, a, c])\n"
            "dimg = dpad[:, :, 1:-1, 1:-1]\n"
            "dkb = dhpre.sum((0, 2, 3))\n")
IMG_CONV = ("dimg = F.conv2d(F.pad(dhpre, (1, 1, 1, 1)), K.flip(2, 3).transpose(0, 1))\n"
            "dK = F.conv2d(F.pad(img, (1, 1, 1, 1)).transpose(0, 1), dhpre.transpose(0, 1)).transpose(0, 1)\n"
            "dkb = dhpre.sum((0, 2, 3))\n")
IMG_ALIAS = ("dkb = dhpre[0]\n"
             "for i in range(1, n):\n"
             "    dkb += dhpre[i]\n"
             "dkb = dkb.sum((1, 2))\n"
             "dimg = F.conv_transpose2d(dhpre, K, padding=1)\n"
             "dK = F.conv2d(img.transpose(0, 1), dhpre.transpose(0, 1), padding=1).transpose(0, 1)\n")
EMB_LOOP = ("demb = torch.zeros_like(emb)\n"
            "for t in range(block_size):\n"
            "    demb[:, t] = dimg[:, 0, t]\n")
C_VOCAB = ("dC = torch.zeros_like(C)\n"
           "for ch in range(vocab_size):\n"
           "    dC[ch] = demb[Xb == ch].sum(0)\n")

# ---- RIGHT ---------------------------------------------------------------------------
right("logits_fancy_index", "logits", "logits", LOGITS)
right("logits_chain_through_probs", "logits", "logits", LOGITS_CHAIN)
right("flat_loop_over_batch", "flat", "W", FLAT_LOOP)
right("pooled_loop_over_maps", "pooled", "pooled", POOLED_LOOP)
right("h_loop_over_windows", "h", "h", H_LOOP)
right("hpre_where", "hpre", "hpre", HPRE_WHERE)
right("img_loop_over_taps", "img", "K", IMG_TAPS)
right("img_pad_conv2d", "img", "img", IMG_CONV)
right("C_loop_over_vocab", "C", "C", C_VOCAB)

# ---- WRONG: a loop's range off by one -----------------------------------------------
wrong("logits_last_example_skipped", "logits", "logits", sub(LOGITS_LOOP, "range(n)", "range(n - 1)"),
      "range(n - 1): the last example's target never gets its 1 subtracted", W_OFF_BY_ONE)
wrong("flat_first_example_skipped", "flat", "W", sub(FLAT_LOOP, "range(n)", "range(1, n)"),
      "range(1, n): the first example's outer product and bias gradient are left out of dW and db",
      W_OFF_BY_ONE)
wrong("pooled_first_map_skipped", "pooled", "pooled", sub(POOLED_LOOP, "range(n_maps)", "range(1, n_maps)"),
      "the flatten undone for maps 1..7 only: map 0's gradient stays zero", W_OFF_BY_ONE + ("map",))
wrong("h_last_window_row_skipped", "h", "h",
      sub(H_LOOP, "range(block_size // 2)", "range(block_size // 2 - 1)"),
      "the loop over window rows stops one early: the bottom row of windows routes no gradient",
      W_OFF_BY_ONE + ("window",))
wrong("img_last_tap_row_skipped", "img", "K", sub(IMG_TAPS, "for a in range(kernel_size)", "for a in range(kernel_size - 1)"),
      "range(kernel_size - 1): the kernel's last row of taps gets no gradient, and its share of dimg "
      "is missing", W_OFF_BY_ONE + ("tap",))
wrong("emb_last_position_skipped", "emb", "emb", sub(EMB_LOOP, "range(block_size)", "range(block_size - 1)"),
      "the unsqueeze undone position by position for 7 of the 8 positions: the last row stays zero",
      W_OFF_BY_ONE)
wrong("C_first_character_skipped", "C", "C", sub(C_VOCAB, "range(vocab_size)", "range(1, vocab_size)"),
      "range(1, vocab_size): the row of '.' (index 0) never collects its gradient", W_OFF_BY_ONE)

# ---- WRONG: an accumulator that is a view of the gradient it sums -------------------
wrong("flat_db_view_of_dlogits", "flat", "flat", FLAT_ALIAS,
      "db = dlogits[0] is a view: db += dlogits[i] writes the batch sum into dlogits[0], so dflat "
      "and dW use a corrupted first row", W_ALIAS)
wrong("img_dkb_view_of_dhpre", "img", "img", IMG_ALIAS,
      "dkb = dhpre[0] is a view: the += loop writes the batch sum into dhpre[0] before dimg and dK "
      "are computed from it", W_ALIAS)

# ---- WRONG: the prediction where the target belongs ---------------------------------
wrong("logits_argmax_for_target", "logits", "logits",
      sub(LOGITS_ONE_HOT, "F.one_hot(Yb, vocab_size)", "F.one_hot(logits.argmax(1), vocab_size)"),
      "the one-hot of the model's own prediction (argmax of the logits) subtracted instead of the "
      "target Yb's", W_ARGMAX)

# ---- WRONG: a slice where the row index belongs -------------------------------------
wrong("logits_slice_for_rows", "logits", "logits", sub(LOGITS, "dlogits[torch.arange(n), Yb]", "dlogits[:, Yb]"),
      "dlogits[:, Yb] -= 1 decrements every example at every character that is some example's "
      "target, instead of each example at its own", W_SLICE)

# ---- WRONG: floor division where true division belongs ------------------------------
wrong("logits_floor_divided_mean", "logits", "logits", sub(LOGITS_ONE_HOT, "(P - Y1) / n", "(P - Y1) // n"),
      "(P - Y1) // n floors the gradient (to -1 at the targets, 0 elsewhere) instead of dividing",
      W_FLOORDIV)

# ---- WRONG: the softmax differentiated elementwise, p (1 - p) -----------------------
wrong("logits_softmax_elementwise", "logits", "logits",
      sub(LOGITS_CHAIN, "P * (dP - (P * dP).sum(1, keepdim=True))", "dP * P * (1 - P)"),
      "dP * P * (1 - P): only the Jacobian's diagonal, as for a sigmoid; the other classes get no "
      "gradient", W_ELEMENTWISE)

# ---- WRONG: clamp(0, 1) where the ReLU's 0/1 step belongs ---------------------------
wrong("hpre_clamp_as_step", "hpre", "hpre", sub(HPRE, "(hpre > 0).float()", "hpre.clamp(0, 1)"),
      "hpre.clamp(0, 1) is not a step: pre-activations between 0 and 1 scale dh by their own value "
      "instead of passing it whole", W_CLAMP)

# ---- WRONG: the pool's windows walked with stride 1 ---------------------------------
wrong("h_windows_stride_one", "h", "h", H_LOOP.replace("2 * i:2 * i + 2", "i:i + 2").replace("2 * j:2 * j + 2", "j:j + 2"),
      "windows read and written at [i:i+2, j:j+2]: the pool's stride of 2 forgotten, so the "
      "gradient lands in overlapping windows in the top-left corner", W_STRIDE)

# ---- WRONG: zero padding done with another padding mode -----------------------------
wrong("img_dK_replicate_padding", "img", "K",
      sub(IMG_CONV, "F.pad(img, (1, 1, 1, 1))", "F.pad(img, (1, 1, 1, 1), mode='replicate')"),
      "the image padded by replicating its border instead of with zeros: the border taps of dK "
      "collect products the forward never made", W_PAD_MODE)
wrong("img_dimg_reflect_padding", "img", "img",
      sub(IMG_CONV, "F.pad(dhpre, (1, 1, 1, 1))", "F.pad(dhpre, (1, 1, 1, 1), mode='reflect')"),
      "dhpre padded by reflection instead of zeros before the flipped-kernel convolution: the "
      "image's border gets gradient from maps that do not exist", W_PAD_MODE)
