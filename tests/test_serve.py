"""`backprop-tutor serve`: who may connect (a token, the Origin, the Host), that stopping it
ends every process it started, and the tutor driven in a real browser (the system's Chromium
through Playwright)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tutor.commands import serve
from tutor.commands.base import UsageError
from tutor.commands.serve import Gate, tutor_command
from tutor.config import Settings

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run"]
_ESCAPES = re.compile(r"\x1b\[[0-9;?$<>]*[a-zA-Z]|\x1b\][^\x07]*\x07")


def test_each_tab_runs_this_tutor_with_the_same_settings(tmp_path):
    settings = Settings(home=tmp_path, device="cpu", timeout=7)
    command = tutor_command(settings, pack_given=False)
    assert command.startswith(f"{sys.executable} -m tutor --home {tmp_path} --device cpu")
    assert "--timeout 7" in command and "--pack" not in command  # the chooser opens
    assert "--pack gpt" in tutor_command(Settings(pack="gpt"), pack_given=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- who may connect: the rules ---------------------------------------------------------------

def test_a_local_server_answers_only_requests_that_name_this_computer():
    gate = Gate("secret", local_only=True)
    for host in ("localhost:8000", "127.0.0.1:8000", "[::1]:8000", "LOCALHOST:8000", "127.0.0.2"):
        assert gate.refusal(host=host, origin=None, offered=["secret"]) is None, host
    # A page on evil.example whose name now points at 127.0.0.1 (DNS rebinding) sends its own
    # name as the Host; so does anything that only looks local.
    for host in ("evil.example:8000", "localhost.evil.example:8000", "localhost:x", "",
                 "10.0.0.1:8000"):
        assert gate.refusal(host=host, origin=None, offered=["secret"]) == serve.HOST_REFUSED
    # Bound to a public address, the names it is reached by are not known in advance.
    assert Gate("secret", local_only=False).refusal(
        host="tutor.lan:8000", origin=None, offered=["secret"]) is None


def test_a_request_from_another_sites_page_is_refused_even_with_the_token():
    gate = Gate("secret", local_only=False)
    refused = [gate.refusal(host="localhost:8000", origin=origin, offered=["secret"])
               for origin in ("http://evil.example", "http://localhost:8001", "null",
                              "file://", "http://localhost:8000/path", "ftp://localhost:8000")]
    assert refused == [serve.ORIGIN_REFUSED] * 6
    for origin, host in (("http://localhost:8000", "localhost:8000"),
                         ("https://tutor.lan", "tutor.lan"),
                         ("http://localhost:9000", "localhost:9000")):  # a port forwarded by ssh
        assert gate.refusal(host=host, origin=origin, offered=["secret"]) is None


def test_only_the_exact_token_lets_a_request_through():
    gate = Gate("secret", local_only=True)
    for offered in ([], [""], ["secre"], ["secret "], ["SECRET"], ["sécret"], ["\udcff"]):
        assert gate.refusal(host="localhost:1", origin=None, offered=offered) \
            == serve.TOKEN_REFUSED, offered
    # One right token among several (a stale cookie beside the address's token) is enough.
    assert gate.refusal(host="localhost:1", origin=None, offered=["old", "secret"]) is None
    assert serve.offered_token("token secret") == "secret"
    assert serve.offered_token("Token  secret ") == "secret"
    assert serve.offered_token("Bearer secret") is None and serve.offered_token("token ") is None


def test_the_printed_address_carries_the_token_for_the_browser():
    assert serve.printed_url("127.0.0.1", 8000, "a b/c") == "http://localhost:8000/?token=a%20b%2Fc"
    assert serve.printed_url("::1", 8000, "t") == "http://[::1]:8000/?token=t"
    assert serve.printed_url("0.0.0.0", 80, "t") == "http://0.0.0.0:80/?token=t"


@pytest.mark.parametrize("given, env", [("", None), ("   ", None), (None, "")])
def test_an_empty_token_is_refused_rather_than_letting_everyone_in(given, env, monkeypatch):
    pytest.importorskip("textual_serve")
    if env is None:
        monkeypatch.delenv(serve.TOKEN_ENV, raising=False)
    else:
        monkeypatch.setenv(serve.TOKEN_ENV, env)
    args = argparse.Namespace(host="127.0.0.1", port=_free_port(), token=given)
    with pytest.raises(UsageError, match="must not be empty"):
        serve.run(args, Settings())


# -- who may connect: a running server ---------------------------------------------------------

def _start_serve(tmp: Path, *options: str, env: dict[str, str] | None = None,
                 ) -> tuple[subprocess.Popen, int, str]:
    """`backprop-tutor serve` on a free port; the process, its port and the token it printed."""
    port, log = _free_port(), tmp / f"serve-{time.monotonic_ns()}.log"
    environment = dict(os.environ, XDG_CONFIG_HOME=str(tmp / "config"),
                       BACKPROP_TUTOR_CACHE=str(tmp / "cache"), **(env or {}))
    with open(log, "w") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "tutor", "--home", str(tmp / "home"), *options, "serve",
             "--port", str(port)], stdout=out, stderr=subprocess.STDOUT, text=True,
            env=environment, start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and server.poll() is None:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            break  # listening, so its first line is out
        time.sleep(0.1)
    first = log.read_text().partition("\n")[0]
    match = re.fullmatch(rf"Open http://localhost:{port}/\?token=([\w-]+) in a browser .*", first)
    assert match, log.read_text()
    return server, port, match.group(1)


def _stop(server: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(server.pid, signal.SIGTERM)
    server.wait(timeout=60)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    pytest.importorskip("textual_serve")
    server, port, token = _start_serve(tmp_path_factory.mktemp("served"))
    yield port, token
    _stop(server)


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
    import aiohttp

    async def go() -> tuple[int, str]:
        async with aiohttp.ClientSession() as session, \
                session.get(url, headers=headers, allow_redirects=False) as response:
            return response.status, await response.text()
    return asyncio.run(go())


def _websocket(url: str, origin: str | None, first_page: str | None = None) -> int:
    """The status a websocket upgrade gets (101: accepted, and the tutor has drawn its first
    frame); with `first_page`, that page is loaded first in the same session, as a browser
    would, and the websocket carries only the cookie it set."""
    import aiohttp

    async def go() -> int:
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as session:
            if first_page is not None:
                async with session.get(first_page) as page:
                    assert page.status == 200
            try:
                ws = await session.ws_connect(url, origin=origin)
            except aiohttp.WSServerHandshakeError as refused:
                return refused.status
            try:
                message = await ws.receive(timeout=120)
                assert message.type == aiohttp.WSMsgType.BINARY, message  # the tutor's screen
            finally:
                await ws.close()
            return 101
    return asyncio.run(go())


def test_the_printed_token_is_long_and_random(served):
    _, token = served
    assert len(token) >= 43  # 32 random bytes


def test_a_request_without_the_right_token_is_refused(served):
    port, token = served
    for path in ("/", "/?token=", f"/?token={token[:-1]}", f"/?token={token}x",
                 "/static/js/textual.js", "/ws"):
        status, text = _get(f"http://localhost:{port}{path}")
        assert (status, text.strip()) == (403, serve.TOKEN_REFUSED), path
    status, _ = _get(f"http://localhost:{port}/", {"Authorization": f"token {token[::-1]}"})
    assert status == 403


def test_the_right_token_opens_the_page_whose_websocket_goes_to_the_same_address(served):
    port, token = served
    for host in ("localhost", "127.0.0.1"):
        status, page = _get(f"http://{host}:{port}/?token={token}")
        assert status == 200
        assert f'"ws://{host}:{port}/ws"' in page  # where the cookie set for it goes
        assert token not in page
    status, _ = _get(f"http://localhost:{port}/static/js/textual.js",
                     {"Authorization": f"token {token}"})
    assert status == 200


def test_the_token_does_not_help_a_foreign_host_or_origin(served):
    port, token = served
    status, text = _get(f"http://localhost:{port}/?token={token}",
                        {"Host": f"evil.example:{port}"})
    assert (status, text.strip()) == (403, serve.HOST_REFUSED)
    status, text = _get(f"http://localhost:{port}/?token={token}",
                        {"Origin": "http://evil.example"})
    assert (status, text.strip()) == (403, serve.ORIGIN_REFUSED)


def test_a_websocket_without_the_token_or_from_another_site_is_refused(served):
    port, token = served
    site = f"http://localhost:{port}"
    assert _websocket(f"ws://localhost:{port}/ws", site) == 403
    assert _websocket(f"ws://localhost:{port}/ws?token=wrong", site) == 403
    for origin in ("http://evil.example", f"http://evil.example:{port}", "null"):
        assert _websocket(f"ws://localhost:{port}/ws?token={token}", origin) == 403, origin
    # The cookie is the browser's, not the page's: another site's page cannot use it either.
    assert _websocket(f"ws://localhost:{port}/ws", "http://evil.example",
                      first_page=f"{site}/?token={token}") == 403


def test_the_served_page_and_the_token_open_a_tutor(served):
    port, token = served
    site = f"http://localhost:{port}"
    assert _websocket(f"ws://localhost:{port}/ws?token={token}&width=100&height=30", site) == 101
    # What a browser does: the page sets a cookie, its websocket carries it instead.
    assert _websocket(f"ws://localhost:{port}/ws?width=100&height=30", site,
                      first_page=f"{site}/?token={token}") == 101


def test_a_token_given_to_serve_is_the_one_it_asks_for(tmp_path):
    pytest.importorskip("textual_serve")
    server, port, token = _start_serve(tmp_path, env={serve.TOKEN_ENV: "chosen-by-a-script"})
    try:
        assert token == "chosen-by-a-script"
        assert _get(f"http://localhost:{port}/?token=chosen-by-a-script")[0] == 200
    finally:
        _stop(server)


# -- stopping serve ----------------------------------------------------------------------------

def _marked(mark: str) -> list:
    """The running processes whose environment carries `mark` (everything `serve` started,
    however far below it and whoever its parent is now)."""
    import psutil

    found = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if process.environ().get("SERVE_TEST_MARK") == mark \
                    and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
    return found


@pytest.mark.slow
@pytest.mark.parametrize("stop, isolation, when", ids=lambda v: getattr(v, "name", v), argvalues=[
    (signal.SIGTERM, "fork", "ready"),
    (signal.SIGHUP, "spawn", "ready"),    # the fork server and its children too
    (signal.SIGINT, "auto", "starting"),  # a worker still loading: it reads no pipe yet
    (signal.SIGKILL, "spawn", "ready"),   # no cleanup: each tutor gets SIGTERM as serve dies
])
def test_stopping_serve_ends_every_process_it_started(stop, isolation, when, tmp_path):
    pytest.importorskip("textual_serve")
    psutil = pytest.importorskip("psutil")
    import aiohttp

    mark = f"{os.getpid()}-{time.monotonic_ns()}"
    server, port, token = _start_serve(
        tmp_path, "--pack", "makemore",
        env={"SERVE_TEST_MARK": mark, "BACKPROP_TUTOR_ISOLATION": isolation})

    def cmdline(p) -> list[str]:  # noqa: ANN001
        try:
            return p.cmdline()
        except psutil.Error:  # a short-lived child gone (or a zombie) while we looked
            return []

    def started() -> bool:
        below = psutil.Process(server.pid).children(recursive=True)
        workers = [p for p in below if "tutor.evaluator.worker" in cmdline(p)]
        try:
            return bool(workers) and (when == "starting" or bool(workers[0].children()))
        except psutil.Error:
            return False

    async def connect_then_stop() -> None:
        async with aiohttp.ClientSession() as session:
            ws = await session.ws_connect(f"ws://localhost:{port}/ws?token={token}",
                                          origin=f"http://localhost:{port}")
            async def read() -> None:  # the tutor's screen, and the server's pings answered
                async for _ in ws:
                    pass
            drain = asyncio.create_task(read())
            try:
                deadline = time.monotonic() + 180
                while not started():
                    assert time.monotonic() < deadline, _marked(mark)
                    await asyncio.sleep(0.1)
                os.kill(server.pid, stop)
                await asyncio.get_running_loop().run_in_executor(None, server.wait, 60)
            finally:
                drain.cancel()

    try:
        asyncio.run(connect_then_stop())
        if stop == signal.SIGKILL:  # nothing ran in serve: they go as their parents do
            gone, alive = psutil.wait_procs(_marked(mark), timeout=120)
            assert not alive, alive
        assert _marked(mark) == []
        assert server.returncode == (-signal.SIGKILL if stop == signal.SIGKILL else 0)
    finally:
        for process in _marked(mark):
            with contextlib.suppress(psutil.Error):
                process.kill()
        if server.poll() is None:
            server.kill()
            server.wait()


@pytest.mark.slow
def test_an_evaluator_whose_tutor_was_killed_still_ends_with_serve(tmp_path):
    """A tutor killed while its evaluator loads torch leaves the evaluator reading no pipe yet;
    `serve` adopts it, and kills it when it stops."""
    pytest.importorskip("textual_serve")
    psutil = pytest.importorskip("psutil")
    import aiohttp

    mark = f"{os.getpid()}-{time.monotonic_ns()}"
    server, port, token = _start_serve(tmp_path, "--pack", "makemore",
                                       env={"SERVE_TEST_MARK": mark})

    async def orphan_then_stop() -> None:
        async with aiohttp.ClientSession() as session:
            ws = await session.ws_connect(f"ws://localhost:{port}/ws?token={token}",
                                          origin=f"http://localhost:{port}")
            deadline = time.monotonic() + 180
            while True:
                below = psutil.Process(server.pid).children(recursive=True)
                if any("tutor.evaluator.worker" in p.cmdline() for p in below):
                    break
                assert time.monotonic() < deadline, below
                await asyncio.sleep(0.05)
            [tutor] = psutil.Process(server.pid).children()
            tutor.kill()
            tutor.wait(30)
            os.kill(server.pid, signal.SIGTERM)
            await asyncio.get_running_loop().run_in_executor(None, server.wait, 60)
            await ws.close()

    try:
        asyncio.run(orphan_then_stop())
        assert _marked(mark) == []
        assert server.returncode == 0
    finally:
        for process in _marked(mark):
            with contextlib.suppress(psutil.Error):
                process.kill()
        if server.poll() is None:
            server.kill()
            server.wait()


def _screen_text(frames: list[str]) -> str:
    """What the terminal was sent, without its escape sequences."""
    return _ESCAPES.sub(" ", "".join(frames))


def _wait_for(page, frames: list[str], text: str, seconds: float) -> bool:
    """Whether `text` reaches the terminal within `seconds` (Playwright's own wait, so that
    its events, the frames among them, are delivered meanwhile)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if text in _screen_text(frames):
            return True
        page.wait_for_timeout(250)
    return False


