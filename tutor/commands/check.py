"""`check`: grade backward code for one step, or every `# %% STEP_ID` cell of a file."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

from tutor.commands.base import (
    Command,
    UsageError,
    code_argument,
    lesson_pack,
    position,
    read_source,
    regraded_steps,
    step_id,
    try_open_store,
)
from tutor.config import Settings
from tutor.evaluator import warm
from tutor.evaluator.client import Evaluator, EvaluatorError
from tutor.sandbox.screen import screen
from tutor.session.cells import parse_cells
from tutor.session.controller import Lesson, cell_size_problem, save
from tutor.session.report import format_result, format_table, wrap
from tutor.source import MAX_FILE_BYTES
from tutor.values.results import CheckError, CheckResult


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument("step", nargs="?", metavar="STEP_ID", help="step id, number or name")
    p.add_argument("source", nargs="?", metavar="-", help="`-` reads the code from stdin")
    p.add_argument("--code", metavar="TEXT", help="the backward code itself")
    p.add_argument("--file", metavar="PATH", help="a file holding the backward code")
    p.add_argument(
        "--all",
        metavar="FILE",
        dest="all_file",
        # argparse reads help as a %-format: %%%% prints the cell marker's %%.
        help="check every `# %%%% STEP_ID` cell of a percent-format file, in order",
    )
    p.add_argument(
        "--json", action="store_true", help="print JSON (an object, or a list with --all)"
    )
    p.add_argument(
        "--no-record", action="store_true", help="do not record the attempt in your progress"
    )


def run(args: argparse.Namespace, settings: Settings) -> int:
    pack = lesson_pack(settings)
    if args.all_file:
        if args.step or args.code or args.file or args.source:
            raise UsageError("--all FILE checks a whole file; give no step or code with it")
        return _run_all(args, settings, pack)
    if not args.step:
        raise UsageError("which step? `check STEP_ID --code TEXT` (or --file PATH, or -)")
    sid = step_id(pack, args.step)
    sources = [s for s in (args.code, args.file, args.source) if s is not None]
    if len(sources) != 1:
        raise UsageError("give the code exactly one way: --code TEXT, --file PATH, or - for stdin")
    if args.source not in (None, "-"):
        raise UsageError(f"unexpected argument '{args.source}' (use --file to read a file)")
    code = code_argument(args.code) if args.code is not None else read_source(args.file or "-")
    if pack.step(sid).kind.trained:
        raise UsageError("the training step runs with `backprop-tutor train`")
    store, prior, problem = _progress(args, settings, pack)
    _, refused = screen(code)
    try:
        if refused is not None:
            # Refused before anything runs, as the engine would refuse it: no torch, no worker.
            session = Lesson(pack, store, None, problem)
            result = CheckResult(pack.step(sid).id, passed=False,
                                 error=CheckError.from_dict(refused))
        else:
            session = Lesson(pack, store, None, problem)

            def evaluate(ev: Evaluator) -> CheckResult:
                session.evaluator = ev
                return session.evaluate(sid, code, prior)

            # A warm worker with the same settings answers where there is one (evaluator/warm.py).
            result = warm.using(settings, evaluate)
    except EvaluatorError as exc:
        if store is not None:
            store.close()
        print(f"backprop-tutor: {exc}", file=sys.stderr)
        return 1
    # The verdict goes out first: whatever then happens to the record, the learner has seen it.
    text = (json.dumps(result.to_dict(), indent=2) if args.json else
            format_result(result, position(pack, sid)))
    locked = session.locked_reason(sid) if store is not None and not args.json else None
    if locked:
        # The TUI and the notebook open steps in order; the command line checks any, and says so.
        text += "\n" + "\n".join(wrap(f"note: {locked} This attempt is recorded; the step "
                                      "opens in the tutor once the steps before it are done.",
                                      ""))
    print(text, flush=True)
    if not args.no_record:
        _record(session, lambda: [session.record(sid, code, result).problem])
    return 0 if result.passed else 1


def _progress(args: argparse.Namespace, settings: Settings, pack):
    """(store, accepted code of earlier steps, None), or (None, {}, why progress is unusable).

    Progress that cannot be read does not stop a check: the verdict matters more than its
    record, and earlier steps then replay their reference solutions.
    """
    if args.no_record:
        return None, {}, None
    store, problem = try_open_store(settings, pack)
    if store is None:
        return None, {}, problem
    prior: dict[str, str] = {}
    problem = save(lambda: prior.update(store.accepted_codes()))
    if problem:
        store.close()
        return None, {}, problem
    return store, prior, None


def _record(session: Lesson, write: Callable[[], list[str | None]]) -> None:
    """Record after the verdict is printed; one warning line when something was not saved."""
    if session.store is None:
        print("backprop-tutor: warning: not saved to your progress, which could not be used "
              f"(earlier steps were checked with their reference solutions): {session.problem}",
              file=sys.stderr)
        return
    try:
        report_unsaved(write())
    finally:
        session.store.close()


def report_unsaved(reasons: list[str | None]) -> None:
    """One warning line for the attempts that could not be saved (`reasons` has, per attempt,
    why it was not saved, or None when it was)."""
    failed = [r for r in reasons if r]
    if not failed:
        return
    what = "this attempt was" if len(reasons) == 1 else (
        f"{len(failed)} of {len(reasons)} attempts were")
    print(f"backprop-tutor: warning: {what} not saved to your progress (tried twice): "
          f"{failed[-1]}", file=sys.stderr)


def _run_all(args: argparse.Namespace, settings: Settings, pack) -> int:
    text = read_source(args.all_file, MAX_FILE_BYTES)
    cells = parse_cells(text)
    if not cells:
        raise UsageError(f"{args.all_file} has no `# %% STEP_ID` cells")
    for cell in cells:  # refused before anything starts, as a single code file would be
        too_big = cell_size_problem(cell, cell.step)
        if too_big:
            raise UsageError(too_big)
    store, prior, problem = _progress(args, settings, pack)
    session = Lesson(pack, store, None, problem)

    def check_all(ev: Evaluator) -> list[CheckResult]:
        session.evaluator = ev
        return session.check_cells(text, prior)

    try:
        results = warm.using(settings, check_all)
    except EvaluatorError as exc:
        print(f"backprop-tutor: {exc}", file=sys.stderr)
        if store is not None:
            store.close()
        return 1
    table = format_table(results, regraded_steps(pack), Path(args.all_file).name)
    print(json.dumps([r.to_dict() for r in results], indent=2) if args.json else table,
          flush=True)
    if not args.no_record:
        _record(session, lambda: session.record_cells(text, results))
    return 0 if all(r.passed for r in results) else 1


CHECK = Command("check", "check backward code for a step against autograd", _args, run)
