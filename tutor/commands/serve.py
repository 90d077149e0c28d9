"""`serve`: the tutor in a browser. Each tab gets its own tutor process (textual-serve runs one
per connection), all with the same settings and so the same progress.

Any web page the learner visits can make their browser open a websocket to localhost, and
anyone on the network can reach a port bound to a public address; whoever connects drives a
tutor with the learner's progress. So, as Jupyter does, every request must carry a token that
only the address `serve` prints holds (or the cookie that address's first page sets), a request
that says it comes from another site (its Origin) is refused, and while bound to this computer
only, a request must name this computer (its Host), which DNS rebinding cannot fake.

The tutors `serve` starts, their evaluators and the children those start all end with it: each
tab's tutor gets SIGTERM when `serve` stops and is killed with it otherwise (PR_SET_PDEATHSIG),
`serve` adopts whatever its tutors leave behind (PR_SET_CHILD_SUBREAPER) and, before it exits,
kills every process still below it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import hmac
import ipaddress
import os
import re
import secrets
import shlex
import signal
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

from tutor.commands.base import Command, UsageError
from tutor.config import Settings

TOKEN_ENV = "BACKPROP_TUTOR_SERVE_TOKEN"
# How long the tabs' tutors get to quit on SIGTERM (they close their evaluators) before
# everything left below `serve` is killed.
QUIT_GRACE = 3.0
# How long `serve` keeps killing what is left below it; a process stuck in the kernel past this
# is reported, not waited for.
KILL_DEADLINE = 5.0

HOST_REFUSED = ("Forbidden: this server answers only to this computer's own names (localhost, "
                "127.0.0.1, [::1]).")
ORIGIN_REFUSED = "Forbidden: requests from another site's pages are refused."
TOKEN_REFUSED = ("Forbidden: open the address that `backprop-tutor serve` printed; it carries "
                 "the access token.")

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1: this computer only)")
    p.add_argument("--port", default=8000, type=int, help="port to listen on (default 8000)")
    p.add_argument("--token", default=None,
                   help="the access token every request must carry (default: "
                        f"${TOKEN_ENV}, else a new random one each start); the address "
                        "printed carries it")


def tutor_command(settings: Settings, pack_given: bool) -> str:
    """The command each browser tab runs: this tutor with these settings. The pack is passed
    only when one was chosen; otherwise the tab opens the chooser, as the terminal does."""
    words = [sys.executable, "-m", "tutor", "--home", str(settings.data_home),
             "--device", settings.device, "--seed", str(settings.seed),
             "--timeout", f"{settings.timeout:g}"]
    if pack_given:
        words += ["--pack", settings.pack]
    return shlex.join(words)


# -- who may connect -------------------------------------------------------------------------

def is_loopback(host: str) -> bool:
    """Whether a host name or address means this computer."""
    host = host.strip("[]").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _host_name(netloc: str) -> str | None:
    """The host in a Host header's `name:port` (brackets off an IPv6 address); None when it is
    not one."""
    try:
        parts = urlsplit(f"//{netloc}")
        parts.port  # noqa: B018 - raises ValueError on a port that is not a number
    except ValueError:
        return None
    return parts.hostname


def same_origin(origin: str, host: str) -> bool:
    """Whether an Origin header names the site the request went to (the Host it carries).
    Comparing with the Host, not a fixed address, keeps a forwarded port (ssh -L) working; the
    Host itself is checked apart."""
    try:
        parts = urlsplit(origin)
    except ValueError:
        return False
    return (parts.scheme in ("http", "https") and not parts.path and not parts.query
            and parts.netloc.lower() == host.lower())


def offered_token(authorization: str | None) -> str | None:
    """The token in an `Authorization: token …` header (Jupyter's form), for scripts."""
    if authorization is None:
        return None
    scheme, _, value = authorization.strip().partition(" ")
    if scheme.lower() != "token":
        return None
    return value.strip() or None


@dataclass(frozen=True)
class Gate:
    """Whether a request may reach the tutor. `local_only`: the server listens on a loopback
    address, so every genuine request names this computer in its Host."""

    token: str
    local_only: bool

    def accepts(self, offered: str) -> bool:
        # In constant time, so how long a refusal takes says nothing about the token.
        return hmac.compare_digest(offered.encode("utf-8", "surrogatepass"),
                                   self.token.encode("utf-8", "surrogatepass"))

    def refusal(self, *, host: str, origin: str | None, offered: Iterable[str]) -> str | None:
        """Why the request is refused, or None to let it through. `offered`: every token the
        request carries (query, Authorization header, cookie); one right one is enough."""
        if self.local_only and not is_loopback(_host_name(host) or ""):
            return HOST_REFUSED
        if origin is not None and not same_origin(origin, host):
            return ORIGIN_REFUSED
        # Every offered token is compared, so the time taken does not say which one was right.
        if not [True for token in offered if self.accepts(token)]:
            return TOKEN_REFUSED
        return None


def cookie_name(port: int) -> str:
    """Cookies are not kept apart by port: a second `serve` on another port keeps its own."""
    return f"backprop-tutor-token-{port}"


def site_url(host: str, port: int) -> str:
    """Where the server is, as a browser would be told."""
    shown = "localhost" if host in ("127.0.0.1", "localhost") else \
        (f"[{host}]" if ":" in host else host)
    return f"http://{shown}:{port}"


def printed_url(host: str, port: int, token: str) -> str:
    """The address `serve` prints: the first page's request carries the token."""
    return f"{site_url(host, port)}/?token={quote(token, safe='')}"


# -- the processes the tabs start ------------------------------------------------------------

def _prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def adopt_orphans() -> bool:
    """Become the parent of any process below `serve` whose own parent exits (an evaluator
    whose tutor was killed), so that it stays findable below `serve` until it is gone."""
    prctl = _prctl()
    return prctl is not None and prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def die_with_parent(parent: int) -> Callable[[], None] | None:
    """A preexec function for a tab's tutor: SIGTERM (which quits it as Ctrl+C would) when
    `serve` dies, even by SIGKILL; if `serve` already died, exit at once. Looked up before
    the fork, so the child only makes the call."""
    prctl = _prctl()
    if prctl is None:
        return None

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)
    return preexec


