"""`check`: grade backward code for one step, or every `# %% STEP_ID` cell of a file."""

from __future__ import annotations

import argparse
import json
import sys

from tutor.cells import parse_cells
from tutor.commands.base import Command, UsageError, open_store, read_source, step_id
from tutor.config import Settings
from tutor.packs import load_pack
from tutor.report import format_result, format_table
from tutor.sandbox.client import Evaluator, EvaluatorError


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument("step", nargs="?", metavar="STEP_ID", help="step id, number or name")
    p.add_argument("source", nargs="?", metavar="-", help="`-` reads the code from stdin")
    p.add_argument("--code", metavar="TEXT", help="the backward code itself")
    p.add_argument("--file", metavar="PATH", help="a file holding the backward code")
    p.add_argument(
        "--all",
        metavar="FILE",
        dest="all_file",
        help="check every `# %% STEP_ID` cell of a percent-format file, in order",
    )
    p.add_argument(
        "--json", action="store_true", help="print JSON (an object, or a list with --all)"
    )
    p.add_argument(
        "--no-record", action="store_true", help="do not record the attempt in your progress"
    )


def run(args: argparse.Namespace, settings: Settings) -> int:
    pack = load_pack()
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
    code = args.code if args.code is not None else read_source(args.file or "-")
    if pack.step(sid).is_training:
        raise UsageError("the training step runs with `backprop-tutor train`")
    store = None if args.no_record else open_store(settings, pack)
    if store is None and not args.no_record:
        return 1
    try:
        with Evaluator(settings) as ev:
            prior = store.accepted_codes() if store else {}
            result = ev.check(sid, code, prior)
    except EvaluatorError as exc:
        print(f"backprop-tutor: {exc}", file=sys.stderr)
        return 1
    if store:
        store.record_attempt(sid, code, result)
        store.close()
    print(json.dumps(result, indent=2) if args.json else format_result(result))
    return 0 if result["passed"] else 1


def check_cells(ev: Evaluator, pack, text: str, prior: dict[str, str]) -> list[dict]:
    """Check each cell in order. A failing cell's step falls back to the reference for the cells
    after it, so one mistake is reported once instead of cascading."""
    prior = dict(prior)
    results = []
    for cell in parse_cells(text):
        try:
            sid = pack.step(cell.step).id
        except KeyError:
            results.append(_cell_error(cell.step, f"line {cell.line}: no step '{cell.step}'"))
            continue
        if pack.step(sid).is_training:
            results.append(_cell_error(sid, "the training cell runs with `backprop-tutor train`"))
            continue
        result = ev.check(sid, cell.code, prior)
        result["cell_line"] = cell.line
        results.append(result)
        if result["passed"]:
            prior[sid] = cell.code
        else:
            prior.pop(sid, None)
    return results


def record_cells(store, pack, text: str, results: list[dict]) -> None:
    """Record each checked cell as an attempt, as the TUI would; untouched templates are not
    attempts, and cells naming no step have nothing to record."""
    for cell, result in zip(parse_cells(text), results, strict=False):
        if (result.get("error") or {}).get("kind") == "usage":
            continue
        if cell.code.strip() == pack.step(result["step"]).template.strip():
            continue
        store.record_attempt(result["step"], cell.code, result)


def _cell_error(step: str, message: str) -> dict:
    return {
        "step": step,
        "passed": False,
        "checks": [],
        "heldout": None,
        "stdout": "",
        "notes": [],
        "figure": None,
        "error": {"kind": "usage", "message": message, "line": None, "col": None},
    }


def _run_all(args: argparse.Namespace, settings: Settings, pack) -> int:
    text = read_source(args.all_file)
    if not parse_cells(text):
        raise UsageError(f"{args.all_file} has no `# %% STEP_ID` cells")
    store = None if args.no_record else open_store(settings, pack)
    if store is None and not args.no_record:
        return 1
    try:
        with Evaluator(settings) as ev:
            results = check_cells(ev, pack, text, store.accepted_codes() if store else {})
    except EvaluatorError as exc:
        print(f"backprop-tutor: {exc}", file=sys.stderr)
        return 1
    if store:
        record_cells(store, pack, text, results)
        store.close()
    print(json.dumps(results, indent=2) if args.json else format_table(results))
    return 0 if all(r["passed"] for r in results) else 1


CHECK = Command("check", "check backward code for a step against autograd", _args, run)
