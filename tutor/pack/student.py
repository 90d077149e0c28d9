"""A pack as students get it: the same lesson without its answers.

A course grades with the reference solutions, so the tutor students install must not hold them:
every step's `solution` goes, and so do its last hint (the one that nearly gives the answer) and
its catalogued mistakes (each is the answer with one slip in it). Everything else stays: the
checks compare with autograd, which needs no reference; an earlier step the learner has not
solved is stood in for by autograd's gradients (tutor/core/kinds/lines.py `_answers`); a slip is
named by the tutor's rules from the values (tutor/core/slips.py), never by writing the fix. What
needs a reference says so instead of guessing: revealing a solution, training on the
references, `pack check`, and the diagnoses derived by rewriting the reference (derived.py finds
nothing to rewrite and leaves the row to the rules and the generic explainers).

The TOML files are read and written again (comments are not kept): a text edit could leave a
solution behind in a form nobody looked for.
"""

from __future__ import annotations

import ast
import base64
import hashlib
import io
import json
import math
import re
import shutil
import sys
import tokenize
import zipfile
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ANSWER_KEYS = ("solution",)  # what a step holds that gives its answer away


def strip_document(doc: dict) -> dict:
    """A pack file's tables without the answers (a new dict; `doc` is left as it was)."""
    out = dict(doc)
    steps = doc.get("steps")
    if isinstance(steps, list):
        out["steps"] = [_strip_step(s) if isinstance(s, dict) else s for s in steps]
    return out


def _strip_step(step: dict) -> dict:
    out = {k: v for k, v in step.items() if k not in ANSWER_KEYS}
    hints = step.get("hints")
    if isinstance(hints, list) and len(hints) >= 3:
        out["hints"] = hints[:-1]  # the last one is nearly the answer
    # No catalogued mistake either: each is the answer with a slip in it, and an edit, a vote
    # or a splice of two finds the answer again, however far apart they look. The tutor's
    # rules still name a slip from the values (a sign, a factor, a slip of the line's
    # operation: tutor/core/slips.py), without writing the fix.
    out.pop("mistakes", None)
    return out


def student_copy(root: Path, out: Path) -> list[Path]:
    """Copy the pack folder `root` to `out` without its answers; the files written."""
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out} is not empty")
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for path in sorted(root.rglob("*")):
        if path.is_dir() or "__pycache__" in path.parts:
            continue
        target = out / path.relative_to(root)
        target.parent.mkdir(parents=True, exist_ok=True)
        if path.suffix == ".toml":
            target.write_text(student_text(path.read_text(encoding="utf-8")), encoding="utf-8")
        else:
            shutil.copyfile(path, target)
        written.append(target)
    return written


def student_text(text: str) -> str:
    """One pack file's text, without the answers."""
    return dumps(strip_document(tomllib.loads(text)))


# --- the student's wheel ----------------------------------------------------------------------

BUNDLED_PACKS = "tutor/_bundled/exercises/"
# What derives a step's code, left out of the student's wheel: `pack new` and its rules with the
# forward files they run on, and the search for the smallest change that makes a wrong answer
# right (tutor/core/smallest.py), each of whose finds is a right answer's code that any program
# importing it could read. The tutor runs without it (tutor/core/kinds/base.py
# `smallest_search`): a wrong answer is then explained by the catalogue, the slips of the
# line's operation and the patterns of the numbers.
LEFT_OUT = ("tutor/authoring/", "tutor/core/smallest.py")
# A line of gradient code shown in a docstring or a comment (`dprobs = dlogprobs / probs`): the
# student's copy of such a text goes. A template's `dX = ...` stays.
_SHOWN_CODE = re.compile(r"\bd[A-Za-z_]\w*(\[[^\]\n]*\])?\s*[-+*/@]?=(?!=)\s*(?!\.\.\.)\S")
_LEFT_OUT_TEXT = "(left out of the student's copy: it showed gradient code)"


def left_out(name: str) -> bool:
    """Is this file of the wheel left out of the student's?"""
    return name.startswith(LEFT_OUT) or (name.startswith(BUNDLED_PACKS)
                                         and name.endswith("/forward.py"))


