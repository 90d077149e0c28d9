"""A vanilla RNN unrolled over three characters

Three characters of context enter a tanh recurrent layer one at a time, the same weights at every
step, from a learned initial state; the last state predicts the next character.
"""
import math
import torch
import torch.nn.functional as F

DATA = "names.txt"
block_size = 3
vocab_size = 27
n_embd = 10
n_hidden = 48
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
        "h0": torch.randn((1, n_hidden), generator=g) * 0.1,
        "Wxh": torch.randn((n_embd, n_hidden), generator=g) / n_embd ** 0.5,
        "Whh": torch.randn((n_hidden, n_hidden), generator=g) / n_hidden ** 0.5,
        "bh": torch.randn(n_hidden, generator=g) * 0.1,
        "Why": torch.randn((n_hidden, vocab_size), generator=g) * 0.1,
        "by": torch.randn(vocab_size, generator=g) * 0.1,
    }


def batch(n, seed, text, split="train"):
    X, Y = examples(text, split)
    ix = torch.randint(0, X.shape[0], (n,), generator=torch.Generator().manual_seed(seed))
    return {"X": X[ix], "Y": Y[ix]}


def forward(X, Y, C, h0, Wxh, Whh, bh, Why, by):
    emb = C[X]
    a1 = emb[:, 0] @ Wxh + h0 @ Whh + bh
    h1 = torch.tanh(a1)
    a2 = emb[:, 1] @ Wxh + h1 @ Whh + bh
    h2 = torch.tanh(a2)
    a3 = emb[:, 2] @ Wxh + h2 @ Whh + bh
    h3 = torch.tanh(a3)
    logits = h3 @ Why + by
    loss = F.cross_entropy(logits, Y)
    return loss
