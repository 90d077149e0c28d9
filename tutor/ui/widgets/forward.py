"""The forward pass, with the line being differentiated marked and every line's shapes.

Lines come from the pack (no torch needed), so the code shows on the first frame; the
shape annotations arrive with the evaluator's `info()` once the lesson state is built.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rich.text import Text
from textual.events import MouseScrollDown, MouseScrollUp
from textual.widget import Widget

from tutor.pack.model import ForwardLine
from tutor.ui.highlight import is_warm, python_text
from tutor.ui.palette import ALERT, CURRENT_ROW, DIM, LOCKED, OK

SHAPE_STYLE = DIM
BROADCAST_STYLE = ALERT


def forward_rows(
    lines: Sequence[ForwardLine],
    shapes: Mapping[str, dict],
    current: set[str],
    done: set[str],
    width: int,
) -> tuple[list[Text], int, list[int]]:
    """Render the lines as screen rows of `width` columns, the row of the current line, and for
    every row the index of the forward line it belongs to (-1 for a heading).

    A line whose annotation does not fit beside it gets the annotation on the row below,
    right-aligned; a line wider than the panel continues on the next rows, indented. So
    nothing is cut off at narrow widths.
    """
    width = max(width, 20)
    out: list[Text] = []
    owners: list[int] = []
    current_row = -1
    exercise = 0
    for index, line in enumerate(lines):
        if line.exercise != exercise:
            exercise = line.exercise
            out.append(Text.styled(f"  # exercise {exercise}", LOCKED))
            owners.append(-1)
        is_current = line.target in current
        if is_current and current_row < 0:
            current_row = len(out)
        marker = "▶ " if is_current else ("✓ " if line.target in done else "  ")
        marker_style = ALERT if is_current else OK
        note = _annotation(shapes.get(line.target))
        code = Text.styled(marker, marker_style) + python_text(line.source)
        rows = _fold(code, width)
        room = width - rows[-1].cell_len
        if note.cell_len and room >= note.cell_len + 2:
            rows[-1].append(" " * (room - note.cell_len))
            rows[-1].append_text(note)
        elif note.cell_len:
            rows.append(Text(" " * max(2, width - note.cell_len)) + note)
        for part in rows:
            if is_current:
                part.pad_right(max(0, width - part.cell_len))
                part.stylize(CURRENT_ROW)
            out.append(part)
            owners.append(index)
    return out, max(current_row, 0), owners


BREAK_AFTER = " ,(["  # a folded line breaks after one of these, never inside a name


def _break_at(plain: str, width: int) -> int:
    """Where to cut `plain` so the first row holds at most `width` cells: after the last space,
    comma or opening bracket that fits, or at `width` when a single name is longer."""
    if len(plain) <= width:
        return len(plain)
    cut = max(plain.rfind(ch, 0, width) for ch in BREAK_AFTER) + 1
    return cut if cut > width // 3 else width


def _fold(text: Text, width: int) -> list[Text]:
    """Cut a code line into rows of at most `width` cells; continuations are indented."""
    if text.cell_len <= width:
        return [text]
    cut = _break_at(text.plain, width)
    rows = [text[:cut]]
    rest = text[cut:]
    while rest.cell_len:
        rest = rest[len(rest.plain) - len(rest.plain.lstrip(" ")):]  # no leading blanks
        cut = _break_at(rest.plain, width - 4)
        rows.append(Text("    ") + rest[:cut])
        rest = rest[cut:]
    return rows


def _annotation(shape: dict | None) -> Text:
    if not shape:
        return Text("")
    text = Text.styled(shape.get("annotation") or _dims(shape.get("shape")), SHAPE_STYLE)
    if shape.get("broadcast"):
        text.stylize(BROADCAST_STYLE)
        text.append(" ⇅ broadcast", style=BROADCAST_STYLE)
    return text


def _dims(shape: Sequence[int] | None) -> str:
    return "" if shape is None else "[" + ", ".join(str(d) for d in shape) + "]"


class ForwardPanel(Widget, can_focus=False):
    """The forward pass, cut to the panel's height around the current line.

    The window is computed at render time from the panel's size rather than by scrolling a
    taller widget, so what shows does not depend on when layout happens to settle. The mouse
    wheel moves the window; opening another step re-centres it.
    """

    def __init__(self, lines: Sequence[ForwardLine], *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._all_lines = tuple(lines)
        self._shapes: dict[str, dict] = {}
        self._exercise = 1
        self._current: set[str] = set()
        self._done: set[str] = set()
        self._top: int | None = None  # None follows the current line
        # The rendering, by its inputs: rows, the current line's row, each row's line.
        self._cache: tuple[tuple, list[Text], int, list[int]] | None = None
        self.border_title = "Forward pass"

    def show(self, exercise: int, current: set[str], done: set[str]) -> None:
        if set(current) != self._current or exercise != self._exercise:
            self._top = None
        self._exercise, self._current, self._done = exercise, set(current), set(done)
        self.refresh_window()

    def set_shapes(self, info_lines: Sequence[dict]) -> None:
        self._shapes = {line["target"]: line for line in info_lines}
        self.refresh_window()

    def visible_lines(self) -> list[ForwardLine]:
        # The pack's own forward pass always; an exercise's extra lines only on that exercise.
        return [ln for ln in self._all_lines if ln.exercise in (0, self._exercise)]

    def _rendered(self) -> tuple[list[Text], int, list[int]]:
        width = self.size.width
        key = (width, self._exercise, frozenset(self._current), frozenset(self._done),
               id(self._shapes), is_warm())
        if self._cache is None or self._cache[0] != key:
            self._cache = (key, *forward_rows(
                self.visible_lines(), self._shapes, self._current, self._done, width
            ))
        return self._cache[1:]

    def _window(self) -> tuple[list[Text], int]:
        """All rendered rows and the first one to show."""
        height = self.size.height
        rows, current_row, _ = self._rendered()
        top = current_row - height // 3 if self._top is None else self._top
        return rows, min(max(top, 0), max(0, len(rows) - height))

    def hidden_lines(self) -> tuple[int, int]:
        """How many forward lines lie wholly above and wholly below the window (a line folded
        over several rows is one line)."""
        rows, top = self._window()
        _, _, owners = self._rendered()
        bottom = top + self.size.height
        shown = {owners[r] for r in range(top, min(bottom, len(rows)))}
        above = {o for o in owners[:top] if o >= 0} - shown
        below = {o for o in owners[bottom:] if o >= 0} - shown
        return len(above), len(below)

    def render(self) -> Text:
        rows, top = self._window()
        return Text("\n").join(rows[top : top + self.size.height])

    def refresh_window(self) -> None:
        """Redraw, and say in the title how many lines the window leaves out."""
        title = "Forward pass"
        # Scrolled-off counts, so the wheel's use is discoverable; none before the panel is
        # laid out (the lines would be folded for nothing at a width of 0).
        if self.size.height:
            above, below = self.hidden_lines()
            title += f" · ↑ {above} more" if above else ""
            title += f" · ↓ {below} more" if below else ""
        self.border_title = title
        self.refresh()

    def on_resize(self) -> None:
        self.refresh_window()

    def on_mouse_scroll_down(self, event: MouseScrollDown) -> None:
        event.stop()
        rows, top = self._window()
        self._top = min(top + 1, max(0, len(rows) - self.size.height))
        self.refresh_window()

    def on_mouse_scroll_up(self, event: MouseScrollUp) -> None:
        event.stop()
        _, top = self._window()
        self._top = max(top - 1, 0)
        self.refresh_window()
