"""The steps sidebar: every step of the pack grouped by exercise, each with its status."""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import suppress

from rich.text import Text
from textual.widgets import OptionList
from textual.widgets.option_list import Option, OptionDoesNotExist

from tutor.pack.model import Pack
from tutor.session.controller import remaining_before
from tutor.ui import palette
from tutor.ui.palette import HEADING, LOCKED
from tutor.ui.progress_view import MARKERS, STATUS_STYLES


class StepList(OptionList):
    """One option per step. Locked steps stay selectable so choosing one can say why not."""

    def __init__(self, pack: Pack, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._pack = pack
        self.border_title = "Steps"
        self._shown: tuple | None = None  # what the options were last built from

    def show(self, statuses: Mapping[str, str], current: str) -> None:
        # Rebuilding the options lays the whole list out again; most checks change nothing here.
        shown = (tuple(sorted((k, str(v)) for k, v in statuses.items())), current)
        if shown == self._shown:
            return
        self._shown = shown
        highlighted = self.highlighted_option.id if self.highlighted_option else current
        options: list[Option | None] = []
        for exercise in self._pack.exercises:
            if options:
                options.append(None)
            heading = Text.styled(f"{exercise.number} · {exercise.title}", HEADING)
            options.append(Option(self._themed(heading), id=f"exercise-{exercise.number}",
                                  disabled=True))
            for step in exercise.steps:
                status = statuses.get(step.id, "locked")
                if step.kind.trained:
                    options.append(Option(self._themed(self._training_prompt(step, statuses)),
                                          id=step.id))
                    continue
                key = "current" if step.id == current else status
                prompt = Text.styled(f"{MARKERS[key]} ", STATUS_STYLES[key])
                prompt.append(step.title, style=STATUS_STYLES[key] if key != "passed" else "")
                if key == "current" and status != "unlocked":
                    # Re-opening a finished step still shows how it went.
                    prompt.append(f" {MARKERS[status]}", style=STATUS_STYLES[status])
                options.append(Option(self._themed(prompt), id=step.id))
        self.set_options(options)
        with suppress(LookupError):
            self.highlighted = self.get_option_index(highlighted or current)

    def _themed(self, prompt: Text) -> Text:
        return palette.resolved(prompt, self.app.console)

    def follow(self, step_id: str) -> None:
        """Highlight the open step and scroll it into view."""
        try:
            self.highlighted = self.get_option_index(step_id)
        except OptionDoesNotExist:  # not filled in yet (see LessonScreen._complete_layout)
            return
        self.scroll_to_highlight()

    def _training_prompt(self, step, statuses: Mapping[str, str]) -> Text:
        left = remaining_before(self._pack, step, statuses)
        if left:
            text = Text.styled(f"{MARKERS['locked']} {step.title}", STATUS_STYLES["locked"])
            # "after", not "to go": the steps left in the lesson include this one.
            text.append(f"\n  opens after {len(left)} more step{'s' if len(left) != 1 else ''}",
                        style=LOCKED)
            return text
        return Text.styled(f"{MARKERS['training']} {step.title}", STATUS_STYLES["training"])
