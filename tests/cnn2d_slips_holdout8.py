"""2-D CNN lesson (cnn2d_pack, made by `pack new` from tests/packs/forward/slips_cnn2d.py): an
eighth held-out slip corpus, HOLDOUT half (its other half is tests/cnn2d_slips_tune12.py).

What it is: rows of backward-pass code as a learner would type them into one step of the lesson.
Every RIGHT row passes the tutor's check; every WRONG row carries one slip that learners really
make with these operations and fails it. The slip families stay away from the ones tune5 / tune6
/ tune7 / tune8 / tune9 / tune10 / tune11 use: the cross-entropy's target forgotten, 1 taken
from every probability instead of from the target's only, or the one-hot subtracted from the
logits inside the softmax instead of from its output; a matrix product `@` where an elementwise
product belongs, which the square 8x8 maps let through (the max-pool's upsampled gradient times
its winner mask, the ReLU's gradient times its 0/1 slope); an addition
differentiated like a product, the bias's gradient multiplied by the other term (db by flat @ W,
dkb by the convolution without its bias); an accumulator started with ones_like where
zeros_like belongs (dW, dpooled, dK, dkb, dC); the unfold's adjoint done by summing the taps'
column gradients in place instead of folding each tap back to its shifted pixel; the kernel
turned by rot90 once (90 degrees, torch's default k=1) where the input gradient needs it turned
twice (180 degrees); the unsqueeze undone with a squeeze on the wrong axis (squeeze(0), a no-op
for a batch of 32); and a scatter_add_ whose index is not expanded across the embedding's
columns, so only column 0 of dC gets its gradient. The same slip family is put on every step
where its operation occurs and the shapes let it through.

Style: a mix within the file, as different learners would write it: in-place `-=` on softmax
probabilities with fancy indexing and F.one_hot, plain `@` with .T, per-example loops with
slices `[i:i + 1]` into buffers, F.max_pool2d(return_indices=True) with F.max_unpool2d or with a
winner mask scattered from its indices and repeat_interleave for upsampling, torch.where for the ReLU, F.conv_transpose2d / F.conv2d on batch-and-channel-swapped tensors,
F.unfold / F.fold with the kernel as a matrix, a rot90-ed kernel, scatter_add_ with an expanded
index for the embedding. It was written apart from the diagnosis code, without reading it, and
each row was checked with `backprop-tutor check --json` looking at "passed" only: `words` are the
writer's own guess at what a specific diagnosis of the slip would say (any one of them is
enough), not copied from the tutor's messages.

RIGHT = {name: (step_id, tensor, code, "")}
WRONG = {name: (step_id, tensor, code, slip, words)}
"""
S = "cnn2d_pack/"

W_TARGET = ("target", "one-hot", "onehot", "label", "subtract", "softmax")
W_MATMUL = ("elementwise", "matmul", "@", "product", "matrix", "multiply")
W_SUM = ("sum", "addition", "add", "multiply", "other term", "bias")
W_ONES = ("ones", "zeros", "initial", "accumulator", "start", "constant")
W_FOLD = ("fold", "shift", "tap", "overlap", "unfold", "pixel")
W_ROT = ("rot90", "rotate", "180", "flip", "kernel", "90")
W_SQUEEZE = ("squeeze", "axis", "dim", "channel", "shape", "unsqueeze")
W_SCATTER = ("scatter", "index", "expand", "column", "scatter_add", "broadcast")

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
# cross-entropy
LOGITS_INDEX = ("p = logits.softmax(1)\n"
                "p[torch.arange(n), Yb] -= 1  # only the target's entry\n"
                "dlogits = p / n\n")
LOGITS_ONEHOT = ("probs = F.softmax(logits, dim=1)\n"
                 "target = F.one_hot(Yb, vocab_size).float()\n"
                 "dlogits = (probs - target) / n\n")
# logits = flat @ W + b
FLAT_MM = ("dflat = dlogits @ W.T\n"
           "dW = flat.T @ dlogits\n"
           "db = dlogits.sum(0)\n")
FLAT_LOOP = ("dflat = dlogits @ W.T\n"
             "dW = torch.zeros_like(W)\n"
             "db = torch.zeros_like(b)\n"
             "for i in range(n):\n"
             "    dW += flat[i:i + 1].T @ dlogits[i:i + 1]\n"
             "    db += dlogits[i]\n")
# flat = pooled.flatten(1): map by map
POOLED_LOOP = ("side = block_size // 2\n"
               "dpooled = torch.zeros_like(pooled)\n"
               "for c in range(n_maps):\n"
               "    chunk = dflat[:, c * side * side:(c + 1) * side * side]\n"
               "    dpooled[:, c] += chunk.reshape(n, side, side)\n")
