"""Snapshots of the main screen states (pytest-textual-snapshot; update with --snapshot-update).

Every snapshot waits for the evaluator, so the shapes are in place, and stops the cursor
blinking, so the picture does not depend on timing.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import pytest
from textual.geometry import Region

from tutor.config import Settings
from tutor.evaluator.client import Evaluator
from tutor.pack.model import load_pack
from tutor.session.store import Store
from tutor.ui.app import TutorApp
from tutor.ui.widgets.editor import CodeEditor
from tutor.values.results import CheckResult

pytestmark = pytest.mark.slow

CORRECT = "dlogprobs = torch.zeros_like(logprobs)\ndlogprobs[range(n), Yb] = -1.0/n\n"
WRONG = "dlogprobs = torch.zeros_like(logprobs)\ndlogprobs[range(n), Yb] = -1.0\n"


@pytest.fixture(scope="module")
def evaluator(tmp_path_factory):
    ev = Evaluator(Settings(device="cpu", home=tmp_path_factory.mktemp("ev"), timeout=2.0))
    ev.start()
    ev.info()
    yield ev
    ev.close()


@pytest.fixture
def app(tmp_path, evaluator):
    return TutorApp(Settings(device="cpu", home=tmp_path / "home", timeout=2.0),
                    evaluator=evaluator, greet=False)


async def settle(pilot) -> None:
    app = pilot.app
    deadline = time.monotonic() + 30
    while app.info is None or app.lesson.checking:
        assert time.monotonic() < deadline, "the evaluator did not answer"
        await pilot.pause(0.05)
    app.query_one(CodeEditor).cursor_blink = False
    await pilot.pause()


def submit(code: str):
    async def run_before(pilot) -> None:
        await settle(pilot)
        pilot.app.query_one(CodeEditor).load_text(code)
        await pilot.press("ctrl+j")
        await settle(pilot)

    return run_before


def test_start(snap_compare, app):
    assert snap_compare(app, terminal_size=(120, 40), run_before=settle)


def test_start_small_terminal(snap_compare, app):
    assert snap_compare(app, terminal_size=(80, 24), run_before=settle)


def test_correct_answer(snap_compare, app):
    assert snap_compare(app, terminal_size=(120, 40), run_before=submit(CORRECT))


# The loss's derivative written in at `dprobs`: right for this network, not the line's rule.
SKIPS_THE_RULE = ("dprobs = torch.zeros_like(probs)\n"
                  "dprobs[range(n), Yb] = -1.0 / (n * probs[range(n), Yb])\n")


def test_an_answer_that_skips_the_rule(snap_compare, app):
    async def run_before(pilot) -> None:
        await submit(CORRECT)(pilot)
        await pilot.press("ctrl+n")
        await settle(pilot)
        await submit(SKIPS_THE_RULE)(pilot)

    assert snap_compare(app, terminal_size=(120, 40), run_before=run_before)


def test_wrong_answer(snap_compare, app):
    assert snap_compare(app, terminal_size=(120, 40), run_before=submit(WRONG))


def test_wrong_answer_small_terminal(snap_compare, app):
    assert snap_compare(app, terminal_size=(80, 24), run_before=submit(WRONG))


def test_syntax_error(snap_compare, app):
    code = "dlogprobs = torch.zeros_like(logprobs)\ndlogprobs[range(n), Yb] = = 1\n"
    assert snap_compare(app, terminal_size=(120, 40), run_before=submit(code))


def test_reveal_confirmation(snap_compare, app):
    async def run_before(pilot) -> None:
        await settle(pilot)
        await pilot.press("f2")

    assert snap_compare(app, terminal_size=(120, 40), run_before=run_before)


def test_help(snap_compare, app):
    async def run_before(pilot) -> None:
        await settle(pilot)
        await pilot.press("f9")

    assert snap_compare(app, terminal_size=(120, 40), run_before=run_before)


def test_hint_small_terminal(snap_compare, app):
    """80×24 after a wrong answer and a hint: the forward pass shrinks to the current line and
    the feedback, scrolled to the hint just asked for, takes the room."""
    async def run_before(pilot) -> None:
        await submit(WRONG)(pilot)
        await pilot.press("f1")
        await pilot.pause(0.3)

    assert snap_compare(app, terminal_size=(80, 24), run_before=run_before)


WELCOME_HOME = Path(tempfile.gettempdir()) / "backprop-tutor-welcome-snapshot"


def test_welcome(snap_compare, evaluator):
    # A fixed folder: the welcome names the progress file, and the picture must not change.
    shutil.rmtree(WELCOME_HOME, ignore_errors=True)
    app = TutorApp(Settings(device="cpu", home=WELCOME_HOME, timeout=2.0), evaluator=evaluator)
    assert snap_compare(app, terminal_size=(80, 24), run_before=settle)


class StillClock:
    """Counts no active time, so the summary shows the times the test put in the store."""

    def touch(self, now=None) -> None:
        pass

    def pause(self, now=None) -> None:
        pass

    def take(self, now=None) -> float:
        return 0.0


def test_completion_summary(snap_compare, tmp_path, evaluator):
    pack = load_pack()
    home = tmp_path / "home"
    passed = CheckResult.from_dict({"passed": True, "checks": [{"verdict": "exact",
                                                                 "maxdiff": 0.0}]})
    wrong = CheckResult.from_dict({"passed": False, "checks": [
        {"verdict": "wrong", "maxdiff": 0.5, "diagnosis": {"kind": "sign"}}]})
    with Store.open(home, pack) as store:
        for k, step in enumerate(pack.exercise(1).steps[:-1]):
            if k in (11, 12):
                store.show_hint(step.id)
                store.reveal(step.id)
                continue
            for _ in range(k % 3):
                store.record_attempt(step.id, "x", wrong)
            store.record_attempt(step.id, step.solution, passed)
            store.add_time(step.id, 40 + 7 * k)
        store.set_current_step("atomic/C")
    app = TutorApp(Settings(device="cpu", home=home, timeout=2.0), evaluator=evaluator,
                   greet=False)

    async def run_before(pilot) -> None:
        await settle(pilot)
        pilot.app._clock = StillClock()
        await submit(pack.step("atomic/C").solution)(pilot)
        await pilot.pause(0.3)

    assert snap_compare(app, terminal_size=(80, 24), run_before=run_before)


FN = Path(__file__).parent / "packs" / "fn"
HARD_CODED_FUNCTION = '''def layernorm_backward(dout, inp, rstd):
    C = 16
    norm = (inp - inp.mean(1, keepdim=True)) * rstd
    return rstd / C * (C * dout - dout.sum(1, keepdim=True)
                       - norm * (dout * norm).sum(1, keepdim=True))
'''


def test_function_step_fails_fresh_sizes(snap_compare, tmp_path):
    """A function step: right on the lesson's tensors, wrong at a freshly drawn size."""
    settings = Settings(device="cpu", home=tmp_path / "home", timeout=2.0, pack=str(FN))
    with Evaluator(settings) as ev:
        app = TutorApp(settings, evaluator=ev, greet=False)
        assert snap_compare(app, terminal_size=(100, 32),
                            run_before=submit(HARD_CODED_FUNCTION))


