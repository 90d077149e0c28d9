"""Regressing a name's length: Huber loss by hand, with an L1 penalty

From a name's first four letters, a ReLU MLP guesses its length; the Huber loss is written out with
`where` (quadratic inside `delta`, linear outside), plus an L1 penalty on both weight matrices.
"""
import math
import torch
import torch.nn.functional as F

DATA = "names.txt"
block_size = 4
vocab_size = 27
n_embd = 8
n_hidden = 32
delta = 1.0
lam = 0.0001
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
        "W1": torch.randn((block_size * n_embd, n_hidden), generator=g) * (2 / (block_size * n_embd)) ** 0.5,
        "b1": torch.randn(n_hidden, generator=g) * 0.1,
        "W2": torch.randn((n_hidden, 1), generator=g) * 0.1,
        "b2": 6.0 + torch.randn(1, generator=g) * 0.1,
    }


def batch(n, seed, text, split="train"):
    X, Y = examples(text, split)
    ix = torch.randint(0, X.shape[0], (n,), generator=torch.Generator().manual_seed(seed))
    return {"X": X[ix], "Y": Y[ix]}


def forward(X, Y, C, W1, b1, W2, b2):
    emb = C[X]
    x = emb.view(n, -1)
    hpre = x @ W1 + b1
    h = torch.relu(hpre)
    pred = (h @ W2 + b2).squeeze(1)
    err = pred - Y
    aerr = err.abs()
    hub = torch.where(aerr < delta, 0.5 * err ** 2, delta * (aerr - 0.5 * delta))
    loss = hub.mean() + lam * (W1.abs().sum() + W2.abs().sum())
    return loss
