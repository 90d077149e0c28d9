"""Learners' notebooks for "Becoming a backprop ninja" (makemore part 4) whose backward passes are
not written as the lecture's plain `dX = ...` globals: a second tune set.

Eight filled-in lecture notebooks (setup, the lecture's forward pass, exercise 1's atomic
gradients, exercise 2's fused cross-entropy `dlogits`, exercise 3's fused batchnorm `dhprebn`,
exercise 4's training loop with the learner's own backward pass). The forward pass keeps the
lecture's names; the backward passes are written as:

  * a small graph of Node subclasses (Embed, Linear, Sub, Power, RowMax, ...) that replay the
    forward, keep their inputs in `self.cache` and return their inputs' gradients from
    `backward(self, dout)`, walked in reverse into a dict; the training loop reads a model's
    `grad_list()` method;
  * a tape of closures and lambdas recorded while a function replays the forward, each wrapped
    by the learner's own `@keep` decorator (counts the calls, clones the results), run in
    reverse; the training loop updates through a `step(params, grads, lr)` helper;
  * classes with `@staticmethod`, `@classmethod` and `@property` members, subclasses calling
    `super().__init__()`, backward methods decorated with `@torch.no_grad()`;
  * generators that `yield` (name, gradient) pairs walking backwards (chained with
    `yield from`), consumed into a dict, one of them leaving out `keepdim` on bngain's and
    bnbias's gradients where broadcasting makes it harmless;
  * a dict of vectorised local-derivative lambdas `ops = {'tanh': ..., 'mm_left': ...}`, the
    training loop zipping the parameters with a list a function returns;
  * a plain `__slots__` record of gradients set as attributes (`gb.dW1 = ...`), the loop reading
    `[gb.dC, gb.dW1, ...]`;
  * mixtures of these whose cells recompute a gradient after a first attempt that was wrong
    (dprobs as `dlogprobs * probs`, a transposed dW2 whose comparison raises and ends its cell,
    dC scattered with `dC[Xb] += demb`, dlogits without `/ n`, the fused batchnorm without
    bngain, dcounts without its counts_sum branch), the last comparison being the one that
    counts.

Five are right throughout. Three slipped: a closure for `bnmeani` that forgot its `/ n` (dhprebn
and what builds on it wrong) and the fused batchnorm taken with the biased variance, which the
training loop reuses; `=` where `+=` belongs in dbndiff (dbnmeani, dhprebn and below wrong) and
the fused cross-entropy's gradient with its sign flipped, which the training loop reuses; the
tanh's local derivative with its sign flipped (everything below it wrong, exercise 3 too because
it starts from that dhpreact) while the training loop, written apart, is right. Written
independently of the grader (tutor/ was not read); each case's labels were measured with
tests/notebook_corpus_truth.py:

    .venv/bin/python tests/notebook_corpus_truth.py notebook_corpus_styles_tune2

CASES: each {"name", "notebook", "right", "wrong", "renamed_forward"}; steps neither right nor
wrong were not attempted. ALIASES: empty (no learner renamed the forward pass). CASCADE: steps
whose own code is right but which are wrong because they build on the learner's own earlier
wrong gradient (they are in "wrong" too). STRUCTURES: the backward structures each case uses,
numbered as in STRUCTURE_NAMES.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from lecture_notebooks import SETUP  # the lecture's setup and data cells only

IMPORTS, READ_WORDS, VOCAB, DATASET, CMP_HELPER, PARAMS, BATCH = SETUP[:7]

ATOMIC = ["atomic/" + s for s in (
    "logprobs", "probs", "counts_sum_inv", "counts_sum", "counts", "norm_logits", "logit_maxes",
    "logits", "h", "hpreact", "bngain", "bnvar_inv", "bnvar", "bndiff2", "bndiff", "bnmeani",
    "hprebn", "embcat", "emb", "C")]
CE, BN, LOOP = "fused/cross_entropy", "fused/batchnorm", "train/loop"
ALL_STEPS = [*ATOMIC, CE, BN, LOOP]

# every forward tensor exercise 1 compares, in the lecture's order
CMP_NAMES = ["logprobs", "probs", "counts_sum_inv", "counts_sum", "counts", "norm_logits",
             "logit_maxes", "logits", "h", "W2", "b2", "hpreact", "bngain", "bnbias", "bnraw",
             "bnvar_inv", "bnvar", "bndiff2", "bndiff", "bnmeani", "hprebn", "embcat", "W1",
             "b1", "emb", "C"]
CMP_LIST = ("['logprobs', 'probs', 'counts_sum_inv', 'counts_sum', 'counts', 'norm_logits',\n"
            "             'logit_maxes', 'logits', 'h', 'W2', 'b2', 'hpreact', 'bngain', 'bnbias',\n"
            "             'bnraw', 'bnvar_inv', 'bnvar', 'bndiff2', 'bndiff', 'bnmeani', 'hprebn',\n"
            "             'embcat', 'W1', 'b1', 'emb', 'C']")

# the structures of the brief
STRUCTURE_NAMES = {
    1: "chain of Node/Layer classes caching inputs in self.cache, backward(dout), dict of grads",
    2: "tape of closures wrapped by the learner's own decorator, run in reverse",
    3: "class with staticmethod/classmethod/property, super().__init__(), @torch.no_grad() methods",
    4: "generator yielding (name, gradient) pairs consumed into a dict",
    5: "dict of vectorised local-derivative functions (ops = {'tanh': lambda ...})",
    6: "plain record object holding gradients as attributes (gb.dW1 = ...)",
    7: "step(params, grads, lr) helper or a grad list returned by a function or method",
    8: "mixture with cells recomputing a gradient (first attempt wrong, the last compared)",
}


def _steps(*names: str) -> set[str]:
    return {n if "/" in n else "atomic/" + n for n in names}


# ---------------------------------------------------------------------------------------------
# cells shared by every notebook

FORWARD = """\
# forward pass, chunkated into smaller steps that are possible to backward one at a time

emb = C[Xb] # embed the characters into vectors
embcat = emb.view(emb.shape[0], -1) # concatenate the vectors
# Linear layer 1
hprebn = embcat @ W1 + b1 # hidden layer pre-activation
# BatchNorm layer
bnmeani = 1/n*hprebn.sum(0, keepdim=True)
bndiff = hprebn - bnmeani
bndiff2 = bndiff**2
bnvar = 1/(n-1)*(bndiff2).sum(0, keepdim=True) # note: Bessel's correction (dividing by n-1, not n)
bnvar_inv = (bnvar + 1e-5)**-0.5
bnraw = bndiff * bnvar_inv
hpreact = bngain * bnraw + bnbias
# Non-linearity
h = torch.tanh(hpreact) # hidden layer
# Linear layer 2
logits = h @ W2 + b2 # output layer
# cross entropy loss (same as F.cross_entropy on logits and Yb)
logit_maxes = logits.max(1, keepdim=True).values
norm_logits = logits - logit_maxes # subtract max for numerical stability
counts = norm_logits.exp()
counts_sum = counts.sum(1, keepdims=True)
counts_sum_inv = counts_sum**-1 # if I use (1.0 / counts_sum) instead then I can't get backprop to be bit exact...
probs = counts * counts_sum_inv
logprobs = probs.log()
loss = -logprobs[range(n), Yb].mean()

# PyTorch backward pass
for p in parameters:
  p.grad = None
for t in [logprobs, probs, counts, counts_sum, counts_sum_inv, # afaik there is no cleaner way
          norm_logits, logit_maxes, logits, h, hpreact, bnraw,
          bnvar_inv, bnvar, bndiff2, bndiff, hprebn, bnmeani,
          embcat, emb]:
  t.retain_grad()
loss.backward()
loss
"""

EX1_HEAD = """\
# Exercise 1: backprop through the whole thing manually,
# backpropagating through exactly all of the variables
# as they are defined in the forward pass above, one by one
"""

EX2_FORWARD = """\
# Exercise 2: backprop through cross_entropy but all in one go
# to complete this challenge look at the mathematical expression of the loss,
# take the derivative, simplify the expression, and just write it out

# forward pass

# before:
# logit_maxes = logits.max(1, keepdim=True).values
# norm_logits = logits - logit_maxes # subtract max for numerical stability
# counts = norm_logits.exp()
# counts_sum = counts.sum(1, keepdims=True)
# counts_sum_inv = counts_sum**-1
# probs = counts * counts_sum_inv
# logprobs = probs.log()
# loss = -logprobs[range(n), Yb].mean()

# now:
loss_fast = F.cross_entropy(logits, Yb)
print(loss_fast.item(), 'diff:', (loss_fast - loss).item())
"""

EX3_FORWARD = """\
# Exercise 3: backprop through batchnorm but all in one go
# to complete this challenge look at the mathematical expression of the output of batchnorm,
# take the derivative w.r.t. its input, simplify the expression, and just write it out

# forward pass

# before:
# bnmeani = 1/n*hprebn.sum(0, keepdim=True)
# bndiff = hprebn - bnmeani
# bndiff2 = bndiff**2
# bnvar = 1/(n-1)*(bndiff2).sum(0, keepdim=True) # note: Bessel's correction
# bnvar_inv = (bnvar + 1e-5)**-0.5
# bnraw = bndiff * bnvar_inv
# hpreact = bngain * bnraw + bnbias

# now:
hpreact_fast = bngain * (hprebn - hprebn.mean(0, keepdim=True)) / torch.sqrt(hprebn.var(0, keepdim=True, unbiased=True) + 1e-5) + bnbias
print('max diff:', (hpreact_fast - hpreact).abs().max())
"""

INIT = """\
# Exercise 4: putting it all together!
# Train the MLP neural net with your own backward pass

# init
n_embd = 10 # the dimensionality of the character embedding vectors
n_hidden = 200 # the number of neurons in the hidden layer of the MLP

