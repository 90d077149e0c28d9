"""Causal self-attention lesson (attention_pack, made by `pack new` from
tests/packs/forward/slips_attention.py): the seventh slip corpus, HOLDOUT half (its other half is
tests/attention_slips_tune7.py).

What it is: rows of backward-pass code as a learner would type them into one step of the lesson.
Every RIGHT row passes the tutor's check; every WRONG row carries one slip that learners really
make with these operations and fails it. The slip families lean away from the ones tune4 / tune5 /
tune6 use most: the cross-entropy's gradient taken with respect to the probabilities (-1/p at the
target) instead of the logits, the softmax left unnormalised (exp without the row sum), one
subtracted at the predicted class (the argmax) instead of the target, the loss's 1/N divided a
second time into a weight gradient, the gradient of a sum split in half between its two addends,
a 3-D tensor transposed with .mT and then reshaped to 2-D so its features and its batch rows get
scrambled (every weight gradient and the embedding's one-hot product), the attention's time axes
swapped or the value gradient contracted over the wrong time axis in a broadcast product, the
softmax's backward with the attention weights squared (p p^T read as p**2) or its row dot summed
over the columns, the causal mask applied after the scale (the scale pulled into the mask's step)
or taken from the sign of the masked scores, the scale omitted from dk only or inverted on dq, a
weight left untransposed in each input-gradient branch (v, k, q), the earlier branches of x
counted twice by `dx += dx + ...` (k and q branches) and repeated characters averaged instead of
summed in the embedding. The same slip family is put on every step where its operation occurs.

Style: compact functional code: small lambdas and local `def` helpers, chained one-line
expressions and tuple assignments, torch.where with boolean masks, `.mT` / `.swapaxes` instead of
`.T`, keepdim reductions, broadcast products with unsqueeze, flatten(0, 1) for the rows of a
linear layer, a boolean one-hot product for the embedding. It was written apart from the
diagnosis code, without reading it, and each row was checked with `backprop-tutor check --json`
looking at "passed" only: `words` are the writer's own guess at what a specific diagnosis of the
slip would say (any one of them is enough), not copied from the tutor's messages.

RIGHT = {name: (step_id, tensor, code, "")}
WRONG = {name: (step_id, tensor, code, slip, words)}
"""
S = "attention_pack/"

W_PROB = ("probability", "softmax", "logits", "chain", "1/p", "log")
W_NORM = ("normalise", "normalize", "softmax", "sum", "exp", "denominator")
W_TARGET = ("target", "label", "argmax", "prediction", "yb", "one-hot")
W_MEAN = ("mean", "average", "divide", "twice", "1/n", "batch")
W_SPLIT = ("half", "split", "sum", "add", "copy", "both")
W_SCRAMBLE = ("reshape", "transpose", "permute", "layout", "scrambled", "rows", "flatten")
W_TIME = ("axis", "time", "transpose", "contract", "sum", "position")
W_SOFTMAX = ("softmax", "jacobian", "row", "outer", "square", "diagonal")
W_ROWDOT = ("row", "axis", "column", "sum", "softmax", "dim")
W_MASK = ("mask", "causal", "tril", "scale", "order", "where")
W_SCALE = ("scale", "sqrt", "head_size", "factor", "0.5", "constant")
W_T = ("transpose", ".mt", "weight", "order", "swap", "operand")
W_TWICE = ("twice", "double", "branch", "already", "accumulate", "+=", "counted")
W_REPEAT = ("repeat", "sum", "average", "mean", "accumulate", "duplicate")

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
# cross-entropy over every position: a stable softmax lambda, a boolean target mask
LOGITS = ("sm = lambda z: (e := (z - z.amax(-1, keepdim=True)).exp()) / e.sum(-1, keepdim=True)\n"
          "hit = Yb.unsqueeze(-1) == torch.arange(vocab_size)\n"
          "dlogits = (sm(logits) - hit.float()) / Yb.numel()\n")
