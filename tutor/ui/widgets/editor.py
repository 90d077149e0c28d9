"""The code editor: a TextArea that highlights Python with pygments and marks an error line.

Textual highlights TextArea content with tree-sitter, an optional extra this project does not
depend on; pygments is already needed for the forward pass, so the editor uses it too.
"""

from __future__ import annotations

from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.widgets import TextArea
from textual.widgets.text_area import Selection, TextAreaTheme

from tutor.ui import palette
from tutor.ui.highlight import TOKEN_NAMES, is_warm, spans, warm_up
from tutor.ui.placeholders import (
    PLACEHOLDER,
    code_end,
    merge_typed_assignment,
    next_placeholder,
)

THEME_NAME = "tutor"
ERROR_LINE = "code-editor--error-line"  # the component class that tints a line with an error


class CodeTheme(TextAreaTheme):
    """The editor's colours, all from the app's theme: the code's from the palette's roles
    (as read-only code), the rest from the app's CSS, like TextArea's built-in "css" theme.

    The code's colours are laid on each line before TextArea lays the cursor line and the
    selection over it (see `CodeEditor.get_line`): those two keep only their backgrounds here,
    so the code keeps its colours under them, and an error line keeps its tint under the
    cursor."""

    def apply_css(self, text_area: TextArea) -> None:
        super().apply_css(text_area)
        line, selection = self.cursor_line_style, self.selection_style
        if line is not None:
            self.cursor_line_style = Style(bgcolor=line.bgcolor)
        if selection is not None:
            self.selection_style = Style(bgcolor=selection.bgcolor, reverse=selection.reverse)
        if isinstance(text_area, CodeEditor) and text_area.error_row is not None \
                and text_area.cursor_location[0] == text_area.error_row:
            self.cursor_line_style = None


def _theme() -> CodeTheme:
    return CodeTheme(name=THEME_NAME)


class CodeEditor(TextArea):
    """Multi-line Python editor with undo, auto-indent and an optional error line.

    Highlighting goes through TextArea's public `get_line` hook: each line's Text gets the
    pygments spans of its row (worked out once per text) and, on the error line, the tint."""

    COMPONENT_CLASSES = {ERROR_LINE}
    # The whole text's start and end, as in every other editor (TextArea binds neither).
    BINDINGS = [
        Binding("ctrl+home", "cursor_text_start", "Start of the code", show=False),
        Binding("ctrl+end", "cursor_text_end", "End of the code", show=False),
        Binding("ctrl+shift+home", "cursor_text_start(True)", show=False),
        Binding("ctrl+shift+end", "cursor_text_end(True)", show=False),
    ]
    DEFAULT_CSS = """
    CodeEditor > .code-editor--error-line {
        background: $error-muted;
    }
    """

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
        self._spans: tuple[str, dict[int, list[tuple[int, int, str]]]] | None = None
        self._styles: tuple[str, dict[str, Style]] | None = None  # (app theme, token styles)
        self.register_theme(_theme())
        self.theme = THEME_NAME

    def on_mount(self) -> None:
        # Highlighting waits for the first frame (the lexer is slow to build); in an app
        # that has not warmed it up yet, the editor does so itself right after.
        if not is_warm():
            self.call_after_refresh(self._warm_up)

    def _warm_up(self) -> None:
        warm_up()
        self._spans = None
        self._repaint()

    def mark_error(self, row: int | None) -> None:
        """Tint one line (0-based) until the text changes; None clears the mark."""
        self._error_row = row
        self._repaint()

    def _repaint(self) -> None:
        # TextArea keeps rendered lines until their text, the cursor or the styles change;
        # a new tint or new colours are a change of style for every line.
        self.notify_style_update()
        self.refresh()

    @property
    def error_row(self) -> int | None:
        return self._error_row

    def _row_spans(self, text: str) -> dict[int, list[tuple[int, int, str]]]:
        if self._spans is None or self._spans[0] != text:
            rows: dict[int, list[tuple[int, int, str]]] = {}
            for row, start, end, name in spans(text):
                rows.setdefault(row, []).append((start, end, name))
            self._spans = (text, rows)
        return self._spans[1]

    def _code_styles(self) -> dict[str, Style]:
        """Each token's style, from the palette, for the app's current theme."""
        theme = self.app.theme
        if self._styles is None or self._styles[0] != theme:
            console = self.app.console
            self._styles = (theme, {name: palette.style_of(palette.code_style(name), console)
                                    for _, name in TOKEN_NAMES})
        return self._styles[1]

    def get_line(self, line_index: int) -> Text:
        line = super().get_line(line_index)
        if getattr(self, "_error_row", None) == line_index:  # unset while TextArea starts
            line.stylize(self.get_component_rich_style(ERROR_LINE))
        if not is_warm():
            return line
        styles = self._code_styles()
        for start, end, name in self._row_spans(self.document.text).get(line_index, ()):
            style = styles.get(name)
            if style is not None:
                line.stylize(style, start, end)
        return line

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
        the point where a long line wraps, which is often inside that comment, and from
        anywhere else on the line (inside the comment, where ↑ or ↓ left the cursor) to the
        code's end first."""
        row, col = self.cursor_location
        line = self.document.get_line(row)
        end = code_end(line)
        self.move_cursor((row, len(line) if col == end else end), select=select)

    def action_cursor_line_start(self, select: bool = False) -> None:
        """Home goes to the line's first character that is not a space; pressed there, to its
        very start. The line is the code's line, not the screen row a long line wraps to."""
        row, col = self.cursor_location
        line = self.document.get_line(row)
        first = len(line) - len(line.lstrip(" \t"))
        self.move_cursor((row, 0 if col == first else first), select=select)

    def action_cursor_text_start(self, select: bool = False) -> None:
        self.move_cursor((0, 0), select=select)

    def action_cursor_text_end(self, select: bool = False) -> None:
        last = self.document.line_count - 1
        self.move_cursor((last, len(self.document.get_line(last))), select=select)

    def on_key(self, event: events.Key) -> None:
        # Handled before TextArea's own key handler, which never sees a key stopped here.
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
            self.replace("\n" + indent, start, end, maintain_selection_offset=False)

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
