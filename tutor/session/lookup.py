"""What every front end that takes typed input shares: the pack the settings name, a step as the
learner gave it, where it sits, and the progress store opened with its notices said.

The command line and the notebook's magics both use these (each says a `UsageError` its own
way: the CLI prints it and exits 2, a magic shows it under the cell). Above the controller.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from tutor.config import Settings
from tutor.pack.model import Pack, find_pack, load_pack
from tutor.session.errors import StoreError

if TYPE_CHECKING:
    from tutor.session.store import Store


class UsageError(Exception):
    """Wrong input from the learner (a flag, a step, a magic's line): said in one line."""


def lesson_pack(settings: Settings) -> Pack:
    """The pack the settings name (`--pack`, default makemore)."""
    return load_pack(find_pack(settings.pack))


def step_id(pack: Pack, given: str) -> str:
    """Resolve a step given by id, number or unambiguous name; a clear error otherwise."""
    try:
        return pack.step(given).id
    except KeyError:
        ids = ", ".join(s.id for s in pack.steps[:4])
        raise UsageError(
            f"no step {_typed(given)}. Step ids look like {ids}, ...; `backprop-tutor list` "
            "shows all."
        ) from None


def position(pack: Pack, sid: str) -> str:
    """Where a step sits, in the one count every front end uses: all the pack's steps, the
    training step included, numbered as `list` numbers them (and as STEP_ID accepts them)."""
    step = pack.step(sid)
    return f"exercise {step.exercise}, step {pack.index(sid) + 1} of {len(pack.steps)}"


def try_open_store(settings: Settings, pack: Pack | None = None) -> tuple[Store | None, str | None]:
    """(the learner's progress store, None), or (None, why it cannot be used)."""
    from tutor.session.controller import open_store  # not before the TUI's first frame

    try:
        store = open_store(settings.data_home, pack or lesson_pack(settings))
    except StoreError as exc:
        return None, str(exc)
    for notice in store.notices:
        print(f"backprop-tutor: {notice}", file=sys.stderr)
    return store, None


def _typed(text: str) -> str:
    """What the user typed, quoted; with anything unprintable in it written as an escape, so
    that it neither reaches the terminal raw nor reads as another id once cleaned."""
    return f"'{text}'" if text.isprintable() else ascii(text)
