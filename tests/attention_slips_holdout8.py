"""Causal self-attention lesson (attention_pack, made by `pack new` from
tests/packs/forward/slips_attention.py): an eighth held-out slip corpus, HOLDOUT half (its other
half is tests/attention_slips_tune12.py).

What it is: rows of backward-pass code as a learner would type them into one step of the lesson.
Every RIGHT row passes the tutor's check; every WRONG row carries one slip that learners really
make with these operations and fails it. The slip families stay away from the ones tune5 / tune6
/ tune7 / tune8 / tune9 / tune10 / tune11 use: the cross-entropy's target forgotten, 1 taken
from every probability instead of from the target's only, or the one-hot subtracted from the
logits inside the softmax instead of from its output; the 1/sqrt(head_size) scale carried onto
products that never saw it (the value path: dv, datt, dWv, and the key projection's dWk); a
matrix product `@` where an elementwise product belongs (the causal mask applied as `dmasked @
tril`, the softmax's local derivative `att @ (...)`, the softmax's row dot taken from `att @
datt^T`); the score matrix treated as symmetric, as if scores were x x^T, so its gradient is
symmetrised (g + g^T) on dq or on dk; an addition differentiated like a product, each term's
gradient multiplied by the other term (db by out @ W, dtok by Cpos, dCpos by tok); a
scatter_add_ whose index is not expanded across the embedding's columns, so only column 0 gets
its gradient (dCpos, dC); an accumulator started with ones_like where zeros_like belongs (dW,
dWk, dWq, dC); and the weight gradient of q = x @ Wq built from dx, the gradient of the layer's
input, instead of dq, the gradient of its output. The same slip family is put on every step
where its operation occurs and the shapes let it through.

Style: a mix within the file, as different learners would write it: F.softmax / F.one_hot with
in-place `-=` and fancy indexing, torch.einsum and torch.tensordot for batched products and
weight gradients, plain `@` with .mT / transpose(-2, -1), small `def` helpers (matmul_back)
and multi-line rows with named intermediates (probs, target, rowdot, keep, g, gs, xf, pos),
loops over the batch with index_add_ / `+=` into buffers, scatter_add_ with an expanded index
for the embeddings. It was written apart from the diagnosis code, without reading it, and each
row was checked with `backprop-tutor check --json` looking at "passed" only: `words` are the
writer's own guess at what a specific diagnosis of the slip would say (any one of them is
enough), not copied from the tutor's messages.

RIGHT = {name: (step_id, tensor, code, "")}
WRONG = {name: (step_id, tensor, code, slip, words)}
"""
S = "attention_pack/"

W_TARGET = ("target", "one-hot", "onehot", "label", "subtract", "softmax")
W_SCALE = ("scale", "sqrt", "head_size", "value", "factor", "only")
W_MATMUL = ("elementwise", "matmul", "@", "product", "matrix", "multiply")
W_SYMM = ("symmetric", "transpose", "key", "query", "both", "operand")
W_SUM = ("sum", "addition", "add", "multiply", "other term", "pass")
W_SCATTER = ("scatter", "index", "expand", "column", "scatter_add", "broadcast")
W_ONES = ("ones", "zeros", "initial", "accumulator", "start", "constant")
W_INPUT = ("input", "output", "dq", "dx", "instead", "chain")

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
# cross-entropy: the probabilities, 1 taken off at each position's target
LOGITS_INDEX = ("dlogits = F.softmax(logits, -1)\n"
                "dlogits[torch.arange(n)[:, None], torch.arange(block_size), Yb] -= 1  # the target's probability minus one\n"
                "dlogits /= n * block_size\n")
LOGITS_ONEHOT = ("N = n * block_size\n"
                 "probs = F.softmax(logits, dim=-1)\n"
                 "target = F.one_hot(Yb, vocab_size).to(probs.dtype)\n"
                 "dlogits = (probs - target) / N\n")
# logits = out @ W + b
OUT_EINSUM = ("dout = torch.einsum('btv,hv->bth', dlogits, W)\n"
              "dW = torch.einsum('bth,btv->hv', out, dlogits)\n"
              "db = dlogits.sum(dim=(0, 1))\n")
