"""A learner's code as the sandbox runs it: compiled behind the policy and the guard, executed
with the sandbox's builtins, its failures told in the learner's terms.

Used by the checks (execution.py) and by training; both run it in the confined child process.
"""

from __future__ import annotations

import builtins
import contextlib
import copy
import difflib
import marshal
import re
import secrets
import signal
import sys
import threading
import traceback
import types
import warnings
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import torch

from tutor import devices
from tutor.code_facts import ATTRIBUTE_DICT, UNAVAILABLE
from tutor.core.clock import Budget, CheckTimeout
from tutor.pack.flow import tensor_of
from tutor.sandbox import objects, views
from tutor.sandbox.classes import TypeOf
from tutor.sandbox.clean import MAX_MESSAGE, MAX_TEXT, Capped, clean, cut_note
from tutor.sandbox.guard import GUARD_NAME, VIEWS, Refused, rewrite
from tutor.sandbox.modules import GUARD, MODULES
from tutor.sandbox.screen import CODE_FILE, screen
from tutor.values.results import CheckError

Tensor = torch.Tensor
_GETATTR = views.guarded_getattr(GUARD)
MAX_STDOUT = MAX_TEXT
# An earlier step's accepted code, replayed before the candidate, is compiled under its own name:
# a function it defined that fails (or warns) when the candidate calls it names that step.
_EARLIER_HEAD, _EARLIER_TAIL = "<your code for ", ">"


def earlier_file(step_id: str) -> str:
    """The file name an earlier step's accepted code is compiled under."""
    return f"{_EARLIER_HEAD}{step_id}{_EARLIER_TAIL}"


def _earlier_step(filename: str) -> str | None:
    if filename.startswith(_EARLIER_HEAD) and filename.endswith(_EARLIER_TAIL):
        return filename[len(_EARLIER_HEAD):-len(_EARLIER_TAIL)] or None
    return None


def _where(filename: str, line: int) -> str | None:
    """A line of learner code in words: the candidate's own, or an earlier step's."""
    if filename == CODE_FILE:
        return f"line {line}"
    step = _earlier_step(filename)
    return f"line {line} of your code for {step}" if step else None

# What learner code may call without importing: enough for loops, shapes and printing.
SAFE_BUILTINS = {
    name: getattr(builtins, name)
    for name in (
        "abs all any bool callable dict divmod enumerate filter float frozenset int isinstance "
        "issubclass iter len list map max min next pow range repr reversed round set slice "
        "sorted str sum tuple zip staticmethod classmethod property super "
        # a notebook's own encoding of its characters (`ord(ch) - 96`)
        "ord chr hex bin oct hash complex OverflowError "
        "Ellipsis True False None ArithmeticError AssertionError "
        "AttributeError Exception IndexError KeyError LookupError NameError NotImplementedError "
        "RuntimeError StopIteration TypeError ValueError ZeroDivisionError"
    ).split()
}
# `id(t)`, a key for a dict of gradients by tensor: unique and stable while the object lives,
# as Python's is, but masked, so that no memory address reaches learner code.
_ID_MASK = secrets.randbits(60)
SAFE_BUILTINS["id"] = lambda obj: builtins.id(obj) ^ _ID_MASK


# type() answers with classes that build nothing dangerous (see classes.py); the ones learner
# code already holds (int, range, torch.Size, torch.dtype, ...) come back as they are.
_type = TypeOf([v for v in SAFE_BUILTINS.values() if isinstance(v, type)]
               + [v for m in MODULES.values() for v in vars(m).values() if isinstance(v, type)])


def _loaded_import(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (),
                   level: int = 0) -> Any:
    """The `__import__` that torch's C++ code calls while learner code runs.

    Some tensor operations import part of torch lazily, the first time they need it (indexing
    with a Python list looks up `torch.storage`), through the builtins of the running code. So
    that they work inside the sandbox, a module of torch that is already loaded is handed back;
    nothing is ever loaded. Learner code cannot name this function (`import` and names with
    underscores are refused before anything runs).
    """
    if level == 0 and (name == "torch" or name.startswith("torch.")) and name in sys.modules:
        return sys.modules[name] if fromlist else sys.modules[name.partition(".")[0]]
    raise ImportError(f"{name} cannot be imported in the sandbox")


def _format(value: Any, spec: str = "") -> str:
    # format() with a spec cannot walk attributes, unlike str.format's fields.
    return builtins.format(value, spec)


