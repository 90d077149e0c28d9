"""The forward pass, with the line being differentiated marked and every line's shapes.

Lines come from the pack (no torch needed), so the code shows on the first frame; the
shape annotations arrive with the evaluator's `info()` once the lesson state is built.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rich.text import Text
from textual.containers import VerticalScroll
from textual.widgets import Static

from tutor.packs import ForwardLine
from tutor.ui.highlight import python_text

CURRENT_ROW = "on #2c313c"
SHAPE_STYLE = "#7f8896"
BROADCAST_STYLE = "bold #d19a66"


def forward_text(
    lines: Sequence[ForwardLine],
    shapes: Mapping[str, dict],
    current: set[str],
    done: set[str],
    width: int,
) -> tuple[Text, int]:
    """Render the lines into `width` columns; return the text and the row of the current line.

    A line whose annotation does not fit beside it gets the annotation on the row below,
    right-aligned, so nothing is cut off at narrow widths.
    """
    out = Text(no_wrap=True, overflow="fold")
    row, current_row = 0, -1
    width = max(width, 20)
    exercise = 0
    for line in lines:
        if line.exercise != exercise:
            exercise = line.exercise
            out.append(f"  # exercise {exercise}\n", style="italic #5c6370")
            row += 1
        is_current = line.target in current
        if is_current and current_row < 0:
            current_row = row
        marker = "▶ " if is_current else ("✓ " if line.target in done else "  ")
        marker_style = "bold #e5c07b" if is_current else "#98c379"
        shape = shapes.get(line.target)
        note = _annotation(shape)
        code = python_text(line.source)
        room = width - 2 - len(line.source)
        rows: list[Text] = []
        first = Text(marker, style=marker_style) + code
        if note.cell_len and room >= note.cell_len + 2:
            first.append(" " * (room - note.cell_len))
            first.append_text(note)
            rows.append(first)
        else:
            rows.append(first)
            if note.cell_len:
                pad = max(2, width - note.cell_len)
                rows.append(Text(" " * pad) + note)
        for part in rows:
            if is_current:
                part.pad_right(max(0, width - part.cell_len))
                part.stylize(CURRENT_ROW)
            out.append_text(part)
            out.append("\n")
            # A source line longer than the width folds onto extra rows.
            row += max(1, -(-part.cell_len // width))
    out.rstrip()
    return out, max(current_row, 0)


def _annotation(shape: dict | None) -> Text:
    if not shape:
        return Text("")
    text = Text(shape.get("annotation") or _dims(shape.get("shape")), style=SHAPE_STYLE)
    if shape.get("broadcast"):
        text.stylize(BROADCAST_STYLE)
        text.append(" ⇅ broadcast", style=BROADCAST_STYLE)
    return text


def _dims(shape: Sequence[int] | None) -> str:
    return "" if shape is None else "[" + ", ".join(str(d) for d in shape) + "]"


class ForwardPanel(VerticalScroll, can_focus=False):
    """Scrollable view of the forward pass that keeps the current line in sight."""

    def __init__(self, lines: Sequence[ForwardLine], *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._all_lines = tuple(lines)
        self._shapes: dict[str, dict] = {}
        self._exercise = 1
        self._current: set[str] = set()
        self._done: set[str] = set()
        self._width = 0
        self.border_title = "Forward pass"

    def compose(self):
        yield Static(id="forward-code")

    def show(self, exercise: int, current: set[str], done: set[str]) -> None:
        self._exercise, self._current, self._done = exercise, set(current), set(done)
        self._render_lines()

    def set_shapes(self, info_lines: Sequence[dict]) -> None:
        self._shapes = {line["target"]: line for line in info_lines}
        self.border_subtitle = "output ← operands"
        self._render_lines()

    def visible_lines(self) -> list[ForwardLine]:
        # The pack's own forward pass always; an exercise's extra lines only on that exercise.
        return [ln for ln in self._all_lines if ln.exercise in (0, self._exercise)]

    def on_resize(self) -> None:
        if self.scrollable_content_region.width != self._width:
            self._render_lines()

    def _render_lines(self) -> None:
        if not self.is_mounted:
            return
        self._width = self.scrollable_content_region.width
        text, current_row = forward_text(
            self.visible_lines(), self._shapes, self._current, self._done, self._width
        )
        self.query_one("#forward-code", Static).update(text)
        # Keep the current line about a third of the way down once the new text is laid out.
        target = max(0, current_row - self.scrollable_content_region.height // 3)
        self.call_after_refresh(self.scroll_to, y=target, animate=False)
