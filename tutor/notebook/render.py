"""What the notebook shows: a check, hints and progress as HTML, with the terminal's text beside
it for front ends that do not render HTML. The words and marks are the CLI's
(`tutor.session.report`)."""

from __future__ import annotations

import base64
import html
import math
import re

from tutor.notebook.png import (
    BROKEN_CURVE,
    GOOD_CURVE,
    Colour,
    curves_png,
    heatmap_png,
    time_bars_png,
)
from tutor.pack.model import DEFAULT_BASELINE
from tutor.session.controller import BrokenComparison, CheckOutcome, Hints
from tutor.session.report import (
    best_maxdiff,
    format_result,
    progress_table,
    row_detail,
    row_label,
    row_mark,
    steps_text,
    summary_line,
    verdict_line,
)
from tutor.session.runtext import format_comparison, format_run
from tutor.values.durations import compact
from tutor.values.results import CheckResult, Rule, Status
from tutor.values.runs import TrainingRun

Bundle = dict[str, str]  # a display's MIME bundle: "text/plain", "text/html", "image/png"

_CODE = re.compile(r"`([^`]+)`")
_GOOD, _BAD, _MUTED = "#2e7d32", "#c62828", "#6b7280"
_SKIPPED = "#b26a00"  # passed, without the line's rule: neither the good green nor the bad red
_STYLE = "font-family: var(--jp-code-font-family, monospace); font-size: 0.9em"
_CELL = "padding: 1px 0.6em; text-align: {}"
# A diagnosis under a row: wide enough to read, never as wide as a long paragraph.
_WRAPPED = '<div style="min-width: 60ch; max-width: 90ch">{}</div>'


def prose(text: str) -> str:
    """A message as HTML: escaped, with `code` in code type and paragraphs kept."""
    escaped = _CODE.sub(r"<code>\1</code>", html.escape(text.strip()))
    return "<br>".join(escaped.splitlines())


def _row(cells, tag: str = "td") -> str:
    """A table row from (content, alignment) pairs."""
    return "<tr>" + "".join(f'<{tag} style="{_CELL.format(align)}">{body}</{tag}>'
                            for body, align in cells) + "</tr>"


def _mark(mark: str) -> str:
    colour = _GOOD if mark in ("✓", "≡") else _SKIPPED if mark == "↷" else _BAD
    return f'<span style="color: {colour}; font-weight: bold">{mark}</span>'


def _bool(value: bool) -> str:
    return f'<span style="color: {_GOOD if value else _MUTED}">{value}</span>'


def check_bundle(outcome: CheckOutcome, position: str, recorded: bool = True) -> Bundle:
    """`recorded` False: the check of an untouched template, which is not an attempt."""
    result = outcome.result
    text = format_result(result, position, width=100) + _after_text(outcome, recorded)
    return {"text/plain": text, "text/html": _check_html(outcome, position, recorded)}


def _after(outcome: CheckOutcome, recorded: bool) -> list[str]:
    """What the check changed in the learner's progress, and what could not be saved."""
    lines = [] if recorded else ["the step's template, unchanged: not recorded as an attempt"]
    if outcome.status is Status.LOCKED:
        lines.append(f"{outcome.result.step}: not open yet; it opens once the steps before it "
                     "are done")
    elif outcome.status is not None:
        lines.append(f"{outcome.result.step}: {outcome.status.words}")
    opened = [s for s in outcome.unlocked if s != outcome.result.step]  # not the one checked
    if opened:
        lines.append("unlocked: " + ", ".join(opened))
    if outcome.problem:
        lines.append(f"not saved to your progress: {outcome.problem}")
    return lines


def _after_text(outcome: CheckOutcome, recorded: bool) -> str:
    return "".join(f"\n  {line}" for line in _after(outcome, recorded))


