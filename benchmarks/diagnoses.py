"""How many wrong answers get a specific diagnosis, per lesson and per family.

Runs every wrong answer we keep (the catalogued mistakes of every pack, tests/test_corpus_wrong.py,
tests/test_corpus_families.py, tests/test_smallest_change.py, and the LSTM lesson's
tests/test_corpus_lstm.py, tests/lstm_slips_tune.py and tests/lstm_slips_holdout.py) and counts,
per lesson, the ones
refused with a diagnosis that names the mistake ("specific") and the ones refused with only
"X is wrong (k of N)" ("generic"), and any that were accepted (there must be none). Then the
mistakes `pack check` makes of every step's solution, one per family where it applies
(tutor/evaluator/packcheck.py `family_mistakes`), with the share named per family. Last, on the
fork path
and on the spawn path, how much longer a refused check takes than the same step's right answer:
the diagnosis's cost, the child that runs the changed programs of the learner's code
(tutor/core/smallest.py) included. Each check waits, as a learner does, until the engine's next
child
is ready.

First, the slip corpora written apart from the diagnosis code (conv, and two lessons `pack new`
makes: an attention head and a 2-D CNN with max-pool), held-out half first.

    .venv/bin/python benchmarks/diagnoses.py [--slips-only] [--verbose]
"""

from __future__ import annotations

import statistics
import time
import warnings
from collections import Counter, defaultdict
from pathlib import Path

warnings.filterwarnings("ignore", message=".*NumPy.*")

import corpora  # noqa: E402  (benchmarks/corpora.py: the scripts run from benchmarks/)

from tutor.config import Settings  # noqa: E402
from tutor.core.engine import Engine  # noqa: E402
from tutor.pack.model import load_pack  # noqa: E402
from tutor.values.results import CheckResult  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
# Each lesson measured, by the pack its engine loads.
LESSONS = {"makemore": "makemore", "gpt": str(ROOT / "exercises" / "gpt"),
           "lstm": str(ROOT / "exercises" / "lstm"), "conv": str(ROOT / "exercises" / "conv")}


def wrong_answers() -> dict[str, list[tuple[str, str | None, str]]]:
    """lesson -> (step, graded tensor or None, code)."""
    out: dict[str, list] = {lesson: [] for lesson in LESSONS}
    for lesson, pack in ((k, load_pack(None if k == "makemore" else Path(v)))
                         for k, v in LESSONS.items()):
        for step in pack.steps:
            if step.kind.trained:
                continue
            out[lesson] += [(step.id, m.tensor or step.checks[0], m.code)
                            for m in step.mistakes]
    corpus = corpora.load("test_corpus_wrong")
    out["makemore"] += [(s, t, c) for s, t, c, _ in corpus.WRONG.values()]
    families = corpora.load("test_corpus_families")
    for lesson, step, tensor, code, _, _ in families.WRONG.values():
        out[lesson].append((step, tensor, code))
    smallest = corpora.load("test_smallest_change")
    for lesson, step, tensor, code, _ in smallest.WRONG.values():
        out[lesson].append((step, tensor, code))
    # The LSTM lesson's corpora: the slips of its corpus, and both halves of the slips the same
    # mistake is named by everywhere (the held-out half was never tuned on).
    corpora.load("test_corpus_lstm")  # the halves start from its right answers
    for name in ("test_corpus_lstm", "lstm_slips_tune", "lstm_slips_holdout"):
        out["lstm"] += [(s, t, c) for s, t, c, _ in corpora.load(name).WRONG.values()]
    return out


def generated(engine, lesson: str) -> list[tuple[str, str, str, str]]:
    """(family, step, changed line, code): each step's first wrong slip of each family."""
    from tutor.evaluator.packcheck import wrong_slips

    return [(family, step.id, line, code) for step in engine.pack.gradient_steps
            for family, line, code, _ in wrong_slips(engine, step)]


def classify(result: CheckResult, tensor: str | None) -> str:
    if result.error:
        return "error"
    if result.passed:
        return "accepted"
    checks = result.checks
    check = next((c for c in checks if tensor in (c.tensor, c.grad)), None) if tensor \
        else None
    wrong = [check] if check else [c for c in checks if not c.accepted]
    if any(c.diagnosis for c in wrong):
        return "specific"
    return "generic"


