"""A GELU MLP on names

Three characters, embedded and concatenated, through two hidden layers: the first with the exact
GELU, the second with its tanh approximation (as GPT-2 uses it).
"""
import math
import torch
import torch.nn.functional as F

DATA = "names.txt"
block_size = 3
vocab_size = 27
n_embd = 10
n_hidden = 64
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
    return {
        "C": torch.randn((vocab_size, n_embd), generator=g),
        "W1": torch.randn((block_size * n_embd, n_hidden), generator=g) / (block_size * n_embd) ** 0.5,
        "b1": torch.randn(n_hidden, generator=g) * 0.1,
        "W2": torch.randn((n_hidden, n_hidden), generator=g) / n_hidden ** 0.5,
        "b2": torch.randn(n_hidden, generator=g) * 0.1,
        "W3": torch.randn((n_hidden, vocab_size), generator=g) * 0.1,
        "b3": torch.randn(vocab_size, generator=g) * 0.1,
    }


def batch(n, seed, text, split="train"):
    X, Y = examples(text, split)
    ix = torch.randint(0, X.shape[0], (n,), generator=torch.Generator().manual_seed(seed))
    return {"X": X[ix], "Y": Y[ix]}


def forward(X, Y, C, W1, b1, W2, b2, W3, b3):
    emb = C[X]
    x = emb.view(n, -1)
    h1pre = x @ W1 + b1
    h1 = F.gelu(h1pre)
    h2pre = h1 @ W2 + b2
    h2 = F.gelu(h2pre, approximate="tanh")
    logits = h2 @ W3 + b3
    loss = F.cross_entropy(logits, Y)
    return loss
