"""Causal self-attention lesson (attention_pack, made by `pack new` from
tests/packs/forward/slips_attention.py): a tenth slip corpus, TUNE half only (there is no other
half).

What it is: rows of backward-pass code as a learner would type them into one step of the lesson.
Every RIGHT row passes the tutor's check; every WRONG row carries one slip that learners really
make with these operations and fails it. The slip families stay away from the ones tune5 / tune6
/ tune7 / tune8 / tune9 use: a loop whose range is off by one, so the first or the last example,
position, row or vocabulary entry is left out of the gradient (`range(1, n)`, `range(n - 1)`,
`range(block_size - 1)`, `range(1, vocab_size)`; on every step: the cross-entropy's targets, the
output layer's weight and bias sums, dv, the softmax's rows, the causal mask's rows, dq / dk,
dWv, dWk, dWq, dCpos and dC); an accumulator started as a view of the gradient it sums (`db =
dlogits...[0]`, `dCpos = dx[0]`), so its in-place `+=` writes into that gradient and corrupts the
other gradients computed from it (db at the output layer, dCpos at the position embedding); the
model's prediction (the argmax of the logits) one-hot coded where the target belongs; a slice `:`
where the row index belongs when the target's 1 is subtracted (`dl[:, Y] -= 1`, every row hit at
every target); floor division `//` where true division belongs (the cross-entropy's mean, and the
1/sqrt(head_size) scale's exponent `1 // 2` / `-1 // 2` on dq and on dk); and the softmax
differentiated elementwise as p (1 - p), like a sigmoid, the Jacobian's off-diagonal terms dropped
(at the cross-entropy's softmax and at the attention's softmax). The same slip family is put on
every step where its operation occurs and the shapes let it through.

Style: a mix within the file, as different learners would write it: explicit Python loops over
the batch, the positions, the rows of the attention matrix or the vocabulary into zeros buffers
(with `+=` for the sums), torch.einsum for batched products, plain `@` with .T / transpose,
F.softmax / F.one_hot helpers, fancy indexing for the target and boolean masks for the embedding,
index_add_. It was written apart from the diagnosis code, without reading it, and each row was
checked with `backprop-tutor check --json` looking at "passed" only: `words` are the writer's own
guess at what a specific diagnosis of the slip would say (any one of them is enough), not copied
from the tutor's messages.

RIGHT = {name: (step_id, tensor, code, "")}
WRONG = {name: (step_id, tensor, code, slip, words)}
"""
S = "attention_pack/"

W_OFF_BY_ONE = ("loop", "range", "first", "last", "missing", "off")
W_ALIAS = ("view", "alias", "place", "clone", "corrupted", "accumulator")
W_ARGMAX = ("prediction", "argmax", "target", "label", "instead", "one-hot")
W_SLICE = ("slice", "every", "row", "index", "target", "arange")
W_FLOORDIV = ("floor", "division", "integer", "true", "rounded", "zero")
W_ELEMENTWISE = ("elementwise", "sigmoid", "jacobian", "diagonal", "off-diagonal", "softmax")

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
LOGITS_LOOP = ("dlogits = F.softmax(logits, dim=-1)\n"
               "for t in range(block_size):\n"
               "    dlogits[torch.arange(n), t, Yb[:, t]] -= 1\n"
               "dlogits = dlogits / (n * block_size)\n")
LOGITS_FLAT = ("N = n * block_size\n"
               "dl = F.softmax(logits.view(-1, vocab_size), dim=1)\n"
               "dl[range(N), Yb.view(-1)] -= 1\n"
               "dlogits = (dl / N).view(n, block_size, vocab_size)\n")
LOGITS_ONE_HOT = ("P = F.softmax(logits, -1)\n"
                  "Y1 = F.one_hot(Yb, vocab_size).float()\n"
                  "dlogits = (P - Y1) / (n * block_size)\n")
# -log p[target], then the softmax's Jacobian applied row by row
LOGITS_CHAIN = ("P = logits.softmax(-1)\n"
                "dP = -F.one_hot(Yb, vocab_size).float() / (n * block_size * P)\n"
                "dlogits = P * (dP - (dP * P).sum(-1, keepdim=True))\n")
OUT_LOOP = ("dout = dlogits @ W.T\n"
            "dW = torch.zeros_like(W)\n"
            "db = torch.zeros_like(b)\n"
            "for i in range(n):\n"
            "    dW += out[i].T @ dlogits[i]\n"
            "    db += dlogits[i].sum(0)\n")
OUT_ALIAS = ("rows = dlogits.view(-1, vocab_size)\n"
             "db = rows[0]\n"
             "for r in rows[1:]:\n"
             "    db += r\n"
             "dout = dlogits @ W.T\n"
             "dW = torch.einsum('bth,btv->hv', out, dlogits)\n")
