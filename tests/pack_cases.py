"""What every lesson's pack test asks of its steps, written once: the reference passes (and is
held out on a fresh batch or at fresh sizes), and each catalogued mistake is refused with its
own diagnosis."""

from __future__ import annotations

import re

import pytest

from tutor.pack.kinds import Function
from tutor.pack.model import Pack


def assert_passed(result: dict) -> None:
    assert result["error"] is None, result["error"]
    failing = [(c["grad"], c["verdict"], c["diagnosis"]) for c in result["checks"]
               if c["verdict"] not in ("exact", "approximate") or c["diagnosis"]]
    assert result["passed"], failing or result.get("heldout")


def assert_reference_passes(engine, pack: Pack, step_id: str, heldout_batch: int) -> None:
    result = engine.check(step_id, pack.step(step_id).solution).to_dict()
    assert_passed(result)
    if isinstance(pack.step(step_id).kind, Function):
        assert result["heldout"]["what"].startswith("fresh sizes (")
    else:
        assert result["heldout"]["batch_size"] == heldout_batch


def assert_mistake_recognised(engine, pack: Pack, step_id: str, index: int) -> dict:
    """The mistake is refused, with its own kind and message; returns the check of its tensor
    and the whole result."""
    step = pack.step(step_id)
    mistake = step.mistakes[index]
    tensor = mistake.tensor or step.checks[0]
    result = engine.check(step_id, mistake.code).to_dict()
    assert result["error"] is None, result["error"]
    assert not result["passed"]
    check = next(c for c in result["checks"] if c["tensor"] == tensor)
    assert check["verdict"] in ("wrong", "shape"), check["verdict"]
    assert check["diagnosis"] is not None, check["message"]
    assert check["diagnosis"]["kind"] == mistake.kind, check["diagnosis"]
    assert check["diagnosis"]["message"] == mistake.message
    return result


def reference_cases(pack: Pack) -> list:
    """One parameter per checked step: its id."""
    return [pytest.param(s.id, id=s.id) for s in pack.gradient_steps]


def mistake_cases(pack: Pack) -> list:
    """One parameter per catalogued mistake: (step id, its index), named for what it is."""
    return [pytest.param(step.id, i, id=f"{step.id}-{i}-{m.kind}-d{m.tensor or step.checks[0]}")
            for step in pack.gradient_steps for i, m in enumerate(step.mistakes)]


# The diagnosis kinds a catalogued mistake may have.
MISTAKE_KINDS = {"shape", "sign", "scale", "transpose", "partial", "known_mistake"}


def assert_step_content(pack: Pack, step) -> None:
    """A step's words: at least three different hints, nothing left to do, and, for a checked
    step, catalogued mistakes of known kinds on its own tensors, hints that never hold the
    solution, and partial gradients that a later step completes with `+=`."""
    assert len(set(step.hints)) >= 3
    texts = [step.explanation, *step.hints] + [m.message for m in step.mistakes]
    assert all(t and "TODO" not in t for t in texts)
    if step.kind.trained:
        return
    assert step.mistakes, "every checked step catalogues at least one mistake"
    solution = _squash(step.solution)
    for hint in step.hints:
        assert solution not in _squash(hint), hint
    for m in step.mistakes:
        assert m.kind in MISTAKE_KINDS
        assert (m.tensor or step.checks[0]) in step.checks + step.partials
        assert _squash(m.code) != solution
    for name in step.partials:
        closing = [s for s in pack.gradient_steps if name in s.checks]
        assert closing, f"partial {name} is never completed"
        assert f"d{name} +=" in closing[0].template


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text)
