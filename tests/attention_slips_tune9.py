"""Causal self-attention lesson (attention_pack, made by `pack new` from
tests/packs/forward/slips_attention.py): a ninth slip corpus, TUNE half only (there is no other
half).

What it is: rows of backward-pass code as a learner would type them into one step of the lesson.
Every RIGHT row passes the tutor's check; every WRONG row carries one slip that learners really
make with these operations and fails it. The slip families stay away from the ones tune5 / tune6
/ tune7 / tune8 use: the cross-entropy's chain stopped one op early (the gradient with respect
to the probabilities, -onehot / (N * P), handed back as dlogits); the softmax's Jacobian built
with an inner product where the outer product p p^T belongs (at the cross-entropy's softmax and
at the attention's softmax); the softmax's local derivative skipped, datt passed straight
through; a forward value typed where its gradient belongs, the `d` dropped (logits for dlogits
in dout, out for dout in dv, masked for dmasked in dscores, tok for dtok in dC); a product's
gradient built from the wrong operand, the product's own output or the operand itself instead of
its partner (out in place of v for datt, q in place of k for dq, k in place of q for dk, v / k /
q in place of x for dWv / dWk / dWq); every weight gradient (W, Wv, Wk, Wq, C) taken as the
outer product of sums over the batch and positions instead of the sum of the per-position outer
products; the 1/sqrt scale taken over the wrong dimension (block_size, the sequence length,
instead of head_size) on dq and on dk; and the gradient of a sum or of a fan-out divided among
the terms instead of passed whole to each (dtok and dCpos halved, db halved, x's three branches
averaged). The same slip family is put on every step where its operation occurs and the shapes
let it through.

Style: a mix within the file, as different learners would write it: torch.einsum for batched
products and weight gradients, plain `@` with .T / transpose, torch.tensordot, flatten(0, 1)
before a weight gradient, the softmax's backward as an explicit
Jacobian (torch.diag_embed minus an outer product, applied with unsqueeze / squeeze), masked_fill
for the causal mask, F.one_hot for the targets and the embedding, index_add_ for the embedding.
It was written apart from the diagnosis code, without reading it, and each row was checked with
`backprop-tutor check --json` looking at "passed" only: `words` are the writer's own guess at
what a specific diagnosis of the slip would say (any one of them is enough), not copied from the
tutor's messages.

RIGHT = {name: (step_id, tensor, code, "")}
WRONG = {name: (step_id, tensor, code, slip, words)}
"""
S = "attention_pack/"

W_STOPPED = ("probabilities", "chain", "softmax", "stopped", "logits", "jacobian")
W_OUTER = ("outer", "inner", "jacobian", "product", "softmax", "diagonal")
W_SKIPPED = ("softmax", "skipped", "derivative", "jacobian", "straight", "missing")
W_VALUE = ("forward", "value", "gradient", "instead", "activation", "typo")
W_OPERAND = ("operand", "other", "output", "input", "wrong", "itself")
W_SUMFIRST = ("outer", "sum", "batch", "positions", "product", "before")
W_SCALE_DIM = ("scale", "head_size", "block_size", "sqrt", "dimension", "wrong")
W_SPLIT = ("half", "split", "whole", "average", "divided", "branches")

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
LOGITS = ("N = Yb.numel()\n"
          "dlogits = logits.softmax(-1) - F.one_hot(Yb, vocab_size)\n"
          "dlogits = dlogits / N\n")
# the cross-entropy as -log p[target] then the softmax's Jacobian, position by position
LOGITS_JAC = ("P = F.softmax(logits, dim=-1)\n"
              "N = n * block_size\n"
              "dP = -F.one_hot(Yb, vocab_size).float() / (N * P)\n"
              "J = torch.diag_embed(P) - P.unsqueeze(-1) @ P.unsqueeze(-2)\n"
              "dlogits = (J @ dP.unsqueeze(-1)).squeeze(-1)\n")
OUT = ("dout = dlogits @ W.T\n"
       "dW = torch.einsum('bth,btv->hv', out, dlogits)\n"
       "db = dlogits.sum((0, 1))\n")
ATT = ("datt = torch.einsum('bih,bjh->bij', dout, v)\n"
       "dv = torch.einsum('bij,bih->bjh', att, dout)\n")
MASKED_JAC = ("J = torch.diag_embed(att) - att.unsqueeze(-1) @ att.unsqueeze(-2)\n"
              "dmasked = (J @ datt.unsqueeze(-1)).squeeze(-1)\n")
SCORES = ("causal = torch.tril(torch.ones(block_size, block_size))\n"
          "dscores = dmasked.masked_fill(causal == 0, 0.0)\n")
