"""Causal self-attention lesson (attention_pack, made by `pack new` from
tests/packs/forward/slips_attention.py): a fourth slip corpus, HOLDOUT half (its other half is
tests/attention_slips_tune4.py).

What it is: rows of backward-pass code as a learner would type them into one step of the lesson.
Every RIGHT row passes the tutor's check; every WRONG row carries one slip that learners really
make with these operations (the 1/sqrt(head_size) scale, operands swapped or left untransposed in
batched products, the softmax's row-sum term, the causal mask, sums for broadcast tensors, a
reused tensor's branches, signs, the loss's mean, repeated embedding rows) and fails it. The same
slip family is put on every step where its operation occurs.

Style: einsum with other letters (z for the batch, q/k for query and key positions, h for the
head), torch.stack over per-example products, a loop over the query rows, torch.mm on flattened
views with .t(), a Python sum over a generator, torch.linalg.vecdot for the softmax's row term,
torch.where with triu masks, scatter_ to build the targets and put_ / a loop over the vocabulary
for the embedding. It was written apart from the diagnosis code, without reading it, and each row
was checked with `backprop-tutor check --json` looking at "passed" only: `words` are the writer's
own guess at what a specific diagnosis of the slip would say (any one of them is enough), not
copied from the tutor's messages.

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
LOGITS = ("p = F.log_softmax(logits, -1).exp()\n"
          "target = torch.zeros_like(p).scatter_(-1, Yb.unsqueeze(-1), 1.0)\n"
          "dlogits = (p - target) / (n * block_size)\n")
OUT = ("dout = torch.stack([g @ W.t() for g in dlogits])\n"
       "dW = torch.mm(out.flatten(0, 1).t(), dlogits.flatten(0, 1))\n"
       "db = torch.einsum('ntv->v', dlogits)\n")
ATT_EIN = ("datt = torch.einsum('zqh,zkh->zqk', dout, v)\n"
           "dv = torch.einsum('zqk,zqh->zkh', att, dout)\n")
ATT_STACK = ("datt = torch.stack([g @ vv.t() for g, vv in zip(dout, v)])\n"
             "dv = torch.stack([a.t() @ g for a, g in zip(att, dout)])\n")
MASKED_ROWS = ("dmasked = torch.empty_like(att)\n"
               "for i in range(block_size):\n"
               "    a, g = att[:, i], datt[:, i]\n"
               "    dmasked[:, i] = a * (g - (a * g).sum(1, keepdim=True))\n")
MASKED_VEC = ("s = torch.linalg.vecdot(att, datt).unsqueeze(-1)\n"
              "dmasked = att * (datt - s)\n")
FUTURE = "future = torch.ones(block_size, block_size).triu(1).bool()\n"
SCORES = FUTURE + "dscores = torch.where(future, 0.0, dmasked)\n"
Q_EIN = ("c = 1.0 / math.sqrt(head_size)\n"
         "dq = c * torch.einsum('zqk,zkh->zqh', dscores, k)\n"
         "dk = c * torch.einsum('zqk,zqh->zkh', dscores, q)\n")
Q_STACK = ("dq = torch.stack([s @ kk for s, kk in zip(dscores, k)]) * head_size ** -0.5\n"
           "dk = torch.stack([s.t() @ qq for s, qq in zip(dscores, q)]) * head_size ** -0.5\n")
WV = ("dx = torch.mm(dv.flatten(0, 1), Wv.t()).view_as(x)\n"
      "dWv = torch.mm(x.flatten(0, 1).t(), dv.flatten(0, 1))\n")
WK = ("dx = dx + dk.matmul(Wk.t())\n"
      "dWk = sum(xi.t() @ gi for xi, gi in zip(x, dk))\n")
XQ = ("dx = dx + (dq.unsqueeze(-2) * Wq).sum(-1)\n"
      "dWq = torch.einsum('zte,zth->eh', x, dq)\n")
TOK = ("dtok = dx + 0\n"
       "dCpos = torch.stack([dx[:, t].sum(0) for t in range(block_size)])\n")
C_LOOP = ("dC = torch.zeros_like(C)\n"
          "for c in range(vocab_size):\n"
          "    dC[c] = dtok[Xb == c].sum(0)\n")
C_PUT = ("dC = torch.zeros_like(C)\n"
         "where = Xb.flatten().unsqueeze(1) * n_embd + torch.arange(n_embd)\n"
         "dC.put_(where, dtok.flatten(0, 1), accumulate=True)\n")

# ---- RIGHT ---------------------------------------------------------------------------
right("logits_scatter_targets", "logits", "logits", LOGITS)
right("out_stack_mm", "out", "out", OUT)
right("att_einsum_zqk", "att", "att", ATT_EIN)
right("att_stack_zip", "att", "v", ATT_STACK)
right("masked_query_row_loop", "masked", "masked", MASKED_ROWS)
right("masked_vecdot", "masked", "masked", MASKED_VEC)
right("scores_where_triu", "scores", "scores", SCORES)
right("q_einsum_constant", "q", "q", Q_EIN)
right("q_stack_zip", "q", "k", Q_STACK)
right("Wv_mm_flat", "Wv", "Wv", WV)
right("Wk_generator_sum", "Wk", "Wk", WK)
right("x_broadcast_rows", "x", "x", XQ)
right("tok_stack_positions", "tok", "Cpos", TOK)
right("C_vocab_loop", "C", "C", C_LOOP)
right("C_put_accumulate", "C", "C", C_PUT)

# ---- WRONG: cross-entropy over every position ----------------------------------------
wrong("logits_no_mean", "logits", "logits", sub(LOGITS, " / (n * block_size)", ""),
      "the mean over the n * block_size positions not divided out",
      ("divide", "mean", "average", "position", "block_size", "scale"))
wrong("logits_target_minus_p", "logits", "logits", sub(LOGITS, "(p - target)", "(target - p)"),
      "targets minus probabilities: the sign is flipped", W_SIGN)
wrong("logits_mean_over_vocab_too", "logits", "logits",
      sub(LOGITS, "/ (n * block_size)", "/ (n * block_size * vocab_size)"),
      "divided by the vocabulary size as well, as if the loss averaged every logit",
      ("divide", "mean", "average", "vocab", "scale", "factor"))

# ---- WRONG: logits = out @ W + b -----------------------------------------------------
wrong("out_db_keeps_positions", "out", "b", sub(OUT, "'ntv->v'", "'ntv->tv'"),
      "the bias summed over the batch but not over the positions it was broadcast along",
      W_AXIS + ("position",))
wrong("out_dW_over_n", "out", "W", sub(OUT, "dlogits.flatten(0, 1))\n", "dlogits.flatten(0, 1)) / n\n"),
      "dW divided by n again: dlogits already carries the mean", W_MEAN + ("again",))
wrong("out_dW_operands_swapped", "out", "W",
      sub(OUT, "torch.mm(out.flatten(0, 1).t(), dlogits.flatten(0, 1))",
          "torch.mm(dlogits.flatten(0, 1).t(), out.flatten(0, 1))"),
      "dW = dlogits^T @ out: operands swapped, the transpose of dW", W_T)

# ---- WRONG: out = att @ v ------------------------------------------------------------
wrong("att_einsum_dv_not_transposed", "att", "v", sub(ATT_EIN, "'zqk,zqh->zkh', att", "'zqk,zkh->zqh', att"),
      "dv = att @ dout: att not transposed (square, so the shapes fit)", W_T)
wrong("att_einsum_datt_key_query", "att", "att", sub(ATT_EIN, "'zqh,zkh->zqk'", "'zqh,zkh->zkq'"),
      "query and key letters swapped in the output: datt transposed", W_T)
wrong("att_stack_datt_tril", "att", "att", sub(ATT_STACK, "[g @ vv.t() for", "[(g @ vv.t()).tril() for"),
      "the causal mask applied to datt: att's gradient is full, the mask belongs two steps later",
      W_MASK + ("early",))
wrong("att_einsum_dv_sums_keys", "att", "v", sub(ATT_EIN, "'zqk,zqh->zkh', att", "'zqk,zkh->zkh', att"),
      "dv summed over the query letter of att only, the wrong axis of the product",
      ("axis", "dim", "sum", "query", "key", "transpose"))

# ---- WRONG: att = softmax(masked) ----------------------------------------------------
wrong("masked_rows_no_term", "masked", "masked", sub(MASKED_ROWS, "a * (g - (a * g).sum(1, keepdim=True))", "a * g"),
      "each row's softmax backward without the row-sum term", W_SOFTMAX)
wrong("masked_rows_sum_over_batch", "masked", "masked", sub(MASKED_ROWS, ".sum(1, keepdim=True)", ".sum(0, keepdim=True)"),
      "in the row loop the dot product sums over the batch instead of the keys",
      ("axis", "dim", "row", "batch", "sum", "softmax"))
wrong("masked_vecdot_no_weight", "masked", "masked", sub(MASKED_VEC, "att * (datt - s)", "att * datt - s"),
      "the row term subtracted without the probabilities' weight att",
      ("weighted", "att *", "row", "softmax", "jacobian", "term"))
wrong("masked_vecdot_ones", "masked", "masked",
      sub(MASKED_VEC, "torch.linalg.vecdot(att, datt)", "torch.linalg.vecdot(torch.ones_like(att), datt)"),
      "the row term is the plain sum of datt, not weighted by att",
      ("weighted", "att *", "row", "softmax", "jacobian", "term"))

# ---- WRONG: the causal mask ----------------------------------------------------------
wrong("scores_where_branches_swapped", "scores", "scores",
      sub(SCORES, "torch.where(future, 0.0, dmasked)", "torch.where(future, dmasked, 0.0)"),
      "torch.where's branches swapped: only the future keeps its gradient", W_MASK)
wrong("scores_mask_transposed", "scores", "scores", sub(SCORES, "torch.where(future,", "torch.where(future.t(),"),
      "the mask transposed: the past zeroed instead of the future", W_MASK + ("transpose",))
wrong("scores_tril_below_diagonal", "scores", "scores",
      "keep = torch.ones(block_size, block_size).tril(-1).bool()\n"
      "dscores = torch.where(keep, dmasked, 0.0)\n",
      "tril(-1) drops the diagonal: each position's own score loses its gradient",
      W_MASK + ("diagonal",))

# ---- WRONG: scores = q @ k^T * head_size ** -0.5 -------------------------------------
wrong("q_einsum_constant_dropped", "q", "q", sub(sub(Q_EIN, "dq = c * ", "dq = "), "dk = c * ", "dk = "),
      "the 1/sqrt(head_size) scale computed but left off both gradients", W_SCALE)
wrong("q_stack_dk_unscaled", "q", "k", sub(Q_STACK, "zip(dscores, q)]) * head_size ** -0.5", "zip(dscores, q)])"),
      "the scale forgotten on dk", W_SCALE)
wrong("q_constant_is_sqrt", "q", "q", sub(Q_EIN, "c = 1.0 / math.sqrt(head_size)", "c = math.sqrt(head_size)"),
      "multiplied by sqrt(head_size) instead of divided", W_SCALE + ("inverse",))
wrong("q_constant_full_head_size", "q", "k", sub(Q_EIN, "c = 1.0 / math.sqrt(head_size)", "c = 1.0 / head_size"),
      "divided by head_size: the scale applied twice instead of once",
      ("twice", "scale", "sqrt", "head_size", "square", "factor"))
wrong("q_einsum_dq_transposed", "q", "q", sub(Q_EIN, "'zqk,zkh->zqh', dscores, k", "'zkq,zkh->zqh', dscores, k"),
      "dq = dscores^T @ k: the transpose belongs to dk's product", W_T)
wrong("q_stack_dk_not_transposed", "q", "k", sub(Q_STACK, "s.t() @ qq", "s @ qq"),
      "dk = dscores @ q: dscores not transposed (square, so the shapes fit)", W_T)

# ---- WRONG: v = x @ Wv, k = x @ Wk ---------------------------------------------------
wrong("Wv_mm_dW_transposed", "Wv", "Wv",
      sub(WV, "torch.mm(x.flatten(0, 1).t(), dv.flatten(0, 1))", "torch.mm(dv.flatten(0, 1).t(), x.flatten(0, 1))"),
      "dWv = dv^T x: operands swapped, the transpose of dWv", W_T)
wrong("Wv_mm_flatten_time_major", "Wv", "Wv", sub(WV, "x.flatten(0, 1).t()", "x.transpose(0, 1).flatten(0, 1).t()"),
      "x flattened time-major and dv batch-major: the rows of the product don't line up",
      ("order", "transpose", "reshape", "flatten", "align", "match"))
wrong("Wv_mm_dx_negated", "Wv", "x", sub(WV, "dx = torch.mm(", "dx = -torch.mm("),
      "the value branch of dx negated", W_SIGN)
wrong("Wk_generator_uses_dq", "Wk", "Wk", sub(WK, "zip(x, dk)", "zip(x, dq)"),
      "dWk built from the query's gradient dq instead of dk", ("dq", "dk", "query", "key", "instead", "wrong tensor"))
wrong("Wk_generator_over_n", "Wk", "Wk", sub(WK, "zip(x, dk))\n", "zip(x, dk)) / n\n"),
      "the per-example gradients averaged over the batch instead of summed", W_MEAN)
wrong("Wk_Wk_not_transposed", "Wk", "x", sub(WK, "dk.matmul(Wk.t())", "dk.matmul(Wk)"),
      "dk @ Wk: Wk not transposed (square, so the shapes fit)", W_T)

# ---- WRONG: q = x @ Wq (x's last branch) ---------------------------------------------
wrong("x_broadcast_assigned", "x", "x", sub(XQ, "dx = dx + (dq", "dx = (dq"),
      "dx replaced by the query branch: the value and key branches are lost", W_BRANCH)
wrong("x_broadcast_Wq_transposed", "x", "x", sub(XQ, "* Wq).sum(-1)", "* Wq.t()).sum(-1)"),
      "the broadcast product uses Wq^T: dx gets dq @ Wq", W_T)
wrong("x_branch_from_dk", "x", "x", sub(XQ, "(dq.unsqueeze(-2) * Wq)", "(dk.unsqueeze(-2) * Wq)"),
      "the last branch of dx built from dk instead of dq", ("dk", "dq", "query", "key", "branch", "instead"))

# ---- WRONG: x = tok + Cpos -----------------------------------------------------------
wrong("tok_stack_mean", "tok", "Cpos", sub(TOK, "dx[:, t].sum(0)", "dx[:, t].mean(0)"),
      "each position's row of dCpos averaged over the batch instead of summed", W_MEAN)
wrong("tok_dCpos_not_summed", "tok", "Cpos", "dtok = dx + 0\ndCpos = dx + 0\n",
      "Cpos was broadcast along the batch, but its gradient is not summed over it", W_AXIS)

# ---- WRONG: tok = C[Xb] --------------------------------------------------------------
wrong("C_put_no_accumulate", "C", "C", sub(C_PUT, "accumulate=True", "accumulate=False"),
      "put_ without accumulate: a repeated character's rows overwrite each other", W_REPEAT + ("put_",))
wrong("C_vocab_loop_mean", "C", "C",
      sub(C_LOOP, "dC[c] = dtok[Xb == c].sum(0)", "dC[c] = dtok[Xb == c].sum(0) / max(1, int((Xb == c).sum()))"),
      "a repeated character's gradient averaged over its uses instead of summed",
      ("repeat", "accumulate", "sum", "average", "mean", "count"))
