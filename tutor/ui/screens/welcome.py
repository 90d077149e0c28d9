"""The first launch's welcome, and an exercise's introduction when the exercise opens.

Both are Markdown over the main screen; either key closes them and the editor has focus again.
Whether they were seen is remembered in the progress store, so each shows once (F3 shows the
introduction again, the palette the welcome).
"""

from __future__ import annotations

from pathlib import Path

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Markdown, Static

from tutor.pack.model import Exercise, Pack

KEYS = """\
- a step opens with its first `...` selected: type, and it is replaced; `tab` selects the next
- `ctrl+j` or `F5`: check your code against autograd
- `ctrl+r`: run it without grading, to see what it prints and the shapes it makes
- `F1`: a hint (each step has three, from the idea to nearly the answer)
- `F2`: the reference solution (asks first; the step then counts as revealed)
- `F3`: what this step is about · `ctrl+n` / `ctrl+up`: next / previous step
- `ctrl+p`: jump to any open step, or find any command · `F9`: every key
"""


def welcome_markdown(progress_file: Path, pack: Pack) -> str:
    first = pack.exercises[0]
    about = pack.description or (
        f"You will write the backward pass of *{pack.title}* by hand, one step at a time.")
    return "\n\n".join([
        "# Welcome to backprop-tutor",
        about + " Each answer runs next to PyTorch's autograd and is graded *exact*, "
        "*approximate* (equal up to float rounding) or wrong, with the largest difference, a "
        "diagnosis and a picture of where it is off. A right answer opens the next step; at "
        "the end your own gradients train the network.",
        "## The keys that matter",
        KEYS,
        "## Your progress",
        f"Your code, drafts, hints and time are saved as you go, in `{progress_file}`. "
        "Quit with `ctrl+q` whenever you like: the next launch opens where you left off.",
        f"## Exercise {first.number}: {first.title}",
        first.intro.strip(),
    ])


def intro_markdown(exercise: Exercise) -> str:
    return f"# Exercise {exercise.number}: {exercise.title}\n\n{exercise.intro.strip()}"


class ReadingScreen(ModalScreen[None]):
    """A page of Markdown to read and close."""

    BINDINGS = [
        Binding("escape,enter,q,f3", "dismiss", "Close", id="reading.close"),
    ]

    def __init__(self, markdown: str, hint: str) -> None:
        super().__init__()
        self.markdown, self.hint = markdown, hint

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            with VerticalScroll(id="explain-body"):
                yield Markdown(self.markdown)
            yield Static(self.hint, classes="dialog-hint")

    def on_mount(self) -> None:
        self.query_one("#explain-body").focus()


class WelcomeScreen(ReadingScreen):
    def __init__(self, progress_file: Path, pack: Pack) -> None:
        super().__init__(welcome_markdown(progress_file, pack),
                         "↑↓ to scroll · enter or esc to start")


class IntroScreen(ReadingScreen):
    def __init__(self, exercise: Exercise) -> None:
        super().__init__(intro_markdown(exercise), "enter or esc to begin · F3 shows it again")
