"""A bilinear layer written with einsum

Four characters are embedded and projected with an einsum; the last one's vector and the mean of
the others meet in a bilinear form (`einsum("ni,kij,nj->nk")`), and a tanh layer predicts the
next character.
"""
import math
import torch
import torch.nn.functional as F

DATA = "names.txt"
block_size = 4
vocab_size = 27
n_embd = 10
d = 12
n_out = 16
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
        "Wp": torch.randn((n_embd, d), generator=g) / n_embd ** 0.5,
        "Wb": torch.randn((n_out, d, d), generator=g) / d,
        "bb": torch.randn(n_out, generator=g) * 0.1,
        "W": torch.randn((n_out, vocab_size), generator=g) * 0.1,
        "b": torch.randn(vocab_size, generator=g) * 0.1,
    }


def batch(n, seed, text, split="train"):
    X, Y = examples(text, split)
    ix = torch.randint(0, X.shape[0], (n,), generator=torch.Generator().manual_seed(seed))
    return {"X": X[ix], "Y": Y[ix]}


def forward(X, Y, C, Wp, Wb, bb, W, b):
    emb = C[X]
    proj = torch.einsum("nte,ed->ntd", emb, Wp)
    a = proj[:, -1]
    c = proj[:, :-1].mean(1)
    bil = torch.einsum("ni,kij,nj->nk", a, Wb, c) + bb
    h = torch.tanh(bil)
    logits = h @ W + b
    loss = F.cross_entropy(logits, Y)
    return loss
