"""A gradient's size at each time step, the learner's next to autograd's, as bars in text.

The figure of a function step with a time axis (`CheckResult.figure` of kind "time",
tutor/core/timesteps.py): one pair of bars per step, time running left to right, the learner's
bar first; a step where the two differ is marked under its pair. Sizes that span more than a
factor of 100 (a gradient vanishing or exploding over the steps) are drawn on a log scale, said
on the axis, so that the small ones stay visible.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.text import Text

from tutor.ui.palette import BAD, DIM, INFO, OK

EIGHTHS = " ▁▂▃▄▅▆▇█"
LOG_SPREAD = 100.0  # beyond this ratio of the largest to the smallest size, a log scale


def heights(values: Sequence[float], rows: int) -> tuple[list[int], bool]:
    """Each value's bar height in eighths of a row (0 to 8 * rows), and whether the scale is
    logarithmic. A size of zero, or one that is not finite, draws no bar."""
    finite = [v for v in values if math.isfinite(v) and v > 0]
    if not finite:
        return [0] * len(values), False
    hi, lo = max(finite), min(finite)
    log = hi / lo > LOG_SPREAD
    top = 8 * rows
    out = []
    for v in values:
        if not (math.isfinite(v) and v > 0):
            out.append(0)
        elif log:
            # The smallest size keeps one eighth, so it is still seen.
            out.append(1 + round((math.log10(v) - math.log10(lo))
                                 / (math.log10(hi) - math.log10(lo)) * (top - 1)))
        else:
            out.append(max(1, round(v / hi * top)))
    return out, log


class TimeBars:
    """A rich renderable of the per-step figure: `yours` and `autograd` per step, `wrong`
    marking the steps where they differ."""

    def __init__(self, yours: Sequence[float | None], autograd: Sequence[float | None],
                 wrong: Sequence[bool] = (), *, rows: int = 6, label: str = "size") -> None:
        # None: a step with nothing to draw (the learner's call failed there)
        self.yours = [math.nan if v is None else float(v) for v in yours]
        self.autograd = [math.nan if v is None else float(v) for v in autograd]
        self.wrong = list(wrong) or [False] * len(self.yours)
        self.rows = rows
        self.label = label

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        steps = min(len(self.yours), len(self.autograd))
        if steps == 0:
            return
        gutter = 9
        # Three columns a step (two bars and a gap) where they fit, else two (no gap).
        width = 3 if gutter + 3 * steps <= options.max_width else 2
        drawn = self.yours[:steps] + self.autograd[:steps]
        bars, log = heights(drawn, self.rows)
        mine, theirs = bars[:steps], bars[steps:]
        finite = [v for v in drawn if math.isfinite(v)]
        hi = max(finite, default=0.0)
        lo = min((v for v in finite if v > 0), default=0.0)
        for row in range(self.rows, 0, -1):
            axis = (f"{hi:.1e}" if row == self.rows else
                    f"{lo:.1e}" if row == 1 and log else "")
            line = Text(f"{axis:>{gutter - 1}}│", style=DIM)
            for t in range(steps):
                for h, style in ((mine[t], BAD if self.wrong[t] else INFO), (theirs[t], OK)):
                    fill = max(0, min(8, h - 8 * (row - 1)))
                    line.append(EIGHTHS[fill], style=style)
                if width == 3:
                    line.append(" ")
            yield line
        marks = Text(" " * (gutter - 1) + "└", style=DIM)
        labels = Text(" " * gutter, style=DIM)
        for t in range(steps):
            marks.append(("✗" if self.wrong[t] else "─").ljust(width, "─"),
                         style=BAD if self.wrong[t] else DIM)
        every = max(1, math.ceil(3 / width))  # a label needs up to three columns
        text = ""
        for t in range(0, steps, every):
            text = text.ljust(t * width) + str(t)
        labels.append(text + "  ← t", style=DIM)
        yield marks
        yield labels
        legend = Text.assemble(
            (" " * gutter, ""), ("█", INFO), (" yours  ", DIM), ("█", OK), (" autograd", DIM))
        if any(self.wrong[:steps]):
            legend.append("  ", style=DIM)
            legend.append("✗", style=BAD)
            legend.append(" where they differ", style=DIM)
        scale = f"({self.label}{', log scale' if log else ''})"
        if legend.cell_len + 2 + len(scale) <= options.max_width:
            legend.append(f"  {scale}", style=DIM)
            yield legend
        else:
            # Too narrow for one line: the scale goes under the legend whole, rather than
            # wrapping in the middle of "log scale".
            yield legend
            yield Text(" " * gutter + scale, style=DIM)


def run_picture(snapshot: dict, first: dict | None = None) -> Group:
    """A training run's picture through time (TrainingRun.pictures): a carried gradient such as
    dh_t at every time step of a few validation names, at one step of the run, the learner's
    beside autograd's; with the run's first picture's range said under it, to see it change."""
    panel = snapshot.get("panel") or {}
    title = panel.get("title") or "the gradient"
    yours = panel.get("yours") or []
    # "step" alone would be ambiguous here: the run's steps and the names' time steps.
    head = Text.assemble(
        (f"{title} at training step {snapshot.get('step')}", "bold"),
        (f", at each time step t of the {panel.get('case') or 'same batch'} (the same in every "
         "picture): yours beside autograd's", DIM))
    parts: list = [head, TimeBars(yours, panel.get("autograd") or [], panel.get("wrong") or [],
                                  rows=4, label=f"|{title}|")]
    if first is not None and first.get("step") != snapshot.get("step"):
        then = [v for v in (first.get("panel") or {}).get("autograd") or [] if v]
        now = [v for v in panel.get("autograd") or [] if v]
        if then and now:
            parts.append(Text.styled(
                f"At training step {first.get('step')} it ran from {min(then):.1e} to "
                f"{max(then):.1e}; now from {min(now):.1e} to {max(now):.1e}.", DIM))
    if any(panel.get("wrong") or []):
        parts.append(Text.styled("✗ marks a step where yours differs from autograd's.", BAD))
    return Group(*parts)
