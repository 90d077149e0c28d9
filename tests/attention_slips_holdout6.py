"""Causal self-attention lesson (attention_pack, made by `pack new` from
tests/packs/forward/slips_attention.py): a sixth slip corpus, HOLDOUT half (its other half is
tests/attention_slips_tune6.py).

What it is: rows of backward-pass code as a learner would type them into one step of the lesson.
Every RIGHT row passes the tutor's check; every WRONG row carries one slip that learners really
make with these operations (the 1/n of the mean loss forgotten or taken over every entry, a
(features, rows) matrix made by reshaping a transposed tensor instead of permuting it first,
the value gradient or the softmax's probabilities recomputed from the scores before the mask,
square products left untransposed, dK among them, the softmax's row sum taken along the wrong
axis (the 2-D formula's dim=1 on a batched tensor), the causal mask put on the gradient with the
forward's -inf (or a huge negative) fill instead of 0, the 1/sqrt(head_size) scale inverted,
repeated embedding rows written without accumulating) and fails it. The same slip family is put
on every step where its operation occurs.

Style: vectorised tensor code with no Python loops: reshape / permute / transpose / flatten
chains that turn (n, block_size, features) tensors into (features, n * block_size) matrices,
torch.matmul and `@` with broadcasting and `.mT`, a batched matmul of unsqueezed rows for the
softmax's row dot, the causal mask built from a comparison of two aranges and multiplied in,
one-hot rows built from `==` comparisons, and index_put_ with accumulate=True for the
embedding. It was written apart from the diagnosis code, without reading it, and each row was
checked with `backprop-tutor check --json` looking at "passed" only: `words` are the writer's
own guess at what a specific diagnosis of the slip would say (any one of them is enough), not
copied from the tutor's messages.

RIGHT = {name: (step_id, tensor, code, "")}
WRONG = {name: (step_id, tensor, code, slip, words)}
"""
S = "attention_pack/"

W_MEAN = ("mean", "average", "divide", "1/n", "factor", "position")
W_LAYOUT = ("permute", "reshape", "transpose", "order", "layout", "mix")
W_PREMASK = ("mask", "masked", "before", "scores", "att", "causal")
W_T = ("transpose", "swap", "order", "operand", ".mt", "square")
W_ROWSUM = ("row", "sum", "axis", "dim", "keepdim", "softmax")
W_FILL = ("fill", "-inf", "zero", "mask", "infinite", "nan")
W_SCALE = ("scale", "sqrt", "head_size", "inverse", "factor", "0.5")
W_REPEAT = ("repeat", "accumulate", "overwrite", "duplicate", "index_put", "add up")

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
# cross-entropy over every position: the rows flattened, a one-hot from a comparison
LOGITS_ROWS = ("rows = logits.reshape(-1, vocab_size)\n"
               "P = rows.softmax(1)\n"
               "P = P - (Yb.reshape(-1, 1) == torch.arange(vocab_size)).to(P.dtype)\n"
               "dlogits = (P / rows.shape[0]).reshape(logits.shape)\n")
# cross-entropy: log_softmax exponentiated, F.one_hot subtracted
LOGITS_LOGSM = ("dlogits = logits.log_softmax(-1).exp()\n"
                "dlogits = dlogits - F.one_hot(Yb, vocab_size).to(dlogits.dtype)\n"
                "dlogits = dlogits / Yb.numel()\n")
# logits = out @ W + b: (features, rows) matrices by permute + reshape
OUT = ("dout = torch.matmul(dlogits, W.mT)\n"
       "dW = out.permute(2, 0, 1).reshape(head_size, -1) @ dlogits.reshape(-1, vocab_size)\n"
       "db = dlogits.permute(2, 0, 1).reshape(vocab_size, -1).sum(1)\n")
# out = att @ v
ATT = ("datt = torch.matmul(dout, v.mT)\n"
       "dv = torch.matmul(att.mT, dout)\n")
