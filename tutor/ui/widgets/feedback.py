"""The feedback panel: the verdict of a check, hints taken and a revealed solution.

A result is the evaluator's plain dict (see tutor.sandbox.client); this module turns it into
something a learner can read at a glance, in the spirit of the notebook's `cmp` line.
"""

from __future__ import annotations

import re

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.containers import VerticalScroll
from textual.widgets import Static

from tutor.ui.highlight import python_text
from tutor.ui.widgets.heatmap import Heatmap

VERDICT_STYLES = {
    "exact": "bold #98c379",
    "approximate": "#56b6c2",
    "wrong": "bold #e06c75",
    "shape": "bold #d19a66",
    "missing": "#e06c75",
}
VERDICT_WORDS = {
    "exact": "exact",
    "approximate": "approx",
    "wrong": "wrong",
    "shape": "shape",
    "missing": "missing",
}
ERROR_TITLES = {
    "syntax": "Syntax error",
    "forbidden": "Not allowed here",
    "runtime": "Your code raised an error",
    "timeout": "Time limit reached",
    "memory": "Out of memory",
    "internal": "The checker had a problem",
}
GOOD, BAD, DIM = "bold #98c379", "bold #e06c75", "#7f8896"
UNSETTLED = "bold #e5c07b"  # right on its own, under a result that did not pass
ACCEPTED = ("exact", "approximate")
CODE_STYLE = "bold #dcdcaa"
MAX_PRINTED_LINES = 40


def prose(message: str, style: str = "") -> Text:
    """Pack-written text as one flowing paragraph: single line breaks become spaces (the
    terminal wraps), blank lines stay, and `code` spans are shown as code."""
    paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", message.strip())]
    text = Text(style=style)
    for i, paragraph in enumerate(paragraphs):
        if i:
            text.append("\n")
        for j, piece in enumerate(paragraph.split("`")):
            text.append(piece, style=CODE_STYLE if j % 2 else "")
    return text


def _flag(value: bool | None, settled: bool = True) -> Text:
    if value is None:
        return Text("–", style=DIM)
    if value and not settled:  # True, but under a result that did not pass: not a success
        return Text(str(value))
    return Text(str(value), style=GOOD if value else BAD)


def _maxdiff(value: float | None) -> str:
    if value is None:
        return "–"
    return "0.0" if value == 0 else f"{value:.2e}"


def _dims(shape) -> str:
    return "?" if shape is None else "[" + ", ".join(str(d) for d in shape) + "]"


def _verdict_word(check: dict, passed: bool) -> Text:
    verdict = check.get("verdict", "wrong")
    if verdict in ACCEPTED and not passed:
        # Right on its own, but the step did not pass (aliasing, a fresh batch, another row):
        # green here would contradict the "Not yet" above.
        return Text(f"{VERDICT_WORDS[verdict]} here, but see below", style=UNSETTLED)
    word = Text(VERDICT_WORDS.get(verdict, verdict), style=VERDICT_STYLES.get(verdict, ""))
    if verdict == "shape":
        word.append(f" {_dims(check.get('shape'))}≠{_dims(check.get('expected_shape'))}", style=DIM)
    return word


def checks_table(checks: list[dict], passed: bool = True) -> Table:
    """One row per graded tensor, like the notebook's cmp(name, dt, t)."""
    table = Table(box=None, pad_edge=False, padding=(0, 1), show_edge=False, expand=False)
    table.add_column("gradient", style="bold", no_wrap=True)
    table.add_column("exact", no_wrap=True)
    table.add_column("approx", no_wrap=True)
    table.add_column("maxdiff", justify="right", no_wrap=True)
    table.add_column("verdict", no_wrap=True)
    for check in checks:
        name = Text(check.get("grad") or f"d{check.get('tensor', '?')}")
        if check.get("partial"):
            name.append(" (1st branch)", style=DIM)
        table.add_row(
            name,
            _flag(check.get("exact"), passed),
            _flag(check.get("approximate"), passed),
            _maxdiff(check.get("maxdiff")),
            _verdict_word(check, passed),
        )
    return table


def _check_details(check: dict) -> list[RenderableType]:
    """The teaching part under the table: diagnosis first, then where the values differ."""
    parts: list[RenderableType] = []
    grad = check.get("grad") or f"d{check.get('tensor', '?')}"
    verdict = check.get("verdict")
    diagnosis = check.get("diagnosis")
    if diagnosis and diagnosis.get("kind") == "heldout":
        pass  # the row's message is the fresh batch's, said once on its own line below
    elif diagnosis and diagnosis.get("message"):
        parts.append(Text(f"{grad}: ", style="bold") + prose(diagnosis["message"], "#e5c07b"))
    elif verdict != "exact" and check.get("message"):
        # For "approximate" this says whether float32 rounding explains the difference.
        tone = DIM if verdict == "approximate" else ""
        parts.append(Text(f"{grad}: ", style="bold") + prose(check["message"], tone))
    heatmap = check.get("heatmap")
    if heatmap:
        parts.append(Text(f"where {grad} differs from autograd (|yours − autograd|, "
                          "brighter = further off):", style=DIM))
        parts.append(Heatmap(heatmap))
    return parts


