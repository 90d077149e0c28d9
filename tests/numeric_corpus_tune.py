"""Backward code for the makemore steps that estimates derivatives numerically, and correct
analytic code that only looks like it might (tuning half).

Every entry is `"name": (step_id, code)`. The code is what a learner might type for that step of
exercises/makemore: it runs with the step's forward tensors, the gradients that reach it,
`torch`, `F` and `n` in scope, and assigns the step's gradient(s).

NUMERIC holds code that gets its derivative from values of a function at shifted inputs (central,
forward or backward difference quotients, element by element or a slice at a time) instead of
working it out. The results are right, within float32 rounding, and yet they solve nothing.
ANALYTIC holds correct worked-out answers with traits that a detector keyed on spelling could
take for a difference quotient: subtractions of nearly equal tensors, divisions by small numbers,
the same function called on both sides of a minus, a small constant added inside.

The entries were written from the exercise alone, apart from the detector and without looking
at how it works. Each one was run against autograd on two batches (n = 32 and n = 17) and gives
the right gradients in well under a second on a CPU. This half may be used to tune the detector;
numeric_corpus_holdout.py is the half it is measured on.
"""

NUMERIC = {
    # logprobs = probs.log(): slope of log from a central quotient written with .sub() and .div()
    "log-central-sub-div-methods": ("atomic/probs", """\
p64 = probs.double()
s = 1e-6
dprobs = torch.log(p64 + s).sub(torch.log(p64 - s)).div(2 * s).float() * dlogprobs
"""),

    # tanh through a lambda; the quotient is scaled by 0.5/eps instead of divided by 2*eps
    "tanh-lambda-half-over-eps": ("atomic/hpreact", """\
f = lambda t: torch.tanh(t)
x = hpreact.double()
eps = 1e-6
dhpreact = ((f(x + eps) - f(x - eps)) * (0.5 / eps)).float() * dh
"""),

    # exp evaluated twice into variables whose names say nothing, then divided on its own line
    "exp-central-unrelated-names": ("atomic/norm_logits", """\
z = norm_logits.double()
delta = 1e-6
apple = torch.exp(z + delta)
banana = torch.exp(z - delta)
slope = (apple - banana) / (2 * delta)
dnorm_logits = slope.to(torch.float32) * dcounts
"""),

    # one side is torch.tanh, the other a hand-written tanh: different callees, same function
    "tanh-two-spellings": ("atomic/hpreact", """\
x = hpreact.double()
step = 1e-6
right = torch.tanh(x + step)
t = torch.exp(2 * (x - step))
left = (t - 1) / (t + 1)
dhpreact = ((right - left) / (2 * step)).float() * dh
"""),

    # one-sided (forward) difference of 1/x with a step relative to x
    "reciprocal-forward-difference": ("atomic/counts_sum", """\
x = counts_sum.double()
dz = 1e-8 * x
dcounts_sum = ((1.0 / (x + dz) - 1.0 / x) / dz).float() * dcounts_sum_inv
"""),

    # entry by entry over the [1, 64] gain and bias, through .item() and Python floats
    "affine-item-loop": ("atomic/bngain", """\
gain = bngain.double()
bias = bnbias.double()
raw = bnraw.double()
upstream = dhpreact.double()

def objective(gn, bs):
    return ((gn * raw + bs) * upstream).sum().item()

tiny = 1e-4
dbngain = torch.zeros_like(bngain)
dbnbias = torch.zeros_like(bnbias)
for k in range(gain.shape[1]):
    bump = torch.zeros_like(gain)
    bump[0, k] = tiny
    dbngain[0, k] = (objective(gain + bump, bias) - objective(gain - bump, bias)) / (2 * tiny)
    dbnbias[0, k] = (objective(gain, bias + bump) - objective(gain, bias - bump)) / (2 * tiny)
above = (raw + tiny) * gain + bias
below = (raw - tiny) * gain + bias
dbnraw = ((above - below) / (2 * tiny)).float() * dhpreact
"""),

    # a reusable local helper, applied to the forward line written as a lambda
    "power-local-def-helper": ("atomic/bnvar", """\
def num_slope(fn, x, h=1e-6):
    return (fn(x + h) - fn(x - h)) / (2 * h)

dbnvar = num_slope(lambda v: (v + 1e-5) ** -0.5, bnvar.double()).float() * dbnvar_inv
"""),

    # the step is a whole tensor made by full_like, and the quotient divides by that tensor
    "square-full-like-step": ("atomic/bndiff", """\
x = bndiff.double()
e = torch.full_like(x, 1e-4)
dbndiff += (((x + e) ** 2 - (x - e) ** 2) / (2 * e)).float() * dbndiff2
"""),

    # the whole fused step: F.cross_entropy recomputed with one logit nudged at a time
    "cross-entropy-entry-loop": ("fused/cross_entropy", """\
L = logits.double()
eps = 1e-5
dlogits = torch.zeros_like(logits)
for i in range(L.shape[0]):
    for j in range(L.shape[1]):
        up = L.clone()
        up[i, j] += eps
        down = L.clone()
        down[i, j] -= eps
        dlogits[i, j] = (F.cross_entropy(up, Yb) - F.cross_entropy(down, Yb)) / (2 * eps)
"""),

    # the loss kept per row, one column of logprobs nudged at a time for all rows together
    "loss-rows-column-sweep": ("atomic/logprobs", """\
lp = logprobs.double()
rows = torch.arange(lp.shape[0])
per_row = lambda t: -t[rows, Yb] / t.shape[0]
amount = 1e-3
dlogprobs = torch.zeros_like(logprobs)
for j in range(lp.shape[1]):
    shift = torch.zeros_like(lp)
    shift[:, j] = amount
    dlogprobs[:, j] = ((per_row(lp + shift) - per_row(lp - shift)) / (2 * amount)).float()
"""),

    # every entry of the [27, 10] table nudged, the lookup redone and dotted with demb
    "embedding-table-entry-loop": ("atomic/C", """\
table = C.double()
def score(T, idx=Xb, g=demb.double()):
    return (T[idx] * g).sum()

eps = 1e-4
dC = torch.zeros_like(C)
for r in range(table.shape[0]):
    for c in range(table.shape[1]):
        plus = table.clone()
        plus[r, c] += eps
        minus = table.clone()
        minus[r, c] -= eps
        dC[r, c] = (score(plus) - score(minus)) / (2 * eps)
"""),

    # slope of the row maximum, one column at a time, with torch.sub
    "max-column-sweep-torch-sub": ("atomic/logits", """\
L = logits.double()
eps = 1e-8
branch = torch.zeros_like(L)
for j in range(L.shape[1]):
    e = torch.zeros_like(L)
    e[:, j] = eps
    hi = (L + e).max(1, keepdim=True).values
    lo = (L - e).max(1, keepdim=True).values
    branch[:, j:j + 1] = torch.sub(hi, lo) / (2 * eps)
dlogits += branch.float() * dlogit_maxes
"""),

    # the one-line batchnorm redone with one row of hprebn nudged; columns are independent
    "batchnorm-row-sweep": ("fused/batchnorm", """\
X = hprebn.double()
G = bngain.double()
B = bnbias.double()
up = dhpreact.double()

def layer(x):
    xc = x - x.mean(0, keepdim=True)
    return G * xc / torch.sqrt(x.var(0, keepdim=True, unbiased=True) + 1e-5) + B

def per_column(x):
    return (layer(x) * up).sum(0)

step = 1e-5
dhprebn = torch.empty_like(hprebn)
for i in range(X.shape[0]):
    bump = torch.zeros_like(X)
    bump[i] = step
    dhprebn[i] = ((per_column(X + bump) - per_column(X - bump)) / (2 * step)).float()
"""),

    # both operands of the product, each through a quotient of its own
    "product-quotients-both-sides": ("atomic/bnvar_inv", """\
diff = bndiff.double()
inv = bnvar_inv.double()
g_up = dbnraw.double()
colwise = lambda v: (diff * v * g_up).sum(0, keepdim=True)
eps = 1e-4
dbnvar_inv = ((colwise(inv + eps) - colwise(inv - eps)) / (2 * eps)).float()
rowslope = ((diff + eps) * inv - (diff - eps) * inv) / (2 * eps)
dbndiff = rowslope.float() * dbnraw
"""),

    # the linear layer: W1 by forward differences entry by entry, embcat by columns, b1 at once
    "linear-layer-forward-differences": ("atomic/embcat", """\
E = embcat.double()
W = W1.double()
b = b1.double()
G = dhprebn.double()

def total(e, w, bb):
    return ((e @ w + bb) * G).sum()

eps = 1e-4
base = total(E, W, b)
dW1 = torch.zeros_like(W1)
for r in range(W.shape[0]):
    for c in range(W.shape[1]):
        Wp = W.clone()
        Wp[r, c] += eps
        dW1[r, c] = (total(E, Wp, b) - base) / eps

rowtotal = lambda e: ((e @ W + b) * G).sum(1)
dembcat = torch.zeros_like(embcat)
for c in range(E.shape[1]):
    nudge = torch.zeros_like(E)
    nudge[:, c] = eps
    dembcat[:, c] = ((rowtotal(E + nudge) - rowtotal(E - nudge)) / (2 * eps)).float()

coltotal = lambda bb: ((E @ W + bb) * G).sum(0)
db1 = ((coltotal(b + eps) - coltotal(b - eps)) / (2 * eps)).float()
"""),
}

