"""Causal self-attention lesson (attention_pack, made by `pack new` from
tests/packs/forward/slips_attention.py): a third slip corpus, HELD-OUT half.

What it is: rows of backward-pass code as a learner would type them into one step of the lesson.
Every RIGHT row passes the tutor's check; every WRONG row carries one slip that learners really
make with these operations (the 1/sqrt(head_size) scale, operands swapped or left untransposed in
batched products, the softmax's row-sum term, the causal mask, sums for broadcast tensors, a
reused tensor's branches, signs, repeated embedding rows) and fails it. The same slip family is
put on several steps where its operation occurs; rows differ from the tune half's, in their code
and mostly in which slip sits on which step.

Style: `@` with `.mT` / `.T` on flattened 2-D views, view/reshape, torch.matmul, masked_fill and
boolean indexing for the mask, keepdim sums, loops over the positions, index_add_ and one-hot
products for the embedding. It was written apart from the diagnosis code, without reading it, and
each row was checked with `backprop-tutor check --json` looking at "passed" only: `words` are the
writer's own guess at what a specific diagnosis of the slip would say (any one of them is
enough), not copied from the tutor's messages.

RIGHT = {name: (step_id, tensor, code, "")}
WRONG = {name: (step_id, tensor, code, slip, words)}
"""
S = "attention_pack/"

W_SCALE = ("scale", "sqrt", "head_size", "factor", "constant", "twice")
W_T = ("transpose", "swap", "order", "operand", "swapped", ".mt")
W_SOFTMAX = ("row", "sum", "softmax", "jacobian", "subtract", "term")
W_MASK = ("mask", "causal", "tril", "triangle", "diagonal", "future")
W_AXIS = ("sum", "axis", "axes", "dim", "batch", "position")
W_MEAN = ("mean", "average", "divide", "batch", "factor", "/ n")
W_SIGN = ("sign", "minus", "negative", "flipped", "opposite", "negated")
W_BRANCH = ("branch", "accumulate", "+=", "overwrite", "reused", "add")
W_REPEAT = ("repeat", "accumulate", "overwrite", "duplicate", "add up", "index_add")

RIGHT, WRONG = {}, {}


def right(name, step, tensor, code):
    assert name not in RIGHT
    RIGHT[name] = (S + step, tensor, code, "")


def wrong(name, step, tensor, code, slip, words):
    assert name not in WRONG
    assert 4 <= len(words) <= 7 and all(w == w.lower() for w in words), name
    WRONG[name] = (S + step, tensor, code, slip, tuple(words))


# ---- RIGHT ---------------------------------------------------------------------------
right("logits_flat_index_minus_one", "logits", "logits",
      "p = F.softmax(logits.view(-1, vocab_size), 1)\n"
      "p[torch.arange(p.shape[0]), Yb.view(-1)] -= 1\n"
      "dlogits = (p / p.shape[0]).view(logits.shape)\n")
right("out_flat_views", "out", "out",
      "dout = (dlogits.view(-1, vocab_size) @ W.T).view(out.shape)\n"
      "dW = out.view(-1, head_size).T @ dlogits.view(-1, vocab_size)\n"
      "db = dlogits.sum(dim=(0, 1))\n")
right("out_matmul_mT", "out", "W",
      "dout = torch.matmul(dlogits, W.mT)\n"
      "dW = (out.mT @ dlogits).sum(0)\n"
      "db = dlogits.sum(0).sum(0)\n")
right("att_matmul_mT", "att", "att",
      "datt = dout @ v.mT\n"
      "dv = att.mT @ dout\n")
right("att_loop_positions", "att", "v",
      "datt = torch.zeros_like(att)\n"
      "dv = torch.zeros_like(v)\n"
      "for t in range(block_size):\n"
      "    datt[:, t] = (dout[:, t:t + 1] @ v.transpose(1, 2)).squeeze(1)\n"
      "    dv += att[:, t, :, None] * dout[:, t, None, :]\n")
right("masked_keepdim", "masked", "masked",
      "dmasked = att * (datt - (att * datt).sum(dim=-1, keepdim=True))\n")
