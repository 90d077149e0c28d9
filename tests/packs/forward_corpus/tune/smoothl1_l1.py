"""Regressing a name's length: smooth-L1 loss with an L1 penalty

From a name's first four letters, a two-layer tanh MLP guesses how long the name is; the loss is
PyTorch's smooth-L1 loss plus an L1 penalty on the first layer's weights.
"""
import math
import torch
import torch.nn.functional as F

DATA = "names.txt"
block_size = 4
vocab_size = 27
n_embd = 8
n_hidden = 32
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
        "W1": torch.randn((block_size * n_embd, n_hidden), generator=g) / (block_size * n_embd) ** 0.5,
        "b1": torch.randn(n_hidden, generator=g) * 0.1,
        "W2": torch.randn((n_hidden, n_hidden), generator=g) / n_hidden ** 0.5,
        "b2": torch.randn(n_hidden, generator=g) * 0.1,
        "W3": torch.randn((n_hidden, 1), generator=g) * 0.1,
        "b3": 6.0 + torch.randn(1, generator=g) * 0.1,
    }


def batch(n, seed, text, split="train"):
    X, Y = examples(text, split)
    ix = torch.randint(0, X.shape[0], (n,), generator=torch.Generator().manual_seed(seed))
    return {"X": X[ix], "Y": Y[ix]}


def forward(X, Y, C, W1, b1, W2, b2, W3, b3):
    emb = C[X]
    x = emb.view(n, -1)
    h1pre = x @ W1 + b1
    h1 = torch.tanh(h1pre)
    h2pre = h1 @ W2 + b2
    h2 = torch.tanh(h2pre)
    out = h2 @ W3 + b3
    pred = out.squeeze(1)
    loss = F.smooth_l1_loss(pred, Y) + lam * W1.abs().sum()
    return loss