# pooled = F.max_pool2d(h, 2)
H_UNPOOL = ("_, idx = F.max_pool2d(h, 2, return_indices=True)\n"
            "dh = F.max_unpool2d(dpooled, idx, 2, output_size=h.shape[-2:])\n")
H_MASK = ("up = dpooled.repeat_interleave(2, dim=2).repeat_interleave(2, dim=3)\n"
          "_, idx = F.max_pool2d(h, 2, return_indices=True)\n"
          "win = torch.zeros_like(h).flatten(2).scatter_(2, idx.flatten(2), 1.0).view_as(h)\n"
          "dh = up * win\n")
# h = relu(hpre)
HPRE_WHERE = "dhpre = torch.where(hpre > 0, dh, torch.zeros_like(dh))\n"
HPRE_SLOPE = ("slope = (hpre > 0).to(dh.dtype)\n"
              "dhpre = dh * slope\n")
# hpre = conv2d(img, K, kb, padding=1)
IMG_CONV = ("dimg = F.conv_transpose2d(dhpre, K, padding=1)\n"
            "dK = F.conv2d(img.transpose(0, 1), dhpre.transpose(0, 1), padding=1).transpose(0, 1)\n"
            "dkb = dhpre.sum(dim=(0, 2, 3))\n")
IMG_UNFOLD = ("cols = F.unfold(img, kernel_size, padding=1)  # (n, 9, 64)\n"
              "g = dhpre.flatten(2)                          # (n, 8, 64)\n"
              "Kmat = K.view(n_maps, -1)                     # (8, 9)\n"
              "dcols = Kmat.T @ g                            # (n, 9, 64)\n"
              "dimg = F.fold(dcols, (block_size, n_embd), kernel_size, padding=1)\n"
              "dK = torch.zeros_like(K)\n"
              "dkb = torch.zeros_like(kb)\n"
              "for i in range(n):\n"
              "    dK += (g[i] @ cols[i].T).view_as(K)\n"
              "    dkb += g[i].sum(1)\n")
IMG_ROT = ("K180 = K.rot90(2, dims=(2, 3))\n"
           "dimg = F.conv2d(dhpre, K180.transpose(0, 1), padding=1)\n"
           "dK = F.conv2d(img.transpose(0, 1), dhpre.transpose(0, 1), padding=1).transpose(0, 1)\n"
           "dkb = dhpre.sum((0, 2, 3))\n")
# img = emb.unsqueeze(1)
EMB = "demb = dimg.squeeze(1)\n"
# emb = C[Xb]
C_SCATTER = ("idx = Xb.reshape(-1, 1)\n"
             "rows = demb.reshape(-1, n_embd)\n"
             "dC = torch.zeros_like(C).scatter_add_(0, idx.expand(-1, n_embd), rows)\n")
C_LOOP = ("dC = torch.zeros_like(C)\n"
          "for i in range(n):\n"
          "    dC.index_add_(0, Xb[i], demb[i])\n")

# ---- RIGHT ---------------------------------------------------------------------------
right("logits_index_minus_one", "logits", "logits", LOGITS_INDEX)
right("logits_one_hot", "logits", "logits", LOGITS_ONEHOT)
right("flat_mm", "flat", "W", FLAT_MM)
right("flat_loop_zeros", "flat", "W", FLAT_LOOP)
right("pooled_loop_maps", "pooled", "pooled", POOLED_LOOP)
right("h_unpool", "h", "h", H_UNPOOL)
right("h_winner_mask", "h", "h", H_MASK)
right("hpre_where", "hpre", "hpre", HPRE_WHERE)
right("hpre_slope", "hpre", "hpre", HPRE_SLOPE)
right("img_conv_transpose", "img", "K", IMG_CONV)
right("img_unfold_fold", "img", "img", IMG_UNFOLD)
right("img_rot180", "img", "img", IMG_ROT)
right("emb_squeeze", "emb", "emb", EMB)
right("C_scatter_expanded", "C", "C", C_SCATTER)
right("C_loop_index_add", "C", "C", C_LOOP)

# ---- WRONG: the cross-entropy's target -----------------------------------------------
wrong("logits_every_prob_minus_one", "logits", "logits",
      sub(LOGITS_INDEX, "p[torch.arange(n), Yb] -= 1", "p -= 1"),
      "1 taken from every probability: the target's index forgotten, so no one-hot picks the target",
      W_TARGET)
