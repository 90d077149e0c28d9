"""The rule probe (tutor/core/probe.py): an answer is graded on its rule, not only on its numbers.

On every per-line step of both lessons the reference passes with the probe run and follows the
rule, and an answer with exactly autograd's numbers but no rule (the values frozen in, as `pass`
is at a branch that carries nothing) passes with the rule skipped: right for this network, never
the plain ✓. The lecture's own near-zero branch, `dlogits` through `logit_maxes`, marks `pass`,
`+= 0` and `+= dlogit_maxes` as skipping the rule.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tutor.config import Settings
from tutor.core import probe
from tutor.core.execution import run_check
from tutor.pack.model import load_pack
from tutor.values.results import Rule, Status

ROOT = Path(__file__).resolve().parent.parent
MAKEMORE = load_pack()
GPT = load_pack(ROOT / "exercises" / "gpt")


def _probed(pack) -> list:
    """Per-line steps with gradients arriving from above: the ones the probe applies to."""
    return [s for s in pack.gradient_steps
            if probe.spec_for(pack, s, [], 0) is not None]


PROBED = [pytest.param("makemore", s.id, id=s.id) for s in _probed(MAKEMORE)] + [
    pytest.param("gpt", s.id, id=s.id) for s in _probed(GPT)]


@pytest.fixture(scope="module")
def engines():
    """Engines of their own: the frozen answers put names into the namespaces they cache."""
    from tutor.core.engine import Engine

    made = {"makemore": Engine(Settings(device="cpu")),
            "gpt": Engine(Settings(device="cpu", pack=str(ROOT / "exercises" / "gpt")))}
    yield made
    for engine in made.values():
        engine.close()


def _run_here(engine, frozen: bool, seen: list):
    """engine.execute, in this process, optionally with each graded gradient's reference put in
    the namespace as `frozen_d<name>`; the child's records are kept in `seen`."""

    def execute(step, code, prior, scratch=False, compiled=None):
        spec = engine._spec(step, code, prior)
        batches = {"main": engine.network.main, "heldout": engine.network.heldout}
        for plan in spec.batches:
            plan.known, plan.replays = False, plan.replays or []
            if frozen:
                for t in step.checks + step.partials:
                    plan.namespace[f"frozen_d{t}"] = batches[plan.name].reference[
                        (step.id, t)].clone()
        # Trusted code in this process: only the random state needs putting back.
        with torch.random.fork_rng(devices=[]):
            outcome = run_check(spec)
        seen.append(outcome)
        return outcome

    return execute


@pytest.mark.parametrize("lesson, step_id", PROBED)
def test_the_reference_passes_with_the_probe(engines, monkeypatch, lesson, step_id):
    engine = engines[lesson]
    seen: list = []
    monkeypatch.setattr(engine.kinds.of(engine.pack.step(step_id)), "_befores", {})
    monkeypatch.setattr(engine, "execute", _run_here(engine, False, seen))
    result = engine.check(step_id, engine.pack.step(step_id).solution).to_dict()
    assert result["passed"], [c["message"] for c in result["checks"]]
    assert result["rule"] == "followed", [c["note"] for c in result["checks"]]
    assert seen[0]["records"]["main"]["probe"]["line"], "the probe did not run"


@pytest.mark.parametrize("lesson, step_id", PROBED)
def test_autograds_numbers_without_a_rule_skip_it(engines, monkeypatch, lesson, step_id):
    # The right numbers, copied in (for both batches): no rule at all. The values pass; only
    # the probe can tell, and it marks the rule skipped.
    engine = engines[lesson]
    step = engine.pack.step(step_id)
    monkeypatch.setattr(engine.kinds.of(engine.pack.step(step_id)), "_befores", {})
    monkeypatch.setattr(engine, "execute", _run_here(engine, True, []))
    code = "\n".join(f"d{t} = frozen_d{t}.clone()" for t in step.checks + step.partials)
    typed = engine.check(step_id, code)
    result = typed.to_dict()
    assert result["passed"] and result["rule"] == "skipped"
    assert typed.achievement is Status.SKIPPED
    skipped = [c for c in result["checks"] if c["rule"] == "skipped"]
    assert skipped, result["checks"]
    for check in skipped:
        assert check["verdict"] in ("exact", "approximate")  # the numbers are right
        assert any(w in check["note"] for w in ("not the line's rule", "never reads",
                                                "is skipped", "written in as a value"))
        assert "numbers only" not in check["note"]
    assert all(c.mark == "↷" for c in typed.checks if c.rule is Rule.SKIPPED)


@pytest.mark.parametrize("code", [
    "pass",
    "dlogits += 0",
    "dlogits += dlogit_maxes",
    "dlogits = dlogits + torch.zeros_like(logits) * dlogit_maxes",
])
def test_the_branch_through_logit_maxes_is_skipped_when_not_written(engine, code):
    result = engine.check("atomic/logits", code).to_dict()
    (check,) = result["checks"]
    assert result["passed"] and result["rule"] == "skipped"
    assert check["rule"] == "skipped" and check["diagnosis"] is None
    assert "`dlogit_maxes`, which is nearly 0" in check["note"]


