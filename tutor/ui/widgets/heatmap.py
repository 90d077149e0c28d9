"""Small heatmaps drawn with half blocks: two matrix rows per terminal row.

Used for |yours − autograd| when an answer has the right shape but wrong values, and for
the dlogits picture of exercise 2. Matrices are pooled to fit the space available, so the
picture says how: row and column numbers of the original tensor on the axes, how many of its
entries each cell stands for, and what the colours mean.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from rich.color import Color
from rich.console import Console, ConsoleOptions, RenderResult
from rich.segment import Segment
from rich.style import Style
from rich.text import Text

from tutor.ui.palette import (
    HEAT_AXIS,
    HEAT_FAR,
    HEAT_NEGATIVE,
    HEAT_POSITIVE,
    HEAT_ZERO,
    style_of,
)

Matrix = Sequence[Sequence[float]]

# The ramps' colours are the palette's (so the app theme's): zero is the theme's surface, just
# off the panel's ground, so "no error" looks empty while the grid's extent still shows;
# `tutor.heat.negative` and `.positive` are the signed ramp's ends, for legends that show them.
AXIS = HEAT_AXIS
LEGEND_STEPS = 6
RGB = tuple[int, int, int]


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


def _rgb(name: str, console: Console) -> RGB:
    color = style_of(name, console).color
    triplet = color.get_truecolor() if color is not None else None
    return (triplet.red, triplet.green, triplet.blue) if triplet else (0, 0, 0)


def _mix(a: RGB, b: RGB, t: float) -> Color:
    t = min(1.0, max(0.0, t))
    return Color.from_rgb(*(round(x + (y - x) * t) for x, y in zip(a, b, strict=True)))


def _per_cell(original: int, shown: int) -> str:
    """How many original rows (or columns) one drawn cell stands for."""
    if shown <= 0 or original <= shown:
        return "1"
    if original % shown == 0:
        return str(original // shown)
    return f"≈{original / shown:.1f}"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


class Heatmap:
    """A rich renderable. `signed` maps negative and positive values to two ramps of their own.

    `shape` is the (rows, columns) of the tensor the values were pooled from, when they were
    pooled before they got here (the engine sends at most 8 x 32 cells); it labels the axes.
    """

    def __init__(
        self,
        values: Matrix,
        *,
        signed: bool = False,
        max_rows: int = 16,
        shape: Sequence[int] | None = None,
    ) -> None:
        self.values = values
        self.signed = signed
        self.max_rows = max_rows  # matrix rows, i.e. twice the terminal rows
        rows, cols = len(values), max((len(r) for r in values), default=0)
        self.folded = 0  # leading axes the engine folded away (their largest entry kept)
        if shape:
            dims = list(shape)
            # A vector is one row; beyond two axes the engine keeps the last two.
            rows, cols = (1, dims[0]) if len(dims) == 1 else (dims[-2], dims[-1])
            self.folded = max(0, len(dims) - 2)
        self.rows, self.cols = rows, cols
        self._ends: tuple[RGB, RGB, RGB, RGB] = ((0, 0, 0),) * 4  # read from the console

    def _color(self, v: float, scale: float) -> Color:
        zero, far, negative, positive = self._ends
        if scale <= 0 or v == 0:
            return Color.from_rgb(*zero)
        # sqrt keeps small entries visible next to a few large ones.
        t = math.sqrt(min(1.0, abs(v) / scale))
        if not self.signed:
            return _mix(zero, far, 0.15 + 0.85 * t)
        return _mix(zero, negative if v < 0 else positive, 0.15 + 0.85 * t)

    def _legend(self, scale: float) -> Text:
        text = Text.styled("colour: ", AXIS)
        swatch = [scale * (k / (LEGEND_STEPS - 1)) ** 2 for k in range(LEGEND_STEPS)]
        if self.signed:
            text.append(f"−{scale:.1e} ", style=AXIS)
            for v in reversed(swatch[1:]):
                text.append("█", style=Style(color=self._color(-v, scale)))
            text.append(" 0 ", style=AXIS)
            for v in swatch[1:]:
                text.append("█", style=Style(color=self._color(v, scale)))
            text.append(f" +{scale:.1e}", style=AXIS)
            return text
        text.append("0 ", style=AXIS)
        for v in swatch:
            text.append("█", style=Style(color=self._color(v, scale)))
        text.append(f" {scale:.1e} (largest)", style=AXIS)
        return text

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        self._ends = tuple(_rgb(name, console)  # type: ignore[assignment]
                           for name in (HEAT_ZERO, HEAT_FAR, HEAT_NEGATIVE, HEAT_POSITIVE))
        axis = style_of(AXIS, console)  # a Segment takes a style, not a style's name
        gutter = max(4, len(str(max(self.rows - 1, 0))) + 1)  # room for "row" over the numbers
        room = max(4, options.max_width - gutter)
        grid = downsample(self.values, self.max_rows, room, self.signed)
        if not grid:
            return
        cols = max(len(row) for row in grid)
        # Up to three cells per value when there is room: a 27-wide matrix is easier to read.
        cell = max(1, min(3, room // max(cols, 1)))
        scale = max((abs(v) for row in grid for v in row), default=0.0)
        drawn = cols * cell
        last = str(max(self.cols - 1, 0))
        header = Text.styled("row".ljust(gutter) + "0", AXIS)
        if drawn > len(last) + 1:
            header.append(" " * (drawn - 1 - len(last)) + last)
        if header.cell_len + 9 <= options.max_width:  # the axis name only where it fits
            header.append(" ← column", style=AXIS)
        yield header
        for top in range(0, len(grid), 2):
            first_row = top * self.rows // len(grid)
            yield Segment(f"{first_row:>{gutter - 1}} ", axis)
            upper = grid[top]
            lower = grid[top + 1] if top + 1 < len(grid) else None
            for c, value in enumerate(upper):
                bg = self._color(lower[c], scale) if lower is not None and c < len(lower) else None
                yield Segment("▀" * cell, Style(color=self._color(value, scale), bgcolor=bg))
            yield Segment.line()
        yield Text.styled(self._how_pooled(len(grid), cols), AXIS)
        yield self._legend(scale)

    def _how_pooled(self, shown_rows: int, shown_cols: int) -> str:
        r, c = _per_cell(self.rows, shown_rows), _per_cell(self.cols, shown_cols)
        size = f"{_plural(self.rows, 'row')} × {_plural(self.cols, 'column')}: "
        if self.folded:
            lead = "dim 0" if self.folded == 1 else f"dims 0–{self.folded - 1}"
            size = (f"the last two dims, {_plural(self.rows, 'row')} × "
                    f"{_plural(self.cols, 'column')}, largest over {lead}: ")
        per_line = " (two cell rows per line)" if shown_rows > 1 else ""
        if r == c == "1":
            return size + "one entry per cell" + per_line
        what = "the largest |value|" if not self.signed else "the most extreme value"
        return size + f"each cell is {what} of {r} × {c} entries" + per_line
