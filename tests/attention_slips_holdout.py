"""Attention lesson (/work/corpus42/attention_pack): slip corpus, HOLDOUT half.

Style of this half: torch.einsum, torch.bmm, .mT, torch.where for masks. The tune half uses `@`
with .transpose and reshape.

RIGHT = {name: (step_id, tensor, code, "")}
WRONG = {name: (step_id, tensor, code, slip, words)}
"""
S = "attention_pack/"
MASK = "keep = torch.tril(torch.ones(block_size, block_size)).bool()\n"

W_MEAN = ("mean", "average", "divide", "divided", "scale", "factor")
W_SCALE = ("scale", "head_size", "sqrt", "0.5", "factor")
W_T = ("transpose", "order", "swap", "operand")
W_MASK = ("mask", "tril", "causal", "masked", "fill")
W_SOFT_SUM = ("sum", "jacobian", "term", "softmax", "missing")
W_BRANCH = ("branch", "accumulate", "+=", "overwrite", "other", "add", "twice")
W_BCAST = ("broadcast", "sum", "batch", "axis", "dim", "shape")
W_REPEAT = ("repeat", "accumulate", "index_add", "duplicate", "overwrite", "add up", "copy")

RIGHT, WRONG = {}, {}


def right(name, step, tensor, code):
    assert name not in RIGHT
    RIGHT[name] = (S + step, tensor, code, "")


def wrong(name, step, tensor, code, slip, words):
    assert name not in WRONG
    WRONG[name] = (S + step, tensor, code, slip, tuple(words))


R = {
    "logits": "p = F.softmax(logits, dim=2)\ny = F.one_hot(Yb, vocab_size).float()\ndlogits = (p - y) / Yb.numel()\n",
    "dout": "dout = torch.einsum('btv,cv->btc', dlogits, W)\n",
    "dW": "dW = torch.einsum('btc,btv->cv', out, dlogits)\n",
    "db": "db = torch.einsum('btv->v', dlogits)\n",
    "datt": "datt = torch.bmm(dout, v.mT)\n",
    "dv": "dv = torch.einsum('bts,btc->bsc', att, dout)\n",
    "masked": "g = att * datt\ndmasked = g - att * g.sum(2, keepdim=True)\n",
    "scores": MASK + "dscores = torch.where(keep, dmasked, torch.zeros_like(dmasked))\n",
    "dq": "dq = torch.einsum('bts,bsc->btc', dscores, k) / head_size ** 0.5\n",
    "dk": "dk = torch.einsum('bts,btc->bsc', dscores, q) / head_size ** 0.5\n",
    "Wv": "dWv = torch.einsum('btc,bth->ch', x, dv)\n",
    "Wk_dx": "dx = dx + torch.einsum('bth,ch->btc', dk, Wk)\n",
    "Wk": "dWk = torch.einsum('btc,bth->ch', x, dk)\n",
    "x_dx": "dx = dx + torch.einsum('bth,ch->btc', dq, Wq)\n",
    "Wq": "dWq = torch.einsum('btc,bth->ch', x, dq)\n",
    "dtok": "dtok = dx * 1.0\n",
    "dCpos": "dCpos = torch.einsum('btc->tc', dx)\n",
    "C": "dC = F.one_hot(Xb.flatten(), vocab_size).float().T @ dtok.flatten(0, 1)\n",
}
STEP_PARTS = {"logits": ["logits"], "out": ["dout", "dW", "db"], "att": ["datt", "dv"], "masked": ["masked"],
              "scores": ["scores"], "q": ["dq", "dk"], "Wv": ["Wv"], "Wk": ["Wk_dx", "Wk"], "x": ["x_dx", "Wq"],
              "tok": ["dtok", "dCpos"], "C": ["C"]}


def code(step, **over):
    return "".join(over.get(p, R[p]) for p in STEP_PARTS[step])


for st in STEP_PARTS:
    right(f"{st}_einsum", st, st, code(st))
right("out_bmm", "out", "out",
      "dout = torch.matmul(dlogits, W.mT)\ndW = torch.bmm(out.mT, dlogits).sum(0)\ndb = dlogits.sum(dim=[0, 1])\n")
