"""`notebook`: write the lesson as a Jupyter workbook that checks its cells with the tutor."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tutor.commands.base import Command, UsageError, lesson_pack
from tutor.config import Settings
from tutor.session.workbook import dumps, workbook


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", metavar="FILE.ipynb",
                   help="where to write it (default: the pack's id, e.g. makemore.ipynb)")
    p.add_argument("--force", action="store_true",
                   help="overwrite FILE if it is there (the work in it is lost)")
    p.add_argument("--no-shapes", action="store_true",
                   help="leave out the shapes (they need PyTorch to start, about two seconds)")


def _shapes(settings: Settings) -> dict[str, dict]:
    from tutor.evaluator.client import Evaluator, EvaluatorError

    try:
        with Evaluator(settings) as ev:
            return {line["target"]: line for line in ev.info()["lines"]}
    except EvaluatorError as exc:
        raise UsageError(f"{exc} (--no-shapes writes the workbook without them)") from None


def run(args: argparse.Namespace, settings: Settings) -> int:
    pack = lesson_pack(settings)
    out = Path(args.out or f"{pack.id}.ipynb")
    if out.suffix != ".ipynb":
        raise UsageError(f"{out} does not end in .ipynb; Jupyter would not open it as a notebook")
    if out.exists() and not args.force:
        raise UsageError(f"{out} is already there and may hold your work; give another --out, "
                         "or --force to overwrite it")
    text = dumps(workbook(pack, settings, {} if args.no_shapes else _shapes(settings)))
    try:
        out.write_text(text, encoding="utf-8")
    except OSError as exc:
        print(f"backprop-tutor notebook: cannot write {out}: {exc.strerror or exc}",
              file=sys.stderr)
        return 1
    print(f"wrote {out}: open it in Jupyter (needs the tutor's `notebook` extra) "
          "and run its cells from the top")
    return 0


NOTEBOOK = Command("notebook", "write the lesson as a Jupyter workbook (%%check cells)", _args, run)
