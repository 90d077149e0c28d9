"""Every key binding with its description, generated from the bindings themselves."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static, TextArea

from tutor.ui.palette import ALERT, DIM
from tutor.ui.progress_view import MARKERS, STATUS_STYLES, STATUS_WORDS


def _keys(binding: Binding, app) -> str:
    return " / ".join(app.get_key_display(Binding(k.strip(), binding.action))
                      for k in binding.key.split(","))


def bindings_table(title: str, bindings: Iterable[Binding], app) -> Table:
    table = Table(title=title, title_justify="left", title_style="bold", box=None,
                  padding=(0, 2, 0, 0), show_header=False)
    # Styles on cells rather than columns: a console without the theme then renders plainly.
    table.add_column("keys", no_wrap=True)
    table.add_column("what it does")
    for binding in bindings:
        if not binding.description:
            continue
        text = Text(binding.description)
        if binding.tooltip:
            text.append(f": {binding.tooltip}", style=DIM)
        table.add_row(Text.styled(_keys(binding, app), ALERT), text)
    return table


def legend() -> Table:
    table = Table(title="Step markers", title_justify="left", title_style="bold", box=None,
                  padding=(0, 2, 0, 0), show_header=False)
    table.add_column("marker", no_wrap=True)
    table.add_column("meaning")
    for status, marker in MARKERS.items():
        table.add_row(Text.styled(marker, STATUS_STYLES[status]), STATUS_WORDS[status])
    return table


class HelpScreen(ModalScreen[None]):
    """The tutor's keys (given: the lesson's and the app's), then the editor's, then markers."""

    BINDINGS = [
        Binding("escape,f9,question_mark,q", "dismiss", "Close", id="help.close"),
    ]

    def __init__(self, bindings: Sequence[Binding]) -> None:
        super().__init__()
        self.key_bindings = list(bindings)

    def compose(self) -> ComposeResult:
        app = self.app
        tutor_bindings = [*self.key_bindings, Binding(
            app.COMMAND_PALETTE_BINDING, "command_palette", "Command palette",
            tooltip="Jump to any open step, or run any action")]
        editor_bindings = [b for b in TextArea.BINDINGS if isinstance(b, Binding)]
        with Vertical(id="dialog"):
            with VerticalScroll(id="help-body"):
                yield Static(bindings_table("Tutor", tutor_bindings, app))
                yield Static(bindings_table("Editor", editor_bindings, app))
                yield Static(legend())
            yield Static("esc closes this · the mouse works everywhere", classes="dialog-hint")

    def on_mount(self) -> None:
        self.query_one("#help-body").focus()
