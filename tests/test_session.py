"""The headless session (check and record in one place), the lesson's rules and the typed
result, without a UI and without torch."""

import shutil
from pathlib import Path

import pytest

from tutor.pack import curriculum
from tutor.pack.model import PackError, find_pack, load_pack
from tutor.session.controller import Lesson
from tutor.session.store import Store
from tutor.values.results import (
    CheckError,
    CheckResult,
    Diagnosis,
    ErrorKind,
    Heldout,
    ScratchResult,
    Status,
    Verdict,
)

PACK = load_pack()
FIRST, SECOND = PACK.gradient_steps[0].id, PACK.gradient_steps[1].id
TINY = Path(__file__).parent / "packs" / "tiny"


def _result(step: str, passed: bool, verdict: str = "exact") -> dict:
    return {"step": step, "passed": passed, "rule": None, "device": "cpu", "heldout": None,
            "error": None, "stdout": "", "notes": [], "figure": None, "numeric": False,
            "checks": [{"tensor": "logprobs", "grad": "dlogprobs", "shape": [32, 27],
                        "expected_shape": [32, 27], "exact": verdict == "exact",
                        "approximate": verdict in ("exact", "approximate"), "maxdiff": 0.0,
                        "verdict": verdict, "diagnosis": None, "message": "", "partial": False,
                        "heatmap": None, "note": None, "rule": None}]}


class FakeEvaluator:
    def __init__(self, passed: bool):
        self.passed, self.calls = passed, []

    def check(self, step_id, code, prior):
        self.calls.append((step_id, code, dict(prior)))
        return CheckResult.from_dict(_result(step_id, self.passed))


def test_a_pass_is_recorded_and_says_what_it_opened(tmp_path):
    with Store.open(tmp_path, PACK) as store:
        outcome = Lesson(PACK, store, FakeEvaluator(True)).check(FIRST, "code")
        assert outcome.status is Status.EXACT and outcome.problem is None
        assert outcome.unlocked == [SECOND]
        assert store.accepted_codes()[FIRST] == "code"


def test_earlier_accepted_code_is_passed_to_the_evaluator(tmp_path):
    with Store.open(tmp_path, PACK) as store:
        ev = FakeEvaluator(True)
        session = Lesson(PACK, store, ev)
        session.check(FIRST, "first")
        session.check(SECOND, "second")
        assert ev.calls[-1][2] == {FIRST: "first"}


def test_a_pass_after_a_reveal_stays_revealed(tmp_path):
    with Store.open(tmp_path, PACK) as store:
        store.reveal(FIRST)
        outcome = Lesson(PACK, store, FakeEvaluator(True)).check(FIRST, "shown")
        assert outcome.status is Status.REVEALED and outcome.revealed_pass


def test_without_a_store_the_check_runs_and_says_nothing_was_saved():
    outcome = Lesson(PACK, None, FakeEvaluator(False), "locked by another process").check(
        FIRST, "code")
    assert outcome.status is None and outcome.problem == "locked by another process"
    assert outcome.result.passed is False


def test_curriculum_opens_steps_in_order_and_training_last():
    statuses = curriculum.statuses(PACK, {})
    assert statuses[FIRST] is Status.UNLOCKED and statuses[SECOND] is Status.LOCKED
    done = {s.id: "passed" for s in PACK.gradient_steps}
    training = [s.id for s in PACK.steps if s.kind.trained][0]
    assert curriculum.statuses(PACK, done)[training] is Status.UNLOCKED
    assert curriculum.unlocked({FIRST: Status.UNLOCKED, SECOND: Status.LOCKED},
                               {FIRST: Status.EXACT, SECOND: Status.UNLOCKED}) == [SECOND]


def test_exercises_open_when_what_they_require_is_done():
    """Makemore's exercises 2 and 3 need nothing from exercise 1; training needs all three."""
    statuses = curriculum.statuses(PACK, {})
    fused = [ex.steps[0].id for ex in PACK.exercises if ex.number in (2, 3)]
    assert all(statuses[sid] is Status.UNLOCKED for sid in fused)
    training = next(s for s in PACK.steps if s.kind.trained)
    assert statuses[training.id] is Status.LOCKED
    # Exercise 1 done but not 2 and 3: training still waits, and says for what.
    done = {s.id: "revealed" for s in PACK.exercise(1).steps}
    assert curriculum.statuses(PACK, done)[training.id] is Status.LOCKED
    assert [s.id for s in curriculum.blockers(PACK, training.id, done)] == fused
    # Inside exercise 1 the steps still open one after another.
    assert [s.id for s in curriculum.blockers(PACK, SECOND, {})] == [FIRST]


