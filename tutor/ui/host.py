"""What a screen of the lesson needs from the app around it, as a protocol: so the screens
import this, never the app (which imports them), and any app that offers these can host them."""

from __future__ import annotations

from typing import Protocol


class LessonHost(Protocol):
    """The app's side of the lesson: the evaluator's state and the active-time clock. Rules
    and records are the lesson controller's (`tutor.session.controller.Lesson`), not the host's."""

    info: dict | None  # from the evaluator, once PyTorch is ready
    evaluator_error: str | None  # why the evaluator could not start, once it could not

    def start_evaluator(self) -> None: ...

    def count_time_on(self, step_id: str) -> None: ...

    def flush_time(self) -> None: ...
