"""The escape suite (issue 8): learner code that tries to get out of the sandbox, and must not.

The attempts themselves are data (tests/escape_corpus.py). Each runs through the real in-process
engine, a representative subset through the real worker process, and a few through the command
line. The engine and the worker are each tried on both isolation paths: a forked child per check
and a started one (the GPU path, forced on the CPU). Whatever the route, an attempt must be
refused or contained: never a pass, never a file created, never a secret or the tutor's
internals in the output, never torch's global state changed for the checks that follow.

Separately: global settings changed in one check must not reach the next check; the worker must
die with its client; odd tensor kinds returned as the gradient get a verdict, not a crash; and
what learner code prints or raises reaches the terminal without escape sequences and within a cap.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
import warnings
from collections import Counter
from pathlib import Path

import pytest
from escape_corpus import ATTEMPTS, CONTAINED, CONTROLS, GLOBAL_LEAKS, REFUSED, TIMEOUT

from tutor.config import Settings
from tutor.evaluator.client import Evaluator
from tutor.pack.model import load_pack

ROOT = Path(__file__).resolve().parents[1]
PACK = load_pack()
SOLUTION = "dprobs = (1.0 / probs) * dlogprobs\n"
CORRECT = [  # checks that must pass in an engine or worker that was attacked a moment ago
    ("atomic/probs", SOLUTION),
    ("atomic/h", PACK.step("atomic/h").solution),
    ("fused/cross_entropy", PACK.step("fused/cross_entropy").solution),
]
STDOUT_CAP = 20_000 + 2_000  # MAX_STDOUT, plus room for the warnings appended after it
MESSAGE_CAP = 5_000
TERMINAL_CONTROL = ("\x1b", "\x07")
WORKER_TIMEOUT = 2.0

ENGINE_ATTEMPTS = [pytest.param(a, id=a.id) for a in ATTEMPTS if a.engine]
WORKER_ATTEMPTS = [pytest.param(a, id=a.id) for a in ATTEMPTS if a.worker]
BY_ID = {a.id: a for a in ATTEMPTS}


# --- the attack's surroundings: a fresh target, secrets it must not read -------------------------


class Files:
    """A folder for one attempt: the secrets it must not read, the target it must not create."""

    def __init__(self, folder: Path, token: str):
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.token = token
        self.secret = folder / "secret.txt"
        self.secret.write_text(token)
        self.secret_zip = folder / "secret.pt"
        import torch

        torch.save({"secret": token}, self.secret_zip)
        self.before = sorted(p.name for p in folder.iterdir())

    def fill(self, code: str, target: Path) -> str:
        return (
            code.replace("TARGET", repr(str(target)))
            .replace("SECRET_ZIP", repr(str(self.secret_zip)))
            .replace("SECRET", repr(str(self.secret)))
        )

    def new_files(self) -> list[str]:
        return sorted(set(p.name for p in self.folder.iterdir()) - set(self.before))


@pytest.fixture
def files(tmp_path):
    return Files(tmp_path / "attack", f"TOPSECRET-{os.getpid()}-{time.monotonic_ns()}")


# --- torch's process-wide state, captured and put back --------------------------------------


_KEEP_ALIVE: list = []  # guards that switch a leaked mode back off for the rest of the session


class TorchState:
    """Everything an attempt could change for the checks after it, in this process."""

    def __init__(self):
        import torch
        from torch._tensor_str import PRINT_OPTS

        self.rng = torch.get_rng_state().clone()
        self.sigalrm = signal.getsignal(signal.SIGALRM)
        self.environ = dict(os.environ)
        self.values = {
            "default dtype": torch.get_default_dtype(),
            "default tensor type": torch.tensor([1.5], device="cpu").type(),
            "default device": str(torch.get_default_device()),
            "rng state": bytes(self.rng.tolist()),
            "deterministic algorithms": (
                torch.are_deterministic_algorithms_enabled(),
                torch.is_deterministic_algorithms_warn_only_enabled(),
            ),
            "deterministic debug mode": torch.get_deterministic_debug_mode(),
            "float32 matmul precision": torch.get_float32_matmul_precision(),
            "anomaly mode": (torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled()),
            "print options": (
                PRINT_OPTS.precision, PRINT_OPTS.threshold, PRINT_OPTS.edgeitems,
                PRINT_OPTS.linewidth, PRINT_OPTS.sci_mode,
            ),
            "flush denormal": bool(
                (torch.tensor([1e-39], dtype=torch.float32, device="cpu") * 1.0).item() == 0
            ),
            "num threads": torch.get_num_threads(),
            "num interop threads": torch.get_num_interop_threads(),
            "grad mode": torch.is_grad_enabled(),
            "inference mode": torch.is_inference_mode_enabled(),
            "autocast cpu": (torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")),
            "autocast cache": torch.is_autocast_cache_enabled(),
            "warn always": torch.is_warn_always_enabled(),
            "SIGALRM handler": self.sigalrm,
            "interval timer": signal.getitimer(signal.ITIMER_REAL),
            "environment": sorted(self.environ.items()),
            "cwd": os.getcwd(),
            "sys.stdout/stderr": (id(sys.stdout), id(sys.stderr)),
            "recursion limit": sys.getrecursionlimit(),
        }

    def diff(self, other: TorchState) -> list[str]:
        return [
            f"{k} changed" + ("" if k in ("rng state", "environment") else
                              f" from {self.values[k]!r} to {other.values[k]!r}")
            for k in self.values
            if self.values[k] != other.values[k]
        ]

    def restore(self) -> None:
        """Put this state back, so that one escape does not turn into a cascade of failures."""
        import torch
        from torch._tensor_str import PRINT_OPTS

        now = TorchState()
        for name, action in (
            ("default tensor type", lambda: torch.set_default_tensor_type(torch.FloatTensor)),
            ("default dtype", lambda: torch.set_default_dtype(self.values["default dtype"])),
            ("default device", lambda: torch.set_default_device(None)),
            ("rng state", lambda: torch.set_rng_state(self.rng)),
            ("deterministic algorithms", lambda: torch.use_deterministic_algorithms(
                *self.values["deterministic algorithms"][:1],
                warn_only=self.values["deterministic algorithms"][1])),
            ("deterministic debug mode", lambda: torch.set_deterministic_debug_mode(
                self.values["deterministic debug mode"])),
            ("float32 matmul precision", lambda: torch.set_float32_matmul_precision(
                self.values["float32 matmul precision"])),
            ("anomaly mode", lambda: torch.set_anomaly_enabled(*self.values["anomaly mode"])),
            ("print options", lambda: torch.set_printoptions(
                precision=self.values["print options"][0],
                threshold=self.values["print options"][1],
                edgeitems=self.values["print options"][2],
                linewidth=self.values["print options"][3],
                sci_mode=self.values["print options"][4])),
            ("flush denormal", lambda: torch.set_flush_denormal(False)),
            ("num threads", lambda: torch.set_num_threads(self.values["num threads"])),
            ("grad mode", lambda: torch.set_grad_enabled(self.values["grad mode"])),
            ("inference mode", lambda: _KEEP_ALIVE.append(
                torch._C._InferenceMode(self.values["inference mode"]))),
            ("autocast cpu", lambda: (
                torch.set_autocast_enabled("cpu", self.values["autocast cpu"][0]),
                torch.set_autocast_dtype("cpu", self.values["autocast cpu"][1]))),
            ("autocast cache", lambda: torch.set_autocast_cache_enabled(
                self.values["autocast cache"])),
            ("warn always", lambda: torch.set_warn_always(self.values["warn always"])),
            ("SIGALRM handler", lambda: signal.signal(signal.SIGALRM, self.sigalrm)),
            ("interval timer", lambda: signal.setitimer(signal.ITIMER_REAL, 0)),
            ("cwd", lambda: os.chdir(self.values["cwd"])),
        ):
            if now.values[name] != self.values[name]:
                with contextlib.suppress(Exception), warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    action()
        if PRINT_OPTS.precision != self.values["print options"][0]:  # profile= leaves others
            torch.set_printoptions(profile="default")
        if now.values["environment"] != self.values["environment"]:
            os.environ.clear()
            os.environ.update(self.environ)


# --- running an attempt ---------------------------------------------------------------------


def run_in_engine(engine, step: str, code: str) -> tuple[dict | None, str | None]:
    """The result, or why there is none: nothing learner code does may escape Engine.check."""
    try:
        return engine.check(step, code).to_dict(), None
    except BaseException as exc:  # noqa: BLE001 - SystemExit and KeyboardInterrupt included
        return None, f"{type(exc).__name__} escaped Engine.check: {str(exc)[:300]}"


def _explanation(message: str) -> str:
    """The message without the learner's own code it quotes (`...`): what the tutor says."""
    return re.sub(r"`[^`\n]*`", "", message)


