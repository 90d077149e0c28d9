"""A pack as students get it: the same lesson without its answers.

A course grades with the reference solutions, so the tutor students install must not hold them:
every step's `solution` goes, and so does its last hint (the one that nearly gives the answer).
Everything else stays: the checks compare with autograd, which needs no reference; an earlier
step the learner has not solved is stood in for by autograd's gradients (tutor/core/kinds/lines.py
`_answers`); catalogued mistakes are wrong answers with what is wrong about them, said without the
answer. What needs a reference says so instead of guessing: revealing a solution, training on the
references, `pack check`, and the diagnoses derived by rewriting the reference (derived.py finds
nothing to rewrite and leaves the row to the catalogue and the generic explainers).

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
    mistakes = step.get("mistakes")
    if isinstance(mistakes, list):
        out.pop("mistakes", None)
        kept = kept_mistakes(str(step.get("solution") or ""),
                             [m for m in mistakes if isinstance(m, dict)])
        if kept:
            out["mistakes"] = kept
    return out


def kept_mistakes(solution: str, mistakes: list[dict]) -> list[dict]:
    """The catalogued mistakes a student's copy may hold: none from which the answer follows
    by one edit (one statement changed, added or dropped, at any depth of a function or a
    loop), by changing a few tokens anywhere (`FEW_TOKENS`: a dim, a `keepdim=True`, a sign, a
    `.T`, an index, which a program trying every small change through `check` would find), by
    flipping the sign of one assignment or undoing a factor (a mistake of kind sign or scale), or
    by putting two of them together (each holding the lines the other got wrong, which a vote
    over several would also find)."""
    answer = _statements(solution)
    if not answer:
        return list(mistakes)
    kept: list[dict] = []
    held: list[set[str]] = []
    for m in mistakes:
        if m.get("kind") in ("sign", "scale"):
            # The answer times -1, or times the factor its message names: one line away,
            # whatever the code looks like. The tutor still names such a slip from the values.
            continue
        mine = _statements(str(m.get("code", "")))
        if _gives_away(answer, mine) or _sign_flip_gives(answer, mine) \
                or _few_tokens_away(solution, str(m.get("code", ""))):
            continue
        if len(answer) >= 2 and any(answer <= (mine | other) for other in held):
            continue
        kept.append(m)
        held.append(mine)
    return kept


# A mistake this many tokens or fewer from the answer (changed, added or dropped, in all) is one
# small edit away from it: `sum(2, ...)` for `sum(-1, ...)`, a `keepdim=True` left out.
FEW_TOKENS = 4
_NOT_TOKENS = {tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.ENCODING,
               tokenize.ENDMARKER, tokenize.INDENT, tokenize.DEDENT}


def _tokens(code: str) -> list[str] | None:
    try:
        return [t.string for t in tokenize.generate_tokens(io.StringIO(code.strip() + "\n")
                                                            .readline)
                if t.type not in _NOT_TOKENS]
    except (tokenize.TokenError, SyntaxError, ValueError, RecursionError):
        return None


def _few_tokens_away(solution: str, code: str) -> bool:
    """The mistake's tokens and the answer's differ by `FEW_TOKENS` or fewer, in all (spacing,
    comments and line breaks aside)."""
    from difflib import SequenceMatcher

    a, b = _tokens(solution), _tokens(code)
    if a is None or b is None:
        return False
    ops = SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
    return sum(max(i2 - i1, j2 - j1) for op, i1, i2, j1, j2 in ops if op != "equal") \
        <= FEW_TOKENS


def _gives_away(answer: set[str], mistake: set[str]) -> bool:
    """A catalogued mistake is the answer with one thing changed or one thing added. It hands
    the answer over when it holds all of it (the answer, then a wrong line), or, for an answer of
    three statements or more (a function, a loop through time), all of it but one: a student
    would only have to find the one line that differs. A short answer's mistake that keeps a
    line of it (`dlogprobs = torch.zeros_like(logprobs)`) gives away no more than the template."""
    shared = len(answer & mistake)
    return shared == len(answer) or (len(answer) >= 3 and shared >= len(answer) - 1)


def _sign_flip_gives(answer: set[str], mistake: set[str]) -> bool:
    """Negating one of the mistake's assignments (or taking a minus away) gives the answer."""
    for line in mistake - answer:
        for flipped in _sign_flips(line):
            if answer <= (mistake - {line}) | {flipped}:
                return True
    return False


def _sign_flips(line: str) -> list[str]:
    try:
        node = ast.parse(line).body[0]
    except (SyntaxError, ValueError, IndexError, RecursionError, MemoryError):
        return []
    if not isinstance(node, (ast.Assign, ast.AugAssign)):
        return []
    value = node.value
    out = [ast.UnaryOp(ast.USub(), value)]
    if isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.USub):
        out.append(value.operand)
    if isinstance(value, ast.BinOp) and isinstance(value.op, (ast.Mult, ast.Div)):
        for side in ("left", "right"):
            part = getattr(value, side)
            if isinstance(part, ast.UnaryOp) and isinstance(part.op, ast.USub):
                swapped = ast.BinOp(**{**{"left": value.left, "op": value.op,
                                          "right": value.right}, side: part.operand})
                out.append(swapped)
    lines = []
    for new in out:
        node.value = new
        lines.append(ast.unparse(node))
    if isinstance(node, ast.AugAssign) and isinstance(node.op, (ast.Add, ast.Sub)):
        node.value = value
        node.op = ast.Sub() if isinstance(node.op, ast.Add) else ast.Add()
        lines.append(ast.unparse(node))
    return lines


def _statements(code: str) -> set[str]:
    """The code's simple statements, each as Python writes it back (spacing and quotes do not
    hide one), at every depth: a function's or a loop's body counts line by line, and its
    header (`def f(a, b):`, `for t in range(T):`) as a line of its own."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return {line.strip() for line in code.splitlines() if line.strip()}
    out = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.stmt) or (isinstance(node, ast.Expr)
                                               and isinstance(node.value, ast.Constant)):
            continue
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
            out.add(ast.unparse(node).splitlines()[0])  # the header line alone
        else:
            out.add(ast.unparse(node))
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
    METADATA without the README (whose examples are answers). Same name and version (a student's
    `pip install` of it is the ordinary one), its RECORD made again for the new contents."""
    out.mkdir(parents=True, exist_ok=True)
    target = out / wheel.name
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
            dst.writestr(info, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            records.append(f"{name},sha256={digest.decode()},{len(data)}")
        if record_name is None:
            raise ValueError(f"{wheel.name} has no RECORD: not a wheel")
        records.append(f"{record_name},,")
        dst.writestr(record_name, "\n".join(records) + "\n")
    return target


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
