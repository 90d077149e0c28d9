"""Both ways of keeping learner code apart from the evaluator: a forked child (the CPU path) and a
freshly started interpreter (the GPU and Windows path, forced on a CPU with
BACKPROP_TUTOR_ISOLATION=spawn), whose children on Linux come from a fork server, and without it
(BACKPROP_TUTOR_FORK_SERVER=0, as on macOS, Windows and a GPU). Checks get the same verdicts every
way; a crash or a hang in learner code only ever ends a child; training runs stop at a
wall-clock limit the worker keeps.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tutor.config import ConfigError, Settings, resolve
from tutor.evaluator.client import Evaluator, check_limit
from tutor.pack.model import load_pack
from tutor.process import forkserver, spawn
from tutor.training import training_code

PACK = load_pack()
FN = Path(__file__).parent / "packs" / "fn"
FN_PACK = load_pack(FN)
PATHS = ["fork", "spawn"]
# The spawn path as macOS, Windows and a GPU take it: a fresh interpreter per check, no fork server.
STARTED = "started"
SOLUTION = "dprobs = (1.0 / probs) * dlogprobs"
# Code that catches the alarm meant to stop it wherever it lands (bare excepts around a tensor
# operation and around the loop itself), and so runs on unless something outside the child ends it.
SWALLOWS_THE_STOP = ("while True:\n    try:\n        while True:\n            try:\n"
                     "                x = torch.ones(10).sum()\n            except:\n"
                     "                pass\n    except:\n        pass\n")
ALIASED = {"atomic/logit_maxes": "dlogits = dnorm_logits\n"
                                 "dlogit_maxes = (-dnorm_logits).sum(1, keepdim=True)"}
# (pack, step, code, prior): right, wrong in catalogued and derived ways, aliased, fit only to
# the lesson's batch, failing, printing and comparing, a function step right and wrong.
CASES = [
    ("makemore", "atomic/probs", SOLUTION, {}),
    ("makemore", "atomic/h", PACK.step("atomic/h").solution, {}),
    ("makemore", "fused/cross_entropy", PACK.step("fused/cross_entropy").solution, {}),
    ("makemore", "atomic/h", "dh = dlogits @ W2.T\ndW2 = dlogits.T @ h\ndb2 = dlogits.sum(0)", {}),
    ("makemore", "atomic/logits",
     "dlogits += F.one_hot(logits.max(1).indices, num_classes=27) * dlogit_maxes", ALIASED),
    ("makemore", "atomic/logprobs",
     "dlogprobs = torch.zeros((32, 27))\ndlogprobs[range(n), Yb] = -1.0 / 32", {}),
    ("makemore", "atomic/probs", "print(probs.shape)\ndprobs = dlogprobs / probs\n"
     "cmp('probs', dprobs, probs)\nx = undefined_name", {}),
    ("makemore", "atomic/probs", "probs.zero_()\ndprobs = dlogprobs", {}),
    ("makemore", "atomic/probs", "print(torch.rand(3).tolist())\n" + SOLUTION, {}),
    ("fn", "fn/layernorm_backward", FN_PACK.step("fn/layernorm_backward").solution, {}),
    ("fn", "fn/layernorm_backward",
     FN_PACK.step("fn/layernorm_backward").solution.replace("return dinp", "return 2 * dinp"),
     {}),
]


def _engine(isolation: str, pack: str = "makemore", **settings):
    from tutor.core.engine import Engine

    with pytest.MonkeyPatch.context() as mp:
        if isolation == STARTED:  # the engine decides when it starts its first child
            mp.setenv("BACKPROP_TUTOR_FORK_SERVER", "0")
        engine = Engine(Settings(device="cpu", isolation="fork" if isolation == "fork" else
                                 "spawn", pack=str(FN) if pack == "fn" else pack, **settings))
        engine.prepare()
    return engine


@pytest.fixture(scope="module")
def engines():
    made = {(path, pack): _engine(path, pack)
            for path in [*PATHS, STARTED] for pack in ("makemore", "fn")}
    yield made
    for engine in made.values():
        engine.close()


# --- the switch -----------------------------------------------------------------------------


def test_the_switch_is_read_from_the_environment_and_checked(monkeypatch, tmp_path):
    assert resolve(config_path=tmp_path / "none.toml").isolation == "auto"
    monkeypatch.setenv("BACKPROP_TUTOR_ISOLATION", "spawn")
    assert resolve(config_path=tmp_path / "none.toml").isolation == "spawn"
    monkeypatch.setenv("BACKPROP_TUTOR_ISOLATION", "thread")
    with pytest.raises(ConfigError, match="BACKPROP_TUTOR_ISOLATION must be one of auto, fork"):
        resolve(config_path=tmp_path / "none.toml")


def test_auto_forks_on_a_cpu_and_starts_children_for_a_gpu():
    from tutor.core.engine import isolation_for
    from tutor.core.network import DeviceError

    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert isolation_for("auto", cpu) == ("fork" if hasattr(os, "fork") else "spawn")
    assert isolation_for("auto", cuda) == "spawn"
    assert isolation_for("spawn", cpu) == "spawn"
    with pytest.raises(DeviceError, match="cannot serve the cuda device"):
        isolation_for("fork", cuda)


def test_the_plan_crosses_to_a_child_with_its_shared_memory():
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    plan = {"base": base, "view": base[1:, ::2], "same": base, "ints": torch.arange(3),
            "leaf": torch.ones(2, requires_grad=True), "empty": torch.zeros(0, 5), "n": 4}
    back = spawn.unpack_plan(spawn.pack_plan(plan), torch.device("cpu"))
    assert torch.equal(back["view"], base[1:, ::2]) and back["view"].stride() == (6, 2)
    back["base"][1, 0] = -1.0  # one block of memory, as in the worker
    assert back["view"][0, 0] == -1.0 and back["same"][1, 0] == -1.0
    assert back["ints"].dtype == torch.int64 and back["leaf"].requires_grad
    assert back["empty"].shape == (0, 5) and back["n"] == 4


def test_the_plan_lands_on_another_device_in_its_layout_and_its_sharing():
    # The simulated accelerator stands in for a GPU here (tutor/devices.py): the layout must
    # survive the move, tensors that shared memory still share it, and others still do not.
    from tutor.devices import ACCELERATOR, Simulated

    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    plan = {"base": base, "view": base[1:, ::2], "ints": torch.arange(3),
            "empty": torch.zeros(0, 5), "other": torch.ones(3)}
    with Simulated():
        moved = spawn.unpack_plan(spawn.pack_plan(plan), ACCELERATOR)
        for name, t in plan.items():
            m = moved[name]
            assert m.is_cuda and m.dtype == t.dtype and torch.equal(m.cpu(), t)
            assert (m.shape, m.stride(), m.storage_offset()) == (t.shape, t.stride(),
                                                                  t.storage_offset())
        moved["base"][1, 0] = -1.0
        assert moved["view"][0, 0] == -1.0 and base[1, 0] == 6.0
        storage = {k: t.untyped_storage().data_ptr() for k, t in moved.items()}
        assert storage["other"] != storage["base"] != storage["ints"]


def test_the_child_accepts_no_class_outside_the_request():
    import pickle

    data = spawn.pack_plan({"ok": 1})
    memory, tensors, _ = pickle.loads(data)
    forged = pickle.dumps((memory, tensors, pickle.dumps(os.system)))
    with pytest.raises(pickle.UnpicklingError, match="may not hold"):
        spawn.unpack_plan(forged, torch.device("cpu"))


def test_what_a_child_accepts_is_derived_from_the_step_kinds():
    import pickle

    from tutor.core.execution import CheckSpec
    from tutor.core.kinds import CHECKS, plan_classes

    allowed = plan_classes()
    assert ("tutor.core.execution", "CheckSpec") in allowed
    assert all(cls.__module__.startswith("tutor.core") for check in CHECKS.values()
               for cls in check.plan_types)
    spec = CheckSpec.__new__(CheckSpec)
    data = spawn.pack_plan({"spec": spec})
    assert isinstance(spawn.unpack_plan(data, torch.device("cpu"), allowed)["spec"], CheckSpec)
    with pytest.raises(pickle.UnpicklingError, match="may not hold"):
        spawn.unpack_plan(data, torch.device("cpu"))  # no kind named: no class


# --- the same verdicts on both paths --------------------------------------------------------


def _comparable(result: dict) -> dict:
    return {k: v for k, v in result.items() if k not in ("timing", "elapsed_ms")}


@pytest.mark.parametrize("pack, step, code, prior", CASES,
                         ids=[f"{c[1]}-{i}" for i, c in enumerate(CASES)])
def test_a_started_child_gives_the_verdict_a_forked_one_gives(engines, pack, step, code, prior):
    forked = engines[("fork", pack)].check(step, code, prior).to_dict()
    served = engines[("spawn", pack)].check(step, code, prior).to_dict()
    started = engines[(STARTED, pack)].check(step, code, prior).to_dict()
    assert _comparable(served) == _comparable(forked)
    assert _comparable(started) == _comparable(forked)


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _ready_child(engine):
    engine.prepare()
    while not engine.ready():
        time.sleep(0.01)
    return engine._spawned[0]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork server is Linux's")
def test_the_spawn_path_forks_from_one_server_unless_turned_off(engines):
    engine = engines[("spawn", "makemore")]
    servers = {_parent(_ready_child(engine).pid)}
    engine.check("atomic/probs", SOLUTION)
    servers.add(_parent(_ready_child(engine).pid))
    assert len(servers) == 1 and os.getpid() not in servers
    assert "--server" in Path(f"/proc/{servers.pop()}/cmdline").read_text()
    assert _parent(_ready_child(engines[(STARTED, "makemore")]).pid) == os.getpid()
    assert "FORK_SERVER=0" in forkserver.unavailable("cpu", {"BACKPROP_TUTOR_FORK_SERVER": "0"})
    assert "initialised cuda" in forkserver.unavailable("cuda", {})


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork server is Linux's")
def test_a_child_of_the_fork_server_is_killed_at_its_limit_and_collected():
    engine = _engine("spawn", timeout=1.0)
    try:
        child = _ready_child(engine)
        server = _parent(child.pid)
        started = time.monotonic()
        result = engine.check("atomic/probs", "while True: pass").to_dict()
        assert result["error"]["kind"] == "timeout"
        # The limit is CPU time (a busy machine stretches it on the wall clock); the worker's
        # wall-clock backstop is the bound either way.
        assert time.monotonic() - started < engine.settings.backstop + 0.5
        deadline = time.monotonic() + 5
        while Path(f"/proc/{child.pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not Path(f"/proc/{child.pid}").exists(), "killed, and collected by its server"
        assert engine.check("atomic/probs", SOLUTION).to_dict()["passed"]
        assert _parent(_ready_child(engine).pid) == server  # the same server serves on
    finally:
        engine.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork server is Linux's")
def test_a_killed_fork_server_is_started_again_and_the_check_gets_its_verdict(capfd):
    engine = _engine("spawn")
    try:
        server = _parent(_ready_child(engine).pid)
        os.kill(server, signal.SIGKILL)
        while Path(f"/proc/{server}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
            time.sleep(0.01)  # dead, not yet collected
        assert engine.check("atomic/probs", SOLUTION).to_dict()["passed"]
        assert "the fork server stopped" in capfd.readouterr().err
        assert _parent(_ready_child(engine).pid) not in (server, os.getpid())
    finally:
        engine.close()


def test_scratch_runs_match_too(engines):
    code = "print(probs.shape)\nx = probs.sum()"
    assert (engines[("spawn", "makemore")].scratch("atomic/probs", code).to_dict()
            == engines[("fork", "makemore")].scratch("atomic/probs", code).to_dict())


def test_a_check_waits_for_a_child_still_starting():
    engine = _engine("spawn")
    try:
        engine.close()  # no child ready: this check starts its own
        waited = []
        engine.on_wait = waited.append
        assert engine.check("atomic/probs", SOLUTION).to_dict()["passed"]
        assert waited == [spawn.START_LIMIT]
    finally:
        engine.close()


def test_the_client_waits_for_a_child_still_starting(tmp_path, monkeypatch):
    # Every started child here takes 4 s to start, twice the client's limit for this check: the
    # worker says it is waiting for one, and the client waits instead of restarting it.
    (tmp_path / "sitecustomize.py").write_text(
        "import sys, time\nif 'tutor.evaluator.child' in sys.orig_argv:\n    time.sleep(4)\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    with Evaluator(Settings(device="cpu", timeout=0.5, isolation="spawn")) as ev:
        ev.info()
        assert ev.check("atomic/probs", SOLUTION).to_dict()["passed"]



def test_the_lessons_own_material_is_off_the_checks_clock():
    # The first check of a function step builds its cases and pictures in the worker: the client
    # is told to wait for them, then given back what they did not use.
    from tutor.core.engine import BUILD_ALLOWANCE

    engine = _engine("fork", "fn")
    try:
        waited: list[float] = []
        engine.on_wait = waited.append
        started = time.monotonic()
        assert engine.check("fn/layernorm_backward", FN_PACK.step(
            "fn/layernorm_backward").solution).to_dict()["passed"]
        took = time.monotonic() - started
        assert len(waited) == 2 and waited[0] == BUILD_ALLOWANCE, waited
        assert 0 < sum(waited) <= took  # the net extension is the building's own time
        waited.clear()
        assert engine.check("fn/layernorm_backward", FN_PACK.step(
            "fn/layernorm_backward").solution).to_dict()["passed"]
        assert waited == []  # built once
    finally:
        engine.close()


def test_the_client_waits_for_the_lessons_material(tmp_path, monkeypatch):
    # Building the step's cases takes 9 s in this worker, longer than the client's whole limit
    # for the check (8.5 s): the check still gets its verdict, not a timeout.
    (tmp_path / "sitecustomize.py").write_text(
        "import sys\n"
        "if 'tutor.evaluator.worker' in sys.orig_argv:\n"
        "    import time\n"
        "    from tutor.core.kinds.function import FunctionCheck\n"
        "    build = FunctionCheck.build_ahead\n"
        "    def slow(self, step):\n"
        "        if not self.built(step):\n"
        "            time.sleep(9)\n"
        "        return build(self, step)\n"
        "    FunctionCheck.build_ahead = slow\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    settings = Settings(device="cpu", timeout=0.5, tutor_seconds=1.0, pack=str(FN))
    assert check_limit(settings) < 9
    with Evaluator(settings) as ev:
        ev.info()
        result = ev.check("fn/layernorm_backward", FN_PACK.step("fn/layernorm_backward").solution)
        assert result.error is None and result.passed, result.error


# --- a crash or a hang ends a child, never the evaluator ------------------------------------


def _crash_in_child(monkeypatch, engine) -> None:
    """A stand-in for learner code that crashes the interpreter (the guard refuses every real
    route it knows): the child's run dies of SIGSEGV, on either path."""
    if engine.isolation == "fork":
        monkeypatch.setattr("tutor.core.engine.run_spec",
                            lambda *a: os.kill(os.getpid(), signal.SIGSEGV))
    else:
        crashing = (sys.executable, "-c",
                    "import os, signal, tutor.core.execution as e\n"
                    "e.run_spec = lambda *a: os.kill(os.getpid(), signal.SIGSEGV)\n"
                    "from tutor.evaluator.child import main\nmain()\n")
        monkeypatch.setattr(spawn, "CHILD_COMMAND", crashing)
        monkeypatch.setattr(forkserver, "SERVER_COMMAND", (*crashing, "--server"))
    engine.close()  # children started before the stand-in do not have it


