"""Causal self-attention lesson (attention_pack, made by `pack new` from
tests/packs/forward/slips_attention.py): a second slip corpus, TUNE half.

What it is: rows of backward-pass code as a learner would type them into one step of the lesson.
Every RIGHT row passes the tutor's check; every WRONG row carries one slip that learners really
make with these operations (softmax Jacobian, the 1/sqrt(head_size) scale, the causal mask,
transposes in batched matmuls, broadcast sums, a reused tensor's branches, embedding repeats)
and fails it. Each row was checked with `tutor check --json` looking at "passed" only.

Style: plain code, mostly `@` with `.transpose(-2, -1)` / `.T` on flattened 2-D views, sums with
keepdim, einsum, explicit Python loops over the batch, scatter_add_ / index_add_ and
torch.where / masked_fill for the mask. It was written apart from the diagnosis code, without
reading it: `words` are the writer's own guess at what a specific diagnosis of the slip would say
(any one of them is enough), not copied from the tutor's messages.

RIGHT = {name: (step_id, tensor, code, "")}
WRONG = {name: (step_id, tensor, code, slip, words)}
"""
S = "attention_pack/"

W_SCALE = ("scale", "sqrt", "head_size", "factor", "0.5", "constant")
W_T = ("transpose", "swap", "order", "operand", ".t", "shape")
W_SOFTMAX = ("sum", "row", "subtract", "jacobian", "diagonal", "softmax")
W_MASK = ("mask", "causal", "triangle", "tril", "upper", "lower")
W_BCAST = ("sum", "axis", "axes", "dim", "batch", "broadcast", "shape")
W_REPEAT = ("repeat", "accumulate", "overwrite", "duplicate", "index_add", "add up", "+=")
W_BRANCH = ("branch", "accumulate", "+=", "overwrite", "twice", "reused", "missing")
W_N = ("divide", "mean", "average", "batch", "scale", "factor", "/ n")
W_SIGN = ("sign", "minus", "negative", "flipped", "negated", "opposite")

RIGHT, WRONG = {}, {}


def right(name, step, tensor, code):
    assert name not in RIGHT
    RIGHT[name] = (S + step, tensor, code, "")


def wrong(name, step, tensor, code, slip, words):
    assert name not in WRONG
    assert 4 <= len(words) <= 7 and all(w == w.lower() for w in words), name
    WRONG[name] = (S + step, tensor, code, slip, tuple(words))


# ---- pieces a learner reuses inside one step ---------------------------------------
OUT = ("dout = dlogits @ W.T\n"
       "dW = out.reshape(-1, head_size).T @ dlogits.reshape(-1, vocab_size)\n"
       "db = dlogits.sum((0, 1))\n")
ATT = ("datt = dout @ v.transpose(-2, -1)\n"
       "dv = att.transpose(-2, -1) @ dout\n")
Q = ("ds = dscores * head_size ** -0.5\n"
     "dq = ds @ k\n"
     "dk = ds.transpose(-2, -1) @ q\n")
WV = ("dx = dv @ Wv.T\n"
      "dWv = x.reshape(-1, n_embd).T @ dv.reshape(-1, head_size)\n")
WK = ("dx += dk @ Wk.T\n"
      "dWk = x.reshape(-1, n_embd).T @ dk.reshape(-1, head_size)\n")
X = ("dx += dq @ Wq.T\n"
     "dWq = x.reshape(-1, n_embd).T @ dq.reshape(-1, head_size)\n")
TOK = "dtok = dx.clone()\ndCpos = dx.sum(0)\n"


def sub(base, old, new):
    assert old in base, (old, base)
    return base.replace(old, new)


# ---- RIGHT ---------------------------------------------------------------------------
right("logits_one_hot_3d", "logits", "logits",
      "p = logits.softmax(-1)\n"
      "p = p - F.one_hot(Yb, vocab_size)\n"
      "dlogits = p / (n * block_size)\n")
right("out_einsum", "out", "W",
      "dout = torch.einsum('btv,hv->bth', dlogits, W)\n"
      "dW = torch.einsum('bth,btv->hv', out, dlogits)\n"
      "db = dlogits.sum(0).sum(0)\n")
right("att_transpose_1_2", "att", "v",
      "datt = dout @ v.transpose(1, 2)\n"
      "dv = att.transpose(1, 2) @ dout\n")
