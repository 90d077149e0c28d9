"""A second held-out corpus of learners' notebooks for "Becoming a backprop ninja" (makemore part 4).

Sixteen filled-in lecture notebooks, written as different learners write them: the plain lecture
layout with a few slips, answers with and without the exercise comments, one statement per cell,
comparisons gathered at the end or run in loops, repeated attempts, the learner's own batch-size
constants and comparison helpers, whole gradients written in one line late, cells that mix
answers with file reads, plots, seeding, prints and magics, and two learners who renamed the
forward pass. Written independently of the grader and of the other corpora; each case's labels
were measured with tests/notebook_corpus_truth.py:

    .venv/bin/python tests/notebook_corpus_truth.py notebook_corpus_holdout2

CASES: each {"name", "notebook", "right", "wrong", "renamed_forward"}; steps neither right nor
wrong were not attempted. ALIASES: learner name -> lecture name, for the renamed cases. CASCADE:
steps whose own line is right but which are wrong because they build on the learner's own earlier
wrong gradient (they are in "wrong" too).
"""

from __future__ import annotations

import json
import re
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

# which forward tensors a learner compares after each line's gradients
STEP_CMPS = {
    "logprobs": ["logprobs"], "probs": ["probs"], "counts_sum_inv": ["counts_sum_inv"],
    "counts_sum": ["counts_sum"], "counts": ["counts"], "norm_logits": ["norm_logits"],
    "logit_maxes": ["logit_maxes"], "logits": ["logits"], "h": ["h", "W2", "b2"],
    "hpreact": ["hpreact"], "bngain": ["bngain", "bnraw", "bnbias"],
    "bnvar_inv": ["bnvar_inv"], "bnvar": ["bnvar"], "bndiff2": ["bndiff2"],
    "bndiff": ["bndiff"], "bnmeani": ["bnmeani"], "hprebn": ["hprebn"],
    "embcat": ["embcat", "W1", "b1"], "emb": ["emb"], "C": ["C"],
}
ORDER = list(STEP_CMPS)


def _steps(*names: str) -> set[str]:
    return {n if "/" in n else "atomic/" + n for n in names}


# ---------------------------------------------------------------------------------------------
# cells

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

EX2_RIGHT = """\
# backward pass

# -----------------
dlogits = F.softmax(logits, 1)
dlogits[range(n), Yb] -= 1
dlogits /= n
# -----------------

cmp('logits', dlogits, logits) # I can only get approximate to be true, my maxdiff is 6e-9
"""

EX3_RIGHT = """\
# backward pass

# before we had:
# dbnraw = bngain * dhpreact
# dbndiff = bnvar_inv * dbnraw
# dbnvar_inv = (bndiff * dbnraw).sum(0, keepdim=True)
# dbnvar = (-0.5*(bnvar + 1e-5)**-1.5) * dbnvar_inv
# dbndiff2 = (1.0/(n-1))*torch.ones_like(bndiff2) * dbnvar
# dbndiff += (2*bndiff) * dbndiff2
# dhprebn = dbndiff.clone()
# dbnmeani = (-dbndiff).sum(0)
# dhprebn += 1.0/n * (torch.ones_like(hprebn) * dbnmeani)

# calculate dhprebn given dhpreact (i.e. backprop through the batchnorm)
# (you'll also need to use some of the variables from the forward pass up above)

# -----------------
dhprebn = bngain*bnvar_inv/n * (n*dhpreact - dhpreact.sum(0) - n/(n-1)*bnraw*(dhpreact*bnraw).sum(0))
# -----------------

cmp('hprebn', dhprebn, hprebn) # I can only get approximate to be true, my maxdiff is 9e-10
"""

INIT = """\
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
"""

TRAIN_FORWARD = """\
# kick off optimization
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
#loss.backward() # use this for correctness comparisons, delete it later!
"""

TRAIN_BACKWARD = """\
# manual backprop! #swole_doge_meme
# -----------------
dlogits = F.softmax(logits, 1)
dlogits[range(n), Yb] -= 1
dlogits /= n
# 2nd layer backprop
dh = dlogits @ W2.T
dW2 = h.T @ dlogits
db2 = dlogits.sum(0)
# tanh
dhpreact = (1.0 - h**2) * dh
# batchnorm backprop
dbngain = (bnraw * dhpreact).sum(0, keepdim=True)
dbnbias = dhpreact.sum(0, keepdim=True)
dhprebn = bngain*bnvar_inv/n * (n*dhpreact - dhpreact.sum(0) - n/(n-1)*bnraw*(dhpreact*bnraw).sum(0))
# 1st layer
dembcat = dhprebn @ W1.T
dW1 = embcat.T @ dhprebn
db1 = dhprebn.sum(0)
# embedding
demb = dembcat.view(emb.shape)
dC = torch.zeros_like(C)
for k in range(Xb.shape[0]):
  for j in range(Xb.shape[1]):
    ix = Xb[k,j]
    dC[ix] += demb[k,j]
grads = [dC, dW1, db1, dW2, db2, dbngain, dbnbias]
# -----------------
"""

TRAIN_UPDATE = """\
# update
lr = 0.1 if i < 100000 else 0.01 # step learning rate decay
for p, grad in zip(parameters, grads):
  #p.data += -lr * p.grad # old way of cheems doge (using PyTorch grad from .backward())
  p.data += -lr * grad # new way of swole doge TODO: enable
"""

TRAIN_TAIL = """\
# track stats
if i % 10000 == 0: # print every once in a while
  print(f'{i:7d}/{max_steps:7d}: {loss.item():.4f}')
lossi.append(loss.log10().item())
"""