right("masked_batched_rowdot", "masked", "masked",
      "rowdot = att.unsqueeze(-2) @ datt.unsqueeze(-1)\n"
      "dmasked = att * datt - att * rowdot.squeeze(-1)\n")
right("scores_masked_fill", "scores", "scores",
      "dscores = dmasked.masked_fill(torch.tril(torch.ones(block_size, block_size)) == 0, 0.0)\n")
right("scores_bool_index", "scores", "scores",
      "future = torch.ones(block_size, block_size).triu(1).bool()\n"
      "dscores = dmasked.clone()\n"
      "dscores[:, future] = 0\n")
right("q_matmul_mT", "q", "q",
      "scale = 1 / head_size ** 0.5\n"
      "dq = (dscores @ k) * scale\n"
      "dk = (dscores.mT @ q) * scale\n")
right("q_rsqrt_bmm", "q", "k",
      "s = torch.rsqrt(torch.tensor(float(head_size)))\n"
      "ds = dscores * s\n"
      "dq = torch.bmm(ds, k)\n"
      "dk = torch.bmm(ds.transpose(1, 2), q)\n")
right("Wv_flat", "Wv", "Wv",
      "dx = dv @ Wv.T\n"
      "dWv = x.view(-1, n_embd).T @ dv.view(-1, head_size)\n")
right("Wk_matmul_mT", "Wk", "Wk",
      "dx = dx + dk @ Wk.mT\n"
      "dWk = (x.mT @ dk).sum(0)\n")
right("x_flat_reshape", "x", "x",
      "dx += (dq.reshape(-1, head_size) @ Wq.T).reshape(x.shape)\n"
      "dWq = x.reshape(-1, n_embd).T @ dq.reshape(-1, head_size)\n")
right("tok_loop_batch", "tok", "Cpos",
      "dtok = dx\n"
      "dCpos = torch.zeros_like(Cpos)\n"
      "for i in range(dx.shape[0]):\n"
      "    dCpos += dx[i]\n")
right("C_index_add", "C", "C",
      "dC = torch.zeros_like(C).index_add_(0, Xb.view(-1), dtok.view(-1, n_embd))\n")
right("C_one_hot_matmul", "C", "C",
      "oh = F.one_hot(Xb, vocab_size).float().view(-1, vocab_size)\n"
      "dC = oh.T @ dtok.view(-1, n_embd)\n")

# ---- WRONG: cross-entropy ------------------------------------------------------------
wrong("logits_batch_only", "logits", "logits",
      "p = F.softmax(logits, -1)\n"
      "p -= F.one_hot(Yb, vocab_size)\n"
      "dlogits = p / n\n",
      "divided by the batch size only, not by all n * block_size positions averaged",
      ("block_size", "position", "divide", "mean", "average", "scale"))
wrong("logits_log_probs", "logits", "logits",
      "dlogits = (F.log_softmax(logits, -1) - F.one_hot(Yb, vocab_size)) / (n * block_size)\n",
      "log-probabilities used where the probabilities belong",
      ("log", "exp", "probabilit", "softmax", "log_softmax", "instead"))
wrong("logits_plus_one", "logits", "logits",
      "p = F.softmax(logits.view(-1, vocab_size), 1)\n"
      "p[torch.arange(p.shape[0]), Yb.view(-1)] += 1\n"
      "dlogits = (p / p.shape[0]).view(logits.shape)\n",
      "one added at the target instead of subtracted", W_SIGN)

# ---- WRONG: logits = out @ W + b -----------------------------------------------------
wrong("out_dW_batch_mean", "out", "W",
      "dout = torch.matmul(dlogits, W.mT)\n"
      "dW = (out.mT @ dlogits).mean(0)\n"
      "db = dlogits.sum((0, 1))\n",
      "the per-example dW averaged over the batch instead of summed", W_MEAN)
wrong("out_db_first_position", "out", "b",
      "dout = dlogits @ W.T\n"
      "dW = out.view(-1, head_size).T @ dlogits.view(-1, vocab_size)\n"
      "db = dlogits[:, 0].sum(0)\n",
      "db summed over the batch but only at the first position", W_AXIS)