right("masked_keepdim_two_terms", "masked", "masked",
      "s = (datt * att).sum(dim=2, keepdim=True)\n"
      "dmasked = att * datt - att * s\n")
right("scores_where", "scores", "scores",
      "keep = torch.tril(torch.ones(block_size, block_size)).bool()\n"
      "dscores = torch.where(keep, dmasked, torch.zeros_like(dmasked))\n")
right("q_scale_sqrt", "q", "k",
      "ds = dscores / math.sqrt(head_size)\n"
      "dq = ds @ k\n"
      "dk = ds.transpose(-2, -1) @ q\n")
right("Wv_view", "Wv", "Wv",
      "dx = dv @ Wv.T\n"
      "dWv = x.view(-1, n_embd).T @ dv.view(-1, head_size)\n")
right("Wk_einsum", "Wk", "Wk",
      "dx += dk @ Wk.transpose(0, 1)\n"
      "dWk = torch.einsum('bti,btj->ij', x, dk)\n")
right("x_loop", "x", "Wq",
      "dx += dq @ Wq.T\n"
      "dWq = torch.zeros_like(Wq)\n"
      "for i in range(n):\n"
      "    dWq += x[i].T @ dq[i]\n")
right("tok_keepdim", "tok", "Cpos",
      "dtok = dx.clone()\n"
      "dCpos = dx.sum(0, keepdim=True).squeeze(0)\n")
right("C_scatter_add", "C", "C",
      "idx = Xb.reshape(-1, 1).expand(-1, n_embd)\n"
      "dC = torch.zeros_like(C).scatter_add_(0, idx, dtok.reshape(-1, n_embd))\n")
right("C_loop", "C", "C",
      "dC = torch.zeros_like(C)\n"
      "for i in range(n):\n"
      "    for t in range(block_size):\n"
      "        dC[Xb[i, t]] += dtok[i, t]\n")

# ---- WRONG ---------------------------------------------------------------------------
# cross-entropy over every position
wrong("logits_only_n", "logits", "logits",
      "dlogits = (F.softmax(logits, -1) - F.one_hot(Yb, vocab_size)) / n\n",
      "divided by the batch size only, not by the n * block_size positions the loss averages",
      ("block_size", "position", "divide", "mean", "average", "scale"))
wrong("logits_sign", "logits", "logits",
      "dlogits = (F.one_hot(Yb, vocab_size) - F.softmax(logits, -1)) / (n * block_size)\n",
      "probabilities and targets subtracted the wrong way round", W_SIGN)
wrong("logits_softmax_dim1", "logits", "logits",
      "dlogits = (F.softmax(logits, 1) - F.one_hot(Yb, vocab_size)) / (n * block_size)\n",
      "softmax taken over the positions axis instead of the vocabulary",
      ("axis", "dim", "softmax", "position", "vocab", "last"))

# logits = out @ W + b
wrong("out_dW_swapped", "out", "W",
      sub(OUT, "dW = out.reshape(-1, head_size).T @ dlogits.reshape(-1, vocab_size)",
          "dW = dlogits.reshape(-1, vocab_size).T @ out.reshape(-1, head_size)"),
      "weight gradient with its operands swapped (dy.T @ x): the transpose of dW", W_T)
wrong("out_db_one_axis", "out", "b", sub(OUT, "db = dlogits.sum((0, 1))", "db = dlogits.sum(0)"),
      "bias gradient summed over the batch but not over the positions", ("sum", "axis", "axes", "dim", "position", "broadcast"))
wrong("out_dW_over_n", "out", "W",
      sub(OUT, "dlogits.reshape(-1, vocab_size)\n", "dlogits.reshape(-1, vocab_size) / n\n"),
      "divided by n again: dlogits already carries the mean", ("twice", "again") + W_N[:5])
wrong("out_dout_no_T", "out", "out", sub(OUT, "dout = dlogits @ W.T", "dout = dlogits @ W"),
      "W not transposed in the input gradient", ("transpose", "w.t", "shape", "operand", "order"))

# out = att @ v
wrong("att_dv_no_transpose", "att", "v", sub(ATT, "dv = att.transpose(-2, -1) @ dout", "dv = att @ dout"),
      "att not transposed in dv: square, so the shapes still fit", ("transpose", "att.t", "square", "swap", "order"))
