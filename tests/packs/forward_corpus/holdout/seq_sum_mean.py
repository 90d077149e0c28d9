"""Next character at every position: a loss summed over positions, averaged over names

Each name is eight positions; at each, a tanh layer on the current character's embedding (looked
up with `index_select`) predicts the next one. The loss is written out: the log-probabilities of the
targets, summed over each name's positions and averaged over the batch.
"""
import math
import torch
import torch.nn.functional as F

DATA = "names.txt"
block_size = 8
vocab_size = 27
n_embd = 10
n_hidden = 32
CACHE = {}  # each split's examples, built once


def examples(text, split):
    """Each name of the split as block_size positions: "." then its letters in, the next letter out."""
    if split not in CACHE:
        words = text.splitlines()
        order = torch.randperm(len(words), generator=torch.Generator().manual_seed(42))
        n1, n2 = int(0.8 * len(words)), int(0.9 * len(words))
        picked = {"train": order[:n1], "val": order[n1:n2], "test": order[n2:]}[split]
        stoi = {c: i + 1 for i, c in enumerate("abcdefghijklmnopqrstuvwxyz")}
        X, Y = [], []
        for i in picked.tolist():
            ids = [stoi.get(ch, 0) for ch in words[i]][: block_size - 1] + [0]
            inp = ([0] + ids)[:block_size]
            X.append(inp + [0] * (block_size - len(inp)))
            Y.append(ids + [0] * (block_size - len(ids)))
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
    flatemb = C.index_select(0, X.reshape(-1))
    emb = flatemb.view(n, block_size, n_embd)
    hpre = emb @ W1 + b1
    h = torch.tanh(hpre)
    logits = h @ W2 + b2
    logp = F.log_softmax(logits, dim=-1)
    oh = F.one_hot(Y, vocab_size).float()
    tok = (logp * oh).sum(2)
    loss = -tok.sum(1).mean()
    return loss