def _ready(engine: Engine) -> None:
    """As the worker does after each check, and as a learner's reading gives it time to."""
    engine.prepare()
    for _ in range(600):
        if engine.ready():
            return
        time.sleep(0.01)


def refusal_costs(path: str, items: dict[str, list[tuple[str, str]]]) -> dict[str, list[float]]:
    """lesson -> seconds each refused check took past the same step's right answer."""
    extra: dict[str, list[float]] = defaultdict(list)
    for lesson, checks in items.items():
        engine = Engine(Settings(device="cpu", pack=LESSONS[lesson], isolation=path))
        bare: dict[str, float] = {}
        try:
            for step, code in checks:
                if step not in bare:
                    solution = engine.pack.step(step).solution
                    _ready(engine)
                    engine.check(step, solution)  # warm: the step's caches
                    runs = []
                    for _ in range(3):
                        _ready(engine)
                        t = time.perf_counter()
                        engine.check(step, solution)
                        runs.append(time.perf_counter() - t)
                    bare[step] = min(runs)
                _ready(engine)
                t = time.perf_counter()
                result = engine.check(step, code)
                if not result.passed and not result.error:
                    extra[lesson].append(time.perf_counter() - t - bare[step])
        finally:
            engine.close()
    return extra


# The slip corpora written apart from the diagnosis code, per lesson: the held-out half is
# measured and never tuned on; the generated lessons are made by `pack new` from their forward
# files (tests/packs/forward/) each time, as a course would make them.
SLIP_CORPORA = {"conv": ("conv_slips", str(ROOT / "exercises" / "conv")),
                "attention (generated)": ("attention_slips", "slips_attention.py:attention_pack"),
                "cnn2d (generated)": ("cnn2d_slips", "slips_cnn2d.py:cnn2d_pack")}


def _slip_pack(where: str, folder: Path) -> str:
    """The pack's folder; for `FILE.py:ID`, the lesson `pack new` makes of the forward file."""
    if ".py:" not in where:
        return where
    from tutor.authoring.new import make

    source, pack_id = where.split(":")
    out = folder / pack_id
    make(ROOT / "tests" / "packs" / "forward" / source, out, pack_id=pack_id)
    return str(out)


def slip_kind(result: CheckResult, tensor: str, words: tuple[str, ...]) -> str:
    """specific (a diagnosis with one of the slip's words: a runtime error's message too, where
    it says what the slip is, as a product's transposed operand), other (a diagnosis without
    them: read it, it may mislead), generic (no diagnosis: only the place), accepted or error."""
    if result.error:
        said = result.error.message.lower()
        return "specific" if any(w.lower() in said for w in words) else "error"
    if result.passed:
        return "accepted"
    row = next((c for c in result.checks if c.tensor == tensor), None)
    if row is None or row.accepted:
        row = next((c for c in result.checks if not c.accepted), None)
    if row is None:
        return "accepted"
    if row.diagnosis is None:
        return "generic"
    said = row.message.lower()
    return "specific" if any(w.lower() in said for w in words) else "other"


HALVES = ("holdout8", "holdout7", "holdout6", "holdout5", "holdout4", "holdout3", "holdout2",
          "holdout", "tune", "tune2", "tune3", "tune4", "tune5", "tune6", "tune7", "tune8", "tune9",
          "tune10", "tune11", "tune12")


