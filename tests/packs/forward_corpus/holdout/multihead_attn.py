"""Multi-head causal self-attention on names

Eight characters, embedded with learned positions, go through two causal attention heads
(split with view/transpose, a fixed lower-triangular mask), an output projection with a
residual connection, and the last position predicts the ninth character.
"""
import math
import torch
import torch.nn.functional as F

DATA = "names.txt"
block_size = 8
vocab_size = 27
n_embd = 16
n_head = 2
head_size = 8
FIXED = ["mask"]  # the causal mask is not a parameter
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
    def mat(a, b_):
        return torch.randn((a, b_), generator=g) / a ** 0.5

    return {
        "C": torch.randn((vocab_size, n_embd), generator=g),
        "P": torch.randn((block_size, n_embd), generator=g) * 0.1,
        "Wq": mat(n_embd, n_embd), "Wk": mat(n_embd, n_embd), "Wv": mat(n_embd, n_embd),
        "Wo": mat(n_embd, n_embd) * 0.5,
        "W": torch.randn((n_embd, vocab_size), generator=g) * 0.1,
        "b": torch.randn(vocab_size, generator=g) * 0.1,
        "mask": torch.tril(torch.ones(block_size, block_size)),
    }


def batch(n, seed, text, split="train"):
    X, Y = examples(text, split)
    ix = torch.randint(0, X.shape[0], (n,), generator=torch.Generator().manual_seed(seed))
    return {"X": X[ix], "Y": Y[ix]}


def forward(X, Y, C, P, Wq, Wk, Wv, Wo, W, b, mask):
    x = C[X] + P
    q = (x @ Wq).view(n, block_size, n_head, head_size).transpose(1, 2)
    k = (x @ Wk).view(n, block_size, n_head, head_size).transpose(1, 2)
    v = (x @ Wv).view(n, block_size, n_head, head_size).transpose(1, 2)
    att = q @ k.transpose(-2, -1) / math.sqrt(head_size)
    att2 = att.masked_fill(mask == 0, float("-inf"))
    wei = att2.softmax(-1)
    y = wei @ v
    ycat = y.transpose(1, 2).reshape(n, block_size, n_embd)
    out = ycat @ Wo + x
    last = out[:, -1]
    logits = last @ W + b
    loss = F.cross_entropy(logits, Y)
    return loss
