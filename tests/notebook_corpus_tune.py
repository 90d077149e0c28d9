"""Filled-in copies of the lecture's "backprop ninja" notebook (makemore part 4), as learners
write them, each with the steps it gets right and wrong: the half of the notebook corpus the
grader may be tuned on.

Written apart from the grader (tutor/course/ was never read). The labels are measured, not
guessed: tests/notebook_corpus_truth.py runs each notebook as a kernel would and compares the
last gradient the learner checked for each step with autograd's; `right` and `wrong` agree with
it (`.venv/bin/python tests/notebook_corpus_truth.py notebook_corpus_tune`). Steps in neither set
were not attempted. Wrong steps sit where they do not feed a later step the learner attempted
(a leaf such as dW2 or dC, the last step before the learner stopped, or a step the learner then
went round), so a step is never wrong only because an earlier one was.

CASES: name, notebook (nbformat 4), right, wrong, renamed_forward. ALIASES: for the notebooks
that renamed the forward pass, the learner's names -> the lecture's.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import lecture_notebooks as L  # noqa: E402

IMPORTS, WORDS, VOCAB, DATASET, CMP, PARAMS, BATCH = L.SETUP[:7]
FORWARD = L.SETUP[7]
SETUP = L.SETUP[:7]
EX1 = "# Exercise 1: backprop through the whole thing manually,\n" \
      "# backpropagating through exactly all of the variables\n" \
      "# as they are defined in the forward pass above, one by one"
EX2F = L.EX2_FORWARD
EX3F = L.EX3_FORWARD
EX2_HEAD = "# Exercise 2: backprop through cross_entropy but all in one go\n" \
           "# to complete this challenge look at the mathematical expression of the loss,\n" \
           "# take the derivative, simplify the expression, and just write it out"
EX3_HEAD = "# Exercise 3: backprop through batchnorm but all in one go"
ALL_CMPS = "\n".join(f"cmp('{t}', d{t}, {t})" for t in L.CMP_ORDER)

STEP_IDS = ["atomic/logprobs", "atomic/probs", "atomic/counts_sum_inv", "atomic/counts_sum",
            "atomic/counts", "atomic/norm_logits", "atomic/logit_maxes", "atomic/logits",
            "atomic/h", "atomic/hpreact", "atomic/bngain", "atomic/bnvar_inv", "atomic/bnvar",
            "atomic/bndiff2", "atomic/bndiff", "atomic/bnmeani", "atomic/hprebn",
            "atomic/embcat", "atomic/emb", "atomic/C", "fused/cross_entropy", "fused/batchnorm",
            "train/loop"]
ATOMIC = STEP_IDS[:20]


def _a(*names: str) -> set[str]:
    return {f"atomic/{x}" for x in names}


def md(text: str) -> tuple[str, str]:
    return ("markdown", text)


def nb(*cells) -> dict:
    out, count = [], 0
    for i, cell in enumerate(cells):
        if isinstance(cell, tuple):
            out.append({"cell_type": "markdown", "id": f"md-{i}", "metadata": {},
                        "source": cell[1].splitlines(keepends=True)})
            continue
        count += 1
        out.append({"cell_type": "code", "execution_count": count, "id": f"code-{i}",
                    "metadata": {}, "outputs": [], "source": cell.splitlines(keepends=True)})
    return {"cells": out, "metadata": {"kernelspec": {"display_name": "Python 3",
                                                      "language": "python", "name": "python3"},
                                       "language_info": {"name": "python"}},
            "nbformat": 4, "nbformat_minor": 5}


def train(backward: str, cell: str = L.TRAIN_CELL) -> str:
    return cell.format(backward=backward.rstrip("\n"))


# ---------------------------------------------------------------------------------------------
# training-loop backward passes (indented for the lecture's loop body)

TB_INDEX_ADD = L.TRAIN_BACKWARD

TB_LOOPS = """\
    # backward pass, all mine
    dlogits = F.softmax(logits, dim=1)
    dlogits[range(n), Yb] -= 1.0
    dlogits = dlogits / n
    dh = dlogits @ W2.transpose(0, 1)
    dW2 = h.transpose(0, 1) @ dlogits
    db2 = dlogits.sum(dim=0)
    dhpreact = dh * (1 - h * h)
    dbngain = (dhpreact * bnraw).sum(dim=0, keepdim=True)
    dbnbias = dhpreact.sum(dim=0, keepdim=True)
    dhprebn = (bngain * bnvar_inv / n) * (n * dhpreact - dhpreact.sum(0)
                                          - n / (n - 1) * bnraw * (dhpreact * bnraw).sum(0))
    dembcat = dhprebn @ W1.transpose(0, 1)
    dW1 = embcat.transpose(0, 1) @ dhprebn
    db1 = dhprebn.sum(dim=0)
    demb = dembcat.view(emb.shape)
    dC = torch.zeros_like(C)
    for k in range(Xb.shape[0]):
      for j in range(Xb.shape[1]):
        dC[Xb[k, j]] += demb[k, j]
    grads = [dC, dW1, db1, dW2, db2, dbngain, dbnbias]
