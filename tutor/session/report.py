"""Check results as text for a terminal: the notebook's cmp line, then what it means."""

from __future__ import annotations

import re
import shutil
import textwrap
from collections.abc import Collection

from tutor.pack.curriculum import tally
from tutor.values.durations import compact
from tutor.values.results import CheckResult, Rule, Status, TensorCheck

UNSETTLED_MARK = "!"  # right on its own, but the result did not pass: the lines below say why

DEFAULT_WIDTH = 100  # a pipe or a file has no width; this is the pack files' own
MIN_WIDTH = 40  # narrower than this, a wrapped sentence is a column of single words

_LIST_ITEM = re.compile(r"\s*(?:[-*+]|\d+[.)])\s+")
_FENCE = re.compile(r"\s*(?:```|~~~)")


def terminal_width() -> int:
    """Columns to wrap messages to: the terminal's (or $COLUMNS), else DEFAULT_WIDTH."""
    return max(MIN_WIDTH, shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns)


def wrap(text: str, first: str, rest: str | None = None, width: int | None = None) -> list[str]:
    """`text` as lines of at most `width` columns: the first starts with `first`, every other
    one with `rest` (by default `first` and two more spaces), so no continuation of a message
    ever starts at column 0. Each line of `text` is a paragraph or list item of its own, as
    `packs.unwrap` leaves them; code lines (fenced, or indented by four) are not rewrapped."""
    width = width or terminal_width()
    rest = " " * (len(first) + 2) if rest is None else rest
    lines: list[str] = []
    prefix, in_fence = first, False
    for line in text.strip("\n").splitlines():
        if _FENCE.match(line):
            in_fence = not in_fence
        if not line.strip():
            lines.append("")
            continue
        if in_fence or _FENCE.match(line) or line.startswith("    "):
            lines.append(prefix + line.rstrip())
        else:
            lines += _wrap_line(line.strip(), prefix, rest, width)
        prefix = rest
    return lines


def shortened(text: str, limit: int) -> str:
    """`text` whole when it fits in `limit` characters; else cut after the last sentence that
    fits (else at the last clause's end, else between words), never inside a code span, and
    marked " …": a message cut mid-sentence reads as if it said something else."""
    if len(text) <= limit:
        return text
    if limit < 3:
        return "…"
    room = text[: limit - 2]
    for ends, keep in (((". ", "? ", "! ", ".\n"), 1), (("; ", ": ", ", ", " — "), 0)):
        cut = max(room.rfind(end) for end in ends)
        if cut >= limit // 2 and room[:cut].count("`") % 2 == 0:
            return room[: cut + keep].rstrip() + " …"
    cut = room.rfind(" ")
    kept = room[:cut] if cut > 0 else room
    if kept.count("`") % 2:
        kept = kept[: kept.rfind("`")]
    return kept.rstrip() + " …"


_CODE_SPAN = re.compile(r"`[^`\n]+`")
_KEPT_SPACE = "\ue000"  # stands for a space inside a code span while the line is wrapped


def _wrap_line(line: str, prefix: str, rest: str, width: int) -> list[str]:
    # A list item's own continuation lines hang under its text, not under its marker.
    item = _LIST_ITEM.match(line)
    hang = rest + " " * (item.end() if item else 0)
    # Code in backticks moves to the next line whole (`s - 1` is never cut after its minus)
    # where it fits on one; only a span wider than a whole line breaks, at its spaces. Nor
    # does anything break inside a word: `x**-1` is not split at its minus sign.
    room = width - max(len(prefix), len(hang))

    def keep(span: re.Match) -> str:
        code = span.group()
        return code.replace(" ", _KEPT_SPACE) if len(code) <= room else code

    lines = textwrap.wrap(_CODE_SPAN.sub(keep, line), width, initial_indent=prefix,
                          subsequent_indent=hang, break_long_words=False,
                          break_on_hyphens=False) or [prefix.rstrip()]
    return [text.replace(_KEPT_SPACE, " ") for text in lines]


def cmp_line(check: TensorCheck, width: int = 15, tag: str | None = None) -> str:
    maxdiff = check.maxdiff
    diff = "—" if maxdiff is None else f"{maxdiff:.3g}" if maxdiff else "0.0"
    return (
        f"{row_label(check, tag):<{width}} | exact: {str(check.exact):<5} | "
        f"approximate: {str(check.approximate):<5} | maxdiff: {diff}"
    )


def row_label(check: TensorCheck, tag: str | None = None) -> str:
    """The tensor's name, plus what tells this row apart from another row of the same tensor:
    "partial" for a first branch, `tag` (a step id) for a later step that grades it again."""
    notes = [n for n in ("partial" if check.partial else None, tag) if n]
    return check.tensor + (f" ({', '.join(notes)})" if notes else "")