def violations(attempt, code: str, result: dict | None, target: Path | None, files: Files,
               where: str) -> list[str]:
    """Every way this result shows the attempt got out (empty when it was held)."""
    if result is None:
        return [f"{where}: no result"]
    problems = []
    error = result.get("error") or {}
    kind = error.get("kind")
    message = str(error.get("message") or "")
    stdout = str(result.get("stdout") or "")
    if result.get("passed"):
        problems.append("the step PASSED")
    if target is not None and target.exists():
        problems.append(f"the target file was created ({target.stat().st_size} bytes)")
    if files.new_files():
        problems.append(f"files appeared next to the secrets: {files.new_files()}")
    if len(stdout) > STDOUT_CAP:
        problems.append(f"stdout is {len(stdout)} characters (cap {STDOUT_CAP})")
    if len(message) > MESSAGE_CAP:
        problems.append(f"the error message is {len(message)} characters (cap {MESSAGE_CAP})")
    for text, label in ((stdout, "stdout"), (message, "the error message")):
        if any(c in text for c in TERMINAL_CONTROL):
            problems.append(f"{label} carries terminal control characters")
    markers = (files.token,) + GLOBAL_LEAKS + attempt.leaks
    leaked = [m for m in markers if m in stdout]
    leaked += [m for m in markers if m in message and m not in code and m not in leaked]
    if leaked:
        problems.append(f"leaked {leaked}: stdout={stdout[:200]!r} message={message[:200]!r}")
    if kind == "internal":
        problems.append(f"error kind 'internal' (the sandbox broke): {message[:200]!r}")
    if attempt.expect == REFUSED:
        if kind not in ("forbidden", "runtime"):
            problems.append(f"not refused (error kind {kind!r}, stdout={stdout[:120]!r})")
        elif attempt.names and not any(n.lower() in _explanation(message).lower()
                                       for n in attempt.names):
            problems.append(f"the refusal does not name the construct {attempt.names}: "
                            f"{message[:200]!r}")
    elif attempt.expect == TIMEOUT:
        if kind not in ("timeout", "forbidden"):
            problems.append(f"not stopped at the time limit (error kind {kind!r})")
    elif attempt.expect == CONTAINED and kind not in (None, "forbidden", "runtime", "memory"):
        problems.append(f"unexpected error kind {kind!r}: {message[:200]!r}")
    return [f"{where}: {p}" for p in problems]


