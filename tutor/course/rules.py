"""What a submission must do to earn its points, as an instructor sets it for a class: the graded
training run's length and the loss it must reach, whether a step must follow its line's rule, and
how long grading one submission may take (the platform's time limit, less a margin, so that a
results file is always written in time).

The rules travel with the autograder as one small JSON file, `grading.json`: in the Gradescope
bundle (it lands in `source/`) and in a PrairieLearn question's `tests/` folder. The grading run
inside the container reads it from there, so the instructor's choice is made once, when the
bundle or the question is built, and every submission is graded by it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from tutor.course.scoring import TRAIN_STEPS, GradingRules
from tutor.pack.model import Pack

CONFIG_NAME = "grading.json"
_KEYS = ("pack", "train_steps", "train_loss", "strict_rule", "time_budget", "refuse_numeric")
# Gradescope stops an autograder after 10 minutes unless the assignment says otherwise; grading
# stops a minute before, so the results file is written in any case.
GRADESCOPE_BUDGET = 540.0
PLATFORM_MARGIN = 30.0  # seconds kept free before a platform's own time limit


class RulesError(ValueError):
    """The rules cannot be read or make no sense: why, in one line."""


def rules_json(rules: GradingRules, pack: Pack) -> str:
    # The pack's id is written for the instructor who opens the file; it is not read back.
    return json.dumps({"pack": pack.id, "train_steps": rules.train_steps,
                       "train_loss": rules.train_loss, "strict_rule": rules.strict_rule,
                       "time_budget": rules.time_budget,
                       "refuse_numeric": rules.refuse_numeric}, indent=2) + "\n"


def default_train_steps(pack: Pack) -> int:
    """TRAIN_STEPS, or the pack's whole run where that is shorter: long enough for the loss to
    fall measurably, short enough for a grading container's time limit."""
    from tutor.training.plan import TrainingSettings

    try:
        full = TrainingSettings.from_pack(pack).steps
    except (KeyError, ValueError):  # a pack with no training exercise trains nothing
        return TRAIN_STEPS
    return max(1, min(TRAIN_STEPS, full))


def check_values(train_steps: int | None, train_loss: float | None,
                 time_budget: float | None = None) -> None:
    """RulesError when a value cannot be graded by: a run of no steps, a target no loss meets,
    no time to grade in."""
    if train_steps is not None and train_steps < 1:
        raise RulesError("the training run needs at least 1 step")
    if train_loss is not None and not (math.isfinite(train_loss) and train_loss > 0):
        raise RulesError("the loss target must be a positive number")
    if time_budget is not None and not (math.isfinite(time_budget) and time_budget > 0):
        raise RulesError("the time budget must be a positive number of seconds")


def make_rules(pack: Pack, train_steps: int | None = None, train_loss: float | None = None,
               strict_rule: bool = False, time_budget: float | None = None,
               refuse_numeric: bool = False) -> GradingRules:
    check_values(train_steps, train_loss, time_budget)
    return GradingRules(train_steps or default_train_steps(pack), train_loss, strict_rule,
                        time_budget, refuse_numeric)


def read_rules(path: Path, pack: Pack) -> GradingRules:
    """The rules in `path`; RulesError when it is not a rules file this version can follow."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise RulesError(f"cannot read {path}: {exc.strerror or exc}") from None
    except (ValueError, RecursionError) as exc:
        raise RulesError(f"{path} is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise RulesError(f"{path} must hold one JSON object")
    unknown = sorted(set(data) - set(_KEYS))
    if unknown:
        # A misspelt key would otherwise be a rule silently not applied.
        raise RulesError(f"{path}: unknown keys {', '.join(unknown)} (known: {', '.join(_KEYS)})")
    steps, loss, strict = data.get("train_steps"), data.get("train_loss"), data.get(
        "strict_rule", False)
    if steps is not None and (not isinstance(steps, int) or isinstance(steps, bool)):
        raise RulesError(f"{path}: train_steps must be a whole number")
    if loss is not None and (not isinstance(loss, (int, float)) or isinstance(loss, bool)):
        raise RulesError(f"{path}: train_loss must be a number or null")
    if not isinstance(strict, bool):
        raise RulesError(f"{path}: strict_rule must be true or false")
    budget = data.get("time_budget")
    if budget is not None and (not isinstance(budget, (int, float)) or isinstance(budget, bool)):
        raise RulesError(f"{path}: time_budget must be a number of seconds or null")
    numeric = data.get("refuse_numeric", False)
    if not isinstance(numeric, bool):
        raise RulesError(f"{path}: refuse_numeric must be true or false")
    try:
        return make_rules(pack, steps, None if loss is None else float(loss), strict,
                          None if budget is None else float(budget), numeric)
    except RulesError as exc:
        raise RulesError(f"{path}: {exc}") from None
