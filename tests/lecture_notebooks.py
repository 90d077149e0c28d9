"""Notebooks in the layout of the lecture's makemore part 4 notebook, filled in the ways learners
fill it in: our own cells, in its order (setup, its `cmp` helper, the forward pass, exercise 1's
cell or cells, exercises 2 and 3 with a forward cell and a backward cell each, exercise 4's
training loop, then evaluation and sampling)."""

from __future__ import annotations

import json
from pathlib import Path

SETUP = [
    "import torch\nimport torch.nn.functional as F\nimport matplotlib.pyplot as plt\n"
    "%matplotlib inline",
    "words = open('names.txt', 'r').read().splitlines()\nprint(len(words))",
    "chars = sorted(list(set(''.join(words))))\nstoi = {s: i + 1 for i, s in enumerate(chars)}\n"
    "stoi['.'] = 0\nitos = {i: s for s, i in stoi.items()}\nvocab_size = len(itos)",
    "block_size = 3\n\ndef build_dataset(words):\n  X, Y = [], []\n  for w in words:\n"
    "    context = [0] * block_size\n    for ch in w + '.':\n      ix = stoi[ch]\n"
    "      X.append(context)\n      Y.append(ix)\n      context = context[1:] + [ix]\n"
    "  return torch.tensor(X), torch.tensor(Y)\n\nimport random\nrandom.seed(42)\n"
    "random.shuffle(words)\nn1, n2 = int(0.8 * len(words)), int(0.9 * len(words))\n"
    "Xtr, Ytr = build_dataset(words[:n1])\nXdev, Ydev = build_dataset(words[n1:n2])",
    "# compares a gradient of ours with the one autograd left in t.grad\n"
    "def cmp(s, dt, t):\n  ex = torch.all(dt == t.grad).item()\n"
    "  app = torch.allclose(dt, t.grad)\n  maxdiff = (dt - t.grad).abs().max().item()\n"
    "  print(f'{s:15s} | exact: {str(ex):5s} | approximate: {str(app):5s} | maxdiff: {maxdiff}')",
    "n_embd = 10\nn_hidden = 64\ng = torch.Generator().manual_seed(2147483647)\n"
    "C = torch.randn((vocab_size, n_embd), generator=g)\n"
    "W1 = torch.randn((n_embd * block_size, n_hidden), generator=g) * 0.2\n"
    "b1 = torch.randn(n_hidden, generator=g) * 0.1\n"
    "W2 = torch.randn((n_hidden, vocab_size), generator=g) * 0.1\n"
    "b2 = torch.randn(vocab_size, generator=g) * 0.1\n"
    "bngain = torch.randn((1, n_hidden)) * 0.1 + 1.0\nbnbias = torch.randn((1, n_hidden)) * 0.1\n"
    "parameters = [C, W1, b1, W2, b2, bngain, bnbias]\nfor p in parameters:\n"
    "  p.requires_grad = True",
    "batch_size = 32\nn = batch_size\nix = torch.randint(0, Xtr.shape[0], (batch_size,), "
    "generator=g)\nXb, Yb = Xtr[ix], Ytr[ix]",
    # The notebook's forward pass: never run by the tutor, which uses its own.
    "emb = C[Xb]\nembcat = emb.view(emb.shape[0], -1)\nhprebn = embcat @ W1 + b1\n"
    "bnmeani = 1/n*hprebn.sum(0, keepdim=True)\nbndiff = hprebn - bnmeani\n"
    "bndiff2 = bndiff**2\nbnvar = 1/(n-1)*(bndiff2).sum(0, keepdim=True)\n"
    "bnvar_inv = (bnvar + 1e-5)**-0.5\nbnraw = bndiff * bnvar_inv\n"
    "hpreact = bngain * bnraw + bnbias\nh = torch.tanh(hpreact)\nlogits = h @ W2 + b2\n"
    "logit_maxes = logits.max(1, keepdim=True).values\nnorm_logits = logits - logit_maxes\n"
    "counts = norm_logits.exp()\ncounts_sum = counts.sum(1, keepdims=True)\n"
    "counts_sum_inv = counts_sum**-1\nprobs = counts * counts_sum_inv\nlogprobs = probs.log()\n"
    "loss = -logprobs[range(n), Yb].mean()\nfor t in [logprobs, probs, counts, counts_sum,\n"
    "          counts_sum_inv, norm_logits, logit_maxes, logits, h, hpreact, bnraw,\n"
    "          bnvar_inv, bnvar, bndiff2, bndiff, hprebn, bnmeani, embcat, emb]:\n"
    "  t.retain_grad()\nloss.backward()\nloss",
]

