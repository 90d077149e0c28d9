"""Attention lesson (attention_pack, made from tests/packs/forward/slips_attention.py): a second
held-out corpus of learners' slips.

What it is: right and wrong backward-pass code for every step of the lesson, each wrong entry a
slip a learner is likely to make (the softmax Jacobian cut short, the 1/sqrt(head_size) forgotten or
doubled, causal masks turned round, matmul transposes dropped, x's three branches miscounted, the
positional gradient summed over the wrong axis, repeated characters lost in dC), with the words a
specific diagnosis of it would use.

Style of this half, unlike both earlier halves: explicit broadcasting with None / unsqueeze and a
reduction, torch.matmul with .swapaxes / .permute / .t(), torch.tensordot, torch.addmm, explicit
Jacobians with diag_embed, python loops over positions or rows, a multiplicative tril mask,
masked_fill and index_put_ with accumulate=True. Every entry is the whole answer to its step.

It was written apart from the diagnosis code (without reading tutor/) and is measured, never tuned
on: only the verdicts were checked when it was written (each RIGHT passes, each WRONG does not);
the `words` are the author's own guess at what a specific diagnosis would say, and no rule of the
tutor may be shaped to match them.

RIGHT = {name: (step_id, tensor, code, "")}
WRONG = {name: (step_id, tensor, code, slip, words)}
"""
from textwrap import dedent

S = "attention_pack/"
RIGHT: dict = {}
WRONG: dict = {}


def _ok(name, step, tensor, text):
    assert name not in RIGHT, name
    RIGHT[name] = (S + step, tensor, dedent(text).lstrip("\n"), "")


def _slip(name, step, tensor, text, slip, *words):
    assert name not in WRONG, name
    WRONG[name] = (S + step, tensor, dedent(text).lstrip("\n"), slip, tuple(w.lower() for w in words))


# ---------------------------------------------------------------- right answers, one style each
_ok("logits_logsumexp_index", "logits", "logits", """
    P = torch.exp(logits - logits.logsumexp(-1, keepdim=True))
    P[torch.arange(n)[:, None], torch.arange(block_size)[None, :], Yb] -= 1
    dlogits = P / (n * block_size)
    """)
_ok("out_swapaxes_tensordot", "out", "out", """
    dout = torch.matmul(dlogits, W.swapaxes(0, 1))
    dW = torch.tensordot(out, dlogits, dims=([0, 1], [0, 1]))
    db = dlogits.flatten(0, 1).sum(0)
    """)
_ok("att_broadcast_none", "att", "att", """
    datt = (dout[:, :, None, :] * v[:, None, :, :]).sum(-1)
    dv = (att[:, :, :, None] * dout[:, :, None, :]).sum(1)
    """)
_ok("masked_jacobian", "masked", "masked", """
    J = torch.diag_embed(att) - att.unsqueeze(-1) * att.unsqueeze(-2)
    dmasked = torch.matmul(J, datt.unsqueeze(-1)).squeeze(-1)
    """)
_ok("masked_row_loop", "masked", "masked", """
    dmasked = torch.zeros_like(att)
    for t in range(block_size):
        a, g = att[:, t], datt[:, t]
        dmasked[:, t] = a * (g - (a * g).sum(1, keepdim=True))
    """)
_ok("scores_tril_product", "scores", "scores", """
    keep = torch.ones(block_size, block_size).tril()
    dscores = dmasked * keep[None]
    """)
_ok("q_matmul_permute", "q", "q", """
    dq = torch.matmul(dscores, k) * head_size ** -0.5
    dk = torch.matmul(dscores.permute(0, 2, 1), q) / math.sqrt(head_size)
    """)
_ok("Wv_tensordot", "Wv", "Wv", """
    dx = torch.matmul(dv, Wv.t())
    dWv = torch.tensordot(x, dv, dims=([0, 1], [0, 1]))
    """)
_ok("Wk_position_loop", "Wk", "Wk", """
    dx += torch.matmul(dk, Wk.t())
    dWk = torch.zeros_like(Wk)
    for t in range(block_size):
        dWk += x[:, t].t() @ dk[:, t]
    """)
_ok("x_addmm", "x", "x", """
    dx = dx + torch.matmul(dq, Wq.swapaxes(0, 1))
    dWq = torch.addmm(torch.zeros_like(Wq), x.flatten(0, 1).t(), dq.flatten(0, 1))
    """)
_ok("tok_clone_sum", "tok", "Cpos", """
    dtok = dx.clone()
    dCpos = dx.sum(dim=0)
    """)
