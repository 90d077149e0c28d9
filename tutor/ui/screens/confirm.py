"""Asking before the reference solution is shown, so it is never revealed by accident."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static


class ConfirmReveal(ModalScreen[bool]):
    """Returns True only when the learner explicitly chooses to see the solution."""

    BINDINGS = [
        Binding("escape", "dismiss(False)", "Keep trying", id="reveal.cancel"),
    ]

    def __init__(self, step_title: str) -> None:
        super().__init__()
        self.step_title = step_title

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Static(f"Show the reference solution for {self.step_title}?", id="question")
            yield Static(
                "The step will count as revealed rather than passed, and the next line "
                "opens. It stays revealed even if you check your own version afterwards.",
                id="consequence",
            )
            with Horizontal(id="choices"):
                yield Button("Keep trying", id="cancel", variant="primary")
                yield Button("Show solution", id="reveal", variant="error")

    def on_mount(self) -> None:
        # The safe choice has focus, so a stray Enter does not reveal anything.
        self.query_one("#cancel", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss(event.button.id == "reveal")
