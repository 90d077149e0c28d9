"""Causal self-attention lesson (attention_pack, made by `pack new` from
tests/packs/forward/slips_attention.py): an eleventh slip corpus, TUNE half only (there is no
other half).

What it is: rows of backward-pass code as a learner would type them into one step of the lesson.
Every RIGHT row passes the tutor's check; every WRONG row carries one slip that learners really
make with these operations and fails it. The slip families stay away from the ones tune6 / tune7
/ tune8 / tune9 / tune10 use: a sign flipped on one term only of a sum of terms (the softmax
Jacobian's row term added instead of subtracted at the cross-entropy's softmax and at the
attention's softmax, the outer-product term of an explicit Jacobian added to its diagonal, and
one of x's three branches subtracted, `dx -= ...`, at Wk and at x); the softmax Jacobian's row
term summed without the probabilities' weights (`dP.sum(-1)` / `datt.sum(-1)` where
`(P * dP).sum(-1)` belongs, at both softmaxes); the causal mask's triangle shifted by one
diagonal (`tril(..., diagonal=-1)`, a position kept from attending to itself) on the mask's own
step, in two styles, and on the softmax's step where the learner re-masks dmasked; the
cross-entropy's mean taken over the wrong count (block_size, the positions of one name, instead
of n * block_size, every position of the batch); the output bias's gradient averaged over the 8
positions instead of summed; an integer accumulator (`torch.tensor([0] * vocab_size)`, a list of
Python zeros, `dtype=Xb.dtype`) whose float entries are truncated toward zero when assigned (db,
dCpos, dC); and the embedding's scatter gone wrong: the rows indexed by position
(`arange(block_size)`) instead of by character, or a plain sum of every position's gradient
given to every row of C where the gather's scatter belongs. The same slip family is put on every
step where its operation occurs and the shapes let it through.

Style: a mix within the file, as different learners would write it: fancy indexing into a view
of the probabilities, the softmax's chain written out through the probabilities, torch.einsum
and tensordot for the weight gradients, an explicit Jacobian with torch.diag_embed, torch.where
and masked_fill for the causal mask, loops over the vocabulary or the positions into zeros
buffers, index_add_ for the embedding. It was written apart from the diagnosis code, without
reading it, and each row was checked with `backprop-tutor check --json` looking at "passed" and
"error" only: `words` are the writer's own guess at what a specific diagnosis of the slip would
say (any one of them is enough), not copied from the tutor's messages.

RIGHT = {name: (step_id, tensor, code, "")}
WRONG = {name: (step_id, tensor, code, slip, words)}
"""
S = "attention_pack/"

W_SIGN_TERM = ("sign", "term", "plus", "minus", "subtract", "added")
W_UNWEIGHTED = ("weighted", "row", "probabilities", "jacobian", "sum", "dot")
W_DIAGONAL = ("diagonal", "mask", "causal", "tril", "itself", "offset")
W_COUNT = ("mean", "count", "batch", "positions", "divide", "normalise")
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
LOGITS = ("probs = logits.softmax(-1)\n"
          "dlogits = probs.clone()\n"
          "dlogits.view(-1, vocab_size)[torch.arange(n * block_size), Yb.view(-1)] -= 1\n"
          "dlogits /= n * block_size\n")
# -log p[target], then the softmax's backward written out through the probabilities
LOGITS_CHAIN = ("P = F.softmax(logits, dim=-1)\n"
                "dP = -F.one_hot(Yb, vocab_size).float() / (n * block_size * P)\n"
                "dlogits = P * (dP - (P * dP).sum(-1, keepdim=True))\n")
OUT = ("dout = dlogits @ W.T\n"
       "dW = torch.einsum('bth,btv->hv', out, dlogits)\n"
       "db = dlogits.sum((0, 1))\n")
OUT_VOCAB = ("dout = dlogits @ W.T\n"
             "dW = out.reshape(-1, head_size).T @ dlogits.reshape(-1, vocab_size)\n"
             "db = torch.zeros(vocab_size)\n"
             "for j in range(vocab_size):\n"
             "    db[j] = dlogits[..., j].sum()\n")
ATT = ("datt = torch.einsum('bth,bsh->bts', dout, v)\n"
       "dv = torch.einsum('bts,bth->bsh', att, dout)\n")
MASKED = ("rowdot = (att * datt).sum(-1, keepdim=True)\n"
          "dmasked = att * (datt - rowdot)\n")
