"""Text from learner code, made safe to show: no terminal control sequences, bounded length.

Print output and error messages reach the learner's terminal. An escape sequence in them could
repaint the screen (a fake "PASSED"), retitle the window or worse, so every control character but
newline and tab is removed, with the sequences they introduce; so are the invisible marks that
reorder text (bidirectional overrides and isolates), which could make a line read as something
else than it is.

Text that is too long keeps its first and its last part, with a note of how much was cut between
them: the end of a traceback or of a loop's output is often what says what went wrong.
`Capped` does the same for text that arrives a piece at a time (what learner code prints, what a
child writes to its stdout and stderr), holding no more than it keeps.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import AnyStr, Generic

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
# C0 controls but tab and newline (carriage return and backspace overwrite what was shown), DEL
# and C1; the marks that reorder text: ALM, LRM, RLM, LRE/RLE/PDF/LRO/RLO, LRI/RLI/FSI/PDI.
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
# Half of a UTF-16 pair on its own (a notebook's JSON may hold one as `\ud800`): no UTF-8 file,
# terminal or results file can hold it.
_SURROGATES = re.compile(r"[\ud800-\udfff]")


def whole_characters(text: str) -> str:
    """`text` with each lone surrogate replaced by U+FFFD, the character for "unreadable"."""
    return _SURROGATES.sub("\ufffd", text)


def cut_note(count: int, unit: str = "characters") -> str:
    return f"\n… {count:,} {unit} cut …\n"


def clean(text: object, limit: int = MAX_TEXT) -> str:
    """`text` without control sequences; past `limit` characters, its first and last part with
    a note of what was cut between them."""
    s = text if isinstance(text, str) else str(text)
    if len(s) <= 4 * limit:
        return _ends(_strip(s), "", 0, limit)
    # Only both ends are cleaned, which bounds the regex work; the note counts what lay between.
    return _ends(_strip(s[:2 * limit]), _strip(s[-2 * limit:]), len(s) - 4 * limit, limit)


def _strip(s: str) -> str:
    return whole_characters(_CONTROLS.sub("", _SEQUENCES.sub("", s)))


_NOTE_ROOM = 40  # what cut_note takes, and then some


def _ends(head: str, tail: str, between: int, limit: int) -> str:
    """`head`, then `tail`, with `between` characters already dropped between them, within
    `limit`: a note stands for what is cut."""
    if not between and len(head) + len(tail) <= limit:
        return head + tail
    text = head + tail
    keep = max(limit - _NOTE_ROOM, 2)
    first = min(keep // 2, len(text))
    last = min(keep - first, len(text) - first)
    cut = len(text) + between - first - last
    return text[:first] + cut_note(cut) + text[len(text) - last:]


class Capped(Generic[AnyStr]):
    """Text (or bytes) written a piece at a time, of which only the first `head` and the last
    `tail` units are held; what falls between is only counted. `text()` joins the two with a
    note of what was cut."""

    def __init__(self, empty: AnyStr, head: int, tail: int,
                 note: Callable[[int], AnyStr]) -> None:
        self._empty = empty
        self._head_room = head
        self._tail_room = tail
        self._note = note
        self._head: list[AnyStr] = []
        self._head_size = 0
        self._tail: list[AnyStr] = []
        self._tail_size = 0
        self.written = 0  # every unit ever written, kept or not

    def write(self, piece: AnyStr) -> None:
        self.written += len(piece)
        room = self._head_room - self._head_size
        if room > 0:
            self._head.append(piece[:room])
            self._head_size += min(room, len(piece))
            piece = piece[room:]
        if not piece:
            return
        if len(piece) >= self._tail_room:
            self._tail, self._tail_size = [piece[len(piece) - self._tail_room:]], self._tail_room
            return
        self._tail.append(piece)
        self._tail_size += len(piece)
        if self._tail_size > 2 * self._tail_room:  # joined now and then, not at every piece
            self._tail = [self._tail_text()]
            self._tail_size = len(self._tail[0])

    def _tail_text(self) -> AnyStr:
        joined = self._empty.join(self._tail)
        return joined[max(0, len(joined) - self._tail_room):]

    @property
    def cut(self) -> int:
        """How many units were written but are not held."""
        return self.written - self._head_size - min(self._tail_size, self._tail_room)

    def text(self) -> AnyStr:
        head, tail = self._empty.join(self._head), self._tail_text()
        return head + self._note(self.cut) + tail if self.cut else head + tail

    def place(self, at: int) -> int:
        """Where what was written at `at` (a count of units written before it) lies in
        `text()`: a place that was cut maps to the note that stands for it."""
        if at <= self._head_size or not self.cut:
            return min(at, self._head_size + (len(self._tail_text()) if not self.cut else 0))
        tail = len(self._tail_text())
        note = len(self._note(self.cut))
        start = self.written - tail
        return self._head_size + note + max(0, at - start)
