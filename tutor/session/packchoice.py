"""Which lesson opens: the installed packs offered at launch, and the one opened last.

Progress is kept per pack, so choosing is all it takes to switch lessons. Any front end that
lets the learner choose asks these; the default pack is `packs.DEFAULT_PACK`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from tutor.config import Settings, config_file
from tutor.pack.model import Pack, PackError, find_pack, installed_packs, load_pack

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
    return installed_choices()


def installed_choices() -> list[str]:
    """Every installed pack that loads, when there are several (what ctrl+l offers, whichever
    lesson was named at launch); else an empty list."""
    packs = [name for name in installed_packs() if loadable_pack(name) is not None]
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
    # bad since then only costs the chooser. tomllib is imported only when there is a file:
    # its import is a noticeable part of the TUI's first frame.
    if not path.is_file():
        return {}
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return {}


def loadable_pack(name: str) -> Pack | None:
    """The pack, or None when it does not load (a broken pack is not offered)."""
    try:
        return load_pack(find_pack(name))
    except (PackError, OSError):
        return None
