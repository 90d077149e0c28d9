"""How many wrong answers get a specific diagnosis, per lesson.

Runs every wrong answer we keep (the catalogued mistakes of both packs, tests/test_corpus_wrong.py
and tests/test_corpus_families.py) and counts, per lesson, the ones refused with a diagnosis that
names the mistake ("specific") and the ones refused with only "X is wrong (k of N)" ("generic"),
and any that were accepted (there must be none).

    .venv/bin/python benchmarks/diagnoses.py
"""

from __future__ import annotations

import warnings
from collections import Counter
from pathlib import Path

warnings.filterwarnings("ignore", message=".*NumPy.*")

import corpora  # noqa: E402  (benchmarks/corpora.py: the scripts run from benchmarks/)

from tutor.config import Settings  # noqa: E402
from tutor.core.engine import Engine  # noqa: E402
from tutor.pack.model import load_pack  # noqa: E402
from tutor.values.results import CheckResult  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def wrong_answers() -> dict[str, list[tuple[str, str | None, str]]]:
    """lesson -> (step, graded tensor or None, code)."""
    out: dict[str, list] = {"makemore": [], "gpt": []}
    for lesson, pack in (("makemore", load_pack()), ("gpt", load_pack(ROOT / "exercises" / "gpt"))):
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
    return out


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


def main() -> None:
    engines = {"makemore": Engine(Settings(device="cpu")),
               "gpt": Engine(Settings(device="cpu", pack=str(ROOT / "exercises" / "gpt")))}
    for lesson, items in wrong_answers().items():
        counts: Counter = Counter()
        generic = []
        for step, tensor, code in items:
            kind = classify(engines[lesson].check(step, code), tensor)
            counts[kind] += 1
            if kind in ("generic", "accepted"):
                generic.append(f"{kind}: {step} {code.strip().splitlines()[-1][:70]}")
        print(f"{lesson}: {len(items)} wrong answers: {counts['specific']} specific, "
              f"{counts['generic']} generic, {counts['accepted']} accepted, "
              f"{counts['error']} errors")
        for line in generic:
            print("   ", line)


if __name__ == "__main__":
    main()