wrong("out_W_not_transposed", "out", "out",
      "dout = dlogits @ W\n"
      "dW = out.view(-1, head_size).T @ dlogits.view(-1, vocab_size)\n"
      "db = dlogits.sum((0, 1))\n",
      "dout = dlogits @ W: W not transposed (shapes do not fit)", W_T)

# ---- WRONG: out = att @ v ------------------------------------------------------------
wrong("att_datt_uses_out", "att", "att",
      "datt = dout @ out.mT\n"
      "dv = att.mT @ dout\n",
      "datt built from the output out instead of the other operand v",
      ("operand", "other", "v", "instead", "wrong tensor", "output"))
wrong("att_dv_swapped_order", "att", "v",
      "datt = dout @ v.mT\n"
      "dv = dout.mT @ att\n",
      "dv's factors in the wrong order: dout^T @ att", W_T)

# ---- WRONG: att = softmax(masked) ----------------------------------------------------
wrong("masked_row_term_without_att", "masked", "masked",
      "dmasked = att * datt - (att * datt).sum(dim=-1, keepdim=True)\n",
      "the row-sum term not multiplied by att", ("att", "factor", "row", "softmax", "term", "jacobian"))
wrong("masked_rowsum_dim1", "masked", "masked",
      "dmasked = att * (datt - (att * datt).sum(dim=1, keepdim=True))\n",
      "the softmax row sum taken over dim 1 (columns of positions) instead of the last dim",
      ("axis", "dim", "row", "column", "last", "softmax"))
wrong("masked_unnormalised_exp", "masked", "masked",
      "e = torch.exp(masked)\n"
      "dmasked = e * (datt - (e * datt).sum(-1, keepdim=True))\n",
      "the local slope taken at exp(masked), not at the softmax output att",
      ("normalis", "normaliz", "att", "exp", "output", "softmax"))
wrong("masked_att_squared", "masked", "masked",
      "dmasked = att * att * (datt - (att * datt).sum(-1, keepdim=True))\n",
      "att multiplied in twice: the slope squared", ("squared", "twice", "att", "extra", "factor", "once"))
wrong("masked_sign_of_bracket", "masked", "masked",
      "dmasked = att * ((att * datt).sum(-1, keepdim=True) - datt)\n",
      "the bracket subtracted the wrong way round", W_SIGN)

# ---- WRONG: the causal mask ----------------------------------------------------------
wrong("scores_mask_drops_diagonal", "scores", "scores",
      "dscores = dmasked * torch.tril(torch.ones(block_size, block_size), diagonal=-1)\n",
      "tril(-1): the diagonal, which the forward keeps, is masked too", W_MASK)
wrong("scores_one_minus_tril", "scores", "scores",
      "dscores = dmasked * (1 - torch.tril(torch.ones(block_size, block_size)))\n",
      "the mask inverted: kept entries zeroed", W_MASK)
wrong("scores_masks_the_forward", "scores", "scores",
      "dscores = scores.masked_fill(torch.tril(torch.ones(block_size, block_size)) == 0, 0.0)\n",
      "the mask applied to the forward scores instead of to the gradient dmasked",
      ("dmasked", "gradient", "forward", "instead", "mask", "upstream"))

# ---- WRONG: scores = q @ k^T * head_size ** -0.5 -------------------------------------
wrong("q_scale_twice", "q", "q",
      "ds = dscores * head_size ** -0.5\n"
      "dq = (ds @ k) * head_size ** -0.5\n"
      "dk = (ds.mT @ q) * head_size ** -0.5\n",
      "the scale applied twice: divided by head_size", W_SCALE)
wrong("q_scale_dk_only", "q", "q",
      "dq = dscores @ k\n"
      "dk = dscores.mT @ q / head_size ** 0.5\n",
      "dq misses the 1/sqrt(head_size) scale", W_SCALE)
wrong("q_dq_dscores_transposed", "q", "q",
      "s = head_size ** -0.5\n"
      "dq = dscores.mT @ k * s\n"
      "dk = dscores.mT @ q * s\n",
      "dq = dscores^T @ k: a transpose where none belongs", W_T)
