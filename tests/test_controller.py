"""The lesson controller's rules, with no UI: what a front end is told about locking, what a
check will open and complete, solutions, drafts, resets and training runs."""

from tutor.pack.model import load_pack
from tutor.session.controller import Lesson, done_exercises
from tutor.session.store import Store
from tutor.values.results import CheckResult, Rule, ScratchResult, Status
from tutor.values.runs import RunPhase, RunProgress, RunStatus, TrainingRun

PACK = load_pack()
FIRST, SECOND = PACK.gradient_steps[0].id, PACK.gradient_steps[1].id


def _result(step: str, passed: bool) -> CheckResult:
    return CheckResult.from_dict({
            "step": step, "passed": passed, "device": "cpu", "heldout": None, "error": None,
            "stdout": "", "notes": [], "figure": None,
            "checks": [{"tensor": "logprobs", "grad": "dlogprobs", "shape": [32, 27],
                        "expected_shape": [32, 27], "exact": passed, "approximate": passed,
                        "maxdiff": 0.0, "verdict": "exact" if passed else "wrong",
                        "diagnosis": None, "message": "", "partial": False, "heatmap": None,
                        "note": None}]})


class Scratchpad:
    """An evaluator that runs nothing but remembers what it was asked."""

    def __init__(self):
        self.asked: list[tuple] = []

    def scratch(self, step_id, code, prior):
        self.asked.append(("scratch", step_id, code, dict(prior)))
        return ScratchResult(step_id, stdout="hi")

    def train(self, code, steps, *, progress, **options):
        self.asked.append(("train", {"code": code, "steps": steps, **options}))
        progress(RunProgress(RunPhase.TRAIN, 1))
        # A run that passes the exercise: checked at the first steps and at one drawn at
        # random, with the reference's loss reached.
        return TrainingRun.from_dict({
            "status": "finished", "steps_done": steps,
            "settings": {"reference": False, "steps": steps, "gradcheck_steps": 5},
            "gradcheck": {"steps": 5, "passed": True, "checks": [], "random_steps": [7]},
            "train_loss": 2.2, "reference_train_loss": 2.2})


def test_a_locked_step_says_what_to_finish_first(tmp_path):
    with Store.open(tmp_path, PACK) as store:
        lesson = Lesson(PACK, store, None)
        assert lesson.locked_reason(FIRST) is None
        reason = lesson.locked_reason(SECOND)
        assert reason == (f"{PACK.step(SECOND).title} is locked: finish "
                          f"{PACK.step(FIRST).title} first.")
        opened = [s.id for s, _ in lesson.open_steps()]
        assert FIRST in opened and SECOND not in opened
        # Each exercise starts open; the training step waits for the exercises it needs.
        assert opened == [ex.steps[0].id for ex in PACK.exercises if not ex.steps[0].kind.trained]


def test_the_preview_names_the_step_a_pass_opens_before_it_is_recorded(tmp_path):
    with Store.open(tmp_path, PACK) as store:
        lesson = Lesson(PACK, store, None)
        before = lesson.statuses()
        assert lesson.preview(FIRST, _result(FIRST, True), before).note == \
            PACK.step(SECOND).title
        assert lesson.preview(FIRST, _result(FIRST, False), before).note is None
        assert lesson.statuses() == before  # nothing written


def test_a_pass_on_a_revealed_step_is_previewed_as_revealed(tmp_path):
    with Store.open(tmp_path, PACK) as store:
        lesson = Lesson(PACK, store, None)
        assert lesson.reveal_needs_asking(FIRST)
        lesson.reveal(FIRST)
        assert not lesson.reveal_needs_asking(FIRST) and lesson.solution_shown(FIRST)
        assert lesson.preview(FIRST, _result(FIRST, True), lesson.statuses()).revealed


def test_finishing_an_exercise_is_celebrated_once(tmp_path):
    with Store.open(tmp_path, PACK) as store:
        lesson = Lesson(PACK, store, None)
        milestones = lesson.milestones()
        first = PACK.exercises[0]
        for step in first.steps[:-1]:
            lesson.reveal(step.id)
        assert milestones.after(lesson.statuses()) is None
        lesson.reveal(first.steps[-1].id)
        flushed = []
        moment = milestones.after(lesson.statuses(), lambda: flushed.append(1))
        assert moment is not None and flushed == [1]
        assert [(ex.number, nxt.number) for ex, nxt in moment.finished] == \
            [(first.number, PACK.exercises[1].number)]
        assert not moment.lesson_done and len(moment.rows) == len(PACK.steps)
        assert milestones.after(lesson.statuses()) is None  # once
        assert done_exercises(PACK, lesson.statuses()) == {first.number}
        assert lesson.first_open_step(PACK.exercises[1]) == PACK.exercises[1].steps[0]


