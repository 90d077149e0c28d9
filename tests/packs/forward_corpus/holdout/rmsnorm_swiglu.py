"""RMSNorm and a SwiGLU feed-forward block

Three characters, embedded and projected, are RMS-normalized (with `rsqrt`, as LLaMA writes it)
and go through a SwiGLU feed-forward layer added back residually; a linear head predicts the next
character.
"""
import math
import torch
import torch.nn.functional as F

DATA = "names.txt"
block_size = 3
vocab_size = 27
n_embd = 10
d_model = 32
d_ff = 64
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
        "Win": torch.randn((block_size * n_embd, d_model), generator=g) / (block_size * n_embd) ** 0.5,
        "gn": 1.0 + torch.randn(d_model, generator=g) * 0.1,
        "W1": torch.randn((d_model, d_ff), generator=g) / d_model ** 0.5,
        "W3": torch.randn((d_model, d_ff), generator=g) / d_model ** 0.5,
        "W2": torch.randn((d_ff, d_model), generator=g) / d_ff ** 0.5,
        "Wout": torch.randn((d_model, vocab_size), generator=g) * 0.1,
        "bout": torch.randn(vocab_size, generator=g) * 0.1,
    }


def batch(n, seed, text, split="train"):
    X, Y = examples(text, split)
    ix = torch.randint(0, X.shape[0], (n,), generator=torch.Generator().manual_seed(seed))
    return {"X": X[ix], "Y": Y[ix]}


def forward(X, Y, C, Win, gn, W1, W3, W2, Wout, bout):
    emb = C[X]
    x = emb.view(n, -1)
    hx = x @ Win
    ms = hx.pow(2).mean(-1, keepdim=True)
    inv = torch.rsqrt(ms + 1e-6)
    xn = hx * inv * gn
    gate = F.silu(xn @ W1)
    up = xn @ W3
    act = gate * up
    ff = act @ W2
    r = hx + ff
    logits = r @ Wout + bout
    loss = F.cross_entropy(logits, Y)
    return loss
