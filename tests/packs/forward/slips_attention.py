"""Backprop through self-attention: one causal head on names

You will write the backward pass of a tiny character model built around a single causal
self-attention head: token and position embeddings, query/key/value maps, scaled dot-product
scores, a causal mask, a softmax over each row, the weighted sum of values and a linear layer that
predicts the next character at every position of the context.
"""
import torch
import torch.nn.functional as F

DATA = "names.txt"
block_size = 8  # characters of context
vocab_size = 27  # the 26 letters and ".", which starts and ends a name
n_embd = 16  # dimension of each character's embedding
head_size = 16  # dimension of the queries, keys and values
CACHE = {}  # each split's examples, built once
TRAINING = {"steps": 20000, "lr": 0.1, "lr_decay_step": 0.75, "lr_after_decay": 0.01}
EVAL_SIZE = 20000  # examples of each split the trained network is evaluated on


def examples(text, split):
    """Every (context, next characters) of every name in the split: the target of each position
    is the character that follows it."""
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
                Y.append(context[1:] + [ix])
                context = context[1:] + [ix]
        CACHE[split] = (torch.tensor(X), torch.tensor(Y))
    return CACHE[split]


def setup(seed):
    g = torch.Generator().manual_seed(seed)
    return {
        "C": torch.randn((vocab_size, n_embd), generator=g),
        "Cpos": torch.randn((block_size, n_embd), generator=g) * 0.5,
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


def forward(X, Y, C, Cpos, Wq, Wk, Wv, W, b):
    tok = C[X]
    x = tok + Cpos
    q = x @ Wq
    k = x @ Wk
    v = x @ Wv
    scores = q @ k.transpose(-2, -1) * head_size ** -0.5
    masked = scores.masked_fill(torch.tril(torch.ones(block_size, block_size)) == 0, float("-inf"))
    att = F.softmax(masked, dim=-1)
    out = att @ v
    logits = out @ W + b
    loss = F.cross_entropy(logits.view(-1, vocab_size), Y.view(-1))
    return loss
