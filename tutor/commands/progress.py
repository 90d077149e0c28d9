"""`progress` and `reset`: what the learner has done, and starting parts of it over."""

from __future__ import annotations

import argparse
import json
import sys

from tutor.commands.base import Command, UsageError, lesson_pack, open_store, step_id
from tutor.config import Settings
from tutor.session.controller import Lesson, tally
from tutor.session.report import progress_table


def _progress_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print a JSON object")



def run_progress(args: argparse.Namespace, settings: Settings) -> int:
    store = open_store(settings)
    if store is None:
        return 1
    with store:
        rows = Lesson(store.pack, store, None).summary()
    if args.json:
        print(json.dumps({"steps": rows, "total": tally(rows).to_dict()}, indent=2))
    else:
        print(progress_table(rows))
    return 0


def _reset_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("step", nargs="?", metavar="STEP_ID", help="the step to start over")
    p.add_argument("--all", action="store_true", help="start the whole lesson over")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")


def _confirm(question: str) -> bool:
    if not sys.stdin.isatty():
        print("not resetting: no terminal to confirm on (add --yes)", file=sys.stderr)
        return False
    answer = input(f"{question} [y/N] ").strip().lower()
    return answer in ("y", "yes")


def run_reset(args: argparse.Namespace, settings: Settings) -> int:
    if bool(args.step) == bool(args.all):
        raise UsageError("name one step to reset, or --all")
    pack = lesson_pack(settings)
    sid = step_id(pack, args.step) if args.step else None
    store = open_store(settings, pack)
    if store is None:
        return 1
    with store:
        lesson = Lesson(pack, store, None)
        if args.all:
            plan = ("This clears every step's status, accepted code, hints and drafts. Your "
                    "attempt history, time and training runs are kept.")
        else:
            affected = lesson.redone_by_reset(sid)
            plan = f"This clears {sid}: its status, accepted code, hints and draft."
            if affected:
                plan += (" These later steps replay its code, so they go back to be redone "
                         "(their accepted code becomes their draft): " + ", ".join(affected) + ".")
            else:
                plan += " No other step depends on it."
        print(plan)
        if not args.yes and not _confirm("Reset?"):
            print("Nothing was changed.")
            return 1
        if args.all:
            lesson.reset_all()
            print("Everything was reset.")
        else:
            changed = lesson.reset(sid)
            print(f"Reset {sid}." + (f" Changed: {', '.join(changed)}." if changed else ""))
    return 0


PROGRESS = Command("progress", "show your progress per step and in total",
                   _progress_args, run_progress)
RESET = Command("reset", "start a step (and what depends on it) or everything over",
                _reset_args, run_reset)