# cross-entropy: torch.where picks p - 1 at the target, softmax chained on the tensor
LOGITS_WHERE = ("p = logits.softmax(-1)\n"
                "dlogits = torch.where(F.one_hot(Yb, vocab_size).bool(), p - 1, p).div(n * block_size)\n")
# logits = out @ W + b: the rows of the batch flattened by a lambda
OUT = ("rows = lambda t: t.flatten(0, 1)\n"
       "dout = dlogits @ W.mT\n"
       "dW = rows(out).mT @ rows(dlogits)\n"
       "db = dlogits.sum((0, 1))\n")
# out = att @ v: broadcast products summed over the contracted axis
ATT_BCAST = ("pair = lambda a, c: a.unsqueeze(2) * c.unsqueeze(1)\n"
             "datt = pair(dout, v).sum(-1)\n"
             "dv = (att.unsqueeze(-1) * dout.unsqueeze(2)).sum(1)\n")
# att = softmax(masked): a row-dot lambda with keepdim
MASKED = ("rowdot = lambda p, g: (p * g).sum(-1, keepdim=True)\n"
          "dmasked = att * (datt - rowdot(att, datt))\n")
# the causal mask as a boolean tril and torch.where
SCORES = ("keep = torch.ones(block_size, block_size, dtype=torch.bool).tril()\n"
          "dscores = torch.where(keep, dmasked, 0.0)\n")
# scores = q @ k^T * head_size ** -0.5: one tuple assignment
Q = ("s = head_size ** -0.5\n"
     "dq, dk = dscores @ k * s, dscores.mT @ q * s\n")
Q_DEF = ("def scaled_back(g, a, c, s=head_size ** -0.5):\n"
         "    return s * (g @ c), s * (g.swapaxes(-2, -1) @ a)\n"
         "dq, dk = scaled_back(dscores, q, k)\n")
# v = x @ Wv
WV = ("rows = lambda t: t.flatten(0, 1)\n"
      "dx = dv @ Wv.mT\n"
      "dWv = rows(x).mT @ rows(dv)\n")
# k = x @ Wk
WK = ("dx += dk @ Wk.mT\n"
      "dWk = (x.mT @ dk).sum(0)\n")
# q = x @ Wq
XQ = ("rows = lambda t: t.flatten(0, 1)\n"
      "dx = dx + dq @ Wq.mT\n"
      "dWq = rows(x).mT @ rows(dq)\n")
# x = tok + Cpos
TOK = "dtok, dCpos = dx, dx.sum(0)\n"
# tok = C[Xb]
C_ONEHOT = ("oh = (Xb.unsqueeze(-1) == torch.arange(vocab_size)).float()\n"
            "dC = oh.flatten(0, 1).mT @ dtok.flatten(0, 1)\n")

# ---- RIGHT ---------------------------------------------------------------------------
right("logits_lambda_walrus_softmax", "logits", "logits", LOGITS)
right("logits_where_one_hot", "logits", "logits", LOGITS_WHERE)
right("out_rows_lambda", "out", "W", OUT)
right("att_broadcast_sums", "att", "att", ATT_BCAST)
right("masked_rowdot_lambda", "masked", "masked", MASKED)
right("scores_where_bool_tril", "scores", "scores", SCORES)
# the softmax gives the future entries exactly zero, so att == 0 marks them
right("scores_masked_fill_att_zero", "scores", "scores", "dscores = dmasked.masked_fill(att == 0, 0.0)\n")
right("q_tuple_scale", "q", "k", Q)
right("q_def_swapaxes", "q", "q", Q_DEF)
right("Wv_rows_lambda", "Wv", "Wv", WV)
right("Wk_batched_sum", "Wk", "Wk", WK)
right("x_rows_lambda", "x", "x", XQ)
right("tok_tuple", "tok", "Cpos", TOK)
right("C_bool_one_hot", "C", "C", C_ONEHOT)

