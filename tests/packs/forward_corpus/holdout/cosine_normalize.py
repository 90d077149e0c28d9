"""A cosine classifier, with F.normalize and cosine similarity

The hidden vector of three characters and the class prototypes are both normalized, so the
logits are scaled cosines; an auxiliary term pulls the hidden vector toward a projection of the
last character (`F.cosine_similarity`).
"""
import math
import torch
import torch.nn.functional as F

DATA = "names.txt"
block_size = 3
vocab_size = 27
n_embd = 10
n_hidden = 32
scale = 10.0
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
        "Wc": torch.randn((n_hidden, vocab_size), generator=g),
        "Wp": torch.randn((n_embd, n_hidden), generator=g) / n_embd ** 0.5,
    }


def batch(n, seed, text, split="train"):
    X, Y = examples(text, split)
    ix = torch.randint(0, X.shape[0], (n,), generator=torch.Generator().manual_seed(seed))
    return {"X": X[ix], "Y": Y[ix]}


def forward(X, Y, C, W1, b1, Wc, Wp):
    emb = C[X]
    x = emb.view(n, -1)
    hpre = x @ W1 + b1
    h = torch.tanh(hpre)
    hn = F.normalize(h, dim=1)
    Wn = F.normalize(Wc, dim=0)
    logits = scale * (hn @ Wn)
    proj = emb[:, -1] @ Wp
    sim = F.cosine_similarity(h, proj, dim=1)
    loss = F.cross_entropy(logits, Y) - 0.1 * sim.mean()
    return loss