# Exercise 1, one line's gradient per entry (as a learner writes it, in the lecture's order).
EX1_LINES = [
    ("logprobs", "dlogprobs = torch.zeros_like(logprobs)\ndlogprobs[range(n), Yb] = -1.0 / n"),
    ("probs", "dprobs = dlogprobs / probs"),
    ("counts_sum_inv", "dcounts_sum_inv = (dprobs * counts).sum(1, keepdim=True)\n"
                       "dcounts = dprobs * counts_sum_inv"),
    ("counts_sum", "dcounts_sum = -(counts_sum ** -2) * dcounts_sum_inv"),
    ("counts", "dcounts += dcounts_sum.expand_as(counts)"),
    ("norm_logits", "dnorm_logits = dcounts * counts"),
    ("logit_maxes", "dlogits = dnorm_logits.clone()\n"
                    "dlogit_maxes = -dnorm_logits.sum(1, keepdim=True)"),
    ("logits", "dlogits += F.one_hot(logits.argmax(1), num_classes=logits.shape[1]) "
               "* dlogit_maxes"),
    ("h", "dh = dlogits @ W2.T\ndW2 = h.T @ dlogits\ndb2 = dlogits.sum(0)"),
    ("hpreact", "dhpreact = (1 - h ** 2) * dh"),
    ("bngain", "dbngain = (dhpreact * bnraw).sum(0, keepdim=True)\ndbnraw = dhpreact * bngain\n"
               "dbnbias = dhpreact.sum(0, keepdim=True)"),
    ("bnvar_inv", "dbndiff = dbnraw * bnvar_inv\n"
                  "dbnvar_inv = (dbnraw * bndiff).sum(0, keepdim=True)"),
    ("bnvar", "dbnvar = -0.5 * (bnvar + 1e-5) ** -1.5 * dbnvar_inv"),
    ("bndiff2", "dbndiff2 = torch.ones_like(bndiff2) * dbnvar / (n - 1)"),
    ("bndiff", "dbndiff += 2 * bndiff * dbndiff2"),
    ("bnmeani", "dhprebn = dbndiff.clone()\ndbnmeani = -dbndiff.sum(0)"),
    ("hprebn", "dhprebn += dbnmeani / n"),
    ("embcat", "dembcat = dhprebn @ W1.T\ndW1 = embcat.T @ dhprebn\ndb1 = dhprebn.sum(0)"),
    ("emb", "demb = dembcat.view(emb.shape)"),
    ("C", "dC = torch.zeros_like(C)\nfor k in range(Xb.shape[0]):\n"
          "  for j in range(Xb.shape[1]):\n    dC[Xb[k, j]] += demb[k, j]"),
]

CMP_ORDER = ["logprobs", "probs", "counts_sum_inv", "counts_sum", "counts", "norm_logits",
             "logit_maxes", "logits", "h", "W2", "b2", "hpreact", "bngain", "bnbias", "bnraw",
             "bnvar_inv", "bnvar", "bndiff2", "bndiff", "bnmeani", "hprebn", "embcat", "W1",
             "b1", "emb", "C"]

EX1_HEAD = ("# Exercise 1: backprop through every line of the forward pass by hand,\n"
            "# one variable at a time\n")