@pytest.mark.parametrize("isolation", [*PATHS, STARTED])
def test_a_crashed_child_is_reported_and_the_next_check_gets_a_verdict(isolation, monkeypatch):
    engine = _engine(isolation)
    try:
        _crash_in_child(monkeypatch, engine)
        result = engine.check("atomic/probs", SOLUTION).to_dict()
        assert result["error"]["kind"] == "internal"
        assert "SIGSEGV" in result["error"]["message"]
        monkeypatch.undo()
        engine.close()
        assert engine.check("atomic/probs", SOLUTION).to_dict()["passed"]
    finally:
        engine.close()


@pytest.fixture(scope="module", params=PATHS)
def evaluator(request):
    ev = Evaluator(Settings(device="cpu", timeout=1.0, isolation=request.param))
    assert ev.info()["isolation"] == request.param
    yield ev
    ev.close()


def test_a_hang_that_swallows_the_stop_ends_only_its_child(evaluator):
    started = time.monotonic()
    result = evaluator.check("atomic/probs", SWALLOWS_THE_STOP).to_dict()
    assert result["error"]["kind"] == "timeout"
    # A started child may still have been loading torch when the check came: that is not
    # counted in the limit, so only a bound is asserted here.
    assert time.monotonic() - started < 1.0 + 1.5 + 30
    assert evaluator.check("atomic/probs", SOLUTION).to_dict()["passed"]


