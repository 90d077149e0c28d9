"""A training run as text, for the command line and the notebook alike: its gradient check,
its losses beside the lecture's, whether it passes the exercise, and a broken run beside a good
one (`train --break`)."""

from __future__ import annotations

from tutor.pack.model import DEFAULT_BASELINE
from tutor.session.controller import BrokenComparison
from tutor.session.report import ends_text, steps_text, wrap
from tutor.values.durations import clock, loss_text, spaced
from tutor.values.results import CheckError
from tutor.values.runs import GradientCheck, ParameterCheck, RunStatus, SplitLosses, TrainingRun


def _error(error: CheckError | None) -> list[str]:
    if not error:
        return ["✗ failed"]
    return wrap(f"{error.kind} error: {error.message}", "✗ ", "  ")


def _cmp_row(c: ParameterCheck, width: int) -> str:
    approx = (f"{c.approximate_steps}/{c.steps} steps" if c.approximate_on_some_steps
              else str(c.approximate))
    maxdiff = "—" if c.maxdiff is None else f"{c.maxdiff:.3g}"
    return (f"  {c.verdict.mark} {c.tensor:<{width}} | exact: {str(c.exact):<5} | approximate: "
            f"{approx:<11} | maxdiff: {maxdiff}")


def format_gradcheck(gradcheck: GradientCheck | None) -> list[str]:
    if not gradcheck:
        return ["Gradient check: skipped"]
    drawn = gradcheck.random_steps
    also = (f" and at {len(drawn)} drawn at random ({', '.join(map(spaced, drawn))})"
            if drawn else "")
    lines = [f"Gradient check against autograd over the first {gradcheck.steps} step(s){also}:"]
    width = max((len(c.tensor) for c in gradcheck.checks), default=0)
    lines += [_cmp_row(c, width) for c in gradcheck.checks]
    if gradcheck.failure:
        lines += wrap(gradcheck.failure.message, "  ✗ ", "    ")
    elif gradcheck.passed:
        lines.append("  ✓ every gradient matches autograd, to float32 rounding")
    return lines


def format_pictures(pictures: list[dict]) -> list[str]:
    """The run's pictures through time in words (the TUI and the notebook draw them): the size
    of the carried gradient at the first and the last time step, at the first and the last
    picture, and whether the learner's matched autograd's in every picture."""
    if not pictures:
        return []
    first, last = pictures[0], pictures[-1]
    panel = last["panel"]
    title = panel.get("title") or "the gradient"
    lines = [f"\n|{title}| on the {panel.get('case') or 'same batch'}, yours (autograd's):"]
    for snap in [first, last] if first is not last else [first]:
        lines.append(f"  step {spaced(snap['step']):>7}  {ends_text(snap['panel'], 2)}")
    wrong = [s["step"] for s in pictures if any(s["panel"]["wrong"])]
    lines.append(f"  yours differs from autograd's in the pictures at step "
                 f"{', '.join(spaced(w) for w in wrong)}" if wrong else
                 f"  yours matches autograd's at every time step, in all {len(pictures)} "
                 "pictures")
    return lines