# att = softmax(masked): the row dot as a sum, or as a batched matmul of unsqueezed rows
MASKED_SUM = ("rowdot = (att * datt).sum(-1, keepdim=True)\n"
              "dmasked = att * (datt - rowdot)\n")
MASKED_MATMUL = ("p = att\n"
                 "rowdot = torch.matmul(p.unsqueeze(-2), datt.unsqueeze(-1)).squeeze(-1)\n"
                 "dmasked = p * datt - p * rowdot\n")
# the causal mask: a comparison of two aranges, multiplied in
KEEP = "keep = torch.arange(block_size).unsqueeze(1) >= torch.arange(block_size).unsqueeze(0)\n"
SCORES_MUL = KEEP + "dscores = dmasked * keep\n"
SCORES_FILL = KEEP + "dscores = dmasked.masked_fill(keep.logical_not(), 0.0)\n"
# scores = q @ k^T * head_size ** -0.5
Q = ("s = head_size ** -0.5\n"
     "dq = torch.matmul(dscores, k) * s\n"
     "dk = torch.matmul(dscores.mT, q) * s\n")
Q_MT = ("dq = (k.mT @ dscores.mT).mT * head_size ** -0.5\n"
        "dk = (q.mT @ dscores).mT * head_size ** -0.5\n")
# v = x @ Wv, k = x @ Wk, q = x @ Wq
WV = ("dx = torch.matmul(dv, Wv.mT)\n"
      "dWv = x.permute(2, 0, 1).reshape(n_embd, -1) @ dv.reshape(-1, head_size)\n")
WK = ("dx = dx + torch.matmul(dk, Wk.mT)\n"
      "dWk = x.permute(2, 0, 1).reshape(n_embd, -1) @ dk.flatten(0, 1)\n")
XQ = ("dx = dx + dq @ Wq.mT\n"
      "dWq = x.reshape(-1, n_embd).mT @ dq.reshape(-1, head_size)\n")
# x = tok + Cpos: Cpos broadcast over the batch
TOK = ("dtok = dx * 1.0\n"
       "dCpos = dx.transpose(0, 1).reshape(block_size, -1, n_embd).sum(1)\n")
# tok = C[Xb]
C_PUT = ("dC = torch.zeros_like(C)\n"
         "dC.index_put_((Xb.reshape(-1),), dtok.reshape(-1, n_embd), accumulate=True)\n")
C_EQ = ("sel = (Xb.reshape(-1, 1) == torch.arange(vocab_size)).to(dtok.dtype)\n"
        "dC = sel.mT @ dtok.reshape(-1, n_embd)\n")

# ---- RIGHT ---------------------------------------------------------------------------
right("logits_rows_comparison_onehot", "logits", "logits", LOGITS_ROWS)
right("logits_log_softmax_one_hot", "logits", "logits", LOGITS_LOGSM)
right("out_permute_reshape", "out", "W", OUT)
right("att_matmul_mT", "att", "v", ATT)
right("masked_rowdot_sum", "masked", "masked", MASKED_SUM)
right("masked_rowdot_batched_matmul", "masked", "masked", MASKED_MATMUL)
right("scores_arange_compare_multiply", "scores", "scores", SCORES_MUL)
right("scores_arange_compare_fill_zero", "scores", "scores", SCORES_FILL)
right("q_matmul_scale", "q", "k", Q)
right("q_transposed_products", "q", "q", Q_MT)
right("Wv_permute_reshape", "Wv", "Wv", WV)
right("Wk_permute_flatten", "Wk", "Wk", WK)
right("x_reshape_then_mT", "x", "Wq", XQ)
right("tok_transpose_reshape_sum", "tok", "Cpos", TOK)
right("C_index_put_accumulate", "C", "C", C_PUT)
right("C_comparison_onehot_matmul", "C", "C", C_EQ)

# ---- WRONG: cross-entropy over every position (the mean's 1/n) -----------------------
wrong("logits_rows_no_mean", "logits", "logits", sub(LOGITS_ROWS, "(P / rows.shape[0])", "P"),
      "the 1/n of the mean loss forgotten: the gradient of the summed loss",
      W_MEAN)