MASKED_REMASK = MASKED + "dmasked = dmasked * torch.tril(torch.ones(block_size, block_size))\n"
MASKED_JAC = ("J = torch.diag_embed(att) - att.unsqueeze(-1) * att.unsqueeze(-2)\n"
              "dmasked = (J @ datt.unsqueeze(-1)).squeeze(-1)\n")
SCORES = ("keep = torch.tril(torch.ones(block_size, block_size)) == 1\n"
          "dscores = dmasked.masked_fill(~keep, 0.0)\n")
SCORES_WHERE = ("lower = torch.ones(block_size, block_size).tril()\n"
                "dscores = torch.where(lower.bool(), dmasked, torch.zeros_like(dmasked))\n")
Q = ("dq = torch.einsum('bij,bjh->bih', dscores, k) * head_size ** -0.5\n"
     "dk = torch.einsum('bij,bih->bjh', dscores, q) * head_size ** -0.5\n")
WV = ("dx = dv @ Wv.T\n"
      "dWv = torch.einsum('bte,bth->eh', x, dv)\n")
WK = ("dx += dk @ Wk.T\n"
      "dWk = x.reshape(-1, n_embd).T @ dk.reshape(-1, head_size)\n")
XQ = ("dx += dq @ Wq.T\n"
      "dWq = torch.tensordot(x, dq, dims=([0, 1], [0, 1]))\n")
TOK_POS = ("dtok = dx.clone()\n"
           "dCpos = torch.zeros(block_size, n_embd)\n"
           "for t in range(block_size):\n"
           "    dCpos[t] = dx[:, t, :].sum(0)\n")
C_INDEX_ADD = ("dC = torch.zeros_like(C)\n"
               "dC.index_add_(0, Xb.flatten(), dtok.flatten(0, 1))\n")
C_VOCAB = ("dC = torch.zeros_like(C)\n"
           "for ch in range(vocab_size):\n"
           "    dC[ch] = dtok[Xb == ch].sum(0)\n")

# ---- RIGHT ---------------------------------------------------------------------------
right("logits_fancy_index_on_view", "logits", "logits", LOGITS)
right("logits_chain_through_probs", "logits", "logits", LOGITS_CHAIN)
right("out_db_loop_over_vocab", "out", "b", OUT_VOCAB)
right("att_einsum", "att", "v", ATT)
right("masked_remasked_with_tril", "masked", "masked", MASKED_REMASK)
right("masked_explicit_jacobian", "masked", "masked", MASKED_JAC)
right("scores_where_lower_triangle", "scores", "scores", SCORES_WHERE)
right("q_einsum_scaled", "q", "k", Q)
right("Wv_einsum", "Wv", "Wv", WV)
right("Wk_flattened_rows", "Wk", "x", WK)
right("x_tensordot", "x", "Wq", XQ)
right("tok_loop_over_positions", "tok", "Cpos", TOK_POS)
right("C_loop_over_vocab", "C", "C", C_VOCAB)

# ---- WRONG: a sign flipped on one term only -----------------------------------------
wrong("logits_row_term_added", "logits", "logits",
      sub(LOGITS_CHAIN, "P * (dP - (P * dP)", "P * (dP + (P * dP)"),
      "P * (dP + (P * dP).sum): the softmax Jacobian's row term added instead of subtracted; the "
      "diagonal term keeps its sign", W_SIGN_TERM)
wrong("masked_row_term_added", "masked", "masked", sub(MASKED, "datt - rowdot", "datt + rowdot"),
      "att * (datt + rowdot): the attention softmax's row term added, the sign of one term flipped",
      W_SIGN_TERM)
wrong("masked_outer_term_added", "masked", "masked",
      sub(MASKED_JAC, "torch.diag_embed(att) - att", "torch.diag_embed(att) + att"),
      "J = diag(a) + a a^T: the outer-product term of the softmax Jacobian added to the diagonal "
      "instead of subtracted", W_SIGN_TERM + ("outer",))
wrong("Wk_key_branch_subtracted", "Wk", "x", sub(WK, "dx += dk @ Wk.T", "dx -= dk @ Wk.T"),
      "dx -= dk @ Wk.T: the key branch's contribution to x subtracted from the value branch's "
      "instead of added", W_SIGN_TERM + ("branch",))
wrong("x_query_branch_subtracted", "x", "x", sub(XQ, "dx += dq @ Wq.T", "dx -= dq @ Wq.T"),
      "dx -= dq @ Wq.T: the query branch's contribution subtracted from the other two branches "
      "instead of added", W_SIGN_TERM + ("branch",))

