"""The same verdict on every device: every corpus we keep, checked on the CPU and on another
device, compared case by case.

    .venv/bin/python benchmarks/device_parity.py [--device simulated|cuda] [--sample K]

`simulated` (the default) is the accelerator simulated on the CPU with CUDA's rules about devices
(BACKPROP_TUTOR_SIMULATED_DEVICE=1, tutor/devices.py); `cuda` is a real GPU. Each case is checked
once on each device and compared by what a learner is told: passed or not, the rule, the error's
kind, and per graded tensor its verdict, rule, diagnosis kind and message (maxdiff is left out:
a GPU rounds differently). Then a short training run of every lesson and a graded lecture
notebook, through the command line on each device, compared the same way.

The corpora: every step's solution and catalogued mistakes in all four lessons, the test
suite's right and wrong answers (tests/test_corpus_*.py, tests/test_smallest_change.py, the LSTM
slips of tests/lstm_slips_*.py), the gaming attempts (tests/test_gaming.py) and the answers that
make tensors without a device (tests/device_corpus_tune.py and, reported on its own,
tests/device_corpus_holdout.py).
`--sample K` takes every K-th case of each corpus (the test suite's fast part).

The last line is `parity: K/N identical`, followed by the first differences.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import warnings
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

warnings.filterwarnings("ignore", message=".*NumPy.*")

ROOT = Path(__file__).resolve().parent.parent
LESSONS = {"makemore": "makemore", "gpt": str(ROOT / "exercises" / "gpt"),
           "lstm": str(ROOT / "exercises" / "lstm"), "conv": str(ROOT / "exercises" / "conv")}


@dataclass(frozen=True)
class Case:
    corpus: str
    name: str
    lesson: str
    step: str
    code: str


def cases() -> list[Case]:
    """Every corpus, in a fixed order."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import corpora

    from tutor.pack.model import load_pack

    out: list[Case] = []
    for lesson, where in LESSONS.items():
        pack = load_pack(None if lesson == "makemore" else Path(where))
        for step in pack.steps:
            if step.kind.trained:
                continue
            out.append(Case("solutions", step.id, lesson, step.id, step.solution))
            out += [Case("catalogued mistakes", f"{step.id} #{i + 1}", lesson, step.id, m.code)
                    for i, m in enumerate(step.mistakes)]
    correct = corpora.load("test_corpus_correct")
    out += [Case("right answers", f"{step}-{name}", "makemore", step, code.lstrip("\n"))
            for step, forms in correct.CORRECT.items() for name, code in forms.items()]
    wrong = corpora.load("test_corpus_wrong")
    out += [Case("wrong answers", name, "makemore", s, c) for name, (s, _, c, _) in
            wrong.WRONG.items()]
    families = corpora.load("test_corpus_families")
    out += [Case("wrong answers", name, lesson, s, c) for name, (lesson, s, _, c, _, _) in
            families.WRONG.items()]
    smallest = corpora.load("test_smallest_change")
    out += [Case("wrong answers", name, lesson, s, c) for name, (lesson, s, _, c, _) in
            smallest.WRONG.items()]
    lstm = corpora.load("test_corpus_lstm")
    out += [Case("lstm answers", f"{step}-{name}", "lstm", step, code)
            for step, forms in lstm.CORRECT.items() for name, code in forms.items()]
    out += [Case("lstm answers", name, "lstm", s, c) for name, (s, _, c, _) in lstm.WRONG.items()]
    out += [Case("lstm answers", name, "lstm", s, c) for name, (s, c, _) in
            lstm.HARD_CODED.items()]
    for half in ("tune", "holdout"):
        slips = corpora.load(f"lstm_slips_{half}")
        out += [Case("lstm slips", f"{half}-{name}", "lstm", s, c)
                for name, (s, _, c, _) in slips.WRONG.items()]
    gaming = corpora.load("test_gaming")
    out += [Case("gaming", name, "makemore", "atomic/probs", gaming.RIGHT + code)
            for name, (code, _) in gaming.ATTEMPTS.items()]
    for half in ("tune", "holdout"):
        try:
            corpus = corpora.load(f"device_corpus_{half}")
        except FileNotFoundError:
            continue
        out += [Case(f"no device ({half})", name, lesson, s, c)
                for name, (lesson, s, c) in {**corpus.RIGHT, **corpus.WRONG}.items()]
    return out


# A difference as the rows print it (`maxdiff 2.9e-10`): a GPU rounds differently.
_ROUNDING = re.compile(r"\b\d(?:\.\d+)?e[-+]\d+\b")


def _words(text: str) -> str:
    return _ROUNDING.sub("<rounding>", text)


def told(result) -> tuple:
    """What a learner is told, without the numbers a GPU rounds differently."""
    error = result.error
    rows = tuple((c.tensor, c.verdict.value, c.rule.value if c.rule else None,
                  c.diagnosis.kind if c.diagnosis else None, _words(c.message or ""))
                 for c in result.checks)
    heldout = (result.heldout.passed, result.heldout.message or "") if result.heldout else None
    return (result.passed, result.rule.value if result.rule else None,
            error.kind.value if error else None, _words(error.message if error else "")[:300],
            rows, heldout, tuple(_words(n) for n in result.notes))