g = torch.Generator().manual_seed(2147483647) # for reproducibility
C  = torch.randn((vocab_size, n_embd),            generator=g)
# Layer 1
W1 = torch.randn((n_embd * block_size, n_hidden), generator=g) * (5/3)/((n_embd * block_size)**0.5)
b1 = torch.randn(n_hidden,                        generator=g) * 0.1
# Layer 2
W2 = torch.randn((n_hidden, vocab_size),          generator=g) * 0.1
b2 = torch.randn(vocab_size,                      generator=g) * 0.1
# BatchNorm parameters
bngain = torch.randn((1, n_hidden))*0.1 + 1.0
bnbias = torch.randn((1, n_hidden))*0.1

parameters = [C, W1, b1, W2, b2, bngain, bnbias]
print(sum(p.nelement() for p in parameters)) # number of parameters in total
for p in parameters:
  p.requires_grad = True

# a short run: I only want to see my gradients train the net
max_steps = 2000
batch_size = 32
n = batch_size # convenience
lossi = []
"""

TRAIN_FORWARD = """\
# minibatch construct
ix = torch.randint(0, Xtr.shape[0], (batch_size,), generator=g)
Xb, Yb = Xtr[ix], Ytr[ix] # batch X,Y

# forward pass
emb = C[Xb] # embed the characters into vectors
embcat = emb.view(emb.shape[0], -1) # concatenate the vectors
# Linear layer
hprebn = embcat @ W1 + b1 # hidden layer pre-activation
# BatchNorm layer
# -------------------------------------------------------------
bnmean = hprebn.mean(0, keepdim=True)
bnvar = hprebn.var(0, keepdim=True, unbiased=True)
bnvar_inv = (bnvar + 1e-5)**-0.5
bnraw = (hprebn - bnmean) * bnvar_inv
hpreact = bngain * bnraw + bnbias
# -------------------------------------------------------------
# Non-linearity
h = torch.tanh(hpreact) # hidden layer
logits = h @ W2 + b2 # output layer
loss = F.cross_entropy(logits, Yb) # loss function

# backward pass
for p in parameters:
  p.grad = None
"""

UPDATE = """\
# update
lr = 0.1 if i < 100000 else 0.01 # step learning rate decay
for p, grad in zip(parameters, grads):
  p.data += -lr * grad
"""

TAIL = """\
# track stats
if i % 500 == 0: # print every once in a while
  print(f'{i:7d}/{max_steps:7d}: {loss.item():.4f}')
lossi.append(loss.log10().item())
"""


def train_cell(backward: str, update: str = UPDATE, *, no_grad: bool = True,
               forward: str = TRAIN_FORWARD, head: str = "", tail: str = TAIL) -> str:
    """Exercise 4's cell: the init, then the loop (its body written at column 0 here)."""
    body = "\n".join(part.rstrip("\n") for part in (forward, backward, update, tail))
    if no_grad:
        loop = ("with torch.no_grad():\n\n  # kick off optimization\n  for i in range(max_steps):\n"
                + textwrap.indent(body, "    "))
    else:
        loop = "# kick off optimization\nfor i in range(max_steps):\n" + textwrap.indent(body, "  ")
    return f"{head}{INIT}\n{loop}\n"


EVAL = [
    "plt.plot(torch.tensor(lossi).view(-1, 100).mean(1))",
    """\
# calibrate the batch norm at the end of training
with torch.no_grad():
  # pass the training set through
  emb = C[Xtr]
  embcat = emb.view(emb.shape[0], -1)
  hpreact = embcat @ W1 + b1
  # measure the mean/std over the entire training set
  bnmean = hpreact.mean(0, keepdim=True)
  bnvar = hpreact.var(0, keepdim=True, unbiased=True)
""",
    """\
# evaluate train and val loss
@torch.no_grad() # this decorator disables gradient tracking
def split_loss(split):
  x,y = {
    'train': (Xtr, Ytr),
    'val': (Xdev, Ydev),
  }[split]
  emb = C[x] # (N, block_size, n_embd)
  embcat = emb.view(emb.shape[0], -1) # concat into (N, block_size * n_embd)
  hpreact = embcat @ W1 + b1
  hpreact = bngain * (hpreact - bnmean) * (bnvar + 1e-5)**-0.5 + bnbias
  h = torch.tanh(hpreact) # (N, n_hidden)
  logits = h @ W2 + b2 # (N, vocab_size)
  loss = F.cross_entropy(logits, y)
  print(split, loss.item())

split_loss('train')
split_loss('val')
""",
]


def notebook(cells: list, *, title: str = "makemore: becoming a backprop ninja") -> dict:
    """cells: code strings, ("md", text) for markdown, or (code, output_text) pairs."""
    out = [{"cell_type": "markdown", "id": "title", "metadata": {}, "source": [f"## {title}\n"]}]
    count = 0
    for c in cells:
        if isinstance(c, tuple) and c[0] == "md":
            out.append({"cell_type": "markdown", "id": f"md{len(out)}", "metadata": {},
                        "source": c[1].splitlines(keepends=True)})
            continue
        source, output = (c, None) if isinstance(c, str) else c
        count += 1
        outputs = []
        if output:
            outputs.append({"name": "stdout", "output_type": "stream",
                            "text": output.splitlines(keepends=True)})
        out.append({"cell_type": "code", "execution_count": count, "id": f"c{len(out)}",
                    "metadata": {},
                    "outputs": outputs, "source": source.splitlines(keepends=True)})
    return {"cells": out,
            "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python",
                                        "name": "python3"},
                         "language_info": {"name": "python", "version": "3.10.12"}},
            "nbformat": 4, "nbformat_minor": 5}


def setup(batch: str = BATCH, forward: str = FORWARD, helper: str = CMP_HELPER,
          params: str = PARAMS) -> list:
    return [IMPORTS, (READ_WORDS, "32033\n"), VOCAB, DATASET,
            ("md", "ok biolerplate done, now we get to the action:"), helper, params, batch,
            (forward, "tensor(3.3390, grad_fn=<NegBackward0>)\n")]


CASES: list[dict] = []
ALIASES: dict[str, dict[str, str]] = {}
CASCADE: dict[str, set[str]] = {}
STRUCTURES: dict[str, list[int]] = {}


def case(name: str, cells: list, structures: list[int], wrong: set[str] = frozenset(),
         skipped: set[str] = frozenset(), cascade: set[str] = frozenset()) -> None:
    wrong = set(wrong) | set(cascade)
    right = set(ALL_STEPS) - wrong - set(skipped)
    CASES.append({"name": name, "notebook": notebook(cells), "right": right, "wrong": wrong,
                  "renamed_forward": False})
    STRUCTURES[name] = list(structures)
    if cascade:
        CASCADE[name] = set(cascade)


# ---------------------------------------------------------------------------------------------
# 1. A graph of Node subclasses, one per kind of forward line: calling a node replays its line
#    and keeps its inputs in self.cache; backward(dout) returns a gradient per input (None for
#    the indices). The graph is a list walked in reverse, the gradients summed into a dict by
#    name. Exercises 2 and 3 are two more nodes; the training loop builds a Model from them
#    and zips the parameters with its grad_list() method. Right throughout.

EX1_A1 = """\
# my plan: a tiny graph of layer objects. Each node knows the names it reads and the name it
# makes; calling it replays the forward line (keeping its inputs in self.cache), and
# backward(dout) gives back one gradient per input.

def sum_to(grad, shape):
    # undo broadcasting: sum grad back down to `shape`
    while grad.dim() > len(shape):
        grad = grad.sum(0)
    for dim, size in enumerate(shape):
        if size == 1 and grad.shape[dim] != 1:
            grad = grad.sum(dim, keepdim=True)
    return grad


class Node:
    def __init__(self, out, *ins):
        self.out = out
        self.ins = ins
        self.cache = None

    def __call__(self, *xs):
        self.cache = xs
        return self.forward(*xs)

    def forward(self, *xs):
        raise NotImplementedError

    def backward(self, dout):
        raise NotImplementedError

    def __repr__(self):
        return f"{type(self).__name__}({self.out} <- {', '.join(self.ins)})"


class Embed(Node):
    def forward(self, table, ix):
        return table[ix]

    def backward(self, dout):
        table, ix = self.cache
        dtable = torch.zeros_like(table)
        dtable.index_add_(0, ix.reshape(-1), dout.reshape(-1, table.shape[1]))
        return dtable, None


class Flatten(Node):
    def forward(self, x):
        return x.view(x.shape[0], -1)

    def backward(self, dout):
        (x,) = self.cache
        return (dout.view(x.shape),)


class Linear(Node):
    def forward(self, x, W, b):
        return x @ W + b

    def backward(self, dout):
        x, W, b = self.cache
        return dout @ W.T, x.T @ dout, dout.sum(0)


class ColMean(Node):            # 1/n * x.sum(0, keepdim=True)
    def forward(self, x):
        return 1 / x.shape[0] * x.sum(0, keepdim=True)

    def backward(self, dout):
        (x,) = self.cache
        return (torch.ones_like(x) * dout / x.shape[0],)


class ColBessel(Node):          # 1/(n-1) * x.sum(0, keepdim=True)
    def forward(self, x):
        return 1 / (x.shape[0] - 1) * x.sum(0, keepdim=True)

    def backward(self, dout):
        (x,) = self.cache
        return (torch.ones_like(x) * dout / (x.shape[0] - 1),)


class Sub(Node):
    def forward(self, a, b):
        return a - b

    def backward(self, dout):
        a, b = self.cache
        return sum_to(dout, a.shape), sum_to(-dout, b.shape)


class Mul(Node):
    def forward(self, a, b):
        return a * b

    def backward(self, dout):
        a, b = self.cache
        return sum_to(dout * b, a.shape), sum_to(dout * a, b.shape)


class Square(Node):
    def forward(self, x):
        return x**2

    def backward(self, dout):
        (x,) = self.cache
        return (2 * x * dout,)


class Power(Node):              # (x + eps) ** p
    def __init__(self, out, x, p, eps=0.0):
        super().__init__(out, x)
        self.p, self.eps = p, eps

    def forward(self, x):
        return (x + self.eps)**self.p

    def backward(self, dout):
        (x,) = self.cache
        return (self.p * (x + self.eps)**(self.p - 1) * dout,)


class ScaleShift(Node):         # gain * x + bias
    def forward(self, x, gain, bias):
        return gain * x + bias

    def backward(self, dout):
        x, gain, bias = self.cache
        return dout * gain, (dout * x).sum(0, keepdim=True), dout.sum(0, keepdim=True)


class Tanh(Node):
    def forward(self, x):
        self.y = torch.tanh(x)
        return self.y

    def backward(self, dout):
        return ((1 - self.y**2) * dout,)


class RowMax(Node):
    def forward(self, x):
        return x.max(1, keepdim=True).values

    def backward(self, dout):
        (x,) = self.cache
        return (F.one_hot(x.max(1).indices, x.shape[1]) * dout,)


class Exp(Node):
    def forward(self, x):
        self.y = x.exp()
        return self.y

    def backward(self, dout):
        return (self.y * dout,)


class RowSum(Node):
    def forward(self, x):
        return x.sum(1, keepdims=True)

    def backward(self, dout):
        (x,) = self.cache
        return (dout.expand_as(x),)


class Log(Node):
    def forward(self, x):
        return x.log()

    def backward(self, dout):
        (x,) = self.cache
        return (dout / x,)


class PickMean(Node):           # -x[range(n), y].mean()
    def forward(self, x, y):
        return -x[range(x.shape[0]), y].mean()

    def backward(self, dout):
        x, y = self.cache
        dx = torch.zeros_like(x)
        dx[range(x.shape[0]), y] = -dout / x.shape[0]
        return dx, None
"""

