"""What every subcommand shares: its shape, usage errors, and opening the progress store."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass

from tutor import source
from tutor.config import Settings
from tutor.pack.model import Pack

# Shared with the notebook's magics, so kept below both front ends; named here for the commands.
from tutor.session.lookup import UsageError, lesson_pack, position, step_id, try_open_store

__all__ = ["Command", "UsageError", "code_argument", "lesson_pack", "open_store", "position",
           "read_source", "regraded_steps", "step_id", "try_open_store"]


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace, Settings], int]


def regraded_steps(pack: Pack) -> set[str]:
    """Steps that grade a tensor an earlier step graded already (the fused exercises redo
    dlogits and dhprebn). Their rows in a table carry the step id, so the two can be told apart."""
    seen: set[str] = set()
    regraded = set()
    for step in pack.gradient_steps:
        if not step.kind.of_forward_tensors:
            continue  # its outputs are its own, whatever they are called
        if seen.intersection(step.checks):
            regraded.add(step.id)
        seen.update(step.checks)
    return regraded


def open_store(settings: Settings, pack: Pack | None = None):
    """The learner's progress store; None (with a message on stderr) when it cannot be used."""
    store, problem = try_open_store(settings, pack)
    if problem:
        print(f"backprop-tutor: {problem}", file=sys.stderr)
    return store


def read_source(path: str, limit: int = source.MAX_CODE_BYTES) -> str:
    """A file's text (stdin for "-"), as UTF-8; a usage error naming the problem otherwise."""
    try:
        return source.read(path, limit)
    except FileNotFoundError:
        raise UsageError(f"no such file: {path}") from None
    except source.SourceError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None


def code_argument(code: str, name: str = "--code") -> str:
    """Code given on the command line, held to the same rules as a file."""
    try:
        code = source.from_argument(code, name)
    except source.SourceError as exc:
        raise UsageError(str(exc)) from None
    too_big = source.size_problem(code, name)
    if too_big:
        raise UsageError(too_big)
    return code
