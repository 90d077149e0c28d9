"""Choosing a gradient to break: one step of the training code and what stands in for it (a
catalogued mistake of the step, or the learner's own first refused attempt). The training screen
then trains with it (`Lesson.compare_broken`) and draws both curves."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from tutor.ui.palette import DIM
from tutor.values.runs import BrokenStep

MESSAGE_WIDTH = 90  # characters of a mistake's message shown in its row


def _short(text: str, width: int = MESSAGE_WIDTH) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


class BreakChooser(ModalScreen[BrokenStep | None]):
    """Every way to break a step of the training code, grouped by step; returns the one chosen,
    or None."""

    DEFAULT_CSS = """
    BreakChooser { align: center middle; }
    BreakChooser #dialog { width: 90%; height: 80%; }
    BreakChooser #break-options { height: 1fr; }
    """

    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel", id="break.cancel")]

    def __init__(self, choices: list[tuple[str, list[BrokenStep]]]) -> None:
        super().__init__()
        self.choices = choices
        self.ways = [way for _, ways in choices for way in ways]

    def compose(self) -> ComposeResult:
        options: list[Option] = []
        for title, ways in self.choices:
            options.append(Option(Text.styled(title, "bold"), disabled=True))
            for way in ways:
                prompt = Text(f"  {way.label}: ")
                prompt.append(_short(way.message), style=DIM)
                options.append(Option(prompt, id=str(self.ways.index(way))))
        with Vertical(id="dialog"):
            yield Static("Train once more with one gradient wrong: choose a step and what "
                         "stands in for its code. The loss curve appears next to a good run's.",
                         id="question")
            yield OptionList(*options, id="break-options")
            yield Static("enter chooses · esc cancels · the broken run is only shown, never "
                         "kept", classes="dialog-hint")

    def on_mount(self) -> None:
        options = self.query_one(OptionList)
        options.focus()
        options.highlighted = next((k for k in range(options.option_count)
                                    if not options.get_option_at_index(k).disabled), None)

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        if event.option.id is not None:
            self.dismiss(self.ways[int(event.option.id)])
