"""`dataclasses` in the sandbox: a record class of the learner's (`@dataclass class BlockActs:
h: torch.Tensor`), the way a notebook keeps a layer's weights, activations or gradients.

Made here, for the learner's own classes only: the decorator gives such a class an `__init__`
taking its annotated fields in order (with their defaults, or `field(default_factory=...)`),
and a repr, unless the class wrote its own; the attributes are set as any of the learner's are
(objects.set_attribute). `fields` names the fields, `asdict` copies them out, `replace` makes a
changed copy. Nothing of the real module's machinery (the code it compiles, its hooks on the
class) comes with it; options such as `frozen=True` or `eq=False` are accepted and change
nothing but what they say about comparing (the record compares by identity).
"""

from __future__ import annotations

import types
import weakref
from collections.abc import Callable
from typing import Any

from tutor.sandbox.guard import LEARNER_CLASSES, SANDBOX_CLASSES, Refused
from tutor.sandbox.objects import set_attribute


class _Missing:
    """No default given (Python's `dataclasses.MISSING`): a marker of the sandbox's own, which
    learner code may see (`fields(R)[0].default`) but which leads nowhere."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


_MISSING = _Missing()


class Field:
    """One field of a record: its name, and its default or the factory that makes one."""

    def __init__(self, default: Any = _MISSING, default_factory: Any = _MISSING) -> None:
        self.name = ""
        self.default = default
        self.default_factory = default_factory

    def __repr__(self) -> str:
        return f"Field(name={self.name!r})"

    def value(self) -> Any:
        if self.default_factory is not _MISSING:
            return self.default_factory()
        return self.default


# A record class -> its fields in order (a weak map: classes come and go with the namespace).
_RECORDS: weakref.WeakKeyDictionary[type, tuple[Field, ...]] = weakref.WeakKeyDictionary()


def field(*, default: Any = _MISSING, default_factory: Any = _MISSING, **_options: Any) -> Field:
    if default is not _MISSING and default_factory is not _MISSING:
        raise ValueError("cannot specify both default and default_factory")
    return Field(default, default_factory)


def _fields_of(cls: type) -> tuple[Field, ...]:
    found: dict[str, Field] = {}
    for klass in reversed(cls.__mro__):
        if klass in _RECORDS:
            found.update({f.name: f for f in _RECORDS[klass]})
            continue
        if klass not in LEARNER_CLASSES:
            continue
        for name in vars(klass).get("__annotations__", {}):
            held = vars(klass).get(name, _MISSING)
            made = held if isinstance(held, Field) else Field(held)
            made.name = name
            found[name] = made
    return tuple(found.values())


def _init(fields: tuple[Field, ...], name: str) -> Callable[..., None]:
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if len(args) > len(fields):
            raise TypeError(f"{name}() takes {len(fields)} positional arguments but "
                            f"{len(args)} were given")
        given = dict(zip((f.name for f in fields), args, strict=False))
        for key, value in kwargs.items():
            if key not in {f.name for f in fields}:
                raise TypeError(f"{name}() got an unexpected keyword argument {key!r}")
            if key in given:
                raise TypeError(f"{name}() got multiple values for argument {key!r}")
            given[key] = value
        for f in fields:
            if f.name in given:
                set_attribute(self, f.name, given[f.name])
            elif f.default is _MISSING and f.default_factory is _MISSING:
                raise TypeError(f"{name}() missing required argument: {f.name!r}")
            else:
                set_attribute(self, f.name, f.value())

    return __init__


def _repr(fields: tuple[Field, ...]) -> Callable[[Any], str]:
    def __repr__(self: Any) -> str:
        inner = ", ".join(f"{f.name}={getattr(self, f.name, None)!r}" for f in fields)
        return f"{type(self).__name__}({inner})"

    return __repr__


def dataclass(cls: type | None = None, /, **_options: Any) -> Any:
    def make(klass: type) -> type:
        if klass not in LEARNER_CLASSES or klass in SANDBOX_CLASSES:
            raise Refused("dataclass makes records only of your own classes")
        fields = _fields_of(klass)
        _RECORDS[klass] = fields
        for f in fields:
            if isinstance(vars(klass).get(f.name), Field):
                # The class keeps the plain default, as Python's dataclass leaves it.
                type.__setattr__(klass, f.name, f.default) if f.default is not _MISSING \
                    else type.__delattr__(klass, f.name)
        if "__init__" not in vars(klass):
            type.__setattr__(klass, "__init__", _init(fields, klass.__name__))
        if "__repr__" not in vars(klass):
            type.__setattr__(klass, "__repr__", _repr(fields))
        return klass

    return make if cls is None else make(cls)


def _record_type(obj: Any) -> type | None:
    cls = obj if isinstance(obj, type) else type(obj)
    return cls if any(k in _RECORDS for k in cls.__mro__) else None


def fields(obj: Any) -> tuple[Field, ...]:
    cls = _record_type(obj)
    if cls is None:
        raise TypeError("must be called with a dataclass type or instance")
    return _fields_of(cls)


def is_dataclass(obj: Any) -> bool:
    return _record_type(obj) is not None


def asdict(obj: Any) -> dict[str, Any]:
    if _record_type(obj) is None or isinstance(obj, type):
        raise TypeError("asdict() should be called on dataclass instances")

    def copied(value: Any) -> Any:
        if _record_type(value) is not None and not isinstance(value, type):
            return asdict(value)
        if isinstance(value, (list, tuple)):
            return type(value)(copied(v) for v in value)
        if isinstance(value, dict):
            return {k: copied(v) for k, v in value.items()}
        return value

    return {f.name: copied(getattr(obj, f.name)) for f in fields(obj)}


def replace(obj: Any, /, **changes: Any) -> Any:
    if _record_type(obj) is None or isinstance(obj, type):
        raise TypeError("replace() should be called on dataclass instances")
    values = {f.name: getattr(obj, f.name) for f in fields(obj)}
    values.update(changes)
    return type(obj)(**values)


def module() -> types.ModuleType:
    made = types.ModuleType("dataclasses")
    for name, value in (("dataclass", dataclass), ("field", field), ("fields", fields),
                        ("asdict", asdict), ("replace", replace),
                        ("is_dataclass", is_dataclass)):
        setattr(made, name, value)
    return made
