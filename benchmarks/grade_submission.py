"""Does grading one complete submission fit a grading platform's container?

Gradescope's default container has about half a CPU and 768 MB of memory; the target is a
complete makemore submission (the lecture's notebook filled in: exercises 1 to 4, the training
graded by a short run) graded in at most 3 minutes on one core, within 768 MB for the whole
process tree. This runs `backprop-tutor grade NOTEBOOK --format gradescope` pinned to one core
(os.sched_setaffinity, which every process it starts inherits), samples the proportional set size
(Pss, /proc/PID/smaps_rollup) of every process in its tree ten times a second and sums it (forked
processes share pages: Pss counts a shared page once across them, where RSS would count it in
each), and prints the wall time, the peak, and each as a ratio to its target (at most 1 meets
it). Run from the repository root:

    .venv/bin/python benchmarks/grade_submission.py [--train-steps N] [--file SUBMISSION]

The last two lines are `time ratio: X.XX` and `memory ratio: X.XX`. Linux only.

With `--class N` it grades a class instead: N varied submissions written to a temporary folder
(lecture notebooks filled in, complete and right, with a few wrong steps made by small edits such
as a flipped sign or a missing `/ n`, or partial; a few percent-format `.py` files and the tutor's
workbook; one unreadable file; two students' `hw.ipynb` in two sub-folders), graded by one
`backprop-tutor grade --report DIR` pinned to one core (so its `--jobs` default is one process),
its memory sampled the same way. It prints the count, the wall time in all and per submission,
the peak, whether report.html and grades.csv were written with one row per submission, and the
ratios of the time per submission to the one-submission target and of the peak to 768 MB:

    .venv/bin/python benchmarks/grade_submission.py --class 50 [--train-steps K]

(K is 100 by default here.) The last two lines are then `class time per submission ratio: X.XX`
and `class memory ratio: X.XX`.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

TIME_TARGET_S = 180.0
MEMORY_TARGET_MB = 768.0
CLASS_TRAIN_STEPS = 100


def _children() -> dict[int, list[int]]:
    """Every process's children, from /proc/*/stat."""
    out: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # The command name is in parentheses and may hold spaces: the ppid follows the last ")".
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        out.setdefault(ppid, []).append(int(entry))
    return out