def _check_html(outcome: CheckOutcome, position: str, recorded: bool) -> str:
    result = outcome.result
    passed = result.passed
    parts = [f"<div style=\"{_STYLE}\"><b>{html.escape(result.step)}</b> "
             f'<span style="color: {_MUTED}">({html.escape(position)})</span>']
    error = result.error
    if error:
        parts.append(f"<div>{_mark('✗')} {html.escape(error.kind.value)} error: "
                     f"{prose(error.message)}</div>")
    if result.checks:
        head = _row([("", "left"), ("gradient", "left"), ("exact", "left"),
                     ("approximate", "left"), ("maxdiff", "right")], "th")
        parts.append(f'<table style="border-collapse: collapse; margin: 4px 0">{head}')
        for check in result.checks:
            maxdiff = check.maxdiff
            diff = "—" if maxdiff is None else f"{maxdiff:.3g}" if maxdiff else "0.0"
            cells = [(_mark(row_mark(check, passed)), "left"),
                     (f"<code>{html.escape(row_label(check))}</code>", "left"),
                     (_bool(check.exact), "left"), (_bool(check.approximate), "left"),
                     (diff, "right")]
            parts.append(_row(cells))
            detail = row_detail(check, passed)
            if detail:
                parts.append(f'<tr><td></td><td colspan="4" style="{_CELL.format("left")}">'
                             f"{_WRAPPED.format(prose(detail))}</td></tr>")
        parts.append("</table>")
    heldout = result.heldout
    if heldout:
        what = heldout.what or f"fresh batch of {heldout.batch_size}"
        message = f": {heldout.message}" if heldout.message else ""
        parts.append(f"<div>{_mark('✓' if heldout.passed else '✗')} "
                     f"{prose(what + message)}</div>")
    parts += [f"<div>note: {prose(note)}</div>" for note in result.notes]
    if result.stdout:
        parts.append(f"<div>your print output:</div><pre style=\"margin: 2px 0 2px 1em\">"
                     f"{html.escape(result.stdout.rstrip())}</pre>")
    colour = (_BAD if not passed else _SKIPPED if result.rule is Rule.SKIPPED else _GOOD)
    parts.append(f'<div style="color: {colour}; font-weight: bold">'
                 f"{html.escape(verdict_line(result))}</div>")
    parts += [f'<div style="color: {_MUTED}">{html.escape(line)}</div>'
              for line in _after(outcome, recorded)]
    parts.append("</div>")
    return "".join(parts)


def heatmap_bundles(result: CheckResult) -> list[Bundle]:
    """One image per gradient whose shape is right and whose numbers are not: where they are
    wrong, as |yours − autograd| (pooled by the engine to at most 8 x 32 cells); and the step's
    figure, when it has one."""
    bundles = []
    for check in result.checks:
        values = check.heatmap
        if not values:
            continue
        shape = check.shape or []
        caption = (f"|yours − autograd| for {check.grad} {list(shape)}: dark is right, "
                   "brighter is further off (each cell the largest of its block)")
        png = base64.b64encode(heatmap_png(values)).decode("ascii")
        bundles.append({"image/png": png, "text/plain": caption})
    figure = result.figure
    if figure and figure.get("kind") == "time":  # an output with a time axis, step by step
        bundle = time_bundle(figure)
        if bundle is not None:
            bundles.append(bundle)
        bundles += picture_bundles(figure)
    elif figure and figure.get("values"):  # a solved step's gradient worth looking at
        png = base64.b64encode(heatmap_png(figure["values"], signed=True, cell=6)).decode("ascii")
        caption = (f"{figure.get('title') or 'the gradient'}: one row per example, one column "
                   "per character; blue pulls a logit up (the correct character), orange pushes "
                   "it down (every other character)")
        bundles.append({"image/png": png, "text/plain": caption})
    return bundles


