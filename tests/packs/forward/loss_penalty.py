"""A linear classifier with a weight penalty on the loss line."""
import torch
import torch.nn.functional as F

n_in = 6
n_classes = 5
reg = 0.01


def setup(seed):
    g = torch.Generator().manual_seed(seed)
    return {"W": torch.randn((n_in, n_classes), generator=g) / n_in ** 0.5,
            "b": torch.randn(n_classes, generator=g) * 0.1}


def batch(n, seed):
    teacher = torch.randn((n_in, n_classes), generator=torch.Generator().manual_seed(0))
    g = torch.Generator().manual_seed(seed)
    X = torch.randn((n, n_in), generator=g)
    return {"X": X, "Y": (X @ teacher).argmax(1)}


def forward(X, Y, W, b):
    logits = X @ W + b
    loss = F.cross_entropy(logits, Y) + reg * (W * W).sum()
    return loss, logits
