"""`pack new FORWARD.py --out DIR`: make a pack from a forward pass (tutor/authoring/new.py)."""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

from tutor.commands.base import UsageError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", metavar="DIR", help="new: the folder to write the pack in")
    p.add_argument("--force", action="store_true",
                   help="new: write over a pack already in --out")
    p.add_argument("--id", dest="pack_id", metavar="ID", help="new: the pack's id (default: the "
                   "folder's name)")
    p.add_argument("--title", help="new: the lesson's title (default: the file's docstring)")
    p.add_argument("--batch-size", type=int, metavar="N",
                   help="new: the lesson's batch (default: the file's batch_size, else 32)")


def run(args: argparse.Namespace) -> int:
    # Importing torch without NumPy present prints a warning that means nothing here.
    warnings.filterwarnings("ignore", message=".*NumPy.*")
    try:
        from tutor.authoring.forward_file import Unusable
        from tutor.authoring.new import make
    except ImportError:  # the student build holds nothing that derives a step's code
        raise UsageError("pack new is not part of this build (the tutor for students derives "
                         "no lesson); install the full backprop-tutor to make packs") from None

    if not args.out:
        raise UsageError("pack new needs --out DIR, the folder to write the pack in")
    try:
        made = make(Path(args.folder).expanduser(), Path(args.out).expanduser(),
                    pack_id=args.pack_id, title=args.title, batch_size=args.batch_size,
                    force=args.force)
    except Unusable as exc:
        raise UsageError(str(exc)) from None
    except RuntimeError as exc:  # the tutor's own failure, said in a line
        print(f"backprop-tutor pack: {exc}", file=sys.stderr)
        return 1
    print(f"{made.folder}: {made.steps} steps, {made.mistakes} catalogued mistakes"
          f"{', a training exercise' if made.training else ''}, made in "
          f"{max(made.seconds, _since_start()):.1f} s")
    for todo in made.todo:
        print(f"  TODO {todo}")
    print(f"next: backprop-tutor pack check {made.folder}")
    return 0


def _since_start() -> float:
    """Seconds since this process started, its imports included (what the author waited):
    read from /proc where there is one, else 0 (the derivation's own time is said then)."""
    import os

    try:
        with open("/proc/self/stat") as f:
            started = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22, in clock ticks
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return max(0.0, uptime - started / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0.0