@pytest.fixture(scope="module", params=["fork", "spawn"])
def isolation(request):
    """Every attempt runs in a forked child (the CPU path) and in a started one (the path of a
    GPU or Windows, forced here on the CPU)."""
    return request.param


@pytest.fixture(scope="module")
def engine_ready(engine, isolation):
    """An engine with that isolation, warmed up (both batches built) before anything attacks
    it: the session's own for the fork path."""
    from tutor.core.engine import Engine

    ready = engine if isolation == "fork" else Engine(Settings(device="cpu", isolation=isolation))
    assert ready.check("atomic/probs", SOLUTION).to_dict()["passed"]
    yield ready
    if ready is not engine:
        ready.close()


@pytest.fixture(scope="module")
def evaluator(isolation):
    ev = Evaluator(Settings(device="cpu", timeout=WORKER_TIMEOUT, isolation=isolation))
    assert ev.info()["isolation"] == isolation
    yield ev
    ev.close()


def _restart(ev: Evaluator) -> None:
    """A worker the attempt broke or poisoned is replaced, so the next attempt starts clean."""
    ev.close()
    ev.start()
    ev.info()


# --- the corpus -----------------------------------------------------------------------------


def test_the_corpus_has_at_least_80_distinct_attempts_on_every_route():
    assert len(ATTEMPTS) >= 80
    assert len({a.id for a in ATTEMPTS}) == len(ATTEMPTS)
    assert len({a.code for a in ATTEMPTS}) == len(ATTEMPTS)
    routes = Counter(a.route for a in ATTEMPTS)
    assert set(routes) == {"match", "format", "frames", "torch", "builtins", "answers",
                           "classes", "slots", "functools", "records", "layers", "objects",
                           "modules"}
    assert routes["classes"] >= 40, "every route to a class object, and variations"
    assert min(routes.values()) >= 5, routes
    assert all(a.expect in (REFUSED, CONTAINED, TIMEOUT) for a in ATTEMPTS)
    for a in ATTEMPTS:
        compile(a.code.replace("SECRET_ZIP", "'z'").replace("SECRET", "'s'")
                .replace("TARGET", "'t'"), a.id, "exec")


@pytest.mark.parametrize("attempt", ENGINE_ATTEMPTS)
def test_attempt_is_held_by_the_engine(attempt, engine_ready, files):
    target = files.folder / f"{attempt.id}.target"
    code = files.fill(attempt.code, target)
    before = TorchState()
    try:
        result, raised = run_in_engine(engine_ready, attempt.step, code)
        gc.collect(1)  # a generator kept suspended by the attempt is finalised now, not later
        after = TorchState()
    finally:
        before.restore()
    problems = [f"engine: {raised}"] if raised else []
    problems += violations(attempt, code, result, target, files, "engine")
    problems += [f"engine: {d} after the check" for d in before.diff(after)]
    assert not problems, f"{attempt.id} got out:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("attempt", WORKER_ATTEMPTS)
def test_attempt_is_held_by_the_worker(attempt, evaluator, files):
    target = files.folder / f"{attempt.id}.target"
    code = files.fill(attempt.code, target)
    result = evaluator.check(attempt.step, code).to_dict()
    problems = violations(attempt, code, result, target, files, "worker")
    after = evaluator.check("atomic/probs", SOLUTION).to_dict()
    if not after.get("passed"):
        problems.append(f"worker: the next correct answer failed: {after.get('error')}")
        _restart(evaluator)
    assert not problems, f"{attempt.id} got out:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("name, code, printed", CONTROLS, ids=[c[0] for c in CONTROLS])
def test_ordinary_code_still_works(name, code, printed, engine_ready, evaluator):
    for where, result in (("engine", engine_ready.check("atomic/probs", code).to_dict()),
                          ("worker", evaluator.check("atomic/probs", code).to_dict())):
        assert result["error"] is None, (where, result["error"])
        assert result["stdout"] == printed, where
        if name == "correct-answer":
            assert result["passed"], where


# --- the command line: a fresh process, a real progress database -----------------------------


CLI_CASES = [
    ("match-print-globals-open", "fresh"),
    ("torch-file-writer-creates", "database"),
    ("match-self-import-os-system", "fresh"),
    ("answer-reference-through-frames", "fresh"),
    ("builtins-system-exit-found-by-match", "fresh"),
]


def _cli(*args: str, timeout: float = 120, isolation: str = "auto"
         ) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tutor", *args], capture_output=True, text=True, cwd=ROOT,
        timeout=timeout, env=dict(os.environ, BACKPROP_TUTOR_ISOLATION=isolation),
    )


@pytest.fixture(scope="module")
def seeded_home(tmp_path_factory):
    """A home whose progress already records a passed step, made by the CLI itself."""
    home = tmp_path_factory.mktemp("seeded") / "home"
    out = _cli("--home", str(home), "--device", "cpu", "check", "atomic/logprobs", "--code",
               PACK.step("atomic/logprobs").solution, "--json")
    assert out.returncode == 0, out.stderr
    assert (home / "progress.sqlite3").exists()
    return home


