"""Backward code for the makemore steps that estimates derivatives numerically, and correct
analytic code that only looks like it might (held-out half).

Every entry is `"name": (step_id, code)`. The code is what a learner might type for that step of
exercises/makemore: it runs with the step's forward tensors, the gradients that reach it,
`torch`, `F` and `n` in scope, and assigns the step's gradient(s).

NUMERIC holds code that gets its derivative from values of a function at shifted inputs (central,
forward or backward difference quotients, an entry, a row, a column or a batch of shifts at a
time) instead of working it out. The results are right, within float32 rounding, and yet they
solve nothing. ANALYTIC holds correct worked-out answers that a detector keyed on spelling could
mistake for a difference quotient: exp on both sides of a minus, divisions by small numbers or by
`bnvar + 1e-5`, forward values recomputed and subtracted.

The entries were written from the exercise alone, apart from the detector and without looking
at how it works, and in other styles than numeric_corpus_tune.py (no entry is shared). Each one
was run against autograd on two batches (n = 32 and n = 17) and gives the right gradients in
well under a second on a CPU. This half only measures the detector: it is never used to tune
it, and a miss here is reported, not fixed by adjusting the detector to this file.
"""

NUMERIC = {
    # log on one side, log1p of the shifted argument on the other; torch.div as a function
    "log-and-log1p-torch-div": ("atomic/probs", """\
q = probs.to(torch.float64)
s = 5e-7
dprobs = torch.div(torch.log(q + s) - torch.log1p(q - s - 1), s + s).to(probs.dtype) * dlogprobs
"""),

    # torch.reciprocal above, a power of -1 below, and the quotient taken with .mul(0.5 / gap)
    "reciprocal-two-spellings-mul": ("atomic/counts_sum", """\
cs = counts_sum.double()
gap = 1e-6
north = torch.reciprocal(cs + gap)
south = (cs - gap) ** -1
dcounts_sum = (north - south).mul(0.5 / gap).float() * dcounts_sum_inv
"""),

    # a function that builds the slope function of another; tanh handed in as an argument
    "slope-factory-for-tanh": ("atomic/hpreact", """\
def numeric(fn, step=1e-6):
    return lambda x: (fn(x + step) - fn(x - step)) / (step + step)

tanh_slope = numeric(torch.tanh)
dhpreact = dh * tanh_slope(hpreact.double()).float()
"""),

    # a backward difference of exp written with the .exp() method
    "exp-backward-difference": ("atomic/norm_logits", """\
v = norm_logits.double()
dv = 1e-8
dnorm_logits = ((v.exp() - (v - dv).exp()) / dv).float() * dcounts
"""),

    # entry by entry over the [1, 64] variance in plain Python floats
    "power-python-float-loop": ("atomic/bnvar", """\
dbnvar = torch.zeros_like(bnvar)
step = 1e-6
for k in range(bnvar.shape[1]):
    v = bnvar[0, k].item()
    above = (v + step + 1e-5) ** -0.5
    below = (v - step + 1e-5) ** -0.5
    dbnvar[0, k] = (above - below) / (2 * step) * dbnvar_inv[0, k].item()
"""),

    # the square as t * t in a lambda, the step a 0-dim float64 tensor
    "square-lambda-tensor-step": ("atomic/bndiff", """\
sq = lambda t: t * t
xd = bndiff.double()
eps = xd.new_tensor(1e-4)
dbndiff = dbndiff + ((sq(xd + eps) - sq(xd - eps)) / (2 * eps)).float() * dbndiff2
"""),

    # the row sum redone with one column shifted at a time
    "row-sum-column-sweep": ("atomic/counts", """\
c64 = counts.double()
eps = 1e-3
extra = torch.empty_like(c64)
for j in range(c64.shape[1]):
    mask = torch.zeros_like(c64)
    mask[:, j] = eps
    extra[:, j] = ((c64 + mask).sum(1) - (c64 - mask).sum(1)) / (2 * eps)
dcounts += extra.float() * dcounts_sum
"""),

    # the second linear layer: a column of h, a row of W2, then all of b2, shifted at a time
    "linear-layer-slices": ("atomic/h", """\
H64 = h.double()
W = W2.double()
c = b2.double()
up = dlogits.double()
out = lambda hh, ww, bb: (hh @ ww + bb) * up
d = 1e-5
dh = torch.empty_like(h)
for k in range(H64.shape[1]):
    poke = torch.zeros_like(H64)
    poke[:, k] = d
    hi = out(H64 + poke, W, c).sum(1)
    lo = out(H64 - poke, W, c).sum(1)
    dh[:, k] = (torch.sub(hi, lo) * (1 / (2 * d))).float()
dW2 = torch.empty_like(W2)
for k in range(W.shape[0]):
    poke = torch.zeros_like(W)
    poke[k] = d
    hi = out(H64, W + poke, c).sum(0)
    lo = out(H64, W - poke, c).sum(0)
    dW2[k] = (torch.sub(hi, lo) * (1 / (2 * d))).float()
db2 = (torch.sub(out(H64, W, c + d).sum(0), out(H64, W, c - d).sum(0)) * (1 / (2 * d))).float()
"""),

    # the slope of the view taken from shifted copies, times the incoming gradient
    "view-slope-from-shifted-copies": ("atomic/emb", """\
e64 = emb.double()
w = 1e-3
flat_hi = (e64 + w).view(e64.shape[0], -1)
flat_lo = (e64 - w).view(e64.shape[0], -1)
demb = ((flat_hi - flat_lo) / (2 * w) * dembcat).view(emb.shape).float()
"""),

    # per-row losses (reduction='none'), one column of logits shifted for every row at once
    "cross-entropy-per-row-columns": ("fused/cross_entropy", """\
Z = logits.double()
d = 1e-5
rowloss = lambda t: F.cross_entropy(t, Yb, reduction='none')
dlogits = torch.zeros_like(logits)
for j in range(Z.shape[1]):
    kick = torch.zeros_like(Z)
    kick[:, j] = d
    dlogits[:, j] = (rowloss(Z + kick) - rowloss(Z - kick)).mul(0.5 / d).div(Z.shape[0]).float()
"""),

    # the batchnorm written out again with rsqrt; forward differences, one row at a time
    "batchnorm-rsqrt-forward-rows": ("fused/batchnorm", """\
x0 = hprebn.double()
gamma = bngain.double()
beta = bnbias.double()
gy = dhpreact.double()

def bn_colscore(x):
    mu = x.mean(0, keepdim=True)
    var = ((x - mu) ** 2).sum(0, keepdim=True) / (x.shape[0] - 1)
    return ((gamma * (x - mu) * torch.rsqrt(var + 1e-5) + beta) * gy).sum(0)

ref_score = bn_colscore(x0)
tiny = 1e-7
dhprebn = torch.zeros_like(hprebn)
for r in range(x0.shape[0]):
    moved = x0.clone()
    moved[r] += tiny
    dhprebn[r] = ((bn_colscore(moved) - ref_score) / tiny).float()
"""),

    # the mean line as a lambda, one row of hprebn shifted at a time
    "mean-line-row-sweep": ("atomic/hprebn", """\
x = hprebn.double()
mean_line = lambda t: 1 / n * t.sum(0, keepdim=True)
dd = 1e-4
branch = torch.zeros_like(x)
for r in range(x.shape[0]):
    shifted_up = x.clone()
    shifted_up[r] += dd
    shifted_dn = x.clone()
    shifted_dn[r] -= dd
    branch[r] = ((mean_line(shifted_up) - mean_line(shifted_dn)) / (2 * dd) * dbnmeani)[0]
dhprebn += branch.float()
"""),

    # the product redone with each factor shifted; the step for the [n, 1] factor is a full tensor
    "product-shifted-factors": ("atomic/counts_sum_inv", """\
k = counts.double()
inv = counts_sum_inv.double()
g = dprobs.double()
eps = torch.full((k.shape[0], 1), 1e-6, dtype=torch.float64, device=k.device)
prod = lambda a, b: a * b * g
more = prod(k, inv + eps).sum(1, keepdim=True)
less = prod(k, inv - eps).sum(1, keepdim=True)
dcounts_sum_inv = ((more - less) / (2 * eps)).float()
dcounts = ((prod(k + 1e-6, inv) - prod(k - 1e-6, inv)) / 2e-6).float()
"""),

    # the subtraction of the maxima as a two-argument lambda, each argument shifted in turn
    "difference-line-both-arguments": ("atomic/logit_maxes", """\
LG = logits.double()
LM = logit_maxes.double()
up = dnorm_logits.double()
nl = lambda a, m: a - m
u = 1e-4
dlogit_maxes = ((nl(LG, LM + u) - nl(LG, LM - u)) / (2 * u) * up).sum(1, keepdim=True).float()
dlogits = ((nl(LG + u, LM) - nl(LG - u, LM)) / (2 * u) * up).float()
"""),

    # the loss recomputed from probs with one entry shifted, read out with .item()
    "loss-from-probs-entry-loop": ("atomic/probs", """\
P = probs.double()

def loss_from(p, rows=range(P.shape[0]), targets=Yb):
    return (-p.log()[rows, targets].mean()).item()

dx = 1e-6
dprobs = torch.zeros_like(probs)
for i in range(P.shape[0]):
    for j in range(P.shape[1]):
        a = P.clone()
        a[i, j] += dx
        b = P.clone()
        b[i, j] -= dx
        dprobs[i, j] = (loss_from(a) - loss_from(b)) / (2 * dx)
"""),

    # gain and bias shifted all at once (the columns do not mix); forward differences
    "affine-columns-forward-difference": ("atomic/bngain", """\
raw = bnraw.double()
gn = bngain.double()
bs = bnbias.double()
g = dhpreact.double()
columns = lambda a, b: ((a * raw + b) * g).sum(0, keepdim=True)
now = columns(gn, bs)
t = 1e-6
dbngain = ((columns(gn + t, bs) - now) / t).float()
dbnbias = ((columns(gn, bs + t) - now) / t).float()
dbnraw = (((gn * (raw + t) + bs) - (gn * raw + bs)) / t).float() * dhpreact
"""),

    # every shift of embcat made at once as a batch; W1 a row at a time; b1 in one go
    "first-layer-batched-shifts": ("atomic/embcat", """\
E = embcat.double()
W = W1.double()
bb = b1.double()
G = dhprebn.double()
delta = 1e-5
scores = lambda e, w, b: ((e @ w + b) * G)
shifts = torch.eye(E.shape[1], dtype=E.dtype, device=E.device)[:, None, :] * delta
up = scores(E[None] + shifts, W, bb).sum(2)
down = scores(E[None] - shifts, W, bb).sum(2)
dembcat = ((up - down) / (2 * delta)).T.float()
dW1 = torch.empty_like(W1)
for r in range(W.shape[0]):
    row = torch.zeros_like(W)
    row[r] = delta
    dW1[r] = ((scores(E, W + row, bb).sum(0) - scores(E, W - row, bb).sum(0)) / (2 * delta)).float()
db1 = ((scores(E, W, bb + delta).sum(0) - scores(E, W, bb).sum(0)) / delta).float()
"""),
}

