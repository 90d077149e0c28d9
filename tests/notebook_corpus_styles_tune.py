"""Learners' notebooks for "Becoming a backprop ninja" (makemore part 4) whose backward passes are
not written as the lecture's plain `dX = ...` globals: the tune half.

Ten filled-in lecture notebooks (setup, the lecture's forward pass, exercise 1's atomic gradients,
exercise 2's fused cross-entropy, exercise 3's fused batchnorm, exercise 4's training loop), each
written in one or more other structures: gradients kept in a dict (keys the forward names, or
'dX'), a Backward class with a method per layer (the fused exercises as subclasses), a function per
layer returning tuples, one big function returning every gradient, closures and lambdas for the
local derivatives, code inside `with torch.no_grad():`, a running gradient copied out into the
lecture's names or gradients appended to a list, a gradient check inside the training loop whose
backward is a function returning a dict, and mixtures of these. The forward pass keeps the
lecture's names. Six learners slipped (n for Bessel's n-1, a scatter into dC that does not
accumulate, `=` for `+=`, a wrong upstream gradient, a wrong exponent, a softmax over the wrong
dimension, the biased variance's factor in the fused batchnorm); four are right throughout. No
notebook is shared with the holdout half (notebook_corpus_styles_holdout). Written independently of
the grader; each case's labels were measured with tests/notebook_corpus_truth.py:

    .venv/bin/python tests/notebook_corpus_truth.py notebook_corpus_styles_tune

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

# the structures of the brief: 1 dict, 2 class, 3 per-layer functions returning tuples,
# 4 one big function, 5 closures/lambdas, 6 torch.no_grad blocks, 7 running gradient or list,
# 8 gradient check in the training loop / loop backward a function returning a dict, 9 mixture
STRUCTURE_NAMES = {
    1: "dict of gradients", 2: "Backward class", 3: "per-layer functions returning tuples",
    4: "one big function returning all gradients", 5: "closures / lambdas",
    6: "torch.no_grad blocks", 7: "running gradient variable or list of gradients",
    8: "gradient check in the training loop / loop backward returns a dict", 9: "mixture",
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

# same optimization as last time
max_steps = 200000
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
if i % 10000 == 0: # print every once in a while
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
    "plt.plot(torch.tensor(lossi).view(-1, 1000).mean(1))",
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
# 1. Every gradient in one dict keyed by the forward variable's name, the lecture's comments
#    kept above each line; all compared in a loop over the dict at the end. The fused
#    exercises overwrite grads['logits'] / grads['hprebn']; the training loop fills a fresh
#    dict and zips the parameters with its values in the lecture's order. Right throughout.

EX1_1A = """\
# Exercise 1: backprop through the whole thing manually.
# I keep every gradient in one dict keyed by the name of the forward variable,
# so checking them is one loop at the end instead of 26 dX variables.
grads = {}

# loss = -logprobs[range(n), Yb].mean()
grads['logprobs'] = torch.zeros_like(logprobs)
grads['logprobs'][range(n), Yb] = -1.0/n
# logprobs = probs.log()
grads['probs'] = grads['logprobs'] / probs
# probs = counts * counts_sum_inv   (counts_sum_inv is broadcast across the columns -> sum)
grads['counts_sum_inv'] = (counts * grads['probs']).sum(1, keepdim=True)
grads['counts'] = counts_sum_inv * grads['probs']
# counts_sum_inv = counts_sum**-1
grads['counts_sum'] = -counts_sum**-2 * grads['counts_sum_inv']
# counts_sum = counts.sum(1, keepdims=True)  -> the second branch into counts
grads['counts'] += torch.ones_like(counts) * grads['counts_sum']
# counts = norm_logits.exp()
grads['norm_logits'] = counts * grads['counts']
# norm_logits = logits - logit_maxes
grads['logits'] = grads['norm_logits'].clone()
grads['logit_maxes'] = -grads['norm_logits'].sum(1, keepdim=True)
# logit_maxes = logits.max(1, keepdim=True).values
grads['logits'] += F.one_hot(logits.max(1).indices, num_classes=logits.shape[1]) * grads['logit_maxes']
"""

EX1_1B = """\
# logits = h @ W2 + b2
grads['h'] = grads['logits'] @ W2.T
grads['W2'] = h.T @ grads['logits']
grads['b2'] = grads['logits'].sum(0)
# h = torch.tanh(hpreact)
grads['hpreact'] = (1.0 - h**2) * grads['h']
# hpreact = bngain * bnraw + bnbias
grads['bngain'] = (bnraw * grads['hpreact']).sum(0, keepdim=True)
grads['bnraw'] = bngain * grads['hpreact']
grads['bnbias'] = grads['hpreact'].sum(0, keepdim=True)
# bnraw = bndiff * bnvar_inv
grads['bndiff'] = bnvar_inv * grads['bnraw']
grads['bnvar_inv'] = (bndiff * grads['bnraw']).sum(0, keepdim=True)
# bnvar_inv = (bnvar + 1e-5)**-0.5
grads['bnvar'] = -0.5 * (bnvar + 1e-5)**-1.5 * grads['bnvar_inv']
# bnvar = 1/(n-1)*(bndiff2).sum(0, keepdim=True)
grads['bndiff2'] = torch.ones_like(bndiff2) * grads['bnvar'] / (n - 1)
# bndiff2 = bndiff**2
grads['bndiff'] += 2 * bndiff * grads['bndiff2']
# bndiff = hprebn - bnmeani
grads['hprebn'] = grads['bndiff'].clone()
grads['bnmeani'] = -grads['bndiff'].sum(0, keepdim=True)
# bnmeani = 1/n*hprebn.sum(0, keepdim=True)
grads['hprebn'] += grads['bnmeani'] / n
# hprebn = embcat @ W1 + b1
grads['embcat'] = grads['hprebn'] @ W1.T
grads['W1'] = embcat.T @ grads['hprebn']
grads['b1'] = grads['hprebn'].sum(0)
# embcat = emb.view(emb.shape[0], -1)
grads['emb'] = grads['embcat'].view(emb.shape)
# emb = C[Xb]
grads['C'] = torch.zeros_like(C)
for k in range(n):
    for j in range(block_size):
        grads['C'][Xb[k, j]] += grads['emb'][k, j]
"""

EX1_1C = """\
# check everything at once
print(len(grads), 'gradients')
for name in grads:
    cmp(name, grads[name], globals()[name])
"""

EX2_1 = """\
# backward pass

# -----------------
grads['logits'] = F.softmax(logits, 1)
grads['logits'][range(n), Yb] -= 1
grads['logits'] /= n
# -----------------

cmp('logits', grads['logits'], logits) # I can only get approximate to be true, my maxdiff is 6e-9
"""

EX3_1 = """\
# backward pass

# calculate dhprebn given dhpreact (i.e. backprop through the batchnorm)
# -----------------
dout = grads['hpreact']
grads['hprebn'] = bngain*bnvar_inv/n * (n*dout - dout.sum(0) - n/(n-1)*bnraw*(dout*bnraw).sum(0))
# -----------------

cmp('hprebn', grads['hprebn'], hprebn)
"""

TRAIN_BACKWARD_1 = """\
# manual backprop, same dict as in exercise 1
grads = {}
grads['logits'] = F.softmax(logits, 1)
grads['logits'][range(n), Yb] -= 1
grads['logits'] /= n
grads['h'] = grads['logits'] @ W2.T
grads['W2'] = h.T @ grads['logits']
grads['b2'] = grads['logits'].sum(0)
grads['hpreact'] = (1.0 - h**2) * grads['h']
grads['bngain'] = (bnraw * grads['hpreact']).sum(0, keepdim=True)
grads['bnbias'] = grads['hpreact'].sum(0, keepdim=True)
dout = grads['hpreact']
grads['hprebn'] = bngain*bnvar_inv/n * (n*dout - dout.sum(0) - n/(n-1)*bnraw*(dout*bnraw).sum(0))
grads['embcat'] = grads['hprebn'] @ W1.T
grads['W1'] = embcat.T @ grads['hprebn']
grads['b1'] = grads['hprebn'].sum(0)
grads['C'] = torch.zeros_like(C)
grads['C'].index_add_(0, Xb.view(-1), grads['embcat'].view(-1, n_embd))
"""

UPDATE_1 = """\
# update
lr = 0.1 if i < 100000 else 0.01 # step learning rate decay
for p, grad in zip(parameters, [grads[k] for k in ('C', 'W1', 'b1', 'W2', 'b2', 'bngain', 'bnbias')]):
  p.data += -lr * grad
