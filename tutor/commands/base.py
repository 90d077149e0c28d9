"""What every subcommand shares: its shape, usage errors, and opening the progress store."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tutor.config import Settings
from tutor.packs import Pack, load_pack


class UsageError(Exception):
    """Wrong command-line input: printed, and the exit code is 2."""


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace, Settings], int]


def step_id(pack: Pack, given: str) -> str:
    """Resolve a step given by id, number or unambiguous name; a clear error otherwise."""
    try:
        return pack.step(given).id
    except KeyError:
        ids = ", ".join(s.id for s in pack.steps[:4])
        raise UsageError(
            f"no step '{given}'. Step ids look like {ids}, ...; `backprop-tutor list` shows all."
        ) from None


def open_store(settings: Settings, pack: Pack | None = None):
    """The learner's progress store; None (with a message on stderr) when it cannot be used."""
    from tutor.progress import Store, StoreError

    try:
        store = Store.open(settings.data_home, pack or load_pack())
    except StoreError as exc:
        print(f"backprop-tutor: {exc}", file=sys.stderr)
        return None
    for notice in store.notices:
        print(f"backprop-tutor: {notice}", file=sys.stderr)
    return store


def read_source(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"no such file: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {path}: {exc}") from None
