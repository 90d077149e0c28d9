"""Records: the methods `@dataclass` would generate for a value type, written once for all.

`@dataclass` writes `__repr__`, `__eq__`, `__hash__` and, for a frozen class, `__setattr__`,
`__delattr__` and a longer `__init__`, as source text for every class it decorates and compiles
that text whenever the module is imported. The pack's, the results' and the lesson's types are
imported before the TUI's first frame, where those compilations cost about an eighth of what
the tutor adds to Textual (`benchmarks/first_frame_instructions.py`). Those types are declared
`@dataclass(repr=False, eq=False)`, which leaves only `__init__` to generate, and inherit the
rest from `Record` or `FrozenRecord`, which behave as the generated methods do.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import FrozenInstanceError, fields
from functools import cache
from operator import attrgetter
from reprlib import recursive_repr
from typing import Any


@cache
def _compared(cls: type) -> Callable[[object], tuple]:
    """The values `==` compares, in field order: every field unless one says `compare=False`."""
    return _getter(tuple(f.name for f in fields(cls) if f.compare))


@cache
def _hashed(cls: type) -> Callable[[object], tuple]:
    """The values a frozen record's hash covers: those compared, unless a field says `hash=`."""
    return _getter(tuple(f.name for f in fields(cls) if (f.compare if f.hash is None else f.hash)))


def _getter(names: tuple[str, ...]) -> Callable[[object], tuple]:
    # attrgetter builds the tuple in C, as fast as the `(self.a, self.b)` of generated code,
    # but returns a bare value for one name.
    if len(names) > 1:
        return attrgetter(*names)
    return lambda record: tuple(getattr(record, name) for name in names)


class Record:
    """A dataclass shown, compared and (not) hashed by its fields, as `@dataclass` would:
    equal to a record of the same class whose fields are equal, and unhashable, since it can
    change."""

    @recursive_repr()
    def __repr__(self) -> str:
        shown = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields(self) if f.repr)
        return f"{type(self).__qualname__}({shown})"

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        values = _compared(type(self))
        return values(self) == values(other)

    __hash__ = None  # type: ignore[assignment]


class FrozenRecord(Record):
    """A record whose fields are set once, by `__init__`: assigning or deleting one afterwards
    raises `FrozenInstanceError`, as on a frozen dataclass, and equal records hash alike."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self.__dict__ or name not in self.__dataclass_fields__:  # type: ignore[attr-defined]
            raise FrozenInstanceError(f"cannot assign to field {name!r}")
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __hash__(self) -> int:
        return hash(_hashed(type(self))(self))
