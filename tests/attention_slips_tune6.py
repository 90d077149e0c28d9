"""Causal self-attention lesson (attention_pack, made by `pack new` from
tests/packs/forward/slips_attention.py): a sixth slip corpus, TUNE half (its other half is
tests/attention_slips_holdout6.py).

What it is: rows of backward-pass code as a learner would type them into one step of the lesson.
Every RIGHT row passes the tutor's check; every WRONG row carries one slip that learners really
make with these operations and fails it. The slip families here lean away from the ones tune4 /
tune5 use most: softmax's gradient taken with log_softmax, the inputs Xb one-hot coded where the
targets Yb belong (and the other way round in the embedding), softmax over the wrong dim, a
broadcast tensor's gradient (b, Cpos) not summed over the batch, einsum index letters that do not
pair up so an index is summed on each operand separately instead of contracted, subscripts of a
batched product written in the wrong order (transposes of att, of dscores for dq / dk mixed up),
the attention recomputed without its causal mask (dv, the softmax's backward), the softmax's
backward fed the pre-softmax scores, the forward's -inf fill copied onto the gradient, the mask's
subscripts transposed, the 1/sqrt(head_size) scale put at the mask's step instead of the
product's, q and k mixed up (outputs unpacked in the wrong order, dq feeding dWk, Wk feeding the
query branch of dx) and the weight gradients built from tok, the embedding before Cpos is added,
instead of x. The same slip family is put on every step where its operation occurs.

Style: torch.einsum for every product and contraction (including the row dots of the softmax and
the causal mask as a 0/1 matrix), torch.nn.functional calls inside the backward where a learner
would reach for them (F.softmax / F.log_softmax, F.one_hot, recomputed softmaxes), and small
helper functions defined with `def` inside the row (ce_back, linear_back, softmax_back,
scaled_scores_back, matmul_back, embed_back) that return one or several gradients. It was
written apart from the diagnosis code, without reading it, and each row was checked with
`backprop-tutor check --json` looking at "passed" only: `words` are the writer's own guess at
what a specific diagnosis of the slip would say (any one of them is enough), not copied from the
tutor's messages.

RIGHT = {name: (step_id, tensor, code, "")}
WRONG = {name: (step_id, tensor, code, slip, words)}
"""
S = "attention_pack/"

W_LOGSOFTMAX = ("log_softmax", "log", "probabilities", "softmax", "exp", "log-probabilities")
W_TARGET = ("target", "yb", "xb", "input", "one_hot", "label", "next")
W_DIM = ("dim", "axis", "softmax", "row", "column", "normalise")
W_BATCH = ("sum", "batch", "broadcast", "shape", "axis", "dim")
W_LETTERS = ("einsum", "index", "contract", "separately", "sum")
W_T = ("transpose", "swap", "order", "subscript", "swapped", "operand")
W_UNMASKED = ("mask", "causal", "unmasked", "masked", "softmax", "future", "recomputed")
W_PRESOFTMAX = ("softmax", "output", "probabilities", "scores", "input", "pre-softmax")
W_MASK = ("mask", "causal", "tril", "triangle", "future", "transpose")
W_SCALE = ("scale", "sqrt", "head_size", "factor", "0.5", "mask")
W_QK = ("query", "key", "swap", "mixed", "order", "dq")
W_TOK = ("tok", "x", "input", "position", "cpos", "wrong tensor")

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
# cross-entropy over every position: a helper with F.softmax and F.one_hot
LOGITS = ("def ce_back(z, y):\n"
          "    p = F.softmax(z, dim=-1)\n"
          "    target = F.one_hot(y, vocab_size).to(p.dtype)\n"
          "    return (p - target) / y.numel()\n"
          "dlogits = ce_back(logits, Yb)\n")
# cross-entropy: probabilities from F.log_softmax(...).exp(), the target picked by einsum
LOGITS_EXP = ("def probs(z):\n"
              "    return F.log_softmax(z, dim=-1).exp()\n"
              "eye = torch.eye(vocab_size)\n"
              "target = torch.einsum('ntv,vw->ntw', F.one_hot(Yb, vocab_size).float(), eye)\n"
              "dlogits = (probs(logits) - target) / (n * block_size)\n")
