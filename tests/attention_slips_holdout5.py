"""Causal self-attention lesson (attention_pack, made by `pack new` from
tests/packs/forward/slips_attention.py): a fifth slip corpus, HOLDOUT half (its other half is
tests/attention_slips_tune5.py).

What it is: rows of backward-pass code as a learner would type them into one step of the lesson.
Every RIGHT row passes the tutor's check; every WRONG row carries one slip that learners really
make with these operations (the 1/sqrt(head_size) scale missing, doubled or inverted, operands
left untransposed or taken from the wrong side of a batched product, the softmax's row-sum term
missing, unweighted or summed down the columns, the causal mask on the wrong triangle or without
its diagonal, sums for broadcast tensors, a reused tensor's branch forgotten or counted twice,
signs, the loss's mean, repeated embedding rows) and fails it. The same slip family is put on
every step where its operation occurs.

Style: torch.einsum with unusual index letters ('zqk,zkh->zqh', 'btc,bth->ch'), the `.mT`
property, torch.tensordot over (batch, position), the target built by scatter_ and the loss by
logsumexp, the causal mask by comparing arange row and column indices, the softmax Jacobian
contracted by einsum and the embedding by scatter_add_ with an expanded index (or index_put_
with accumulate=True). It was written apart from the diagnosis code, without reading it, and
each row was checked with `backprop-tutor check --json` looking at "passed" only: `words` are
the writer's own guess at what a specific diagnosis of the slip would say (any one of them is
enough), not copied from the tutor's messages.

RIGHT = {name: (step_id, tensor, code, "")}
WRONG = {name: (step_id, tensor, code, slip, words)}
"""
S = "attention_pack/"

W_SCALE = ("scale", "sqrt", "head_size", "factor", "0.5", "constant")
W_T = ("transpose", "swap", "order", "operand", "swapped", ".t")
W_SOFTMAX = ("row", "sum", "softmax", "jacobian", "subtract", "term")
W_MASK = ("mask", "causal", "tril", "triangle", "future", "upper")
W_AXIS = ("sum", "axis", "axes", "dim", "batch", "broadcast")
W_MEAN = ("mean", "average", "divide", "batch", "factor", "/ n")
W_SIGN = ("sign", "minus", "negative", "flipped", "opposite", "negated")
W_BRANCH = ("branch", "accumulate", "+=", "overwrite", "reused", "add")
W_REPEAT = ("repeat", "accumulate", "overwrite", "duplicate", "add up", "scatter")

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
# cross-entropy: probabilities from logsumexp, the target one-hot by scatter_
LOGITS = ("G = (logits - logits.logsumexp(-1, keepdim=True)).exp()\n"
          "T = torch.zeros_like(G).scatter_(-1, Yb.unsqueeze(-1), 1.0)\n"
          "dlogits = (G - T) / (n * block_size)\n")
# logits = out @ W + b by einsum
OUT = ("dout = torch.einsum('zpv,hv->zph', dlogits, W)\n"
       "dW = torch.einsum('zph,zpv->hv', out, dlogits)\n"
       "db = torch.einsum('zpv->v', dlogits)\n")
OUT_TD = ("dout = dlogits @ W.mT\n"
          "dW = torch.tensordot(out, dlogits, dims=([0, 1], [0, 1]))\n"
          "db = dlogits.flatten(0, 1).sum(0)\n")
# out = att @ v
ATT = ("datt = torch.einsum('zqh,zkh->zqk', dout, v)\n"
       "dv = torch.einsum('zqk,zqh->zkh', att, dout)\n")
ATT_MT = ("datt = dout @ v.mT\n"
          "dv = att.mT @ dout\n")
# att = softmax(masked): the row dot product by einsum
MASKED = ("rs = torch.einsum('zqk,zqk->zq', att, datt)\n"
          "dmasked = att * (datt - rs[..., None])\n")
MASKED_J = ("J = torch.diag_embed(att) - torch.einsum('zqa,zqb->zqab', att, att)\n"
            "dmasked = torch.einsum('zqab,zqb->zqa', J, datt)\n")
# the causal mask from row and column indices
SCORES = ("r = torch.arange(block_size)\n"
          "keep = r[:, None] >= r[None, :]\n"
          "dscores = dmasked * keep\n")
SCORES_TRIL = "dscores = torch.tril(dmasked)\n"
# scores = q @ k^T * head_size ** -0.5
Q = ("c = head_size ** -0.5\n"
     "dq = c * torch.einsum('zab,zbh->zah', dscores, k)\n"
     "dk = c * torch.einsum('zab,zah->zbh', dscores, q)\n")
