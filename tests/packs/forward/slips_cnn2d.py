"""Backprop through a 2-D convolution and max-pooling: a small CNN on names

You will write the backward pass of a small convolutional character model: the eight characters
of context are embedded and stacked into an 8x8 one-channel image, a 3x3 convolution with zero
padding makes 8 feature maps, a ReLU and a 2x2 max-pool shrink them, and a linear layer reads the
flattened maps to predict the next character.
"""
import torch
import torch.nn.functional as F

DATA = "names.txt"
block_size = 8  # characters of context: the image's height
vocab_size = 27  # the 26 letters and ".", which starts and ends a name
n_embd = 8  # dimension of each character's embedding: the image's width
n_maps = 8  # feature maps of the convolution
kernel_size = 3  # the convolution's kernel is 3x3, zero-padded by 1 on every side
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
    fan_in = kernel_size * kernel_size
    n_flat = n_maps * (block_size // 2) * (n_embd // 2)
    # Small random biases everywhere: with zero biases a wrong backward pass could slip through.
    return {
        "C": torch.randn((vocab_size, n_embd), generator=g),
        "K": torch.randn((n_maps, 1, kernel_size, kernel_size), generator=g) * 2 ** 0.5 / fan_in ** 0.5,
        "kb": torch.randn(n_maps, generator=g) * 0.1,
        "W": torch.randn((n_flat, vocab_size), generator=g) * 0.1,
        "b": torch.randn(vocab_size, generator=g) * 0.1,
    }


def batch(n, seed, text, split="train"):
    X, Y = examples(text, split)
    ix = torch.randint(0, X.shape[0], (n,), generator=torch.Generator().manual_seed(seed))
    return {"X": X[ix], "Y": Y[ix]}


def forward(X, Y, C, K, kb, W, b):
    emb = C[X]
    img = emb.unsqueeze(1)
    hpre = F.conv2d(img, K, kb, padding=1)
    h = torch.relu(hpre)
    pooled = F.max_pool2d(h, 2)
    flat = pooled.flatten(1)
    logits = flat @ W + b
    loss = F.cross_entropy(logits, Y)
    return loss
