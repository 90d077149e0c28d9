"""`warm`: keep a worker warm in the background, so that one-shot commands answer at once."""

from __future__ import annotations

import argparse

from tutor.commands.base import Command, UsageError, lesson_pack
from tutor.config import Settings
from tutor.evaluator import warm


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--stop", action="store_true",
                   help="stop the warm workers this command started for your home folder")
    p.add_argument("--idle", metavar="MINUTES", type=float, default=warm.IDLE_SECONDS / 60,
                   help="leave after this many minutes with no request (default %(default)g)")


def run(args: argparse.Namespace, settings: Settings) -> int:
    if not warm.supported():
        raise UsageError("a warm worker needs Unix sockets, which this system does not have; "
                         "every command starts its own worker instead")
    if args.stop:
        stopped = warm.stop_all(settings)
        print(f"stopped {len(stopped)} warm worker{'s' * (len(stopped) != 1)}"
              if stopped else "no warm worker was running")
        return 0
    if not 0 < args.idle <= 24 * 60:
        raise UsageError(f"--idle takes minutes between 0 and {24 * 60}, not {args.idle:g}")
    pack = lesson_pack(settings)  # a pack that does not load is refused here, not in the worker
    found = warm.launch(settings, args.idle * 60)
    if found is None:
        print(f"backprop-tutor: the warm worker did not start; see {warm.folder(settings)}"
              "/warm.log", flush=True)
        return 1
    device = found.info().get("device", settings.device)
    print(f"a warm worker serves {pack.title} on {device} (pid {found.pid}): `check` with the "
          f"same settings uses it. It leaves after {args.idle:g} minutes with no request, or "
          "with `backprop-tutor warm --stop`.", flush=True)
    return 0


WARM = Command("warm", "keep a worker warm so that `check` answers at once", _args, run)