"""

# the two batchnorm gradients swapped in the list: same shapes, so it runs, and trains badly
TB_SWAPPED = TB_INDEX_ADD.replace("grads = [dC, dW1, db1, dW2, db2, dbngain, dbnbias]",
                                  "grads = [dC, dW1, db1, dW2, db2, dbnbias, dbngain]")

# Bessel: n in place of n-1 inside the batchnorm gradient
TB_BESSEL = TB_LOOPS.replace("- n / (n - 1) * bnraw", "- bnraw")

# the cross-entropy gradient without the 1/n
TB_NO_MEAN = TB_LOOPS.replace("    dlogits = dlogits / n\n", "")


# ---------------------------------------------------------------------------------------------
# 1. one statement per cell, its cmp in the next cell

def _case_cell_per_statement() -> dict:
    ex1 = [
        "dlogprobs = torch.zeros_like(logprobs)\ndlogprobs[range(n), Yb] = -1.0/n",
        "cmp('logprobs', dlogprobs, logprobs)",
        "dprobs = (1.0 / probs) * dlogprobs",
        "cmp('probs', dprobs, probs)",
        "dcounts_sum_inv = (counts * dprobs).sum(1, keepdim=True)",
        "cmp('counts_sum_inv', dcounts_sum_inv, counts_sum_inv)",
        "dcounts = counts_sum_inv * dprobs",
        "dcounts_sum = (-counts_sum**-2) * dcounts_sum_inv",
        "cmp('counts_sum', dcounts_sum, counts_sum)",
        "dcounts += torch.ones_like(counts) * dcounts_sum",
        "cmp('counts', dcounts, counts)",
        "dnorm_logits = counts * dcounts",
        "cmp('norm_logits', dnorm_logits, norm_logits)",
        "dlogit_maxes = (-dnorm_logits).sum(1, keepdim=True)",
        "cmp('logit_maxes', dlogit_maxes, logit_maxes)",
        "dlogits = dnorm_logits.clone()",
        "dlogits += F.one_hot(logits.max(1).indices, num_classes=logits.shape[1]) * dlogit_maxes",
        "cmp('logits', dlogits, logits)",
        "dh = dlogits @ W2.T",
        "dW2 = h.T @ dlogits",
        "db2 = dlogits.sum(1)",
        "cmp('h', dh, h)\ncmp('W2', dW2, W2)\ncmp('b2', db2, b2)",
        "dhpreact = (1.0 - h**2) * dh",
        "cmp('hpreact', dhpreact, hpreact)",
        "dbngain = (bnraw * dhpreact).sum(0, keepdim=True)",
        "dbnraw = bngain * dhpreact",
        "dbnbias = dhpreact.sum(1, keepdim=True)",
        "cmp('bngain', dbngain, bngain)\ncmp('bnraw', dbnraw, bnraw)\n"
        "cmp('bnbias', dbnbias, bnbias)",
        "dbnvar_inv = (bnraw * dbnraw).sum(0, keepdim=True)",
        "cmp('bnvar_inv', dbnvar_inv, bnvar_inv)",
        "dbndiff = bnvar_inv * dbnraw",
        "dbnvar = (-0.5 * (bnvar + 1e-5)**-1.5) * (bndiff * dbnraw).sum(0, keepdim=True)",
        "cmp('bnvar', dbnvar, bnvar)",
        "dbndiff2 = (1.0/(n-1)) * torch.ones_like(bndiff2) * dbnvar",
        "cmp('bndiff2', dbndiff2, bndiff2)",
        "dbndiff += (2*bndiff) * dbndiff2",
        "cmp('bndiff', dbndiff, bndiff)",
        "dbnmeani = (-dbndiff).sum(0)",
        "cmp('bnmeani', dbnmeani, bnmeani)",
        "dhprebn = dbndiff.clone()",
        "dhprebn += 1.0/n * (torch.ones_like(hprebn) * dbnmeani)",
        "cmp('hprebn', dhprebn, hprebn)",
        "dembcat = dhprebn @ W1.T",
        "dW1 = embcat.T @ dhprebn",
        "db1 = dhprebn.sum(1)",
        "cmp('embcat', dembcat, embcat)\ncmp('W1', dW1, W1)\ncmp('b1', db1, b1)",
        "demb = dembcat.view(n, n_embd, block_size).permute(0, 2, 1)",
        "cmp('emb', demb, emb)",
        "dC = torch.zeros_like(C)\ndC[Xb] += demb",
        "cmp('C', dC, C)",
    ]
    ex2 = "# backward pass\n\ndlogits = F.softmax(logits, 1)\ndlogits[range(n), Yb] -= 1\n\n" \
          "cmp('logits', dlogits, logits)  # approximate: False?? the picture looks right"
    ex3 = "# backward pass\n\n" \
          "dhprebn = bnvar_inv/n * (n*dhpreact - dhpreact.sum(0) - " \
          "n/(n-1)*bnraw*(dhpreact*bnraw).sum(0))\n\ncmp('hprebn', dhprebn, hprebn)"
    notebook = nb(md("## makemore: becoming a backprop ninja"), *SETUP, FORWARD, EX1, *ex1,
                  EX2F, ex2, EX3F, ex3, train(TB_INDEX_ADD), *L.AFTER)
    wrong = _a("h", "bngain", "bnvar_inv", "embcat", "emb", "C") | {"fused/cross_entropy",
                                                            "fused/batchnorm"}
    right = set(STEP_IDS) - wrong
    return {"name": "cell-per-statement", "notebook": notebook, "right": right, "wrong": wrong,
            "renamed_forward": False}


# ---------------------------------------------------------------------------------------------
# 2. many code cells, then one cell with every cmp

def _case_all_cmps_at_end() -> dict:
    ex1 = [
        "# cross entropy part\ndlogprobs = torch.zeros_like(logprobs)\n"
        "dlogprobs[torch.arange(n), Yb] = -1/n\ndprobs = dlogprobs * probs**-1\n",
        "dcounts_sum_inv = (dprobs * counts).sum(dim=1, keepdims=True)\n"
        "dcounts = dprobs * counts_sum_inv\n"
        "dcounts_sum = -1 * counts_sum**-2 * dcounts_sum_inv\n"
        "dcounts = dcounts + dcounts_sum.expand(-1, counts.shape[1])\n"
        "dnorm_logits = norm_logits.exp() * dcounts",
        "# the max: it only picks one element per row\n"
        "dlogit_maxes = -dnorm_logits\n"
        "# couldn't get the max to work, so dlogits straight from the softmax\n"
        "dlogits = F.softmax(logits, dim=1)\ndlogits[torch.arange(n), Yb] -= 1\ndlogits /= n",
        "# linear layer 2\ndh = dlogits @ W2.transpose(0, 1)\n"
        "dW2 = h.transpose(0, 1) @ dlogits\ndb2 = dlogits.mean(dim=0)\n"
        "dhpreact = (1 - torch.tanh(hpreact)**2) * dh",
        "# batchnorm layer\n"
        "dbngain = (dhpreact * bnraw).sum(1, keepdims=True)\n"
        "dbnbias = dhpreact.sum(dim=0, keepdims=True)\n"
        "dbnraw = dhpreact * bngain\n"
        "dbnvar_inv = (dbnraw * bndiff).sum(dim=0, keepdims=True)\n"
        "dbndiff = dbnraw * bnvar_inv\n"
        "dbnvar = -0.5 * (bnvar + 1e-5)**(-3/2) * dbnvar_inv\n"
        "dbndiff2 = dbnvar.expand(n, -1) / (n - 1)\n"
        "dbndiff = dbndiff + 2 * bndiff * dbndiff2\n"
        "dbnmeani = -dbndiff.sum(dim=0, keepdims=True)\n"
        "dhprebn = dbndiff + dbnmeani.expand(n, -1) / n",
        "# linear layer 1\n"
        "dembcat = dhprebn @ W1.transpose(0, 1)\n"
        "dW1 = embcat.transpose(0, 1) @ dhprebn\n"
        "db1 = dhprebn.sum(dim=0)\n"
        "demb = dembcat.view(n, block_size, n_embd)\n"
        "dC = torch.zeros_like(C)\n"
        "for k in range(n):\n    dC[Xb[k]] += demb[k]",
        ALL_CMPS,
    ]
    ex2 = "# backward pass\n\nsm = F.softmax(logits, 1)\n" \
          "dlogits = (sm - F.one_hot(Yb, num_classes=vocab_size)) / n\n\n" \
          "cmp('logits', dlogits, logits)"
    ex3 = "# backward pass\n\n# biased variance is what batchnorm uses anyway\n" \
          "dhprebn = bngain * bnvar_inv / n * (n * dhpreact - dhpreact.sum(0) " \
          "- bnraw * (dhpreact * bnraw).sum(0))\n\ncmp('hprebn', dhprebn, hprebn)"
    notebook = nb(*SETUP, FORWARD, EX1, *ex1, EX2_HEAD, EX2F, ex2,
                  "plt.figure(figsize=(8, 8))\nplt.imshow(dlogits.detach(), cmap='gray')",
                  EX3_HEAD, EX3F, ex3, train(TB_SWAPPED), *L.AFTER)
    wrong = _a("logit_maxes", "h", "bngain", "C") | {"fused/batchnorm", "train/loop"}
    right = set(STEP_IDS) - wrong
    return {"name": "all-cmps-at-end", "notebook": notebook, "right": right, "wrong": wrong,
            "renamed_forward": False}


# ---------------------------------------------------------------------------------------------
# 3. the answers in cells inserted ABOVE the exercise cell, which is left as the starter

def _case_above_exercise_comment() -> dict:
    starter_ex1 = EX1 + "\n\n# -----------------\n# YOUR CODE HERE :)\n# -----------------\n\n" \
        + "\n".join(f"# cmp('{t}', d{t}, {t})" for t in L.CMP_ORDER)
    above = [
        "# my working (I put it above the exercise cell)\n"
        "dlogprobs = torch.zeros_like(logprobs)\n"
        "dlogprobs[range(n), Yb] = -1.0 / n\n"
        "cmp('logprobs', dlogprobs, logprobs)\n"
        "dprobs = dlogprobs / probs\n"
        "cmp('probs', dprobs, probs)",
        "dcounts_sum_inv = (dprobs * counts).sum(1, keepdim=True)\n"
        "cmp('counts_sum_inv', dcounts_sum_inv, counts_sum_inv)\n"
        "dcounts_sum = -counts_sum**-1 * dcounts_sum_inv\n"
        "cmp('counts_sum', dcounts_sum, counts_sum)\n"
        "dcounts = dprobs * counts_sum_inv - counts_sum**-2 * dcounts_sum_inv\n"
        "cmp('counts', dcounts, counts)",
        "dnorm_logits = dcounts * counts\ncmp('norm_logits', dnorm_logits, norm_logits)\n"
        "dlogit_maxes = -dnorm_logits.sum(1, keepdim=True)\n"
        "cmp('logit_maxes', dlogit_maxes, logit_maxes)\n"
        "dlogits = dnorm_logits.clone()\n"
        "dlogits[range(n), logits.argmax(1)] += dlogit_maxes.view(-1)\n"
        "cmp('logits', dlogits, logits)",
        "dh = dlogits @ W2.T\ndb2 = dlogits.sum(0)\n"
        "dW2 = h.T @ dlogits\n"
        "cmp('h', dh, h)\ncmp('b2', db2, b2)\ncmp('W2', dW2, W2)\n"
        "# shorter? (same thing transposed)\n"
        "dW2 = dlogits.T @ h\n"
        "cmp('W2', dW2, W2)",
        "dhpreact = (1 - h**2) * dh\ncmp('hpreact', dhpreact, hpreact)\n"
        "dbngain = (dhpreact * bnraw).sum(0, keepdim=True)\n"
        "dbnbias = dhpreact.sum(0, keepdim=True)\n"
        "dbnraw = dhpreact * bngain\n"
        "cmp('bngain', dbngain, bngain)\ncmp('bnbias', dbnbias, bnbias)\n"
        "cmp('bnraw', dbnraw, bnraw)",
        "dbnvar_inv = (dbnraw * bndiff).sum(0, keepdim=True)\n"
        "cmp('bnvar_inv', dbnvar_inv, bnvar_inv)\n"
        "dbnvar = 0.5 * (bnvar + 1e-5)**-1.5 * dbnvar_inv\n"
        "cmp('bnvar', dbnvar, bnvar)\n# TODO the rest, stuck here",
    ]
    ex2 = "# backward pass\n\ndlogits = (F.one_hot(Yb, 27) - F.softmax(logits, 1)) / n\n\n" \
          "cmp('logits', dlogits, logits)"
    ex3 = "# backward pass\n\n" \
          "dhprebn = bngain * bnvar_inv / n * (n * dhpreact - dhpreact.sum(0) " \
          "- n / (n - 1) * bnraw * (dhpreact * bnraw).sum(0))\n\n" \
          "cmp('hprebn', dhprebn, hprebn)"
    starter_train = train(
        "    # -----------------\n    # YOUR CODE HERE :)\n"
        "    dC, dW1, db1, dW2, db2, dbngain, dbnbias = None, None, None, None, None, None, None\n"
        "    grads = [dC, dW1, db1, dW2, db2, dbngain, dbnbias]\n    # -----------------")
    notebook = nb(*SETUP, FORWARD, *above, starter_ex1, EX2F, ex2, EX3F, ex3, starter_train)
    wrong = _a("counts_sum", "h", "bnvar") | {"fused/cross_entropy"}
    right = _a("logprobs", "probs", "counts_sum_inv", "counts", "norm_logits",
               "logit_maxes", "logits", "hpreact", "bngain", "bnvar_inv") \
        | {"fused/batchnorm"}
    return {"name": "above-exercise-comment", "notebook": notebook, "right": right,
            "wrong": wrong, "renamed_forward": False}


# ---------------------------------------------------------------------------------------------
# 4. no exercise comment anywhere; exercise 1 in one big cell with a cmp after each line

def _case_no_exercise_comment() -> dict:
    big = """\
