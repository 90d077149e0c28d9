"""Causal self-attention lesson (attention_pack, made by `pack new` from
tests/packs/forward/slips_attention.py): a seventh slip corpus, TUNE half (its other half is
tests/attention_slips_holdout7.py).

What it is: rows of backward-pass code as a learner would type them into one step of the lesson.
Every RIGHT row passes the tutor's check; every WRONG row carries one slip that learners really
make with these operations and fails it. The slip families lean away from the ones tune4 / tune5
use most: the cross-entropy's softmax left without its denominator (exp only), the batch mean
taken a second time on a weight gradient, a missing transpose on every square product where the
shapes let it through (att for dv, dscores for dk, Wv / Wk / Wq for dx) and a weight gradient's
operands swapped on every x @ W (dWv, dWk, dWq come out transposed), the attention recomputed
from scores without the causal mask (dv, the softmax's backward), the softmax's backward without
the subtraction of the row sum, with the "row" sum taken down the columns, or with the row sums
laid along the wrong axis by unsqueeze(1) instead of keepdim, the causal mask built with triu
instead of tril and torch.where with its two branches swapped, the 1/sqrt(head_size) scale
applied twice (on dq, on dk) or inverted, dscores transposed for dq / left untransposed for dk,
x's other branches dropped by `=` where `+=` belongs (at Wk and at x), the broadcast Cpos
averaged instead of summed and `dC[Xb] += ...`, whose fancy-index add keeps one copy of a
repeated character. The same slip family is put on every step where its operation occurs.

Style: every backward written line by line mirroring the forward, one named intermediate per
line with d_<something> names of the writer's own (d_probs, d_rowsum, d_scaled, d_kT,
d_Wv_each, ...), the final gradient under the lecture's name; plain `@` products with `.mT`,
per-example weight gradients summed over the batch on their own line, torch.where for the causal
mask and the target, scatter_ for the one-hot, occasional in-place accumulation (`+=`,
index_put_ with accumulate=True). No loops, no einsum, no helper functions. It was written
apart from the diagnosis code, without reading it, and each row was checked with
`backprop-tutor check --json` looking at "passed" only: `words` are the writer's own guess at
what a specific diagnosis of the slip would say (any one of them is enough), not copied from the
tutor's messages.

RIGHT = {name: (step_id, tensor, code, "")}
WRONG = {name: (step_id, tensor, code, slip, words)}
"""
S = "attention_pack/"

W_NORM = ("softmax", "normalise", "exp", "denominator", "sum", "probabilities")
W_MEAN = ("mean", "average", "divide", "batch", "twice", "factor")
W_T = ("transpose", "swap", "order", "operand", "swapped", ".mt")
W_UNMASKED = ("mask", "causal", "unmasked", "recomputed", "softmax", "future")
W_ROWSUM = ("row", "sum", "softmax", "subtract", "jacobian", "term")
W_ROWAXIS = ("row", "sum", "axis", "dim", "keepdim", "column")
W_MASK = ("mask", "causal", "tril", "triangle", "future", "where")
W_SCALE = ("scale", "sqrt", "head_size", "factor", "twice", "0.5")
W_BRANCH = ("branch", "accumulate", "+=", "overwrite", "reused", "add")
W_BROADCAST = ("sum", "mean", "broadcast", "batch", "average", "cpos")
W_REPEAT = ("repeat", "accumulate", "index_put", "duplicate", "fancy", "add up")

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
# loss = cross_entropy(logits, Yb) over every position: the one-hot by scatter_
LOGITS = ("d_probs = logits.softmax(dim=-1)\n"
          "d_onehot = torch.zeros_like(d_probs).scatter_(-1, Yb.unsqueeze(-1), 1.0)\n"
          "d_diff = d_probs - d_onehot\n"
          "d_count = Yb.numel()\n"
          "dlogits = d_diff / d_count\n")