def test_progress_view_small_terminal(snap_compare, tmp_path, evaluator):
    """ctrl+o at 80×24: every column whole, and one count of exact, passed and revealed."""
    pack = load_pack()
    home = tmp_path / "home"
    exact = CheckResult.from_dict({"passed": True, "checks": [{"verdict": "exact",
                                                                "maxdiff": 0.0}]})
    approx = CheckResult.from_dict({"passed": True, "checks": [{"verdict": "approximate",
                                                                 "maxdiff": 4.66e-9}]})
    with Store.open(home, pack) as store:
        for k, step in enumerate(pack.exercise(1).steps[:9]):
            if k in (3, 4):
                store.reveal(step.id)
            else:
                store.record_attempt(step.id, step.solution, approx if k % 4 == 1 else exact)
            store.add_time(step.id, 30 + 11 * k)
        store.set_current_step(pack.exercise(1).steps[9].id)
    app = TutorApp(Settings(device="cpu", home=home, timeout=2.0), evaluator=evaluator,
                   greet=False)

    async def run_before(pilot) -> None:
        await settle(pilot)
        pilot.app._clock = StillClock()
        await pilot.press("ctrl+o")
        await pilot.pause(0.2)

    assert snap_compare(app, terminal_size=(80, 24), run_before=run_before)


def test_chooser_small_terminal(snap_compare, tmp_path):
    """The lesson chooser at 80×24, with the lesson opened last highlighted."""
    from tutor.pack.model import installed_packs
    from tutor.session.controller import remember_pack

    home = tmp_path / "home"
    packs = installed_packs()
    assert packs[0] == "makemore" and "gpt" in packs
    remember_pack(home, "gpt")
    app = TutorApp(Settings(device="cpu", home=home, timeout=2.0), packs=packs)

    async def run_before(pilot) -> None:
        await pilot.pause(0.2)

    assert snap_compare(app, terminal_size=(80, 24), run_before=run_before)


LSTM = Path(__file__).parent.parent / "exercises" / "lstm"


def test_lstm_backward_right_draws_dh_t_through_time(snap_compare, tmp_path):
    """Exercise 2 of the lstm lesson checked right: under the table and the |dxs[:, t]| bars,
    the size of dh_t at each time step (the learner's function beside autograd's) and the first
    demo, the forget gate shut, on a log scale."""
    pack = load_pack(LSTM)
    home = tmp_path / "home"
    passed = CheckResult.from_dict({"passed": True, "checks": [{"verdict": "exact",
                                                                 "maxdiff": 0.0}]})
    step = pack.step("bptt/lstm_backward")
    with Store.open(home, pack) as store:
        for earlier in pack.steps[:pack.steps.index(step)]:
            store.record_attempt(earlier.id, earlier.solution, passed)
        store.set_current_step(step.id)
    settings = Settings(device="cpu", home=home, timeout=10.0, pack=str(LSTM))
    with Evaluator(settings) as ev:
        app = TutorApp(settings, evaluator=ev, greet=False)

        async def run_before(pilot) -> None:
            await submit(step.solution)(pilot)
            await pilot.press("escape")  # the exercise's completion, over the feedback
            await pilot.pause(0.2)
            feedback = pilot.app.query_one("#feedback")
            part = feedback.query_one("#feedback-result")
            # the dh_t panel's heading at the top of the feedback, the first demo under it
            strips = part.render_lines(Region(0, 0, part.size.width, part.size.height))
            row = next(k for k, strip in enumerate(strips) if "the size of dh_t" in strip.text)
            feedback.scroll_to(y=part.virtual_region.y + row, animate=False)
            await pilot.pause(0.2)

        assert snap_compare(app, terminal_size=(120, 50), run_before=run_before)
