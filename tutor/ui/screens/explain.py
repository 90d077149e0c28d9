"""The explanation of the open step (Markdown), shown over the main screen on request."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Markdown, Static

from tutor.pack.model import Exercise, Step


def explanation_markdown(exercise: Exercise, step: Step) -> str:
    parts = [f"## {step.title}"]
    if step.explanation:
        parts.append(step.explanation)
    if how := step.kind.how_checked(step):
        parts.append(how)
    if exercise.intro:
        parts.append(f"### Exercise {exercise.number}: {exercise.title}")
        parts.append(exercise.intro)
    return "\n\n".join(parts)


class ExplainScreen(ModalScreen[None]):
    BINDINGS = [
        Binding("escape,f3,q", "dismiss", "Close", id="explain.close"),
        Binding("right", "sideways(8)", "Scroll code right", show=False),
        Binding("left", "sideways(-8)", "Scroll code left", show=False),
    ]

    def __init__(self, exercise: Exercise, step: Step) -> None:
        super().__init__()
        self.exercise = exercise
        self.step = step

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            with VerticalScroll(id="explain-body"):
                yield Markdown(explanation_markdown(self.exercise, self.step))
            yield Static("esc or F3 closes this · ←/→ scroll wide code", classes="dialog-hint")

    def on_mount(self) -> None:
        self.query_one("#explain-body").focus()

    def action_sideways(self, columns: int) -> None:
        """Code lines wider than the dialog scroll sideways, all of them together, so that a
        formula's last term is never out of reach."""
        from textual.widgets.markdown import MarkdownFence

        for fence in self.query(MarkdownFence):
            fence.scroll_relative(x=columns, animate=False)