def row_mark(check: TensorCheck, passed: bool) -> str:
    """A row's mark. Under a result that did not pass, a row that is right on its own gets "!"
    rather than ✓: a tick above "NOT PASSED" reads as a contradiction."""
    if check.right and not passed:
        return UNSETTLED_MARK
    return check.mark


def explained_below(check: TensorCheck, checks: Collection[TensorCheck]) -> bool:
    """Whether the lines under a result that did not pass concern this row, which is right on
    its own: it has a diagnosis of its own (aliasing, a fresh batch), or no other row failed,
    so what failed is the whole answer. When another row is what failed, "see below" would
    send the learner to text about another tensor."""
    if check.diagnosis:
        return True
    return not any(c is not check and not c.accepted for c in checks)


def row_detail(check: TensorCheck, passed: bool, checks: Collection[TensorCheck] = ()
               ) -> str | None:
    """The line under a row, if it needs one: what is wrong, or where to look. `checks` are
    all the result's rows."""
    diagnosis = check.diagnosis
    # A held-out failure is printed once, as the fresh batch's own line, not again here.
    if diagnosis and diagnosis.kind != "heldout":
        return f"[{diagnosis.kind}] {check.message}"
    if not check.right:
        return f"[{check.verdict}] {check.message}"
    if not passed:
        return f"{check.verdict} here, but see below" if explained_below(check, checks) \
            else None
    if check.skipped_rule:
        return f"[rule skipped] {check.note or ''}".rstrip()
    if check.note:  # accepted, with something worth knowing (a shape that broadcasts)
        return f"note: {check.note}"
    return None


def _label_width(labels: list[str]) -> int:
    return max([15] + [len(label) for label in labels])


def format_result(result: CheckResult, position: str | None = None, width: int | None = None
                  ) -> str:
    """One check as text. `position` (e.g. "exercise 1, step 2 of 23") follows the step id."""
    width = width or terminal_width()
    # Which device ran it: a learner on a GPU learns that the tutor chose it for them.
    lines = [result.step + (f" ({position})" if position else "")
             + (f" · on {result.device}" if result.device else "")]
    error = result.error
    if error:
        lines += wrap(f"{error.kind} error: {error.message}", "  ✗ ", "    ", width)
    column = _label_width([row_label(c) for c in result.checks])
    lines += _check_rows(result, column, width, "  ")
    heldout = result.heldout
    if heldout:
        mark = "✓" if heldout.passed else "✗"
        what = heldout.what or f"fresh batch of {heldout.batch_size}"
        text = what + (f": {heldout.message}" if heldout.message else "")
        lines += wrap(text, f"  {mark} ", "    ", width)
    for note in result.notes:
        lines += wrap(note, "  note: ", "        ", width)
    lines += picture_lines(result.figure, width)
    if result.stdout:
        lines.append("  your print output:")
        lines += [f"    {line}" for line in result.stdout.rstrip("\n").splitlines()]
    lines.append(f"  {verdict_line(result)}")
    return "\n".join(lines)


def steps_text(steps: list[int], most: int = 8) -> str:
    """Time steps as `t = ...`, runs of neighbours as ranges: `t = 0 to 7, 9`."""
    runs: list[list[int]] = []
    for t in sorted(steps):
        if runs and t == runs[-1][-1] + 1:
            runs[-1].append(t)
        else:
            runs.append([t])
    parts = [f"{r[0]} to {r[-1]}" if len(r) > 2 else ", ".join(map(str, r)) for r in runs]
    return "t = " + ", ".join(parts[:most]) + (", ..." if len(parts) > most else "")


def ends_text(panel: dict, digits: int) -> str:
    """A picture panel's size at its first and its last time step, yours (autograd's); "" for
    a panel with no steps."""
    yours, theirs = panel.get("yours") or [], panel.get("autograd") or []
    return "   ".join(
        f"t = {t}: {'—' if yours[t] is None else f'{yours[t]:.{digits}e}'} "
        f"({theirs[t]:.{digits}e})" for t in ((0, len(theirs) - 1) if theirs else ()))


def picture_lines(figure: dict | None, width: int | None = None) -> list[str]:
    """A step's picture through time in words (the TUI and the notebook draw it): per panel, the
    size at the first and the last time step, yours beside autograd's, and where they differ."""
    panels = [p for p in (figure or {}).get("panels") or [] if isinstance(p, dict)]
    if not panels:
        return []
    title = panels[0].get("title") or "the carried gradient"
    lines = wrap(f"|{title}| at the first and the last time step, yours (autograd's); the TUI "
                 "and the notebook draw every step:", "  ", "  ", width or terminal_width())
    label = max(len(str(p.get("case") or "")) for p in panels)
    for panel in panels:
        ends = ends_text(panel, 1)
        if not ends:
            continue
        wrong = [t for t, w in enumerate(panel.get("wrong") or []) if w]
        tail = f"   differs at {steps_text(wrong, 4)}" if wrong else ""
        lines.append(f"    {str(panel.get('case') or ''):<{label}}  {ends}{tail}")
    return lines