# ---- WRONG: the Jacobian's row term without the probabilities' weights --------------
wrong("logits_row_term_unweighted", "logits", "logits",
      sub(LOGITS_CHAIN, "(P * dP).sum(-1, keepdim=True)", "dP.sum(-1, keepdim=True)"),
      "dP.sum(-1): the row term sums the incoming gradient plainly instead of weighting it by the "
      "probabilities, sum_j p_j dP_j", W_UNWEIGHTED)
wrong("masked_row_term_unweighted", "masked", "masked",
      sub(MASKED, "(att * datt).sum(-1, keepdim=True)", "datt.sum(-1, keepdim=True)"),
      "rowdot = datt.sum(-1): the row's dot product with the attention weights replaced by a plain "
      "sum of datt", W_UNWEIGHTED)

# ---- WRONG: the causal mask's triangle shifted by one diagonal ----------------------
wrong("scores_mask_strictly_lower", "scores", "scores",
      sub(SCORES, "torch.tril(torch.ones(block_size, block_size))",
          "torch.tril(torch.ones(block_size, block_size), diagonal=-1)"),
      "tril(..., diagonal=-1) keeps only the strictly lower triangle: each position's score with "
      "itself gets no gradient", W_DIAGONAL)
wrong("scores_where_strictly_lower", "scores", "scores", sub(SCORES_WHERE, ".tril()", ".tril(-1)"),
      "ones.tril(-1): the mask drops the diagonal, so the gradient of every query's score against "
      "its own key is zeroed", W_DIAGONAL)
wrong("masked_remasked_strictly_lower", "masked", "masked",
      sub(MASKED_REMASK, "torch.tril(torch.ones(block_size, block_size))",
          "torch.tril(torch.ones(block_size, block_size), diagonal=-1)"),
      "dmasked re-masked with tril(diagonal=-1): the diagonal, where each position attends to "
      "itself, is wiped", W_DIAGONAL)

# ---- WRONG: the cross-entropy's mean over the wrong count ---------------------------
wrong("logits_mean_over_positions_only", "logits", "logits",
      sub(LOGITS, "dlogits /= n * block_size", "dlogits /= block_size"),
      "divided by block_size (one name's positions) instead of n * block_size, every target in the "
      "batch", W_COUNT)
wrong("logits_chain_mean_over_positions_only", "logits", "logits",
      sub(LOGITS_CHAIN, "(n * block_size * P)", "(block_size * P)"),
      "-onehot / (block_size * P): the loss's mean counted over the 8 positions, the batch "
      "forgotten", W_COUNT)

# ---- WRONG: the bias gradient averaged over the positions ---------------------------
wrong("out_db_mean_over_positions", "out", "b",
      sub(OUT, "db = dlogits.sum((0, 1))", "db = dlogits.mean(1).sum(0)"),
      "dlogits.mean(1): the bias is added at every one of the 8 positions, so its gradient is the "
      "sum over them, not the mean", W_POS_MEAN)

# ---- WRONG: an integer accumulator truncates the gradient ---------------------------
wrong("out_db_python_int_zeros", "out", "b",
      sub(OUT_VOCAB, "db = torch.zeros(vocab_size)", "db = torch.tensor([0] * vocab_size)"),
      "torch.tensor([0] * vocab_size) is a long tensor: each db[j] = float sum is truncated to an "
      "integer (mostly 0)", W_INT)
wrong("tok_dCpos_python_int_zeros", "tok", "Cpos",
      sub(TOK_POS, "dCpos = torch.zeros(block_size, n_embd)",
          "dCpos = torch.tensor([[0] * n_embd] * block_size)"),
      "dCpos built from lists of Python 0s is int64: the per-position sums are truncated toward "
      "zero when assigned", W_INT)
wrong("C_zeros_with_index_dtype", "C", "C",
      sub(C_VOCAB, "dC = torch.zeros_like(C)", "dC = torch.zeros(vocab_size, n_embd, dtype=Xb.dtype)"),
      "dC made with Xb's dtype (int64): every row's gradient sum is truncated to an integer",
      W_INT)

# ---- WRONG: the embedding's scatter gone wrong --------------------------------------
wrong("C_rows_indexed_by_position", "C", "C",
      sub(C_INDEX_ADD, "Xb.flatten()", "torch.arange(block_size).repeat(n)"),
      "index_add_ with arange(block_size): each position's gradient lands in row t of C, as for "
      "Cpos, instead of in the row of the character at it", W_POS_INDEX)
wrong("C_total_to_every_row", "C", "C", "dC = torch.zeros_like(C) + dtok.sum((0, 1))\n",
      "dtok summed over batch and positions and broadcast to every row of C: the lookup's scatter "
      "to the rows of the characters used is replaced by one total", W_SUM_GATHER)
