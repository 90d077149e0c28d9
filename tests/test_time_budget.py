"""The time limit is the learner's (docs/architecture.md, the check's time budget).

The limit counts the CPU time of the learner's own code, so a busy machine (a classroom server, a
laptop running other checks) stops nothing that would finish alone, on either way of isolating
learner code; a loop that never ends is still stopped at the limit. The tutor's own work after
the run that decides the verdict has a wall-clock budget of its own: when it runs out, the
verdict of the runs that finished stands with a note, never a timeout, unless the learner's code
is what used that time.
"""

from __future__ import annotations

import contextlib
import gc
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_corpus_lstm import CORRECT, WRONG

from tutor.config import Settings
from tutor.values.results import Rule

PATHS = ["fork", "spawn"]
LSTM = str(Path(__file__).resolve().parent.parent / "exercises" / "lstm")
STEP = "bptt/lstm_backward"
RIGHT = CORRECT[STEP]["range-down-chunk-out-of-place"].lstrip("\n")
_, SLIP_IN, SLIPPED, SLIP_WORDS = WRONG["loop-h_prev-one-step-late"]
SLIPPED = SLIPPED.lstrip("\n")
# The learner's own code here takes a few milliseconds of CPU time for all its runs together; the
# whole check (the lesson's cases and the picture through time built on the first check of the
# step, the fresh sizes, a hundred calls for the picture, the worker's grading and diagnosis)
# takes far more, and five times as long again on a busy core. Before the limit was the
# learner's, the client gave the whole check the limit and a second and a half.
SHORT_LIMIT = 0.1
PROBS_RIGHT = "dprobs = (1.0 / probs) * dlogprobs\n"


@pytest.fixture
def busy_core():
    """A busy machine, made reproducible: four processes that never stop share one core with
    whatever the test pins there (`pin(pid, ...)`: those processes and all they started), so
    that each of those gets about a fifth of a core, as on a classroom server. The other cores
    are left alone."""
    if not hasattr(os, "sched_setaffinity"):
        pytest.skip("pinning processes to a core needs Linux")
    mine = os.sched_getaffinity(0)
    core = max(mine)
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(4)]

    def pin(*pids: int) -> None:
        for pid in _with_descendants(pids):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.sched_setaffinity(pid, {core})

    pin(*(s.pid for s in spinners))
    try:
        yield pin
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
        os.sched_setaffinity(0, mine)


def _with_descendants(pids) -> list[int]:
    out, todo = [], list(pids)
    while todo:
        pid = todo.pop()
        out.append(pid)
        for task in Path(f"/proc/{pid}/task").glob("*/children"):
            with contextlib.suppress(OSError):
                todo += [int(c) for c in task.read_text().split()]
    return out


def _engine(isolation: str, step: str | None = None, **settings):
    """An engine whose next check finds its child ready, with `step`'s cases and pictures
    built: what is timed below is the check, not starting an interpreter or building a lesson."""
    from tutor.core.engine import Engine

    engine = Engine(Settings(device="cpu", isolation=isolation, **settings))
    if step is not None:
        engine.kinds.of(engine.pack.step(step)).build_ahead(engine.pack.step(step))
    engine.prepare()
    deadline = time.monotonic() + 60
    while not engine.ready() and time.monotonic() < deadline:
        time.sleep(0.05)
    return engine


def _assert_right(result) -> None:
    assert result.error is None, result.error
    assert result.passed, [c.message for c in result.checks]
    assert not any("ran out" in note for note in result.notes), result.notes
    _assert_whole_picture(result)


def _assert_refused_and_named(result, whole_picture: bool = True) -> None:
    assert result.error is None, result.error
    assert not result.passed
    row = next(c for c in result.checks if c.tensor == SLIP_IN)
    assert row.diagnosis is not None, row.message
    assert all(word in row.diagnosis.message for word in SLIP_WORDS), row.diagnosis.message
    if whole_picture:
        _assert_whole_picture(result)


def _assert_whole_picture(result) -> None:
    """Every call of the picture through time came back: the tutor's own work was not cut."""
    panels = (result.figure or {}).get("panels") or []
    assert len(panels) == 5, result.figure
    missing = {p["case"]: sum(v is None for v in p["yours"]) for p in panels}
    assert not any(missing.values()), missing