"""

case("dict_by_forward_name", [
    *setup(), EX1_1A, EX1_1B, EX1_1C,
    EX2_FORWARD, EX2_1, "plt.imshow(grads['logits'].detach(), cmap='gray')",
    EX3_FORWARD, EX3_1,
    train_cell(TRAIN_BACKWARD_1, UPDATE_1), *EVAL,
], structures=[1])

# ---------------------------------------------------------------------------------------------
# 2. A Backward class, one method per group of forward lines, each storing self.dX; `run`
#    calls them in order and the gradients are compared with getattr in a loop. Exercises 2
#    and 3 are subclasses that override the softmax and batchnorm methods, and the training
#    loop runs the fused subclass. Slip: dbndiff2 divided by n instead of n-1 (what builds on
#    it is wrong too, except dbnmeani: the slip's branch sums to zero over the batch).

EX1_2 = """\
class ManualBackward:
    \"\"\"Backprop through the forward pass above, one method per group of lines.
    Every method reads the forward tensors (globals) and stores its gradients on self.\"\"\"

    def __init__(self, n):
        self.n = n

    def nll(self):
        self.dlogprobs = torch.zeros_like(logprobs)
        self.dlogprobs[range(self.n), Yb] = -1.0 / self.n

    def log(self):
        self.dprobs = self.dlogprobs / probs

    def normalize(self):
        self.dcounts_sum_inv = (counts * self.dprobs).sum(1, keepdim=True)
        self.dcounts = counts_sum_inv * self.dprobs
        self.dcounts_sum = -counts_sum**-2 * self.dcounts_sum_inv
        self.dcounts = self.dcounts + self.dcounts_sum

    def exp(self):
        self.dnorm_logits = counts * self.dcounts

    def max_shift(self):
        self.dlogit_maxes = -self.dnorm_logits.sum(1, keepdim=True)
        self.dlogits = self.dnorm_logits + F.one_hot(logits.argmax(1), logits.shape[1]) * self.dlogit_maxes

    def output_layer(self):
        self.dh = self.dlogits @ W2.T
        self.dW2 = h.T @ self.dlogits
        self.db2 = self.dlogits.sum(0)

    def tanh(self):
        self.dhpreact = (1 - h**2) * self.dh

    def batchnorm(self):
        self.dbngain = (bnraw * self.dhpreact).sum(0, keepdim=True)
        self.dbnbias = self.dhpreact.sum(0, keepdim=True)
        self.dbnraw = bngain * self.dhpreact
        self.dbnvar_inv = (bndiff * self.dbnraw).sum(0, keepdim=True)
        self.dbnvar = -0.5 * (bnvar + 1e-5)**-1.5 * self.dbnvar_inv
        self.dbndiff2 = torch.ones_like(bndiff2) * self.dbnvar / self.n
        self.dbndiff = bnvar_inv * self.dbnraw + 2 * bndiff * self.dbndiff2
        self.dbnmeani = -self.dbndiff.sum(0, keepdim=True)
        self.dhprebn = self.dbndiff + self.dbnmeani / self.n

    def hidden_layer(self):
        self.dembcat = self.dhprebn @ W1.T
        self.dW1 = embcat.T @ self.dhprebn
        self.db1 = self.dhprebn.sum(0)

    def embedding(self):
        self.demb = self.dembcat.view(emb.shape)
        self.dC = torch.zeros_like(C)
        for k in range(Xb.shape[0]):
            for j in range(Xb.shape[1]):
                self.dC[Xb[k, j]] += self.demb[k, j]

    def steps(self):
        return [self.nll, self.log, self.normalize, self.exp, self.max_shift,
                self.output_layer, self.tanh, self.batchnorm, self.hidden_layer, self.embedding]

    def run(self):
        for step in self.steps():
            step()
        return self
"""

EX1_2B = f"""\
bw = ManualBackward(n).run()

for name in {CMP_LIST}:
    cmp(name, getattr(bw, 'd' + name), globals()[name])
"""

EX2_2 = """\
# backward pass: a subclass whose softmax part is one expression

class FusedBackward(ManualBackward):

    def softmax_ce(self):
        self.dlogits = F.softmax(logits, 1)
        self.dlogits[range(self.n), Yb] -= 1
        self.dlogits /= self.n

    def steps(self):
        return [self.softmax_ce, self.output_layer, self.tanh, self.batchnorm,
                self.hidden_layer, self.embedding]

fb = FusedBackward(n)
fb.softmax_ce()
cmp('logits', fb.dlogits, logits)
"""

EX3_2 = """\
# backward pass: batchnorm in one expression too

class FastBackward(FusedBackward):

    def batchnorm(self):
        d = self.dhpreact
        self.dbngain = (bnraw * d).sum(0, keepdim=True)
        self.dbnbias = d.sum(0, keepdim=True)
        self.dhprebn = bngain*bnvar_inv/self.n * (self.n*d - d.sum(0) - self.n/(self.n-1)*bnraw*(d*bnraw).sum(0))

fast = FastBackward(n)
fast.dhpreact = bw.dhpreact   # same upstream gradient as in exercise 1
fast.batchnorm()
cmp('hprebn', fast.dhprebn, hprebn)
"""

TRAIN_BACKWARD_2 = """\
bw = FastBackward(n).run()
grads = [bw.dC, bw.dW1, bw.db1, bw.dW2, bw.db2, bw.dbngain, bw.dbnbias]
"""

case("backward_class_bndiff2_over_n", [
    *setup(), EX1_HEAD, EX1_2, EX1_2B,
    EX2_FORWARD, EX2_2, EX3_FORWARD, EX3_2,
    train_cell(TRAIN_BACKWARD_2), *EVAL,
], structures=[2], wrong=_steps("bndiff2"),
    cascade=_steps("bndiff", "hprebn", "embcat", "emb", "C"))

# ---------------------------------------------------------------------------------------------
# 3. A function per building block that takes the upstream gradient and what the forward used
#    and returns a tuple of input gradients, unpacked into the lecture's names and compared
#    cell by cell; the training loop calls the same functions. Slip: embedding_backward
#    scatters with `dC[Xb] += demb`, which does not accumulate repeated characters, so dC is
#    wrong in exercise 1 and in every training step.

EX1_3_DEFS = """\
# Exercise 1, written as small backward functions: (upstream grad, forward inputs) -> input grads

def nll_backward(logprobs, targets):
    B = logprobs.shape[0]
    dlogprobs = torch.zeros_like(logprobs)
    dlogprobs[range(B), targets] = -1.0 / B
    return dlogprobs

def log_backward(dout, x):
    return dout / x

def rowscale_backward(dout, x, s):
    # out = x * s, with s of shape (B, 1) broadcast over the columns
    return dout * s, (dout * x).sum(1, keepdim=True)

def pow_backward(dout, x, p):
    return p * x**(p - 1) * dout

def rowsum_backward(dout, x):
    return dout.expand_as(x)

def exp_backward(dout, out):
    return dout * out

def sub_rowmax_backward(dout, x):
    # out = x - x.max(1, keepdim=True).values: the identity branch and the max branch
    dmax = -dout.sum(1, keepdim=True)
    dx = dout.clone()
    return dx, dmax

def max_backward(dout, x):
    return F.one_hot(x.max(1).indices, num_classes=x.shape[1]) * dout

