"""Causal dilated 1-D convolutions, kernel 3

Eight characters, embedded, laid out as channels by positions, go through two causal
convolutions of kernel 3 (dilation 1, then 2; padded on the left only) with ReLUs; the last
position predicts the next character.
"""
import math
import torch
import torch.nn.functional as F

DATA = "names.txt"
block_size = 8
vocab_size = 27
n_embd = 10
n_hidden = 32
kernel_size = 3
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
    def conv(c_out, c_in):
        return torch.randn((c_out, c_in, kernel_size), generator=g) * (2 / (c_in * kernel_size)) ** 0.5

    return {
        "C": torch.randn((vocab_size, n_embd), generator=g),
        "w1": conv(n_hidden, n_embd), "b1": torch.randn(n_hidden, generator=g) * 0.1,
        "w2": conv(n_hidden, n_hidden), "b2": torch.randn(n_hidden, generator=g) * 0.1,
        "W": torch.randn((n_hidden, vocab_size), generator=g) * 0.1,
        "b": torch.randn(vocab_size, generator=g) * 0.1,
    }


def batch(n, seed, text, split="train"):
    X, Y = examples(text, split)
    ix = torch.randint(0, X.shape[0], (n,), generator=torch.Generator().manual_seed(seed))
    return {"X": X[ix], "Y": Y[ix]}


def forward(X, Y, C, w1, b1, w2, b2, W, b):
    emb = C[X]
    x = emb.permute(0, 2, 1)
    xp = F.pad(x, (2, 0))
    h1pre = F.conv1d(xp, w1, b1)
    h1 = F.relu(h1pre)
    h1p = F.pad(h1, (4, 0))
    h2pre = F.conv1d(h1p, w2, b2, dilation=2)
    h2 = F.relu(h2pre)
    last = h2[:, :, -1]
    logits = last @ W + b
    loss = F.cross_entropy(logits, Y)
    return loss
