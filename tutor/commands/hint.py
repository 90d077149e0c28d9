"""`hint`: a step's next hint, counted in the learner's progress as the tutor's F1 counts it."""

from __future__ import annotations

import argparse
import json
import sys

from tutor.commands.base import Command, lesson_pack, open_store, position, step_id
from tutor.config import Settings
from tutor.pack.model import Step
from tutor.session.controller import Lesson
from tutor.session.report import terminal_width, wrap


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument("step", metavar="STEP_ID", help="step id, number or name (see `list`)")
    p.add_argument("--all", action="store_true",
                   help="print every hint shown so far, without showing a new one")
    p.add_argument("--json", action="store_true", help="print a JSON object")


def run(args: argparse.Namespace, settings: Settings) -> int:
    pack = lesson_pack(settings)
    step = pack.step(step_id(pack, args.step))
    store = open_store(settings, pack)
    if store is None:  # without the count there is no telling which hint is next
        return 1
    with store:
        hints = Lesson(pack, store, None).next_hint(step.id, count=not args.all)
    shown = len(hints.shown)
    if args.json:
        print(json.dumps({"step": step.id, "shown": shown, "total": hints.total,
                          "new": hints.new, "hints": list(hints.shown)}, indent=2))
    else:
        print("\n".join(_text(step, position(pack, step.id), shown, args.all)))
    if hints.problem:
        print("backprop-tutor: warning: this hint was not counted in your progress: "
              f"{hints.problem}", file=sys.stderr)
    return 0


def _text(step: Step, where: str, shown: int, every: bool) -> list[str]:
    """The lines to print: a heading, then the hints asked for, numbered as the tutor shows
    them (idea, then shapes, then nearly the answer)."""
    total, width = len(step.hints), terminal_width()
    if shown == 0:
        return wrap(f"{step.id} ({where}): no hints shown yet. `backprop-tutor hint {step.id}` "
                    "shows the first.", "", "  ", width)
    numbers = range(1, shown + 1) if every else [shown]
    heading = (f"hints 1 to {shown} of {total}" if every and shown > 1
               else f"hint {shown} of {total}")
    lines = [f"{step.id} ({where}): {heading}"]
    for k in numbers:
        lines += wrap(step.hints[k - 1], f"  {k}. ", " " * 5, width)
    if not every:
        after = (f"That was the last hint; `backprop-tutor hint {step.id} --all` shows all "
                 "of them." if shown == total
                 else f"`backprop-tutor hint {step.id}` again gives the next one.")
        lines += wrap(after, "  ", "    ", width)
    return lines


HINT = Command("hint", "show the next hint for a step (the tutor counts the hints you use)",
               _args, run)
