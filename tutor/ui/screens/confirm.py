"""Asking before something that cannot be taken back: the reference solution shown, or a
step's worked explanation opened, each counted as the learner's."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static


class Confirm(ModalScreen[bool]):
    """Returns True only when the learner explicitly chooses to go on."""

    BINDINGS = [
        Binding("escape", "dismiss(False)", "Keep trying", id="reveal.cancel"),
    ]
    GO = "Go on"

    def __init__(self, question: str, consequence: str) -> None:
        super().__init__()
        self.question = question
        self.consequence = consequence

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Static(self.question, id="question")
            yield Static(self.consequence, id="consequence")
            with Horizontal(id="choices"):
                yield Button("Keep trying", id="cancel", variant="primary")
                yield Button(self.GO, id="reveal", variant="error")

    def on_mount(self) -> None:
        # The safe choice has focus, so a stray Enter does not give anything away.
        self.query_one("#cancel", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss(event.button.id == "reveal")


class ConfirmReveal(Confirm):
    GO = "Show solution"

    def __init__(self, step_title: str) -> None:
        super().__init__(
            f"Show the reference solution for {step_title}?",
            "The step will count as revealed rather than passed, and the next line opens. It "
            "stays revealed even if you check your own version afterwards.")
        self.step_title = step_title


class ConfirmExplain(Confirm):
    GO = "Show the explanation"

    def __init__(self, step_title: str, hints: int) -> None:
        super().__init__(
            f"Open the explanation of {step_title}?",
            f"It works the step out, which says more than its hints do, so it counts as all "
            f"{hints} of them. Once the step is passed it opens freely.")