class Output:
    """What learner code prints, capped: its first and last part are kept, with a note of what
    was cut between them (`clean.Capped`). `cmp(...)` calls are recorded where they happen."""

    def __init__(self) -> None:
        # Half for the first part, half for the last, with room for the note, so that the engine's
        # own `clean` (at MAX_TEXT) finds nothing more to cut.
        half = (MAX_STDOUT - 100) // 2
        self._text = Capped("", half, half, cut_note)
        self._cmp_calls: list[tuple[int, str, Any]] = []

    def write(self, text: str) -> None:
        self._text.write(text)

    def print(self, *args: Any, sep: Any = " ", end: Any = "\n", **_: Any) -> None:
        self._text.write(str(sep).join(str(a) for a in args) + str(end))

    def cmp(self, name: Any = None, dt: Any = None, t: Any = None, *_: Any, **__: Any) -> None:
        """The notebook's cmp: recorded here, answered by the tutor after grading."""
        if len(self._cmp_calls) < 64 and isinstance(name, str):
            self._cmp_calls.append((self._text.written, name[:40], dt))

    @property
    def cmp_calls(self) -> list[tuple[int, str, Any]]:
        """Each call's place in `text()`, its name and its tensor."""
        return [(self._text.place(at), name, dt) for at, name, dt in self._cmp_calls]

    def text(self) -> str:
        return self._text.text()


def sandbox_globals(out: Output) -> dict:
    """The modules, guard and builtins learner code runs with, its prints going to `out`.

    The guard and cmp are builtins as well as globals: a function keeps the builtins it was
    made with, wherever it is called from (see `_RUN_BUILTINS`).
    """
    return {
        **MODULES,
        GUARD_NAME: GUARD,
        "cmp": out.cmp,
        "__builtins__": _builtins(out.print, out.cmp),
    }


def _hasattr(obj: Any, name: Any) -> bool:
    """`hasattr` as the guard answers: an attribute learner code could read (`self.cache` of
    a class of theirs), never one it could not."""
    if not isinstance(name, str):
        raise TypeError("hasattr(): attribute name must be string")
    try:
        GUARD(obj, name)
    except (AttributeError, Refused):
        return False
    return True


def _builtins(print_: Callable, cmp: Callable) -> dict:
    return {**SAFE_BUILTINS, "print": print_, "type": _type, "format": _format,

            "__import__": _loaded_import, GUARD_NAME: GUARD, "cmp": cmp, "hasattr": _hasattr,
            VIEWS["getattr"]: _GETATTR, VIEWS["globals"]: views.namespace_view,
            VIEWS["locals"]: views.locals_view, VIEWS["vars"]: views.vars_view,
            "__build_class__": objects.build_class, objects.SET_NAME: objects.set_attribute,
            objects.AUGMENT_NAME: objects.augment_attribute, UNAVAILABLE: objects.Unavailable,
            ATTRIBUTE_DICT: objects.AttributeDict}


class _Listening(threading.local):
    out: Output | None = None  # the Output of the learner code running in this thread


_LISTENING = _Listening()


def _print(*args: Any, **kw: Any) -> None:
    if _LISTENING.out is not None:
        _LISTENING.out.print(*args, **kw)


def _cmp(*args: Any, **kw: Any) -> None:
    if _LISTENING.out is not None:
        _LISTENING.out.cmp(*args, **kw)


# The builtins of every run of `execute`, one dict for the process. A function learner code
# defines keeps the builtins it was made with (Python looks a name up in the function's
# globals, then in those builtins), and its globals are the namespace of the run that made
# it, which loses the run's hooks when it ends. So a helper written in one step and called
# in a later one (whose namespace is a copy) finds the guard here, still behind it for every
# attribute it reads, and prints into the output of the run that calls it.
_RUN_BUILTINS = _builtins(_print, _cmp)


class CodeError(Exception):
    """The learner's code could not be run to the end; `payload` is the JSON error object."""

    def __init__(self, kind: str, message: str, line: int | None = None, col: int | None = None):
        super().__init__(message)
        self.payload = {"kind": kind, "message": message, "line": line, "col": col}

    @property
    def error(self) -> CheckError:
        return CheckError.from_dict(self.payload)