ANALYTIC = {
    # softmax minus the one-hot targets, over n: two nearly equal tensors subtracted, then / n
    "softmax-minus-one-hot-over-n": ("fused/cross_entropy", """\
dlogits = (F.softmax(logits, 1) - F.one_hot(Yb, num_classes=logits.shape[1]).float()) / n
"""),

    # the tanh recomputed from its input and squared, subtracted from one
    "one-minus-tanh-recomputed": ("atomic/hpreact", """\
dhpreact = (1 - torch.tanh(hpreact) ** 2) * dh
"""),

    # sinh and cosh from exponentials: exp on both sides of a minus, divided by 2
    "cosh-sinh-from-exp": ("atomic/hpreact", """\
sh = (torch.exp(hpreact) - torch.exp(-hpreact)) / 2
ch = (torch.exp(hpreact) + torch.exp(-hpreact)) / 2
dhpreact = (ch ** 2 - sh ** 2) / ch ** 2 * dh
"""),

    # the lecture's answer, with the small constant of the forward line
    "power-rule-with-epsilon": ("atomic/bnvar", """\
dbnvar = -0.5 * (bnvar + 1e-5) ** -1.5 * dbnvar_inv
"""),

    # batchnorm backward with the column means subtracted
    "batchnorm-centred-upstream": ("fused/batchnorm", """\
dnorm = bngain * dhpreact
dhprebn = bnvar_inv * (dnorm - dnorm.mean(0, keepdim=True)
                       - bnraw * (dnorm * bnraw).sum(0, keepdim=True) / (n - 1))
"""),

    # the sum's gradient spread over the rows, divided by n - 1
    "spread-over-n-minus-one": ("atomic/bndiff2", """\
dbndiff2 = torch.ones_like(bndiff2) * dbnvar / (n - 1)
"""),

    # the position of the maximum found by subtracting it and comparing with zero
    "max-position-by-subtraction": ("atomic/logits", """\
at_max = (logits - logit_maxes == 0).float()
dlogits += at_max * dlogit_maxes
"""),

    # the derivative of 1/x written with the forward result squared
    "reciprocal-via-forward-value": ("atomic/counts_sum", """\
dcounts_sum = -(counts_sum_inv * counts_sum_inv) * dcounts_sum_inv
"""),

    # a plain division by the small probabilities
    "log-slope-divide-by-probs": ("atomic/probs", """\
dprobs = dlogprobs / probs
"""),

    # the mean's gradient: expanded and divided by n
    "mean-expand-over-n": ("atomic/hprebn", """\
dhprebn += dbnmeani.expand_as(hprebn) / n
"""),

    # a product with a constant that depends on n
    "one-hot-times-minus-one-over-n": ("atomic/logprobs", """\
dlogprobs = F.one_hot(Yb, num_classes=logprobs.shape[1]).float() * (-1.0 / n)
"""),
}
