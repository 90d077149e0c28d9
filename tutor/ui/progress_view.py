"""How progress looks: status markers, colours and words (the questions about progress are
the lesson controller's, `tutor.session.controller`).

Statuses come from the progress store ("locked", "unlocked", "passed", "exact", "revealed");
"current" is not stored, it is whichever step the learner has open.
"""

from __future__ import annotations

from tutor.ui.palette import ALERT, GOOD, INFO, LOCKED, REVEAL, TEXT, WARN
from tutor.values.results import Status

# A marker per status that reads without colour; colour (the theme's, see palette) only
# reinforces it. The stored statuses' marks and words are `results.Status`'s, the same in
# every front end; "current" and "training" are the TUI's own.
MARKERS: dict[str, str] = {
    "current": "▶",
    **{str(s): s.mark for s in Status},
    "training": "★",  # the training exercise, once it is open
}

STATUS_STYLES: dict[str, str] = {
    "current": ALERT,
    "locked": LOCKED,
    "unlocked": TEXT,
    "skipped": WARN,  # passed, without the line's rule: neither the pass colour nor an error
    "passed": INFO,
    "exact": GOOD,
    "revealed": REVEAL,
    "training": ALERT,
}

STATUS_WORDS: dict[str, str] = {
    "current": "open now",
    **{str(s): s.words for s in Status},
    "training": "training, once every exercise it needs is done",
}