EX1_A2 = """\
graph = [
    Embed('emb', 'C', 'Xb'),
    Flatten('embcat', 'emb'),
    Linear('hprebn', 'embcat', 'W1', 'b1'),
    ColMean('bnmeani', 'hprebn'),
    Sub('bndiff', 'hprebn', 'bnmeani'),
    Square('bndiff2', 'bndiff'),
    ColBessel('bnvar', 'bndiff2'),
    Power('bnvar_inv', 'bnvar', -0.5, eps=1e-5),
    Mul('bnraw', 'bndiff', 'bnvar_inv'),
    ScaleShift('hpreact', 'bnraw', 'bngain', 'bnbias'),
    Tanh('h', 'hpreact'),
    Linear('logits', 'h', 'W2', 'b2'),
    RowMax('logit_maxes', 'logits'),
    Sub('norm_logits', 'logits', 'logit_maxes'),
    Exp('counts', 'norm_logits'),
    RowSum('counts_sum', 'counts'),
    Power('counts_sum_inv', 'counts_sum', -1),
    Mul('probs', 'counts', 'counts_sum_inv'),
    Log('logprobs', 'probs'),
    PickMean('loss', 'logprobs', 'Yb'),
]


@torch.no_grad()
def replay(graph, values):
    for node in graph:
        values[node.out] = node(*[values[k] for k in node.ins])
    return values


@torch.no_grad()
def backprop(graph, seed=1.0):
    grads = {graph[-1].out: torch.tensor(seed)}
    for node in reversed(graph):
        dins = node.backward(grads[node.out])
        for k, name in enumerate(node.ins):
            if dins[k] is None:
                continue
            grads[name] = grads[name] + dins[k] if name in grads else dins[k]
    return grads

print(graph[:3], '...', len(graph), 'nodes')
"""

EX1_A3 = f"""\
values = replay(graph, dict(C=C, Xb=Xb, Yb=Yb, W1=W1, b1=b1, bngain=bngain, bnbias=bnbias,
                            W2=W2, b2=b2))
grads = backprop(graph)
print('replayed loss', values['loss'].item(), 'vs', loss.item())

for name in {CMP_LIST}:
    cmp(name, grads[name], globals()[name])
"""

EX2_A = """\
# backward pass
class SoftmaxNLL(Node):
    # the whole loss as one node
    def forward(self, logits, y):
        return F.cross_entropy(logits, y)

    def backward(self, dout):
        logits, y = self.cache
        m = logits.shape[0]
        dlogits = F.softmax(logits, 1)
        dlogits[range(m), y] -= 1
        return dlogits * dout / m, None

ce_node = SoftmaxNLL('loss', 'logits', 'Yb')
with torch.no_grad():
    ce_node(logits, Yb)
    dlogits = ce_node.backward(torch.tensor(1.0))[0]
cmp('logits', dlogits, logits)
"""

EX3_A = """\
# backward pass
class BatchNormFused(Node):
    # hpreact = gain * (x - mean) / sqrt(var + eps) + bias, the variance with Bessel's correction
    def forward(self, x, gain, bias):
        self.var_inv = (x.var(0, keepdim=True, unbiased=True) + 1e-5)**-0.5
        self.xhat = (x - x.mean(0, keepdim=True)) * self.var_inv
        return gain * self.xhat + bias

    def backward(self, dout):
        x, gain, bias = self.cache
        m, xhat = x.shape[0], self.xhat
        dx = gain * self.var_inv / m * (m * dout - dout.sum(0) - m / (m - 1) * xhat * (dout * xhat).sum(0))
        return dx, (dout * xhat).sum(0, keepdim=True), dout.sum(0, keepdim=True)

bn_node = BatchNormFused('hpreact', 'hprebn', 'bngain', 'bnbias')
with torch.no_grad():
    bn_node(hprebn, bngain, bnbias)
    dhprebn, _, _ = bn_node.backward(grads['hpreact'])
cmp('hprebn', dhprebn, hprebn)
"""

EX4_A_DEF = """\
class Model:
    # the training graph: my fused nodes from exercises 2 and 3 in the middle
    param_names = ['C', 'W1', 'b1', 'W2', 'b2', 'bngain', 'bnbias']

    def __init__(self):
        self.graph = [
            Embed('emb', 'C', 'Xb'),
            Flatten('embcat', 'emb'),
            Linear('hprebn', 'embcat', 'W1', 'b1'),
            BatchNormFused('hpreact', 'hprebn', 'bngain', 'bnbias'),
            Tanh('h', 'hpreact'),
            Linear('logits', 'h', 'W2', 'b2'),
            SoftmaxNLL('loss', 'logits', 'Yb'),
        ]
        self.grads = {}

    def backward(self, **values):
        values = replay(self.graph, values)
        self.grads = backprop(self.graph)
        return values['loss']

    def grad_list(self):
        return [self.grads[k] for k in self.param_names]

model = Model()
model.graph
"""

TRAIN_BACKWARD_A = """\
my_loss = model.backward(C=C, Xb=Xb, Yb=Yb, W1=W1, b1=b1, bngain=bngain, bnbias=bnbias,
                         W2=W2, b2=b2)
"""

UPDATE_A = """\
# update
lr = 0.1 if i < 100000 else 0.01 # step learning rate decay
for p, grad in zip(parameters, model.grad_list()):
  p.data += -lr * grad
"""

case("node_graph_cache_backward_grad_list", [
    *setup(), EX1_HEAD, EX1_A1, EX1_A2, EX1_A3,
    EX2_FORWARD, EX2_A, EX3_FORWARD, EX3_A, EX4_A_DEF,
    train_cell(TRAIN_BACKWARD_A, UPDATE_A), *EVAL,
], structures=[1, 7])

# ---------------------------------------------------------------------------------------------
# 2. A tape of closures: a function replays the forward with its own locals and, after each
#    line, records (out, ins, backward closure), every closure wrapped by the learner's @keep
#    decorator (counts calls, clones what it returns); the tape runs in reverse, summing into a
#    dict. The fused exercises are one-entry tapes; the training loop splices them into a
#    shorter tape and updates through a step(params, grads, lr) helper. Slips: the closure for
#    `bnmeani = 1/n * hprebn.sum(0)` forgot its 1/n (dhprebn wrong, and embcat, emb, C built on
#    it); the fused batchnorm is taken with the biased variance (no n/(n-1)), and the training
#    loop reuses it.

