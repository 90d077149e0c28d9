"""How much rounding headroom acceptance needs, measured on the corpora of correct answers.

An answer is accepted when its distance from the float64 gradient is at most ROUNDING_HEADROOM
times autograd's own float32 distance (or a tiny fraction of the gradient's size; see
tutor/core/grading.py). This runs every correct answer we keep (both lessons' references, the
makemore corpora, the GPT lesson's other forms, the function steps' references) and prints, for
each graded gradient, that ratio; then the same for near-miss constants that must be refused
(GELU with 0.04472 for 0.044715). The headroom must sit between the largest correct ratio and
the smallest near-miss ratio.

    .venv/bin/python benchmarks/headroom.py
"""

from __future__ import annotations

import inspect
import warnings
from pathlib import Path

warnings.filterwarnings("ignore", message=".*NumPy.*")

import corpora  # noqa: E402  (benchmarks/corpora.py: the scripts run from benchmarks/)
import torch  # noqa: E402

from tutor.config import Settings  # noqa: E402
from tutor.core import grading  # noqa: E402
from tutor.core.engine import Engine  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RATIOS: list[tuple[float, str]] = []
_accepts = grading.accepts
_current = ["?"]


def _recording(ours64, ref32, ref64, headroom=None):
    """grading.accepts, recording err / autograd's own error for every graded tensor."""
    if ours64.numel():
        err = float((ours64 - ref64).abs().max())
        autograd = float((ref32.detach().to("cpu", torch.float64) - ref64).abs().max())
        floor = grading.RELATIVE_FLOOR * float(ref64.abs().max())
        # The ratio to the tolerance's larger part, in units of autograd's error.
        RATIOS.append((err / max(autograd, floor / (headroom or grading.ROUNDING_HEADROOM),
                                 1e-300),
                       f"{_current[0]} {_where()}"))
    return _accepts(ours64, ref32, ref64, headroom or grading.ROUNDING_HEADROOM)


def _where() -> str:
    """Which verdict asked: the main grade, the fresh batch or case, or the rule probe."""
    names = {f.function for f in inspect.stack()[2:12]}
    for fn, what in (("judge", "probe"), ("_heldout", "fresh batch"),
                     ("_fresh_verdict", "fresh case"), ("_fails", "lesson sizes"),
                     ("_with_cmp_rows", "cmp")):
        if fn in names:
            return what
    return "main"


def _run(engine: Engine, items: list[tuple[str, str, dict]]) -> list[tuple[float, str]]:
    RATIOS.clear()
    for step_id, code, prior in items:
        _current[0] = step_id
        engine.check(step_id, code, prior)
    return list(RATIOS)


def correct_answers() -> dict[str, list[tuple[str, str, dict]]]:
    corpus, answers, gpt = (corpora.load(n) for n in ("test_corpus_correct", "test_answers",
                                               "test_gpt_pack"))
    makemore = [(s.id, s.solution, {}) for s in corpus.PACK.gradient_steps]
    makemore += [(p.values[0], p.values[1], {}) for p in corpus.CASES]
    makemore += [(p.values[0], p.values[1], {}) for p in answers.CORRECT_CASES]
    makemore += [(step, code, prior) for step, prior, code in corpus.DOWNSTREAM.values()]
    gpt_items = [(s.id, s.solution, {}) for s in gpt.PACK.gradient_steps]
    gpt_items += [(step, code, {}) for step, code in gpt.CORRECT.items()]
    return {"makemore": makemore, "gpt": gpt_items}


def near_misses(gpt_pack) -> list[tuple[str, str, dict]]:
    fch = gpt_pack.step("block/fch").solution
    gelu = gpt_pack.step("functions/gelu_backward").solution
    return [("block/fch", fch.replace("0.044715", "0.04472"), {}),
            ("functions/gelu_backward", gelu.replace("0.044715", "0.04472"), {})]


def main() -> None:
    grading.accepts = _recording
    try:
        answers = correct_answers()
        engines = {"makemore": Engine(Settings(device="cpu")),
                   "gpt": Engine(Settings(device="cpu", pack=str(ROOT / "exercises" / "gpt")))}
        worst = []
        for lesson, items in answers.items():
            ratios = sorted(_run(engines[lesson], items), reverse=True)
            worst += ratios
            top = ", ".join(f"{r:.2f} ({s})" for r, s in ratios[:5])
            print(f"{lesson}: {len(items)} correct answers, {len(ratios)} graded tensors; "
                  f"largest ratios: {top}")
        misses = sorted(_run(engines["gpt"], near_misses(engines["gpt"].pack)))
        print("near misses (must be refused): "
              + ", ".join(f"{r:.2f} ({s})" for r, s in misses if r > 1))
        for probe, headroom in ((False, grading.ROUNDING_HEADROOM),
                                (True, grading.PROBE_HEADROOM)):
            def kept(rows, probe=probe):
                return [r for r, s in rows if s.endswith(" probe") == probe]
            largest = max(kept(worst))
            # Each near miss is refused by its largest ratio; the closest call is the smallest.
            per_miss: dict[str, float] = {}
            for r, s in misses:
                if s.endswith(" probe") == probe:
                    step = s.split(" ")[0]
                    per_miss[step] = max(per_miss.get(step, 0.0), r)
            closest = min(per_miss.values(), default=float("nan"))
            print(f"{'rule probe' if probe else 'values'}: largest correct ratio {largest:.2f}; "
                  f"the closest near miss reaches {closest:.2f}; headroom {headroom}")
    finally:
        grading.accepts = _accepts


if __name__ == "__main__":
    main()
