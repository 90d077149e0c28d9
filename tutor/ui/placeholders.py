"""The `...` blanks of a step's template, and typing a whole line over one.

A template line reads `dprobs = ...` with the `...` selected, so typing the right-hand side
replaces it. Many learners type the whole line instead; that would leave
`dprobs = dprobs = ...`, so a line that assigns the same name twice keeps the learner's
assignment.
"""

from __future__ import annotations

import io
import re
import tokenize

PLACEHOLDER = "..."

# `dcounts += dcounts = x` -> `dcounts = x`: the first assignment is the template's, the second
# the learner's own. The learner's operator must be followed by something other than `=`, so
# `x = x == y` (a comparison) is left alone.
_TWICE = re.compile(
    r"^(?P<indent>\s*)(?P<name>[A-Za-z_]\w*)\s*[-+*/@]?=\s*"
    r"(?P<own>(?P=name)\s*[-+*/@]?=(?=[^=]))"
)


def placeholders(text: str) -> list[tuple[int, int]]:
    """(row, column) of every `...` in code (comments are skipped), in reading order."""
    found = []
    for row, line in enumerate(text.split("\n")):
        code = line.split("#", 1)[0]
        start = code.find(PLACEHOLDER)
        while start >= 0:
            found.append((row, start))
            start = code.find(PLACEHOLDER, start + len(PLACEHOLDER))
    return found


def next_placeholder(text: str, after: tuple[int, int]) -> tuple[int, int] | None:
    """The first `...` that starts at or after `after`, wrapping round to the first one."""
    spots = placeholders(text)
    for spot in spots:
        if spot >= after:
            return spot
    return spots[0] if spots else None


def merge_typed_assignment(line: str) -> tuple[str, int] | None:
    """The line with a doubled assignment resolved, and how many columns were removed before
    the learner's part; None when the line is fine as it is."""
    match = _TWICE.match(line)
    if match is None:
        return None
    indent, own = match.group("indent"), match.start("own")
    return indent + line[own:], own - len(indent)


def code_end(line: str) -> int:
    """The column where a line's code ends: before its trailing comment and the spaces ahead of
    it, or the line's end when it has no comment (or is a comment, or not whole Python)."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(line).readline))
    except (tokenize.TokenError, SyntaxError):
        return len(line)
    comment = next((t for t in tokens if t.type == tokenize.COMMENT), None)
    if comment is None or not line[:comment.start[1]].strip():
        return len(line)
    return len(line[:comment.start[1]].rstrip())