Q_MT = ("dq = dscores @ k / head_size ** 0.5\n"
        "dk = dscores.mT @ q / head_size ** 0.5\n")
# v = x @ Wv, k = x @ Wk, q = x @ Wq
WV = ("dWv = torch.tensordot(x, dv, dims=([0, 1], [0, 1]))\n"
      "dx = dv @ Wv.mT\n")
WK = ("dWk = torch.einsum('btc,bth->ch', x, dk)\n"
      "dx = dx + torch.einsum('bth,ch->btc', dk, Wk)\n")
XQ = ("dx = dx + dq @ Wq.mT\n"
      "dWq = torch.einsum('btc,bth->ch', x, dq)\n")
XQ_TD = ("dx += torch.tensordot(dq, Wq, dims=([2], [1]))\n"
         "dWq = torch.tensordot(x, dq, dims=([0, 1], [0, 1]))\n")
# x = tok + Cpos
TOK = ("dtok = dx\n"
       "dCpos = torch.einsum('btc->tc', dx)\n")
# tok = C[Xb]
C_SCATTER = ("idx = Xb.reshape(-1, 1).expand(-1, n_embd)\n"
             "dC = torch.zeros_like(C).scatter_add_(0, idx, dtok.reshape(-1, n_embd))\n")
C_INDEX_PUT = ("dC = torch.zeros_like(C)\n"
               "dC.index_put_((Xb.reshape(-1),), dtok.reshape(-1, n_embd), accumulate=True)\n")

# ---- RIGHT ---------------------------------------------------------------------------
right("logits_logsumexp_scatter", "logits", "logits", LOGITS)
right("out_einsum", "out", "out", OUT)
right("out_tensordot_mT", "out", "W", OUT_TD)
right("att_einsum", "att", "att", ATT)
right("att_mT", "att", "v", ATT_MT)
right("masked_einsum_rowdot", "masked", "masked", MASKED)
right("masked_einsum_jacobian", "masked", "masked", MASKED_J)
right("scores_arange_compare", "scores", "scores", SCORES)
right("scores_tril", "scores", "scores", SCORES_TRIL)
right("q_einsum_scale", "q", "q", Q)
right("q_mT_divide", "q", "k", Q_MT)
right("Wv_tensordot", "Wv", "Wv", WV)
right("Wk_einsum", "Wk", "Wk", WK)
right("x_mT_einsum", "x", "x", XQ)
right("x_tensordot", "x", "Wq", XQ_TD)
right("tok_einsum", "tok", "Cpos", TOK)
right("C_scatter_add", "C", "C", C_SCATTER)
right("C_index_put_accumulate", "C", "C", C_INDEX_PUT)

# ---- WRONG: cross-entropy over every position ----------------------------------------
wrong("logits_divide_by_numel", "logits", "logits",
      sub(LOGITS, "/ (n * block_size)", "/ logits.numel()"),
      "divided by every logit (n * block_size * vocab_size): the mean is over positions, not classes",
      ("divide", "mean", "average", "vocab", "numel", "scale"))
wrong("logits_target_minus_probs", "logits", "logits", sub(LOGITS, "(G - T)", "(T - G)"),
      "the one-hot minus the probabilities: the sign is flipped", W_SIGN)

# ---- WRONG: logits = out @ W + b -----------------------------------------------------
wrong("out_db_mean_batch", "out", "b", sub(OUT, "db = torch.einsum('zpv->v', dlogits)", "db = torch.einsum('zpv->v', dlogits) / n"),
      "db averaged over the batch instead of summed", W_MEAN)
wrong("out_tensordot_batch_only", "out", "W",
      sub(OUT_TD, "torch.tensordot(out, dlogits, dims=([0, 1], [0, 1]))",
          "torch.tensordot(out[:, -1], dlogits[:, -1], dims=([0], [0]))"),
      "dW from the last position only: W is shared by every position and must sum over them",
      W_AXIS + ("position",))

# ---- WRONG: out = att @ v ------------------------------------------------------------
wrong("att_einsum_dv_no_transpose", "att", "v",
      sub(ATT, "torch.einsum('zqk,zqh->zkh', att, dout)", "torch.einsum('zqk,zkh->zqh', att, dout)"),
      "dv = att @ dout: att not transposed (square, so the shapes fit)", W_T)
wrong("att_mT_datt_transposed", "att", "att", sub(ATT_MT, "datt = dout @ v.mT", "datt = v @ dout.mT"),
      "datt = v @ dout^T: datt comes out transposed", W_T)

