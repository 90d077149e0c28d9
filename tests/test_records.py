"""Records behave as the dataclasses whose generated methods they replace (tutor/values/records.py):
each case is checked against a plain `@dataclass` declared the same way."""

from __future__ import annotations

import copy
import pickle
from dataclasses import FrozenInstanceError, dataclass, field, replace

import pytest

from tutor.values.records import FrozenRecord, Record


@dataclass
class PlainRow:
    name: str
    values: list[float] = field(default_factory=list)
    note: str | None = field(default=None, compare=False)


@dataclass(repr=False, eq=False)
class Row(Record):
    name: str
    values: list[float] = field(default_factory=list)
    note: str | None = field(default=None, compare=False)


@dataclass(frozen=True)
class PlainLine:
    index: int
    source: str
    operands: tuple[str, ...] = ()


@dataclass(repr=False, eq=False)
class Line(FrozenRecord):
    index: int
    source: str
    operands: tuple[str, ...] = ()


def _shown(record: object, plain: object) -> str:
    return repr(record).replace(type(record).__qualname__, type(plain).__qualname__, 1)


def test_a_record_shows_and_compares_as_a_dataclass():
    plain, row = PlainRow("x", [1.0], "a"), Row("x", [1.0], "a")
    assert _shown(row, plain) == repr(plain)
    assert row == Row("x", [1.0], "other note")  # compare=False leaves the note out
    assert row != Row("y", [1.0])
    assert row != plain and (row == plain) is (plain == row) is False  # another class
    with pytest.raises(TypeError, match="unhashable"):
        hash(row)
    row.values.append(2.0)
    row.name = "z"  # a mutable record changes as a dataclass does
    assert row == Row("z", [1.0, 2.0])


def test_a_record_that_holds_itself_shows_dots():
    row = Row("loop")
    row.values.append(row)  # type: ignore[arg-type]
    assert repr(row) == "Row(name='loop', values=[...], note=None)"


def test_a_frozen_record_refuses_changes_and_hashes_as_a_frozen_dataclass():
    plain, line = PlainLine(0, "a = b", ("b",)), Line(0, "a = b", ("b",))
    assert _shown(line, plain) == repr(plain)
    assert line == Line(0, "a = b", ("b",)) and hash(line) == hash(Line(0, "a = b", ("b",)))
    assert hash(line) == hash(plain)  # the same fields, hashed the same way
    for change in (lambda: setattr(line, "index", 1), lambda: setattr(line, "other", 1),
                   lambda: delattr(line, "source")):
        with pytest.raises(FrozenInstanceError):
            change()
    assert line.index == 0


def test_a_frozen_record_copies_pickles_and_is_replaced_whole():
    line = Line(3, "x = y * z", ("y", "z"))
    assert copy.copy(line) == line and copy.deepcopy(line) == line
    assert pickle.loads(pickle.dumps(line)) == line
    moved = replace(line, index=4)
    assert moved.index == 4 and line.index == 3