OUT_LOOP = ("dout = dlogits @ W.mT\n"
            "dW = torch.zeros_like(W)\n"
            "for i in range(n):\n"
            "    dW += out[i].mT @ dlogits[i]\n"
            "db = dlogits.sum((0, 1))\n")
# out = att @ v
ATT_HELPER = ("def matmul_back(A, B, G):\n"
              "    # C = A @ B  ->  dA = G @ B^T, dB = A^T @ G\n"
              "    return G @ B.transpose(-2, -1), A.transpose(-2, -1) @ G\n"
              "datt, dv = matmul_back(att, v, dout)\n")
ATT_PLAIN = ("datt = dout @ v.transpose(-2, -1)\n"
             "dv = att.transpose(-2, -1) @ dout\n")
# att = softmax(masked)
MASKED_EINSUM = ("rowdot = torch.einsum('bij,bij->bi', att, datt).unsqueeze(-1)\n"
                 "dmasked = att * (datt - rowdot)\n")
MASKED_DIAG = ("# row i of att dotted with row i of datt: the diagonal of att @ datt^T\n"
               "rowdot = torch.diagonal(att @ datt.transpose(-2, -1), dim1=-2, dim2=-1).unsqueeze(-1)\n"
               "dmasked = att * datt - att * rowdot\n")
# the causal mask
SCORES_KEEP = ("keep = torch.tril(torch.ones(block_size, block_size))\n"
               "dscores = dmasked * keep\n")
# scores = q @ k^T * head_size ** -0.5
Q_EINSUM = ("g = dscores / head_size ** 0.5\n"
            "dq = torch.einsum('bij,bjd->bid', g, k)\n"
            "dk = torch.einsum('bij,bid->bjd', g, q)\n")
Q_PLAIN = ("g = dscores * head_size ** -0.5\n"
           "dq = g @ k\n"
           "dk = g.transpose(1, 2) @ q\n")
# v = x @ Wv, k = x @ Wk
WV_TENSORDOT = ("dx = dv @ Wv.T\n"
                "dWv = torch.tensordot(x, dv, dims=([0, 1], [0, 1]))\n")
WK_FLAT = ("dx += dk @ Wk.T\n"
           "xf = x.reshape(-1, n_embd)\n"
           "dkf = dk.reshape(-1, head_size)\n"
           "dWk = xf.T @ dkf\n")
WK_LOOP = ("dWk = torch.zeros_like(Wk)\n"
           "for i in range(n):\n"
           "    dx[i] += dk[i] @ Wk.T\n"
           "    dWk += x[i].T @ dk[i]\n")
# q = x @ Wq, the last of x's three branches
X_FLAT = ("dx = dx + dq @ Wq.T\n"
          "dWq = x.flatten(0, 1).T @ dq.flatten(0, 1)\n")
X_LOOP = ("dx = dx + dq @ Wq.T\n"
          "dWq = torch.zeros_like(Wq)\n"
          "for i in range(n):\n"
          "    dWq += x[i].T @ dq[i]\n")
# x = tok + Cpos
TOK_SUM = ("dtok = dx.clone()\n"
           "dCpos = dx.sum(0)\n")
TOK_SCATTER = ("dtok = dx\n"
               "pos = torch.arange(block_size).repeat(n).unsqueeze(1)\n"
               "dCpos = torch.zeros_like(Cpos).scatter_add_(0, pos.expand(-1, n_embd), dx.reshape(-1, n_embd))\n")
# tok = C[Xb]
C_SCATTER = ("idx = Xb.reshape(-1, 1)\n"
             "dC = torch.zeros_like(C).scatter_add_(0, idx.expand(-1, n_embd), dtok.reshape(-1, n_embd))\n")
C_LOOP = ("dC = torch.zeros_like(C)\n"
          "for i in range(n):\n"
          "    dC.index_add_(0, Xb[i], dtok[i])\n")

