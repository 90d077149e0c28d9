"""An MLP with batch normalization, written out (CS231n style)

Three characters, embedded and concatenated, a linear layer, batch normalization over the batch
(mean, biased variance, normalize, scale and shift), a ReLU, and a linear layer to the logits.
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
        "W1": torch.randn((block_size * n_embd, n_hidden), generator=g) * (2 / (block_size * n_embd)) ** 0.5,
        "b1": torch.randn(n_hidden, generator=g) * 0.1,
        "gamma": 1.0 + torch.randn((1, n_hidden), generator=g) * 0.1,
        "beta": torch.randn((1, n_hidden), generator=g) * 0.1,
        "W2": torch.randn((n_hidden, vocab_size), generator=g) * 0.1,
        "b2": torch.randn(vocab_size, generator=g) * 0.1,
    }


def batch(n, seed, text, split="train"):
    X, Y = examples(text, split)
    ix = torch.randint(0, X.shape[0], (n,), generator=torch.Generator().manual_seed(seed))
    return {"X": X[ix], "Y": Y[ix]}


def forward(X, Y, C, W1, b1, gamma, beta, W2, b2):
    emb = C[X]
    embcat = emb.view(emb.shape[0], -1)
    hpre = embcat @ W1 + b1
    mu = hpre.mean(0, keepdim=True)
    var = hpre.var(0, keepdim=True, unbiased=False)
    xhat = (hpre - mu) / torch.sqrt(var + 1e-5)
    hbn = gamma * xhat + beta
    h = F.relu(hbn)
    logits = h @ W2 + b2
    loss = F.cross_entropy(logits, Y)
    return loss