def linear_backward(dout, x, W):
    dx = dout @ W.T
    dW = x.T @ dout
    db = dout.sum(0)
    return dx, dW, db

def tanh_backward(dout, out):
    return (1 - out**2) * dout

def embedding_backward(demb, ix, C):
    dC = torch.zeros_like(C)
    dC[ix] += demb
    return dC
"""

EX1_3 = [
    "dlogprobs = nll_backward(logprobs, Yb)\ncmp('logprobs', dlogprobs, logprobs)",
    "dprobs = log_backward(dlogprobs, probs)\ncmp('probs', dprobs, probs)",
    "dcounts, dcounts_sum_inv = rowscale_backward(dprobs, counts, counts_sum_inv)\n"
    "cmp('counts_sum_inv', dcounts_sum_inv, counts_sum_inv)",
    "dcounts_sum = pow_backward(dcounts_sum_inv, counts_sum, -1)\n"
    "cmp('counts_sum', dcounts_sum, counts_sum)",
    "dcounts = dcounts + rowsum_backward(dcounts_sum, counts)\ncmp('counts', dcounts, counts)",
    "dnorm_logits = exp_backward(dcounts, counts)\ncmp('norm_logits', dnorm_logits, norm_logits)",
    "dlogits, dlogit_maxes = sub_rowmax_backward(dnorm_logits, logits)\n"
    "cmp('logit_maxes', dlogit_maxes, logit_maxes)",
    "dlogits = dlogits + max_backward(dlogit_maxes, logits)\ncmp('logits', dlogits, logits)",
    "dh, dW2, db2 = linear_backward(dlogits, h, W2)\n"
    "cmp('h', dh, h)\ncmp('W2', dW2, W2)\ncmp('b2', db2, b2)",
    "dhpreact = tanh_backward(dh, h)\ncmp('hpreact', dhpreact, hpreact)",
    "# hpreact = bngain * bnraw + bnbias: a scale by a row vector this time\n"
    "dbnraw = dhpreact * bngain\ndbngain = (dhpreact * bnraw).sum(0, keepdim=True)\n"
    "dbnbias = dhpreact.sum(0, keepdim=True)\n"
    "cmp('bngain', dbngain, bngain)\ncmp('bnraw', dbnraw, bnraw)\ncmp('bnbias', dbnbias, bnbias)",
    "dbndiff = dbnraw * bnvar_inv\ndbnvar_inv = (dbnraw * bndiff).sum(0, keepdim=True)\n"
    "cmp('bnvar_inv', dbnvar_inv, bnvar_inv)",
    "dbnvar = pow_backward(dbnvar_inv, bnvar + 1e-5, -0.5)\ncmp('bnvar', dbnvar, bnvar)",
    "dbndiff2 = (dbnvar / (n - 1)).expand_as(bndiff2)\ncmp('bndiff2', dbndiff2, bndiff2)",
    "dbndiff = dbndiff + pow_backward(dbndiff2, bndiff, 2)\ncmp('bndiff', dbndiff, bndiff)",
    "dhprebn, dbnmeani = dbndiff.clone(), -dbndiff.sum(0, keepdim=True)\n"
    "cmp('bnmeani', dbnmeani, bnmeani)",
    "dhprebn = dhprebn + (dbnmeani / n).expand_as(hprebn)\ncmp('hprebn', dhprebn, hprebn)",
    "dembcat, dW1, db1 = linear_backward(dhprebn, embcat, W1)\n"
    "cmp('embcat', dembcat, embcat)\ncmp('W1', dW1, W1)\ncmp('b1', db1, b1)",
    "demb = dembcat.view(emb.shape)\ncmp('emb', demb, emb)",
    "dC = embedding_backward(demb, Xb, C)\ncmp('C', dC, C)",
]

EX2_3 = """\
# backward pass

def ce_backward(logits, targets):
    B = logits.shape[0]
    dlogits = F.softmax(logits, 1)
    dlogits[range(B), targets] -= 1
    return dlogits / B

dlogits = ce_backward(logits, Yb)
cmp('logits', dlogits, logits)
"""

EX3_3 = """\
# backward pass

def batchnorm_backward(dout, xhat, gain, var_inv):
    # returns (dx, dgain, dbias) for out = gain * xhat + bias, xhat the unbiased-variance batchnorm
    B = dout.shape[0]
    dgain = (dout * xhat).sum(0, keepdim=True)
    dbias = dout.sum(0, keepdim=True)
    dx = gain*var_inv/B * (B*dout - dout.sum(0) - B/(B-1)*xhat*(dout*xhat).sum(0))
    return dx, dgain, dbias

dhprebn, _, _ = batchnorm_backward(dhpreact, bnraw, bngain, bnvar_inv)
cmp('hprebn', dhprebn, hprebn)
"""

TRAIN_BACKWARD_3 = """\
dlogits = ce_backward(logits, Yb)
dh, dW2, db2 = linear_backward(dlogits, h, W2)
dhpreact = tanh_backward(dh, h)
dhprebn, dbngain, dbnbias = batchnorm_backward(dhpreact, bnraw, bngain, bnvar_inv)
dembcat, dW1, db1 = linear_backward(dhprebn, embcat, W1)
dC = embedding_backward(dembcat.view(emb.shape), Xb, C)
grads = [dC, dW1, db1, dW2, db2, dbngain, dbnbias]
"""

case("layer_functions_tuples_dC_no_accumulate", [
    *setup(), EX1_HEAD, EX1_3_DEFS, *EX1_3,
    EX2_FORWARD, EX2_3, EX3_FORWARD, EX3_3,
    train_cell(TRAIN_BACKWARD_3), *EVAL,
], structures=[3], wrong=_steps("C", LOOP))

# ---------------------------------------------------------------------------------------------
# 4. One big function returning a dict of every gradient ('dX' keys), compared by stripping
#    the 'd'; the fused exercises are functions too, and the training loop's backward is one
#    function returning a dict in the parameters' order. Slip: the second branch into dhprebn
#    overwrites the first (`=` for `+=`); what builds on dhprebn is wrong too.

EX1_4 = """\
def manual_backward(n, Yb):
    \"\"\"all of exercise 1 in one go; returns {'dX': gradient of X}\"\"\"
    g = {}
    # cross entropy
    g['dlogprobs'] = torch.zeros_like(logprobs)
    g['dlogprobs'][range(n), Yb] = -1.0/n
    g['dprobs'] = (1.0 / probs) * g['dlogprobs']
    g['dcounts_sum_inv'] = (counts * g['dprobs']).sum(1, keepdim=True)
    g['dcounts_sum'] = (-counts_sum**-2) * g['dcounts_sum_inv']
    g['dcounts'] = counts_sum_inv * g['dprobs'] + torch.ones_like(counts) * g['dcounts_sum']
    g['dnorm_logits'] = counts * g['dcounts']
    g['dlogit_maxes'] = (-g['dnorm_logits']).sum(1, keepdim=True)
    g['dlogits'] = g['dnorm_logits'] + F.one_hot(logits.max(1).indices, num_classes=logits.shape[1]) * g['dlogit_maxes']
    # second layer
    g['dh'] = g['dlogits'] @ W2.T
    g['dW2'] = h.T @ g['dlogits']
    g['db2'] = g['dlogits'].sum(0)
    # tanh
    g['dhpreact'] = (1.0 - h**2) * g['dh']
    # batchnorm
    g['dbngain'] = (bnraw * g['dhpreact']).sum(0, keepdim=True)
    g['dbnraw'] = bngain * g['dhpreact']
    g['dbnbias'] = g['dhpreact'].sum(0, keepdim=True)
    g['dbnvar_inv'] = (bndiff * g['dbnraw']).sum(0, keepdim=True)
    g['dbnvar'] = (-0.5*(bnvar + 1e-5)**-1.5) * g['dbnvar_inv']
    g['dbndiff2'] = (1.0/(n-1))*torch.ones_like(bndiff2) * g['dbnvar']
    g['dbndiff'] = bnvar_inv * g['dbnraw'] + (2*bndiff) * g['dbndiff2']
    g['dbnmeani'] = (-g['dbndiff']).sum(0)
    g['dhprebn'] = g['dbndiff'].clone()
    g['dhprebn'] = 1.0/n * (torch.ones_like(hprebn) * g['dbnmeani'])
    # first layer
    g['dembcat'] = g['dhprebn'] @ W1.T
    g['dW1'] = embcat.T @ g['dhprebn']
    g['db1'] = g['dhprebn'].sum(0)
    g['demb'] = g['dembcat'].view(emb.shape)
    g['dC'] = torch.zeros_like(C)
    for k in range(Xb.shape[0]):
        for j in range(Xb.shape[1]):
            g['dC'][Xb[k, j]] += g['demb'][k, j]
    return g
