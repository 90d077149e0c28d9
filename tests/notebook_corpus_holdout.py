"""Held-out notebooks for the makemore part 4 grader: filled-in copies of the lecture notebook as
learners leave them, each with its per-step truth measured by running it
(`tests/notebook_corpus_truth.py`), never by the tutor.

    CASES: list of {"name", "notebook", "right", "wrong", "renamed_forward"}
    ALIASES: {case name: {learner's tensor name: the lecture's name}} for the renamed forwards
    CASCADE: {case name: steps wrong only because an upstream gradient of the learner's was wrong
              (the step's own line is right given that upstream)}
    write(case, folder) -> Path

Written independently of the grader and of the tuning corpus.
    .venv/bin/python tests/notebook_corpus_truth.py notebook_corpus_holdout
"""

from __future__ import annotations

import json
from pathlib import Path

# --------------------------------------------------------------------------------------------
# notebook plumbing


def _cell(item, count, index):
    if isinstance(item, tuple):
        kind, text = item
        return {"cell_type": "markdown", "id": f"md{index:03d}", "metadata": {},
                "source": text.strip("\n").splitlines(keepends=True)}
    text = item.strip("\n")
    return {"cell_type": "code", "execution_count": count, "id": f"code{index:03d}",
            "metadata": {}, "outputs": [], "source": text.splitlines(keepends=True)}


def _nb(items) -> dict:
    cells, count = [], 0
    for index, item in enumerate(items):
        if not isinstance(item, tuple):
            count += 1
        cells.append(_cell(item, count, index))
    return {"cells": cells,
            "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python",
                                        "name": "python3"},
                         "language_info": {"name": "python"}},
            "nbformat": 4, "nbformat_minor": 5}


def md(text):
    return ("md", text)


def write(case: dict, folder) -> Path:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{case['name']}.ipynb"
    path.write_text(json.dumps(case["notebook"], indent=1))
    return path


ATOMIC = ["logprobs", "probs", "counts_sum_inv", "counts_sum", "counts", "norm_logits",
          "logit_maxes", "logits", "h", "hpreact", "bngain", "bnvar_inv", "bnvar", "bndiff2",
          "bndiff", "bnmeani", "hprebn", "embcat", "emb", "C"]
ALL = [f"atomic/{s}" for s in ATOMIC] + ["fused/cross_entropy", "fused/batchnorm", "train/loop"]


def _a(*names):
    return {f"atomic/{n}" for n in names}


EX2 = "fused/cross_entropy"
EX3 = "fused/batchnorm"
EX4 = "train/loop"

# --------------------------------------------------------------------------------------------
# the lecture's setup cells (data and helpers), lecture names

IMPORTS = """\
import torch
import torch.nn.functional as F
import matplotlib.pyplot as plt # for making figures
%matplotlib inline"""

WGET = """\
# download the names.txt file from github
!wget https://raw.githubusercontent.com/karpathy/makemore/master/names.txt"""

WORDS = """\
# read in all the words
words = open('names.txt', 'r').read().splitlines()
print(len(words))
print(max(len(w) for w in words))
print(words[:8])"""

VOCAB = """\
# build the vocabulary of characters and mappings to/from integers
chars = sorted(list(set(''.join(words))))
stoi = {s:i+1 for i,s in enumerate(chars)}
stoi['.'] = 0
itos = {i:s for s,i in stoi.items()}
vocab_size = len(itos)
print(itos)
print(vocab_size)"""

DATASET = """\
# build the dataset
block_size = 3 # context length: how many characters do we take to predict the next one?

def build_dataset(words):
  X, Y = [], []

  for w in words:
    context = [0] * block_size
    for ch in w + '.':
      ix = stoi[ch]
      X.append(context)
      Y.append(ix)
      context = context[1:] + [ix] # crop and append

  X = torch.tensor(X)
  Y = torch.tensor(Y)
  print(X.shape, Y.shape)
  return X, Y

import random
random.seed(42)
random.shuffle(words)
n1 = int(0.8*len(words))
n2 = int(0.9*len(words))

Xtr,  Ytr  = build_dataset(words[:n1])     # 80%
Xdev, Ydev = build_dataset(words[n1:n2])   # 10%
Xte,  Yte  = build_dataset(words[n2:])     # 10%"""

CMP = """\
# utility function we will use later when comparing manual gradients to PyTorch gradients
def cmp(s, dt, t):
  ex = torch.all(dt == t.grad).item()
  app = torch.allclose(dt, t.grad)
  maxdiff = (dt - t.grad).abs().max().item()
  print(f'{s:15s} | exact: {str(ex):5s} | approximate: {str(app):5s} | maxdiff: {maxdiff}')"""

INIT = """\
n_embd = 10 # the dimensionality of the character embedding vectors
n_hidden = 64 # the number of neurons in the hidden layer of the MLP

g = torch.Generator().manual_seed(2147483647) # for reproducibility
C  = torch.randn((vocab_size, n_embd),            generator=g)
# Layer 1
W1 = torch.randn((n_embd * block_size, n_hidden), generator=g) * (5/3)/((n_embd * block_size)**0.5)
b1 = torch.randn(n_hidden,                        generator=g) * 0.1 # using b1 just for fun, it's useless because of BN
# Layer 2
W2 = torch.randn((n_hidden, vocab_size),          generator=g) * 0.1
b2 = torch.randn(vocab_size,                      generator=g) * 0.1
# BatchNorm parameters
bngain = torch.randn((1, n_hidden))*0.1 + 1.0
bnbias = torch.randn((1, n_hidden))*0.1

# Note: I am initializating many of these parameters in non-standard ways
# because sometimes initializating with e.g. all zeros could mask an incorrect
# implementation of the backward pass.

parameters = [C, W1, b1, W2, b2, bngain, bnbias]
print(sum(p.nelement() for p in parameters)) # number of parameters in total
for p in parameters:
  p.requires_grad = True"""

BATCH = """\
batch_size = 32
n = batch_size # a shorter variable also, for convenience
# construct a minibatch
ix = torch.randint(0, Xtr.shape[0], (batch_size,), generator=g)
Xb, Yb = Xtr[ix], Ytr[ix] # batch X,Y"""

FORWARD = """\
# forward pass, "chunkated" into smaller steps that are possible to backward one at a time

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
# cross entropy loss, by hand
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
loss"""

EX1_TODO_HEAD = """\
# Exercise 1: backprop through the whole thing manually,
# backpropagating through exactly all of the variables
# as they are defined in the forward pass above, one by one"""

EX2_MD = md("## Exercise 2: backprop through cross_entropy but all in one go")
EX3_MD = md("## Exercise 3: backprop through batchnorm but all in one go")
EX4_MD = md("## Exercise 4: putting it all together! Train the MLP with your own backward pass")

EX2_FWD = """\
# Exercise 2: backprop through cross_entropy but all in one go
# to complete this challenge look at the mathematical expression of the loss,
# take the derivative, simplify the expression, and just write it out

# forward pass

# before:
# logprobs = probs.log()
# loss = -logprobs[range(n), Yb].mean()

# now:
loss_fast = F.cross_entropy(logits, Yb)
print(loss_fast.item(), 'diff:', (loss_fast - loss).item())"""

EX2_FWD_BARE = """\
loss_fast = F.cross_entropy(logits, Yb)
print(loss_fast.item(), 'diff:', (loss_fast - loss).item())"""

EX2_TODO = """\
# backward pass

# -----------------
# YOUR CODE HERE :)
dlogits = None # TODO. my solution is 3 lines
# -----------------

#cmp('logits', dlogits, logits) # I can only get approximate to be true, my maxdiff is 6e-9"""

EX3_FWD = """\
# Exercise 3: backprop through batchnorm but all in one go
# to complete this challenge look at the mathematical expression of the output of batchnorm,
# take the derivative w.r.t. its input, simplify the expression, and just write it out
# BatchNorm paper: https://arxiv.org/abs/1502.03167

# forward pass

# before:
# bnmeani = 1/n*hprebn.sum(0, keepdim=True)
# bndiff = hprebn - bnmeani
# bndiff2 = bndiff**2
# bnvar = 1/(n-1)*(bndiff2).sum(0, keepdim=True) # note: Bessel's correction (dividing by n-1, not n)
# bnvar_inv = (bnvar + 1e-5)**-0.5
# bnraw = bndiff * bnvar_inv
# hpreact = bngain * bnraw + bnbias

# now:
hpreact_fast = bngain * (hprebn - hprebn.mean(0, keepdim=True)) / torch.sqrt(hprebn.var(0, keepdim=True, unbiased=True) + 1e-5) + bnbias
print('max diff:', (hpreact_fast - hpreact).abs().max())"""

EX3_FWD_BARE = """\
hpreact_fast = bngain * (hprebn - hprebn.mean(0, keepdim=True)) / torch.sqrt(hprebn.var(0, keepdim=True, unbiased=True) + 1e-5) + bnbias
print('max diff:', (hpreact_fast - hpreact).abs().max())"""

EX3_TODO = """\
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
# YOUR CODE HERE :)
dhprebn = None # TODO. my solution is 1 (long) line
# -----------------

#cmp('hprebn', dhprebn, hprebn) # I can only get approximate to be true, my maxdiff is 9e-10"""

TRAIN_HEAD = """\
# Exercise 4: putting it all together!
# Train the MLP neural net with your own backward pass
"""

TRAIN = """\
{head}
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

# use this context manager for efficiency once your backward pass is written (TODO)
with torch.no_grad():

  # kick off optimization
  for i in range(max_steps):

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
    #loss.backward() # use this for correctness comparisons, delete it later!

    # manual backprop! #swole_doge_meme
    # -----------------
{backward}
    # -----------------

    # update
    lr = 0.1 if i < 100000 else 0.01 # step learning rate decay
    for p, grad in zip(parameters, grads):
      #p.data += -lr * p.grad # old way of cheems doge (using PyTorch grad from .backward())
      p.data += -lr * grad # new way of swole doge TODO: enable

    # track stats
    if i % 10000 == 0: # print every once in a while
      print(f'{{i:7d}}/{{max_steps:7d}}: {{loss.item():.4f}}')
    lossi.append(loss.log10().item())

  #   if i >= 100: # TODO: delete early breaking when you're ready to train the full net
  #     break"""

TRAIN_TODO = """\
    # YOUR CODE HERE :)
    dC, dW1, db1, dW2, db2, dbngain, dbnbias = None, None, None, None, None, None, None
    grads = [dC, dW1, db1, dW2, db2, dbngain, dbnbias]"""


def train(backward: str, head: str = TRAIN_HEAD) -> str:
    return TRAIN.format(head=head.rstrip("\n"), backward=backward.rstrip("\n"))


AFTER = [
    """\
# calibrate the batch norm at the end of training

with torch.no_grad():
  # pass the training set through
  emb = C[Xtr]
  embcat = emb.view(emb.shape[0], -1)
  hpreact = embcat @ W1 + b1
  # measure the mean/std over the entire training set
  bnmean = hpreact.mean(0, keepdim=True)
  bnvar = hpreact.var(0, keepdim=True, unbiased=True)""",
    """\
# evaluate train and val loss

@torch.no_grad() # this decorator disables gradient tracking
def split_loss(split):
  x,y = {
    'train': (Xtr, Ytr),
    'val': (Xdev, Ydev),
    'test': (Xte, Yte),
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
split_loss('val')""",
    """\
# sample from the model
g = torch.Generator().manual_seed(2147483647 + 10)

for _ in range(20):

    out = []
    context = [0] * block_size # initialize with all ...
    while True:
      # forward pass
      emb = C[torch.tensor([context])] # (1,block_size,d)
      embcat = emb.view(emb.shape[0], -1) # concat into (N, block_size * n_embd)
      hpreact = embcat @ W1 + b1
      hpreact = bngain * (hpreact - bnmean) * (bnvar + 1e-5)**-0.5 + bnbias
      h = torch.tanh(hpreact) # (N, n_hidden)
      logits = h @ W2 + b2 # (N, vocab_size)
      # sample
      probs = F.softmax(logits, dim=1)
      ix = torch.multinomial(probs, num_samples=1, generator=g).item()
      context = context[1:] + [ix]
      out.append(ix)
      if ix == 0:
        break

    print(''.join(itos[i] for i in out))""",
]

