"""The slip corpora written apart from the diagnosis code: conv, and two lessons `pack new`
makes (an attention head and a 2-D CNN with max-pool, from tests/packs/forward/slips_*.py).

Every verdict holds on both halves: each right answer accepted, each slip refused, never an
internal error. The tune half, which the rules of tutor/core/slips.py were shaped on, must have
its slips named in the slip's own words; the held-out half is only measured
(benchmarks/diagnoses.py prints its figures first), so that they keep meaning something.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from tutor.authoring.new import make
from tutor.config import Settings
from tutor.core.engine import Engine

ROOT = Path(__file__).resolve().parent.parent
FORWARD = ROOT / "tests" / "packs" / "forward"
LESSONS = {"conv": None, "attention": ("slips_attention.py", "attention_pack"),
           "cnn2d": ("slips_cnn2d.py", "cnn2d_pack")}
# The share of the tune half's slips named in their own words, at the least.
NAMED_IN_TUNE = 0.9


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    made: dict[str, Engine] = {}

    def get(lesson: str) -> Engine:
        if lesson not in made:
            source = LESSONS[lesson]
            if source is None:
                pack = str(ROOT / "exercises" / lesson)
            else:
                out = tmp_path_factory.mktemp(lesson) / source[1]
                make(FORWARD / source[0], out, pack_id=source[1])
                pack = str(out)
            made[lesson] = Engine(Settings(device="cpu", pack=pack))
        return made[lesson]

    yield get
    for engine in made.values():
        engine.close()


def _corpus(lesson: str, half: str):
    return importlib.import_module(f"{lesson}_slips_{half}")


def _named(result, tensor: str, words) -> bool:
    row = next((c for c in result.checks if c.tensor == tensor), None)
    if row is None or row.diagnosis is None:
        return False
    said = row.message.lower()
    return any(w.lower() in said for w in words)


# Each lesson's halves; the generated lessons have second halves, written later.
HALVES = [(lesson, half) for lesson in sorted(LESSONS)
          for half in ("tune", "tune2", "holdout", "holdout2")
          if (ROOT / "tests" / f"{lesson}_slips_{half}.py").is_file()]


@pytest.mark.slow
@pytest.mark.parametrize("lesson, half", HALVES)
def test_every_verdict_holds(engines, lesson, half):
    engine = engines(lesson)
    corpus = _corpus(lesson, half)
    for name, (step, _tensor, code, *_rest) in corpus.RIGHT.items():
        result = engine.check(step, code)
        assert result.passed, (name, result.error, [c.message for c in result.checks])
    for name, (step, _tensor, code, *_rest) in corpus.WRONG.items():
        result = engine.check(step, code)
        assert not result.passed, name
        assert result.error is None or result.error.kind.value != "internal", (name, result)


@pytest.mark.slow
@pytest.mark.parametrize("lesson", sorted(LESSONS))
def test_the_tune_half_s_slips_are_named_in_their_own_words(engines, lesson):
    engine = engines(lesson)
    corpus = _corpus(lesson, "tune")
    unnamed = [name for name, (step, tensor, code, _slip, words) in corpus.WRONG.items()
               if not _named(engine.check(step, code), tensor, words)]
    share = 1 - len(unnamed) / len(corpus.WRONG)
    assert share >= NAMED_IN_TUNE, f"{share:.0%} named; not: {unnamed}"