def compile_candidate(code: str, filename: str = CODE_FILE) -> types.CodeType:
    """Parse, apply the policy, put the guard on attribute reads, compile (as `filename`, which
    tracebacks and warnings name: the candidate's, or `earlier_file`).

    Raises CodeError for syntax errors and refusals (tutor/sandbox/screen.py).
    """
    tree, error = screen(code, filename)
    if error is not None or tree is None:
        raise CodeError(**(error or {"kind": "syntax", "message": "your code"}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return compile(rewrite(tree), filename, "exec")


@lru_cache(maxsize=64)
def program(code: str) -> bytes:
    """The candidate compiled behind the policy and the guard (`compile_candidate`), as bytes
    (marshal) that a child loads instead of compiling it again: a check compiles its candidate
    once, in the worker, before any process starts.

    Raises CodeError for syntax errors and refusals.
    """
    return marshal.dumps(compile_candidate(code))


@lru_cache(maxsize=8)
def load(compiled: bytes) -> types.CodeType:
    """The code object `program` made. Only the worker writes these bytes: the direction from
    the worker to its child is the trusted one."""
    return marshal.loads(compiled)


def timeout_error(seconds: float) -> CodeError:
    return CodeError(
        "timeout",
        f"your code was stopped after {seconds:g} s. Is there a loop that never ends? The "
        "gradients here take milliseconds.",
    )


def _offending_line(exc: BaseException) -> int | None:
    frames = [f for f in traceback.extract_tb(exc.__traceback__, limit=64)
              if f.filename == CODE_FILE]
    return frames[-1].lineno if frames else None


def _inside_earlier(exc: BaseException, earlier: dict[str, str]) -> str:
    """Where in an earlier step's code the failure happened, when the candidate called a
    function that step defined and it failed there: a line to add to the message, or ""."""
    frames = traceback.extract_tb(exc.__traceback__, limit=64)
    last = next((f for f in reversed(frames) if f.filename == CODE_FILE
                 or _earlier_step(f.filename)), None)
    step = _earlier_step(last.filename) if last is not None else None
    if step is None or not last.lineno:
        return ""
    lines = earlier.get(step, "").splitlines()
    source = clean(lines[last.lineno - 1].strip(), 300) if last.lineno <= len(lines) else ""
    return (f"(in {last.name}, {_where(last.filename, last.lineno)}"
            + (f": `{source}`" if source else "") + ")\n")


def runtime_error(exc: BaseException, code: str, names: list[str] | None = None,
                  scope: str | None = None, earlier: dict[str, str] | None = None
                  ) -> CodeError:
    """The learner's failure as one short, clean message; `names` are what was defined, and
    `scope` says in words what is defined, where that is not the lesson's namespace.
    `earlier` is the code of the earlier steps replayed before it, by step id: a failure inside
    a function one of them defined is shown there too."""
    line = _offending_line(exc)
    inside = _inside_earlier(exc, earlier or {})
    try:
        text = str(exc).strip() or type(exc).__name__
    except Exception:  # noqa: BLE001 - a learner's exception whose str() fails
        text = type(exc).__name__
    text = clean(text, MAX_MESSAGE)
    if isinstance(exc, MemoryError) or "can't allocate memory" in text or "out of memory" in text:
        return CodeError(
            "memory",
            (f"line {line}: " if line else "")
            + "that needs more memory than the sandbox allows. The gradients here are small "
            "tensors; check the sizes you are creating.",
            line,
        )
    lines = code.splitlines()
    source = clean(lines[line - 1].strip(), 300) if line and line <= len(lines) else ""
    where = (f"line {line}: `{source}`\n" if line else "") + inside
    if isinstance(exc, Refused):
        return CodeError("forbidden", f"{where}{text}.", line)
    hint = ""
    if "cannot be multiplied" in text:
        hint = _matmul_hint(text) or (
            " Compare the shapes on the forward line: a matmul needs the inner "
            "dimensions to agree, so one operand may need .T or the order swapped."
        )
    elif "size of tensor a" in text:
        # Raised by +, -, * and / (never by a matmul): the two shapes do not broadcast.
        hint = (
            " An element-wise operation (+, -, *, /) needs shapes that broadcast: compare "
            "the shapes of the two operands on this line with the forward line's."
        )
    elif isinstance(exc, NameError):
        hint = _name_hint(exc, names or [], scope)
    if isinstance(exc, TypeError) and "'ellipsis'" in text:
        # A template's `dx += ...` left as it is: the same words as an untouched `dx = ...`.
        return CodeError("runtime", f"{where}this line still holds the template's `...`: "
                                    "replace it with your expression.", line)
    return CodeError("runtime", f"{where}{type(exc).__name__}: {text}.{hint}", line)


_MATMUL_SHAPES = re.compile(r"\((\d+)x(\d+) and (\d+)x(\d+)\)")


def _matmul_hint(text: str) -> str | None:
    """A product whose inner sizes differ, said from its shapes: which operand, transposed,
    would fit (a gradient through `x @ W` multiplies by `W.T` on the right, `x.T` on the
    left), or that the two are in the wrong order."""
    m = _MATMUL_SHAPES.search(text)
    if not m:
        return None
    a, b, c, d = (int(x) for x in m.groups())
    left, right = f"[{a}, {b}]", f"[{c}, {d}]"
    said = f" The product multiplies {left} by {right}: the inner sizes, {b} and {c}, differ."
    if b == d and a != c:
        return said + (f" The right operand transposed, [{d}, {c}], would fit: a gradient "
                       "flows back through `x @ W` as `dout @ W.T` (W transposed).")
    if a == c and b != d:
        return said + (f" The left operand transposed, [{b}, {a}], would fit: a weight's "
                       "gradient is `x.T @ dout` (x transposed).")
    if d == a:
        return said + " In the other order they would fit: check which operand comes first."
    return said + " Compare both operands' shapes with the forward line's."


def _name_hint(exc: NameError, names: list[str], scope: str | None = None) -> str:
    missing = getattr(exc, "name", None) or ""
    visible = [n for n in names if not n.startswith("_") and n != "cmp"]
    close = difflib.get_close_matches(missing, visible, n=3, cutoff=0.6) if missing else []
    grads = sorted(n for n in visible if tensor_of(n) in names)
    parts = []
    if close:
        parts.append(f" Did you mean {' or '.join(close)}?")
    if scope:
        return "".join(parts) + f" {scope}"
    sizes = [n for n in visible if n.startswith("n_") or n.endswith("_size")]
    parts.append(
        " Defined here: the forward tensors and parameters, n, Xb, Yb, the lecture's sizes "
        f"({', '.join(sizes) or 'none'}), torch, F and math"
    )
    parts.append(f", and these gradients: {', '.join(grads)}." if grads else
                 ". No gradient from an earlier step is defined in this exercise.")
    return "".join(parts)


def _alarm(_signum: int, _frame: Any) -> None:
    raise CheckTimeout()


def arm(seconds: float) -> bool:
    """Raise CheckTimeout in this (main) thread after `seconds` of wall-clock time (a training
    step's limit; a check's is CPU time, tutor/core/clock.py); False where that is impossible."""
    if not hasattr(signal, "setitimer"):
        return False
    try:
        signal.signal(signal.SIGALRM, _alarm)
    except ValueError:  # not the main thread
        return False
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 1e-3))
    return True