wrong("att_datt_order", "att", "att", sub(ATT, "datt = dout @ v.transpose(-2, -1)", "datt = v @ dout.transpose(-2, -1)"),
      "operands in the wrong order: the transpose of datt", W_T)
wrong("att_dv_dot_T", "att", "v", sub(ATT, "dv = att.transpose(-2, -1) @ dout", "dv = att.T @ dout"),
      ".T on a 3-D tensor reverses every axis, the batch included",
      ("transpose", ".t", "batch", "last two", "axes", "dims"))

# att = softmax(masked)
wrong("masked_diag_only", "masked", "masked", "dmasked = att * datt\n",
      "only the diagonal of the softmax Jacobian: the row-sum term is missing", W_SOFTMAX)
wrong("masked_sum_dim1", "masked", "masked",
      "dmasked = att * (datt - (att * datt).sum(1, keepdim=True))\n",
      "row sum taken over the query axis (dim 1) instead of the key axis", ("axis", "dim", "sum", "row", "column", "-1"))
wrong("masked_no_keepdim", "masked", "masked",
      "dmasked = att * (datt - (att * datt).sum(-1))\n",
      "keepdim lost: the row sums broadcast along the wrong axis", ("keepdim", "broadcast", "shape", "axis", "sum"))
wrong("masked_log_softmax", "masked", "masked",
      "dmasked = datt - att * datt.sum(-1, keepdim=True)\n",
      "the log-softmax backward used for a softmax", ("log", "log_softmax", "softmax", "formula", "jacobian"))
wrong("masked_unweighted_sum", "masked", "masked",
      "dmasked = att * (datt - datt.sum(-1, keepdim=True))\n",
      "row sum of datt not weighted by att", ("weighted", "att", "sum", "product", "row"))
wrong("masked_unmasked_softmax", "masked", "masked",
      "p = F.softmax(scores, dim=-1)\n"
      "dmasked = p * (datt - (p * datt).sum(-1, keepdim=True))\n",
      "softmax recomputed from the scores before the mask: probabilities at future positions",
      ("mask", "causal", "future", "scores", "masked", "att"))
wrong("masked_input_for_output", "masked", "masked",
      "dmasked = masked * (datt - (masked * datt).sum(-1, keepdim=True))\n",
      "the softmax's input (with -inf) used where its output att belongs",
      ("output", "att", "input", "probabilities", "inf", "nan"))

# masked = scores.masked_fill(tril == 0, -inf)
wrong("scores_mask_inverted", "scores", "scores",
      "dscores = dmasked.masked_fill(torch.tril(torch.ones(block_size, block_size)) == 1, 0)\n",
      "mask inverted: the allowed (past) positions zeroed", W_MASK + ("inverted",))
wrong("scores_triu", "scores", "scores",
      "dscores = dmasked * torch.triu(torch.ones(block_size, block_size))\n",
      "upper triangle kept instead of the lower", W_MASK)
wrong("scores_fill_inf", "scores", "scores",
      "dscores = dmasked.masked_fill(torch.tril(torch.ones(block_size, block_size)) == 0, float('-inf'))\n",
      "the forward's -inf copied into the gradient instead of 0", ("inf", "-inf", "zero", "fill", "mask", "constant"))

# scores = q @ k^T * head_size ** -0.5
wrong("q_no_scale", "q", "q", "dq = dscores @ k\ndk = dscores.transpose(-2, -1) @ q\n",
      "1/sqrt(head_size) forgotten in the backward", W_SCALE)
wrong("q_scale_twice", "q", "q", sub(Q, "dq = ds @ k", "dq = ds @ k * head_size ** -0.5"),
      "scale applied twice to dq", ("twice", "scale", "sqrt", "head_size", "factor"))
wrong("q_sqrt_block_size", "q", "k", sub(Q, "ds = dscores * head_size ** -0.5", "ds = dscores / block_size ** 0.5"),
      "sqrt of the context length instead of the head size", ("block_size", "head_size", "sqrt", "scale", "size"))
wrong("q_scale_inverted", "q", "q", sub(Q, "head_size ** -0.5", "head_size ** 0.5"),
      "multiplied by sqrt(head_size) instead of divided", ("inverse", "divide", "multiply", "scale", "sqrt", "head_size"))
wrong("q_dk_no_transpose", "q", "k", sub(Q, "dk = ds.transpose(-2, -1) @ q", "dk = ds @ q"),
      "ds not transposed in dk: square, so the shapes fit", ("transpose", "swap", "order", "key", "square"))
