"""Right answers in the styles learners really write: every one of them must pass.

A correct answer must never be refused. These are written the way people work through the
exercise: keepdim dropped where only broadcasting follows, the lecture's size names
(`vocab_size`, `n_embd`, `n_hidden`, `block_size`, `batch_size`), loops next to one-liners,
index_add_ / scatter_add_ / one-hot matmuls, views, permutes and transposes, asserts on shapes,
and both branches of a tensor used twice written at once. Each goes through `Engine.check`
exactly as the CLI would send it, on the main batch and on the fresh batch of 17.
"""

from __future__ import annotations

import pytest

from tutor.pack.model import load_pack

PACK = load_pack()

CORRECT: dict[str, dict[str, str]] = {
    "atomic/logprobs": {
        "zeros-lecture-sizes": """
dlogprobs = torch.zeros((n, vocab_size))
dlogprobs[range(n), Yb] = -1.0 / n
""",
        "batch-size-name": """
dlogprobs = torch.zeros((batch_size, vocab_size))
dlogprobs[torch.arange(batch_size), Yb] = -1 / batch_size
""",
        "enumerate-targets": """
dlogprobs = torch.zeros_like(logprobs)
for i, y in enumerate(Yb):
    dlogprobs[i, y] = -1.0 / n
""",
        "one-hot-num-classes": """
dlogprobs = -F.one_hot(Yb, num_classes=vocab_size).float() / n
""",
        "scatter-in-place": """
dlogprobs = torch.zeros_like(logprobs).scatter_(1, Yb.view(-1, 1), -1.0 / n)
""",
        "assert-shape": """
dlogprobs = torch.zeros_like(logprobs)
dlogprobs[range(n), Yb] = -1 / n
assert dlogprobs.shape == logprobs.shape
""",
        "eye-rows": """
dlogprobs = -torch.eye(vocab_size)[Yb] / n
""",
        "loop-subtract": """
dlogprobs = torch.zeros(logprobs.shape)
for i in range(n):
    dlogprobs[i, Yb[i]] -= 1 / n
""",
    },
    "atomic/probs": {
        "power-minus-one-first": "dprobs = dlogprobs * probs**-1\n",
        "div-method": "dprobs = dlogprobs.div(probs)\n",
        "torch-div": "dprobs = torch.div(dlogprobs, probs)\n",
        "from-counts": "dprobs = dlogprobs * counts_sum / counts\n",
        "float-exponent": "dprobs = (probs ** -1.0) * dlogprobs\n",
        "local-then-assert": """
inv = 1.0 / probs
dprobs = inv * dlogprobs
assert dprobs.shape == (n, vocab_size)
""",
        "reciprocal-method": "dprobs = dlogprobs * probs.reciprocal()\n",
    },
    "atomic/counts_sum_inv": {
        "only-the-checked-one": """
dcounts_sum_inv = (counts * dprobs).sum(1, keepdim=True)
""",
        "expand-as": """
dcounts_sum_inv = (counts * dprobs).sum(dim=1, keepdim=True)
dcounts = dprobs * counts_sum_inv.expand_as(counts)
""",
        "einsum-rows": """
dcounts_sum_inv = torch.einsum('ij,ij->i', counts, dprobs).view(n, 1)
dcounts = counts_sum_inv * dprobs
""",
        "ones-like": """
dcounts_sum_inv = (counts * dprobs).sum(1, keepdim=True)
dcounts = torch.ones_like(counts) * counts_sum_inv * dprobs
""",
        "unsqueeze": """
dcounts_sum_inv = (counts * dprobs).sum(1).unsqueeze(1)
dcounts = counts_sum_inv * dprobs
""",
        "reshape-batch-size": """
dcounts_sum_inv = (counts * dprobs).sum(1).reshape(batch_size, 1)
dcounts = dprobs * counts_sum_inv
""",
        "matmul-ones-column": """
dcounts_sum_inv = (counts * dprobs) @ torch.ones(vocab_size, 1)
dcounts = counts_sum_inv * dprobs
""",
        "assert-shape": """
dcounts_sum_inv = (counts * dprobs).sum(1, keepdim=True)
assert dcounts_sum_inv.shape == counts_sum_inv.shape
dcounts = counts_sum_inv * dprobs
""",
    },
    "atomic/counts_sum": {
        "upstream-first": "dcounts_sum = -dcounts_sum_inv * counts_sum**-2\n",
        "divide-by-square": "dcounts_sum = -dcounts_sum_inv / counts_sum**2\n",
        "inverse-twice": "dcounts_sum = dcounts_sum_inv * -counts_sum_inv * counts_sum_inv\n",
        "pow-method": "dcounts_sum = (-1.0 * counts_sum.pow(-2)) * dcounts_sum_inv\n",
        "torch-pow": "dcounts_sum = -torch.pow(counts_sum, -2) * dcounts_sum_inv\n",
        "fraction": "dcounts_sum = dcounts_sum_inv * (-1 / (counts_sum ** 2))\n",
    },
    "atomic/counts": {
        "expand-lecture-sizes": "dcounts = dcounts + dcounts_sum.expand(n, vocab_size)\n",
        "both-branches-at-once": """
dcounts = counts_sum_inv * dprobs + torch.ones_like(counts) * dcounts_sum
""",
        "ones-batch-size": "dcounts += torch.ones((batch_size, vocab_size)) * dcounts_sum\n",
        "add-in-place-method": "dcounts.add_(dcounts_sum)\n",
        "loop-over-columns": """
for j in range(vocab_size):
    dcounts[:, j] += dcounts_sum[:, 0]
""",
        "outer-with-ones": "dcounts += dcounts_sum @ torch.ones(1, vocab_size)\n",
        "ones-shape-from-tensor": "dcounts = dcounts + torch.ones(counts.shape) * dcounts_sum\n",
    },
    "atomic/norm_logits": {
        "mul-method": "dnorm_logits = dcounts.mul(counts)\n",
        "torch-mul": "dnorm_logits = torch.mul(counts, dcounts)\n",
        "exp-of-difference": "dnorm_logits = dcounts * (logits - logit_maxes).exp()\n",
        "named-local-assert": """
local = counts
dnorm_logits = local * dcounts
assert dnorm_logits.shape == norm_logits.shape
""",
        "copy-then-scale": """
dnorm_logits = counts.clone()
dnorm_logits *= dcounts
""",
        "from-probs": "dnorm_logits = dcounts * counts_sum * probs\n",
    },
    "atomic/logit_maxes": {
        "minus-outside-reordered": """
dlogit_maxes = -dnorm_logits.sum(1, keepdim=True)
dlogits = dnorm_logits.clone()
""",
        "detach-clone": """
dlogits = dnorm_logits.detach().clone()
dlogit_maxes = dnorm_logits.sum(1, keepdim=True) * -1
""",
        "last-dim-torch-clone": """
dlogit_maxes = (-dnorm_logits).sum(-1, keepdim=True)
dlogits = torch.clone(dnorm_logits)
""",
        "matmul-ones-column": """
dlogit_maxes = -dnorm_logits @ torch.ones(vocab_size, 1)
dlogits = dnorm_logits.clone()
""",
        "only-the-checked-one": """
dlogit_maxes = -(dnorm_logits.sum(1, keepdims=True))
""",
        "zero-by-reasoning": """
dlogits = dnorm_logits.clone()
dlogit_maxes = torch.zeros_like(logit_maxes)
""",
        "reshape-column": """
dlogit_maxes = -dnorm_logits.sum(dim=1).reshape(-1, 1)
dlogits = dnorm_logits + 0.0
""",
    },
    "atomic/logits": {
        "argmax-lecture-sizes": """
dlogits += F.one_hot(logits.argmax(dim=1), num_classes=vocab_size) * dlogit_maxes
""",
        "both-branches-at-once": """
dlogits = dnorm_logits + F.one_hot(logits.max(1).indices, vocab_size) * dlogit_maxes
""",
        "loop-rows": """
for i in range(n):
    dlogits[i, logits[i].argmax()] += dlogit_maxes[i, 0]
""",
        "scatter-add": """
dlogits.scatter_add_(1, logits.argmax(1, keepdim=True), dlogit_maxes)
""",
        "scatter-mask": """
ix = logits.max(1, keepdim=True).indices
mask = torch.zeros_like(logits).scatter_(1, ix, 1.0)
dlogits += mask * dlogit_maxes
""",
        "advanced-index": """
dlogits[range(n), logits.argmax(1)] += dlogit_maxes.view(-1)
""",
        "equality-with-max": """
dlogits = dlogits + (logits == logits.max(1, keepdim=True).values) * dlogit_maxes
""",
    },
    "atomic/h": {
        "permute": """
dh = dlogits @ W2.permute(1, 0)
dW2 = h.permute(1, 0) @ dlogits
db2 = dlogits.sum(dim=0)
""",
        "transpose-negative-dims": """
dh = dlogits @ W2.transpose(-1, -2)
dW2 = h.transpose(-1, -2) @ dlogits
db2 = torch.ones(n) @ dlogits
""",
        "loop-over-rows": """
dh = torch.zeros_like(h)
dW2 = torch.zeros_like(W2)
for i in range(n):
    dh[i] = W2 @ dlogits[i]
    dW2 += torch.outer(h[i], dlogits[i])
db2 = dlogits.sum(0)
""",
        "keepdim-then-view": """
dh = dlogits @ W2.T
dW2 = h.T @ dlogits
db2 = dlogits.sum(0, keepdim=True).view(vocab_size)
""",
        "torch-mm": """
dh = torch.mm(dlogits, W2.T)
dW2 = torch.mm(h.T, dlogits)
db2 = dlogits.sum(0)
""",
        "assert-shapes": """
dh = dlogits @ W2.T
dW2 = h.T @ dlogits
db2 = dlogits.sum(0)
assert dh.shape == h.shape and dW2.shape == W2.shape and db2.shape == b2.shape
""",
        "reshape-view-as": """
db2 = dlogits.sum(0).reshape(b2.shape)
dW2 = (h.T @ dlogits).view_as(W2)
dh = dlogits @ W2.t()
""",
    },
    "atomic/hpreact": {
        "pow-method": "dhpreact = dh * (1 - h.pow(2))\n",
        "tanh-of-input": "dhpreact = dh * (1 - torch.tanh(hpreact)**2)\n",
        "difference-of-squares": "dhpreact = (1 - h) * (1 + h) * dh\n",
        "square": "dhpreact = dh * (1 - torch.square(h))\n",
        "cosh-power": "dhpreact = dh * torch.cosh(hpreact)**-2\n",
        "assert-lecture-sizes": """
local = 1.0 - h * h
assert local.shape == (batch_size, n_hidden)
dhpreact = local * dh
""",
        "integer-one": "dhpreact = (1 - h**2) * dh\n",
    },
    "atomic/bngain": {
        "lecture-no-keepdim": """
dbngain = (dhpreact * bnraw).sum(0)
dbnraw = bngain * dhpreact
dbnbias = dhpreact.sum(0)
""",
        "expand-lecture-sizes": """
dbngain = (dhpreact * bnraw).sum(0, keepdim=True)
dbnraw = bngain.expand(batch_size, n_hidden) * dhpreact
dbnbias = dhpreact.sum(0, keepdim=True)
""",
        "ones-row-matmul": """
dbngain = torch.ones(1, n) @ (bnraw * dhpreact)
dbnraw = bngain * dhpreact
dbnbias = torch.ones(1, n) @ dhpreact
""",
        "mixed-keepdim": """
dbngain = (bnraw * dhpreact).sum(0, keepdim=True)
dbnraw = dhpreact * bngain
dbnbias = dhpreact.sum(0)
""",
        "einsum": """
dbngain = torch.einsum('ij,ij->j', bnraw, dhpreact)
dbnraw = bngain * dhpreact
dbnbias = torch.einsum('ij->j', dhpreact)
""",
        "assert-shape": """
dbnraw = bngain * dhpreact
dbnbias = dhpreact.sum(0, keepdim=True)
dbngain = (bnraw * dhpreact).sum(0, keepdim=True)
assert dbngain.shape == bngain.shape
""",
        "view-as": """
dbngain = (bnraw * dhpreact).sum(0).view_as(bngain)
dbnraw = bngain * dhpreact
dbnbias = dhpreact.sum(0).view_as(bnbias)
""",
    },
    "atomic/bnvar_inv": {
        "lecture-no-keepdim": """
dbnvar_inv = (bndiff * dbnraw).sum(0)
dbndiff = bnvar_inv * dbnraw
""",
        "only-the-checked-one": """
dbnvar_inv = (bndiff * dbnraw).sum(0, keepdim=True)
""",
        "expand-as": """
dbndiff = dbnraw * bnvar_inv.expand_as(bndiff)
dbnvar_inv = (dbnraw * bndiff).sum(dim=0, keepdim=True)
""",
        "ones-row-matmul": """
dbnvar_inv = torch.ones(1, batch_size) @ (bndiff * dbnraw)
dbndiff = bnvar_inv * dbnraw
""",
        "bndiff-from-bnraw": """
dbnvar_inv = (bnraw / bnvar_inv * dbnraw).sum(0, keepdim=True)
dbndiff = bnvar_inv * dbnraw
""",
        "loop-over-columns": """
dbnvar_inv = torch.zeros_like(bnvar_inv)
for j in range(n_hidden):
    dbnvar_inv[0, j] = (bndiff[:, j] * dbnraw[:, j]).sum()
dbndiff = bnvar_inv * dbnraw
""",
        "transposed-sum": """
dbnvar_inv = (bndiff * dbnraw).T.sum(1).view(1, -1)
dbndiff = bnvar_inv * dbnraw
""",
    },
    "atomic/bnvar": {
        "from-inverse-cubed": "dbnvar = dbnvar_inv * (-0.5) * bnvar_inv**3\n",
        "inverse-over-variance": "dbnvar = -0.5 * bnvar_inv / (bnvar + 1e-5) * dbnvar_inv\n",
        "torch-pow": "dbnvar = -dbnvar_inv * 0.5 * torch.pow(bnvar + 1e-5, -1.5)\n",
        "rsqrt-cubed": "dbnvar = -0.5 * torch.rsqrt(bnvar + 1e-5)**3 * dbnvar_inv\n",
        "named-epsilon": """
eps = 1e-5
dbnvar = (-0.5 * (bnvar + eps)**(-1.5)) * dbnvar_inv
""",
        "sqrt-cubed": "dbnvar = -0.5 * dbnvar_inv / torch.sqrt(bnvar + 1e-5)**3\n",
    },
    "atomic/bndiff2": {
        "lecture-broadcast-row": "dbndiff2 = 1/(n-1) * dbnvar\n",
        "ones-batch-size": "dbndiff2 = torch.ones_like(bndiff2) * dbnvar / (batch_size - 1)\n",
        "expand-lecture-sizes": "dbndiff2 = (1.0 / (n - 1)) * dbnvar.expand(n, n_hidden)\n",
        "concatenate-rows": "dbndiff2 = torch.cat([dbnvar] * n, 0) / (n - 1)\n",
        "full-like": "dbndiff2 = torch.full_like(bndiff2, 1.0 / (n - 1)) * dbnvar\n",
        "expand-clone": "dbndiff2 = dbnvar.expand_as(bndiff2).clone() * (1 / (n - 1))\n",
        "ones-column-matmul": "dbndiff2 = torch.ones(batch_size, 1) @ dbnvar / (n - 1)\n",
    },
    "atomic/bndiff": {
        "out-of-place-reordered": "dbndiff = dbndiff + bndiff * 2 * dbndiff2\n",
        "both-branches-at-once": "dbndiff = bnvar_inv * dbnraw + 2 * bndiff * dbndiff2\n",
        "add-in-place-method": "dbndiff.add_(2 * bndiff * dbndiff2)\n",
        "sum-for-double": "dbndiff += (bndiff + bndiff) * dbndiff2\n",
        "expand-upstream": "dbndiff += 2 * bndiff * dbndiff2.expand_as(bndiff)\n",
        "torch-add": "dbndiff = torch.add(dbndiff, 2.0 * bndiff * dbndiff2)\n",
    },
    "atomic/bnmeani": {
        "lecture-no-keepdim": """
dbnmeani = (-dbndiff).sum(0)
dhprebn = dbndiff.clone()
""",
        "only-the-checked-one": """
dbnmeani = -dbndiff.sum(0, keepdim=True)
""",
        "ones-row-matmul": """
dhprebn = dbndiff.clone()
dbnmeani = -torch.ones(1, n) @ dbndiff
""",
        "neg-method": """
dbnmeani = dbndiff.sum(0, keepdim=True).neg()
dhprebn = dbndiff.detach().clone()
""",
        "plus-zero-copy": """
dhprebn = dbndiff + 0
dbnmeani = (-1.0 * dbndiff).sum(dim=0, keepdims=True)
""",
        "mean-times-n": """
dbnmeani = -dbndiff.mean(0, keepdim=True) * n
dhprebn = dbndiff.clone()
""",
    },
    "atomic/hprebn": {
        "expand-as": "dhprebn += dbnmeani.expand_as(hprebn) / n\n",
        "both-branches-at-once": "dhprebn = dbndiff.clone() + dbnmeani / n\n",
        "ones-column-matmul": """
dhprebn = dhprebn + torch.ones(batch_size, 1) @ dbnmeani / batch_size
""",
        "add-in-place-method": "dhprebn.add_(dbnmeani * (1.0 / n))\n",
        "batch-size-name": "dhprebn += (1 / batch_size) * dbnmeani\n",
        "loop-over-rows": """
for i in range(n):
    dhprebn[i] += dbnmeani[0] / n
""",
    },
    "atomic/embcat": {
        "permute": """
dembcat = dhprebn @ W1.permute(1, 0)
dW1 = embcat.permute(1, 0) @ dhprebn
db1 = dhprebn.sum(0)
""",
        "transpose-method": """
dembcat = dhprebn @ W1.transpose(0, 1)
dW1 = embcat.transpose(0, 1) @ dhprebn
db1 = dhprebn.sum(dim=0)
""",
        "assert-lecture-sizes": """
dembcat = dhprebn @ W1.T
dW1 = embcat.T @ dhprebn
db1 = dhprebn.sum(0)
assert dembcat.shape == (n, block_size * n_embd)
assert dW1.shape == W1.shape and db1.shape == b1.shape
""",
        "zero-bias-by-reasoning": """
dembcat = dhprebn @ W1.T
dW1 = embcat.T @ dhprebn
db1 = torch.zeros(n_hidden)
""",
        "ones-vector-matmul": """
dembcat = dhprebn @ W1.T
dW1 = embcat.T @ dhprebn
db1 = torch.ones(batch_size) @ dhprebn
""",
        "embcat-from-emb": """
dembcat = dhprebn @ W1.T
dW1 = emb.view(n, -1).T @ dhprebn
db1 = dhprebn.sum(0)
""",
        "mm-keepdim-squeeze": """
dembcat = torch.mm(dhprebn, W1.t())
dW1 = torch.mm(embcat.t(), dhprebn)
db1 = dhprebn.sum(0, keepdim=True).squeeze()
""",
    },
    "atomic/emb": {
        "view-lecture-sizes": "demb = dembcat.view(-1, block_size, n_embd)\n",
        "reshape-list": "demb = dembcat.reshape([batch_size, block_size, n_embd])\n",
        "view-from-shape": "demb = dembcat.view(emb.shape[0], emb.shape[1], emb.shape[2])\n",
        "unflatten": "demb = dembcat.unflatten(1, (block_size, n_embd))\n",
        "loop-over-positions": """
demb = torch.zeros_like(emb)
for j in range(block_size):
    demb[:, j, :] = dembcat[:, j * n_embd:(j + 1) * n_embd]
""",
        "split-and-stack": "demb = torch.stack(dembcat.split(n_embd, dim=1), dim=1)\n",
        "view-n": "demb = dembcat.view(n, block_size, -1)\n",
    },
    "atomic/C": {
        "lecture-loop": """
dC = torch.zeros_like(C)
for k in range(Xb.shape[0]):
    for j in range(Xb.shape[1]):
        dC[Xb[k,j]] += demb[k,j]
""",
        "index-add-lecture-sizes": """
dC = torch.zeros((vocab_size, n_embd))
dC.index_add_(0, Xb.view(-1), demb.view(-1, n_embd))
""",
        "scatter-add": """
dC = torch.zeros_like(C)
idx = Xb.view(-1, 1).expand(-1, n_embd)
dC.scatter_add_(0, idx, demb.view(-1, n_embd))
""",
        "one-hot-matmul": """
dC = F.one_hot(Xb.view(-1), num_classes=vocab_size).float().T @ demb.view(-1, n_embd)
""",
        "enumerate-loops": """
dC = torch.zeros_like(C)
for k, row in enumerate(Xb):
    for j, ix in enumerate(row):
        dC[ix] += demb[k, j]
""",
        "one-hot-einsum": """
oh = F.one_hot(Xb, num_classes=vocab_size).float()
dC = torch.einsum('nbv,nbe->ve', oh, demb)
""",
        "loop-over-vocab": """
dC = torch.zeros_like(C)
flat = demb.view(-1, n_embd)
for v in range(vocab_size):
    dC[v] = flat[Xb.view(-1) == v].sum(0)
""",
        "index-put-accumulate": """
dC = torch.zeros_like(C)
dC.index_put_((Xb.flatten(),), demb.reshape(-1, n_embd), accumulate=True)
""",
    },
    "fused/cross_entropy": {
        "one-hot-num-classes": """
dlogits = (F.softmax(logits, dim=1) - F.one_hot(Yb, num_classes=vocab_size)) / n
""",
        "exp-normalised": """
e = logits.exp()
p = e / e.sum(1, keepdim=True)
dlogits = (p - F.one_hot(Yb, vocab_size).float()) / batch_size
""",
        "zeros-targets": """
t = torch.zeros((n, vocab_size))
t[range(n), Yb] = 1.0
dlogits = (logits.softmax(-1) - t) / n
""",
        "loop-rows": """
dlogits = F.softmax(logits, 1)
for i in range(n):
    dlogits[i, Yb[i]] -= 1
dlogits = dlogits / n
""",
        "enumerate-targets": """
dlogits = F.softmax(logits, 1) / n
for i, y in enumerate(Yb):
    dlogits[i, y] -= 1 / n
""",
        "scatter-add": """
dlogits = F.softmax(logits, 1).scatter_add(1, Yb.view(-1, 1), -torch.ones(n, 1))
dlogits /= n
""",
        "log-softmax-exp": """
dlogits = (F.log_softmax(logits, 1).exp() - F.one_hot(Yb, vocab_size)) * (1 / n)
""",
        "assert-batch-size": """
dlogits = torch.softmax(logits, dim=1)
dlogits[torch.arange(batch_size), Yb] -= 1
dlogits /= batch_size
assert dlogits.shape == logits.shape
""",
    },
    "fused/batchnorm": {
        "named-sums": """
g = dhpreact.sum(0)
gx = (dhpreact * bnraw).sum(0)
dhprebn = bngain * bnvar_inv / n * (n * dhpreact - g - n / (n - 1) * bnraw * gx)
""",
        "means": """
dhprebn = bngain * bnvar_inv * (dhpreact - dhpreact.mean(0)
    - bnraw * (dhpreact * bnraw).sum(0) / (n - 1))
""",
        "from-bndiff": """
xhat = bndiff * bnvar_inv
dhprebn = bngain * bnvar_inv / n * (n * dhpreact - dhpreact.sum(0)
    - n / (n - 1) * xhat * (dhpreact * xhat).sum(0))
""",
        "batch-size-name": """
dhprebn = bngain * bnvar_inv / batch_size * (batch_size * dhpreact - dhpreact.sum(0)
    - batch_size / (batch_size - 1) * bnraw * (dhpreact * bnraw).sum(0))
""",
        "loop-over-columns": """
dhprebn = torch.zeros_like(hprebn)
for j in range(n_hidden):
    d = dhpreact[:, j]
    x = bnraw[:, j]
    dhprebn[:, j] = bngain[0, j] * bnvar_inv[0, j] / n * (n * d - d.sum()
        - n / (n - 1) * x * (d * x).sum())
""",
        "three-named-paths": """
direct = dhpreact
through_mean = dhpreact.mean(0, keepdim=True)
through_var = bnraw * (dhpreact * bnraw).sum(0, keepdim=True) / (n - 1)
dhprebn = bngain * bnvar_inv * (direct - through_mean - through_var)
""",
        "expand-as": """
s1 = dhpreact.sum(0).expand_as(dhpreact)
s2 = (dhpreact * bnraw).sum(0).expand_as(dhpreact)
dhprebn = bngain * bnvar_inv / n * (n * dhpreact - s1 - n / (n - 1) * bnraw * s2)
""",
    },
}