EX1_B1 = """\
import functools

def keep(fn):
    # my decorator for backward closures: counts how often each one runs and hands back
    # clones, so an in-place += further down the tape can't change a gradient I stored
    @functools.wraps(fn)
    def wrapper(dout):
        wrapper.calls += 1
        return tuple(None if d is None else d.clone() for d in fn(dout))
    wrapper.calls = 0
    return wrapper


@torch.no_grad()
def forward_on_tape(params, Xb, Yb):
    C, W1, b1, W2, b2, bngain, bnbias = params
    n = Xb.shape[0]
    tape = []

    def rec(out, ins, fn):
        tape.append((out, ins, fn))

    emb = C[Xb]
    @keep
    def emb_back(d):
        dC = torch.zeros_like(C)
        dC.index_add_(0, Xb.view(-1), d.reshape(-1, C.shape[1]))
        return (dC,)
    rec('emb', ['C'], emb_back)

    embcat = emb.view(emb.shape[0], -1)
    rec('embcat', ['emb'], keep(lambda d: (d.view(emb.shape),)))
    hprebn = embcat @ W1 + b1
    rec('hprebn', ['embcat', 'W1', 'b1'], keep(lambda d: (d @ W1.T, embcat.T @ d, d.sum(0))))
    bnmeani = 1/n*hprebn.sum(0, keepdim=True)
    rec('bnmeani', ['hprebn'], keep(lambda d: (torch.ones_like(hprebn) * d,)))
    bndiff = hprebn - bnmeani
    rec('bndiff', ['hprebn', 'bnmeani'], keep(lambda d: (d, -d.sum(0, keepdim=True))))
    bndiff2 = bndiff**2
    rec('bndiff2', ['bndiff'], keep(lambda d: (2 * bndiff * d,)))
    bnvar = 1/(n-1)*(bndiff2).sum(0, keepdim=True)
    rec('bnvar', ['bndiff2'], keep(lambda d: (torch.ones_like(bndiff2) * d / (n - 1),)))
    bnvar_inv = (bnvar + 1e-5)**-0.5
    rec('bnvar_inv', ['bnvar'], keep(lambda d: (-0.5 * (bnvar + 1e-5)**-1.5 * d,)))
    bnraw = bndiff * bnvar_inv
    rec('bnraw', ['bndiff', 'bnvar_inv'], keep(lambda d: (d * bnvar_inv, (d * bndiff).sum(0, keepdim=True))))
    hpreact = bngain * bnraw + bnbias
    rec('hpreact', ['bngain', 'bnraw', 'bnbias'],
        keep(lambda d: ((d * bnraw).sum(0, keepdim=True), d * bngain, d.sum(0, keepdim=True))))
    h = torch.tanh(hpreact)
    rec('h', ['hpreact'], keep(lambda d: ((1 - h**2) * d,)))
    logits = h @ W2 + b2
    rec('logits', ['h', 'W2', 'b2'], keep(lambda d: (d @ W2.T, h.T @ d, d.sum(0))))
    logit_maxes = logits.max(1, keepdim=True).values
    rec('logit_maxes', ['logits'], keep(lambda d: (F.one_hot(logits.max(1).indices, logits.shape[1]) * d,)))
    norm_logits = logits - logit_maxes
    rec('norm_logits', ['logits', 'logit_maxes'], keep(lambda d: (d, -d.sum(1, keepdim=True))))
    counts = norm_logits.exp()
    rec('counts', ['norm_logits'], keep(lambda d: (counts * d,)))
    counts_sum = counts.sum(1, keepdims=True)
    rec('counts_sum', ['counts'], keep(lambda d: (torch.ones_like(counts) * d,)))
    counts_sum_inv = counts_sum**-1
    rec('counts_sum_inv', ['counts_sum'], keep(lambda d: (-counts_sum**-2 * d,)))
    probs = counts * counts_sum_inv
    rec('probs', ['counts', 'counts_sum_inv'], keep(lambda d: (d * counts_sum_inv, (d * counts).sum(1, keepdim=True))))
    logprobs = probs.log()
    rec('logprobs', ['probs'], keep(lambda d: (d / probs,)))
    loss = -logprobs[range(n), Yb].mean()

    @keep
    def loss_back(d):
        dlogprobs = torch.zeros_like(logprobs)
        dlogprobs[range(n), Yb] = -d / n
        return (dlogprobs,)
    rec('loss', ['logprobs'], loss_back)
    return loss, tape


def run_tape(tape, seeds):
    adj = dict(seeds)
    for out, ins, fn in reversed(tape):
        if out not in adj:
            continue
        local = fn(adj[out])
        for k, name in enumerate(ins):
            if local[k] is None:
                continue
            adj[name] = adj[name] + local[k] if name in adj else local[k]
    return adj
"""

EX1_B2 = f"""\
my_loss, tape = forward_on_tape([C, W1, b1, W2, b2, bngain, bnbias], Xb, Yb)
adj = run_tape(tape, {{'loss': torch.tensor(1.0)}})
print('loss', my_loss.item(), loss.item(), '| closures run:', sum(fn.calls for _, _, fn in tape))

for name in {CMP_LIST}:
    cmp(name, adj[name], globals()[name])
"""

EX2_B = """\
# backward pass
@torch.no_grad()
def ce_on_tape(logits, Yb):
    m = logits.shape[0]

    @keep
    def ce_back(d):
        dl = F.softmax(logits, 1)
        dl[range(m), Yb] -= 1
        return (dl * d / m,)
    return F.cross_entropy(logits, Yb), [('loss', ['logits'], ce_back)]

_, ce_tape = ce_on_tape(logits, Yb)
dlogits = run_tape(ce_tape, {'loss': torch.tensor(1.0)})['logits']
cmp('logits', dlogits, logits)
"""

EX3_B = """\
# backward pass
@torch.no_grad()
def bn_on_tape(hprebn, bngain, bnbias):
    m = hprebn.shape[0]
    mean = hprebn.mean(0, keepdim=True)
    var = hprebn.var(0, keepdim=True, unbiased=False)
    var_inv = (var + 1e-5)**-0.5
    xhat = (hprebn - mean) * var_inv

    @keep
    def bn_back(d):
        dx = bngain * var_inv / m * (m * d - d.sum(0) - xhat * (d * xhat).sum(0))
        return dx, (d * xhat).sum(0, keepdim=True), d.sum(0, keepdim=True)
    return bngain * xhat + bnbias, [('hpreact', ['hprebn', 'bngain', 'bnbias'], bn_back)]

hpreact_mine, bn_tape = bn_on_tape(hprebn, bngain, bnbias)
print('forward max diff:', (hpreact_mine - hpreact).abs().max().item())
dhprebn = run_tape(bn_tape, {'hpreact': adj['hpreact']})['hprebn']
cmp('hprebn', dhprebn, hprebn)
"""

EX4_B_DEF = """\
# the training tape: the same closures, the fused loss and batchnorm spliced in
@torch.no_grad()
def fused_forward_on_tape(params, Xb, Yb):
    C, W1, b1, W2, b2, bngain, bnbias = params
    tape = []
    emb = C[Xb]
    tape.append(('emb', ['C'], keep(lambda d: (torch.zeros_like(C).index_add_(0, Xb.view(-1), d.reshape(-1, C.shape[1])),))))
    embcat = emb.view(emb.shape[0], -1)
    tape.append(('embcat', ['emb'], keep(lambda d: (d.view(emb.shape),))))
    hprebn = embcat @ W1 + b1
    tape.append(('hprebn', ['embcat', 'W1', 'b1'], keep(lambda d: (d @ W1.T, embcat.T @ d, d.sum(0)))))
    hpreact, bn_tape = bn_on_tape(hprebn, bngain, bnbias)
    tape += bn_tape
    h = torch.tanh(hpreact)
    tape.append(('h', ['hpreact'], keep(lambda d: ((1 - h**2) * d,))))
    logits = h @ W2 + b2
    tape.append(('logits', ['h', 'W2', 'b2'], keep(lambda d: (d @ W2.T, h.T @ d, d.sum(0)))))
    loss, ce_tape = ce_on_tape(logits, Yb)
    tape += ce_tape
    return loss, tape
"""

HEAD_B = """\
def step(params, grads, lr):
  for p, grad in zip(params, grads):
    p.data += -lr * grad

"""

TRAIN_BACKWARD_B = """\
my_loss, tape = fused_forward_on_tape(parameters, Xb, Yb)
adj = run_tape(tape, {'loss': torch.tensor(1.0)})
grads = [adj[k] for k in ['C', 'W1', 'b1', 'W2', 'b2', 'bngain', 'bnbias']]
"""

UPDATE_B = """\
# update
lr = 0.1 if i < 100000 else 0.01 # step learning rate decay
step(parameters, grads, lr)
"""

case("closure_tape_keep_decorator_step_bnmeani_no_n_biased_bn", [
    *setup(), EX1_HEAD, EX1_B1, EX1_B2,
    EX2_FORWARD, EX2_B, EX3_FORWARD, EX3_B, EX4_B_DEF,
    train_cell(TRAIN_BACKWARD_B, UPDATE_B, head=HEAD_B), *EVAL,
], structures=[2, 7], wrong=_steps("hprebn", BN, LOOP), cascade=_steps("embcat", "emb", "C"))

# ---------------------------------------------------------------------------------------------
# 3. A base class GradientSet (a @classmethod constructor from the batch's labels, @staticmethod
#    row/column sums and scatter, a @property listing the names, item access to a dict), its
#    subclasses calling super().__init__() and running their backward in methods decorated with
#    @torch.no_grad(); @property accessors dlogits, dhpreact, dhprebn. The training loop reads
#    a subclass's param_grads property. Right throughout.

EX1_C1 = """\
class GradientSet:
    # a batch's size and labels, and my gradients by forward name

    def __init__(self, n, Yb):
        self.n = n
        self.Yb = Yb
        self._grads = {}

    @classmethod
    def for_batch(cls, Yb, **extra):
        return cls(Yb.shape[0], Yb, **extra)

    @staticmethod
    def rows(t):
        return t.sum(1, keepdim=True)

    @staticmethod
    def cols(t):
        return t.sum(0, keepdim=True)

    @staticmethod
    def scatter_rows(table, ix, d):
        out = torch.zeros_like(table)
        for k in range(ix.shape[0]):
            for j in range(ix.shape[1]):
                out[ix[k, j]] += d[k, j]
        return out

    @property
    def names(self):
        return list(self._grads)

    def __getitem__(self, name):
        return self._grads[name]

    def __setitem__(self, name, value):
        self._grads[name] = value


class ManualBackprop(GradientSet):
    def __init__(self, n, Yb):
        super().__init__(n, Yb)
        self.stage = 'fresh'

    @property
    def dlogits(self):
        return self['logits']

    @property
    def dhpreact(self):
        return self['hpreact']

    @torch.no_grad()
    def through_loss(self):
        n, g = self.n, self
        g['logprobs'] = torch.zeros_like(logprobs)
        g['logprobs'][range(n), self.Yb] = -1.0 / n
        g['probs'] = g['logprobs'] / probs
        g['counts_sum_inv'] = self.rows(counts * g['probs'])
        g['counts_sum'] = -counts_sum**-2 * g['counts_sum_inv']
        g['counts'] = counts_sum_inv * g['probs'] + g['counts_sum']
        g['norm_logits'] = counts * g['counts']
        g['logit_maxes'] = -self.rows(g['norm_logits'])
        g['logits'] = g['norm_logits'] + F.one_hot(logits.max(1).indices, logits.shape[1]) * g['logit_maxes']
        self.stage = 'loss'

    @torch.no_grad()
    def through_hidden(self):
        n, g = self.n, self
        g['h'] = self.dlogits @ W2.T
        g['W2'] = h.T @ self.dlogits
        g['b2'] = self.dlogits.sum(0)
        g['hpreact'] = (1 - h**2) * g['h']
        g['bngain'] = self.cols(bnraw * self.dhpreact)
        g['bnbias'] = self.cols(self.dhpreact)
        g['bnraw'] = bngain * self.dhpreact
        g['bnvar_inv'] = self.cols(bndiff * g['bnraw'])
        g['bnvar'] = -0.5 * (bnvar + 1e-5)**-1.5 * g['bnvar_inv']
        g['bndiff2'] = torch.ones_like(bndiff2) * g['bnvar'] / (n - 1)
        g['bndiff'] = bnvar_inv * g['bnraw'] + 2 * bndiff * g['bndiff2']
        g['bnmeani'] = -self.cols(g['bndiff'])
        g['hprebn'] = g['bndiff'] + g['bnmeani'] / n
        self.stage = 'hidden'

    @torch.no_grad()
    def through_input(self):
        g = self
        g['embcat'] = g['hprebn'] @ W1.T
        g['W1'] = embcat.T @ g['hprebn']
        g['b1'] = g['hprebn'].sum(0)
        g['emb'] = g['embcat'].view(emb.shape)
        g['C'] = self.scatter_rows(C, Xb, g['emb'])
        self.stage = 'done'

    def run(self):
        self.through_loss()
        self.through_hidden()
        self.through_input()
        return self
"""

