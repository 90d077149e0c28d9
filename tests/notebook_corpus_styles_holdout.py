"""Learners' notebooks for "Becoming a backprop ninja" (makemore part 4) whose backward passes are
not written as the lecture's plain `dX = ...` globals: the holdout half.

Ten filled-in lecture notebooks (setup, the lecture's forward pass, exercise 1's atomic gradients,
exercise 2's fused cross-entropy, exercise 3's fused batchnorm, exercise 4's training loop), each
written in one or more other structures: gradients kept in a dict ('dX' keys, or a dict per layer),
a Backward class with a method per layer (the fused exercises as subclasses), functions per layer
or per op returning tuples, one big function returning every gradient, a tape of closures and
lambdas for the local derivatives, code inside `with torch.no_grad():`, a running gradient or
gradients appended to a list, a gradient check inside the training loop whose backward is a
function returning a dict, and mixtures of these. The forward pass keeps the lecture's names. Six
learners slipped (a missing minus sign, `=` for `+=`, a wrong sign in a power's derivative, a wrong
upstream gradient, a scatter into dC that does not accumulate, +1 for -1 at the targets, the fused
batchnorm without bngain); four are right throughout. No notebook is shared with the tune half
(notebook_corpus_styles_tune). Written independently of the grader; each case's labels were
measured with tests/notebook_corpus_truth.py:

    .venv/bin/python tests/notebook_corpus_truth.py notebook_corpus_styles_holdout

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
# 1. Gradients in a dict with 'dX' keys, filled a layer at a time with grads.update(dict(...)),
#    checked by a helper of the learner's own that loops over the dict. The training loop's
#    backward fills the same kind of dict. Slip: dbnmeani without its minus sign; what builds
#    on it (dhprebn and below) is wrong too.

EX1_H1A = """\
# Exercise 1 -- all my gradients live in `grads`, keyed 'd' + forward name
grads = {}

dlp = torch.zeros_like(logprobs)
dlp[range(n), Yb] = -1.0 / n
grads.update(dlogprobs=dlp, dprobs=dlp / probs)

grads.update(dcounts_sum_inv=(counts * grads['dprobs']).sum(1, keepdim=True))
grads.update(dcounts_sum=-grads['dcounts_sum_inv'] * counts_sum**-2)
grads.update(dcounts=counts_sum_inv * grads['dprobs'] + grads['dcounts_sum'])
grads.update(dnorm_logits=counts * grads['dcounts'])
grads.update(dlogit_maxes=-grads['dnorm_logits'].sum(1, keepdim=True))
grads.update(dlogits=grads['dnorm_logits'] + grads['dlogit_maxes'] * F.one_hot(logits.max(1).indices, 27))
"""

EX1_H1B = """\
dl = grads['dlogits']
grads.update(dict(dh=dl @ W2.T, dW2=h.T @ dl, db2=dl.sum(0)))
grads.update(dict(dhpreact=(1 - h**2) * grads['dh']))
dhp = grads['dhpreact']
grads.update(dict(dbngain=(dhp * bnraw).sum(0, keepdim=True), dbnraw=dhp * bngain,
                  dbnbias=dhp.sum(0, keepdim=True)))
grads.update(dict(dbnvar_inv=(grads['dbnraw'] * bndiff).sum(0, keepdim=True)))
grads.update(dict(dbnvar=-0.5 * (bnvar + 1e-5)**-1.5 * grads['dbnvar_inv']))
grads.update(dict(dbndiff2=torch.ones_like(bndiff2) * grads['dbnvar'] / (n - 1)))
grads.update(dict(dbndiff=grads['dbnraw'] * bnvar_inv + 2 * bndiff * grads['dbndiff2']))
grads.update(dict(dbnmeani=grads['dbndiff'].sum(0, keepdim=True)))
grads.update(dict(dhprebn=grads['dbndiff'] + grads['dbnmeani'] / n))
dhb = grads['dhprebn']
grads.update(dict(dembcat=dhb @ W1.T, dW1=embcat.T @ dhb, db1=dhb.sum(0)))
grads.update(dict(demb=grads['dembcat'].view(n, block_size, -1)))
dC_ = torch.zeros_like(C)
for b in range(n):
    for t in range(block_size):
        dC_[Xb[b, t]] += grads['demb'][b, t]
grads.update(dict(dC=dC_))
"""

EX1_H1C = """\
def check_all(grads):
    for key, value in grads.items():
        name = key[1:]             # 'dprobs' -> 'probs'
        cmp(name, value, globals()[name])

check_all(grads)
"""

EX2_H1 = """\
# backward pass
sm = F.softmax(logits, 1)
sm[range(n), Yb] -= 1
grads['dlogits'] = sm / n
check_all({'dlogits': grads['dlogits']})
"""

EX3_H1 = """\
# backward pass
dhp = grads['dhpreact']
grads['dhprebn'] = bngain * bnvar_inv / n * (n * dhp - dhp.sum(0) - n/(n-1) * bnraw * (dhp * bnraw).sum(0))
check_all({'dhprebn': grads['dhprebn']})
"""

TRAIN_BACKWARD_H1 = """\
grads = {}
sm = F.softmax(logits, 1)
sm[range(n), Yb] -= 1
dl = sm / n
grads.update(dW2=h.T @ dl, db2=dl.sum(0))
dhp = (1 - h**2) * (dl @ W2.T)
grads.update(dbngain=(dhp * bnraw).sum(0, keepdim=True), dbnbias=dhp.sum(0, keepdim=True))
dhb = bngain * bnvar_inv / n * (n * dhp - dhp.sum(0) - n/(n-1) * bnraw * (dhp * bnraw).sum(0))
grads.update(dW1=embcat.T @ dhb, db1=dhb.sum(0))
dC_ = torch.zeros_like(C)
dC_.index_add_(0, Xb.view(-1), (dhb @ W1.T).view(-1, n_embd))
grads.update(dC=dC_)
"""

UPDATE_H1 = """\
# update
lr = 0.1 if i < 100000 else 0.01 # step learning rate decay
grad_list = list(map(grads.get, ['dC', 'dW1', 'db1', 'dW2', 'db2', 'dbngain', 'dbnbias']))
for p, grad in zip(parameters, grad_list):
  p.data += -lr * grad
