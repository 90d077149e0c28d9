"""Attention lesson (/work/corpus42/attention_pack): slip corpus, TUNE half.

Style of this half: `@` with .transpose(-2, -1) / .T, reshape to 2-D for the weight gradients,
masked_fill / multiplication by a tril matrix. The holdout half uses einsum, torch.bmm and .mT.

RIGHT = {name: (step_id, tensor, code, "")}
WRONG = {name: (step_id, tensor, code, slip, words)}
"""
S = "attention_pack/"
TRIL = "tril = torch.tril(torch.ones(block_size, block_size))\n"

W_MEAN = ("mean", "average", "divide", "divided", "scale", "factor")
W_SCALE = ("scale", "head_size", "sqrt", "0.5", "factor")
W_T = ("transpose", "order", "swap", "operand")
W_MASK = ("mask", "tril", "causal", "masked", "fill")
W_SOFT_SUM = ("sum", "jacobian", "term", "softmax", "missing")
W_BRANCH = ("branch", "accumulate", "+=", "overwrite", "other", "add")
W_BCAST = ("broadcast", "sum", "batch", "axis", "dim", "shape")
W_REPEAT = ("repeat", "accumulate", "index_add", "duplicate", "overwrite", "add up", "+=")

RIGHT, WRONG = {}, {}


def right(name, step, tensor, code):
    assert name not in RIGHT
    RIGHT[name] = (S + step, tensor, code, "")


def wrong(name, step, tensor, code, slip, words):
    assert name not in WRONG
    WRONG[name] = (S + step, tensor, code, slip, tuple(words))


# ---- right parts -------------------------------------------------------------------
R = {
    "logits": "dlogits = (F.softmax(logits, -1) - F.one_hot(Yb, vocab_size)) / (n * block_size)\n",
    "dout": "dout = dlogits @ W.T\n",
    "dW": "dW = out.reshape(-1, head_size).T @ dlogits.reshape(-1, vocab_size)\n",
    "db": "db = dlogits.sum((0, 1))\n",
    "datt": "datt = dout @ v.transpose(-2, -1)\n",
    "dv": "dv = att.transpose(-2, -1) @ dout\n",
    "masked": "dmasked = att * (datt - (att * datt).sum(-1, keepdim=True))\n",
    "scores": TRIL + "dscores = dmasked.masked_fill(tril == 0, 0.0)\n",
    "dq": "dq = dscores @ k * head_size ** -0.5\n",
    "dk": "dk = dscores.transpose(-2, -1) @ q * head_size ** -0.5\n",
    "Wv": "dWv = (x.transpose(-2, -1) @ dv).sum(0)\n",
    "Wk_dx": "dx += dk @ Wk.T\n",
    "Wk": "dWk = (x.transpose(1, 2) @ dk).sum(0)\n",
    "x_dx": "dx += dq @ Wq.T\n",
    "Wq": "dWq = x.reshape(-1, n_embd).T @ dq.reshape(-1, head_size)\n",
    "dtok": "dtok = dx.clone()\n",
    "dCpos": "dCpos = dx.sum(0)\n",
    "C": "dC = torch.zeros_like(C)\ndC.index_add_(0, Xb.reshape(-1), dtok.reshape(-1, n_embd))\n",
}
STEP_PARTS = {"logits": ["logits"], "out": ["dout", "dW", "db"], "att": ["datt", "dv"], "masked": ["masked"],
              "scores": ["scores"], "q": ["dq", "dk"], "Wv": ["Wv"], "Wk": ["Wk_dx", "Wk"], "x": ["x_dx", "Wq"],
              "tok": ["dtok", "dCpos"], "C": ["C"]}


def code(step, **over):
    return "".join(over.get(p, R[p]) for p in STEP_PARTS[step])


# ---- RIGHT -------------------------------------------------------------------------
for st in STEP_PARTS:
    right(f"{st}_plain", st, st, code(st))
