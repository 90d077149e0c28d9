"""Skip-gram with negative sampling, on characters

Characters that appear at most two apart in a name are pairs: the dot product of the center's
input vector and the context's output vector should be large, and with five random characters
small, through log-sigmoids (word2vec's objective).
"""
import math
import torch
import torch.nn.functional as F

DATA = "names.txt"
vocab_size = 27
n_embd = 16
n_neg = 5  # negatives per pair
CACHE = {}  # each split's examples, built once


def examples(text, split):
    """Every (center, context) pair of characters at most two apart inside a name of the split."""
    if split not in CACHE:
        words = text.splitlines()
        order = torch.randperm(len(words), generator=torch.Generator().manual_seed(42))
        n1, n2 = int(0.8 * len(words)), int(0.9 * len(words))
        picked = {"train": order[:n1], "val": order[n1:n2], "test": order[n2:]}[split]
        stoi = {c: i + 1 for i, c in enumerate("abcdefghijklmnopqrstuvwxyz")}
        X, Y = [], []
        for i in picked.tolist():
            ids = [0] + [stoi.get(ch, 0) for ch in words[i]] + [0]
            for a in range(len(ids)):
                for b in range(max(0, a - 2), min(len(ids), a + 3)):
                    if a != b:
                        X.append([ids[a], ids[b]])
        CACHE[split] = (torch.tensor(X), None)
    return CACHE[split]


def setup(seed):
    g = torch.Generator().manual_seed(seed)
    return {
        "Win": torch.randn((vocab_size, n_embd), generator=g) * 0.3,
        "Wout": torch.randn((vocab_size, n_embd), generator=g) * 0.3,
    }


def batch(n, seed, text, split="train"):
    X, Y = examples(text, split)
    g = torch.Generator().manual_seed(seed)
    ix = torch.randint(0, X.shape[0], (n,), generator=g)
    negatives = torch.randint(1, vocab_size, (n, n_neg), generator=g)
    return {"X": X[ix], "Y": negatives}


def forward(X, Y, Win, Wout):
    center = Win[X[:, 0]]
    ctx = Wout[X[:, 1]]
    neg = Wout[Y]
    pos_score = (center * ctx).sum(1)
    neg_score = (neg @ center.unsqueeze(2)).squeeze(2)
    pos_ll = F.logsigmoid(pos_score)
    neg_ll = F.logsigmoid(-neg_score).sum(1)
    loss = -(pos_ll + neg_ll).mean()
    return loss
