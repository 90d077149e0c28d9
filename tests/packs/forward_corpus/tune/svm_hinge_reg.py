"""A multiclass SVM on character embeddings, with L2 regularisation

A linear classifier on three embedded characters, trained with the multiclass hinge loss of
CS231n (margin 1, the true class left out) plus `reg` times the squared weights.
"""
import math
import torch
import torch.nn.functional as F

DATA = "names.txt"
block_size = 3
vocab_size = 27
n_embd = 10
reg = 0.001
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
        "W": torch.randn((block_size * n_embd, vocab_size), generator=g) * 0.1,
        "b": torch.randn(vocab_size, generator=g) * 0.1,
    }


def batch(n, seed, text, split="train"):
    X, Y = examples(text, split)
    ix = torch.randint(0, X.shape[0], (n,), generator=torch.Generator().manual_seed(seed))
    return {"X": X[ix], "Y": Y[ix]}


def forward(X, Y, C, W, b):
    emb = C[X]
    flat = emb.view(n, -1)
    scores = flat @ W + b
    correct = scores[torch.arange(n), Y].view(n, 1)
    margins = torch.clamp(scores - correct + 1.0, min=0)
    masked = margins.masked_fill(F.one_hot(Y, vocab_size) == 1, 0.0)
    data_loss = masked.sum() / n
    loss = data_loss + reg * (W * W).sum()
    return loss