right("logits_index", "logits", "logits",
      "p = F.softmax(logits, -1)\nflat = p.view(-1, vocab_size).clone()\nflat[torch.arange(n * block_size), Yb.view(-1)] -= 1\n"
      "dlogits = flat.view(n, block_size, vocab_size) / (n * block_size)\n")
right("masked_two_terms", "masked", "masked", "dot = (att * datt).sum(dim=-1, keepdim=True)\ndmasked = att * datt - att * dot\n")
right("scores_mul", "scores", "scores", TRIL + "dscores = dmasked * tril\n")
right("q_scale_first", "q", "q", "s = head_size ** -0.5\ndsc = dscores * s\ndq = dsc @ k\ndk = dsc.transpose(-2, -1) @ q\n")
right("x_full_sum", "x", "x", "dx = dq @ Wq.T + dk @ Wk.T + dv @ Wv.T\n" + R["Wq"])
right("tok_alias", "tok", "tok", "dtok = dx\ndCpos = dx.sum(dim=0)\n")

# ---- WRONG -------------------------------------------------------------------------
wrong("logits_div_n_only", "logits", "logits",
      "dlogits = (F.softmax(logits, -1) - F.one_hot(Yb, vocab_size)) / n\n",
      "divided by n only: the loss averages over n * block_size predictions",
      ("position", "block_size", "mean", "divide", "count", "n *", "every"))
wrong("logits_no_div", "logits", "logits", "dlogits = F.softmax(logits, -1) - F.one_hot(Yb, vocab_size)\n",
      "forgot the mean's division", ("mean", "divide", "average", "scale", "count"))
wrong("logits_sign", "logits", "logits",
      "dlogits = (F.one_hot(Yb, vocab_size) - F.softmax(logits, -1)) / (n * block_size)\n",
      "sign flipped", ("sign", "negative", "minus", "flip", "opposite"))

wrong("out_db_sum0", "out", "b", code("out", db="db = dlogits.sum(0)\n"),
      "bias summed over the batch only, not the positions (shape)", W_BCAST + ("position",))
wrong("out_dW_nobatch", "out", "W", code("out", dW="dW = out.transpose(-2, -1) @ dlogits\n"),
      "batched matmul not summed over the batch (shape)", ("batch", "sum", "shape"))
wrong("out_dW_mean", "out", "W", code("out", dW="dW = (out.transpose(-2, -1) @ dlogits).mean(0)\n"),
      "mean over the batch instead of sum", W_MEAN)

wrong("att_dv_notransp", "att", "v", code("att", dv="dv = att @ dout\n"),
      "att not transposed in dv", W_T)
wrong("att_datt_masked", "att", "att", code("att", datt=TRIL + "datt = (dout @ v.transpose(-2, -1)) * tril\n"),
      "causal mask applied to datt: att's gradient is full, the mask acts two steps later", W_MASK + ("early",))
wrong("att_datt_transposed", "att", "att", code("att", datt="datt = (dout @ v.transpose(-2, -1)).transpose(-2, -1)\n"),
      "datt transposed (query/key axes swapped)", W_T)

wrong("masked_no_sum", "masked", "masked", "dmasked = att * datt\n",
      "softmax gradient without the sum term (diagonal of the Jacobian only)", W_SOFT_SUM)
wrong("masked_sum_dim", "masked", "masked",
      "dmasked = att * (datt - (att * datt).sum(-2, keepdim=True))\n",
      "sum term taken over the wrong axis (queries instead of keys)", ("dim", "axis", "row", "column", "sum"))
wrong("masked_unsqueeze_axis", "masked", "masked", "dmasked = att * (datt - (att * datt).sum(-1).unsqueeze(1))\n",
      "row sums put back on the wrong axis (unsqueeze(1) instead of keepdim): broadcast along the wrong axis", ("keepdim", "broadcast", "axis", "dim", "shape"))
wrong("masked_sum_sign", "masked", "masked", "dmasked = att * (datt + (att * datt).sum(-1, keepdim=True))\n",
      "sum term added instead of subtracted", ("sign", "plus", "minus", "subtract"))