# A gradient of another accepted shape must work downstream: the lecture's [64] gradients and
# the [1, 64] dbndiff2 are replayed as the learner's saved code before the later step runs.
DOWNSTREAM = {
    "bnvar-after-1d-dbnvar_inv": (
        "atomic/bnvar",
        {"atomic/bnvar_inv": "dbnvar_inv = (bndiff * dbnraw).sum(0)\ndbndiff = bnvar_inv * dbnraw"},
        "dbnvar = -0.5 * (bnvar + 1e-5)**-1.5 * dbnvar_inv\n",
    ),
    "bndiff-after-row-dbndiff2": (
        "atomic/bndiff",
        {"atomic/bndiff2": "dbndiff2 = 1/(n-1) * dbnvar"},
        "dbndiff += 2 * bndiff * dbndiff2\n",
    ),
    "hprebn-after-1d-dbnmeani": (
        "atomic/hprebn",
        {"atomic/bnmeani": "dbnmeani = (-dbndiff).sum(0)\ndhprebn = dbndiff.clone()"},
        "dhprebn += 1.0/n * torch.ones_like(hprebn) * dbnmeani\n",
    ),
    "hprebn-lecture-form-after-1d-dbnmeani": (
        "atomic/hprebn",
        {"atomic/bnmeani": "dbnmeani = (-dbndiff).sum(0)\ndhprebn = dbndiff.clone()"},
        "dhprebn += dbnmeani / n\n",
    ),
    "bndiff2-after-1d-chain": (
        "atomic/bndiff2",
        {
            "atomic/bnvar_inv": "dbnvar_inv = (bndiff * dbnraw).sum(0)\n"
            "dbndiff = bnvar_inv * dbnraw",
            "atomic/bnvar": "dbnvar = -0.5 * (bnvar + 1e-5)**-1.5 * dbnvar_inv",
        },
        "dbndiff2 = 1.0 / (n - 1) * torch.ones_like(bndiff2) * dbnvar\n",
    ),
}