def time_bundle(figure: dict) -> Bundle | None:
    """The time figure (tutor/core/timesteps.py) as an image: the size of the output at each
    time step, the learner's beside autograd's; None where there is nothing to draw."""
    try:
        png = time_bars_png(figure.get("yours") or [], figure.get("autograd") or [],
                            figure.get("wrong") or [])
    except ValueError:
        return None
    title = figure.get("title") or "the output"
    first = figure.get("first_wrong")
    where = (f" Red marks a step where they differ; going back from the last step, yours "
             f"first leaves autograd's at t = {first}." if isinstance(first, int) else
             " They agree at every step.")
    caption = (f"the size of {title} at each time step t (its norm), t = 0 on the left: yours "
               f"in blue, autograd's in green beside it.{where}")
    return _captioned(png, caption)


def picture_bundles(figure: dict) -> list[Bundle]:
    """The step's picture through time (a carried gradient such as dh_t at every step, on the
    lesson's batch and on each demo), one captioned image a panel."""
    out = []
    panels = [p for p in figure.get("panels") or [] if isinstance(p, dict)]
    for k, panel in enumerate(panels):
        title = str(panel.get("title") or "the gradient")
        yours = [math.nan if v is None else v for v in panel.get("yours") or []]
        autograd = panel.get("autograd") or []
        try:
            png = time_bars_png(yours, autograd, panel.get("wrong") or [],
                                height=160 if k == 0 else 100)
        except ValueError:
            continue
        finite = [v for v in [*yours, *autograd] if math.isfinite(v) and v > 0]
        span = (f" Sizes run from {min(finite):.1e} to {max(finite):.1e}"
                + (", on a log scale." if max(finite) > 100 * min(finite) else ".")
                if finite else "")
        wrong = [t for t, w in enumerate(panel.get("wrong") or []) if w]
        differ = (f" Yours differs from autograd's at {steps_text(wrong)} (red)." if wrong else
                  " Yours matches autograd's at every step.")
        if k == 0:
            caption = (f"the size of {title} at each time step t, t = 0 on the left: what "
                       "reaches step t from its own output and from the steps after it (your "
                       "function called on those steps alone). Yours in blue, autograd's in "
                       f"green beside it.{differ}{span}")
        else:
            caption = f"{panel.get('case') or 'demo'}: {title} at each step.{differ}{span}"
            if k == 1 and figure.get("about"):
                caption = f"{figure['about']} {caption}"
        out.append(_captioned(png, caption))
    return out


def _captioned(png: bytes, caption: str) -> Bundle:
    """An image with its caption under it: Jupyter shows the HTML, other front ends the text."""
    data = base64.b64encode(png).decode("ascii")
    page = (f'<figure style="margin: 4px 0"><img src="data:image/png;base64,{data}"/>'
            f'<figcaption style="{_STYLE}; color: {_MUTED}">{html.escape(caption)}'
            "</figcaption></figure>")
    return {"image/png": data, "text/plain": caption, "text/html": page}


def hints_bundle(hints: Hints, position: str) -> Bundle:
    total, shown = hints.total, len(hints.shown)
    if shown == 0:
        head = f"{hints.step} ({position}): this step has no hints"
        return {"text/plain": head, "text/html": f"<div style=\"{_STYLE}\">{head}</div>"}
    head = f"{hints.step} ({position}): hint {shown} of {total}"
    tail = ("That was the last hint." if shown == total
            else f"`%hint {hints.step}` again gives the next one.")
    lines = [head, f"  {shown}. {hints.shown[-1]}", f"  {tail}"]
    items = "".join(f"<li>{prose(h)}</li>" for h in hints.shown)
    page = (f"<div style=\"{_STYLE}\"><b>{html.escape(head)}</b>"
            f"<ol style=\"margin: 4px 0\">{items}</ol>"
            f"<div style=\"color: {_MUTED}\">{prose(tail)}</div>")
    if hints.problem:
        warning = f"this hint was not counted in your progress: {hints.problem}"
        lines.append(f"  {warning}")
        page += f'<div style="color: {_BAD}">{html.escape(warning)}</div>'
    return {"text/plain": "\n".join(lines), "text/html": page + "</div>"}


