"""Check results as text for a terminal: the notebook's cmp line, then what it means."""

from __future__ import annotations

VERDICT_MARK = {"exact": "✓", "approximate": "✓", "wrong": "✗", "shape": "✗", "missing": "✗"}
ACCEPTED = ("exact", "approximate")
UNSETTLED_MARK = "!"  # right on its own, but the result did not pass: the lines below say why


def cmp_line(check: dict, width: int = 15) -> str:
    maxdiff = check["maxdiff"]
    diff = "—" if maxdiff is None else f"{maxdiff:.3g}" if maxdiff else "0.0"
    label = check["tensor"] + (" (partial)" if check.get("partial") else "")
    return (
        f"{label:<{width}} | exact: {str(check['exact']):<5} | "
        f"approximate: {str(check['approximate']):<5} | maxdiff: {diff}"
    )


def row_mark(check: dict, passed: bool) -> str:
    """A row's mark. Under a result that did not pass, a row that is right on its own gets "!"
    rather than ✓: a tick above "NOT PASSED" reads as a contradiction."""
    if check["verdict"] in ACCEPTED and not passed:
        return UNSETTLED_MARK
    return VERDICT_MARK[check["verdict"]]


def row_detail(check: dict, passed: bool) -> str | None:
    """The line under a row, if it needs one: what is wrong, or where to look."""
    diagnosis = check.get("diagnosis")
    # A held-out failure is printed once, as the fresh batch's own line, not again here.
    if diagnosis and diagnosis.get("kind") != "heldout":
        return f"[{diagnosis['kind']}] {check['message']}"
    if check["verdict"] not in ACCEPTED:
        return f"[{check['verdict']}] {check['message']}"
    if not passed:
        return f"{check['verdict']} here, but see below"
    return None


def format_result(result: dict) -> str:
    lines = [f"{result['step']}"]
    passed = bool(result["passed"])
    error = result.get("error")
    if error:
        lines.append(f"  ✗ {error['kind']} error: {error['message']}")
    width = max([15] + [len(c["tensor"]) + 10 for c in result["checks"]])
    for check in result["checks"]:
        lines.append(f"  {row_mark(check, passed)} {cmp_line(check, width)}")
        detail = row_detail(check, passed)
        if detail:
            lines.append(f"      {detail}")
    heldout = result.get("heldout")
    if heldout:
        mark = "✓" if heldout["passed"] else "✗"
        lines.append(f"  {mark} fresh batch of {heldout['batch_size']}"
                     + (f": {heldout['message']}" if heldout.get("message") else ""))
    for note in result.get("notes", []):
        lines.append(f"  note: {note}")
    if result.get("stdout"):
        lines.append("  your print output:")
        lines += [f"    {line}" for line in result["stdout"].rstrip("\n").splitlines()]
    lines.append("  PASSED" if passed else "  NOT PASSED")
    return "\n".join(lines)


def format_table(results: list[dict]) -> str:
    """One row per checked tensor of every cell, in the style of the notebook's cmp calls."""
    rows = []
    width = max([15] + [len(c["tensor"]) + 10 for r in results for c in r["checks"]])
    for result in results:
        if result.get("error") or not result["checks"]:
            message = result["error"]["message"] if result.get("error") else "nothing to check"
            rows.append(f"✗ {result['step']}: {message}")
            continue
        passed = bool(result["passed"])
        for check in result["checks"]:
            rows.append(f"{row_mark(check, passed)} {cmp_line(check, width)}")
            detail = row_detail(check, passed)
            if detail:
                rows.append(f"      {detail}")
        heldout = result.get("heldout")
        if heldout and not heldout["passed"]:
            rows.append(f"      {heldout['message']}")
    passed = sum(r["passed"] for r in results)
    rows.append(f"{passed} of {len(results)} cells passed")
    return "\n".join(rows)
