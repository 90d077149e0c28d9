"""The instructor's view of a class: `report.html` (one self-contained page) and `grades.csv`.

The page shows, per step, how many submissions passed it, the hardest steps first, with the
diagnoses seen most often there and how many times; and the spread of scores as an inline SVG
histogram. Nothing in it is fetched from anywhere: no scripts, no styles from outside.
"""

from __future__ import annotations

import csv
import html
import io
from collections import Counter
from pathlib import Path

from tutor.course.platforms import write_atomically
from tutor.course.scoring import Grade, Outcome
from tutor.pack.model import Pack

TOP_DIAGNOSES = 5
BINS = 10


def grades_csv(pack: Pack, grades: list[Grade]) -> str:
    """A row per submission: file, score, max score, then the points of every step."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["file", "score", "max_score", *[s.id for s in pack.steps]])
    for g in sorted(grades, key=lambda g: g.name):
        points = {s.id: s.score for s in g.steps}
        writer.writerow([_cell(g.name), f"{g.score:g}", f"{g.max_score:g}",
                         *[f"{points.get(s.id, 0):g}" for s in pack.steps]])
    return out.getvalue()


def _cell(text: str) -> str:
    # A file name that starts like a formula would be run by a spreadsheet.
    return "'" + text if text[:1] in ("=", "+", "-", "@") else text


def histogram_svg(scores: list[float], top: float, width: int = 480, height: int = 160) -> str:
    """Scores in BINS equal bins from 0 to `top`, as bars with their counts."""
    counts = [0] * BINS
    for s in scores:
        i = min(BINS - 1, int(BINS * s / top)) if top else 0
        counts[max(0, i)] += 1
    most = max(counts) or 1
    bar = width / BINS
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height + 30}" '
             f'role="img" aria-label="histogram of scores">']
    for i, c in enumerate(counts):
        h = (height - 14) * c / most
        x, y = i * bar, height - h
        lo, hi = top * i / BINS, top * (i + 1) / BINS
        parts.append(f'<rect x="{x + 2:.1f}" y="{y:.1f}" width="{bar - 4:.1f}" height="{h:.1f}" '
                     f'fill="#4a7ab5"><title>{lo:g}–{hi:g}: {c}</title></rect>')
        if c:
            parts.append(f'<text x="{x + bar / 2:.1f}" y="{y - 3:.1f}" font-size="11" '
                         f'text-anchor="middle">{c}</text>')
        parts.append(f'<text x="{x + bar / 2:.1f}" y="{height + 14}" font-size="10" '
                     f'text-anchor="middle">{lo:.3g}</text>')
    parts.append(f'<text x="{width - 2}" y="{height + 28}" font-size="10" text-anchor="end">'
                 f'score (out of {top:g})</text></svg>')
    return "".join(parts)


def step_table(pack: Pack, grades: list[Grade]) -> list[dict]:
    """Per step: pass rate, counts by outcome, the commonest messages of those that did not
    pass; the hardest steps (lowest pass rate) first, the lesson's order breaking ties."""
    graded = [g for g in grades if not g.unreadable]
    rows = []
    for index, step in enumerate(pack.steps):
        outcomes: Counter[str] = Counter()
        messages: Counter[str] = Counter()
        for g in graded:
            sg = next((s for s in g.steps if s.id == step.id), None)
            if sg is None:
                continue
            outcomes[sg.status.value] += 1
            if sg.status is Outcome.FAILED:
                messages[sg.message] += 1
        total = sum(outcomes.values())
        rows.append({"id": step.id, "title": step.title, "index": index, "total": total,
                     "passed": outcomes["passed"], "outcomes": outcomes,
                     "rate": outcomes["passed"] / total if total else 0.0,
                     "diagnoses": messages.most_common(TOP_DIAGNOSES)})
    rows.sort(key=lambda r: (r["rate"], r["index"]))
    return rows


def report_html(pack: Pack, grades: list[Grade]) -> str:
    e = html.escape
    scores = [g.score for g in grades if not g.unreadable]
    top = max((g.max_score for g in grades), default=0) or 1
    unreadable = [g for g in grades if g.unreadable]
    mean = sum(scores) / len(scores) if scores else 0
    rows = []
    for r in step_table(pack, grades):
        diag = "".join(f"<li><span class=n>{n}×</span> {e(m)}</li>" for m, n in r["diagnoses"])
        counts = ", ".join(f"{n} {k}" for k, n in sorted(r["outcomes"].items()))
        rows.append(
            f"<tr><td><code>{e(r['id'])}</code><br><small>{e(r['title'])}</small></td>"
            f"<td class=r>{r['rate']:.0%}<div class=bar><div style=\"width:{r['rate']:.0%}\">"
            f"</div></div></td><td><small>{e(counts)}</small></td>"
            f"<td>{'<ul>' + diag + '</ul>' if diag else ''}</td></tr>")
    skipped = "".join(f"<li><code>{e(g.name)}</code>: {e(g.unreadable or '')}</li>"
                      for g in unreadable)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
<title>{e(pack.title)}: grades</title>
<style>
body {{ font: 14px/1.4 system-ui, sans-serif; margin: 2em auto; max-width: 70em; color: #222; }}
table {{ border-collapse: collapse; width: 100%; }}
td, th {{ border-bottom: 1px solid #ddd; padding: .4em .6em; vertical-align: top;
  text-align: left; }}
td.r {{ width: 8em; }}
.bar {{ background: #eee; height: 6px; margin-top: 3px; }}
.bar div {{ background: #3a9a5b; height: 6px; }}
ul {{ margin: 0; padding-left: 1.2em; }}
.n {{ color: #a33; font-weight: bold; }}
</style></head><body>
<h1>{e(pack.title)}</h1>
<p>{len(grades)} submissions ({len(unreadable)} could not be read) · mean score
{mean:.2f} of {top:g}</p>
<h2>Scores</h2>
{histogram_svg(scores, top)}
<h2>Steps, hardest first</h2>
<table><tr><th>step</th><th>passed</th><th>outcomes</th><th>most common diagnoses</th></tr>
{''.join(rows)}
</table>
{'<h2>Not graded</h2><ul>' + skipped + '</ul>' if skipped else ''}
</body></html>
"""


def write_report(folder: Path, pack: Pack, grades: list[Grade]) -> tuple[Path, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    page, table = folder / "report.html", folder / "grades.csv"
    write_atomically(page, report_html(pack, grades).encode())
    write_atomically(table, grades_csv(pack, grades).encode())
    return page, table