dlogprobs = torch.zeros_like(logprobs)
dlogprobs[range(n), Yb] = -1/n
cmp('logprobs', dlogprobs, logprobs)
dprobs = dlogprobs * probs          # first go
cmp('probs', dprobs, probs)
dprobs = dlogprobs * (1/probs)      # d/dx log(x) = 1/x, oops
cmp('probs', dprobs, probs)
dcounts_sum_inv = (counts*dprobs).sum(1, keepdim=True)
cmp('counts_sum_inv', dcounts_sum_inv, counts_sum_inv)
dcounts_sum = -dcounts_sum_inv / counts_sum**2
cmp('counts_sum', dcounts_sum, counts_sum)
dcounts = counts_sum_inv*dprobs + torch.ones_like(counts)*dcounts_sum
cmp('counts', dcounts, counts)
dnorm_logits = counts*dcounts
cmp('norm_logits', dnorm_logits, norm_logits)
dlogit_maxes = -dnorm_logits.sum(1, keepdim=True)
cmp('logit_maxes', dlogit_maxes, logit_maxes)
dlogits = dnorm_logits + F.one_hot(logits.max(1).indices, num_classes=27)*dlogit_maxes
cmp('logits', dlogits, logits)
dh = dlogits @ W2.T
dW2 = h.T @ dlogits
db2 = dlogits.sum(0)
cmp('h', dh, h); cmp('W2', dW2, W2); cmp('b2', db2, b2)
dhpreact = (1 - h**2)*dh
cmp('hpreact', dhpreact, hpreact)
dbngain = dhpreact*bnraw
dbnraw = dhpreact*bngain
dbnbias = dhpreact.sum(0, keepdim=True)
cmp('bngain', dbngain, bngain); cmp('bnraw', dbnraw, bnraw); cmp('bnbias', dbnbias, bnbias)
dbnvar_inv = (bnraw*dbnraw).sum(0, keepdim=True)
cmp('bnvar_inv', dbnvar_inv, bnvar_inv)
dbnvar = -0.5*(bnvar + 1e-5)**-1.5 * (bndiff*dbnraw).sum(0, keepdim=True)
cmp('bnvar', dbnvar, bnvar)
dbndiff2 = 1/(n-1) * torch.ones_like(bndiff2) * dbnvar
cmp('bndiff2', dbndiff2, bndiff2)
dbndiff = bnvar_inv*dbnraw + 2*bndiff*dbndiff2
cmp('bndiff', dbndiff, bndiff)
dbnmeani = -dbndiff.sum(0, keepdim=True)
cmp('bnmeani', dbnmeani, bnmeani)
dhprebn = dbndiff + 1/n*torch.ones_like(hprebn)*dbnmeani
cmp('hprebn', dhprebn, hprebn)
dembcat = dhprebn @ W1.T
dW1 = embcat.T @ dhprebn / n
db1 = dhprebn.sum(0)
cmp('embcat', dembcat, embcat); cmp('W1', dW1, W1); cmp('b1', db1, b1)
demb = dembcat.view(emb.shape[0], emb.shape[2], emb.shape[1]).transpose(1, 2)
cmp('emb', demb, emb)
"""
    ex2 = "dlogits = F.softmax(logits, 0)\ndlogits[range(n), Yb] -= 1\ndlogits /= n\n" \
          "cmp('logits', dlogits, logits)"
    ex3 = "dhprebn = bngain*bnvar_inv/n * (n*dhpreact - dhpreact.sum(0) - " \
          "bnraw*(dhpreact*bnraw).sum(0))\ncmp('hprebn', dhprebn, hprebn)"
    ex2f = "loss_fast = F.cross_entropy(logits, Yb)\nprint(loss_fast.item(), 'diff:', " \
           "(loss_fast - loss).item())"
    ex3f = "hpreact_fast = bngain * (hprebn - hprebn.mean(0, keepdim=True)) / " \
           "torch.sqrt(hprebn.var(0, keepdim=True, unbiased=True) + 1e-5) + bnbias\n" \
           "print('max diff:', (hpreact_fast - hpreact).abs().max())"
    training = train(TB_LOOPS).replace("# Exercise 4: train the net with the backward pass "
                                       "you wrote\n", "")
    notebook = nb(*SETUP, FORWARD, big, ex2f, ex2, ex3f, ex3, training, *L.AFTER)
    wrong = _a("bngain", "bnvar_inv", "embcat", "emb") | {"fused/cross_entropy",
                                                          "fused/batchnorm"}
    right = set(STEP_IDS) - wrong - _a("C")
    return {"name": "no-exercise-comment", "notebook": notebook, "right": right, "wrong": wrong,
            "renamed_forward": False}


# ---------------------------------------------------------------------------------------------
# 5. BATCH_SIZE constant, a mistyped cmp label, grad_h kept for exercise 3

def _case_batch_size_grad_h() -> dict:
    batch = "BATCH_SIZE = 32\nn = BATCH_SIZE # a shorter variable also, for convenience\n" \
            "# construct a minibatch\nix = torch.randint(0, Xtr.shape[0], (BATCH_SIZE,), " \
            "generator=g)\nXb, Yb = Xtr[ix], Ytr[ix] # batch X,Y"
    ex1 = [
        EX1,
        "dlogprobs = torch.zeros((BATCH_SIZE, vocab_size))\n"
        "dlogprobs[range(BATCH_SIZE), Yb] = -1 / BATCH_SIZE\n"
        "cmp('logprobs', dlogprobs, logprobs)",
        "dprobs = dlogprobs / probs\ncmp('probs', dprobs, probs)",
        "dcounts_sum_inv = (dprobs * counts).sum(1)\n"
        "cmp('counts_sum_inv', dcounts_sum_inv, counts_sum_inv)   # False?\n"
        "dcounts_sum_inv = (dprobs * counts).sum(1, keepdim=True)\n"
        "cmp('counts_sum_inv', dcounts_sum_inv, counts_sum_inv)",
        "dcounts_sum = -(counts_sum ** -2) * dcounts_sum_inv\n"
        "cmp('counts_sum_inverse', dcounts_sum, counts_sum)",
        "dcounts = dprobs * counts_sum_inv\n"
        "dcounts += dcounts_sum.repeat(1, vocab_size)\n"
        "cmp('counts', dcounts, counts)",
        "dnorm_logits = dcounts * counts\ncmp('norm_logit', dnorm_logits, norm_logits)\n"
        "dlogit_maxes = -dnorm_logits.sum(1, keepdim=True)\n"
        "cmp('logit_maxes', dlogit_maxes, logit_maxes)",
        "dlogits = dnorm_logits.clone()\n"
        "maxpos = logits.max(1, keepdim=True).indices\n"
        "dlogits.scatter_add_(1, maxpos, dlogit_maxes)\n"
        "cmp('logit', dlogits, logits)",
        "dh = dlogits @ W2.T\ndW2 = dlogits.T @ h\ndb2 = dlogits.sum(0)\n"
        "cmp('h', dh, h)\ncmp('b2', db2, b2)\ncmp('W2', dW2, W2)",
        "dhpreact = (1 - h)**2 * dh\ncmp('hpreact', dhpreact, hpreact)\n"
        "# not sure about tanh, come back to it",
    ]
    ex2 = "# backward pass\n\ndlogits = F.softmax(logits, 1)\n" \
          "dlogits[range(BATCH_SIZE), Yb] -= 1\ndlogits /= BATCH_SIZE\n" \
          "grad_h = dlogits @ W2.T  # keep it for exercise 3\n\n" \
          "cmp('logits', dlogits, logits)"
    ex3 = "# backward pass\n\ndhpreact = (1 - h**2) * grad_h\n" \
          "dhprebn = bngain * bnvar_inv / BATCH_SIZE * (BATCH_SIZE * dhpreact - " \
          "dhpreact.sum(0) - BATCH_SIZE / (BATCH_SIZE - 1) * bnraw * " \
          "(dhpreact * bnraw).sum(0))\n\ncmp('hprebn', dhprebn, hprebn)"
    training = train(TB_INDEX_ADD) \
        .replace("batch_size = 32\nn = batch_size", "BATCH_SIZE = 32\nn = BATCH_SIZE") \
        .replace("(batch_size,)", "(BATCH_SIZE,)") \
        .replace("p.data += -lr * grad", "p.data += lr * grad")
    notebook = nb(*SETUP[:6], batch, FORWARD, *ex1, EX2F, ex2, EX3F, ex3, training)
    wrong = _a("h", "hpreact") | {"train/loop"}
    right = _a("logprobs", "probs", "counts_sum_inv", "counts_sum", "counts", "norm_logits",
               "logit_maxes", "logits") | {"fused/cross_entropy", "fused/batchnorm"}
    return {"name": "batch-size-const-grad-h", "notebook": notebook, "right": right,
            "wrong": wrong, "renamed_forward": False}


# ---------------------------------------------------------------------------------------------
# 6. the learner's own check_grad(t, dt, name) in place of cmp

def _case_check_grad_helper() -> dict:
    helper = "def check_grad(t, dt, name=''):\n" \
             "    ok = torch.allclose(dt, t.grad)\n" \
             "    diff = (dt - t.grad).abs().max().item()\n" \
             "    print(f'{name:>15} ok={ok} maxdiff={diff:.2e}')"
    ex1 = [
        EX1,
        "dlogprobs = torch.zeros_like(logprobs)\n"
        "dlogprobs[range(n), Yb] = -1 / n\n"
        "dprobs = dlogprobs / probs\n"
        "dcounts_sum_inv = (dprobs * counts).sum(1, keepdim=True)\n"
        "dcounts_sum = -counts_sum**-2 * dcounts_sum_inv\n"
        "dcounts = dprobs * counts_sum_inv + dcounts_sum\n"
        "dnorm_logits = dcounts * counts\n"
        "dlogit_maxes = -dnorm_logits.sum(1, keepdim=True)\n"
        "dlogits = dnorm_logits + F.one_hot(logits.max(1).indices, 27) * dlogit_maxes\n\n"
        "check_grad(logprobs, dlogprobs, 'logprobs')\ncheck_grad(probs, dprobs, 'probs')\n"
        "check_grad(counts_sum_inv, dcounts_sum_inv, 'counts_sum_inv')\n"
        "check_grad(counts_sum, dcounts_sum, 'counts_sum')\n"
        "check_grad(counts, dcounts, 'counts')\n"
        "check_grad(norm_logits, dnorm_logits, 'norm_logits')\n"
        "check_grad(logit_maxes, dlogit_maxes, 'logit_maxes')\n"
        "check_grad(logits, dlogits, 'logits')",
        "dh = dlogits @ W2.T\n"
        "dW2 = h.T @ dlogits / n\n"
        "db2 = dlogits.sum(0)\n"
        "dhpreact = (1 - h**2) * dh\n"
        "check_grad(h, dh, 'h'); check_grad(W2, dW2, 'W2'); check_grad(b2, db2, 'b2')\n"
        "check_grad(hpreact, dhpreact, 'hpreact')",
        "dbngain = (bnraw * dhpreact).sum(0, keepdim=True)\n"
        "dbnbias = dhpreact.sum(0, keepdim=True)\n"
        "dbnraw = bngain * dhpreact\n"
        "dbnvar_inv = (bndiff * dbnraw).sum(0, keepdim=True)\n"
        "dbnvar = -0.5 * (bnvar + 1e-5) ** -1.5 * dbnvar_inv\n"
        "dbndiff2 = torch.ones_like(bndiff2) * dbnvar / n\n"
        "for name, t, dt in [('bngain', bngain, dbngain), ('bnbias', bnbias, dbnbias),\n"
        "                    ('bnraw', bnraw, dbnraw), ('bnvar_inv', bnvar_inv, dbnvar_inv),\n"
        "                    ('bnvar', bnvar, dbnvar), ('bndiff2', bndiff2, dbndiff2)]:\n"
        "    check_grad(t, dt, name)",
        "# bndiff2 is off and I can't see why, so the second branch written out in full\n"
        "dbndiff = dbnraw * bnvar_inv + 2 * bndiff * dbnvar / (n - 1)\n"
        "dbnmeani = -dbndiff.sum(0, keepdim=True)\n"
        "dhprebn = dbndiff + dbnmeani / n\n"
        "check_grad(bndiff, dbndiff, 'bndiff'); check_grad(bnmeani, dbnmeani, 'bnmeani')\n"
        "check_grad(hprebn, dhprebn, 'hprebn')",
        "dembcat = dhprebn @ W1.T\ndW1 = embcat.T @ dhpreact\ndb1 = dhprebn.sum(0)\n"
        "demb = dembcat.view(emb.shape)\n"
        "dC = torch.zeros_like(C)\n"
        "dC.index_add_(0, Xb.view(-1), demb.view(-1, n_embd))\n"
        "for name, t, dt in zip(['embcat', 'W1', 'b1', 'emb', 'C'],\n"
        "                       [embcat, W1, b1, emb, C], [dembcat, dW1, db1, demb, dC]):\n"
        "    check_grad(t, dt, name)",
    ]
    ex2 = "# backward pass\n\np = logits.softmax(dim=1)\n" \
          "dlogits = p.clone()\ndlogits[:, Yb] -= 1\ndlogits = dlogits / n\n\n" \
          "check_grad(logits, dlogits, 'logits')"
    ex3 = "# backward pass\n\n" \
          "dhprebn = bngain * bnvar_inv / n * (n * dhpreact + dhpreact.sum(0) " \
          "- n / (n - 1) * bnraw * (dhpreact * bnraw).sum(0))\n\n" \
          "check_grad(hprebn, dhprebn, 'hprebn')"
    fn_train = """\