# ---- WRONG: att = softmax(masked) ----------------------------------------------------
wrong("masked_row_term_missing", "masked", "masked", sub(MASKED, "att * (datt - rs[..., None])", "att * datt"),
      "only the diagonal of the softmax Jacobian: the row-sum term is missing", W_SOFTMAX)
wrong("masked_row_term_unweighted", "masked", "masked",
      sub(MASKED, "torch.einsum('zqk,zqk->zq', att, datt)", "torch.einsum('zqk->zq', datt)"),
      "the row term sums datt alone, not datt weighted by the probabilities",
      ("weighted", "att *", "row", "softmax", "jacobian", "term"))
wrong("masked_column_sum", "masked", "masked",
      sub(sub(MASKED, "->zq'", "->zk'"), "rs[..., None]", "rs[:, None, :]"),
      "the weighted sum taken down each column (over queries) instead of along each row",
      ("axis", "dim", "row", "column", "sum", "softmax"))

# ---- WRONG: the causal mask ----------------------------------------------------------
wrong("scores_compare_flipped", "scores", "scores", sub(SCORES, "r[:, None] >= r[None, :]", "r[:, None] <= r[None, :]"),
      "<= keeps key >= query: the upper triangle (the future) instead of the past", W_MASK)
wrong("scores_strict_compare", "scores", "scores", sub(SCORES, ">=", ">"),
      "> instead of >=: the diagonal is masked, each position's own score loses its gradient",
      W_MASK + ("diagonal",))

# ---- WRONG: scores = q @ k^T * head_size ** -0.5 -------------------------------------
wrong("q_einsum_dk_no_scale", "q", "k", sub(Q, "dk = c * torch.einsum", "dk = torch.einsum"),
      "the scale forgotten on dk", W_SCALE)
wrong("q_mT_dq_divided_by_head_size", "q", "q", sub(Q_MT, "dq = dscores @ k / head_size ** 0.5", "dq = dscores @ k / head_size"),
      "dq divided by head_size: the square root's scale applied twice",
      ("twice", "scale", "sqrt", "head_size", "square", "factor"))
wrong("q_einsum_scale_inverted", "q", "q", sub(Q, "c = head_size ** -0.5", "c = head_size ** 0.5"),
      "c = sqrt(head_size): multiplied by the scale's inverse", W_SCALE + ("inverse",))
wrong("q_mT_dk_not_transposed", "q", "k", sub(Q_MT, "dk = dscores.mT @ q", "dk = dscores @ q"),
      "dk = dscores @ q: dscores not transposed", W_T)

# ---- WRONG: v = x @ Wv, k = x @ Wk ---------------------------------------------------
wrong("Wv_tensordot_transposed", "Wv", "Wv", sub(WV, "torch.tensordot(x, dv,", "torch.tensordot(dv, x,"),
      "tensordot(dv, x): the transpose of dWv (square, so the shapes fit)", W_T)
wrong("Wk_einsum_not_transposed", "Wk", "x", sub(WK, "'bth,ch->btc', dk, Wk", "'bth,hc->btc', dk, Wk"),
      "dk @ Wk: Wk not transposed (square, so the shapes fit)", W_T)

# ---- WRONG: q = x @ Wq (x's last branch) ---------------------------------------------
wrong("x_value_branch_twice", "x", "x", sub(XQ, "dx = dx + dq @ Wq.mT", "dx = dx + dq @ Wq.mT + dv @ Wv.mT"),
      "the value branch added again: dx already holds it, so it is counted twice",
      ("twice", "branch", "double", "already", "value", "counted"))
wrong("x_tensordot_assigned", "x", "x", sub(XQ_TD, "dx += torch.tensordot", "dx = torch.tensordot"),
      "dx assigned from the query branch alone: the key and value branches are thrown away", W_BRANCH)

# ---- WRONG: x = tok + Cpos -----------------------------------------------------------
wrong("tok_einsum_mean", "tok", "Cpos", sub(TOK, "torch.einsum('btc->tc', dx)", "torch.einsum('btc->tc', dx) / n"),
      "dCpos averaged over the batch instead of summed", W_MEAN)

# ---- WRONG: tok = C[Xb] --------------------------------------------------------------
wrong("C_scatter_no_add", "C", "C", sub(C_SCATTER, "scatter_add_(", "scatter_("),
      "scatter_ instead of scatter_add_: a repeated character keeps one row only", W_REPEAT)