@pytest.mark.slow
def test_serve_shows_the_chooser_and_grades_a_first_answer_in_a_browser(tmp_path):
    if not CHROMIUM.exists():
        pytest.skip(f"no Chromium at {CHROMIUM}: `make browser-deps` installs it")
    sync_api = pytest.importorskip("playwright.sync_api",
                                   reason="needs playwright: `make browser-deps`")
    home = tmp_path / "home"
    server, port, token = _start_serve(tmp_path)
    try:
        frames: list[str] = []
        with sync_api.sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.on("websocket", lambda ws: ws.on("framereceived", lambda f: frames.append(
                f if isinstance(f, str) else f.decode("utf-8", "replace"))))
            page.goto(f"http://localhost:{port}/?token={token}")
            assert _wait_for(page, frames, "Which lesson?", 60), _screen_text(frames)[-2000:]
            assert "Becoming a backprop ninja" in _screen_text(frames)
            page.locator(".xterm-helper-textarea").focus()
            page.keyboard.press("Enter")  # makemore, the first in the chooser
            assert _wait_for(page, frames, "Welcome to backprop-tutor", 60)
            page.keyboard.press("Enter")
            assert _wait_for(page, frames, "Your backward code", 30)
            page.wait_for_timeout(1000)
            # The template's `...` is selected: typing replaces it.
            page.keyboard.type("torch.zeros_like(logprobs)")
            page.keyboard.press("Enter")
            page.keyboard.type("dlogprobs[range(n), Yb] = -1.0 / n")
            page.wait_for_timeout(500)
            page.keyboard.press("F5")
            seen = _wait_for(page, frames, "Correct: identical to autograd, bit for bit", 60)
            page.screenshot(path=str(tmp_path / "served.png"))
            browser.close()
        assert seen, _screen_text(frames)[-3000:]
    finally:
        _stop(server)
    out = subprocess.run([sys.executable, "-m", "tutor", "--home", str(home), "--pack",
                          "makemore", "progress", "--json"], capture_output=True, text=True,
                         check=True)
    rows = {r["id"]: r for r in json.loads(out.stdout)["steps"]}
    assert rows["atomic/logprobs"]["status"] == "exact"


def test_the_page_asks_nothing_of_another_host(served):
    """A local tool makes no outside request: no link to another host (textual-serve's page
    links a web font), and a policy that lets the browser load from this server alone."""
    import re

    import aiohttp

    port, token = served

    async def fetch() -> tuple[str, str]:
        async with aiohttp.ClientSession() as session, \
                session.get(f"http://localhost:{port}/?token={token}",
                            allow_redirects=False) as response:
            return await response.text(), response.headers.get("Content-Security-Policy", "")

    page, policy = asyncio.run(fetch())
    assert "xterm.css" in page  # the page itself, not a refusal
    assert not re.findall(r"(?:href|src)=\"https?://(?!127\.0\.0\.1|localhost)", page)
    assert "googleapis" not in page and "default-src 'self'" in policy