def train_cell(backward: str = TRAIN_BACKWARD, update: str = TRAIN_UPDATE, *,
               forward: str = TRAIN_FORWARD, head: str = "", no_grad: bool = True,
               init: str = INIT) -> str:
    """The lecture's exercise-4 cell: parameters, then the loop over steps."""
    body = "\n".join(part.rstrip("\n") for part in (forward, backward, update, TRAIN_TAIL))
    if no_grad:
        loop = ("# use this context manager for efficiency once your backward pass is written (TODO)\n"
                "with torch.no_grad():\n\n  # kick off optimization\n  for i in range(max_steps):\n"
                + textwrap.indent(body, "    "))
    else:
        loop = "for i in range(max_steps):\n" + textwrap.indent(body, "  ")
    settings = ("max_steps = 200000\nbatch_size = 32\nn = batch_size # convenience\nlossi = []\n")
    return f"{head}{init}\n# same optimization as last time\n{settings}\n{loop}\n"


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

# Exercise 1's lines, right, in one learner's words (the lecture's names and its `n`)
RIGHT = {
    "logprobs": "dlogprobs = torch.zeros_like(logprobs)\ndlogprobs[range(n), Yb] = -1.0/n",
    "probs": "dprobs = (1.0 / probs) * dlogprobs",
    "counts_sum_inv": "dcounts_sum_inv = (counts * dprobs).sum(1, keepdim=True)\n"
                      "dcounts = counts_sum_inv * dprobs",
    "counts_sum": "dcounts_sum = (-counts_sum**-2) * dcounts_sum_inv",
    "counts": "dcounts += torch.ones_like(counts) * dcounts_sum",
    "norm_logits": "dnorm_logits = counts * dcounts",
    "logit_maxes": "dlogits = dnorm_logits.clone()\n"
                   "dlogit_maxes = (-dnorm_logits).sum(1, keepdim=True)",
    "logits": "dlogits += F.one_hot(logits.max(1).indices, num_classes=logits.shape[1]) "
              "* dlogit_maxes",
    "h": "dh = dlogits @ W2.T\ndW2 = h.T @ dlogits\ndb2 = dlogits.sum(0)",
    "hpreact": "dhpreact = (1.0 - h**2) * dh",
    "bngain": "dbngain = (bnraw * dhpreact).sum(0, keepdim=True)\ndbnraw = bngain * dhpreact\n"
              "dbnbias = dhpreact.sum(0, keepdim=True)",
    "bnvar_inv": "dbndiff = bnvar_inv * dbnraw\n"
                 "dbnvar_inv = (bndiff * dbnraw).sum(0, keepdim=True)",
    "bnvar": "dbnvar = (-0.5*(bnvar + 1e-5)**-1.5) * dbnvar_inv",
    "bndiff2": "dbndiff2 = (1.0/(n-1))*torch.ones_like(bndiff2) * dbnvar",
    "bndiff": "dbndiff += (2*bndiff) * dbndiff2",
    "bnmeani": "dhprebn = dbndiff.clone()\ndbnmeani = (-dbndiff).sum(0)",
    "hprebn": "dhprebn += 1.0/n * (torch.ones_like(hprebn) * dbnmeani)",
    "embcat": "dembcat = dhprebn @ W1.T\ndW1 = embcat.T @ dhprebn\ndb1 = dhprebn.sum(0)",
    "emb": "demb = dembcat.view(emb.shape)",
    "C": "dC = torch.zeros_like(C)\nfor k in range(Xb.shape[0]):\n  for j in range(Xb.shape[1]):\n"
         "    ix = Xb[k,j]\n    dC[ix] += demb[k,j]",
}


def lines(**over: str) -> dict[str, str]:
    out = dict(RIGHT)
    out.update(over)
    return out


def cmps(step: str, fn: str = "cmp") -> str:
    return "\n".join(f"{fn}('{t}', d{t}, {t})" for t in STEP_CMPS[step])


def one_cell(code: dict[str, str], steps=ORDER) -> str:
    """The lecture's single exercise-1 cell: the answers, then every cmp at its foot."""
    body = "\n".join(code[s] for s in steps)
    calls = "\n".join(cmps(s) for s in steps)
    return f"{EX1_HEAD}\n# -----------------\n{body}\n# -----------------\n\n{calls}\n"


def cell_per_step(code: dict[str, str], steps=ORDER) -> list[str]:
    return [EX1_HEAD] + [f"{code[s]}\n{cmps(s)}" for s in steps]


def rename(text: str, names: dict[str, str]) -> str:
    """The learner's own names (lecture -> learner) for tensors and their gradients."""
    for old in sorted(names, key=len, reverse=True):
        text = re.sub(rf"\b(d?){re.escape(old)}\b", lambda m, o=old: m.group(1) + names[o], text)
    return text


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


def case(name: str, cells: list, wrong: set[str], skipped: set[str] = frozenset(),
         cascade: set[str] = frozenset(), aliases: dict[str, str] | None = None) -> None:
    wrong = set(wrong) | set(cascade)
    right = set(ALL_STEPS) - wrong - set(skipped)
    CASES.append({"name": name, "notebook": notebook(cells), "right": right, "wrong": wrong,
                  "renamed_forward": aliases is not None})
    if cascade:
        CASCADE[name] = set(cascade)
    if aliases is not None:
        ALIASES[name] = dict(aliases)


# ---------------------------------------------------------------------------------------------
# 1. The lecture's layout, one exercise-1 cell; dC overwritten instead of accumulated, and
#    exercise 2 without the mean's 1/n.