"""

case("dict_update_d_keys_bnmeani_sign", [
    *setup(), EX1_HEAD, EX1_H1A, EX1_H1B, EX1_H1C,
    EX2_FORWARD, EX2_H1, EX3_FORWARD, EX3_H1,
    train_cell(TRAIN_BACKWARD_H1, UPDATE_H1), *EVAL,
], structures=[1], wrong=_steps("bnmeani"), cascade=_steps("hprebn", "embcat", "emb", "C"))

# ---------------------------------------------------------------------------------------------
# 2. A Backprop class built from a cache dict of the forward tensors (no globals), its
#    methods returning self so the backward pass chains; a check method calls cmp on the
#    cached tensors. Exercises 2 and 3 are one subclass written in exercise 2's cell, whose
#    batchnorm method is only tried in exercise 3. The training loop chains the subclass.
#    Right throughout.

EX1_H2 = """\
class Backprop:
    def __init__(self, cache, Yb):
        self.c = cache
        self.Yb = Yb
        self.n = Yb.shape[0]

    def loss(self):
        c, n = self.c, self.n
        self.dlogprobs = torch.zeros_like(c['logprobs'])
        self.dlogprobs[torch.arange(n), self.Yb] = -1.0 / n
        self.dprobs = self.dlogprobs / c['probs']
        return self

    def softmax(self):
        c = self.c
        self.dcounts_sum_inv = (self.dprobs * c['counts']).sum(1, keepdim=True)
        self.dcounts_sum = -c['counts_sum']**-2 * self.dcounts_sum_inv
        self.dcounts = self.dprobs * c['counts_sum_inv'] + self.dcounts_sum
        self.dnorm_logits = self.dcounts * c['counts']
        self.dlogit_maxes = -self.dnorm_logits.sum(1, keepdim=True)
        mask = F.one_hot(c['logits'].argmax(1), c['logits'].shape[1])
        self.dlogits = self.dnorm_logits + mask * self.dlogit_maxes
        return self

    def linear2(self):
        c = self.c
        self.dh = self.dlogits @ c['W2'].T
        self.dW2 = c['h'].T @ self.dlogits
        self.db2 = self.dlogits.sum(0)
        return self

    def tanh(self):
        self.dhpreact = (1 - self.c['h']**2) * self.dh
        return self

    def batchnorm(self):
        c, n = self.c, self.n
        self.dbngain = (c['bnraw'] * self.dhpreact).sum(0, keepdim=True)
        self.dbnbias = self.dhpreact.sum(0, keepdim=True)
        self.dbnraw = c['bngain'] * self.dhpreact
        self.dbnvar_inv = (c['bndiff'] * self.dbnraw).sum(0, keepdim=True)
        self.dbnvar = -0.5 * (c['bnvar'] + 1e-5)**-1.5 * self.dbnvar_inv
        self.dbndiff2 = torch.ones_like(c['bndiff2']) / (n - 1) * self.dbnvar
        self.dbndiff = c['bnvar_inv'] * self.dbnraw + 2 * c['bndiff'] * self.dbndiff2
        self.dbnmeani = -self.dbndiff.sum(0, keepdim=True)
        self.dhprebn = self.dbndiff + self.dbnmeani / n
        return self

    def linear1(self):
        c = self.c
        self.dembcat = self.dhprebn @ c['W1'].T
        self.dW1 = c['embcat'].T @ self.dhprebn
        self.db1 = self.dhprebn.sum(0)
        return self

    def embedding(self):
        c = self.c
        self.demb = self.dembcat.view(c['emb'].shape)
        self.dC = torch.zeros_like(c['C'])
        self.dC.index_add_(0, c['Xb'].view(-1), self.demb.view(-1, c['C'].shape[1]))
        return self

    def check(self, *names):
        for name in names:
            cmp(name, getattr(self, 'd' + name), self.c[name])

    def param_grads(self):
        return [self.dC, self.dW1, self.db1, self.dW2, self.db2, self.dbngain, self.dbnbias]
"""

EX1_H2B = """\
cache = {k: globals()[k] for k in ['Xb', 'C', 'emb', 'embcat', 'W1', 'b1', 'hprebn', 'bnmeani',
         'bndiff', 'bndiff2', 'bnvar', 'bnvar_inv', 'bnraw', 'bngain', 'bnbias', 'hpreact', 'h',
         'W2', 'b2', 'logits', 'logit_maxes', 'norm_logits', 'counts', 'counts_sum',
         'counts_sum_inv', 'probs', 'logprobs']}
bp = Backprop(cache, Yb).loss().softmax().linear2().tanh().batchnorm().linear1().embedding()
"""

EX1_H2C = """\
bp.check('logprobs', 'probs', 'counts_sum_inv', 'counts_sum', 'counts', 'norm_logits',
         'logit_maxes', 'logits')
bp.check('h', 'W2', 'b2', 'hpreact')
bp.check('bngain', 'bnbias', 'bnraw', 'bnvar_inv', 'bnvar', 'bndiff2', 'bndiff', 'bnmeani', 'hprebn')
bp.check('embcat', 'W1', 'b1', 'emb', 'C')
"""

EX2_H2 = """\
# backward pass
class FastBackprop(Backprop):
    def loss_softmax(self):
        c, n = self.c, self.n
        self.dlogits = F.softmax(c['logits'], 1)
        self.dlogits[torch.arange(n), self.Yb] -= 1
        self.dlogits /= n
        return self

    def batchnorm(self):
        c, n, d = self.c, self.n, self.dhpreact
        self.dbngain = (c['bnraw'] * d).sum(0, keepdim=True)
        self.dbnbias = d.sum(0, keepdim=True)
        self.dhprebn = c['bngain'] * c['bnvar_inv'] / n * (n * d - d.sum(0) - n / (n - 1) * c['bnraw'] * (d * c['bnraw']).sum(0))
        return self

fast = FastBackprop(cache, Yb).loss_softmax()
fast.check('logits')
"""

EX3_H2 = """\
# backward pass
fast.dhpreact = bp.dhpreact
fast.batchnorm().check('hprebn')
"""

TRAIN_BACKWARD_H2 = """\
cache = dict(Xb=Xb, C=C, emb=emb, embcat=embcat, W1=W1, bngain=bngain, bnraw=bnraw,
             bnvar_inv=bnvar_inv, h=h, W2=W2, logits=logits)
fast = FastBackprop(cache, Yb).loss_softmax().linear2().tanh().batchnorm().linear1().embedding()
grads = fast.param_grads()
"""

case("chained_class_from_cache", [
    *setup(), EX1_HEAD, EX1_H2, EX1_H2B, EX1_H2C,
    EX2_FORWARD, EX2_H2, EX3_FORWARD, EX3_H2,
    train_cell(TRAIN_BACKWARD_H2), *EVAL,
], structures=[2])

# ---------------------------------------------------------------------------------------------
# 3. Op-level backward functions (mul, add, sub, matmul, pow, ...) that return tuples of
#    input gradients and undo broadcasting with an `unbroadcast` helper; the lecture's names
#    are unpacked from them and compared in a loop over vars(). Slip: dbndiff's second branch
#    (through bndiff2) overwrites the first (`=` for `+=`); dbnmeani, dhprebn and below are
#    wrong too.

EX1_H3A = """\
# a tiny autograd by hand: every op's backward returns the grads of its inputs
def unbroadcast(grad, shape):
    while grad.dim() > len(shape):
        grad = grad.sum(0)
    for dim, size in enumerate(shape):
        if size == 1 and grad.shape[dim] != 1:
            grad = grad.sum(dim, keepdim=True)
    return grad

def mul_bw(dout, a, b):
    return unbroadcast(dout * b, a.shape), unbroadcast(dout * a, b.shape)

def add_bw(dout, a_shape, b_shape):
    return unbroadcast(dout, a_shape), unbroadcast(dout, b_shape)

def sub_bw(dout, a_shape, b_shape):
    return unbroadcast(dout, a_shape), unbroadcast(-dout, b_shape)

def matmul_bw(dout, a, b):
    return dout @ b.T, a.T @ dout

def pow_bw(dout, x, p):
    return dout * p * x**(p - 1)

