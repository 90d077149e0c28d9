"""The top line: where the learner is (exercise, step x/N) and which device checks run on."""

from __future__ import annotations

from textual.containers import Horizontal
from textual.widgets import Static


class TopBar(Horizontal):
    def compose(self):
        yield Static("backprop-tutor", id="brand")
        yield Static("", id="where")
        yield Static("loading PyTorch…", id="device")

    def show_place(self, text: str) -> None:
        self.query_one("#where", Static).update(text)

    def show_device(self, text: str, *, ready: bool) -> None:
        device = self.query_one("#device", Static)
        device.update(text)
        device.set_class(not ready, "-loading")