case("lecture_dC_overwrites_ce_no_mean", [
    *setup(),
    one_cell(lines(C="dC = torch.zeros_like(C)\nfor k in range(Xb.shape[0]):\n"
                     "  for j in range(Xb.shape[1]):\n    ix = Xb[k,j]\n    dC[ix] = demb[k,j]")),
    EX2_FORWARD,
    EX2_RIGHT.replace("dlogits /= n\n", ""),
    "logits.shape, Yb.shape",
    "F.softmax(logits, 1)[0]",
    "plt.figure(figsize=(8, 8))\nplt.imshow(dlogits.detach(), cmap='gray')",
    EX3_FORWARD, EX3_RIGHT, train_cell(), *EVAL,
], wrong=_steps("C", CE))

# 2. The lecture's layout, a cell per line; dbndiff2 divided by n (not n-1). What builds on it
#    is wrong too, except dbnmeani: the slip's branch sums to zero over the batch. dbnbias
#    without keepdim (broadcasts, so right).

case("lecture_cells_bndiff2_over_n", [
    *setup(),
    *cell_per_step(lines(
        bndiff2="dbndiff2 = (1.0/n)*torch.ones_like(bndiff2) * dbnvar",
        bngain="dbngain = (bnraw * dhpreact).sum(0, keepdim=True)\ndbnraw = bngain * dhpreact\n"
               "dbnbias = dhpreact.sum(0)")),
    EX2_FORWARD, EX2_RIGHT, "plt.imshow(dlogits.detach(), cmap='gray')",
    EX3_FORWARD, EX3_RIGHT, train_cell(), *EVAL,
], wrong=_steps("bndiff2"), cascade=_steps("bndiff", "hprebn", "embcat", "emb", "C"))

# 3. The lecture's layout, a cell per line: dW2 transposed (cmp raises on the shapes), dbnmeani
#    without its minus sign; the training loop's list has dbngain and dbnbias swapped.

case("lecture_cells_W2_T_bnmeani_sign_grads_swapped", [
    *setup(),
    *cell_per_step(lines(
        h="dh = dlogits @ W2.T\ndW2 = dlogits.T @ h\ndb2 = dlogits.sum(0)",
        bnmeani="dhprebn = dbndiff.clone()\ndbnmeani = dbndiff.sum(0)")),
    EX2_FORWARD, EX2_RIGHT, EX3_FORWARD, EX3_RIGHT,
    train_cell(TRAIN_BACKWARD.replace("grads = [dC, dW1, db1, dW2, db2, dbngain, dbnbias]",
                                      "grads = [dC, dW1, db1, dW2, db2, dbnbias, dbngain]")),
    *EVAL,
], wrong=_steps("h", "bnmeani", LOOP), cascade=_steps("hprebn", "embcat", "emb", "C"))

# 4. The lecture's layout, one cell: dbngain not summed over the batch; exercise 3 with the
#    biased variance's factor; dC with index_add_.

case("lecture_bngain_unsummed_bn_biased", [
    *setup(),
    one_cell(lines(
        bngain="dbngain = bnraw * dhpreact\ndbnraw = bngain * dhpreact\n"
               "dbnbias = dhpreact.sum(0, keepdim=True)",
        C="dC = torch.zeros_like(C)\ndC.index_add_(0, Xb.view(-1), demb.view(-1, n_embd))")),
    EX2_FORWARD, EX2_RIGHT, EX3_FORWARD,
    EX3_RIGHT.replace("n/(n-1)*bnraw", "bnraw"),
    train_cell(), *EVAL,
], wrong=_steps("bngain", BN))

# 5. No exercise comments, answers spread over a few cells, every comparison at the end, a
#    batch-size constant of the learner's own. dhprebn is dbndiff itself (no clone), so the
#    += also changes dbndiff before it is compared. Exercise 3 left as the starter's placeholder;
#    the training loop updates with `p -= lr * grad` under torch.no_grad().

TRAIN_5 = """\
n_embd, n_hidden = 10, 200
g = torch.Generator().manual_seed(2147483647)
C = torch.randn((vocab_size, n_embd), generator=g)
W1 = torch.randn((n_embd * block_size, n_hidden), generator=g) * (5/3)/((n_embd * block_size)**0.5)
b1 = torch.randn(n_hidden, generator=g) * 0.1
W2 = torch.randn((n_hidden, vocab_size), generator=g) * 0.1
b2 = torch.randn(vocab_size, generator=g) * 0.1
bngain = torch.randn((1, n_hidden))*0.1 + 1.0
bnbias = torch.randn((1, n_hidden))*0.1
parameters = [C, W1, b1, W2, b2, bngain, bnbias]
for p in parameters:
    p.requires_grad = True

max_steps = 200000
B = 32
lossi = []
for i in range(max_steps):
    ix = torch.randint(0, Xtr.shape[0], (B,), generator=g)
    Xb, Yb = Xtr[ix], Ytr[ix]
    emb = C[Xb]
    embcat = emb.view(B, -1)
    hprebn = embcat @ W1 + b1
    mu = hprebn.mean(0, keepdim=True)
    bnvar = hprebn.var(0, keepdim=True, unbiased=True)
    bnvar_inv = (bnvar + 1e-5)**-0.5
    bnraw = (hprebn - mu) * bnvar_inv
    hpreact = bngain * bnraw + bnbias
    h = torch.tanh(hpreact)
    logits = h @ W2 + b2
    loss = F.cross_entropy(logits, Yb)

    dlogits = (F.softmax(logits, 1) - F.one_hot(Yb, vocab_size)) / B
    dh, dW2, db2 = dlogits @ W2.T, h.T @ dlogits, dlogits.sum(0)
    dhpreact = (1 - h**2) * dh
    dbngain = (bnraw * dhpreact).sum(0, keepdim=True)
    dbnbias = dhpreact.sum(0, keepdim=True)
    dhprebn = bngain * bnvar_inv / B * (B * dhpreact - dhpreact.sum(0) - B/(B-1) * bnraw * (dhpreact * bnraw).sum(0))
    dembcat, dW1, db1 = dhprebn @ W1.T, embcat.T @ dhprebn, dhprebn.sum(0)
    demb = dembcat.view(emb.shape)
    dC = torch.zeros_like(C)
    dC.index_add_(0, Xb.flatten(), demb.flatten(0, 1))
    grads = [dC, dW1, db1, dW2, db2, dbngain, dbnbias]

    lr = 0.1 if i < 100000 else 0.01
    with torch.no_grad():
        for p, grad in zip(parameters, grads):
            p -= lr * grad

    if i % 10000 == 0:
        print(f'{i:7d}/{max_steps:7d}: {loss.item():.4f}')
    lossi.append(loss.log10().item())
"""

