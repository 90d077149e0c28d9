"""A held-out corpus of learner answers that make tensors without saying a device.

Every answer here builds at least one tensor with a factory that takes no `device=` (and no
`*_like` of a forward tensor): `torch.ones`, `torch.zeros`, `torch.arange`, `torch.eye`,
`torch.full`, `torch.empty`, `torch.tensor`, `torch.linspace`, `torch.tril(torch.ones(...))`.
On a GPU such a tensor lands on the CPU unless the tutor makes the GPU the default device, and
the answer then fails (or is graded on the wrong device) although its mathematics is right.

    RIGHT   name -> (lesson, step_id, code): answers that must pass
    WRONG   name -> (lesson, step_id, code): typical slips, still written with device-less
            factories, that must be refused as a wrong gradient (or a learner's shape/runtime
            error), never as "syntax", "forbidden" or "internal"

Written apart from the device code and the packs' reference solutions, and never tuned on:
benchmarks/device_parity.py reports it on its own. Nothing runs at import but definitions.
"""
# ruff: noqa: E501 - learners' lines, kept as they were written

from __future__ import annotations

RIGHT: dict[str, tuple[str, str, str]] = {
    # ------------------------------------------------------------------ makemore
    # one-hot via torch.zeros(n, vocab_size), then index-assign with torch.arange rows
    "mm-logprobs-zeros-index": ("makemore", "atomic/logprobs", """
dlogprobs = torch.zeros(n, vocab_size)
dlogprobs[torch.arange(n), Yb] = -1.0 / n
"""),
    # one-liner: a mask from torch.arange compared with the targets
    "mm-logprobs-arange-mask": ("makemore", "atomic/logprobs", """
dlogprobs = -(torch.arange(logprobs.shape[1])[None, :] == Yb[:, None]).float() / n
"""),
    # loop over the rows of a torch.zeros buffer
    "mm-logprobs-row-loop": ("makemore", "atomic/logprobs", """
dlogprobs = torch.zeros(logprobs.shape)
for row in range(n):
    dlogprobs[row, Yb[row]] = -1.0 / n
"""),
    # scatter_add_ whose source comes from torch.full
    "mm-logprobs-scatter-full": ("makemore", "atomic/logprobs", """
src = torch.full((n, 1), -1.0 / n)
dlogprobs = torch.zeros(n, logprobs.shape[1]).scatter_add_(1, Yb.view(-1, 1), src)
"""),
    # column ids from torch.linspace (exact small integers as floats)
    "mm-logprobs-linspace": ("makemore", "atomic/logprobs", """
V = logprobs.shape[1]
cols = torch.linspace(0, V - 1, V)
picked = (cols[None, :] == Yb[:, None].float()).float()
dlogprobs = picked * (-1.0 / n)
"""),
    # a ones tensor divided by probs
    "mm-probs-ones-over": ("makemore", "atomic/probs", """
dprobs = torch.ones(probs.shape) / probs * dlogprobs
"""),
    # row sum written as a product with a torch.ones column
    "mm-counts-sum-inv-ones-col": ("makemore", "atomic/counts_sum_inv", """
ones_col = torch.ones(counts.shape[1], 1)
dcounts_sum_inv = (counts * dprobs) @ ones_col
dcounts = dprobs * counts_sum_inv
"""),
    # a float literal tensor for the power rule's factor
    "mm-counts-sum-literal": ("makemore", "atomic/counts_sum", """
dcounts_sum = torch.tensor([-1.0]) * counts_sum**-2 * dcounts_sum_inv
"""),
    # broadcast written as an outer product with torch.ones(1, V)
    "mm-counts-outer-ones": ("makemore", "atomic/counts", """
dcounts += dcounts_sum @ torch.ones(1, counts.shape[1])
"""),
    # torch.empty buffer filled in place
    "mm-norm-logits-empty": ("makemore", "atomic/norm_logits", """
dnorm_logits = torch.empty(counts.shape)
dnorm_logits[:] = counts * dcounts
"""),
    # the minus sign folded into a ones column
    "mm-logit-maxes-neg-ones": ("makemore", "atomic/logit_maxes", """
dlogits = dnorm_logits.clone()
dlogit_maxes = dnorm_logits @ -torch.ones(dnorm_logits.shape[1], 1)
"""),
    # arange mask against argmax, several statements
    "mm-logits-arange-argmax": ("makemore", "atomic/logits", """
where_max = logits.argmax(1, keepdim=True)
hit = torch.arange(logits.shape[1])[None, :] == where_max
dlogits += hit.float() * dlogit_maxes
"""),
    # torch.where with an arange mask and a torch.zeros fallback
    "mm-logits-where-zeros": ("makemore", "atomic/logits", """
is_max = torch.arange(logits.shape[1]).view(1, -1) == logits.max(1).indices.view(-1, 1)
dlogits += torch.where(is_max, dlogit_maxes, torch.zeros(1))
"""),
    # einsum for the matrices, a ones vector for the bias
    "mm-h-einsum-ones": ("makemore", "atomic/h", """
dh = torch.einsum('nv,hv->nh', dlogits, W2)
dW2 = torch.einsum('nh,nv->hv', h, dlogits)
db2 = torch.ones(n) @ dlogits
"""),
    # 1 - h**2 with the one as a tensor
    "mm-hpreact-ones1": ("makemore", "atomic/hpreact", """
dhpreact = (torch.ones(1) - h * h) * dh
"""),
    # sums over the batch written as torch.ones(1, n) @ ...
    "mm-bngain-ones-row": ("makemore", "atomic/bngain", """
batch_ones = torch.ones(1, n)
dbngain = batch_ones @ (bnraw * dhpreact)
dbnraw = dhpreact * bngain
dbnbias = batch_ones @ dhpreact
"""),
    # same idea for the variance's inverse
    "mm-bnvar-inv-ones-row": ("makemore", "atomic/bnvar_inv", """
dbnvar_inv = torch.ones(1, bndiff.shape[0]) @ (bndiff * dbnraw)
dbndiff = dbnraw * bnvar_inv
"""),
    # the power rule's factor as a float literal tensor
    "mm-bnvar-literal": ("makemore", "atomic/bnvar", """
dbnvar = torch.tensor([-0.5]) * (bnvar + 1e-5) ** -1.5 * dbnvar_inv
"""),
    # torch.full for the Bessel-corrected 1/(n-1)
    "mm-bndiff2-full": ("makemore", "atomic/bndiff2", """
dbndiff2 = torch.full(bndiff2.shape, 1.0 / (n - 1)) * dbnvar
"""),
    # torch.full((1,), 2.0) as the power rule's factor
    "mm-bndiff-full-two": ("makemore", "atomic/bndiff", """
two = torch.full((1,), 2.0)
dbndiff += two * bndiff * dbndiff2
"""),
    # the minus sign and the sum in one torch.ones row
    "mm-bnmeani-ones-row": ("makemore", "atomic/bnmeani", """
dhprebn = dbndiff.clone()
dbnmeani = -torch.ones(1, n) @ dbndiff
"""),
    # the mean's broadcast written as a ones column times the row
    "mm-hprebn-ones-col": ("makemore", "atomic/hprebn", """
dhprebn += torch.ones(n, 1) @ dbnmeani / n
"""),
    # einsum for the weight, a ones vector of the batch's own length for the bias
    "mm-embcat-einsum": ("makemore", "atomic/embcat", """
dembcat = dhprebn @ W1.T
dW1 = torch.einsum('ni,nj->ij', embcat, dhprebn)
db1 = torch.ones(dhprebn.shape[0]) @ dhprebn
"""),
    # an identity Jacobian from torch.eye before the reshape
    "mm-emb-eye": ("makemore", "atomic/emb", """
demb = (dembcat @ torch.eye(dembcat.shape[1])).view(emb.shape)
"""),
    # torch.zeros, then accumulate in place
    "mm-emb-zeros-iadd": ("makemore", "atomic/emb", """
demb = torch.zeros(emb.shape)
demb += dembcat.view(emb.shape)
"""),
    # one-hot of the context ids via torch.zeros + index assign, then a matrix product
    "mm-C-onehot-matmul": ("makemore", "atomic/C", """
ids = Xb.reshape(-1)
onehot = torch.zeros(ids.shape[0], C.shape[0])
onehot[torch.arange(ids.shape[0]), ids] = 1.0
dC = onehot.T @ demb.reshape(-1, C.shape[1])
"""),
    # index_add_ into a torch.zeros table
    "mm-C-index-add": ("makemore", "atomic/C", """
dC = torch.zeros(C.shape).index_add_(0, Xb.flatten(), demb.flatten(0, 1))
"""),
    # loops over rows and context positions
    "mm-C-double-loop": ("makemore", "atomic/C", """
dC = torch.zeros(C.shape[0], C.shape[1])
for r in range(Xb.shape[0]):
    for j in range(Xb.shape[1]):
        dC[Xb[r, j]] += demb[r, j]
"""),
    # rows of torch.eye as the one-hot targets
    "mm-ce-eye-rows": ("makemore", "fused/cross_entropy", """
dlogits = (F.softmax(logits, 1) - torch.eye(logits.shape[1])[Yb]) / n
"""),
    # one-hot via torch.zeros + arange index assign, several statements
    "mm-ce-zeros-onehot": ("makemore", "fused/cross_entropy", """
target = torch.zeros(n, logits.shape[1])
target[torch.arange(n), Yb] = 1.0
p = logits.softmax(1)
dlogits = (p - target) / n
"""),
    # F.one_hot, with the count as a float literal tensor
    "mm-ce-onehot-literal": ("makemore", "fused/cross_entropy", """
dlogits = (F.softmax(logits, 1) - F.one_hot(Yb, logits.shape[1]).float()) / torch.tensor([float(n)])
"""),
    # centering matrix from torch.eye and torch.full
    "mm-bn-centering-matrix": ("makemore", "fused/batchnorm", """
centre = torch.eye(n) - torch.full((n, n), 1.0 / n)
dhprebn = bngain * bnvar_inv * (centre @ dhpreact - bnraw * (bnraw * dhpreact).sum(0, keepdim=True) / (n - 1))
"""),
    # batch sums as torch.ones(1, n) @ ...
    "mm-bn-ones-sums": ("makemore", "fused/batchnorm", """
s = torch.ones(1, n)
sum_d = s @ dhpreact
sum_dr = s @ (dhpreact * bnraw)
dhprebn = bngain * bnvar_inv / n * (n * dhpreact - sum_d - n / (n - 1) * bnraw * sum_dr)
"""),

    # ------------------------------------------------------------------ gpt
    # rows of torch.eye as one-hot targets
    "gpt-logits-eye": ("gpt", "block/logits", """
dlogits = (F.softmax(logits, -1) - torch.eye(vocab_size)[targets]) / (n * block_size)
"""),
    # one-hot via torch.zeros and two arange index tensors
    "gpt-logits-zeros-index": ("gpt", "block/logits", """
oh = torch.zeros(n, block_size, vocab_size)
oh[torch.arange(n)[:, None], torch.arange(block_size)[None, :], targets] = 1.0
dlogits = (logits.softmax(-1) - oh) / (n * block_size)
"""),
    # arange mask against the targets
    "gpt-logits-arange-mask": ("gpt", "block/logits", """
hit = (torch.arange(vocab_size) == targets[..., None]).float()
dlogits = (F.softmax(logits, dim=-1) - hit) / targets.numel()
"""),
    # batch sums as a ones vector over the flattened positions
    "gpt-lnf-affine-ones": ("gpt", "block/lnf_affine", """
rows = torch.ones(n * block_size)
dlnf_norm = dlnf * lnfw
dlnfw = rows @ (dlnf * lnf_norm).reshape(-1, n_embd)
dlnfb = rows @ dlnf.reshape(-1, n_embd)
"""),
    # a float literal tensor for the size
    "gpt-lnf-xc-literal": ("gpt", "block/lnf_xc", """
dlnf_xc += 2 * lnf_xc * dlnf_var / torch.tensor([float(n_embd)])
"""),
    # the mean's broadcast with torch.full
    "gpt-x2-full": ("gpt", "block/x2", """
dx2 += dlnf_mean * torch.full((n_embd,), 1.0 / n_embd)
"""),
    # einsum for the weights, torch.ones for the bias
    "gpt-fcproj-einsum": ("gpt", "block/fcproj", """
dfch_gelu = torch.einsum('btc,hc->bth', dfcproj, fcprojw)
dfcprojw = torch.einsum('bth,btc->hc', fch_gelu, dfcproj)
dfcprojb = torch.ones(n, block_size).reshape(-1) @ dfcproj.reshape(-1, n_embd)
"""),
    # layernorm through a centering matrix from torch.eye and torch.full
    "gpt-x1-centering": ("gpt", "block/x1", """
P = torch.eye(n_embd) - torch.full((n_embd, n_embd), 1.0 / n_embd)
proj = (dln2_norm * ln2_norm).mean(-1, keepdim=True)
dx1 += ln2_rstd * (dln2_norm @ P - ln2_norm * proj)
"""),
    # heads split by a loop into a torch.empty buffer
    "gpt-atty-empty-loop": ("gpt", "block/atty", """
datty = torch.empty(n, n_head, block_size, head_size)
for hd in range(n_head):
    datty[:, hd] = dy[:, :, hd * head_size:(hd + 1) * head_size]
"""),
    # the softmax's Jacobian built explicitly with torch.eye
    "gpt-softmax-eye-jacobian": ("gpt", "block/preatt_masked", """
J = att[..., :, None] * (torch.eye(block_size) - att[..., None, :])
dpreatt_masked = (datt[..., None, :] @ J).squeeze(-2)
"""),
    # torch.tril(torch.ones(T, T)) as the mask
    "gpt-preatt-tril": ("gpt", "block/preatt", """
dpreatt = dpreatt_masked * torch.tril(torch.ones(block_size, block_size))
"""),
    # torch.where with a mask from two aranges
    "gpt-preatt-where-arange": ("gpt", "block/preatt", """
pos = torch.arange(block_size)
keep = pos[:, None] >= pos[None, :]
dpreatt = torch.where(keep, dpreatt_masked, torch.zeros(1))
"""),
    # the heads merged into a torch.zeros buffer, slice by slice
    "gpt-qkv-zeros-slices": ("gpt", "block/qkv", """
dqkv = torch.zeros(n, block_size, 3 * n_embd)
for part, d in enumerate([dq, dk, dv]):
    dqkv[:, :, part * n_embd:(part + 1) * n_embd] = d.transpose(1, 2).reshape(n, block_size, n_embd)
"""),
    # sum over the batch as a ones vector contracted by einsum
    "gpt-wpe-ones-einsum": ("gpt", "block/wpe", """
dtok = dx0 * torch.ones(1)
dwpe = torch.einsum('b,btc->tc', torch.ones(n), dx0)
"""),
    # one-hot of the token ids, torch.zeros + index assign, then a matrix product
    "gpt-wte-onehot": ("gpt", "block/wte", """
ids = Xb.reshape(-1)
oh = torch.zeros(ids.numel(), vocab_size)
oh[torch.arange(ids.numel()), ids] = 1.0
dwte += oh.T @ dtok.reshape(-1, n_embd)
"""),
    # function: torch.zeros table and index_add_
    "gpt-fn-encoder-zeros": ("gpt", "functions/encoder_backward", """
def encoder_backward(dout, inp, vocab_size):
    B, T, C = dout.shape
    dwte = torch.zeros(vocab_size, C)
    dwte.index_add_(0, inp.flatten(), dout.reshape(B * T, C))
    dwpe = torch.ones(B) @ dout.reshape(B, T * C)
    return dwte, dwpe.view(T, C)
"""),
    # function: torch.ones for the bias
    "gpt-fn-matmul-ones": ("gpt", "functions/matmul_backward", """
def matmul_backward(dout, inp, weight):
    C, OC = weight.shape
    flat = dout.reshape(-1, OC)
    dinp = dout @ weight.T
    dweight = inp.reshape(-1, C).T @ flat
    dbias = torch.ones(flat.shape[0]) @ flat
    return dinp, dweight, dbias
"""),
    # function: the one-hot by torch.zeros + arange
    "gpt-fn-ce-zeros": ("gpt", "functions/crossentropy_softmax_backward", """
def crossentropy_softmax_backward(logits, targets):
    N, V = logits.shape
    y = torch.zeros(N, V)
    y[torch.arange(N), targets] = 1.0
    return (F.softmax(logits, dim=-1) - y) / N
"""),
    # function: a tril mask made without a device, applied to the softmax's backward pass
    "gpt-fn-attention-tril": ("gpt", "functions/attention_backward", """
def attention_backward(dout, qkv, att, n_head):
    B, T, C3 = qkv.shape
    C = C3 // 3
    hs = C // n_head
    def heads(x):
        return x.reshape(B, T, n_head, hs).transpose(1, 2)
    def merge(x):
        return x.transpose(1, 2).reshape(B, T, C)
    q, k, v = heads(qkv[..., :C]), heads(qkv[..., C:2 * C]), heads(qkv[..., 2 * C:])
    datty = heads(dout)
    datt = datty @ v.transpose(-2, -1)
    dpre = att * (datt - (att * datt).sum(-1, keepdim=True))
    dpre = dpre * torch.tril(torch.ones(T, T)) / math.sqrt(hs)
    dq = dpre @ k
    dk = dpre.transpose(-2, -1) @ q
    dv = att.transpose(-2, -1) @ datty
    return torch.cat([merge(dq), merge(dk), merge(dv)], -1)
"""),
    # function: torch.tensor constants in the GELU derivative
    "gpt-fn-gelu-literals": ("gpt", "functions/gelu_backward", """
def gelu_backward(dout, inp):
    k = torch.tensor([math.sqrt(2 / math.pi)])
    c = torch.tensor([0.044715])
    th = torch.tanh(k * (inp + c * inp**3))
    local = 0.5 * (1 + th) + 0.5 * inp * (1 - th**2) * k * (1 + 3 * c * inp**2)
    return local * dout
"""),

    # ------------------------------------------------------------------ lstm
    # an arange mask: the -1 padding matches no class by itself
    "lstm-logits-arange-mask": ("lstm", "step/logits", """
hit = (torch.arange(vocab_size) == Yb[:, :, None]).float()
dlogits = (F.softmax(logits, -1) - hit) * mask[:, :, None] / mask.sum()
"""),
    # torch.where with a torch.zeros fallback on the padding
    "lstm-logits-where": ("lstm", "step/logits", """
real = (Yb >= 0)[..., None]
onehot = torch.eye(vocab_size)[Yb.clamp(min=0)]
grad = (logits.softmax(-1) - onehot) / real.sum()
dlogits = torch.where(real, grad, torch.zeros(1))
"""),
    # torch.ones for the bias, einsum for the weight
    "lstm-hs-ones": ("lstm", "step/hs", """
flat = dlogits.reshape(-1, vocab_size)
dhs = dlogits @ Wy.T
dWy = torch.einsum('ntk,ntv->kv', hs, dlogits)
dby = torch.ones(flat.shape[0]) @ flat
"""),
    # dh started from torch.zeros and accumulated
    "lstm-h-out-zeros": ("lstm", "step/h_out", """
dhs_before = dhs[:, :t]
dhs_after = dhs[:, t + 1:]
dh = torch.zeros(n, n_hidden)
dh += dhs[:, t]
"""),
    # dc built as torch.zeros plus the slice
    "lstm-state-zeros": ("lstm", "step/state", """
dh += dstate[0]
dc = torch.zeros(n, n_hidden) + dstate[1]
"""),
    # a ones tensor in tanh's derivative
    "lstm-h-ones": ("lstm", "step/h", """
tc = torch.tanh(c)
do = dh * tc
dc += dh * o * (torch.ones(n, n_hidden) - tc * tc)
"""),
    # a ones vector for 1 - sigmoid
    "lstm-gates-ones": ("lstm", "step/gates", """
one = torch.ones(n_hidden)
dai = di * i * (one - i)
daf = df * f * (one - f)
dao = do * o * (one - o)
"""),
    # a float literal tensor
    "lstm-g-literal": ("lstm", "step/g", """
dag = dg * (torch.tensor([1.0]) - g**2)
"""),
    # the four quarters written into a torch.zeros buffer
    "lstm-ifgo-zeros": ("lstm", "step/ifgo", """
difgo = torch.zeros(n, 4 * n_hidden)
for q, d in enumerate([dai, daf, dag, dao]):
    difgo[:, q * n_hidden:(q + 1) * n_hidden] = d
"""),
    # torch.ones(1, n) for the bias, einsum for the weights
    "lstm-inputs-ones": ("lstm", "step/inputs", """
dx_t = difgo @ Wx_t.T
dh_prev = difgo @ Wh_t.T
dWx_t = torch.einsum('nd,ng->dg', x_t, difgo)
dWh_t = torch.einsum('nh,ng->hg', h_prev, difgo)
db_t = (torch.ones(1, n) @ difgo).view(-1)
"""),
    # the fused gates with a literal one
    "lstm-fused-gates-literal": ("lstm", "fused/gates", """
one = torch.tensor([1.0])
difgo = torch.cat([di * i * (one - i), df * f * (one - f), dg * (one - g * g), do * o * (one - o)], 1)
"""),
    # function: buffers and carried gradients from torch.zeros
    "lstm-bptt-zeros": ("lstm", "bptt/lstm_backward", """
def lstm_backward(dhs, xs, h0, c0, hs, cs, gates, Wx, Wh):
    B, T, H = hs.shape
    D = xs.shape[2]
    dxs = torch.zeros(B, T, D)
    dWx = torch.zeros(D, 4 * H)
    dWh = torch.zeros(H, 4 * H)
    db = torch.zeros(4 * H)
    dh_carry = torch.zeros(B, H)
    dc_carry = torch.zeros(B, H)
    for s in range(T - 1, -1, -1):
        i, f, g, o = gates[:, s, :H], gates[:, s, H:2 * H], gates[:, s, 2 * H:3 * H], gates[:, s, 3 * H:]
        hp = h0 if s == 0 else hs[:, s - 1]
        cp = c0 if s == 0 else cs[:, s - 1]
        dh = dhs[:, s] + dh_carry
        tc = torch.tanh(cs[:, s])
        dc = dc_carry + dh * o * (1 - tc * tc)
        difgo = torch.cat([dc * g * i * (1 - i), dc * cp * f * (1 - f), dc * i * (1 - g * g), dh * tc * o * (1 - o)], 1)
        dxs[:, s] = difgo @ Wx.T
        dWx += xs[:, s].T @ difgo
        dWh += hp.T @ difgo
        db += torch.ones(B) @ difgo
        dh_carry = difgo @ Wh.T
        dc_carry = dc * f
    return dxs, dh_carry, dc_carry, dWx, dWh, db
"""),
    # function: a ones vector for the bias and a literal one
    "lstm-step-fn-ones": ("lstm", "fused/lstm_step_backward", """
def lstm_step_backward(dh, dc, x, h_prev, c_prev, c, gates, Wx, Wh):
    B, H = h_prev.shape
    one = torch.ones(B, H)
    i, f, g, o = gates[:, :H], gates[:, H:2 * H], gates[:, 2 * H:3 * H], gates[:, 3 * H:]
    tc = torch.tanh(c)
    dcell = dc + dh * o * (one - tc**2)
    difgo = torch.cat([dcell * g * i * (one - i), dcell * c_prev * f * (one - f),
                       dcell * i * (one - g**2), dh * tc * o * (one - o)], 1)
    dx = difgo @ Wx.T
    dh_prev = difgo @ Wh.T
    dc_prev = dcell * f
    dWx = x.T @ difgo
    dWh = h_prev.T @ difgo
    db = torch.ones(B) @ difgo
    return dx, dh_prev, dc_prev, dWx, dWh, db
"""),
}

