"""The warm worker (tutor/evaluator/warm.py): a `check` answered by an evaluator that outlives one
command gives the verdict a cold one gives, and reaches only a worker of the same user, home and
settings."""

import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from tutor.config import Settings
from tutor.evaluator import warm

pytestmark = pytest.mark.skipif(not warm.supported(), reason="needs Unix sockets")

ROOT = Path(__file__).resolve().parent.parent
RIGHT = "dlogprobs = torch.zeros_like(logprobs)\ndlogprobs[range(n), Yb] = -1.0/n\n"
WRONG = "dlogprobs = torch.zeros_like(logprobs)\ndlogprobs[range(n), Yb] = 1.0/n\n"


class Echo:
    """What a Host needs of an evaluator, without a worker: it hands back what it was asked."""

    def __init__(self, ready: bool = True):
        self._lock = threading.RLock()
        self.started_info = {"device": "cpu"} if ready else None
        self.asked: list[tuple] = []

    def request(self, op, payload, limit, on_progress=None):
        self.asked.append((op, payload, limit))
        return {"op": op, "payload": payload}


@pytest.fixture
def settings(tmp_path):
    return Settings(device="cpu", home=tmp_path / "h")


@pytest.fixture
def host(settings):
    served = warm.Host(Echo(), settings)
    assert served.start()
    yield served
    served.close()


def test_a_request_goes_to_the_host_with_the_same_settings_and_comes_back(host, settings):
    found = warm.connect(settings)
    assert found is not None and found.info() == {"device": "cpu"}
    assert found.request("check", {"step": "s", "code": "x = 1"}, 5.0) == {
        "op": "check", "payload": {"step": "s", "code": "x = 1"}}
    assert host.evaluator.asked == [("check", {"step": "s", "code": "x = 1"}, 5.0)]
    assert host.answered == 1


def test_other_settings_or_another_home_never_reach_it(host, settings, tmp_path):
    assert warm.connect(replace(settings, seed=settings.seed + 1)) is None
    assert warm.connect(replace(settings, home=tmp_path / "other")) is None
    assert warm.connect(replace(settings, timeout=settings.timeout + 1)) is None


def test_the_socket_is_the_users_alone(host, settings):
    assert host.path is not None
    assert host.path.stat().st_mode & 0o777 == 0o600
    assert host.path.parent.stat().st_mode & 0o777 == 0o700
    os.chmod(host.path.parent, 0o755)  # a folder others could use is not trusted
    try:
        assert warm.connect(settings) is None
    finally:
        os.chmod(host.path.parent, 0o700)
    assert warm.connect(settings) is not None


def test_a_busy_worker_sends_the_command_back_to_a_worker_of_its_own(host, settings):
    holding, release = threading.Event(), threading.Event()

    def owner_busy():
        with host.evaluator._lock:  # the TUI checking, or training, with it
            holding.set()
            release.wait(10)

    threading.Thread(target=owner_busy, daemon=True).start()
    holding.wait(5)
    try:
        found = warm.connect(settings)
        assert found is not None
        with pytest.raises(warm.WarmGone, match="busy"):
            found.request("check", {"step": "s"}, 5.0)
        used = []

        def check(ev):
            used.append(type(ev).__name__)
            if isinstance(ev, warm.WarmEvaluator):
                ev.request("check", {"step": "s"}, 5.0)
            return "verdict"

        got = warm.using(settings, check)
    finally:
        release.set()
    assert got == "verdict" and used == ["WarmEvaluator", "Evaluator"]
    assert host.evaluator.asked == []


def test_training_and_unknown_requests_are_refused(host, settings):
    found = warm.connect(settings)
    with pytest.raises(warm.WarmGone):
        found.request("train", {"code": "x"}, None)
    assert warm._ask(host.path, {"op": "train", "payload": {}}, 5.0) == {"type": "refused"}
    assert warm._ask(host.path, {"op": "stop"}, 5.0) == {"type": "refused"}  # not `warm`'s
    assert host.evaluator.asked == []


def test_garbage_and_half_requests_leave_the_host_serving(host, settings, monkeypatch):
    monkeypatch.setattr(warm, "READ_WAIT", 0.5)
    for junk in (b"not json\n", b"[1, 2]\n", b'{"op": "check"'):
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(5)
            s.connect(str(host.path))
            s.sendall(junk)
            s.shutdown(socket.SHUT_WR)
            assert s.recv(100) in (b"", b'{"type": "refused"}\n')
    assert warm.connect(settings).request("scratch", {"code": "y"}, 1.0)["op"] == "scratch"


def test_a_stale_socket_is_replaced_and_never_answers(settings):
    path = warm.address(settings)
    warm._own_folder(path.parent)
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(path))
    stale.close()  # a host that ended without cleaning up
    assert path.exists() and warm.connect(settings) is None
    host = warm.Host(Echo(), settings)
    try:
        assert host.start() and warm.connect(settings) is not None
        assert not warm.Host(Echo(), settings).start()  # one host per settings
    finally:
        host.close()
    assert not path.exists() and warm.connect(settings) is None