def slip_corpora(verbose: bool = False, halves: tuple[str, ...] = HALVES,
                 lessons: tuple[str, ...] | None = None) -> None:
    """Per lesson, the held-out halves first: how many of its slips are named."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        for lesson, (corpus, where) in SLIP_CORPORA.items():
            if lessons and lesson.split()[0] not in lessons:
                continue
            try:
                pack = _slip_pack(where, Path(tmp))
            except Exception as exc:  # noqa: BLE001 - a lesson that cannot be made is a figure
                print(f"{lesson}: the lesson could not be made: {exc}")
                continue
            engine = Engine(Settings(device="cpu", pack=pack))
            try:
                for half in halves:
                    try:
                        module = corpora.load(f"{corpus}_{half}")
                    except FileNotFoundError:
                        continue  # second halves only where they were written
                    counts: Counter = Counter()
                    shown = []
                    for name, (step, tensor, code, slip, words) in module.WRONG.items():
                        kind = slip_kind(engine.check(step, code), tensor, tuple(words))
                        counts[kind] += 1
                        # A held-out half's misses are named only when asked: they are
                        # measured, never read while tuning.
                        if (kind != "specific" and half.startswith("tune")) or verbose:
                            result = engine.check(step, code)
                            rows = [c.message for c in result.checks if not c.accepted]
                            said = result.error.message if result.error else (rows or [""])[0]
                            shown.append(f"{kind}: {name} ({slip}): {said[:160]}")
                    right = sum(engine.check(step, code).passed
                                for step, _t, code, *_ in module.RIGHT.values())
                    total = sum(counts.values())
                    print(f"{lesson} {half}: {counts['specific']}/{total} slips named "
                          f"({100 * counts['specific'] / max(total, 1):.0f} %), "
                          f"{counts['other']} diagnosed in other words, {counts['generic']} "
                          f"generic, {counts['accepted']} accepted, {counts['error']} errors; "
                          f"right answers accepted {right}/{len(module.RIGHT)}")
                    for line in shown:
                        print("   ", line)
            finally:
                engine.close()


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slips-only", action="store_true",
                        help="only the slip corpora written apart (held-out half first)")
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--half", action="append", choices=HALVES,
                        help="only these halves of the slip corpora (repeatable)")
    parser.add_argument("--lesson", action="append", choices=("conv", "attention", "cnn2d"),
                        help="only these lessons' slip corpora (repeatable)")
    args = parser.parse_args()
    slip_corpora(args.verbose, tuple(args.half or HALVES), tuple(args.lesson or ()))
    if args.slips_only:
        return
    engines = {lesson: Engine(Settings(device="cpu", pack=pack))
               for lesson, pack in LESSONS.items()}
    refused: dict[str, list[tuple[str, str]]] = defaultdict(list)

    def timed(lesson: str, step: str, code: str):
        refused[lesson].append((step, code))
        return engines[lesson].check(step, code)

    for lesson, items in wrong_answers().items():
        counts: Counter = Counter()
        generic = []
        for step, tensor, code in items:
            kind = classify(timed(lesson, step, code), tensor)
            counts[kind] += 1
            if kind in ("generic", "accepted"):
                generic.append(f"{kind}: {step} {code.strip().splitlines()[-1][:70]}")
        print(f"{lesson}: {len(items)} wrong answers: {counts['specific']} specific, "
              f"{counts['generic']} generic, {counts['accepted']} accepted, "
              f"{counts['error']} errors")
        for line in generic:
            print("   ", line)
    for lesson, engine in engines.items():
        per: dict[str, Counter] = defaultdict(Counter)
        generic = []
        for family, step, line, code in generated(engine, lesson):
            kind = classify(timed(lesson, step, code), None)
            per[family][kind] += 1
            if kind != "specific":
                generic.append(f"{family} {kind}: {step} {line[:70]}")
        shares = ", ".join(f"{f} {c['specific']}/{sum(c.values())}" for f, c in per.items())
        total = sum(c["specific"] for c in per.values())
        print(f"{lesson} generated slips named per family: {shares} "
              f"(all: {total}/{sum(sum(c.values()) for c in per.values())})")
        for line in generic:
            print("   ", line)
    for engine in engines.values():
        engine.close()
    for path in ("fork", "spawn"):
        for lesson, times in refusal_costs(path, refused).items():
            ms = sorted(1000 * x for x in times)
            print(f"{path} path, {lesson}: a refused check takes {statistics.median(ms):.0f} ms "
                  f"more than the step's right answer (median; 90th percentile "
                  f"{ms[int(0.9 * len(ms))]:.0f} ms, max {ms[-1]:.0f} ms) over {len(ms)} checks")


if __name__ == "__main__":
    main()