"""

EX1_4B = """\
grads = manual_backward(n, Yb)
for key, value in grads.items():
    cmp(key[1:], value, globals()[key[1:]])
"""

EX2_4 = """\
# backward pass
def fast_ce_backward(logits, Yb):
    n = logits.shape[0]
    dlogits = F.softmax(logits, 1)
    dlogits[range(n), Yb] -= 1
    dlogits /= n
    return dlogits

grads['dlogits'] = fast_ce_backward(logits, Yb)
cmp('logits', grads['dlogits'], logits)
"""

EX3_4 = """\
# backward pass
def fast_bn_backward(dhpreact, bnraw, bngain, bnvar_inv):
    n = dhpreact.shape[0]
    return bngain*bnvar_inv/n * (n*dhpreact - dhpreact.sum(0) - n/(n-1)*bnraw*(dhpreact*bnraw).sum(0))

grads['dhprebn'] = fast_bn_backward(grads['dhpreact'], bnraw, bngain, bnvar_inv)
cmp('hprebn', grads['dhprebn'], hprebn)
"""

EX4_4_DEF = """\
def train_backward(logits, h, hpreact, bnraw, bnvar_inv, embcat, Xb, Yb):
    \"\"\"the whole backward pass of the training step; returns a dict in the order of parameters\"\"\"
    dlogits = fast_ce_backward(logits, Yb)
    dh = dlogits @ W2.T
    dhpreact = (1.0 - h**2) * dh
    dhprebn = fast_bn_backward(dhpreact, bnraw, bngain, bnvar_inv)
    dembcat = dhprebn @ W1.T
    dC = torch.zeros_like(C)
    dC.index_add_(0, Xb.view(-1), dembcat.view(-1, C.shape[1]))
    return {'dC': dC, 'dW1': embcat.T @ dhprebn, 'db1': dhprebn.sum(0),
            'dW2': h.T @ dlogits, 'db2': dlogits.sum(0),
            'dbngain': (bnraw * dhpreact).sum(0, keepdim=True),
            'dbnbias': dhpreact.sum(0, keepdim=True)}
"""

TRAIN_BACKWARD_4 = """\
grads = train_backward(logits, h, hpreact, bnraw, bnvar_inv, embcat, Xb, Yb)
"""

UPDATE_4 = """\
# update
lr = 0.1 if i < 100000 else 0.01 # step learning rate decay
for p, grad in zip(parameters, grads.values()):
  p.data += -lr * grad
"""

case("one_function_dict_dhprebn_overwritten", [
    *setup(), EX1_HEAD, EX1_4, EX1_4B,
    EX2_FORWARD, EX2_4, EX3_FORWARD, EX3_4, EX4_4_DEF,
    train_cell(TRAIN_BACKWARD_4, UPDATE_4), *EVAL,
], structures=[4, 1, 8], wrong=_steps("hprebn"), cascade=_steps("embcat", "emb", "C"))

# ---------------------------------------------------------------------------------------------
# 5. The local derivatives as lambdas and the chain rule as a lambda; batchnorm's backward a
#    closure made by a factory function, the embedding's scatter a nested function. The
#    gradients land in the lecture's names and are compared in a loop. Right throughout.

EX1_5A = """\
# local derivatives, each a function of what the forward pass kept
d_log   = lambda x: 1.0 / x                 # d/dx log(x)
d_pow   = lambda x, p: p * x**(p - 1)       # d/dx x**p
d_exp   = lambda out: out                   # d/dx exp(x), given exp(x)
d_tanh  = lambda out: 1 - out**2            # d/dx tanh(x), given tanh(x)
chain   = lambda local, upstream: local * upstream
rowsum  = lambda t: t.sum(1, keepdim=True)  # undo a broadcast along dim 1
colsum  = lambda t: t.sum(0, keepdim=True)  # undo a broadcast along dim 0
"""

EX1_5B = """\
dlogprobs = torch.zeros_like(logprobs)
dlogprobs[range(n), Yb] = -1/n
dprobs = chain(d_log(probs), dlogprobs)
dcounts_sum_inv = rowsum(chain(counts, dprobs))
dcounts = chain(counts_sum_inv, dprobs)
dcounts_sum = chain(d_pow(counts_sum, -1), dcounts_sum_inv)
dcounts = dcounts + dcounts_sum
dnorm_logits = chain(d_exp(counts), dcounts)
dlogit_maxes = -rowsum(dnorm_logits)
pick_max = lambda x: F.one_hot(x.max(1).indices, num_classes=x.shape[1])
dlogits = dnorm_logits + chain(pick_max(logits), dlogit_maxes)
dh, dW2, db2 = dlogits @ W2.T, h.T @ dlogits, dlogits.sum(0)
dhpreact = chain(d_tanh(h), dh)
"""

EX1_5C = """\
def make_batchnorm_backward(bngain, bnraw, bndiff, bndiff2, bnvar, bnvar_inv, n):
    \"\"\"returns a closure that backprops hpreact -> hprebn through the atomic batchnorm lines\"\"\"
    def backward(dhpreact):
        out = {}
        out['bngain'] = colsum(bnraw * dhpreact)
        out['bnbias'] = colsum(dhpreact)
        out['bnraw'] = chain(bngain, dhpreact)
        out['bnvar_inv'] = colsum(chain(bndiff, out['bnraw']))
        out['bnvar'] = chain(d_pow(bnvar + 1e-5, -0.5), out['bnvar_inv'])
        out['bndiff2'] = chain(torch.ones_like(bndiff2) / (n - 1), out['bnvar'])
        out['bndiff'] = chain(bnvar_inv, out['bnraw']) + chain(d_pow(bndiff, 2), out['bndiff2'])
        out['bnmeani'] = -colsum(out['bndiff'])
        out['hprebn'] = out['bndiff'] + out['bnmeani'] / n
        return out
    return backward

bn_backward = make_batchnorm_backward(bngain, bnraw, bndiff, bndiff2, bnvar, bnvar_inv, n)
bn = bn_backward(dhpreact)
dbngain, dbnbias, dbnraw = bn['bngain'], bn['bnbias'], bn['bnraw']
dbnvar_inv, dbnvar, dbndiff2 = bn['bnvar_inv'], bn['bnvar'], bn['bndiff2']
dbndiff, dbnmeani, dhprebn = bn['bndiff'], bn['bnmeani'], bn['hprebn']
"""

EX1_5D = """\
dembcat, dW1, db1 = dhprebn @ W1.T, embcat.T @ dhprebn, dhprebn.sum(0)
demb = dembcat.view(emb.shape)

def scatter_rows(ix, rows, like):
    out = torch.zeros_like(like)
    def add(i, row):
        out[i] += row
    for i, row in zip(ix.view(-1).tolist(), rows.view(-1, like.shape[1])):
        add(i, row)
    return out

dC = scatter_rows(Xb, demb, C)
"""

EX1_5E = f"""\
for name in {CMP_LIST}:
    cmp(name, globals()['d' + name], globals()[name])
