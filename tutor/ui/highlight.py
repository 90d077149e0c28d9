"""Python syntax highlighting with pygments, for the editor and for read-only code.

One token vocabulary serves both: pygments token families are mapped to the style names
TextArea themes use ("keyword", "string", ...), and read-only code gets colours for the
same names, so the forward pass and the editor look alike.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache

from rich.style import Style
from rich.text import Text

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

# Colours for read-only code (close to the editor's dark theme).
CODE_STYLES: dict[str, Style] = {
    "comment": Style(color="#6a9955", italic=True),
    "string": Style(color="#ce9178"),
    "number": Style(color="#b5cea8"),
    "boolean": Style(color="#569cd6"),
    "keyword": Style(color="#c586c0"),
    "keyword.operator": Style(color="#c586c0"),
    "operator": Style(color="#d4d4d4"),
    "function.call": Style(color="#dcdcaa"),
    "function": Style(color="#dcdcaa"),
    "class": Style(color="#4ec9b0"),
}


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
    """Highlighted rich Text for a snippet of Python (no background colour)."""
    text = Text(code)
    offsets = [0]
    for line in code.split("\n"):
        offsets.append(offsets[-1] + len(line) + 1)
    for row, start, end, name in spans(code):
        style = CODE_STYLES.get(name)
        if style is not None:
            text.stylize(style, offsets[row] + start, offsets[row] + end)
    return text
