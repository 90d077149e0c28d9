"""How fairly does `grade` credit filled-in lecture notebooks? Each case of a corpus (a module of
`tests/` with `CASES`: a notebook and the steps its learner got right and wrong, measured by
running the notebook as a kernel runs it, tests/notebook_corpus_truth.py) is graded by
`backprop-tutor grade --json`, and the figures that matter to a course are counted:

- right steps not credited (of all right steps; separately for notebooks that renamed the
  forward pass itself),
- wrong steps credited,
- right steps given a diagnosis (a failed step whose message blames the learner's code),
- submissions with no result.

    .venv/bin/python benchmarks/grade_corpus.py [--corpus notebook_corpus_tune ...]
                                                [--lesson gpt] [--case NAME] [--verbose]

A case may name its lesson (`"lesson": "gpt"`, graded with `--pack gpt`; makemore otherwise) and
its cascade steps (`"cascade"`); the figures are given per corpus and per lesson.

`notebook_corpus_tune` is what the grader was tuned on; `notebook_corpus_holdout` was written
apart from it and is only measured.
"""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))


def grade(path: Path, train_steps: int, lesson: str) -> dict | None:
    done = subprocess.run([sys.executable, "-m", "tutor", "--device", "cpu", "--pack", lesson,
                           "grade", "--json", "--train-steps", str(train_steps), str(path)],
                          capture_output=True, text=True, cwd=ROOT, timeout=1200)
    try:
        return json.loads(done.stdout)
    except json.JSONDecodeError:
        print(f"  no result (exit {done.returncode}): {done.stderr[-400:]}")
        return None


def _write(corpus, case: dict, folder: Path) -> Path:
    if hasattr(corpus, "write"):
        return corpus.write(case, folder)
    path = folder / f"{case['name']}.ipynb"
    path.write_text(json.dumps(case["notebook"], indent=1))
    return path


KEYS = ("right", "lost", "right_renamed", "lost_renamed", "wrong", "credited_wrong", "blamed",
        "no_result", "cascade", "cascade_credited", "notebooks")


def _measure(corpus, cases: list[dict], args: argparse.Namespace, tmp: Path
             ) -> dict[str, dict[str, int]]:
    """Each case graded; the counts, per lesson."""
    by_lesson: dict[str, dict[str, int]] = {}
    for case in cases:
        lesson = case.get("lesson", "makemore")
        totals = by_lesson.setdefault(lesson, dict.fromkeys(KEYS, 0))
        totals["notebooks"] += 1
        result = grade(_write(corpus, case, tmp), args.train_steps, lesson)
        if result is None:
            totals["no_result"] += 1
            continue
        steps = {s["id"]: s for s in result["steps"]}
        # A step whose own line is right but whose learner built on their own wrong gradient:
        # the tutor grades each step from the right upstream gradient (one mistake costs one
        # step), so such a step is counted apart.
        cascade = set(case.get("cascade") or getattr(corpus, "CASCADE", {}).get(case["name"], ()))
        totals["cascade"] += len(cascade)
        totals["cascade_credited"] += sum(1 for s in cascade if steps[s]["score"] > 0)
        case = {**case, "wrong": set(case["wrong"]) - cascade}
        lost = sorted(s for s in case["right"] if steps[s]["score"] < steps[s]["max_score"])
        credited = sorted(s for s in case["wrong"] if steps[s]["score"] > 0)
        blamed = sorted(s for s in case["right"] if steps[s]["status"] == "failed"
                        and not steps[s]["message"].startswith("not graded"))
        key = "_renamed" if case.get("renamed_forward", False) else ""
        totals["right" + key] += len(case["right"])
        totals["lost" + key] += len(lost)
        totals["wrong"] += len(case["wrong"])
        totals["credited_wrong"] += len(credited)
        totals["blamed"] += len(blamed)
        print(f"{case['name']:40s} {lesson:9s} {result['score']:5g}/{result['max_score']:g}  "
              f"right {len(case['right']) - len(lost)}/{len(case['right'])}  wrong credited "
              f"{len(credited)}/{len(case['wrong'])}  blamed {len(blamed)}")
        if args.verbose:
            for sid in lost:
                print(f"    lost    {sid}: {steps[sid]['message'][:160]}")
            for sid in credited:
                print(f"    wrongly {sid}: {steps[sid]['message'][:160]}")
    return by_lesson


def _report(title: str, t: dict[str, int]) -> None:
    right, lost = t["right"] + t["right_renamed"], t["lost"] + t["lost_renamed"]
    share = f" ({100 * lost / right:.1f} %)" if right else ""
    print(f"{title}: {t['notebooks']} notebooks")
    print(f"  right steps not credited: {lost} of {right}{share} (renamed forward pass: "
          f"{t['lost_renamed']} of {t['right_renamed']})")
    print(f"  wrong steps credited: {t['credited_wrong']} of {t['wrong']}")
    print(f"  right steps given a diagnosis: {t['blamed']}")
    print(f"  steps right by their own line on a wrong upstream gradient of the learner's: "
          f"{t['cascade_credited']} of {t['cascade']} credited")
    print(f"  submissions with no result: {t['no_result']}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--corpus", action="append",
                   help="a corpus module of tests/ (repeatable; default notebook_corpus_tune)")
    p.add_argument("--case", action="append", help="only these cases (by name)")
    p.add_argument("--lesson", action="append", help="only these lessons' cases")
    p.add_argument("--train-steps", type=int, default=200)
    p.add_argument("--verbose", action="store_true", help="print every step that is off")
    args = p.parse_args()
    for name in args.corpus or ["notebook_corpus_tune"]:
        corpus = importlib.import_module(name)
        cases = [c for c in corpus.CASES if (not args.case or c["name"] in args.case)
                 and (not args.lesson or c.get("lesson", "makemore") in args.lesson)]
        started = time.monotonic()
        with tempfile.TemporaryDirectory() as tmp:
            by_lesson = _measure(corpus, cases, args, Path(tmp))
        print(f"\ncorpus {name}: {len(cases)} notebooks in {time.monotonic() - started:.0f} s")
        for lesson, totals in sorted(by_lesson.items()):
            _report(f"  lesson {lesson}", totals)
        if len(by_lesson) > 1:
            _report("  all lessons", {k: sum(t[k] for t in by_lesson.values()) for k in KEYS})
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
