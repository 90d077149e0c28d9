"""Every catalogued mistake of a pack, carried to each other step with the same code shape.

Shared by tests/test_transplant.py and benchmarks/transplants.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from tutor.pack.model import Pack
from tutor.pack.transplant import counterpart, transplant


@dataclass(frozen=True)
class Transplant:
    origin: str  # the step (and tensor) whose catalogue holds the mistake
    step: str
    tensor: str  # the tensor whose gradient the slip makes wrong, on `step`
    code: str


def transplants(pack: Pack) -> Iterator[Transplant]:
    steps = [s for s in pack.gradient_steps if s.solution.strip()]
    for source in steps:
        for mistake in source.mistakes:
            tensor = mistake.tensor or source.checks[0]
            for target in steps:
                if target is source or target.kind != source.kind:
                    continue
                lines = ("\n".join(pack.line_for(t).source for t in source.lines),
                         "\n".join(pack.line_for(t).source for t in target.lines))
                code = transplant(source.solution, mistake.code, target.solution, lines)
                if code is None:
                    continue
                there = counterpart(source.solution, target.solution, tensor, lines)
                if there not in (*target.checks, *target.partials):
                    continue
                yield Transplant(f"{source.id}:{tensor}", target.id, there, code)