# logits = out @ W + b: one helper returning the three gradients
OUT = ("def linear_back(g, a, w):\n"
       "    da = torch.einsum('ntv,hv->nth', g, w)\n"
       "    dw = torch.einsum('nth,ntv->hv', a, g)\n"
       "    return da, dw, torch.einsum('ntv->v', g)\n"
       "dout, dW, db = linear_back(dlogits, out, W)\n")
# out = att @ v
ATT = ("datt = torch.einsum('nte,nse->nts', dout, v)\n"
       "dv = torch.einsum('nts,nte->nse', att, dout)\n")
# att = softmax(masked): the row dot by einsum inside a helper
MASKED = ("def softmax_back(p, g):\n"
          "    rowdot = torch.einsum('nts,nts->nt', p, g)\n"
          "    return p * (g - rowdot.unsqueeze(-1))\n"
          "dmasked = softmax_back(att, datt)\n")
# att = softmax(masked): the softmax recomputed, its Jacobian built by einsum
MASKED_JAC = ("p = F.softmax(masked, dim=-1)\n"
              "J = torch.diag_embed(p) - torch.einsum('nti,ntj->ntij', p, p)\n"
              "dmasked = torch.einsum('ntij,nti->ntj', J, datt)\n")
# the causal mask as a 0/1 matrix multiplied in by einsum
SCORES = ("keep = torch.tril(torch.ones(block_size, block_size))\n"
          "dscores = torch.einsum('nts,ts->nts', dmasked, keep)\n")
# scores = q @ k^T * head_size ** -0.5: one helper for both operands
Q = ("def scaled_scores_back(g, a, c, s):\n"
     "    da = torch.einsum('nts,nse->nte', g, c) * s\n"
     "    dc = torch.einsum('nts,nte->nse', g, a) * s\n"
     "    return da, dc\n"
     "dq, dk = scaled_scores_back(dscores, q, k, head_size ** -0.5)\n")
# v = x @ Wv: a helper for a product with a weight
WV = ("def matmul_back(inp, w, g):\n"
      "    return torch.einsum('nto,io->nti', g, w), torch.einsum('nti,nto->io', inp, g)\n"
      "dx, dWv = matmul_back(x, Wv, dv)\n")
# k = x @ Wk
WK = ("dx += torch.einsum('nte,he->nth', dk, Wk)\n"
      "dWk = torch.einsum('nth,nte->he', x, dk)\n")
# q = x @ Wq
XQ = ("dx += torch.einsum('nte,he->nth', dq, Wq)\n"
      "dWq = torch.einsum('nth,nte->he', x, dq)\n")
# x = tok + Cpos
TOK = ("dtok = dx.clone()\n"
       "dCpos = torch.einsum('nte->te', dx)\n")
# tok = C[Xb]: a helper contracting F.one_hot with the gradient
C_HELPER = ("def embed_back(ix, g):\n"
            "    onehot = F.one_hot(ix, vocab_size).to(g.dtype)\n"
            "    return torch.einsum('ntv,nte->ve', onehot, g)\n"
            "dC = embed_back(Xb, dtok)\n")

# ---- RIGHT ---------------------------------------------------------------------------
right("logits_helper_softmax_one_hot", "logits", "logits", LOGITS)
right("logits_log_softmax_exp_einsum_target", "logits", "logits", LOGITS_EXP)
right("out_helper_linear_back", "out", "W", OUT)
right("att_einsum", "att", "v", ATT)
right("masked_helper_einsum_rowdot", "masked", "masked", MASKED)
right("masked_recomputed_jacobian_einsum", "masked", "masked", MASKED_JAC)
right("scores_einsum_tril", "scores", "scores", SCORES)
# the softmax already sends exactly zero to the masked entries, so passing dmasked on is right
right("scores_zeros_already_there", "scores", "scores", "dscores = dmasked.clone()\n")
right("q_helper_scaled", "q", "k", Q)
right("Wv_helper_matmul_back", "Wv", "Wv", WV)
right("Wk_einsum", "Wk", "Wk", WK)
right("x_einsum", "x", "Wq", XQ)
right("tok_einsum_batch_sum", "tok", "Cpos", TOK)
right("C_helper_one_hot_einsum", "C", "C", C_HELPER)

# ---- WRONG: cross-entropy over every position ----------------------------------------
wrong("logits_log_softmax_not_exp", "logits", "logits", sub(LOGITS, "F.softmax(z, dim=-1)", "F.log_softmax(z, dim=-1)"),
      "log_softmax used where the probabilities belong: log-probabilities minus the one-hot",
      W_LOGSOFTMAX)
