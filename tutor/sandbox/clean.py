"""Text from learner code, made safe to show: no terminal control sequences, bounded length.

Print output and error messages reach the learner's terminal. An escape sequence in them could
repaint the screen (a fake "PASSED"), retitle the window or worse, so every control character but
newline and tab is removed, with the sequences they introduce.
"""

from __future__ import annotations

import re

MAX_TEXT = 20_000
MAX_MESSAGE = 2_000

# CSI (ESC [ ... final), OSC (ESC ] ... BEL or ESC \), other two-character ESC sequences, the
# 8-bit C1 forms, and then any control character left over.
_SEQUENCES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"
    r"|\x1b[PX^_][^\x1b]*(?:\x1b\\)?"
    r"|\x1b[@-Z\\-_]?"
    r"|\x9b[0-?]*[ -/]*[@-~]"
    r"|\x9d[^\x07\x9c]*[\x07\x9c]?"
)
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def clean(text: object, limit: int = MAX_TEXT) -> str:
    """`text` without control sequences, cut at `limit` characters with a note."""
    s = text if isinstance(text, str) else str(text)
    if len(s) > 4 * limit:
        s = s[: 4 * limit]  # bound the regex work before cleaning
    s = _CONTROLS.sub("", _SEQUENCES.sub("", s))
    if len(s) > limit:
        s = s[:limit] + f"… (cut at {limit} characters)"
    return s
