"""Causal self-attention lesson (attention_pack, made by `pack new` from
tests/packs/forward/slips_attention.py): a fourth slip corpus, TUNE half (its other half is
tests/attention_slips_holdout4.py).

What it is: rows of backward-pass code as a learner would type them into one step of the lesson.
Every RIGHT row passes the tutor's check; every WRONG row carries one slip that learners really
make with these operations (the 1/sqrt(head_size) scale, operands swapped or left untransposed in
batched products, the softmax's row-sum term, the causal mask, sums for broadcast tensors, a
reused tensor's branches, signs, the loss's mean, repeated embedding rows) and fails it. The same
slip family is put on every step where its operation occurs.

Style: torch.matmul with explicit .transpose(-2, -1), torch.baddbmm (with alpha for the scale),
unsqueeze + broadcast multiply + sum in place of a product, small helper functions defined inside
the code, the softmax Jacobian built with diag_embed, masked_fill with triu masks, in-place `+=`
into zero buffers and one-hot products for the embedding. It was written apart from the
diagnosis code, without reading it, and each row was checked with `backprop-tutor check --json`
looking at "passed" only: `words` are the writer's own guess at what a specific diagnosis of the
slip would say (any one of them is enough), not copied from the tutor's messages.

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
W_REPEAT = ("repeat", "accumulate", "overwrite", "duplicate", "add up", "index_put")
W_OTHER = ("operand", "other", "wrong tensor", "instead", "input", "branch")

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
# cross-entropy by a helper softmax and a comparison one-hot
LOGITS = ("def probs(z):\n"
          "    e = (z - z.amax(-1, keepdim=True)).exp()\n"
          "    return e / e.sum(-1, keepdim=True)\n"
          "g = probs(logits)\n"
          "g -= (torch.arange(vocab_size) == Yb.unsqueeze(-1)).to(g.dtype)\n"
          "dlogits = g / Yb.numel()\n")
OUT = ("dout = torch.matmul(dlogits, W.transpose(-2, -1))\n"
       "dW = (out.unsqueeze(-1) * dlogits.unsqueeze(-2)).sum((0, 1))\n"
       "db = dlogits.sum(dim=(0, 1))\n")
ATT = ("datt = torch.matmul(dout, v.transpose(-2, -1))\n"
       "dv = torch.baddbmm(torch.zeros_like(v), att.transpose(-2, -1), dout)\n")
ATT_BC = ("datt = (dout.unsqueeze(2) * v.unsqueeze(1)).sum(-1)\n"
          "dv = (att.unsqueeze(-1) * dout.unsqueeze(2)).sum(1)\n")
MASKED_HELPER = ("def softmax_back(p, g):\n"
                 "    rowdot = torch.matmul(p * g, torch.ones(block_size, 1))\n"
                 "    return p * g - p * rowdot\n"
                 "dmasked = softmax_back(att, datt)\n")
JAC = ("J = torch.diag_embed(att) - att.unsqueeze(-1) * att.unsqueeze(-2)\n"
       "dmasked = torch.matmul(J, datt.unsqueeze(-1)).squeeze(-1)\n")
FUTURE = "future = torch.triu(torch.ones(block_size, block_size, dtype=torch.bool), diagonal=1)\n"
SCORES = FUTURE + "dscores = dmasked.masked_fill(future, 0.0)\n"
Q_BADD = ("dq = torch.baddbmm(torch.zeros_like(q), dscores, k, alpha=head_size ** -0.5)\n"
          "dk = torch.baddbmm(torch.zeros_like(k), dscores.transpose(-2, -1), q, alpha=head_size ** -0.5)\n")
Q_BC = ("dq = (dscores.unsqueeze(-1) * k.unsqueeze(1)).sum(2) / head_size ** 0.5\n"
        "dk = (dscores.unsqueeze(-1) * q.unsqueeze(2)).sum(1) / head_size ** 0.5\n")
WV = ("def mm_back(inp, w, g):\n"
      "    return torch.matmul(g, w.transpose(-2, -1)), torch.matmul(inp.transpose(-2, -1), g).sum(0)\n"
      "dx, dWv = mm_back(x, Wv, dv)\n")
WK = ("dx += torch.matmul(dk, Wk.transpose(-2, -1))\n"
      "dWk = torch.zeros_like(Wk)\n"
      "dWk += (x.unsqueeze(-1) * dk.unsqueeze(-2)).sum((0, 1))\n")
XQ = ("dx = dx + torch.matmul(dq, Wq.transpose(-2, -1))\n"
      "dWq = torch.baddbmm(torch.zeros(n, n_embd, head_size), x.transpose(-2, -1), dq).sum(0)\n")
TOK = ("dtok = dx.clone()\n"
       "dCpos = torch.matmul(torch.ones(1, n), dx.reshape(n, -1)).view(block_size, n_embd)\n")
C_ONEHOT = ("onehot = F.one_hot(Xb, vocab_size).to(dtok.dtype)\n"
            "dC = torch.matmul(onehot.reshape(-1, vocab_size).transpose(-2, -1), dtok.reshape(-1, n_embd))\n")

# ---- RIGHT ---------------------------------------------------------------------------
right("logits_helper_softmax_arange_onehot", "logits", "logits", LOGITS)
right("out_matmul_broadcast_outer", "out", "W", OUT)
right("att_matmul_baddbmm", "att", "v", ATT)
right("att_broadcast_sums", "att", "att", ATT_BC)
right("masked_helper_ones_matmul", "masked", "masked", MASKED_HELPER)
right("masked_diag_embed_jacobian", "masked", "masked", JAC)
right("scores_triu_masked_fill", "scores", "scores", SCORES)
right("q_baddbmm_alpha", "q", "k", Q_BADD)
right("q_broadcast_sums", "q", "q", Q_BC)
right("Wv_helper_mm_back", "Wv", "Wv", WV)
right("Wk_zero_buffer_outer", "Wk", "Wk", WK)
right("x_matmul_baddbmm", "x", "Wq", XQ)
right("tok_ones_row_matmul", "tok", "Cpos", TOK)
right("C_onehot_matmul", "C", "C", C_ONEHOT)

# ---- WRONG: cross-entropy over every position ----------------------------------------
wrong("logits_divide_by_n", "logits", "logits", sub(LOGITS, "g / Yb.numel()", "g / n"),
      "divided by the batch size only: the loss averages over n * block_size positions",
      ("divide", "mean", "average", "position", "block_size", "scale"))
wrong("logits_target_minus_probs", "logits", "logits",
      sub(LOGITS, "g -= (torch.arange", "g = -g + (torch.arange"),
      "the one-hot minus the probabilities: the sign is flipped", W_SIGN)
wrong("logits_helper_over_positions", "logits", "logits",
      sub(sub(LOGITS, "z.amax(-1, keepdim=True)", "z.amax(1, keepdim=True)"),
          "e.sum(-1, keepdim=True)", "e.sum(1, keepdim=True)"),
      "the helper's softmax normalises over the positions (dim 1) instead of the vocabulary",
      ("axis", "dim", "softmax", "vocab", "position", "last"))

# ---- WRONG: logits = out @ W + b -----------------------------------------------------
wrong("out_db_batch_only", "out", "b", sub(OUT, "dlogits.sum(dim=(0, 1))", "dlogits.sum(dim=0)"),
      "the bias is broadcast over batch and positions, but summed over the batch only",
      W_AXIS + ("position",))
wrong("out_dW_mean_batch", "out", "W",
      sub(OUT, "dlogits.unsqueeze(-2)).sum((0, 1))", "dlogits.unsqueeze(-2)).mean(0).sum(0)"),
      "dW averaged over the batch instead of summed", W_MEAN)
wrong("out_dout_negated", "out", "out",
      sub(OUT, "dout = torch.matmul(dlogits, W.transpose(-2, -1))",
          "dout = -torch.matmul(dlogits, W.transpose(-2, -1))"),
      "dout negated", W_SIGN)

# ---- WRONG: out = att @ v ------------------------------------------------------------
wrong("att_dv_baddbmm_no_transpose", "att", "v",
      sub(ATT, "att.transpose(-2, -1), dout", "att, dout"),
      "dv = att @ dout: att not transposed (square, so the shapes fit)", W_T)
wrong("att_datt_masked_fill_future", "att", "att",
      FUTURE + sub(ATT, "datt = torch.matmul(dout, v.transpose(-2, -1))",
                   "datt = torch.matmul(dout, v.transpose(-2, -1)).masked_fill(future, 0.0)"),
      "the causal mask applied to datt: att's gradient is full, the mask belongs two steps later",
      W_MASK + ("early",))
wrong("att_broadcast_datt_transposed", "att", "att",
      sub(ATT_BC, "(dout.unsqueeze(2) * v.unsqueeze(1))", "(dout.unsqueeze(1) * v.unsqueeze(2))"),
      "the broadcast puts queries on the key axis: datt comes out transposed", W_T)
wrong("att_broadcast_dv_wrong_axis", "att", "v",
      sub(ATT_BC, "dout.unsqueeze(2)).sum(1)", "dout.unsqueeze(2)).sum(2)"),
      "dv summed over the key axis instead of the query axis",
      ("axis", "dim", "sum", "query", "key", "transpose"))

# ---- WRONG: att = softmax(masked) ----------------------------------------------------
wrong("masked_helper_diagonal_only", "masked", "masked",
      sub(MASKED_HELPER, "return p * g - p * rowdot", "return p * g"),
      "the helper keeps only the diagonal of the Jacobian: the row-sum term is missing", W_SOFTMAX)
wrong("masked_ones_on_left_columns", "masked", "masked",
      sub(MASKED_HELPER, "torch.matmul(p * g, torch.ones(block_size, 1))",
          "torch.matmul(torch.ones(1, block_size), p * g)"),
      "ones on the left sum each column: the row term is taken over the wrong axis",
      ("axis", "dim", "row", "column", "sum", "softmax"))
wrong("masked_ones_unweighted", "masked", "masked",
      sub(MASKED_HELPER, "torch.matmul(p * g, torch.ones", "torch.matmul(g, torch.ones"),
      "the row term sums datt alone, not datt weighted by the probabilities",
      ("weighted", "att *", "row", "softmax", "jacobian", "term"))
wrong("masked_jacobian_no_diag", "masked", "masked",
      sub(JAC, "J = torch.diag_embed(att) - att", "J = -att"),
      "the Jacobian's diagonal term diag(att) left out",
      ("diagonal", "diag", "jacobian", "term", "softmax", "missing"))

# ---- WRONG: the causal mask ----------------------------------------------------------
wrong("scores_keep_future", "scores", "scores",
      sub(SCORES, "masked_fill(future, 0.0)", "masked_fill(~future, 0.0)"),
      "the mask inverted: the past and the diagonal zeroed, the future kept", W_MASK)
wrong("scores_triu_diagonal_zero", "scores", "scores", sub(SCORES, "diagonal=1", "diagonal=0"),
      "triu with diagonal=0 masks the diagonal too: each position's own score loses its gradient",
      W_MASK + ("diagonal",))
wrong("scores_scale_here", "scores", "scores",
      sub(SCORES, "masked_fill(future, 0.0)", "masked_fill(future, 0.0) * head_size ** -0.5"),
      "the 1/sqrt(head_size) scale applied at the mask's step, where no scale appears", W_SCALE)

# ---- WRONG: scores = q @ k^T * head_size ** -0.5 -------------------------------------
wrong("q_baddbmm_dq_no_alpha", "q", "q", sub(Q_BADD, "dscores, k, alpha=head_size ** -0.5", "dscores, k"),
      "baddbmm without alpha: the scale forgotten on dq", W_SCALE)
wrong("q_broadcast_dk_no_scale", "q", "k",
      sub(Q_BC, "q.unsqueeze(2)).sum(1) / head_size ** 0.5", "q.unsqueeze(2)).sum(1)"),
      "the scale forgotten on dk", W_SCALE)
wrong("q_baddbmm_alpha_inverted", "q", "k", Q_BADD.replace("alpha=head_size ** -0.5", "alpha=head_size ** 0.5"),
      "alpha = sqrt(head_size): multiplied by the scale's inverse", W_SCALE + ("inverse",))
wrong("q_broadcast_dq_scale_twice", "q", "q",
      sub(Q_BC, "k.unsqueeze(1)).sum(2) / head_size ** 0.5", "k.unsqueeze(1)).sum(2) / head_size"),
      "dq divided by head_size: the square root's scale applied twice",
      ("twice", "scale", "sqrt", "head_size", "square", "factor"))
wrong("q_broadcast_dk_not_transposed", "q", "k",
      sub(Q_BC, "(dscores.unsqueeze(-1) * q.unsqueeze(2)).sum(1)", "(dscores.unsqueeze(-1) * q.unsqueeze(1)).sum(2)"),
      "dk = dscores @ q: dscores not transposed", W_T)
wrong("q_baddbmm_dk_uses_k", "q", "k",
      sub(Q_BADD, "dscores.transpose(-2, -1), q,", "dscores.transpose(-2, -1), k,"),
      "dk built from k itself instead of the other operand q", W_OTHER + ("query",))

# ---- WRONG: v = x @ Wv, k = x @ Wk ---------------------------------------------------
wrong("Wv_helper_dW_transposed", "Wv", "Wv",
      sub(WV, "torch.matmul(inp.transpose(-2, -1), g)", "torch.matmul(g.transpose(-2, -1), inp)"),
      "the helper's weight gradient is dv^T x: the transpose of dWv", W_T)
wrong("Wv_helper_no_batch_sum", "Wv", "Wv", sub(WV, "torch.matmul(inp.transpose(-2, -1), g).sum(0)",
                                                 "torch.matmul(inp.transpose(-2, -1), g)"),
      "the per-example weight gradients not summed over the batch", W_AXIS)
wrong("Wv_helper_w_not_transposed", "Wv", "x", sub(WV, "torch.matmul(g, w.transpose(-2, -1))", "torch.matmul(g, w)"),
      "the helper's input gradient is dv @ Wv: Wv not transposed (square, so the shapes fit)", W_T)
wrong("Wk_outer_mean", "Wk", "Wk", sub(WK, "dk.unsqueeze(-2)).sum((0, 1))", "dk.unsqueeze(-2)).mean((0, 1))"),
      "dWk averaged over batch and positions instead of summed", W_MEAN)
wrong("Wk_negated", "Wk", "Wk", sub(WK, "dWk += (x.unsqueeze", "dWk -= (x.unsqueeze"),
      "-= into the buffer: dWk negated", W_SIGN)
wrong("Wk_dx_assigned", "Wk", "x", sub(WK, "dx += torch.matmul(dk", "dx = torch.matmul(dk"),
      "dx assigned instead of added: the value branch from the step before is lost", W_BRANCH)

# ---- WRONG: q = x @ Wq (x's last branch) ---------------------------------------------
wrong("x_fresh_zero_buffer", "x", "x",
      "dx = torch.zeros_like(x)\n"
      "dx += torch.matmul(dq, Wq.transpose(-2, -1))\n"
      "dWq = torch.baddbmm(torch.zeros(n, n_embd, head_size), x.transpose(-2, -1), dq).sum(0)\n",
      "dx restarted from a zero buffer: the value and key branches are thrown away", W_BRANCH)
wrong("x_Wq_not_transposed", "x", "x", sub(XQ, "torch.matmul(dq, Wq.transpose(-2, -1))", "torch.matmul(dq, Wq)"),
      "dq @ Wq: Wq not transposed (square, so the shapes fit)", W_T)
wrong("x_dWq_result_transposed", "x", "Wq",
      sub(XQ, "x.transpose(-2, -1), dq).sum(0)", "x.transpose(-2, -1), dq).transpose(-2, -1).sum(0)"),
      "dWq transposed before the batch sum", W_T)

# ---- WRONG: x = tok + Cpos -----------------------------------------------------------
wrong("tok_ones_row_over_n", "tok", "Cpos", sub(TOK, "torch.ones(1, n)", "torch.ones(1, n) / n"),
      "a row of 1/n: dCpos averaged over the batch instead of summed", W_MEAN)
wrong("tok_dCpos_positions_too", "tok", "Cpos",
      "dtok = dx.clone()\n"
      "dCpos = dx.sum((0, 1), keepdim=True).squeeze(0).expand(block_size, -1)\n",
      "dCpos summed over the positions too: Cpos has one row per position", W_AXIS + ("position",))

# ---- WRONG: tok = C[Xb] --------------------------------------------------------------
wrong("C_zip_loop_assign", "C", "C",
      "dC = torch.zeros_like(C)\n"
      "for ix, g in zip(Xb.flatten().tolist(), dtok.flatten(0, 1)):\n"
      "    dC[ix] = g\n",
      "= in the loop: a repeated character keeps only its last row", W_REPEAT)
wrong("C_onehot_flatten_order", "C", "C",
      sub(C_ONEHOT, "dtok.reshape(-1, n_embd)", "dtok.transpose(0, 1).reshape(-1, n_embd)"),
      "the gradient rows flattened time-major, the one-hot rows batch-major: they don't line up",
      ("order", "transpose", "reshape", "flatten", "align", "match"))