def test_a_hang_ends_only_its_started_child_without_a_fork_server(monkeypatch):
    monkeypatch.setenv("BACKPROP_TUTOR_FORK_SERVER", "0")  # the worker inherits it
    with Evaluator(Settings(device="cpu", timeout=1.0, isolation="spawn")) as ev:
        assert ev.check("atomic/probs", "while True: pass").to_dict()["error"]["kind"] == "timeout"
        assert ev.check("atomic/probs", SOLUTION).to_dict()["passed"]


def test_one_long_tensor_operation_and_a_huge_allocation_end_only_their_child(evaluator):
    code = "x = torch.ones(4000, 4000)\nfor _ in range(1):\n    y = x.matrix_power(400)"
    assert evaluator.check("atomic/probs", code).to_dict()["error"]["kind"] == "timeout"
    assert evaluator.check("atomic/probs",
                           "x = torch.ones(2**31)").to_dict()["error"]["kind"] == "memory"
    assert evaluator.check("atomic/probs", SOLUTION).to_dict()["passed"]


def test_a_training_step_that_swallows_the_stop_is_stopped_from_outside(evaluator):
    code = training_code(PACK).replace("dh = dlogits @ W2.T",
                                       "dh = dlogits @ W2.T\n" + SWALLOWS_THE_STOP)
    started = time.monotonic()
    result = evaluator.request("train", {"code": code, "steps": 1000}, None)
    from tutor.evaluator.worker import STEP_GRACE

    assert result["status"] == "error" and result["error"]["kind"] == "timeout"
    assert "stopped from outside" in result["error"]["message"]
    assert time.monotonic() - started < 1.0 + STEP_GRACE + 10  # + starting a child
    assert evaluator.check("atomic/probs", SOLUTION).to_dict()["passed"]