EX1_C2 = """\
mb = ManualBackprop.for_batch(Yb).run()
print(mb.stage, len(mb.names), 'gradients')
for name in mb.names:
    cmp(name, mb[name], globals()[name])
"""

EX2_C = """\
# backward pass
class FusedLoss(GradientSet):
    def __init__(self, n, Yb, logits):
        super().__init__(n, Yb)
        self.logits = logits

    @staticmethod
    def softmax_minus_onehot(logits, Yb):
        d = F.softmax(logits, 1)
        d[range(logits.shape[0]), Yb] -= 1
        return d

    @torch.no_grad()
    def run(self):
        self['logits'] = self.softmax_minus_onehot(self.logits, self.Yb) / self.n
        return self

    @property
    def dlogits(self):
        return self['logits']

fl = FusedLoss.for_batch(Yb, logits=logits).run()
cmp('logits', fl.dlogits, logits)
"""

EX3_C = """\
# backward pass
class FusedBatchNorm(GradientSet):
    def __init__(self, n, Yb, bngain, bnraw, bnvar_inv):
        super().__init__(n, Yb)
        self.gain, self.xhat, self.var_inv = bngain, bnraw, bnvar_inv

    @staticmethod
    def bessel(m):
        return m / (m - 1)

    @torch.no_grad()
    def run(self, dhpreact):
        m, d, xhat = self.n, dhpreact, self.xhat
        self['hprebn'] = self.gain * self.var_inv / m * (m * d - d.sum(0) - self.bessel(m) * xhat * (d * xhat).sum(0))
        self['bngain'] = self.cols(d * xhat)
        self['bnbias'] = self.cols(d)
        return self

    @property
    def dhprebn(self):
        return self['hprebn']

fb = FusedBatchNorm.for_batch(Yb, bngain=bngain, bnraw=bnraw, bnvar_inv=bnvar_inv).run(mb.dhpreact)
cmp('hprebn', fb.dhprebn, hprebn)
"""

EX4_C_DEF = """\
class TrainBackward(GradientSet):
    order = ('C', 'W1', 'b1', 'W2', 'b2', 'bngain', 'bnbias')

    def __init__(self, n, Yb, **forward):
        super().__init__(n, Yb)
        self.f = forward

    @torch.no_grad()
    def run(self):
        f, n = self.f, self.n
        dlogits = FusedLoss.softmax_minus_onehot(f['logits'], self.Yb) / n
        self['W2'] = f['h'].T @ dlogits
        self['b2'] = dlogits.sum(0)
        dhpreact = (1 - f['h']**2) * (dlogits @ f['W2'].T)
        bn = FusedBatchNorm(n, self.Yb, f['bngain'], f['bnraw'], f['bnvar_inv']).run(dhpreact)
        self['bngain'], self['bnbias'] = bn['bngain'], bn['bnbias']
        self['W1'] = f['embcat'].T @ bn.dhprebn
        self['b1'] = bn.dhprebn.sum(0)
        demb = (bn.dhprebn @ f['W1'].T).view(f['Xb'].shape[0], f['Xb'].shape[1], -1)
        self['C'] = self.scatter_rows(f['C'], f['Xb'], demb)
        return self

    @property
    def param_grads(self):
        return [self[k] for k in self.order]
"""

TRAIN_BACKWARD_C = """\
tb = TrainBackward.for_batch(Yb, Xb=Xb, C=C, embcat=embcat, W1=W1, bngain=bngain, bnraw=bnraw,
                             bnvar_inv=bnvar_inv, h=h, W2=W2, logits=logits).run()
grads = tb.param_grads
"""

case("class_static_class_property_super_no_grad", [
    *setup(), EX1_HEAD, EX1_C1, EX1_C2,
    EX2_FORWARD, EX2_C, EX3_FORWARD, EX3_C, EX4_C_DEF,
    train_cell(TRAIN_BACKWARD_C), *EVAL,
], structures=[3])

# ---------------------------------------------------------------------------------------------
# 4. Generators: one per part of the net yields (name, gradient) pairs walking backwards and
#    returns the gradient the next part starts from; `yield from` chains them; dict() collects
#    them. bngain's and bnbias's gradients (and dbnmeani, as in the lecture) are column sums
#    without keepdim, which broadcast to the right values. The fused exercises and the loop's
#    backward are generators too. Right throughout.

EX1_D1 = """\
def through_loss(Yb, n):
    dlogprobs = torch.zeros_like(logprobs)
    dlogprobs[range(n), Yb] = -1.0 / n
    yield 'logprobs', dlogprobs
    dprobs = dlogprobs / probs
    yield 'probs', dprobs
    dcounts_sum_inv = (counts * dprobs).sum(1, keepdim=True)
    yield 'counts_sum_inv', dcounts_sum_inv
    dcounts_sum = -counts_sum**-2 * dcounts_sum_inv
    yield 'counts_sum', dcounts_sum
    dcounts = counts_sum_inv * dprobs + dcounts_sum
    yield 'counts', dcounts
    dnorm_logits = counts * dcounts
    yield 'norm_logits', dnorm_logits
    dlogit_maxes = -dnorm_logits.sum(1, keepdim=True)
    yield 'logit_maxes', dlogit_maxes
    dlogits = dnorm_logits.clone()
    dlogits[range(n), logits.max(1).indices] += dlogit_maxes.view(-1)
    yield 'logits', dlogits
    return dlogits


def through_hidden(dlogits, n):
    dh = dlogits @ W2.T
    yield 'h', dh
    yield 'W2', h.T @ dlogits
    yield 'b2', dlogits.sum(0)
    dhpreact = (1 - h**2) * dh
    yield 'hpreact', dhpreact
    yield 'bngain', (bnraw * dhpreact).sum(0)
    yield 'bnbias', dhpreact.sum(0)
    dbnraw = bngain * dhpreact
    yield 'bnraw', dbnraw
    dbnvar_inv = (bndiff * dbnraw).sum(0, keepdim=True)
    yield 'bnvar_inv', dbnvar_inv
    dbnvar = -0.5 * (bnvar + 1e-5)**-1.5 * dbnvar_inv
    yield 'bnvar', dbnvar
    dbndiff2 = torch.ones_like(bndiff2) * dbnvar / (n - 1)
    yield 'bndiff2', dbndiff2
    dbndiff = bnvar_inv * dbnraw + 2 * bndiff * dbndiff2
    yield 'bndiff', dbndiff
    dbnmeani = -dbndiff.sum(0)
    yield 'bnmeani', dbnmeani
    dhprebn = dbndiff + dbnmeani / n
    yield 'hprebn', dhprebn
    return dhprebn


def through_input(dhprebn):
    dembcat = dhprebn @ W1.T
    yield 'embcat', dembcat
    yield 'W1', embcat.T @ dhprebn
    yield 'b1', dhprebn.sum(0)
    demb = dembcat.view(emb.shape)
    yield 'emb', demb
    dC = torch.zeros_like(C)
    for pos in range(Xb.shape[1]):
        dC.index_add_(0, Xb[:, pos], demb[:, pos])
    yield 'C', dC


def walk_back(Yb, n):
    dlogits = yield from through_loss(Yb, n)
    dhprebn = yield from through_hidden(dlogits, n)
    yield from through_input(dhprebn)
"""

EX1_D2 = """\
grads = dict(walk_back(Yb, n))
print(len(grads), 'gradients:', ' '.join(grads))
for name, d in grads.items():
    cmp(name, d, globals()[name])
"""

EX2_D = """\
# backward pass
def fused_loss_back(logits, Yb):
    m = logits.shape[0]
    p = F.softmax(logits, 1)
    p[range(m), Yb] -= 1
    yield 'logits', p / m

fused = dict(fused_loss_back(logits, Yb))
cmp('logits', fused['logits'], logits)
"""

EX3_D = """\
# backward pass
def fused_bn_back(dhpreact):
    m = dhpreact.shape[0]
    yield 'bngain', (bnraw * dhpreact).sum(0, keepdim=True)
    yield 'bnbias', dhpreact.sum(0, keepdim=True)
    yield 'hprebn', bngain * bnvar_inv / m * (m * dhpreact - dhpreact.sum(0) - m / (m - 1) * bnraw * (dhpreact * bnraw).sum(0))

fused.update(fused_bn_back(grads['hpreact']))
cmp('hprebn', fused['hprebn'], hprebn)
"""