case("bare_cells_cmps_at_end_aliased_dhprebn", [
    *setup(),
    "B = Xb.shape[0]\nB",
    "dlogprobs = torch.zeros_like(logprobs)\ndlogprobs[range(B), Yb] = -1/B\n"
    "dprobs = dlogprobs / probs\ndcounts_sum_inv = (dprobs * counts).sum(1, keepdim=True)\n"
    "dcounts = dprobs * counts_sum_inv\ndcounts_sum = -dcounts_sum_inv / counts_sum**2\n"
    "dcounts += dcounts_sum\ndnorm_logits = dcounts * counts",
    "dlogits = dnorm_logits.clone()\ndlogit_maxes = -dnorm_logits.sum(1, keepdim=True)\n"
    "dlogits += F.one_hot(logits.argmax(1), 27) * dlogit_maxes\n"
    "dh = dlogits @ W2.T\ndW2 = h.T @ dlogits\ndb2 = dlogits.sum(0)\n"
    "dhpreact = (1 - h**2) * dh",
    "dbngain = (dhpreact * bnraw).sum(0, keepdim=True)\ndbnbias = dhpreact.sum(0, keepdim=True)\n"
    "dbnraw = dhpreact * bngain\ndbnvar_inv = (dbnraw * bndiff).sum(0, keepdim=True)\n"
    "dbndiff = dbnraw * bnvar_inv\ndbnvar = -0.5 * (bnvar + 1e-5)**-1.5 * dbnvar_inv\n"
    "dbndiff2 = torch.ones_like(bndiff2) * dbnvar / (B - 1)\ndbndiff += 2 * bndiff * dbndiff2\n"
    "dhprebn = dbndiff\ndbnmeani = -dbndiff.sum(0, keepdim=True)\ndhprebn += dbnmeani / B",
    "dembcat = dhprebn @ W1.T\ndW1 = embcat.T @ dhprebn\ndb1 = dhprebn.sum(0)\n"
    "demb = dembcat.view(B, block_size, -1)\ndC = torch.zeros_like(C)\n"
    "for i in range(B):\n    for j in range(block_size):\n        dC[Xb[i, j]] += demb[i, j]",
    "\n".join(f"cmp('{t}', d{t}, {t})" for s in ORDER for t in STEP_CMPS[s]),
    EX2_FORWARD.split("# now:\n")[1],
    "dlogits = (F.softmax(logits, 1) - F.one_hot(Yb, 27)) / B\ncmp('logits', dlogits, logits)",
    EX3_FORWARD.split("# now:\n")[1],
    "dhprebn = None # TODO\n# cmp('hprebn', dhprebn, hprebn)",
    TRAIN_5,
    EVAL[0],
], wrong=_steps("bndiff"), skipped={BN})

# 6. One statement per cell, each comparison its own cell; dbnmeani divided by n once too often
#    (what builds on it is wrong too), dC with `dC[Xb] += demb` (repeated rows are not
#    accumulated) and exercise 2 with the softmax over the wrong dimension; no exercise 4.

def _statements(code: str) -> list[str]:
    import ast
    tree = ast.parse(code)
    src = code.splitlines()
    return ["\n".join(src[node.lineno - 1:node.end_lineno]) for node in tree.body]


cells_6 = [EX1_HEAD]
for step, code in lines(
        probs="dprobs = probs**-1 * dlogprobs",
        bnmeani="dhprebn = dbndiff.clone()\ndbnmeani = (-dbndiff).sum(0) / n",
        emb="demb = dembcat.view(n, 3, 10)",
        C="dC = torch.zeros_like(C)\ndC[Xb] += demb").items():
    cells_6 += _statements(code)
    cells_6 += [f"cmp('{t}', d{t}, {t})" for t in STEP_CMPS[step]]

case("statement_per_cell", [
    *setup(), *cells_6,
    EX2_FORWARD,
    "dlogits = F.softmax(logits, 0)", "dlogits[range(n), Yb] -= 1", "dlogits /= n",
    "cmp('logits', dlogits, logits)",
    EX3_FORWARD,
    "dhprebn = bngain * bnvar_inv * (dhpreact - dhpreact.mean(0, keepdim=True) - bnraw * "
    "(dhpreact * bnraw).sum(0, keepdim=True) / (n - 1))",
    "cmp('hprebn', dhprebn, hprebn)",
], wrong=_steps("bnmeani", "C", CE), skipped={LOOP}, cascade=_steps("hprebn", "embcat", "emb"))

