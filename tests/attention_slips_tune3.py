"""Causal self-attention lesson (attention_pack, made by `pack new` from
tests/packs/forward/slips_attention.py): a third slip corpus, TUNE half.

What it is: rows of backward-pass code as a learner would type them into one step of the lesson.
Every RIGHT row passes the tutor's check; every WRONG row carries one slip that learners really
make with these operations (the 1/sqrt(head_size) scale, operands swapped or left untransposed in
batched products, the softmax's row-sum term, the causal mask, sums for broadcast tensors, a
reused tensor's branches, signs, repeated embedding rows) and fails it. The same slip family is
put on several steps where its operation occurs.

Style: mostly einsum with spelled-out index letters, explicit Python loops over the batch and the
rows of the attention matrix, torch.bmm, tensordot, index_put_ and torch.where for the mask.
It was written apart from the diagnosis code, without reading it, and each row was checked with
`backprop-tutor check --json` looking at "passed" only: `words` are the writer's own guess at what
a specific diagnosis of the slip would say (any one of them is enough), not copied from the
tutor's messages.

RIGHT = {name: (step_id, tensor, code, "")}
WRONG = {name: (step_id, tensor, code, slip, words)}
"""
S = "attention_pack/"

W_SCALE = ("scale", "sqrt", "head_size", "factor", "constant", "0.5")
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


# ---- RIGHT ---------------------------------------------------------------------------
right("logits_exp_log_softmax_scatter", "logits", "logits",
      "dlogits = torch.exp(F.log_softmax(logits, dim=2))\n"
      "minus = -torch.ones(Yb.shape + (1,), dtype=dlogits.dtype)\n"
      "dlogits.scatter_add_(2, Yb.unsqueeze(2), minus)\n"
      "dlogits /= Yb.numel()\n")
right("out_einsum_ij", "out", "W",
      "dout = dlogits @ W.transpose(0, 1)\n"
      "dW = torch.einsum('bti,btj->ij', out, dlogits)\n"
      "db = dlogits.flatten(0, 1).sum(0)\n")
right("out_loop_batch", "out", "b",
      "dout = torch.zeros_like(out)\n"
      "dW = torch.zeros_like(W)\n"
      "db = torch.zeros_like(b)\n"
      "for i in range(out.shape[0]):\n"
      "    dout[i] = dlogits[i] @ W.T\n"
      "    dW += out[i].T @ dlogits[i]\n"
      "    db += dlogits[i].sum(0)\n")
right("att_einsum", "att", "v",
      "datt = torch.einsum('bid,bjd->bij', dout, v)\n"
      "dv = torch.einsum('bij,bid->bjd', att, dout)\n")
right("att_bmm", "att", "att",
      "datt = torch.bmm(dout, v.permute(0, 2, 1))\n"
      "dv = torch.bmm(att.permute(0, 2, 1), dout)\n")
right("masked_einsum_rowdot", "masked", "masked",
      "rowdot = torch.einsum('bij,bij->bi', att, datt)\n"
      "dmasked = att * datt - att * rowdot.unsqueeze(-1)\n")
right("masked_loop_jacobian", "masked", "masked",
      "dmasked = torch.zeros_like(att)\n"
      "for bi in range(att.shape[0]):\n"
      "    for r in range(block_size):\n"
      "        a = att[bi, r]\n"
      "        J = torch.diag(a) - torch.outer(a, a)\n"
      "        dmasked[bi, r] = J @ datt[bi, r]\n")
right("scores_where_bool", "scores", "scores",
      "keep = torch.tril(torch.ones(block_size, block_size, dtype=torch.bool))\n"
      "dscores = torch.where(keep, dmasked, torch.zeros_like(dmasked))\n")
right("q_einsum_sqrt", "q", "k",
      "dq = torch.einsum('bij,bjd->bid', dscores, k) / math.sqrt(head_size)\n"
      "dk = torch.einsum('bij,bid->bjd', dscores, q) / math.sqrt(head_size)\n")
