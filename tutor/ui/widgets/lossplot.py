"""The loss curve of exercise 4, drawn with braille dots, with earlier runs to compare.

The run being watched (or the last one) is drawn in blue; runs chosen for comparison are
drawn under it in their own colours, on the same axes, with a legend.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from rich.console import Group, RenderableType
from rich.text import Text
from textual.widget import Widget

from tutor.ui.palette import DIM, INFO, OK, REVEAL, WARN
from tutor.values.durations import spaced

CURVE = INFO
COMPARE_COLOURS = (WARN, REVEAL, OK)
# Braille cells hold 2 x 4 dots; bit of the dot at (column, row) inside one cell.
BRAILLE_BITS = ((0x01, 0x02, 0x04, 0x40), (0x08, 0x10, 0x20, 0x80))


def braille_curve(values: list[float], slots: int, width: int, height: int,
                  lo: float, hi: float) -> list[list[int]]:
    """Dots of a line through `values` on a width x height grid of braille cells.

    Value i sits at x = i / slots of the width, so a live run grows from left to right; between
    neighbouring points the column is filled vertically, so the line stays unbroken.
    """
    cells = [[0] * width for _ in range(height)]
    dots_x, dots_y = 2 * width, 4 * height
    span = hi - lo or 1.0
    previous: int | None = None
    for i, v in enumerate(values):
        x = min(dots_x - 1, int(i * dots_x / max(1, slots)))
        y = round((hi - v) / span * (dots_y - 1))
        y = max(0, min(dots_y - 1, y))
        top, bottom = (y, y) if previous is None else (min(y, previous), max(y, previous))
        for yy in range(top, bottom + 1):
            cells[yy // 4][x // 2] |= BRAILLE_BITS[x % 2][yy % 4]
        previous = y
    return cells


@dataclass
class Series:
    """One run's curve: mean log10(loss) per `every` steps, out of `steps` planned."""

    label: str
    every: int
    steps: int
    colour: str
    points: list[float] = field(default_factory=list)


class LossPlot(Widget):
    """log10(loss) against the step, as the lecture plots it."""

    DEFAULT_CSS = """
    LossPlot { height: 12; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.live = Series("this run", 1, 1, CURVE)
        self.others: list[Series] = []

    @property
    def points(self) -> list[float]:
        return self.live.points

    def reset(self, steps: int, every: int, label: str = "this run") -> None:
        self.live = Series(label, max(1, every), max(1, steps), CURVE)
        self.refresh()

    def extend(self, points: list[float], every: int | None = None) -> None:
        self.live.points.extend(p for p in points if math.isfinite(p))
        if every:
            self.live.every = every
        self.refresh()

    def compare(self, others: list[Series]) -> None:
        """Earlier runs to draw under the live one (an empty list draws it alone)."""
        self.others = list(others)
        self.refresh()

    def render(self) -> RenderableType:
        width, height = self.size.width, self.size.height
        label_w = 6
        shown = [s for s in [*self.others, self.live] if s.points]
        legend = len(self.others) > 0
        plot_w = max(4, width - label_w - 1)
        plot_h = max(2, height - 2 - (1 if legend else 0))
        title = Text.styled("log10(loss)", DIM)
        if not shown:
            return Group(title, Text.styled("the curve appears once training starts", DIM))
        every_value = [v for s in shown for v in s.points]
        lo, hi = min(every_value), max(every_value)
        pad = max(0.01, (hi - lo) * 0.05)
        lo, hi = lo - pad, hi + pad
        x_end = max(s.steps for s in [*self.others, self.live] if s.points or s is self.live)
        dots = [[0] * plot_w for _ in range(plot_h)]
        colour = [[CURVE] * plot_w for _ in range(plot_h)]
        for s in shown:  # the live run last, so it is on top where curves cross
            slots = math.ceil(x_end / s.every)
            cells = braille_curve(s.points, slots, plot_w, plot_h, lo, hi)
            for r in range(plot_h):
                for c in range(plot_w):
                    if cells[r][c]:
                        dots[r][c] |= cells[r][c]
                        colour[r][c] = s.colour
        lines = [title]
        for row in range(plot_h):
            value = hi - (hi - lo) * row / max(1, plot_h - 1)
            label = f"{value:5.2f}" if row in (0, plot_h // 2, plot_h - 1) else ""
            line = Text.styled(f"{label:>{label_w - 1}} ┤" if label else " " * (label_w - 1) + " │",
                               DIM)
            for c in range(plot_w):
                line.append(chr(0x2800 + dots[row][c]), style=colour[row][c])
            lines.append(line)
        axis = Text.styled(" " * label_w + "0", DIM)
        end = f"{spaced(x_end)} steps"
        axis.append(" " * max(1, plot_w - 1 - len(end)) + end)
        lines.append(axis)
        if legend:
            key = Text(" " * label_w)
            for s in [self.live, *self.others]:
                key.append("━━ ", style=s.colour)
                key.append(f"{s.label}  ", style=DIM)
            lines.append(key)
        return Group(*lines)