# 7. Answers in the lecture's one cell, comparisons in loops over lists; dbnvar with the wrong
#    power. dbnmeani survives it (dbndiff2 is constant down each column); the training loop's
#    list leaves out db1.

CMP_LOOP_7 = """\
checks = [
    ('logprobs', dlogprobs, logprobs), ('probs', dprobs, probs),
    ('counts_sum_inv', dcounts_sum_inv, counts_sum_inv), ('counts_sum', dcounts_sum, counts_sum),
    ('counts', dcounts, counts), ('norm_logits', dnorm_logits, norm_logits),
    ('logit_maxes', dlogit_maxes, logit_maxes), ('logits', dlogits, logits),
    ('h', dh, h), ('W2', dW2, W2), ('b2', db2, b2), ('hpreact', dhpreact, hpreact),
]
for name, mine, ref in checks:
    cmp(name, mine, ref)
"""

CMP_LOOP_7B = """\
names = ['bngain', 'bnbias', 'bnraw', 'bnvar_inv', 'bnvar', 'bndiff2', 'bndiff', 'bnmeani',
         'hprebn', 'embcat', 'W1', 'b1', 'emb', 'C']
mine = [dbngain, dbnbias, dbnraw, dbnvar_inv, dbnvar, dbndiff2, dbndiff, dbnmeani,
        dhprebn, dembcat, dW1, db1, demb, dC]
ref = [bngain, bnbias, bnraw, bnvar_inv, bnvar, bndiff2, bndiff, bnmeani,
       hprebn, embcat, W1, b1, emb, C]
for s, dt, t in zip(names, mine, ref):
    cmp(s, dt, t)
"""

_ex1_7 = lines(bnvar="dbnvar = (-0.5*(bnvar + 1e-5)**-0.5) * dbnvar_inv")
case("cmp_loops_bnvar_power_grads_missing_db1", [
    *setup(),
    f"{EX1_HEAD}\n" + "\n".join(_ex1_7[s] for s in ORDER),
    CMP_LOOP_7, CMP_LOOP_7B,
    EX2_FORWARD, EX2_RIGHT, EX3_FORWARD, EX3_RIGHT,
    train_cell(TRAIN_BACKWARD.replace("grads = [dC, dW1, db1, dW2, db2, dbngain, dbnbias]",
                                      "grads = [dC, dW1, dW2, db2, dbngain, dbnbias]")),
], wrong=_steps("bnvar", LOOP), cascade=_steps("bndiff2", "bndiff", "hprebn", "embcat", "emb",
                                               "C"))

# 8. Repeated attempts: dcounts_sum_inv unsummed then fixed (right); dbndiff2 right, then
#    "tidied" with 1/n at the end (wrong, compared last); dC's loops replaced by `dC[Xb] += demb`
#    at the end (wrong, compared last); exercise 2 wrong then right; exercise 3
#    right then "simplified" wrong.

cells_8 = cell_per_step(lines(
    counts_sum_inv="dcounts_sum_inv = dprobs * counts\ndcounts = counts_sum_inv * dprobs"))
cells_8.insert(4, "# oops, forgot the sum for the broadcast in the forward pass\n"
                  "dcounts_sum_inv = (dprobs * counts).sum(1, keepdim=True)\n"
                  "cmp('counts_sum_inv', dcounts_sum_inv, counts_sum_inv)")
cells_8.append("# vectorised dC, the loops are slow\ndC = torch.zeros_like(C)\ndC[Xb] += demb\n"
               "cmp('C', dC, C)")
cells_8.append("# cleaner version of dbndiff2 (variance is a mean, right?)\n"
               "dbndiff2 = torch.ones_like(bndiff2) * dbnvar / n\n"
               "cmp('bndiff2', dbndiff2, bndiff2)")

case("repeated_attempts", [
    *setup(), *cells_8,
    EX2_FORWARD,
    "# first try\ndlogits = F.softmax(logits, 1) / n\ndlogits[range(n), Yb] -= 1\n"
    "cmp('logits', dlogits, logits)",
    "# second try: subtract 1 before dividing\ndlogits = F.softmax(logits, 1)\n"
    "dlogits[range(n), Yb] -= 1\ndlogits /= n\ncmp('logits', dlogits, logits)",
    EX3_FORWARD, EX3_RIGHT,
    "# simplify: n/(n-1) is basically 1\n"
    "dhprebn = bngain*bnvar_inv/n * (n*dhpreact - dhpreact.sum(0) - bnraw*(dhpreact*bnraw).sum(0))\n"
    "cmp('hprebn', dhprebn, hprebn)",
    train_cell(), *EVAL[1:],
], wrong=_steps("bndiff2", "C", BN))

# 9. The learner's constants B and N; dhpreact with the pre-activation in place of tanh's
#    output, which everything below it builds on (exercise 3 included).

BATCH_9 = """\
B = 32 # batch size
ix = torch.randint(0, Xtr.shape[0], (B,), generator=g)
Xb, Yb = Xtr[ix], Ytr[ix] # batch X,Y
N = Xb.shape[0]
n = N
"""

_ex1_9 = {s: c.replace("range(n)", "range(N)").replace("1.0/n", "1.0/N").replace("(n-1)", "(B-1)")
          for s, c in lines(hpreact="dhpreact = (1.0 - hpreact**2) * dh").items()}
