"""Python syntax highlighting with pygments, for the editor and for read-only code.

One token vocabulary serves both: pygments token families are mapped to the style names
TextArea themes use ("keyword", "string", ...), and read-only code gets styles for the same
names, so the forward pass and the editor look alike. Each name's colour is the palette's
(`tutor.ui.palette.code_style`), so the app's theme's.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache

from rich.text import Text

from tutor.ui.palette import code_style

# Pygments token families, most specific first, and the style name each one gets.
TOKEN_NAMES: tuple[tuple[str, str], ...] = (
    ("Token.Comment", "comment"),
    ("Token.Literal.String", "string"),
    ("Token.Literal.Number", "number"),
    ("Token.Keyword.Constant", "boolean"),
    ("Token.Keyword", "keyword"),
    ("Token.Operator.Word", "keyword.operator"),
    ("Token.Operator", "operator"),
    ("Token.Name.Builtin", "function.call"),
    ("Token.Name.Function", "function"),
    ("Token.Name.Class", "class"),
)

_warm = False  # building the lexer costs ~80 ms; the first frame is painted without it


@cache
def _lexer():
    from pygments.lexers.python import PythonLexer

    return PythonLexer(stripnl=False, ensurenl=False)


def warm_up() -> None:
    """Build the lexer; from now on code is highlighted. Call after the first frame."""
    global _warm
    _lexer()
    _warm = True


def is_warm() -> bool:
    return _warm


def token_name(token: object) -> str | None:
    text = str(token)
    for family, name in TOKEN_NAMES:
        if text.startswith(family):
            return name
    return None


def spans(text: str) -> Iterator[tuple[int, int, int, str]]:
    """Yield (row, start, end, style name) for the highlighted tokens of `text`.

    Columns are character offsets within the row; tokens spanning lines are split.
    """
    if not _warm:
        return
    lines = text.split("\n")
    row, line_start = 0, 0
    for index, token, value in _lexer().get_tokens_unprocessed(text):
        # The newline that ends a row still belongs to it, hence `>`.
        while row + 1 < len(lines) and index > line_start + len(lines[row]):
            line_start += len(lines[row]) + 1
            row += 1
        name = token_name(token)
        if name is None:
            continue
        for offset, part in enumerate(value.split("\n")):
            if not part or row + offset >= len(lines):
                continue
            start = index - line_start if offset == 0 else 0
            yield row + offset, start, start + len(part), name


def python_text(code: str) -> Text:
    """Highlighted rich Text for a snippet of Python (no background colour): its styles are the
    palette's roles for each token, so the app's theme colours them."""
    text = Text(code)
    offsets = [0]
    for line in code.split("\n"):
        offsets.append(offsets[-1] + len(line) + 1)
    for row, start, end, name in spans(code):
        text.stylize(code_style(name), offsets[row] + start, offsets[row] + end)
    return text