wrong("masked_unnormalised", "masked", "masked",
      "s = masked.exp()\ndmasked = s * (datt - (s * datt).sum(-1, keepdim=True))\n",
      "softmax recomputed without normalising (exp only)", ("normal", "exp", "softmax", "divide", "sum"))

wrong("scores_fill_inf", "scores", "scores", TRIL + "dscores = dmasked.masked_fill(tril == 0, float('-inf'))\n",
      "the forward fill value (-inf) written into the gradient instead of 0", W_MASK + ("inf", "zero"))
wrong("scores_triu", "scores", "scores", "dscores = dmasked * torch.triu(torch.ones(block_size, block_size))\n",
      "mask with the wrong orientation (upper triangle kept)", W_MASK + ("triu", "upper", "transpose"))
wrong("scores_inverted", "scores", "scores", TRIL + "dscores = dmasked * (tril == 0)\n",
      "mask inverted: gradient kept only where the forward pass masked", W_MASK + ("invert",))

wrong("q_dq_noscale", "q", "q", code("q", dq="dq = dscores @ k\n"), "scale factor forgotten in dq", W_SCALE)
wrong("q_dk_noscale", "q", "k", code("q", dk="dk = dscores.transpose(-2, -1) @ q\n"), "scale factor forgotten in dk", W_SCALE)
wrong("q_dk_notransp", "q", "k", code("q", dk="dk = dscores @ q * head_size ** -0.5\n"),
      "dscores not transposed for dk", W_T)
wrong("q_dq_transposed", "q", "q", code("q", dq="dq = dscores.transpose(-2, -1) @ k * head_size ** -0.5\n"),
      "dscores transposed for dq (the roles of q and k swapped)", W_T)
wrong("q_dk_scale_inverted", "q", "k", code("q", dk="dk = dscores.transpose(-2, -1) @ q * head_size ** 0.5\n"),
      "scale inverted (multiplied by sqrt(head_size))", W_SCALE + ("invert",))

wrong("Wv_transposed", "Wv", "Wv", "dWv = (dv.transpose(-2, -1) @ x).sum(0)\n",
      "weight gradient transposed (dv.T @ x instead of x.T @ dv)", W_T)
wrong("Wk_mean", "Wk", "Wk", R["Wk_dx"] + "dWk = (x.transpose(1, 2) @ dk).mean(0)\n", "mean over the batch", W_MEAN)
wrong("x_overwrite", "x", "x", "dx = dq @ Wq.T\n" + R["Wq"],
      "dx assigned instead of accumulated: the k and v branches lost", W_BRANCH)
wrong("x_dWq_nobatch", "x", "Wq", R["x_dx"] + "dWq = x.transpose(-2, -1) @ dq\n",
      "per-example weight gradients not summed (shape)", ("batch", "sum", "shape"))

wrong("tok_cpos_mean", "tok", "Cpos", "dtok = dx.clone()\ndCpos = dx.mean(0)\n",
      "mean over the batch instead of sum", W_MEAN)
wrong("tok_cpos_axis", "tok", "Cpos", "dtok = dx.clone()\ndCpos = dx.sum(1)\n",
      "summed over positions instead of the batch (shape)", W_BCAST + ("position",))
wrong("tok_cpos_first", "tok", "Cpos", "dtok = dx.clone()\ndCpos = dx[0]\n",
      "gradient of the first example only; broadcast copies not summed", W_BCAST)
wrong("tok_half", "tok", "tok", "dtok = dx / 2\ndCpos = dx.sum(0)\n",
      "gradient split in half between the two summands", ("half", "split", "copy", "both", "divide", "add"))

wrong("C_assign", "C", "C", "dC = torch.zeros_like(C)\ndC[Xb] = dtok\n",
      "assignment: repeated characters overwrite", W_REPEAT)
wrong("C_plus_equals", "C", "C", "dC = torch.zeros_like(C)\ndC[Xb] += dtok\n",
      "advanced-index += loses repeats", W_REPEAT)