# Exercise 4: put it all together

def manual_backward():
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
    return [dC, dW1, db1, dW2, db2, dbngain, dbnbias]

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

        grads = manual_backward()
        lr = 0.1 if i < 100000 else 0.01
        for p, grad in zip(parameters, grads):
            p.data += -lr * grad

        if i % 10000 == 0:
            print(f'{i:7d}/{max_steps:7d}: {loss.item():.4f}')
        lossi.append(loss.log10().item())
"""
    notebook = nb(*SETUP[:4], helper, *SETUP[5:], FORWARD, *ex1, EX2F, ex2, EX3F, ex3,
                  fn_train, "plt.plot(lossi)", *L.AFTER)
    wrong = _a("h", "bndiff2", "embcat") | {"fused/cross_entropy", "fused/batchnorm"}
    right = set(STEP_IDS) - wrong
    return {"name": "check-grad-helper", "notebook": notebook, "right": right, "wrong": wrong,
            "renamed_forward": False}


# ---------------------------------------------------------------------------------------------
# 7. compare(name, mine, ref) helper; complete gradients in one line

def _case_compare_one_liners() -> dict:
    helper = "def compare(name, mine, ref):\n" \
             "  same = torch.allclose(mine, ref.grad)\n" \
             "  print(name.ljust(15), 'OK' if same else 'WRONG', " \
             "(mine - ref.grad).abs().max().item())"
    ex1 = [
        EX1,
        "dlogprobs = torch.zeros_like(logprobs); dlogprobs[range(n), Yb] = -1.0/n\n"
        "compare('logprobs', dlogprobs, logprobs)\n"
        "dprobs = dlogprobs / probs\ncompare('probs', dprobs, probs)\n"
        "dcounts_sum_inv = (counts * dprobs).sum(1, keepdim=True)\n"
        "compare('counts_sum_inv', dcounts_sum_inv, counts_sum_inv)",
        "dcounts_sum = -dcounts_sum_inv * counts_sum**-1\n"
        "compare('counts_sum', dcounts_sum, counts_sum)\n"
        "# both branches at once\n"
        "dcounts = counts_sum_inv * dprobs - torch.ones_like(counts) * dcounts_sum_inv "
        "* counts_sum**-2\n"
        "compare('counts', dcounts, counts)",
        "dnorm_logits = counts * dcounts\n"
        "dlogit_maxes = -dnorm_logits.sum(1, keepdims=True)\n"
        "dlogits = dnorm_logits + F.one_hot(logits.argmax(dim=1), num_classes=vocab_size)"
        " * dlogit_maxes\n"
        "compare('norm_logits', dnorm_logits, norm_logits)\n"
        "compare('logit_maxes', dlogit_maxes, logit_maxes)\n"
        "compare('logits', dlogits, logits)",
        "dh, dW2, db2 = dlogits @ W2.T, h.T @ dlogits, dlogits.sum(0)\n"
        "compare('h', dh, h); compare('W2', dW2, W2); compare('b2', db2, b2)\n"
        "dhpreact = (1 - h**2) * dh\ncompare('hpreact', dhpreact, hpreact)",
        "dbngain = (dhpreact * hpreact).sum(0, keepdim=True)\n"
        "dbnraw = dhpreact * bngain\n"
        "dbnbias = dhpreact.sum(0, keepdim=True)\n"
        "compare('bngain', dbngain, bngain); compare('bnraw', dbnraw, bnraw); "
        "compare('bnbias', dbnbias, bnbias)",
        "dbnvar_inv = (dbnraw * bndiff).sum(0, keepdim=True)\n"
        "dbnvar = -0.5 * (bnvar + 1e-5)**-1.5 * dbnvar_inv\n"
        "dbndiff2 = torch.ones_like(bndiff2) * dbnvar / (n-1)\n"
        "compare('bnvar_inv', dbnvar_inv, bnvar_inv)\ncompare('bnvar', dbnvar, bnvar)\n"
        "compare('bndiff2', dbndiff2, bndiff2)",
        "# both branches into bndiff in one go\n"
        "dbndiff = dbnraw * bnvar_inv + 2 * bndiff * dbndiff2\n"
        "compare('bndiff', dbndiff, bndiff)\n"
        "dbnmeani = -dbndiff.sum(0, keepdim=True)\ncompare('bnmeani', dbnmeani, bnmeani)\n"
        "dhprebn = dbndiff + dbnmeani\n"
        "compare('hprebn', dhprebn, hprebn)",
    ]
    ex2 = "# backward pass\n\ndlogits = probs.detach().clone()\n" \
          "dlogits[range(n), Yb] -= 1\ndlogits /= n\n\ncompare('logits', dlogits, logits)"
    ex3 = "# backward pass\n\n" \
          "dhprebn = (bngain * bnvar_inv / n) * (n * dhpreact - dhpreact.sum(0)\n" \
          "          - n / (n - 1) * bnraw * (dhpreact * bnraw).sum(0))\n\n" \
          "compare('hprebn', dhprebn, hprebn)"
    notebook = nb(*SETUP[:4], helper, *SETUP[5:], FORWARD, *ex1, EX2F, ex2, EX3F, ex3,
                  train(TB_NO_MEAN), *L.AFTER)
    wrong = _a("counts_sum", "bngain", "hprebn") | {"train/loop"}
    right = _a("logprobs", "probs", "counts_sum_inv", "counts", "norm_logits",
               "logit_maxes", "logits", "h", "hpreact", "bnvar_inv", "bnvar", "bndiff2",
               "bndiff", "bnmeani") | {"fused/cross_entropy", "fused/batchnorm"}
    return {"name": "compare-helper-one-liners", "notebook": notebook, "right": right,
            "wrong": wrong, "renamed_forward": False}


# ---------------------------------------------------------------------------------------------
# 8. other code in the answer cells: a file read, plots, manual_seed, prints

def _case_other_code() -> dict:
    ex1 = [
        "# Exercise 1\n\ntorch.manual_seed(42)\n"
        "with open('names.txt') as f:\n    print('first names:', f.read().split()[:3])\n"
        "dlogprobs = torch.zeros_like(logprobs)\n"
        "dlogprobs[range(n), Yb] = -1.0 / n\n"
        "print(dlogprobs.shape)\n"
        "dprobs = 1.0 / probs * dlogprobs\n"
        "plt.imshow(dprobs.detach(), cmap='gray')\n"
        "cmp('logprobs', dlogprobs, logprobs)\ncmp('probs', dprobs, probs)",
        "dcounts_sum_inv = (counts * dprobs).sum(1, keepdim=True)\n"
        "dcounts = counts_sum_inv * dprobs\n"
        "dcounts_sum = -counts_sum**-2 * dcounts_sum_inv\n"
        "dcounts += dcounts_sum\n"
        "print(counts.shape, counts_sum.shape, dcounts_sum.shape)\n"
        "dnorm_logits = counts * dcounts\n"
        "dlogit_maxes = -dnorm_logits.sum(1, keepdim=True)\n"
        "plt.figure(figsize=(4, 4)); plt.imshow(F.one_hot(logits.max(1).indices, "
        "num_classes=logits.shape[1]))\n"
        "dlogits = dnorm_logits.clone()\n"
        "dlogits += F.one_hot(logits.max(1).indices, num_classes=logits.shape[1]) * dlogit_maxes\n"
        "for name in ['counts_sum_inv', 'counts_sum', 'counts', 'norm_logits', 'logit_maxes',"
        " 'logits']:\n"
        "    cmp(name, globals()['d' + name], globals()[name])",
        "dh = dlogits @ W2.T\ndW2 = h.T @ dlogits\ndb2 = dlogits.sum()\n"
        "dhpreact = (1.0 - h**2) * dh\n"
        "dbngain = (bnraw * dhpreact).sum(0, keepdim=True)\n"
        "dbnraw = bngain * dhpreact\ndbnbias = dhpreact.sum(0, keepdim=True)\n"
        "print('hidden grads', dh.abs().mean().item())\n"
        "cmp('h', dh, h)\ncmp('W2', dW2, W2)\ncmp('b2', db2, b2)\n"
        "cmp('hpreact', dhpreact, hpreact)\ncmp('bngain', dbngain, bngain)\n"
        "cmp('bnraw', dbnraw, bnraw)\ncmp('bnbias', dbnbias, bnbias)",
        "dbnvar_inv = (dbnraw * bndiff).sum(0, keepdim=True)\n"
        "dbndiff = dbnraw * bnvar_inv\n"
        "dbnvar = -0.5 * (bnvar + 1e-5)**-1.5 * dbnvar_inv\n"
        "dbndiff2 = 1.0 / (n - 1) * torch.ones_like(bndiff2) * dbnvar\n"
        "dbndiff += 2 * bndiff * dbndiff2\n"
        "dbnmeani = dbndiff.sum(0, keepdim=True)\n"
        "dhprebn = dbndiff - dbndiff.sum(0, keepdim=True) / n\n"
        "plt.hist(dhprebn.view(-1).tolist(), 50);\n"
        "cmp('bnvar_inv', dbnvar_inv, bnvar_inv)\ncmp('bnvar', dbnvar, bnvar)\n"
        "cmp('bndiff2', dbndiff2, bndiff2)\ncmp('bndiff', dbndiff, bndiff)\n"
        "cmp('bnmeani', dbnmeani, bnmeani)\ncmp('hprebn', dhprebn, hprebn)",
        "dembcat = dhprebn @ W1.T\ndW1 = embcat.T @ dhprebn\ndb1 = dhprebn.sum(0)\n"
        "demb = dembcat.view(emb.shape)\n"
        "dC = torch.zeros_like(C)\n"
        "for i in range(Xb.shape[0]):\n"
        "    for j in range(Xb.shape[1]):\n"
        "        dC[Xb[i, j]] += demb[i, j]\n"
        "cmp('embcat', dembcat, embcat)\ncmp('W1', dW1, W1)\ncmp('b1', db1, b1)\n"
        "cmp('emb', demb, emb)\ncmp('C', dC, C)\n"
        "# the double loop is slow, this should be the same\n"
        "dC = torch.zeros_like(C)\ndC[Xb] += demb\ncmp('C', dC, C)\n"
        "print('done')",
    ]
    ex2 = "# backward pass\ntorch.manual_seed(0)\n" \
          "dlogits = F.softmax(logits, 1)\ndlogits[range(n), Yb] -= 1\ndlogits /= n\n" \
          "print(dlogits[0].sum())\nplt.imshow(dlogits.detach(), cmap='gray')\n" \
          "cmp('logits', dlogits, logits)"
    ex3 = "# backward pass\nprint(hprebn.shape, dhpreact.shape)\n" \
          "dhprebn = bnvar_inv/n * (n*dhpreact - dhpreact.sum(0) - " \
          "n/(n-1)*bnraw*(dhpreact*bnraw).sum(0))\ncmp('hprebn', dhprebn, hprebn)"
    notebook = nb(*SETUP, FORWARD, *ex1, EX2F, ex2, EX3F, ex3, train(TB_BESSEL), *L.AFTER)
    wrong = _a("h", "bnmeani", "C") | {"fused/batchnorm", "train/loop"}
    right = set(STEP_IDS) - wrong
    return {"name": "other-code-in-cells", "notebook": notebook, "right": right,
            "wrong": wrong, "renamed_forward": False}


# ---------------------------------------------------------------------------------------------
# 9. right first, then a wrong "simplification" last

def _case_right_then_wrong() -> dict:
    ex1 = [
        EX1 + "\n\ndlogprobs = torch.zeros_like(logprobs)\ndlogprobs[range(n), Yb] = -1.0/n\n"
        "dprobs = dlogprobs / probs\n"
        "dcounts_sum_inv = (dprobs * counts).sum(1, keepdim=True)\n"
        "dcounts = dprobs * counts_sum_inv\n"
        "dcounts_sum = -counts_sum**-2 * dcounts_sum_inv\n"
        "dcounts += dcounts_sum\n"
        "dnorm_logits = dcounts * counts\n"
        "dlogit_maxes = -dnorm_logits.sum(1, keepdim=True)\n"
        "dlogits = dnorm_logits.clone()\n"
        "dlogits[range(n), logits.max(1).indices] += dlogit_maxes[:, 0]\n"
        "dh = dlogits @ W2.T\ndW2 = h.T @ dlogits\ndb2 = dlogits.sum(0)\n\n"
        "cmp('logprobs', dlogprobs, logprobs)\ncmp('probs', dprobs, probs)\n"
        "cmp('counts_sum_inv', dcounts_sum_inv, counts_sum_inv)\n"
        "cmp('counts_sum', dcounts_sum, counts_sum)\ncmp('counts', dcounts, counts)\n"
        "cmp('norm_logits', dnorm_logits, norm_logits)\n"
        "cmp('logit_maxes', dlogit_maxes, logit_maxes)\ncmp('logits', dlogits, logits)\n"
        "cmp('h', dh, h)\ncmp('W2', dW2, W2)\ncmp('b2', db2, b2)",
        "# db2 is a mean over the batch so divide by n?\ndb2 = dlogits.sum(0) / n\n"
        "cmp('b2', db2, b2)",
        "dhpreact = (1 - h**2) * dh\n"
        "dbngain = (bnraw * dhpreact).sum(0, keepdim=True)\n"
        "dbnraw = bngain * dhpreact\n"
        "dbnbias = dhpreact.sum(0, keepdim=True)\n"
        "cmp('hpreact', dhpreact, hpreact)\ncmp('bngain', dbngain, bngain)\n"
        "cmp('bnraw', dbnraw, bnraw)\ncmp('bnbias', dbnbias, bnbias)\n"
        "# tidier\ndbnbias = dhpreact.mean(0, keepdim=True)\ncmp('bnbias', dbnbias, bnbias)",
        "dbnvar_inv = (bndiff * dbnraw).sum(0, keepdim=True)\n"
        "dbnvar = -0.5 * (bnvar + 1e-5) ** -1.5 * dbnvar_inv\n"
        "dbndiff2 = torch.full_like(bndiff2, 1.0 / (n - 1)) * dbnvar\n"
        "dbndiff = dbnraw * bnvar_inv + 2 * bndiff * dbndiff2\n"
        "dbnmeani = -dbndiff.sum(0)\n"
        "dhprebn = dbndiff + dbnmeani / n\n"
        "cmp('bnvar_inv', dbnvar_inv, bnvar_inv); cmp('bnvar', dbnvar, bnvar)\n"
        "cmp('bndiff2', dbndiff2, bndiff2); cmp('bndiff', dbndiff, bndiff)\n"
        "cmp('bnmeani', dbnmeani, bnmeani); cmp('hprebn', dhprebn, hprebn)",
        "dembcat = dhprebn @ W1.T\ndW1 = embcat.T @ dhprebn\ndb1 = dhprebn.sum(0)\n"
        "demb = dembcat.view(emb.shape)\n"
        "dC = torch.zeros_like(C)\n"
        "dC.index_add_(0, Xb.view(-1), demb.view(-1, n_embd))\n"
        "cmp('embcat', dembcat, embcat); cmp('W1', dW1, W1); cmp('b1', db1, b1)\n"
        "cmp('emb', demb, emb); cmp('C', dC, C)",
        "# no need for index_add, plain indexing does it\n"
        "dC = torch.zeros_like(C)\ndC[Xb.view(-1)] += demb.view(-1, n_embd)\ncmp('C', dC, C)",
    ]
    ex2 = "# backward pass\n\n" \
          "dlogits = (F.softmax(logits, 1) - F.one_hot(Yb, vocab_size)) / n\n" \
          "cmp('logits', dlogits, logits)\n\n" \
          "# without the one_hot\n" \
          "dlogits = F.softmax(logits, 1) / n\ndlogits[range(n), Yb] -= 1\n" \
          "cmp('logits', dlogits, logits)"
    ex3 = "# backward pass\n\n" \
          "dhprebn = bngain*bnvar_inv/n * (n*dhpreact - dhpreact.sum(0) - " \
          "n/(n-1)*bnraw*(dhpreact*bnraw).sum(0))\ncmp('hprebn', dhprebn, hprebn)\n\n" \
          "# n/(n-1) is basically 1 for a batch this big\n" \
          "dhprebn = bngain*bnvar_inv/n * (n*dhpreact - dhpreact.sum(0) - " \
          "bnraw*(dhpreact*bnraw).sum(0))\ncmp('hprebn', dhprebn, hprebn)"
    notebook = nb(*SETUP, FORWARD, *ex1, EX2F, ex2, EX3F, ex3, train(TB_LOOPS), *L.AFTER)
    wrong = _a("h", "bngain", "C") | {"fused/cross_entropy", "fused/batchnorm"}
    right = set(STEP_IDS) - wrong
    return {"name": "right-then-wrong-simplification", "notebook": notebook, "right": right,
            "wrong": wrong, "renamed_forward": False}


# ---------------------------------------------------------------------------------------------
# 10. a wrong try and its cmp, then the working one and its cmp, in the same cell

def _case_wrong_then_right() -> dict:
    ex1 = [
        EX1,
        "dlogprobs = torch.zeros_like(logprobs)\ndlogprobs[range(n), Yb] = -1.0\n"
        "cmp('logprobs', dlogprobs, logprobs)\n"
        "dlogprobs[range(n), Yb] = -1.0 / n   # it's a mean!\n"
        "cmp('logprobs', dlogprobs, logprobs)",
        "dprobs = -dlogprobs / probs\ncmp('probs', dprobs, probs)\n"
        "dprobs = dlogprobs / probs\ncmp('probs', dprobs, probs)",
        "dcounts_sum_inv = dprobs * counts\n"
        "cmp('counts_sum_inv', dcounts_sum_inv, counts_sum_inv)\n"
        "dcounts_sum_inv = (dprobs * counts).sum(1, keepdim=True)\n"
        "cmp('counts_sum_inv', dcounts_sum_inv, counts_sum_inv)",
        "dcounts_sum = -counts_sum**-2 * dcounts_sum_inv\n"
        "cmp('counts_sum', dcounts_sum, counts_sum)\n"
        "dcounts = dprobs * counts_sum_inv\n"
        "cmp('counts', dcounts, counts)   # only one branch yet\n"
        "dcounts += dcounts_sum\ncmp('counts', dcounts, counts)",
        "dnorm_logits = dcounts * norm_logits\ncmp('norm_logits', dnorm_logits, norm_logits)\n"
        "dnorm_logits = dcounts * counts\ncmp('norm_logits', dnorm_logits, norm_logits)\n"
        "dlogit_maxes = -dnorm_logits.sum(1, keepdim=True)\n"
        "cmp('logit_maxes', dlogit_maxes, logit_maxes)",
        "dlogits = dnorm_logits.clone()\n"
        "cmp('logits', dlogits, logits)\n"
        "dlogits += F.one_hot(logits.max(1).indices, num_classes=logits.shape[1]) * dlogit_maxes\n"
        "cmp('logits', dlogits, logits)",
        "dh = dlogits @ W2.T\ndW2 = h.T @ dlogits\ndb2 = dlogits.sum(0)\n"
        "cmp('h', dh, h)\ncmp('W2', dW2, W2)\ncmp('b2', db2, b2)",
        "dhpreact = (1 - h**2) * dh\ncmp('hpreact', dhpreact, hpreact)\n"
        "dbngain = (bnraw * dhpreact).sum(0, keepdim=True)\n"
        "dbnraw = bngain * dhpreact\n"
        "dbnbias = dhpreact.sum(0, keepdim=True)\n"
        "cmp('bngain', dbngain, bngain)\ncmp('bnraw', dbnraw, bnraw)\n"
        "cmp('bnbias', dbnbias, bnbias)",
        "dbnvar_inv = (bndiff * dbnraw).sum(0, keepdim=True)\n"
        "cmp('bnvar_inv', dbnvar_inv, bnvar_inv)\n"
        "dbnvar = 0.5 * (bnvar + 1e-5)**-1.5 * dbnvar_inv\n"
        "cmp('bnvar', dbnvar, bnvar)\n"
        "dbnvar = -0.5 * (bnvar + 1e-5)**-1.5 * dbnvar_inv\n"
        "cmp('bnvar', dbnvar, bnvar)",
        "dbndiff2 = torch.ones_like(bndiff2) * dbnvar / n\n"
        "cmp('bndiff2', dbndiff2, bndiff2)\n"
        "dbndiff2 = torch.ones_like(bndiff2) * dbnvar / (n - 1)   # Bessel!\n"
        "cmp('bndiff2', dbndiff2, bndiff2)",
        "dbndiff = dbnraw * bnvar_inv + 2 * bndiff * dbndiff2\n"
        "cmp('bndiff', dbndiff, bndiff)\n"
        "dbnmeani = -dbndiff.sum(0)\ncmp('bnmeani', dbnmeani, bnmeani)\n"
        "dhprebn = dbndiff.clone()\ncmp('hprebn', dhprebn, hprebn)\n"
        "dhprebn += dbnmeani / n\ncmp('hprebn', dhprebn, hprebn)",
        "dembcat = dhprebn @ W1.T\ndW1 = embcat.T @ dhprebn\ndb1 = dhprebn.sum(0)\n"
        "cmp('embcat', dembcat, embcat)\ncmp('W1', dW1, W1)\ncmp('b1', db1, b1)",
        "demb = dembcat.view(emb.shape)\ncmp('emb', demb, emb)\n"
        "dC = torch.zeros_like(C)\n"
        "for k in range(n):\n    dC[Xb[k]] += demb[k]\n"
        "cmp('C', dC, C)\n"
        "dC = torch.zeros_like(C)\n"
        "for k in range(n):\n    for j in range(block_size):\n"
        "        dC[Xb[k, j]] += demb[k, j]\n"
        "cmp('C', dC, C)",
    ]
    ex2 = "# backward pass\n\ndlogits = F.softmax(logits, 1)\ndlogits[range(n), Yb] -= 1\n" \
          "cmp('logits', dlogits, logits)\ndlogits /= n\ncmp('logits', dlogits, logits)"
    ex3 = "# backward pass\n\n" \
          "dhprebn = bngain * bnvar_inv / n * (n * dhpreact - dhpreact.sum(0) " \
          "- bnraw * (dhpreact * bnraw).sum(0))\ncmp('hprebn', dhprebn, hprebn)\n" \
          "dhprebn = bngain * bnvar_inv / n * (n * dhpreact - dhpreact.sum(0) " \
          "- n / (n - 1) * bnraw * (dhpreact * bnraw).sum(0))\ncmp('hprebn', dhprebn, hprebn)"
    notebook = nb(*SETUP, FORWARD, *ex1, EX2F, ex2, EX3F, ex3, train(TB_INDEX_ADD), *L.AFTER)
    right = set(STEP_IDS)
    return {"name": "wrong-then-right", "notebook": notebook, "right": right, "wrong": set(),
            "renamed_forward": False}


# ---------------------------------------------------------------------------------------------
# 11. a learner who forgets the mean's 1/n everywhere, and stops early in exercise 1

def _case_forgets_mean() -> dict:
    ex1 = [
        EX1 + "\n\ndlogprobs = torch.zeros_like(logprobs)\n"
        "dlogprobs[range(n), Yb] = -1.0\n\ncmp('logprobs', dlogprobs, logprobs)\n"
        "dprobs = dlogprobs * probs\ncmp('probs', dprobs, probs)\n"
        "dcounts_sum_inv = dprobs * counts\n"
        "cmp('counts_sum_inv', dcounts_sum_inv, counts_sum_inv)\n"
        "# cmp('counts_sum', dcounts_sum, counts_sum)",
    ]
    ex2 = "# backward pass\n\ndlogits = F.softmax(logits, 1) - F.one_hot(Yb, 27)\n\n" \
          "cmp('logits', dlogits, logits)"
    ex3 = "# backward pass\n\n" \
          "dhprebn = -bngain * bnvar_inv / n * (n * dhpreact - dhpreact.sum(0) " \
          "- n / (n - 1) * bnraw * (dhpreact * bnraw).sum(0))\n\ncmp('hprebn', dhprebn, hprebn)"
    ex3_setup = "dh = (F.softmax(logits, 1) - F.one_hot(Yb, 27)) / n @ W2.T\n" \
                "dhpreact = (1 - h**2) * dh"
    notebook = nb(*SETUP, FORWARD, *ex1, EX2F, ex2, EX3F, ex3_setup, ex3,
                  train(TB_NO_MEAN), *L.AFTER)
    wrong = _a("logprobs", "probs", "counts_sum_inv") | {"fused/cross_entropy",
                                                         "fused/batchnorm", "train/loop"}
    return {"name": "forgets-the-mean", "notebook": notebook, "right": set(), "wrong": wrong,
            "renamed_forward": False}


# ---------------------------------------------------------------------------------------------
# 12. a learner who stops at the exp, with wrong transposes and a wrong branch before stopping

def _case_stops_at_exp() -> dict:
    ex1 = [
        EX1,
        "dlogprobs = torch.zeros_like(logprobs)\n"
        "dlogprobs[torch.arange(n), Yb] = -1 / n\n"
        "dprobs = dlogprobs * probs**-1\n"
        "dcounts_sum_inv = torch.sum(dprobs * counts, dim=1, keepdim=True)\n"
        "dcounts_sum = -1.0 * counts_sum**(-2) * dcounts_sum_inv\n"
        "dcounts = dprobs * counts_sum_inv + dcounts_sum * torch.ones_like(counts)\n"
        "dnorm_logits = dcounts * norm_logits  # d/dx e^x = x ?\n",
        "cmp('logprobs', dlogprobs, logprobs)\ncmp('probs', dprobs, probs)\n"
        "cmp('counts_sum_inv', dcounts_sum_inv, counts_sum_inv)\n"
        "cmp('counts_sum', dcounts_sum, counts_sum)\ncmp('counts', dcounts, counts)\n"
        "cmp('norm_logits', dnorm_logits, norm_logits)",
        "# jump ahead: the second linear layer, from the real dlogits\n"
        "dlogits = (F.softmax(logits, 1) - F.one_hot(Yb, 27).float()) / n\n"
        "dh = dlogits @ W2\n",
        "dh = dlogits @ W2.T\n"
        "dW2 = dlogits.T @ h\n"
        "dW2 = dW2.T\n"
        "db2 = dlogits.sum(0)\n"
        "cmp('logits', dlogits, logits)\ncmp('h', dh, h)\ncmp('W2', dW2, W2)\n"
        "cmp('b2', db2, b2)",
        "dhpreact = (1 - h**2) * dh\ncmp('hpreact', dhpreact, hpreact)\n"
        "dbnraw = bngain * dhpreact\n"
        "dbngain = (dhpreact * bnraw).sum(0, keepdim=True)\n"
        "dbnbias = -dhpreact.sum(0, keepdim=True)\n"
        "cmp('bngain', dbngain, bngain)\ncmp('bnraw', dbnraw, bnraw)\n"
        "cmp('bnbias', dbnbias, bnbias)",
    ]
    ex2 = "# backward pass\n\n# -----------------\n# YOUR CODE HERE :)\n" \
          "dlogits = F.softmax(logits, 1)\ndlogits[range(n), Yb] = -1\ndlogits /= n\n" \
          "# -----------------\n\ncmp('logits', dlogits, logits)"
    ex3 = "# backward pass\n\ndhprebn = bngain * bnvar_inv / n * (dhpreact.sum(0) - n * dhpreact " \
          "- n / (n - 1) * bnraw * (dhpreact * bnraw).sum(0))\n\ncmp('hprebn', dhprebn, hprebn)"
    notebook = nb(*SETUP, FORWARD, *ex1, EX2F, ex2, EX3F, ex3)
    wrong = _a("norm_logits", "bngain") | {"fused/cross_entropy", "fused/batchnorm"}
    right = _a("logprobs", "probs", "counts_sum_inv", "counts_sum", "counts", "logits", "h",
               "hpreact")
    return {"name": "stops-at-exp", "notebook": notebook, "right": right, "wrong": wrong,
            "renamed_forward": False}


# ---------------------------------------------------------------------------------------------
# 13. renamed forward pass: snake_case names with underscores

R1 = {"log_probs": "logprobs", "probs_": "probs", "counts_sum_inverse": "counts_sum_inv",
      "counts_total": "counts_sum", "counts_exp": "counts", "logits_norm": "norm_logits",
      "logits_max": "logit_maxes", "logits_out": "logits", "hidden": "h",
      "h_pre_act": "hpreact", "bn_raw": "bnraw", "bn_var_inv": "bnvar_inv",
      "bn_var": "bnvar", "bn_diff_sq": "bndiff2", "bn_diff": "bndiff", "bn_mean": "bnmeani",
      "h_pre_bn": "hprebn", "emb_cat": "embcat", "emb_": "emb"}


def _case_renamed_snake() -> dict:
    forward = """\