def disarm() -> None:
    if hasattr(signal, "setitimer"):
        signal.setitimer(signal.ITIMER_REAL, 0)


def execute(compiled: types.CodeType, ns: dict, out: Output,
            budget: Budget | None = None) -> None:
    """Run compiled learner code in `ns`, which it shares with later code, as in a notebook.
    Its CPU time counts against `budget` (raising CheckTimeout when that is spent); the tutor's
    own work around it does not.

    Warnings the code triggers (a deprecated .T on a 1-D tensor, say) go to its output, next to
    its own prints, where they are capped with them; never to the worker's stderr.
    """
    ns.update(MODULES)
    ns["__builtins__"] = _RUN_BUILTINS
    listening, _LISTENING.out = _LISTENING.out, out

    def shown(message: Any, _category: Any, filename: str, lineno: int, *_: Any) -> None:
        where = _where(filename, lineno)
        if where:
            text = str(message).split(" (Triggered internally")[0]
            out.write(clean(f"warning ({where}): {text}", MAX_MESSAGE) + "\n")

    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = shown  # put back as it was when the block ends
            with devices.learner(), budget.running() if budget else contextlib.nullcontext():
                exec(compiled, ns)
    finally:
        _LISTENING.out = listening
        ns.pop("__builtins__", None)


def copy_namespace(ns: dict) -> dict:
    """Fresh copies of every tensor, so one run cannot touch what the next one uses.

    Aliasing is kept exactly as the learner made it: tensors that share memory are copied as
    views of one new copy of that memory, with their own offsets and strides, so two names for
    one tensor stay one tensor and a view stays a view of its base. (This is deepcopy's memo
    behaviour, about five times faster for a namespace of small tensors.)
    """
    memory: dict[int, Tensor] = {}
    out = {}
    for name, value in ns.items():
        if type(value) is Tensor and value.layout == torch.strided and not value.is_quantized:
            storage = value.untyped_storage()
            key = storage.data_ptr()
            flat = memory.get(key)
            if flat is None or flat.dtype != value.dtype:
                flat = value.new_empty(0).set_(storage).clone() if storage.nbytes() else None
                if flat is not None and key not in memory:
                    memory[key] = flat
            if flat is not None and flat.dtype == value.dtype:
                out[name] = flat.as_strided(value.shape, value.stride(), value.storage_offset())
                continue
        if isinstance(value, (types.ModuleType, Callable)) and not isinstance(value, Tensor):
            out[name] = value
            continue
        try:
            out[name] = copy.deepcopy(value)
        except Exception:  # noqa: BLE001 - uncopyable learner objects are shared as they are
            out[name] = value
    return out


def shares_memory(a: Tensor, b: Tensor) -> bool:
    try:
        return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return False
