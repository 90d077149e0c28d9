"""A forward pass that draws random numbers (dropout): refused, with what to do instead."""
import torch
import torch.nn.functional as F

width = 4
classes = 3


def setup(seed):
    return {"W": torch.randn((width, classes), generator=torch.Generator().manual_seed(seed))}


def batch(n, seed):
    g = torch.Generator().manual_seed(seed)
    return {"X": torch.randn((n, width), generator=g),
            "Y": torch.randint(0, classes, (n,), generator=g)}


def forward(X, Y, W):
    kept = F.dropout(X, 0.5)
    logits = kept @ W
    loss = F.cross_entropy(logits, Y)
    return loss