EX2_FORWARD = ("# Exercise 2: the cross-entropy's gradient in one expression\n"
               "loss_fast = F.cross_entropy(logits, Yb)\n"
               "print(loss_fast.item(), 'diff:', (loss_fast - loss).item())")
EX2_BACKWARD = ("# backward pass\n\ndlogits = F.softmax(logits, 1)\n"
                "dlogits[range(n), Yb] -= 1\ndlogits /= n\n\ncmp('logits', dlogits, logits)")
EX3_FORWARD = ("# Exercise 3: batchnorm's gradient in one expression\n"
               "hpreact_fast = bngain * (hprebn - hprebn.mean(0, keepdim=True)) / "
               "torch.sqrt(hprebn.var(0, keepdim=True, unbiased=True) + 1e-5) + bnbias\n"
               "print('max diff:', (hpreact_fast - hpreact).abs().max())")
EX3_BACKWARD = ("# backward pass\n# dhprebn from dhpreact\n"
                "dhprebn = bngain * bnvar_inv / n * (n * dhpreact - dhpreact.sum(0)"
                " - n / (n - 1) * bnraw * (dhpreact * bnraw).sum(0))\n\n"
                "cmp('hprebn', dhprebn, hprebn)")

TRAIN_BACKWARD = """\
    dlogits = F.softmax(logits, 1)
    dlogits[range(n), Yb] -= 1
    dlogits /= n
    dh = dlogits @ W2.T
    dW2 = h.T @ dlogits
    db2 = dlogits.sum(0)
    dhpreact = (1.0 - h**2) * dh
    dbngain = (bnraw * dhpreact).sum(0, keepdim=True)
    dbnbias = dhpreact.sum(0, keepdim=True)
    dhprebn = bngain*bnvar_inv/n * (n*dhpreact - dhpreact.sum(0)
                                    - n/(n-1)*bnraw*(dhpreact*bnraw).sum(0))
    dembcat = dhprebn @ W1.T
    dW1 = embcat.T @ dhprebn
    db1 = dhprebn.sum(0)
    demb = dembcat.view(emb.shape)
    dC = torch.zeros_like(C)
    dC.index_add_(0, Xb.view(-1), demb.view(-1, C.shape[1]))
    grads = [dC, dW1, db1, dW2, db2, dbngain, dbnbias]
"""

TRAIN_CELL = """\
# Exercise 4: train the net with the backward pass you wrote

n_embd = 10
n_hidden = 200
g = torch.Generator().manual_seed(2147483647)
C = torch.randn((vocab_size, n_embd), generator=g)
W1 = torch.randn((n_embd * block_size, n_hidden), generator=g) * 0.2
b1 = torch.randn(n_hidden, generator=g) * 0.1
W2 = torch.randn((n_hidden, vocab_size), generator=g) * 0.1
b2 = torch.randn(vocab_size, generator=g) * 0.1
bngain = torch.randn((1, n_hidden)) * 0.1 + 1.0
bnbias = torch.randn((1, n_hidden)) * 0.1
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

    emb = C[Xb]
    embcat = emb.view(emb.shape[0], -1)
    hprebn = embcat @ W1 + b1
    bnmean = hprebn.mean(0, keepdim=True)
    bnvar = hprebn.var(0, keepdim=True, unbiased=True)
    bnvar_inv = (bnvar + 1e-5)**-0.5
    bnraw = (hprebn - bnmean) * bnvar_inv
    hpreact = bngain * bnraw + bnbias
    h = torch.tanh(hpreact)
    logits = h @ W2 + b2
    loss = F.cross_entropy(logits, Yb)

    for p in parameters:
      p.grad = None

{backward}
    lr = 0.1 if i < 100000 else 0.01
    for p, grad in zip(parameters, grads):
      p.data += -lr * grad

    if i % 10000 == 0:
      print(f'{{i:7d}}/{{max_steps:7d}}: {{loss.item():.4f}}')
    lossi.append(loss.log10().item())
"""