case("constants_B_N_dhpreact_from_hpreact", [
    *setup(batch=BATCH_9),
    one_cell(_ex1_9),
    EX2_FORWARD,
    "dlogits = F.softmax(logits, 1)\ndlogits[range(B), Yb] -= 1\ndlogits /= B\n"
    "cmp('logits', dlogits, logits)",
    EX3_FORWARD,
    "dhprebn = bngain*bnvar_inv/N * (N*dhpreact - dhpreact.sum(0) - N/(N-1)*bnraw*(dhpreact*bnraw).sum(0))\n"
    "cmp('hprebn', dhprebn, hprebn)",
    train_cell(), *EVAL,
], wrong=_steps("hpreact"),
    cascade=_steps("bngain", "bnvar_inv", "bnvar", "bndiff2", "bndiff", "bnmeani", "hprebn",
                   "embcat", "emb", "C", BN))

# 10. The learner's own comparison helpers: check(name, mine, ref) for exercise 1,
#     compare(t, dt) for the fused ones. db2 summed over the wrong dimension (the helper raises
#     on the shapes); demb unflattened in the wrong order (C builds on it);
#     a correct training loop written with torch.no_grad() and `p -= lr * grad`.

HELPER_10 = """\
def check(name, mine, ref):
    ok = torch.allclose(mine, ref.grad)
    err = (mine - ref.grad).abs().max().item()
    print(f'{name:>15}: {"OK " if ok else "BAD"}  {err:.2e}')

def compare(t, dt):
    return torch.allclose(dt, t.grad), (dt - t.grad).abs().max().item()
"""

cells_10 = [EX1_HEAD]
for step, code in lines(h="dh = dlogits @ W2.T\ndW2 = h.T @ dlogits\ndb2 = dlogits.sum(1)",
                        emb="demb = dembcat.view(n, 10, 3).transpose(1, 2)").items():
    calls = "\n".join(f"check('{t}', d{t}, {t})" for t in STEP_CMPS[step])
    cells_10.append(f"{code}\n{calls}")

UPDATE_10 = """\
# update
lr = 0.1 if i < 100000 else 0.01
with torch.no_grad():
  for p, grad in zip(parameters, grads):
    p -= lr * grad
"""

case("own_helpers_demb_order_nograd_update", [
    *setup(helper=HELPER_10), *cells_10,
    EX2_FORWARD,
    "dlogits = F.softmax(logits, dim=1)\ndlogits[torch.arange(n), Yb] -= 1.0\ndlogits = dlogits / n\n"
    "compare(logits, dlogits)",
    EX3_FORWARD,
    "dhprebn = bngain * bnvar_inv / (n-1) * ((n-1)*dhpreact - (n-1)/n*dhpreact.sum(0, keepdim=True)"
    " - bnraw*(dhpreact*bnraw).sum(0, keepdim=True))\ncompare(hprebn, dhprebn)",
    train_cell(update=UPDATE_10, no_grad=False), *EVAL[1:],
], wrong=_steps("h", "emb"), cascade=_steps("C"))

# 11. Skips the softmax's lines (dlogits in one line instead), writes dC in one line, and at the
#     end of exercise 1 the whole of batchnorm's dhprebn in one line; exercise 3 forgets bngain;
#     the training loop climbs the gradient.

EX1_11 = [
    EX1_HEAD,
    RIGHT["logprobs"] + "\n" + cmps("logprobs"),
    RIGHT["probs"] + "\n" + cmps("probs"),
    "# the softmax lines are too fiddly, do it in one go\n"
    "dlogits = (probs - F.one_hot(Yb, num_classes=vocab_size)) / n\n" + cmps("logits"),
    RIGHT["h"] + "\n" + cmps("h"),
    RIGHT["hpreact"] + "\n" + cmps("hpreact"),
    RIGHT["bngain"] + "\n" + cmps("bngain"),
    *(RIGHT[s] + "\n" + cmps(s) for s in ("bnvar_inv", "bnvar", "bndiff2", "bndiff", "bnmeani",
                                          "hprebn", "embcat", "emb")),
    "dC = F.one_hot(Xb.view(-1), num_classes=vocab_size).float().T @ demb.view(-1, n_embd)\n"
    + cmps("C"),
    "# and now the whole of batchnorm in one line\n"
    "dhprebn = bngain * bnvar_inv * (dhpreact - dhpreact.mean(0) - bnraw * (bnraw * dhpreact).sum(0) / (n-1))\n"
    + cmps("hprebn"),
]

case("skips_and_late_one_liners_ascending_loop", [
    *setup(), *EX1_11,
    EX2_FORWARD, "dlogits = (probs - F.one_hot(Yb, num_classes=vocab_size)) / n\n"
                 "cmp('logits', dlogits, logits)",
    EX3_FORWARD,
    "dhprebn = bnvar_inv/n * (n*dhpreact - dhpreact.sum(0) - n/(n-1)*bnraw*(dhpreact*bnraw).sum(0))\n"
    "cmp('hprebn', dhprebn, hprebn)",
    train_cell(update=TRAIN_UPDATE.replace("p.data += -lr * grad", "p.data += lr * grad")),
], wrong=_steps(BN, LOOP),
    skipped=_steps("counts_sum_inv", "counts_sum", "counts", "norm_logits", "logit_maxes"))

# 12. Cells that mix answers with a file read, plots, seeding, prints and magics; dbnvar_inv
#     not summed over the batch, which everything after it builds on.

