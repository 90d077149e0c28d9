"""A line with no rule in pack new: a running sum over the features."""
import torch
import torch.nn.functional as F

n_in = 5
n_classes = 3


def setup(seed):
    g = torch.Generator().manual_seed(seed)
    return {"W1": torch.randn((n_in, n_in), generator=g) / n_in ** 0.5,
            "W2": torch.randn((n_in, n_classes), generator=g) / n_in ** 0.5}


def batch(n, seed):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn((n, n_in), generator=g)
    return {"X": X, "Y": torch.randint(0, n_classes, (n,), generator=g)}


def forward(X, Y, W1, W2):
    h = X @ W1
    running = torch.cumsum(h, 1)
    logits = running @ W2
    loss = F.cross_entropy(logits, Y)
    return loss