wrong("logits_one_hot_of_inputs", "logits", "logits", sub(LOGITS, "ce_back(logits, Yb)", "ce_back(logits, Xb)"),
      "the one-hot built from the context Xb instead of the targets Yb", W_TARGET)
wrong("logits_softmax_over_positions", "logits", "logits", sub(LOGITS, "F.softmax(z, dim=-1)", "F.softmax(z, dim=1)"),
      "F.softmax over dim=1, the positions, instead of the vocabulary", W_DIM + ("vocab",))

# ---- WRONG: logits = out @ W + b -----------------------------------------------------
wrong("out_db_batch_kept", "out", "b", sub(OUT, "torch.einsum('ntv->v', g)", "torch.einsum('ntv->nv', g)"),
      "db keeps the batch index: the bias is broadcast over the batch, its gradient must be summed over it",
      W_BATCH + ("bias",))
wrong("out_dW_position_letters_unpaired", "out", "W",
      sub(OUT, "torch.einsum('nth,ntv->hv', a, g)", "torch.einsum('nth,nsv->hv', a, g)"),
      "dW's einsum gives the positions two letters (t, s): each operand is summed over them separately",
      W_LETTERS + ("position",))

# ---- WRONG: out = att @ v ------------------------------------------------------------
wrong("att_dv_unmasked_attention", "att", "v",
      "datt = torch.einsum('nte,nse->nts', dout, v)\n"
      "p = F.softmax(scores, dim=-1)\n"
      "dv = torch.einsum('nts,nte->nse', p, dout)\n",
      "dv built from the attention recomputed from scores without the causal mask", W_UNMASKED)
wrong("att_dv_att_subscripts_swapped", "att", "v",
      sub(ATT, "torch.einsum('nts,nte->nse', att, dout)", "torch.einsum('nst,nte->nse', att, dout)"),
      "att's subscripts written in the wrong order: dv = att @ dout, att not transposed", W_T)
wrong("att_datt_embedding_letters_unpaired", "att", "att",
      sub(ATT, "torch.einsum('nte,nse->nts', dout, v)", "torch.einsum('nte,nsf->nts', dout, v)"),
      "datt's einsum gives v's embedding index its own letter: it is summed apart instead of contracted",
      W_LETTERS + ("embedding",))

# ---- WRONG: att = softmax(masked) ----------------------------------------------------
wrong("masked_helper_fed_scores", "masked", "masked", sub(MASKED, "softmax_back(att, datt)", "softmax_back(scores, datt)"),
      "the softmax's backward fed the pre-softmax scores instead of its output att", W_PRESOFTMAX)
wrong("masked_helper_unmasked_softmax", "masked", "masked",
      sub(MASKED, "softmax_back(att, datt)", "softmax_back(F.softmax(scores, dim=-1), datt)"),
      "the probabilities recomputed from scores without the causal mask", W_UNMASKED)
wrong("masked_recomputed_softmax_wrong_dim", "masked", "masked",
      sub(MASKED_JAC, "F.softmax(masked, dim=-1)", "F.softmax(masked, dim=1)"),
      "the softmax recomputed over dim=1, the queries (columns), instead of each row's keys", W_DIM)
wrong("masked_rowdot_letters_unpaired", "masked", "masked",
      sub(MASKED, "torch.einsum('nts,nts->nt', p, g)", "torch.einsum('nts,ntr->nt', p, g)"),
      "the row dot's einsum gives datt its own key letter: sum(p) * sum(datt), not sum(p * datt)",
      W_LETTERS + ("row", "softmax"))

# ---- WRONG: the causal mask ----------------------------------------------------------
wrong("scores_neg_inf_fill_copied", "scores", "scores",
      "dscores = dmasked.masked_fill(torch.tril(torch.ones(block_size, block_size)) == 0, float('-inf'))\n",
      "the forward's -inf fill copied onto the gradient: the masked entries need 0", W_MASK + ("inf",))
wrong("scores_mask_subscripts_transposed", "scores", "scores",
      sub(SCORES, "torch.einsum('nts,ts->nts', dmasked, keep)", "torch.einsum('nts,st->nts', dmasked, keep)"),
      "the mask's einsum subscripts swapped: it keeps the upper triangle, the future", W_MASK + ("subscript",))