def compare_checks(device: str, sample: int) -> tuple[list[tuple[Case, tuple, tuple]], dict]:
    """Each case on the CPU and on `device`: (case, cpu's, the other's) for each, and how many
    the other device refused with an internal error, per corpus."""
    from tutor.config import Settings
    from tutor.core.engine import Engine

    by_corpus: dict[str, list[Case]] = defaultdict(list)
    for case in cases():
        by_corpus[case.corpus].append(case)
    chosen = [c for group in by_corpus.values() for c in group[::sample]]
    out = []
    internal: dict[str, int] = defaultdict(int)
    for lesson, pack in LESSONS.items():
        mine = [c for c in chosen if c.lesson == lesson]
        if not mine:
            continue
        engines = {d: Engine(Settings(device=d, pack=pack, timeout=20.0))
                   for d in ("cpu", "cuda")}
        try:
            for case in mine:
                got = {d: told(e.check(case.step, case.code)) for d, e in engines.items()}
                if got["cpu"] != got["cuda"] and "timeout" in (got["cpu"][2], got["cuda"][2]):
                    # A run stopped by its limit on a starved machine says nothing about the
                    # device: both are checked once more before a difference counts.
                    got = {d: told(e.check(case.step, case.code)) for d, e in engines.items()}
                if got["cuda"][2] == "internal":
                    internal[case.corpus] += 1
                out.append((case, got["cpu"], got["cuda"]))
        finally:
            for e in engines.values():
                e.close()
    return out, internal


def _cli(device: str, *args: str, home: str) -> dict:
    env = dict(os.environ, BACKPROP_TUTOR_HOME=home, PYTHONWARNINGS="ignore")
    run = subprocess.run([sys.executable, "-m", "tutor", "--device", device, *args],
                         capture_output=True, text=True, env=env, cwd=ROOT, timeout=900)
    try:
        return json.loads(run.stdout)
    except json.JSONDecodeError:
        return {"exit": run.returncode, "stderr": run.stderr.strip().splitlines()[-3:]}


def _training(run: dict) -> tuple:
    gradcheck = run.get("gradcheck") or {}
    return (run.get("status"), run.get("error"), gradcheck.get("passed"),
            tuple((c.get("tensor"), c.get("accepted", c.get("passed")))
                  for c in gradcheck.get("checks") or []),
            (run.get("exercise") or {}).get("passed") if isinstance(run.get("exercise"), dict)
            else run.get("exercise"))


def _graded(grade: dict) -> tuple:
    return (grade.get("score"), grade.get("max_score"),
            tuple((s.get("id"), s.get("score"), s.get("status"), s.get("rule"), s.get("message"))
                  for s in grade.get("steps") or []), grade.get("exit"))


def compare_runs(device: str) -> list[tuple[Case, tuple, tuple]]:
    """A short training run of every lesson and one graded lecture notebook, on each device."""
    sys.path.insert(0, str(ROOT / "tests"))
    import lecture_notebooks

    out = []
    with tempfile.TemporaryDirectory() as home:
        for lesson, pack in LESSONS.items():
            got = [_training(_cli(d, "--pack", pack, "train", "--reference", "--steps", "60",
                                  "--no-record", "--json", home=home)) for d in ("cpu", device)]
            out.append((Case("training", lesson, lesson, "train", ""), *got))
        notebook = lecture_notebooks.write(Path(home) / "lecture.ipynb",
                                           lecture_notebooks.notebook(
                                               [lecture_notebooks.ex1_one_cell()]))
        got = [_graded(_cli(d, "grade", "--json", "--train-steps", "60", str(notebook),
                            home=home)) for d in ("cpu", device)]
        out.append((Case("graded notebook", "lecture", "makemore", "grade", ""), *got))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("simulated", "cuda"), default="simulated")
    parser.add_argument("--sample", type=int, default=1, metavar="K",
                        help="every K-th case of each corpus (default: all)")
    parser.add_argument("--no-runs", action="store_true",
                        help="leave out the training runs and the graded notebook")
    args = parser.parse_args()
    if args.sample < 1:
        parser.error("--sample must be 1 or more")
    if args.device == "simulated":
        os.environ["BACKPROP_TUTOR_SIMULATED_DEVICE"] = "1"
    else:
        os.environ.pop("BACKPROP_TUTOR_SIMULATED_DEVICE", None)
        import torch

        if not torch.cuda.is_available():
            print("no CUDA device here: use --device simulated", file=sys.stderr)
            return 2
    os.environ.setdefault("BACKPROP_TUTOR_HOME", tempfile.mkdtemp(prefix="parity-"))
    started = time.monotonic()
    compared, internal = compare_checks(args.device, args.sample)
    if not args.no_runs:
        compared += compare_runs("cuda")
    per: dict[str, list[bool]] = defaultdict(list)
    differences = []
    for case, cpu, other in compared:
        same = cpu == other
        per[case.corpus].append(same)
        if not same:
            differences.append((case, cpu, other))
    for corpus, marks in per.items():
        errors = f", {internal[corpus]} internal errors" if internal.get(corpus) else ""
        print(f"{corpus}: {sum(marks)}/{len(marks)} identical{errors}")
    print(f"({time.monotonic() - started:.0f} s on {args.device})")
    for case, cpu, other in differences[:5]:
        print(f"differs: {case.corpus} {case.name} ({case.lesson} {case.step})")
        print(f"   cpu:   {str(cpu)[:400]}")
        print(f"   {args.device}: {str(other)[:400]}")
    total = sum(len(m) for m in per.values())
    same = sum(sum(m) for m in per.values())
    first = "; ".join(f"{c.corpus} {c.name}" for c, _, _ in differences[:3])
    print(f"parity: {same}/{total} identical" + (f" (first differences: {first})"
                                                  if differences else ""))
    return 0 if same == total else 1


if __name__ == "__main__":
    sys.exit(main())