def _process_table() -> dict[int, tuple[int, str]]:
    """Every process's parent and state ('Z': exited, not yet reaped), from /proc (Linux; an
    empty table elsewhere)."""
    table: dict[int, tuple[int, str]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return table
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue  # exited meanwhile
        # The name in parentheses may hold spaces and parentheses: the fields follow the last.
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) >= 2:
            table[int(name)] = (int(fields[1]), fields[0].decode())
    return table


def descendants(root: int) -> tuple[list[int], list[int]]:
    """The processes below `root`: (those still running, those exited but not yet reaped)."""
    table = _process_table()
    below: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        below.setdefault(ppid, []).append(pid)
    running: list[int] = []
    exited: list[int] = []
    todo = list(below.get(root, []))
    while todo:
        pid = todo.pop()
        (exited if table[pid][1] == "Z" else running).append(pid)
        todo.extend(below.get(pid, []))
    return running, exited


def reap_adopted(keep: Iterable[int]) -> None:
    """Reap the adopted processes that have exited; `keep`: the tabs' tutors, which asyncio
    reaps (taking their status here would leave it without one)."""
    me, kept = os.getpid(), set(keep)
    for pid, (ppid, state) in _process_table().items():
        if ppid == me and state == "Z" and pid not in kept:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)


def kill_everything_below(keep_unreaped: Iterable[int] = ()) -> list[int]:
    """SIGKILL every process below `serve` until none runs (those whose parents die first come
    to `serve`, which adopts orphans, and are found on the next pass). Returns those still
    running at the deadline (stuck in the kernel), for the message."""
    kept = set(keep_unreaped)
    deadline = time.monotonic() + KILL_DEADLINE
    while True:
        running, _ = descendants(os.getpid())
        if not running or time.monotonic() > deadline:
            return running
        for pid in running:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        reap_adopted(kept)
        time.sleep(0.02)


