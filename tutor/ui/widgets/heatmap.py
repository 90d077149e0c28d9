"""Small heatmaps drawn with half blocks: two matrix rows per terminal row.

Used for |yours − autograd| when an answer has the right shape but wrong values, and for
the dlogits picture of exercise 2. Matrices are downsampled to fit the space available.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from rich.color import Color
from rich.console import Console, ConsoleOptions, RenderResult
from rich.segment import Segment
from rich.style import Style

Matrix = Sequence[Sequence[float]]

_COLD = (40, 44, 52)  # zero: the panel's own background, so "no error" looks empty
_HOT = (224, 108, 117)
_NEGATIVE = (97, 175, 239)
_POSITIVE = (209, 154, 102)


def downsample(values: Matrix, max_rows: int, max_cols: int, signed: bool) -> list[list[float]]:
    """Shrink by blocks, keeping each block's most extreme value so nothing wrong disappears."""
    rows, cols = len(values), max((len(r) for r in values), default=0)
    if rows == 0 or cols == 0:
        return []
    step_r = max(1, math.ceil(rows / max(1, max_rows)))
    step_c = max(1, math.ceil(cols / max(1, max_cols)))
    out: list[list[float]] = []
    for r0 in range(0, rows, step_r):
        line = []
        for c0 in range(0, cols, step_c):
            block = [
                float(values[r][c])
                for r in range(r0, min(r0 + step_r, rows))
                for c in range(c0, min(c0 + step_c, len(values[r])))
            ]
            block = [v for v in block if math.isfinite(v)] or [0.0]
            line.append(max(block, key=abs) if signed else max(abs(v) for v in block))
        out.append(line)
    return out


def _mix(a: tuple[int, int, int], b: tuple[int, int, int], t: float) -> Color:
    t = min(1.0, max(0.0, t))
    return Color.from_rgb(*(round(x + (y - x) * t) for x, y in zip(a, b, strict=True)))


class Heatmap:
    """A rich renderable. `signed` maps negative to blue and positive to orange."""

    def __init__(self, values: Matrix, *, signed: bool = False, max_rows: int = 16) -> None:
        self.values = values
        self.signed = signed
        self.max_rows = max_rows  # matrix rows, i.e. twice the terminal rows

    def _color(self, v: float, scale: float) -> Color:
        if scale <= 0 or v == 0:
            return Color.from_rgb(*_COLD)
        # sqrt keeps small entries visible next to a few large ones.
        t = math.sqrt(min(1.0, abs(v) / scale))
        if not self.signed:
            return _mix(_COLD, _HOT, 0.15 + 0.85 * t)
        return _mix(_COLD, _NEGATIVE if v < 0 else _POSITIVE, 0.15 + 0.85 * t)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        grid = downsample(self.values, self.max_rows, options.max_width, self.signed)
        cols = max((len(row) for row in grid), default=1)
        # Up to three cells per value when there is room: a 27-wide matrix is easier to read.
        cell = max(1, min(3, options.max_width // max(cols, 1)))
        scale = max((abs(v) for row in grid for v in row), default=0.0)
        for top in range(0, len(grid), 2):
            upper = grid[top]
            lower = grid[top + 1] if top + 1 < len(grid) else None
            for c, value in enumerate(upper):
                bg = self._color(lower[c], scale) if lower is not None and c < len(lower) else None
                yield Segment("▀" * cell, Style(color=self._color(value, scale), bgcolor=bg))
            yield Segment.line()