Q = ("dq = dscores @ k * head_size ** -0.5\n"
     "dk = dscores.transpose(-2, -1) @ q * head_size ** -0.5\n")
WV = ("dx = dv @ Wv.T\n"
      "dWv = x.flatten(0, 1).T @ dv.flatten(0, 1)\n")
WK = ("dx += torch.matmul(dk, Wk.transpose(0, 1))\n"
      "dWk = torch.tensordot(x, dk, dims=([0, 1], [0, 1]))\n")
XQ = ("dx += dq @ Wq.T\n"
      "dWq = torch.einsum('btc,bth->ch', x, dq)\n")
TOK = ("dtok = dx.clone()\n"
       "dCpos = dx.sum(0)\n")
C_ONE_HOT = ("oh = F.one_hot(Xb, vocab_size).float()\n"
             "dC = oh.view(-1, vocab_size).T @ dtok.view(-1, n_embd)\n")
C_INDEX_ADD = "dC = torch.zeros_like(C).index_add_(0, Xb.flatten(), dtok.flatten(0, 1))\n"

# ---- RIGHT ---------------------------------------------------------------------------
right("logits_softmax_minus_one_hot", "logits", "logits", LOGITS)
right("logits_explicit_jacobian", "logits", "logits", LOGITS_JAC)
right("out_einsum_weight", "out", "W", OUT)
right("att_einsum_both", "att", "v", ATT)
right("masked_explicit_jacobian", "masked", "masked", MASKED_JAC)
right("q_scaled_products", "q", "k", Q)
right("Wv_flatten_weight", "Wv", "Wv", WV)
right("C_index_add", "C", "C", C_INDEX_ADD)

# ---- WRONG: the cross-entropy's chain stopped at the probabilities -------------------
wrong("logits_gradient_wrt_probs", "logits", "logits",
      "P = F.softmax(logits, dim=-1)\n"
      "dlogits = -F.one_hot(Yb, vocab_size).float() / (n * block_size * P)\n",
      "the gradient with respect to the probabilities, -onehot / (N * P), handed back as dlogits: "
      "the softmax between the probabilities and the logits is never backpropagated",
      W_STOPPED)

# ---- WRONG: inner product where the softmax Jacobian's outer product belongs --------
wrong("logits_jacobian_inner_product", "logits", "logits",
      sub(LOGITS_JAC, "P.unsqueeze(-1) @ P.unsqueeze(-2)", "P.unsqueeze(-2) @ P.unsqueeze(-1)"),
      "p^T p (a 1x1 inner product, broadcast) where the Jacobian needs the outer product p p^T",
      W_OUTER)
wrong("masked_jacobian_inner_product", "masked", "masked",
      sub(MASKED_JAC, "att.unsqueeze(-1) @ att.unsqueeze(-2)", "att.unsqueeze(-2) @ att.unsqueeze(-1)"),
      "each row's Jacobian built with the inner product a^T a instead of the outer product a a^T",
      W_OUTER)

# ---- WRONG: the softmax's local derivative skipped ----------------------------------
wrong("masked_softmax_passed_through", "masked", "masked",
      "dmasked = datt.masked_fill(torch.tril(torch.ones(block_size, block_size)) == 0, 0.0)\n",
      "datt handed straight to the scores (only masked): the softmax's own derivative is left out",
      W_SKIPPED)

# ---- WRONG: a forward value where its gradient belongs (the `d` dropped) ------------
wrong("out_dout_from_logits", "out", "out", sub(OUT, "dout = dlogits @ W.T", "dout = logits @ W.T"),
      "logits @ W.T: the forward logits where dlogits belongs", W_VALUE)
wrong("att_dv_from_out", "att", "v", sub(ATT, "att, dout)", "att, out)"),
      "dv built from out, the forward output, instead of dout", W_VALUE)
wrong("scores_masked_value_filled", "scores", "scores", sub(SCORES, "dmasked.masked_fill", "masked.masked_fill"),
      "the forward masked scores filled where the gradient dmasked belongs", W_VALUE + ("mask",))
wrong("C_rows_from_tok", "C", "C", sub(C_INDEX_ADD, "dtok.flatten(0, 1)", "tok.flatten(0, 1)"),
      "the embedding rows tok themselves scattered into dC instead of their gradient dtok", W_VALUE)

# ---- WRONG: a product's gradient from the wrong operand -----------------------------
wrong("att_datt_from_out", "att", "att", sub(ATT, "dout, v)", "dout, out)"),
      "datt = dout @ out^T: the product's output in place of its other operand v", W_OPERAND)