def test_a_worker_still_loading_is_not_used(settings):
    host = warm.Host(Echo(ready=False), settings)
    assert host.start()
    try:
        assert warm.connect(settings) is None
    finally:
        host.close()


def _tutor(home: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    base = dict(os.environ, BACKPROP_TUTOR_HOME=str(home))
    return subprocess.run([sys.executable, "-m", "tutor", "--device", "cpu", *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=300,
                          env={**base, **(env or {})})


def test_check_uses_the_warm_worker_and_gets_the_cold_verdict(tmp_path):
    home = tmp_path / "home"
    started = _tutor(home, "warm", "--idle", "5")
    assert started.returncode == 0 and "warm worker serves" in started.stdout, started.stderr
    settings = Settings(device="cpu", home=home)
    try:
        for code, exit_code in ((RIGHT, 0), (WRONG, 1), ("dlogprobs = logprobs +", 1)):
            before = warm._ask(warm.address(settings), {"op": "hello"}, 5)["answered"]
            hot = _tutor(home, "check", "logprobs", "--code", code, "--json", "--no-record")
            after = warm._ask(warm.address(settings), {"op": "hello"}, 5)["answered"]
            cold = _tutor(home, "check", "logprobs", "--code", code, "--json", "--no-record",
                          env={"BACKPROP_TUTOR_NO_WARM": "1"})
            assert hot.returncode == cold.returncode == exit_code, hot.stderr + cold.stderr
            assert json.loads(hot.stdout) == json.loads(cold.stdout)
            # A syntax error is refused before any worker is asked.
            assert after - before == (exit_code == 0 or code == WRONG)
        shown = _tutor(home, "show", "logprobs")  # the shapes, from the warm worker
        assert shown.stdout == _tutor(home, "show", "logprobs",
                                      env={"BACKPROP_TUTOR_NO_WARM": "1"}).stdout
        recorded = _tutor(home, "check", "logprobs", "--code", RIGHT)
        assert recorded.returncode == 0 and "PASSED" in recorded.stdout
        progress = _tutor(home, "progress", "--json")
        assert "atomic/logprobs" in progress.stdout
    finally:
        stopped = _tutor(home, "warm", "--stop")
    assert "stopped 1 warm worker" in stopped.stdout
    assert warm.connect(settings) is None


def test_a_warm_worker_leaves_when_idle(tmp_path):
    home = tmp_path / "home"
    assert _tutor(home, "warm", "--idle", "0.02").returncode == 0  # 1.2 s
    settings = Settings(device="cpu", home=home)
    deadline = time.monotonic() + 60
    while warm.connect(settings) is not None and time.monotonic() < deadline:
        time.sleep(0.5)
    assert warm.connect(settings) is None
    assert not list(warm.folder(settings).glob("*.sock"))




def test_an_open_tutor_serves_its_worker_while_it_runs(tmp_path):
    from tutor.ui.app import TutorApp

    settings = Settings(device="cpu", home=tmp_path / "home")

    async def scenario():
        app = TutorApp(settings, greet=False)
        async with app.run_test(size=(120, 40)) as pilot:
            deadline = time.monotonic() + 120
            while app.info is None and time.monotonic() < deadline:
                await pilot.pause(0.1)
            found = warm.connect(settings)
            assert found is not None and found.info()["device"] == "cpu"
            answer = found.request("check", {"step": "atomic/logprobs", "code": RIGHT,
                                             "prior": {}}, 60.0)
            assert answer["passed"] is True
        assert warm.connect(settings) is None  # gone with the tutor

    asyncio.run(scenario())


def test_a_worker_of_auto_also_answers_for_the_device_it_chose(settings):
    auto = replace(settings, device="auto")
    host = warm.Host(Echo(), auto)  # its info says it runs on the CPU
    assert host.start()
    try:
        assert warm.connect(auto) is not None and warm.connect(settings) is not None
        assert warm.connect(replace(settings, device="cuda")) is None
        assert len(set(host.path.parent.glob("*.sock"))) == 2
    finally:
        host.close()
    assert not list(host.path.parent.glob("*.sock"))


@pytest.mark.parametrize("args, said", [
    (("warm", "--idle", "0"), "more than 0"), (("warm", "--idle", "abc"), "not 'abc'"),
    (("warm", "--stop", "--idle", "3"), "--stop"), (("--home", "FILE", "warm"), "a file")])
def test_warm_refuses_bad_arguments_in_one_line(tmp_path, args, said):
    (tmp_path / "FILE").write_text("x")
    out = _tutor(tmp_path / "home", *[str(tmp_path / a) if a == "FILE" else a for a in args])
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert said in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