right("q_loop_batch", "q", "q",
      "dq = torch.empty_like(q)\n"
      "dk = torch.empty_like(k)\n"
      "for i in range(q.shape[0]):\n"
      "    g = dscores[i] * head_size ** -0.5\n"
      "    dq[i] = g @ k[i]\n"
      "    dk[i] = g.T @ q[i]\n")
right("Wv_einsum", "Wv", "Wv",
      "dx = torch.einsum('bth,eh->bte', dv, Wv)\n"
      "dWv = torch.einsum('bte,bth->eh', x, dv)\n")
right("Wk_tensordot", "Wk", "Wk",
      "dx += dk @ Wk.T\n"
      "dWk = torch.tensordot(x, dk, dims=([0, 1], [0, 1]))\n")
right("x_bmm_sum", "x", "Wq",
      "dx = dx + torch.einsum('bth,eh->bte', dq, Wq)\n"
      "dWq = (x.transpose(1, 2) @ dq).sum(0)\n")
right("tok_keepdim_squeeze", "tok", "Cpos",
      "dtok = dx * 1.0\n"
      "dCpos = dx.sum(dim=0, keepdim=True).squeeze(0)\n")
right("C_index_put_accumulate", "C", "C",
      "dC = torch.zeros_like(C)\n"
      "dC.index_put_((Xb,), dtok, accumulate=True)\n")
right("C_loop_plus_equals", "C", "C",
      "dC = torch.zeros_like(C)\n"
      "for i in range(Xb.shape[0]):\n"
      "    for t in range(block_size):\n"
      "        dC[Xb[i, t]] += dtok[i, t]\n")

# ---- WRONG: cross-entropy ------------------------------------------------------------
wrong("logits_no_divide", "logits", "logits",
      "dlogits = F.softmax(logits, dim=2) - F.one_hot(Yb, vocab_size)\n",
      "the average over the n * block_size positions is not divided out",
      ("divide", "mean", "average", "position", "scale", "block_size"))
wrong("logits_targets_minus_probs", "logits", "logits",
      "dlogits = torch.exp(F.log_softmax(logits, 2))\n"
      "dlogits = (F.one_hot(Yb, vocab_size) - dlogits) / Yb.numel()\n",
      "targets minus probabilities: the sign is flipped", W_SIGN)
wrong("logits_softmax_over_positions", "logits", "logits",
      "dlogits = (F.softmax(logits, dim=1) - F.one_hot(Yb, vocab_size)) / (n * block_size)\n",
      "softmax taken over the positions (dim 1) instead of the vocabulary",
      ("axis", "dim", "softmax", "vocab", "position", "last"))

# ---- WRONG: logits = out @ W + b -----------------------------------------------------
wrong("out_dW_first_example_only", "out", "W",
      "dout = dlogits @ W.T\n"
      "dW = out[0].T @ dlogits[0]\n"
      "db = dlogits.sum((0, 1))\n",
      "dW from the first example only: no sum over the batch", W_AXIS)
wrong("out_db_mean_positions", "out", "b",
      "dout = torch.einsum('btv,hv->bth', dlogits, W)\n"
      "dW = torch.einsum('bth,btv->hv', out, dlogits)\n"
      "db = dlogits.sum(0).mean(0)\n",
      "db averaged over the positions instead of summed", W_MEAN)
wrong("out_dout_sign", "out", "out",
      "dout = -(dlogits @ W.T)\n"
      "dW = out.reshape(-1, head_size).T @ dlogits.reshape(-1, vocab_size)\n"
      "db = dlogits.sum((0, 1))\n",
      "the gradient of out negated", W_SIGN)

# ---- WRONG: out = att @ v ------------------------------------------------------------
wrong("att_dv_no_transpose", "att", "v",
      "datt = dout @ v.transpose(-2, -1)\n"
      "dv = torch.bmm(att, dout)\n",
      "dv = att @ dout: att not transposed", W_T)
wrong("att_datt_operands_swapped", "att", "att",
      "datt = torch.einsum('bjd,bid->bij', dout, v)\n"
      "dv = torch.einsum('bij,bid->bjd', att, dout)\n",
      "datt comes out transposed: v @ dout^T instead of dout @ v^T", W_T)