# ---- WRONG: cross-entropy over every position ----------------------------------------
wrong("logits_gradient_of_probs", "logits", "logits",
      sub(LOGITS, "dlogits = (sm(logits) - hit.float()) / Yb.numel()",
          "dlogits = torch.where(hit, -1 / sm(logits), 0.0) / Yb.numel()"),
      "-1/p at the target: the gradient of -log p with respect to the probabilities, the softmax's own backward skipped",
      W_PROB)
wrong("logits_softmax_unnormalised", "logits", "logits",
      sub(LOGITS, "sm = lambda z: (e := (z - z.amax(-1, keepdim=True)).exp()) / e.sum(-1, keepdim=True)",
          "sm = lambda z: (z - z.amax(-1, keepdim=True)).exp()"),
      "exp(z - max) used as the probabilities: the division by the row sum forgotten", W_NORM)
wrong("logits_one_at_prediction", "logits", "logits",
      sub(LOGITS_WHERE, "F.one_hot(Yb, vocab_size).bool()", "F.one_hot(logits.argmax(-1), vocab_size).bool()"),
      "one subtracted at the predicted class (argmax of logits) instead of the target Yb", W_TARGET)

# ---- WRONG: logits = out @ W + b -----------------------------------------------------
wrong("out_dW_mean_twice", "out", "W", sub(OUT, "rows(out).mT @ rows(dlogits)", "rows(out).mT @ rows(dlogits) / (n * block_size)"),
      "dW divided by n * block_size again: dlogits already carries the loss's mean", W_MEAN)
wrong("out_split_in_half", "out", "b",
      sub(OUT, "rows = lambda t: t.flatten(0, 1)\n", "rows = lambda t: t.flatten(0, 1)\ndlogits = dlogits / 2\n"),
      "the gradient of the sum out @ W + b split in half between its two addends: each addend gets all of it",
      W_SPLIT)
wrong("out_dW_mT_reshape", "out", "W", sub(OUT, "rows(out).mT @ rows(dlogits)", "out.mT.reshape(head_size, -1) @ rows(dlogits)"),
      "out.mT reshaped to (head_size, -1): the batch is folded into the features, rows no longer pair with dlogits",
      W_SCRAMBLE)

# ---- WRONG: out = att @ v ------------------------------------------------------------
wrong("att_bcast_dv_wrong_time_axis", "att", "v", sub(ATT_BCAST, "dout.unsqueeze(2)).sum(1)", "dout.unsqueeze(2)).sum(2)"),
      "dv contracted over the key axis s instead of the query axis t (so it comes out as dout)", W_TIME)
wrong("att_bcast_datt_time_axes_swapped", "att", "att", sub(ATT_BCAST, "pair(dout, v)", "pair(v, dout)"),
      "datt[t, s] built as v[t] . dout[s]: query and key time axes swapped, datt transposed", W_TIME)

# ---- WRONG: att = softmax(masked) ----------------------------------------------------
wrong("masked_weights_squared", "masked", "masked", "dmasked = att * datt - att ** 2 * datt\n",
      "diag(p) - p p^T applied as p * g - p**2 * g: the outer product squared entrywise, the row's other entries lost",
      W_SOFTMAX)
wrong("masked_rowdot_over_columns", "masked", "masked", sub(MASKED, "sum(-1, keepdim=True)", "sum(-2, keepdim=True)"),
      "the row dot summed over dim -2 (down the columns) instead of along each row", W_ROWDOT)

# ---- WRONG: the causal mask ----------------------------------------------------------
wrong("scores_mask_after_scale", "scores", "scores", sub(SCORES, "torch.where(keep, dmasked, 0.0)", "torch.where(keep, dmasked * head_size ** -0.5, 0.0)"),
      "the scale applied to the gradient and then masked at this step: the scale belongs to the product's step",
      W_MASK + ("sqrt",))
wrong("scores_mask_from_sign", "scores", "scores", "dscores = torch.where(masked > 0, dmasked, 0.0)\n",
      "the mask taken as masked > 0, like a ReLU: negative scores that were kept lose their gradient",
      ("mask", "causal", "sign", "negative", "tril", "relu"))

