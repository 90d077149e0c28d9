"""A GRU unrolled over three characters

Three characters of context go through a gated recurrent unit one at a time, from a learned
initial state; the last state predicts the next character.
"""
import math
import torch
import torch.nn.functional as F

DATA = "names.txt"
block_size = 3
vocab_size = 27
n_embd = 10
n_hidden = 32
CACHE = {}  # each split's examples, built once


def examples(text, split):
    """Every (context, next character) of every name in the split, as makemore builds them."""
    if split not in CACHE:
        words = text.splitlines()
        order = torch.randperm(len(words), generator=torch.Generator().manual_seed(42))
        n1, n2 = int(0.8 * len(words)), int(0.9 * len(words))
        picked = {"train": order[:n1], "val": order[n1:n2], "test": order[n2:]}[split]
        stoi = {c: i + 1 for i, c in enumerate("abcdefghijklmnopqrstuvwxyz")}
        X, Y = [], []
        for i in picked.tolist():
            context = [0] * block_size
            for ch in words[i] + ".":
                ix = stoi.get(ch, 0)
                X.append(context)
                Y.append(ix)
                context = context[1:] + [ix]
        CACHE[split] = (torch.tensor(X), torch.tensor(Y))
    return CACHE[split]


def setup(seed):
    g = torch.Generator().manual_seed(seed)
    def mat(a, b_):
        return torch.randn((a, b_), generator=g) / a ** 0.5

    return {
        "C": torch.randn((vocab_size, n_embd), generator=g),
        "h0": torch.randn((1, n_hidden), generator=g) * 0.1,
        "Wz": mat(n_embd, n_hidden), "Uz": mat(n_hidden, n_hidden), "bz": torch.randn(n_hidden, generator=g) * 0.1,
        "Wr": mat(n_embd, n_hidden), "Ur": mat(n_hidden, n_hidden), "br": torch.randn(n_hidden, generator=g) * 0.1,
        "Wh": mat(n_embd, n_hidden), "Uh": mat(n_hidden, n_hidden), "bh": torch.randn(n_hidden, generator=g) * 0.1,
        "W": torch.randn((n_hidden, vocab_size), generator=g) * 0.1,
        "b": torch.randn(vocab_size, generator=g) * 0.1,
    }


def batch(n, seed, text, split="train"):
    X, Y = examples(text, split)
    ix = torch.randint(0, X.shape[0], (n,), generator=torch.Generator().manual_seed(seed))
    return {"X": X[ix], "Y": Y[ix]}


def forward(X, Y, C, h0, Wz, Uz, bz, Wr, Ur, br, Wh, Uh, bh, W, b):
    emb = C[X]
    z1 = torch.sigmoid(emb[:, 0] @ Wz + h0 @ Uz + bz)
    r1 = torch.sigmoid(emb[:, 0] @ Wr + h0 @ Ur + br)
    c1 = torch.tanh(emb[:, 0] @ Wh + (r1 * h0) @ Uh + bh)
    h1 = (1 - z1) * h0 + z1 * c1
    z2 = torch.sigmoid(emb[:, 1] @ Wz + h1 @ Uz + bz)
    r2 = torch.sigmoid(emb[:, 1] @ Wr + h1 @ Ur + br)
    c2 = torch.tanh(emb[:, 1] @ Wh + (r2 * h1) @ Uh + bh)
    h2 = (1 - z2) * h1 + z2 * c2
    z3 = torch.sigmoid(emb[:, 2] @ Wz + h2 @ Uz + bz)
    r3 = torch.sigmoid(emb[:, 2] @ Wr + h2 @ Ur + br)
    c3 = torch.tanh(emb[:, 2] @ Wh + (r3 * h2) @ Uh + bh)
    h3 = (1 - z3) * h2 + z3 * c3
    logits = h3 @ W + b
    loss = F.cross_entropy(logits, Y)
    return loss