wrong("att_dv_loop_overwrites", "att", "v",
      "datt = dout @ v.transpose(1, 2)\n"
      "dv = torch.zeros_like(v)\n"
      "for r in range(block_size):\n"
      "    dv = att[:, r, :].unsqueeze(-1) * dout[:, r, :].unsqueeze(1)\n",
      "each row's contribution to dv replaces the last instead of adding to it",
      ("accumulate", "overwrite", "+=", "add", "sum", "loop"))

# ---- WRONG: att = softmax(masked) ----------------------------------------------------
wrong("masked_no_row_term", "masked", "masked",
      "dmasked = att * datt\n",
      "softmax backward without the row-sum term", W_SOFTMAX)
wrong("masked_rowdot_over_columns", "masked", "masked",
      "coldot = torch.einsum('bij,bij->bj', att, datt)\n"
      "dmasked = att * (datt - coldot.unsqueeze(1))\n",
      "the softmax's row sum taken over the wrong axis (columns)",
      ("axis", "dim", "row", "column", "sum", "softmax"))
wrong("masked_rowsum_no_keepdim", "masked", "masked",
      "dmasked = att * (datt - (att * datt).sum(-1))\n",
      "row sum without keepdim broadcasts along the wrong axis",
      ("keepdim", "broadcast", "axis", "row", "dim", "shape"))
wrong("masked_sum_of_datt_only", "masked", "masked",
      "dmasked = att * (datt - datt.sum(-1, keepdim=True))\n",
      "the row term sums datt alone, not datt weighted by att",
      ("weighted", "att *", "row", "softmax", "jacobian", "term"))
wrong("masked_loop_jacobian_plus", "masked", "masked",
      "dmasked = torch.zeros_like(att)\n"
      "for bi in range(att.shape[0]):\n"
      "    for r in range(block_size):\n"
      "        a = att[bi, r]\n"
      "        dmasked[bi, r] = (torch.diag(a) + torch.outer(a, a)) @ datt[bi, r]\n",
      "the softmax Jacobian's outer-product term added instead of subtracted",
      ("sign", "subtract", "minus", "jacobian", "outer", "row"))

# ---- WRONG: the causal mask ----------------------------------------------------------
wrong("scores_mask_inverted", "scores", "scores",
      "keep = torch.tril(torch.ones(block_size, block_size, dtype=torch.bool))\n"
      "dscores = torch.where(keep, torch.zeros_like(dmasked), dmasked)\n",
      "the mask inverted: the past zeroed and the future kept", W_MASK)
wrong("scores_mask_triu", "scores", "scores",
      "dscores = dmasked * torch.triu(torch.ones(block_size, block_size))\n",
      "triu instead of tril: the mask transposed", W_MASK)
wrong("scores_fill_minus_inf", "scores", "scores",
      "dscores = dmasked.masked_fill(torch.tril(torch.ones(block_size, block_size)) == 0,"
      " float('-inf'))\n",
      "the gradient filled with -inf like the forward instead of 0",
      ("-inf", "zero", "fill", "mask", "infinite", "constant"))

# ---- WRONG: scores = q @ k^T * head_size ** -0.5 -------------------------------------
wrong("q_no_scale", "q", "q",
      "dq = torch.einsum('bij,bjd->bid', dscores, k)\n"
      "dk = torch.einsum('bij,bid->bjd', dscores, q)\n",
      "the 1/sqrt(head_size) scale forgotten", W_SCALE)
wrong("q_scale_multiplied", "q", "k",
      "dq = dscores @ k * head_size ** 0.5\n"
      "dk = dscores.transpose(1, 2) @ q * head_size ** 0.5\n",
      "multiplied by sqrt(head_size) instead of divided", W_SCALE)
wrong("q_dk_no_transpose", "q", "k",
      "dq = torch.bmm(dscores, k) / head_size ** 0.5\n"
      "dk = torch.bmm(dscores, q) / head_size ** 0.5\n",
      "dk = dscores @ q: dscores not transposed", W_T)
