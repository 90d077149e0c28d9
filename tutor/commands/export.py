"""`export` and `watch`: take your work to your own editor, and keep checking it there."""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

from tutor import source
from tutor.commands.base import (
    Command,
    UsageError,
    lesson_pack,
    open_store,
    read_source,
    regraded_steps,
)
from tutor.config import Settings
from tutor.pack.model import Pack
from tutor.session.controller import Lesson, save, tally
from tutor.session.export import TrainingCell, export_script


def _export_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", metavar="FILE", help="write to FILE instead of standard output")
    p.add_argument("--force", action="store_true",
                   help="replace FILE even when it holds something else (your edits, say)")


def run_export(args: argparse.Namespace, settings: Settings) -> int:
    if args.out is not None:
        _check_out(args.out)
    pack = lesson_pack(settings)
    store = open_store(settings, pack)
    if store is None:
        return 1
    with store:
        lesson = Lesson(pack, store, None)
        accepted, rows = lesson.accepted_codes(), lesson.summary()
        training = training_cell(lesson, pack, accepted)
    name = Path(args.out).name if args.out else "backward.py"
    statuses = {r["id"]: r["status"] for r in rows}
    script = export_script(pack, settings, accepted, name, statuses, training)
    if not args.out:
        sys.stdout.write(script)
        return 0
    target = Path(args.out)
    if target.is_file() and not args.force and _other_text(target, script):
        # A script exported earlier is where a learner works (`check --all`, `watch`).
        raise UsageError(f"--out {args.out} exists and holds something else (your edits?); "
                         "give --force to replace it, or another file name")
    try:
        target.write_text(script, encoding="utf-8")
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot write --out {args.out}: {_why(exc)}") from None
    beside = _data_beside(pack, Path(args.out))
    # The gradient steps are counted as cells; the training step is said apart.
    cells = tally(r for r in rows if not pack.step(r["id"]).kind.trained)
    rest = ", the rest as templates" if cells.done < cells.steps else ""
    number = next((s.exercise for s in pack.steps if s.kind.trained), None)
    trained = (f"; exercise {number}'s training step ({training.origin})" if training else
               "; no training step yet (train, then export again)")
    print(f"wrote {args.out}: {cells.sentence()}{rest}{trained}. Run it with "
          f"`python {args.out}`, check it with `backprop-tutor check --all {args.out}`, "
          f"grade it with `backprop-tutor grade {args.out}`.{beside}", file=sys.stderr)
    return 0


def _other_text(path: Path, script: str) -> bool:
    try:
        return path.read_text(encoding="utf-8") != script
    except (OSError, UnicodeDecodeError):
        return True


def _data_beside(pack, out: Path) -> str:
    """The script reads the lesson's data file beside itself (it names no folder of this
    computer): put a copy there when there is none, and say so."""
    import shutil

    if not pack.data_file:
        return ""
    source, target = Path(pack.data_file), out.with_name(Path(pack.data_file).name)
    if target.exists():
        return ""
    try:
        shutil.copyfile(source, target)
    except OSError:
        return (f" It reads {target.name} beside it: copy the lesson's {target.name} there, or "
                f"give its path (`python {out} path/to/{target.name}`).")
    return f" {target.name}, which it reads, is beside it."


def training_cell(lesson: Lesson, pack: Pack, accepted: dict[str, str]) -> TrainingCell | None:
    """Exercise 4's code as the learner left it: the run that passed, else the last run of
    their own code, else the exercise-4 screen's draft; None before any of them. Code the
    tutor assembled but the learner never ran is not exported: it would hand in references
    for the steps not solved yet."""
    step = next((s for s in pack.steps if s.kind.trained), None)
    if step is None:
        return None
    if (accepted.get(step.id) or "").strip():
        return TrainingCell(step.id, accepted[step.id], "passed: the code of your run that passed")
    own = [r for r in lesson.training_runs()
           if (r.code or "").strip() and not r.settings.reference and r.settings.broken is None]
    if own:
        return TrainingCell(step.id, own[-1].code or "",
                            "not passed yet: the code of your last run")
    draft = lesson.draft(step.id)
    if draft and draft.strip():
        return TrainingCell(step.id, draft, "not trained yet: your training-screen draft")
    return None


