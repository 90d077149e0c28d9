"""The lesson's backward graph as its steps divide it: the one owner of which gradient each step
is given, starts, adds to and completes, and of what the learner calls each gradient.

A gradient step's `checks` are the tensors whose gradients it completes; its `partials` those
whose first branch it starts (graded in full by a later step of the same exercise, which adds
the rest); its `lines` and `given` name what arrives from further down the graph. Every layer
that cuts a learner's code into steps, checks a step, writes a template or trains on the
learner's gradients asks a `Flow` (built once per pack: `Pack.flow`), rather than working the
same facts out again from those fields.

The learner's name for the gradient of a tensor is spelled in one place, `gradient` (kept with
the values, `tutor/values/gradnames.py`, and handed on here); `tests/test_flow.py` keeps other
modules from spelling it by hand.

No torch here: the UI loads packs, and with them this module.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from tutor.values.gradnames import (
    OTHER_PREFIXES,
    PREFIX,
    gradient,
    gradients,
    spellings,
    tensor_of,
)

__all__ = ["OTHER_PREFIXES", "PREFIX", "Flow", "gradient", "gradients", "spellings",
           "tensor_of"]

class _Step(Protocol):
    id: str
    exercise: int
    lines: tuple[str, ...]
    checks: tuple[str, ...]
    partials: tuple[str, ...]
    given: tuple[str, ...]


class Flow:
    """Who starts, adds to and completes each gradient of a lesson, step by step.

    Built from the pack's steps in their order; holds nothing else and changes nothing.
    """

    def __init__(self, steps: Iterable[_Step]):
        self.steps: tuple[_Step, ...] = tuple(steps)
        self._order = {s.id: i for i, s in enumerate(self.steps)}
        self._completer: dict[tuple[int | None, str], str] = {}
        self._starter: dict[tuple[int, str], str] = {}
        for s in self.steps:
            for t in s.checks:  # the last step to grade it, in its exercise and in the lesson
                self._completer[(s.exercise, gradient(t))] = s.id
                self._completer[(None, gradient(t))] = s.id
            for t in s.partials:
                self._starter.setdefault((s.exercise, gradient(t)), s.id)
        self._all = frozenset(g for s in self.steps for g in self.touched(s))

    def _step(self, step: _Step | str) -> _Step:
        return self.steps[self._order[step]] if isinstance(step, str) else step

    def completes(self, step: _Step | str) -> frozenset[str]:
        """The gradients `step` grades in full (its `checks`)."""
        return gradients(self._step(step).checks)

    def starts(self, step: _Step | str) -> frozenset[str]:
        """The gradients whose first branch `step` writes, graded in full later (`partials`)."""
        return gradients(self._step(step).partials)

    def adds(self, step: _Step | str) -> frozenset[str]:
        """The gradients `step` completes whose first branch an earlier step of its exercise
        started: the learner's code adds this step's branch (`+=`)."""
        s = self._step(step)
        return frozenset(g for g in self.completes(s) if self.starter(g, s.exercise) is not None
                         and self._order[self.starter(g, s.exercise)] < self._order[s.id])

    def given(self, step: _Step | str) -> frozenset[str]:
        """The gradients `step` reads as given: those arriving at its lines, those it names as
        given, and the first branches it adds to."""
        s = self._step(step)
        return (gradients((*s.lines, *s.given)) & self.all) | self.adds(s)

    def touched(self, step: _Step | str) -> frozenset[str]:
        """Every gradient `step` writes: those it completes and those it starts."""
        return self.completes(step) | self.starts(step)

    def later(self, step: _Step | str) -> frozenset[str]:
        """The gradients steps after `step` complete, less its own."""
        s = self._step(step)
        at = self._order[s.id]
        return frozenset(g for t in self.steps[at + 1:] for g in self.completes(t)) \
            - self.completes(s)

    def starter(self, name: str, exercise: int) -> str | None:
        """The step of `exercise` that starts gradient `name`, or None."""
        return self._starter.get((exercise, name))

    def completer(self, name: str, exercise: int | None = None) -> str | None:
        """The last step (of `exercise`, or of the lesson) that grades gradient `name` in full,
        or None."""
        return self._completer.get((exercise, name))

    def of(self, steps: Iterable[_Step] | None = None) -> frozenset[str]:
        """Every gradient `steps` (default: all of the lesson's) start or complete."""
        chosen = self.steps if steps is None else steps
        return frozenset(g for s in chosen for g in self.touched(s))

    @property
    def all(self) -> frozenset[str]:
        """Every gradient of the lesson a step starts or completes."""
        return self._all
