"""makemore's MLP, as the lecture writes it

pack new cuts it into steps as exercises/makemore is cut by hand.
"""
import torch

vocab_size = 27
n_embd = 10
n_hidden = 64
block_size = 3


def setup(seed):
    g = torch.Generator().manual_seed(seed)
    return {
        "C": torch.randn((vocab_size, n_embd), generator=g),
        "W1": torch.randn((n_embd * block_size, n_hidden), generator=g) * (5 / 3)
        / (n_embd * block_size) ** 0.5,
        "b1": torch.randn(n_hidden, generator=g) * 0.1,
        "W2": torch.randn((n_hidden, vocab_size), generator=g) * 0.1,
        "b2": torch.randn(vocab_size, generator=g) * 0.1,
        "bngain": torch.randn((1, n_hidden), generator=g) * 0.1 + 1.0,
        "bnbias": torch.randn((1, n_hidden), generator=g) * 0.1,
    }


def batch(n, seed):
    g = torch.Generator().manual_seed(seed)
    X = torch.randint(0, vocab_size, (n, block_size), generator=g)
    return {"Xb": X, "Yb": torch.randint(0, vocab_size, (n,), generator=g)}


def forward(Xb, Yb, C, W1, b1, W2, b2, bngain, bnbias):
    emb = C[Xb]
    embcat = emb.view(emb.shape[0], -1)
    hprebn = embcat @ W1 + b1
    bnmeani = 1/n*hprebn.sum(0, keepdim=True)
    bndiff = hprebn - bnmeani
    bndiff2 = bndiff**2
    bnvar = 1/(n-1)*(bndiff2).sum(0, keepdim=True)
    bnvar_inv = (bnvar + 1e-5)**-0.5
    bnraw = bndiff * bnvar_inv
    hpreact = bngain * bnraw + bnbias
    h = torch.tanh(hpreact)
    logits = h @ W2 + b2
    logit_maxes = logits.max(1, keepdim=True).values
    norm_logits = logits - logit_maxes
    counts = norm_logits.exp()
    counts_sum = counts.sum(1, keepdims=True)
    counts_sum_inv = counts_sum**-1
    probs = counts * counts_sum_inv
    logprobs = probs.log()
    loss = -logprobs[range(n), Yb].mean()
    return loss