wrong("logits_logsm_over_every_entry", "logits", "logits",
      sub(LOGITS_LOGSM, "dlogits / Yb.numel()", "dlogits / logits.numel()"),
      "divided by every entry of logits (positions times vocabulary) instead of the number of positions",
      W_MEAN + ("vocab",))

# ---- WRONG: logits = out @ W + b (reshape of a transposed tensor) --------------------
wrong("out_dW_transpose_then_reshape", "out", "W",
      sub(OUT, "out.permute(2, 0, 1).reshape(head_size, -1)", "out.mT.reshape(head_size, -1)"),
      "out.mT reshaped to (head_size, -1): the batch is mixed into the features, a permute was needed",
      W_LAYOUT)
wrong("out_db_reshape_without_permute", "out", "b",
      sub(OUT, "dlogits.permute(2, 0, 1).reshape(vocab_size, -1).sum(1)", "dlogits.reshape(vocab_size, -1).sum(1)"),
      "dlogits reshaped to (vocab_size, -1) without moving the vocabulary first: each row sums a mix of classes",
      W_LAYOUT + ("sum",))

# ---- WRONG: out = att @ v ------------------------------------------------------------
wrong("att_dv_probs_before_mask", "att", "v",
      sub(ATT, "torch.matmul(att.mT, dout)", "torch.matmul(F.softmax(scores, dim=-1).mT, dout)"),
      "dv built from a softmax of the unmasked scores instead of att: the future weights come back",
      W_PREMASK)
wrong("att_dv_not_transposed", "att", "v", sub(ATT, "torch.matmul(att.mT, dout)", "torch.matmul(att, dout)"),
      "dv = att @ dout: att not transposed (square, so the shapes fit)", W_T)

# ---- WRONG: att = softmax(masked) ----------------------------------------------------
wrong("masked_rowdot_wrong_axis", "masked", "masked",
      sub(MASKED_SUM, "(att * datt).sum(-1, keepdim=True)", "(att * datt).sum(1, keepdim=True)"),
      "the 2-D formula's dim=1 kept: on (n, T, T) it sums down the columns instead of along each row",
      W_ROWSUM + ("column",))
wrong("masked_probs_before_mask", "masked", "masked",
      sub(MASKED_MATMUL, "p = att\n", "p = F.softmax(scores, dim=-1)\n"),
      "the softmax's probabilities recomputed from the unmasked scores instead of att",
      W_PREMASK + ("probabilities",))

# ---- WRONG: the causal mask (the gradient's fill) ------------------------------------
wrong("scores_fill_neg_inf", "scores", "scores",
      sub(SCORES_FILL, "masked_fill(keep.logical_not(), 0.0)", "masked_fill(keep.logical_not(), float(\"-inf\"))"),
      "the forward's -inf copied into the gradient: masked entries get no gradient, so the fill is 0",
      W_FILL)
wrong("scores_fill_huge_negative", "scores", "scores",
      sub(SCORES_MUL, "dscores = dmasked * keep", "dscores = torch.where(keep, dmasked, torch.tensor(-1e9))"),
      "a huge negative number put where the mask is: the gradient of a masked entry is 0",
      W_FILL + ("negative",))
wrong("scores_additive_mask", "scores", "scores",
      sub(SCORES_MUL, "dscores = dmasked * keep",
          "dscores = dmasked + torch.zeros(block_size, block_size).masked_fill(~keep, float(\"-inf\"))"),
      "the forward's additive -inf mask added to the gradient instead of zeroing the masked entries",
      W_FILL + ("add",))

# ---- WRONG: scores = q @ k^T * head_size ** -0.5 -------------------------------------
wrong("q_dk_not_transposed", "q", "k", sub(Q, "torch.matmul(dscores.mT, q)", "torch.matmul(dscores, q)"),
      "dk = dscores @ q: dscores needs its transpose (square, so the shapes fit)", W_T + ("key",))