# ---- WRONG: scores = q @ k^T * head_size ** -0.5 -------------------------------------
wrong("q_dk_scale_omitted", "q", "k", sub(Q, "dscores.mT @ q * s", "dscores.mT @ q"),
      "the scale kept on dq but omitted from dk", W_SCALE)
wrong("q_dq_scale_inverted", "q", "q", sub(Q_DEF, "return s * (g @ c)", "return (g @ c) / s"),
      "dq divided by the scale: multiplied by sqrt(head_size) instead of 1/sqrt(head_size)",
      W_SCALE + ("inverted",))

# ---- WRONG: v = x @ Wv, k = x @ Wk, q = x @ Wq ---------------------------------------
wrong("Wv_dWv_mT_reshape", "Wv", "Wv", sub(WV, "rows(x).mT @ rows(dv)", "x.mT.reshape(n_embd, -1) @ rows(dv)"),
      "x.mT reshaped to (n_embd, -1): the batch folded into the features, rows scrambled against dv", W_SCRAMBLE)
wrong("Wv_dx_Wv_untransposed", "Wv", "x", sub(WV, "dx = dv @ Wv.mT", "dx = dv @ Wv"),
      "dv @ Wv: Wv not transposed (square, so the shapes fit)", W_T)
wrong("Wk_dWk_mT_reshape", "Wk", "Wk", sub(WK, "(x.mT @ dk).sum(0)", "x.mT.reshape(n_embd, -1) @ dk.flatten(0, 1)"),
      "x.mT reshaped to (n_embd, -1): features and batch rows scrambled against dk", W_SCRAMBLE)
wrong("Wk_dx_Wk_untransposed", "Wk", "x", sub(WK, "dk @ Wk.mT", "dk @ Wk"),
      "dk @ Wk: Wk not transposed (square, so the shapes fit)", W_T)
wrong("Wk_dx_counted_twice", "Wk", "x", sub(WK, "dx += dk @ Wk.mT", "dx += dx + dk @ Wk.mT"),
      "dx += dx + ...: the value branch already in dx added a second time", W_TWICE)
wrong("x_dWq_mT_reshape", "x", "Wq", sub(XQ, "rows(x).mT @ rows(dq)", "x.mT.reshape(n_embd, -1) @ rows(dq)"),
      "x.mT reshaped to (n_embd, -1): features and batch rows scrambled against dq", W_SCRAMBLE)
wrong("x_dx_Wq_untransposed", "x", "x", sub(XQ, "dq @ Wq.mT", "dq @ Wq"),
      "dq @ Wq: Wq not transposed (square, so the shapes fit)", W_T)
wrong("x_dx_counted_twice", "x", "x", sub(XQ, "dx = dx + dq @ Wq.mT", "dx += dx + dq @ Wq.mT"),
      "dx += dx + ...: the value and key branches already in dx counted twice", W_TWICE)

# ---- WRONG: x = tok + Cpos -----------------------------------------------------------
wrong("tok_split_in_half", "tok", "tok", "dtok, dCpos = dx / 2, dx.sum(0) / 2\n",
      "the gradient of tok + Cpos split in half between the addends: each addend gets all of it", W_SPLIT)

# ---- WRONG: tok = C[Xb] --------------------------------------------------------------
wrong("C_repeats_averaged", "C", "C",
      "dC = torch.zeros_like(C).index_reduce_(0, Xb.flatten(), dtok.flatten(0, 1), 'mean', include_self=False)\n",
      "index_reduce_ with 'mean': a character used several times gets the average of its rows, not their sum",
      W_REPEAT)
wrong("C_one_hot_mT_reshape", "C", "C", sub(C_ONEHOT, "oh.flatten(0, 1).mT", "oh.mT.reshape(vocab_size, -1)"),
      "oh.mT reshaped to (vocab_size, -1): the one-hot's rows scrambled against dtok's", W_SCRAMBLE)
