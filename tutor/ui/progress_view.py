"""How progress looks: status markers, colours and the questions the screens ask of it.

Statuses come from the progress store ("locked", "unlocked", "passed", "exact", "revealed");
"current" is not stored, it is whichever step the learner has open.
"""

from __future__ import annotations

from collections.abc import Mapping

from tutor.curriculum import blockers
from tutor.packs import Pack, Step
from tutor.ui.palette import ALERT, GOOD, INFO, LOCKED, REVEAL, TEXT

DONE = frozenset({"passed", "exact", "revealed"})

# A marker per status that reads without colour; colour (the theme's, see palette) only
# reinforces it.
MARKERS: dict[str, str] = {
    "current": "▶",
    "locked": "·",
    "unlocked": "○",
    "passed": "✓",
    "exact": "≡",
    "revealed": "◇",
    "training": "★",  # the training exercise, once it is open
}

STATUS_STYLES: dict[str, str] = {
    "current": ALERT,
    "locked": LOCKED,
    "unlocked": TEXT,
    "passed": INFO,
    "exact": GOOD,
    "revealed": REVEAL,
    "training": ALERT,
}

STATUS_WORDS: dict[str, str] = {
    "current": "open now",
    "locked": "locked",
    "unlocked": "open",
    "passed": "passed (approximately equal)",
    "exact": "exact (bit for bit)",
    "revealed": "solution revealed",
    "training": "training, once every exercise it needs is done",
}


def is_done(status: str) -> bool:
    return status in DONE


def is_enterable(status: str) -> bool:
    return status != "locked"


def remaining_before(pack: Pack, step: Step, statuses: Mapping[str, str]) -> list[Step]:
    """The steps not done yet that keep `step` locked (see `curriculum.blockers`)."""
    return blockers(pack, step.id, {sid for sid, st in statuses.items() if is_done(str(st))})


def position_in_lesson(pack: Pack, step: Step) -> tuple[int, int]:
    """1-based position of the step in the whole lesson, and the lesson's step count: the
    numbers `backprop-tutor list` gives, so the TUI and the CLI count alike."""
    return pack.index(step.id) + 1, len(pack.steps)


def differentiated_lines(pack: Pack, statuses: Mapping[str, str]) -> set[str]:
    """Targets of the forward lines whose step is done."""
    return {
        name
        for s in pack.gradient_steps
        if is_done(statuses.get(s.id, "locked"))
        for name in s.lines
    }
