"""The worker process: time limits, restarts, device errors. These start real processes."""

import sys
import time

import pytest
import torch

from tutor.config import Settings
from tutor.evaluator.client import Evaluator, EvaluatorError
from tutor.sandbox.policy import inspect

SOLUTION = "dprobs = (1.0 / probs) * dlogprobs"


@pytest.fixture(scope="module")
def evaluator():
    ev = Evaluator(Settings(device="cpu", timeout=1.5))
    ev.info()  # started and ready: the timings below are of checks, not of loading torch
    yield ev
    ev.close()


@pytest.mark.serial
def test_runaway_loop_is_stopped_and_the_next_check_works(evaluator):
    started = time.monotonic()
    result = evaluator.check("atomic/probs", "while True: pass").to_dict()
    assert result["error"]["kind"] == "timeout"
    assert time.monotonic() - started < 1.5 + 1.5 + 1.5
    assert evaluator.check("atomic/probs", SOLUTION).to_dict()["passed"]


def test_a_loop_that_swallows_the_stop_is_killed(evaluator):
    code = "while True:\n    try:\n        while True: pass\n    except Exception:\n        pass"
    result = evaluator.check("atomic/probs", code).to_dict()
    assert result["error"]["kind"] == "timeout"
    assert evaluator.check("atomic/probs", SOLUTION).to_dict()["passed"]


@pytest.mark.serial
def test_one_long_tensor_operation_is_killed_within_the_limit(evaluator):
    started = time.monotonic()
    code = "x = torch.ones(4000, 4000)\nfor _ in range(1):\n    y = x.matrix_power(400)"
    result = evaluator.check("atomic/probs", code).to_dict()
    assert result["error"]["kind"] == "timeout"
    assert time.monotonic() - started < 1.5 + 1.5 + 1.5
    assert evaluator.check("atomic/probs", SOLUTION).to_dict()["passed"]


def test_huge_allocation_is_a_memory_error(evaluator):
    result = evaluator.check("atomic/probs", "x = torch.ones(2**31)").to_dict()
    assert result["error"]["kind"] == "memory"
    assert evaluator.check("atomic/probs", SOLUTION).to_dict()["passed"]


def test_client_does_not_import_torch():
    import subprocess

    code = "import sys, tutor.evaluator.client, tutor.cli; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_missing_device_is_a_clear_error():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with Evaluator(Settings(device="cuda")) as ev, pytest.raises(EvaluatorError, match="CUDA"):
        ev.info()


def test_policy_allows_ordinary_tensor_code():
    import ast

    code = "for _ in range(n):\n    x = torch.zeros(3).sum(0, keepdim=True).T\nlambda t: t * 2"
    assert inspect(ast.parse(code)) is None


@pytest.mark.serial
def test_close_wakes_waiters_and_stops_at_once():
    import threading

    ev = Evaluator(Settings(device="cpu"))
    ev.start()
    errors = []
    waiter = threading.Thread(target=lambda: errors.append(_info_error(ev)))
    waiter.start()
    started = time.monotonic()
    ev.close()  # still loading torch
    waiter.join(timeout=5)
    assert not waiter.is_alive() and errors and errors[0]
    assert time.monotonic() - started < 2


@pytest.mark.serial
def test_close_during_a_running_check_returns_promptly():
    import threading

    ev = Evaluator(Settings(device="cpu", timeout=30))
    ev.info()
    results = []
    runner = threading.Thread(target=lambda: results.append(ev.check("probs",
                                                                     "while True: pass").to_dict()))
    runner.start()
    time.sleep(0.5)
    started = time.monotonic()
    ev.close()
    runner.join(timeout=5)
    assert not runner.is_alive()
    assert results[0]["error"]["kind"] == "internal"
    assert time.monotonic() - started < 3


def _info_error(ev):
    try:
        ev.info()
    except EvaluatorError as exc:
        return str(exc)
    return None


def test_a_throwaway_or_private_name_is_allowed_and_pythons_own_names_are_not():
    from tutor.core.candidate import CodeError, compile_candidate

    compile_candidate("def _():\n    return 1\n_()\n")  # a decorator's registered closure
    compile_candidate("def _ifgo(_dz):\n    _k = _dz * 2\n    return _k\n")  # a private name
    for code in ("def __hidden():\n    return 1\n", "x = __builtins__\n",
                 "def f(__a):\n    return __a\n", "print(__tutor_globals__)\n"):
        with pytest.raises(CodeError, match="underscore"):
            compile_candidate(code)


def test_getattr_and_the_namespace_views_follow_the_guard():
    from tutor.core.candidate import Output, compile_candidate, execute, sandbox_globals

    ns = sandbox_globals(Output())
    ns.update(x=torch.ones(2))
    execute(compile_candidate("s = getattr(x, 'shape')\nseen = 'x' in globals()\n"
                              "copy = vars()\ncopy['x'] = 0\n"), ns, Output())
    assert ns["s"] == torch.Size([2]) and ns["seen"] is True and torch.equal(ns["x"], torch.ones(2))
    with pytest.raises(Exception, match="underscore"):
        execute(compile_candidate("getattr(x, '__class__')\n"), ns, Output())


def test_a_real_module_of_a_stand_in_s_name_opens_nothing():
    """The guard answers a Python module's names only for the stand-in object itself: torch's
    own `functools`, were it ever reached, gets no stand-in's list of open names."""
    import functools

    from tutor.sandbox.guard import Refused
    from tutor.sandbox.modules import GUARD, MODULES

    assert GUARD(MODULES["functools"], "wraps") is MODULES["functools"].wraps
    assert GUARD(MODULES["torch"], "zeros") is torch.zeros
    import collections

    for real, name in ((functools, "wraps"), (collections, "deque")):
        with pytest.raises(Refused):
            GUARD(real, name)


def test_globals_called_from_the_sandbox_s_own_code_is_refused():
    """`globals` handed on as a callback reads the frame that calls it: only learner code's."""
    from tutor.core.candidate import Output, compile_candidate, execute, sandbox_globals
    from tutor.sandbox.guard import Refused

    ns = sandbox_globals(Output())
    execute(compile_candidate("mine = sorted(globals())\n"), ns, Output())
    assert "torch" in ns["mine"]
    for code in ("m = torch.nn.Sequential()\nm.forward = globals\ng = m()\n",
                 "g = torch.no_grad()(locals)()\n"):
        with pytest.raises(Refused):
            execute(compile_candidate(code), sandbox_globals(Output()), Output())