def test_a_pack_without_requires_opens_its_exercises_in_order():
    gpt = load_pack(find_pack("gpt"))
    assert gpt.exercise(2).requires == () and gpt.exercise(3).requires == (1, 2)
    tiny = load_pack(find_pack(str(TINY)))
    assert tiny.exercise(2).requires == (1,)
    statuses = curriculum.statuses(gpt, {})
    assert statuses[gpt.exercise(2).steps[0].id] is Status.UNLOCKED
    assert statuses[gpt.exercise(2).steps[1].id] is Status.LOCKED


def test_requires_must_name_earlier_exercises(tmp_path):
    shutil.copytree(TINY, tmp_path / "tiny")
    layers = tmp_path / "tiny" / "01_layers.toml"
    layers.write_text(layers.read_text().replace("number = 1\n", "number = 1\nrequires = [2]\n",
                                                 1))
    with pytest.raises(PackError, match="'requires' names exercise 2"):
        load_pack(tmp_path / "tiny")


def test_dependents_are_the_later_steps_that_replay_a_step():
    deps = curriculum.dependents(PACK, FIRST)
    assert SECOND in deps and FIRST not in deps
    assert any(PACK.step(d).kind.trained for d in deps)


def test_the_typed_result_round_trips_the_json_contract():
    raw = _result(FIRST, False, "wrong")
    raw["checks"][0]["future_field"] = 1  # a field this version does not know survives
    typed = CheckResult.from_dict(raw)
    assert typed.checks[0].verdict is Verdict.WRONG and not typed.checks[0].accepted
    assert typed.failed() == typed.checks and typed.summary() == "dlogprobs wrong"
    assert typed.to_dict() == raw
    assert CheckResult.from_dict(_result(FIRST, True)).achievement is Status.EXACT


def test_errors_diagnoses_and_fresh_checks_round_trip_their_json():
    internal = CheckError.internal("the sandbox stopped")
    assert internal.kind is ErrorKind.INTERNAL
    assert internal.to_dict() == {"kind": "internal", "message": "the sandbox stopped",
                                  "line": None, "col": None}
    # An unknown kind from elsewhere reads as a runtime error, never as a crash.
    assert CheckError.from_dict({"kind": "odd", "message": "m", "line": 2}).kind is \
        ErrorKind.RUNTIME
    raw = _result(FIRST, False, "wrong")
    raw["checks"][0]["diagnosis"] = {"kind": "sign", "message": "the wrong sign"}
    raw["heldout"] = {"passed": False, "batch_size": None, "what": "fresh sizes (B=3)",
                      "message": "wrong there"}
    raw["error"] = {"kind": "runtime", "message": "boom", "line": 1, "col": 4}
    typed = CheckResult.from_dict(raw)
    assert typed.checks[0].diagnosis == Diagnosis("sign", "the wrong sign")
    assert typed.heldout == Heldout(False, None, "wrong there", "fresh sizes (B=3)")
    assert typed.error == CheckError(ErrorKind.RUNTIME, "boom", 1, 4)
    assert typed.to_dict() == raw and list(typed.to_dict()["heldout"]) == list(raw["heldout"])
    assert typed.summary() == "runtime error"
    scratch = {"step": FIRST, "stdout": "hi\n", "error": None,
               "defined": [{"name": "x", "what": "tensor [2]"}]}
    assert ScratchResult.from_dict(scratch).to_dict() == scratch


def test_statuses_print_as_their_words():
    assert f"{Status.LOCKED}" == "locked" and str(Verdict.EXACT) == "exact"
    assert Status.REVEALED.mark == "◇" and Status.REVEALED.done


def test_hints_come_one_at_a_time_are_counted_and_stop_at_the_last(tmp_path):
    step = PACK.step(FIRST)
    with Store.open(tmp_path, PACK) as store:
        session = Lesson(PACK, store, None)
        seen = [session.next_hint(FIRST) for _ in range(len(step.hints) + 1)]
        assert [len(h.shown) for h in seen] == [*range(1, len(step.hints) + 1), len(step.hints)]
        assert [h.new for h in seen] == [True] * len(step.hints) + [False]
        assert seen[-1].shown == step.hints and store.hints_shown(FIRST) == len(step.hints)
        # Looking at the hints so far shows no new one.
        assert session.next_hint(SECOND, count=False).shown == ()
        assert store.hints_shown(SECOND) == 0


def test_without_a_store_a_hint_is_shown_and_says_it_was_not_counted():
    hints = Lesson(PACK, None, None, "read-only folder").next_hint(FIRST)
    assert hints.shown == PACK.step(FIRST).hints[:1] and hints.problem == "read-only folder"


def test_the_untouched_template_is_not_an_attempt():
    session = Lesson(PACK, None, None)
    template = PACK.step(FIRST).template
    assert not session.is_attempt(FIRST, "\n" + template + "\n\n")
    assert session.is_attempt(FIRST, template.replace("...", "torch.zeros_like(logprobs)"))