SETUP = [IMPORTS, WGET, WORDS, VOCAB, DATASET, CMP, INIT, BATCH, FORWARD]

# the lecture's own ex-4 backward, written out as a learner who finished would
TRAIN_BACKWARD_OK = """\
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
    grads = [dC, dW1, db1, dW2, db2, dbngain, dbnbias]"""

# --------------------------------------------------------------------------------------------
# 1. Markdown headings only, one big exercise-1 cell in the learner's own `B`, every cmp gathered
#    in one cell at the end. Wrong: db2 kept a column (keepdim + .T), dbnbias sign, dW1 and db1
#    averaged over the batch (db1 is ~0 behind batchnorm, so only dW1 shows it), dC by
#    fancy-index += (repeated rows don't accumulate); exercise 3 uses n where n-1 belongs.

C1_EX1 = """\
B = 32  # batch size, I keep forgetting what n is

dlogprobs = torch.zeros_like(logprobs)
dlogprobs[range(B), Yb] = -1.0 / B
dprobs = dlogprobs / probs
dcounts_sum_inv = (dprobs * counts).sum(1, keepdim=True)
dcounts = dprobs * counts_sum_inv
dcounts_sum = -counts_sum**-2 * dcounts_sum_inv
dcounts += dcounts_sum  # broadcasts over the row
dnorm_logits = norm_logits.exp() * dcounts
dlogit_maxes = -dnorm_logits.sum(1, keepdim=True)
dlogits = dnorm_logits.clone()
dlogits += F.one_hot(logits.argmax(1), num_classes=vocab_size) * dlogit_maxes

dh = dlogits @ W2.T
dW2 = h.T @ dlogits
db2 = dlogits.sum(0, keepdim=True).T
dhpreact = (1 - h**2) * dh
dbngain = (dhpreact * bnraw).sum(0, keepdim=True)
dbnbias = -dhpreact.sum(0, keepdim=True)
dbnraw = dhpreact * bngain

dbnvar_inv = (dbnraw * bndiff).sum(0, keepdim=True)
dbndiff = dbnraw * bnvar_inv
dbnvar = -0.5 * (bnvar + 1e-5)**-1.5 * dbnvar_inv
dbndiff2 = torch.ones_like(bndiff2) * dbnvar / (B - 1)
dbndiff += 2 * bndiff * dbndiff2
dbnmeani = -dbndiff.sum(0, keepdim=True)
dhprebn = dbndiff + dbnmeani / B

dembcat = dhprebn @ W1.T
dW1 = embcat.T @ dhprebn / B
db1 = dhprebn.mean(0)
demb = dembcat.view(B, block_size, n_embd)
dC = torch.zeros_like(C)
dC[Xb] += demb"""

C1_CMPS = """\
cmp('logprobs', dlogprobs, logprobs)
cmp('probs', dprobs, probs)
cmp('counts_sum_inv', dcounts_sum_inv, counts_sum_inv)
cmp('counts_sum', dcounts_sum, counts_sum)
cmp('counts', dcounts, counts)
cmp('norm_logits', dnorm_logits, norm_logits)
cmp('logit_maxes', dlogit_maxes, logit_maxes)
cmp('logits', dlogits, logits)
cmp('h', dh, h)
cmp('W2', dW2, W2)
cmp('b2', db2, b2)
cmp('hpreact', dhpreact, hpreact)
cmp('bngain', dbngain, bngain)
cmp('bnbias', dbnbias, bnbias)
cmp('bnraw', dbnraw, bnraw)
cmp('bnvar_inv', dbnvar_inv, bnvar_inv)
cmp('bnvar', dbnvar, bnvar)
cmp('bndiff2', dbndiff2, bndiff2)
cmp('bndiff', dbndiff, bndiff)
cmp('bnmeani', dbnmeani, bnmeani)
cmp('hprebn', dhprebn, hprebn)
cmp('embcat', dembcat, embcat)
cmp('W1', dW1, W1)
cmp('b1', db1, b1)
cmp('emb', demb, emb)
cmp('C', dC, C)"""

C1_EX2 = """\
dlogits = F.softmax(logits, 1)
dlogits[range(B), Yb] -= 1
dlogits /= B
cmp('logits', dlogits, logits)"""

C1_EX3 = """\
# my derivation on paper, with the variance over n
dhprebn = bngain * bnvar_inv / B * (B * dhpreact - dhpreact.sum(0) - bnraw * (dhpreact * bnraw).sum(0))
cmp('hprebn', dhprebn, hprebn)"""

CASE1 = {
    "name": "gathered_cmps_markdown_headings",
    "notebook": _nb([
        md("# makemore: becoming a backprop ninja"), *SETUP,
        md("## Exercise 1\nbackprop through the whole thing manually, one variable at a time"),
        C1_EX1, md("checking everything at once:"), C1_CMPS,
        EX2_MD, EX2_FWD_BARE, C1_EX2, "plt.figure(figsize=(8, 8))\nplt.imshow(dlogits.detach(), cmap='gray')",
        EX3_MD, EX3_FWD_BARE, C1_EX3,
        EX4_MD, train(TRAIN_BACKWARD_OK, head="# training with my own gradients"), *AFTER[:2],
    ]),
    "right": (set(ALL) - _a("h", "bngain", "embcat", "C") - {EX3}),
    "wrong": _a("h", "bngain", "embcat", "C") | {EX3},
    "renamed_forward": False,
}

# --------------------------------------------------------------------------------------------
# 2. One statement per cell, each cmp in a cell of its own, labels mistyped. dcounts first
#    misses its second branch and dhpreact first uses hpreact, both fixed in the next cells
#    (the last attempt stands, right). dbndiff2 divides by n, not n-1: wrong, and every
#    gradient after it inherits the error (except dbnmeani: the error multiplies sum(bndiff),
#    which is 0). Exercise 2 forgets /n; 3 and 4 left as the starter.

C2_STATEMENTS = [
    "dlogprobs = torch.zeros_like(logprobs)",
    "dlogprobs[range(n), Yb] = -1.0/n",
    "cmp('logprob', dlogprobs, logprobs)",
    "dprobs = (1.0 / probs) * dlogprobs",
    "cmp('prob', dprobs, probs)",
    "dcounts_sum_inv = (counts * dprobs).sum(1, keepdim=True)",
    "cmp('count_sum_inv', dcounts_sum_inv, counts_sum_inv)",
    "dcounts = counts_sum_inv * dprobs",
    "cmp('counts', dcounts, counts)  # False?? ah, counts is used twice",
    "dcounts_sum = (-counts_sum**-2) * dcounts_sum_inv",
    "cmp('count_sum', dcounts_sum, counts_sum)",
    "dcounts += torch.ones_like(counts) * dcounts_sum",
    "cmp('counts', dcounts, counts)",
    "dnorm_logits = counts * dcounts",
    "cmp('norm_logit', dnorm_logits, norm_logits)",
    "dlogit_maxes = (-dnorm_logits).sum(1, keepdim=True)",
    "cmp('logit_max', dlogit_maxes, logit_maxes)",
    "dlogits = dnorm_logits.clone()",
    "dlogits += F.one_hot(logits.max(1).indices, num_classes=logits.shape[1]) * dlogit_maxes",
    "cmp('logit', dlogits, logits)",
    "dh = dlogits @ W2.T",
    "dW2 = h.T @ dlogits",
    "db2 = dlogits.sum(0)",
    "cmp('h', dh, h)",
    "cmp('W2', dW2, W2)",
    "cmp('b2', db2, b2)",
    "dhpreact = (1.0 - hpreact**2) * dh",
    "cmp('hpreact', dhpreact, hpreact)",
    "dhpreact = (1.0 - h**2) * dh",
    "cmp('hpreact', dhpreact, hpreact)",
    "dbngain = (bnraw * dhpreact).sum(0, keepdim=True)",
    "dbnraw = bngain * dhpreact",
    "dbnbias = dhpreact.sum(0, keepdim=True)",
    "cmp('bngian', dbngain, bngain)",
    "cmp('bnraw', dbnraw, bnraw)",
    "cmp('bnbais', dbnbias, bnbias)",
    "dbndiff = bnvar_inv * dbnraw",
    "dbnvar_inv = (bndiff * dbnraw).sum(0, keepdim=True)",
    "cmp('bnvar_inv', dbnvar_inv, bnvar_inv)",
    "dbnvar = (-0.5*(bnvar + 1e-5)**-1.5) * dbnvar_inv",
    "cmp('bnvar', dbnvar, bnvar)",
    "dbndiff2 = (1.0/n) * torch.ones_like(bndiff2) * dbnvar",
    "cmp('bndiff2', dbndiff2, bndiff2)",
    "dbndiff += (2*bndiff) * dbndiff2",
    "cmp('bndiff', dbndiff, bndiff)",
    "dhprebn = dbndiff.clone()",
    "dbnmeani = (-dbndiff).sum(0)",
    "cmp('bnmeani', dbnmeani, bnmeani)",
    "dhprebn += 1.0/n * (torch.ones_like(hprebn) * dbnmeani)",
    "cmp('hprebn', dhprebn, hprebn)",
    "dembcat = dhprebn @ W1.T",
    "dW1 = embcat.T @ dhprebn",
    "db1 = dhprebn.sum(0)",
    "cmp('embcat', dembcat, embcat)",
    "cmp('W1', dW1, W1)",
    "cmp('b1', db1, b1)",
    "demb = dembcat.view(emb.shape)",
    "cmp('emb', demb, emb)",
    "dC = torch.zeros_like(C)",
    "for k in range(Xb.shape[0]):\n  for j in range(Xb.shape[1]):\n    ix = Xb[k,j]\n    dC[ix] += demb[k,j]",
    "cmp('C', dC, C)",
]

C2_EX2 = [
    "dlogits = F.softmax(logits, 1)",
    "dlogits[range(n), Yb] -= 1",
    "cmp('logits', dlogits, logits)",
]

CASE2 = {
    "name": "one_statement_per_cell",
    "notebook": _nb([
        *SETUP, md("## Exercise 1: backprop through the whole thing manually"),
        *C2_STATEMENTS,
        EX2_MD, EX2_FWD_BARE, *C2_EX2,
        EX3_MD, EX3_FWD_BARE, EX3_TODO,
        EX4_MD, train(TRAIN_TODO, head="# Exercise 4"),
    ]),
    "right": _a(*ATOMIC[:13], "bnmeani"),
    "wrong": _a("bndiff2", "bndiff", "hprebn", "embcat", "emb", "C") | {EX2},
    "renamed_forward": False,
}

# --------------------------------------------------------------------------------------------
# 3. The learner's own helper `check_grad(t, mine, label)` (another name, another argument
#    order) instead of cmp, gradients under their own names (g_...), the softmax's backward in a
#    function of theirs. Wrong: dW2 divided by n again, dbngain against hpreact not bnraw, dC by
#    assigning rows (no accumulation), db1 = sum over the wrong axis then averaged...;
#    exercise 3 misses bngain; the training loop forgets to divide dlogits by n.

C3_HELPER = """\
# my own checker: reference tensor first
def check_grad(t, mine, label=''):
    ok = torch.allclose(mine, t.grad)
    print(f"{label:>15}: {'OK ' if ok else 'BAD'}  max err {(mine - t.grad).abs().max().item():.2e}")
    return ok"""

