"""A 2-D convolution over the picture of a context

The eight characters' embeddings, stacked, make an 8x8 picture with one channel: a 3x3
convolution, a ReLU, a 2x2 max-pool, flattened into a linear layer that predicts the next
character.
"""
import math
import torch
import torch.nn.functional as F

DATA = "names.txt"
block_size = 8
vocab_size = 27
n_embd = 8
n_chan = 4
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
        "w1": torch.randn((n_chan, 1, 3, 3), generator=g) / 3.0,
        "b1": torch.randn(n_chan, generator=g) * 0.1,
        "W": torch.randn((n_chan * (block_size // 2) * (n_embd // 2), vocab_size), generator=g) * 0.1,
        "b": torch.randn(vocab_size, generator=g) * 0.1,
    }


def batch(n, seed, text, split="train"):
    X, Y = examples(text, split)
    ix = torch.randint(0, X.shape[0], (n,), generator=torch.Generator().manual_seed(seed))
    return {"X": X[ix], "Y": Y[ix]}


def forward(X, Y, C, w1, b1, W, b):
    emb = C[X]
    img = emb.unsqueeze(1)
    hpre = F.conv2d(img, w1, b1, padding=1)
    h = F.relu(hpre)
    pooled = F.max_pool2d(h, 2)
    flat = pooled.flatten(1)
    logits = flat @ W + b
    loss = F.cross_entropy(logits, Y)
    return loss