wrong("logits_one_hot_inside_softmax", "logits", "logits",
      sub(LOGITS_ONEHOT, "dlogits = (probs - target) / n", "dlogits = F.softmax(logits - target, dim=1) / n"),
      "the one-hot subtracted from the logits inside the softmax instead of from the probabilities",
      W_TARGET + ("inside",))

# ---- WRONG: `@` where an elementwise product belongs ---------------------------------
wrong("h_winner_mask_matmul", "h", "h", sub(H_MASK, "dh = up * win", "dh = up @ win"),
      "the upsampled gradient multiplied by the winner mask as 8x8 matrices instead of elementwise",
      W_MATMUL + ("mask",))
wrong("hpre_slope_matmul", "hpre", "hpre", sub(HPRE_SLOPE, "dh * slope", "dh @ slope"),
      "dh @ slope: the ReLU's 0/1 slope applied with a matrix product instead of elementwise",
      W_MATMUL + ("relu",))

# ---- WRONG: an addition differentiated like a product --------------------------------
wrong("flat_db_times_other_term", "flat", "b", sub(FLAT_MM, "db = dlogits.sum(0)", "db = (dlogits * (flat @ W)).sum(0)"),
      "db multiplied by the other term flat @ W: the + b passes its gradient through unchanged", W_SUM)
wrong("img_dkb_times_other_term", "img", "kb",
      sub(IMG_CONV, "dkb = dhpre.sum(dim=(0, 2, 3))",
          "conv = hpre - kb.view(1, -1, 1, 1)  # the convolution without its bias\n"
          "dkb = (dhpre * conv).sum(dim=(0, 2, 3))"),
      "dkb summed from dhpre times the convolution's other term: the bias is added, not multiplied",
      W_SUM)

# ---- WRONG: an accumulator started at ones -------------------------------------------
wrong("flat_dW_ones_accumulator", "flat", "W", sub(FLAT_LOOP, "dW = torch.zeros_like(W)", "dW = torch.ones_like(W)"),
      "dW accumulated onto ones_like instead of zeros_like", W_ONES)
wrong("flat_db_ones_accumulator", "flat", "b", sub(FLAT_LOOP, "db = torch.zeros_like(b)", "db = torch.ones_like(b)"),
      "db accumulated onto ones_like instead of zeros_like", W_ONES)
wrong("pooled_ones_buffer", "pooled", "pooled", sub(POOLED_LOOP, "torch.zeros_like(pooled)", "torch.ones_like(pooled)"),
      "dpooled started from ones and added to: every entry 1 too big", W_ONES)
wrong("img_dK_ones_accumulator", "img", "K", sub(IMG_UNFOLD, "dK = torch.zeros_like(K)", "dK = torch.ones_like(K)"),
      "dK accumulated onto ones_like instead of zeros_like", W_ONES)
wrong("img_dkb_ones_accumulator", "img", "kb", sub(IMG_UNFOLD, "dkb = torch.zeros_like(kb)", "dkb = torch.ones_like(kb)"),
      "dkb accumulated onto ones_like instead of zeros_like", W_ONES)
wrong("C_ones_accumulator", "C", "C", sub(C_LOOP, "torch.zeros_like(C)", "torch.ones_like(C)"),
      "dC started from ones: every row, used or not, gets an extra 1", W_ONES)

# ---- WRONG: the unfold's adjoint without the shifts ----------------------------------
wrong("img_unfold_taps_summed_in_place", "img", "img",
      sub(IMG_UNFOLD, "dimg = F.fold(dcols, (block_size, n_embd), kernel_size, padding=1)",
          "dimg = dcols.sum(1).view_as(img)"),
      "the nine taps' column gradients summed at the window's centre instead of folded back to "
      "the shifted pixels each tap read", W_FOLD)

# ---- WRONG: the kernel turned 90 degrees ---------------------------------------------
wrong("img_kernel_rot90_once", "img", "img", sub(IMG_ROT, "K.rot90(2, dims=(2, 3))", "K.rot90(1, dims=(2, 3))"),
      "rot90 once (90 degrees) where the input gradient needs the kernel turned by 180", W_ROT)

# ---- WRONG: the unsqueeze undone on the wrong axis -----------------------------------
wrong("emb_squeeze_batch_axis", "emb", "emb", sub(EMB, "squeeze(1)", "squeeze(0)"),
      "squeeze(0) on the batch axis (a no-op): the channel axis of size 1 is left in demb", W_SQUEEZE)

# ---- WRONG: scatter_add_ with an index not expanded over the columns -----------------
wrong("C_scatter_unexpanded", "C", "C", sub(C_SCATTER, "idx.expand(-1, n_embd)", "idx"),
      "scatter_add_ with an (N, 1) index: only the first column of each row of dC gets gradient", W_SCATTER)