# -- the server --------------------------------------------------------------------------------

# What the page may load: this server's own scripts and styles (and the inline ones the page
# has), its websocket, its images; nothing from another host.
LOCAL_ONLY = ("default-src 'self'; script-src 'self' 'unsafe-inline'; "
              "style-src 'self' 'unsafe-inline'; img-src 'self' data:; font-src 'self' data:; "
              "connect-src 'self' ws: wss:")


def make_server(command: str, host: str, port: int, token: str) -> Any:
    """textual-serve's server with the gate in front of every request and the tabs' tutors
    started and stopped as the module's docstring says."""
    import aiohttp_jinja2
    from aiohttp import web
    from textual_serve.app_service import AppService
    from textual_serve.server import Server, log, to_int

    gate = Gate(token, local_only=is_loopback(host))
    cookie = cookie_name(port)
    tutors: set[asyncio.subprocess.Process] = set()
    preexec = die_with_parent(os.getpid())

    @web.middleware
    async def guard(request: web.Request, handler: Callable) -> web.StreamResponse:
        kept = request.cookies.get(cookie)
        offered = [t for t in (request.query.get("token"),
                               offered_token(request.headers.get("Authorization")), kept) if t]
        why = gate.refusal(host=request.host, origin=request.headers.get("Origin"),
                           offered=offered)
        if why is not None:
            return web.Response(status=403, text=why + "\n",
                                headers={"Referrer-Policy": "no-referrer"})
        response = await handler(request)
        if not response.prepared:  # a websocket's headers are already sent; it needs none
            # The address carries the token; no other site should see it as the referrer.
            response.headers["Referrer-Policy"] = "no-referrer"
            if kept is None or not gate.accepts(kept):
                # The page's own requests (its scripts, its websocket) carry the cookie, not
                # the token; SameSite=Strict keeps it off every request another site starts.
                response.set_cookie(cookie, token, httponly=True, samesite="Strict", path="/")
        return response

    class TutorService(AppService):
        async def _open_app_process(self, width: int = 80, height: int = 24) -> Any:
            # Not through a shell (textual-serve's way), so the tutor itself is our child and
            # gets the death signal; its own session, so Ctrl+C in serve's terminal reaches
            # serve alone, which then stops the tutors in order.
            self._process = process = await asyncio.create_subprocess_exec(
                *shlex.split(self.command), stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                env=self._build_environment(width=width, height=height),
                start_new_session=True, preexec_fn=preexec)
            tutors.add(process)
            self._stdin = process.stdin
            return process

        async def run(self) -> None:
            await super().run()
            # The tutor has ended, however it ended (one that crashed sends no "exit"): the
            # tab learns so at once, and the connection no longer holds serve's shutdown.
            with contextlib.suppress(ConnectionError, RuntimeError):
                await self.remote_close()

    class TutorServer(Server):
        async def _make_app(self) -> web.Application:
            app = await super()._make_app()
            app.middlewares.append(guard)
            return app

        async def on_startup(self, app: web.Application) -> None:
            # Not textual-serve's banner: it would bury the address.
            asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, self.request_exit)
            print("Press Ctrl+C to stop.", flush=True)

        async def on_shutdown(self, app: web.Application) -> None:
            await stop_tutors(tutors)

        async def handle_index(self, request: web.Request) -> web.Response:
            # A local tool asks nothing of another host: textual-serve's page links a web font
            # from one, left out here, and the page's policy allows this server alone.
            page = aiohttp_jinja2.render_string("app_index.html", request,
                                                self._page_context(request))
            here = re.escape(f"//{request.host}/")
            page = re.sub(rf"<link[^>]*href=\"https?:(?!{here})[^>]*>", "", page)
            return web.Response(text=page, content_type="text/html", headers={
                "Content-Security-Policy": LOCAL_ONLY})

        def _page_context(self, request: web.Request) -> dict[str, Any]:
            # textual-serve builds the page's addresses from one public URL; these use the
            # address the browser used (the gate has checked it), so the cookie set for it
            # goes with the websocket.
            router = request.app.router
            site = f"{request.scheme}://{request.host}"
            ws = f"{'wss' if request.scheme == 'https' else 'ws'}://{request.host}"
            return {
                "font_size": to_int(request.query.get("fontsize", "16"), 16),
                "app_websocket_url": ws + str(router["websocket"].url_for()),
                "config": {"static": {
                    "url": site + str(router["static"].url_for(filename="/")).rstrip("/") + "/"}},
                "application": {"name": self.title},
            }

        async def handle_websocket(self, request: web.Request) -> web.WebSocketResponse:
            # textual-serve's, with our service; and the evaluators a tutor left are reaped.
            websocket = web.WebSocketResponse(heartbeat=15)
            width = to_int(request.query.get("width", "80"), 80)
            height = to_int(request.query.get("height", "24"), 24)
            service: TutorService | None = None
            try:
                await websocket.prepare(request)
                service = TutorService(self.command, write_bytes=websocket.send_bytes,
                                       write_str=websocket.send_str, close=websocket.close,
                                       download_manager=self.download_manager,
                                       debug=self.debug)
                await service.start(width, height)
                await self._process_messages(websocket, service)
            except asyncio.CancelledError:
                await websocket.close()
            except Exception as error:  # noqa: BLE001 - textual-serve logs it the same way
                log.exception(error)
            finally:
                if service is not None:
                    await service.stop()
                    process = service._process
                    if process is not None:
                        # It was told to quit, and is closing its evaluator; it must not stay.
                        with contextlib.suppress(asyncio.TimeoutError):
                            await asyncio.wait_for(asyncio.shield(process.wait()), QUIT_GRACE)
                        with contextlib.suppress(ProcessLookupError):
                            process.kill()
                        await process.wait()
                        tutors.discard(process)
                reap_adopted(p.pid for p in tutors)
            return websocket

    server = TutorServer(command, host=host, port=port, title="backprop-tutor",
                         public_url=site_url(host, port))
    server.tutors = tutors
    return server


