"""Earlier training runs, one row each, and which of them to draw on the loss plot.

The rows are the runs the lesson kept (`Lesson.training_runs()`, typed), so reopening exercise 4
shows every run kept so far. Enter or a click on a row adds its curve to the plot, or takes it off.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from rich.text import Text
from textual.message import Message
from textual.widgets import DataTable

from tutor.ui.palette import ERROR, OK, WARN
from tutor.ui.widgets.lossplot import COMPARE_COLOURS, Series, spaced
from tutor.values.durations import clock
from tutor.values.runs import RunStatus, TrainingRun

RESULT_STYLES = {RunStatus.FINISHED: OK, RunStatus.CANCELLED: WARN, RunStatus.DIVERGED: ERROR}


def when(at: str | None) -> str:
    """A stored UTC time as local "05-01 14:03"."""
    try:
        return datetime.fromisoformat(str(at)).astimezone().strftime("%m-%d %H:%M")
    except ValueError:
        return "?"


def series_of(run: TrainingRun, colour: str) -> Series:
    planned = run.planned_steps or run.steps_done or 1
    history = run.history
    return Series(f"#{run.run_id}", history.every if history else 1, planned, colour,
                  [float(v) for v in history.finite()] if history else [])


@dataclass
class Compared:
    colour: str


class RunsTable(DataTable):
    """The runs kept in the store, newest first."""

    class CompareChanged(Message):
        """The set of runs drawn for comparison changed: their curves, in their colours."""

        def __init__(self, series: list[Series]) -> None:
            super().__init__()
            self.series = series

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=False, show_cursor=True)
        self.runs: dict[str, TrainingRun] = {}
        self.compared: dict[str, Compared] = {}

    def on_mount(self) -> None:
        for name in ("run", "when", "result", "steps", "train", "val", "time"):
            self.add_column(name, key=name)

    def show_runs(self, runs: Sequence[TrainingRun]) -> None:
        """Fill the table (newest first), keeping the runs already chosen for the plot."""
        self.clear()
        self.runs = {str(r.run_id): r for r in runs}
        self.compared = {k: v for k, v in self.compared.items() if k in self.runs}
        for run in reversed(list(runs)):
            key = str(run.run_id)
            planned, done = run.planned_steps, run.steps_done
            steps = spaced(done) if not planned or planned == done else \
                f"{spaced(done)}/{spaced(planned)}"
            self.add_row(
                self._mark(key), when(run.at),
                Text.styled(str(run.status), RESULT_STYLES.get(run.status, "")), steps,
                "—" if run.train_loss is None else f"{run.train_loss:.3f}",
                "—" if run.val_loss is None else f"{run.val_loss:.3f}",
                clock(run.train_s), key=key)

    def _mark(self, key: str) -> Text:
        """The run's number, after a bar in its colour when it is drawn on the plot."""
        chosen = self.compared.get(key)
        mark = Text.styled("━ ", chosen.colour) if chosen else Text("  ")
        return mark + Text(f"#{key}")

    def toggle(self, key: str) -> None:
        if key in self.compared:
            del self.compared[key]
        else:
            if len(self.compared) == len(COMPARE_COLOURS):  # the oldest choice makes room
                self.compared.pop(next(iter(self.compared)))
            used = {c.colour for c in self.compared.values()}
            colour = next(c for c in COMPARE_COLOURS if c not in used)
            self.compared[key] = Compared(colour)
        for k in self.runs:
            self.update_cell(k, "run", self._mark(k))
        self.post_message(self.CompareChanged(
            [series_of(self.runs[k], c.colour) for k, c in self.compared.items()]))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        if event.row_key.value is not None:
            self.toggle(str(event.row_key.value))