CASES = [
    pytest.param(step_id, code.lstrip("\n"), id=f"{step_id}-{name}")
    for step_id, forms in CORRECT.items()
    for name, code in forms.items()
]


def _assert_passed(result: dict) -> None:
    assert result["error"] is None, result["error"]
    failing = [
        (c["grad"], c["verdict"], c["diagnosis"], c["message"])
        for c in result["checks"]
        if c["verdict"] not in ("exact", "approximate") or c["diagnosis"]
    ]
    assert result["passed"], failing or result.get("heldout")
    assert result["heldout"]["passed"] and result["heldout"]["batch_size"] == 17


def test_the_corpus_is_big_and_covers_every_step():
    ids = {s.id for s in PACK.gradient_steps if s.exercise in (1, 2, 3)}
    assert set(CORRECT) == ids
    assert len(CASES) >= 150
    assert all(len(forms) >= 6 for forms in CORRECT.values())


@pytest.mark.parametrize("step_id, code", CASES)
def test_correct_answer_passes(engine, step_id, code):
    _assert_passed(engine.check(step_id, code).to_dict())


@pytest.mark.parametrize(
    "step_id, prior, code", [pytest.param(*v, id=k) for k, v in DOWNSTREAM.items()]
)
def test_accepted_shape_works_downstream(engine, step_id, prior, code):
    _assert_passed(engine.check(step_id, code, prior).to_dict())


