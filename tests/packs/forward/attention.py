"""An attention block: one head, causal, with a residual and a layernorm."""
import torch
import torch.nn.functional as F

T = 6
C = 8
vocab_size = 11
FIXED = ["causal"]  # a tensor of setup's that is no parameter: nothing learns it


def setup(seed):
    g = torch.Generator().manual_seed(seed)
    return {
        "wte": torch.randn((vocab_size, C), generator=g) * 0.5,
        "Wq": torch.randn((C, C), generator=g) / C ** 0.5,
        "Wk": torch.randn((C, C), generator=g) / C ** 0.5,
        "Wv": torch.randn((C, C), generator=g) / C ** 0.5,
        "lnw": 1 + 0.1 * torch.randn(C, generator=g),
        "lnb": 0.1 * torch.randn(C, generator=g),
        "Wout": torch.randn((C, vocab_size), generator=g) / C ** 0.5,
        "causal": torch.ones(T, T).tril(),
    }


def batch(n, seed):
    g = torch.Generator().manual_seed(seed)
    X = torch.randint(0, vocab_size, (n, T), generator=g)
    Y = (X.sum(1) % vocab_size)
    return {"X": X, "Y": Y}


def forward(X, Y, wte, Wq, Wk, Wv, lnw, lnb, Wout, causal):
    x = wte[X]
    q = x @ Wq
    k = x @ Wk
    v = x @ Wv
    scores = q @ k.transpose(-2, -1) * C**-0.5
    masked = scores.masked_fill(causal == 0, float("-inf"))
    att = F.softmax(masked, dim=-1)
    y = att @ v
    r = x + y
    ln = F.layer_norm(r, (C,), lnw, lnb)
    pooled = ln.mean(1)
    logits = pooled @ Wout
    loss = F.cross_entropy(logits, Y)
    return loss
