"""Poisson regression of a name's length, through elementwise operations

A name's first four letters go through a layer whose activation is written with `where`, a smooth
absolute value (`sqrt`), and an exponential rate (clamped); the loss is the Poisson negative
log-likelihood of the name's length.
"""
import math
import torch
import torch.nn.functional as F

DATA = "names.txt"
block_size = 4
vocab_size = 27
n_embd = 8
n_hidden = 32
CACHE = {}  # each split's examples, built once


def examples(text, split):
    """The first letters of each name of the split (padded with 0), and the name's length."""
    if split not in CACHE:
        words = text.splitlines()
        order = torch.randperm(len(words), generator=torch.Generator().manual_seed(42))
        n1, n2 = int(0.8 * len(words)), int(0.9 * len(words))
        picked = {"train": order[:n1], "val": order[n1:n2], "test": order[n2:]}[split]
        stoi = {c: i + 1 for i, c in enumerate("abcdefghijklmnopqrstuvwxyz")}
        X, Y = [], []
        for i in picked.tolist():
            ids = [stoi.get(ch, 0) for ch in words[i]][:block_size]
            X.append(ids + [0] * (block_size - len(ids)))
            Y.append(float(len(words[i])))
        CACHE[split] = (torch.tensor(X), torch.tensor(Y))
    return CACHE[split]


def setup(seed):
    g = torch.Generator().manual_seed(seed)
    return {
        "C": torch.randn((vocab_size, n_embd), generator=g),
        "W1": torch.randn((block_size * n_embd, n_hidden), generator=g) / (block_size * n_embd) ** 0.5,
        "b1": torch.randn(n_hidden, generator=g) * 0.1,
        "W2": torch.randn((n_hidden, 1), generator=g) * 0.1,
        "b2": 1.8 + torch.randn(1, generator=g) * 0.1,
    }


def batch(n, seed, text, split="train"):
    X, Y = examples(text, split)
    ix = torch.randint(0, X.shape[0], (n,), generator=torch.Generator().manual_seed(seed))
    return {"X": X[ix], "Y": Y[ix]}


def forward(X, Y, C, W1, b1, W2, b2):
    emb = C[X]
    x = emb.view(n, -1)
    hpre = x @ W1 + b1
    h = torch.where(hpre > 0, hpre, 0.1 * hpre)
    s = torch.sqrt(h * h + 1.0)
    z = s @ W2 + b2
    rate = torch.exp(z.clamp(-5.0, 5.0)).squeeze(1)
    nll = rate - Y * torch.log(rate)
    loss = nll.mean()
    return loss