# the same with logsumexp and torch.where at the target
LOGITS_WHERE = ("d_logz = logits.logsumexp(dim=-1, keepdim=True)\n"
                "d_probs = torch.exp(logits - d_logz)\n"
                "d_is_target = torch.arange(vocab_size) == Yb.unsqueeze(-1)\n"
                "d_shifted = torch.where(d_is_target, d_probs - 1.0, d_probs)\n"
                "dlogits = d_shifted / (n * block_size)\n")
# logits = out @ W + b: per-example weight gradients, then the batch sum
OUT = ("dout = dlogits @ W.mT\n"
       "d_W_each = out.mT @ dlogits\n"
       "dW = d_W_each.sum(dim=0)\n"
       "d_b_each = dlogits.sum(dim=1)\n"
       "db = d_b_each.sum(dim=0)\n")
# out = att @ v
ATT = ("v_T = v.mT\n"
       "datt = dout @ v_T\n"
       "att_T = att.mT\n"
       "dv = att_T @ dout\n")
# att = softmax(masked): p * (g - rowsum(p * g))
MASKED = ("d_weighted = att * datt\n"
          "d_rowsum = d_weighted.sum(dim=-1, keepdim=True)\n"
          "d_centered = datt - d_rowsum\n"
          "dmasked = att * d_centered\n")
# the causal mask, mirrored line by line, torch.where picking zeros where the forward put -inf
SCORES = ("d_lower = torch.tril(torch.ones(block_size, block_size))\n"
          "d_blocked = d_lower == 0\n"
          "dscores = torch.where(d_blocked, torch.zeros_like(dmasked), dmasked)\n")
# scores = q @ k^T * head_size ** -0.5: the scale first, k^T kept as its own tensor
Q = ("d_scaled = dscores * head_size ** -0.5\n"
     "k_T = k.mT\n"
     "dq = d_scaled @ k_T.mT\n"
     "d_kT = q.mT @ d_scaled\n"
     "dk = d_kT.mT\n")
# v = x @ Wv (x's first branch)
WV = ("dx = dv @ Wv.mT\n"
      "d_Wv_each = x.mT @ dv\n"
      "dWv = d_Wv_each.sum(dim=0)\n")
# k = x @ Wk (x's second branch)
WK = ("dx += dk @ Wk.mT\n"
      "d_Wk_each = x.mT @ dk\n"
      "dWk = d_Wk_each.sum(dim=0)\n")
# q = x @ Wq (x's last branch)
XQ = ("dx += dq @ Wq.mT\n"
      "d_Wq_each = x.mT @ dq\n"
      "dWq = d_Wq_each.sum(dim=0)\n")
# x = tok + Cpos
TOK = ("dtok = dx.clone()\n"
       "dCpos = dx.sum(dim=0)\n")
# tok = C[Xb]: index_put_ with accumulate=True
C_PUT = ("dC = torch.zeros_like(C)\n"
         "dC.index_put_((Xb,), dtok, accumulate=True)\n")

# ---- RIGHT ---------------------------------------------------------------------------
right("logits_scatter_onehot", "logits", "logits", LOGITS)
right("logits_logsumexp_where_target", "logits", "logits", LOGITS_WHERE)
right("out_per_example_then_batch_sum", "out", "W", OUT)
right("att_named_transposes", "att", "v", ATT)
right("masked_rowsum_keepdim", "masked", "masked", MASKED)
right("scores_where_blocked_zero", "scores", "scores", SCORES)
right("q_scale_first_kT_named", "q", "k", Q)
right("Wv_per_example_sum", "Wv", "Wv", WV)
right("Wk_plus_equals", "Wk", "Wk", WK)
right("x_plus_equals", "x", "x", XQ)
right("tok_clone_batch_sum", "tok", "Cpos", TOK)
right("C_index_put_accumulate", "C", "C", C_PUT)