"""

EX2_5 = """\
# backward pass
softmax = lambda x: (x - x.max(1, keepdim=True).values).exp() / (x - x.max(1, keepdim=True).values).exp().sum(1, keepdim=True)
onehot = lambda y: F.one_hot(y, num_classes=vocab_size).float()
dlogits = (softmax(logits) - onehot(Yb)) / n
cmp('logits', dlogits, logits)
"""

EX3_5 = """\
# backward pass
def make_fused_bn_backward(bngain, bnraw, bnvar_inv):
    def backward(dout):
        m = dout.shape[0]
        return bngain*bnvar_inv/m * (m*dout - dout.sum(0) - m/(m-1)*bnraw*(dout*bnraw).sum(0))
    return backward

dhprebn = make_fused_bn_backward(bngain, bnraw, bnvar_inv)(dhpreact)
cmp('hprebn', dhprebn, hprebn)
"""

TRAIN_BACKWARD_5 = """\
dlogits = (F.softmax(logits, 1) - onehot(Yb)) / n
dh, dW2, db2 = dlogits @ W2.T, h.T @ dlogits, dlogits.sum(0)
dhpreact = chain(d_tanh(h), dh)
dbngain, dbnbias = colsum(bnraw * dhpreact), colsum(dhpreact)
dhprebn = make_fused_bn_backward(bngain, bnraw, bnvar_inv)(dhpreact)
dembcat, dW1, db1 = dhprebn @ W1.T, embcat.T @ dhprebn, dhprebn.sum(0)
dC = torch.zeros_like(C).index_add_(0, Xb.view(-1), dembcat.view(-1, n_embd))
grads = [dC, dW1, db1, dW2, db2, dbngain, dbnbias]
"""

case("lambdas_and_closures", [
    *setup(), EX1_HEAD, EX1_5A, EX1_5B, EX1_5C, EX1_5D, EX1_5E,
    EX2_FORWARD, EX2_5, EX3_FORWARD, EX3_5,
    train_cell(TRAIN_BACKWARD_5), *EVAL,
], structures=[5])

# ---------------------------------------------------------------------------------------------
# 6. Everything inside `with torch.no_grad():` blocks, walking one running gradient `g`
#    backwards and copying it out into the lecture's names as it goes. Slip: dbnvar_inv is
#    taken from `g` after g has already moved on to dbndiff's first branch (the wrong upstream
#    gradient); what builds on it is wrong too.

EX1_6A = """\
# Exercise 1 -- one running gradient g, walked backwards line by line.
# Copying it into the lecture's names on the way so cmp can check them.
with torch.no_grad():
    g = torch.zeros_like(logprobs)
    g[range(n), Yb] = -1.0/n
    dlogprobs = g
    g = g / probs
    dprobs = g
    dcounts_sum_inv = (counts * g).sum(1, keepdim=True)
    g = counts_sum_inv * g                       # dcounts, first branch
    dcounts_sum = -counts_sum**-2 * dcounts_sum_inv
    g = g + dcounts_sum                          # dcounts, second branch
    dcounts = g
    g = counts * g
    dnorm_logits = g
    dlogit_maxes = -g.sum(1, keepdim=True)
    g = g + F.one_hot(logits.max(1).indices, num_classes=vocab_size) * dlogit_maxes
    dlogits = g

    cmp('logprobs', dlogprobs, logprobs)
    cmp('probs', dprobs, probs)
    cmp('counts_sum_inv', dcounts_sum_inv, counts_sum_inv)
    cmp('counts_sum', dcounts_sum, counts_sum)
    cmp('counts', dcounts, counts)
    cmp('norm_logits', dnorm_logits, norm_logits)
    cmp('logit_maxes', dlogit_maxes, logit_maxes)
    cmp('logits', dlogits, logits)
"""

EX1_6B = """\
with torch.no_grad():
    dW2, db2 = h.T @ g, g.sum(0)
    g = g @ W2.T
    dh = g
    g = (1.0 - h**2) * g
    dhpreact = g
    dbngain = (bnraw * g).sum(0, keepdim=True)
    dbnbias = g.sum(0, keepdim=True)
    g = bngain * g
    dbnraw = g
    g = bnvar_inv * g                            # dbndiff, first branch
    dbnvar_inv = (bndiff * g).sum(0, keepdim=True)
    dbnvar = -0.5 * (bnvar + 1e-5)**-1.5 * dbnvar_inv
    dbndiff2 = torch.ones_like(bndiff2) * dbnvar / (n - 1)
    g = g + 2 * bndiff * dbndiff2                # dbndiff, second branch
    dbndiff = g
    dbnmeani = -g.sum(0, keepdim=True)
    g = g + dbnmeani / n
    dhprebn = g
    dembcat, dW1, db1 = g @ W1.T, embcat.T @ g, g.sum(0)
    demb = dembcat.view(emb.shape)
    dC = torch.zeros_like(C).index_add_(0, Xb.view(-1), demb.view(-1, n_embd))
"""

EX1_6C = """\
with torch.no_grad():
    for name in ['h', 'W2', 'b2', 'hpreact', 'bngain', 'bnbias', 'bnraw', 'bnvar_inv', 'bnvar',
                 'bndiff2', 'bndiff', 'bnmeani', 'hprebn', 'embcat', 'W1', 'b1', 'emb', 'C']:
        cmp(name, eval('d' + name), eval(name))
"""

EX2_6 = """\
# backward pass
with torch.no_grad():
    g = F.softmax(logits, 1)
    g[range(n), Yb] -= 1
    g /= n
    dlogits = g
cmp('logits', dlogits, logits)
"""

EX3_6 = """\
# backward pass
with torch.no_grad():
    g = dhpreact
    g = bngain * bnvar_inv / n * (n * g - g.sum(0) - n / (n - 1) * bnraw * (g * bnraw).sum(0))
    dhprebn = g
cmp('hprebn', dhprebn, hprebn)
"""

TRAIN_BACKWARD_6 = """\
# (not g here: g is the generator for the minibatches)
gr = F.softmax(logits, 1)
gr[range(n), Yb] -= 1
gr /= n
dW2, db2 = h.T @ gr, gr.sum(0)
gr = (1.0 - h**2) * (gr @ W2.T)
dbngain, dbnbias = (bnraw * gr).sum(0, keepdim=True), gr.sum(0, keepdim=True)
gr = bngain * bnvar_inv / n * (n * gr - gr.sum(0) - n / (n - 1) * bnraw * (gr * bnraw).sum(0))
dW1, db1 = embcat.T @ gr, gr.sum(0)
gr = gr @ W1.T
dC = torch.zeros_like(C).index_add_(0, Xb.view(-1), gr.view(-1, n_embd))
grads = [dC, dW1, db1, dW2, db2, dbngain, dbnbias]
"""

case("no_grad_running_g_wrong_upstream", [
    *setup(), EX1_HEAD, EX1_6A, EX1_6B, EX1_6C,
    EX2_FORWARD, EX2_6, EX3_FORWARD, EX3_6,
    train_cell(TRAIN_BACKWARD_6), *EVAL,
], structures=[6, 7], wrong=_steps("bnvar_inv"),
    cascade=_steps("bnvar", "bndiff2", "bndiff", "hprebn", "embcat", "emb", "C"))

# ---------------------------------------------------------------------------------------------
# 7. Gradients appended to a list of (name, gradient) pairs as they are derived (dcounts
#    twice: its first branch, then the whole), checked by walking the list; the training
#    loop's backward is a function returning a dict, and for its first three steps the loop
#    runs loss.backward() and compares every parameter's gradient. Right throughout.

EX1_7A = """\
# Exercise 1: I append (name, gradient) to a list as I go and check the list at the end
derived = []

dl = torch.zeros_like(logprobs)
dl[range(n), Yb] = -1.0 / n
derived.append(('logprobs', dl))

dp = dl / probs
derived.append(('probs', dp))

dcsi = (dp * counts).sum(1, keepdim=True)
derived.append(('counts_sum_inv', dcsi))

dc = dp * counts_sum_inv
derived.append(('counts', dc))          # only the first branch so far