def sum_bw(dout, x_shape):          # sum(dim, keepdim=True): broadcast the gradient back
    return dout.expand(x_shape)

def log_bw(dout, x):
    return dout / x

def exp_bw(dout, out):
    return dout * out

def tanh_bw(dout, out):
    return dout * (1 - out**2)

def max_bw(dout, x):                # x.max(1, keepdim=True).values
    return dout * F.one_hot(x.argmax(1), x.shape[1])

def index_bw(dout, table, ix):      # table[ix]
    dtable = torch.zeros_like(table)
    dtable.index_add_(0, ix.reshape(-1), dout.reshape(-1, table.shape[1]))
    return dtable
"""

EX1_H3B = """\
dlogprobs = torch.zeros_like(logprobs)
dlogprobs[range(n), Yb] = -1.0/n
dprobs = log_bw(dlogprobs, probs)
dcounts, dcounts_sum_inv = mul_bw(dprobs, counts, counts_sum_inv)
dcounts_sum = pow_bw(dcounts_sum_inv, counts_sum, -1)
dcounts = dcounts + sum_bw(dcounts_sum, counts.shape)
dnorm_logits = exp_bw(dcounts, counts)
dlogits, dlogit_maxes = sub_bw(dnorm_logits, logits.shape, logit_maxes.shape)
dlogits = dlogits + max_bw(dlogit_maxes, logits)
dh, dW2 = matmul_bw(dlogits, h, W2)
_, db2 = add_bw(dlogits, logits.shape, b2.shape)
dhpreact = tanh_bw(dh, h)
dscaled, dbnbias = add_bw(dhpreact, hpreact.shape, bnbias.shape)
dbngain, dbnraw = mul_bw(dscaled, bngain, bnraw)
dbndiff, dbnvar_inv = mul_bw(dbnraw, bndiff, bnvar_inv)
dbnvar = pow_bw(dbnvar_inv, bnvar + 1e-5, -0.5)
dbndiff2 = sum_bw(dbnvar / (n - 1), bndiff2.shape)
dbndiff = pow_bw(dbndiff2, bndiff, 2)
dhprebn, dbnmeani = sub_bw(dbndiff, hprebn.shape, bnmeani.shape)
dhprebn = dhprebn + sum_bw(dbnmeani / n, hprebn.shape)
dembcat, dW1 = matmul_bw(dhprebn, embcat, W1)
_, db1 = add_bw(dhprebn, hprebn.shape, b1.shape)
demb = dembcat.view(emb.shape)
dC = index_bw(demb, C, Xb)
"""

EX1_H3C = f"""\
for name in {CMP_LIST}:
    cmp(name, vars()['d' + name], vars()[name])
"""

EX2_H3 = """\
# backward pass
p_fast = F.softmax(logits, 1)
dlogits, _ = sub_bw(p_fast, logits.shape, logits.shape)
dlogits = (dlogits - F.one_hot(Yb, 27)) / n
cmp('logits', dlogits, logits)
"""

EX3_H3 = """\
# backward pass
def bn_bw(dout, gain, xhat, var_inv):
    m = dout.shape[0]
    return gain * var_inv / m * (m * dout - dout.sum(0) - m / (m - 1) * xhat * (dout * xhat).sum(0))

dhprebn = bn_bw(dhpreact, bngain, bnraw, bnvar_inv)
cmp('hprebn', dhprebn, hprebn)
"""

TRAIN_BACKWARD_H3 = """\
dlogits = (F.softmax(logits, 1) - F.one_hot(Yb, 27)) / n
dh, dW2 = matmul_bw(dlogits, h, W2)
_, db2 = add_bw(dlogits, logits.shape, b2.shape)
dhpreact = tanh_bw(dh, h)
dscaled, dbnbias = add_bw(dhpreact, hpreact.shape, bnbias.shape)
dbngain, _ = mul_bw(dscaled, bngain, bnraw)
dhprebn = bn_bw(dhpreact, bngain, bnraw, bnvar_inv)
dembcat, dW1 = matmul_bw(dhprebn, embcat, W1)
_, db1 = add_bw(dhprebn, hprebn.shape, b1.shape)
dC = index_bw(dembcat.view(emb.shape), C, Xb)
grads = [dC, dW1, db1, dW2, db2, dbngain, dbnbias]
"""

case("op_functions_unbroadcast_bndiff_overwritten", [
    *setup(), EX1_HEAD, EX1_H3A, EX1_H3B, EX1_H3C,
    EX2_FORWARD, EX2_H3, EX3_FORWARD, EX3_H3,
    train_cell(TRAIN_BACKWARD_H3), *EVAL,
], structures=[3], wrong=_steps("bndiff"),
    cascade=_steps("bnmeani", "hprebn", "embcat", "emb", "C"))

# ---------------------------------------------------------------------------------------------
# 4. One big function returning a 26-tuple, unpacked into the lecture's names and compared
#    cmp by cmp as in the lecture; exercise 2 and 3 as functions; the training loop's backward
#    another function returning the parameters' gradients as a tuple. Slip: dbnvar with a
#    plus sign (0.5 for -0.5); what builds on it is wrong too (dbnmeani aside).

EX1_H4 = """\
def backward_all(Yb, n):
    # softmax / cross entropy
    dlogprobs = torch.zeros_like(logprobs)
    dlogprobs[range(n), Yb] = -1.0/n
    dprobs = dlogprobs / probs
    dcounts_sum_inv = (dprobs * counts).sum(1, keepdim=True)
    dcounts = dprobs * counts_sum_inv
    dcounts_sum = -counts_sum**-2 * dcounts_sum_inv
    dcounts += dcounts_sum
    dnorm_logits = dcounts * counts
    dlogit_maxes = -dnorm_logits.sum(1, keepdim=True)
    dlogits = dnorm_logits.clone()
    dlogits[range(n), logits.max(1).indices] += dlogit_maxes[:, 0]
    # layer 2 + tanh
    dh = dlogits @ W2.T
    dW2 = h.T @ dlogits
    db2 = dlogits.sum(0)
    dhpreact = (1 - h**2) * dh
    # batchnorm
    dbngain = (dhpreact * bnraw).sum(0, keepdim=True)
    dbnraw = dhpreact * bngain
    dbnbias = dhpreact.sum(0, keepdim=True)
    dbndiff = dbnraw * bnvar_inv
    dbnvar_inv = (dbnraw * bndiff).sum(0, keepdim=True)
    dbnvar = 0.5 * (bnvar + 1e-5)**-1.5 * dbnvar_inv
    dbndiff2 = dbnvar / (n - 1) * torch.ones_like(bndiff2)
    dbndiff += 2 * bndiff * dbndiff2
    dbnmeani = -dbndiff.sum(0, keepdim=True)
    dhprebn = dbndiff + dbnmeani / n
    # layer 1 + embedding
    dembcat = dhprebn @ W1.T
    dW1 = embcat.T @ dhprebn
    db1 = dhprebn.sum(0)
    demb = dembcat.view(emb.shape)
    dC = torch.zeros_like(C)
    dC.index_add_(0, Xb.view(-1), demb.view(-1, C.shape[-1]))
    return (dlogprobs, dprobs, dcounts_sum_inv, dcounts_sum, dcounts, dnorm_logits,
            dlogit_maxes, dlogits, dh, dW2, db2, dhpreact, dbngain, dbnbias, dbnraw,
            dbnvar_inv, dbnvar, dbndiff2, dbndiff, dbnmeani, dhprebn, dembcat, dW1, db1,
            demb, dC)