@pytest.mark.parametrize(
    "step_id, code, tensor",
    [
        pytest.param("atomic/bngain", CORRECT["atomic/bngain"]["lecture-no-keepdim"], "bngain",
                     id="parameter-missing-dim"),
        pytest.param("atomic/bnmeani", CORRECT["atomic/bnmeani"]["lecture-no-keepdim"],
                     "bnmeani", id="intermediate-missing-dim"),
        pytest.param("atomic/bndiff2", CORRECT["atomic/bndiff2"]["lecture-broadcast-row"],
                     "bndiff2", id="broadcast-row"),
    ],
)
def test_other_accepted_shapes_carry_a_note(engine, step_id, code, tensor):
    result = engine.check(step_id, code.lstrip("\n")).to_dict()
    check = next(c for c in result["checks"] if c["tensor"] == tensor)
    assert check["shape"] != check["expected_shape"]
    assert check["note"] and f"d{tensor}" in check["note"]
    for other in result["checks"]:
        if other["shape"] == other["expected_shape"]:
            assert other["note"] is None  # the exact shape passes silently


def test_keepdim_note_speaks_of_parameters(engine):
    code = CORRECT["atomic/bngain"]["lecture-no-keepdim"].lstrip("\n")
    note = next(c["note"] for c in engine.check("atomic/bngain", code).to_dict()["checks"]
                if c["tensor"] == "bngain")
    assert "keepdim" in note and "bngain -= lr * dbngain" in note