_ok("C_index_put_accumulate", "C", "C", """
    dC = torch.zeros_like(C).index_put_((Xb.flatten(),), dtok.flatten(0, 1), accumulate=True)
    """)

# ---------------------------------------------------------------- logits: cross-entropy
W_COUNT = ("mean", "average", "divide", "count", "factor", "scale")
_slip("logits_mean_over_every_entry", "logits", "logits", """
    P = torch.exp(logits - logits.logsumexp(-1, keepdim=True))
    P[torch.arange(n)[:, None], torch.arange(block_size)[None, :], Yb] -= 1
    dlogits = P / logits.numel()
    """, "divided by every entry (n * block_size * vocab_size) instead of the number of predictions",
    "vocab", "27", "numel", "count", "divide", "entries", "mean")
_slip("logits_inputs_as_targets", "logits", "logits", """
    P = torch.exp(logits - logits.logsumexp(-1, keepdim=True))
    P[torch.arange(n)[:, None], torch.arange(block_size)[None, :], Xb] -= 1
    dlogits = P / (n * block_size)
    """, "one-hot of the inputs Xb subtracted where the targets Yb belong",
    "target", "yb", "xb", "input", "label", "next")
_slip("logits_softmax_over_positions", "logits", "logits", """
    P = torch.exp(logits - logits.logsumexp(1, keepdim=True))
    P[torch.arange(n)[:, None], torch.arange(block_size)[None, :], Yb] -= 1
    dlogits = P / (n * block_size)
    """, "softmax normalised over the positions (dim 1) instead of the vocabulary",
    "axis", "dim", "softmax", "vocab", "position", "normalis", "normaliz")
_slip("logits_sign_flipped", "logits", "logits", """
    target = F.one_hot(Yb, vocab_size).float()
    dlogits = (target - logits.softmax(-1)) / (n * block_size)
    """, "one-hot minus probabilities: the sign is flipped",
    "sign", "negative", "minus", "opposite", "flipped", "reverse")
_slip("logits_raw_not_probs", "logits", "logits", """
    target = F.one_hot(Yb, vocab_size).float()
    dlogits = (logits - target) / (n * block_size)
    """, "raw logits used where the softmax probabilities belong",
    "softmax", "probabilit", "raw", "exp", "normalis", "normaliz")

# ---------------------------------------------------------------- out: logits = out @ W + b
_slip("out_db_last_position", "out", "b", """
    dout = torch.matmul(dlogits, W.swapaxes(0, 1))
    dW = torch.tensordot(out, dlogits, dims=([0, 1], [0, 1]))
    db = dlogits[:, -1].sum(0)
    """, "bias gradient from the last position only, not summed over every position",
    "position", "time", "last", "every", "all", "sum")
_slip("out_dW_product_of_sums", "out", "W", """
    dout = torch.matmul(dlogits, W.swapaxes(0, 1))
    dW = out.sum((0, 1))[:, None] * dlogits.sum((0, 1))[None, :]
    db = dlogits.flatten(0, 1).sum(0)
    """,
    "dW as the outer product of the sums instead of the sum of per-row outer products",
    "outer", "product", "each", "pair", "before", "example", "row")

# ---------------------------------------------------------------- att: out = att @ v
_slip("att_datt_rows_and_columns_swapped", "att", "att", """
    datt = (dout[:, None, :, :] * v[:, :, None, :]).sum(-1)
    dv = (att[:, :, :, None] * dout[:, :, None, :]).sum(1)
    """, "broadcast axes crossed: datt comes out transposed (key, query)",
    "transpose", "swap", "row", "column", "order", "query", "key")
_slip("att_dv_att_not_transposed", "att", "v", """
    datt = (dout[:, :, None, :] * v[:, None, :, :]).sum(-1)
    dv = torch.matmul(att, dout)
    """, "att used as is where its transpose belongs in dv",
    "transpose", "swap", "order", "row", "column", "permute")
_slip("att_dv_summed_over_keys", "att", "v", """
    datt = (dout[:, :, None, :] * v[:, None, :, :]).sum(-1)
    dv = (att[:, :, :, None] * dout[:, :, None, :]).sum(2)
    """, "dv summed over the key axis instead of the query axis (gives dout back)",
    "axis", "dim", "sum", "query", "key", "row", "column")