ANALYTIC = {
    # softmax spelled as exp of logits minus their logsumexp, then the one-hot taken away
    "exp-minus-logsumexp-minus-one-hot": ("fused/cross_entropy", """\
soft = torch.exp(logits - torch.logsumexp(logits, 1, keepdim=True))
dlogits = (soft - F.one_hot(Yb, logits.shape[1])) / n
"""),

    # the forward pass's own probabilities, one taken away at each target, over n
    "forward-probs-minus-one": ("fused/cross_entropy", """\
dlogits = probs.clone()
dlogits[range(n), Yb] -= 1
dlogits = dlogits / n
"""),

    # 1 - h**2 factored into (1 - h)(1 + h)
    "tanh-slope-factored": ("atomic/hpreact", """\
dhpreact = dh * (1 - h) * (1 + h)
"""),

    # tanh rebuilt from exponentials as a ratio: exp on both sides of a minus, then a division
    "tanh-ratio-of-exps": ("atomic/hpreact", """\
t = (torch.exp(hpreact) - torch.exp(-hpreact)) / (torch.exp(hpreact) + torch.exp(-hpreact))
dhpreact = (1 - t * t) * dh
"""),

    # divided by the square of cosh
    "divide-by-cosh-squared": ("atomic/hpreact", """\
dhpreact = dh / torch.cosh(hpreact) ** 2
"""),

    # divided by bnvar + 1e-5, which reads like a step size
    "divide-by-var-plus-epsilon": ("atomic/bnvar", """\
dbnvar = -0.5 * bnvar_inv / (bnvar + 1e-5) * dbnvar_inv
"""),

    # the power -1.5 taken through exp and log
    "power-through-exp-log": ("atomic/bnvar", """\
dbnvar = -0.5 * torch.exp(-1.5 * torch.log(bnvar + 1e-5)) * dbnvar_inv
"""),

    # mean, deviation and spread recomputed from hprebn, then subtractions of column means
    "batchnorm-recomputed-statistics": ("fused/batchnorm", """\
mu = hprebn.mean(0, keepdim=True)
sd = torch.sqrt(hprebn.var(0, keepdim=True) + 1e-5)
xhat = (hprebn - mu) / sd
g = bngain * dhpreact
dhprebn = (g - g.mean(0, keepdim=True) - xhat * (g * xhat).sum(0, keepdim=True) / (n - 1)) / sd
"""),

    # the two column sums named, divided by n and by n - 1
    "batchnorm-two-sums": ("fused/batchnorm", """\
s1 = dhpreact.sum(0, keepdim=True)
s2 = (dhpreact * bnraw).sum(0, keepdim=True)
dhprebn = bngain * bnvar_inv * (dhpreact - s1 / n - bnraw * s2 / (n - 1))
"""),

    # 1/probs written as exp of minus the forward logprobs
    "reciprocal-as-exp-of-minus-log": ("atomic/probs", """\
dprobs = dlogprobs * torch.exp(-logprobs)
"""),

    # the incoming gradient divided by a square
    "divide-by-square": ("atomic/counts_sum", """\
dcounts_sum = -dcounts_sum_inv / counts_sum ** 2
"""),

    # bndiff recomputed as a difference of nearly equal tensors
    "square-slope-recomputed-difference": ("atomic/bndiff", """\
dbndiff += 2 * (hprebn - bnmeani) * dbndiff2
"""),
}
