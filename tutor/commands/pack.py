"""`pack check DIR`: validate a pack by running it; `pack new FORWARD.py --out DIR`: make one
from a forward pass (tutor/commands/pack_new.py). For people who write packs."""

from __future__ import annotations

import argparse
import contextlib
import sys
import warnings
from pathlib import Path

from tutor.commands import pack_new
from tutor.commands.base import Command, UsageError
from tutor.config import Settings


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=["check", "new"], help="what to do with the pack")
    p.add_argument("folder", metavar="PATH", help="check: the pack's folder (the one with "
                   "pack.toml); new: the forward file to make a pack from")
    pack_new.add_arguments(p)


def run(args: argparse.Namespace, settings: Settings) -> int:
    if args.action == "new":
        return pack_new.run(args)
    # Importing torch without NumPy present prints a warning that means nothing here.
    warnings.filterwarnings("ignore", message=".*NumPy.*")
    from tutor.evaluator.packcheck import check_pack

    root = Path(args.folder).expanduser()
    if not (root / "pack.toml").is_file():
        raise UsageError(f"{args.folder} has no pack.toml; give the folder of a pack")
    # The pack's own code runs in this process (its setup, data, forward pass, training): under
    # the OS layers a worker puts it under, from before it first runs.
    from tutor.evaluator.worker import confined
    from tutor.pack.model import PackError, load_pack

    # A pack that does not load runs none of its code: check_pack says why.
    with contextlib.suppress(PackError, OSError, ValueError):
        confined(load_pack(root), settings)
    problems = check_pack(root, settings,
                          progress=lambda text: print(f"  {text}", file=sys.stderr))
    if not problems:
        print(f"{root}: the pack is ready (reference solutions, mistakes, content, training)")
        return 0
    print(f"{root}: {len(problems)} problem{'s' if len(problems) != 1 else ''}")
    for problem in problems:
        print(f"  {problem}")
    return 1


PACK = Command("pack", "check a pack (solutions, mistakes, hints, a short training run), or "
               "make one from a forward pass",
               _args, run)
