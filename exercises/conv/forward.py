"""Backprop through convolutions: a WaveNet on names

You will write the backward pass of a small WaveNet-style character model by hand: an embedding,
three causal convolutions whose dilation doubles from layer to layer, so that the last position
of the last layer sees all eight characters of context, and a linear layer that predicts the next
character.
"""
import torch
import torch.nn.functional as F

DATA = "names.txt"
block_size = 8  # characters of context
vocab_size = 27  # the 26 letters and ".", which starts and ends a name
n_embd = 10  # dimension of each character's embedding
n_hidden = 64  # channels of each convolution
kernel_size = 2  # each convolution reads two positions, `dilation` apart
CACHE = {}  # each split's examples, built once
TRAINING = {"steps": 20000, "lr": 0.1, "lr_decay_step": 0.75, "lr_after_decay": 0.01}
EVAL_SIZE = 20000  # examples of each split the trained network is evaluated on


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

    def conv(c_out, c_in):
        fan_in = c_in * kernel_size
        return torch.randn((c_out, c_in, kernel_size), generator=g) * (5 / 3) / fan_in ** 0.5

    # Small random biases everywhere: with zero biases a wrong backward pass could slip through.
    return {
        "C": torch.randn((vocab_size, n_embd), generator=g),
        "w1": conv(n_hidden, n_embd), "b1": torch.randn(n_hidden, generator=g) * 0.1,
        "w2": conv(n_hidden, n_hidden), "b2": torch.randn(n_hidden, generator=g) * 0.1,
        "w3": conv(n_hidden, n_hidden), "b3": torch.randn(n_hidden, generator=g) * 0.1,
        "W": torch.randn((n_hidden, vocab_size), generator=g) * 0.1,
        "b": torch.randn(vocab_size, generator=g) * 0.1,
    }


def batch(n, seed, text, split="train"):
    X, Y = examples(text, split)
    ix = torch.randint(0, X.shape[0], (n,), generator=torch.Generator().manual_seed(seed))
    return {"X": X[ix], "Y": Y[ix]}


def forward(X, Y, C, w1, b1, w2, b2, w3, b3, W, b):
    emb = C[X]
    x = emb.transpose(1, 2)
    h1pre = F.conv1d(F.pad(x, (1, 0)), w1, b1)
    h1 = torch.tanh(h1pre)
    h2pre = F.conv1d(F.pad(h1, (2, 0)), w2, b2, dilation=2)
    h2 = torch.tanh(h2pre)
    h3pre = F.conv1d(F.pad(h2, (4, 0)), w3, b3, dilation=4)
    h3 = torch.tanh(h3pre)
    last = h3[:, :, -1]
    logits = last @ W + b
    loss = F.cross_entropy(logits, Y)
    return loss