# forward pass, my own names, chunked so we can backprop step by step
emb_ = C[Xb]                                   # (32, 3, 10)
emb_cat = emb_.view(emb_.shape[0], -1)         # (32, 30)
h_pre_bn = emb_cat @ W1 + b1                   # linear layer 1
bn_mean = 1/n * h_pre_bn.sum(0, keepdim=True)
bn_diff = h_pre_bn - bn_mean
bn_diff_sq = bn_diff**2
bn_var = 1/(n-1) * bn_diff_sq.sum(0, keepdim=True)   # Bessel
bn_var_inv = (bn_var + 1e-5)**-0.5
bn_raw = bn_diff * bn_var_inv
h_pre_act = bngain * bn_raw + bnbias
hidden = torch.tanh(h_pre_act)
logits_out = hidden @ W2 + b2
logits_max = logits_out.max(1, keepdim=True).values
logits_norm = logits_out - logits_max
counts_exp = logits_norm.exp()
counts_total = counts_exp.sum(1, keepdims=True)
counts_sum_inverse = counts_total**-1
probs_ = counts_exp * counts_sum_inverse
log_probs = probs_.log()
loss = -log_probs[range(n), Yb].mean()

for p in parameters:
  p.grad = None
for t in [log_probs, probs_, counts_exp, counts_total, counts_sum_inverse, logits_norm,
          logits_max, logits_out, hidden, h_pre_act, bn_raw, bn_var_inv, bn_var, bn_diff_sq,
          bn_diff, h_pre_bn, bn_mean, emb_cat, emb_]:
  t.retain_grad()