"""

EX1_H4B = """\
(dlogprobs, dprobs, dcounts_sum_inv, dcounts_sum, dcounts, dnorm_logits,
 dlogit_maxes, dlogits, dh, dW2, db2, dhpreact, dbngain, dbnbias, dbnraw,
 dbnvar_inv, dbnvar, dbndiff2, dbndiff, dbnmeani, dhprebn, dembcat, dW1, db1,
 demb, dC) = backward_all(Yb, n)
""" + "\n".join(f"cmp('{t}', d{t}, {t})" for t in CMP_NAMES) + "\n"

EX2_H4 = """\
# backward pass
def ce_backward(logits, Yb):
    dlogits = logits.softmax(dim=1)
    dlogits[torch.arange(len(Yb)), Yb] -= 1
    return dlogits / len(Yb)

dlogits = ce_backward(logits, Yb)
cmp('logits', dlogits, logits)
"""

EX3_H4 = """\
# backward pass
def bn_backward(dhpreact, bngain, bnraw, bnvar_inv):
    n = dhpreact.shape[0]
    return bngain * bnvar_inv / n * (n * dhpreact - dhpreact.sum(0) - n / (n - 1) * bnraw * (dhpreact * bnraw).sum(0))

dhprebn = bn_backward(dhpreact, bngain, bnraw, bnvar_inv)
cmp('hprebn', dhprebn, hprebn)
"""

EX4_H4_DEF = """\
def backward_train(Xb, Yb, embcat, bnraw, bnvar_inv, h, logits):
    dlogits = ce_backward(logits, Yb)
    dhpreact = (1 - h**2) * (dlogits @ W2.T)
    dhprebn = bn_backward(dhpreact, bngain, bnraw, bnvar_inv)
    dC = torch.zeros_like(C)
    dC.index_add_(0, Xb.view(-1), (dhprebn @ W1.T).view(-1, C.shape[-1]))
    return (dC, embcat.T @ dhprebn, dhprebn.sum(0), h.T @ dlogits, dlogits.sum(0),
            (dhpreact * bnraw).sum(0, keepdim=True), dhpreact.sum(0, keepdim=True))
"""

TRAIN_BACKWARD_H4 = """\
grads = backward_train(Xb, Yb, embcat, bnraw, bnvar_inv, h, logits)
"""

case("one_function_tuple_bnvar_sign", [
    *setup(), EX1_HEAD, EX1_H4, EX1_H4B,
    EX2_FORWARD, EX2_H4, EX3_FORWARD, EX3_H4, EX4_H4_DEF,
    train_cell(TRAIN_BACKWARD_H4), *EVAL,
], structures=[4], wrong=_steps("bnvar"),
    cascade=_steps("bndiff2", "bndiff", "hprebn", "embcat", "emb", "C"))

# ---------------------------------------------------------------------------------------------
# 5. A tape of closures: one small function per forward line, registered with a decorator in
#    forward order and run in reverse, each accumulating into a dict of adjoints (`adj`); the
#    dict is copied into the lecture's names with globals().update and compared as in the
#    lecture. The fused exercises and the training loop use the same tape idea (the loop's tape
#    reads the loop's globals). Right throughout.

EX1_H5A = """\
adj = {}
tape = []

def acc(name, value):
    # accumulate: a forward variable used twice gets both contributions
    adj[name] = adj[name] + value if name in adj else value

def line(fn):
    tape.append(fn)
    return fn

@line
def _(): adj['emb'] = adj['embcat'].view(emb.shape); acc('C', torch.zeros_like(C).index_add_(0, Xb.view(-1), adj['emb'].view(-1, n_embd)))
@line
def _(): acc('embcat', adj['hprebn'] @ W1.T); acc('W1', embcat.T @ adj['hprebn']); acc('b1', adj['hprebn'].sum(0))
@line
def _(): acc('hprebn', torch.ones_like(hprebn) * adj['bnmeani'] / n)
@line
def _(): acc('hprebn', adj['bndiff'].clone()); acc('bnmeani', -adj['bndiff'].sum(0, keepdim=True))
@line
def _(): acc('bndiff', 2 * bndiff * adj['bndiff2'])
@line
def _(): acc('bndiff2', torch.ones_like(bndiff2) * adj['bnvar'] / (n - 1))
@line
def _(): acc('bnvar', -0.5 * (bnvar + 1e-5)**-1.5 * adj['bnvar_inv'])
@line
def _(): acc('bndiff', bnvar_inv * adj['bnraw']); acc('bnvar_inv', (bndiff * adj['bnraw']).sum(0, keepdim=True))
@line
def _(): acc('bngain', (bnraw * adj['hpreact']).sum(0, keepdim=True)); acc('bnraw', bngain * adj['hpreact']); acc('bnbias', adj['hpreact'].sum(0, keepdim=True))
@line
def _(): acc('hpreact', (1 - h**2) * adj['h'])
@line
def _(): acc('h', adj['logits'] @ W2.T); acc('W2', h.T @ adj['logits']); acc('b2', adj['logits'].sum(0))
@line
def _(): acc('logits', F.one_hot(logits.max(1).indices, num_classes=vocab_size) * adj['logit_maxes'])
@line
def _(): acc('logits', adj['norm_logits'].clone()); acc('logit_maxes', -adj['norm_logits'].sum(1, keepdim=True))
@line
def _(): acc('norm_logits', counts * adj['counts'])
@line
def _(): acc('counts', torch.ones_like(counts) * adj['counts_sum'])
@line
def _(): acc('counts_sum', -counts_sum**-2 * adj['counts_sum_inv'])
@line
def _(): acc('counts', counts_sum_inv * adj['probs']); acc('counts_sum_inv', (counts * adj['probs']).sum(1, keepdim=True))
@line
def _(): acc('probs', adj['logprobs'] / probs)

print(len(tape), 'backward closures')
"""

EX1_H5B = """\
# seed with the loss line and run the tape backwards
adj.clear()
adj['logprobs'] = torch.zeros_like(logprobs)
adj['logprobs'][range(n), Yb] = -1.0/n
for fn in reversed(tape):
    fn()

globals().update({'d' + k: v for k, v in adj.items()})
""" + "\n".join(f"cmp('{t}', d{t}, {t})" for t in CMP_NAMES) + "\n"

EX2_H5 = """\
# backward pass
ce_tape = [lambda: acc('logits', (F.softmax(logits, 1) - F.one_hot(Yb, vocab_size)) / n)]
adj.pop('logits')
for fn in ce_tape:
    fn()
dlogits = adj['logits']
cmp('logits', dlogits, logits)
"""

EX3_H5 = """\
# backward pass
def bn_fused_line():
    d = adj['hpreact']
    acc('bngain', (bnraw * d).sum(0, keepdim=True))
    acc('bnbias', d.sum(0, keepdim=True))
    acc('hprebn', bngain * bnvar_inv / n * (n * d - d.sum(0) - n / (n - 1) * bnraw * (d * bnraw).sum(0)))

