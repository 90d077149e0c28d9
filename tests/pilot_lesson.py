"""Driving the TUI through a lesson as a learner does, for tests on any pack: type code into the
editor, press the run key, wait for the verdict, read the feedback as shown."""

from __future__ import annotations

import io
import time

from rich.console import Console

from tutor.ui.widgets.editor import CodeEditor
from tutor.ui.widgets.feedback import Feedback


async def wait_until(pilot, condition, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the app did not get there in time"
        await pilot.pause(0.05)


async def check(pilot, code: str) -> dict:
    """The verdict on `code` at the open step, as the run key gives it."""
    lesson = pilot.app.lesson
    lesson.query_one(CodeEditor).load_text(code)
    before = lesson.results.get(lesson.step.id)
    await pilot.press("ctrl+j")
    await wait_until(pilot, lambda: not lesson.checking
                     and lesson.results.get(lesson.step.id) is not before)
    await pilot.pause()
    return lesson.results[lesson.step.id][0].to_dict()


def feedback(app) -> str:
    """The feedback panel's text, as the learner reads it, on one line."""
    console = Console(width=110, file=io.StringIO(), record=True, color_system=None)
    for part in app.query_one(Feedback).query("Static"):
        if part.display:
            console.print(part.content)
    return " ".join(console.export_text().split())