loss.backward()
loss"""
    ex1 = [
        "# Exercise 1",
        "dlog_probs = torch.zeros_like(log_probs)\ndlog_probs[range(n), Yb] = -1.0 / n\n"
        "cmp('log_probs', dlog_probs, log_probs)",
        "dprobs_ = dlog_probs / probs_\ncmp('probs_', dprobs_, probs_)",
        "dcounts_sum_inverse = (dprobs_ * counts_exp).sum(1, keepdim=True)\n"
        "cmp('counts_sum_inverse', dcounts_sum_inverse, counts_sum_inverse)",
        "dcounts_total = -counts_total**-2 * dcounts_sum_inverse\n"
        "cmp('counts_total', dcounts_total, counts_total)",
        "dcounts_exp = dprobs_ * counts_sum_inverse + torch.ones_like(counts_exp) * dcounts_total\n"
        "cmp('counts_exp', dcounts_exp, counts_exp)",
        "dlogits_norm = counts_exp * dcounts_exp\ncmp('logits_norm', dlogits_norm, logits_norm)",
        "dlogits_max = -dlogits_norm.sum(1, keepdim=True)\n"
        "cmp('logits_max', dlogits_max, logits_max)",
        "dlogits_out = dlogits_norm + F.one_hot(logits_out.max(1).indices, "
        "num_classes=logits_out.shape[1]) * dlogits_max\n"
        "cmp('logits_out', dlogits_out, logits_out)",
        "dhidden = dlogits_out @ W2.T\ndW2 = hidden.T @ dlogits_out\n"
        "db2 = dlogits_out.sum(0)\n"
        "cmp('hidden', dhidden, hidden)\ncmp('W2', dW2, W2)\ncmp('b2', db2, b2)",
        "dh_pre_act = (1 - hidden**2) * dhidden\ncmp('h_pre_act', dh_pre_act, h_pre_act)",
        "dbngain = (bn_raw * dh_pre_act).sum(0, keepdim=True)\n"
        "dbn_raw = bngain * dh_pre_act\n"
        "dbnbias = dh_pre_act.sum(0, keepdim=True)\n"
        "cmp('bngain', dbngain, bngain)\ncmp('bn_raw', dbn_raw, bn_raw)\n"
        "cmp('bnbias', dbnbias, bnbias)",
        "dbn_var_inv = (bn_diff * dbn_raw).sum(0, keepdim=True)\n"
        "cmp('bn_var_inv', dbn_var_inv, bn_var_inv)",
        "dbn_var = -0.5 * (bn_var + 1e-5)**-1.5 * dbn_var_inv\ncmp('bn_var', dbn_var, bn_var)",
        "dbn_diff_sq = torch.ones_like(bn_diff_sq) * dbn_var / n\n"
        "cmp('bn_diff_sq', dbn_diff_sq, bn_diff_sq)",
        "# bn_diff_sq doesn't match; write bn_diff's second branch out in full instead\n"
        "dbn_diff = dbn_raw * bn_var_inv + 2 * bn_diff * (dbn_var / (n - 1))\n"
        "cmp('bn_diff', dbn_diff, bn_diff)",
        "dbn_mean = -dbn_diff.sum(0, keepdim=True)\ncmp('bn_mean', dbn_mean, bn_mean)\n"
        "dh_pre_bn = dbn_diff + dbn_mean / n\ncmp('h_pre_bn', dh_pre_bn, h_pre_bn)",
        "demb_cat = dh_pre_bn @ W1.T\ndW1 = emb_cat.T @ dh_pre_bn\ndb1 = dh_pre_bn.sum(1)\n"
        "cmp('emb_cat', demb_cat, emb_cat)\ncmp('W1', dW1, W1)\ncmp('b1', db1, b1)",
        "demb_ = demb_cat.view(emb_.shape)\ncmp('emb_', demb_, emb_)",
        "dC = torch.zeros_like(C)\ndC.index_add_(0, Xb.flatten(), demb_.flatten(0, 1))\n"
        "cmp('C', dC, C)",
    ]
    ex2f = "# Exercise 2\nloss_fast = F.cross_entropy(logits_out, Yb)\n" \
           "print(loss_fast.item(), 'diff:', (loss_fast - loss).item())"
    ex2 = "dlogits_out = F.log_softmax(logits_out, 1)\ndlogits_out[range(n), Yb] -= 1\n" \
          "dlogits_out /= n\ncmp('logits_out', dlogits_out, logits_out)"
    ex3f = "# Exercise 3\nh_pre_act_fast = bngain * (h_pre_bn - h_pre_bn.mean(0, keepdim=True))" \
           " / torch.sqrt(h_pre_bn.var(0, keepdim=True, unbiased=True) + 1e-5) + bnbias\n" \
           "print('max diff:', (h_pre_act_fast - h_pre_act).abs().max())"
    ex3 = "dh_pre_bn = bngain * bn_var_inv / n * (n * dh_pre_act - dh_pre_act.sum(0) " \
          "- n / (n - 1) * bn_raw * (dh_pre_act * bn_raw).sum(0))\n" \
          "cmp('h_pre_bn', dh_pre_bn, h_pre_bn)"
    training = """\
