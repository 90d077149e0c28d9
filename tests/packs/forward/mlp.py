"""A two-layer classifier on points labelled by a random teacher."""
import torch
import torch.nn.functional as F

n_in = 6
n_hidden = 16
n_classes = 5


def setup(seed):
    g = torch.Generator().manual_seed(seed)
    return {
        "W1": torch.randn((n_in, n_hidden), generator=g) / n_in ** 0.5,
        "b1": torch.randn(n_hidden, generator=g) * 0.1,
        "W2": torch.randn((n_hidden, n_classes), generator=g) / n_hidden ** 0.5,
        "b2": torch.randn(n_classes, generator=g) * 0.1,
    }


def batch(n, seed):
    teacher = torch.randn((n_in, n_classes), generator=torch.Generator().manual_seed(0))
    g = torch.Generator().manual_seed(seed)
    X = torch.randn((n, n_in), generator=g)
    return {"X": X, "Y": (X @ teacher).argmax(1)}


def forward(X, Y, W1, b1, W2, b2):
    hpre = X @ W1 + b1
    h = torch.tanh(hpre)
    logits = h @ W2 + b2
    loss = F.cross_entropy(logits, Y)
    return loss