wrong("q_dq_dk_swapped", "q", "k",
      "s = 1 / math.sqrt(head_size)\n"
      "dq = dscores.mT @ q * s\n"
      "dk = dscores @ k * s\n",
      "dq and dk swapped", ("swap", "swapped", "dq", "dk", "query", "key", "operand"))

# ---- WRONG: v = x @ Wv, k = x @ Wk ---------------------------------------------------
wrong("Wv_uses_v_as_input", "Wv", "Wv",
      "dx = dv @ Wv.T\n"
      "dWv = v.view(-1, head_size).T @ dv.view(-1, head_size)\n",
      "the output v used where the input x belongs",
      ("input", "output", "operand", "x", "instead", "wrong tensor"))
wrong("Wv_first_example", "Wv", "Wv",
      "dx = dv @ Wv.T\n"
      "dWv = x[0].T @ dv[0]\n",
      "dWv from one example: no sum over the batch", W_AXIS)
wrong("Wk_dWk_transposed", "Wk", "Wk",
      "dx = dx + dk @ Wk.mT\n"
      "dWk = dk.reshape(-1, head_size).T @ x.reshape(-1, n_embd)\n",
      "dWk comes out transposed (dk^T x instead of x^T dk)", W_T)
wrong("Wk_divided_by_n", "Wk", "Wk",
      "dx = dx + dk @ Wk.mT\n"
      "dWk = x.reshape(-1, n_embd).T @ dk.reshape(-1, head_size) / n\n",
      "dWk divided by the batch size", W_MEAN)

# ---- WRONG: q = x @ Wq (x's last branch) ---------------------------------------------
wrong("x_assign_not_add", "x", "x",
      "dx = (dq.reshape(-1, head_size) @ Wq.T).reshape(x.shape)\n"
      "dWq = x.reshape(-1, n_embd).T @ dq.reshape(-1, head_size)\n",
      "dx assigned the query branch, dropping the branches already there", W_BRANCH)
wrong("x_minus_equals", "x", "x",
      "dx -= dq @ Wq.T\n"
      "dWq = x.reshape(-1, n_embd).T @ dq.reshape(-1, head_size)\n",
      "the query branch subtracted instead of added", W_SIGN)
wrong("x_uses_Wk", "x", "x",
      "dx += dq @ Wk.T\n"
      "dWq = x.reshape(-1, n_embd).T @ dq.reshape(-1, head_size)\n",
      "the key weights Wk used in the query branch instead of Wq",
      ("wq", "wk", "weight", "instead", "branch", "query"))
wrong("x_dWq_transposed", "x", "Wq",
      "dx += dq @ Wq.T\n"
      "dWq = dq.reshape(-1, head_size).T @ x.reshape(-1, n_embd)\n",
      "dWq comes out transposed", W_T)

# ---- WRONG: x = tok + Cpos -----------------------------------------------------------
wrong("tok_loop_overwrites", "tok", "Cpos",
      "dtok = dx\n"
      "dCpos = torch.zeros_like(Cpos)\n"
      "for i in range(dx.shape[0]):\n"
      "    dCpos = dx[i]\n",
      "the loop over the batch overwrites dCpos instead of adding",
      ("accumulate", "overwrite", "+=", "sum", "batch", "add"))
wrong("tok_gradient_halved", "tok", "tok",
      "dtok = dx / 2\n"
      "dCpos = dx.sum(0) / 2\n",
      "the sum's gradient split in half between its two addends",
      ("half", "split", "divide", "factor", "addition", "copy"))

# ---- WRONG: tok = C[Xb] --------------------------------------------------------------
wrong("C_fancy_assign", "C", "C",
      "dC = torch.zeros_like(C)\n"
      "dC[Xb] = dtok\n",
      "advanced-index assignment: repeated characters overwrite", W_REPEAT)
wrong("C_fancy_plus_equals", "C", "C",
      "dC = torch.zeros_like(C)\n"
      "dC[Xb.view(-1)] += dtok.view(-1, n_embd)\n",
      "+= with advanced indexing does not add up repeated indices", W_REPEAT)
