"""Pack-written text (diagnoses, notes, messages) as rich Text, with its inline Markdown.

Messages sit inline after a label ("dh: ..."), which a Markdown block renderer cannot do, and
they are short; so this renders the inline part of Markdown the packs use: `code`, *emphasis*
and **strong**. An asterisk that is arithmetic (`a * b`, `n*(n-1)`) stays an asterisk.
"""

from __future__ import annotations

import re

from rich.text import Text

from tutor.ui.palette import CODE

# CommonMark's rule, simplified: an opening run is not followed by a space and not preceded by
# a letter or digit; a closing run is not preceded by a space and not followed by one.
_EMPHASIS = re.compile(
    r"(?<![\w*])(?P<mark>\*\*|\*)(?=[^\s*])(?P<body>.+?)(?<=[^\s*])(?P=mark)(?![\w*])"
)


def _inline(piece: str, text: Text) -> None:
    at = 0
    for match in _EMPHASIS.finditer(piece):
        text.append(piece[at:match.start()])
        style = "bold" if match.group("mark") == "**" else "italic"
        text.append(match.group("body"), style=style)
        at = match.end()
    text.append(piece[at:])


def prose(message: str, style: str = "") -> Text:
    """One flowing paragraph per paragraph of the source: single line breaks become spaces (the
    terminal wraps), blank lines stay, `code` is shown as code and *emphasis* as emphasis."""
    paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", message.strip())]
    text = Text()
    for i, paragraph in enumerate(paragraphs):
        if i:
            text.append("\n")
        for j, piece in enumerate(paragraph.split("`")):
            if j % 2:
                text.append(piece, style=CODE)
            else:
                _inline(piece, text)
    # A span under the others rather than the text's own style: widgets that turn Rich text
    # into Textual content drop a style name given that way (see palette.resolved).
    if style:
        text.stylize_before(style)
    return text
