"""Choosing the lesson at launch, when several packs are installed and the learner named none.

Progress is kept per pack, so choosing is all it takes to switch lessons: the app opens the
chosen pack's progress and starts its checker only once the choice is made. Which packs are
offered, and which opened last, is `tutor.session.packchoice`'s (through the controller).
"""

from __future__ import annotations

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from tutor.session.packchoice import loadable_pack
from tutor.ui import palette
from tutor.ui.palette import DIM


def _label(name: str) -> Text:
    pack = loadable_pack(name)
    if pack is None:
        return Text(name)
    # The pack's own id, also when it was given by folder; and its size, to set expectations.
    size = f"{pack.id} · {len(pack.exercises)} exercises · {len(pack.steps)} steps"
    return Text.assemble((pack.title, "bold"), "\n", (size, DIM))


class PackScreen(ModalScreen[str]):
    """The packs, one option each (title, then id and size); returns the id of the one chosen.
    The one opened last is highlighted."""

    def __init__(self, packs: list[str], last: str | None = None) -> None:
        super().__init__(id="packs-screen")
        self.packs = packs
        self.last = last

    def compose(self) -> ComposeResult:
        options: list[Option | None] = []
        for name in self.packs:
            if options:
                options.append(None)  # a rule between packs, so two-line labels stay apart
            options.append(Option(palette.resolved(_label(name), self.app.console), id=name))
        with Vertical(id="dialog"):
            yield Static("Which lesson?", id="question")
            yield Static("Each keeps its own progress. The next launch opens the one you "
                         "choose; ctrl+l there brings this question back.", id="consequence")
            yield OptionList(*options, id="packs")
            yield Static("↑↓ choose · enter opens it · ctrl+q quits", classes="dialog-hint")

    def on_mount(self) -> None:
        options = self.query_one("#packs", OptionList)
        options.focus()
        if self.last in self.packs:
            options.highlighted = options.get_option_index(self.last)

    @on(OptionList.OptionSelected, "#packs")
    def _chosen(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        if event.option.id:
            self.dismiss(event.option.id)
