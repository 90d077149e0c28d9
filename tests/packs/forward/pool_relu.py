"""A small CNN on random 8x8 images labelled by a random teacher: conv, ReLU, max-pool, linear."""
import torch
import torch.nn.functional as F

n_chan = 4
n_classes = 3


def setup(seed):
    g = torch.Generator().manual_seed(seed)
    return {
        "K": torch.randn((n_chan, 1, 3, 3), generator=g) / 3,
        "kb": torch.randn(n_chan, generator=g) * 0.1 - 0.3,
        "W": torch.randn((n_chan * 16, n_classes), generator=g) / 8,
        "b": torch.zeros(n_classes),
    }


def batch(n, seed):
    teacher = torch.randn((64, n_classes), generator=torch.Generator().manual_seed(0))
    g = torch.Generator().manual_seed(seed)
    X = torch.randn((n, 1, 8, 8), generator=g)
    return {"X": X, "Y": (X.flatten(1) @ teacher).argmax(1)}


def forward(X, Y, K, kb, W, b):
    hpre = F.conv2d(X, K, kb, padding=1)
    h = F.relu(hpre)
    pooled = F.max_pool2d(h, 2)
    flat = pooled.flatten(1)
    logits = flat @ W + b
    loss = F.cross_entropy(logits, Y)
    return loss