# --- (a) a busy machine stops nothing that would finish alone --------------------------------


@pytest.mark.serial
@pytest.mark.slow
@pytest.mark.parametrize("isolation", PATHS)
def test_a_busy_machine_stops_no_lstm_check_through_the_evaluator(isolation, busy_core):
    # The TUI's and the CLI's path: the client waits for the worker, which grades and diagnoses
    # and builds the lesson's cases and pictures on the first check of a step, all of it on a
    # core that four other processes keep busy.
    from tutor.evaluator.client import Evaluator

    with Evaluator(Settings(device="cpu", pack=LSTM, isolation=isolation,
                            timeout=SHORT_LIMIT)) as ev:
        ev.info()
        busy_core(ev._proc.pid)  # the worker, its fork server and its children ready
        for _ in range(2):  # the first check of the step, and one after
            _assert_right(ev.check(STEP, RIGHT))
            _assert_refused_and_named(ev.check(STEP, SLIPPED))


# --- (b) a loop that never ends is still stopped at the limit ------------------------------


@pytest.mark.parametrize("isolation", PATHS)
def test_a_loop_that_never_ends_is_stopped_at_the_limit(isolation):
    engine = _engine(isolation, timeout=0.5)
    try:
        started = time.monotonic()
        result = engine.check("atomic/probs", "while True: pass")
        elapsed = time.monotonic() - started
        assert result.error is not None and result.error.kind.value == "timeout"
        assert "stopped after 0.5 s" in result.error.message
        assert "loop that never ends" in result.error.message
        # The child's own alarm stopped it, at its CPU limit: the worker's wall-clock backstop,
        # which would kill it later than this, was not needed.
        assert elapsed < engine.settings.backstop, elapsed
        assert engine.check("atomic/probs", PROBS_RIGHT).passed
    finally:
        engine.close()


@pytest.mark.parametrize("isolation", PATHS)
def test_a_loop_in_a_function_step_is_stopped_at_the_limit(isolation):
    loop = RIGHT.replace("    T = xs.shape[1]\n", "    T = xs.shape[1]\n    while True:\n"
                                                    "        pass\n", 1)
    assert loop != RIGHT
    engine = _engine(isolation, STEP, pack=LSTM, timeout=0.5)
    try:
        started = time.monotonic()
        result = engine.check(STEP, loop)
        assert result.error is not None and result.error.kind.value == "timeout"
        assert "stopped after 0.5 s" in result.error.message
        assert time.monotonic() - started < engine.settings.backstop
    finally:
        engine.close()


# --- (c) the tutor's own time is its own ------------------------------------------------------


@pytest.mark.parametrize("isolation", PATHS)
def test_no_time_left_for_the_tutor_keeps_the_verdict_with_a_note(isolation):
    # With no time of its own, the tutor does nothing after the run that decides the verdict:
    # right stays right (without the fresh batch and the rule probe), wrong stays wrong and
    # named, and neither is a timeout.
    engine = _engine(isolation, tutor_seconds=0.0)
    try:
        result = engine.check("atomic/probs", PROBS_RIGHT)
        assert result.error is None and result.passed
        assert result.heldout is None and result.rule is None
        assert result.checks[0].mark == "✓"
        assert any("ran out of its own time for the fresh batch" in n
                   and "the verdict stands" in n for n in result.notes), result.notes
        wrong = engine.check("atomic/probs", "dprobs = (1.0 / probs) * dlogprobs * 2\n")
        assert wrong.error is None and not wrong.passed
    finally:
        engine.close()


@pytest.mark.parametrize("isolation", PATHS)
def test_no_time_left_for_the_fresh_sizes_keeps_a_function_steps_verdict(isolation):
    engine = _engine(isolation, pack=LSTM, tutor_seconds=0.0)
    try:
        result = engine.check(STEP, RIGHT)
        assert result.error is None and result.passed and result.heldout is None
        assert any("ran out of its own time for the fresh sizes" in n for n in result.notes)
        _assert_refused_and_named(engine.check(STEP, SLIPPED), whole_picture=False)
    finally:
        engine.close()


