"""`export` and `watch`: take your work to your own editor, and keep checking it there."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tutor.commands.base import Command, UsageError, open_store, read_source
from tutor.config import Settings
from tutor.export import export_script
from tutor.packs import load_pack


def _export_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", metavar="FILE", help="write to FILE instead of standard output")


def run_export(args: argparse.Namespace, settings: Settings) -> int:
    pack = load_pack()
    store = open_store(settings, pack)
    if store is None:
        return 1
    with store:
        accepted = store.accepted_codes()
    name = Path(args.out).name if args.out else "backward.py"
    script = export_script(pack, settings, accepted, name)
    if not args.out:
        sys.stdout.write(script)
        return 0
    try:
        Path(args.out).write_text(script, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {args.out}: {exc.strerror or exc}") from None
    solved = sum(1 for s in pack.gradient_steps if s.id in accepted)
    print(f"wrote {args.out}: {solved} of {len(pack.gradient_steps)} steps solved, the rest as "
          f"templates. Run it with `python {args.out}`, check it with "
          f"`backprop-tutor check --all {args.out}`.", file=sys.stderr)
    return 0


def _watch_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE", help="a percent-format file with `# %% STEP_ID` cells")


def run_watch(args: argparse.Namespace, settings: Settings) -> int:
    from watchfiles import watch

    from tutor.commands.check import check_cells, record_cells
    from tutor.report import format_table
    from tutor.sandbox.client import Evaluator, EvaluatorError

    path = Path(args.file).resolve()
    read_source(str(path))  # a clear usage error now rather than a silent watch of nothing
    pack = load_pack()
    store = open_store(settings, pack)
    if store is None:
        return 1

    def run_once(ev: Evaluator) -> None:
        text = path.read_text(encoding="utf-8")
        results = check_cells(ev, pack, text, store.accepted_codes())
        record_cells(store, pack, text, results)
        if sys.stdout.isatty():
            sys.stdout.write("\033[2J\033[H")
        print(format_table(results))
        print(f"\nwatching {path.name} — save it to check again, Ctrl+C to stop", flush=True)

    try:
        with store, Evaluator(settings) as ev:
            ev.info()
            run_once(ev)
            # Watch the folder, not the file: editors often save by writing a new file and
            # renaming it over the old one, which a watch on the file itself would lose.
            for _ in watch(path.parent, watch_filter=lambda _c, p: Path(p) == path,
                           debounce=300, raise_interrupt=False):
                if path.exists():
                    run_once(ev)
    except EvaluatorError as exc:
        print(f"backprop-tutor: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    print("stopped watching", file=sys.stderr)
    return 0


EXPORT = Command("export", "write your work as a standalone percent-format Python script",
                 _export_args, run_export)
WATCH = Command("watch", "re-check a percent-format file every time it is saved",
                _watch_args, run_watch)