# ---------------------------------------------------------------- masked: att = softmax(masked)
_slip("masked_diagonal_slope_only", "masked", "masked", """
    dmasked = att * (1 - att) * datt
    """, "only the diagonal of the softmax Jacobian, s(1-s): the other entries of the row left out",
    "diagonal", "jacobian", "row", "other", "term", "sum", "off")
_slip("masked_keepdim_restored_on_wrong_axis", "masked", "masked", """
    s = (att * datt).sum(-1)
    dmasked = att * (datt - s[:, None, :])
    """, "row sums taken over the right axis but broadcast back along the wrong one",
    "keepdim", "axis", "broadcast", "unsqueeze", "dim", "row", "column")
_slip("masked_sum_over_queries", "masked", "masked", """
    s = (att * datt).sum(1, keepdim=True)
    dmasked = att * (datt - s)
    """, "the Jacobian's sum taken over the queries (dim 1) instead of the keys",
    "axis", "dim", "sum", "row", "column", "key", "query")
_slip("masked_log_softmax_formula", "masked", "masked", """
    dmasked = datt - att * datt.sum(-1, keepdim=True)
    """, "log-softmax's backward written for a softmax",
    "log", "log_softmax", "logsoftmax", "multiply", "probabilit")
_slip("masked_scores_for_probs", "masked", "masked", """
    dmasked = scores * (datt - (scores * datt).sum(-1, keepdim=True))
    """, "the softmax backward evaluated at the scores (its input) instead of att (its output)",
    "probabilit", "softmax", "att", "scores", "output", "input")
_slip("masked_jacobian_plus", "masked", "masked", """
    J = torch.diag_embed(att) + att.unsqueeze(-1) * att.unsqueeze(-2)
    dmasked = torch.matmul(J, datt.unsqueeze(-1)).squeeze(-1)
    """, "off-diagonal Jacobian entries added instead of subtracted",
    "sign", "minus", "subtract", "plus", "jacobian", "off-diagonal")
_slip("masked_row_loop_misses_last", "masked", "masked", """
    dmasked = torch.zeros_like(att)
    for t in range(block_size - 1):
        a, g = att[:, t], datt[:, t]
        dmasked[:, t] = a * (g - (a * g).sum(1, keepdim=True))
    """, "loop over query rows stops one short: the last row keeps zero gradient",
    "loop", "range", "last", "row", "position", "missing", "every")

# ---------------------------------------------------------------- scores: causal mask
_slip("scores_upper_triangle_kept", "scores", "scores", """
    keep = torch.ones(block_size, block_size).triu()
    dscores = dmasked * keep[None]
    """, "triu where tril belongs: gradient kept on the future, dropped on the past",
    "mask", "invert", "tril", "triu", "upper", "lower", "causal", "triangle")
_slip("scores_filled_with_minus_inf", "scores", "scores", """
    future = torch.ones(block_size, block_size).tril() == 0
    dscores = dmasked.masked_fill(future, float("-inf"))
    """, "the forward's fill value -inf copied into the gradient instead of 0",
    "inf", "fill", "zero", "mask", "value", "nan")
_slip("scores_scale_applied_here", "scores", "scores", """
    keep = torch.ones(block_size, block_size).tril()
    dscores = dmasked * keep[None] * head_size ** -0.5
    """, "the 1/sqrt(head_size) of the next line applied at the mask",
    "scale", "sqrt", "head_size", "factor", "line", "0.25")

# ---------------------------------------------------------------- q, k: scores = q @ k.T * scale
_slip("q_dq_scale_forgotten", "q", "q", """
    dq = torch.matmul(dscores, k)
    dk = torch.matmul(dscores.permute(0, 2, 1), q) / math.sqrt(head_size)
    """, "1/sqrt(head_size) left out of dq",
    "scale", "sqrt", "head_size", "factor", "0.25", "missing")
_slip("q_dk_scale_multiplied", "q", "k", """
    dq = torch.matmul(dscores, k) * head_size ** -0.5
    dk = torch.matmul(dscores.permute(0, 2, 1), q) * math.sqrt(head_size)
    """, "multiplied by sqrt(head_size) instead of divided",
    "sqrt", "multipl", "divide", "invert", "reciprocal", "scale")
_slip("q_dq_sqrt_of_block_size", "q", "q", """
    dq = torch.matmul(dscores, k) / math.sqrt(block_size)
    dk = torch.matmul(dscores.permute(0, 2, 1), q) / math.sqrt(head_size)
    """, "scaled by 1/sqrt(block_size) instead of 1/sqrt(head_size)",
    "block_size", "head_size", "sqrt", "size", "scale")