def progress_bundle(rows: list[dict]) -> Bundle:
    head = _row([("", "left"), ("#", "right"), ("step", "left"), ("status", "left"),
                 ("attempts", "right"), ("hints", "right"), ("best maxdiff", "right"),
                 ("time", "right")], "th")
    body = "".join(_row([
        (Status(r["status"]).mark, "left"), (f"{n}.", "right"),
        (f"<code>{html.escape(r['id'])}</code>", "left"), (r["status"], "left"),
        (r["attempts"], "right"), (r["hints"], "right"), (best_maxdiff(r), "right"),
        (compact(r["seconds"]), "right")]) for n, r in enumerate(rows, start=1))
    summary = summary_line(rows)
    page = (f"<div style=\"{_STYLE}\"><table style=\"border-collapse: collapse\">"
            f"{head}{body}</table><div>{summary}</div></div>")
    return {"text/plain": progress_table(rows), "text/html": page}


def _pre(text: str) -> str:
    return f'<pre style="{_STYLE}">{html.escape(text)}</pre>'


def _curve_bundle(curves: list[tuple[TrainingRun, Colour]], caption: str) -> list[Bundle]:
    """One PNG of the runs' loss curves on the same axes (none when there is nothing to draw)."""
    drawn = [(run.history.log10_loss, colour) for run, colour in curves if run.history]
    if not drawn:
        return []
    slots = max(len(values) for values, _ in drawn)
    try:
        png = curves_png(drawn, slots)
    except ValueError:
        return []
    return [{"image/png": base64.b64encode(png).decode("ascii"), "text/plain": caption}]


def run_bundles(run: TrainingRun, baseline: str = DEFAULT_BASELINE) -> list[Bundle]:
    """A training run as `train` prints it (its losses beside `baseline`'s, the pack's), then
    its loss curve and its pictures through time (the first and the last)."""
    text = format_run(run, baseline)
    return [{"text/plain": text, "text/html": _pre(text)},
            *_curve_bundle([(run, GOOD_CURVE)], "log10(loss) against the step"),
            *run_picture_bundles(run.pictures)]


def run_picture_bundles(pictures: list[dict]) -> list[Bundle]:
    """A run's first and last picture through time, as captioned images."""
    out = []
    for snap in pictures[:1] + pictures[-1:] if len(pictures) > 1 else pictures:
        panel = snap["panel"]
        title = panel.get("title") or "the gradient"
        yours = [math.nan if v is None else v for v in panel["yours"]]
        try:
            png = time_bars_png(yours, panel["autograd"], panel["wrong"], height=120)
        except ValueError:
            continue
        finite = [v for v in panel["autograd"] if v > 0]
        span = f" It runs from {min(finite):.1e} to {max(finite):.1e}." if finite else ""
        differ = (" Red marks a step where yours differs from autograd's." if any(panel["wrong"])
                  else " Yours matches autograd's at every step.")
        out.append(_captioned(png, f"{title} at step {snap['step']} of the run, on the "
                                   f"{panel.get('case') or 'same batch'}, at each time step t "
                                   f"(t = 0 on the left): yours in blue, autograd's in green."
                                   f"{span}{differ}"))
    return out


def comparison_bundles(comparison: BrokenComparison) -> list[Bundle]:
    """A run with one step broken next to a good run, as `train --break` prints it, then both
    loss curves on the same axes (blue: good, red: broken)."""
    text = format_comparison(comparison)
    return [{"text/plain": text, "text/html": _pre(text)},
            *_curve_bundle([(comparison.good, GOOD_CURVE), (comparison.broken, BROKEN_CURVE)],
                           "log10(loss) against the step: blue the good run, red the broken one"),
            *run_picture_bundles(comparison.broken.pictures[-1:])]