def test_lecture_sizes_follow_the_batch(engine):
    # batch_size is n on both batches; the fixed sizes are the lesson's.
    code = (
        "assert batch_size == n and vocab_size == 27 and n_embd == 10\n"
        "assert n_hidden == 64 and block_size == 3\n"
        "dprobs = dlogprobs / probs\n"
    )
    _assert_passed(engine.check("atomic/probs", code).to_dict())


COMPLETE_AT_FIRST_BRANCH = [
    pytest.param(
        "atomic/counts_sum_inv",
        "dcounts_sum_inv = (counts * dprobs).sum(1, keepdim=True)\n"
        "dcounts = counts_sum_inv * dprobs - counts_sum**-2 * dcounts_sum_inv",
        "counts",
        id="dcounts",
    ),
    pytest.param(
        "atomic/bnvar_inv",
        "dbnvar_inv = (bndiff * dbnraw).sum(0, keepdim=True)\n"
        "dbnvar = -0.5 * (bnvar + 1e-5)**-1.5 * dbnvar_inv\n"
        "dbndiff = bnvar_inv * dbnraw + 2 * bndiff * (1 / (n - 1)) * dbnvar",
        "bndiff",
        id="dbndiff",
    ),
    pytest.param(
        "atomic/bnmeani",
        "dbnmeani = (-dbndiff).sum(0, keepdim=True)\n"
        "dhprebn = dbndiff + dbnmeani / n",
        "hprebn",
        id="dhprebn",
    ),
]


