"""Causal self-attention lesson (attention_pack, made by `pack new` from
tests/packs/forward/slips_attention.py): the twelfth slip corpus, TUNE half (its other half is
tests/attention_slips_holdout8.py).

What it is: rows of backward-pass code as a learner would type them into one step of the lesson.
Every RIGHT row passes the tutor's check; every WRONG row carries one slip that learners really
make with these operations and fails it. The slip families stay away from the ones tune5 ...
tune11 use: a gradient typed where the forward operand belongs, the `d` added (the gradient the
learner has just computed on the line above used as the partner of a product: dout for out in dW,
dW for W in dout, datt for att in dv, dq for q in dk, dx for x in dWv, dWk and dWq, dWq for Wq in
dx); `.T` used to transpose a batched 3-D tensor, which reverses every axis instead of swapping
the last two (out for dW, att for dv, dscores for dk, x for dWk); the softmax Jacobian's leading
factor p dropped, `dP - (P * dP).sum` where `P * (dP - (P * dP).sum)` belongs (at the
cross-entropy's softmax and at the attention's softmax); the derivative of -log p written as -p
instead of -1/p; the attention's 1/sqrt(head_size) scale carried onto the product with the values
(datt, dv), which has none; the target written into the probabilities by overwriting (`scatter_`
with -1) where subtracting (`scatter_add_` of -1) belongs; the target used as a row index alone
(`g[Y] -= 1`), the rows' own index dropped; the cross-entropy's softmax replaced by an elementwise
sigmoid; the output bias's gradient summed over every axis, its own vocabulary axis too, down to a
scalar; the position table's gradient summed over the positions (dim 1) instead of over the batch
(dim 0). The same slip family is put on every step where its operation occurs and the shapes let
it through.

Style: a mix within the file, as different learners would write it: F.linear for the product with
a transposed weight, torch.tensordot, torch.bmm / torch.matmul with .mT, torch.einsum for weight
gradients and row dots, scatter_ / scatter_add_ for the target and the embedding, small `def`
helpers inside a row (ce_backward, matmul_back) returning one or two gradients, and a comparison
with the forward's -inf for the causal mask. It was written apart from the diagnosis code, without
reading it, and each row was checked with `backprop-tutor check --json` looking at "passed" only:
`words` are the writer's own guess at what a specific diagnosis of the slip would say (any one of
them is enough), not copied from the tutor's messages.

RIGHT = {name: (step_id, tensor, code, "")}
WRONG = {name: (step_id, tensor, code, slip, words)}
"""
S = "attention_pack/"

W_D_ADDED = ("gradient", "instead", "operand", "forward", "input", "value")
W_BATCHED_T = ("transpose", ".t", "batch", "axes", "reverses", "mt")
W_P_FACTOR = ("factor", "multiply", "probabilities", "softmax", "jacobian", "missing")
W_LOG = ("log", "derivative", "1/p", "reciprocal", "divide", "probability")
W_SCALE_LEAK = ("scale", "sqrt", "head_size", "values", "factor", "extra")
W_OVERWRITE = ("scatter", "overwrite", "subtract", "target", "minus one", "add")
W_ROW_INDEX = ("index", "row", "target", "arange", "rows", "column")
W_SIGMOID = ("sigmoid", "softmax", "normalise", "probabilities", "row", "sum")
W_SCALAR = ("bias", "sum", "axis", "scalar", "vocabulary", "every")
W_TIME_AXIS = ("sum", "axis", "batch", "position", "dim", "broadcast")

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
# cross-entropy: the one-hot target put in with scatter_add_ of -1 on flattened rows
LOGITS_SCATTER = ("N = n * block_size\n"
                  "g = F.softmax(logits.reshape(N, vocab_size), dim=1)\n"
                  "g.scatter_add_(1, Yb.reshape(N, 1), -torch.ones(N, 1))\n"
                  "dlogits = g.reshape(n, block_size, vocab_size) / N\n")
