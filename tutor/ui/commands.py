"""Command palette (ctrl+p): jump to any step that is open."""

from __future__ import annotations

from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider

from tutor.ui.progress_view import MARKERS, is_enterable


class StepCommands(Provider):
    """One command per enterable step, e.g. "Go to 1 · dcounts_sum"."""

    def _targets(self) -> list[tuple[str, str, str]]:
        app = self.app
        statuses = app.store.statuses()
        out = []
        for step in app.pack.steps:
            status = statuses.get(step.id, "locked")
            if step.is_training or not is_enterable(status):
                continue
            title = f"Go to {step.exercise} · {step.title}"
            out.append((title, step.id, f"{MARKERS[status]} {status} · {step.id}"))
        return out

    async def discover(self) -> Hits:
        for title, step_id, help_text in self._targets():
            yield DiscoveryHit(title, partial(self.app.goto_step, step_id), help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for title, step_id, help_text in self._targets():
            # Match the step id too, so "bnvar" finds "dbnvar" and "atomic/bnvar".
            score = max(matcher.match(title), matcher.match(step_id))
            if score > 0:
                yield Hit(score, matcher.highlight(title), partial(self.app.goto_step, step_id),
                          text=title, help=help_text)