def format_run(r: TrainingRun, baseline: str = DEFAULT_BASELINE) -> str:
    """The run as `train` prints it; `baseline` names what its losses are shown beside (the
    pack's `Pack.baseline`)."""
    s = r.settings
    lines: list[str] = []
    if r.status is RunStatus.ERROR and not r.gradcheck:
        lines += _error(r.error)
    lines += format_gradcheck(r.gradcheck)
    if r.error and r.gradcheck:
        lines += _error(r.error)
    steps = r.steps_done
    if steps and r.status is not RunStatus.DIVERGED:
        rate = f" · {spaced(r.steps_per_s)} steps/s" if r.steps_per_s else ""
        compiled = ""
        if s.compiled and r.compile_s is not None:
            compiled = f" · torch.compile {r.compile_s:.1f} s, not counted"
        status = "cancelled after" if r.status is RunStatus.CANCELLED else "trained"
        took = clock(r.train_s, "?")
        lines.append(f"\n{status.capitalize()} {spaced(steps)} of {spaced(s.steps or 0)} "
                     f"steps on {s.device} in {took}{rate}{compiled}")
    if r.train_loss is not None:
        lecture = r.lecture or SplitLosses()
        baseline = lecture.label(baseline, s.steps)
        # the columns right-aligned under their heads, however long the baseline's name
        ours = [loss_text(r.train_loss), loss_text(r.val_loss)]
        theirs = [loss_text(lecture.train_loss), loss_text(lecture.val_loss)]
        left, right = (max(len(x) for x in [head, *col]) for head, col in
                       (("yours", ours), (baseline, theirs)))
        lines += [
            f"\n              {'yours':>{left}}    {baseline:>{right}}",
            *(f"  {name:<12}{a:>{left}}    {b:>{right}}" for name, a, b in
              zip(("train loss", "val loss"), ours, theirs, strict=True)),
        ]
    lines += format_pictures(r.pictures)
    if r.samples:
        lines.append("\nNames sampled from your network:")
        names = r.samples
        for k in range(0, len(names), 5):
            lines.append("  " + "  ".join(f"{n:<14}" for n in names[k:k + 5]).rstrip())
    for note in r.notes:
        lines += ["", *wrap(note, "note: ", " " * 6)]
    if r.stdout:
        head = r.stdout.splitlines()[:10]
        lines.append("\nyour print output (first lines):")
        lines += [f"  {line}" for line in head]
    lines.append(f"\nwall time {clock(r.wall_s, '?')}"
                 + (f" · run #{r.run_id} saved" if r.saved and r.run_id else ""))
    lines += format_verdict(r)
    return "\n".join(lines)


def format_verdict(r: TrainingRun) -> list[str]:
    """Whether the run passes the training exercise, and why not (runs.exercise_verdict)."""
    verdict = r.exercise
    if verdict.passed:
        reference = r.reference_train_loss
        bar = f" (train loss {loss_text(r.train_loss)}, the reference's {loss_text(reference)})" \
            if reference is not None else ""
        return [f"✓ this run passes the exercise{bar}"]
    return wrap(f"this run does not pass the exercise: {verdict.reason}", "✗ ", "  ")


def _broken_picture(broken: TrainingRun) -> list[str]:
    """What the broken gradient does to the picture through time, if the run drew one: where
    the broken function's carried gradient parts from autograd's at the run's end."""
    if not broken.pictures:
        return []
    last = broken.pictures[-1]
    panel = last["panel"]
    title = panel.get("title") or "the carried gradient"
    wrong = [t for t, w in enumerate(panel["wrong"]) if w]
    said = (f"the broken run's {title}, at training step {spaced(last['step'])}, differs from "
            f"autograd's at {steps_text(wrong)} of {len(panel['wrong'])} time steps"
            if wrong else
            f"the broken run's {title} matches autograd's at every time step: this mistake "
            "leaves the gradient carried back through time alone and shows elsewhere")
    return ["", *wrap(said, "", "  ")]


def format_comparison(c: BrokenComparison) -> str:
    """The broken run next to the good one: the loss at a few steps, then the final losses."""
    b, good, broken = c.broken_step, c.good, c.broken
    origin = ("a good run trained just now" if c.fresh
              else f"your run #{good.run_id}" if good.run_id else "your last good run")
    lines = wrap(f"{b.step} broken with {b.label}: {b.message}", "", "  ")
    lines.append(f"next to {origin}, {spaced(good.planned_steps or 0)} steps each, the same "
                 "seed and batches")
    lines += ["", "                  good      broken",
              *(f"  step {spaced(step):>8}  {loss_text(g):>8}  {loss_text(x):>8}"
                for step, g, x in c.checkpoints())]
    losses = ((good.train_loss, broken.train_loss), (good.val_loss, broken.val_loss))
    lines += ["", *(f"  {name:<13}{loss_text(g):>8}  {loss_text(x):>8}"
                    for name, (g, x) in zip(("train loss", "val loss"), losses, strict=True))]
    lines += _broken_picture(broken)
    if broken.status is not RunStatus.FINISHED:
        stopped = broken.error.message if broken.error else str(broken.status)
        lines += [""] + wrap(f"the broken run stopped after {spaced(broken.steps_done)} "
                             f"steps: {stopped}", "✗ ", "  ")
    lines += ["", *wrap("the broken run is only shown: it never counts for the exercise and is "
                        "not kept in your progress", "note: ", " " * 6)]
    return "\n".join(lines)