# cross-entropy: fancy indexing on the flattened rows
LOGITS_INDEX = ("N = n * block_size\n"
                "g = torch.softmax(logits.view(N, vocab_size), -1)\n"
                "g[torch.arange(N), Yb.view(N)] -= 1\n"
                "dlogits = (g / N).view_as(logits)\n")
# cross-entropy: a helper that goes through -log p and the softmax
LOGITS_CHAIN = ("def ce_backward(z, y):\n"
                "    p = z.softmax(-1)\n"
                "    dp = -F.one_hot(y, vocab_size) / (p * y.numel())\n"
                "    return p * (dp - (dp * p).sum(-1, keepdim=True))\n"
                "dlogits = ce_backward(logits, Yb)\n")
# logits = out @ W + b
OUT_LINEAR = ("dout = F.linear(dlogits, W)\n"
              "dW = torch.einsum('btk,btv->kv', out, dlogits)\n"
              "db = dlogits.sum(dim=(0, 1))\n")
OUT_W_FIRST = ("dW = torch.tensordot(out, dlogits, dims=([0, 1], [0, 1]))\n"
               "db = dlogits.sum((0, 1))\n"
               "dout = dlogits @ W.mT\n")
OUT_MATMUL = ("dout = torch.matmul(dlogits, W.T)\n"
              "dW = (out.mT @ dlogits).sum(0)\n"
              "db = dlogits.sum(0).sum(0)\n")
# out = att @ v
ATT_BMM = ("datt = torch.bmm(dout, v.mT)\n"
           "dv = torch.bmm(att.mT, dout)\n")
ATT_HELPER = ("def matmul_back(a, b, g):\n"
              "    return g @ b.transpose(-2, -1), a.transpose(-2, -1) @ g\n"
              "datt, dv = matmul_back(att, v, dout)\n")
# att = softmax(masked)
MASKED_EINSUM = ("inner = torch.einsum('bij,bij->bi', att, datt).unsqueeze(-1)\n"
                 "dmasked = att * (datt - inner)\n")
# the causal mask
SCORES_INF = "dscores = dmasked * (masked != float('-inf'))\n"
# scores = q @ k^T * head_size ** -0.5
Q_MATMUL = ("scale = head_size ** -0.5\n"
            "dq = torch.matmul(dscores, k) * scale\n"
            "dk = torch.matmul(dscores.mT, q) * scale\n")
# v = x @ Wv, k = x @ Wk, q = x @ Wq
WV = ("dx = F.linear(dv, Wv)\n"
      "dWv = torch.einsum('bti,btj->ij', x, dv)\n")
WK = ("dx += dk @ Wk.mT\n"
      "dWk = (x.mT @ dk).sum(0)\n")
XQ_W_FIRST = ("dWq = torch.einsum('bti,btj->ij', x, dq)\n"
              "dx = dx + dq @ Wq.T\n")
XQ = ("dx += torch.matmul(dq, Wq.T)\n"
      "dWq = x.reshape(-1, n_embd).T @ dq.reshape(-1, head_size)\n")
# x = tok + Cpos
TOK = ("dtok = dx.clone()\n"
       "dCpos = dx.sum(0)\n")
# tok = C[Xb]
C_SCATTER = ("rows = Xb.reshape(-1, 1).expand(-1, n_embd)\n"
             "dC = torch.zeros_like(C).scatter_add_(0, rows, dtok.reshape(-1, n_embd))\n")

# ---- RIGHT ---------------------------------------------------------------------------
right("logits_scatter_add_target", "logits", "logits", LOGITS_SCATTER)
right("logits_index_flat_rows", "logits", "logits", LOGITS_INDEX)
right("logits_chain_helper", "logits", "logits", LOGITS_CHAIN)
right("out_linear_einsum", "out", "W", OUT_LINEAR)
right("out_matmul_batched", "out", "W", OUT_MATMUL)
right("att_bmm", "att", "att", ATT_BMM)
right("att_matmul_helper", "att", "v", ATT_HELPER)
right("masked_einsum_row_dot", "masked", "masked", MASKED_EINSUM)
right("scores_compare_neg_inf", "scores", "scores", SCORES_INF)
right("q_matmul_scaled", "q", "k", Q_MATMUL)
right("Wv_linear_einsum", "Wv", "Wv", WV)
right("Wk_batched_matmul", "Wk", "Wk", WK)
right("out_weight_first", "out", "out", OUT_W_FIRST)
right("x_flat_rows", "x", "Wq", XQ)
right("x_weight_first", "x", "x", XQ_W_FIRST)
right("tok_clone_sum", "tok", "Cpos", TOK)
right("C_scatter_add_rows", "C", "C", C_SCATTER)

