"""`serve`: the tutor in a browser. Each tab gets its own tutor process (textual-serve runs one
per connection), all with the same settings and so the same progress."""

from __future__ import annotations

import argparse
import shlex
import sys

from tutor.commands.base import Command, UsageError
from tutor.config import Settings


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1: this computer only)")
    p.add_argument("--port", default=8000, type=int, help="port to listen on (default 8000)")


def tutor_command(settings: Settings, pack_given: bool) -> str:
    """The command each browser tab runs: this tutor with these settings. The pack is passed
    only when one was chosen; otherwise the tab opens the chooser, as the terminal does."""
    words = [sys.executable, "-m", "tutor", "--home", str(settings.data_home),
             "--device", settings.device, "--seed", str(settings.seed),
             "--timeout", f"{settings.timeout:g}"]
    if pack_given:
        words += ["--pack", settings.pack]
    return shlex.join(words)


def run(args: argparse.Namespace, settings: Settings) -> int:
    try:
        from textual_serve.server import Server
    except ImportError:
        raise UsageError("serving needs textual-serve: "
                         "pip install 'backprop-tutor[notebook]'") from None
    if not 0 < args.port < 65536:
        raise UsageError(f"--port must be from 1 to 65535, not {args.port}")

    class TutorServer(Server):
        async def on_startup(self, app) -> None:  # its own banner would bury the address
            print("Press Ctrl+C to stop.", flush=True)

    url = f"http://{'localhost' if args.host in ('127.0.0.1', 'localhost') else args.host}" \
          f":{args.port}"
    server = TutorServer(tutor_command(settings, getattr(args, "pack", None) is not None),
                         host=args.host, port=args.port, title="backprop-tutor", public_url=url)
    print(f"Open {url} in a browser (each tab is its own tutor; progress in "
          f"{settings.data_home})", flush=True)
    server.serve()
    return 0


SERVE = Command("serve", "serve the tutor in a web browser (one tutor per tab)", _args, run)
