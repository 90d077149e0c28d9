"""Causal self-attention lesson (attention_pack, made by `pack new` from
tests/packs/forward/slips_attention.py): an eighth slip corpus, TUNE half only (there is no
other half).

What it is: rows of backward-pass code as a learner would type them into one step of the lesson.
Every RIGHT row passes the tutor's check; every WRONG row carries one slip that learners really
make with these operations and fails it. The slip families stay away from the ones tune5 / tune6
/ tune7 use: a sign error where the subtraction is written the wrong way round (the
cross-entropy's one-hot minus probabilities, the softmax's row dot minus the gradient); Python
operator precedence (`/ n * block_size` for the mean over every position, `head_size ** -1/2`
for the scale on dq and on dk); a reshape / view used where a transpose belongs, on every product
whose shapes let it through (W for dout, out for dW, v for datt, q for dk, x for dWv, dWk and
dWq); the scale differentiated as if it were a variable (d/dh of h ** -0.5 on dq and on dk); an
in-place multiply that clobbers att while the softmax's row term still needs it; precedence
again in the causal mask (`dmasked * tril(...) != 0` compares the product); a broadcast parameter's gradient
(b, Cpos) taken from a single copy, the first example, instead of summed over the copies; the
embedding's repeated characters averaged instead of summed; and the embedding's indices and rows
flattened in two different orders. The same slip family is put on every step where its operation
occurs.

Style: a mix within the file, as different learners would write it: plain `@` and torch.matmul,
torch.tensordot for the weight gradients summed over batch and positions, torch.einsum for some
batched products, F.one_hot / F.softmax helpers, index_add_ and bincount for the embedding;
short rows, a named intermediate only where a learner would want one. It was written apart from
the diagnosis code, without reading it, and each row was checked with
`backprop-tutor check --json` looking at "passed" only: `words` are the writer's own guess at
what a specific diagnosis of the slip would say (any one of them is enough), not copied from the
tutor's messages.

RIGHT = {name: (step_id, tensor, code, "")}
WRONG = {name: (step_id, tensor, code, slip, words)}
"""
S = "attention_pack/"

W_SIGN = ("sign", "minus", "negative", "reversed", "subtract", "order")
W_PRECEDENCE = ("precedence", "parentheses", "brackets", "operator", "divide", "order")
W_VIEW = ("reshape", "view", "transpose", "permute", "layout", "scrambled")
W_SCALE_DERIV = ("scale", "constant", "derivative", "head_size", "-1.5", "differentiated")
W_INPLACE = ("in-place", "inplace", "clobber", "overwritten", "alias", "mul_")
W_COPY = ("sum", "broadcast", "batch", "one example", "copies", "first")
W_AVERAGE = ("repeat", "average", "mean", "count", "sum", "duplicate")
W_ORDER = ("flatten", "order", "index", "rows", "transpose", "mismatch")

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
LOGITS = ("P = F.softmax(logits, dim=-1)\n"
          "Y1 = F.one_hot(Yb, vocab_size).float()\n"
          "dlogits = (P - Y1) / (n * block_size)\n")
OUT = ("dout = dlogits @ W.T\n"
       "dW = torch.tensordot(out, dlogits, dims=([0, 1], [0, 1]))\n"
       "db = dlogits.sum(dim=(0, 1))\n")
OUT_FLAT = ("g = dlogits.reshape(-1, vocab_size)\n"
            "dout = torch.matmul(dlogits, W.transpose(0, 1))\n"
            "dW = out.reshape(-1, head_size).transpose(0, 1) @ g\n"
            "db = g.sum(0)\n")
ATT = ("datt = dout @ v.transpose(-2, -1)\n"
       "dv = att.transpose(-2, -1) @ dout\n")
MASKED = ("dmasked = att * datt\n"
          "dmasked = dmasked - att * dmasked.sum(-1, keepdim=True)\n")
MASKED_EINSUM = ("rowdot = torch.einsum('nij,nij->ni', att, datt)\n"
                 "dmasked = att * (datt - rowdot.unsqueeze(-1))\n")
SCORES = ("keep = torch.tril(torch.ones(block_size, block_size))\n"
          "dscores = dmasked * keep\n")