# ---- WRONG: a gradient where the forward operand belongs (the `d` added) ------------
wrong("out_dW_from_dout", "out", "W",
      sub(OUT_LINEAR, "torch.einsum('btk,btv->kv', out, dlogits)", "torch.einsum('btk,btv->kv', dout, dlogits)"),
      "dW contracts dout, the gradient just computed on the line above, with dlogits: the forward "
      "input out belongs there", W_D_ADDED)
wrong("out_dout_from_dW", "out", "out", sub(OUT_W_FIRST, "dout = dlogits @ W.mT", "dout = dlogits @ dW.mT"),
      "dout = dlogits @ dW^T: the weight's gradient, computed on the first line, used where the "
      "weight W belongs", W_D_ADDED + ("weight",))
wrong("att_dv_from_datt", "att", "v", sub(ATT_BMM, "torch.bmm(att.mT, dout)", "torch.bmm(datt.mT, dout)"),
      "dv = datt^T @ dout: the attention's gradient used where the attention weights att belong",
      W_D_ADDED)
wrong("q_dk_from_dq", "q", "k", sub(Q_MATMUL, "torch.matmul(dscores.mT, q)", "torch.matmul(dscores.mT, dq)"),
      "dk = dscores^T @ dq: the query's gradient, computed just before, used in place of q", W_D_ADDED)
wrong("Wv_dWv_from_dx", "Wv", "Wv", sub(WV, "'bti,btj->ij', x, dv", "'bti,btj->ij', dx, dv"),
      "dWv contracts dx (the branch's gradient of the line above) with dv instead of the input x",
      W_D_ADDED)
wrong("Wk_dWk_from_dx", "Wk", "Wk", sub(WK, "(x.mT @ dk)", "(dx.mT @ dk)"),
      "dWk built from dx, the gradient accumulated into x on the line above, instead of x", W_D_ADDED)
wrong("x_dWq_from_dx", "x", "Wq", sub(XQ, "x.reshape(-1, n_embd).T", "dx.reshape(-1, n_embd).T"),
      "dWq = dx^T @ dq: the accumulated gradient of x used where x itself belongs", W_D_ADDED)
wrong("x_dx_from_dWq", "x", "x", sub(XQ_W_FIRST, "dx = dx + dq @ Wq.T", "dx = dx + dq @ dWq.T"),
      "the query branch of dx sent through dWq, the weight's gradient just computed, instead of Wq",
      W_D_ADDED + ("weight",))

# ---- WRONG: .T on a batched 3-D tensor --------------------------------------------
wrong("out_dW_batched_dot_T", "out", "W", sub(OUT_MATMUL, "(out.mT @ dlogits)", "(out.T @ dlogits)"),
      "out.T on the (n, block_size, head_size) tensor reverses all three axes instead of swapping "
      "the last two (.mT / transpose(1, 2))", W_BATCHED_T)
wrong("att_dv_batched_dot_T", "att", "v", sub(ATT_HELPER, "a.transpose(-2, -1) @ g", "a.T @ g"),
      "att.T reverses every axis of the batched attention matrix, so the batch axis moves last; "
      "only the last two should swap", W_BATCHED_T)
wrong("q_dk_batched_dot_T", "q", "k", sub(Q_MATMUL, "torch.matmul(dscores.mT, q)", "torch.matmul(dscores.T, q)"),
      "dscores.T on a 3-D tensor reverses (batch, query, key) instead of transposing each "
      "example's 8x8 matrix", W_BATCHED_T)