ATT_LOOP = ("datt = torch.zeros_like(att)\n"
            "dv = torch.zeros_like(v)\n"
            "for i in range(n):\n"
            "    datt[i] = dout[i] @ v[i].T\n"
            "    dv[i] = att[i].T @ dout[i]\n")
ATT_PLAIN = ("datt = dout @ v.transpose(-2, -1)\n"
             "dv = att.transpose(-2, -1) @ dout\n")
MASKED_ROWS = ("dmasked = torch.zeros_like(att)\n"
               "for i in range(block_size):\n"
               "    a = att[:, i, :]\n"
               "    g = datt[:, i, :]\n"
               "    dmasked[:, i, :] = a * (g - (a * g).sum(-1, keepdim=True))\n")
SCORES_ROWS = ("dscores = torch.zeros_like(scores)\n"
               "for i in range(block_size):\n"
               "    dscores[:, i, :i + 1] = dmasked[:, i, :i + 1]\n")
Q_EINSUM = ("dq = torch.einsum('bij,bjh->bih', dscores, k) * head_size ** -0.5\n"
            "dk = torch.einsum('bij,bih->bjh', dscores, q) * head_size ** -0.5\n")
Q_PLAIN = ("dq = dscores @ k / head_size ** 0.5\n"
           "scale = head_size ** -0.5\n"
           "dk = dscores.transpose(1, 2) @ q * scale\n")
Q_LOOP = ("dq = torch.zeros_like(q)\n"
          "dk = torch.zeros_like(k)\n"
          "s = head_size ** -0.5\n"
          "for j in range(n):\n"
          "    dq[j] = s * dscores[j] @ k[j]\n"
          "    dk[j] = s * dscores[j].T @ q[j]\n")
WV_LOOP = ("dx = dv @ Wv.T\n"
           "dWv = torch.zeros_like(Wv)\n"
           "for t in range(block_size):\n"
           "    dWv += x[:, t].T @ dv[:, t]\n")
WK_LOOP = ("dx += dk @ Wk.T\n"
           "dWk = torch.zeros(n_embd, head_size)\n"
           "for i in range(n):\n"
           "    dWk += x[i].T @ dk[i]\n")
X_ROWS = ("dx += dq @ Wq.T\n"
          "xs = x.reshape(-1, n_embd)\n"
          "gs = dq.reshape(-1, head_size)\n"
          "dWq = torch.zeros_like(Wq)\n"
          "for r in range(xs.shape[0]):\n"
          "    dWq += torch.outer(xs[r], gs[r])\n")
TOK_LOOP = ("dtok = dx.clone()\n"
            "dCpos = torch.zeros_like(Cpos)\n"
            "for i in range(n):\n"
            "    dCpos += dx[i]\n")
TOK_ALIAS = ("dtok = dx\n"
             "dCpos = dx[0]\n"
             "for i in range(1, n):\n"
             "    dCpos += dx[i]\n")
C_VOCAB = ("dC = torch.zeros_like(C)\n"
           "for ch in range(vocab_size):\n"
           "    dC[ch] = dtok[Xb == ch].sum(0)\n")
C_INDEX_ADD = "dC = torch.zeros_like(C).index_add_(0, Xb.view(-1), dtok.view(-1, n_embd))\n"

# ---- RIGHT ---------------------------------------------------------------------------
right("logits_loop_over_positions", "logits", "logits", LOGITS_LOOP)
right("logits_flat_fancy_index", "logits", "logits", LOGITS_FLAT)
right("out_loop_over_batch", "out", "W", OUT_LOOP)
right("att_plain_transposes", "att", "att", ATT_PLAIN)
right("masked_loop_over_rows", "masked", "masked", MASKED_ROWS)
right("scores_loop_over_rows", "scores", "scores", SCORES_ROWS)
right("q_einsum_scaled", "q", "q", Q_EINSUM)
right("tok_loop_over_batch", "tok", "Cpos", TOK_LOOP)
right("C_loop_over_vocab", "C", "C", C_VOCAB)

# ---- WRONG: a loop's range off by one -----------------------------------------------
wrong("logits_last_position_skipped", "logits", "logits",
      sub(LOGITS_LOOP, "range(block_size)", "range(block_size - 1)"),
      "range(block_size - 1): the last position's target never gets its 1 subtracted", W_OFF_BY_ONE)
wrong("out_first_example_skipped", "out", "W", sub(OUT_LOOP, "range(n)", "range(1, n)"),
      "range(1, n): the first example's products and bias gradient are left out of dW and db",
      W_OFF_BY_ONE)
wrong("att_last_example_skipped", "att", "v", sub(ATT_LOOP, "range(n)", "range(n - 1)"),
      "range(n - 1): the last example's datt and dv stay zero", W_OFF_BY_ONE)
wrong("masked_last_row_skipped", "masked", "masked",
      sub(MASKED_ROWS, "range(block_size)", "range(block_size - 1)"),
      "range(block_size - 1): the last row of the attention (the one that sees every position) is "
      "never backpropagated through its softmax", W_OFF_BY_ONE + ("row",))