wrong("q_mT_dk_transpose_lost", "q", "k", sub(Q_MT, "(q.mT @ dscores).mT", "(q.mT @ dscores.mT).mT"),
      "q^T dscores^T transposed back: that is dscores @ q, the transpose of dscores is missing",
      W_T + ("key",))
wrong("q_dq_scale_inverted", "q", "q", sub(Q, "dq = torch.matmul(dscores, k) * s", "dq = torch.matmul(dscores, k) / s"),
      "dq divided by the scale: multiplied by sqrt(head_size) instead of 1/sqrt(head_size)", W_SCALE)
wrong("q_mT_dk_scale_inverted", "q", "k",
      sub(Q_MT, "(q.mT @ dscores).mT * head_size ** -0.5", "(q.mT @ dscores).mT * head_size ** 0.5"),
      "dk multiplied by sqrt(head_size): the scale's exponent has lost its minus sign", W_SCALE)

# ---- WRONG: v = x @ Wv, k = x @ Wk, q = x @ Wq ---------------------------------------
wrong("Wv_transpose_then_reshape", "Wv", "Wv",
      sub(WV, "x.permute(2, 0, 1).reshape(n_embd, -1)", "x.transpose(1, 2).reshape(n_embd, -1)"),
      "x.transpose(1, 2) reshaped to (n_embd, -1): batch and features mixed, a permute was needed",
      W_LAYOUT)
wrong("Wv_dx_not_transposed", "Wv", "x", sub(WV, "torch.matmul(dv, Wv.mT)", "torch.matmul(dv, Wv)"),
      "dv @ Wv: Wv not transposed (square, so the shapes fit)", W_T)
wrong("Wk_transpose_then_reshape", "Wk", "Wk",
      sub(WK, "x.permute(2, 0, 1).reshape(n_embd, -1)", "x.transpose(1, 2).reshape(n_embd, -1)"),
      "x.transpose(1, 2) reshaped to (n_embd, -1): batch and features mixed, a permute was needed",
      W_LAYOUT)
wrong("Wk_dx_not_transposed", "Wk", "x", sub(WK, "torch.matmul(dk, Wk.mT)", "torch.matmul(dk, Wk)"),
      "dk @ Wk: Wk not transposed (square, so the shapes fit)", W_T)
wrong("x_dWq_transpose_then_reshape", "x", "Wq",
      sub(XQ, "x.reshape(-1, n_embd).mT", "x.mT.reshape(n_embd, -1)"),
      "x transposed before the reshape: (n_embd, -1) then mixes the batch into the features",
      W_LAYOUT)
wrong("x_dx_not_transposed", "x", "x", sub(XQ, "dq @ Wq.mT", "dq @ Wq"),
      "dq @ Wq: Wq not transposed (square, so the shapes fit)", W_T)

# ---- WRONG: x = tok + Cpos -----------------------------------------------------------
wrong("tok_dCpos_reshape_without_transpose", "tok", "Cpos",
      sub(TOK, "dx.transpose(0, 1).reshape(block_size, -1, n_embd)", "dx.reshape(block_size, -1, n_embd)"),
      "dx reshaped to (block_size, -1, n_embd) without moving the positions first: the sum mixes positions",
      W_LAYOUT + ("position",))

# ---- WRONG: tok = C[Xb] --------------------------------------------------------------
wrong("C_index_put_no_accumulate", "C", "C", sub(C_PUT, ", accumulate=True)", ")"),
      "index_put_ without accumulate=True: a repeated character keeps one row instead of the sum",
      W_REPEAT)
wrong("C_fancy_index_plus_equals", "C", "C",
      "dC = torch.zeros_like(C)\n"
      "dC[Xb.reshape(-1)] += dtok.reshape(-1, n_embd)\n",
      "dC[Xb] += ...: advanced-index += does not add up repeated indices", W_REPEAT)