Q = ("scale = head_size ** -0.5\n"
     "dq = dscores @ k * scale\n"
     "dk = dscores.transpose(-2, -1) @ q * scale\n")
Q_KT = ("dkT = q.transpose(1, 2) @ dscores * head_size ** -0.5\n"
        "dq = dscores @ k / head_size ** 0.5\n"
        "dk = dkT.transpose(1, 2)\n")
WV = ("dx = dv @ Wv.T\n"
      "dWv = x.reshape(-1, n_embd).T @ dv.reshape(-1, head_size)\n")
WK = ("dx += dk @ Wk.T\n"
      "dWk = torch.einsum('btc,bth->ch', x, dk)\n")
XQ = ("dx += torch.matmul(dq, Wq.T)\n"
      "dWq = x.view(-1, n_embd).T @ dq.view(-1, head_size)\n")
TOK = ("dtok = dx\n"
       "dCpos = dx.sum(0)\n")
C_INDEX_ADD = "dC = torch.zeros_like(C).index_add_(0, Xb.reshape(-1), dtok.reshape(-1, n_embd))\n"
C_ONE_HOT = ("oh = F.one_hot(Xb.view(-1), vocab_size).float()\n"
             "dC = oh.T @ dtok.view(-1, n_embd)\n")

# ---- RIGHT ---------------------------------------------------------------------------
right("logits_one_hot", "logits", "logits", LOGITS)
right("out_tensordot", "out", "W", OUT)
right("att_transposes", "att", "v", ATT)
right("masked_einsum_rowdot", "masked", "masked", MASKED_EINSUM)
right("scores_tril_keep", "scores", "scores", SCORES)
right("q_kT_intermediate", "q", "k", Q_KT)
right("Wk_einsum", "Wk", "Wk", WK)
right("tok_alias_sum", "tok", "Cpos", TOK)
right("C_one_hot_matmul", "C", "C", C_ONE_HOT)

# ---- WRONG: sign errors --------------------------------------------------------------
wrong("logits_one_hot_minus_probs", "logits", "logits", sub(LOGITS, "(P - Y1)", "(Y1 - P)"),
      "one-hot minus probabilities: the subtraction is the wrong way round, every entry's sign is flipped",
      W_SIGN)
wrong("masked_rowdot_minus_gradient", "masked", "masked",
      sub(MASKED_EINSUM, "(datt - rowdot.unsqueeze(-1))", "(rowdot.unsqueeze(-1) - datt)"),
      "the row dot minus datt: the softmax's backward with its sign flipped", W_SIGN)

# ---- WRONG: operator precedence ------------------------------------------------------
wrong("logits_divide_precedence", "logits", "logits", sub(LOGITS, "/ (n * block_size)", "/ n * block_size"),
      "`/ n * block_size` divides by n and then multiplies by block_size: parentheses missing",
      W_PRECEDENCE + ("block_size",))
wrong("q_dq_scale_precedence", "q", "q", sub(Q, "scale = head_size ** -0.5\ndq = dscores @ k * scale",
                                              "dq = dscores @ k * head_size ** -1/2"),
      "`head_size ** -1/2` is (1/head_size)/2, not 1/sqrt(head_size): the scale on dq is wrong",
      ("precedence", "scale", "sqrt", "head_size", "parentheses", "exponent"))
wrong("q_dk_scale_precedence", "q", "k", sub(Q, "@ q * scale", "@ q * head_size ** -1/2"),
      "`head_size ** -1/2` is (1/head_size)/2, not 1/sqrt(head_size): the scale on dk is wrong",
      ("precedence", "scale", "sqrt", "head_size", "parentheses", "exponent"))

# ---- WRONG: a reshape / view where a transpose belongs ------------------------------
wrong("out_dout_W_viewed", "out", "out", sub(OUT, "dlogits @ W.T", "dlogits @ W.view(vocab_size, head_size)"),
      "W.view(vocab_size, head_size) reshapes W instead of transposing it: the entries are scrambled",
      W_VIEW)
wrong("out_dW_out_reshaped", "out", "W",
      sub(OUT_FLAT, "out.reshape(-1, head_size).transpose(0, 1) @ g", "out.reshape(head_size, -1) @ g"),
      "out.reshape(head_size, -1) in place of out^T: a reshape does not transpose", W_VIEW)