def _tree(pid: int) -> list[int]:
    children, found, todo = _children(), [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        todo += children.get(p, [])
    return found


def _pss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass  # gone, or not ours to read
    return 0


def tree_pss_mb(pid: int) -> float:
    return sum(_pss_kb(p) for p in _tree(pid)) / 1024


def run_sampled(command: list[str], home: str) -> tuple[int, float, float, str, str]:
    """Runs `command` (the tutor from this checkout, its state in `home`), sampling its process
    tree's Pss ten times a second: (exit status, wall seconds, peak MB, stdout, stderr). Its
    output goes to files, so that a chatty run cannot fill a pipe and stall."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "BACKPROP_TUTOR_HOME": home}
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        started = time.monotonic()
        proc = subprocess.Popen(command, env=env, stdout=out, stderr=err, text=True)
        peak = 0.0
        while proc.poll() is None:
            peak = max(peak, tree_pss_mb(proc.pid))
            time.sleep(0.1)
        wall = time.monotonic() - started
        out.seek(0)
        err.seek(0)
        return proc.returncode, wall, peak, out.read(), err.read()


def complete_submission(folder: Path) -> Path:
    import lecture_notebooks as notebooks

    return notebooks.write(folder / "makemore_part4_backprop.ipynb",
                           notebooks.notebook([notebooks.ex1_one_cell()]))


# --- a class of submissions -------------------------------------------------------------------

# Small slips, each an edit of the lecture's own answer: (where, the text, what it becomes).
# "ex1:T" is exercise 1's line for tensor T; ex2, ex3 and train are the other exercises' cells.
SLIPS = [
    ("ex1:logprobs", "= -1.0 / n", "= 1.0 / n"),  # a sign flipped
    ("ex1:probs", "dlogprobs / probs", "dlogprobs * probs"),
    ("ex1:counts_sum", "-(counts_sum ** -2)", "(counts_sum ** -2)"),  # a sign flipped
    ("ex1:counts_sum_inv", ".sum(1, keepdim=True)", ".sum(0, keepdim=True)"),  # the wrong axis
    ("ex1:hpreact", "(1 - h ** 2)", "(1 - h)"),
    ("ex1:bndiff2", " / (n - 1)", ""),  # the Bessel correction left out
    ("ex1:hprebn", "dbnmeani / n", "dbnmeani"),  # a missing / n
    ("ex1:emb", "dembcat.view(emb.shape)", "dembcat.view(emb.shape).flip(0)"),
    ("ex2", "dlogits /= n", ""),  # a missing / n
    ("ex2", "-= 1", "+= 1"),  # a sign flipped
    ("ex3", "- dhpreact.sum(0)", "+ dhpreact.sum(0)"),  # a sign flipped
    ("train", "    dlogits /= n\n", ""),  # a missing / n in the training loop
]

EX2_BLANK = ("# backward pass\n\n# -----------------\n# YOUR CODE HERE :)\ndlogits = None # TODO\n"
             "# -----------------\n\n#cmp('logits', dlogits, logits)")
EX3_BLANK = ("# backward pass\n\n# -----------------\n# YOUR CODE HERE :)\ndhprebn = None # TODO\n"
             "# -----------------\n\n# cmp('hprebn', dhprebn, hprebn)")
TRAIN_BLANK = ("    # -----------------\n    # YOUR CODE HERE :)\n"
               "    dC, dW1, db1, dW2, db2, dbngain, dbnbias = None, None, None, None, None, "
               "None, None\n    grads = [dC, dW1, db1, dW2, db2, dbngain, dbnbias]\n"
               "    # -----------------")


def _notebook(rng: random.Random, slips: int = 0, partial: bool = False) -> dict:
    """The lecture's notebook filled in: complete, with `slips` of SLIPS, or (`partial`) stopped
    somewhere in exercise 1, 2 or 3 with the starter's placeholders after."""
    import lecture_notebooks as L

    lines = dict(L.EX1_LINES)
    parts = {"ex2": L.EX2_BACKWARD, "ex3": L.EX3_BACKWARD, "train": L.TRAIN_BACKWARD}
    for where, old, new in rng.sample(SLIPS, slips):
        if where.startswith("ex1:"):
            tensor = where[4:]
            lines[tensor] = lines[tensor].replace(old, new)
        else:
            parts[where] = parts[where].replace(old, new)
    ex1_lines = list(lines.items())
    cmps = True
    if partial:
        stop = rng.choice(["ex1", "ex2", "ex3"])
        if stop == "ex1":
            ex1_lines, cmps = ex1_lines[: rng.randint(1, len(ex1_lines) - 1)], False
            parts["ex2"] = EX2_BLANK
        if stop in ("ex1", "ex2"):
            parts["ex3"] = EX3_BLANK
        parts["train"] = TRAIN_BLANK
    ex1 = (L.ex1_cell_per_line(ex1_lines) if cmps and rng.random() < 0.3
           else [L.ex1_one_cell(ex1_lines, cmps=cmps)])
    return L.notebook(ex1, ex2=parts["ex2"], ex3=parts["ex3"], backward=parts["train"])


def _percent(rng: random.Random, complete: bool) -> str:
    """A percent-format file of `# %% STEP_ID` cells (as `backprop-tutor export` writes them):
    every step and the training loop, or the first few steps of exercise 1."""
    from tutor.pack.model import find_pack, load_pack
    from tutor.training.plan import training_code

    pack = load_pack(find_pack("makemore"))
    steps = [s for s in pack.steps if not s.kind.trained]
    if not complete:
        steps = [s for s in steps if s.exercise == 1][: rng.randint(2, 8)]
    cells = [f"# %% {s.id}\n{s.solution.strip()}\n" for s in steps]
    if complete:
        cells.append(f"# %% train/loop\n{training_code(pack)}")
    return "# my answers\n\n" + "\n".join(cells)


def _workbook(rng: random.Random) -> dict:
    """The tutor's workbook with most of its `%%check` cells answered (the rest left as given)."""
    from tutor.config import Settings
    from tutor.pack.model import find_pack, load_pack
    from tutor.session.workbook import workbook

    pack = load_pack(find_pack("makemore"))
    document = workbook(pack, Settings(device="cpu"))
    for cell in document["cells"]:
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if cell["cell_type"] == "code" and source.startswith("%%check ") and rng.random() < 0.8:
            sid = source.split("\n", 1)[0].split()[1]
            cell["source"] = f"%%check {sid}\n{pack.step(sid).solution.strip()}\n"
    return document


def class_submissions(folder: Path, count: int, seed: int = 0) -> list[Path]:
    """`count` submissions in `folder`, in a shuffled order, each a file of its own. Besides the
    lecture notebooks: one unreadable file, two `hw.ipynb` in sub-folders, and (from a class of
    ten) two percent-format files and a workbook."""
    import lecture_notebooks as L

    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    kinds = ["unreadable", "hw-complete", "hw-slips"]
    if count >= 10:
        kinds += ["percent-complete", "percent-partial", "workbook"]
    kinds = kinds[:count]
    rest = count - len(kinds)
    wrong, partial = round(rest * 0.35), round(rest * 0.25)
    kinds += (["slips"] * wrong + ["partial"] * partial
              + ["complete"] * (rest - wrong - partial))
    rng.shuffle(kinds)
    paths = []
    for i, kind in enumerate(kinds, 1):
        name = folder / f"student_{i:03d}"
        if kind == "unreadable":
            path = name.with_suffix(".ipynb")
            path.write_bytes(b"\x00\x01 this is not a notebook")
        elif kind.startswith("hw-"):
            sub = folder / ("section_a" if kind == "hw-complete" else "section_b")
            sub.mkdir(exist_ok=True)
            path = L.write(sub / "hw.ipynb",
                           _notebook(rng, slips=0 if kind == "hw-complete" else 1))
        elif kind.startswith("percent-"):
            path = name.with_suffix(".py")
            path.write_text(_percent(rng, complete=kind == "percent-complete"))
        elif kind == "workbook":
            path = L.write(name.with_suffix(".ipynb"), _workbook(rng))
        else:
            slips = rng.randint(1, 3) if kind == "slips" else 0
            path = L.write(name.with_suffix(".ipynb"),
                           _notebook(rng, slips=slips, partial=kind == "partial"))
        paths.append(path)
    return paths


def grade_class(count: int, train_steps: int, core: int) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "class"
        paths = class_submissions(folder, count)
        report = Path(tmp) / "report"
        command = [sys.executable, "-m", "tutor", "grade", "--report", str(report),
                   "--train-steps", str(train_steps), "--device", "cpu", *map(str, paths)]
        code, wall, peak, stdout, stderr = run_sampled(command, tmp)
        page, table = report / "report.html", report / "grades.csv"
        rows = list(csv.reader(table.open(encoding="utf-8"))) if table.exists() else []
        files = [r[0] for r in rows[1:]]
        keys = [str(p.relative_to(folder)) for p in paths]
        scores = [float(r[1]) for r in rows[1:] if r[1]]
        written = page.exists()
        said = stdout.strip().replace(str(report), "DIR")
        if code != 0:
            print(f"grade --report exited {code}: {stderr.strip()[-2000:]}", file=sys.stderr)
        elif stderr.strip():
            print(f"grade --report said: {stderr.strip()[-1000:]}", file=sys.stderr)
    one_row_each = files == keys
    print(f"graded a class of {count} submissions on core {core} with --train-steps "
          f"{train_steps} (--jobs left to its default: one process on one core): {said}")
    if scores:
        print(f"scores: {min(scores):g} to {max(scores):g}, "
              f"{sum(s == max(scores) for s in scores)} at the top")
    print(f"submissions: {count}")
    print(f"wall time: {wall:.1f} s in all, {wall / count:.2f} s per submission "
          f"(target {TIME_TARGET_S:.0f} s for one)")
    print(f"peak proportional set size of the process tree: {peak:.0f} MB "
          f"(target {MEMORY_TARGET_MB:.0f} MB)")
    print(f"report.html written: {'yes' if written else 'no'}; grades.csv written: "
          f"{'yes' if rows else 'no'}, {len(files)} rows for {count} submissions, "
          f"one per submission in order: {'yes' if one_row_each else 'no'}")
    print(f"class time per submission ratio: {wall / count / TIME_TARGET_S:.2f}")
    print(f"class memory ratio: {peak / MEMORY_TARGET_MB:.2f}")
    return 0 if code == 0 and one_row_each and written else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train-steps", type=int, help="steps of the graded training run "
                        f"(default: grade's own; {CLASS_TRAIN_STEPS} with --class)")
    parser.add_argument("--file", help="grade this submission instead of a complete notebook")
    parser.add_argument("--class", dest="class_size", type=int, metavar="N",
                        help="grade a class of N varied submissions with `grade --report`")
    args = parser.parse_args()
    if args.class_size is not None and (args.class_size < 1 or args.file):
        parser.error("--class takes a count of at least 1, and no --file")
    core = min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {core})
    if args.class_size is not None:
        return grade_class(args.class_size, args.train_steps or CLASS_TRAIN_STEPS, core)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(args.file) if args.file else complete_submission(Path(tmp))
        out = Path(tmp) / "results.json"
        command = [sys.executable, "-m", "tutor", "--device", "cpu", "grade", str(path),
                   "--format", "gradescope", "--out", str(out)]
        if args.train_steps:
            command += ["--train-steps", str(args.train_steps)]
        code, wall, peak, _, stderr = run_sampled(command, tmp)
        if code != 0 or not out.exists():
            print(f"grade failed ({code}): {stderr.strip()[-2000:]}", file=sys.stderr)
            return 1
        results = json.loads(out.read_text())
    passed = sum(t["status"] == "passed" for t in results["tests"])
    print(f"graded {path.name} on core {core}: score {results['score']:g}, "
          f"{passed}/{len(results['tests'])} steps passed")
    print(f"wall time: {wall:.1f} s (target {TIME_TARGET_S:.0f} s)")
    print(f"peak proportional set size of the process tree: {peak:.0f} MB "
          f"(target {MEMORY_TARGET_MB:.0f} MB)")
    print(f"time ratio: {wall / TIME_TARGET_S:.2f}")
    print(f"memory ratio: {peak / MEMORY_TARGET_MB:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