# ---- WRONG: cross-entropy over every position ----------------------------------------
wrong("logits_exp_without_denominator", "logits", "logits",
      sub(LOGITS, "d_probs = logits.softmax(dim=-1)", "d_probs = logits.exp()"),
      "exp(logits) used as the probabilities: the softmax's denominator (the row sum) is forgotten",
      W_NORM)
wrong("logits_divided_by_batch_only", "logits", "logits", sub(LOGITS, "d_count = Yb.numel()", "d_count = Yb.shape[0]"),
      "divided by n only: the loss averages over all n * block_size positions",
      ("mean", "divide", "position", "block_size", "average", "count"))

# ---- WRONG: logits = out @ W + b -----------------------------------------------------
wrong("out_dW_batch_mean_again", "out", "W", sub(OUT, "dW = d_W_each.sum(dim=0)", "dW = d_W_each.mean(dim=0)"),
      "the per-example weight gradients averaged over the batch: dlogits already carries the mean, so it is divided twice",
      W_MEAN)

# ---- WRONG: out = att @ v ------------------------------------------------------------
wrong("att_dv_att_not_transposed", "att", "v", sub(ATT, "dv = att_T @ dout", "dv = att @ dout"),
      "dv = att @ dout: att not transposed (it is square, so the shapes fit)", W_T)
wrong("att_dv_attention_recomputed_unmasked", "att", "v",
      sub(ATT, "att_T = att.mT", "att_T = scores.softmax(dim=-1).mT"),
      "dv built from the attention recomputed from scores without the causal mask", W_UNMASKED)

# ---- WRONG: att = softmax(masked) ----------------------------------------------------
wrong("masked_row_sum_not_subtracted", "masked", "masked", sub(MASKED, "d_centered = datt - d_rowsum", "d_centered = datt"),
      "the subtraction of the row sum left out: only the diagonal of the softmax's Jacobian", W_ROWSUM)
wrong("masked_row_sum_down_columns", "masked", "masked",
      sub(MASKED, "d_weighted.sum(dim=-1, keepdim=True)", "d_weighted.sum(dim=-2, keepdim=True)"),
      "the row sum taken down the columns (dim=-2) instead of along each row", W_ROWAXIS)
wrong("masked_row_sum_unsqueezed_wrong_axis", "masked", "masked",
      sub(MASKED, "d_weighted.sum(dim=-1, keepdim=True)", "d_weighted.sum(dim=-1).unsqueeze(1)"),
      "the row sums unsqueezed at dim 1 instead of kept at -1: row t's sum is subtracted in column t",
      W_ROWAXIS + ("unsqueeze",))
wrong("masked_probs_recomputed_unmasked", "masked", "masked",
      "d_probs = scores.softmax(dim=-1)\n"
      "d_weighted = d_probs * datt\n"
      "d_rowsum = d_weighted.sum(dim=-1, keepdim=True)\n"
      "d_centered = datt - d_rowsum\n"
      "dmasked = d_probs * d_centered\n",
      "the softmax's probabilities recomputed from scores without the causal mask", W_UNMASKED)

# ---- WRONG: the causal mask ----------------------------------------------------------
wrong("scores_triu_instead_of_tril", "scores", "scores", sub(SCORES, "torch.tril(", "torch.triu("),
      "the mask built with triu: the future is kept and the past (below the diagonal) is zeroed", W_MASK + ("triu",))
wrong("scores_where_branches_swapped", "scores", "scores",
      sub(SCORES, "torch.where(d_blocked, torch.zeros_like(dmasked), dmasked)", "torch.where(d_blocked, dmasked, torch.zeros_like(dmasked))"),
      "torch.where's two branches swapped: the gradient is kept only where the forward blocked it", W_MASK + ("swapped",))

# ---- WRONG: scores = q @ k^T * head_size ** -0.5 -------------------------------------
wrong("q_dq_scale_twice", "q", "q", sub(Q, "dq = d_scaled @ k_T.mT", "dq = d_scaled @ k_T.mT * head_size ** -0.5"),
      "dq scaled again although d_scaled already carries 1/sqrt(head_size): the scale applied twice", W_SCALE)