dcs = -dcsi / counts_sum**2
derived.append(('counts_sum', dcs))

dc = dc + dcs
derived.append(('counts', dc))          # both branches now

dnl = dc * counts
derived.append(('norm_logits', dnl))

dlm = -dnl.sum(1, keepdim=True)
derived.append(('logit_maxes', dlm))

dlg = dnl.clone()
dlg[range(n), logits.argmax(1)] += dlm.view(-1)
derived.append(('logits', dlg))
"""

EX1_7B = """\
dh_ = dlg @ W2.T
derived += [('h', dh_), ('W2', h.T @ dlg), ('b2', dlg.sum(0))]

dhp = (1 - h**2) * dh_
derived.append(('hpreact', dhp))

dbr = bngain * dhp
derived += [('bngain', (bnraw * dhp).sum(0, keepdim=True)), ('bnraw', dbr),
            ('bnbias', dhp.sum(0, keepdim=True))]

dbvi = (bndiff * dbr).sum(0, keepdim=True)
derived.append(('bnvar_inv', dbvi))

dbv = -0.5 * dbvi * (bnvar + 1e-5)**-1.5
derived.append(('bnvar', dbv))

dbd2 = dbv.expand(n, -1) / (n - 1)
derived.append(('bndiff2', dbd2))

dbd = dbr * bnvar_inv + 2 * bndiff * dbd2
derived.append(('bndiff', dbd))

dbm = -dbd.sum(0, keepdim=True)
derived.append(('bnmeani', dbm))

dhpb = dbd + dbm / n
derived.append(('hprebn', dhpb))

dec = dhpb @ W1.T
derived += [('embcat', dec), ('W1', embcat.T @ dhpb), ('b1', dhpb.sum(0))]

de = dec.view(n, block_size, n_embd)
derived.append(('emb', de))

dCm = torch.zeros_like(C)
for row, idx in enumerate(Xb):
    for pos in range(block_size):
        dCm[idx[pos]] += de[row, pos]
derived.append(('C', dCm))
"""

EX1_7C = """\
for name, grad in derived:
    cmp(name, grad, globals()[name])
"""

EX2_7 = """\
# backward pass
p_ = F.softmax(logits, 1)
dlogits = p_ - F.one_hot(Yb, num_classes=p_.shape[1])
dlogits = dlogits / n
derived.append(('logits', dlogits))
cmp('logits', dlogits, logits)
"""

EX3_7 = """\
# backward pass
xhat, gam, inv = bnraw, bngain, bnvar_inv
dhprebn = gam * inv / n * (n * dhp - dhp.sum(0) - n / (n - 1) * xhat * (dhp * xhat).sum(0))
derived.append(('hprebn', dhprebn))
cmp('hprebn', dhprebn, hprebn)
"""

EX4_7_DEF = """\
def backward_pass(Xb, Yb, emb, embcat, bnraw, bnvar_inv, h, logits):
    m = Yb.shape[0]
    d = {}
    dlogits = (F.softmax(logits, 1) - F.one_hot(Yb, num_classes=logits.shape[1])) / m
    d['W2'], d['b2'] = h.T @ dlogits, dlogits.sum(0)
    dhp = (1 - h**2) * (dlogits @ W2.T)
    d['bngain'], d['bnbias'] = (bnraw * dhp).sum(0, keepdim=True), dhp.sum(0, keepdim=True)
    dhpb = bngain * bnvar_inv / m * (m * dhp - dhp.sum(0) - m / (m - 1) * bnraw * (dhp * bnraw).sum(0))
    d['W1'], d['b1'] = embcat.T @ dhpb, dhpb.sum(0)
    de = (dhpb @ W1.T).view(emb.shape)
    d['C'] = torch.zeros_like(C).index_add_(0, Xb.flatten(), de.flatten(0, 1))
    return d

names = ['C', 'W1', 'b1', 'W2', 'b2', 'bngain', 'bnbias']
"""

TRAIN_BACKWARD_7 = """\
d = backward_pass(Xb, Yb, emb, embcat, bnraw, bnvar_inv, h, logits)
if i < 3:  # sanity check against autograd for the first few steps
  loss.backward()
  for name, p in zip(names, parameters):
    cmp(name, d[name], p)
grads = [d[name] for name in names]
"""

UPDATE_7 = """\
# update
lr = 0.1 if i < 100000 else 0.01 # step learning rate decay
with torch.no_grad():
  for p, grad in zip(parameters, grads):
    p -= lr * grad
"""

case("list_of_pairs_check_in_loop", [
    *setup(), EX1_HEAD, EX1_7A, EX1_7B, EX1_7C,
    EX2_FORWARD, EX2_7, EX3_FORWARD, EX3_7, EX4_7_DEF,
    train_cell(TRAIN_BACKWARD_7, UPDATE_7, no_grad=False), *EVAL,
], structures=[7, 8, 4])

# ---------------------------------------------------------------------------------------------
# 8. A class holding a dict of gradients, whose per-layer methods return the gradient that
#    flows on as a tuple-unpackable result and store the parameters' gradients in the dict;
#    exercise 2 and 3 as extra methods; the training loop builds a fresh object each step.
#    Right throughout.

EX1_8 = """\
class Grads:
    def __init__(self):
        self.g = {}

    def __getitem__(self, k):
        return self.g[k]

    def linear(self, dout, x, W, wname, bname):
        self.g[wname] = x.T @ dout
        self.g[bname] = dout.sum(0)
        return dout @ W.T

    def softmax_nll(self, Yb):
        n = logprobs.shape[0]
        g = self.g
        g['logprobs'] = torch.zeros_like(logprobs)
        g['logprobs'][range(n), Yb] = -1.0 / n
        g['probs'] = g['logprobs'] / probs
        g['counts_sum_inv'] = (counts * g['probs']).sum(1, keepdim=True)
        g['counts_sum'] = -counts_sum**-2 * g['counts_sum_inv']
        g['counts'] = counts_sum_inv * g['probs'] + g['counts_sum']
        g['norm_logits'] = counts * g['counts']
        g['logit_maxes'] = -g['norm_logits'].sum(1, keepdim=True)
        onehot_max = (logits == logits.max(1, keepdim=True).values).float()
        g['logits'] = g['norm_logits'] + onehot_max * g['logit_maxes']
        return g['logits']

    def tanh(self, dout, out, name):
        self.g[name] = (1 - out**2) * dout
        return self.g[name]

    def batchnorm(self, dout):
        n = dout.shape[0]
        g = self.g
        g['bngain'] = (bnraw * dout).sum(0, keepdim=True)
        g['bnbias'] = dout.sum(0, keepdim=True)
        g['bnraw'] = bngain * dout
        g['bnvar_inv'] = (bndiff * g['bnraw']).sum(0, keepdim=True)
        g['bnvar'] = -0.5 * (bnvar + 1e-5)**-1.5 * g['bnvar_inv']
        g['bndiff2'] = torch.ones_like(bndiff2) * g['bnvar'] / (n - 1)
        g['bndiff'] = bnvar_inv * g['bnraw'] + 2 * bndiff * g['bndiff2']
        g['bnmeani'] = -g['bndiff'].sum(0, keepdim=True)
        g['hprebn'] = g['bndiff'] + g['bnmeani'] / n
        return g['hprebn']

    def embedding(self, dout, Xb):
        self.g['emb'] = dout.view(*Xb.shape, -1)
        dC = torch.zeros_like(C)
        dC.index_add_(0, Xb.view(-1), self.g['emb'].view(-1, dC.shape[1]))
        self.g['C'] = dC
        return dC
"""

EX1_8B = """\
G = Grads()
dl = G.softmax_nll(Yb)
G.g['h'] = G.linear(dl, h, W2, 'W2', 'b2')
dpre = G.tanh(G['h'], h, 'hpreact')
G.g['embcat'] = G.linear(G.batchnorm(dpre), embcat, W1, 'W1', 'b1')
G.embedding(G['embcat'], Xb)
len(G.g)
"""

EX1_8C = """\
for k, v in G.g.items():
    cmp(k, v, globals()[k])
