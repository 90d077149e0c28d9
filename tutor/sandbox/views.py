"""`getattr`, `globals()`, `locals()` and `vars()` as learner code gets them.

`getattr(obj, name)` is `obj.name` with the name computed: it goes through the same guard as
every attribute read (tutor/sandbox/guard.py), so it reaches nothing `obj.name` could not.
`globals()` gives a copy of the learner's own global names, `locals()` and `vars()` of the names
of the function they are called in (a notebook's `cache.update(locals())`), none starting with an
underscore, where the sandbox keeps its own: reading `globals()[name]` works, and writing to the
copy changes nothing. `vars(obj)` works on the learner's own objects only.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from tutor.sandbox.guard import LEARNER_CLASSES, Refused

_MISSING = object()


def guarded_getattr(guard: Callable[[Any, str], Any]) -> Callable[..., Any]:
    def getattr_(obj: Any, name: Any, default: Any = _MISSING) -> Any:
        if type(name) is not str:
            raise TypeError("getattr(): attribute name must be a string")
        try:
            return guard(obj, name)
        except AttributeError:
            if default is _MISSING:
                raise
            return default

    getattr_.__name__ = "getattr"
    return getattr_


def _own(names: dict) -> dict:
    return {k: v for k, v in names.items() if isinstance(k, str) and not k.startswith("_")}


def namespace_view() -> dict:
    """The caller's global names, as a copy."""
    return _own(sys._getframe(1).f_globals)


def locals_view() -> dict:
    """The caller's local names (its global ones at a cell's top level), as a copy."""
    return _own(sys._getframe(1).f_locals)


def vars_view(*args: Any) -> dict:
    if not args:
        return _own(sys._getframe(1).f_locals)
    if len(args) > 1:
        raise TypeError("vars() takes at most one argument")
    obj = args[0]
    if type(obj) in LEARNER_CLASSES:
        return _own(object.__getattribute__(obj, "__dict__"))
    raise Refused(f"vars() of a {type(obj).__name__} is not available in the sandbox: it reads "
                  "an object's insides; use its attributes by name")