EX4_D_DEF = """\
def train_back(Xb, Yb, embcat, bnraw, bnvar_inv, h, logits):
    m = Xb.shape[0]
    dlogits = dict(fused_loss_back(logits, Yb))['logits']
    yield 'W2', h.T @ dlogits
    yield 'b2', dlogits.sum(0)
    dhpreact = (1 - h**2) * (dlogits @ W2.T)
    yield 'bngain', (bnraw * dhpreact).sum(0)
    yield 'bnbias', dhpreact.sum(0)
    dhprebn = bngain * bnvar_inv / m * (m * dhpreact - dhpreact.sum(0) - m / (m - 1) * bnraw * (dhpreact * bnraw).sum(0))
    yield 'W1', embcat.T @ dhprebn
    yield 'b1', dhprebn.sum(0)
    dC = torch.zeros_like(C)
    dC.index_add_(0, Xb.view(-1), (dhprebn @ W1.T).view(-1, C.shape[1]))
    yield 'C', dC
"""

TRAIN_BACKWARD_D = """\
got = dict(train_back(Xb, Yb, embcat, bnraw, bnvar_inv, h, logits))
grads = [got[k] for k in ('C', 'W1', 'b1', 'W2', 'b2', 'bngain', 'bnbias')]
"""

case("generators_yield_from_no_keepdim_colsums", [
    *setup(), EX1_HEAD, EX1_D1, EX1_D2,
    EX2_FORWARD, EX2_D, EX3_FORWARD, EX3_D, EX4_D_DEF,
    train_cell(TRAIN_BACKWARD_D), *EVAL,
], structures=[4])

# ---------------------------------------------------------------------------------------------
# 5. A dict of vectorised local-derivative lambdas, ops[kind](...) applied line by line into a
#    dict `gr` keyed by forward name; exercises 2 and 3 add an entry each; the training loop
#    zips the parameters with the list a function returns. Slips: dbndiff's second branch
#    (through bndiff2) is assigned with `=` over the first (dbnmeani, dhprebn and everything
#    below built on it are wrong too); the fused cross-entropy entry has its sign flipped
#    (one_hot - softmax), and the training loop uses it.

EX1_E1 = """\
# the local derivatives, vectorised: ops[kind](what the forward line used..., upstream)
ops = {
    'log':      lambda x, up: up / x,
    'exp':      lambda out, up: out * up,
    'tanh':     lambda out, up: (1 - out**2) * up,
    'pow':      lambda x, p, up: p * x**(p - 1) * up,
    'square':   lambda x, up: 2 * x * up,
    'mul':      lambda other, up: other * up,
    'mul_sum0': lambda other, up: (other * up).sum(0, keepdim=True),   # a broadcast row
    'mul_sum1': lambda other, up: (other * up).sum(1, keepdim=True),   # a broadcast column
    'unsum':    lambda like, up: torch.ones_like(like) * up,           # back through .sum(keepdim)
    'neg_sum0': lambda up: -up.sum(0, keepdim=True),
    'neg_sum1': lambda up: -up.sum(1, keepdim=True),
    'mm_left':  lambda right, up: up @ right.T,
    'mm_right': lambda left, up: left.T @ up,
    'bias':     lambda up: up.sum(0),
    'argmax':   lambda x, up: F.one_hot(x.max(1).indices, x.shape[1]) * up,
    'gather':   lambda table, ix, up: torch.zeros_like(table).index_add_(0, ix.view(-1), up.reshape(-1, table.shape[1])),
}
"""

EX1_E2 = """\
gr = {}
gr['logprobs'] = torch.zeros_like(logprobs)
gr['logprobs'][range(n), Yb] = -1.0 / n
gr['probs'] = ops['log'](probs, gr['logprobs'])
gr['counts_sum_inv'] = ops['mul_sum1'](counts, gr['probs'])
gr['counts'] = ops['mul'](counts_sum_inv, gr['probs'])
gr['counts_sum'] = ops['pow'](counts_sum, -1, gr['counts_sum_inv'])
gr['counts'] += ops['unsum'](counts, gr['counts_sum'])
gr['norm_logits'] = ops['exp'](counts, gr['counts'])
gr['logit_maxes'] = ops['neg_sum1'](gr['norm_logits'])
gr['logits'] = gr['norm_logits'].clone()
gr['logits'] += ops['argmax'](logits, gr['logit_maxes'])

gr['h'] = ops['mm_left'](W2, gr['logits'])
gr['W2'] = ops['mm_right'](h, gr['logits'])
gr['b2'] = ops['bias'](gr['logits'])
gr['hpreact'] = ops['tanh'](h, gr['h'])
gr['bngain'] = ops['mul_sum0'](bnraw, gr['hpreact'])
gr['bnraw'] = ops['mul'](bngain, gr['hpreact'])
gr['bnbias'] = ops['neg_sum0'](-gr['hpreact'])
gr['bndiff'] = ops['mul'](bnvar_inv, gr['bnraw'])
gr['bnvar_inv'] = ops['mul_sum0'](bndiff, gr['bnraw'])
gr['bnvar'] = ops['pow'](bnvar + 1e-5, -0.5, gr['bnvar_inv'])
gr['bndiff2'] = ops['unsum'](bndiff2, gr['bnvar']) / (n - 1)
gr['bndiff'] = ops['square'](bndiff, gr['bndiff2'])
gr['bnmeani'] = ops['neg_sum0'](gr['bndiff'])
gr['hprebn'] = gr['bndiff'].clone()
gr['hprebn'] += ops['unsum'](hprebn, gr['bnmeani']) / n

gr['embcat'] = ops['mm_left'](W1, gr['hprebn'])
gr['W1'] = ops['mm_right'](embcat, gr['hprebn'])
gr['b1'] = ops['bias'](gr['hprebn'])
gr['emb'] = gr['embcat'].view(emb.shape)
gr['C'] = ops['gather'](C, Xb, gr['emb'])
"""

EX1_E3 = f"""\
for name in {CMP_LIST}:
    cmp(name, gr[name], globals()[name])
"""

EX2_E = """\
# backward pass
ops['softmax_xent'] = lambda logits, y: (F.one_hot(y, logits.shape[1]) - F.softmax(logits, 1)) / logits.shape[0]
gr['logits'] = ops['softmax_xent'](logits, Yb)
cmp('logits', gr['logits'], logits)
"""

EX3_E = """\
# backward pass
ops['batchnorm'] = lambda xhat, gain, var_inv, up: gain * var_inv / up.shape[0] * (
    up.shape[0] * up - up.sum(0) - up.shape[0] / (up.shape[0] - 1) * xhat * (up * xhat).sum(0))
gr['hprebn'] = ops['batchnorm'](bnraw, bngain, bnvar_inv, gr['hpreact'])
cmp('hprebn', gr['hprebn'], hprebn)
"""

EX4_E_DEF = """\
def param_grads(Xb, Yb):
    gr = {}
    gr['logits'] = ops['softmax_xent'](logits, Yb)
    gr['W2'] = ops['mm_right'](h, gr['logits'])
    gr['b2'] = ops['bias'](gr['logits'])
    gr['hpreact'] = ops['tanh'](h, ops['mm_left'](W2, gr['logits']))
    gr['bngain'] = ops['mul_sum0'](bnraw, gr['hpreact'])
    gr['bnbias'] = ops['neg_sum0'](-gr['hpreact'])
    gr['hprebn'] = ops['batchnorm'](bnraw, bngain, bnvar_inv, gr['hpreact'])
    gr['W1'] = ops['mm_right'](embcat, gr['hprebn'])
    gr['b1'] = ops['bias'](gr['hprebn'])
    gr['C'] = ops['gather'](C, Xb, ops['mm_left'](W1, gr['hprebn']))
    return [gr[k] for k in ['C', 'W1', 'b1', 'W2', 'b2', 'bngain', 'bnbias']]
"""

UPDATE_E = """\
# update
lr = 0.1 if i < 100000 else 0.01 # step learning rate decay
for p, grad in zip(parameters, param_grads(Xb, Yb)):
  p.data += -lr * grad
"""

case("ops_dict_lambdas_bndiff_overwritten_ce_sign", [
    *setup(), EX1_HEAD, EX1_E1, EX1_E2, EX1_E3,
    EX2_FORWARD, EX2_E, EX3_FORWARD, EX3_E, EX4_E_DEF,
    train_cell("", UPDATE_E), *EVAL,
], structures=[5, 7], wrong=_steps("bndiff", CE, LOOP),
    cascade=_steps("bnmeani", "hprebn", "embcat", "emb", "C"))

# ---------------------------------------------------------------------------------------------
# 6. A plain record class with __slots__ for every gradient, filled attribute by attribute
#    (gb.dprobs = ...), compared by walking the slots that are set; the fused exercises set
#    gb.dlogits and gb.dhprebn again; the training loop's backward fills a fresh record and the
#    update reads [gb.dC, gb.dW1, ...]. Right throughout.

EX1_F1 = """\
class Grads:
    # my gradients, one attribute each, named like the lecture's
    __slots__ = ('dlogprobs', 'dprobs', 'dcounts_sum_inv', 'dcounts_sum', 'dcounts', 'dnorm_logits',
                 'dlogit_maxes', 'dlogits', 'dh', 'dW2', 'db2', 'dhpreact', 'dbngain', 'dbnbias',
                 'dbnraw', 'dbnvar_inv', 'dbnvar', 'dbndiff2', 'dbndiff', 'dbnmeani', 'dhprebn',
                 'dembcat', 'dW1', 'db1', 'demb', 'dC')

    def filled(self):
        return [s for s in self.__slots__ if hasattr(self, s)]

    def __repr__(self):
        return f'Grads({len(self.filled())}/{len(self.__slots__)} set)'

gb = Grads()
gb.dlogprobs = torch.zeros_like(logprobs)
gb.dlogprobs[range(n), Yb] = -1.0 / n
gb.dprobs = gb.dlogprobs / probs
gb.dcounts_sum_inv = (gb.dprobs * counts).sum(1, keepdim=True)
gb.dcounts = gb.dprobs * counts_sum_inv
gb.dcounts_sum = -counts_sum**-2 * gb.dcounts_sum_inv
gb.dcounts += torch.ones_like(counts) * gb.dcounts_sum
gb.dnorm_logits = gb.dcounts * counts
gb.dlogits = gb.dnorm_logits.clone()
gb.dlogit_maxes = -gb.dnorm_logits.sum(1, keepdim=True)
gb.dlogits += F.one_hot(logits.max(1).indices, num_classes=logits.shape[1]) * gb.dlogit_maxes
gb
"""

