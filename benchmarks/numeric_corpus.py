"""How many derivatives estimated from values the check recognises, and how many worked-out ones
it takes for such, on the corpus written apart from the detector (tests/numeric_corpus_*.py).

    python benchmarks/numeric_corpus.py [--half tune|holdout]

Each answer is checked as a learner's would be (makemore, CPU). A difference quotient counts as
recognised when the check passes it and marks it `numeric` (the note; what `--refuse-numeric`
gives no points for). The held-out half is measured, never tuned on.
"""

from __future__ import annotations

import argparse

import corpora

from tutor.config import Settings
from tutor.core.engine import Engine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--half", choices=("tune", "holdout"), action="append")
    parser.add_argument("--verbose", action="store_true", help="name each answer missed")
    args = parser.parse_args()
    engine = Engine(Settings(device="cpu"))
    try:
        for half in args.half or ["tune", "holdout"]:
            corpus = corpora.load(f"numeric_corpus_{half}")
            missed, flagged, failed = [], [], []
            for name, (step, code) in corpus.NUMERIC.items():
                result = engine.check(step, code)
                if not result.passed:
                    failed.append(name)
                elif not result.numeric:
                    missed.append(name)
            for name, (step, code) in corpus.ANALYTIC.items():
                result = engine.check(step, code)
                if not result.passed:
                    failed.append(name)
                elif result.numeric:
                    flagged.append(name)
            numeric, analytic = len(corpus.NUMERIC), len(corpus.ANALYTIC)
            print(f"{half}: difference quotients recognised "
                  f"{numeric - len(missed) - len([f for f in failed if f in corpus.NUMERIC])}"
                  f"/{numeric}; worked-out answers taken for one {len(flagged)}/{analytic}; "
                  f"not passed at all {len(failed)}")
            if args.verbose:
                for what, names in (("missed", missed), ("flagged", flagged),
                                    ("not passed", failed)):
                    if names:
                        print(f"    {what}: {', '.join(names)}")
    finally:
        engine.close()


if __name__ == "__main__":
    main()