_slip("q_dk_scores_not_transposed", "q", "k", """
    dq = torch.matmul(dscores, k) * head_size ** -0.5
    dk = torch.matmul(dscores, q) * head_size ** -0.5
    """, "dscores not transposed for dk",
    "transpose", "swap", "row", "column", "order", "query", "key", "permute")

# ---------------------------------------------------------------- Wv: v = x @ Wv (first branch of x)
_slip("Wv_dx_Wv_not_transposed", "Wv", "x", """
    dx = torch.matmul(dv, Wv)
    dWv = torch.tensordot(x, dv, dims=([0, 1], [0, 1]))
    """, "Wv used untransposed in dx (square, so the shape hides it)",
    "transpose", "swap", "order", "square", ".t")
_slip("Wv_loop_skips_last_position", "Wv", "Wv", """
    dx = torch.matmul(dv, Wv.t())
    dWv = torch.zeros_like(Wv)
    for t in range(block_size - 1):
        dWv += x[:, t].t() @ dv[:, t]
    """, "position loop misses the last position",
    "position", "last", "range", "loop", "time", "every", "missing")

# ---------------------------------------------------------------- Wk: k = x @ Wk
_slip("Wk_dWk_from_dq", "Wk", "Wk", """
    dx += torch.matmul(dk, Wk.t())
    dWk = torch.tensordot(x, dq, dims=([0, 1], [0, 1]))
    """, "dq used where dk arrives",
    "dq", "dk", "gradient", "branch", "key", "query", "arriv")
_slip("Wk_scale_applied_again", "Wk", "Wk", """
    dx += torch.matmul(dk, Wk.t())
    dWk = torch.tensordot(x, dk, dims=([0, 1], [0, 1])) * head_size ** -0.5
    """, "the attention scale applied a second time (dk already carries it)",
    "scale", "twice", "sqrt", "head_size", "already", "again")

# ---------------------------------------------------------------- x: q = x @ Wq, x complete
_slip("x_branches_overwritten", "x", "x", """
    dx = torch.matmul(dq, Wq.swapaxes(0, 1))
    dWq = torch.addmm(torch.zeros_like(Wq), x.flatten(0, 1).t(), dq.flatten(0, 1))
    """, "= where += belongs: the k and v branches of x thrown away",
    "branch", "+=", "accumulate", "overwrite", "add", "other", "replac")
_slip("x_key_branch_twice", "x", "x", """
    dx = dx + torch.matmul(dq, Wq.t()) + torch.matmul(dk, Wk.t())
    dWq = torch.addmm(torch.zeros_like(Wq), x.flatten(0, 1).t(), dq.flatten(0, 1))
    """, "the k branch added again though dx already holds it",
    "twice", "double", "branch", "already", "again", "counted")
_slip("x_dWq_operands_swapped", "x", "Wq", """
    dx = dx + torch.matmul(dq, Wq.swapaxes(0, 1))
    dWq = torch.tensordot(dq, x, dims=([0, 1], [0, 1]))
    """, "dWq with its operands swapped: the transpose of the answer",
    "transpose", "order", "swap", "operand")

# ---------------------------------------------------------------- tok, Cpos: x = tok + Cpos
_slip("tok_Cpos_summed_over_positions", "tok", "Cpos", """
    dtok = dx.clone()
    dCpos = dx.sum(dim=1)
    """, "dCpos summed over the positions instead of the batch (shape)",
    "axis", "batch", "sum", "shape", "dim", "position")
_slip("tok_gradient_split_in_half", "tok", "tok", """
    dtok = dx / 2
    dCpos = dx.sum(dim=0) / 2
    """, "the sum's gradient split between its two terms instead of copied to each",
    "half", "split", "0.5", "divide", "copy", "both", "factor")

# ---------------------------------------------------------------- C: tok = C[Xb]
_slip("C_index_put_no_accumulate", "C", "C", """
    dC = torch.zeros_like(C).index_put_((Xb.flatten(),), dtok.flatten(0, 1))
    """, "index_put_ without accumulate=True: repeated characters keep one gradient",
    "repeat", "duplicate", "accumulate", "index_add", "overwrite", "once", "add up")
_slip("C_index_in_other_order", "C", "C", """
    dC = torch.zeros_like(C).index_put_((Xb.t().flatten(),), dtok.flatten(0, 1), accumulate=True)
    """, "indices flattened position-major while the gradient rows are batch-major",
    "order", "transpose", "index", "row", "flatten", "match", "align")
