"""What a training run says, typed once for everything that reads it: the run in the evaluator,
the client, the lesson controller, the progress store, the `train` command and the TUI.

The run builds a `TrainingRun` (tutor/training/run.py); it becomes the plain data of
docs/json.md ("A training run") only where it crosses a process boundary (the child's pipe,
`train --json`, a row of the progress store) and is read back into types on the other side
(`from_dict`). Rows kept by earlier versions read back too: what they lack takes its default,
what this version does not know is kept as is. No torch here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum

from tutor.values.gradnames import gradient
from tutor.values.records import Record
from tutor.values.results import CheckError, Diagnosis, TensorCheck, Verdict


class RunStatus(str, Enum):
    """How a training run ended."""

    FINISHED = "finished"
    CANCELLED = "cancelled"  # stopped by the learner: the steps done so far are kept
    DIVERGED = "diverged"  # the gradient check found a gradient that differs from autograd's
    ERROR = "error"  # the code failed, or the run was stopped from outside

    def __str__(self) -> str:
        return self.value

    @property
    def kept(self) -> bool:
        """Worth keeping in the learner's progress: the run started (a run that failed before
        its first step, or was stopped from outside, is only shown)."""
        return self is not RunStatus.ERROR

    @classmethod
    def named(cls, word: object) -> RunStatus:
        try:
            return cls(word)
        except ValueError:
            return cls.ERROR


class RunPhase(str, Enum):
    """What a running training run is doing, as its progress messages say."""

    GRADCHECK = "gradcheck"  # phase 1: every gradient compared with autograd's
    TRAIN = "train"  # phase 2: the learner's gradients alone
    RESULTS = "results"  # phase 3: calibration, split losses, samples

    def __str__(self) -> str:
        return self.value


# From the best verdict to the worst: a parameter's verdict over many steps is its worst one.
_WORSE = (Verdict.EXACT, Verdict.APPROXIMATE, Verdict.WRONG, Verdict.SHAPE, Verdict.MISSING)


def _number(value: object) -> float | None:
    """A number kept as data (an int or a float, unchanged), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value


