"""Snapshots of the main screen states (pytest-textual-snapshot; update with --snapshot-update).

Every snapshot waits for the evaluator, so the shapes are in place, and stops the cursor
blinking, so the picture does not depend on timing.
"""

from __future__ import annotations

import time

import pytest

from tutor.config import Settings
from tutor.sandbox.client import Evaluator
from tutor.ui.app import TutorApp
from tutor.ui.widgets.editor import CodeEditor

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
                    evaluator=evaluator)


async def settle(pilot) -> None:
    app = pilot.app
    deadline = time.monotonic() + 30
    while app.info is None or app.checking:
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
