"""Seconds as the learner reads them, in one place for every front end: in a sentence
("4 min 05 s"), on a clock ("4:05"), and in a narrow table column ("4m05"); and the other
numbers a run prints, counts ("200 000") and losses ("2.0705")."""

from __future__ import annotations

import math


def _parts(seconds: float) -> tuple[int, int, int]:
    total = int(round(max(0.0, seconds)))
    hours, rest = divmod(total, 3600)
    return (hours, *divmod(rest, 60))


def spoken(seconds: float) -> str:
    """"4 min 05 s", "1 h 02 min": whole seconds, the two largest units."""
    hours, minutes, secs = _parts(seconds)
    return f"{hours} h {minutes:02d} min" if hours else f"{minutes} min {secs:02d} s"


def clock(seconds: float | None, missing: str = "—") -> str:
    """"4:05", "1:02:07": for tables and progress lines; `missing` when there is no figure."""
    if seconds is None or not math.isfinite(seconds):
        return missing
    hours, minutes, secs = _parts(seconds)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def compact(seconds: float) -> str:
    """"4m05", "1h02": the CLI's progress table, whose column is seven wide. Seconds are cut,
    not rounded: a step is never shown as having taken longer than it did."""
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes // 60}h{minutes % 60:02d}" if minutes >= 60 else f"{minutes}m{secs:02d}"


def spaced(number: float) -> str:
    """A count with its thousands apart: "200 000"."""
    return f"{number:,.0f}".replace(",", " ")


def loss_text(value: float | None) -> str:
    """A loss to four places, or a dash for none."""
    return "—" if value is None else f"{value:.4f}"
