"""2-D CNN lesson (cnn2d_pack, made by `pack new` from tests/packs/forward/slips_cnn2d.py): an
eleventh slip corpus, TUNE half only (there is no other half).

What it is: rows of backward-pass code as a learner would type them into one step of the lesson.
Every RIGHT row passes the tutor's check; every WRONG row carries one slip that learners really
make with these operations and fails it. The slip families stay away from the ones tune6 / tune7
/ tune8 / tune9 / tune10 use: a sign flipped on one term only (the softmax Jacobian's row term
added instead of subtracted); the softmax Jacobian's row term summed without the probabilities'
weights (`dP.sum(1)` where `(P * dP).sum(1)` belongs); the cross-entropy's mean taken over the
wrong count (n * block_size, as if every position had a target, instead of n); the max-pool's
winners found by an equality mask (`h == upsampled pooled`, `win == win.amax()`,
`torch.isclose`), which routes the gradient to every tied entry of a window (the ReLU's zeros
tie) instead of to the one winner; the max-pool's winners looked up in the wrong tensor (the
upsampled maxima compared against hpre, the ReLU's input, instead of h, the pool's input, so a
window whose max is one of the ReLU's zeros finds no winner); a transpose of the wrong pair of
axes in a 4-D / 6-D tensor (the pool's window view transposed on (2, 4) instead of (3, 4); the
kernel's two spatial axes transposed, `transpose(2, 3)`, where the input gradient needs the
kernel flipped); the convolution bias's gradient averaged over the 8x8 positions instead of
summed; an integer accumulator (`torch.tensor([0] * size)`, `dtype=Xb.dtype`) whose float
entries are truncated toward zero when assigned (db, dkb, dC); and the embedding's scatter gone
wrong: the rows indexed by position (`arange(block_size)`) instead of by character, or a plain
sum of every position's gradient given to every row of C. The same slip family is put on every
step where its operation occurs and the shapes let it through.

Style: a mix within the file, as different learners would write it: fancy indexing with in-place
`-=` / `/=`, the softmax's chain written out through the probabilities, plain `@` with .T, loops
over the vocabulary, the maps or the pool's windows into zeros buffers, max_pool2d's
return_indices with scatter_, argmax + F.one_hot routing on a view / transpose of the windows,
F.interpolate / repeat_interleave for the upsampled pool, F.conv_transpose2d / F.conv2d on
batch-transposed tensors for the convolution, index_add_ and boolean masks for the embedding. It
was written apart from the diagnosis code, without reading it, and each row was checked with
`backprop-tutor check --json` looking at "passed" and "error" only: `words` are the writer's own
guess at what a specific diagnosis of the slip would say (any one of them is enough), not copied
from the tutor's messages.

RIGHT = {name: (step_id, tensor, code, "")}
WRONG = {name: (step_id, tensor, code, slip, words)}
"""
S = "cnn2d_pack/"

W_SIGN_TERM = ("sign", "term", "plus", "minus", "subtract", "added")
W_UNWEIGHTED = ("weighted", "row", "probabilities", "jacobian", "sum", "dot")
W_COUNT = ("mean", "count", "batch", "positions", "divide", "normalise")
W_TIES = ("ties", "tied", "equality", "winner", "every", "mask")
W_WINNERS = ("winners", "relu", "input", "hpre", "pool", "zeros")
W_AXES = ("transpose", "axes", "pair", "flip", "window", "permute")
W_POS_MEAN = ("bias", "mean", "sum", "positions", "averaged", "broadcast")
W_INT = ("integer", "dtype", "long", "float", "truncated", "accumulator")
W_POS_INDEX = ("position", "index", "character", "arange", "rows", "embedding")
W_SUM_GATHER = ("sum", "scatter", "index", "rows", "embedding", "every")

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
          "dlogits[range(n), Yb] -= 1\n"
          "dlogits /= n\n")
# -log p[target], then the softmax's backward written out through the probabilities
LOGITS_CHAIN = ("P = F.softmax(logits, dim=1)\n"
                "dP = -F.one_hot(Yb, vocab_size).float() / (n * P)\n"
                "dlogits = P * (dP - (P * dP).sum(1, keepdim=True))\n")
FLAT_VOCAB = ("dflat = dlogits @ W.T\n"
              "dW = flat.T @ dlogits\n"
              "db = torch.zeros(vocab_size)\n"
              "for v in range(vocab_size):\n"
              "    db[v] = dlogits[:, v].sum()\n")
POOLED = "dpooled = dflat.view(n, n_maps, block_size // 2, n_embd // 2)\n"
H_INDICES = ("_, idx = F.max_pool2d(h, 2, return_indices=True)\n"
             "dh = torch.zeros_like(h).flatten(2)\n"
             "dh.scatter_(2, idx.flatten(2), dpooled.flatten(2))\n"
             "dh = dh.view_as(h)\n")
