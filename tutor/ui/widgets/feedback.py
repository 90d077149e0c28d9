"""The feedback panel: the verdict of a check, hints taken and a revealed solution.

A result is the evaluator's typed `CheckResult` (tutor/values/results.py); this module turns it into
something a learner can read at a glance, in the spirit of the notebook's `cmp` line.
"""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.containers import VerticalScroll
from textual.widgets import Static

from tutor.pack.flow import gradient
from tutor.session.report import explained_below
from tutor.ui.highlight import python_text
from tutor.ui.palette import (
    ALERT,
    BAD,
    DIM,
    ERROR,
    GOOD,
    HEAT_NEGATIVE,
    HEAT_POSITIVE,
    INFO,
    INFO_STRONG,
    REVEAL,
    REVEAL_STRONG,
    TEXT,
    WARN,
)
from tutor.ui.prose import prose
from tutor.ui.widgets.heatmap import Heatmap
from tutor.ui.widgets.timebars import TimeBars
from tutor.values.results import (
    CheckError,
    CheckResult,
    Rule,
    ScratchResult,
    Status,
    TensorCheck,
    Verdict,
)

VERDICT_STYLES = {
    "exact": GOOD,
    "approximate": INFO,
    "wrong": BAD,
    "shape": ALERT,
    "missing": ERROR,
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
UNSETTLED = ALERT  # right on its own, under a result that did not pass
MAX_PRINTED_LINES = 40
# The engine's sentence for an answer that is right up to float32 rounding. It is the same for
# every gradient, so the panel says it once per check instead of once per row.
ROUNDING_PREFIX = "correct: it differs from autograd only by float32 rounding"


def _flag(value: bool | None, settled: bool = True) -> Text:
    if value is None:
        return Text.styled("–", DIM)
    if value and not settled:  # True, but under a result that did not pass: not a success
        return Text(str(value))
    return Text.styled(str(value), GOOD if value else BAD)


def _maxdiff(value: float | None) -> str:
    if value is None:
        return "–"
    return "0.0" if value == 0 else f"{value:.2e}"


def _dims(shape) -> str:
    return "?" if shape is None else "[" + ", ".join(str(d) for d in shape) + "]"


def _verdict_word(check: TensorCheck, passed: bool, checks: list[TensorCheck]) -> Text:
    verdict = check.verdict.value
    if check.right and not passed:
        # Right on its own, but the step did not pass (aliasing, a fresh batch, another row):
        # green here would contradict the "Not yet" above.
        if not explained_below(check, checks):
            return Text(VERDICT_WORDS[verdict])  # another row is what failed
        return Text.styled(f"{VERDICT_WORDS[verdict]} here, but see below", UNSETTLED)
    word = Text.styled(VERDICT_WORDS.get(verdict, verdict), VERDICT_STYLES.get(verdict, ""))
    if check.skipped_rule:
        word.append(f" {check.mark} rule skipped", style=WARN)
    if check.verdict is Verdict.SHAPE:
        word.append(f" {_dims(check.shape)}≠{_dims(check.expected_shape)}", style=DIM)
    return word


def checks_table(checks: list[TensorCheck], passed: bool = True) -> Table:
    """One row per graded tensor, like the notebook's cmp(name, dt, t)."""
    table = Table(box=None, pad_edge=False, padding=(0, 1), show_edge=False, expand=False)
    table.add_column("gradient", style="bold", no_wrap=True)
    table.add_column("exact", no_wrap=True)
    table.add_column("approx", no_wrap=True)
    table.add_column("maxdiff", justify="right", no_wrap=True)
    table.add_column("verdict", no_wrap=True)
    for check in checks:
        name = Text(_grad(check))
        if check.partial:
            name.append(" (1st branch)", style=DIM)
        table.add_row(
            name,
            _flag(check.exact, passed),
            _flag(check.approximate, passed),
            _maxdiff(check.maxdiff),
            _verdict_word(check, passed, checks),
        )
    return table


def _grad(check: TensorCheck) -> str:
    return check.grad or gradient(check.tensor or '?')


def _only_rounding(check: TensorCheck) -> bool:
    """An accepted row whose message is the standard float32-rounding sentence."""
    return (check.verdict is Verdict.APPROXIMATE and not check.diagnosis
            and check.message.startswith(ROUNDING_PREFIX))


def _rounding_line(checks: list[TensorCheck]) -> Text | None:
    """One sentence for every row that differs from autograd by float32 rounding alone."""
    names = [_grad(c) for c in checks if _only_rounding(c)]
    if not names:
        return None
    which = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    verb = "differs" if len(names) == 1 else "differ"
    return Text.styled(
        f"{which} {verb} from autograd only by float32 rounding: each is as close to "
        "the exact (float64) gradient as autograd's own result, so it counts as "
        "correct.", DIM)


def _check_details(check: TensorCheck) -> list[RenderableType]:
    """The teaching part under the table: diagnosis first, then where the values differ."""
    return _check_words(check) + _check_map(check)


def _check_map(check: TensorCheck) -> list[RenderableType]:
    """Where a row's values differ from autograd's, when they do."""
    if not check.heatmap:
        return []
    grad = _grad(check)
    return [Text.styled(f"where {grad} differs from autograd (|yours − autograd|, "
                        "brighter = further off):", DIM),
            Heatmap(check.heatmap, shape=check.expected_shape or check.shape)]


def _check_words(check: TensorCheck) -> list[RenderableType]:
    """A row's diagnosis, message and note."""
    parts: list[RenderableType] = []
    grad = _grad(check)
    verdict = check.verdict
    diagnosis = check.diagnosis
    if diagnosis and diagnosis.kind == "heldout":
        pass  # the row's message is the fresh batch's, said once on its own line below
    elif diagnosis and diagnosis.message:
        parts.append(Text.styled(f"{grad}: ", "bold") + prose(diagnosis.message, WARN))
    elif verdict is not Verdict.EXACT and check.message and not _only_rounding(check):
        tone = DIM if verdict is Verdict.APPROXIMATE else ""
        parts.append(Text.styled(f"{grad}: ", "bold") + prose(check.message, tone))
    if check.skipped_rule:
        parts.append(Text.styled(f"{check.mark} {grad}, rule skipped: ", "bold")
                     + prose(check.note or "", WARN))
    elif check.note:  # e.g. a shape that differs by a size-1 dimension and still works
        parts.append(Text.styled(f"{grad}: ", "bold") + prose(check.note, DIM))
    return parts


def _time_figure(figure: dict) -> list[RenderableType]:
    """An output with a time axis, step by step (tutor/core/timesteps.py): its size at each
    step, the learner's beside autograd's, and where they first part going back in time."""
    title = figure.get("title") or "the output"
    parts: list[RenderableType] = [Text.styled(
        f"the size of {title} at each time step t (its norm), yours beside autograd's:", "bold")]
    parts.append(TimeBars(figure.get("yours") or [], figure.get("autograd") or [],
                          figure.get("wrong") or [], label=f"|{title}|"))
    first = figure.get("first_wrong")
    if isinstance(first, int):
        parts.append(Text.styled(
            f"Going back from the last step, yours first leaves autograd's at t = {first}.",
            DIM))
    panels = [p for p in figure.get("panels") or [] if isinstance(p, dict)]
    for k, panel in enumerate(panels):
        if k == 1 and figure.get("about"):
            parts.append(prose(str(figure["about"]), DIM))
        parts += _panel(panel, lesson=k == 0)
    return parts


def _panel(panel: dict, lesson: bool) -> list[RenderableType]:
    """One panel of a step's picture (a carried gradient such as dh_t at every step): the
    lesson's batch in full, each demo smaller under the words that say what the demos are."""
    title = str(panel.get("title") or "the gradient")
    yours = panel.get("yours") or []
    head = (f"the size of {title} at each time step t: what reaches step t from its own output "
            "and from the steps after it (your function called on those steps alone), yours "
            "beside autograd's:" if lesson else f"{panel.get('case') or 'demo'}:")
    parts: list[RenderableType] = [Text.styled(head, "bold" if lesson else "")]
    parts.append(TimeBars(yours, panel.get("autograd") or [], panel.get("wrong") or [],
                          rows=5 if lesson else 3, label=f"|{title}|"))
    missing = [t for t, v in enumerate(yours) if v is None]
    if missing:
        parts.append(Text.styled(
            f"No bar of yours at t = {', '.join(map(str, missing[:8]))}"
            f"{', ...' if len(missing) > 8 else ''}: your function failed or ran out of time "
            "on the steps after it.", DIM))
    return parts


def _figure(figure: dict) -> list[RenderableType]:
    if figure.get("kind") == "time":
        return _time_figure(figure)
    title = figure.get("title") or "the gradient"
    parts: list[RenderableType] = [Text.styled(
               f"{title}: one row per example, one column per character", "bold")]
    parts.append(Heatmap(figure.get("values") or [], signed=True, max_rows=32))
    parts.append(Text.assemble(
        # Swatches rather than colour names: the theme says what the two colours are.
        ("██", HEAT_NEGATIVE), " pulls a logit up (the correct character), ",
        ("██", HEAT_POSITIVE), " pushes it down (every other character)",
    ))
    sums = figure.get("row_sums_max_abs")
    if sums is not None:
        parts.append(Text.styled(
            f"Each row sums to about zero: the largest |row sum| is {sums:.1e}.",
            DIM))
    return parts


def error_text(error: CheckError) -> Text:
    title = ERROR_TITLES.get(error.kind.value, "Error")
    where = ""
    message = error.message
    if error.line and f"line {error.line}" not in message:
        where = f" on line {error.line}"
        if error.col:
            where += f", column {error.col}"
    text = Text.styled(f"✗ {title}{where}", BAD)
    text.append("\n")
    text.append(message, style=WARN)
    if error.line:
        text.append("\nThe line is marked in the editor.", style=DIM)
    return text


def result_view(result: CheckResult, unlocked: str | None, revealed: bool = False) -> Group:
    """Everything one check produced, in reading order. `revealed` says the step's solution
    was shown before this check, so a pass does not change its status."""
    parts: list[RenderableType] = []
    error = result.error
    checks = result.checks
    if error:
        parts.append(error_text(error))
    elif result.passed and result.rule is Rule.SKIPPED:
        parts.append(Text.styled(
            f"{Status.SKIPPED.mark} Right for this network, but not the line's rule: the "
            "values match autograd on this batch and a fresh one, and the step counts as "
            "passed with its own mark. The notes below say what was skipped.", WARN))
    elif result.passed:
        exact = all(c.exact for c in checks if not c.partial)
        parts.append(Text.styled(
                   "✓ Correct: identical to autograd, bit for bit." if exact
                   else "✓ Correct: equal to autograd within floating-point tolerance.",
                   GOOD,
               ))
    if result.passed and not error:
        if unlocked:
            parts.append(Text.styled(f"Next line unlocked: {unlocked}. Press ^n to go on.",
                                     INFO))
        if revealed:
            parts.append(Text.styled(
                "Your version works. The step stays marked revealed (◇), since "
                "you saw the solution first; the attempt is recorded.",
                REVEAL))
    elif not error:
        parts.append(Text.styled("✗ Not yet.", BAD))
    # A loop through time is drawn step by step before the rows' heatmaps: with six outputs
    # wrong, the picture of where the loop goes wrong would otherwise sit pages down.
    in_time = bool(result.figure and result.figure.get("kind") == "time" and not result.passed)
    if checks:
        parts.append(checks_table(checks, result.passed))
        if in_time:
            for check in checks:
                parts.extend(_check_words(check))
            parts.extend(_figure(result.figure or {}))
            for check in checks:
                parts.extend(_check_map(check))
        else:
            for check in checks:
                parts.extend(_check_details(check))
        rounding = _rounding_line(checks)
        if rounding is not None:
            parts.append(rounding)
    heldout = result.heldout
    if heldout:
        what = heldout.what or f"a fresh batch of {heldout.batch_size}"
        if heldout.passed:
            parts.append(Text.styled(f"✓ Also correct on {what}.", INFO))
        else:
            parts.append(Text.styled(f"✗ On {what}: ", ALERT) + prose(
                heldout.message or "the answer does not hold there.", WARN))
    for note in result.notes:
        parts.append(Text.styled("· ", DIM) + prose(note, DIM))
    if result.figure and not (in_time and checks):
        parts.extend(_figure(result.figure))
    printed = printed_lines(result.stdout)
    if printed is not None:
        parts.append(Text.styled("printed:", DIM))
        parts.append(printed)
    return Group(*parts)


def printed_lines(stdout: str) -> Text | None:
    printed = (stdout or "").rstrip("\n")
    if not printed:
        return None
    lines = printed.split("\n")
    if len(lines) > MAX_PRINTED_LINES:
        lines = [f"… {len(lines) - MAX_PRINTED_LINES} earlier lines"] + lines[-MAX_PRINTED_LINES:]
    return Text.styled("\n".join(lines), TEXT)


def scratch_view(result: ScratchResult, expected: dict[str, list[int] | None]) -> Group:
    """A run without grading: what it printed, what went wrong, and what it defined.

    `expected` maps a gradient's name to the shape it must have, so a defined gradient says at
    once whether its shape is the one the check will want.
    """
    parts: list[RenderableType] = [Text.styled(
        "Run without grading: nothing was compared with autograd and no attempt was counted.",
        INFO_STRONG)]
    if result.error:
        parts.append(error_text(result.error))
    printed = printed_lines(result.stdout)
    if printed is not None:
        parts.append(Text.styled("printed:", DIM))
        parts.append(printed)
    # Modules (torch, F, math) are always there; listing them hides what the code made.
    defined = [d for d in result.defined if d.what != "module"]
    if defined:
        table = Table(box=None, pad_edge=False, padding=(0, 2, 0, 0), show_edge=False,
                      title="defined or changed:", title_justify="left", title_style=DIM)
        table.add_column("name", style="bold", no_wrap=True)
        table.add_column("what")
        table.add_column("", no_wrap=True)
        for item in defined:
            table.add_row(item.name, item.what, _shape_remark(item.name, item.what, expected))
        parts.append(table)
    elif not result.error and printed is None:
        parts.append(Text.styled("It ran, printed nothing and defined nothing new.", DIM))
    return Group(*parts)


def _shape_remark(name: str, what: str, expected: dict[str, list[int] | None]) -> Text:
    want = expected.get(name)
    if want is None:
        return Text("")
    if f"[{', '.join(str(d) for d in want)}]" in what:
        return Text.styled("✓ the shape the check wants", INFO)
    return Text.styled(f"the check wants {_dims(want)}", WARN)


class Feedback(VerticalScroll, can_focus=True):
    """Scrollable panel: status line, last result, a run without grading, hints, solution.

    Whatever the learner asked for last is scrolled into view, even on a short terminal where
    it lands below the fold.
    """

    PARTS = ("status", "result", "scratch", "hints", "solution")

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.border_title = "Feedback"
        self._solution: tuple[str, bool] | None = None
        self._follow: str | None = None  # the part to keep in view once layout settles
        self._parts: dict[str, Static] = {}

    def rehighlight(self) -> None:
        """Redraw the code shown here once highlighting is available."""
        if self._solution:
            self.show_solution(*self._solution)

    def compose(self):
        # Every widget adds to the first frame, which shows only the status line: the other
        # parts are mounted right after it (or before, when one has something to show then),
        # so that a verdict finds its part mounted and is painted the moment it arrives.
        yield self._new_part("status")

    def on_mount(self) -> None:
        self.call_after_refresh(self._mount_parts)

    def _mount_parts(self) -> None:
        for name in self.PARTS:
            if name not in self._parts:
                self._mount_part(name).display = False

    def _new_part(self, name: str) -> Static:
        part = self._parts[name] = Static(id=f"feedback-{name}")
        return part

    def _mount_part(self, name: str) -> Static:
        """A new part, mounted in its place among the others."""
        part = self._new_part(name)
        later = [self._parts[n] for n in self.PARTS[self.PARTS.index(name) + 1:]
                 if n in self._parts]
        self.mount(part, before=later[0] if later else None)
        return part

    def _fill(self, name: str, content: RenderableType) -> None:
        """Show `content` in a part, or hide the part when `content` is empty."""
        shown = bool(content) if isinstance(content, str) else True
        part = self._parts.get(name)
        if part is None:
            if not shown:
                return
            part = self._mount_part(name)
        part.update(content)
        part.display = shown

    def _part(self, name: str) -> Static | None:
        return self._parts.get(name)

    @property
    def has_content(self) -> bool:
        """True when something beyond the status line is shown (a result, hints, ...)."""
        return any(part.display for name, part in self._parts.items() if name != "status")

    def show_status(self, message: str | Text) -> None:
        self._fill("status", message if str(message) else "")

    def show_result(self, result: CheckResult | None, unlocked: str | None = None,
                    revealed: bool = False) -> None:
        self._fill("result", result_view(result, unlocked, revealed) if result else "")
        self.show_scratch(None)  # a check supersedes an earlier run without grading
        self._follow = None
        self.scroll_home(animate=False)

    def show_scratch(self, result: ScratchResult | None,
                     expected: dict[str, list[int] | None] | None = None) -> None:
        self._fill("scratch", scratch_view(result, expected or {}) if result else "")

    def show_hints(self, hints: list[str], total: int) -> None:
        shown = len(hints)
        # The count sits in the title: the panel has no bottom border for a subtitle.
        self.border_title = f"Feedback · hints used {shown}/{total}" if shown else "Feedback"
        body: list[RenderableType] = []
        if hints:
            from rich.markdown import Markdown  # slow to import: not before the first hint
        for number, hint in enumerate(hints, 1):
            body.append(Text.styled(f"Hint {number} of {total}", ALERT))
            body.append(Markdown(hint))
        self._fill("hints", Group(*body) if hints else "")

    def show_solution(self, code: str | None, revealed: bool = True) -> None:
        """The reference solution; `revealed` says whether seeing it cost the step its status
        (it does not once the step was solved: then it is there to compare)."""
        self._solution = (code, revealed) if code else None
        if not code:
            self._fill("solution", "")
            return
        title = ("Reference solution (this step counts as revealed):" if revealed else
                 "Reference solution, to compare with yours (your step keeps its status):")
        self._fill("solution", Group(Text.styled(title, REVEAL_STRONG),
                                     python_text(code.rstrip("\n"))))

    def scroll_to_part(self, name: str) -> None:
        """Bring a part into view, top first, once the layout includes what just changed."""
        self._follow = name
        self.call_after_refresh(self._scroll_to_followed)

    def _scroll_to_followed(self, tries: int = 20) -> None:
        if self._follow is None:
            return
        part = self._part(self._follow)
        if part is None or not part.display:
            return
        if not self.screen.is_current or not part.virtual_region.size:
            # Under a dialog (the reveal confirmation) this screen is not laid out, and a part
            # just shown has no place yet: try again shortly.
            if tries:
                self.set_timer(0.05, lambda: self._scroll_to_followed(tries - 1))
            return
        self.scroll_to_widget(part, animate=False, top=True, immediate=True)

    def on_resize(self) -> None:
        # A new layout (a panel grew or shrank) must not lose what the learner asked for.
        self.call_after_refresh(self._scroll_to_followed)