# Exercise 4: my backward pass in the training loop

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

max_steps = 200000
batch_size = 32
n = batch_size
lossi = []

with torch.no_grad():
  for i in range(max_steps):
    ix = torch.randint(0, Xtr.shape[0], (batch_size,), generator=g)
    Xb, Yb = Xtr[ix], Ytr[ix]
    emb_ = C[Xb]
    emb_cat = emb_.view(emb_.shape[0], -1)
    h_pre_bn = emb_cat @ W1 + b1
    bn_mean = h_pre_bn.mean(0, keepdim=True)
    bn_var = h_pre_bn.var(0, keepdim=True, unbiased=True)
    bn_var_inv = (bn_var + 1e-5)**-0.5
    bn_raw = (h_pre_bn - bn_mean) * bn_var_inv
    h_pre_act = bngain * bn_raw + bnbias
    hidden = torch.tanh(h_pre_act)
    logits_out = hidden @ W2 + b2
    loss = F.cross_entropy(logits_out, Yb)

    dlogits_out = F.softmax(logits_out, 1)
    dlogits_out[range(n), Yb] -= 1
    dlogits_out /= n
    dhidden = dlogits_out @ W2.T
    dW2 = hidden.T @ dlogits_out
    db2 = dlogits_out.sum(0)
    dh_pre_act = (1 - hidden**2) * dhidden
    dbngain = (bn_raw * dh_pre_act).sum(0, keepdim=True)
    dbnbias = dh_pre_act.sum(0, keepdim=True)
    dh_pre_bn = bngain * bn_var_inv / n * (
        n * dh_pre_act - dh_pre_act.sum(0) - n / (n - 1) * bn_raw * (dh_pre_act * bn_raw).sum(0))
    demb_cat = dh_pre_bn @ W1.T
    dW1 = emb_cat.T @ dh_pre_bn
    db1 = dh_pre_bn.sum(0)
    demb_ = demb_cat.view(emb_.shape)
    dC = torch.zeros_like(C)
    dC[Xb] += demb_
    grads = [dC, dW1, db1, dW2, db2, dbngain, dbnbias]

    lr = 0.1 if i < 100000 else 0.01
    for p, grad in zip(parameters, grads):
      p.data += -lr * grad

    if i % 10000 == 0:
      print(f'{i:7d}/{max_steps:7d}: {loss.item():.4f}')
    lossi.append(loss.log10().item())
"""
    notebook = nb(md("# backprop ninja, my version"), *SETUP, forward, *ex1, ex2f, ex2, ex3f,
                  ex3, training)
    wrong = _a("bndiff2", "embcat") | {"fused/cross_entropy", "train/loop"}
    right = set(STEP_IDS) - wrong
    return {"name": "renamed-forward-snake", "notebook": notebook, "right": right,
            "wrong": wrong, "renamed_forward": True}


# ---------------------------------------------------------------------------------------------
# 14. renamed forward pass: short maths names, renamed batchnorm parameters and batch

R2 = {"lp": "logprobs", "p_": "probs", "s_inv": "counts_sum_inv", "s": "counts_sum",
      "e": "counts", "z_shift": "norm_logits", "z_max": "logit_maxes", "z": "logits",
      "a": "h", "u": "hpreact", "xhat": "bnraw", "inv_std": "bnvar_inv", "var": "bnvar",
      "sq": "bndiff2", "xc": "bndiff", "mu": "bnmeani", "pre": "hprebn", "x": "embcat",
      "e_tok": "emb", "gamma": "bngain", "beta": "bnbias", "xb": "Xb", "yb": "Yb"}


def _case_renamed_maths() -> dict:
    params = L.SETUP[5].replace("bngain", "gamma").replace("bnbias", "beta")
    batch = "batch_size = 32\nn = batch_size\n" \
            "ix = torch.randint(0, Xtr.shape[0], (batch_size,), generator=g)\n" \
            "xb, yb = Xtr[ix], Ytr[ix]"
    forward = """\
e_tok = C[xb]
x = e_tok.view(e_tok.shape[0], -1)
pre = x @ W1 + b1
mu = 1/n*pre.sum(0, keepdim=True)
xc = pre - mu
sq = xc**2
var = 1/(n-1)*sq.sum(0, keepdim=True)
inv_std = (var + 1e-5)**-0.5
xhat = xc * inv_std
u = gamma * xhat + beta
a = torch.tanh(u)
z = a @ W2 + b2
z_max = z.max(1, keepdim=True).values
z_shift = z - z_max
e = z_shift.exp()
s = e.sum(1, keepdims=True)
s_inv = s**-1
p_ = e * s_inv
lp = p_.log()
loss = -lp[range(n), yb].mean()
for prm in parameters:
  prm.grad = None
for t in [lp, p_, e, s, s_inv, z_shift, z_max, z, a, u, xhat, inv_std, var, sq, xc, pre, mu,
          x, e_tok]:
  t.retain_grad()