@pytest.mark.parametrize("step_id, code, tensor", COMPLETE_AT_FIRST_BRANCH)
def test_complete_gradient_at_a_first_branch_step_is_recognised(engine, step_id, code, tensor):
    result = engine.check(step_id, code).to_dict()
    assert result["error"] is None, result["error"]
    check = next(c for c in result["checks"] if c["tensor"] == tensor)
    assert check["partial"] and check["verdict"] in ("exact", "approximate"), check
    assert check["diagnosis"] is None
    assert check["note"] and "complete" in check["note"] and "both branches" in check["note"]


@pytest.mark.parametrize("step_id, code, tensor", COMPLETE_AT_FIRST_BRANCH)
def test_complete_gradient_at_a_first_branch_step_passes(engine, step_id, code, tensor):
    _assert_passed(engine.check(step_id, code).to_dict())


@pytest.mark.parametrize("gradcheck_steps", [pytest.param(20, id="checked"),
                                             pytest.param(0, id="unchecked")])
def test_accepted_lecture_style_code_trains(engine, gradcheck_steps):
    # Exercise 4 assembles the accepted code: the lecture's names and a [64] dbngain must run
    # there too, through the gradient check and the in-place update.
    import threading

    from tutor.training import run_training, training_code

    accepted = {
        "atomic/bngain": CORRECT["atomic/bngain"]["lecture-no-keepdim"].strip(),
        "atomic/emb": CORRECT["atomic/emb"]["view-lecture-sizes"].strip(),
        "atomic/C": CORRECT["atomic/C"]["index-add-lecture-sizes"].strip(),
    }
    code = training_code(PACK, accepted)
    assert "dbngain = (dhpreact * bnraw).sum(0)" in code and "vocab_size" in code
    request = {"code": code, "steps": 40, "gradcheck_steps": gradcheck_steps}
    result = run_training(engine, request, lambda _: None, threading.Event())
    assert result["status"] == "finished", result.get("error") or result.get("gradcheck")
    if gradcheck_steps:
        assert result["gradcheck"]["passed"]