adj.pop('hprebn')
bn_fused_line()
dhprebn = adj['hprebn']
cmp('hprebn', dhprebn, hprebn)
"""

EX4_H5_DEF = """\
# the training step's tape: forward order, run backwards; it reads the loop's variables
train_tape = [
    lambda: acc('C', torch.zeros_like(C).index_add_(0, Xb.view(-1), (adj['hprebn'] @ W1.T).view(-1, n_embd))),
    lambda: (acc('W1', embcat.T @ adj['hprebn']), acc('b1', adj['hprebn'].sum(0))),
    bn_fused_line,
    lambda: acc('hpreact', (1 - h**2) * adj['h']),
    lambda: (acc('h', adj['logits'] @ W2.T), acc('W2', h.T @ adj['logits']), acc('b2', adj['logits'].sum(0))),
    lambda: acc('logits', (F.softmax(logits, 1) - F.one_hot(Yb, vocab_size)) / n),
]
"""

TRAIN_BACKWARD_H5 = """\
adj.clear()
for fn in reversed(train_tape):
  fn()
grads = [adj[k] for k in ['C', 'W1', 'b1', 'W2', 'b2', 'bngain', 'bnbias']]
"""

case("closure_tape_decorator", [
    *setup(), EX1_HEAD, EX1_H5A, EX1_H5B,
    EX2_FORWARD, EX2_H5, EX3_FORWARD, EX3_H5, EX4_H5_DEF,
    train_cell(TRAIN_BACKWARD_H5), *EVAL,
], structures=[5, 7, 1, 9])

# ---------------------------------------------------------------------------------------------
# 6. Inside `with torch.no_grad():` blocks, one running upstream gradient `up`, every
#    gradient appended to a list in the lecture's cmp order and compared by zipping that list
#    with the names. Slip: dbngain and dbnbias are taken from `up` after it has already been
#    multiplied by bngain (the wrong upstream gradient), so the bngain step is wrong; dbnraw
#    and everything below are right.

ORDER_H6 = f"""\
order = {CMP_LIST}
trail = []   # the gradients, in the order of `order`
"""

EX1_H6A = """\
with torch.no_grad():
    up = torch.zeros_like(logprobs)
    up[range(n), Yb] = -1.0 / n
    trail.append(up)                                   # logprobs
    up = up / probs
    trail.append(up)                                   # probs
    dcsi = (up * counts).sum(1, keepdim=True)
    trail.append(dcsi)                                 # counts_sum_inv
    dcs = -dcsi * counts_sum**-2
    trail.append(dcs)                                  # counts_sum
    up = up * counts_sum_inv + dcs
    trail.append(up)                                   # counts
    up = up * counts
    trail.append(up)                                   # norm_logits
    dmax = -up.sum(1, keepdim=True)
    trail.append(dmax)                                 # logit_maxes
    up = up + dmax * (logits == logit_maxes)
    trail.append(up)                                   # logits
"""

EX1_H6B = """\
with torch.no_grad():
    trail += [up @ W2.T, h.T @ up, up.sum(0)]          # h, W2, b2
    up = (1 - h**2) * (up @ W2.T)
    trail.append(up)                                   # hpreact
    up = up * bngain                                   # -> dbnraw
    trail += [(up * bnraw).sum(0, keepdim=True),       # bngain
              up.sum(0, keepdim=True),                 # bnbias
              up]                                      # bnraw
    dvi = (up * bndiff).sum(0, keepdim=True)
    trail.append(dvi)                                  # bnvar_inv
    dv = dvi * -0.5 * (bnvar + 1e-5)**-1.5
    trail.append(dv)                                   # bnvar
    dd2 = dv.repeat(n, 1) / (n - 1)
    trail.append(dd2)                                  # bndiff2
    up = up * bnvar_inv + 2 * bndiff * dd2
    trail.append(up)                                   # bndiff
    dm = -up.sum(0, keepdim=True)
    trail.append(dm)                                   # bnmeani
    up = up + dm / n
    trail.append(up)                                   # hprebn
    trail += [up @ W1.T, embcat.T @ up, up.sum(0)]     # embcat, W1, b1
    up = (up @ W1.T).view(emb.shape)
    trail.append(up)                                   # emb
    dCC = torch.zeros_like(C)
    for pos in range(block_size):
        dCC.index_add_(0, Xb[:, pos], up[:, pos])
    trail.append(dCC)                                  # C
"""

EX1_H6C = """\
print(len(order), len(trail))
for name, d in zip(order, trail):
    cmp(name, d, globals()[name])
"""

EX2_H6 = """\
# backward pass
with torch.no_grad():
    up = F.softmax(logits, 1)
    up[range(n), Yb] -= 1
    up = up / n
    cmp('logits', up, logits)
"""

EX3_H6 = """\
# backward pass
with torch.no_grad():
    up = trail[order.index('hpreact')]
    up = bngain * bnvar_inv / n * (n * up - up.sum(0) - n / (n - 1) * bnraw * (up * bnraw).sum(0))
    cmp('hprebn', up, hprebn)
"""

TRAIN_BACKWARD_H6 = """\
up = F.softmax(logits, 1)
up[range(n), Yb] -= 1
up = up / n
dW2, db2 = h.T @ up, up.sum(0)
up = (1 - h**2) * (up @ W2.T)
dbngain, dbnbias = (up * bnraw).sum(0, keepdim=True), up.sum(0, keepdim=True)
up = bngain * bnvar_inv / n * (n * up - up.sum(0) - n / (n - 1) * bnraw * (up * bnraw).sum(0))
dW1, db1 = embcat.T @ up, up.sum(0)
up = (up @ W1.T).view(emb.shape)
dC = torch.zeros_like(C)
for pos in range(block_size):
  dC.index_add_(0, Xb[:, pos], up[:, pos])
grads = [dC, dW1, db1, dW2, db2, dbngain, dbnbias]
"""

case("no_grad_running_up_list_bngain_wrong_upstream", [
    *setup(), EX1_HEAD, ORDER_H6, EX1_H6A, EX1_H6B, EX1_H6C,
    EX2_FORWARD, EX2_H6, EX3_FORWARD, EX3_H6,
    train_cell(TRAIN_BACKWARD_H6), *EVAL,
], structures=[6, 7], wrong=_steps("bngain"))

# ---------------------------------------------------------------------------------------------
# 7. One function with switches for the fused exercises, returning a dict of 'dX' gradients,
#    used for exercises 1-3 and in the training loop, which compares it with autograd (the
#    learner's own `compare`) in its first two steps. Slip: dC scattered with index_put_
#    without accumulate=True, so repeated characters overwrite each other: dC is wrong in
#    exercise 1 and in every training step.

EX1_H7 = """\
def compare(label, mine, ref):
    ok = torch.allclose(mine, ref.grad)
    print(f'{label:>15s}  {"ok" if ok else "WRONG"}  {(mine - ref.grad).abs().max().item():.3e}')
    return ok

