"""Active time on a step: the time between the learner's actions, with long pauses capped.

Wall-clock time since a step opened overcounts a learner who walked away, and time counted only
when a step is left undercounts one whose session ended any other way. So the app reports every
key, click and running check here, and hands the active seconds to the store now and then.
"""

from __future__ import annotations

import time

IDLE_CAP = 300.0  # seconds: a longer pause counts as this much (reading, thinking), no more


class ActiveClock:
    """Counts the seconds between actions, each gap at most `idle_cap`.

    Time after the last action counts too, up to the cap, so reading a long diagnosis counts
    even when the next key never comes.
    """

    def __init__(self, idle_cap: float = IDLE_CAP, now: float | None = None) -> None:
        start = time.monotonic() if now is None else now
        self.idle_cap = idle_cap
        self._last = start  # the last action
        self._counted_to = start  # active time before this instant has been counted
        self._pending = 0.0

    def _advance(self, now: float) -> None:
        active_until = min(now, self._last + self.idle_cap)
        if active_until > self._counted_to:
            self._pending += active_until - self._counted_to
            self._counted_to = active_until

    def touch(self, now: float | None = None) -> None:
        """The learner did something (or something they are watching is running)."""
        now = time.monotonic() if now is None else now
        self._advance(now)
        self._last = now
        # Whatever lay beyond the cap before this action was idle: skip it.
        self._counted_to = max(self._counted_to, now)

    def pause(self, now: float | None = None) -> None:
        """The learner left (the terminal lost focus): count nothing until the next action."""
        now = time.monotonic() if now is None else now
        self._advance(now)
        self._last = now - self.idle_cap

    def take(self, now: float | None = None) -> float:
        """The active seconds counted since the last take."""
        self._advance(time.monotonic() if now is None else now)
        seconds, self._pending = self._pending, 0.0
        return seconds
