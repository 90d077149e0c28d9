"""`warm`: keep a worker warm in the background, so that one-shot commands answer at once."""

from __future__ import annotations

import argparse
import math
import sys

from tutor.commands.base import Command, UsageError, lesson_pack
from tutor.config import Settings
from tutor.evaluator import warm

MAX_MINUTES = 24 * 60


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--stop", action="store_true",
                   help="stop the warm workers this command started for your home folder")
    p.add_argument("--idle", metavar="MINUTES",
                   help=f"leave after this many minutes with no request (default "
                        f"{warm.IDLE_SECONDS / 60:g})")


def _minutes(text: str | None) -> float:
    if text is None:
        return warm.IDLE_SECONDS / 60
    try:
        minutes = float(text)
    except ValueError:
        minutes = math.nan
    if not (math.isfinite(minutes) and 0 < minutes <= MAX_MINUTES):
        raise UsageError(f"--idle takes a number of minutes, more than 0 and at most "
                         f"{MAX_MINUTES}, not {text!r}")
    return minutes


def run(args: argparse.Namespace, settings: Settings) -> int:
    if not warm.supported():
        raise UsageError("a warm worker needs Unix sockets, which this system does not have; "
                         "every command starts its own worker instead")
    if args.stop:
        if args.idle is not None:
            raise UsageError("--stop stops the warm workers; give --idle when starting one")
        stopped = warm.stop_all(settings)
        print(f"stopped {len(stopped)} warm worker{'s' * (len(stopped) != 1)}"
              if stopped else "no warm worker was running")
        return 0
    idle = _minutes(args.idle)
    pack = lesson_pack(settings)  # a pack that does not load is refused here, not in the worker
    try:
        found = warm.launch(settings, idle * 60)
    except OSError as exc:
        print(f"backprop-tutor: no warm worker: {exc.strerror or exc} ({exc.filename})",
              file=sys.stderr)
        return 1
    if found is None:
        print(f"backprop-tutor: the warm worker did not start; see {warm.folder(settings)}"
              "/warm.log", file=sys.stderr, flush=True)
        return 1
    device = found.info().get("device", settings.device)
    if found.owned:
        print(f"the open tutor (or `watch`), pid {found.pid}, already serves {pack.title} on "
              f"{device} with these settings: `check` uses it while it is open.", flush=True)
        return 0
    print(f"a warm worker serves {pack.title} on {device} (pid {found.pid}): `check` with the "
          f"same settings (`--device {settings.device}`"
          + (f" or `--device {device}`" if settings.device == "auto" else "")
          + f") uses it. It leaves after {idle:g} minutes with no request, or with "
          "`backprop-tutor warm --stop`.", flush=True)
    return 0


WARM = Command("warm", "keep a worker warm so that `check` answers at once", _args, run)