wrong("q_loop_scale_dq_only", "q", "k",
      "dq = torch.empty_like(q)\n"
      "dk = torch.empty_like(k)\n"
      "for i in range(q.shape[0]):\n"
      "    dq[i] = dscores[i] @ k[i] / math.sqrt(head_size)\n"
      "    dk[i] = dscores[i].T @ q[i]\n",
      "the scale applied to dq but forgotten on dk", W_SCALE)

# ---- WRONG: v = x @ Wv, k = x @ Wk ---------------------------------------------------
wrong("Wv_dWv_transposed", "Wv", "Wv",
      "dx = dv @ Wv.T\n"
      "dWv = torch.einsum('bth,bte->eh', x, dv)\n",
      "dWv comes out transposed (dv^T x instead of x^T dv)", W_T)
wrong("Wv_dWv_mean_batch", "Wv", "Wv",
      "dx = dv @ Wv.T\n"
      "dWv = (x.transpose(1, 2) @ dv).mean(0)\n",
      "averaged over the batch instead of summed", W_MEAN)
wrong("Wk_uses_dq", "Wk", "Wk",
      "dx += dk @ Wk.T\n"
      "dWk = torch.tensordot(x, dq, dims=([0, 1], [0, 1]))\n",
      "dWk built from dq, the query's gradient, instead of dk",
      ("dq", "dk", "query", "key", "branch", "instead"))
wrong("Wk_uses_k_as_input", "Wk", "Wk",
      "dx += dk @ Wk.T\n"
      "dWk = torch.einsum('bte,bth->eh', k, dk)\n",
      "the output k used where the input x belongs", ("input", "output", "operand", "x", "instead", "wrong tensor"))
wrong("Wk_sign", "Wk", "Wk",
      "dx += dk @ Wk.T\n"
      "dWk = -(x.reshape(-1, n_embd).T @ dk.reshape(-1, head_size))\n",
      "dWk negated", W_SIGN)

# ---- WRONG: q = x @ Wq (x's last branch) ---------------------------------------------
wrong("x_branch_overwritten", "x", "x",
      "dx = torch.einsum('bth,eh->bte', dq, Wq)\n"
      "dWq = torch.einsum('bte,bth->eh', x, dq)\n",
      "dx overwritten by the query branch: the value and key branches are lost", W_BRANCH)
wrong("x_Wq_not_transposed", "x", "x",
      "dx += dq @ Wq\n"
      "dWq = (x.transpose(1, 2) @ dq).sum(0)\n",
      "dq @ Wq: Wq not transposed", W_T)
wrong("x_dWq_first_example", "x", "Wq",
      "dx += dq @ Wq.T\n"
      "dWq = x[0].T @ dq[0]\n",
      "dWq from one example: the batch not summed", W_AXIS)

# ---- WRONG: x = tok + Cpos -----------------------------------------------------------
wrong("tok_dCpos_mean", "tok", "Cpos",
      "dtok = dx * 1.0\n"
      "dCpos = dx.mean(0)\n",
      "the broadcast Cpos's gradient averaged over the batch", W_MEAN)
wrong("tok_dCpos_no_sum", "tok", "Cpos",
      "dtok = dx.clone()\n"
      "dCpos = dx[-1]\n",
      "Cpos gets the last example's gradient: no sum over the batch it was broadcast along",
      W_AXIS)
wrong("tok_dtok_sign", "tok", "tok",
      "dtok = -dx\n"
      "dCpos = dx.sum(0)\n",
      "dtok negated", W_SIGN)

# ---- WRONG: tok = C[Xb] --------------------------------------------------------------
wrong("C_index_put_no_accumulate", "C", "C",
      "dC = torch.zeros_like(C)\n"
      "dC.index_put_((Xb,), dtok)\n",
      "index_put_ without accumulate: repeated characters overwrite", W_REPEAT)
wrong("C_loop_assign", "C", "C",
      "dC = torch.zeros_like(C)\n"
      "for i in range(Xb.shape[0]):\n"
      "    for t in range(block_size):\n"
      "        dC[Xb[i, t]] = dtok[i, t]\n",
      "= instead of += in the loop: repeats overwrite", W_REPEAT)