def _database(path: Path) -> dict:
    """Every table's rows (attempts separately), the schema version and the integrity check."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = [r[0] for r in con.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        out = {"integrity": con.execute("PRAGMA integrity_check").fetchone()[0],
               "version": con.execute("PRAGMA user_version").fetchone()[0], "tables": {}}
        for table in tables:
            cur = con.execute(f'SELECT * FROM "{table}"')
            columns = [d[0] for d in cur.description]
            out["tables"][table] = (columns, sorted(map(repr, cur.fetchall())))
        if "attempts" in tables:
            cur = con.execute('SELECT * FROM "attempts"')
            columns = [d[0] for d in cur.description]
            out["attempt rows"] = [dict(zip(columns, r, strict=True)) for r in cur.fetchall()]
        return out
    finally:
        con.close()


@pytest.mark.slow
@pytest.mark.parametrize("cli_isolation", ["fork", "spawn"])
@pytest.mark.parametrize("attempt_id, target_kind", CLI_CASES, ids=[c[0] for c in CLI_CASES])
def test_attempt_through_the_command_line(attempt_id, target_kind, cli_isolation, seeded_home,
                                          files, tmp_path):
    import shutil

    attempt = BY_ID[attempt_id]
    home = tmp_path / "home"
    shutil.copytree(seeded_home, home)
    db = home / "progress.sqlite3"
    target = db if target_kind == "database" else files.folder / f"{attempt.id}.target"
    code = files.fill(attempt.code, target)
    before = _database(db)
    out = _cli("--home", str(home), "--device", "cpu", "check", attempt.step, "--code", code,
               "--json", "--timeout", "5", isolation=cli_isolation)
    problems = []
    try:
        result = json.loads(out.stdout)
    except ValueError:
        result = None
        problems.append(f"cli: no JSON result (exit {out.returncode}): "
                        f"{out.stdout[-300:]!r} {out.stderr[-300:]!r}")
    if out.returncode not in (0, 1) or (result and out.returncode != (0 if result["passed"]
                                                                        else 1)):
        problems.append(f"cli: exit code {out.returncode}")
    problems += violations(attempt, code, result, None if target == db else target, files, "cli")
    try:
        after = _database(db)
    except sqlite3.DatabaseError as exc:
        problems.append(f"cli: the progress database is damaged: {exc}")
    else:
        if after["integrity"] != "ok" or after["version"] != before["version"]:
            problems.append(f"cli: database integrity {after['integrity']!r}, version "
                            f"{before['version']} -> {after['version']}")
        for table, (columns, rows) in before["tables"].items():
            if table == "attempts" or table.startswith("sqlite_"):
                continue
            if after["tables"].get(table) != (columns, rows):
                problems.append(f"cli: table {table} changed")
        if set(after["tables"]) != set(before["tables"]):
            problems.append(f"cli: tables {sorted(before['tables'])} -> "
                            f"{sorted(after['tables'])}")
        old = before.get("attempt rows", [])
        new = after.get("attempt rows", [])
        if new[: len(old)] != old:
            problems.append("cli: earlier attempts were changed")
        if any(row.get("passed") for row in new[len(old):]):
            problems.append("cli: a passed attempt was recorded")
    assert not problems, f"{attempt.id} got out:\n  " + "\n  ".join(problems)


# --- settings changed in one check must not reach the next ---------------------------------


MATMUL_DTYPE = "print((torch.ones(2, 2) @ torch.ones(2, 2)).dtype)\n"
DTYPES = "print(torch.zeros(1).dtype, torch.tensor([1.5]).dtype)\n"
RNG = "print(torch.rand(3).tolist())\n"
RNG_STATE = "s = torch.Generator().get_state()\ns[0] = 7\n"


def _held(context: str) -> str:
    return f"def g():\n    with {context}:\n        yield 1\nheld = g()\nnext(held)\n"


# (id, the setter, probes: code whose output in a later check must be what it was before)
SETTERS = [
    ("autocast", 'torch.set_autocast_enabled("cpu", True)\n',
     [MATMUL_DTYPE, 'print(torch.is_autocast_enabled("cpu"))\n']),
    ("autocast-held-by-a-generator", _held('torch.autocast("cpu", dtype=torch.bfloat16)'),
     [MATMUL_DTYPE]),
    ("autocast-dtype", 'torch.set_autocast_dtype("cpu", torch.float16)\n',
     ['with torch.autocast("cpu"):\n    ' + MATMUL_DTYPE]),
    ("default-dtype", "torch.set_default_dtype(torch.float64)\n",
     [DTYPES, "print(torch.get_default_dtype())\n"]),
    ("default-tensor-type", "torch.set_default_tensor_type(torch.DoubleTensor)\n", [DTYPES]),
    ("default-device", 'torch.set_default_device("meta")\n', ["print(torch.zeros(1).device)\n"]),
    ("rng-state", RNG_STATE + "torch.set_rng_state(s)\n", [RNG]),
    ("default-generator-state", RNG_STATE + "torch.default_generator.set_state(s)\n", [RNG]),
    ("deterministic-algorithms", "torch.use_deterministic_algorithms(True)\n",
     ["print(torch.are_deterministic_algorithms_enabled())\n"]),
    ("deterministic-debug-mode", 'torch.set_deterministic_debug_mode("error")\n',
     ["print(torch.get_deterministic_debug_mode())\n"]),
    ("float32-matmul-precision", 'torch.set_float32_matmul_precision("medium")\n',
     ["print(torch.get_float32_matmul_precision())\n"]),
    ("anomaly-mode", "torch.set_anomaly_enabled(True)\n", ["print(torch.is_anomaly_enabled())\n"]),
    ("detect-anomaly", "torch.autograd.set_detect_anomaly(True)\n",
     ["print(torch.is_anomaly_enabled())\n"]),
    ("print-options", "torch.set_printoptions(precision=1, sci_mode=True)\n",
     ["print(torch.tensor([1.123456789, 2.0]))\n"]),
    ("flush-denormal", "torch.set_flush_denormal(True)\n",
     ["print((torch.tensor([1e-39], dtype=torch.float32) * 1.0 != 0).tolist())\n"]),
    ("num-threads", "torch.set_num_threads(1)\n", ["print(torch.get_num_threads())\n"]),
    ("grad-mode-held-by-a-generator", _held("torch.no_grad()"),
     ["x = torch.ones(2, requires_grad=True)\nx.add_(1)\nprint(x.tolist())\n"]),
    ("inference-mode-held-by-a-generator", _held("torch.inference_mode()"),
     # a tensor made while inference mode is (still) on cannot be changed outside it
     ["x = torch.ones(2)\nwith torch.inference_mode(False):\n    x.add_(1)\nprint(x.tolist())\n"]),
    ("warn-always", "torch.set_warn_always(True)\n", ["print(torch.is_warn_always_enabled())\n"]),
]


def _observed(result: dict) -> tuple:
    error = result.get("error") or {}
    return (result.get("stdout"), error.get("kind"))


def _pair_problems(check, setter: str, probes: list[str], in_process: bool) -> list[str]:
    problems = []
    # the worker is expected to give every check the same starting state, random numbers
    # included; in this process the probe's own draw moves the generator, so it is left out
    probes = [p for p in probes if not (in_process and p == RNG)]
    baseline = [check("atomic/probs", p) for p in probes]
    attack = check("atomic/probs", setter)
    if attack.get("passed") or (attack.get("error") or {}).get("kind") == "internal":
        problems.append(f"the setter check: {attack.get('error')}")
    setter_refused = (attack.get("error") or {}).get("kind") in ("forbidden", "runtime")
    for step, code in CORRECT:
        r = check(step, code)
        if not r.get("passed"):
            problems.append(f"the correct answer for {step} no longer passes: "
                            f"{r.get('error') or [c['message'] for c in r['checks']]}")
    for probe, before in zip(probes, baseline, strict=True):
        after = check("atomic/probs", probe)
        if _observed(after) != _observed(before):
            problems.append(f"probe {probe.strip()!r}: {_observed(before)} -> {_observed(after)}")
        elif before.get("error") and not setter_refused and not in_process:
            # (in this process TorchState sees the setting directly; the worker has only probes)
            problems.append(f"probe {probe.strip()!r} is refused, so it cannot show the setting "
                            "is back; then the setter must be refused too")
    return problems


@pytest.mark.parametrize("setter_id, setter, probes", SETTERS, ids=[s[0] for s in SETTERS])
def test_setting_does_not_outlive_its_check_in_the_engine(setter_id, setter, probes,
                                                          engine_ready):
    before = TorchState()
    changed: list[str] = []

    def check(step, code):
        result, raised = run_in_engine(engine_ready, step, code)
        gc.collect(1)
        if code == setter:
            changed.extend(before.diff(TorchState()))
        return result or {"error": {"kind": "internal", "message": raised}}

    try:
        problems = _pair_problems(check, setter, probes, in_process=True)
    finally:
        before.restore()
    problems += [f"{d} after the setter's check" for d in changed]
    assert not problems, f"{setter_id} leaked:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("setter_id, setter, probes", SETTERS, ids=[s[0] for s in SETTERS])
def test_setting_does_not_outlive_its_check_in_the_worker(setter_id, setter, probes,
                                                          evaluator):
    problems = _pair_problems(lambda step, code: evaluator.check(step, code).to_dict(), setter,
                              probes, in_process=False)
    if problems:
        _restart(evaluator)
    assert not problems, f"{setter_id} leaked:\n  " + "\n  ".join(problems)


# --- the worker dies with its client ------------------------------------------------------


SWALLOW = "while True:\n try:\n  while True: pass\n except Exception:\n  pass\n"


def _proc_stat(pid: int) -> tuple[str, int, int, float] | None:
    """(state, ppid, session, cpu seconds) of a live process, None when it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2:].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return fields[0], int(fields[1]), int(fields[3]), (int(fields[11]) + int(fields[12])) / ticks


