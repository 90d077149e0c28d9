"""Binary cross-entropy with logits: does a name end with a vowel?

The name without its last letter, embedded and flattened, through a two-layer ReLU MLP to one
logit, and PyTorch's `binary_cross_entropy_with_logits`.
"""
import math
import torch
import torch.nn.functional as F

DATA = "names.txt"
block_size = 6
vocab_size = 27
n_embd = 8
n_hidden = 32
CACHE = {}  # each split's examples, built once


def examples(text, split):
    """Each name of the split without its last letter (padded with 0), and 1.0 if it ends with a vowel."""
    if split not in CACHE:
        words = text.splitlines()
        order = torch.randperm(len(words), generator=torch.Generator().manual_seed(42))
        n1, n2 = int(0.8 * len(words)), int(0.9 * len(words))
        picked = {"train": order[:n1], "val": order[n1:n2], "test": order[n2:]}[split]
        stoi = {c: i + 1 for i, c in enumerate("abcdefghijklmnopqrstuvwxyz")}
        X, Y = [], []
        for i in picked.tolist():
            w = words[i]
            ids = [stoi.get(ch, 0) for ch in w[:-1]][:block_size]
            X.append(ids + [0] * (block_size - len(ids)))
            Y.append(1.0 if w[-1] in "aeiouy" else 0.0)
        CACHE[split] = (torch.tensor(X), torch.tensor(Y))
    return CACHE[split]


def setup(seed):
    g = torch.Generator().manual_seed(seed)
    return {
        "C": torch.randn((vocab_size, n_embd), generator=g),
        "W1": torch.randn((block_size * n_embd, n_hidden), generator=g) / (block_size * n_embd) ** 0.5,
        "b1": torch.randn(n_hidden, generator=g) * 0.1,
        "W2": torch.randn((n_hidden, n_hidden), generator=g) / n_hidden ** 0.5,
        "b2": torch.randn(n_hidden, generator=g) * 0.1,
        "W3": torch.randn((n_hidden, 1), generator=g) * 0.1,
        "b3": torch.randn(1, generator=g) * 0.1,
    }


def batch(n, seed, text, split="train"):
    X, Y = examples(text, split)
    ix = torch.randint(0, X.shape[0], (n,), generator=torch.Generator().manual_seed(seed))
    return {"X": X[ix], "Y": Y[ix]}


def forward(X, Y, C, W1, b1, W2, b2, W3, b3):
    emb = C[X]
    x = emb.view(n, -1)
    h1pre = x @ W1 + b1
    h1 = F.relu(h1pre)
    h2pre = h1 @ W2 + b2
    h2 = F.relu(h2pre)
    out = h2 @ W3 + b3
    z = out.squeeze(1)
    loss = F.binary_cross_entropy_with_logits(z, Y)
    return loss
