"""A slip written for one step, carried to every step that does the same thing.

A catalogued mistake is the step's solution with a few tokens changed: a `.flip(2)` dropped, a
padding's sides swapped, a `dilation=4` where the layer's is 2. Another step whose solution is
the same code up to its names and numbers (the next layer's convolution, the other tanh) admits
the same slip. `transplant` lines the two solutions up token by token, reads off which name and
number of one stands for which of the other, and makes the same change at the same place of the
other solution, with the names and numbers carried across.

Only tokens are compared, never meanings: two solutions line up when, with every name and
number blanked out, they are the same sequence, except where one has a part the other lacks
(`dilation=2` on one layer only); a change inside such a part cannot be carried and gives None.
"""

from __future__ import annotations

import io
import tokenize
from difflib import SequenceMatcher

# The share of tokens two solutions must have in common, names and numbers blanked out, to be
# the same code: a layer's `dilation=2` that the first layer lacks is a few tokens of forty.
SAME_SHAPE = 0.85
_AMBIGUOUS = "\0"  # a number that stands for two numbers of the other solution
_SKIP = {tokenize.NL, tokenize.COMMENT, tokenize.ENCODING, tokenize.ENDMARKER}


def _tokens(code: str) -> list[tokenize.TokenInfo] | None:
    try:
        return [t for t in tokenize.generate_tokens(io.StringIO(code.strip() + "\n").readline)
                if t.type not in _SKIP]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None


def _kind(t: tokenize.TokenInfo) -> str:
    """A token with its name or number blanked out; keywords and torch's names kept."""
    if t.type == tokenize.NUMBER:
        return "#"
    if t.type == tokenize.NAME and not _fixed(t.string):
        return "N"
    return t.string


def _fixed(name: str) -> bool:
    import keyword

    return keyword.iskeyword(name) or name in {"torch", "F", "math", "range", "len", "sum"}


def _lined_up(a: list[tokenize.TokenInfo], b: list[tokenize.TokenInfo]
              ) -> tuple[dict[int, int], dict[str, str]] | None:
    """Where each token of `a` is in `b` (by blanked-out kind), and which name or number of
    `a` stands for which of `b`; None when one stands for two (not the same code)."""
    where: dict[int, int] = {}
    names: dict[str, str] = {}
    aligned = SequenceMatcher(None, [_kind(t) for t in a], [_kind(t) for t in b], autojunk=False)
    blocks = aligned.get_matching_blocks()
    if sum(size for *_, size in blocks) < SAME_SHAPE * max(len(a), len(b)):
        return None  # another computation, not the same one on other tensors
    for i, j, size in blocks:
        for k in range(size):
            where[i + k] = j + k
            ta, tb = a[i + k], b[j + k]
            if ta.type not in (tokenize.NAME, tokenize.NUMBER):
                continue
            if names.setdefault(ta.string, tb.string) not in (tb.string, _AMBIGUOUS):
                if ta.type == tokenize.NAME:
                    return None  # one name stands for two: not the same code
                names[ta.string] = _AMBIGUOUS  # a number can mean two things: keep it as is
    return (where, names) if where else None


def counterpart(source_solution: str, target_solution: str, name: str,
                lines: tuple[str, str] = ("", "")) -> str:
    """What `name` of one step is called in the other (itself where they agree): read off the
    solutions lined up, else off the forward lines lined up."""
    found = _names(source_solution, target_solution, lines)
    return found.get(name, name) if found is not None else name


def _names(source_solution: str, target_solution: str, lines: tuple[str, str]
           ) -> dict[str, str] | None:
    a, b = _tokens(source_solution), _tokens(target_solution)
    lined = _lined_up(a, b) if a and b else None
    if lined is None:
        return None
    names = dict(lined[1])
    la, lb = _tokens(lines[0]), _tokens(lines[1])
    forward = _lined_up(la, lb) if la and lb else None
    for k, v in (forward[1] if forward else {}).items():
        names.setdefault(k, v)
    return {k: v for k, v in names.items() if v is not _AMBIGUOUS}


def transplant(source_solution: str, mistake: str, target_solution: str,
               lines: tuple[str, str] = ("", "")) -> str | None:
    """`mistake` (a changed `source_solution`) made on `target_solution` instead, or None when
    the changed places do not line up with anything there. `lines` are the two steps' forward
    lines: a name the mistake brings in that neither solution reads (`ln1` for `ln1_norm`)
    is carried across as the forward lines line up."""
    a, m, b = _tokens(source_solution), _tokens(mistake), _tokens(target_solution)
    lined = _lined_up(a, b) if a and m and b else None
    if lined is None:
        return None
    where = lined[0]
    names = _names(source_solution, target_solution, lines) or {}
    out = [t.string for t in b]
    edits: list[tuple[int, int, list[str]]] = []
    for tag, i1, i2, j1, j2 in SequenceMatcher(None, [t.string for t in a],
                                               [t.string for t in m],
                                               autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        if tag == "insert":
            if i1 - 1 not in where and i1 not in where:
                return None
            start = where[i1 - 1] + 1 if i1 - 1 in where else where[i1]
            end = start
        else:
            if any(i not in where for i in range(i1, i2)):
                return None
            start, end = where[i1], where[i2 - 1] + 1
            if end - start != i2 - i1:
                return None
        # A token the change only moves (a padding's sides swapped) stands for what is at its
        # old place there; a token it brings in, for what the two solutions say it stands for.
        here = {a[i].string: out[where[i]] for i in range(i1, i2) if i in where}
        edits.append((start, end, [here.get(t.string, names.get(t.string, t.string))
                                   for t in m[j1:j2]]))
    for start, end, new in sorted(edits, reverse=True):
        out[start:end] = new
    spliced = _untokenize(out, b, edits)
    return spliced if spliced.strip() != target_solution.strip() else None


def _untokenize(strings: list[str], template: list[tokenize.TokenInfo],
                edits: list[tuple[int, int, list[str]]]) -> str:
    """The token strings as code, one statement per line, indented as the target's tokens
    say (a change never adds a line or an indent), then written out the standard way."""
    import ast

    types = [t.type for t in template]
    for start, end, new in sorted(edits, reverse=True):
        types[start:end] = [tokenize.OP] * len(new)
    lines: list[str] = []
    current: list[str] = []
    depth = 0
    for s, kind in zip(strings, types, strict=True):
        if kind == tokenize.INDENT:
            depth += 1
        elif kind == tokenize.DEDENT:
            depth -= 1
        elif kind == tokenize.NEWLINE:
            lines.append("    " * depth + " ".join(current))
            current = []
        else:
            current.append(s)
    if current:
        lines.append("    " * depth + " ".join(current))
    code = "\n".join(lines) + "\n"
    try:
        return ast.unparse(ast.parse(code)) + "\n"
    except SyntaxError:
        return code


def carried_message(message: str, source_solution: str, target_solution: str,
                    lines: tuple[str, str] = ("", "")) -> str | None:
    """A catalogued message said of the other step: each name of the source step replaced by
    its counterpart. None where the message speaks of a number the other step has otherwise
    (`4 positions` on a layer whose taps are 2 apart): said there, it would be false."""
    import re

    names = _names(source_solution, target_solution, lines) or {}
    for number in re.findall(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.])", message):
        if names.get(number, number) != number:
            return None
    words = {k: v for k, v in names.items() if k.isidentifier() and k != v}
    if not words:
        return message
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, sorted(words, key=len, reverse=True)))
                         + r")\b")
    return pattern.sub(lambda m: words[m.group(1)], message)
