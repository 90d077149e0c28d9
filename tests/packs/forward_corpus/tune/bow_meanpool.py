"""A bag-of-characters classifier: mean-pooled embeddings

A name without its last letter is a bag of characters: their embeddings, averaged over the real
letters (padding masked out), go through a tanh layer that guesses the last letter.
"""
import math
import torch
import torch.nn.functional as F

DATA = "names.txt"
block_size = 12
vocab_size = 27
n_embd = 16
n_hidden = 64
CACHE = {}  # each split's examples, built once


def examples(text, split):
    """Each name of the split without its last letter (padded with 0), and that last letter."""
    if split not in CACHE:
        words = text.splitlines()
        order = torch.randperm(len(words), generator=torch.Generator().manual_seed(42))
        n1, n2 = int(0.8 * len(words)), int(0.9 * len(words))
        picked = {"train": order[:n1], "val": order[n1:n2], "test": order[n2:]}[split]
        stoi = {c: i + 1 for i, c in enumerate("abcdefghijklmnopqrstuvwxyz")}
        X, Y = [], []
        for i in picked.tolist():
            ids = [stoi.get(ch, 0) for ch in words[i]]
            head = ids[:-1][:block_size]
            X.append(head + [0] * (block_size - len(head)))
            Y.append(ids[-1])
        CACHE[split] = (torch.tensor(X), torch.tensor(Y))
    return CACHE[split]


def setup(seed):
    g = torch.Generator().manual_seed(seed)
    return {
        "C": torch.randn((vocab_size, n_embd), generator=g),
        "W1": torch.randn((n_embd, n_hidden), generator=g) / n_embd ** 0.5,
        "b1": torch.randn(n_hidden, generator=g) * 0.1,
        "W2": torch.randn((n_hidden, vocab_size), generator=g) * 0.1,
        "b2": torch.randn(vocab_size, generator=g) * 0.1,
    }


def batch(n, seed, text, split="train"):
    X, Y = examples(text, split)
    ix = torch.randint(0, X.shape[0], (n,), generator=torch.Generator().manual_seed(seed))
    return {"X": X[ix], "Y": Y[ix]}


def forward(X, Y, C, W1, b1, W2, b2):
    emb = C[X]
    mask = (X > 0).float()
    summed = (emb * mask[:, :, None]).sum(1)
    count = mask.sum(1, keepdim=True).clamp(min=1.0)
    pooled = summed / count
    hpre = pooled @ W1 + b1
    h = torch.tanh(hpre)
    logits = h @ W2 + b2
    loss = F.cross_entropy(logits, Y)
    return loss