wrong("att_datt_v_viewed", "att", "att", sub(ATT, "v.transpose(-2, -1)", "v.view(n, head_size, block_size)"),
      "v.view(n, head_size, block_size) as v^T: the view scrambles v instead of transposing it", W_VIEW)
wrong("q_dk_views_for_transposes", "q", "k",
      sub(Q_KT, "q.transpose(1, 2) @ dscores", "q.view(n, head_size, block_size) @ dscores")
      .replace("dk = dkT.transpose(1, 2)", "dk = dkT.view(n, block_size, head_size)"),
      "q^T and dk^T undone with view instead of transpose: the shapes fit but the numbers are scrambled",
      W_VIEW)
wrong("Wv_dWv_x_reshaped", "Wv", "Wv", sub(WV, "x.reshape(-1, n_embd).T", "x.reshape(n_embd, -1)"),
      "x.reshape(n_embd, -1) as x^T: reshaping is not transposing", W_VIEW)
wrong("Wk_dWk_x_reshaped", "Wk", "Wk",
      "dx += dk @ Wk.T\ndWk = x.reshape(n_embd, -1) @ dk.reshape(-1, head_size)\n",
      "x.reshape(n_embd, -1) as x^T for dWk: reshaping is not transposing", W_VIEW)
wrong("x_dWq_x_viewed", "x", "Wq", sub(XQ, "x.view(-1, n_embd).T", "x.view(n_embd, -1)"),
      "x.view(n_embd, -1) as x^T for dWq: a view does not transpose", W_VIEW)

# ---- WRONG: the constant scale differentiated ---------------------------------------
wrong("q_dq_scale_differentiated", "q", "q", sub(Q, "scale = head_size ** -0.5", "scale = -0.5 * head_size ** -1.5"),
      "the scale replaced by its derivative -0.5 * head_size ** -1.5: a constant is just carried through",
      W_SCALE_DERIV)
wrong("q_dk_scale_differentiated", "q", "k",
      sub(Q_KT, "q.transpose(1, 2) @ dscores * head_size ** -0.5", "q.transpose(1, 2) @ dscores * (-0.5 * head_size ** -1.5)"),
      "dk scaled by the derivative of head_size ** -0.5 instead of by head_size ** -0.5 itself",
      W_SCALE_DERIV)

# ---- WRONG: an in-place op clobbers att ---------------------------------------------
wrong("masked_att_clobbered_in_place", "masked", "masked",
      "g = att\ng *= datt\ndmasked = g - att * g.sum(-1, keepdim=True)\n",
      "g = att aliases att, so `g *= datt` overwrites att: the row term uses att * datt instead of att",
      W_INPLACE)

# ---- WRONG: precedence in the causal mask -------------------------------------------
wrong("scores_mask_compare_precedence", "scores", "scores",
      "dscores = dmasked * torch.tril(torch.ones(block_size, block_size)) != 0\n",
      "`dmasked * tril(...) != 0` compares the product with 0: a 0/1 tensor comes back instead of the masked gradient",
      W_PRECEDENCE + ("mask",))

# ---- WRONG: a broadcast parameter's gradient from one copy ---------------------------
wrong("out_db_first_example", "out", "b", sub(OUT, "db = dlogits.sum(dim=(0, 1))", "db = dlogits[0].sum(0)"),
      "db summed over the positions of the first example only: b is added to every example",
      W_COPY)
wrong("tok_dCpos_first_example", "tok", "Cpos", sub(TOK, "dCpos = dx.sum(0)", "dCpos = dx[0]"),
      "dCpos taken from the first example: Cpos is added to every example, the copies must be summed",
      W_COPY)

# ---- WRONG: the embedding ------------------------------------------------------------
wrong("C_repeats_averaged", "C", "C",
      C_INDEX_ADD + "dC = dC / torch.bincount(Xb.reshape(-1), minlength=vocab_size).clamp(min=1).unsqueeze(1)\n",
      "each row of dC divided by how often the character occurs: repeated characters are averaged, not summed",
      W_AVERAGE)
wrong("C_indices_flattened_transposed", "C", "C", sub(C_INDEX_ADD, "Xb.reshape(-1)", "Xb.T.reshape(-1)"),
      "indices flattened position-major, rows of dtok batch-major: each row lands on another example's character",
      W_ORDER)