def backprop(Xb, Yb, fused_ce=False, fused_bn=False):
    n = Yb.shape[0]
    out = {}
    if fused_ce:
        dlogits = F.softmax(logits, 1)
        dlogits[range(n), Yb] -= 1
        dlogits /= n
    else:
        dlogprobs = torch.zeros_like(logprobs)
        dlogprobs[range(n), Yb] = -1.0/n
        dprobs = dlogprobs / probs
        dcounts_sum_inv = (dprobs * counts).sum(1, keepdim=True)
        dcounts_sum = -counts_sum**-2 * dcounts_sum_inv
        dcounts = dprobs * counts_sum_inv + dcounts_sum
        dnorm_logits = dcounts * counts
        dlogit_maxes = -dnorm_logits.sum(1, keepdim=True)
        dlogits = dnorm_logits + F.one_hot(logits.max(1).indices, logits.shape[1]) * dlogit_maxes
        out.update(dlogprobs=dlogprobs, dprobs=dprobs, dcounts_sum_inv=dcounts_sum_inv,
                   dcounts_sum=dcounts_sum, dcounts=dcounts, dnorm_logits=dnorm_logits,
                   dlogit_maxes=dlogit_maxes)
    out['dlogits'] = dlogits
    out['dh'] = dlogits @ W2.T
    out['dW2'] = h.T @ dlogits
    out['db2'] = dlogits.sum(0)
    dhpreact = (1 - h**2) * out['dh']
    out['dhpreact'] = dhpreact
    out['dbngain'] = (bnraw * dhpreact).sum(0, keepdim=True)
    out['dbnbias'] = dhpreact.sum(0, keepdim=True)
    if fused_bn:
        dhprebn = bngain*bnvar_inv/n * (n*dhpreact - dhpreact.sum(0) - n/(n-1)*bnraw*(dhpreact*bnraw).sum(0))
    else:
        dbnraw = bngain * dhpreact
        dbnvar_inv = (bndiff * dbnraw).sum(0, keepdim=True)
        dbnvar = -0.5 * (bnvar + 1e-5)**-1.5 * dbnvar_inv
        dbndiff2 = torch.ones_like(bndiff2) * dbnvar / (n - 1)
        dbndiff = bnvar_inv * dbnraw + 2 * bndiff * dbndiff2
        dbnmeani = -dbndiff.sum(0, keepdim=True)
        dhprebn = dbndiff + dbnmeani / n
        out.update(dbnraw=dbnraw, dbnvar_inv=dbnvar_inv, dbnvar=dbnvar, dbndiff2=dbndiff2,
                   dbndiff=dbndiff, dbnmeani=dbnmeani)
    out['dhprebn'] = dhprebn
    out['dembcat'] = dhprebn @ W1.T
    out['dW1'] = embcat.T @ dhprebn
    out['db1'] = dhprebn.sum(0)
    out['demb'] = out['dembcat'].view(Xb.shape[0], Xb.shape[1], -1)
    out['dC'] = torch.zeros_like(C).index_put_((Xb.view(-1),), out['demb'].view(-1, C.shape[1]))
    return out
"""

EX1_H7B = """\
out = backprop(Xb, Yb)
for key in out:
    compare(key[1:], out[key], eval(key[1:]))
"""

EX2_H7 = """\
# backward pass
out_ce = backprop(Xb, Yb, fused_ce=True)
compare('logits', out_ce['dlogits'], logits)
"""

EX3_H7 = """\
# backward pass
out_bn = backprop(Xb, Yb, fused_bn=True)
compare('hprebn', out_bn['dhprebn'], hprebn)
"""

TRAIN_BACKWARD_H7 = """\
out = backprop(Xb, Yb, fused_ce=True, fused_bn=True)
if i < 2:  # check my gradients against pytorch for the first steps
  loss.backward()
  for k, p in zip(['C', 'W1', 'b1', 'W2', 'b2', 'bngain', 'bnbias'], parameters):
    compare(k, out['d' + k], p)
"""

UPDATE_H7 = """\
# update
lr = 0.1 if i < 100000 else 0.01 # step learning rate decay
with torch.no_grad():
  for p, grad in zip(parameters, [out['d' + k] for k in ['C', 'W1', 'b1', 'W2', 'b2', 'bngain', 'bnbias']]):
    p -= lr * grad
"""

case("switch_function_check_in_loop_dC_index_put", [
    *setup(), EX1_HEAD, EX1_H7, EX1_H7B,
    EX2_FORWARD, EX2_H7, EX3_FORWARD, EX3_H7,
    train_cell(TRAIN_BACKWARD_H7, UPDATE_H7, no_grad=False), *EVAL,
], structures=[4, 1, 8], wrong=_steps("C", LOOP))

# ---------------------------------------------------------------------------------------------
# 8. A class whose local derivatives are lambdas held as static methods and whose three
#    backward methods are decorated with @torch.no_grad(); compared by walking vars() of the
#    object. Exercises 2 and 3 are subclasses overriding a method each; the training loop
#    runs the exercise-3 subclass. Right throughout.

EX1_H8 = """\
class Ninja:
    dtanh = staticmethod(lambda out: 1 - out**2)
    dpow = staticmethod(lambda x, p: p * x**(p - 1))
    rows = staticmethod(lambda t: t.sum(1, keepdim=True))
    cols = staticmethod(lambda t: t.sum(0, keepdim=True))

    def __init__(self, n, Yb):
        self.n, self.Yb = n, Yb

    @torch.no_grad()
    def head(self):
        n = self.n
        self.dlogprobs = torch.zeros_like(logprobs)
        self.dlogprobs[range(n), self.Yb] = -1.0 / n
        self.dprobs = self.dlogprobs / probs
        self.dcounts_sum_inv = self.rows(counts * self.dprobs)
        self.dcounts_sum = self.dpow(counts_sum, -1) * self.dcounts_sum_inv
        self.dcounts = counts_sum_inv * self.dprobs + self.dcounts_sum
        self.dnorm_logits = counts * self.dcounts
        self.dlogit_maxes = -self.rows(self.dnorm_logits)
        self.dlogits = self.dnorm_logits + (logits == logit_maxes).float() * self.dlogit_maxes

    @torch.no_grad()
    def body(self):
        n = self.n
        self.dh = self.dlogits @ W2.T
        self.dW2 = h.T @ self.dlogits
        self.db2 = self.dlogits.sum(0)
        self.dhpreact = self.dtanh(h) * self.dh
        self.dbngain = self.cols(bnraw * self.dhpreact)
        self.dbnbias = self.cols(self.dhpreact)
        self.dbnraw = bngain * self.dhpreact
        self.dbnvar_inv = self.cols(bndiff * self.dbnraw)
        self.dbnvar = self.dpow(bnvar + 1e-5, -0.5) * self.dbnvar_inv
        self.dbndiff2 = torch.full_like(bndiff2, 1.0 / (n - 1)) * self.dbnvar
        self.dbndiff = bnvar_inv * self.dbnraw + self.dpow(bndiff, 2) * self.dbndiff2
        self.dbnmeani = -self.cols(self.dbndiff)
        self.dhprebn = self.dbndiff + self.dbnmeani / n

    @torch.no_grad()
    def tail(self):
        self.dembcat = self.dhprebn @ W1.T
        self.dW1 = embcat.T @ self.dhprebn
        self.db1 = self.dhprebn.sum(0)
        self.demb = self.dembcat.view(emb.shape)
        self.dC = torch.zeros_like(C)
        for i in range(emb.shape[0]):
            for j in range(emb.shape[1]):
                self.dC[Xb[i, j]] += self.demb[i, j]

    def __call__(self):
        self.head()
        self.body()
        self.tail()
        return self