# ---- RIGHT ---------------------------------------------------------------------------
right("logits_index_minus_one", "logits", "logits", LOGITS_INDEX)
right("logits_one_hot", "logits", "logits", LOGITS_ONEHOT)
right("out_einsum", "out", "W", OUT_EINSUM)
right("out_loop_zeros", "out", "W", OUT_LOOP)
right("att_helper", "att", "v", ATT_HELPER)
right("masked_einsum_rowdot", "masked", "masked", MASKED_EINSUM)
right("masked_diagonal_rowdot", "masked", "masked", MASKED_DIAG)
right("scores_keep_times", "scores", "scores", SCORES_KEEP)
right("q_einsum", "q", "q", Q_EINSUM)
right("Wv_tensordot", "Wv", "Wv", WV_TENSORDOT)
right("Wk_flat_rows", "Wk", "Wk", WK_FLAT)
right("Wk_loop_zeros", "Wk", "Wk", WK_LOOP)
right("x_loop_zeros", "x", "Wq", X_LOOP)
right("tok_scatter_expanded", "tok", "Cpos", TOK_SCATTER)
right("C_scatter_expanded", "C", "C", C_SCATTER)
right("C_loop_index_add", "C", "C", C_LOOP)

# ---- WRONG: the cross-entropy's target -----------------------------------------------
wrong("logits_every_prob_minus_one", "logits", "logits",
      sub(LOGITS_INDEX, "dlogits[torch.arange(n)[:, None], torch.arange(block_size), Yb] -= 1", "dlogits -= 1"),
      "1 taken from every probability: the target's index forgotten, so no one-hot picks the target",
      W_TARGET)
wrong("logits_one_hot_inside_softmax", "logits", "logits",
      sub(LOGITS_ONEHOT, "dlogits = (probs - target) / N", "dlogits = F.softmax(logits - target, dim=-1) / N"),
      "the one-hot subtracted from the logits inside the softmax instead of from the probabilities",
      W_TARGET + ("inside",))

# ---- WRONG: the scale carried onto products that never saw it ------------------------
wrong("att_dv_scaled", "att", "v",
      sub(ATT_PLAIN, "dv = att.transpose(-2, -1) @ dout", "dv = att.transpose(-2, -1) @ dout * head_size ** -0.5"),
      "dv multiplied by 1/sqrt(head_size): the scale belongs to the scores, not to att @ v", W_SCALE)
wrong("att_datt_scaled", "att", "att",
      sub(ATT_HELPER, "return G @ B.transpose(-2, -1), A",
          "return G @ B.transpose(-2, -1) / head_size ** 0.5, A"),
      "datt divided by sqrt(head_size): out = att @ v has no scale, it sits on q @ k^T", W_SCALE)
wrong("Wv_dWv_scaled", "Wv", "Wv", sub(WV_TENSORDOT, "[0, 1]))", "[0, 1])) * head_size ** -0.5"),
      "dWv scaled by 1/sqrt(head_size), as if the value projection carried the attention scale", W_SCALE)
wrong("Wk_dWk_scaled", "Wk", "Wk", sub(WK_FLAT, "dWk = xf.T @ dkf", "dWk = xf.T @ dkf / head_size ** 0.5"),
      "dWk divided by sqrt(head_size) again: dk already carries the scale, k = x @ Wk has none",
      W_SCALE + ("twice",))

# ---- WRONG: `@` where an elementwise product belongs ---------------------------------
wrong("scores_mask_matmul", "scores", "scores", sub(SCORES_KEEP, "dmasked * keep", "dmasked @ keep"),
      "the causal mask applied with a matrix product (dmasked @ tril) instead of elementwise",
      W_MATMUL + ("mask",))
wrong("masked_local_matmul", "masked", "masked",
      sub(MASKED_EINSUM, "att * (datt - rowdot)", "att @ (datt - rowdot)"),
      "att @ (datt - rowdot): the softmax's local derivative multiplied as a matrix, not elementwise",
      W_MATMUL + ("softmax",))
