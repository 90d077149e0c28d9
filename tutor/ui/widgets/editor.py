"""The code editor: a TextArea that highlights Python with pygments and marks an error line.

Textual highlights TextArea content with tree-sitter, an optional extra this project does not
depend on; pygments is already needed for the forward pass, so the editor uses it too.
"""

from __future__ import annotations

from rich.style import Style
from textual import events
from textual.widgets import TextArea
from textual.widgets.text_area import Selection, TextAreaTheme

from tutor.ui.highlight import is_warm, spans, warm_up
from tutor.ui.placeholders import (
    PLACEHOLDER,
    code_end,
    merge_typed_assignment,
    next_placeholder,
)

ERROR_HIGHLIGHT = "tutor.error"
THEME_NAME = "tutor"


def _theme() -> TextAreaTheme:
    base = TextAreaTheme.get_builtin_theme("vscode_dark")
    styles = dict(base.syntax_styles) if base else {}
    styles[ERROR_HIGHLIGHT] = Style(bgcolor="#5c2328")
    # No base colours: like the built-in "css" theme, the rest follows the app's CSS.
    return TextAreaTheme(name=THEME_NAME, syntax_styles=styles)


class CodeEditor(TextArea):
    """Multi-line Python editor with undo, auto-indent and an optional error line."""

    def __init__(self, text: str = "", *, id: str | None = None) -> None:
        self._error_row: int | None = None
        super().__init__(
            text,
            id=id,
            soft_wrap=True,
            tab_behavior="indent",
            show_line_numbers=True,
            highlight_cursor_line=True,
        )
        self.register_theme(_theme())
        self.theme = THEME_NAME

    def on_mount(self) -> None:
        # Highlighting waits for the first frame (the lexer is slow to build); in an app
        # that has not warmed it up yet, the editor does so itself right after.
        if not is_warm():
            self.call_after_refresh(self._warm_up)

    def _warm_up(self) -> None:
        warm_up()
        self.mark_error(self._error_row)

    def mark_error(self, row: int | None) -> None:
        """Tint one line (0-based) until the text changes; None clears the mark."""
        self._error_row = row
        self._build_highlight_map()
        self.refresh()

    @property
    def error_row(self) -> int | None:
        return self._error_row

    def _build_highlight_map(self) -> None:
        # Replaces TextArea's tree-sitter hook (a private method: re-check on Textual upgrades).
        # TextArea expects UTF-8 byte columns, so character offsets are converted.
        self._line_cache.clear()
        highlights = self._highlights
        highlights.clear()
        text = self.document.text
        lines = text.split("\n")
        for row, start, end, name in spans(text):
            line = lines[row]
            b_start = len(line[:start].encode())
            highlights[row].append((b_start, b_start + len(line[start:end].encode()), name))
        row = getattr(self, "_error_row", None)  # unset while TextArea.__init__ runs
        if row is not None and 0 <= row < self.document.line_count:
            highlights[row].insert(0, (0, None, ERROR_HIGHLIGHT))

    def select_placeholder(self, after: tuple[int, int] = (0, 0)) -> bool:
        """Select the next `...` at or after `after` (wrapping), so typing replaces it."""
        spot = next_placeholder(self.text, after)
        if spot is None:
            return False
        row, col = spot
        self.selection = Selection((row, col), (row, col + len(PLACEHOLDER)))
        return True

    def action_cursor_line_end(self, select: bool = False) -> None:
        """End goes to the end of the line's code, before a trailing comment (a template's
        `dwte = ...  # first branch of wte`); pressed there, to the end of the line. Never to
        the point where a long line wraps, which is often inside that comment."""
        _, col = self.selection.end
        row = self.cursor_location[0]
        line = self.document.get_line(row)
        end = code_end(line)
        self.move_cursor((row, end if col < end else len(line)), select=select)

    async def _on_key(self, event: events.Key) -> None:
        if event.key == "escape":
            # TextArea would move focus away, leaving typing and undo dead with nothing on
            # screen to say why. Escape only drops the selection here.
            event.stop()
            event.prevent_default()
            self.selection = Selection.cursor(self.cursor_location)
            return
        if event.key == "tab" and not self.read_only:
            # Tab goes to the template's next blank; with none left it indents as usual.
            start, end = self.selection
            if self.select_placeholder(max(start, end)):
                event.stop()
                event.prevent_default()
                return
        # Enter keeps the indentation of the line above (one level more after a colon), so a
        # loop can be typed naturally; every other key is plain TextArea.
        if event.key == "enter" and not self.read_only:
            event.stop()
            event.prevent_default()
            row, col = self.cursor_location
            before = self.document.get_line(row)[:col]
            indent = before[: len(before) - len(before.lstrip(" \t"))]
            if before.rstrip().endswith(":"):
                indent += " " * self.indent_width
            start, end = self.selection
            self._replace_via_keyboard("\n" + indent, start, end)
            return
        await super()._on_key(event)

    def on_text_area_changed(self, _event: TextArea.Changed) -> None:
        # An edit makes the old error marker stale.
        if self._error_row is not None:
            self.mark_error(None)
        self._merge_doubled_assignment()

    def _merge_doubled_assignment(self) -> None:
        """`dprobs = dprobs = ...` after typing a whole line over a template's `...`: keep the
        learner's own assignment (an undoable edit, like any other)."""
        # Every line, not only the cursor's: keys typed fast (or pasted) can have moved the
        # cursor on to the next line before this change is handled.
        cursor_row, col = self.cursor_location
        for row in range(self.document.line_count):
            line = self.document.get_line(row)
            merged = merge_typed_assignment(line)
            if merged is None:
                continue
            text, removed = merged
            self.replace(text, (row, 0), (row, len(line)), maintain_selection_offset=False)
            if row == cursor_row:
                self.move_cursor((row, max(0, col - removed)))
            else:
                self.move_cursor((cursor_row, col))
            return  # the edit posts another change, which handles any further line
