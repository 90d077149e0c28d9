"""The moment an exercise, or the whole lesson, is done: what it took, at a glance.

Shown over whichever screen finished it. Enter goes on to the next exercise (the app decides
what that means); escape stays where the learner is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from tutor.pack.model import DEFAULT_BASELINE, Exercise, Pack
from tutor.session.controller import Tally, tally
from tutor.ui.palette import ALERT, DIM, GOOD
from tutor.ui.prose import prose
from tutor.ui.summary import hardest
from tutor.values.durations import clock, spoken
from tutor.values.runs import SplitLosses, TrainingRun

TITLE = ALERT


def _figures(t: Tally) -> Table:
    table = Table(box=None, show_header=False, pad_edge=False, padding=(0, 2, 0, 0))
    table.add_column("what", no_wrap=True)
    table.add_column("value")
    table.add_row(Text.styled("steps", DIM), t.sentence())
    per_step = f" ({t.attempts / t.steps:.1f} per step)" if t.steps > 1 and t.attempts else ""
    table.add_row(Text.styled("attempts", DIM), f"{t.attempts}{per_step}")
    table.add_row(Text.styled("hints", DIM), str(t.hints))
    table.add_row(Text.styled("time", DIM), spoken(t.seconds))
    return table


def run_lines(run: TrainingRun | None, baseline: str = DEFAULT_BASELINE) -> list[RenderableType]:
    """The training run that finished exercise 4, in two lines; its losses beside those of
    `baseline` (the pack's `Pack.baseline`)."""
    if not run:
        return []
    lecture = run.lecture or SplitLosses()
    losses = Text()
    if run.train_loss is not None:
        losses.append(f"train loss {run.train_loss:.4f}, val loss {run.val_loss:.4f}")
        if lecture.train_loss:
            losses.append(f" ({baseline}: {lecture.train_loss:.4f}, "
                          f"{lecture.val_loss:.4f})", style=DIM)
    steps = f"{run.steps_done:,}".replace(",", " ")
    lines: list[RenderableType] = [Text(f"Your gradients trained the network for {steps} steps "
                                        f"in {spoken(run.train_s or 0)}.")]
    if losses.plain:
        lines.append(losses)
    if run.samples:
        lines.append(Text.styled("  ".join(run.samples[:8]), "bold"))
    return lines


def exercise_view(pack: Pack, exercise: Exercise, rows: Sequence[Mapping],
                  run: TrainingRun | None, following: Exercise | None) -> Group:
    mine = [r for r in rows if r["exercise"] == exercise.number]
    parts: list[RenderableType] = [
        Text.styled(f"✓ Exercise {exercise.number} done: {exercise.title}", TITLE), Text(""),
        _figures(tally(mine))]
    tough = hardest(mine, pack)
    if tough and len(mine) > 1:
        tries = ", ".join(f"{t} ({n})" for t, n in tough)
        parts.append(Text.styled(f"Took the most tries: {tries}", DIM))
    if exercise.kind.trained:
        parts += [Text(""), *run_lines(run, pack.baseline)]
    if following is not None:
        parts += [Text(""), Text(f"Next: exercise {following.number}, {following.title}.")]
    parts.append(Text(""))  # room above the key hint docked under it
    return Group(*parts)


def lesson_view(pack: Pack, rows: Sequence[Mapping], run: TrainingRun | None) -> Group:
    total = tally(rows)
    parts: list[RenderableType] = [
        Text.styled(f"★ Lesson complete: {pack.title}", TITLE),
        Text.styled("Every gradient of the network, by hand, and a network trained on them.", GOOD),
        Text(""), _figures(total), Text("")]
    table = Table(box=None, pad_edge=False, padding=(0, 2, 0, 0), title_justify="left")
    for name, justify in (("exercise", "left"), ("steps", "left"), ("tries", "right"),
                          ("hints", "right"), ("time", "right")):
        # Only the exercise's title may wrap: the numbers must stay whole at 80 columns.
        table.add_column(Text.styled(name, DIM), justify=justify, no_wrap=name != "exercise")
    for ex in pack.exercises:
        t = tally(r for r in rows if r["exercise"] == ex.number)
        table.add_row(f"{ex.number} {ex.title}", t.parts, str(t.attempts), str(t.hints),
                      clock(t.seconds))
    parts.append(table)
    if run:
        parts += [Text(""), *run_lines(run, pack.baseline)]
    parts += [Text(""), prose("`backprop-tutor export --out backward.py` takes your backward "
                              "pass with you, as a script that runs with plain PyTorch.", DIM)]
    return Group(*parts)


class CompletionScreen(ModalScreen[bool]):
    """Returns True when the learner chose to go on (Enter), False to stay (escape)."""

    BINDINGS = [
        Binding("enter", "dismiss(True)", "Go on", id="done.go"),
        Binding("escape,q", "dismiss(False)", "Stay", id="done.stay"),
    ]

    def __init__(self, body: RenderableType, hint: str) -> None:
        super().__init__()
        self.body, self.hint = body, hint

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            with VerticalScroll(id="explain-body"):
                yield Static(self.body, id="completion-body")
            yield Static(self.hint, classes="dialog-hint")

    def on_mount(self) -> None:
        self.query_one("#explain-body").focus()
