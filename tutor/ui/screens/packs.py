"""Choosing the lesson at launch, when several packs are installed and the learner named none.

Progress is kept per pack, so choosing is all it takes to switch lessons: the app opens the
chosen pack's progress and starts its checker only once the choice is made.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from tutor.config import Settings, config_file
from tutor.packs import Pack, PackError, find_pack, installed_packs, load_pack
from tutor.ui import palette
from tutor.ui.palette import DIM

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

PACK_VARIABLE = "BACKPROP_TUTOR_PACK"
LAST_PACK = "last-pack"  # a file in the data folder: the lesson opened last


def offered_packs(settings: Settings, environ: Mapping[str, str] = os.environ,
                  config: Path | None = None) -> list[str]:
    """The installed packs to choose from at launch: all that load, when there are several and
    the learner named none; else an empty list.

    Settings do not say where their pack came from, so any pack but the default counts as
    named, and so does one set in the environment or the config file. `--pack` naming the
    default pack looks like no choice here: the command line can pass `packs=[]` to `run_app`.
    """
    if settings.pack != Settings().pack or environ.get(PACK_VARIABLE):
        return []
    if "pack" in _config(config or config_file()):
        return []
    packs = [name for name in installed_packs() if _pack(name) is not None]
    return packs if len(packs) > 1 else []


def last_pack(home: Path) -> str | None:
    """The lesson opened last from this data folder, if any."""
    try:
        return (home / LAST_PACK).read_text(encoding="utf-8").strip() or None
    except (OSError, UnicodeDecodeError):
        return None


def remember_pack(home: Path, name: str) -> None:
    """Keep the lesson just opened, so the next launch opens it directly. Losing this costs
    the learner one question at the next launch, so a failure is not reported."""
    try:
        home.mkdir(parents=True, exist_ok=True)
        (home / LAST_PACK).write_text(name + "\n", encoding="utf-8")
    except OSError:
        pass


def _config(path: Path) -> dict:
    # `resolve` has read this file already and refused it if it was wrong; a file that went
    # bad since then only costs the chooser.
    try:
        return tomllib.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return {}


def _pack(name: str) -> Pack | None:
    """The pack, or None when it does not load (a broken pack is not offered)."""
    try:
        return load_pack(find_pack(name))
    except (PackError, OSError):
        return None


def _label(name: str) -> Text:
    pack = _pack(name)
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