def _all_pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def _tree(root: int) -> set[int]:
    """The descendants of `root`, and every process in a session one of them leads."""
    found: set[int] = set()
    grew = True
    while grew:
        grew = False
        for pid in _all_pids():
            stat = _proc_stat(pid)
            if stat is None or pid in found:
                continue
            if stat[1] == root or stat[1] in found or stat[2] in found:
                found.add(pid)
                grew = True
    return found


def _alive(pids: set[int]) -> set[int]:
    return {p for p in pids if (s := _proc_stat(p)) is not None and s[0] not in ("Z", "X")}


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _assert_tree_dies_with(client: subprocess.Popen, tree: set[int]) -> None:
    workers = {p for p in tree if "tutor.evaluator.worker" in _cmdline(p)}
    assert workers, f"no worker process found under the client: {tree}"
    sessions = set(tree)
    client.kill()
    client.wait()
    deadline = time.monotonic() + 5
    survivors = _alive(tree)
    while survivors and time.monotonic() < deadline:
        time.sleep(0.1)
        survivors = _alive(tree)
    # late forks: anything now in one of those sessions counts as well
    survivors |= _alive({p for p in _all_pids() if (s := _proc_stat(p)) and s[2] in sessions})
    try:
        assert not survivors, (
            "still running 5 s after the client was killed: "
            + "; ".join(f"{p}: {_cmdline(p)[:80]}" for p in sorted(survivors))
        )
    finally:
        for pid in survivors:  # these were started by this test
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
@pytest.mark.parametrize("isolation", ["fork", "spawn"])
def test_the_worker_dies_with_an_evaluator_killed_mid_check(isolation):
    script = textwrap.dedent(f"""
        import sys
        from tutor.config import Settings
        from tutor.evaluator.client import Evaluator
        ev = Evaluator(Settings(device="cpu", timeout=60, isolation={isolation!r}))
        ev.info()
        print("READY", flush=True)
        ev.check("atomic/probs", {SWALLOW!r}).to_dict()
    """)
    client = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True)
    try:
        assert client.stdout.readline().strip() == "READY"
        time.sleep(1.0)  # the check is sent and the loop is running
        _assert_tree_dies_with(client, _tree(client.pid))
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()


