"""The CUDA path, where a machine has one (skipped elsewhere; benchmarks/gpu_check.sh runs it).

A GPU takes the spawn path: each check's child is a started interpreter that initialises the
device itself. The verdicts must be the CPU's: every reference passes with its rule followed, a
wrong answer is wrong, code that behaves differently when probed skips the rule, and the sandbox
refuses there what it refuses on the CPU.
"""

from __future__ import annotations

import pytest

from tutor.config import Settings
from tutor.pack.model import load_pack
from tutor.values.results import ErrorKind, Rule

pytestmark = pytest.mark.cuda
PACK = load_pack()


@pytest.fixture(scope="module")
def cuda_engine():
    from tutor.core.engine import Engine

    engine = Engine(Settings(device="cuda", timeout=20.0))
    engine.prepare()
    assert engine.isolation == "spawn"
    yield engine
    engine.close()


@pytest.mark.parametrize("step_id", [s.id for s in PACK.gradient_steps])
def test_every_reference_passes_on_cuda(cuda_engine, step_id):
    result = cuda_engine.check(step_id, PACK.step(step_id).solution)
    assert result.passed, result.summary()
    assert result.rule in (Rule.FOLLOWED, None)
    assert result.device and result.device.startswith("cuda")


def test_a_wrong_answer_is_wrong_on_cuda(cuda_engine):
    result = cuda_engine.check("atomic/probs", "dprobs = dlogprobs * probs")
    assert not result.passed and result.checks[0].verdict.value == "wrong"


def test_code_that_dodges_the_probe_skips_the_rule_on_cuda(cuda_engine):
    code = ("dprobs = (1.0 / probs) * dlogprobs\n"
            "if bool((dlogprobs != 0).sum() > n):\n    raise ValueError('not now')\n")
    result = cuda_engine.check("atomic/probs", code)
    assert result.passed and result.rule is Rule.SKIPPED
    assert "raised ValueError" in (result.checks[0].note or "")


@pytest.mark.parametrize("code", [
    "import os",
    "dprobs = probs.__class__",
    "open('/etc/passwd').read()",
])
def test_the_sandbox_refuses_on_cuda(cuda_engine, code):
    result = cuda_engine.check("atomic/probs", code)
    assert not result.passed
    assert result.error is not None and result.error.kind in (ErrorKind.FORBIDDEN,
                                                              ErrorKind.RUNTIME)