async def stop_tutors(tutors: set[asyncio.subprocess.Process]) -> None:
    """Ask every tab's tutor to quit (SIGTERM: it closes its evaluator), give them a moment,
    then kill whatever still runs below `serve`."""
    running = [p for p in tutors if p.returncode is None]
    for process in running:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGTERM)
    if running:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.gather(*(p.wait() for p in running)), QUIT_GRACE)
    for process in tutors:
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
    kill_everything_below(p.pid for p in tutors)


def run(args: argparse.Namespace, settings: Settings) -> int:
    try:
        import textual_serve.server  # noqa: F401 - only to say what is missing
    except ImportError:
        raise UsageError("serving needs textual-serve: install the tutor with its `notebook` "
                         "extra (pip install '.[notebook]' in the repository)") from None
    if not 0 < args.port < 65536:
        raise UsageError(f"--port must be from 1 to 65535, not {args.port}")
    token = args.token if args.token is not None else os.environ.get(TOKEN_ENV)
    if token is None:
        token = secrets.token_urlsafe(32)
    elif not token.strip():
        # There is no way to turn the check off: an empty token would let any page in.
        raise UsageError(f"the token (--token or ${TOKEN_ENV}) must not be empty")

    adopt_orphans()
    server = make_server(tutor_command(settings, getattr(args, "pack", None) is not None),
                         args.host, args.port, token)
    print(f"Open {printed_url(args.host, args.port, token)} in a browser (each tab is its own "
          f"tutor; progress in {settings.data_home})", flush=True)
    try:
        server.serve()
    finally:
        # Whatever stopped the server (a second signal cuts its shutdown short), nothing it
        # started outlives it.
        stuck = kill_everything_below(p.pid for p in server.tutors)
        if stuck:
            print(f"could not stop processes {stuck}", file=sys.stderr)
    return 0


SERVE = Command("serve", "serve the tutor in a web browser (one tutor per tab)", _args, run)
