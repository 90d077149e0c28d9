"""A layernorm classifier, its normalisation written out."""
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
        "gamma": 1.0 + 0.1 * torch.randn(n_hidden, generator=g),
        "beta": 0.1 * torch.randn(n_hidden, generator=g),
        "W2": torch.randn((n_hidden, n_classes), generator=g) / n_hidden ** 0.5,
        "b2": torch.randn(n_classes, generator=g) * 0.1,
    }


def batch(n, seed):
    teacher = torch.randn((n_in, n_classes), generator=torch.Generator().manual_seed(0))
    g = torch.Generator().manual_seed(seed)
    X = torch.randn((n, n_in), generator=g)
    return {"X": X, "Y": (X @ teacher).argmax(1)}


def forward(X, Y, W1, b1, gamma, beta, W2, b2):
    hpre = X @ W1 + b1
    mu = hpre.mean(1, keepdim=True)
    xc = hpre - mu
    var = (xc**2).mean(1, keepdim=True)
    rstd = (var + 1e-5)**-0.5
    xn = xc * rstd
    ln = xn * gamma + beta
    h = torch.relu(ln)
    logits = h @ W2 + b2
    logprobs = F.log_softmax(logits, 1)
    loss = -logprobs[range(n), Y].mean()
    return loss