wrong("Wk_dWk_batched_dot_T", "Wk", "Wk", sub(WK, "(x.mT @ dk)", "(x.T @ dk)"),
      "x.T on the (n, block_size, n_embd) input reverses all its axes: each example's matrix "
      "needs only its last two swapped", W_BATCHED_T)

# ---- WRONG: the softmax Jacobian's leading factor p dropped -----------------------
wrong("logits_chain_p_factor_dropped", "logits", "logits",
      sub(LOGITS_CHAIN, "return p * (dp - (dp * p).sum(-1, keepdim=True))",
          "return dp - (dp * p).sum(-1, keepdim=True)"),
      "dp - sum(p * dp): the softmax's backward without the multiplication by p in front", W_P_FACTOR)
wrong("masked_p_factor_dropped", "masked", "masked", sub(MASKED_EINSUM, "att * (datt - inner)", "datt - inner"),
      "datt - rowdot: the attention softmax's backward misses the factor att in front", W_P_FACTOR)

# ---- WRONG: the derivative of -log p written as -p ---------------------------------
wrong("logits_log_derivative_times_p", "logits", "logits",
      sub(LOGITS_CHAIN, "-F.one_hot(y, vocab_size) / (p * y.numel())", "-F.one_hot(y, vocab_size) * p / y.numel()"),
      "d(-log p)/dp taken as -p (multiplied by p) instead of -1/p", W_LOG)

# ---- WRONG: the attention's scale carried onto the product with the values ---------
wrong("att_datt_scaled", "att", "att", sub(ATT_BMM, "torch.bmm(dout, v.mT)", "torch.bmm(dout, v.mT) * head_size ** -0.5"),
      "datt multiplied by 1/sqrt(head_size): the scale belongs to the scores' product, not to att @ v",
      W_SCALE_LEAK)
wrong("att_dv_scaled", "att", "v",
      sub(ATT_HELPER, "datt, dv = matmul_back(att, v, dout)\n",
          "datt, dv = matmul_back(att, v, dout)\ndv = dv / head_size ** 0.5\n"),
      "dv divided by sqrt(head_size) as if the values were scaled too", W_SCALE_LEAK)

# ---- WRONG: the target written into the probabilities --------------------------------
wrong("logits_scatter_overwrites_target", "logits", "logits",
      sub(LOGITS_SCATTER, "g.scatter_add_(1, Yb.reshape(N, 1), -torch.ones(N, 1))", "g.scatter_(1, Yb.reshape(N, 1), -1.0)"),
      "scatter_ overwrites the target's probability with -1 where scatter_add_ subtracts 1 from it "
      "(p - 1)", W_OVERWRITE)
wrong("logits_target_as_row_index", "logits", "logits",
      sub(LOGITS_INDEX, "g[torch.arange(N), Yb.view(N)] -= 1", "g[Yb.view(N)] -= 1"),
      "g[Y] -= 1 indexes whole rows by the target's value: the row index arange(N) is missing, so "
      "rows 0..26 lose 1 in every column", W_ROW_INDEX)
wrong("logits_sigmoid_for_softmax", "logits", "logits",
      sub(LOGITS_INDEX, "torch.softmax(logits.view(N, vocab_size), -1)", "torch.sigmoid(logits.view(N, vocab_size))"),
      "the probabilities taken as an elementwise sigmoid, as in binary cross-entropy: the softmax's "
      "normalisation over the row is missing", W_SIGMOID)

# ---- WRONG: sums over the wrong axes ---------------------------------------------------
wrong("out_db_summed_to_scalar", "out", "b", sub(OUT_LINEAR, "db = dlogits.sum(dim=(0, 1))", "db = dlogits.sum()"),
      "dlogits.sum() sums the vocabulary axis too: db becomes one number instead of one entry per "
      "character", W_SCALAR)
wrong("tok_dCpos_summed_over_positions", "tok", "Cpos", sub(TOK, "dCpos = dx.sum(0)", "dCpos = dx.sum(1)"),
      "dx.sum(1) sums over the positions, leaving one row per example: Cpos is broadcast over the "
      "batch, so its gradient sums dim 0", W_TIME_AXIS)