"""

EX1_H8B = """\
ninja = Ninja(n, Yb)()
for attr, val in vars(ninja).items():
    if attr.startswith('d') and attr[1:] in globals():
        cmp(attr[1:], val, globals()[attr[1:]])
"""

EX2_H8 = """\
# backward pass
class FusedNinja(Ninja):
    @torch.no_grad()
    def head(self):
        self.dlogits = F.softmax(logits, 1)
        self.dlogits[range(self.n), self.Yb] -= 1
        self.dlogits /= self.n

fused = FusedNinja(n, Yb)
fused.head()
cmp('logits', fused.dlogits, logits)
"""

EX3_H8 = """\
# backward pass
class FusedNinja2(FusedNinja):
    @torch.no_grad()
    def body(self):
        n, dy = self.n, None
        self.dh = self.dlogits @ W2.T
        self.dW2 = h.T @ self.dlogits
        self.db2 = self.dlogits.sum(0)
        dy = self.dhpreact = self.dtanh(h) * self.dh
        self.dbngain = self.cols(bnraw * dy)
        self.dbnbias = self.cols(dy)
        self.dhprebn = bngain * bnvar_inv / n * (n * dy - dy.sum(0) - n / (n - 1) * bnraw * self.cols(dy * bnraw))

fused2 = FusedNinja2(n, Yb)()
cmp('hprebn', fused2.dhprebn, hprebn)
"""

TRAIN_BACKWARD_H8 = """\
nj = FusedNinja2(n, Yb)()
grads = [nj.dC, nj.dW1, nj.db1, nj.dW2, nj.db2, nj.dbngain, nj.dbnbias]
"""

case("class_static_lambdas_no_grad_methods", [
    *setup(), EX1_HEAD, EX1_H8, EX1_H8B,
    EX2_FORWARD, EX2_H8, EX3_FORWARD, EX3_H8,
    train_cell(TRAIN_BACKWARD_H8), *EVAL,
], structures=[2, 5, 6, 9])

# ---------------------------------------------------------------------------------------------
# 9. A function per layer returning a tuple of that layer's gradients, the tuples pushed onto
#    one list (each layer's input gradient taken from the list's end) and the list unpacked
#    into the lecture's names for the lecture's cmps. Exercise 2 adds 1 at the targets instead
#    of subtracting it; exercise 3 forgets bngain; the training loop calls both, so it is
#    wrong too.

EX1_H9 = """\
def softmax_nll_backward(Yb, n):
    dlogprobs = torch.zeros_like(logprobs)
    dlogprobs[range(n), Yb] = -1.0/n
    dprobs = dlogprobs / probs
    dcounts_sum_inv = (dprobs * counts).sum(1, keepdim=True)
    dcounts_sum = -counts_sum**-2 * dcounts_sum_inv
    dcounts = dprobs * counts_sum_inv + torch.ones_like(counts) * dcounts_sum
    dnorm_logits = dcounts * counts
    dlogit_maxes = -dnorm_logits.sum(1, keepdim=True)
    dlogits = dnorm_logits + F.one_hot(logits.max(1).indices, logits.shape[1]) * dlogit_maxes
    return dlogprobs, dprobs, dcounts_sum_inv, dcounts_sum, dcounts, dnorm_logits, dlogit_maxes, dlogits

def output_backward(dlogits):
    dh = dlogits @ W2.T
    return dh, h.T @ dlogits, dlogits.sum(0), (1 - h**2) * dh

def batchnorm_atomic_backward(dhpreact, n):
    dbngain = (bnraw * dhpreact).sum(0, keepdim=True)
    dbnbias = dhpreact.sum(0, keepdim=True)
    dbnraw = bngain * dhpreact
    dbnvar_inv = (bndiff * dbnraw).sum(0, keepdim=True)
    dbnvar = -0.5 * (bnvar + 1e-5)**-1.5 * dbnvar_inv
    dbndiff2 = torch.ones_like(bndiff2) * dbnvar / (n-1)
    dbndiff = bnvar_inv * dbnraw + 2 * bndiff * dbndiff2
    dbnmeani = -dbndiff.sum(0, keepdim=True)
    dhprebn = dbndiff + dbnmeani / n
    return dbngain, dbnbias, dbnraw, dbnvar_inv, dbnvar, dbndiff2, dbndiff, dbnmeani, dhprebn

def input_backward(dhprebn):
    dembcat = dhprebn @ W1.T
    demb = dembcat.view(emb.shape)
    dC = torch.zeros_like(C)
    dC.index_add_(0, Xb.view(-1), demb.view(-1, C.shape[1]))
    return dembcat, embcat.T @ dhprebn, dhprebn.sum(0), demb, dC
"""

EX1_H9B = """\
stack = []
stack.extend(softmax_nll_backward(Yb, n))
stack.extend(output_backward(stack[-1]))
stack.extend(batchnorm_atomic_backward(stack[-1], n))
stack.extend(input_backward(stack[-1]))
print(len(stack))

(dlogprobs, dprobs, dcounts_sum_inv, dcounts_sum, dcounts, dnorm_logits, dlogit_maxes, dlogits,
 dh, dW2, db2, dhpreact,
 dbngain, dbnbias, dbnraw, dbnvar_inv, dbnvar, dbndiff2, dbndiff, dbnmeani, dhprebn,
 dembcat, dW1, db1, demb, dC) = stack
"""

EX1_H9C = "\n".join(f"cmp('{t}', d{t}, {t})" for t in CMP_NAMES) + "\n"

EX2_H9 = """\
# backward pass
def fused_ce_backward(logits, Yb):
    n = logits.shape[0]
    d = F.softmax(logits, 1)
    d[range(n), Yb] += 1
    return d / n

dlogits = fused_ce_backward(logits, Yb)
cmp('logits', dlogits, logits)
"""

EX3_H9 = """\
# backward pass
def fused_bn_backward(dhpreact):
    n = dhpreact.shape[0]
    dhprebn = bnvar_inv / n * (n * dhpreact - dhpreact.sum(0) - n / (n - 1) * bnraw * (dhpreact * bnraw).sum(0))
    return dhprebn, (bnraw * dhpreact).sum(0, keepdim=True), dhpreact.sum(0, keepdim=True)