H_EQUAL = ("up = F.interpolate(pooled, scale_factor=2, mode='nearest')\n"
           "dh = (h == up).float() * F.interpolate(dpooled, scale_factor=2, mode='nearest')\n")
H_LOOP = ("dh = torch.zeros_like(h)\n"
          "for i in range(block_size // 2):\n"
          "    for j in range(n_embd // 2):\n"
          "        win = h[:, :, 2 * i:2 * i + 2, 2 * j:2 * j + 2].reshape(n, n_maps, 4)\n"
          "        pick = F.one_hot(win.argmax(-1), 4).float()\n"
          "        dh[:, :, 2 * i:2 * i + 2, 2 * j:2 * j + 2] = (pick * dpooled[:, :, i, j, None]).view(n, n_maps, 2, 2)\n")
H_VIEW = ("win = h.view(n, n_maps, 4, 2, 4, 2).transpose(3, 4).reshape(n, n_maps, 4, 4, 4)\n"
          "pick = F.one_hot(win.argmax(-1), 4).float()\n"
          "dwin = pick * dpooled.unsqueeze(-1)\n"
          "dh = dwin.view(n, n_maps, 4, 4, 2, 2).transpose(3, 4).reshape(n, n_maps, block_size, n_embd)\n")
HPRE = "dhpre = dh * (hpre > 0)\n"
IMG = ("dimg = F.conv_transpose2d(dhpre, K, padding=1)\n"
       "dK = F.conv2d(img.transpose(0, 1), dhpre.transpose(0, 1), padding=1).transpose(0, 1)\n"
       "dkb = dhpre.sum((0, 2, 3))\n")
IMG_FLIP = ("dimg = F.conv2d(dhpre, K.flip(2, 3).transpose(0, 1), padding=1)\n"
            "dK = F.conv2d(img.transpose(0, 1), dhpre.transpose(0, 1), padding=1).transpose(0, 1)\n"
            "dkb = torch.zeros(n_maps)\n"
            "for m in range(n_maps):\n"
            "    dkb[m] = dhpre[:, m].sum()\n")
EMB = "demb = dimg[:, 0]\n"
C_INDEX_ADD = ("dC = torch.zeros_like(C)\n"
               "dC.index_add_(0, Xb.flatten(), demb.flatten(0, 1))\n")
C_VOCAB = ("dC = torch.zeros_like(C)\n"
           "for ch in range(vocab_size):\n"
           "    dC[ch] = demb[Xb == ch].sum(0)\n")

# ---- RIGHT ---------------------------------------------------------------------------
right("logits_fancy_index", "logits", "logits", LOGITS)
right("logits_chain_through_probs", "logits", "logits", LOGITS_CHAIN)
right("flat_db_loop_over_vocab", "flat", "b", FLAT_VOCAB)
right("pooled_view", "pooled", "pooled", POOLED)
right("h_scatter_pool_indices", "h", "h", H_INDICES)
right("h_loop_over_windows", "h", "h", H_LOOP)
right("h_window_view_transposed", "h", "h", H_VIEW)
right("hpre_mask", "hpre", "hpre", HPRE)
right("img_conv_transpose", "img", "K", IMG)
right("img_flipped_kernel_loop_kb", "img", "kb", IMG_FLIP)
right("emb_index_channel", "emb", "emb", EMB)
right("C_index_add", "C", "C", C_INDEX_ADD)
right("C_loop_over_vocab", "C", "C", C_VOCAB)

# ---- WRONG: a sign flipped on one term only -----------------------------------------
wrong("logits_row_term_added", "logits", "logits",
      sub(LOGITS_CHAIN, "P * (dP - (P * dP)", "P * (dP + (P * dP)"),
      "P * (dP + (P * dP).sum): the softmax Jacobian's row term added instead of subtracted; the "
      "diagonal term keeps its sign", W_SIGN_TERM)

# ---- WRONG: the Jacobian's row term without the probabilities' weights --------------
wrong("logits_row_term_unweighted", "logits", "logits",
      sub(LOGITS_CHAIN, "(P * dP).sum(1, keepdim=True)", "dP.sum(1, keepdim=True)"),
      "dP.sum(1): the row term sums the incoming gradient plainly instead of weighting it by the "
      "probabilities, sum_j p_j dP_j", W_UNWEIGHTED)

# ---- WRONG: the cross-entropy's mean over the wrong count ---------------------------
wrong("logits_mean_over_every_position", "logits", "logits",
      sub(LOGITS, "dlogits /= n\n", "dlogits /= n * block_size\n"),
      "divided by n * block_size as if each of the 8 positions had its own target: the loss has one "
      "target per example, a mean over n", W_COUNT)
wrong("logits_chain_mean_over_every_position", "logits", "logits",
      sub(LOGITS_CHAIN, "/ (n * P)", "/ (n * block_size * P)"),
      "-onehot / (n * block_size * P): the mean counted over n * 8 entries instead of the n "
      "examples", W_COUNT)