def test_cancel_reaches_the_training_child(evaluator):
    def progress(p: dict) -> None:
        if p.get("phase") == "train" and p["step"] >= 150:
            evaluator.cancel()

    result = evaluator.request("train", {"code": training_code(PACK), "steps": 200_000}, None,
                               progress)
    assert result["status"] == "cancelled", result.get("error")
    assert 150 <= result["steps_done"] < 200_000


def test_the_train_command_says_why_the_run_stopped(tmp_path):
    code = training_code(PACK).replace("dh = dlogits @ W2.T",
                                       "dh = dlogits @ W2.T\n" + SWALLOWS_THE_STOP)
    (tmp_path / "step.py").write_text(code)
    env = dict(os.environ, BACKPROP_TUTOR_ISOLATION="spawn", BACKPROP_TUTOR_HOME=str(tmp_path))
    out = subprocess.run(
        [sys.executable, "-m", "tutor", "train", "--file", str(tmp_path / "step.py"),
         "--device", "cpu", "--timeout", "1", "--steps", "500"],
        capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 1
    assert "timeout error: a training step ran past the time limit of 1 s" in out.stdout
    assert "stopped from outside" in out.stdout


# --- what a confined child may do -------------------------------------------------------------


PROBE = """
import os, socket, subprocess, sys
from tutor.sandbox import confine
confine.prepare()
report = confine.confine(os.getppid(), 60, workshop=None if sys.argv[1] == "-" else sys.argv[1])
if "Landlock" in report.missing:
    print("NO-LANDLOCK"); sys.exit(0)

def tried(what, action):
    try:
        action()
        print(what, "allowed")
    except (OSError, subprocess.SubprocessError):
        print(what, "refused")

tried("write outside", lambda: open(os.path.join(sys.argv[2], "outside.txt"), "w").close())
if sys.argv[1] != "-":
    tried("write inside", lambda: open(os.path.join(sys.argv[1], "inside.txt"), "w").close())
tried("chmod outside", lambda: os.chmod(sys.argv[2], 0o777))
tried("run a program", lambda: subprocess.run(["true"], check=True))
tried("open a socket", lambda: socket.socket().close())
"""


def _probe(tmp_path, workshop: str | None) -> str:
    outside = tmp_path / "outside"
    outside.mkdir()
    out = subprocess.run([sys.executable, "-c", PROBE, workshop or "-", str(outside)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    if "NO-LANDLOCK" in out.stdout:
        pytest.skip("this kernel has no Landlock")
    assert not (outside / "outside.txt").exists()
    return out.stdout


def test_a_confined_child_writes_nothing_and_starts_nothing(tmp_path):
    out = _probe(tmp_path, None)
    assert "write outside refused" in out and "run a program refused" in out
    assert "chmod outside refused" in out
    assert "open a socket refused" in out


def test_the_compilers_child_writes_only_in_its_workshop(tmp_path):
    workshop = tmp_path / "workshop"
    workshop.mkdir()
    out = _probe(tmp_path, str(workshop))
    assert "write outside refused" in out and "write inside allowed" in out
    assert "chmod outside refused" in out
    assert "run a program allowed" in out and "open a socket refused" in out
    assert (workshop / "inside.txt").exists()


def test_a_child_that_cannot_start_is_reported_at_once(monkeypatch):
    monkeypatch.setattr(spawn, "CHILD_COMMAND", (sys.executable, "-c", "raise SystemExit(3)"))
    started = time.monotonic()
    outcome = spawn.Spawned("check", {"device": "cpu", "cpu_seconds": 5}).run(None, timeout=5)
    assert outcome.status == "died" and time.monotonic() - started < 10
