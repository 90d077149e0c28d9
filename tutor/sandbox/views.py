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
from types import FrameType
from typing import Any

from tutor.sandbox.guard import GUARD_NAME, LEARNER_CLASSES, Refused

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


def _learners_frame() -> FrameType:
    """The frame that called the view, which must be learner code: one that runs with the
    sandbox's builtins. Handed to the sandbox's own objects as a callback (a layer's `forward`,
    a field's `default_factory`, a torch decorator), a view would be called from their frame
    and read their names, which hold real modules."""
    frame = sys._getframe(2)
    if GUARD_NAME not in frame.f_builtins:
        raise Refused("globals(), locals() and vars() read the names of your own code only: "
                      "passed on to be called from elsewhere (a layer's forward, a default "
                      "factory, a decorator), they are not available in the sandbox")
    return frame


def namespace_view() -> dict:
    """The caller's global names, as a copy."""
    return _own(_learners_frame().f_globals)


def locals_view() -> dict:
    """The caller's local names (its global ones at a cell's top level), as a copy."""
    return _own(_learners_frame().f_locals)


def vars_view(*args: Any) -> dict:
    if not args:
        return _own(_learners_frame().f_locals)
    if len(args) > 1:
        raise TypeError("vars() takes at most one argument")
    obj = args[0]
    if type(obj) in LEARNER_CLASSES:
        return _own(object.__getattribute__(obj, "__dict__"))
    raise Refused(f"vars() of a {type(obj).__name__} is not available in the sandbox: it reads "
                  "an object's insides; use its attributes by name")