"""

EX2_8 = """\
# backward pass
def ce_fused(self, logits, Yb):
    n = logits.shape[0]
    d = F.softmax(logits, 1)
    d[range(n), Yb] -= 1
    self.g['logits'] = d / n
    return self.g['logits']

Grads.ce_fused = ce_fused   # monkeypatch it onto the class

G2 = Grads()
cmp('logits', G2.ce_fused(logits, Yb), logits)
"""

EX3_8 = """\
# backward pass
def bn_fused(self, dout):
    n = dout.shape[0]
    self.g['bngain'] = (bnraw * dout).sum(0, keepdim=True)
    self.g['bnbias'] = dout.sum(0, keepdim=True)
    self.g['hprebn'] = bngain*bnvar_inv/n * (n*dout - dout.sum(0) - n/(n-1)*bnraw*(dout*bnraw).sum(0))
    return self.g['hprebn']

Grads.bn_fused = bn_fused

cmp('hprebn', G2.bn_fused(G['hpreact']), hprebn)
"""

TRAIN_BACKWARD_8 = """\
G = Grads()
dlg = G.ce_fused(logits, Yb)
dpre = G.tanh(G.linear(dlg, h, W2, 'W2', 'b2'), h, 'hpreact')
G.embedding(G.linear(G.bn_fused(dpre), embcat, W1, 'W1', 'b1'), Xb)
grads = [G[k] for k in ['C', 'W1', 'b1', 'W2', 'b2', 'bngain', 'bnbias']]
"""

case("class_with_grad_dict_layer_methods", [
    *setup(), EX1_HEAD, EX1_8, EX1_8B, EX1_8C,
    EX2_FORWARD, EX2_8, EX3_FORWARD, EX3_8,
    train_cell(TRAIN_BACKWARD_8), *EVAL,
], structures=[2, 1, 3, 9])

# ---------------------------------------------------------------------------------------------
# 9. A mixture: a dict with 'dX' keys filled through a small setter closure inside
#    torch.no_grad() blocks; exercise 2 with a softmax over the wrong dimension; the training
#    loop's backward a function returning a dict (written with the right softmax), checked
#    with the learner's check_grad against autograd in the first two steps. Slips: dbnvar with
#    the exponent -0.5 instead of -1.5 (what builds on it wrong too, dbnmeani aside), and
#    exercise 2's softmax over dim 0.

EX1_9A = """\
D = {}

def setgrad(name, value, accumulate=False):
    key = 'd' + name
    D[key] = D[key] + value if accumulate else value
    return D[key]

with torch.no_grad():
    setgrad('logprobs', torch.zeros_like(logprobs))[range(n), Yb] = -1.0/n
    setgrad('probs', D['dlogprobs'] / probs)
    setgrad('counts_sum_inv', (counts * D['dprobs']).sum(1, keepdim=True))
    setgrad('counts', counts_sum_inv * D['dprobs'])
    setgrad('counts_sum', -counts_sum**-2 * D['dcounts_sum_inv'])
    setgrad('counts', D['dcounts_sum'], accumulate=True)
    setgrad('norm_logits', counts * D['dcounts'])
    setgrad('logit_maxes', -D['dnorm_logits'].sum(1, keepdim=True))
    setgrad('logits', D['dnorm_logits'].clone())
    setgrad('logits', F.one_hot(logits.max(1).indices, num_classes=27) * D['dlogit_maxes'], accumulate=True)
"""

EX1_9B = """\
with torch.no_grad():
    setgrad('h', D['dlogits'] @ W2.T)
    setgrad('W2', h.T @ D['dlogits'])
    setgrad('b2', D['dlogits'].sum(0))
    setgrad('hpreact', (1.0 - h**2) * D['dh'])
    setgrad('bngain', (bnraw * D['dhpreact']).sum(0, keepdim=True))
    setgrad('bnraw', bngain * D['dhpreact'])
    setgrad('bnbias', D['dhpreact'].sum(0, keepdim=True))
    setgrad('bndiff', bnvar_inv * D['dbnraw'])
    setgrad('bnvar_inv', (bndiff * D['dbnraw']).sum(0, keepdim=True))
    setgrad('bnvar', -0.5 * (bnvar + 1e-5)**-0.5 * D['dbnvar_inv'])
    setgrad('bndiff2', torch.ones_like(bndiff2) * D['dbnvar'] / (n-1))
    setgrad('bndiff', 2 * bndiff * D['dbndiff2'], accumulate=True)
    setgrad('hprebn', D['dbndiff'].clone())
    setgrad('bnmeani', -D['dbndiff'].sum(0, keepdim=True))
    setgrad('hprebn', D['dbnmeani'] / n, accumulate=True)
    setgrad('embcat', D['dhprebn'] @ W1.T)
    setgrad('W1', embcat.T @ D['dhprebn'])
    setgrad('b1', D['dhprebn'].sum(0))
    setgrad('emb', D['dembcat'].view(emb.shape))
    setgrad('C', torch.zeros_like(C)).index_add_(0, Xb.view(-1), D['demb'].view(-1, n_embd))

for key in D:
    cmp(key[1:], D[key], globals()[key[1:]])
"""

EX2_9 = """\
# backward pass
with torch.no_grad():
    setgrad('logits', F.softmax(logits, 0))
    D['dlogits'][range(n), Yb] -= 1
    D['dlogits'] /= n
cmp('logits', D['dlogits'], logits)
"""

EX3_9 = """\
# backward pass
with torch.no_grad():
    dy = D['dhpreact']
    setgrad('hprebn', bngain*bnvar_inv/n * (n*dy - dy.sum(0) - n/(n-1)*bnraw*(dy*bnraw).sum(0)))
cmp('hprebn', D['dhprebn'], hprebn)
"""

EX4_9_DEF = """\
def check_grad(label, mine, ref):
    ok = torch.allclose(mine, ref.grad, rtol=1e-4, atol=1e-6)
    print(f'{label:8s} {"ok" if ok else "MISMATCH"}')
    return ok

@torch.no_grad()
def backward_step(cache, Yb):
    c = cache
    m = Yb.shape[0]
    out = {}
    dlogits = F.softmax(c['logits'], 1)
    dlogits[range(m), Yb] -= 1
    dlogits /= m
    out['dW2'], out['db2'] = c['h'].T @ dlogits, dlogits.sum(0)
    dhp = (1.0 - c['h']**2) * (dlogits @ W2.T)
    out['dbngain'] = (c['bnraw'] * dhp).sum(0, keepdim=True)
    out['dbnbias'] = dhp.sum(0, keepdim=True)
    dhpb = bngain*c['bnvar_inv']/m * (m*dhp - dhp.sum(0) - m/(m-1)*c['bnraw']*(dhp*c['bnraw']).sum(0))
    out['dW1'], out['db1'] = c['embcat'].T @ dhpb, dhpb.sum(0)
    dC = torch.zeros_like(C)
    dC.index_add_(0, c['Xb'].view(-1), (dhpb @ W1.T).view(-1, n_embd))
    out['dC'] = dC
    return out

order = ['dC', 'dW1', 'db1', 'dW2', 'db2', 'dbngain', 'dbnbias']
"""

TRAIN_BACKWARD_9 = """\
cache = dict(Xb=Xb, embcat=embcat, bnraw=bnraw, bnvar_inv=bnvar_inv, h=h, logits=logits)
out = backward_step(cache, Yb)
if i < 2:
  loss.backward()
  for key, p in zip(order, parameters):
    check_grad(key, out[key], p)
grads = [out[k] for k in order]
"""

UPDATE_9 = """\
# update
lr = 0.1 if i < 100000 else 0.01 # step learning rate decay
for p, grad in zip(parameters, grads):
  p.data -= lr * grad