def _figure(figure: dict) -> list[RenderableType]:
    title = figure.get("title") or "the gradient"
    parts: list[RenderableType] = [Text(
        f"{title}: one row per example, one column per character", style="bold")]
    parts.append(Heatmap(figure.get("values") or [], signed=True, max_rows=32))
    parts.append(Text.assemble(
        ("blue", "#61afef"), " pulls a logit up (the correct character), ",
        ("orange", "#d19a66"), " pushes it down (every other character)",
    ))
    sums = figure.get("row_sums_max_abs")
    if sums is not None:
        parts.append(Text(f"Each row sums to about zero: the largest |row sum| is {sums:.1e}.",
                          style=DIM))
    return parts


def error_text(error: dict) -> Text:
    title = ERROR_TITLES.get(error.get("kind", ""), "Error")
    where = ""
    message = error.get("message") or ""
    if error.get("line") and f"line {error['line']}" not in message:
        where = f" on line {error['line']}"
        if error.get("col"):
            where += f", column {error['col']}"
    text = Text(f"✗ {title}{where}", style=BAD)
    text.append("\n")
    text.append(message, style="#e5c07b")
    if error.get("line"):
        text.append("\nThe line is marked in the editor.", style=DIM)
    return text


def result_view(result: dict, unlocked: str | None) -> Group:
    """Everything one check produced, in reading order."""
    parts: list[RenderableType] = []
    error = result.get("error")
    checks = result.get("checks") or []
    if error:
        parts.append(error_text(error))
    elif result.get("passed"):
        exact = all(c.get("exact") for c in checks if not c.get("partial"))
        parts.append(Text(
            "✓ Correct: identical to autograd, bit for bit." if exact
            else "✓ Correct: equal to autograd within floating-point tolerance.",
            style=GOOD,
        ))
        if unlocked:
            parts.append(Text(f"Next line unlocked: {unlocked}. Press ^n to go on.",
                              style="#56b6c2"))
    else:
        parts.append(Text("✗ Not yet.", style=BAD))
    if checks:
        parts.append(checks_table(checks, bool(result.get("passed"))))
        for check in checks:
            parts.extend(_check_details(check))
    heldout = result.get("heldout")
    if heldout:
        n = heldout.get("batch_size")
        if heldout.get("passed"):
            parts.append(Text(f"✓ Also correct on a fresh batch of {n}.", style="#56b6c2"))
        else:
            parts.append(Text(f"✗ Fresh batch of {n}: ", style="bold #d19a66") + prose(
                heldout.get("message") or "the answer does not hold there.", "#d19a66"))
    for note in result.get("notes") or []:
        parts.append(Text("· ", style=DIM) + prose(note, DIM))
    if result.get("figure"):
        parts.extend(_figure(result["figure"]))
    printed = (result.get("stdout") or "").rstrip("\n")
    if printed:
        lines = printed.split("\n")
        if len(lines) > MAX_PRINTED_LINES:
            lines = [f"… {len(lines) - MAX_PRINTED_LINES} earlier lines"] + lines[
                -MAX_PRINTED_LINES:
            ]
        parts.append(Text("printed:", style=DIM))
        parts.append(Text("\n".join(lines), style="#abb2bf"))
    return Group(*parts)


class Feedback(VerticalScroll, can_focus=True):
    """Scrollable panel: status line, last result, hints, revealed solution."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.border_title = "Feedback"
        self._solution: str | None = None

    def rehighlight(self) -> None:
        """Redraw the code shown here once highlighting is available."""
        if self._solution:
            self.show_solution(self._solution)

    def compose(self):
        yield Static(id="feedback-status")
        yield Static(id="feedback-result")
        yield Static(id="feedback-hints")
        yield Static(id="feedback-solution")

    def _part(self, name: str) -> Static:
        return self.query_one(f"#feedback-{name}", Static)

    def show_status(self, message: str | Text) -> None:
        self._part("status").update(message)
        self._part("status").display = bool(str(message))

    def show_result(self, result: dict | None, unlocked: str | None = None) -> None:
        part = self._part("result")
        part.update(result_view(result, unlocked) if result else "")
        part.display = bool(result)
        self.scroll_home(animate=False)

    def show_hints(self, hints: list[str], total: int) -> None:
        shown = len(hints)
        # The count sits in the title: the panel has no bottom border for a subtitle.
        self.border_title = f"Feedback · hints used {shown}/{total}" if shown else "Feedback"
        body: list[RenderableType] = []
        if hints:
            from rich.markdown import Markdown  # slow to import: not before the first hint
        for number, hint in enumerate(hints, 1):
            body.append(Text(f"Hint {number} of {total}", style="bold #e5c07b"))
            body.append(Markdown(hint))
        part = self._part("hints")
        part.update(Group(*body))
        part.display = bool(hints)

    def show_solution(self, code: str | None) -> None:
        self._solution = code
        part = self._part("solution")
        if code:
            part.update(Group(
                Text("Reference solution (this step now counts as revealed):",
                     style="bold #c678dd"),
                python_text(code.rstrip("\n")),
            ))
        part.display = bool(code)

    def scroll_to_part(self, name: str) -> None:
        self.call_after_refresh(self.scroll_to_widget, self._part(name), animate=False, top=True)
