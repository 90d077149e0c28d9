"""Behaviour of the TUI, driven through Textual's Pilot against the real evaluator."""

from __future__ import annotations

import asyncio
import io
import threading
import time
from dataclasses import replace

import pytest
from rich.console import Console

from tutor.config import Settings
from tutor.evaluator.client import Evaluator, EvaluatorNotReady
from tutor.session.store import Store
from tutor.ui.app import TutorApp
from tutor.ui.screens.confirm import ConfirmReveal
from tutor.ui.screens.help import HelpScreen
from tutor.ui.screens.lesson import LessonScreen
from tutor.ui.widgets.editor import CodeEditor
from tutor.ui.widgets.feedback import Feedback
from tutor.ui.widgets.steps import StepList
from tutor.ui.widgets.topbar import TopBar

pytestmark = pytest.mark.slow

CORRECT = "dlogprobs = torch.zeros_like(logprobs)\ndlogprobs[range(n), Yb] = -1.0/n\n"
WRONG_SIGN = "dlogprobs = torch.zeros_like(logprobs)\ndlogprobs[range(n), Yb] = 1.0/n\n"
SIZE = (120, 40)
TIMEOUT = 1.0  # seconds a candidate may run; short so the timeout test is quick


@pytest.fixture(scope="module")
def evaluator(tmp_path_factory):
    """One sandbox worker for the module: loading torch is the slow part."""
    home = tmp_path_factory.mktemp("evaluator-home")
    ev = Evaluator(Settings(device="cpu", home=home, timeout=TIMEOUT))
    ev.start()
    ev.info()
    yield ev
    ev.close()


@pytest.fixture
def settings(tmp_path):
    return Settings(device="cpu", home=tmp_path / "home", timeout=TIMEOUT)


def run(scenario):
    asyncio.run(scenario())