"""

case("mixture_setter_no_grad_loop_check_bnvar_exp_ce_dim", [
    *setup(), EX1_HEAD, EX1_9A, EX1_9B,
    EX2_FORWARD, EX2_9, EX3_FORWARD, EX3_9, EX4_9_DEF,
    train_cell(TRAIN_BACKWARD_9, UPDATE_9, no_grad=False), *EVAL,
], structures=[1, 5, 6, 8, 9], wrong=_steps("bnvar", CE),
    cascade=_steps("bndiff2", "bndiff", "hprebn", "embcat", "emb", "C"))

# ---------------------------------------------------------------------------------------------
# 10. A function per layer, each defined in its own cell next to the call and the cmp that
#     checks it, small lambdas inside; exercise 3's function uses the biased variance's factor
#     (forgetting Bessel's n/(n-1)), and the training loop calls it, so both are wrong.

EX1_10 = [
    """\
# --- cross entropy: loss = -logprobs[range(n), Yb].mean(), logprobs = probs.log()
def backward_nll_log(probs, Yb):
    m = probs.shape[0]
    dlogprobs = torch.zeros_like(probs)
    dlogprobs[torch.arange(m), Yb] = -1 / m
    return dlogprobs, dlogprobs / probs

dlogprobs, dprobs = backward_nll_log(probs, Yb)
cmp('logprobs', dlogprobs, logprobs)
cmp('probs', dprobs, probs)
""",
    """\
# --- probs = counts * counts_sum_inv, counts_sum_inv = counts_sum**-1, counts_sum = counts.sum(1)
def backward_normalize(dprobs, counts, counts_sum, counts_sum_inv):
    inv = lambda x: x**-1
    dinv = lambda x: -x**-2
    dcounts_sum_inv = (dprobs * counts).sum(1, keepdim=True)
    dcounts_sum = dinv(counts_sum) * dcounts_sum_inv
    dcounts = dprobs * counts_sum_inv + dcounts_sum
    return dcounts_sum_inv, dcounts_sum, dcounts

dcounts_sum_inv, dcounts_sum, dcounts = backward_normalize(dprobs, counts, counts_sum, counts_sum_inv)
cmp('counts_sum_inv', dcounts_sum_inv, counts_sum_inv)
cmp('counts_sum', dcounts_sum, counts_sum)
cmp('counts', dcounts, counts)
""",
    """\
# --- counts = norm_logits.exp(), norm_logits = logits - logit_maxes, logit_maxes = logits.max(1)
def backward_shifted_exp(dcounts, counts, logits):
    dnorm_logits = dcounts * counts
    dlogit_maxes = -dnorm_logits.sum(1, keepdim=True)
    argmax_mask = lambda x: torch.zeros_like(x).scatter_(1, x.argmax(1, keepdim=True), 1.0)
    dlogits = dnorm_logits + argmax_mask(logits) * dlogit_maxes
    return dnorm_logits, dlogit_maxes, dlogits

dnorm_logits, dlogit_maxes, dlogits = backward_shifted_exp(dcounts, counts, logits)
cmp('norm_logits', dnorm_logits, norm_logits)
cmp('logit_maxes', dlogit_maxes, logit_maxes)
cmp('logits', dlogits, logits)
""",
    """\
# --- logits = h @ W2 + b2 ; h = tanh(hpreact)
def backward_linear(dout, x, W):
    return dout @ W.T, x.T @ dout, dout.sum(0)

def backward_tanh(dout, out):
    return dout * (1 - out * out)

dh, dW2, db2 = backward_linear(dlogits, h, W2)
dhpreact = backward_tanh(dh, h)
cmp('h', dh, h)
cmp('W2', dW2, W2)
cmp('b2', db2, b2)
cmp('hpreact', dhpreact, hpreact)
""",
    """\
# --- the batchnorm lines
def backward_bn_atomic(dhpreact, n):
    colsum = lambda t: t.sum(0, keepdim=True)
    dbngain = colsum(dhpreact * bnraw)
    dbnbias = colsum(dhpreact)
    dbnraw = dhpreact * bngain
    dbnvar_inv = colsum(dbnraw * bndiff)
    dbnvar = dbnvar_inv * -0.5 * (bnvar + 1e-5)**-1.5
    dbndiff2 = dbnvar.expand_as(bndiff2) / (n - 1)
    dbndiff = dbnraw * bnvar_inv + dbndiff2 * 2 * bndiff
    dbnmeani = -colsum(dbndiff)
    dhprebn = dbndiff + dbnmeani.expand_as(hprebn) / n
    return dbngain, dbnbias, dbnraw, dbnvar_inv, dbnvar, dbndiff2, dbndiff, dbnmeani, dhprebn

(dbngain, dbnbias, dbnraw, dbnvar_inv, dbnvar, dbndiff2, dbndiff, dbnmeani,
 dhprebn) = backward_bn_atomic(dhpreact, n)
for name in ['bngain', 'bnbias', 'bnraw', 'bnvar_inv', 'bnvar', 'bndiff2', 'bndiff', 'bnmeani',
             'hprebn']:
    cmp(name, globals()['d' + name], globals()[name])
""",
    """\
# --- hprebn = embcat @ W1 + b1 ; embcat = emb.view(...) ; emb = C[Xb]
def backward_embedding(dembcat, Xb, C):
    demb = dembcat.view(*Xb.shape, C.shape[1])
    dC = torch.zeros_like(C)
    flat_ix, flat_rows = Xb.reshape(-1), demb.reshape(-1, C.shape[1])
    for r in range(flat_ix.shape[0]):
        dC[flat_ix[r]] += flat_rows[r]
    return demb, dC

dembcat, dW1, db1 = backward_linear(dhprebn, embcat, W1)
demb, dC = backward_embedding(dembcat, Xb, C)
cmp('embcat', dembcat, embcat)
cmp('W1', dW1, W1)
cmp('b1', db1, b1)
cmp('emb', demb, emb)
cmp('C', dC, C)
""",
]

EX2_10 = """\
# backward pass
backward_ce = lambda logits, Yb: (F.softmax(logits, 1) - F.one_hot(Yb, logits.shape[1])) / logits.shape[0]
dlogits = backward_ce(logits, Yb)
cmp('logits', dlogits, logits)
"""

EX3_10 = """\
# backward pass
def backward_bn(dhpreact, bngain, bnraw, bnvar_inv):
    m = dhpreact.shape[0]
    dbngain = (dhpreact * bnraw).sum(0, keepdim=True)
    dbnbias = dhpreact.sum(0, keepdim=True)
    dhprebn = bngain * bnvar_inv / m * (m * dhpreact - dhpreact.sum(0) - bnraw * (dhpreact * bnraw).sum(0))
    return dhprebn, dbngain, dbnbias

dhprebn, _, _ = backward_bn(dhpreact, bngain, bnraw, bnvar_inv)
cmp('hprebn', dhprebn, hprebn)
"""

TRAIN_BACKWARD_10 = """\
dlogits = backward_ce(logits, Yb)
dh, dW2, db2 = backward_linear(dlogits, h, W2)
dhpreact = backward_tanh(dh, h)
dhprebn, dbngain, dbnbias = backward_bn(dhpreact, bngain, bnraw, bnvar_inv)
dembcat, dW1, db1 = backward_linear(dhprebn, embcat, W1)
demb, dC = backward_embedding(dembcat, Xb, C)
grads = [dC, dW1, db1, dW2, db2, dbngain, dbnbias]
"""

case("layer_function_cells_bn_biased", [
    *setup(), EX1_HEAD, *EX1_10,
    EX2_FORWARD, EX2_10, EX3_FORWARD, EX3_10,
    train_cell(TRAIN_BACKWARD_10), *EVAL,
], structures=[3, 5], wrong=_steps(BN, LOOP))



def write(case: dict, folder: Path) -> Path:
    path = Path(folder) / f"{case['name']}.ipynb"
    path.write_text(json.dumps(case["notebook"], indent=1))
    return path