# ---- WRONG: an equality mask routes the pool's gradient to every tie ----------------
wrong("h_equality_mask_ties", "h", "h", H_EQUAL,
      "(h == upsampled pooled) marks every entry equal to the window's max: where the ReLU left "
      "several zeros in a window, each of them gets the gradient instead of the one winner",
      W_TIES)
wrong("h_loop_amax_ties", "h", "h",
      sub(H_LOOP, "pick = F.one_hot(win.argmax(-1), 4).float()",
          "pick = (win == win.amax(-1, keepdim=True)).float()"),
      "win == win.amax(): the window's max found by comparison, so tied entries (the ReLU's zeros) "
      "all receive the pooled gradient", W_TIES)
wrong("h_upsampled_isclose_ties", "h", "h",
      "g = dpooled.repeat_interleave(2, dim=2).repeat_interleave(2, dim=3)\n"
      "m = pooled.repeat_interleave(2, dim=2).repeat_interleave(2, dim=3)\n"
      "dh = torch.where(torch.isclose(h, m), g, torch.zeros_like(g))\n",
      "torch.isclose(h, upsampled max) keeps every entry equal to its window's max: the zeros the "
      "ReLU leaves tie, and each gets the whole pooled gradient", W_TIES)

# ---- WRONG: the pool's winners compared against the wrong tensor --------------------
wrong("h_winners_compared_to_hpre", "h", "h", sub(H_EQUAL, "(h == up)", "(hpre == up)"),
      "the pooled maxima compared against hpre, the ReLU's input, instead of h, the pool's input: "
      "a window whose max is a ReLU zero finds no winner in hpre and routes no gradient",
      W_WINNERS)

# ---- WRONG: a transpose of the wrong pair of axes -----------------------------------
wrong("h_window_view_wrong_pair", "h", "h", H_VIEW.replace(".transpose(3, 4)", ".transpose(2, 4)"),
      "transpose(2, 4) on the (n, maps, 4, 2, 4, 2) view swaps the window row with the window "
      "column instead of the in-window row with the window column: the 4 entries grouped are not "
      "a 2x2 window", W_AXES)
wrong("img_kernel_transposed_not_flipped", "img", "img",
      sub(IMG_FLIP, "K.flip(2, 3).transpose(0, 1)", "K.transpose(2, 3).transpose(0, 1)"),
      "K.transpose(2, 3): the kernel's 3x3 taps transposed (a matrix transpose of the spatial "
      "pair) where the input gradient needs them rotated by 180 degrees, flip(2, 3)", W_AXES)

# ---- WRONG: the bias gradient averaged over the positions ---------------------------
wrong("img_dkb_mean_over_positions", "img", "kb",
      sub(IMG, "dkb = dhpre.sum((0, 2, 3))", "dkb = dhpre.mean((2, 3)).sum(0)"),
      "dhpre.mean((2, 3)): the map's bias is added at all 64 positions, so its gradient is the sum "
      "over them, not the mean", W_POS_MEAN)

# ---- WRONG: an integer accumulator truncates the gradient ---------------------------
wrong("flat_db_python_int_zeros", "flat", "b",
      sub(FLAT_VOCAB, "db = torch.zeros(vocab_size)", "db = torch.tensor([0] * vocab_size)"),
      "torch.tensor([0] * vocab_size) is a long tensor: each db[v] = float sum is truncated to an "
      "integer (mostly 0)", W_INT)
wrong("img_dkb_python_int_zeros", "img", "kb",
      sub(IMG_FLIP, "dkb = torch.zeros(n_maps)", "dkb = torch.tensor([0] * n_maps)"),
      "dkb built from a list of Python 0s is int64: each map's sum is truncated toward zero when "
      "assigned", W_INT)
wrong("C_zeros_with_index_dtype", "C", "C",
      sub(C_VOCAB, "dC = torch.zeros_like(C)", "dC = torch.zeros(vocab_size, n_embd, dtype=Xb.dtype)"),
      "dC made with Xb's dtype (int64): every row's gradient sum is truncated to an integer",
      W_INT)

# ---- WRONG: the embedding's scatter gone wrong --------------------------------------
wrong("C_rows_indexed_by_position", "C", "C",
      sub(C_INDEX_ADD, "Xb.flatten()", "torch.arange(block_size).repeat(n)"),
      "index_add_ with arange(block_size): each image row's gradient lands in row t of C by its "
      "position instead of in the row of the character at it", W_POS_INDEX)
wrong("C_total_to_every_row", "C", "C", "dC = torch.zeros_like(C) + demb.sum((0, 1))\n",
      "demb summed over batch and positions and broadcast to every row of C: the lookup's scatter "
      "to the rows of the characters used is replaced by one total", W_SUM_GATHER)