right("att_matmul", "att", "att", "datt = torch.matmul(dout, v.mT)\ndv = torch.bmm(att.mT, dout)\n")
right("masked_dot_einsum", "masked", "masked",
      "dot = torch.einsum('bts,bts->bt', att, datt)\ndmasked = att * (datt - dot.unsqueeze(-1))\n")
right("x_einsum_sum", "x", "x", "dx += torch.einsum('bth,ch->btc', dq, Wq)\ndWq = torch.einsum('btc,bth->ch', x, dq)\n")

# ---- WRONG -------------------------------------------------------------------------
wrong("logits_div_block", "logits", "logits",
      "p = F.softmax(logits, dim=2)\ny = F.one_hot(Yb, vocab_size).float()\ndlogits = (p - y) / block_size\n",
      "divided by block_size only, not by n * block_size",
      ("batch", "n *", "mean", "divide", "count", "every"))
wrong("logits_no_onehot", "logits", "logits", "dlogits = F.softmax(logits, dim=2) / Yb.numel()\n",
      "forgot to subtract one at the true character", ("one", "one_hot", "true", "subtract", "label", "target"))
wrong("logits_softmax_dim1", "logits", "logits",
      "p = F.softmax(logits, dim=1)\ny = F.one_hot(Yb, vocab_size).float()\ndlogits = (p - y) / Yb.numel()\n",
      "softmax over the positions axis instead of the vocabulary", ("dim", "axis", "softmax", "vocab", "position"))
wrong("logits_log_softmax", "logits", "logits",
      "p = F.log_softmax(logits, dim=2)\ny = F.one_hot(Yb, vocab_size).float()\ndlogits = (p - y) / Yb.numel()\n",
      "log-probabilities instead of probabilities", ("log", "softmax", "probabilit"))

wrong("out_db_shape", "out", "b", code("out", db="db = torch.einsum('btv->tv', dlogits)\n"),
      "bias summed over the batch only (shape)", W_BCAST + ("position",))
wrong("out_dW_perexample", "out", "W", code("out", dW="dW = torch.einsum('btc,btv->bcv', out, dlogits)\n"),
      "batch axis kept in dW (shape)", ("batch", "sum", "shape"))
wrong("out_dout_extra_n", "out", "out", code("out", dout="dout = torch.einsum('btv,cv->btc', dlogits, W) / n\n"),
      "divided by n again", ("twice", "/ n", "divide", "scale", "mean", "factor"))
wrong("out_dW_positions", "out", "W", code("out", dW="dW = torch.einsum('btc,bsv->cv', out, dlogits)\n"),
      "einsum with different letters for the two position axes: every position paired with every other",
      ("position", "pair", "index", "einsum", "outer", "sum"))

wrong("att_dv_bmm", "att", "v", code("att", dv="dv = torch.bmm(att, dout)\n"), "att not transposed", W_T)
wrong("att_datt_where", "att", "att",
      code("att", datt=MASK + "datt = torch.where(keep, torch.bmm(dout, v.mT), torch.zeros(()))\n"),
      "causal mask applied to datt (too early)", W_MASK + ("early",))
wrong("att_datt_times_att", "att", "att", code("att", datt="datt = torch.bmm(dout, v.mT) * att\n"),
      "multiplied by att: part of the softmax's backward pass done a step early",
      ("softmax", "early", "att", "jacobian", "extra"))

wrong("masked_diag_only", "masked", "masked", "dmasked = att * (1 - att) * datt\n",
      "only the diagonal of the softmax Jacobian (sigmoid-like)", W_SOFT_SUM + ("diagonal", "sigmoid"))
wrong("masked_outer_att_missing", "masked", "masked", "dmasked = datt - (att * datt).sum(2, keepdim=True)\n",
      "the outer multiplication by att left out", ("att", "multipl", "softmax", "missing", "factor"))
wrong("masked_inner_att_missing", "masked", "masked", "dmasked = att * (datt - datt.sum(2, keepdim=True))\n",
      "sum term without the att weights", W_SOFT_SUM + ("weight", "att"))
wrong("masked_sum_dim1", "masked", "masked", "g = att * datt\ndmasked = g - att * g.sum(1, keepdim=True)\n",
      "sum term over the query axis instead of the key axis", ("dim", "axis", "row", "column", "sum"))