case("messy_cells_bnvar_inv_unsummed", [
    *setup(),
    "%%time\n# Exercise 1\ntorch.manual_seed(1337)\n" + RIGHT["logprobs"] + "\n"
    "print(dlogprobs.shape, dlogprobs[0])\n" + cmps("logprobs") + "\n" + RIGHT["probs"]
    + "\n" + cmps("probs"),
    "!ls -la\nwords = open('names.txt', 'r').read().splitlines()\nprint(len(words), words[:5])\n"
    + RIGHT["counts_sum_inv"] + "\n" + RIGHT["counts_sum"] + "\n" + RIGHT["counts"] + "\n"
    + cmps("counts_sum_inv") + "\n" + cmps("counts_sum") + "\n" + cmps("counts"),
    RIGHT["norm_logits"] + "\nplt.hist(dnorm_logits.view(-1).tolist(), 50);\n"
    + RIGHT["logit_maxes"] + "\n" + RIGHT["logits"] + "\n" + cmps("norm_logits") + "\n"
    + cmps("logit_maxes") + "\n" + cmps("logits") + "\nplt.imshow(dlogits.detach(), cmap='gray')",
    "%matplotlib inline\n" + RIGHT["h"] + "\n" + RIGHT["hpreact"] + "\n"
    "print('dh', dh.shape, 'dhpreact', dhpreact.shape)\n" + cmps("h") + "\n" + cmps("hpreact"),
    RIGHT["bngain"] + "\n" + cmps("bngain") + "\n"
    "dbndiff = bnvar_inv * dbnraw\ndbnvar_inv = bndiff * dbnraw\n" + cmps("bnvar_inv") + "\n"
    "print(dbnvar_inv.shape, bnvar_inv.shape)  # hmm",
    "torch.manual_seed(42)\n" + RIGHT["bnvar"] + "\n" + RIGHT["bndiff2"] + "\n"
    + RIGHT["bndiff"] + "\n" + cmps("bnvar") + "\n" + cmps("bndiff2") + "\n" + cmps("bndiff"),
    RIGHT["bnmeani"] + "\n" + RIGHT["hprebn"] + "\n" + cmps("bnmeani") + "\n" + cmps("hprebn")
    + "\nfig, (ax1, ax2) = plt.subplots(1, 2)\nax1.hist(dhprebn.view(-1).tolist(), 50)",
    RIGHT["embcat"] + "\n" + RIGHT["emb"] + "\n" + RIGHT["C"] + "\n" + cmps("embcat") + "\n"
    + cmps("emb") + "\n" + cmps("C") + "\nprint(dC.abs().sum(1))",
    EX2_FORWARD, "%%time\n" + EX2_RIGHT + "print(dlogits[0] * n)",
    EX3_FORWARD, EX3_RIGHT,
    train_cell(head="%%time\n"), *EVAL,
], wrong=_steps("bnvar_inv"),
    cascade=_steps("bnvar", "bndiff2", "bndiff", "bnmeani", "hprebn", "embcat", "emb", "C"))

# 13 and 14. Learners who renamed the forward pass (and everything after it). 13: dbndiff's
#     second branch overwrites the first (=, not +=), dW1 from dembcat instead of embcat, and
#     exercise 3 with a mean where the sum goes. 14: dbndiff2 multiplied by bndiff2 instead of
#     ones, exercise 2 without the -1, the training loop's list rotated (dC last).

NAMES_13 = {  # lecture -> learner
    "Xb": "xb", "Yb": "yb", "bngain": "gamma", "bnbias": "beta", "emb": "e", "embcat": "x",
    "hprebn": "z", "bnmeani": "mu", "bndiff": "zc", "bndiff2": "zc2", "bnvar": "var",
    "bnvar_inv": "rstd", "bnraw": "zhat", "hpreact": "a", "h": "hid", "logits": "out",
    "logit_maxes": "out_max", "norm_logits": "out_norm", "counts": "ex", "counts_sum": "ex_sum",
    "counts_sum_inv": "ex_sum_inv", "probs": "prob", "logprobs": "logp",
}


def _rename_cells(cells: list, names: dict[str, str]) -> list:
    out = []
    for c in cells:
        if isinstance(c, tuple) and c[0] == "md":
            out.append(c)
        elif isinstance(c, tuple):
            out.append((rename(c[0], names), c[1]))
        else:
            out.append(rename(c, names))
    return out


_ex1_13 = lines(bndiff="dbndiff = (2*bndiff) * dbndiff2",
                embcat="dembcat = dhprebn @ W1.T\ndW1 = dembcat.T @ dhprebn\ndb1 = dhprebn.sum(0)")
cells_13 = [*setup(), *cell_per_step(_ex1_13), EX2_FORWARD,
            EX2_RIGHT.replace("dlogits = F.softmax(logits, 1)",
                              "dlogits = logits.exp() / logits.exp().sum(1, keepdim=True)"),
            EX3_FORWARD, EX3_RIGHT.replace("(dhpreact*bnraw).sum(0))", "(dhpreact*bnraw).mean(0))"),
            train_cell(), *EVAL]
case("renamed_short_names", _rename_cells(cells_13, NAMES_13),
     wrong=_steps("bndiff", "embcat", BN), cascade=_steps("bnmeani", "hprebn", "emb", "C"),
     aliases={v: k for k, v in NAMES_13.items()})

NAMES_14 = {
    "Xb": "Xbatch", "Yb": "Ybatch", "C": "emb_table", "W1": "W_in", "b1": "b_in", "W2": "W_out",
    "b2": "b_out", "bngain": "bn_g", "bnbias": "bn_b", "emb": "embs", "embcat": "flat",
    "hprebn": "pre_bn", "bnmeani": "bn_mean", "bndiff": "centered", "bndiff2": "centered_sq",
    "bnvar": "bn_var", "bnvar_inv": "inv_std", "bnraw": "normed", "hpreact": "pre_act",
    "h": "act", "logits": "scores", "logit_maxes": "score_max", "norm_logits": "shifted",
    "counts": "exps", "counts_sum": "exp_sum", "counts_sum_inv": "exp_sum_inv",
    "probs": "sm", "logprobs": "log_sm", "bnmean": "bn_mean_run",
}