wrong("q_transposes_swapped", "q", "q", "ds = dscores * head_size ** -0.5\ndq = ds.transpose(-2, -1) @ k\ndk = ds @ q\n",
      "the transpose put on dq's term instead of dk's", ("transpose", "swap", "query", "key", "order"))

# v = x @ Wv  (first branch of x)
wrong("Wv_swapped", "Wv", "Wv",
      sub(WV, "dWv = x.reshape(-1, n_embd).T @ dv.reshape(-1, head_size)",
          "dWv = dv.reshape(-1, head_size).T @ x.reshape(-1, n_embd)"),
      "operands swapped (dv.T @ x): square here, so the transpose of dWv", W_T)
wrong("Wv_mean", "Wv", "Wv",
      sub(WV, "dv.reshape(-1, head_size)\n", "dv.reshape(-1, head_size) / (n * block_size)\n"),
      "divided by the number of rows again", ("twice", "again", "divide", "mean", "average", "scale"))
wrong("Wv_not_summed", "Wv", "Wv", "dx = dv @ Wv.T\ndWv = x.transpose(-2, -1) @ dv\n",
      "batched product not summed over the batch (shape)", W_BCAST)

# k = x @ Wk
wrong("Wk_mean_batch", "Wk", "Wk", "dx += dk @ Wk.T\ndWk = (x.transpose(1, 2) @ dk).mean(0)\n",
      "per-example weight gradients averaged over the batch instead of summed", W_N)

# q = x @ Wq: x graded in full
wrong("x_overwrite", "x", "x", sub(X, "dx += dq @ Wq.T", "dx = dq @ Wq.T"),
      "= instead of +=: the v and k branches of x are lost", W_BRANCH)
wrong("x_k_twice", "x", "x", sub(X, "dx += dq @ Wq.T", "dx += dq @ Wq.T + dk @ Wk.T"),
      "the k branch added again, already added at its own step", W_BRANCH)
wrong("x_no_transpose", "x", "x", sub(X, "dx += dq @ Wq.T", "dx += dq @ Wq"),
      "Wq not transposed: square, so the shapes fit", ("transpose", "wq.t", "square", "swap", "order"))
wrong("x_dWq_swapped", "x", "Wq",
      sub(X, "dWq = x.reshape(-1, n_embd).T @ dq.reshape(-1, head_size)", "dWq = torch.einsum('bti,btj->ij', dq, x)"),
      "einsum indices give dq.T @ x: the transpose of dWq", W_T)

# x = tok + Cpos
wrong("tok_Cpos_not_summed", "tok", "Cpos", "dtok = dx.clone()\ndCpos = dx\n",
      "broadcast position embedding not summed over the batch (shape)", W_BCAST)
wrong("tok_Cpos_mean", "tok", "Cpos", "dtok = dx.clone()\ndCpos = dx.mean(0)\n",
      "mean over the batch instead of sum", ("mean", "sum", "average", "divide", "batch"))
wrong("tok_Cpos_wrong_axis", "tok", "Cpos", "dtok = dx.clone()\ndCpos = dx.sum(1)\n",
      "summed over the positions instead of the batch (shape)", ("sum", "axis", "axes", "dim", "position", "broadcast"))

# tok = C[Xb]
wrong("C_loop_assign", "C", "C",
      "dC = torch.zeros_like(C)\n"
      "for i in range(n):\n"
      "    for t in range(block_size):\n"
      "        dC[Xb[i, t]] = dtok[i, t]\n",
      "= instead of += in the loop: a repeated character keeps only its last gradient", W_REPEAT)
wrong("C_index_copy", "C", "C",
      "dC = torch.zeros_like(C).index_copy_(0, Xb.view(-1), dtok.view(-1, n_embd))\n",
      "index_copy_ overwrites repeated indices instead of adding", ("repeat", "accumulate", "overwrite", "duplicate", "add up", "index_copy"))
wrong("C_scatter_no_add", "C", "C",
      "idx = Xb.reshape(-1, 1).expand(-1, n_embd)\n"
      "dC = torch.zeros_like(C).scatter_(0, idx, dtok.reshape(-1, n_embd))\n",
      "scatter_ instead of scatter_add_: repeats overwrite", ("repeat", "accumulate", "overwrite", "duplicate", "add up", "scatter_add"))
