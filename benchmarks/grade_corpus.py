"""How fairly does `grade` credit filled-in lecture notebooks? Each case of a corpus (a module of
`tests/` with `CASES`: a notebook and the steps its learner got right and wrong, measured by
running the notebook as a kernel runs it, tests/notebook_corpus_truth.py) is graded by
`backprop-tutor grade --json`, and the figures that matter to a course are counted:

- right steps not credited (of all right steps; separately for notebooks that renamed the
  forward pass itself),
- wrong steps credited,
- right steps given a diagnosis (a failed step whose message blames the learner's code),
- submissions with no result.

    .venv/bin/python benchmarks/grade_corpus.py [--corpus notebook_corpus_tune] [--case NAME]
                                                [--verbose]

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


def grade(path: Path, train_steps: int) -> dict | None:
    done = subprocess.run([sys.executable, "-m", "tutor", "--device", "cpu", "grade", "--json",
                           "--train-steps", str(train_steps), str(path)], capture_output=True,
                          text=True, cwd=ROOT, timeout=1200)
    try:
        return json.loads(done.stdout)
    except json.JSONDecodeError:
        print(f"  no result (exit {done.returncode}): {done.stderr[-400:]}")
        return None


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--corpus", default="notebook_corpus_tune")
    p.add_argument("--case", action="append", help="only these cases (by name)")
    p.add_argument("--train-steps", type=int, default=200)
    p.add_argument("--verbose", action="store_true", help="print every step that is off")
    args = p.parse_args()
    corpus = importlib.import_module(args.corpus)
    cases = [c for c in corpus.CASES if not args.case or c["name"] in args.case]
    totals = {"right": 0, "lost": 0, "right_renamed": 0, "lost_renamed": 0, "wrong": 0,
              "credited_wrong": 0, "blamed": 0, "no_result": 0, "cascade": 0,
              "cascade_credited": 0}
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases:
            path = corpus.write(case, Path(tmp))
            result = grade(path, args.train_steps)
            if result is None:
                totals["no_result"] += 1
                continue
            steps = {s["id"]: s for s in result["steps"]}
            # A step whose own line is right but whose learner built on their own wrong
            # gradient: the tutor grades each step from the right upstream gradient (one
            # mistake costs one step), so such a step is counted apart.
            cascade = set(getattr(corpus, "CASCADE", {}).get(case["name"], ()))
            totals["cascade"] += len(cascade)
            totals["cascade_credited"] += sum(1 for s in cascade if steps[s]["score"] > 0)
            case = {**case, "wrong": set(case["wrong"]) - cascade}
            lost = sorted(s for s in case["right"] if steps[s]["score"] < steps[s]["max_score"])
            credited = sorted(s for s in case["wrong"] if steps[s]["score"] > 0)
            blamed = sorted(s for s in case["right"] if steps[s]["status"] == "failed"
                            and not steps[s]["message"].startswith("not graded"))
            renamed = case.get("renamed_forward", False)
            key = "_renamed" if renamed else ""
            totals["right" + key] += len(case["right"])
            totals["lost" + key] += len(lost)
            totals["wrong"] += len(case["wrong"])
            totals["credited_wrong"] += len(credited)
            totals["blamed"] += len(blamed)
            print(f"{case['name']:40s} {result['score']:5g}/{result['max_score']:g}  right "
                  f"{len(case['right']) - len(lost)}/{len(case['right'])}  wrong credited "
                  f"{len(credited)}/{len(case['wrong'])}  blamed {len(blamed)}")
            if args.verbose:
                for sid in lost:
                    print(f"    lost    {sid}: {steps[sid]['message'][:160]}")
                for sid in credited:
                    print(f"    wrongly {sid}: {steps[sid]['message'][:160]}")
    print(f"\ncorpus {args.corpus}: {len(cases)} notebooks in {time.monotonic() - started:.0f} s")
    print(f"right steps not credited: {totals['lost']} of {totals['right']} "
          f"(renamed forward pass: {totals['lost_renamed']} of {totals['right_renamed']})")
    print(f"wrong steps credited: {totals['credited_wrong']} of {totals['wrong']}")
    print(f"right steps given a diagnosis: {totals['blamed']}")
    print(f"steps right by their own line on a wrong upstream gradient of the learner's: "
          f"{totals['cascade_credited']} of {totals['cascade']} credited")
    print(f"submissions with no result: {totals['no_result']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