async def wait_until(pilot, condition, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("the app did not get there in time")
        await pilot.pause(0.05)


async def ready(pilot) -> None:
    await wait_until(pilot, lambda: pilot.app.info is not None)
    await pilot.pause()


async def check(pilot, code: str, key: str = "ctrl+j") -> dict:
    lesson = pilot.app.lesson
    lesson.query_one(CodeEditor).load_text(code)
    before = lesson.results.get(lesson.step.id)
    await pilot.press(key)
    await wait_until(pilot, lambda: not lesson.checking
                     and lesson.results.get(lesson.step.id) is not before)
    await pilot.pause()
    return lesson.results[lesson.step.id][0].to_dict()


async def start_an_endless_loop(pilot) -> CodeEditor:
    """A check of `while True: pass`, under way; the editor it was typed into."""
    await ready(pilot)
    editor = pilot.app.query_one(CodeEditor)
    editor.load_text("while True:\n    pass\n")
    await pilot.press("ctrl+j")
    assert pilot.app.lesson.checking
    return editor


def feedback_text(app) -> str:
    """What the feedback panel shows, as plain text."""
    console = Console(width=110, file=io.StringIO(), record=True, color_system=None)
    for part in app.query_one(Feedback).query("Static"):
        if part.display:
            console.print(part.content)
    return console.export_text()


def test_correct_answer_shows_rows_and_unlocks_the_next_step(settings, evaluator):
    async def scenario():
        app = TutorApp(settings, evaluator=evaluator, greet=False)
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            assert app.lesson.step.id == "atomic/logprobs"
            assert app.store.status("atomic/probs") == "locked"
            result = await check(pilot, CORRECT)
            assert result["passed"]
            text = feedback_text(app)
            assert "✓ Correct" in text
            assert "dlogprobs" in text and "exact" in text and "True" in text
            assert "Next line unlocked: dprobs" in text
            assert app.store.status("atomic/logprobs") == "exact"
            assert app.store.status("atomic/probs") == "unlocked"
            await pilot.press("ctrl+n")
            assert app.lesson.step.id == "atomic/probs"

    run(scenario)


def test_wrong_answer_shows_the_diagnosis_and_a_heatmap(settings, evaluator):
    async def scenario():
        app = TutorApp(settings, evaluator=evaluator, greet=False)
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            result = await check(pilot, WRONG_SIGN, key="f5")
            assert not result["passed"]
            row = result["checks"][0]
            text = " ".join(feedback_text(app).split())
            assert "✗ Not yet." in text
            assert row["diagnosis"] is not None
            assert " ".join(row["diagnosis"]["message"].split())[:40] in text
            if row.get("heatmap"):
                assert "differs from autograd" in text
            assert app.store.status("atomic/probs") == "locked"

    run(scenario)


def test_hints_come_one_at_a_time_and_are_counted(settings, evaluator):
    async def scenario():
        app = TutorApp(settings, evaluator=evaluator, greet=False)
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            feedback = app.query_one(Feedback)
            await pilot.press("f1")
            assert app.store.hints_shown("atomic/logprobs") == 1
            assert "Hint 1 of 3" in feedback_text(app)
            assert "Hint 2 of 3" not in feedback_text(app)
            assert "hints used 1/3" in str(feedback.border_title)
            await pilot.press("f1")
            assert "Hint 2 of 3" in feedback_text(app)
            assert "hints used 2/3" in str(feedback.border_title)

    run(scenario)


def test_reveal_asks_first_and_marks_the_step_revealed(settings, evaluator):
    async def scenario():
        app = TutorApp(settings, evaluator=evaluator, greet=False)
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            await pilot.press("f2")
            assert isinstance(app.screen, ConfirmReveal)
            # Enter lands on "Keep trying": nothing is revealed by accident.
            await pilot.press("enter")
            assert not isinstance(app.screen, ConfirmReveal)
            assert app.store.status("atomic/logprobs") == "unlocked"
            assert "Reference solution" not in feedback_text(app)
            await pilot.press("f2")
            await pilot.press("escape")
            assert app.store.status("atomic/logprobs") == "unlocked"
            await pilot.press("f2")
            await pilot.click("#reveal")
            await pilot.pause()
            assert app.store.status("atomic/logprobs") == "revealed"
            assert app.store.status("atomic/probs") == "unlocked"
            assert "Reference solution" in feedback_text(app)

    run(scenario)


def test_locked_steps_are_listed_but_cannot_be_entered(settings, evaluator):
    async def scenario():
        app = TutorApp(settings, evaluator=evaluator, greet=False)
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            steps = app.query_one(StepList)
            assert steps.get_option("atomic/counts") is not None  # visible
            assert app.lesson.goto_step("atomic/counts") is False
            await pilot.press("ctrl+n")  # the next step is locked too
            assert app.lesson.step.id == "atomic/logprobs"
            # Choosing it in the sidebar with the keyboard is refused the same way.
            steps.focus()
            steps.highlighted = steps.get_option_index("atomic/probs")
            await pilot.press("enter")
            assert app.lesson.step.id == "atomic/logprobs"
            assert app.lesson.goto_step("train/loop") is False

    run(scenario)


def test_an_endless_loop_times_out_and_the_app_keeps_answering(settings, evaluator):
    async def scenario():
        app = TutorApp(settings, evaluator=evaluator, greet=False)
        async with app.run_test(size=SIZE) as pilot:
            await start_an_endless_loop(pilot)
            # While the candidate runs, keys still work.
            await pilot.press("f1")
            assert app.store.hints_shown("atomic/logprobs") == 1
            await wait_until(pilot, lambda: not app.lesson.checking)
            result = app.lesson.results["atomic/logprobs"][0].to_dict()
            assert result["error"]["kind"] == "timeout"
            assert "Time limit reached" in feedback_text(app)
            await pilot.press("f1")
            assert app.store.hints_shown("atomic/logprobs") == 2
            # And the next check works.
            assert (await check(pilot, CORRECT))["passed"]

    run(scenario)


def test_a_check_asked_for_while_one_runs_ends_on_the_verdict_of_the_code_on_screen(
        settings, evaluator):
    async def scenario():
        app = TutorApp(settings, evaluator=evaluator, greet=False)
        async with app.run_test(size=SIZE) as pilot:
            editor = await start_an_endless_loop(pilot)
            await pilot.pause()
            assert "Checking" in feedback_text(app)
            # Fixed before the time limit, and checked again at once: queued, not dropped.
            editor.load_text(CORRECT)
            await pilot.press("ctrl+j")
            assert "the run under way finishes first" in feedback_text(app)
            await wait_until(pilot, lambda: app.store.status("atomic/logprobs") == "exact"
                             and not app.lesson.checking)
            await pilot.pause()
            text = feedback_text(app)
            assert "✓ Correct" in text and "Time limit" not in text
            attempts = app.store.attempts("atomic/logprobs")
            assert [a["verdict"] for a in attempts] == ["error", "exact"]  # both recorded

    run(scenario)


def test_the_verdict_is_painted_the_moment_it_arrives(settings, evaluator, monkeypatch):
    """The verdict's handler paints it itself (Textual's frame timer would wait up to two
    frames), and that paint already shows it, the session's first verdict included."""
    async def scenario():
        app = TutorApp(settings, evaluator=evaluator, greet=False)
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            lesson = app.lesson
            paints: list[tuple[bool, str]] = []  # (inside the verdict's handler, what it drew)
            inside = [False]
            render, handle = lesson._compositor.render_update, LessonScreen.on_check_finished

            def recording_render(*args, **kwargs):
                update = render(*args, **kwargs)
                if update is not None:
                    drawn = "".join(s.text for s in app.console.render(update))
                    paints.append((inside[0], drawn))
                return update

            def watched_handler(screen, message):
                inside[0] = True
                try:
                    handle(screen, message)
                finally:
                    inside[0] = False

            lesson._compositor.render_update = recording_render
            monkeypatch.setattr(LessonScreen, "on_check_finished", watched_handler)
            for code, words in ((WRONG_SIGN, "Not yet"), (CORRECT, "Correct")):
                paints.clear()
                await check(pilot, code)
                during = [drawn for was_inside, drawn in paints if was_inside]
                assert during and words in during[0]

    run(scenario)


def test_a_new_run_clears_the_old_verdict(settings, evaluator):
    async def scenario():
        app = TutorApp(settings, evaluator=evaluator, greet=False)
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            await check(pilot, WRONG_SIGN)
            assert "Not yet" in feedback_text(app)
            app.query_one(CodeEditor).load_text("while True:\n    pass\n")
            await pilot.press("ctrl+j")
            await pilot.pause()
            text = feedback_text(app)
            assert "Checking" in text and "Not yet" not in text  # no old verdict under it
            await wait_until(pilot, lambda: not app.lesson.checking)
            await pilot.pause()
            assert "Time limit reached" in feedback_text(app)
            app.query_one(CodeEditor).load_text(WRONG_SIGN)
            await pilot.press("ctrl+r")  # a run without grading replaces it too
            await wait_until(pilot, lambda: not app.lesson.scratching)
            await pilot.pause()
            text = feedback_text(app)
            assert "Run without grading" in text and "Time limit" not in text

    run(scenario)


def test_a_syntax_error_points_at_its_line(settings, evaluator):
    async def scenario():
        app = TutorApp(settings, evaluator=evaluator, greet=False)
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            editor = app.query_one(CodeEditor)
            editor.load_text("dlogprobs = torch.zeros_like(logprobs)\n")
            editor.move_cursor((1, 0))
            # Typed key by key, as a learner would.
            await pilot.press(*"dlogprobs[range(n), Yb] = = 1")
            assert editor.text.endswith("= = 1")
            result = await check_current(pilot)
            assert result["error"]["kind"] == "syntax"
            assert result["error"]["line"] == 2
            assert editor.cursor_location[0] == 1
            assert editor.error_row == 1
            assert "Syntax error" in feedback_text(app)
            await pilot.press("x")  # editing clears the stale marker
            assert editor.error_row is None

    run(scenario)


async def check_current(pilot) -> dict:
    lesson = pilot.app.lesson
    await pilot.press("ctrl+j")
    await wait_until(pilot, lambda: not lesson.checking and lesson.step.id in lesson.results)
    await pilot.pause()
    return lesson.results[lesson.step.id][0].to_dict()


def test_help_lists_every_binding(settings, evaluator):
    async def scenario():
        app = TutorApp(settings, evaluator=evaluator, greet=False)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("f9")
            assert isinstance(app.screen, HelpScreen)
            console = Console(width=120, file=io.StringIO(), record=True, color_system=None)
            for part in app.screen.query("Static"):
                console.print(part.content)
            text = console.export_text()
            for binding in (*LessonScreen.BINDINGS, *TutorApp.BINDINGS):
                if binding.description:
                    assert binding.description in text
            await pilot.press("escape")
            assert not isinstance(app.screen, HelpScreen)

    run(scenario)


def test_palette_offers_only_open_steps(settings, evaluator):
    async def scenario():
        from tutor.ui.commands import StepCommands

        app = TutorApp(settings, evaluator=evaluator, greet=False)
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            provider = StepCommands(app.screen)
            ids = [step_id for _, step_id, _, _ in provider._targets()]
            # Exercises 2 and 3 need nothing from exercise 1: they are open from the start.
            assert ids == ["atomic/logprobs", "fused/cross_entropy", "fused/batchnorm"]
            await check(pilot, CORRECT)
            ids = [step_id for _, step_id, _, _ in provider._targets()]
            assert ids == ["atomic/logprobs", "atomic/probs", "fused/cross_entropy",
                           "fused/batchnorm"]

    run(scenario)


def test_relaunch_reopens_the_step_with_its_draft(settings, evaluator):
    async def first():
        app = TutorApp(settings, evaluator=evaluator, greet=False)
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            await check(pilot, CORRECT)
            await pilot.press("ctrl+n")
            app.query_one(CodeEditor).load_text("dprobs = 1.0 / probs  # not done yet\n")
            await pilot.pause(0.7)  # past the draft delay

    async def second():
        app = TutorApp(settings, evaluator=evaluator, greet=False)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            assert app.lesson.step.id == "atomic/probs"
            assert "# not done yet" in app.query_one(CodeEditor).text

    run(first)
    run(second)


class SlowEvaluator:
    """Stands in for an evaluator whose PyTorch is still loading."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def start(self) -> None:
        pass

    def info(self, timeout: float | None = None) -> dict:
        if not self.release.wait(timeout):
            raise EvaluatorNotReady("the evaluator is still starting")
        return {"device": "cpu", "lines": []}

    def close(self) -> None:
        self.release.set()


def test_first_frame_shows_loading_before_torch_is_ready(settings):
    async def scenario():
        slow = SlowEvaluator()
        app = TutorApp(settings, evaluator=slow, greet=False)  # type: ignore[arg-type]
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            device = app.query_one(TopBar).query_one("#device")
            assert "loading PyTorch" in str(device.content)
            assert "Loading PyTorch" in feedback_text(app)
            await pilot.press("f1")  # the app answers while it waits
            assert app.store.hints_shown("atomic/logprobs") == 1
            slow.release.set()
            await wait_until(pilot, lambda: app.info is not None)
            assert str(device.content) == "cpu"

    run(scenario)


def test_store_notices_are_shown(settings, evaluator):
    async def scenario():
        from tutor.pack.model import load_pack

        store = Store.open(settings.data_home, load_pack())
        store.notices.append("Your progress was moved aside.")
        app = TutorApp(settings, store=store, evaluator=evaluator, greet=False)
        async with app.run_test(size=SIZE, notifications=True) as pilot:
            await pilot.pause()
            messages = [n.message for n in app._notifications]
            assert "Your progress was moved aside." in messages
        store.close()

    run(scenario)


def test_solving_exercise_two_shows_the_dlogits_picture(settings, evaluator):
    async def scenario():
        from tutor.pack.model import load_pack

        pack = load_pack()
        store = Store.open(settings.data_home, pack)
        for step in pack.exercise(1).steps:
            store.reveal(step.id)
        store.set_current_step("fused/cross_entropy")
        store.close()
        app = TutorApp(settings, evaluator=evaluator, greet=False)
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            assert app.lesson.step.id == "fused/cross_entropy"
            result = await check(pilot, pack.step("fused/cross_entropy").solution)
            assert result["passed"]
            assert result["figure"] is not None
            text = " ".join(feedback_text(app).split())
            assert "one row per example" in text
            assert "Each row sums to about zero" in text

    run(scenario)


def test_training_opens_its_screen_once_every_gradient_is_in_place(settings, evaluator):
    async def scenario():
        from tutor.pack.model import load_pack
        from tutor.ui.screens.training import TrainingScreen

        pack = load_pack()
        app = TutorApp(settings, evaluator=evaluator, greet=False)
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            assert app.lesson.goto_step("train/loop") is False  # 22 steps to go
            for step in pack.gradient_steps:
                app.store.reveal(step.id)
            assert app.lesson.goto_step("train/loop") is True
            await pilot.pause()
            assert isinstance(app.screen, TrainingScreen)
            await pilot.press("f1")  # the main screen's keys stay on the main screen
            assert app.store.hints_shown(app.lesson.step.id) == 0
            await pilot.press("escape")
            await pilot.pause()
            assert not isinstance(app.screen, TrainingScreen)

    run(scenario)


def test_the_mouse_moves_between_open_steps(settings, evaluator):
    async def scenario():
        app = TutorApp(settings, evaluator=evaluator, greet=False)
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            assert (await check(pilot, CORRECT))["passed"]
            await pilot.press("ctrl+n")
            assert app.lesson.step.id == "atomic/probs"
            steps = app.query_one(StepList)
            # Find the sidebar row of the first step and click it, as a learner would.
            for row in range(steps.size.height):
                await pilot.click(StepList, offset=(4, row))
                await pilot.pause()
                if app.lesson.step.id == "atomic/logprobs":
                    break
            assert app.lesson.step.id == "atomic/logprobs"
            # A click on a locked step changes nothing; open ones (exercises 2 and 3) open.
            for row in range(steps.size.height):
                await pilot.click(StepList, offset=(4, row))
                await pilot.pause()
                assert app.store.status(app.lesson.step.id) != "locked"

    run(scenario)


# --- the learner's hour (issue #10) ---------------------------------------------------------


def test_a_revealed_step_stays_revealed_after_a_correct_check(settings, evaluator):
    async def scenario():
        from tutor.pack.model import load_pack

        app = TutorApp(settings, evaluator=evaluator, greet=False)
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            await pilot.press("f2")
            await pilot.click("#reveal")
            await pilot.pause()
            assert app.store.status("atomic/logprobs") == "revealed"
            # Typing in the solution that was shown passes, but does not make it "passed".
            result = await check(pilot, load_pack().step("atomic/logprobs").solution)
            assert result["passed"]
            assert app.store.status("atomic/logprobs") == "revealed"
            assert app.store.summary()[0]["status"] == "revealed"
            assert app.store.attempts("atomic/logprobs")[-1]["passed"]
            assert "stays marked revealed" in " ".join(feedback_text(app).split())
            steps = app.query_one(StepList)
            prompt = steps.get_option("atomic/logprobs").prompt
            assert "◇" in str(prompt) and "✓" not in str(prompt)

    run(scenario)


def test_after_solving_the_reference_is_there_to_compare_without_a_cost(settings, evaluator):
    async def scenario():
        app = TutorApp(settings, evaluator=evaluator, greet=False)
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            await check(pilot, CORRECT)
            await pilot.press("f2")  # no question asked: nothing left to lose
            assert not isinstance(app.screen, ConfirmReveal)
            assert "to compare with yours" in feedback_text(app)
            assert app.store.status("atomic/logprobs") == "exact"

    run(scenario)


def test_escape_keeps_the_editor_editable(settings, evaluator):
    async def scenario():
        app = TutorApp(settings, evaluator=evaluator, greet=False)
        async with app.run_test(size=SIZE) as pilot:
            editor = app.query_one(CodeEditor)
            editor.load_text("dlogprobs = ")
            editor.move_cursor((0, 12))
            await pilot.press("escape")
            assert app.focused is editor
            await pilot.press("x")
            assert editor.text == "dlogprobs = x"
            await pilot.press("ctrl+z")
            assert editor.text == "dlogprobs = "
            # With focus elsewhere (a click on the feedback), typing brings it back.
            app.query_one(Feedback).focus()
            await pilot.pause()
            await pilot.press("y")
            assert app.focused is editor and editor.text == "dlogprobs = y"

    run(scenario)


def test_tab_goes_to_the_next_blank_and_a_typed_line_is_not_doubled(settings, evaluator):
    async def scenario():
        from tutor.pack.model import load_pack

        pack = load_pack()
        store = Store.open(settings.data_home, pack)
        for step in pack.exercise(1).steps[:8]:
            store.reveal(step.id)
        store.set_current_step("atomic/h")
        store.close()
        app = TutorApp(settings, evaluator=evaluator, greet=False)
        async with app.run_test(size=SIZE) as pilot:
            editor = app.query_one(CodeEditor)
            assert app.lesson.step.id == "atomic/h"
            assert editor.selected_text == "..."  # the first blank, dh's
            await pilot.press(*"dh = dlogits @ W2.T")
            await pilot.press("tab")
            assert editor.selected_text == "..." and editor.cursor_location[0] == 2
            await pilot.press(*"h.T @ dlogits")
            lines = editor.text.splitlines()
            assert lines[1] == "dh = dlogits @ W2.T"
            assert lines[2] == "dW2 = h.T @ dlogits"
            await pilot.press("tab")
            assert editor.cursor_location[0] == 3

    run(scenario)


def test_the_palette_finds_every_open_step_including_training(settings, evaluator):
    async def scenario():
        from textual.command import CommandPalette

        from tutor.pack.model import load_pack
        from tutor.ui.commands import StepCommands
        from tutor.ui.screens.training import TrainingScreen

        pack = load_pack()
        app = TutorApp(settings, evaluator=evaluator, greet=False)
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            for step in pack.gradient_steps:
                app.store.reveal(step.id)
            provider = StepCommands(app.screen)
            ids = [step_id for _, step_id, _, _ in provider._targets()]
            assert ids == [s.id for s in pack.steps]  # every step is open now
            for query in ("train", "Training", "loop"):
                hits = [hit async for hit in provider.search(query)]
                assert "Go to 4 · Training loop" in [hit.text for hit in hits], query
            titles = [c.title for c in app.get_system_commands(app.screen)]
            assert titles.count("Keys") == 1
            # As a learner does it: ctrl+p, type, enter.
            await pilot.press("ctrl+p")
            await wait_until(pilot, lambda: isinstance(app.screen, CommandPalette))
            await pilot.press(*"Training loop")
            await pilot.pause(0.5)
            await pilot.press("enter")
            await wait_until(pilot, lambda: isinstance(app.screen, TrainingScreen))

    run(scenario)


async def part_in_view(pilot, name: str) -> bool:
    """Whether the top line of a feedback part is inside the panel's visible area."""
    await pilot.pause(0.2)
    feedback = pilot.app.query_one(Feedback)
    part = feedback.query_one(f"#feedback-{name}")
    return part.display and feedback.content_region.contains(part.region.x, part.region.y)


def test_the_newest_feedback_is_in_view_on_a_small_terminal(settings, evaluator):
    async def scenario():
        app = TutorApp(settings, evaluator=evaluator, greet=False)
        async with app.run_test(size=(80, 24)) as pilot:
            await ready(pilot)
            await check(pilot, WRONG_SIGN)
            await pilot.press("f1", "f1")
            assert await part_in_view(pilot, "hints")
            await pilot.press("f2")
            await pilot.click("#reveal")
            assert await part_in_view(pilot, "solution")
            await pilot.press("ctrl+r")
            await wait_until(pilot, lambda: not app.lesson.scratching)
            assert await part_in_view(pilot, "scratch")

    run(scenario)


def test_typing_just_before_quit_is_saved(settings, evaluator):
    async def scenario():
        from textual import events

        app = TutorApp(settings, evaluator=evaluator, greet=False)
        async with app.run_test(size=SIZE) as pilot:
            editor = app.query_one(CodeEditor)
            editor.load_text("dlogprobs = ")
            editor.move_cursor((0, 12))
            await pilot.pause()
            # Keys and ctrl+q arriving in one read from the terminal, as in a fast burst.
            for key in "abc":
                app.post_message(events.Key(key, key))
            app.post_message(events.Key("ctrl+q", None))
            await wait_until(pilot, lambda: app._exit)

    run(scenario)
    from tutor.pack.model import load_pack

    with Store.open(settings.data_home, load_pack()) as store:
        assert store.draft("atomic/logprobs") == "dlogprobs = abc"
        assert store.remembered("cursor.atomic/logprobs") == "0,15"


def test_relaunch_puts_the_cursor_back(settings, evaluator):
    async def first():
        app = TutorApp(settings, evaluator=evaluator, greet=False)
        async with app.run_test(size=SIZE) as pilot:
            editor = app.query_one(CodeEditor)
            editor.load_text("dlogprobs = torch.zeros_like(logprobs)\n# more\n")
            editor.move_cursor((0, 11))
            # The draft and the cursor are saved a moment after the last key; on a loaded
            # machine that moment is later.
            for _ in range(100):
                await pilot.pause(0.1)
                if app.screen.lesson.cursor(app.screen.step.id) == (0, 11):
                    break

    async def second():
        app = TutorApp(settings, evaluator=evaluator, greet=False)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            assert app.query_one(CodeEditor).cursor_location == (0, 11)

    run(first)
    run(second)


def test_a_run_without_grading_shows_output_and_shapes_and_counts_nothing(settings, evaluator):
    async def scenario():
        app = TutorApp(settings, evaluator=evaluator, greet=False)
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            app.query_one(CodeEditor).load_text(
                "print(logprobs.shape)\ndlogprobs = torch.zeros_like(logprobs)\n")
            await pilot.press("ctrl+r")
            await wait_until(pilot, lambda: not app.lesson.scratching)
            await pilot.pause()
            text = " ".join(feedback_text(app).split())
            assert "Run without grading" in text and "torch.Size([32, 27])" in text
            assert "dlogprobs tensor [32, 27]" in text and "the shape the check wants" in text
            assert "module" not in text
            assert app.store.attempts("atomic/logprobs") == []
            assert app.store.status("atomic/logprobs") == "unlocked"

    run(scenario)


def test_the_template_comes_back_and_undo_takes_it_back(settings, evaluator):
    async def scenario():
        app = TutorApp(settings, evaluator=evaluator, greet=False)
        async with app.run_test(size=SIZE) as pilot:
            editor = app.query_one(CodeEditor)
            editor.load_text("something of mine\n")
            await pilot.press("ctrl+t")
            assert editor.text == app.lesson.step.template and editor.selected_text == "..."
            await pilot.press("ctrl+z")
            assert editor.text == "something of mine\n"

    run(scenario)


def test_the_top_bar_counts_steps_like_the_command_line(settings, evaluator):
    async def scenario():
        app = TutorApp(settings, evaluator=evaluator, greet=False)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            where = str(app.query_one(TopBar).query_one("#where").content)
            assert "step 1 of 23" in where
            prompt = str(app.query_one(StepList).get_option("train/loop").prompt)
            assert "opens after 22 more steps" in prompt

    run(scenario)


class StillClock:
    """An active-time clock that has counted nothing, so a snapshot's times are the store's."""

    def touch(self, now=None) -> None:
        pass

    def pause(self, now=None) -> None:
        pass

    def take(self, now=None) -> float:
        return 0.0


def test_active_time_is_counted_on_the_step_and_on_the_training_screen(settings, evaluator):
    async def scenario():
        from tutor.pack.model import load_pack
        from tutor.ui.activity import ActiveClock
        from tutor.ui.screens.training import TrainingScreen

        pack = load_pack()
        app = TutorApp(settings, evaluator=evaluator, greet=False)
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            # Two minutes of work on the first step, as the clock would have counted them.
            app._clock = ActiveClock(now=time.monotonic() - 120)
            for step in pack.gradient_steps:
                app.store.reveal(step.id)
            assert app.lesson.goto_step("train/loop")
            await pilot.pause()
            assert isinstance(app.screen, TrainingScreen)
            app._clock = ActiveClock(now=time.monotonic() - 60)  # a minute on the screen
            await pilot.press("escape")
            await pilot.pause()
            seconds = {r["id"]: r["seconds"] for r in app.store.summary()}
            assert seconds["atomic/logprobs"] >= 119
            assert seconds["train/loop"] >= 59

    run(scenario)


def test_the_progress_view_shows_the_table_of_the_cli(settings, evaluator):
    async def scenario():
        from tutor.ui.screens.progress import ProgressScreen

        app = TutorApp(settings, evaluator=evaluator, greet=False)
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            await check(pilot, CORRECT)
            await pilot.press("ctrl+o")
            assert isinstance(app.screen, ProgressScreen)
            console = Console(width=120, file=io.StringIO(), record=True, color_system=None)
            console.print(app.screen.query_one("#progress-body").content)
            text = console.export_text()
            assert "dlogprobs" in text and "exact" in text and "1 of 23 steps done" in text
            await pilot.press("escape")
            assert app.focused is app.query_one(CodeEditor)

    run(scenario)


def test_first_launch_welcomes_and_an_exercise_introduces_itself(settings, evaluator):
    async def scenario():
        from tutor.pack.model import load_pack
        from tutor.ui.screens.welcome import IntroScreen, WelcomeScreen

        pack = load_pack()
        app = TutorApp(settings, evaluator=evaluator)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            assert isinstance(app.screen, WelcomeScreen)
            await pilot.press("enter")
            assert app.focused is app.query_one(CodeEditor)
            for step in pack.exercise(1).steps:
                app.store.reveal(step.id)
            app.lesson.goto_step("fused/cross_entropy")
            await pilot.pause()
            assert isinstance(app.screen, IntroScreen)
            await pilot.press("escape")
        app = TutorApp(settings, evaluator=evaluator)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            assert len(app.screen_stack) == 1  # seen once, not again

    run(scenario)


def test_finishing_an_exercise_shows_what_it_took(settings, evaluator):
    async def scenario():
        from tutor.pack.model import load_pack
        from tutor.ui.screens.completion import CompletionScreen

        pack = load_pack()
        store = Store.open(settings.data_home, pack)
        for step in pack.exercise(1).steps[:-1]:
            store.reveal(step.id)
        store.set_current_step("atomic/C")
        store.close()
        app = TutorApp(settings, evaluator=evaluator, greet=False)
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            await check(pilot, pack.step("atomic/C").solution)
            await wait_until(pilot, lambda: isinstance(app.screen, CompletionScreen))
            console = Console(width=100, file=io.StringIO(), record=True, color_system=None)
            console.print(app.screen.query_one("#completion-body").content)
            text = console.export_text()
            assert "Exercise 1 done" in text and "1 passed, 19 revealed" in text
            assert "Next: exercise 2" in text
            await pilot.press("enter")  # on to exercise 2
            await pilot.pause()
            assert app.lesson.step.id == "fused/cross_entropy"

    run(scenario)


# --- the app and its lesson screen (issue #11) --------------------------------------------------


def test_the_palette_runs_the_step_commands_on_the_lesson(settings, evaluator):
    async def scenario():
        from textual.command import CommandPalette

        app = TutorApp(settings, evaluator=evaluator, greet=False)
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            await pilot.press("ctrl+p")
            await wait_until(pilot, lambda: isinstance(app.screen, CommandPalette))
            await pilot.press(*"Hint")
            await pilot.pause(0.5)
            await pilot.press("enter")
            await wait_until(pilot, lambda: app.store.hints_shown("atomic/logprobs") == 1)
            assert app.screen is app.lesson
            assert "Hint 1 of 3" in feedback_text(app)

    run(scenario)


class BrokenScratch(SlowEvaluator):
    """Ready at once, but every run without grading fails in the evaluator itself."""

    def __init__(self) -> None:
        super().__init__()
        self.release.set()

    def scratch(self, step_id: str, code: str, prior: dict) -> dict:
        raise RuntimeError("the worker went away")


def test_a_failed_run_without_grading_leaves_the_keys_working(settings):
    async def scenario():
        app = TutorApp(settings, evaluator=BrokenScratch(), greet=False)  # type: ignore[arg-type]
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            await pilot.press("ctrl+r")
            await wait_until(pilot, lambda: "The checker failed" in feedback_text(app))
            assert not app.lesson.scratching
            assert app.lesson.check_action("check", ()) is True

    run(scenario)


@pytest.fixture
def two_packs(tmp_path, monkeypatch):
    """An installation with two packs: makemore and tests/packs/tiny, side by side."""
    from pathlib import Path

    import tutor.pack.model

    installed = tmp_path / "exercises"
    installed.mkdir()
    (installed / "makemore").symlink_to(tutor.pack.model.exercises_dir() / "makemore")
    (installed / "tiny").symlink_to(Path(__file__).parent / "packs" / "tiny")
    monkeypatch.setattr(tutor.pack.model, "exercises_dir", lambda: installed)
    monkeypatch.delenv("BACKPROP_TUTOR_PACK", raising=False)
    return installed


def test_several_packs_are_offered_only_when_none_was_named(two_packs, tmp_path):
    from tutor.session.controller import offered_packs

    assert offered_packs(Settings()) == ["makemore", "tiny"]
    assert offered_packs(Settings(pack="tiny")) == []
    assert offered_packs(Settings(), environ={"BACKPROP_TUTOR_PACK": "makemore"}) == []
    config = tmp_path / "config.toml"
    config.write_text('pack = "makemore"\n')
    assert offered_packs(Settings(), config=config) == []


def test_the_learner_chooses_the_pack_before_the_lesson_opens(settings, two_packs):
    async def scenario():
        from tutor.session.controller import offered_packs
        from tutor.ui.screens.packs import PackScreen

        app = TutorApp(settings, evaluator=SlowEvaluator(), greet=False,  # type: ignore[arg-type]
                       packs=offered_packs(settings))
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            assert isinstance(app.screen, PackScreen) and app.lesson is None
            listed = " ".join(str(o.prompt) for o in app.screen.query_one("#packs").options)
            assert "Becoming a backprop ninja" in listed and "A tiny layernorm classifier" in listed
            await pilot.press("f1", "ctrl+o")  # no lesson yet: the lesson's keys do nothing
            assert isinstance(app.screen, PackScreen)
            await pilot.press("down", "enter")
            await wait_until(pilot, lambda: isinstance(app.screen, LessonScreen))
            assert app.screen_stack == [app.lesson]
            assert app.lesson.step.id == "tiny/logits"
            assert app.settings.pack == "tiny"  # what the evaluator is started with
            assert app.store.path.name == "progress-tiny.sqlite3"
            # app.query_one searches the app's first screen, the blank one under the chooser.
            lesson = app.lesson
            where = str(lesson.query_one(TopBar).query_one("#where").content)
            assert where.startswith("Exercise 1 · step 1 of") and "Through the layers" in where
            editor = lesson.query_one(CodeEditor)
            assert app.focused is editor
            assert editor.text == app.pack.step("tiny/logits").template

    run(scenario)


def test_a_finished_step_reopened_says_how_it_went(settings, evaluator):
    async def scenario():
        first = TutorApp(settings, evaluator=evaluator, greet=False)
        async with first.run_test(size=SIZE) as pilot:
            await ready(pilot)
            assert (await check(pilot, CORRECT))["passed"]
        again = TutorApp(settings, evaluator=evaluator, greet=False)
        async with again.run_test(size=SIZE) as pilot:
            await ready(pilot)
            assert again.lesson.goto_step("atomic/logprobs")
            await pilot.pause()
            text = feedback_text(again)
            assert "≡ Done" in text and "Write the gradient" not in text
            assert again.lesson.goto_step("atomic/probs")
            await pilot.pause()
            assert "Write the gradient" in feedback_text(again)

    run(scenario)


def test_the_lesson_opened_last_opens_directly_and_the_chooser_is_one_key_away(
        settings, two_packs, monkeypatch):
    """run_app: the first launch asks; the next opens the lesson chosen then; ctrl+l in it
    asks again, with that lesson highlighted."""
    from tutor.session.controller import last_pack, offered_packs
    from tutor.ui import app as app_module
    from tutor.ui.screens.packs import PackScreen

    offered = offered_packs(settings)
    runs: list[tuple[str, str | None]] = []

    def fake_run(self):  # what each launch would show, without a terminal
        runs.append(("chooser", None) if self.choosing else ("lesson", self.pack.id))
        self.choose_again = not self.choosing  # in the lesson the learner asks again

    monkeypatch.setattr(app_module.TutorApp, "run", fake_run)
    assert app_module.run_app(settings) == 0
    assert runs == [("chooser", None)]

    async def choose_tiny():
        app = TutorApp(settings, evaluator=SlowEvaluator(), greet=False,  # type: ignore[arg-type]
                       packs=offered)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            await pilot.press("down", "enter")
            await wait_until(pilot, lambda: isinstance(app.screen, LessonScreen))
            assert app.check_action("lessons", ()) is True
    run(choose_tiny)
    assert last_pack(settings.data_home) == "tiny"
    runs.clear()
    assert app_module.run_app(settings) == 0
    assert runs == [("lesson", "tiny"), ("chooser", None)]

    async def highlighted():
        app = TutorApp(settings, evaluator=SlowEvaluator(), greet=False,  # type: ignore[arg-type]
                       packs=offered)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            assert isinstance(app.screen, PackScreen)
            assert app.screen.query_one("#packs").highlighted_option.id == "tiny"
    run(highlighted)


def test_a_lesson_named_at_launch_is_remembered_and_ctrl_l_offers_the_others(
        settings, two_packs, monkeypatch):
    """`--pack tiny`: the lesson opens directly, the next plain launch opens it again, and
    ctrl+l in it brings the chooser, as in a lesson chosen there."""
    from tutor.session.controller import last_pack
    from tutor.ui import app as app_module

    runs: list[tuple] = []

    def fake_run(self):
        runs.append(("chooser",) if self.choosing else ("lesson", self.pack.id, len(self.lessons)))
        self.choose_again = not self.choosing

    monkeypatch.setattr(app_module.TutorApp, "run", fake_run)
    assert app_module.run_app(replace(settings, pack="tiny"), packs=[]) == 0
    assert runs[0][:2] == ("lesson", "tiny") and runs[0][2] > 1 and runs[1] == ("chooser",)
    assert last_pack(settings.data_home) == "tiny"


def test_ctrl_l_saves_and_leaves_for_the_chooser(settings, two_packs):
    async def scenario():
        from tutor.session.controller import offered_packs

        app = TutorApp(replace(settings, pack="tiny"), evaluator=SlowEvaluator(),  # type: ignore[arg-type]
                       greet=False, lessons=offered_packs(settings))
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            editor = app.query_one(CodeEditor)
            editor.load_text("dlogits = 1\n")
            await pilot.press("ctrl+l")
            await pilot.pause()
        assert app.choose_again
        with Store.open(settings.data_home, app.pack) as store:
            assert store.draft("tiny/logits") == "dlogits = 1\n"

    run(scenario)


def test_end_on_a_wrapped_template_line_goes_to_the_end_of_its_code(settings, evaluator):
    """At 80 columns `dwte = ...  # first branch of wte; ...` wraps inside its comment: End
    stops after the code, and a second End goes to the end of the line."""
    async def scenario():
        app = TutorApp(settings, evaluator=evaluator, greet=False)
        async with app.run_test(size=(80, 24)) as pilot:
            editor = app.query_one(CodeEditor)
            line = "dwte = ...  # first branch of wte; the second arrives at the embedding lookup"
            editor.load_text(f"# forward\n{line}\n")
            editor.move_cursor((1, 0))
            await pilot.press("end")
            assert editor.cursor_location == (1, len("dwte = ..."))
            await pilot.press("end")
            assert editor.cursor_location == (1, len(line))
            editor.move_cursor((1, 0))
            await pilot.press("shift+end")
            assert editor.selected_text == "dwte = ..."

    run(scenario)


def test_the_explanation_of_a_step_not_yet_passed_is_asked_for_and_counts_as_its_hints(
        settings, evaluator):
    """F3 on a step not yet passed asks first: the explanation works the step out. Keep trying
    counts nothing; going on counts every hint and opens it. A passed step's opens at once."""
    from tutor.ui.screens.confirm import ConfirmExplain
    from tutor.ui.screens.explain import ExplainScreen

    async def scenario():
        app = TutorApp(settings, evaluator=evaluator, greet=False)
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            step = app.lesson.step
            await pilot.press("f3")
            await pilot.pause()
            assert isinstance(app.screen, ConfirmExplain)
            await pilot.press("escape")
            await pilot.pause()
            assert app.lesson.lesson.hints_shown(step.id) == 0
            await pilot.press("f3")
            await pilot.pause()
            await pilot.click("#reveal")
            await pilot.pause()
            assert isinstance(app.screen, ExplainScreen)
            assert app.lesson.lesson.hints_shown(step.id) == len(step.hints)
            await pilot.press("escape")
            await pilot.pause()
            assert (await check(pilot, CORRECT))["passed"]
            app.lesson.goto_step(step.id)
            await pilot.pause()
            await pilot.press("f3")
            await pilot.pause()
            assert isinstance(app.screen, ExplainScreen)

    run(scenario)


def test_end_home_and_ctrl_home_act_on_the_code_not_the_screen_row(settings, evaluator):
    """From inside a trailing comment (where ↓ from a longer line leaves the cursor), End goes
    to the code's end, not past the comment; Home goes to the line's first character even on a
    wrapped line, then to its start; ctrl+Home and ctrl+End go to the text's start and end."""
    async def scenario():
        app = TutorApp(settings, evaluator=evaluator, greet=False)
        async with app.run_test(size=(80, 24)) as pilot:
            editor = app.query_one(CodeEditor)
            long = "x = " + " + ".join(f"a{i}" for i in range(30))  # wraps at 80 columns
            text = f"    dwte = ...  # first branch of wte\n{long}\nlast = 1\n"
            editor.load_text(text)
            editor.move_cursor((0, 30))  # inside the comment
            await pilot.press("end")
            assert editor.cursor_location == (0, len("    dwte = ..."))
            await pilot.press("home")
            assert editor.cursor_location == (0, 4)
            await pilot.press("home")
            assert editor.cursor_location == (0, 0)
            editor.move_cursor((1, len(long) - 3))  # on the wrapped part of a long line
            await pilot.press("home")
            assert editor.cursor_location == (1, 0)
            await pilot.press("ctrl+end")
            assert editor.cursor_location == (3, 0)
            await pilot.press("ctrl+home")
            assert editor.cursor_location == (0, 0)

    run(scenario)


def test_the_tui_runs_on_the_simulated_device_and_says_so(tmp_path, monkeypatch):
    # The worker inherits the variable: the network, the checks and their children run on the
    # simulated accelerator (tutor/devices.py), and an answer that makes its own tensors without
    # a device passes there as on the CPU.
    monkeypatch.setenv("BACKPROP_TUTOR_SIMULATED_DEVICE", "1")
    settings = Settings(device="auto", home=tmp_path / "home", timeout=5.0)
    without_a_device = ("dlogprobs = torch.zeros(n, logprobs.shape[1]).scatter_add(1, "
                        "Yb[:, None], torch.full((n, 1), -1.0 / n))\n")

    async def scenario():
        with Evaluator(settings) as ev:
            app = TutorApp(settings, evaluator=ev, greet=False)
            async with app.run_test(size=SIZE) as pilot:
                await ready(pilot)
                device = app.query_one(TopBar).query_one("#device")
                assert str(device.content) == "cuda:0 (simulated on the CPU)"
                result = await check(pilot, without_a_device)
                assert result["passed"] and result["device"] == "cuda:0 (simulated on the CPU)"
                wrong = await check(pilot, WRONG_SIGN)
                assert not wrong["passed"] and wrong["error"] is None
                assert wrong["checks"][0]["heatmap"], "the heatmap comes from the device's check"

    run(scenario)


def test_a_step_checked_from_the_command_line_shows_in_the_open_tutor(settings, evaluator):
    import subprocess
    import sys

    async def scenario():
        app = TutorApp(settings, evaluator=evaluator, greet=False)
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            assert app.lesson._statuses["atomic/logprobs"] == "unlocked"
            done = await asyncio.to_thread(
                subprocess.run, [sys.executable, "-m", "tutor", "--home", str(settings.home),
                                 "--device", "cpu", "check", "atomic/logprobs", "--code",
                                 CORRECT], capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, done.stderr
            await wait_until(pilot, lambda: app.lesson._statuses.get("atomic/logprobs")
                             == "exact", timeout=15)
            assert app.lesson._statuses["atomic/probs"] == "unlocked"
            await pilot.pause(0.2)
            assert any("checked outside the tutor" in str(n.message)
                       for n in app._notifications)

    run(scenario)
