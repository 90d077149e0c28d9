"""Command palette (ctrl+p): jump to any step that is open, exercise 4's training included."""

from __future__ import annotations

from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider

from tutor.ui.progress_view import MARKERS


class StepCommands(Provider):
    """One command per enterable step, e.g. "Go to 1 · dcounts_sum".

    A query matches the title, the step id or the exercise's name, so "train", "Training" and
    "loop" all find exercise 4, and "bnvar" finds "dbnvar".
    """

    def _targets(self) -> list[tuple[str, str, str, str]]:
        """(title, step id, help text, extra text to match) per open step, in lesson order."""
        lesson = self.app.lesson
        if lesson is None:  # the learner is still choosing a pack
            return []
        pack = lesson.pack
        out = []
        for step, status in lesson.lesson.open_steps():
            exercise = pack.exercise(step.exercise)
            training = step.kind.trained and status == "unlocked"
            marker = MARKERS["training" if training else status]
            title = f"Go to {step.exercise} · {step.title}"
            help_text = f"{marker} {status} · {step.id} · {exercise.title}"
            out.append((title, step.id, help_text, f"{step.id} {exercise.title}"))
        return out

    def _goto(self, step_id: str) -> None:
        if self.app.lesson is not None:
            self.app.lesson.goto_step(step_id)

    async def discover(self) -> Hits:
        for title, step_id, help_text, _ in self._targets():
            yield DiscoveryHit(title, partial(self._goto, step_id), help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for title, step_id, help_text, extra in self._targets():
            score = max(matcher.match(title), matcher.match(step_id), matcher.match(extra))
            if score > 0:
                yield Hit(score, matcher.highlight(title), partial(self._goto, step_id),
                          text=title, help=help_text)