wrong("scores_last_row_skipped", "scores", "scores",
      sub(SCORES_ROWS, "range(block_size)", "range(block_size - 1)"),
      "the mask's loop stops one row early: the last query's row of dscores stays zero",
      W_OFF_BY_ONE + ("row",))
wrong("q_first_example_skipped", "q", "k", sub(Q_LOOP, "range(n)", "range(1, n)"),
      "range(1, n): dq and dk of the first example stay zero", W_OFF_BY_ONE)
wrong("Wv_last_position_skipped", "Wv", "Wv", sub(WV_LOOP, "range(block_size)", "range(block_size - 1)"),
      "dWv summed over positions 0..6 only: the last position's outer products are left out",
      W_OFF_BY_ONE)
wrong("Wk_first_example_skipped", "Wk", "Wk", sub(WK_LOOP, "range(n)", "range(1, n)"),
      "dWk summed from the second example on: the first example is missing", W_OFF_BY_ONE)
wrong("x_last_row_skipped", "x", "Wq", sub(X_ROWS, "range(xs.shape[0])", "range(xs.shape[0] - 1)"),
      "dWq summed over all flattened rows but the last", W_OFF_BY_ONE)
wrong("tok_first_example_skipped", "tok", "Cpos", sub(TOK_LOOP, "range(n)", "range(1, n)"),
      "dCpos summed over the batch from the second example on: one copy of Cpos is missing",
      W_OFF_BY_ONE)
wrong("C_first_character_skipped", "C", "C", sub(C_VOCAB, "range(vocab_size)", "range(1, vocab_size)"),
      "range(1, vocab_size): the row of '.' (index 0) never collects its gradient",
      W_OFF_BY_ONE)

# ---- WRONG: an accumulator that is a view of the gradient it sums -------------------
wrong("out_db_view_of_dlogits", "out", "out", OUT_ALIAS,
      "db = rows[0] is a view into dlogits: db += r writes the running sum into dlogits[0, 0], so "
      "dout and dW are built from a corrupted dlogits", W_ALIAS)
wrong("tok_dCpos_view_of_dx", "tok", "tok", TOK_ALIAS,
      "dCpos = dx[0] is a view (and dtok is dx itself): the += loop writes the batch sum into "
      "dx[0], so dtok's first example is wrong", W_ALIAS)

# ---- WRONG: the prediction where the target belongs ---------------------------------
wrong("logits_argmax_for_target", "logits", "logits",
      sub(LOGITS_ONE_HOT, "F.one_hot(Yb, vocab_size)", "F.one_hot(logits.argmax(-1), vocab_size)"),
      "the one-hot of the model's own prediction (argmax of the logits) subtracted instead of the "
      "target Yb's", W_ARGMAX)

# ---- WRONG: a slice where the row index belongs -------------------------------------
wrong("logits_slice_for_rows", "logits", "logits", sub(LOGITS_FLAT, "dl[range(N), Yb.view(-1)]", "dl[:, Yb.view(-1)]"),
      "dl[:, Y] -= 1 decrements every row at every character that is some row's target, instead of "
      "each row at its own target", W_SLICE)

# ---- WRONG: floor division where true division belongs ------------------------------
wrong("logits_floor_divided_mean", "logits", "logits",
      sub(LOGITS_ONE_HOT, "(P - Y1) / (n * block_size)", "(P - Y1) // (n * block_size)"),
      "(P - Y1) // N floors the gradient (to -1 at the targets, 0 elsewhere) instead of dividing",
      W_FLOORDIV + ("mean",))
wrong("q_dq_exponent_floor_divided", "q", "q", sub(Q_PLAIN, "head_size ** 0.5", "head_size ** (1 // 2)"),
      "head_size ** (1 // 2) is head_size ** 0 = 1: dq is not scaled at all", W_FLOORDIV + ("scale",))
wrong("q_dk_exponent_floor_divided", "q", "k", sub(Q_PLAIN, "head_size ** -0.5", "head_size ** (-1 // 2)"),
      "-1 // 2 is -1, so dk is scaled by 1/head_size instead of 1/sqrt(head_size)",
      W_FLOORDIV + ("scale",))

# ---- WRONG: the softmax differentiated elementwise, p (1 - p) -----------------------
wrong("logits_softmax_elementwise", "logits", "logits",
      sub(LOGITS_CHAIN, "P * (dP - (dP * P).sum(-1, keepdim=True))", "dP * P * (1 - P)"),
      "dP * P * (1 - P): only the Jacobian's diagonal, as for a sigmoid; the other classes get no "
      "gradient", W_ELEMENTWISE)
wrong("masked_softmax_elementwise", "masked", "masked", "dmasked = datt * att * (1 - att)\n",
      "the attention's softmax backpropagated as att (1 - att) elementwise: the off-diagonal "
      "-a_i a_j terms of each row's Jacobian are dropped", W_ELEMENTWISE)