loss.backward()
loss"""
    ex1 = [
        "# Exercise 1 (with my names)\n"
        "dlp = torch.zeros_like(lp)\ndlp[range(n), yb] = -1/n\n"
        "dp_ = dlp / p_\n"
        "ds_inv = (dp_ * e).sum(1, keepdim=True)\n"
        "ds = -s**-2 * ds_inv\n"
        "de = dp_ * s_inv + ds\n"
        "dz_shift = de * e\n"
        "dz_max = -dz_shift.sum(1, keepdim=True)\n"
        "dz = dz_shift.clone()\n"
        "dz[range(n), z.argmax(1)] += dz_max.squeeze(1)\n"
        "for name, mine, t in [('lp', dlp, lp), ('p', dp_, p_), ('s_inv', ds_inv, s_inv),\n"
        "                      ('s', ds, s), ('e', de, e), ('z_shift', dz_shift, z_shift),\n"
        "                      ('z_max', dz_max, z_max), ('z', dz, z)]:\n"
        "  cmp(name, mine, t)",
        "da = dz @ W2.T\ndW2 = a.T @ dz\ndb2 = dz.sum(0)\n"
        "du = (1 - a**2) * da\n"
        "dgamma = (xhat * du).sum(0, keepdim=True)\n"
        "dxhat = gamma * du\n"
        "dbeta = du.sum(0, keepdim=True)\n"
        "cmp('a', da, a); cmp('W2', dW2, W2); cmp('b2', db2, b2); cmp('u', du, u)\n"
        "cmp('gamma', dgamma, gamma); cmp('xhat', dxhat, xhat); cmp('beta', dbeta, beta)",
        "dinv_std = (xc * dxhat).sum(0, keepdim=True)\n"
        "dvar = -0.5 * (var + 1e-5)**-1.5 * dinv_std\n"
        "dsq = torch.ones_like(sq) * dvar / (n - 1)\n"
        "dxc = xhat * dxhat + 2 * xc * dsq\n"
        "cmp('inv_std', dinv_std, inv_std); cmp('var', dvar, var); cmp('sq', dsq, sq)\n"
        "cmp('xc', dxc, xc)",
        "# xc is off. on paper: dpre is dxc minus its batch mean\n"
        "dpre = inv_std * dxhat + 2 * xc * dsq\n"
        "dpre = dpre - dpre.mean(0, keepdim=True)\n"
        "cmp('pre', dpre, pre)\n"
        "dx = dpre @ W1.T\ndW1 = x.T @ dpre\ndb1 = dpre.sum(0)\n"
        "cmp('x', dx, x); cmp('W1', dW1, W1); cmp('b1', db1, b1)\n"
        "de_tok = dx.view(e_tok.shape)\ncmp('e_tok', de_tok, e_tok)\n"
        "dC = torch.zeros_like(C)\nfor k in range(n):\n  dC[xb[k]] += de_tok[k]\n"
        "cmp('C', dC, C)",
    ]
    ex2f = "loss_fast = F.cross_entropy(z, yb)\nprint(loss_fast.item(), 'diff:', " \
           "(loss_fast - loss).item())"
    ex2 = "dz = (F.one_hot(yb, 27) - F.softmax(z, 1)) / n\ncmp('z', dz, z)"
    ex3f = "u_fast = gamma * (pre - pre.mean(0, keepdim=True)) / torch.sqrt(pre.var(0, " \
           "keepdim=True, unbiased=True) + 1e-5) + beta\n" \
           "print('max diff:', (u_fast - u).abs().max())"
    ex3 = "dpre = gamma*inv_std/n * (n*du - du.sum(0) - n/(n-1)*xhat*(du*xhat).sum(1, " \
          "keepdim=True))\ncmp('pre', dpre, pre)"
    training = """\
n_hidden = 200
g = torch.Generator().manual_seed(2147483647)
C = torch.randn((vocab_size, n_embd), generator=g)
W1 = torch.randn((n_embd * block_size, n_hidden), generator=g) * 0.2
b1 = torch.randn(n_hidden, generator=g) * 0.1
W2 = torch.randn((n_hidden, vocab_size), generator=g) * 0.1
b2 = torch.randn(vocab_size, generator=g) * 0.1
gamma = torch.randn((1, n_hidden)) * 0.1 + 1.0
beta = torch.randn((1, n_hidden)) * 0.1
parameters = [C, W1, b1, W2, b2, gamma, beta]
max_steps = 200000
lossi = []

@torch.no_grad()
def step_grads(xb, yb):
  e_tok = C[xb]
  x = e_tok.view(n, -1)
  pre = x @ W1 + b1
  mu = pre.mean(0, keepdim=True)
  var = pre.var(0, keepdim=True, unbiased=True)
  inv_std = (var + 1e-5)**-0.5
  xhat = (pre - mu) * inv_std
  u = gamma * xhat + beta
  a = torch.tanh(u)
  z = a @ W2 + b2
  loss = F.cross_entropy(z, yb)
  dz = F.softmax(z, 1)
  dz[range(n), yb] -= 1
  dz /= n
  dW2 = a.T @ dz
  db2 = dz.sum(0)
  du = (1 - a**2) * (dz @ W2.T)
  dgamma = (xhat * du).sum(0, keepdim=True)
  dbeta = du.sum(0, keepdim=True)
  dpre = gamma*inv_std/n * (n*du - du.sum(0) - n/(n-1)*xhat*(du*xhat).sum(0))
  dW1 = x.T @ dpre
  db1 = dpre.sum(0)
  dC = torch.zeros_like(C)
  dC.index_add_(0, xb.view(-1), (dpre @ W1.T).view(-1, n_embd))
  return loss, [dC, dW1, db1, dW2, db2, dgamma, dbeta]

for i in range(max_steps):
  ix = torch.randint(0, Xtr.shape[0], (n,), generator=g)
  xb, yb = Xtr[ix], Ytr[ix]
  loss, grads = step_grads(xb, yb)
  lr = 0.1 if i < 100000 else 0.01
  with torch.no_grad():
    for prm, grad in zip(parameters, grads):
      prm -= lr * grad
  if i % 10000 == 0:
    print(i, loss.item())
  lossi.append(loss.log10().item())
"""
    notebook = nb(IMPORTS, WORDS, VOCAB, DATASET, CMP, params, batch, forward, *ex1,
                  md("## Exercise 2"), ex2f, ex2, md("## Exercise 3"), ex3f, ex3,
                  md("## Exercise 4"), training, "plt.plot(torch.tensor(lossi).view(-1, 10)"
                  ".mean(1))")
    wrong = _a("bndiff", "C") | {"fused/cross_entropy", "fused/batchnorm"}
    right = set(STEP_IDS) - wrong - _a("bnmeani")
    return {"name": "renamed-forward-maths", "notebook": notebook, "right": right,
            "wrong": wrong, "renamed_forward": True}


# ---------------------------------------------------------------------------------------------
# 15. the layers only, from the softmax's dlogits; many slips

def _case_layers_only() -> dict:
    ex1 = [
        EX1 + "\n# skipping the softmax atoms for now: dlogits straight from the softmax\n"
        "dlogits = F.softmax(logits, 1)\ndlogits[range(n), Yb] -= 1\ndlogits /= n\n"
        "cmp('logits', dlogits, logits)",
        "dh = dlogits @ W2.T\ndb2 = dlogits.sum(0)\ndW2 = dlogits.T @ h\n"
        "cmp('h', dh, h)\ncmp('b2', db2, b2)\ncmp('W2', dW2, W2)",
        "dhpreact = (1 - h**2) * dh\ndbngain = (bnraw * dhpreact).sum(0, keepdim=True)\n"
        "dbnraw = bngain * dhpreact\ndbnbias = dhpreact.sum(1, keepdim=True)\n"
        "cmp('hpreact', dhpreact, hpreact)\ncmp('bngain', dbngain, bngain)\n"
        "cmp('bnraw', dbnraw, bnraw)\ncmp('bnbias', dbnbias, bnbias)",
        "dbnvar_inv = (bnraw * dbnraw).sum(0, keepdim=True)\n"
        "cmp('bnvar_inv', dbnvar_inv, bnvar_inv)\n"
        "dbnvar = -0.5 * (bnvar + 1e-5)**-1.5 * (bndiff * dbnraw).sum(0, keepdim=True)\n"
        "cmp('bnvar', dbnvar, bnvar)",
        "dbndiff2 = torch.ones_like(bndiff2) * dbnvar / n\ncmp('bndiff2', dbndiff2, bndiff2)\n"
        "dbndiff = bnvar_inv * dbnraw + 2 * bndiff * dbnvar / (n - 1)\n"
        "cmp('bndiff', dbndiff, bndiff)",
        "dbnmeani = dbndiff.sum(0)\ncmp('bnmeani', dbnmeani, bnmeani)\n"
        "dhprebn = dbndiff - dbndiff.mean(0, keepdim=True)\ncmp('hprebn', dhprebn, hprebn)",
        "dembcat = dhprebn @ W1.T\ndW1 = embcat.T @ dhprebn / n\ndb1 = dhprebn.sum(0)\n"
        "cmp('embcat', dembcat, embcat)\ncmp('b1', db1, b1)\ncmp('W1', dW1, W1)",
        "demb = dembcat.view(n, n_embd, block_size)\ncmp('emb', demb, emb)",
    ]
    ex2 = "# backward pass\n\ndlogits = F.softmax(logits, 0)\n" \
          "dlogits[range(n), Yb] -= 1\ndlogits /= n\n\ncmp('logits', dlogits, logits)"
    ex3 = "# backward pass\n\ndhprebn = bnvar_inv / n * (n * dhpreact - dhpreact.sum(0) " \
          "- n / (n - 1) * bnraw * (dhpreact * bnraw).sum(0))\n\ncmp('hprebn', dhprebn, hprebn)"
    notebook = nb(*SETUP, FORWARD, *ex1, EX2F, ex2, EX3F, ex3, train(TB_SWAPPED), *L.AFTER)
    wrong = _a("h", "bngain", "bnvar_inv", "bndiff2", "bnmeani", "embcat", "emb") \
        | {"fused/cross_entropy", "fused/batchnorm", "train/loop"}
    right = _a("logits", "hpreact", "bnvar", "bndiff", "hprebn")
    return {"name": "layers-only-many-slips", "notebook": notebook, "right": right,
            "wrong": wrong, "renamed_forward": False}


CASES: list[dict] = [
    _case_cell_per_statement(),
    _case_all_cmps_at_end(),
    _case_above_exercise_comment(),
    _case_no_exercise_comment(),
    _case_batch_size_grad_h(),
    _case_check_grad_helper(),
    _case_compare_one_liners(),
    _case_other_code(),
    _case_right_then_wrong(),
    _case_wrong_then_right(),
    _case_forgets_mean(),
    _case_stops_at_exp(),
    _case_renamed_snake(),
    _case_renamed_maths(),
    _case_layers_only(),
]

ALIASES: dict[str, dict[str, str]] = {"renamed-forward-snake": R1, "renamed-forward-maths": R2}


def write(case: dict, folder: Path) -> Path:
    """The case's notebook as `folder/<name>.ipynb`."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{case['name']}.ipynb"
    path.write_text(json.dumps(case["notebook"], indent=1))
    return path