EX1_F2 = """\
gb.dh = gb.dlogits @ W2.T
gb.dW2 = h.T @ gb.dlogits
gb.db2 = gb.dlogits.sum(0)
gb.dhpreact = (1.0 - h**2) * gb.dh
gb.dbngain = (bnraw * gb.dhpreact).sum(0, keepdim=True)
gb.dbnraw = bngain * gb.dhpreact
gb.dbnbias = gb.dhpreact.sum(0, keepdim=True)
gb.dbndiff = bnvar_inv * gb.dbnraw
gb.dbnvar_inv = (bndiff * gb.dbnraw).sum(0, keepdim=True)
gb.dbnvar = -0.5 * (bnvar + 1e-5)**-1.5 * gb.dbnvar_inv
gb.dbndiff2 = 1.0 / (n - 1) * torch.ones_like(bndiff2) * gb.dbnvar
gb.dbndiff += 2 * bndiff * gb.dbndiff2
gb.dhprebn = gb.dbndiff.clone()
gb.dbnmeani = -gb.dbndiff.sum(0, keepdim=True)
gb.dhprebn += 1.0 / n * torch.ones_like(hprebn) * gb.dbnmeani
gb.dembcat = gb.dhprebn @ W1.T
gb.dW1 = embcat.T @ gb.dhprebn
gb.db1 = gb.dhprebn.sum(0)
gb.demb = gb.dembcat.view(emb.shape)
gb.dC = torch.zeros_like(C)
for k in range(Xb.shape[0]):
    for j in range(Xb.shape[1]):
        gb.dC[Xb[k, j]] += gb.demb[k, j]
gb
"""

EX1_F3 = """\
for slot in gb.filled():
    cmp(slot[1:], getattr(gb, slot), globals()[slot[1:]])
"""

EX2_F = """\
# backward pass
gb.dlogits = F.softmax(logits, 1)
gb.dlogits[range(n), Yb] -= 1
gb.dlogits /= n
cmp('logits', gb.dlogits, logits)
"""

EX3_F = """\
# backward pass
gb.dhprebn = bngain * bnvar_inv / n * (n * gb.dhpreact - gb.dhpreact.sum(0) - n / (n - 1) * bnraw * (gb.dhpreact * bnraw).sum(0))
cmp('hprebn', gb.dhprebn, hprebn)
"""

EX4_F_DEF = """\
def backward_record(Xb, Yb):
    r = Grads()
    r.dlogits = F.softmax(logits, 1)
    r.dlogits[range(n), Yb] -= 1
    r.dlogits /= n
    r.dh = r.dlogits @ W2.T
    r.dW2 = h.T @ r.dlogits
    r.db2 = r.dlogits.sum(0)
    r.dhpreact = (1.0 - h**2) * r.dh
    r.dbngain = (bnraw * r.dhpreact).sum(0, keepdim=True)
    r.dbnbias = r.dhpreact.sum(0, keepdim=True)
    r.dhprebn = bngain * bnvar_inv / n * (n * r.dhpreact - r.dhpreact.sum(0) - n / (n - 1) * bnraw * (r.dhpreact * bnraw).sum(0))
    r.dembcat = r.dhprebn @ W1.T
    r.dW1 = embcat.T @ r.dhprebn
    r.db1 = r.dhprebn.sum(0)
    r.demb = r.dembcat.view(emb.shape)
    r.dC = torch.zeros_like(C)
    r.dC.index_add_(0, Xb.view(-1), r.demb.view(-1, C.shape[1]))
    return r
"""

TRAIN_BACKWARD_F = """\
gb = backward_record(Xb, Yb)
grads = [gb.dC, gb.dW1, gb.db1, gb.dW2, gb.db2, gb.dbngain, gb.dbnbias]
"""

case("slots_record_attributes", [
    *setup(), EX1_HEAD, EX1_F1, EX1_F2, EX1_F3,
    EX2_FORWARD, EX2_F, EX3_FORWARD, EX3_F, EX4_F_DEF,
    train_cell(TRAIN_BACKWARD_F), *EVAL,
], structures=[6])

# ---------------------------------------------------------------------------------------------
# 7. A mixture: a bare record object (attributes set as found) with a small dict of lambdas for
#    the tanh and column sums, worked cell by cell, several gradients recomputed after a
#    first attempt that compared wrong: dprobs as dlogprobs * probs, dW2 transposed (its cmp
#    raises and ends the cell; b2 is compared in the next one), dC scattered with
#    `dC[Xb] += demb` (repeated characters keep one row), dlogits without `/ n`, the fused
#    batchnorm without bngain. Every last attempt is right; the loop reads a record. Right
#    throughout.

EX1_G1 = """\
class Record:
    # a bare record for my gradients
    def __repr__(self):
        return 'Record(' + ', '.join(vars(self)) + ')'

r = Record()
r.dlogprobs = torch.zeros_like(logprobs)
r.dlogprobs[range(n), Yb] = -1.0 / n
r.dprobs = r.dlogprobs * probs
cmp('logprobs', r.dlogprobs, logprobs)
cmp('probs', r.dprobs, probs)
"""

EX1_G2 = """\
# d log(x) / dx is 1/x, not x. again:
r.dprobs = r.dlogprobs / probs
cmp('probs', r.dprobs, probs)

r.dcounts_sum_inv = (counts * r.dprobs).sum(1, keepdim=True)
r.dcounts = counts_sum_inv * r.dprobs
r.dcounts_sum = -counts_sum**-2 * r.dcounts_sum_inv
r.dcounts += r.dcounts_sum
r.dnorm_logits = counts * r.dcounts
r.dlogit_maxes = -r.dnorm_logits.sum(1, keepdim=True)
r.dlogits = r.dnorm_logits.clone()
r.dlogits += F.one_hot(logits.max(1).indices, logits.shape[1]) * r.dlogit_maxes
for name in ['counts_sum_inv', 'counts_sum', 'counts', 'norm_logits', 'logit_maxes', 'logits']:
    cmp(name, getattr(r, 'd' + name), globals()[name])
"""

EX1_G3 = """\
r.dh = r.dlogits @ W2.T
r.dW2 = r.dlogits.T @ h
r.db2 = r.dlogits.sum(0)
cmp('h', r.dh, h)
cmp('W2', r.dW2, W2)
cmp('b2', r.db2, b2)
"""

EX1_G4 = """\
# W2 is (64, 27), so its gradient is h.T @ dlogits
r.dW2 = h.T @ r.dlogits
cmp('W2', r.dW2, W2)
cmp('b2', r.db2, b2)
"""

EX1_G5 = """\
local = {
    'tanh': lambda out, up: (1 - out**2) * up,
    'colsum': lambda t: t.sum(0, keepdim=True),
}
r.dhpreact = local['tanh'](h, r.dh)
r.dbngain = local['colsum'](bnraw * r.dhpreact)
r.dbnbias = local['colsum'](r.dhpreact)
r.dbnraw = bngain * r.dhpreact
r.dbnvar_inv = local['colsum'](bndiff * r.dbnraw)
r.dbnvar = -0.5 * (bnvar + 1e-5)**-1.5 * r.dbnvar_inv
r.dbndiff2 = torch.ones_like(bndiff2) * r.dbnvar / (n - 1)
r.dbndiff = bnvar_inv * r.dbnraw + 2 * bndiff * r.dbndiff2
r.dbnmeani = -local['colsum'](r.dbndiff)
r.dhprebn = r.dbndiff + r.dbnmeani / n
for name in ['hpreact', 'bngain', 'bnbias', 'bnraw', 'bnvar_inv', 'bnvar', 'bndiff2', 'bndiff',
             'bnmeani', 'hprebn']:
    cmp(name, getattr(r, 'd' + name), globals()[name])
"""

EX1_G6 = """\
r.dembcat = r.dhprebn @ W1.T
r.dW1 = embcat.T @ r.dhprebn
r.db1 = r.dhprebn.sum(0)
r.demb = r.dembcat.view(emb.shape)
r.dC = torch.zeros_like(C)
r.dC[Xb] += r.demb          # every row back into its character's row of C
for name in ['embcat', 'W1', 'b1', 'emb', 'C']:
    cmp(name, getattr(r, 'd' + name), globals()[name])
"""

EX1_G7 = """\
# dC is off: a character that shows up twice in the batch kept only one of its rows.
# accumulate by hand this time
r.dC = torch.zeros_like(C)
for k in range(Xb.shape[0]):
    for j in range(Xb.shape[1]):
        r.dC[Xb[k, j]] += r.demb[k, j]
cmp('C', r.dC, C)
"""

EX2_G1 = """\
# backward pass
r.dlogits = F.softmax(logits, 1)
r.dlogits[range(n), Yb] -= 1
cmp('logits', r.dlogits, logits)
"""

EX2_G2 = """\
# the loss is a mean over the batch
r.dlogits = r.dlogits / n
cmp('logits', r.dlogits, logits)
"""

EX3_G1 = """\
# backward pass
r.dhprebn = bnvar_inv / n * (n * r.dhpreact - r.dhpreact.sum(0) - n / (n - 1) * bnraw * (r.dhpreact * bnraw).sum(0))
cmp('hprebn', r.dhprebn, hprebn)
"""

EX3_G2 = """\
# forgot the gain: hpreact = bngain * bnraw + bnbias
r.dhprebn = bngain * r.dhprebn
cmp('hprebn', r.dhprebn, hprebn)
"""

