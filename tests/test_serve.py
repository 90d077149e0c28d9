"""`backprop-tutor serve`, driven in a real browser: the system's Chromium through Playwright."""

from __future__ import annotations

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

from tutor.commands.serve import tutor_command
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
    port, home = _free_port(), tmp_path / "home"
    server = subprocess.Popen(
        [sys.executable, "-m", "tutor", "--home", str(home), "serve", "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        first = server.stdout.readline()
        assert first.startswith(f"Open http://localhost:{port} in a browser"), first
        frames: list[str] = []
        with sync_api.sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.on("websocket", lambda ws: ws.on("framereceived", lambda f: frames.append(
                f if isinstance(f, str) else f.decode("utf-8", "replace"))))
            for _ in range(40):  # the server may still be binding its port
                with contextlib.suppress(sync_api.Error):
                    page.goto(f"http://localhost:{port}")
                    break
                time.sleep(0.25)
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
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
    out = subprocess.run([sys.executable, "-m", "tutor", "--home", str(home), "--pack",
                          "makemore", "progress", "--json"], capture_output=True, text=True,
                         check=True)
    rows = {r["id"]: r for r in json.loads(out.stdout)["steps"]}
    assert rows["atomic/logprobs"]["status"] == "exact"