wrong("masked_rowdot_matmul_summed", "masked", "masked",
      sub(MASKED_DIAG, "torch.diagonal(att @ datt.transpose(-2, -1), dim1=-2, dim2=-1).unsqueeze(-1)",
          "(att @ datt.transpose(-2, -1)).sum(-1, keepdim=True)"),
      "the row dot taken as the row sums of att @ datt^T instead of its diagonal (att * datt summed)",
      ("diagonal", "row", "dot", "elementwise", "matmul", "product"))

# ---- WRONG: the score matrix treated as symmetric (scores = x x^T thinking) ----------
wrong("q_dq_symmetrised", "q", "q",
      sub(Q_PLAIN, "dq = g @ k\n", "gs = g + g.transpose(1, 2)  # scores = q k^T, both sides\ndq = gs @ k\n"),
      "dq = (g + g^T) @ k: the score gradient symmetrised as if q and k were the same tensor", W_SYMM)
wrong("q_dk_symmetrised", "q", "k",
      sub(Q_EINSUM, "dk = torch.einsum('bij,bid->bjd', g, q)",
          "dk = torch.einsum('bij,bid->bjd', g + g.transpose(1, 2), q)"),
      "dk from (g + g^T): the score gradient symmetrised as if scores were x x^T", W_SYMM)

# ---- WRONG: an addition differentiated like a product --------------------------------
wrong("out_db_times_other_term", "out", "b",
      sub(OUT_EINSUM, "db = dlogits.sum(dim=(0, 1))", "db = (dlogits * (out @ W)).sum(dim=(0, 1))"),
      "db multiplied by the other term out @ W: the + b passes its gradient through unchanged", W_SUM)
wrong("tok_dtok_times_Cpos", "tok", "tok", sub(TOK_SUM, "dtok = dx.clone()", "dtok = dx * Cpos"),
      "dtok = dx * Cpos: x = tok + Cpos differentiated like a product", W_SUM + ("cpos",))
wrong("tok_dCpos_times_tok", "tok", "Cpos", sub(TOK_SUM, "dCpos = dx.sum(0)", "dCpos = (dx * tok).sum(0)"),
      "dCpos summed from dx * tok: the other term multiplied in, as for a product", W_SUM + ("tok",))

# ---- WRONG: scatter_add_ with an index not expanded over the columns -----------------
wrong("tok_dCpos_scatter_unexpanded", "tok", "Cpos", sub(TOK_SCATTER, "pos.expand(-1, n_embd)", "pos"),
      "the (N, 1) index not expanded: scatter_add_ only adds column 0 of each row", W_SCATTER)
wrong("C_scatter_unexpanded", "C", "C", sub(C_SCATTER, "idx.expand(-1, n_embd)", "idx"),
      "scatter_add_ with an (N, 1) index: only the first column of each row of dC gets gradient", W_SCATTER)

# ---- WRONG: an accumulator started at ones -------------------------------------------
wrong("out_dW_ones_accumulator", "out", "W", sub(OUT_LOOP, "dW = torch.zeros_like(W)", "dW = torch.ones_like(W)"),
      "dW started from ones_like: every entry is 1 too big", W_ONES)
wrong("Wk_dWk_ones_accumulator", "Wk", "Wk", sub(WK_LOOP, "torch.zeros_like(Wk)", "torch.ones_like(Wk)"),
      "dWk accumulated onto ones_like instead of zeros_like", W_ONES)
wrong("x_dWq_ones_accumulator", "x", "Wq", sub(X_LOOP, "torch.zeros_like(Wq)", "torch.ones_like(Wq)"),
      "dWq accumulated onto ones_like instead of zeros_like", W_ONES)
wrong("C_ones_accumulator", "C", "C", sub(C_LOOP, "torch.zeros_like(C)", "torch.ones_like(C)"),
      "dC started from ones: every row, used or not, gets an extra 1", W_ONES)

# ---- WRONG: the input's gradient where the output's belongs --------------------------
wrong("x_dWq_from_dx", "x", "Wq",
      sub(X_FLAT, "dq.flatten(0, 1)\n", "dx.flatten(0, 1)\n"),
      "dWq = x^T dx: the gradient of the layer's input used where dq, its output's, belongs", W_INPUT)
