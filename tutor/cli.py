"""`backprop-tutor`: with no arguments the TUI; subcommands for everything it does, headless.

Exit codes: 0 success (a check passed), 1 a check failed or the program could not do its work,
2 the input was wrong: the command line, a setting, a device that is not there, or code that is
not UTF-8 or too big. A check that ran exits by its verdict even if it could not be saved.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Sequence

from tutor.config import DEFAULT_SEED, DEVICES, ConfigError, resolve, unavailable_device
from tutor.sandbox.clean import MAX_TEXT, clean
from tutor.session.errors import StoreError
from tutor.session.lookup import UsageError
from tutor.version import __version__


def _global_options(parser: argparse.ArgumentParser, suppress: bool) -> None:
    # Added to the main parser and to every subcommand, so they work before or after it.
    default = argparse.SUPPRESS if suppress else None
    # No argparse types or choices: config.resolve checks these, wherever they were set, and
    # says what is wrong in one line (argparse would add a usage block).
    parser.add_argument("--device", default=default, metavar="{" + ",".join(DEVICES) + "}",
                        help="where the network runs (default: auto = cuda, then mps, then cpu)")
    parser.add_argument("--seed", default=default,
                        help=f"seed of the parameters and the batches (default {DEFAULT_SEED})")
    parser.add_argument("--home", default=default, metavar="DIR",
                        help="folder for progress and state (or BACKPROP_TUTOR_HOME)")
    parser.add_argument("--timeout", default=default, metavar="SECONDS",
                        help="time limit for one check (default 5)")
    parser.add_argument("--pack", default=default, metavar="PACK",
                        help="the lesson: an installed pack's id or a pack's folder "
                        "(default: makemore)")


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The whole command line's parser. Given the command line, only the command it names is
    imported and given its arguments; the others are there by name (for a wrong name's
    message), and all of them in full for `--help` or a line that names none."""
    from tutor.commands import WHERE, command

    named = _command_named(argv)
    parser = argparse.ArgumentParser(
        prog="backprop-tutor",
        description="Practise the backward pass of a real network, line by line, checked "
        "against autograd. Without a command, opens the tutor.",
    )
    parser.add_argument("--version", action="version", version=f"backprop-tutor {__version__}")
    _global_options(parser, suppress=False)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in WHERE:
        if named is not None and name != named:
            sub.add_parser(name)  # another command's: this line does not run it
            continue
        c = command(name)
        p = sub.add_parser(c.name, help=c.help, description=c.help)
        _global_options(p, suppress=True)
        c.add_arguments(p)
        p.set_defaults(run=c.run)
    return parser


def _command_named(argv: Sequence[str] | None) -> str | None:
    """The command a command line runs, read without any command's own arguments; None where
    it names none, asks for the top-level help, or is wrong before the command."""
    from tutor.commands import WHERE

    parser = _GlobalOptions(prog="backprop-tutor", add_help=False)
    _global_options(parser, suppress=False)
    parser.add_argument("-h", "--help", "--version", dest="other", action="store_true")
    sub = parser.add_subparsers(dest="command")
    for name in WHERE:
        sub.add_parser(name, add_help=False)
    try:
        args, _rest = parser.parse_known_args(argv)
    except _NotPlain:
        return None
    return None if args.other else args.command


class _NotPlain(Exception):
    """The command line is more than global options: the whole parser reads it."""


class _GlobalOptions(argparse.ArgumentParser):
    def error(self, message: str):  # type: ignore[override]
        raise _NotPlain(message)


def _tui_arguments(argv: Sequence[str] | None) -> argparse.Namespace | None:
    """The options of a command line that only opens the TUI (global options, no command, no
    --help or --version); None for any other, which `build_parser` then reads. Opening the TUI
    so imports none of the commands' modules, which the learner would wait for before the
    first frame."""
    parser = _GlobalOptions(prog="backprop-tutor", add_help=False)
    _global_options(parser, suppress=False)
    parser.add_argument("-h", "--help", "--version", dest="other", action="store_true")
    try:
        args, rest = parser.parse_known_args(argv)
    except _NotPlain:
        return None
    if rest or args.other:
        return None
    args.command = None
    return args


def _tolerate_unprintable() -> None:
    # A terminal or pipe that is not UTF-8 cannot show ✓ or a learner's printed text; a "?"
    # in its place is better than a UnicodeEncodeError that loses the verdict.
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, ValueError, OSError):
            stream.reconfigure(errors="replace")


def _interruptible() -> None:
    # A shell starts a background job (`make test &`) with SIGINT ignored, and Python then
    # leaves it ignored: `watch` and `train` would never stop on Ctrl+C or `kill -INT`.
    with contextlib.suppress(ValueError):  # only the main thread may set handlers
        signal.signal(signal.SIGINT, signal.default_int_handler)


def main(argv: Sequence[str] | None = None) -> int:
    _interruptible()
    _tolerate_unprintable()
    args = _tui_arguments(argv) or build_parser(argv).parse_args(argv)
    try:
        settings = resolve(device=args.device, seed=args.seed, home=args.home, timeout=args.timeout,
                           pack=args.pack)
    except ConfigError as exc:
        print(f"backprop-tutor: error: {clean(exc, MAX_TEXT)}", file=sys.stderr)
        return 2
    # Every command refuses a device that is not there, even those that never use it: the
    # same flags should mean the same everywhere.
    problem = unavailable_device(settings.device)
    if problem:
        print(f"backprop-tutor: error: device '{settings.device}' cannot be used here: {problem}. "
              "Use --device cpu, or auto for the best device there is.", file=sys.stderr)
        return 2
    prog = f"backprop-tutor {args.command}" if args.command else "backprop-tutor"
    try:
        if args.command is None:
            from tutor.ui.app import run_app

            # A pack named on the command line is a choice: no chooser then.
            return run_app(settings, packs=[] if args.pack else None)
        return args.run(args, settings)
    except UsageError as exc:
        # What the user typed may come back in the message (a step id, a path): never raw.
        print(f"{prog}: error: {clean(exc, MAX_TEXT)}", file=sys.stderr)
        return 2
    except StoreError as exc:  # progress that cannot be read midway: say so, no traceback
        print(f"{prog}: {clean(exc, MAX_TEXT)}", file=sys.stderr)
        return 1
    except Exception as exc:
        if not _pack_error(exc):
            raise
        # A pack named with --pack that cannot be used: one line, whatever the command.
        print(f"{prog}: error: the lesson at {clean(settings.pack, MAX_TEXT)} cannot be used: "
              f"{clean(exc, MAX_TEXT)}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # e.g. `backprop-tutor list --json | head`
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def _pack_error(exc: BaseException) -> bool:
    """Whether `exc` says a pack cannot be used (tutor.pack.model is imported by whatever
    raised it; a command that never loads a pack never needs it here)."""
    model = sys.modules.get("tutor.pack.model")
    return model is not None and isinstance(exc, model.PackError)


def entry() -> None:
    """The program: `main`, then an exit that skips tearing the interpreter down.

    Everything Python does at exit that has an effect outside the process still happens, in its
    order: threads are joined (and executors shut down), exit handlers run (temporary folders,
    logging), output is flushed. What is skipped is freeing torch's modules and objects one by
    one, which takes longer than many a one-shot command's own work; the system frees them at
    once."""
    code = main()
    shutdown = getattr(threading, "_shutdown", None)  # what the interpreter itself calls first
    if shutdown is not None:
        shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)