def student_wheel(wheel: Path, out: Path) -> Path:
    """A copy of `wheel` in the folder `out` that holds no answers and nothing that derives
    them: its lessons without solutions (`student_text`), without what `LEFT_OUT` names, its
    modules without docstrings or comments that show gradient code (`student_module`), and its
    METADATA without the README (whose examples are answers). Same project and version (a
    student's `pip install` of it is the ordinary one), a file name of its own (the wheel's
    build tag, `STUDENT_BUILD`, so the two are never mistaken for each other), its RECORD made
    again for the new contents."""
    out.mkdir(parents=True, exist_ok=True)
    target = out / student_wheel_name(wheel.name)
    if target.resolve() == wheel.resolve():
        raise ValueError("the student's wheel must go to another folder than the wheel itself")
    records: list[str] = []
    record_name = None
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(target, "w",
                                                        zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            name = info.filename
            if name.endswith(".dist-info/RECORD"):
                record_name = name
                continue
            if left_out(name) or "__pycache__/" in name or name.endswith((".pyc", ".pyo")):
                continue
            data = src.read(info)
            if name.startswith(BUNDLED_PACKS) and name.endswith(".toml"):
                data = student_text(data.decode("utf-8")).encode("utf-8")
            elif name.endswith(".py"):
                data = student_module(data.decode("utf-8")).encode("utf-8")
            elif name.endswith(".dist-info/METADATA"):
                data = student_metadata(data.decode("utf-8")).encode("utf-8")
            elif name.endswith(".dist-info/WHEEL"):
                lines = [x for x in data.decode("utf-8").splitlines()
                         if not x.startswith("Build:")]
                data = ("\n".join([*lines, f"Build: {STUDENT_BUILD}"]) + "\n").encode("utf-8")
            dst.writestr(info, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            records.append(f"{name},sha256={digest.decode()},{len(data)}")
        if record_name is None:
            raise ValueError(f"{wheel.name} has no RECORD: not a wheel")
        records.append(f"{record_name},,")
        dst.writestr(record_name, "\n".join(records) + "\n")
    return target


STUDENT_BUILD = "1student"  # a wheel's build tag starts with a digit


def student_wheel_name(name: str) -> str:
    """`backprop_tutor-0.1.0-py3-none-any.whl` -> `backprop_tutor-0.1.0-1student-py3-none-any
    .whl`: the student's wheel under a name of its own, still a valid wheel name."""
    stem = name[:-len(".whl")] if name.endswith(".whl") else name
    parts = stem.split("-")
    if len(parts) == 6:  # it had a build tag already: replaced
        parts.pop(2)
    if len(parts) != 5:  # not a wheel's name: marked all the same
        return f"{stem}.student.whl"
    return "-".join([*parts[:2], STUDENT_BUILD, *parts[2:]]) + ".whl"


def student_metadata(text: str) -> str:
    """A wheel's METADATA without its long description (the README, after the headers)."""
    head = text.split("\n\n", 1)[0]
    return "\n".join(line for line in head.splitlines()
                     if not line.startswith("Description-Content-Type:")) + "\n"


def student_module(source: str) -> str:
    """A module's source with every docstring and comment that shows gradient code emptied
    (lines kept, so tracebacks still point right); its code as it was."""
    try:
        tree = ast.parse(source)
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (SyntaxError, ValueError, tokenize.TokenError, RecursionError):
        return source
    lines = source.splitlines(keepends=True)
    # (start line, start col, end line, end col, replacement), applied from the end
    edits: list[tuple[int, int, int, int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) \
                and isinstance(node.value.value, str) and _SHOWN_CODE.search(node.value.value):
            v = node.value
            breaks = "\n" * (v.end_lineno - v.lineno)
            edits.append((v.lineno, v.col_offset, v.end_lineno, v.end_col_offset,
                          f'"""{_LEFT_OUT_TEXT}{breaks}"""'))
    for tok in tokens:
        if tok.type == tokenize.COMMENT and _SHOWN_CODE.search(tok.string):
            (r, c), (r2, c2) = tok.start, tok.end  # in characters: made bytes, as ast's
            edits.append((r, len(lines[r - 1][:c].encode("utf-8")), r2,
                          len(lines[r2 - 1][:c2].encode("utf-8")), "#"))
    for r, c, r2, c2, new in sorted(edits, reverse=True):
        first, last = lines[r - 1], lines[r2 - 1]
        lines[r - 1:r2] = [_cut(first, c, enc=True) + new + _cut(last, c2)]
    return "".join(lines)


def _cut(line: str, col: int, enc: bool = False) -> str:
    """The part of `line` before (enc) or after the column `col`, counted in UTF-8 bytes as the
    syntax tree counts them."""
    raw = line.encode("utf-8")
    return (raw[:col] if enc else raw[col:]).decode("utf-8")


# --- writing TOML (the subset packs use) ---------------------------------------------------------

_BARE = re.compile(r"^[A-Za-z0-9_-]+$")


def dumps(doc: dict) -> str:
    lines: list[str] = []
    _table(lines, [], doc)
    return "\n".join(lines).lstrip("\n") + "\n"


def _table(lines: list[str], path: list[str], table: dict) -> None:
    for key, value in table.items():
        if not _is_table(value) and not _is_table_array(value):
            lines.append(f"{_key(key)} = {_value(value)}")
    for key, value in table.items():
        if _is_table(value):
            lines += ["", f"[{_dotted([*path, key])}]"]
            _table(lines, [*path, key], value)
        elif _is_table_array(value):
            for item in value:
                lines += ["", f"[[{_dotted([*path, key])}]]"]
                _table(lines, [*path, key], item)


def _is_table(value: Any) -> bool:
    return isinstance(value, dict)


def _is_table_array(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def _key(key: str) -> str:
    return key if _BARE.match(key) else json.dumps(key, ensure_ascii=False)


def _dotted(path: list[str]) -> str:
    return ".".join(_key(k) for k in path)


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        # JSON's string escapes are TOML's basic-string escapes.
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_key(k)} = {_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"a pack file cannot hold {type(value).__name__}")