dhprebn = fused_bn_backward(dhpreact)[0]
cmp('hprebn', dhprebn, hprebn)
"""

TRAIN_BACKWARD_H9 = """\
stack = []
stack.append(fused_ce_backward(logits, Yb))
stack.extend(output_backward(stack[-1]))
stack.extend(fused_bn_backward(stack[-1]))
dlogits, dh, dW2, db2, dhpreact, dhprebn, dbngain, dbnbias = stack
dembcat, dW1, db1, demb, dC = input_backward(dhprebn)
grads = [dC, dW1, db1, dW2, db2, dbngain, dbnbias]
"""

case("layer_tuples_on_a_stack_ce_sign_bn_no_gain", [
    *setup(), EX1_HEAD, EX1_H9, EX1_H9B, EX1_H9C,
    EX2_FORWARD, EX2_H9, EX3_FORWARD, EX3_H9,
    train_cell(TRAIN_BACKWARD_H9), *EVAL,
], structures=[3, 7, 9], wrong=_steps(CE, BN, LOOP))

# ---------------------------------------------------------------------------------------------
# 10. A @torch.no_grad() function returning a nested dict, one inner dict per layer with the
#     layer's own short keys ('W', 'b', 'gain', 'table'), each gradient compared with an
#     explicit cmp; the training loop's backward is another such function. Right throughout.

EX1_H10 = """\
@torch.no_grad()
def backward_layers(n):
    G = {'loss': {}, 'softmax': {}, 'out': {}, 'act': {}, 'bn': {}, 'hidden': {}, 'emb': {}}
    L, S, O, A, B, H, E = (G[k] for k in G)
    L['logprobs'] = torch.zeros_like(logprobs)
    L['logprobs'][range(n), Yb] = -1.0 / n
    S['probs'] = L['logprobs'] / probs
    S['sum_inv'] = (counts * S['probs']).sum(1, keepdim=True)
    S['sum'] = -counts_sum**-2 * S['sum_inv']
    S['counts'] = counts_sum_inv * S['probs'] + S['sum']
    S['shifted'] = counts * S['counts']
    S['maxes'] = -S['shifted'].sum(1, keepdim=True)
    S['logits'] = S['shifted'] + F.one_hot(logits.max(1).indices, logits.shape[1]) * S['maxes']
    O['x'], O['W'], O['b'] = S['logits'] @ W2.T, h.T @ S['logits'], S['logits'].sum(0)
    A['pre'] = (1 - h**2) * O['x']
    B['gain'] = (bnraw * A['pre']).sum(0, keepdim=True)
    B['bias'] = A['pre'].sum(0, keepdim=True)
    B['raw'] = bngain * A['pre']
    B['var_inv'] = (bndiff * B['raw']).sum(0, keepdim=True)
    B['var'] = -0.5 * (bnvar + 1e-5)**-1.5 * B['var_inv']
    B['diff2'] = torch.ones_like(bndiff2) * B['var'] / (n - 1)
    B['diff'] = bnvar_inv * B['raw'] + 2 * bndiff * B['diff2']
    B['mean'] = -B['diff'].sum(0, keepdim=True)
    B['in'] = B['diff'] + B['mean'] / n
    H['x'], H['W'], H['b'] = B['in'] @ W1.T, embcat.T @ B['in'], B['in'].sum(0)
    E['emb'] = H['x'].view(emb.shape)
    E['table'] = torch.zeros_like(C)
    for i in range(Xb.shape[0]):
        for j in range(Xb.shape[1]):
            E['table'][Xb[i, j]] += E['emb'][i, j]
    return G

grads = backward_layers(n)
"""

EX1_H10B = """\
cmp('logprobs', grads['loss']['logprobs'], logprobs)
cmp('probs', grads['softmax']['probs'], probs)
cmp('counts_sum_inv', grads['softmax']['sum_inv'], counts_sum_inv)
cmp('counts_sum', grads['softmax']['sum'], counts_sum)
cmp('counts', grads['softmax']['counts'], counts)
cmp('norm_logits', grads['softmax']['shifted'], norm_logits)
cmp('logit_maxes', grads['softmax']['maxes'], logit_maxes)
cmp('logits', grads['softmax']['logits'], logits)
cmp('h', grads['out']['x'], h)
cmp('W2', grads['out']['W'], W2)
cmp('b2', grads['out']['b'], b2)
cmp('hpreact', grads['act']['pre'], hpreact)
cmp('bngain', grads['bn']['gain'], bngain)
cmp('bnbias', grads['bn']['bias'], bnbias)
cmp('bnraw', grads['bn']['raw'], bnraw)
cmp('bnvar_inv', grads['bn']['var_inv'], bnvar_inv)
cmp('bnvar', grads['bn']['var'], bnvar)
cmp('bndiff2', grads['bn']['diff2'], bndiff2)
cmp('bndiff', grads['bn']['diff'], bndiff)
cmp('bnmeani', grads['bn']['mean'], bnmeani)
cmp('hprebn', grads['bn']['in'], hprebn)
cmp('embcat', grads['hidden']['x'], embcat)
cmp('W1', grads['hidden']['W'], W1)
cmp('b1', grads['hidden']['b'], b1)
cmp('emb', grads['emb']['emb'], emb)
cmp('C', grads['emb']['table'], C)
"""

EX2_H10 = """\
# backward pass
grads['softmax']['logits'] = (F.softmax(logits, 1) - F.one_hot(Yb, logits.shape[1]).float()) / n
cmp('logits', grads['softmax']['logits'], logits)
"""

EX3_H10 = """\
# backward pass
dpre = grads['act']['pre']
grads['bn']['in'] = bngain * bnvar_inv / n * (n * dpre - dpre.sum(0) - n / (n - 1) * bnraw * (dpre * bnraw).sum(0))
cmp('hprebn', grads['bn']['in'], hprebn)
"""

EX4_H10_DEF = """\
@torch.no_grad()
def backward_layers_fast(n):
    G = {'out': {}, 'act': {}, 'bn': {}, 'hidden': {}, 'emb': {}}
    dlogits = (F.softmax(logits, 1) - F.one_hot(Yb, logits.shape[1]).float()) / n
    G['out']['W'], G['out']['b'] = h.T @ dlogits, dlogits.sum(0)
    dpre = G['act']['pre'] = (1 - h**2) * (dlogits @ W2.T)
    G['bn']['gain'] = (bnraw * dpre).sum(0, keepdim=True)
    G['bn']['bias'] = dpre.sum(0, keepdim=True)
    din = G['bn']['in'] = bngain * bnvar_inv / n * (n * dpre - dpre.sum(0) - n / (n - 1) * bnraw * (dpre * bnraw).sum(0))
    G['hidden']['W'], G['hidden']['b'] = embcat.T @ din, din.sum(0)
    G['emb']['table'] = torch.zeros_like(C).index_add_(0, Xb.view(-1), (din @ W1.T).view(-1, C.shape[1]))
    return G
"""

TRAIN_BACKWARD_H10 = """\
G = backward_layers_fast(n)
grads = [G['emb']['table'], G['hidden']['W'], G['hidden']['b'], G['out']['W'], G['out']['b'],
         G['bn']['gain'], G['bn']['bias']]
"""

case("nested_dict_per_layer_no_grad_function", [
    *setup(), EX1_HEAD, EX1_H10, EX1_H10B,
    EX2_FORWARD, EX2_H10, EX3_FORWARD, EX3_H10, EX4_H10_DEF,
    train_cell(TRAIN_BACKWARD_H10), *EVAL,
], structures=[1, 4, 6, 9])

def write(case: dict, folder: Path) -> Path:
    path = Path(folder) / f"{case['name']}.ipynb"
    path.write_text(json.dumps(case["notebook"], indent=1))
    return path
