"""The subcommands of `backprop-tutor`, in the order `--help` lists them.

Each lives in a module of its own, imported only when its command runs (or `--help` lists them
all): a one-shot command should not wait for the modules of the others, some of which load
a web server's or a grader's.
"""

from __future__ import annotations

from importlib import import_module

from tutor.commands.base import Command

# name: (module under tutor.commands, the Command's name there)
WHERE: dict[str, tuple[str, str]] = {
    "list": ("steps", "LIST"),
    "show": ("steps", "SHOW"),
    "hint": ("hint", "HINT"),
    "check": ("check", "CHECK"),
    "progress": ("progress", "PROGRESS"),
    "reset": ("progress", "RESET"),
    "export": ("export", "EXPORT"),
    "watch": ("export", "WATCH"),
    "warm": ("warm", "WARM"),
    "train": ("train", "TRAIN"),
    "grade": ("grade", "GRADE"),
    "autograder": ("autograder", "AUTOGRADER"),
    "pack": ("pack", "PACK"),
    "notebook": ("notebook", "NOTEBOOK"),
    "serve": ("serve", "SERVE"),
}


def command(name: str) -> Command:
    module, attr = WHERE[name]
    found = getattr(import_module(f"tutor.commands.{module}"), attr)
    assert found.name == name, (name, found.name)
    return found


def __getattr__(name: str) -> list[Command]:
    # `COMMANDS`, every command, for whoever wants them all (the full --help, tests).
    if name == "COMMANDS":
        return [command(n) for n in WHERE]
    raise AttributeError(name)