C3_EX1_A = """\
# cross-entropy part
g_logprobs = torch.zeros_like(logprobs)
g_logprobs[range(n), Yb] = -1 / n
check_grad(logprobs, g_logprobs, 'logprobs')

g_probs = g_logprobs * probs**-1
check_grad(probs, g_probs, 'probs')

def softmax_backward(g_probs):
    # probs = counts * counts_sum_inv, counts_sum_inv = counts_sum**-1, counts_sum = counts.sum(1)
    g_csi = (g_probs * counts).sum(1, keepdim=True)
    g_cs = -g_csi / counts_sum**2
    g_counts = g_probs * counts_sum_inv + g_cs
    g_norm = g_counts * counts
    return g_csi, g_cs, g_counts, g_norm

g_counts_sum_inv, g_counts_sum, g_counts, g_norm_logits = softmax_backward(g_probs)
check_grad(counts_sum_inv, g_counts_sum_inv, 'counts_sum_inv')
check_grad(counts_sum, g_counts_sum, 'counts_sum')
check_grad(counts, g_counts, 'counts')
check_grad(norm_logits, g_norm_logits, 'norm_logits')"""

C3_EX1_B = """\
g_logit_maxes = -g_norm_logits.sum(1, keepdim=True)
check_grad(logit_maxes, g_logit_maxes, 'logit_maxes')
g_logits = g_norm_logits.clone()
g_logits[range(n), logits.argmax(1)] += g_logit_maxes.view(-1)
check_grad(logits, g_logits, 'logits')

g_h = g_logits @ W2.T
g_W2 = h.T @ g_logits / n
g_b2 = g_logits.sum(0)
check_grad(h, g_h, 'h'); check_grad(W2, g_W2, 'W2'); check_grad(b2, g_b2, 'b2')

g_hpreact = g_h * (1 - h * h)
check_grad(hpreact, g_hpreact, 'hpreact')
g_bngain = (g_hpreact * hpreact).sum(0, keepdim=True)
g_bnbias = g_hpreact.sum(0, keepdim=True)
g_bnraw = g_hpreact * bngain
check_grad(bngain, g_bngain, 'bngain'); check_grad(bnbias, g_bnbias, 'bnbias'); check_grad(bnraw, g_bnraw, 'bnraw')"""

C3_EX1_C = """\
g_bnvar_inv = (g_bnraw * bndiff).sum(0, keepdim=True)
check_grad(bnvar_inv, g_bnvar_inv, 'bnvar_inv')
g_bnvar = g_bnvar_inv * (-0.5) * (bnvar + 1e-5) ** (-1.5)
check_grad(bnvar, g_bnvar, 'bnvar')
g_bndiff2 = g_bnvar.expand_as(bndiff2) / (n - 1)
check_grad(bndiff2, g_bndiff2, 'bndiff2')
g_bndiff = g_bnraw * bnvar_inv + g_bndiff2 * 2 * bndiff
check_grad(bndiff, g_bndiff, 'bndiff')
g_bnmeani = -g_bndiff.sum(0, keepdim=True)
check_grad(bnmeani, g_bnmeani, 'bnmeani')
g_hprebn = g_bndiff + g_bnmeani.expand_as(hprebn) / n
check_grad(hprebn, g_hprebn, 'hprebn')

g_embcat = g_hprebn @ W1.T
g_W1 = embcat.T @ g_hprebn
g_b1 = g_hprebn.sum(0)
check_grad(embcat, g_embcat, 'embcat'); check_grad(W1, g_W1, 'W1'); check_grad(b1, g_b1, 'b1')
g_emb = g_embcat.view(*emb.shape)
check_grad(emb, g_emb, 'emb')
g_C = torch.zeros_like(C)
g_C[Xb.view(-1)] = g_emb.view(-1, n_embd)
check_grad(C, g_C, 'C')"""

C3_EX2 = """\
# backward pass
g_logits = (F.softmax(logits, dim=1) - F.one_hot(Yb, num_classes=vocab_size)) / n
check_grad(logits, g_logits, 'logits (fast)')"""

C3_EX3 = """\
# backward pass
g_hpreact_ = g_hpreact  # from exercise 1 (that one was right)
g_hprebn = bnvar_inv / n * (n * g_hpreact_ - g_hpreact_.sum(0) - n / (n - 1) * bnraw * (g_hpreact_ * bnraw).sum(0))
check_grad(hprebn, g_hprebn, 'hprebn (fast)')"""

C3_TRAIN = """\
    dlogits = F.softmax(logits, 1)
    dlogits[range(n), Yb] -= 1
    dh = dlogits @ W2.T
    dW2 = h.T @ dlogits
    db2 = dlogits.sum(0)
    dhpreact = (1.0 - h**2) * dh
    dbngain = (bnraw * dhpreact).sum(0, keepdim=True)
    dbnbias = dhpreact.sum(0, keepdim=True)
    dhprebn = bngain*bnvar_inv/n * (n*dhpreact - dhpreact.sum(0) - n/(n-1)*bnraw*(dhpreact*bnraw).sum(0))
    dembcat = dhprebn @ W1.T
    dW1 = embcat.T @ dhprebn
    db1 = dhprebn.sum(0)
    demb = dembcat.view(emb.shape)
    dC = torch.zeros_like(C)
    dC.index_add_(0, Xb.view(-1), demb.view(-1, n_embd))
    grads = [dC, dW1, db1, dW2, db2, dbngain, dbnbias]"""

CASE3 = {
    "name": "own_helper_own_names",
    "notebook": _nb([
        *SETUP[:5], C3_HELPER, *SETUP[6:], EX1_TODO_HEAD + "\n# (answers below, split into three cells)",
        C3_EX1_A, C3_EX1_B, C3_EX1_C,
        EX2_FWD, C3_EX2, EX3_FWD, C3_EX3,
        train(C3_TRAIN), AFTER[1],
    ]),
    "right": set(ALL) - _a("h", "bngain", "C") - {EX3, EX4},
    "wrong": _a("h", "bngain", "C") | {EX3, EX4},
    "renamed_forward": False,
}

# --------------------------------------------------------------------------------------------
# 4. Answers written above the `# Exercise N` comments (pasted in over the starter), cells
#    mixing answers with a re-read of names.txt, reseeding, prints, a plot, `%%time` and
#    `%time` magics. Wrong: db2 and dbngain summed over the wrong axis, dhprebn forgets the 1/n
#    on the mean's branch (everything below it inherits it); exercise 2 has its sign flipped.

C4_EX1_A = """\
%%time
dlogprobs = torch.zeros_like(logprobs)
dlogprobs[range(n), Yb] = -1.0/n
cmp('logprobs', dlogprobs, logprobs)
dprobs = dlogprobs / probs
cmp('probs', dprobs, probs)
dcounts_sum_inv = (counts * dprobs).sum(1, keepdim=True)
cmp('counts_sum_inv', dcounts_sum_inv, counts_sum_inv)
dcounts_sum = -counts_sum**-2 * dcounts_sum_inv
cmp('counts_sum', dcounts_sum, counts_sum)
dcounts = counts_sum_inv * dprobs + torch.ones_like(counts) * dcounts_sum
cmp('counts', dcounts, counts)
# Exercise 1: backprop through the whole thing manually,
# backpropagating through exactly all of the variables
# as they are defined in the forward pass above, one by one"""

C4_EX1_B = """\
words = open('names.txt', 'r').read().splitlines()  # lost my kernel once, reloading to be safe
print(len(words), 'words;', 'loss was', loss.item())
torch.manual_seed(1337)
dnorm_logits = counts * dcounts
cmp('norm_logits', dnorm_logits, norm_logits)
dlogit_maxes = -dnorm_logits.sum(1, keepdim=True)
cmp('logit_maxes', dlogit_maxes, logit_maxes)
print(dlogit_maxes.abs().max())  # tiny, as it should be
dlogits = dnorm_logits.clone()
dlogits += F.one_hot(logits.max(1).indices, num_classes=logits.shape[1]) * dlogit_maxes
cmp('logits', dlogits, logits)
plt.imshow(F.one_hot(logits.max(1).indices, num_classes=logits.shape[1]))
%time _ = dlogits @ W2.T"""

C4_EX1_C = """\
dh = dlogits @ W2.T
dW2 = h.T @ dlogits
db2 = dlogits.sum(1, keepdim=True)
cmp('h', dh, h)
cmp('W2', dW2, W2)
cmp('b2', db2, b2)
dhpreact = (1.0 - h**2) * dh
cmp('hpreact', dhpreact, hpreact)
dbngain = (bnraw * dhpreact).sum(1, keepdim=True)
dbnraw = bngain * dhpreact
dbnbias = dhpreact.sum(0, keepdim=True)
cmp('bngain', dbngain, bngain)
cmp('bnraw', dbnraw, bnraw)
cmp('bnbias', dbnbias, bnbias)
plt.hist(dhpreact.view(-1).tolist(), 50);"""

C4_EX1_D = """\
dbnvar_inv = (bndiff * dbnraw).sum(0, keepdim=True)
cmp('bnvar_inv', dbnvar_inv, bnvar_inv)
dbnvar = -0.5 * (bnvar + 1e-5)**-1.5 * dbnvar_inv
cmp('bnvar', dbnvar, bnvar)
dbndiff2 = torch.ones_like(bndiff2) * dbnvar / (n - 1)
cmp('bndiff2', dbndiff2, bndiff2)
dbndiff = bnvar_inv * dbnraw + 2 * bndiff * dbndiff2
cmp('bndiff', dbndiff, bndiff)
dbnmeani = -dbndiff.sum(0)
cmp('bnmeani', dbnmeani, bnmeani)
dhprebn = dbndiff + dbnmeani
cmp('hprebn', dhprebn, hprebn)
dembcat = dhprebn @ W1.T
dW1 = embcat.T @ dhprebn
db1 = dhprebn.sum(0)
cmp('embcat', dembcat, embcat)
cmp('W1', dW1, W1)
cmp('b1', db1, b1)
demb = dembcat.view(emb.shape)
cmp('emb', demb, emb)
dC = torch.zeros_like(C)
for k in range(Xb.shape[0]):
  for j in range(Xb.shape[1]):
    dC[Xb[k, j]] += demb[k, j]
cmp('C', dC, C)
# end of exercise 1"""

C4_EX2 = """\
dlogits = (F.one_hot(Yb, vocab_size) - F.softmax(logits, 1)) / n
cmp('logits', dlogits, logits)
# Exercise 2: backprop through cross_entropy but all in one go
# to complete this challenge look at the mathematical expression of the loss,
# take the derivative, simplify the expression, and just write it out
loss_fast = F.cross_entropy(logits, Yb)
print(loss_fast.item(), 'diff:', (loss_fast - loss).item())"""

C4_EX3 = """\
dhprebn = bngain*bnvar_inv/n * (n*dhpreact - dhpreact.sum(0) - n/(n-1)*bnraw*(dhpreact*bnraw).sum(0))
cmp('hprebn', dhprebn, hprebn)
# Exercise 3: backprop through batchnorm but all in one go
# BatchNorm paper: https://arxiv.org/abs/1502.03167
hpreact_fast = bngain * (hprebn - hprebn.mean(0, keepdim=True)) / torch.sqrt(hprebn.var(0, keepdim=True, unbiased=True) + 1e-5) + bnbias
print('max diff:', (hpreact_fast - hpreact).abs().max())"""

CASE4 = {
    "name": "answers_above_comments_mixed_cells",
    "notebook": _nb([
        *SETUP, C4_EX1_A, C4_EX1_B, C4_EX1_C, C4_EX1_D,
        C4_EX2, "plt.figure(figsize=(4, 4))\nplt.imshow(dlogits.detach(), cmap='gray')",
        C4_EX3,
        "%%time\n" + train(TRAIN_BACKWARD_OK), *AFTER,
    ]),
    "right": set(ALL) - _a("h", "bngain", "hprebn", "embcat", "emb", "C") - {EX2},
    "wrong": _a("h", "bngain", "hprebn", "embcat", "emb", "C") | {EX2},
    "renamed_forward": False,
}

# --------------------------------------------------------------------------------------------
# lecture-name answers, one step at a time (right), and the cmp lines that go with them

