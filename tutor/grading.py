"""Grading one gradient: shape first, then the notebook's exact / approximate / maxdiff.

`exact`, `approximate` and `maxdiff` are measured against autograd's float32 gradient, as the
notebook's `cmp` does. Acceptance is decided against a float64 reference instead: an answer passes
when it is as close to the true gradient as autograd's own float32 result is (with headroom), so a
correct formula is never refused because float32 rounded it differently.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

Tensor = torch.Tensor

RTOL, ATOL = 1e-5, 1e-8  # torch.allclose defaults, as in cmp
ROUNDING_HEADROOM = 16.0  # how many times autograd's own float32 error an answer may have
RELATIVE_FLOOR = 1e-6  # errors below this fraction of the gradient's size are rounding


@dataclass
class Grade:
    tensor: str
    grad: str
    expected_shape: list[int]
    shape: list[int] | None = None
    exact: bool = False
    approximate: bool = False
    maxdiff: float | None = None
    accepted: bool = False
    verdict: str = "missing"  # exact | approximate | wrong | shape | missing
    message: str = ""
    diagnosis: dict | None = None
    partial: bool = False
    heatmap: list[list[float]] | None = None

    def to_dict(self) -> dict:
        return {
            "tensor": self.tensor,
            "grad": self.grad,
            "shape": self.shape,
            "expected_shape": self.expected_shape,
            "exact": self.exact,
            "approximate": self.approximate,
            "maxdiff": self.maxdiff,
            "verdict": self.verdict,
            "diagnosis": self.diagnosis,
            "message": self.message,
            "partial": self.partial,
            "heatmap": self.heatmap,
        }



def grade(tensor: str, value, ref32: Tensor, ref64: Tensor, partial: bool = False) -> Grade:
    """Compare a learner's gradient with autograd's; no diagnosis yet, only the facts."""
    g = Grade(tensor, f"d{tensor}", list(ref32.shape), partial=partial)
    if value is None:
        g.message = f"your code does not define d{tensor}"
        return g
    if value is Ellipsis:
        g.message = f"d{tensor} is still `...`: replace it with your expression"
        return g
    if not isinstance(value, Tensor):
        g.message = (
            f"d{tensor} is a {type(value).__name__}, but it must be a tensor of shape "
            f"{list(ref32.shape)} like {tensor}"
        )
        return g
    g.shape = list(value.shape)
    if value.shape != ref32.shape:
        g.verdict = "shape"
        return g
    if not value.is_floating_point():
        value = value.to(ref32.dtype)
    value = value.to(ref32.device)
    g.exact = bool(torch.equal(value.to(ref32.dtype), ref32))
    g.approximate = bool(torch.allclose(value.to(ref32.dtype), ref32, rtol=RTOL, atol=ATOL))
    g.maxdiff = float((value.to(ref32.dtype) - ref32).abs().max().item()) if value.numel() else 0.0
    ours = value.detach().to("cpu", torch.float64)
    if not torch.isfinite(ours).all():
        g.verdict = "wrong"
        return g
    g.accepted = g.exact or accepts(ours, ref32, ref64)
    g.verdict = "exact" if g.exact else "approximate" if g.accepted else "wrong"
    return g


def accepts(ours64: Tensor, ref32: Tensor, ref64: Tensor) -> bool:
    """Is this answer as accurate as autograd's own float32 gradient, give or take rounding?"""
    if ours64.numel() == 0:
        return True
    if torch.allclose(ours64, ref64, rtol=RTOL, atol=ATOL):
        return True
    autograd_error = float((ref32.detach().to("cpu", torch.float64) - ref64).abs().max())
    scale = float(ref64.abs().max())
    tolerance = max(ROUNDING_HEADROOM * autograd_error, RELATIVE_FLOOR * scale)
    return float((ours64 - ref64).abs().max()) <= tolerance


def rounding_note(g: Grade) -> str:
    if g.verdict == "exact":
        return "bit for bit what autograd computed"
    if g.verdict == "approximate":
        return (
            "correct: it differs from autograd only by float32 rounding "
            f"(maxdiff {g.maxdiff:.1e}; both are that close to the float64 gradient)"
        )
    return ""


def heatmap(diff: Tensor, max_rows: int = 8, max_cols: int = 32) -> list[list[float]]:
    """|yours - autograd| pooled to at most max_rows x max_cols cells (max within each cell)."""
    d = diff.detach().abs().to("cpu", torch.float32)
    if d.dim() == 0:
        d = d.view(1, 1)
    elif d.dim() == 1:
        d = d.view(1, -1)
    elif d.dim() > 2:
        d = d.reshape(d.shape[0], -1)
    rows, cols = d.shape
    out_r, out_c = min(rows, max_rows), min(cols, max_cols)
    pooled = torch.nn.functional.adaptive_max_pool2d(d[None, None], (out_r, out_c))[0, 0]
    return [[float(f"{float(x):.3g}") for x in row] for row in pooled]