_ex1_14 = lines(bndiff2="dbndiff2 = (1.0/(n-1)) * bndiff2 * dbnvar")
cells_14 = [*setup(), one_cell(_ex1_14), EX2_FORWARD,
            EX2_RIGHT.replace("dlogits[range(n), Yb] -= 1\n", ""),
            EX3_FORWARD, EX3_RIGHT,
            train_cell(TRAIN_BACKWARD.replace(
                "grads = [dC, dW1, db1, dW2, db2, dbngain, dbnbias]",
                "grads = [dW1, db1, dW2, db2, dbngain, dbnbias, dC]")),
            *EVAL]
case("renamed_long_names", _rename_cells(cells_14, NAMES_14),
     wrong=_steps("bndiff2", CE, LOOP),
     cascade=_steps("bndiff", "bnmeani", "hprebn", "embcat", "emb", "C"),
     aliases={v: k for k, v in NAMES_14.items()})

# 15. Stopped half way through exercise 1 (the rest still the starter's commented cmps);
#     dcounts_sum_inv multiplied by counts_sum instead of counts; exercise 2 right, exercise 3
#     forgets bngain; exercise 4 still the starter's placeholders.

_ex1_15 = lines(counts_sum_inv="dcounts_sum_inv = (dprobs * counts_sum).sum(1, keepdim=True)\n"
                               "dcounts = counts_sum_inv * dprobs")
_done_15 = ORDER[:ORDER.index("bngain") + 1]
EX1_15 = (f"{EX1_HEAD}\n# -----------------\n" + "\n".join(_ex1_15[s] for s in _done_15)
          + "\n# TODO: batchnorm and below\n# -----------------\n\n"
          + "\n".join(cmps(s) for s in _done_15) + "\n"
          + "\n".join(f"# cmp('{t}', d{t}, {t})" for s in ORDER[len(_done_15):]
                      for t in STEP_CMPS[s]) + "\n")
PLACEHOLDER_15 = ("# -----------------\n# YOUR CODE HERE :)\n"
                  "dC, dW1, db1, dW2, db2, dbngain, dbnbias = None, None, None, None, None, None, None\n"
                  "grads = [dC, dW1, db1, dW2, db2, dbngain, dbnbias]\n# -----------------\n")

case("half_done_counts_sum_inv_slip", [
    *setup(), EX1_15, EX2_FORWARD,
    "dlogits = F.softmax(logits, 1)\ndlogits[range(n), Yb] -= 1\ndlogits /= n\n"
    "cmp('logits', dlogits, logits)",
    EX3_FORWARD, EX3_RIGHT.replace("bngain*bnvar_inv/n", "bnvar_inv/n"),
    train_cell(PLACEHOLDER_15),
], wrong=_steps("counts_sum_inv", BN),
    cascade=_steps("counts_sum", "counts", "norm_logits", "logit_maxes", "logits", "h",
                   "hpreact", "bngain"),
    skipped=_steps("bnvar_inv", "bnvar", "bndiff2", "bndiff", "bnmeani", "hprebn", "embcat",
                   "emb", "C", LOOP))

# 16. Exercise 1 right throughout (cmps looped, vectorised dC), exercises 2 and 3 both wrong,
#     and the training loop's own batchnorm backward uses the biased variance's factor.

CMP_LOOP_16 = """\
for name in ['logprobs', 'probs', 'counts_sum_inv', 'counts_sum', 'counts', 'norm_logits',
             'logit_maxes', 'logits', 'h', 'W2', 'b2', 'hpreact', 'bngain', 'bnbias', 'bnraw',
             'bnvar_inv', 'bnvar', 'bndiff2', 'bndiff', 'bnmeani', 'hprebn', 'embcat', 'W1',
             'b1', 'emb', 'C']:
    cmp(name, globals()['d' + name], globals()[name])
"""

_ex1_16 = lines(
    C="dC = torch.zeros_like(C)\ndC.index_add_(0, Xb.flatten(), demb.reshape(-1, demb.shape[-1]))",
    logits="dlogits += F.one_hot(logits.argmax(dim=1), 27) * dlogit_maxes",
    bnmeani="dhprebn = dbndiff.clone()\ndbnmeani = -dbndiff.sum(0, keepdim=True)")
case("right_ex1_wrong_fused_biased_loop", [
    *setup(),
    "# Exercise 1\n" + "\n\n".join(_ex1_16[s] for s in ORDER),
    CMP_LOOP_16,
    EX2_FORWARD,
    "dlogits = F.softmax(logits, 1)\ndlogits[range(n), Yb] -= 1\n"
    "cmp('logits', dlogits, logits)  # why not exact?",
    EX3_FORWARD,
    "dhprebn = bngain*bnvar_inv/n * (n*dhpreact - n/(n-1)*bnraw*(dhpreact*bnraw).sum(0))\n"
    "cmp('hprebn', dhprebn, hprebn)",
    train_cell(TRAIN_BACKWARD.replace("n/(n-1)*bnraw", "bnraw")),
    *EVAL,
], wrong=_steps(CE, BN, LOOP))


def write(case: dict, folder: Path) -> Path:
    path = Path(folder) / f"{case['name']}.ipynb"
    path.write_text(json.dumps(case["notebook"], indent=1))
    return path
