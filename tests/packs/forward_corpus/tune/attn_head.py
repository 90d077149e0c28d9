"""Self-attention on names: one causal head

Eight characters go in, each looked up in a table and given a learned position; one causal
self-attention head mixes them, and the last position predicts the ninth character.
"""
import math
import torch
import torch.nn.functional as F

DATA = "names.txt"
block_size = 8  # characters of context
vocab_size = 27
n_embd = 16
head_size = 16
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
        "P": torch.randn((block_size, n_embd), generator=g) * 0.1,
        "Wq": torch.randn((n_embd, head_size), generator=g) / n_embd ** 0.5,
        "Wk": torch.randn((n_embd, head_size), generator=g) / n_embd ** 0.5,
        "Wv": torch.randn((n_embd, head_size), generator=g) / n_embd ** 0.5,
        "W": torch.randn((head_size, vocab_size), generator=g) * 0.1,
        "b": torch.randn(vocab_size, generator=g) * 0.1,
    }


def batch(n, seed, text, split="train"):
    X, Y = examples(text, split)
    ix = torch.randint(0, X.shape[0], (n,), generator=torch.Generator().manual_seed(seed))
    return {"X": X[ix], "Y": Y[ix]}


def forward(X, Y, C, P, Wq, Wk, Wv, W, b):
    tok = C[X]
    x = tok + P
    q = x @ Wq
    k = x @ Wk
    v = x @ Wv
    att = q @ k.transpose(1, 2) * head_size ** -0.5
    masked = att.masked_fill(torch.tril(torch.ones(block_size, block_size)) == 0, float("-inf"))
    wei = F.softmax(masked, dim=-1)
    out = wei @ v
    last = out[:, -1, :]
    logits = last @ W + b
    loss = F.cross_entropy(logits, Y)
    return loss
