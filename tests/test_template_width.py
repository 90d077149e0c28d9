"""Every template of every installed pack fits the editor of an 80×24 terminal without soft
wrapping.

The editor wraps a long line onto a second row, and End, ctrl+u and the cursor keys act on the
row on screen: an edit meant for the code on a wrapped line lands in its comment, and the old
code is what gets checked. So a template's comments are kept short enough, or on their own
lines. The width is measured in the editor itself, as the lesson screen lays it out at its
narrowest: a draft grown past nine lines (a wider gutter) and taller than the editor (a
scrollbar).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tutor.config import Settings
from tutor.evaluator.client import EvaluatorNotReady
from tutor.pack.model import find_pack, load_pack
from tutor.ui.app import TutorApp
from tutor.ui.widgets.editor import CodeEditor

pytestmark = pytest.mark.slow

PACKS = ("makemore", "gpt", "lstm")
SIZE = (80, 24)


class Idle:
    """An evaluator that never gets ready: the layout needs no PyTorch."""

    def start(self) -> None:
        pass

    def info(self, timeout: float | None = None) -> dict:
        raise EvaluatorNotReady("not here")

    def close(self) -> None:
        pass


@pytest.fixture(scope="module")
def width(tmp_path_factory) -> int:
    """The columns a line may take in the editor before it wraps, at 80×24."""
    home: Path = tmp_path_factory.mktemp("width") / "home"
    measured: list[int] = []

    async def scenario() -> None:
        app = TutorApp(Settings(device="cpu", home=home), evaluator=Idle(), greet=False)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            editor = app.lesson.query_one(CodeEditor)
            editor.load_text("x = ...\n" * 40)
            await pilot.pause()
            measured.append(editor.wrap_width)
            # The measure itself: a line of that width is one row, one more is two.
            editor.load_text("#" * measured[0] + "\n" + "x = ...\n" * 40)
            await pilot.pause()
            assert editor.wrapped_document.height == editor.document.line_count
            await pilot.press("ctrl+q")

    asyncio.run(scenario())
    assert measured[0] > 60, "the editor was not laid out"
    return measured[0]


@pytest.mark.parametrize("pack_id", PACKS)
def test_no_template_line_wraps_in_the_editor_at_80_columns(pack_id, width):
    pack = load_pack(find_pack(pack_id))
    long = {step.id: [line for line in step.template.splitlines() if len(line) > width]
            for step in pack.steps}
    assert {sid: lines for sid, lines in long.items() if lines} == {}
