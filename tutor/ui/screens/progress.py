"""The progress view: what `backprop-tutor progress` prints, as a table over the main screen."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from tutor.pack.model import Pack
from tutor.session.controller import tally
from tutor.ui.palette import DIM, HEADING
from tutor.ui.progress_view import MARKERS, STATUS_STYLES
from tutor.values.durations import clock, spoken


def progress_table(pack: Pack, rows: Sequence[Mapping]) -> Group:
    table = Table(box=None, pad_edge=False, padding=(0, 1), expand=False)
    # Only the step's title may wrap: at 80 columns the numbers and statuses must stay whole.
    for name, justify in (("", "left"), ("step", "left"), ("status", "left"),
                          ("tries", "right"), ("hints", "right"),
                          ("maxdiff", "right"), ("time", "right")):
        table.add_column(Text.styled(name, DIM), justify=justify, no_wrap=name != "step")
    exercise = None
    for number, r in enumerate(rows, 1):
        if r["exercise"] != exercise:
            exercise = r["exercise"]
            ex = pack.exercise(exercise)
            table.add_row("", Text.styled(f"{ex.number} · {ex.title}", HEADING))
        status = r["status"]
        best = "—" if r["best_maxdiff"] is None else f"{r['best_maxdiff']:.2g}"
        table.add_row(
            Text.styled(MARKERS.get(status, " "), STATUS_STYLES.get(status, "")),
            f"{number:>2} {pack.step(r['id']).title}",
            Text.styled(status, STATUS_STYLES.get(status, "")),
            str(r["attempts"]), str(r["hints"]), best,
            clock(r["seconds"]) if r["seconds"] else "—",
        )
    total = tally(rows)
    line = Text(f"{total.sentence()}, {total.attempts} attempts, {total.hints} hints, "
                f"{spoken(total.seconds)}. maxdiff: the best of the passing attempts.")
    return Group(table, Text(""), line)


class ProgressScreen(ModalScreen[None]):
    BINDINGS = [
        Binding("escape,q,ctrl+o", "dismiss", "Close", id="progress.close"),
    ]

    def __init__(self, pack: Pack, rows: Sequence[Mapping]) -> None:
        super().__init__()
        self.pack, self.rows = pack, rows

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            with VerticalScroll(id="explain-body"):
                yield Static(progress_table(self.pack, self.rows), id="progress-body")
            yield Static("esc closes this · the same as `backprop-tutor progress`",
                         classes="dialog-hint")

    def on_mount(self) -> None:
        self.query_one("#explain-body").focus()