@pytest.mark.slow
def test_the_worker_dies_with_a_killed_check_command(tmp_path):
    client = subprocess.Popen(
        [sys.executable, "-m", "tutor", "--home", str(tmp_path / "home"), "--device", "cpu",
         "check", "atomic/probs", "--code", SWALLOW, "--json", "--timeout", "60"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        # Wait until the worker has spent well over what loading torch and the lesson costs, so
        # that it is inside the loop (the CPU of forked children counts too).
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            tree = _tree(client.pid)
            if sum((_proc_stat(p) or ("", 0, 0, 0.0))[3] for p in tree) > 6.0:
                break
            time.sleep(0.2)
        assert client.poll() is None, "the check ended by itself"
        _assert_tree_dies_with(client, _tree(client.pid))
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()


# --- odd tensors returned as the gradient get a verdict, not a crash -------------------------


C = "((1.0 / probs) * dlogprobs)"
FAILING = ("wrong", "shape", "missing")
# Each odd kind by every route we know: the sandbox may refuse the route ("forbidden", so the
# kind never reaches grading), but whatever reaches grading gets a failing verdict in one line.
ODD_GRADIENTS = [
    ("sparse/to_sparse", f"dprobs = {C}.to_sparse()\n", FAILING),
    ("sparse/layout", "dprobs = torch.zeros_like(probs, layout=torch.sparse_coo)\n", FAILING),
    ("sparse/coo-tensor",
     "dprobs = torch.sparse_coo_tensor(torch.zeros(2, 0, dtype=torch.long), torch.zeros(0), "
     "(n, 27))\n", FAILING),
    ("sparse-csr/to_sparse_csr", f"dprobs = {C}.to_sparse_csr()\n", FAILING),
    ("sparse-csr/layout", "dprobs = torch.zeros(n, 27, layout=torch.sparse_csr)\n", FAILING),
    ("meta/empty", 'dprobs = torch.empty(32, 27, device="meta")\n', FAILING),
    ("meta/to", f'dprobs = {C}.to("meta")\n', FAILING),
    ("quantized/quantize_per_tensor",
     "dprobs = torch.quantize_per_tensor(probs, 0.1, 0, torch.quint8)\n", FAILING),
    ("quantized/dtype", "dprobs = torch.zeros(n, 27, dtype=torch.quint8)\n", FAILING),
    ("float8/e4m3fn", f"dprobs = {C}.to(torch.float8_e4m3fn)\n", FAILING),
    ("float8/e5m2", f"dprobs = {C}.to(torch.float8_e5m2)\n", FAILING),
    ("complex/to", f"dprobs = {C}.to(torch.complex64)\n", FAILING),
    ("complex/complex", f"dprobs = torch.complex({C}, {C} * 0)\n", FAILING),
    ("mkldnn/to_mkldnn", f"dprobs = {C}.to_mkldnn()\n", FAILING),
    ("bytes/view-as-uint8", f"dprobs = {C}.view(torch.uint8)\n", FAILING),
    ("subclass/parameter", "dprobs = torch.nn.Parameter(probs)\n", FAILING),
    ("subclass/buffer", "dprobs = torch.nn.Buffer(probs)\n", FAILING),
    ("subclass/linear-weight", "dprobs = torch.nn.Linear(27, n).weight\n", FAILING),
    ("subclass/uninitialized-parameter", "dprobs = torch.nn.UninitializedParameter()\n",
     FAILING),
    ("subclass/lazy-linear-weight", "dprobs = torch.nn.LazyLinear(27).weight\n", FAILING),
    ("deleted/upstream-gradient", "del dlogprobs\ndprobs = probs\n", FAILING),
    ("deleted/own-gradient", f"dprobs = {C}\ndel dprobs\n", FAILING),
    ("layout/transposed-twice", f"dprobs = {C}.T.contiguous().T\n", "pass"),
    ("layout/strided", f"x = torch.zeros(n, 54)[:, ::2]\nx[:] = {C}\ndprobs = x\n", "pass"),
    ("layout/column-major", f"x = torch.zeros(27, n).T\nx[:] = {C}\ndprobs = x\n", "pass"),
]
ODD_STEP_CASES = [  # a later step deleting an earlier step's gradient it was handed
    ("deleted-earlier-gradient", "atomic/counts_sum_inv",
     PACK.step("atomic/counts_sum_inv").solution + "del dprobs\n"),
]
DISPATCH_DUMP = ("backend", "Facebook", "dispatch", "Traceback", "aten::")


def _odd_problems(result: dict | None, expected) -> list[str]:
    if result is None:
        return ["no result"]
    problems = []
    error = result.get("error")
    if expected == "pass":
        if not result["passed"]:
            problems.append(f"a correct value in an unusual layout did not pass: {error} "
                            f"{[c['message'] for c in result['checks']]}")
        return problems
    if error and not (error.get("kind") == "forbidden" and not any(
            d in str(error.get("message")) for d in DISPATCH_DUMP)):
        # refused before it ever was a gradient is fine; anything else had to be a verdict
        problems.append(f"error {error.get('kind')!r} instead of a verdict: "
                        f"{str(error.get('message'))[:300]!r}")
    if result["passed"]:
        problems.append("it passed")
    for check in result["checks"]:
        message = check.get("message") or ""
        if check["verdict"] not in expected:
            problems.append(f"{check['grad']}: verdict {check['verdict']!r}")
        if "\n" in message.strip() or len(message) > 400 or any(
                d in message for d in DISPATCH_DUMP):
            problems.append(f"{check['grad']}: message is not one short line: {message[:300]!r}")
    if not error and not result["checks"]:
        problems.append("no verdict at all")
    return problems


@pytest.mark.parametrize("name, code, expected", ODD_GRADIENTS,
                         ids=[o[0] for o in ODD_GRADIENTS])
def test_odd_tensor_kind_as_the_gradient(name, code, expected, engine_ready, evaluator):
    before = TorchState()
    try:
        result, raised = run_in_engine(engine_ready, "atomic/probs", code)
    finally:
        before.restore()
    problems = [f"engine: {raised}"] if raised else []
    problems += [f"engine: {p}" for p in _odd_problems(result, expected)]
    problems += [f"worker: {p}" for p in _odd_problems(
        evaluator.check("atomic/probs", code).to_dict(), expected)]
    assert not problems, f"{name}:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("name, step, code", ODD_STEP_CASES, ids=[o[0] for o in ODD_STEP_CASES])
def test_deleting_a_gradient_the_step_was_handed(name, step, code, engine_ready, evaluator):
    result, raised = run_in_engine(engine_ready, step, code)
    problems = [f"engine: {raised}"] if raised else []
    for where, r in (("engine", result), ("worker", evaluator.check(step, code).to_dict())):
        if r is None:
            continue
        error = r.get("error") or {}
        if error.get("kind") == "internal" or any(d in str(error.get("message"))
                                                   for d in DISPATCH_DUMP):
            problems.append(f"{where}: {error}")
        if not error and not r["checks"]:
            problems.append(f"{where}: no verdict")
    assert not problems, "\n  ".join(problems)


# --- what reaches the terminal ----------------------------------------------------------------


ESCAPE_PRINT = 'print("\\x1b[2J\\x1b]0;PASSED\\x07")\n' + SOLUTION
ESCAPE_RAISE = 'raise ValueError("\\x1b[31m" + "x" * 10**7)\n'
RAW_ESCAPE_IN_SOURCE = 'x = "\x1b]0;PASSED\x07"; 1 / 0\n'  # the error message quotes this line


@pytest.mark.parametrize("code", [ESCAPE_PRINT, ESCAPE_RAISE, RAW_ESCAPE_IN_SOURCE],
                         ids=["print", "raise-huge", "raw-escape-in-the-failing-line"])
def test_terminal_escapes_are_removed_and_messages_capped(code, engine_ready, evaluator):
    result, raised = run_in_engine(engine_ready, "atomic/probs", code)
    problems = [f"engine: {raised}"] if raised else []
    for where, r in (("engine", result), ("worker", evaluator.check("atomic/probs",
                                                                    code).to_dict())):
        if r is None:
            continue
        message = str((r.get("error") or {}).get("message") or "")
        for label, text in (("stdout", r["stdout"]), ("error message", message)):
            if any(c in text for c in TERMINAL_CONTROL):
                problems.append(f"{where}: {label} carries ESC or BEL: {text[:80]!r}")
        if len(message) >= MESSAGE_CAP:
            problems.append(f"{where}: the error message is {len(message)} characters")
        if code != ESCAPE_PRINT and not r.get("error"):
            problems.append(f"{where}: no error reported")
    assert not problems, "\n  ".join(problems)


@pytest.mark.slow
def test_the_check_command_prints_no_terminal_escapes(tmp_path):
    out = _cli("--home", str(tmp_path / "home"), "--device", "cpu", "check", "atomic/probs",
               "--code", ESCAPE_PRINT + 'raise ValueError("\\x1b]0;FAILED\\x07")\n')
    assert out.returncode == 1
    assert not any(c in out.stdout + out.stderr for c in TERMINAL_CONTROL), out.stdout[-300:]


# --- what a child sends back is capped, with a message that says what is too large ----------


KEEPS_BIG = "\nbig = torch.zeros(16 * 2**20)  # 64 MB, kept for the steps after this one\n"
LATER = ["atomic/probs", "atomic/counts_sum_inv"]


def _kept_too_large(result: dict) -> list[str]:
    error = result.get("error") or {}
    message = str(error.get("message") or "")
    problems = []
    if result.get("passed") or error.get("kind") != "memory":
        problems.append(f"not a memory error: {error}")
    for words in ("64 MB tensor `big` between steps", "the limit is 16 MB", "del big"):
        if words not in message:
            problems.append(f"the message does not say {words!r}: {message!r}")
    return problems


def test_a_namespace_too_large_to_send_is_named_and_later_checks_still_get_verdicts(evaluator):
    prior = {"atomic/logprobs": PACK.step("atomic/logprobs").solution + KEEPS_BIG}
    first = evaluator.check("atomic/logprobs", prior["atomic/logprobs"]).to_dict()
    problems = _kept_too_large(first)  # refused in the step that keeps it
    # Code that keeps it still reaches later steps as cells of a file: they say the same.
    for step in LATER:
        result = evaluator.check(step, PACK.step(step).solution, prior).to_dict()
        problems += [f"{step}: {p}" for p in _kept_too_large(result)]
    for step, code in CORRECT:  # without the big tensor, or in another exercise: graded as ever
        result = evaluator.check(step, code).to_dict()
        if not result["passed"]:
            problems.append(f"{step} no longer passes: {result['error']}")
    assert not problems, "\n".join(problems)


def test_many_tensors_kept_together_are_named_by_the_largest(engine_ready):
    code = PACK.step("atomic/logprobs").solution + (
        "\na = torch.zeros(2 * 2**20)\nb = torch.zeros(3 * 2**20)\nview = b[:2]\n"
        "c = torch.zeros(2 * 2**20)\nnote = 'x' * 10**7\n")
    result = engine_ready.check("atomic/probs", SOLUTION, {"atomic/logprobs": code}).to_dict()
    message = (result["error"] or {}).get("message", "")
    assert result["error"]["kind"] == "memory", result["error"]
    assert "of tensors between steps, the largest a 12 MB tensor `b`" in message, message
    assert "the limit is 16 MB" in message
    # A long string kept between steps is not sent back at all: it does not stop the check.
    small = PACK.step("atomic/logprobs").solution + "\nnote = 'x' * 10**8\n"
    assert engine_ready.check("atomic/probs",
                              SOLUTION, {"atomic/logprobs": small}).to_dict()["passed"]


def test_an_answer_too_large_to_send_is_a_clear_error(engine_ready):
    flood = SOLUTION + "for i in range(40):\n    cmp(f'x{i}', torch.zeros(4_000_000), None)\n"
    assert engine_ready.check("atomic/probs",
                              flood).to_dict()["passed"]  # past the budget: not compared
    # Three gradients of 31 MB each: the step keeps them for the steps after it, past that cap.
    huge = "dh = torch.zeros(4_000_000, dtype=torch.float64)\ndW2 = dh + 1\ndb2 = dh + 2\n"
    error = engine_ready.check("atomic/h", huge).to_dict()["error"] or {}
    assert error.get("kind") == "memory", error
    assert re.search(r"keeps a 31 MB tensor `d\w+` between steps; the limit is 16 MB",
                     error["message"]), error["message"]


def test_records_past_what_one_answer_may_carry_are_replaced_by_an_error_that_names_the_largest():
    import torch

    from tutor.core.execution import _fit, encode_value

    gradient = encode_value(torch.zeros(4_000_000, dtype=torch.float64))  # 31 MB
    records = {"main": {"error": None, "notes": [], "stdout": "", "after": {"dh": gradient}}}
    _fit(records, "main")
    assert records["main"]["error"] is None
    records["heldout"] = {"error": None, "notes": [], "stdout": "",
                          "after": {"dh": gradient, "dW2": gradient}}
    _fit(records, "heldout")
    error = records["heldout"]["error"]
    assert error["kind"] == "memory" and "after" not in records["heldout"], records["heldout"]
    assert re.search(r"comes to 9\d MB \(`d\w+` alone is 31 MB\); the limit is 60 MB",
                     error["message"]), error["message"]


@pytest.mark.slow
def test_check_all_names_the_kept_tensor_in_its_cell_and_grades_the_other_cells(tmp_path):
    cells = tmp_path / "cells.py"
    cells.write_text(
        "# %% atomic/logprobs\n" + PACK.step("atomic/logprobs").solution + KEEPS_BIG
        + "".join(f"# %% {s}\n{PACK.step(s).solution}\n" for s in LATER)
        + f"# %% fused/cross_entropy\n{PACK.step('fused/cross_entropy').solution}\n")
    out = _cli("--home", str(tmp_path / "home"), "--device", "cpu", "check", "--all", str(cells),
               "--json", "--no-record")
    results = json.loads(out.stdout)
    by_step = {r["step"]: r for r in results}
    problems = _kept_too_large(by_step["atomic/logprobs"])  # refused in the cell that keeps it
    problems += [f"{s} does not pass: {by_step[s]['error']}" for s in [*LATER,
                 "fused/cross_entropy"] if not by_step[s]["passed"]]
    assert not problems, "\n".join(problems)


# --- last: after everything above, the engine and the worker still grade honestly ------------


def test_zz_still_grading_after_the_whole_corpus(engine_ready, evaluator):
    for step, code in CORRECT:
        assert engine_ready.check(step, code).to_dict()["passed"], step
        assert evaluator.check(step, code).to_dict()["passed"], step
    assert not engine_ready.check("atomic/probs", "dprobs = probs\n").to_dict()["passed"]
    assert not evaluator.check("atomic/probs", "dprobs = probs\n").to_dict()["passed"]