wrong("q_dq_times_q", "q", "q", sub(Q, "dscores @ k *", "dscores @ q *"),
      "dq = dscores @ q: q's gradient multiplied by q itself instead of its partner k", W_OPERAND)
wrong("q_dk_times_k", "q", "k", sub(Q, "@ q * head_size", "@ k * head_size"),
      "dk = dscores^T @ k: k's gradient multiplied by k itself instead of its partner q", W_OPERAND)
wrong("Wv_dWv_from_v", "Wv", "Wv", sub(WV, "x.flatten(0, 1).T", "v.flatten(0, 1).T"),
      "dWv = v^T dv: the product's output v where its input x belongs", W_OPERAND)
wrong("Wk_dWk_from_k", "Wk", "Wk", sub(WK, "tensordot(x, dk", "tensordot(k, dk"),
      "dWk contracted from k, the product's output, instead of x", W_OPERAND)
wrong("x_dWq_from_q", "x", "Wq", sub(XQ, "x, dq)", "q, dq)"),
      "dWq = q^T dq: the output q where the input x belongs", W_OPERAND)

# ---- WRONG: a weight gradient as the outer product of sums --------------------------
wrong("out_dW_outer_of_sums", "out", "W",
      sub(OUT, "torch.einsum('bth,btv->hv', out, dlogits)",
          "out.sum((0, 1)).unsqueeze(1) * dlogits.sum((0, 1)).unsqueeze(0)"),
      "out and dlogits summed over batch and positions first, then multiplied: the sum of products "
      "is not the product of sums", W_SUMFIRST)
wrong("Wv_dWv_outer_of_sums", "Wv", "Wv",
      sub(WV, "x.flatten(0, 1).T @ dv.flatten(0, 1)", "torch.outer(x.sum((0, 1)), dv.sum((0, 1)))"),
      "dWv as the outer product of x summed and dv summed instead of the summed outer products",
      W_SUMFIRST)
wrong("Wk_dWk_outer_of_sums", "Wk", "Wk",
      sub(WK, "torch.tensordot(x, dk, dims=([0, 1], [0, 1]))",
          "x.sum(dim=(0, 1))[:, None] * dk.sum(dim=(0, 1))[None, :]"),
      "dWk from x and dk each summed over batch and positions before the product", W_SUMFIRST)
wrong("x_dWq_outer_of_sums", "x", "Wq",
      sub(XQ, "torch.einsum('btc,bth->ch', x, dq)", "torch.outer(x.flatten(0, 1).sum(0), dq.flatten(0, 1).sum(0))"),
      "dWq as the outer product of column sums: the batch and positions summed before multiplying",
      W_SUMFIRST)
wrong("C_dC_outer_of_sums", "C", "C",
      sub(C_ONE_HOT, "oh.view(-1, vocab_size).T @ dtok.view(-1, n_embd)",
          "oh.sum((0, 1)).unsqueeze(1) * dtok.sum((0, 1))"),
      "character counts times the total gradient: the one-hot and dtok summed before the product",
      W_SUMFIRST + ("count",))

# ---- WRONG: the scale over the wrong dimension --------------------------------------
wrong("q_dq_scale_block_size", "q", "q", sub(Q, "dscores @ k * head_size ** -0.5", "dscores @ k * block_size ** -0.5"),
      "dq scaled by 1/sqrt(block_size), the context length, instead of 1/sqrt(head_size)", W_SCALE_DIM)
wrong("q_dk_scale_block_size", "q", "k", sub(Q, "@ q * head_size ** -0.5", "@ q * block_size ** -0.5"),
      "dk scaled by 1/sqrt(block_size) instead of 1/sqrt(head_size)", W_SCALE_DIM)

# ---- WRONG: the gradient of a sum / a fan-out divided among its terms ---------------
wrong("out_db_halved", "out", "b", sub(OUT, "db = dlogits.sum((0, 1))", "db = dlogits.sum((0, 1)) / 2"),
      "db halved as if out @ W and b shared the gradient of their sum", W_SPLIT)
wrong("x_branches_averaged", "x", "x", XQ + "dx /= 3\n",
      "x feeds q, k and v: its three branches averaged instead of added", W_SPLIT + ("sum",))
wrong("tok_dtok_halved", "tok", "tok", sub(TOK, "dtok = dx.clone()", "dtok = dx / 2"),
      "dtok = dx / 2: the gradient of tok + Cpos split between the two addends", W_SPLIT)
wrong("tok_dCpos_halved", "tok", "Cpos", sub(TOK, "dCpos = dx.sum(0)", "dCpos = dx.sum(0) / 2"),
      "dCpos summed over the batch but halved: the sum's gradient split between tok and Cpos", W_SPLIT)