def _check_out(out: str) -> None:
    """Refuse an --out that cannot work before reading any progress. The name goes into the
    script's comments, which are UTF-8, so it must be UTF-8 too."""
    try:
        source.from_argument(out, "--out", " Choose a file name in UTF-8.")
    except source.SourceError as exc:
        raise UsageError(str(exc)) from None
    if not out.strip():
        raise UsageError("--out must name a file, not ''")
    if Path(out).is_dir():
        raise UsageError(f"--out {out} is a folder; name a file in it, like "
                         f"{Path(out) / 'backward.py'}")


def _why(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or str(exc)


CLEAR = "\033[H\033[2J\033[3J"  # home, clear the screen, clear the scrollback (as `clear` does)


def _show(text: str) -> None:
    """Replace the previous check's output on a terminal; append to a pipe or a file, whose
    reader wants every run and no escape codes."""
    if sys.stdout.isatty():
        sys.stdout.write(CLEAR)
    print(text, flush=True)


def _watch_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE", help="a percent-format file with `# %%%% STEP_ID` cells")


def run_watch(args: argparse.Namespace, settings: Settings) -> int:
    from watchfiles import watch

    from tutor.commands.check import report_unsaved
    from tutor.evaluator import warm
    from tutor.evaluator.client import Evaluator, EvaluatorError
    from tutor.session.controller import Lesson
    from tutor.session.report import format_table

    path = Path(args.file).resolve()
    # A clear usage error now, rather than a silent watch of nothing.
    read_source(str(path), source.MAX_FILE_BYTES)
    pack = lesson_pack(settings)
    store = open_store(settings, pack)
    if store is None:
        return 1
    regraded = regraded_steps(pack)

    checked: list[bytes | None] = [None]  # the file's bytes as last checked

    def snapshot() -> bytes | None:
        try:
            return path.read_bytes()
        except OSError:
            return None

    def run_once(ev: Evaluator) -> None:
        checked[0] = snapshot()
        try:
            text = source.read(str(path), source.MAX_FILE_BYTES)
        except (source.SourceError, OSError) as exc:
            # Say why this save cannot be checked, and wait for the next one.
            unreadable = isinstance(exc, source.SourceError)
            _show(f"✗ {exc}" if unreadable else f"✗ cannot read {path}: {_why(exc)}")
        else:
            prior: dict[str, str] = {}
            unread = save(lambda: prior.update(store.accepted_codes()))
            lesson = Lesson(pack, store, ev)
            results = lesson.check_cells(text, prior)
            _show(format_table(results, regraded, path.name))
            if unread:
                print("backprop-tutor: warning: your progress could not be read, so earlier "
                      f"steps used their reference solutions and nothing was saved: {unread}",
                      file=sys.stderr)
            else:
                report_unsaved(lesson.record_cells(text, results))
        print(f"\nwatching {path.name} — save it to check again, Ctrl+C to stop", flush=True)

    try:
        with store, Evaluator(settings) as ev, contextlib.ExitStack() as serving:
            ev.info()
            serving.enter_context(warm.hosting(ev, settings))  # started: `check` may use it
            run_once(ev)
            # Watch the folder, not the file: editors often save by writing a new file and
            # renaming it over the old one, which a watch on the file itself would lose.
            # raise_interrupt: else watchfiles logs its own "KeyboardInterrupt caught" line.
            # yield_on_timeout: a save made while a check was running raises no new event,
            # so every second the file is also compared with what was last checked.
            for _ in watch(path.parent, watch_filter=lambda _c, p: Path(p) == path,
                           debounce=300, raise_interrupt=True, yield_on_timeout=True,
                           rust_timeout=1000):
                if path.exists() and snapshot() != checked[0]:
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
