"""What the completion moments and the progress view say about the learner's progress (the
counts themselves are `curriculum.tally`).

Plain functions over the store's `summary()` rows (one dict per step: id, exercise, status,
attempts, hints, best_maxdiff, seconds), so they are easy to test and need no Textual.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from tutor.packs import Pack
from tutor.ui.progress_view import is_done


def done_exercises(pack: Pack, statuses: Mapping[str, str]) -> set[int]:
    """Numbers of the exercises whose every step is done."""
    return {ex.number for ex in pack.exercises
            if all(is_done(statuses.get(s.id, "locked")) for s in ex.steps)}


def hardest(rows: Iterable[Mapping], pack: Pack, count: int = 3) -> list[tuple[str, int]]:
    """The steps that took the most attempts (more than one), most first: (title, attempts)."""
    tried = sorted((r for r in rows if r["attempts"] > 1),
                   key=lambda r: (-r["attempts"], pack.index(r["id"])))
    return [(pack.step(r["id"]).title, r["attempts"]) for r in tried[:count]]


def duration(seconds: float) -> str:
    """"4 min 05 s", "1 h 02 min": whole seconds, the two largest units."""
    total = int(round(max(0.0, seconds)))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes:02d} min"
    return f"{minutes} min {secs:02d} s"


def short_duration(seconds: float) -> str:
    """"4:05", "1:02:07": for tables, where every column counts."""
    total = int(round(max(0.0, seconds)))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