def test_the_lectures_dlogits_and_a_recomputed_upstream_pass(engine):
    step = MAKEMORE.step("atomic/logits")
    assert engine.check(step.id, step.solution).to_dict()["rule"] == "followed"
    # dlogit_maxes recomputed from further up: the fork probe sees the same random gradient
    # where the branch began, so this is right too.
    recomputed = ("dlogits += F.one_hot(logits.max(1).indices, num_classes=logits.shape[1]) "
                  "* (-dnorm_logits.sum(1, keepdim=True))")
    assert engine.check(step.id, recomputed).to_dict()["rule"] == "followed"


def test_both_branches_at_the_first_step_then_nothing_at_the_second(engine):
    # The learner wrote the whole dlogits at atomic/logit_maxes; at atomic/logits there is
    # nothing left to add, and `pass` is right there.
    prior = {"atomic/logit_maxes": (
        "dlogit_maxes = -dnorm_logits.sum(1, keepdim=True)\n"
        "dlogits = dnorm_logits.clone() + F.one_hot(logits.max(1).indices, "
        "num_classes=logits.shape[1]) * dlogit_maxes")}
    assert engine.check("atomic/logit_maxes", prior["atomic/logit_maxes"]).to_dict()["passed"]
    assert engine.check("atomic/logits", "pass", prior).to_dict()["passed"]


def test_zero_by_reasoning_passes_with_the_rule_skipped(engine):
    code = "dlogits = dnorm_logits.clone()\ndlogit_maxes = torch.zeros_like(logit_maxes)"
    result = engine.check("atomic/logit_maxes", code).to_dict()
    assert result["passed"] and result["rule"] == "skipped"
    row = next(c for c in result["checks"] if c["tensor"] == "logit_maxes")
    assert row["rule"] == "skipped"
    assert "written in as a value" in row["note"]


SECOND_BRANCHES = [pytest.param("makemore", s.id, id=s.id) for s in MAKEMORE.gradient_steps
                   if "+=" in s.solution and probe.spec_for(MAKEMORE, s, [], 0)] + [
    pytest.param("gpt", s.id, id=s.id) for s in GPT.gradient_steps
    if "+=" in s.solution and probe.spec_for(GPT, s, [], 0)]


@pytest.mark.parametrize("lesson, step_id", SECOND_BRANCHES)
def test_a_second_branch_left_out_never_gets_the_plain_mark(engines, lesson, step_id):
    # Wrong for this network (✗), or, where the branch carries nothing this network sends,
    # passed with the rule skipped.
    engine = engines[lesson]
    result = engine.check(step_id, "pass").to_dict()
    if result["passed"]:
        assert result["rule"] == "skipped"
    else:
        assert result["rule"] is None
        assert any(c["verdict"] != "exact" or c["diagnosis"] for c in result["checks"])


def test_a_mask_left_to_the_zeros_the_softmax_sends_skips_the_rule(engines):
    # dpreatt_masked is exactly 0 above the diagonal for any loss, so a copy without the mask
    # has the right values; the mask is still the line's rule.
    result = engines["gpt"].check("block/preatt", "dpreatt = dpreatt_masked.clone()").to_dict()
    assert result["passed"] and result["rule"] == "skipped"
    assert "which is 0 at" in result["checks"][0]["note"]
    masked = "dpreatt = dpreatt_masked.masked_fill(causal == 0, 0.0)"
    assert engines["gpt"].check("block/preatt", masked).to_dict()["rule"] == "followed"


def test_the_probe_is_deterministic(engine):
    first = engine.check("atomic/logits", "dlogits += dlogit_maxes").to_dict()
    again = engine.check("atomic/logits", "dlogits += dlogit_maxes").to_dict()
    assert first["checks"][0]["message"] == again["checks"][0]["message"]


def test_cotangents_are_random_everywhere_at_the_gradients_scale():
    real = torch.tensor([[0.0, 1e-9, 0.0], [2e-9, 0.0, 0.0]])
    ns = {"du": real, "dx": torch.ones(2, 3)}
    (r,) = probe.cotangents(ns, ("du",), 7, ("x",)).values()
    assert r.shape == real.shape
    assert bool((r != 0).all())  # the zeros too: nothing kept from the real gradient
    assert float(r.abs().max()) > 1e-3  # the size of the gradients around it, not of 1e-9
    assert torch.equal(r, probe.cotangents(ns, ("du",), 7, ("x",))["du"])


def test_a_gradient_from_further_up_is_varied_with_the_line(engine):
    # The fused batchnorm formula typed at the per-line step: it reads dhpreact, three steps up,
    # instead of dbnmeani. The fork varies dhpreact and replays the steps in between.
    fused = MAKEMORE.step("fused/batchnorm").solution
    assert engine.check("atomic/hprebn",
                        fused.replace("dhprebn =", "dhprebn = 0 * dhprebn +")).to_dict()[
        "passed"]
