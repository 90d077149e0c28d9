"""Percent-format files: `# %% STEP_ID` starts a cell, as editors with notebook cells understand.

Text before the first cell, and cells whose header names no step (`# %%` alone, or
`# %% [markdown]`), are kept as context and never checked.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tutor.values.records import FrozenRecord

_HEADER = re.compile(r"^# %%(?P<rest>.*)$")


@dataclass(repr=False, eq=False)
class Cell(FrozenRecord):
    step: str  # as written in the header; resolved against the pack by the caller
    code: str
    line: int  # 1-based line of the header in the file
    code_line: int  # 1-based line in the file of the code's first line (blank lines are dropped)


def parse_cells(text: str) -> list[Cell]:
    cells: list[Cell] = []
    current: tuple[str, int] | None = None
    body: list[str] = []

    def close() -> None:
        if current is not None:
            # The code is stripped of blank lines around it, so count those at its start.
            blank = next((i for i, line in enumerate(body) if line), len(body))
            cells.append(Cell(current[0], "\n".join(body).strip("\n") + "\n", current[1],
                              current[1] + 1 + blank))

    for number, line in enumerate(text.splitlines(), start=1):
        match = _HEADER.match(line)
        if match:
            close()
            words = match["rest"].strip().split()
            step = words[0] if words and not words[0].startswith("[") else ""
            current = (step, number) if step else None
            body = []
        else:
            body.append(line)
    close()
    return cells