WRONG: dict[str, tuple[str, str, str]] = {
    # ------------------------------------------------------------------ makemore
    # zeros + index assign, sign flipped
    "mm-logprobs-zeros-sign": ("makemore", "atomic/logprobs", """
dlogprobs = torch.zeros(n, vocab_size)
dlogprobs[torch.arange(n), Yb] = 1.0 / n
"""),
    # arange mask, the 1/n forgotten
    "mm-logprobs-mask-no-mean": ("makemore", "atomic/logprobs", """
dlogprobs = -(torch.arange(logprobs.shape[1])[None, :] == Yb[:, None]).float()
"""),
    # arange mask built the wrong way round: [n, n] instead of [n, 27]
    "mm-logprobs-mask-transposed": ("makemore", "atomic/logprobs", """
dlogprobs = -(torch.arange(n)[:, None] == Yb[None]).float() / n
"""),
    # scatter from torch.full on every column's row index (targets off by one)
    "mm-logprobs-scatter-off-by-one": ("makemore", "atomic/logprobs", """
src = torch.full((n, 1), -1.0 / n)
dlogprobs = torch.zeros(n, logprobs.shape[1]).scatter_add_(1, (Yb - 1).clamp(min=0).view(-1, 1), src)
"""),
    # outer product with ones, but replacing the first branch
    "mm-counts-replaced": ("makemore", "atomic/counts", """
dcounts = dcounts_sum @ torch.ones(1, counts.shape[1])
"""),
    # literal tensor, sign dropped
    "mm-counts-sum-literal-sign": ("makemore", "atomic/counts_sum", """
dcounts_sum = torch.tensor([1.0]) * counts_sum**-2 * dcounts_sum_inv
"""),
    # arange mask against the argmax, but assigned: the first branch of logits is dropped
    "mm-logits-mask-replaces": ("makemore", "atomic/logits", """
hit = torch.arange(logits.shape[1])[None, :] == logits.argmax(1, keepdim=True)
dlogits = hit.float() * dlogit_maxes
"""),
    # ones row for the bias, but the weight's operands transposed the wrong way (einsum)
    "mm-h-einsum-transposed": ("makemore", "atomic/h", """
dh = torch.einsum('nv,hv->nh', dlogits, W2)
dW2 = torch.einsum('nh,nv->vh', h, dlogits)
db2 = torch.ones(n) @ dlogits
"""),
    # torch.full with 1/n where the line says 1/(n-1)
    "mm-bndiff2-full-bessel": ("makemore", "atomic/bndiff2", """
dbndiff2 = torch.full(bndiff2.shape, 1.0 / n) * dbnvar
"""),
    # the minus sign dropped from the ones row
    "mm-bnmeani-sign": ("makemore", "atomic/bnmeani", """
dhprebn = dbndiff.clone()
dbnmeani = torch.ones(1, n) @ dbndiff
"""),
    # ones column, the 1/n forgotten
    "mm-hprebn-no-mean": ("makemore", "atomic/hprebn", """
dhprebn += torch.ones(n, 1) @ dbnmeani
"""),
    # loop over the context, overwriting instead of accumulating repeated ids
    "mm-C-loop-overwrite": ("makemore", "atomic/C", """
dC = torch.zeros(C.shape[0], C.shape[1])
for r in range(Xb.shape[0]):
    for j in range(Xb.shape[1]):
        dC[Xb[r, j]] = demb[r, j]
"""),
    # eye rows, the mean over the batch forgotten
    "mm-ce-eye-no-mean": ("makemore", "fused/cross_entropy", """
dlogits = F.softmax(logits, 1) - torch.eye(logits.shape[1])[Yb]
"""),
    # centering matrix, the variance term dropped
    "mm-bn-centering-drop-term": ("makemore", "fused/batchnorm", """
centre = torch.eye(n) - torch.full((n, n), 1.0 / n)
dhprebn = bngain * bnvar_inv * (centre @ dhpreact)
"""),

    # ------------------------------------------------------------------ gpt
    # eye rows, divided by the batch only, not by every position
    "gpt-logits-eye-scale": ("gpt", "block/logits", """
dlogits = (F.softmax(logits, -1) - torch.eye(vocab_size)[targets]) / n
"""),
    # torch.full with the batch size where the channel count belongs
    "gpt-x2-full-wrong-count": ("gpt", "block/x2", """
dx2 += dlnf_mean * torch.full((n_embd,), 1.0 / block_size)
"""),
    # a Jacobian from torch.eye with the outer-product term dropped (only its diagonal kept)
    "gpt-softmax-eye-drop-term": ("gpt", "block/preatt_masked", """
J = att[..., :, None] * torch.eye(block_size)
dpreatt_masked = (datt[..., None, :] @ J).squeeze(-2)
"""),
    # the mask off by one: the diagonal masked out too
    "gpt-preatt-tril-off-by-one": ("gpt", "block/preatt", """
dpreatt = dpreatt_masked * torch.tril(torch.ones(block_size, block_size), diagonal=-1)
"""),
    # the mask the wrong way round (future kept, past dropped)
    "gpt-preatt-where-flipped": ("gpt", "block/preatt", """
pos = torch.arange(block_size)
keep = pos[:, None] <= pos[None, :]
dpreatt = torch.where(keep, dpreatt_masked, torch.zeros(1))
"""),
    # one-hot into a fresh table: the tied head's branch is dropped
    "gpt-wte-onehot-drop-branch": ("gpt", "block/wte", """
ids = Xb.reshape(-1)
oh = torch.zeros(ids.numel(), vocab_size)
oh[torch.arange(ids.numel()), ids] = 1.0
dwte = oh.T @ dtok.reshape(-1, n_embd)
"""),
    # a mean over the batch where the positions' rows add up
    "gpt-wpe-ones-mean": ("gpt", "block/wpe", """
dtok = dx0.clone()
dwpe = torch.einsum('b,btc->tc', torch.ones(n) / n, dx0)
"""),
    # function: the mean over the rows forgotten
    "gpt-fn-ce-no-mean": ("gpt", "functions/crossentropy_softmax_backward", """
def crossentropy_softmax_backward(logits, targets):
    N, V = logits.shape
    y = torch.zeros(N, V)
    y[torch.arange(N), targets] = 1.0
    return F.softmax(logits, dim=-1) - y
"""),
    # function: position table summed the wrong way (over time instead of the batch)
    "gpt-fn-encoder-wrong-sum": ("gpt", "functions/encoder_backward", """
def encoder_backward(dout, inp, vocab_size):
    B, T, C = dout.shape
    dwte = torch.zeros(vocab_size, C)
    dwte.index_add_(0, inp.flatten(), dout.reshape(B * T, C))
    dwpe = torch.ones(T) @ dout.transpose(0, 1).reshape(T, B * C)
    return dwte, dwpe.view(B, C)
"""),

    # ------------------------------------------------------------------ lstm
    # arange mask, the padding never zeroed
    "lstm-logits-no-mask": ("lstm", "step/logits", """
hit = (torch.arange(vocab_size) == Yb[:, :, None]).float()
dlogits = (F.softmax(logits, -1) - hit) / mask.sum()
"""),
    # averaged over every position, padding included
    "lstm-logits-wrong-count": ("lstm", "step/logits", """
hit = (torch.arange(vocab_size) == Yb[:, :, None]).float()
dlogits = (F.softmax(logits, -1) - hit) * mask[:, :, None] / Yb.numel()
"""),
    # a ones vector with the wrong sign in 1 - sigmoid
    "lstm-gates-sign": ("lstm", "step/gates", """
one = torch.ones(n_hidden)
dai = di * i * (one + i)
daf = df * f * (one - f)
dao = do * o * (one - o)
"""),
    # quarters written in the wrong order (g and f swapped)
    "lstm-ifgo-swapped": ("lstm", "step/ifgo", """
difgo = torch.zeros(n, 4 * n_hidden)
for q, d in enumerate([dai, dag, daf, dao]):
    difgo[:, q * n_hidden:(q + 1) * n_hidden] = d
"""),
    # the bias summed into a mean
    "lstm-inputs-bias-mean": ("lstm", "step/inputs", """
dx_t = difgo @ Wx_t.T
dh_prev = difgo @ Wh_t.T
dWx_t = torch.einsum('nd,ng->dg', x_t, difgo)
dWh_t = torch.einsum('nh,ng->hg', h_prev, difgo)
db_t = torch.ones(n) @ difgo / n
"""),
    # function: the next step's dh never added (a dropped term)
    "lstm-bptt-drop-carry": ("lstm", "bptt/lstm_backward", """
def lstm_backward(dhs, xs, h0, c0, hs, cs, gates, Wx, Wh):
    B, T, H = hs.shape
    D = xs.shape[2]
    dxs = torch.zeros(B, T, D)
    dWx = torch.zeros(D, 4 * H)
    dWh = torch.zeros(H, 4 * H)
    db = torch.zeros(4 * H)
    dh_carry = torch.zeros(B, H)
    dc_carry = torch.zeros(B, H)
    for s in range(T - 1, -1, -1):
        i, f, g, o = gates[:, s, :H], gates[:, s, H:2 * H], gates[:, s, 2 * H:3 * H], gates[:, s, 3 * H:]
        hp = h0 if s == 0 else hs[:, s - 1]
        cp = c0 if s == 0 else cs[:, s - 1]
        dh = dhs[:, s]
        tc = torch.tanh(cs[:, s])
        dc = dc_carry + dh * o * (1 - tc * tc)
        difgo = torch.cat([dc * g * i * (1 - i), dc * cp * f * (1 - f), dc * i * (1 - g * g), dh * tc * o * (1 - o)], 1)
        dxs[:, s] = difgo @ Wx.T
        dWx += xs[:, s].T @ difgo
        dWh += hp.T @ difgo
        db += torch.ones(B) @ difgo
        dh_carry = difgo @ Wh.T
        dc_carry = dc * f
    return dxs, dh_carry, dc_carry, dWx, dWh, db
"""),
    # function: the cell's gradient through h forgotten
    "lstm-step-fn-drop-term": ("lstm", "fused/lstm_step_backward", """
def lstm_step_backward(dh, dc, x, h_prev, c_prev, c, gates, Wx, Wh):
    B, H = h_prev.shape
    one = torch.ones(B, H)
    i, f, g, o = gates[:, :H], gates[:, H:2 * H], gates[:, 2 * H:3 * H], gates[:, 3 * H:]
    tc = torch.tanh(c)
    difgo = torch.cat([dc * g * i * (one - i), dc * c_prev * f * (one - f),
                       dc * i * (one - g**2), dh * tc * o * (one - o)], 1)
    return difgo @ Wx.T, difgo @ Wh.T, dc * f, x.T @ difgo, h_prev.T @ difgo, torch.ones(B) @ difgo
"""),
}
