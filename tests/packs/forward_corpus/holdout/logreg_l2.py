"""Logistic regression with an L2 penalty: does a name end with a vowel?

The name without its last letter, one-hot encoded letter by letter, is the input of a logistic
regression; the loss is the binary cross-entropy written out, plus `lam` times the squared
weights.
"""
import math
import torch
import torch.nn.functional as F

DATA = "names.txt"
block_size = 6
vocab_size = 27
lam = 0.001
CACHE = {}  # each split's examples, built once


def examples(text, split):
    """Each name of the split without its last letter (padded with 0), and 1.0 if it ends with a vowel."""
    if split not in CACHE:
        words = text.splitlines()
        order = torch.randperm(len(words), generator=torch.Generator().manual_seed(42))
        n1, n2 = int(0.8 * len(words)), int(0.9 * len(words))
        picked = {"train": order[:n1], "val": order[n1:n2], "test": order[n2:]}[split]
        stoi = {c: i + 1 for i, c in enumerate("abcdefghijklmnopqrstuvwxyz")}
        X, Y = [], []
        for i in picked.tolist():
            w = words[i]
            ids = [stoi.get(ch, 0) for ch in w[:-1]][:block_size]
            X.append(ids + [0] * (block_size - len(ids)))
            Y.append(1.0 if w[-1] in "aeiouy" else 0.0)
        CACHE[split] = (torch.tensor(X), torch.tensor(Y))
    return CACHE[split]


def setup(seed):
    g = torch.Generator().manual_seed(seed)
    return {
        "w": torch.randn(block_size * vocab_size, generator=g) * 0.1,
        "b": torch.randn(1, generator=g) * 0.1,
    }


def batch(n, seed, text, split="train"):
    X, Y = examples(text, split)
    ix = torch.randint(0, X.shape[0], (n,), generator=torch.Generator().manual_seed(seed))
    return {"X": X[ix], "Y": Y[ix]}


def forward(X, Y, w, b):
    xenc = F.one_hot(X, vocab_size).float()
    x = xenc.view(n, -1)
    z = x @ w + b
    p = torch.sigmoid(z)
    logp = torch.log(p)
    log1mp = torch.log(1 - p)
    ll = Y * logp + (1 - Y) * log1mp
    loss = -ll.mean() + lam * (w * w).sum()
    return loss
