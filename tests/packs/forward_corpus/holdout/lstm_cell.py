"""One LSTM cell

Three characters, embedded and concatenated, are the input of one LSTM cell from a learned state:
four gates cut from one matrix product, the new cell and hidden state, and a linear head.
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
    return {
        "C": torch.randn((vocab_size, n_embd), generator=g),
        "h0": torch.randn((1, n_hidden), generator=g) * 0.1,
        "c0": torch.randn((1, n_hidden), generator=g) * 0.1,
        "Wx": torch.randn((block_size * n_embd, 4 * n_hidden), generator=g) / (block_size * n_embd) ** 0.5,
        "Wh": torch.randn((n_hidden, 4 * n_hidden), generator=g) / n_hidden ** 0.5,
        "bg": torch.randn(4 * n_hidden, generator=g) * 0.1,
        "W": torch.randn((n_hidden, vocab_size), generator=g) * 0.1,
        "b": torch.randn(vocab_size, generator=g) * 0.1,
    }


def batch(n, seed, text, split="train"):
    X, Y = examples(text, split)
    ix = torch.randint(0, X.shape[0], (n,), generator=torch.Generator().manual_seed(seed))
    return {"X": X[ix], "Y": Y[ix]}


def forward(X, Y, C, h0, c0, Wx, Wh, bg, W, b):
    emb = C[X]
    x = emb.view(n, -1)
    gates = x @ Wx + h0 @ Wh + bg
    ig = torch.sigmoid(gates[:, :n_hidden])
    fg = torch.sigmoid(gates[:, n_hidden:2 * n_hidden])
    gg = torch.tanh(gates[:, 2 * n_hidden:3 * n_hidden])
    og = torch.sigmoid(gates[:, 3 * n_hidden:])
    c = fg * c0 + ig * gg
    h = og * torch.tanh(c)
    logits = h @ W + b
    loss = F.cross_entropy(logits, Y)
    return loss
