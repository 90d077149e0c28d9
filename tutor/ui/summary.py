"""What the completion moments and the progress view say about the learner's progress (the
counts themselves are `curriculum.tally`).

Plain functions over the store's `summary()` rows (one dict per step: id, exercise, status,
attempts, hints, best_maxdiff, seconds), so they are easy to test and need no Textual.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from tutor.pack.model import Pack


def hardest(rows: Iterable[Mapping], pack: Pack, count: int = 3) -> list[tuple[str, int]]:
    """The steps that took the most attempts (more than one), most first: (title, attempts)."""
    tried = sorted((r for r in rows if r["attempts"] > 1),
                   key=lambda r: (-r["attempts"], pack.index(r["id"])))
    return [(pack.step(r["id"]).title, r["attempts"]) for r in tried[:count]]