def test_the_tutors_work_past_its_budget_is_cut_and_the_verdict_stands(monkeypatch):
    # The tutor's own work before the rule probe (its random gradients) takes longer than the
    # tutor's budget: the probe is not run, the answer passes, and no row is blamed (no ↷).
    import tutor.core.execution as execution

    slow = execution.cotangents

    def cotangents(*args, **kwargs):
        time.sleep(3)  # a busy machine, as the tutor's clock sees it
        return slow(*args, **kwargs)

    monkeypatch.setattr(execution, "cotangents", cotangents)  # inherited by the forked child
    # The tutor's phase has its 0.5 s and what is left of the learner's 0.5 s.
    engine = _engine("fork", timeout=0.5, tutor_seconds=0.5)
    try:
        started = time.monotonic()
        result = engine.check("atomic/probs", PROBS_RIGHT)
        assert time.monotonic() - started < 3
        assert result.error is None and result.passed
        assert result.heldout is not None and result.heldout.passed  # it finished before
        assert result.rule is None and result.checks[0].mark == "✓"
        assert any("ran out of its own time for the rule probe" in n for n in result.notes)
    finally:
        engine.close()


@pytest.mark.parametrize("isolation", PATHS)
def test_a_probe_that_loops_is_the_learners_with_a_short_tutors_budget(isolation):
    # The learner's own code loops in the probe (and only there): their code used that time,
    # so the rule is skipped, as at their own limit, and the tutor claims none of it.
    code = PROBS_RIGHT + "if bool((dlogprobs != 0).sum() > n):\n    while True:\n        pass\n"
    engine = _engine(isolation, timeout=1.0, tutor_seconds=0.2)
    try:
        result = engine.check("atomic/probs", code)
        assert result.error is None and result.passed
        assert result.rule is Rule.SKIPPED
        assert "ran out of time" in (result.checks[0].note or "")
        assert not any("ran out of its own time" in n for n in result.notes), result.notes
    finally:
        engine.close()


# --- the clock itself, in this process --------------------------------------------------------


def _learner_code(source: str):
    from tutor.core.candidate import Output, compile_candidate, execute

    return lambda budget: execute(compile_candidate(source), {"n": 3}, Output(), budget)


def test_the_learners_budget_counts_the_cpu_time_of_their_code_only():
    from tutor.core.clock import Budget, CheckTimeout, watching

    # This process's garbage collector would count as the learner's if it ran in their code (a
    # check's child collects none).
    collecting = gc.isenabled()
    gc.disable()
    try:
        budget = Budget(0.3)
        with watching():
            _learner_code("x = n * 2")(budget)
            time.sleep(0.3)  # the tutor's own time, between the learner's runs: not theirs
            assert budget.spent < 0.05
            started = time.process_time()
            with pytest.raises(CheckTimeout):
                _learner_code("while True:\n    pass")(budget)
        assert 0.25 < time.process_time() - started < 1.0
        assert budget.left <= 0.01
        with watching(), pytest.raises(CheckTimeout):  # spent: the next run does not start
            _learner_code("x = 1")(budget)
    finally:
        if collecting:
            gc.enable()


def test_a_stop_on_the_tutors_budget_is_theirs_only_when_their_code_used_it():
    from tutor.core.clock import Budget, CheckTimeout, Phase, TutorTimeout, watching

    with watching():
        learner = Budget(0.3)
        _learner_code("x = sum(range(1000))")(learner)  # the first run: very little
        # The tutor's own slow work (a busy machine looks the same from here) past its budget
        # (0.05 s, and what is left of the learner's 0.3 s): not theirs.
        phase = Phase(0.05, learner)
        started = time.monotonic()
        with pytest.raises(TutorTimeout), phase:
            time.sleep(5)
        assert time.monotonic() - started < 2
        assert not phase.learners_fault()
        # Their code runs on and on after a quick first run: theirs, whichever clock stops it.
        phase = Phase(5.0, learner)
        with pytest.raises(CheckTimeout), phase:
            _learner_code("while True:\n    pass")(learner)
        assert phase.learners_fault()