def test_drafts_the_cursor_and_the_opening_step_are_kept(tmp_path):
    with Store.open(tmp_path, PACK) as store:
        lesson = Lesson(PACK, store, None)
        assert lesson.opening_step().id == FIRST and lesson.cursor(FIRST) is None
        lesson.save_draft(FIRST, "dlogprobs = 1")
        lesson.remember_cursor(FIRST, 0, 4)
        lesson.reveal(FIRST)
        lesson.open_step(SECOND)
    with Store.open(tmp_path, PACK) as store:
        lesson = Lesson(PACK, store, None)
        assert lesson.draft(FIRST) == "dlogprobs = 1" and lesson.cursor(FIRST) == (0, 4)
        assert lesson.opening_step().id == SECOND
        assert lesson.first_time("welcomed") and not lesson.first_time("welcomed")


def test_a_reset_names_the_done_steps_it_sends_back(tmp_path):
    with Store.open(tmp_path, PACK) as store:
        lesson = Lesson(PACK, store, None)
        lesson.record(FIRST, "a", _result(FIRST, True))
        lesson.record(SECOND, "b", _result(SECOND, True))
        assert SECOND in lesson.redone_by_reset(FIRST)
        lesson.reset(FIRST)
        assert lesson.status(FIRST) == Status.UNLOCKED


def test_scratch_and_training_runs_go_through_the_evaluator_and_are_kept(tmp_path):
    with Store.open(tmp_path, PACK) as store:
        ev = Scratchpad()
        lesson = Lesson(PACK, store, ev)
        assert lesson.scratch(FIRST, "print(1)").stdout == "hi"
        assert ev.asked[0][:3] == ("scratch", FIRST, "print(1)")
        heard = []
        result = lesson.train("code", 10, progress=heard.append)
        assert heard == [RunProgress(RunPhase.TRAIN, 1)] and ev.asked[1][1]["steps"] == 10
        assert lesson.keep_run("code", result) is None
        assert result.run_id == lesson.training_runs()[-1].run_id
        assert Status(lesson.status(PACK.steps[-1].id)).done  # the training step passed


def test_a_run_without_a_store_says_why_it_was_not_kept():
    lesson = Lesson(PACK, None, None, "read-only folder")
    assert not lesson.keeps_progress
    assert lesson.keep_run("code", TrainingRun(RunStatus.FINISHED)) == "read-only folder"


def test_a_record_returns_every_status_after_it_computed_once(tmp_path):
    with Store.open(tmp_path, PACK) as store:
        lesson = Lesson(PACK, store, None)
        outcome = lesson.record(FIRST, "dlogprobs = ...", _result(FIRST, True))
        assert outcome.statuses == lesson.statuses()
        assert outcome.statuses[FIRST] is Status.EXACT
        assert outcome.statuses[SECOND] is Status.UNLOCKED and outcome.unlocked == [SECOND]


def test_a_pass_that_skips_the_rule_unlocks_the_next_step_with_its_own_status(tmp_path):
    result = _result(FIRST, True)
    result.checks[0].rule = Rule.SKIPPED
    with Store.open(tmp_path, PACK) as store:
        outcome = Lesson(PACK, store, None).record(FIRST, "dlogprobs = ...", result)
        assert outcome.status is Status.SKIPPED and outcome.unlocked == [SECOND]
        # The line's rule, written later, raises it to passed or exact.
        again = Lesson(PACK, store, None).record(FIRST, "dlogprobs = 1", _result(FIRST, True))
        assert again.status is Status.EXACT


def test_a_step_passed_elsewhere_opens_with_the_code_that_passed(tmp_path):
    """`check` from the command line records a pass without a draft: the editor then shows
    that code, not the template beside "✓ Done"."""
    with Store.open(tmp_path, PACK) as store:
        lesson = Lesson(PACK, store, None)
        lesson.record(FIRST, "dlogprobs = 42  # mine", _result(FIRST, True))
        assert lesson.draft(FIRST) == "dlogprobs = 42  # mine"
        lesson.save_draft(FIRST, "dlogprobs = 43")  # a draft typed since comes first
        assert lesson.draft(FIRST) == "dlogprobs = 43"
        assert lesson.draft(SECOND) is None