wrong("scores_scale_at_mask", "scores", "scores",
      sub(SCORES, "dmasked, keep)", "dmasked, keep) * head_size ** -0.5"),
      "the 1/sqrt(head_size) scale applied at the mask's step, where the forward has none", W_SCALE)

# ---- WRONG: scores = q @ k^T * head_size ** -0.5 -------------------------------------
wrong("q_dscores_transposes_mixed", "q", "q",
      sub(sub(Q, "torch.einsum('nts,nse->nte', g, c)", "torch.einsum('nst,nse->nte', g, c)"),
          "torch.einsum('nts,nte->nse', g, a)", "torch.einsum('nst,nte->nse', g, a)"),
      "dscores transposed for dq and left untransposed for dk: the two transposes mixed up",
      ("transpose", "swap", "subscript", "query", "key", "dscores"))
wrong("q_outputs_unpacked_swapped", "q", "q", sub(Q, "dq, dk = scaled", "dk, dq = scaled"),
      "the helper's two gradients unpacked in the wrong order: dq gets dk's value and dk gets dq's", W_QK)
wrong("q_scale_moved_to_mask", "q", "k", sub(Q, "scaled_scores_back(dscores, q, k, head_size ** -0.5)",
                                              "scaled_scores_back(dscores, q, k, 1.0)"),
      "the scale left out of dq and dk, as if it were applied after the mask", W_SCALE)

# ---- WRONG: v = x @ Wv, k = x @ Wk ---------------------------------------------------
wrong("Wv_helper_fed_tok", "Wv", "Wv", sub(WV, "matmul_back(x, Wv, dv)", "matmul_back(tok, Wv, dv)"),
      "dWv built from tok, the embedding before Cpos is added, instead of x", W_TOK)
wrong("Wk_dWk_from_dq", "Wk", "Wk", sub(WK, "torch.einsum('nth,nte->he', x, dk)", "torch.einsum('nth,nte->he', x, dq)"),
      "dWk built from the query gradient dq instead of dk", W_QK)
wrong("Wk_dWk_from_tok", "Wk", "Wk", sub(WK, "torch.einsum('nth,nte->he', x, dk)", "torch.einsum('nth,nte->he', tok, dk)"),
      "dWk built from tok, the embedding before Cpos is added, instead of x", W_TOK)
wrong("Wk_dWk_position_letters_unpaired", "Wk", "Wk",
      sub(WK, "torch.einsum('nth,nte->he', x, dk)", "torch.einsum('nth,nse->he', x, dk)"),
      "dWk's einsum gives the positions two letters: x and dk summed over them separately",
      W_LETTERS + ("position",))

# ---- WRONG: q = x @ Wq (x's last branch) ---------------------------------------------
wrong("x_query_branch_through_Wk", "x", "x", sub(XQ, "torch.einsum('nte,he->nth', dq, Wq)", "torch.einsum('nte,he->nth', dq, Wk)"),
      "the query branch of dx sent back through Wk instead of Wq", W_QK + ("wq",))
wrong("x_dWq_from_tok", "x", "Wq", sub(XQ, "torch.einsum('nth,nte->he', x, dq)", "torch.einsum('nth,nte->he', tok, dq)"),
      "dWq built from tok, the embedding before Cpos is added, instead of x", W_TOK)

# ---- WRONG: x = tok + Cpos -----------------------------------------------------------
wrong("tok_dCpos_batch_kept", "tok", "Cpos", sub(TOK, "dCpos = torch.einsum('nte->te', dx)", "dCpos = dx.clone()"),
      "dCpos passed through like dtok: Cpos is broadcast over the batch, its gradient must be summed over it",
      W_BATCH + ("cpos",))

# ---- WRONG: tok = C[Xb] --------------------------------------------------------------
wrong("C_one_hot_of_targets", "C", "C", sub(C_HELPER, "embed_back(Xb, dtok)", "embed_back(Yb, dtok)"),
      "the embedding's one-hot built from the targets Yb instead of the context Xb", W_TARGET)
wrong("C_position_letters_unpaired", "C", "C",
      sub(C_HELPER, "torch.einsum('ntv,nte->ve', onehot, g)", "torch.einsum('ntv,nse->ve', onehot, g)"),
      "the einsum gives the positions two letters: every character gets the whole row's gradient sum",
      W_LETTERS + ("position",))