EX4_G_DEF = """\
def train_record(Xb, Yb):
    t = Record()
    t.dlogits = F.softmax(logits, 1)
    t.dlogits[range(n), Yb] -= 1
    t.dlogits = t.dlogits / n
    t.dW2 = h.T @ t.dlogits
    t.db2 = t.dlogits.sum(0)
    t.dhpreact = local['tanh'](h, t.dlogits @ W2.T)
    t.dbngain = local['colsum'](bnraw * t.dhpreact)
    t.dbnbias = local['colsum'](t.dhpreact)
    t.dhprebn = bngain * bnvar_inv / n * (n * t.dhpreact - t.dhpreact.sum(0) - n / (n - 1) * bnraw * (t.dhpreact * bnraw).sum(0))
    t.dW1 = embcat.T @ t.dhprebn
    t.db1 = t.dhprebn.sum(0)
    t.demb = (t.dhprebn @ W1.T).view(emb.shape)
    t.dC = torch.zeros_like(C)
    t.dC.index_add_(0, Xb.view(-1), t.demb.view(-1, C.shape[1]))
    return t
"""

TRAIN_BACKWARD_G = """\
rec = train_record(Xb, Yb)
grads = [rec.dC, rec.dW1, rec.db1, rec.dW2, rec.db2, rec.dbngain, rec.dbnbias]
"""

case("mixture_record_lambdas_recomputed_cells", [
    *setup(), EX1_HEAD, EX1_G1, EX1_G2, EX1_G3, EX1_G4, EX1_G5, EX1_G6, EX1_G7,
    EX2_FORWARD, EX2_G1, EX2_G2, EX3_FORWARD, EX3_G1, EX3_G2, EX4_G_DEF,
    train_cell(TRAIN_BACKWARD_G), *EVAL,
], structures=[8, 6])

# ---------------------------------------------------------------------------------------------
# 8. A mixture: generators per part of the net using a class of @staticmethod local
#    derivatives, the softmax generator redefined after a first attempt whose dcounts missed
#    the counts_sum branch (its comparisons, and those of the lines after it, were wrong; the
#    second run is right). Slip: the tanh's local derivative typed as `h**2 - 1` (sign flipped),
#    so dhpreact is wrong and everything built on it (bngain down to C) too; exercise 3 starts
#    from that dhpreact, so it is wrong too. The training loop's backward, a @classmethod over
#    a @staticmethod generator written apart, has the right sign.

EX1_H1 = """\
class Local:
    # the local derivatives I keep using
    @staticmethod
    def log(x):
        return 1.0 / x

    @staticmethod
    def pow(x, p):
        return p * x**(p - 1)

    @staticmethod
    def rows(t):
        return t.sum(1, keepdim=True)

    @staticmethod
    def cols(t):
        return t.sum(0, keepdim=True)


def softmax_part(Yb, n):
    dlogprobs = torch.zeros_like(logprobs)
    dlogprobs[range(n), Yb] = -1.0 / n
    yield 'logprobs', dlogprobs
    dprobs = Local.log(probs) * dlogprobs
    yield 'probs', dprobs
    dcounts_sum_inv = Local.rows(counts * dprobs)
    yield 'counts_sum_inv', dcounts_sum_inv
    dcounts_sum = Local.pow(counts_sum, -1) * dcounts_sum_inv
    yield 'counts_sum', dcounts_sum
    dcounts = counts_sum_inv * dprobs
    yield 'counts', dcounts
    dnorm_logits = counts * dcounts
    yield 'norm_logits', dnorm_logits
    dlogit_maxes = -Local.rows(dnorm_logits)
    yield 'logit_maxes', dlogit_maxes
    yield 'logits', dnorm_logits + (logits == logit_maxes) * dlogit_maxes

grads = dict(softmax_part(Yb, n))
for name, d in grads.items():
    cmp(name, d, globals()[name])
"""

EX1_H2 = """\
# counts goes into counts_sum as well: dcounts needs both branches. again:
def softmax_part(Yb, n):
    dlogprobs = torch.zeros_like(logprobs)
    dlogprobs[range(n), Yb] = -1.0 / n
    yield 'logprobs', dlogprobs
    dprobs = Local.log(probs) * dlogprobs
    yield 'probs', dprobs
    dcounts_sum_inv = Local.rows(counts * dprobs)
    yield 'counts_sum_inv', dcounts_sum_inv
    dcounts_sum = Local.pow(counts_sum, -1) * dcounts_sum_inv
    yield 'counts_sum', dcounts_sum
    dcounts = counts_sum_inv * dprobs + torch.ones_like(counts) * dcounts_sum
    yield 'counts', dcounts
    dnorm_logits = counts * dcounts
    yield 'norm_logits', dnorm_logits
    dlogit_maxes = -Local.rows(dnorm_logits)
    yield 'logit_maxes', dlogit_maxes
    yield 'logits', dnorm_logits + (logits == logit_maxes) * dlogit_maxes

grads = dict(softmax_part(Yb, n))
for name, d in grads.items():
    cmp(name, d, globals()[name])
"""

EX1_H3 = """\
def hidden_part(dlogits, n):
    dh = dlogits @ W2.T
    yield 'h', dh
    yield 'W2', h.T @ dlogits
    yield 'b2', dlogits.sum(0)
    dhpreact = (h**2 - 1) * dh
    yield 'hpreact', dhpreact
    yield 'bngain', Local.cols(bnraw * dhpreact)
    yield 'bnbias', Local.cols(dhpreact)
    dbnraw = bngain * dhpreact
    yield 'bnraw', dbnraw
    dbnvar_inv = Local.cols(bndiff * dbnraw)
    yield 'bnvar_inv', dbnvar_inv
    dbnvar = Local.pow(bnvar + 1e-5, -0.5) * dbnvar_inv
    yield 'bnvar', dbnvar
    dbndiff2 = torch.ones_like(bndiff2) * dbnvar / (n - 1)
    yield 'bndiff2', dbndiff2
    dbndiff = bnvar_inv * dbnraw + 2 * bndiff * dbndiff2
    yield 'bndiff', dbndiff
    dbnmeani = -Local.cols(dbndiff)
    yield 'bnmeani', dbnmeani
    yield 'hprebn', dbndiff + dbnmeani / n


def input_part(dhprebn):
    dembcat = dhprebn @ W1.T
    yield 'embcat', dembcat
    yield 'W1', embcat.T @ dhprebn
    yield 'b1', dhprebn.sum(0)
    demb = dembcat.view(emb.shape)
    yield 'emb', demb
    dC = torch.zeros_like(C)
    for k in range(Xb.shape[0]):
        for j in range(Xb.shape[1]):
            dC[Xb[k, j]] += demb[k, j]
    yield 'C', dC

grads.update(hidden_part(grads['logits'], n))
grads.update(input_part(grads['hprebn']))
for name in ['h', 'W2', 'b2', 'hpreact', 'bngain', 'bnbias', 'bnraw', 'bnvar_inv', 'bnvar',
             'bndiff2', 'bndiff', 'bnmeani', 'hprebn', 'embcat', 'W1', 'b1', 'emb', 'C']:
    cmp(name, grads[name], globals()[name])
"""

EX2_H = """\
# backward pass
def fused_ce(logits, Yb):
    d = F.softmax(logits, 1)
    d[range(n), Yb] -= 1
    yield 'logits', d / n

grads.update(fused_ce(logits, Yb))
cmp('logits', grads['logits'], logits)
"""

EX3_H = """\
# backward pass
def fused_bn(dhpreact):
    yield 'hprebn', bngain * bnvar_inv / n * (n * dhpreact - dhpreact.sum(0) - n / (n - 1) * bnraw * (dhpreact * bnraw).sum(0))

grads.update(fused_bn(grads['hpreact']))
cmp('hprebn', grads['hprebn'], hprebn)
"""

EX4_H_DEF = """\
class TrainGrads:
    order = ['C', 'W1', 'b1', 'W2', 'b2', 'bngain', 'bnbias']

    @staticmethod
    def walk(Xb, Yb, n):
        dlogits = dict(fused_ce(logits, Yb))['logits']
        yield 'W2', h.T @ dlogits
        yield 'b2', dlogits.sum(0)
        dhpreact = (1.0 - h**2) * (dlogits @ W2.T)
        yield 'bngain', Local.cols(bnraw * dhpreact)
        yield 'bnbias', Local.cols(dhpreact)
        dhprebn = dict(fused_bn(dhpreact))['hprebn']
        yield 'W1', embcat.T @ dhprebn
        yield 'b1', dhprebn.sum(0)
        dC = torch.zeros_like(C)
        dC.index_add_(0, Xb.view(-1), (dhprebn @ W1.T).view(-1, C.shape[1]))
        yield 'C', dC

    @classmethod
    def as_list(cls, Xb, Yb, n):
        found = dict(cls.walk(Xb, Yb, n))
        return [found[k] for k in cls.order]
"""

UPDATE_H = """\
# update
lr = 0.1 if i < 100000 else 0.01 # step learning rate decay
for p, grad in zip(parameters, TrainGrads.as_list(Xb, Yb, n)):
  p.data += -lr * grad
"""

case("mixture_generators_static_redefined_tanh_sign", [
    *setup(), EX1_HEAD, EX1_H1, EX1_H2, EX1_H3,
    EX2_FORWARD, EX2_H, EX3_FORWARD, EX3_H, EX4_H_DEF,
    train_cell("", UPDATE_H), *EVAL,
], structures=[8, 4], wrong=_steps("hpreact"),
    cascade=_steps("bngain", "bnvar_inv", "bnvar", "bndiff2", "bndiff", "bnmeani", "hprebn",
                   "embcat", "emb", "C", BN))


def write(case: dict, folder: Path) -> Path:
    path = Path(folder) / f"{case['name']}.ipynb"
    path.write_text(json.dumps(case["notebook"], indent=1))
    return path