R = {
    "logprobs": "dlogprobs = torch.zeros_like(logprobs)\ndlogprobs[range(n), Yb] = -1.0/n",
    "probs": "dprobs = (1.0 / probs) * dlogprobs",
    "counts_sum_inv": "dcounts_sum_inv = (counts * dprobs).sum(1, keepdim=True)\n"
                      "dcounts = counts_sum_inv * dprobs",
    "counts_sum": "dcounts_sum = (-counts_sum**-2) * dcounts_sum_inv",
    "counts": "dcounts += torch.ones_like(counts) * dcounts_sum",
    "norm_logits": "dnorm_logits = counts * dcounts # note: norm_logits.exp() is counts",
    "logit_maxes": "dlogits = dnorm_logits.clone()\ndlogit_maxes = (-dnorm_logits).sum(1, keepdim=True)",
    "logits": "dlogits += F.one_hot(logits.max(1).indices, num_classes=logits.shape[1]) * dlogit_maxes",
    "h": "dh = dlogits @ W2.T\ndW2 = h.T @ dlogits\ndb2 = dlogits.sum(0)",
    "hpreact": "dhpreact = (1.0 - h**2) * dh",
    "bngain": "dbngain = (bnraw * dhpreact).sum(0, keepdim=True)\ndbnraw = bngain * dhpreact\n"
              "dbnbias = dhpreact.sum(0, keepdim=True)",
    "bnvar_inv": "dbndiff = bnvar_inv * dbnraw\ndbnvar_inv = (bndiff * dbnraw).sum(0, keepdim=True)",
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
GRADS = {"h": ["h", "W2", "b2"], "bngain": ["bngain", "bnraw", "bnbias"],
         "embcat": ["embcat", "W1", "b1"]}


def cmps(step: str) -> str:
    return "\n".join(f"cmp('{t}', d{t}, {t})" for t in GRADS.get(step, [step]))


def per_step_cells(steps, answers=None) -> list[str]:
    answers = answers or {}
    return [f"{answers.get(s, R[s])}\n{cmps(s)}" for s in steps]


# --------------------------------------------------------------------------------------------
# 5. A cell per step, all right, then a "cleanup" section at the end of exercise 1 that redoes
#    some gradients compactly and compares again: dcounts and dhprebn as one-liners (right),
#    dnorm_logits against norm_logits instead of counts, dbndiff2 over n, dbnraw without
#    bngain (all three wrong, and being last, they stand). Exercise 2 takes the softmax over
#    the wrong dimension; exercise 3 drops bngain; the training loop skips the batchnorm's
#    backward (dhprebn = dhpreact).

C5_CLEANUP = """\
# ---- cleanup: the same gradients, written more compactly ----
dcounts = counts_sum_inv * dprobs + dcounts_sum   # the two branches at once
cmp('counts (one line)', dcounts, counts)
dnorm_logits = dcounts * norm_logits
cmp('norm_logits (one line)', dnorm_logits, norm_logits)
dbnraw = dhpreact
dbngain = (bnraw * dhpreact).sum(0, keepdim=True)
dbnbias = dhpreact.sum(0, keepdim=True)
cmp('bngain', dbngain, bngain); cmp('bnraw', dbnraw, bnraw); cmp('bnbias', dbnbias, bnbias)"""

C5_CLEANUP2 = """\
dbndiff2 = torch.ones_like(bndiff2) * dbnvar / n
cmp('bndiff2 (again)', dbndiff2, bndiff2)
dhprebn = dbndiff - dbndiff.mean(0, keepdim=True)
cmp('hprebn (one line)', dhprebn, hprebn)"""

C5_EX2 = """\
# backward pass

dlogits = F.softmax(logits, 0)
dlogits[range(n), Yb] -= 1
dlogits /= n

cmp('logits', dlogits, logits) # I can only get approximate to be true, my maxdiff is 6e-9"""

C5_EX3 = """\
# backward pass

# calculate dhprebn given dhpreact (i.e. backprop through the batchnorm)
dhprebn = bnvar_inv/n * (n*dhpreact - dhpreact.sum(0) - n/(n-1)*bnraw*(dhpreact*bnraw).sum(0))

cmp('hprebn', dhprebn, hprebn) # I can only get approximate to be true, my maxdiff is 9e-10"""

C5_TRAIN = TRAIN_BACKWARD_OK.replace(
    "    dhprebn = bngain*bnvar_inv/n * (n*dhpreact - dhpreact.sum(0) - n/(n-1)*bnraw*(dhpreact*bnraw).sum(0))",
    "    dhprebn = dhpreact  # TODO: batchnorm backward, skipping it for now")

CASE5 = {
    "name": "late_cleanup_reattempts",
    "notebook": _nb([
        *SETUP, EX1_TODO_HEAD, *per_step_cells(ATOMIC), C5_CLEANUP, C5_CLEANUP2,
        EX2_FWD, C5_EX2, "logits.shape, Yb.shape", EX3_FWD, C5_EX3,
        train(C5_TRAIN), AFTER[1],
    ]),
    "right": set(ALL) - _a("norm_logits", "bngain", "bndiff2") - {EX2, EX3, EX4},
    "wrong": _a("norm_logits", "bngain", "bndiff2") | {EX2, EX3, EX4},
    "renamed_forward": False,
}

# --------------------------------------------------------------------------------------------
# 6. Exercise 1 inside a function of the learner's (`manual_backward`, with `N = Xb.shape[0]`)
#    returning a dict, compared in a loop through globals(); sums without keepdim over the
#    batch (harmless: they broadcast back). Wrong: db2 a mean, dbnbias scaled by bngain, demb reshaped in
#    the wrong order (and so dC built from it). Exercises 2 and 3 as functions too, exercise 2
#    forgetting the 1/N; the training loop calls the learner's functions (right).

C6_FN = """\
def manual_backward():
    N = Xb.shape[0]
    g = {}
    dlogprobs = torch.zeros_like(logprobs)
    dlogprobs[torch.arange(N), Yb] = -1 / N
    dprobs = dlogprobs / probs
    dcounts_sum_inv = (dprobs * counts).sum(1, keepdim=True)
    dcounts_sum = -dcounts_sum_inv / counts_sum**2
    dcounts = dprobs * counts_sum_inv + dcounts_sum
    dnorm_logits = dcounts * counts
    dlogit_maxes = -dnorm_logits.sum(1, keepdim=True)
    dlogits = dnorm_logits + F.one_hot(logits.argmax(1), logits.shape[1]) * dlogit_maxes
    dh, dW2, db2 = dlogits @ W2.T, h.T @ dlogits, dlogits.mean(0)
    dhpreact = dh * (1 - h**2)
    dbngain = (dhpreact * bnraw).sum(0)
    dbnbias = (dhpreact * bngain).sum(0)
    dbnraw = dhpreact * bngain
    dbnvar_inv = (dbnraw * bndiff).sum(0)
    dbnvar = dbnvar_inv * -0.5 * (bnvar + 1e-5)**-1.5
    dbndiff2 = dbnvar * torch.ones_like(bndiff2) / (N - 1)
    dbndiff = dbnraw * bnvar_inv + 2 * bndiff * dbndiff2
    dbnmeani = -dbndiff.sum(0)
    dhprebn = dbndiff + dbnmeani / N
    dembcat, dW1, db1 = dhprebn @ W1.T, embcat.T @ dhprebn, dhprebn.sum(0)
    demb = dembcat.view(N, n_embd, block_size).transpose(1, 2)
    dC = torch.zeros_like(C)
    dC.index_add_(0, Xb.flatten(), demb.reshape(-1, n_embd))
    for k, v in list(locals().items()):
        if k.startswith('d'):
            g[k] = v
    return g

grads_ex1 = manual_backward()
print(sorted(grads_ex1))"""

C6_CMPS = """\
names = ['logprobs', 'probs', 'counts_sum_inv', 'counts_sum', 'counts', 'norm_logits',
         'logit_maxes', 'logits', 'h', 'W2', 'b2', 'hpreact', 'bngain', 'bnbias', 'bnraw',
         'bnvar_inv', 'bnvar', 'bndiff2', 'bndiff', 'bnmeani', 'hprebn', 'embcat', 'W1', 'b1',
         'emb', 'C']
for name in names:
    cmp(name, grads_ex1['d' + name], globals()[name])"""

C6_EX2 = """\
def ce_backward(logits, Y):
    return F.softmax(logits, 1) - F.one_hot(Y, logits.shape[1])

cmp('logits', ce_backward(logits, Yb), logits)"""

C6_EX3 = """\
def bn_backward(dout, gain, xhat, var_inv):
    m = dout.shape[0]
    return gain * var_inv / m * (m * dout - dout.sum(0) - m / (m - 1) * xhat * (dout * xhat).sum(0))

dhpreact = grads_ex1['dhpreact']
cmp('hprebn', bn_backward(dhpreact, bngain, bnraw, bnvar_inv), hprebn)"""

C6_TRAIN = """\
    dlogits = ce_backward(logits, Yb) / n
    dh, dW2, db2 = dlogits @ W2.T, h.T @ dlogits, dlogits.sum(0)
    dhpreact = (1 - h**2) * dh
    dbngain = (dhpreact * bnraw).sum(0, keepdim=True)
    dbnbias = dhpreact.sum(0, keepdim=True)
    dhprebn = bn_backward(dhpreact, bngain, bnraw, bnvar_inv)
    dembcat, dW1, db1 = dhprebn @ W1.T, embcat.T @ dhprebn, dhprebn.sum(0)
    dC = torch.zeros_like(C)
    dC.index_add_(0, Xb.view(-1), dembcat.view(-1, n_embd))
    grads = [dC, dW1, db1, dW2, db2, dbngain, dbnbias]"""

CASE6 = {
    "name": "backward_in_functions",
    "notebook": _nb([
        *SETUP, md("### Exercise 1 (I wrapped the whole backward pass in a function)"),
        C6_FN, C6_CMPS, EX2_FWD, C6_EX2, EX3_FWD, C6_EX3, train(C6_TRAIN), AFTER[1],
    ]),
    "right": set(ALL) - _a("h", "bngain", "emb", "C") - {EX2},
    "wrong": _a("h", "bngain", "emb", "C") | {EX2},
    "renamed_forward": False,
}

# --------------------------------------------------------------------------------------------
# 7. RENAMED FORWARD (short names): the learner rewrote the forward pass with names of their
#    own (e, x, z, mu, zc, ..., out, pr, lp) and used them everywhere after. Wrong: dW2
#    transposed (its cmp is the cell's last line, as it raises in a real kernel), dbnbias not
#    summed over the batch, dmu with the sign flipped (dz then recomputed in one line, right),
#    dC by assignment, and a late retry of dex_sum without the square (wrong, and last);
#    exercise 3 flips the sign of the middle term; the training loop's
#    batchnorm backward forgets the n/(n-1).

ALIASES_SHORT = {
    "e": "emb", "x": "embcat", "z": "hprebn", "mu": "bnmeani", "zc": "bndiff", "zc2": "bndiff2",
    "var": "bnvar", "rstd": "bnvar_inv", "zn": "bnraw", "a": "hpreact", "hid": "h",
    "out": "logits", "out_max": "logit_maxes", "out_c": "norm_logits", "ex": "counts",
    "ex_sum": "counts_sum", "ex_sum_inv": "counts_sum_inv", "pr": "probs", "lp": "logprobs",
}

C7_FORWARD = """\
# my version of the forward pass: shorter names, same steps
e = C[Xb]                        # (32, 3, 10)
x = e.view(e.shape[0], -1)       # (32, 30)
z = x @ W1 + b1                  # pre-batchnorm
mu = 1/n * z.sum(0, keepdim=True)
zc = z - mu
zc2 = zc**2
var = 1/(n-1) * zc2.sum(0, keepdim=True)   # Bessel
rstd = (var + 1e-5)**-0.5
zn = zc * rstd
a = bngain * zn + bnbias         # pre-activation
hid = torch.tanh(a)
out = hid @ W2 + b2              # logits
out_max = out.max(1, keepdim=True).values
out_c = out - out_max
ex = out_c.exp()
ex_sum = ex.sum(1, keepdims=True)
ex_sum_inv = ex_sum**-1
pr = ex * ex_sum_inv
lp = pr.log()
loss = -lp[range(n), Yb].mean()

for p in parameters:
  p.grad = None
for t in [lp, pr, ex, ex_sum, ex_sum_inv, out_c, out_max, out, hid, a, zn, rstd, var, zc2, zc,
          z, mu, x, e]:
  t.retain_grad()
loss.backward()
loss"""

C7_EX1_A = """\
# Exercise 1, in my names
dlp = torch.zeros_like(lp)
dlp[range(n), Yb] = -1.0/n
cmp('lp', dlp, lp)
dpr = dlp / pr
cmp('pr', dpr, pr)
dex_sum_inv = (ex * dpr).sum(1, keepdim=True)
cmp('ex_sum_inv', dex_sum_inv, ex_sum_inv)
dex_sum = -ex_sum**-2 * dex_sum_inv
cmp('ex_sum', dex_sum, ex_sum)
dex = ex_sum_inv * dpr + dex_sum
cmp('ex', dex, ex)
dout_c = ex * dex
cmp('out_c', dout_c, out_c)
dout_max = -dout_c.sum(1, keepdim=True)
cmp('out_max', dout_max, out_max)
dout = dout_c + F.one_hot(out.max(1).indices, num_classes=vocab_size) * dout_max
cmp('out', dout, out)"""

C7_EX1_B = """\
dhid = dout @ W2.T
dW2 = dout.T @ hid
db2 = dout.sum(0)
cmp('hid', dhid, hid)
cmp('b2', db2, b2)
cmp('W2', dW2, W2)"""

C7_EX1_C = """\
da = (1 - hid**2) * dhid
cmp('a', da, a)
dbngain = (zn * da).sum(0, keepdim=True)
dbnbias = da
dzn = bngain * da
cmp('bngain', dbngain, bngain)
cmp('bnbias', dbnbias, bnbias)
cmp('zn', dzn, zn)
drstd = (zc * dzn).sum(0, keepdim=True)
cmp('rstd', drstd, rstd)
dvar = -0.5 * (var + 1e-5)**-1.5 * drstd
cmp('var', dvar, var)
dzc2 = torch.ones_like(zc2) * dvar / (n - 1)
cmp('zc2', dzc2, zc2)
dzc = rstd * dzn + 2 * zc * dzc2
cmp('zc', dzc, zc)
dmu = dzc.sum(0, keepdim=True)
cmp('mu', dmu, mu)
dz = dzc - dzc.mean(0, keepdim=True)   # = dzc + dmu/n with the right dmu
cmp('z', dz, z)
dx = dz @ W1.T
dW1 = x.T @ dz
db1 = dz.sum(0)
cmp('x', dx, x); cmp('W1', dW1, W1); cmp('b1', db1, b1)
de = dx.view(e.shape)
cmp('e', de, e)
dC = torch.zeros_like(C)
dC[Xb] = de
cmp('C', dC, C)"""

C7_EX2_FWD = """\
# Exercise 2: the loss in one go
loss_fast = F.cross_entropy(out, Yb)
print(loss_fast.item(), 'diff:', (loss_fast - loss).item())"""

C7_EX2 = """\
dout = F.softmax(out, 1)
dout[range(n), Yb] -= 1
dout /= n
cmp('out', dout, out)"""

C7_EX3_FWD = """\
# Exercise 3: batchnorm in one go
a_fast = bngain * (z - z.mean(0, keepdim=True)) / torch.sqrt(z.var(0, keepdim=True, unbiased=True) + 1e-5) + bnbias
print('max diff:', (a_fast - a).abs().max())"""

C7_EX3 = """\
dz = bngain * rstd / n * (n * da + da.sum(0) - n/(n-1) * zn * (da * zn).sum(0))
cmp('z', dz, z)"""

C7_TRAIN = """\
# Exercise 4: train with my own backward pass (my names again)
n_hidden = 200
g = torch.Generator().manual_seed(2147483647)
C  = torch.randn((vocab_size, n_embd),            generator=g)
W1 = torch.randn((n_embd * block_size, n_hidden), generator=g) * (5/3)/((n_embd * block_size)**0.5)
b1 = torch.randn(n_hidden,                        generator=g) * 0.1
W2 = torch.randn((n_hidden, vocab_size),          generator=g) * 0.1
b2 = torch.randn(vocab_size,                      generator=g) * 0.1
bngain = torch.randn((1, n_hidden))*0.1 + 1.0
bnbias = torch.randn((1, n_hidden))*0.1
parameters = [C, W1, b1, W2, b2, bngain, bnbias]
for p in parameters:
  p.requires_grad = True

max_steps = 200000
batch_size = 32
n = batch_size
lossi = []

with torch.no_grad():
  for i in range(max_steps):
    ix = torch.randint(0, Xtr.shape[0], (batch_size,), generator=g)
    Xb, Yb = Xtr[ix], Ytr[ix]
    # forward
    e = C[Xb]
    x = e.view(e.shape[0], -1)
    z = x @ W1 + b1
    mu = z.mean(0, keepdim=True)
    var = z.var(0, keepdim=True, unbiased=True)
    rstd = (var + 1e-5)**-0.5
    zn = (z - mu) * rstd
    a = bngain * zn + bnbias
    hid = torch.tanh(a)
    out = hid @ W2 + b2
    loss = F.cross_entropy(out, Yb)
    # backward
    dout = F.softmax(out, 1)
    dout[range(n), Yb] -= 1
    dout /= n
    dhid = dout @ W2.T
    dW2 = hid.T @ dout
    db2 = dout.sum(0)
    da = (1 - hid**2) * dhid
    dbngain = (zn * da).sum(0, keepdim=True)
    dbnbias = da.sum(0, keepdim=True)
    dz = bngain * rstd / n * (n * da - da.sum(0) - zn * (da * zn).sum(0))
    dx = dz @ W1.T
    dW1 = x.T @ dz
    db1 = dz.sum(0)
    dC = torch.zeros_like(C)
    dC.index_add_(0, Xb.view(-1), dx.view(-1, n_embd))
    grads = [dC, dW1, db1, dW2, db2, dbngain, dbnbias]
    # update
    lr = 0.1 if i < 100000 else 0.01
    for p, grad in zip(parameters, grads):
      p.data += -lr * grad
    if i % 10000 == 0:
      print(f'{i:7d}/{max_steps:7d}: {loss.item():.4f}')
    lossi.append(loss.log10().item())"""

CASE7 = {
    "name": "renamed_forward_short_names",
    "notebook": _nb([
        *SETUP[:-1], C7_FORWARD, C7_EX1_A, C7_EX1_B, C7_EX1_C,
        "# does ex_sum really need the square?\ndex_sum = -dex_sum_inv / ex_sum\ncmp('ex_sum', dex_sum, ex_sum)",
        C7_EX2_FWD, C7_EX2, C7_EX3_FWD, C7_EX3, C7_TRAIN,
        "plt.plot(torch.tensor(lossi).view(-1, 10).mean(1))",
    ]),
    "right": set(ALL) - _a("counts_sum", "h", "bngain", "bnmeani", "C") - {EX3, EX4},
    "wrong": _a("counts_sum", "h", "bngain", "bnmeani", "C") | {EX3, EX4},
    "renamed_forward": True,
}

# --------------------------------------------------------------------------------------------
# 8. RENAMED FORWARD, parameters too (emb_table, W_h, b_h, W_o, b_o, gamma, beta; batch xb,
#    yb), gradients named g_<tensor>. Exercise 1 only as far as the batchnorm's output layer:
#    the tanh derivative mis-parenthesised ((1 - act)**2), and the gamma/beta/normed gradients
#    built on it. Exercise 2 takes the softmax over dim 0; exercise 3 (tanh fixed there) right;
#    the training loop lists beta's gradient where gamma's belongs and vice versa.

ALIASES_LONG = {
    "tok": "emb", "flat": "embcat", "pre": "hprebn", "mean": "bnmeani", "cen": "bndiff",
    "cen_sq": "bndiff2", "variance": "bnvar", "inv_std": "bnvar_inv", "normed": "bnraw",
    "act_in": "hpreact", "act": "h", "scores": "logits", "row_max": "logit_maxes",
    "shifted": "norm_logits", "expd": "counts", "denom": "counts_sum",
    "denom_inv": "counts_sum_inv", "prob": "probs", "logp": "logprobs", "emb_table": "C",
    "W_h": "W1", "b_h": "b1", "W_o": "W2", "b_o": "b2", "gamma": "bngain", "beta": "bnbias",
    "xb": "Xb", "yb": "Yb",
}

C8_INIT = """\
d_emb, ctx, hidden = 10, block_size, 64
gen = torch.Generator().manual_seed(2147483647)
emb_table = torch.randn((vocab_size, d_emb), generator=gen)
W_h = torch.randn((d_emb * ctx, hidden), generator=gen) * (5/3) / (d_emb * ctx)**0.5
b_h = torch.randn(hidden, generator=gen) * 0.1
W_o = torch.randn((hidden, vocab_size), generator=gen) * 0.1
b_o = torch.randn(vocab_size, generator=gen) * 0.1
gamma = torch.randn((1, hidden)) * 0.1 + 1.0
beta = torch.randn((1, hidden)) * 0.1
params = [emb_table, W_h, b_h, W_o, b_o, gamma, beta]
for p in params:
    p.requires_grad = True
print(sum(p.nelement() for p in params))"""

C8_BATCH = """\
bs = 32
idx = torch.randint(0, Xtr.shape[0], (bs,), generator=gen)
xb, yb = Xtr[idx], Ytr[idx]"""

C8_FORWARD = """\
tok = emb_table[xb]
flat = tok.view(bs, -1)
pre = flat @ W_h + b_h
mean = pre.mean(0, keepdim=True)
cen = pre - mean
cen_sq = cen**2
variance = cen_sq.sum(0, keepdim=True) / (bs - 1)
inv_std = (variance + 1e-5)**-0.5
normed = cen * inv_std
act_in = gamma * normed + beta
act = torch.tanh(act_in)
scores = act @ W_o + b_o
row_max = scores.max(1, keepdim=True).values
shifted = scores - row_max
expd = shifted.exp()
denom = expd.sum(1, keepdim=True)
denom_inv = denom**-1
prob = expd * denom_inv
logp = prob.log()
loss = -logp[range(bs), yb].mean()

for p in params:
    p.grad = None
keep = [logp, prob, expd, denom, denom_inv, shifted, row_max, scores, act, act_in, normed,
        inv_std, variance, cen_sq, cen, pre, mean, flat, tok]
for t in keep:
    t.retain_grad()
loss.backward()
print(loss.item())"""

C8_EX1 = """\
g_logp = torch.zeros_like(logp)
g_logp[range(bs), yb] = -1 / bs
g_prob = g_logp / prob
g_denom_inv = (g_prob * expd).sum(1, keepdim=True)
g_denom = -denom**-2 * g_denom_inv
g_expd = g_prob * denom_inv + g_denom
g_shifted = g_expd * expd
g_row_max = -g_shifted.sum(1, keepdim=True)
g_scores = g_shifted.clone()
g_scores[range(bs), scores.argmax(1)] += g_row_max[:, 0]
g_act = g_scores @ W_o.T
g_W_o = act.T @ g_scores
g_b_o = g_scores.sum(0)
g_act_in = (1 - act)**2 * g_act
g_gamma = (g_act_in * normed).sum(0, keepdim=True)
g_beta = g_act_in.sum(0, keepdim=True)
g_normed = g_act_in * gamma"""

C8_CMPS = """\
for label, mine, ref in [('logp', g_logp, logp), ('prob', g_prob, prob), ('denom_inv', g_denom_inv, denom_inv),
                         ('denom', g_denom, denom), ('expd', g_expd, expd), ('shifted', g_shifted, shifted),
                         ('row_max', g_row_max, row_max), ('scores', g_scores, scores),
                         ('act', g_act, act), ('W_o', g_W_o, W_o), ('b_o', g_b_o, b_o),
                         ('act_in', g_act_in, act_in), ('gamma', g_gamma, gamma), ('beta', g_beta, beta),
                         ('normed', g_normed, normed)]:
    cmp(label, mine, ref)
# TODO the rest of the batchnorm and the first layer"""

C8_EX2_FWD = """\
loss_fast = F.cross_entropy(scores, yb)
print(loss_fast.item(), 'diff:', (loss_fast - loss).item())"""

C8_EX2 = """\
g_scores = F.softmax(scores, 0)
g_scores[range(bs), yb] -= 1
g_scores /= bs
cmp('scores', g_scores, scores)"""

C8_EX3_FWD = """\
act_in_fast = gamma * (pre - pre.mean(0, keepdim=True)) / torch.sqrt(pre.var(0, keepdim=True, unbiased=True) + 1e-5) + beta
print('max diff:', (act_in_fast - act_in).abs().max())"""

C8_EX3 = """\
g_act_in = (1 - act**2) * g_act   # fixed my tanh derivative
m = bs
g_pre = gamma * inv_std / m * (m * g_act_in - g_act_in.sum(0) - m/(m-1) * normed * (g_act_in * normed).sum(0))
cmp('pre', g_pre, pre)"""

C8_TRAIN = """\
hidden = 200
gen = torch.Generator().manual_seed(2147483647)
emb_table = torch.randn((vocab_size, d_emb), generator=gen)
W_h = torch.randn((d_emb * ctx, hidden), generator=gen) * (5/3) / (d_emb * ctx)**0.5
b_h = torch.randn(hidden, generator=gen) * 0.1
W_o = torch.randn((hidden, vocab_size), generator=gen) * 0.1
b_o = torch.randn(vocab_size, generator=gen) * 0.1
gamma = torch.randn((1, hidden)) * 0.1 + 1.0
beta = torch.randn((1, hidden)) * 0.1
params = [emb_table, W_h, b_h, W_o, b_o, gamma, beta]
for p in params:
    p.requires_grad = True

max_steps = 200000
losses = []
with torch.no_grad():
    for step in range(max_steps):
        idx = torch.randint(0, Xtr.shape[0], (bs,), generator=gen)
        xb, yb = Xtr[idx], Ytr[idx]
        tok = emb_table[xb]
        flat = tok.view(bs, -1)
        pre = flat @ W_h + b_h
        mean = pre.mean(0, keepdim=True)
        variance = pre.var(0, keepdim=True, unbiased=True)
        inv_std = (variance + 1e-5)**-0.5
        normed = (pre - mean) * inv_std
        act_in = gamma * normed + beta
        act = torch.tanh(act_in)
        scores = act @ W_o + b_o
        loss = F.cross_entropy(scores, yb)

        g_scores = F.softmax(scores, 1)
        g_scores[range(bs), yb] -= 1
        g_scores /= bs
        g_act = g_scores @ W_o.T
        g_W_o = act.T @ g_scores
        g_b_o = g_scores.sum(0)
        g_act_in = (1 - act**2) * g_act
        g_gamma = (g_act_in * normed).sum(0, keepdim=True)
        g_beta = g_act_in.sum(0, keepdim=True)
        g_pre = gamma * inv_std / bs * (bs * g_act_in - g_act_in.sum(0) - bs/(bs-1) * normed * (g_act_in * normed).sum(0))
        g_flat = g_pre @ W_h.T
        g_W_h = flat.T @ g_pre
        g_b_h = g_pre.sum(0)
        g_tok = g_flat.view(tok.shape)
        g_emb_table = torch.zeros_like(emb_table)
        g_emb_table.index_add_(0, xb.view(-1), g_tok.view(-1, d_emb))

        lr = 0.1 if step < 100000 else 0.01
        for p, grad in zip(params, [g_emb_table, g_W_h, g_b_h, g_W_o, g_b_o, g_beta, g_gamma]):
            p.data -= lr * grad
        losses.append(loss.item())
        if step % 10000 == 0:
            print(step, loss.item())"""

CASE8 = {
    "name": "renamed_forward_and_params",
    "notebook": _nb([
        *SETUP[:6], C8_INIT, C8_BATCH, C8_FORWARD,
        md("## Exercise 1 -- my names: g_x is dloss/dx"), C8_EX1, C8_CMPS,
        md("## Exercise 2"), C8_EX2_FWD, C8_EX2,
        md("## Exercise 3"), C8_EX3_FWD, C8_EX3,
        md("## Exercise 4"), C8_TRAIN,
    ]),
    "right": _a(*ATOMIC[:9]) | {EX3},
    "wrong": _a("hpreact", "bngain") | {EX2, EX4},
    "renamed_forward": True,
}

# --------------------------------------------------------------------------------------------
# 9. No exercise comments or headings anywhere (the learner deleted them), only the first four
#    steps of exercise 1 (dcounts_sum forgets its upstream), then exercises 2, 3 and 4;
#    exercise 3 recomputes dhpreact from exercise 2's dlogits and divides by n-1 up front.

C9_EX1 = """\
dlogprobs = torch.zeros_like(logprobs)
dlogprobs[range(n), Yb] = -1.0/n
dprobs = dlogprobs * probs**-1
dcounts_sum_inv = (counts * dprobs).sum(1, keepdim=True)
dcounts_sum = -counts_sum**-2
cmp('logprobs', dlogprobs, logprobs)
cmp('probs', dprobs, probs)
cmp('counts_sum_inv', dcounts_sum_inv, counts_sum_inv)
cmp('counts_sum', dcounts_sum, counts_sum)"""

C9_EX2 = """\
dlogits = F.softmax(logits, 1)
dlogits[range(n), Yb] -= 1
dlogits /= n
cmp('logits', dlogits, logits)
plt.figure(figsize=(8, 8))
plt.imshow(dlogits.detach(), cmap='gray')"""

C9_EX3 = """\
dh = dlogits @ W2.T
dhpreact = (1.0 - h**2) * dh
dhprebn = bngain*bnvar_inv/(n-1) * (n*dhpreact - dhpreact.sum(0) - n/(n-1)*bnraw*(dhpreact*bnraw).sum(0))
cmp('hprebn', dhprebn, hprebn)"""

C9_TRAIN_BACKWARD = """\
    dlogits = F.softmax(logits, 1)
    dlogits[range(n), Yb] -= 1
    dlogits /= n
    dh = dlogits @ W2.T
    dW2 = h.T @ dlogits
    db2 = dlogits.sum(0)
    dhpreact = (1.0 - h**2) * dh
    dbngain = (bnraw * dhpreact).sum(0, keepdim=True)
    dbnbias = dhpreact.sum(0, keepdim=True)
    dhprebn = bngain*bnvar_inv/n * (n*dhpreact - dhpreact.sum(0) - n/(n-1)*bnraw*(dhpreact*bnraw).sum(0))
    dembcat = dhprebn @ W1.T
    dW1 = embcat.T @ dhprebn
    db1 = dhprebn.sum(0)
    demb = dembcat.view(emb.shape)
    dC = torch.zeros_like(C)
    dC.index_add_(0, Xb.view(-1), demb.view(-1, n_embd))
    grads = [dC, dW1, db1, dW2, db2, dbngain, dbnbias]"""


def _strip_comments(text: str) -> str:
    return "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("#"))


CASE9 = {
    "name": "no_exercise_comments_short_ex1",
    "notebook": _nb([
        *SETUP, C9_EX1, _strip_comments(EX2_FWD), C9_EX2, _strip_comments(EX3_FWD), C9_EX3,
        _strip_comments(train(C9_TRAIN_BACKWARD, head="")),
        "plt.plot(torch.tensor(lossi).view(-1, 10).mean(1))", AFTER[0], AFTER[1],
    ]),
    "right": _a("logprobs", "probs", "counts_sum_inv") | {EX2, EX4},
    "wrong": _a("counts_sum") | {EX3},
    "renamed_forward": False,
}

# --------------------------------------------------------------------------------------------
# 10. Mistyped labels, some cmps twice, one-hot and scatter tricks, index_add_ for dC. dcounts_sum
#     has its sign flipped but dcounts is written as one self-contained line (right); dbnmeani
#     is summed without the minus but dhprebn is a fresh one-liner (right); dbngain skips the
#     tanh (dh, not dhpreact); dW1 and db1 skip the batchnorm (taken from dhpreact). Exercise 2 forgets the -1 at the targets; exercise 3 has
#     (n-1)/n upside down; exercise 4 under %%time, right.

C10_EX1_A = """\
# Exercise 1: backprop through the whole thing manually
dlogprobs = -F.one_hot(Yb, num_classes=vocab_size) / n
cmp('logprobs', dlogprobs, logprobs)
dprobs = dlogprobs / probs
cmp('probs', dprobs, probs)
cmp('prbos', dprobs, probs)
dcounts_sum_inv = (counts * dprobs).sum(1, keepdim=True)
cmp('counts_sum_inv', dcounts_sum_inv, counts_sum_inv)
dcounts_sum = counts_sum**-2 * dcounts_sum_inv
cmp('counts_sum', dcounts_sum, counts_sum)
dcounts = counts_sum_inv * dprobs - (counts * dprobs).sum(1, keepdim=True) * counts_sum**-2
cmp('counts', dcounts, counts)
dnorm_logits = counts * dcounts
cmp('norm_logits', dnorm_logits, norm_logits)
dlogit_maxes = -dnorm_logits.sum(1, keepdim=True)
cmp('logit_maxes', dlogit_maxes, logit_maxes)
dlogits = dnorm_logits.clone()
dlogits.scatter_add_(1, logits.argmax(1, keepdim=True), dlogit_maxes)
cmp('logtis', dlogits, logits)
cmp('logits', dlogits, logits)"""

C10_EX1_B = """\
dh = dlogits @ W2.T
dW2 = h.T @ dlogits
db2 = dlogits.sum(0)
cmp('h', dh, h); cmp('W2', dW2, W2); cmp('b2', db2, b2)
dhpreact = (1.0 - h**2) * dh
cmp('hpreact', dhpreact, hpreact)
dbngain = (bnraw * dh).sum(0, keepdim=True)
dbnraw = bngain * dhpreact
dbnbias = dhpreact.sum(0, keepdim=True)
cmp('bngain', dbngain, bngain); cmp('bnraw', dbnraw, bnraw); cmp('bnbias', dbnbias, bnbias)
dbndiff = bnvar_inv * dbnraw
dbnvar_inv = (bndiff * dbnraw).sum(0, keepdim=True)
cmp('bnvar_inv', dbnvar_inv, bnvar_inv)
dbnvar = (-0.5*(bnvar + 1e-5)**-1.5) * dbnvar_inv
cmp('bnvar', dbnvar, bnvar)
dbndiff2 = (1.0/(n-1))*torch.ones_like(bndiff2) * dbnvar
cmp('bndiff2', dbndiff2, bndiff2)
dbndiff += (2*bndiff) * dbndiff2
cmp('bndiff', dbndiff, bndiff)
dbnmeani = dbndiff.sum(0, keepdim=True)
cmp('bnmeani', dbnmeani, bnmeani)
dhprebn = dbndiff - dbndiff.sum(0, keepdim=True) / n
cmp('hprebn', dhprebn, hprebn)
cmp('hprebn', dhprebn, hprebn)"""

C10_EX1_C = """\
dembcat = dhprebn @ W1.T
dW1 = embcat.T @ dhpreact
db1 = dhpreact.sum(0)
cmp('embcat', dembcat, embcat)
cmp('W1', dW1, W1)
cmp('b1', db1, b1)
demb = dembcat.view(emb.shape)
cmp('emb', demb, emb)
dC = torch.zeros_like(C)
dC.index_add_(0, Xb.view(-1), demb.view(-1, n_embd))
cmp('C', dC, C)"""

C10_EX2 = """\
# backward pass
dlogits = F.softmax(logits, 1) / n
cmp('logits', dlogits, logits)"""

C10_EX3 = """\
# backward pass
dhprebn = bngain*bnvar_inv/n * (n*dhpreact - dhpreact.sum(0) - (n-1)/n*bnraw*(dhpreact*bnraw).sum(0))
cmp('hprebn', dhprebn, hprebn)"""

CASE10 = {
    "name": "typos_double_cmps_fresh_oneliners",
    "notebook": _nb([
        *SETUP, C10_EX1_A, C10_EX1_B, C10_EX1_C, EX2_FWD, C10_EX2, EX3_FWD, C10_EX3,
        "%%time\n" + train(TRAIN_BACKWARD_OK), AFTER[1], AFTER[2],
    ]),
    "right": set(ALL) - _a("counts_sum", "bngain", "bnmeani", "embcat") - {EX2, EX3},
    "wrong": _a("counts_sum", "bngain", "bnmeani", "embcat") | {EX2, EX3},
    "renamed_forward": False,
}

# --------------------------------------------------------------------------------------------
# 11. Exercise 1 in four section cells (`N = Xb.shape[0]`), every check in one loop over a list
#     at the end. Wrong: db2 divided by N, dbnvar with exponent -0.5 instead of -1.5 (and so
#     every batchnorm gradient below it but dbnmeani, which multiplies it by sum(bndiff) = 0;
#     dhprebn, the first layer and the embedding), dC by
#     fancy-index += (no accumulation); the training loop leaves dbnbias out of its list.

C11_S1 = """\
# --- cross entropy ---
N = Xb.shape[0]
dlogprobs = torch.zeros_like(logprobs)
dlogprobs[range(N), Yb] = -1.0 / N
dprobs = dlogprobs / probs
dcounts_sum_inv = (dprobs * counts).sum(1, keepdim=True)
dcounts_sum = -dcounts_sum_inv * counts_sum**-2
dcounts = dprobs * counts_sum_inv + dcounts_sum * torch.ones_like(counts)
dnorm_logits = dcounts * counts
dlogit_maxes = -dnorm_logits.sum(1, keepdim=True)
dlogits = dnorm_logits + F.one_hot(logits.max(1).indices, vocab_size) * dlogit_maxes"""

C11_S2 = """\
# --- second linear layer and tanh ---
dh = dlogits @ W2.T
dW2 = h.T @ dlogits
db2 = dlogits.sum(0) / N
dhpreact = (1 - h**2) * dh"""

C11_S3 = """\
# --- batchnorm ---
dbngain = (dhpreact * bnraw).sum(0, keepdim=True)
dbnbias = dhpreact.sum(0, keepdim=True)
dbnraw = dhpreact * bngain
dbnvar_inv = (dbnraw * bndiff).sum(0, keepdim=True)
dbnvar = -0.5 * (bnvar + 1e-5)**-0.5 * dbnvar_inv
dbndiff2 = dbnvar.expand(N, -1) / (N - 1)
dbndiff = dbnraw * bnvar_inv + 2 * bndiff * dbndiff2
dbnmeani = -dbndiff.sum(0, keepdim=True)
dhprebn = dbndiff + dbnmeani / N"""

C11_S4 = """\
# --- first layer and embedding ---
dembcat = dhprebn @ W1.T
dW1 = embcat.T @ dhprebn
db1 = dhprebn.sum(0)
demb = dembcat.view(emb.shape)
dC = torch.zeros_like(C)
dC[Xb.view(-1)] += demb.view(-1, n_embd)"""

C11_CHECKS = """\
checks = [('logprobs', dlogprobs, logprobs), ('probs', dprobs, probs),
          ('counts_sum_inv', dcounts_sum_inv, counts_sum_inv), ('counts_sum', dcounts_sum, counts_sum),
          ('counts', dcounts, counts), ('norm_logits', dnorm_logits, norm_logits),
          ('logit_maxes', dlogit_maxes, logit_maxes), ('logits', dlogits, logits),
          ('h', dh, h), ('W2', dW2, W2), ('b2', db2, b2), ('hpreact', dhpreact, hpreact),
          ('bngain', dbngain, bngain), ('bnbias', dbnbias, bnbias), ('bnraw', dbnraw, bnraw),
          ('bnvar_inv', dbnvar_inv, bnvar_inv), ('bnvar', dbnvar, bnvar),
          ('bndiff2', dbndiff2, bndiff2), ('bndiff', dbndiff, bndiff), ('bnmeani', dbnmeani, bnmeani),
          ('hprebn', dhprebn, hprebn), ('embcat', dembcat, embcat), ('W1', dW1, W1), ('b1', db1, b1),
          ('emb', demb, emb), ('C', dC, C)]
for name, dt, t in checks:
  cmp(name, dt, t)"""

C11_EX2 = """\
# backward pass
probs_fast = F.softmax(logits, 1)
dlogits = (probs_fast - F.one_hot(Yb, vocab_size).float()) / N
cmp('logits', dlogits, logits)"""

C11_EX3 = """\
# backward pass
xhat = bnraw
dxhat = dhpreact * bngain
dhprebn = bnvar_inv / N * (N * dxhat - dxhat.sum(0, keepdim=True) - N / (N - 1) * xhat * (dxhat * xhat).sum(0, keepdim=True))
cmp('hprebn', dhprebn, hprebn)"""

C11_TRAIN = TRAIN_BACKWARD_OK.replace(
    "grads = [dC, dW1, db1, dW2, db2, dbngain, dbnbias]",
    "grads = [dC, dW1, db1, dW2, db2, dbngain]")

CASE11 = {
    "name": "section_cells_check_list_loop",
    "notebook": _nb([
        *SETUP, EX1_TODO_HEAD, C11_S1, C11_S2, C11_S3, C11_S4, C11_CHECKS,
        EX2_FWD, C11_EX2, EX3_FWD, C11_EX3, train(C11_TRAIN), AFTER[1],
    ]),
    "right": _a(*ATOMIC[:8], "hpreact", "bngain", "bnvar_inv", "bnmeani") | {EX2, EX3},
    "wrong": _a("h", "bnvar", "bndiff2", "bndiff", "hprebn", "embcat", "emb", "C") | {EX4},
    "renamed_forward": False,
}

# --------------------------------------------------------------------------------------------
# 12. A cell per step, all right, then a "recheck everything" cell at the end of exercise 1 into
#     which the learner pasted `dbndiff += ...` a second time and the dC loop without zeroing
#     dC first, and retyped dprobs (summing dlogprobs over the row) and dhpreact (tanh of h):
#     all four compared again, wrong, and last; dbnmeani and dhprebn compared again, right. Exercise 2: first forgets /n, then
#     right (the right one last). Exercise 3: first right, then "simplified" without n/(n-1)
#     (the wrong one last). Exercise 4 right.

C12_RECHECK = """\
# recheck everything in one go before moving on
dprobs = 1.0 / probs * dlogprobs.sum(1, keepdim=True)
dhpreact = (1.0 - torch.tanh(h)**2) * dh
dbndiff += (2*bndiff) * dbndiff2
for k in range(Xb.shape[0]):
  for j in range(Xb.shape[1]):
    ix = Xb[k,j]
    dC[ix] += demb[k,j]
for name in ['probs', 'hpreact', 'bndiff', 'bnmeani', 'hprebn', 'C']:
  cmp(name, globals()['d' + name], globals()[name])"""

C12_EX2_A = """\
# backward pass
dlogits = F.softmax(logits, 1)
dlogits[range(n), Yb] -= 1
cmp('logits', dlogits, logits)"""

C12_EX2_B = """\
dlogits /= n   # forgot the mean!
cmp('logits', dlogits, logits)"""

C12_EX3_A = """\
# backward pass
dhprebn = bngain*bnvar_inv/n * (n*dhpreact - dhpreact.sum(0) - n/(n-1)*bnraw*(dhpreact*bnraw).sum(0))
cmp('hprebn', dhprebn, hprebn)"""

C12_EX3_B = """\
# n/(n-1) is ~1 anyway, simpler:
dhprebn = bngain*bnvar_inv/n * (n*dhpreact - dhpreact.sum(0) - bnraw*(dhpreact*bnraw).sum(0))
cmp('hprebn', dhprebn, hprebn)"""

CASE12 = {
    "name": "recheck_cell_pasted_twice",
    "notebook": _nb([
        *SETUP, EX1_TODO_HEAD, *per_step_cells(ATOMIC), C12_RECHECK,
        EX2_FWD, C12_EX2_A, C12_EX2_B, EX3_FWD, C12_EX3_A, C12_EX3_B,
        train(TRAIN_BACKWARD_OK), *AFTER,
    ]),
    "right": set(ALL) - _a("probs", "hpreact", "bndiff", "C") - {EX3},
    "wrong": _a("probs", "hpreact", "bndiff", "C") | {EX3},
    "renamed_forward": False,
}

# --------------------------------------------------------------------------------------------
# 13. Barely started: the cross-entropy part of exercise 1 in the starter's cell (the rest of
#     its cmp lines still commented out), dcounts_sum_inv first without keepdim then fixed in
#     the next cell, dcounts redone at the end as one (wrong) line; exercise 2 with the sign
#     flipped; exercises 3 and 4 still the starter's placeholders.

C13_EX1_A = """\
# Exercise 1: backprop through the whole thing manually,
# backpropagating through exactly all of the variables
# as they are defined in the forward pass above, one by one

# -----------------
# YOUR CODE HERE :)
dlogprobs = torch.zeros_like(logprobs)
dlogprobs[range(n), Yb] = -1.0/n
dprobs = (1.0 / probs) * dlogprobs
dcounts_sum_inv = (counts * dprobs).sum(1)
# -----------------

cmp('logprobs', dlogprobs, logprobs)
cmp('probs', dprobs, probs)
cmp('counts_sum_inv', dcounts_sum_inv, counts_sum_inv)
# cmp('counts_sum', dcounts_sum, counts_sum)
# cmp('counts', dcounts, counts)
# cmp('norm_logits', dnorm_logits, norm_logits)
# cmp('logit_maxes', dlogit_maxes, logit_maxes)
# cmp('logits', dlogits, logits)
# cmp('h', dh, h)
# cmp('W2', dW2, W2)
# cmp('b2', db2, b2)
# cmp('hpreact', dhpreact, hpreact)
# cmp('bngain', dbngain, bngain)
# cmp('bnbias', dbnbias, bnbias)
# cmp('bnraw', dbnraw, bnraw)
# cmp('bnvar_inv', dbnvar_inv, bnvar_inv)
# cmp('bnvar', dbnvar, bnvar)
# cmp('bndiff2', dbndiff2, bndiff2)
# cmp('bndiff', dbndiff, bndiff)
# cmp('bnmeani', dbnmeani, bnmeani)
# cmp('hprebn', dhprebn, hprebn)
# cmp('embcat', dembcat, embcat)
# cmp('W1', dW1, W1)
# cmp('b1', db1, b1)
# cmp('emb', demb, emb)
# cmp('C', dC, C)"""

C13_EX1_B = """\
dcounts_sum_inv = (counts * dprobs).sum(1, keepdim=True)  # keepdim!!
cmp('counts_sum_inv', dcounts_sum_inv, counts_sum_inv)
dcounts = counts_sum_inv * dprobs
dcounts_sum = (-counts_sum**-2) * dcounts_sum_inv
cmp('counts_sum', dcounts_sum, counts_sum)
dcounts += torch.ones_like(counts) * dcounts_sum
cmp('counts', dcounts, counts)
dnorm_logits = counts * dcounts
cmp('norm_logits', dnorm_logits, norm_logits)
dlogit_maxes = (-dnorm_logits).sum(1, keepdim=True)
cmp('logit_maxes', dlogit_maxes, logit_maxes)
dlogits = dnorm_logits.clone()
dlogits += F.one_hot(logits.max(1).indices, num_classes=logits.shape[1]) * dlogit_maxes
cmp('logits', dlogits, logits)"""

C13_EX1_C = """\
# can dcounts be one line?
dcounts = counts_sum_inv * dprobs + dcounts_sum * counts
cmp('counts', dcounts, counts)"""

C13_EX2 = """\
# backward pass

# -----------------
# YOUR CODE HERE :)
dlogits = F.softmax(logits, 1)
dlogits[range(n), Yb] -= 1
dlogits /= -n
# -----------------

cmp('logits', dlogits, logits) # I can only get approximate to be true, my maxdiff is 6e-9"""

CASE13 = {
    "name": "barely_started_starter_cells",
    "notebook": _nb([
        md("# makemore: becoming a backprop ninja"), *SETUP, C13_EX1_A, C13_EX1_B, C13_EX1_C,
        EX2_FWD, C13_EX2, EX3_FWD, EX3_TODO, train(TRAIN_TODO), *AFTER,
    ]),
    "right": _a("logprobs", "probs", "counts_sum_inv", "counts_sum", "norm_logits",
                "logit_maxes", "logits"),
    "wrong": _a("counts") | {EX2},
    "renamed_forward": False,
}

# --------------------------------------------------------------------------------------------
# 14. Everything right, messily: headings in markdown only, the learner's own names for some
#     upstream gradients (dL_dprobs, dL_dcounts) copied into the lecture's names at the end,
#     `N = Xb.shape[0]`, a tanh backward function, prints and plots and %time between the
#     answers, mistyped labels, all cmp calls in one cell at the end; exercises 2 to 4 right in
#     forms other than the lecture's.

C14_A = """\
N = Xb.shape[0]
print('batch', N)
dL_dlogprobs = torch.zeros_like(logprobs)
dL_dlogprobs[torch.arange(N), Yb] = -1.0 / N
dL_dprobs = dL_dlogprobs / probs
dL_dcsi = (counts * dL_dprobs).sum(dim=1, keepdim=True)
dL_dcs = dL_dcsi * (-1.0 / counts_sum**2)
dL_dcounts = dL_dprobs * counts_sum_inv + dL_dcs.expand_as(counts)
plt.imshow(dL_dcounts.detach(), cmap='gray')"""

C14_B = """\
%time dL_dnorm = dL_dcounts * counts
dL_dnorm = dL_dcounts * counts
dL_dmax = -dL_dnorm.sum(dim=1, keepdim=True)
mask = torch.zeros_like(logits)
mask[torch.arange(N), logits.argmax(dim=1)] = 1.0
dL_dlogits = dL_dnorm + mask * dL_dmax
print((dL_dlogits - logits.grad).abs().max())"""

C14_C = """\
def tanh_backward(dout, out):
    return (1.0 - out**2) * dout

dL_dh = dL_dlogits @ W2.transpose(0, 1)
dL_dW2 = h.transpose(0, 1) @ dL_dlogits
dL_db2 = dL_dlogits.sum(dim=0)
dL_dhpreact = tanh_backward(dL_dh, h)"""

C14_D = """\
torch.manual_seed(0)  # (was testing something with random tensors here)
dL_dbngain = (bnraw * dL_dhpreact).sum(0, keepdim=True)
dL_dbnbias = dL_dhpreact.sum(0, keepdim=True)
dL_dbnraw = bngain * dL_dhpreact
dL_dbnvar_inv = (bndiff * dL_dbnraw).sum(0, keepdim=True)
dL_dbnvar = dL_dbnvar_inv * (-0.5) * (bnvar + 1e-5)**(-1.5)
dL_dbndiff2 = torch.full_like(bndiff2, 1.0 / (N - 1)) * dL_dbnvar
dL_dbndiff = dL_dbnraw * bnvar_inv + 2.0 * bndiff * dL_dbndiff2
dL_dbnmeani = -dL_dbndiff.sum(0, keepdim=True)
dL_dhprebn = dL_dbndiff + dL_dbnmeani.expand_as(hprebn) / N"""

C14_E = """\
dL_dembcat = dL_dhprebn @ W1.T
dL_dW1 = embcat.T @ dL_dhprebn
dL_db1 = dL_dhprebn.sum(0)
dL_demb = dL_dembcat.reshape(emb.shape)
dL_dC = torch.zeros_like(C)
dL_dC.index_put_((Xb.reshape(-1),), dL_demb.reshape(-1, C.shape[1]), accumulate=True)"""

C14_NAMES = """\
# lecture names, for the cmp cell
dlogprobs, dprobs, dcounts_sum_inv, dcounts_sum, dcounts = dL_dlogprobs, dL_dprobs, dL_dcsi, dL_dcs, dL_dcounts
dnorm_logits, dlogit_maxes, dlogits = dL_dnorm, dL_dmax, dL_dlogits
dh, dW2, db2, dhpreact = dL_dh, dL_dW2, dL_db2, dL_dhpreact
dbngain, dbnbias, dbnraw = dL_dbngain, dL_dbnbias, dL_dbnraw
dbnvar_inv, dbnvar, dbndiff2, dbndiff = dL_dbnvar_inv, dL_dbnvar, dL_dbndiff2, dL_dbndiff
dbnmeani, dhprebn = dL_dbnmeani, dL_dhprebn
dembcat, dW1, db1, demb, dC = dL_dembcat, dL_dW1, dL_db1, dL_demb, dL_dC"""

C14_CMPS = """\
cmp('logprobs', dlogprobs, logprobs)
cmp('probs', dprobs, probs)
cmp('counts_sum_inv', dcounts_sum_inv, counts_sum_inv)
cmp('counts_sum', dcounts_sum, counts_sum)
cmp('counts', dcounts, counts)
cmp('norm_logits', dnorm_logits, norm_logits)
cmp('logit_maxes', dlogit_maxes, logit_maxes)
cmp('logits', dlogits, logits)
cmp('h', dh, h)
cmp('W2', dW2, W2)
cmp('b2', db2, b2)
cmp('hpreact', dhpreact, hpreact)
cmp('bngain', dbngain, bngain)
cmp('bnbias', dbnbias, bnbias)
cmp('bnraw', dbnraw, bnraw)
cmp('bnvar_inv', dbnvar_inv, bnvar_inv)
cmp('bnvar', dbnvar, bnvar)
cmp('bndiff2', dbndiff2, bndiff2)
cmp('bndif', dbndiff, bndiff)
cmp('bnmean', dbnmeani, bnmeani)
cmp('hprebn', dhprebn, hprebn)
cmp('embcat', dembcat, embcat)
cmp('W1', dW1, W1)
cmp('b1', db1, b1)
cmp('emb', demb, emb)
cmp('C', dC, C)"""

C14_EX2 = """\
sm = logits.softmax(dim=-1)
dlogits = (sm - F.one_hot(Yb, num_classes=sm.shape[1])) * (1.0 / N)
cmp('logits', dlogits, logits)"""

C14_EX3 = """\
# dhprebn straight from hprebn's statistics
xmu = hprebn - hprebn.mean(0, keepdim=True)
istd = (((xmu**2).sum(0, keepdim=True) / (N - 1)) + 1e-5)**-0.5
xhat = xmu * istd
dxhat = dhpreact * bngain
dhprebn = istd * (dxhat - dxhat.mean(0, keepdim=True) - xhat * (dxhat * xhat).sum(0, keepdim=True) / (N - 1))
cmp('hprebn', dhprebn, hprebn)"""

C14_TRAIN = """\
    probs_ = F.softmax(logits, 1)
    dlogits = (probs_ - F.one_hot(Yb, vocab_size)) / n
    dW2 = h.T @ dlogits
    db2 = dlogits.sum(0)
    dhpreact = tanh_backward(dlogits @ W2.T, h)
    dbngain = (bnraw * dhpreact).sum(0, keepdim=True)
    dbnbias = dhpreact.sum(0, keepdim=True)
    dxhat = dhpreact * bngain
    dhprebn = bnvar_inv * (dxhat - dxhat.mean(0, keepdim=True) - bnraw * (dxhat * bnraw).sum(0, keepdim=True) / (n - 1))
    dW1 = embcat.T @ dhprebn
    db1 = dhprebn.sum(0)
    dC = torch.zeros_like(C)
    dC.index_put_((Xb.reshape(-1),), (dhprebn @ W1.T).reshape(-1, n_embd), accumulate=True)
    grads = [dC, dW1, db1, dW2, db2, dbngain, dbnbias]"""

CASE14 = {
    "name": "all_right_messy",
    "notebook": _nb([
        *SETUP, md("## Exercise 1\n(my own names first, lecture names at the end)"),
        C14_A, C14_B, C14_C, C14_D, C14_E, C14_NAMES, C14_CMPS,
        md("## Exercise 2"), EX2_FWD_BARE, C14_EX2,
        md("## Exercise 3"), EX3_FWD_BARE, C14_EX3,
        md("## Exercise 4"), train(C14_TRAIN, head="# Exercise 4 - training with my gradients"),
        "plt.plot(lossi)", *AFTER,
    ]),
    "right": set(ALL),
    "wrong": set(),
    "renamed_forward": False,
}

# --------------------------------------------------------------------------------------------
# 15. Sign slips and wrong variables, a cell per step with a print after each cmp, the
#     `# Exercise 1` comment left at the bottom of the last cell. Wrong: db2, dbngain and dW1
#     negated, dC subtracting; exercise 2 divides by n-1; exercise 3 uses bnvar where bnvar_inv
#     belongs; the training loop negates dbnbias.

C15_ANSWERS = {
    "h": "dh = dlogits @ W2.T\ndW2 = h.T @ dlogits\ndb2 = -dlogits.sum(0)",
    "bngain": "dbngain = -(bnraw * dhpreact).sum(0, keepdim=True)\ndbnraw = bngain * dhpreact\n"
              "dbnbias = dhpreact.sum(0, keepdim=True)",
    "embcat": "dembcat = dhprebn @ W1.T\ndW1 = -embcat.T @ dhprebn\ndb1 = dhprebn.sum(0)",
    "C": "dC = torch.zeros_like(C)\nfor k in range(Xb.shape[0]):\n  for j in range(Xb.shape[1]):\n"
         "    dC[Xb[k, j]] -= demb[k, j]",
}
C15_EX1 = [c + "\nprint('-' * 20)" for c in per_step_cells(ATOMIC, C15_ANSWERS)]
C15_EX1[-1] += "\n# Exercise 1: backprop through the whole thing manually (done!)"

C15_EX2 = """\
# backward pass
dlogits = F.softmax(logits, 1)
dlogits[range(n), Yb] -= 1
dlogits /= (n - 1)
cmp('logits', dlogits, logits)"""

C15_EX3 = """\
# backward pass
dhprebn = bngain*bnvar/n * (n*dhpreact - dhpreact.sum(0) - n/(n-1)*bnraw*(dhpreact*bnraw).sum(0))
cmp('hprebn', dhprebn, hprebn)"""

C15_TRAIN = TRAIN_BACKWARD_OK.replace("    dbnbias = dhpreact.sum(0, keepdim=True)",
                                      "    dbnbias = -dhpreact.sum(0, keepdim=True)")

CASE15 = {
    "name": "sign_slips_cell_per_step",
    "notebook": _nb([
        *SETUP, *C15_EX1, EX2_FWD, C15_EX2, EX3_FWD, C15_EX3, train(C15_TRAIN), AFTER[1],
    ]),
    "right": set(ALL) - _a("h", "bngain", "embcat", "C") - {EX2, EX3, EX4},
    "wrong": _a("h", "bngain", "embcat", "C") | {EX2, EX3, EX4},
    "renamed_forward": False,
}

# --------------------------------------------------------------------------------------------

CASES: list[dict] = [CASE1, CASE2, CASE3, CASE4, CASE5, CASE6, CASE7, CASE8, CASE9, CASE10,
                     CASE11, CASE12, CASE13, CASE14, CASE15]

ALIASES: dict[str, dict[str, str]] = {
    "renamed_forward_short_names": ALIASES_SHORT,
    "renamed_forward_and_params": ALIASES_LONG,
}

CASCADE: dict[str, set[str]] = {
    "one_statement_per_cell": _a("bndiff", "hprebn", "embcat", "emb", "C"),
    "answers_above_comments_mixed_cells": _a("embcat", "emb", "C"),
    "backward_in_functions": _a("C"),
    "renamed_forward_and_params": _a("bngain"),
    "section_cells_check_list_loop": _a("bndiff2", "bndiff", "hprebn", "embcat", "emb"),
}