def verdict_line(result: CheckResult) -> str:
    """The closing word of a check: PASSED, PASSED with the rule skipped, or NOT PASSED."""
    if not result.passed:
        return "NOT PASSED"
    if result.rule is Rule.SKIPPED:
        return ("PASSED, without the line's rule (↷): right for this network, see the "
                "[rule skipped] lines")
    return "PASSED"


def format_table(results: list[CheckResult], tagged: Collection[str] = (),
                 source: str | None = None, width: int | None = None) -> str:
    """One row per checked tensor of every cell, in the style of the notebook's cmp calls.

    Rows of the steps in `tagged` carry their step id (see `row_label`); `source` names the
    file, so that the closing line can say where the cells that did not pass are."""
    width = width or terminal_width()
    rows = []

    def tag(result: CheckResult) -> str | None:
        return result.step if result.step in tagged else None

    column = _label_width([row_label(c, tag(r)) for r in results for c in r.checks])
    for result in results:
        if result.error or not result.checks:
            message = result.error.message if result.error else "nothing to check"
            rows += wrap(f"{result.step}: {message}", "✗ ", "    ", width)
            continue
        rows += _check_rows(result, column, width, "", tag(result))
        heldout = result.heldout
        if heldout and not heldout.passed:
            rows += wrap(heldout.message or "", "      ", "        ", width)
    rows += wrap(_summary(results, source), "", "  ", width)
    return "\n".join(rows)


def _check_rows(result: CheckResult, column: int, width: int, indent: str,
                tag: str | None = None) -> list[str]:
    """A result's cmp rows, each with the line under it that says what is wrong, if any."""
    rows = []
    for check in result.checks:
        rows.append(f"{indent}{row_mark(check, result.passed)} {cmp_line(check, column, tag)}")
        detail = row_detail(check, result.passed, result.checks)
        if detail:
            rows += wrap(detail, "      ", "        ", width)
    return rows


def _summary(results: list[CheckResult], source: str | None) -> str:
    """"N of M cells passed", and where the cells that did not pass are in the file."""
    passed = sum(r.passed for r in results)
    failing = [_cell_name(r, source) for r in results if not r.passed]
    skipped = [_cell_name(r, source) for r in results if r.rule is Rule.SKIPPED]
    where = f"; not passed: {', '.join(failing)}" if failing else ""
    rule = f"; passed without the line's rule (↷): {', '.join(skipped)}" if skipped else ""
    return f"{passed} of {len(results)} cells passed{rule}{where}"


def _cell_name(result: CheckResult, source: str | None) -> str:
    line = result.extra.get("cell_line")
    if line is None:
        return result.step
    return f"{result.step} ({source + ', ' if source else ''}line {line})"

def progress_table(rows: list[dict]) -> str:
    """One line per step and a closing total, as `backprop-tutor progress` prints it."""
    # Numbered as `list`, `show` and `check` number the steps, so "step 2" is one step everywhere.
    lines = [f"{'':2} {'#':>3} {'step':<24} {'status':<9} {'attempts':>8} {'hints':>5} "
             f"{'best maxdiff':>13} {'time':>7}"]
    for number, r in enumerate(rows, start=1):
        lines.append(f"{Status(r['status']).mark:<2} {number:>2}. {r['id']:<24} "
                     f"{r['status']:<9} {r['attempts']:>8} {r['hints']:>5} "
                     f"{best_maxdiff(r):>13} {compact(r['seconds']):>7}")
    lines.append("\n" + summary_line(rows))
    return "\n".join(lines)


def summary_line(rows: list[dict]) -> str:
    """"8 of 22 steps done (6 exact, 2 passed), 31 attempts, 4 hints, 12m05"."""
    total = tally(rows)
    return (f"{total.sentence()}, {_counted(total.attempts, 'attempt')}, "
            f"{_counted(total.hints, 'hint')}, {compact(total.seconds)}")


def _counted(n: int, word: str) -> str:
    """"1 hint", "4 hints": the total line is read as a sentence."""
    return f"{n} {word}{'' if n == 1 else 's'}"


def best_maxdiff(row: dict) -> str:
    return "—" if row["best_maxdiff"] is None else f"{row['best_maxdiff']:.2g}"
