"""A small LeNet on the picture of a context

Eight embedded characters make an 8x8 one-channel picture: two 3x3 convolutions (padding 1), each
followed by a nonlinearity and a 2x2 max-pool, flattened into a linear layer.
"""
import math
import torch
import torch.nn.functional as F

DATA = "names.txt"
block_size = 8
vocab_size = 27
n_embd = 8
c1 = 4
c2 = 8
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
        "w1": torch.randn((c1, 1, 3, 3), generator=g) / 3.0,
        "b1": torch.randn(c1, generator=g) * 0.1,
        "w2": torch.randn((c2, c1, 3, 3), generator=g) / (9 * c1) ** 0.5,
        "b2": torch.randn(c2, generator=g) * 0.1,
        "W": torch.randn((c2 * (block_size // 4) * (n_embd // 4), vocab_size), generator=g) * 0.1,
        "b": torch.randn(vocab_size, generator=g) * 0.1,
    }


def batch(n, seed, text, split="train"):
    X, Y = examples(text, split)
    ix = torch.randint(0, X.shape[0], (n,), generator=torch.Generator().manual_seed(seed))
    return {"X": X[ix], "Y": Y[ix]}


def forward(X, Y, C, w1, b1, w2, b2, W, b):
    emb = C[X]
    img = emb.view(n, 1, block_size, n_embd)
    a1 = F.conv2d(img, w1, b1, padding=1)
    r1 = F.relu(a1)
    p1 = F.max_pool2d(r1, kernel_size=2, stride=2)
    a2 = F.conv2d(p1, w2, b2, stride=1, padding=1)
    r2 = torch.tanh(a2)
    p2 = F.max_pool2d(r2, 2)
    flat = torch.flatten(p2, 1)
    logits = flat @ W + b
    loss = F.cross_entropy(logits, Y)
    return loss
