"""Causal self-attention lesson (attention_pack, made by `pack new` from
tests/packs/forward/slips_attention.py): a fifth slip corpus, TUNE half (its other half is
tests/attention_slips_holdout5.py).

What it is: rows of backward-pass code as a learner would type them into one step of the lesson.
Every RIGHT row passes the tutor's check; every WRONG row carries one slip that learners really
make with these operations (the 1/sqrt(head_size) scale missing or doubled, operands left
untransposed or swapped in batched products, the softmax's row-sum term missing or unweighted,
the causal mask on the wrong triangle or without its diagonal, sums for broadcast tensors, a
reused tensor's branch forgotten or counted twice, a loop that overwrites instead of
accumulating, the loss's mean, repeated embedding rows) and fails it. The same slip family is
put on every step where its operation occurs.

Style: explicit Python loops over the batch, the positions or the rows of the attention matrix,
writing into preallocated zeros / empty buffers, torch.bmm on tensors reshaped to (n *
block_size, ...) or expanded, helper lambdas, torch.where for the target and the causal mask,
slices `[:t + 1]` for the mask and index_add_ / a double loop with `+=` for the embedding. It
was written apart from the diagnosis code, without reading it, and each row was checked with
`backprop-tutor check --json` looking at "passed" only: `words` are the writer's own guess at
what a specific diagnosis of the slip would say (any one of them is enough), not copied from the
tutor's messages.

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
W_BRANCH = ("branch", "accumulate", "+=", "overwrite", "reused", "add")
W_LOOP = ("accumulate", "+=", "overwrite", "last", "loop", "sum")
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
# cross-entropy: torch.where picks p - 1 at the target
LOGITS_WHERE = ("P = F.softmax(logits, dim=-1)\n"
                "hit = torch.arange(vocab_size).view(1, 1, -1) == Yb.unsqueeze(-1)\n"
                "dlogits = torch.where(hit, P - 1, P) / (n * block_size)\n")
# cross-entropy: a loop over the positions, one row of examples at a time
LOGITS_LOOP = ("dlogits = torch.zeros_like(logits)\n"
               "for t in range(block_size):\n"
               "    p = logits[:, t].softmax(-1)\n"
               "    p[torch.arange(n), Yb[:, t]] -= 1\n"
               "    dlogits[:, t] = p / (n * block_size)\n")
# logits = out @ W + b: everything flattened to (n * block_size, ...) rows
OUT_FLAT = ("g = dlogits.reshape(n * block_size, vocab_size)\n"
            "dout = (g @ W.t()).view(n, block_size, head_size)\n"
            "dW = out.reshape(-1, head_size).t() @ g\n"
            "db = g.sum(0)\n")
# logits = out @ W + b: a loop over the batch into zero buffers
OUT_LOOP = ("dout = torch.zeros_like(out)\n"
            "dW = torch.zeros_like(W)\n"
            "db = torch.zeros_like(b)\n"
            "for i in range(n):\n"
            "    dout[i] = dlogits[i] @ W.T\n"
            "    dW += out[i].T @ dlogits[i]\n"
            "    db += dlogits[i].sum(0)\n")
# out = att @ v: a loop over the batch into empty buffers
ATT_LOOP = ("datt = torch.empty_like(att)\n"
            "dv = torch.empty_like(v)\n"
            "for i in range(n):\n"
            "    datt[i] = dout[i] @ v[i].T\n"
            "    dv[i] = att[i].T @ dout[i]\n")
ATT_BMM = ("datt = torch.bmm(dout, v.transpose(1, 2))\n"
           "dv = torch.bmm(att.transpose(1, 2), dout)\n")
# att = softmax(masked): one row of the attention matrix at a time
MASKED_LOOP = ("dmasked = torch.zeros_like(att)\n"
               "for t in range(block_size):\n"
               "    p, g = att[:, t], datt[:, t]\n"
               "    dmasked[:, t] = p * (g - (p * g).sum(-1, keepdim=True))\n")
MASKED_LAMBDA = ("sm_back = lambda p, g: p * g - p * (p * g).sum(-1, keepdim=True)\n"
                 "dmasked = sm_back(att, datt)\n")
# the causal mask: row t keeps its first t + 1 entries
SCORES_LOOP = ("dscores = torch.zeros_like(dmasked)\n"
               "for t in range(block_size):\n"
               "    dscores[:, t, :t + 1] = dmasked[:, t, :t + 1]\n")
SCORES_WHERE = ("lower = torch.ones(block_size, block_size).tril().bool()\n"
                "dscores = torch.where(lower, dmasked, torch.zeros(()))\n")
# scores = q @ k^T * head_size ** -0.5
Q_BMM = ("s = head_size ** -0.5\n"
         "dq = torch.bmm(dscores, k) * s\n"
         "dk = torch.bmm(dscores.transpose(1, 2), q) * s\n")
Q_LOOP = ("dq = torch.zeros_like(q)\n"
          "dk = torch.zeros_like(k)\n"
          "scale = lambda t: t / head_size ** 0.5\n"
          "for i in range(n):\n"
          "    dq[i] = scale(dscores[i] @ k[i])\n"
          "    dk[i] = scale(dscores[i].T @ q[i])\n")
# v = x @ Wv, k = x @ Wk, q = x @ Wq
WV_FLAT = ("dWv = x.reshape(-1, n_embd).T @ dv.reshape(-1, head_size)\n"
           "dx = dv @ Wv.T\n")
WV_LOOP = ("dWv = torch.zeros(n_embd, head_size)\n"
           "for i in range(n):\n"
           "    dWv += x[i].T @ dv[i]\n")
WK_LOOP = ("dWk = torch.zeros_like(Wk)\n"
           "for i in range(n):\n"
           "    dWk += x[i].T @ dk[i]\n"
           "dx += dk @ Wk.T\n")
X_BMM = ("dx = dx + torch.bmm(dq, Wq.T.expand(n, -1, -1))\n"
         "dWq = torch.bmm(x.transpose(1, 2), dq).sum(0)\n")
X_LOOP = ("dWq = torch.zeros_like(Wq)\n"
          "for i in range(n):\n"
          "    dx[i] += dq[i] @ Wq.T\n"
          "    dWq += x[i].T @ dq[i]\n")
# x = tok + Cpos
TOK_LOOP = ("dtok = dx.clone()\n"
            "dCpos = torch.zeros_like(Cpos)\n"
            "for i in range(n):\n"
            "    dCpos += dx[i]\n")
# tok = C[Xb]
C_INDEX_ADD = "dC = torch.zeros_like(C).index_add_(0, Xb.flatten(), dtok.reshape(-1, n_embd))\n"
C_LOOP = ("dC = torch.zeros_like(C)\n"
          "for i in range(n):\n"
          "    for t in range(block_size):\n"
          "        dC[Xb[i, t]] += dtok[i, t]\n")

# ---- RIGHT ---------------------------------------------------------------------------
right("logits_where_target", "logits", "logits", LOGITS_WHERE)
right("logits_loop_positions", "logits", "logits", LOGITS_LOOP)
right("out_flat_rows", "out", "W", OUT_FLAT)
right("out_loop_zero_buffers", "out", "out", OUT_LOOP)
right("att_loop_batch", "att", "v", ATT_LOOP)
right("att_bmm", "att", "att", ATT_BMM)
right("masked_loop_rows", "masked", "masked", MASKED_LOOP)
right("masked_lambda", "masked", "masked", MASKED_LAMBDA)
right("scores_loop_slices", "scores", "scores", SCORES_LOOP)
right("scores_where_lower", "scores", "scores", SCORES_WHERE)
right("q_bmm_scale", "q", "q", Q_BMM)
right("q_loop_lambda_scale", "q", "k", Q_LOOP)
right("Wv_flat_rows", "Wv", "Wv", WV_FLAT)
right("Wv_loop_zero_buffer", "Wv", "Wv", WV_LOOP)
right("Wk_loop_zero_buffer", "Wk", "Wk", WK_LOOP)
right("x_bmm_expand", "x", "x", X_BMM)
right("x_loop_in_place", "x", "Wq", X_LOOP)
right("tok_loop_batch", "tok", "Cpos", TOK_LOOP)
right("C_index_add", "C", "C", C_INDEX_ADD)
right("C_double_loop", "C", "C", C_LOOP)

# ---- WRONG: cross-entropy over every position ----------------------------------------
wrong("logits_where_divide_by_n", "logits", "logits", sub(LOGITS_WHERE, "/ (n * block_size)", "/ n"),
      "divided by the batch size only: the loss averages over n * block_size positions",
      ("divide", "mean", "average", "position", "block_size", "scale"))

# ---- WRONG: logits = out @ W + b -----------------------------------------------------
wrong("out_loop_dW_overwritten", "out", "W", sub(OUT_LOOP, "dW += out[i].T", "dW = out[i].T"),
      "dW assigned inside the loop: only the last example's contribution is kept", W_LOOP)
wrong("out_loop_db_mean_positions", "out", "b", sub(OUT_LOOP, "db += dlogits[i].sum(0)", "db += dlogits[i].mean(0)"),
      "db averaged over the positions instead of summed", W_MEAN + ("position",))

# ---- WRONG: out = att @ v ------------------------------------------------------------
wrong("att_loop_dv_no_transpose", "att", "v", sub(ATT_LOOP, "dv[i] = att[i].T @ dout[i]", "dv[i] = att[i] @ dout[i]"),
      "dv = att @ dout: att not transposed (square, so the shapes fit)", W_T)
wrong("att_bmm_datt_operands_swapped", "att", "att",
      sub(ATT_BMM, "torch.bmm(dout, v.transpose(1, 2))", "torch.bmm(v, dout.transpose(1, 2))"),
      "datt = v @ dout^T: the operands swapped, so datt comes out transposed", W_T)

# ---- WRONG: att = softmax(masked) ----------------------------------------------------
wrong("masked_loop_no_row_term", "masked", "masked",
      sub(MASKED_LOOP, "p * (g - (p * g).sum(-1, keepdim=True))", "p * g"),
      "only the diagonal of the softmax Jacobian: the row-sum term is missing", W_SOFTMAX)
wrong("masked_loop_row_term_unweighted", "masked", "masked",
      sub(MASKED_LOOP, "(g - (p * g).sum(-1, keepdim=True))", "(g - g.sum(-1, keepdim=True))"),
      "the row term sums datt alone, not datt weighted by the probabilities",
      ("weighted", "att *", "row", "softmax", "jacobian", "term"))
wrong("masked_lambda_elementwise", "masked", "masked", "dmasked = att * (1 - att) * datt\n",
      "att * (1 - att): the sigmoid-like diagonal only, the other entries of the row ignored",
      W_SOFTMAX + ("diagonal",))

# ---- WRONG: the causal mask ----------------------------------------------------------
wrong("scores_loop_diagonal_dropped", "scores", "scores", sub(SCORES_LOOP, ":t + 1]", ":t]"),
      "row t keeps only its first t entries: each position's own score loses its gradient",
      W_MASK + ("diagonal",))
wrong("scores_loop_upper_triangle", "scores", "scores", sub(SCORES_LOOP, ":t + 1]", "t:]"),
      "row t keeps the future entries t.. instead of the past: the wrong triangle", W_MASK)

# ---- WRONG: scores = q @ k^T * head_size ** -0.5 -------------------------------------
wrong("q_bmm_dq_no_scale", "q", "q", sub(Q_BMM, "dq = torch.bmm(dscores, k) * s", "dq = torch.bmm(dscores, k)"),
      "the scale forgotten on dq", W_SCALE)
wrong("q_bmm_scale_twice", "q", "k", sub(Q_BMM, "dscores.transpose(1, 2), q) * s", "dscores.transpose(1, 2), q) * s * s"),
      "dk multiplied by the scale twice: 1/head_size instead of 1/sqrt(head_size)",
      ("twice", "scale", "sqrt", "head_size", "square", "factor"))
wrong("q_bmm_dk_not_transposed", "q", "k", sub(Q_BMM, "torch.bmm(dscores.transpose(1, 2), q)", "torch.bmm(dscores, q)"),
      "dk = dscores @ q: dscores not transposed", W_T)
wrong("q_loop_dq_uses_q", "q", "q", sub(Q_LOOP, "dscores[i] @ k[i]", "dscores[i] @ q[i]"),
      "dq built from q itself instead of the other operand k", W_OTHER + ("key",))

# ---- WRONG: v = x @ Wv, k = x @ Wk ---------------------------------------------------
wrong("Wv_flat_transposed", "Wv", "Wv",
      sub(WV_FLAT, "x.reshape(-1, n_embd).T @ dv.reshape(-1, head_size)", "dv.reshape(-1, head_size).T @ x.reshape(-1, n_embd)"),
      "dv^T x: the transpose of dWv (square, so the shapes fit)", W_T)
wrong("Wk_loop_overwritten", "Wk", "Wk", sub(WK_LOOP, "dWk += x[i].T", "dWk = x[i].T"),
      "dWk assigned inside the loop: only the last example is kept", W_LOOP)
wrong("Wk_dx_not_transposed", "Wk", "x", sub(WK_LOOP, "dx += dk @ Wk.T", "dx += dk @ Wk"),
      "dk @ Wk: Wk not transposed (square, so the shapes fit)", W_T)

# ---- WRONG: q = x @ Wq (x's last branch) ---------------------------------------------
wrong("x_bmm_branches_forgotten", "x", "x", sub(X_BMM, "dx = dx + torch.bmm", "dx = torch.bmm"),
      "dx assigned from the query branch alone: the key and value branches are thrown away", W_BRANCH)
wrong("x_loop_key_branch_twice", "x", "x", sub(X_LOOP, "dx[i] += dq[i] @ Wq.T", "dx[i] += dq[i] @ Wq.T + dk[i] @ Wk.T"),
      "the key branch added again: dx already holds it, so it is counted twice",
      ("twice", "branch", "double", "already", "key", "counted"))

# ---- WRONG: x = tok + Cpos -----------------------------------------------------------
wrong("tok_loop_positions_too", "tok", "Cpos",
      sub(TOK_LOOP, "dCpos += dx[i]", "dCpos += dx[i].sum(0)"),
      "each example's gradient summed over the positions too: Cpos has one row per position",
      W_AXIS + ("position",))

# ---- WRONG: tok = C[Xb] --------------------------------------------------------------
wrong("C_loop_assign", "C", "C", sub(C_LOOP, "dC[Xb[i, t]] += dtok[i, t]", "dC[Xb[i, t]] = dtok[i, t]"),
      "= in the loop: a repeated character keeps only its last row", W_REPEAT)
