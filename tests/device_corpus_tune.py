"""Answers that make tensors without naming a device, the half the device rule was tuned on.

On a GPU such a tensor lands on the CPU unless the tutor makes the lesson's device PyTorch's
default inside the learner's code (tutor/devices.py). `device_corpus_holdout.py` is the other
half, written apart from the code and never tuned on; benchmarks/device_parity.py reports both.

RIGHT: name -> (lesson, step, code), each must pass; WRONG: the same, each must be refused.
"""

from __future__ import annotations

RIGHT: dict[str, tuple[str, str, str]] = {
    # a column of ones summing the batch away
    "ones-matmul-db2": ("makemore", "atomic/h",
                        "dh = dlogits @ W2.T\ndW2 = h.T @ dlogits\n"
                        "db2 = (torch.ones(1, n) @ dlogits).view(-1)\n"),
    # the labels picked by a mask made from arange
    "arange-mask-where": ("makemore", "atomic/logprobs",
                          "hit = torch.arange(logprobs.shape[1])[None, :] == Yb[:, None]\n"
                          "dlogprobs = torch.where(hit, torch.full_like(logprobs, -1.0 / n),"
                          " torch.zeros(n, logprobs.shape[1]))\n"),
    # softmax's Jacobian written out with eye, one row at a time
    "eye-jacobian": ("makemore", "fused/cross_entropy",
                     "p = F.softmax(logits, 1)\n"
                     "dlogits = torch.zeros(n, p.shape[1])\n"
                     "for r in range(n):\n"
                     "    J = torch.diag(p[r]) - p[r][:, None] * p[r][None, :]\n"
                     "    g = torch.zeros(p.shape[1])\n"
                     "    g[Yb[r]] = -1.0 / (n * p[r, Yb[r]])\n"
                     "    dlogits[r] = J @ g\n"),
    # scatter_add with a source from full
    "full-scatter": ("makemore", "atomic/logprobs",
                     "dlogprobs = torch.zeros(n, logprobs.shape[1]).scatter_add(1, Yb[:, None], "
                     "torch.full((n, 1), -1.0 / n))\n"),
    # a one-hot of the labels
    "one-hot-zeros": ("makemore", "fused/cross_entropy",
                      "y = torch.zeros(n, logits.shape[1])\ny[torch.arange(n), Yb] = 1.0\n"
                      "dlogits = (F.softmax(logits, 1) - y) / n\n"),
    # the embedding's gradient by index_add into zeros
    "zeros-index-add": ("makemore", "atomic/C",
                        "dC = torch.zeros(C.shape).index_add(0, Xb.view(-1), "
                        "demb.view(-1, C.shape[1]))\n"),
    # the causal mask made again from ones
    "tril-ones-mask": ("gpt", "block/preatt",
                       "T = preatt.shape[-1]\nkeep = torch.tril(torch.ones(T, T)).bool()\n"
                       "dpreatt = torch.where(keep, dpreatt_masked, torch.tensor(0.0))\n"),
    # a float literal tensor as a scale
    "tensor-scale": ("gpt", "block/qk",
                     "s = torch.tensor(head_size) ** -0.5\n"
                     "dq = dpreatt @ k * s\ndk = dpreatt.transpose(-2, -1) @ q * s\n"),
    # sums over the batch and time with a vector of ones
    "ones-einsum-bias": ("lstm", "step/hs",
                         "dhs = dlogits @ Wy.T\n"
                         "dWy = torch.einsum('btv,bth->hv', dlogits, hs)\n"
                         "dby = torch.einsum('btv,b->v', dlogits, torch.ones(hs.shape[0]))\n"),
}

WRONG: dict[str, tuple[str, str, str]] = {
    # the mean's 1/n forgotten
    "arange-mask-no-mean": ("makemore", "atomic/logprobs",
                            "hit = torch.arange(logprobs.shape[1])[None, :] == Yb[:, None]\n"
                            "dlogprobs = torch.where(hit, -torch.ones(n, logprobs.shape[1]), "
                            "torch.zeros(n, logprobs.shape[1]))\n"),
    # the one-hot added instead of taken away
    "one-hot-sign": ("makemore", "fused/cross_entropy",
                     "y = torch.zeros(n, logits.shape[1])\ny[torch.arange(n), Yb] = 1.0\n"
                     "dlogits = (F.softmax(logits, 1) + y) / n\n"),
    # the mask kept the future
    "triu-mask": ("gpt", "block/preatt",
                  "T = preatt.shape[-1]\nkeep = torch.triu(torch.ones(T, T)).bool()\n"
                  "dpreatt = torch.where(keep, dpreatt_masked, torch.tensor(0.0))\n"),
    # summed over the wrong side
    "ones-matmul-wrong-side": ("makemore", "atomic/h",
                               "dh = dlogits @ W2.T\ndW2 = h.T @ dlogits\n"
                               "db2 = (dlogits @ torch.ones(dlogits.shape[1], 1)).view(-1)[:27]\n"),
}
