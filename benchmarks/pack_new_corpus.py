"""`pack new` and `pack check` on forward files courses teach, as an instructor runs them.

The files are in tests/packs/forward_corpus/, in two halves written apart from tutor/authoring/:
`tune` (what the derivation was shaped on) and `holdout` (only measured). For each file: whether
`pack new` made a pack or refused it in one line, its TODOs, whether `pack check` calls the pack
ready, the wall seconds of each, and the independent check of every derived reference against
autograd in float64 at two batch sizes (benchmarks/refcheck.py, which uses nothing of the tutor).

    .venv/bin/python benchmarks/pack_new_corpus.py [--half holdout|tune|both]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "packs" / "forward_corpus"


def _run(*args: str, cwd: Path) -> tuple[int, str, float]:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=cwd,
                          timeout=900)
    return done.returncode, done.stdout + done.stderr, time.perf_counter() - started


def one(path: Path, tmp: Path) -> dict:
    out = tmp / path.stem
    rc, said, new_s = _run("-m", "tutor", "pack", "new", str(path), "--out", str(out), cwd=tmp)
    row = {"file": path.stem, "made": rc == 0, "new_s": new_s,
           "todos": said.count("  TODO "), "refused": "" if rc == 0 else said.strip()[-200:]}
    if rc != 0:
        return row
    rc, said, check_s = _run("-m", "tutor", "pack", "check", str(out), cwd=tmp)
    row.update(check_s=check_s, ready="the pack is ready" in said,
               problems=[line.strip() for line in said.splitlines()
                         if line.startswith("  ") and not line.strip().startswith(
                             ("checking", "training smoke"))][:3])
    report = tmp / f"{path.stem}.json"
    _run(str(ROOT / "benchmarks" / "refcheck.py"), str(out), "--json", str(report), cwd=tmp)
    try:
        checked = json.loads(report.read_text())
    except (OSError, ValueError):
        checked = None
    row["refcheck"] = _summary(checked)
    return row


def _summary(checked) -> str:
    if not checked:
        return "could not run"
    right = sum(len(r.get("right", [])) for r in checked)
    wrong = sum(len(r.get("wrong", [])) for r in checked)
    todo = sum(len(r.get("todo", [])) for r in checked)
    errors = sum(len(r.get("errors", [])) for r in checked)
    return f"{right} right, {wrong} wrong, {todo} TODO" + (f", {errors} errors" if errors else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--half", choices=("holdout", "tune", "both"), default="holdout")
    args = parser.parse_args()
    halves = ["holdout", "tune"] if args.half == "both" else [args.half]
    for half in halves:
        files = sorted((CORPUS / half).glob("*.py"))
        rows = []
        with tempfile.TemporaryDirectory() as tmp:
            for path in files:
                rows.append(one(path, Path(tmp)))
                r = rows[-1]
                state = ("refused: " + r["refused"].splitlines()[-1] if not r["made"] else
                         "ready" if r.get("ready") else f"not ready: {r.get('problems')}")
                print(f"  {r['file']:24} new {r['new_s']:5.1f} s  check "
                      f"{r.get('check_s', 0):5.1f} s  TODO {r['todos']}  {state}  "
                      f"[{r.get('refcheck', '-')}]", flush=True)
        ready = sum(bool(r.get("ready")) for r in rows)
        made = sum(r["made"] for r in rows)
        print(f"{half}: {ready}/{len(rows)} ready, {made}/{len(rows)} made, "
              f"{sum(r['todos'] for r in rows)} TODOs; median new+check "
              f"{sorted(r['new_s'] + r.get('check_s', 0) for r in rows)[len(rows) // 2]:.1f} s")


if __name__ == "__main__":
    main()