wrong("q_dk_scale_twice", "q", "k", sub(Q, "dk = d_kT.mT", "dk = d_kT.mT * head_size ** -0.5"),
      "dk scaled again although d_scaled already carries 1/sqrt(head_size): the scale applied twice", W_SCALE)
wrong("q_scale_inverted", "q", "q", sub(Q, "head_size ** -0.5", "head_size ** 0.5"),
      "multiplied by sqrt(head_size) instead of divided by it: the exponent's sign lost",
      ("scale", "sqrt", "head_size", "divide", "inverse", "exponent"))
wrong("q_dq_dscores_transposed", "q", "q", sub(Q, "dq = d_scaled @ k_T.mT", "dq = d_scaled.mT @ k_T.mT"),
      "dscores transposed for dq, where it enters as it is (square, so the shapes fit)", W_T)
wrong("q_dk_dscores_not_transposed", "q", "k", sub(Q, "d_kT = q.mT @ d_scaled\ndk = d_kT.mT", "dk = d_scaled @ q"),
      "dk = dscores @ q: the transpose of dscores forgotten (square, so the shapes fit)", W_T)

# ---- WRONG: v = x @ Wv, k = x @ Wk, q = x @ Wq ---------------------------------------
wrong("Wv_dx_Wv_not_transposed", "Wv", "x", sub(WV, "dv @ Wv.mT", "dv @ Wv"),
      "dx = dv @ Wv: Wv not transposed (square, so the shapes fit)", W_T)
wrong("Wv_dWv_operands_swapped", "Wv", "Wv", sub(WV, "x.mT @ dv", "dv.mT @ x"),
      "dv^T @ x: the operands swapped, so dWv comes out transposed", W_T)
wrong("Wk_dx_Wk_not_transposed", "Wk", "x", sub(WK, "dk @ Wk.mT", "dk @ Wk"),
      "dx += dk @ Wk: Wk not transposed (square, so the shapes fit)", W_T)
wrong("Wk_dWk_operands_swapped", "Wk", "Wk", sub(WK, "x.mT @ dk", "dk.mT @ x"),
      "dk^T @ x: the operands swapped, so dWk comes out transposed", W_T)
wrong("Wk_value_branch_dropped", "Wk", "x", sub(WK, "dx += dk @ Wk.mT", "dx = dk @ Wk.mT"),
      "dx assigned from the key branch: the value branch it already held is thrown away", W_BRANCH)
wrong("x_dx_Wq_not_transposed", "x", "x", sub(XQ, "dq @ Wq.mT", "dq @ Wq"),
      "dx += dq @ Wq: Wq not transposed (square, so the shapes fit)", W_T)
wrong("x_dWq_operands_swapped", "x", "Wq", sub(XQ, "x.mT @ dq", "dq.mT @ x"),
      "dq^T @ x: the operands swapped, so dWq comes out transposed", W_T)
wrong("x_other_branches_dropped", "x", "x", sub(XQ, "dx += dq @ Wq.mT", "dx = dq @ Wq.mT"),
      "dx assigned from the query branch: the key and value branches are thrown away", W_BRANCH)

# ---- WRONG: x = tok + Cpos -----------------------------------------------------------
wrong("tok_dCpos_batch_mean", "tok", "Cpos", sub(TOK, "dCpos = dx.sum(dim=0)", "dCpos = dx.mean(dim=0)"),
      "Cpos is broadcast over the batch: its gradient averaged over the batch instead of summed", W_BROADCAST)

# ---- WRONG: tok = C[Xb] --------------------------------------------------------------
wrong("C_fancy_index_plus_equals", "C", "C", "dC = torch.zeros_like(C)\ndC[Xb] += dtok\n",
      "dC[Xb] += dtok: the fancy-index add writes each repeated character once instead of summing its rows",
      W_REPEAT)