AFTER = [
    "with torch.no_grad():\n  emb = C[Xtr]\n  embcat = emb.view(emb.shape[0], -1)\n"
    "  hpreact = embcat @ W1 + b1\n  bnmean = hpreact.mean(0, keepdim=True)\n"
    "  bnvar = hpreact.var(0, keepdim=True, unbiased=True)",
    "@torch.no_grad()\ndef split_loss(split):\n  x, y = {'train': (Xtr, Ytr), 'val': (Xdev, Ydev)}"
    "[split]\n  emb = C[x]\n  hpreact = emb.view(emb.shape[0], -1) @ W1 + b1\n"
    "  hpreact = bngain * (hpreact - bnmean) * (bnvar + 1e-5)**-0.5 + bnbias\n"
    "  logits = torch.tanh(hpreact) @ W2 + b2\n  print(split, F.cross_entropy(logits, y).item())\n"
    "\nsplit_loss('train')\nsplit_loss('val')",
]


def ex1_one_cell(lines: list[tuple[str, str]] | None = None, cmps: bool = True) -> str:
    body = "\n".join(code for _, code in (lines or EX1_LINES))
    calls = "\n".join(f"cmp('{t}', d{t}, {t})" for t in CMP_ORDER) if cmps else ""
    return f"{EX1_HEAD}\n{body}\n\n{calls}\n"


def ex1_cell_per_line(lines: list[tuple[str, str]] | None = None) -> list[str]:
    cells = [EX1_HEAD]
    for tensor, code in lines or EX1_LINES:
        cells.append(f"{code}\ncmp('{tensor}', d{tensor}, {tensor})")
    return cells


def notebook(ex1: list[str], ex2: str = EX2_BACKWARD, ex3: str = EX3_BACKWARD,
             backward: str = TRAIN_BACKWARD) -> dict:
    sources = [*SETUP, *ex1, EX2_FORWARD, ex2, "logits.shape, Yb.shape",
               "plt.imshow(dlogits.detach(), cmap='gray')", EX3_FORWARD, ex3,
               TRAIN_CELL.format(backward=backward.rstrip("\n")), *AFTER]
    cells = [{"cell_type": "markdown", "metadata": {},
              "source": ["## makemore: the backward pass by hand\n"]}]
    for i, source in enumerate(sources):
        lines = source.splitlines(keepends=True)
        cells.append({"cell_type": "code", "execution_count": i + 1, "metadata": {},
                      "outputs": [], "source": lines})
    return {"cells": cells, "metadata": {"kernelspec": {"name": "python3",
                                                        "display_name": "Python 3",
                                                        "language": "python"}},
            "nbformat": 4, "nbformat_minor": 4}


def blank() -> dict:
    """The starter notebook: placeholders where the answers go, `cmp` lines commented out."""
    ex1 = (f"{EX1_HEAD}\n# -----------------\n# YOUR CODE HERE :)\n# -----------------\n\n"
           + "\n".join(f"# cmp('{t}', d{t}, {t})" for t in CMP_ORDER))
    ex2 = "# backward pass\n\n# -----------------\n# YOUR CODE HERE :)\ndlogits = None # TODO\n" \
          "# -----------------\n\n#cmp('logits', dlogits, logits)"
    ex3 = "# backward pass\n\n# -----------------\n# YOUR CODE HERE :)\ndhprebn = None # TODO\n" \
          "# -----------------\n\n# cmp('hprebn', dhprebn, hprebn)"
    backward = ("    # -----------------\n    # YOUR CODE HERE :)\n"
                "    dC, dW1, db1, dW2, db2, dbngain, dbnbias = None, None, None, None, None, "
                "None, None\n    grads = [dC, dW1, db1, dW2, db2, dbngain, dbnbias]\n"
                "    # -----------------")
    return notebook([ex1], ex2, ex3, backward)


def write(path: Path, document: dict) -> Path:
    path.write_text(json.dumps(document, indent=1))
    return path