wrong("scores_diag_excluded", "scores", "scores",
      "keep = torch.tril(torch.ones(block_size, block_size), -1).bool()\n"
      "dscores = torch.where(keep, dmasked, torch.zeros_like(dmasked))\n",
      "mask built without the diagonal (a position may attend to itself)", W_MASK + ("diagonal",))
wrong("scores_mask_T", "scores", "scores", MASK + "dscores = torch.where(keep.T, dmasked, torch.zeros_like(dmasked))\n",
      "mask transposed", W_MASK + ("transpose", "upper", "triu"))
wrong("scores_zero_allowed", "scores", "scores", MASK + "dscores = dmasked.masked_fill(keep, 0.0)\n",
      "gradient zeroed at the allowed entries (mask inverted)", W_MASK + ("invert",))

wrong("q_dk_noscale", "q", "k", code("q", dk="dk = torch.einsum('bts,btc->bsc', dscores, q)\n"),
      "scale factor forgotten in dk", W_SCALE)
wrong("q_dq_scale_squared", "q", "q", code("q", dq="dq = torch.einsum('bts,bsc->btc', dscores, k) / head_size\n"),
      "divided by head_size instead of its square root", W_SCALE)
wrong("q_dq_transposed", "q", "q", code("q", dq="dq = torch.einsum('bst,bsc->btc', dscores, k) / head_size ** 0.5\n"),
      "dscores transposed for dq", W_T)
wrong("q_dk_notransp", "q", "k", code("q", dk="dk = torch.einsum('bts,bsc->btc', dscores, q) / head_size ** 0.5\n"),
      "dscores not transposed for dk", W_T)

wrong("Wk_transposed", "Wk", "Wk", R["Wk_dx"] + "dWk = torch.einsum('bth,btc->hc', dk, x)\n",
      "weight gradient transposed", W_T)
wrong("Wv_scaled", "Wv", "Wv", "dWv = torch.einsum('btc,bth->ch', x, dv) * head_size ** -0.5\n",
      "the scores' scale factor applied to the value branch", W_SCALE)
wrong("x_no_transpose", "x", "x", "dx += torch.einsum('bth,hc->btc', dq, Wq)\n" + R["Wq"],
      "Wq not transposed in dx", W_T)
wrong("x_branch_twice", "x", "x",
      "dx += torch.einsum('bth,ch->btc', dq, Wq) + torch.einsum('bth,ch->btc', dk, Wk)\n" + R["Wq"],
      "the k branch added a second time (dx already holds it)", W_BRANCH)
wrong("x_dWq_mean", "x", "Wq", R["x_dx"] + "dWq = torch.einsum('btc,bth->ch', x, dq) / (n * block_size)\n",
      "mean instead of sum", W_MEAN)

wrong("tok_cpos_noreduce", "tok", "Cpos", "dtok = dx * 1.0\ndCpos = dx\n",
      "broadcast not undone: dCpos keeps the batch axis (shape)", W_BCAST)
wrong("tok_cpos_all", "tok", "Cpos", "dtok = dx * 1.0\ndCpos = torch.einsum('btc->c', dx)\n",
      "summed over positions too (shape)", W_BCAST + ("position",))
wrong("tok_cpos_mean", "tok", "Cpos", "dtok = dx * 1.0\ndCpos = torch.einsum('btc->tc', dx) / n\n",
      "mean over the batch", W_MEAN)

wrong("C_index_copy", "C", "C",
      "dC = torch.zeros_like(C).index_copy_(0, Xb.flatten(), dtok.flatten(0, 1))\n",
      "index_copy_ instead of index_add_", W_REPEAT)
wrong("C_mean_per_char", "C", "C",
      "oh = F.one_hot(Xb.flatten(), vocab_size).float()\n"
      "dC = (oh.T @ dtok.flatten(0, 1)) / oh.sum(0).clamp(min=1).unsqueeze(1)\n",
      "averaged over occurrences instead of summed", ("mean", "average", "divide", "count", "sum"))
wrong("C_last_position", "C", "C",
      "dC = F.one_hot(Xb[:, -1], vocab_size).float().T @ dtok[:, -1]\n",
      "only the last position's characters get gradient", ("position", "last", "all", "every"))