def _whole(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _verdict(word: object, default: Verdict) -> Verdict:
    return Verdict.named(word) or default


@dataclass(repr=False, eq=False)
class ParameterCheck(TensorCheck):
    """One parameter's gradient over the steps the gradient check compared, as the notebook's
    cmp would print it: the worst step's verdict and maxdiff, and on how many steps it was bit
    for bit and allclose (allclose is strict near zero: a step can miss it by rounding)."""

    verdict: Verdict = Verdict.EXACT
    exact: bool = True
    approximate: bool = True
    maxdiff: float | None = 0.0
    steps: int = 0
    exact_steps: int = 0
    approximate_steps: int = 0

    # The JSON row's keys, in the order docs/json.md shows them.
    _ROW = ("tensor", "grad", "shape", "expected_shape", "exact", "approximate", "maxdiff",
            "verdict", "steps", "exact_steps", "approximate_steps")

    def add(self, g: TensorCheck) -> None:
        """One more checked step's grade of this gradient."""
        self.steps += 1
        self.exact_steps += bool(g.exact)
        self.approximate_steps += bool(g.approximate)
        self.shape, self.expected_shape = g.shape, g.expected_shape
        self.exact = self.exact and g.exact
        self.approximate = self.approximate and g.approximate
        if g.maxdiff is not None:
            self.maxdiff = max(self.maxdiff or 0.0, g.maxdiff)
        if _WORSE.index(g.verdict) > _WORSE.index(self.verdict):
            self.verdict = g.verdict

    @property
    def approximate_on_some_steps(self) -> bool:
        """allclose held on some checked steps but not all (the gap was rounding, as ✓ says)."""
        return self.approximate_steps not in (0, self.steps)

    @classmethod
    def from_dict(cls, d: dict) -> ParameterCheck:
        tensor = str(d.get("tensor", ""))
        steps = _whole(d.get("steps")) or 0
        approximate = bool(d.get("approximate"))
        return cls(tensor=tensor, grad=str(d.get("grad", gradient(tensor))), shape=d.get("shape"),
                   expected_shape=d.get("expected_shape"), exact=bool(d.get("exact")),
                   approximate=approximate, maxdiff=_number(d.get("maxdiff")),
                   verdict=_verdict(d.get("verdict"), Verdict.MISSING), steps=steps,
                   exact_steps=_whole(d.get("exact_steps")) or 0,
                   # Rows kept before the count existed say allclose for every step or none.
                   approximate_steps=_whole(d.get("approximate_steps", steps * approximate))
                   or 0,
                   extra={k: v for k, v in d.items() if k not in cls._ROW})

    def to_dict(self) -> dict:
        d = {k: getattr(self, k) for k in self._ROW}
        d["verdict"] = self.verdict.value
        return {**d, **self.extra}


@dataclass(repr=False, eq=False)
class GradcheckFailure(Record):
    """The gradient that stopped the run in phase 1, and the first wrong one behind it."""

    step: int
    tensor: str
    grad: str
    wrong: list[str]
    maxdiff: float | None
    verdict: Verdict
    cause: str  # the first gradient along the backward pass that differs
    line: int | None  # where the code assigns `cause`
    diagnosis: Diagnosis | None
    message: str

    @classmethod
    def from_dict(cls, d: dict | None) -> GradcheckFailure | None:
        if not isinstance(d, dict):
            return None
        tensor = str(d.get("tensor", ""))
        return cls(step=_whole(d.get("step")) or 0, tensor=tensor,
                   grad=str(d.get("grad", gradient(tensor))), wrong=list(d.get("wrong") or []),
                   maxdiff=_number(d.get("maxdiff")),
                   verdict=_verdict(d.get("verdict"), Verdict.WRONG),
                   cause=str(d.get("cause", gradient(tensor))), line=_whole(d.get("line")),
                   diagnosis=Diagnosis.from_dict(d.get("diagnosis")),
                   message=str(d.get("message", "")))

    def to_dict(self) -> dict:
        return {"step": self.step, "tensor": self.tensor, "grad": self.grad,
                "wrong": self.wrong, "maxdiff": self.maxdiff, "verdict": self.verdict.value,
                "cause": self.cause, "line": self.line,
                "diagnosis": self.diagnosis.to_dict() if self.diagnosis else None,
                "message": self.message}


@dataclass(repr=False, eq=False)
class GradientCheck(Record):
    """Every parameter's gradient compared with autograd's: over the first `steps` steps (phase
    1), then at `random_steps`, steps drawn at random across the rest of the run that the
    learner's code cannot know in advance (so code that is right only while it is watched is
    caught). `checks` tallies them all; `passed` says every checked step matched."""

    steps: int = 0
    passed: bool = False
    failure: GradcheckFailure | None = None
    checks: list[ParameterCheck] = field(default_factory=list)
    random_steps: list[int] = field(default_factory=list)  # checked, in the order they came

    @classmethod
    def from_dict(cls, d: dict | None) -> GradientCheck | None:
        if not isinstance(d, dict) or not d:  # an empty one says nothing either
            return None
        return cls(_whole(d.get("steps")) or 0, bool(d.get("passed")),
                   GradcheckFailure.from_dict(d.get("failure")),
                   [ParameterCheck.from_dict(c) for c in d.get("checks") or []
                    if isinstance(c, dict)],
                   [s for s in d.get("random_steps") or [] if _whole(s) is not None])

    def to_dict(self) -> dict:
        return {"steps": self.steps, "passed": self.passed,
                "failure": self.failure.to_dict() if self.failure else None,
                "checks": [c.to_dict() for c in self.checks],
                "random_steps": list(self.random_steps)}

    @property
    def approximate_on_some_steps(self) -> bool:
        return any(c.approximate_on_some_steps for c in self.checks)


@dataclass(repr=False, eq=False)
class LossHistory(Record):
    """The loss curve: the mean log10(loss) of each span of `every` steps (the last span may be
    shorter)."""

    every: int = 1
    log10_loss: list[float] = field(default_factory=list)

    @classmethod
    def from_dict(cls, d: dict | None) -> LossHistory | None:
        if not isinstance(d, dict) or not d:  # an empty one says nothing either
            return None
        return cls(_whole(d.get("every")) or 1,
                   [v for v in d.get("log10_loss") or [] if _number(v) is not None])

    def to_dict(self) -> dict:
        return {"every": self.every, "log10_loss": self.log10_loss}

    def finite(self) -> list[float]:
        """The points a plot can draw (a run that blew up ends in inf or nan)."""
        return [v for v in self.log10_loss if math.isfinite(v)]


def checkpoints(first: LossHistory | None, second: LossHistory | None, count: int = 6,
                steps: int | None = None) -> list[tuple[int, float | None, float | None]]:
    """Two runs' losses side by side at `count` points spread over the longer curve: (the step
    a point ends at, the first run's loss there, the second's). A run whose curve stops
    earlier (it failed, or its loss blew up) has None from there on, as has a point that is
    not finite. `steps`, the longer run's steps, is where its last span ends: that span may be
    shorter than the others (5 000 steps in spans of 13 end at 5 000, not 5 005)."""
    every = (first or second or LossHistory()).every
    length = max(len(h.log10_loss) for h in (first, second, LossHistory()) if h is not None)
    if length == 0:
        return []
    count = min(count, length)
    rows = []
    for j in range(1, count + 1):
        k = round(j * length / count) - 1

        def loss(h: LossHistory | None, k: int = k) -> float | None:
            if h is None or k >= len(h.log10_loss) or not math.isfinite(h.log10_loss[k]):
                return None
            return 10 ** h.log10_loss[k]

        end = (k + 1) * every
        rows.append((min(end, steps) if steps else end, loss(first), loss(second)))
    return rows


@dataclass(repr=False, eq=False)
class SplitLosses(Record):
    """The calibrated loss on the training and the validation split."""

    train_loss: float | None = None
    val_loss: float | None = None
    steps: int | None = None  # the run they come from, where known (the lecture's 200 000)

    @classmethod
    def from_dict(cls, d: dict | None) -> SplitLosses | None:
        if not isinstance(d, dict):
            return None
        steps = d.get("steps")
        return cls(_number(d.get("train_loss")), _number(d.get("val_loss")),
                   steps if isinstance(steps, int) and not isinstance(steps, bool) else None)

    def to_dict(self) -> dict:
        out = {"train_loss": self.train_loss, "val_loss": self.val_loss}
        return {**out, "steps": self.steps} if self.steps else out  # older records have none

    def label(self, baseline: str, run_steps: int | None) -> str:
        """`baseline`, with the steps its losses took where a run of other length sits beside
        them (`lecture (200 000 steps)`)."""
        if self.steps and run_steps and run_steps != self.steps:
            return f"{baseline} ({format(self.steps, ',').replace(',', ' ')} steps)"
        return baseline


@dataclass(repr=False, eq=False)
class BrokenStep(Record):
    """One step of the backward pass swapped for wrong code, to see what a wrong gradient does
    to training: a catalogued mistake of the step (`mistake`, counted from 1) or the learner's
    own first refused attempt (`mistake` None)."""

    step: str
    mistake: int | None
    label: str  # "mistake 2 of 3", "your first refused attempt"
    message: str  # what is wrong with it, in the learner's words
    code: str

    @classmethod
    def from_dict(cls, d: object) -> BrokenStep | None:
        if not isinstance(d, dict) or not d.get("step"):
            return None
        return cls(str(d["step"]), _whole(d.get("mistake")), str(d.get("label", "")),
                   str(d.get("message", "")), str(d.get("code", "")))

    def to_dict(self) -> dict:
        return {"step": self.step, "mistake": self.mistake, "label": self.label,
                "message": self.message, "code": self.code}


@dataclass(repr=False, eq=False)
class RunSettings(Record):
    """What a run was asked to do: the training plan's settings (sizes, learning rate, seed,
    ...: enough to repeat it, and the pack's to decide), then where and how it ran."""

    plan: dict = field(default_factory=dict)  # TrainingSettings.to_dict(), kept as is
    device: str | None = None
    reference: bool = False  # the pack's reference solutions, not the learner's code
    compile: bool = False  # torch.compile was asked for ...
    compiled: bool = False  # ... and the training phase ran through it
    torch_version: str | None = None
    threads: int | None = None
    parameters_count: int | None = None
    # A run with one step's gradient broken on purpose (`Lesson.train_broken`): the step, what
    # stood in for its code and that code. None for every other run.
    broken: BrokenStep | None = None

    _RUN = ("device", "reference", "compile", "compiled", "torch_version", "threads",
            "parameters_count", "broken")

    @property
    def steps(self) -> int | None:
        """The steps the run was asked for."""
        return _whole(self.plan.get("steps"))

    @classmethod
    def from_dict(cls, d: dict | None) -> RunSettings:
        d = d if isinstance(d, dict) else {}
        device = d.get("device")
        return cls(plan={k: v for k, v in d.items() if k not in cls._RUN},
                   device=None if device is None else str(device),
                   reference=bool(d.get("reference")), compile=bool(d.get("compile")),
                   compiled=bool(d.get("compiled")), torch_version=d.get("torch_version"),
                   threads=_whole(d.get("threads")),
                   parameters_count=_whole(d.get("parameters_count")),
                   broken=BrokenStep.from_dict(d.get("broken")))

    def to_dict(self) -> dict:
        d = {**self.plan, **{k: getattr(self, k) for k in self._RUN}}
        d["broken"] = self.broken.to_dict() if self.broken else None
        return d


# How close the learner's loss must come to the reference's: the calibrated training-split loss
# after the run may be at most this fraction above the one the reference solutions reach after
# the same steps (right gradients follow the reference's path up to rounding, a few thousandths).
LOSS_MARGIN = 0.05


@dataclass(repr=False, eq=False)
class ExerciseVerdict(Record):
    """Whether a run passes the training exercise, and if not, why (in the learner's words)."""

    passed: bool
    reason: str | None = None  # None when it passed

    def to_dict(self) -> dict:
        return {"passed": self.passed, "reason": self.reason}


def exercise_verdict(run: TrainingRun) -> ExerciseVerdict:
    """The one rule for passing the training exercise (docs/json.md, "Does it pass?").

    A run passes when it ran the learner's own code (not `--reference`, no step broken on
    purpose by `train --break`), with the gradient
    check on (`gradcheck_steps` > 0), every checked step (the first ones and those drawn at
    random across the run) matched autograd, it finished, and its calibrated training loss is
    at most LOSS_MARGIN above what the reference solutions reach after the same steps.
    Anything else is kept, and says here why it does not count.
    """
    def no(reason: str) -> ExerciseVerdict:
        return ExerciseVerdict(False, reason)

    if run.settings.reference:
        return no("a run of the reference solutions: it does not count for the exercise")
    if run.settings.broken is not None:
        return no(f"a run with {run.settings.broken.step} broken on purpose: it does not count "
                  "for the exercise")
    gradcheck = run.gradcheck
    failure = gradcheck.failure if gradcheck else None
    if failure is not None:
        where = (" (a step chosen at random)" if gradcheck and failure.step in
                 gradcheck.random_steps else "")
        return no(f"your gradients differed from autograd's at step {failure.step}{where}")
    if run.status is RunStatus.CANCELLED:
        return no(f"the run was stopped after {run.steps_done} of {run.planned_steps} steps: "
                  "only a finished run counts")
    if run.status is not RunStatus.FINISHED:
        return no("the run stopped with an error")
    if not _whole(run.settings.plan.get("gradcheck_steps")):
        return no("gradient check off (--gradcheck-steps 0): this run does not count")
    if gradcheck is None:
        return no("the gradient check did not run")
    if not gradcheck.passed:
        return no("the gradient check did not pass")
    steps = run.planned_steps or 0
    if steps > gradcheck.steps and not gradcheck.random_steps:
        return no("no step after the first ones was checked against autograd")
    ours, theirs = run.train_loss, run.reference_train_loss
    if ours is None or theirs is None:
        return no("there is no reference loss to compare this run's loss with")
    if not ours <= theirs * (1 + LOSS_MARGIN):  # a nan loss fails too
        return no(f"the loss did not fall as the reference's does: {ours:.4g} vs {theirs:.4g} "
                  f"after {run.steps_done} steps (at most {LOSS_MARGIN:.0%} above counts)")
    return ExerciseVerdict(True)


def snapshot(value: object) -> dict | None:
    """One of a run's pictures, read back without trusting it: {"step": i, "panel": {...}} with
    the panel's sizes as lists of numbers (None where the learner's call drew nothing)."""
    if not isinstance(value, dict) or _whole(value.get("step")) is None:
        return None
    panel = value.get("panel")
    if not isinstance(panel, dict):
        return None
    yours, autograd, wrong = (panel.get(k) for k in ("yours", "autograd", "wrong"))
    if not (isinstance(yours, list) and isinstance(autograd, list) and isinstance(wrong, list)
            and len(yours) == len(autograd) == len(wrong)
            and all(v is None or _number(v) is not None for v in yours)
            and all(_number(v) is not None for v in autograd)
            and all(isinstance(w, bool) for w in wrong)):
        return None
    return {"step": _whole(value["step"]),
            "panel": {"title": str(panel.get("title") or ""), "case": str(panel.get("case") or ""),
                      "yours": yours, "autograd": autograd, "wrong": wrong}}


@dataclass(repr=False, eq=False)
class TrainingRun(Record):
    """A whole training run: how it ended, its gradient check, its curve, its results.

    A run read back from the progress store also has its number there (`run_id`), when it was
    kept (`at`) and the code it ran (`code`).
    """

    status: RunStatus = RunStatus.ERROR
    error: CheckError | None = None
    step: int | None = None  # the step an error stopped the run at
    settings: RunSettings = field(default_factory=RunSettings)
    gradcheck: GradientCheck | None = None  # None: skipped, or the code never ran
    steps_done: int = 0
    history: LossHistory | None = None
    train_loss: float | None = None
    val_loss: float | None = None
    samples: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    last_loss: float | None = None
    steps_per_s: float | None = None  # the training phase's pace
    gradcheck_s: float | None = None
    train_s: float | None = None
    compile_s: float | None = None
    results_s: float | None = None
    wall_s: float | None = None
    stdout: str = ""
    lecture: SplitLosses | None = None  # the lecture's own losses, to compare with
    # What the reference solutions reach on the training split after the same steps (the
    # pack's stated figure for its full run, else the reference replayed): the bar of
    # `exercise_verdict`. None where the run cannot pass for another reason.
    reference_train_loss: float | None = None
    # The pack's picture through time during the run (`[training] picture`): at a few steps, a
    # carried gradient (dh_t) at every time step, the learner's beside autograd's, each as
    # {"step": i, "panel": the panel's plain data (tutor/core/timesteps.py Series)}.
    pictures: list[dict] = field(default_factory=list)
    run_id: int | None = None
    # Handed to the progress store (`Lesson.keep_run`): only then does the plain data carry
    # `run_id`, which is None for a run the store does not keep (one that never started).
    saved: bool = False
    at: str | None = None
    code: str | None = None
    extra: dict = field(default_factory=dict)  # fields this version does not know, kept as is

    # The plain data's keys, in the order docs/json.md shows them.
    _KEYS = ("status", "error", "step", "settings", "gradcheck", "steps_done", "history",
             "train_loss", "val_loss", "samples", "notes", "last_loss", "steps_per_s",
             "gradcheck_s", "train_s", "compile_s", "results_s", "wall_s", "stdout", "lecture",
             "reference_train_loss", "pictures")
    _NUMBERS = ("last_loss", "steps_per_s", "gradcheck_s", "train_s", "compile_s", "results_s",
              "wall_s", "train_loss", "val_loss", "reference_train_loss")
    _STORED = ("run_id", "id", "at", "code")  # what the progress store adds to a kept run
    _DERIVED = ("exercise",)  # worked out from the rest on every side, never read back

    @classmethod
    def from_dict(cls, d: dict) -> TrainingRun:
        error = d.get("error")
        run_id = d.get("run_id", d.get("id"))
        return cls(
            status=RunStatus.named(d.get("status")),
            error=CheckError.from_dict(error) if isinstance(error, dict) else None,
            step=_whole(d.get("step")),
            settings=RunSettings.from_dict(d.get("settings")),
            gradcheck=GradientCheck.from_dict(d.get("gradcheck")),
            steps_done=_whole(d.get("steps_done")) or 0,
            history=LossHistory.from_dict(d.get("history")),
            samples=[str(s) for s in d.get("samples") or []],
            notes=[str(n) for n in d.get("notes") or []],
            stdout=str(d.get("stdout") or ""),
            lecture=SplitLosses.from_dict(d.get("lecture")),
            pictures=[p for p in d.get("pictures") or [] if snapshot(p) is not None],
            run_id=_whole(run_id), saved="run_id" in d, at=d.get("at"), code=d.get("code"),
            extra={k: v for k, v in d.items()
                   if k not in cls._KEYS + cls._STORED + cls._DERIVED},
            **{k: _number(d.get(k)) for k in cls._NUMBERS},
        )

    def to_dict(self) -> dict:
        d = {k: getattr(self, k) for k in self._KEYS}
        d["status"] = self.status.value
        for key in ("error", "settings", "gradcheck", "history", "lecture"):
            d[key] = d[key].to_dict() if d[key] is not None else None
        d["exercise"] = self.exercise.to_dict()
        d.update(self.extra)
        if self.saved:
            d["run_id"] = self.run_id
        return d

    @property
    def exercise(self) -> ExerciseVerdict:
        """Whether this run passes the training exercise, and why not (`exercise_verdict`)."""
        return exercise_verdict(self)

    def stored(self, code: str) -> dict:
        """The row the progress store keeps: the run (its print output left out) and its
        code."""
        d = {k: v for k, v in self.to_dict().items() if k not in ("stdout", "run_id")}
        return {**d, "code": code}

    @property
    def planned_steps(self) -> int | None:
        return self.settings.steps

    @property
    def error_line(self) -> int | None:
        """The line of the code to mark: the first wrong gradient's, or the error's."""
        failure = self.gradcheck.failure if self.gradcheck else None
        if failure and failure.line:
            return failure.line
        return self.error.line if self.error else None


@dataclass(repr=False, eq=False)
class RunProgress(Record):
    """One progress message of a running run. Phase 1 carries the gradient check so far, phase
    2 the new points of the loss curve and the pace, phase 3 that it has begun and what it does
    (`doing`: the pack's evaluation differs, so the run says, not the front end)."""

    phase: RunPhase | None
    step: int = 0
    of: int | None = None  # phase 1: the steps it checks
    steps: int | None = None  # phases 2 and 3: the steps the run was asked for
    checks: list[ParameterCheck] = field(default_factory=list)
    every: int | None = None
    points: list[float] = field(default_factory=list)
    steps_per_s: float | None = None
    eta_s: float | None = None
    loss: float | None = None
    lr: float | None = None
    picture: dict | None = None  # phase 2: the latest of the run's pictures (TrainingRun)
    # phase 3: what it does, in words that follow "Phase 3 · " (a message without them still
    # says something true of every pack)
    doing: str = "evaluating the network"

    @classmethod
    def from_dict(cls, d: dict) -> RunProgress:
        try:
            phase: RunPhase | None = RunPhase(d.get("phase"))
        except ValueError:
            phase = None
        return cls(phase, _whole(d.get("step")) or 0, _whole(d.get("of")),
                   _whole(d.get("steps")),
                   [ParameterCheck.from_dict(c) for c in d.get("checks") or []
                    if isinstance(c, dict)],
                   _whole(d.get("every")),
                   [v for v in d.get("points") or [] if _number(v) is not None],
                   *(_number(d.get(k)) for k in ("steps_per_s", "eta_s", "loss", "lr")),
                   snapshot(d.get("picture")),
                   *([d["doing"]] if isinstance(d.get("doing"), str) else []))

    def to_dict(self) -> dict:
        d: dict = {"phase": str(self.phase) if self.phase else None, "step": self.step}
        if self.phase is RunPhase.GRADCHECK:
            return {**d, "of": self.of, "checks": [c.to_dict() for c in self.checks]}
        if self.phase is RunPhase.TRAIN:
            return {**d, "steps": self.steps, "every": self.every, "points": self.points,
                    "steps_per_s": self.steps_per_s, "eta_s": self.eta_s, "loss": self.loss,
                    "lr": self.lr, "picture": self.picture}
        return {**d, "steps": self.steps, "doing": self.doing}
