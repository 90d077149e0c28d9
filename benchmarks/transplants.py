"""Every catalogued slip, carried to every other step that does the same thing, and named there.

A mistake the pack catalogues on one step (one layer's convolution, one tanh) is the step's
solution with a few tokens changed; `tutor/authoring/transplant.py` makes the same change on
each other step whose solution is the same code up to its names and numbers. Each transplant
that still runs and is refused there must get a diagnosis that names something (not only "d…
is wrong"): the share named is printed per lesson, with every transplant left generic.

    .venv/bin/python benchmarks/transplants.py [--pack DIR ...] [--verbose]
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections import Counter
from pathlib import Path

warnings.filterwarnings("ignore", message=".*NumPy.*")

from tutor.config import Settings  # noqa: E402
from tutor.core.engine import Engine  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from transplanted import transplants  # noqa: E402

LESSONS = {"makemore": "makemore", "gpt": str(ROOT / "exercises" / "gpt"),
           "lstm": str(ROOT / "exercises" / "lstm"), "conv": str(ROOT / "exercises" / "conv")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pack", action="append", default=[], help="another pack's folder")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    lessons = {**LESSONS, **{Path(p).name: p for p in args.pack}}
    for lesson, pack in lessons.items():
        engine = Engine(Settings(device="cpu", pack=pack))
        counts: Counter = Counter()
        generic = []
        try:
            for case in transplants(engine.pack):
                result = engine.check(case.step, case.code)
                if result.error or result.passed:
                    counts["not a slip there"] += 1
                    continue
                row = next((c for c in result.checks if c.tensor == case.tensor), None)
                if row is None or row.accepted:
                    counts["not a slip there"] += 1
                    continue
                named = row.diagnosis is not None
                counts["named" if named else "generic"] += 1
                if not named or args.verbose:
                    generic.append(f"{'named' if named else 'GENERIC'} {case.origin} -> "
                                   f"{case.step}: {row.message[:150]}")
        finally:
            engine.close()
        total = counts["named"] + counts["generic"]
        print(f"{lesson}: {counts['named']}/{total} transplanted slips named "
              f"({counts['not a slip there']} transplants are no slip there)")
        for line in generic:
            print("   ", line)


if __name__ == "__main__":
    main()
