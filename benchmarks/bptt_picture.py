"""The size of dh_t across time in the lstm lesson, drawn into docs/bptt_dh.svg.

Two panels, both measured on the lesson's own batch and weights (exercise 2's lesson case):

    left   |dh_t| at every step t, the gradient that reaches step t's hidden state from the
           loss, as autograd computes it and as a wrong lstm_backward computes it (a catalogued
           mistake from exercise 2, `--mistake N`, by default the cell's gradient not carried):
           the two agree at the last step and part from the step where the loop goes wrong.
    right  one gradient arriving at the last step only, and how much of it reaches each earlier
           step, with the forget gate as initialised and pinned shut or open (its bias set to
           -BIAS or +BIAS): shut, the gradient vanishes in a few steps; open, the cell carries
           it back undiminished and the hidden state's share grows step after step.

dh_t is not an output of lstm_backward, so it is read off the function the way the loop uses
it: called on the steps after t alone (the suffix of the sequence, starting from the state step
t left), the function's `dh0` is what the later steps send back to h_t, and dh_t is that plus
the output's own share, `dhs[:, t]`. Autograd's is the step's `expect` code on the same suffix.
Nothing here is the tutor's grading; it is the lesson's own code run on its own tensors.

Run from the repository root:

    .venv/bin/python benchmarks/bptt_picture.py [--bias 6] [--mistake 2] [--out docs/bptt_dh.svg]

It prints the three curves' numbers too.
"""

from __future__ import annotations

import argparse
import math
import sys
import warnings
from pathlib import Path

warnings.filterwarnings("ignore", message=".*NumPy.*")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from tutor.config import Settings  # noqa: E402
from tutor.core.network import Network  # noqa: E402
from tutor.pack.model import load_pack  # noqa: E402

STEP = "bptt/lstm_backward"
Tensor = torch.Tensor


def scope() -> dict:
    return {"torch": torch, "F": F, "math": math}


def lesson_inputs(step, network: Network, forget_bias: float | None = None,
                  recurrent: float = 1.0, repeat: int = 1) -> dict:
    """The step's lesson case (its `lesson` code on the lesson's batch), with the forget gate's
    bias set to `forget_bias` when given, `Wh` scaled by `recurrent`, and the batch read
    `repeat` times over (the gates are then recomputed with them)."""
    batch = network.main
    ns = {**scope(), **{k: v.detach().clone() if isinstance(v, Tensor) else v
                        for k, v in batch.namespace().items()}}
    ns["grad"] = lambda name: batch.gradients[name].clone()
    H = ns["n_hidden"]
    if forget_bias is not None:
        ns["b"][H:2 * H] = forget_bias
    ns["Wh"] = ns["Wh"] * recurrent
    ns["emb"] = torch.cat([ns["emb"]] * repeat, 1)
    if repeat > 1:  # the output's gradients were the batch's once; these are replaced anyway
        ns["grad"] = lambda name: torch.zeros(ns["emb"].shape[:2] + (H,))
    exec(compile(step.function.lesson, f"<{STEP} lesson>", "exec"), ns)
    return {a: ns[a].detach() if isinstance(ns[a], Tensor) else ns[a]
            for a in step.function.arguments}


def backward_function(source: str, name: str):
    ns = scope()
    exec(compile(source, "<lstm_backward>", "exec"), ns)
    return ns[name]


def autograd_function(step):
    """The step's `expect` code as a function of the inputs: autograd's outputs."""
    def run(**inputs):
        ns = {**scope(), **{k: v.clone() if isinstance(v, Tensor) else v
                            for k, v in inputs.items()}}
        exec(compile(step.function.expect, f"<{STEP} expect>", "exec"), ns)
        return tuple(ns[o] for o in step.function.outputs)
    return run


def suffix(inputs: dict, t: int) -> dict:
    """The sequence from step t on, starting from the state step t - 1 left."""
    out = dict(inputs)
    for k in ("dhs", "xs", "hs", "cs", "gates"):
        out[k] = inputs[k][:, t:]
    out["h0"], out["c0"] = inputs["hs"][:, t - 1], inputs["cs"][:, t - 1]
    return out


def dh_steps(fn, inputs: dict, outputs: tuple[str, ...]) -> list[Tensor]:
    """dh_t for every t: the output's share plus what `fn` sends back from the later steps."""
    T = inputs["xs"].shape[1]
    out = []
    for t in range(T):
        carried = torch.zeros_like(inputs["h0"])
        if t + 1 < T:
            got = dict(zip(outputs, fn(**suffix(inputs, t + 1)), strict=True))
            carried = got["dh0"]
        out.append(inputs["dhs"][:, t] + carried)
    return out


def dh_sizes(fn, inputs: dict, outputs: tuple[str, ...]) -> list[float]:
    return [float(d.norm()) for d in dh_steps(fn, inputs, outputs)]


# -- the SVG ---------------------------------------------------------------------------------
W, H = 460, 380  # one panel
PAD_L, PAD_R, PAD_T, PAD_B = 64, 16, 40, 130  # the legend goes under the axis
COLOURS = {"autograd": "#3a8a3a", "yours": "#d0463c", "shut": "#2f6fbf", "initialised": "#3a8a3a",
           "open": "#d0463c"}


def panel(x0: int, title: str, curves: list[tuple[str, list[float], str, bool]],
          note: str) -> list[str]:
    """One plot of log10 sizes against t: `curves` of (label, values, colour, dashed)."""
    values = [v for _, vs, _, _ in curves for v in vs if v > 0 and math.isfinite(v)]
    lo, hi = math.floor(math.log10(min(values))), math.ceil(math.log10(max(values)))
    hi = max(hi, lo + 1)
    T = max(len(vs) for _, vs, _, _ in curves)
    pw, ph = W - PAD_L - PAD_R, H - PAD_T - PAD_B

    def px(t: float) -> float:
        return x0 + PAD_L + (t / max(1, T - 1)) * pw

    def py(v: float) -> float:
        return PAD_T + (hi - math.log10(v)) / (hi - lo) * ph

    out = [f'<text x="{x0 + W / 2}" y="22" text-anchor="middle" font-weight="bold">{title}</text>',
           f'<rect x="{x0 + PAD_L}" y="{PAD_T}" width="{pw}" height="{ph}" fill="none" '
           'stroke="#888"/>']
    step = max(1, math.ceil((hi - lo) / 8))
    for e in range(lo, hi + 1, step):
        y = py(10.0 ** e)
        out.append(f'<line x1="{x0 + PAD_L}" x2="{x0 + PAD_L + pw}" y1="{y:.1f}" y2="{y:.1f}" '
                   'stroke="#ddd"/>')
        out.append(f'<text x="{x0 + PAD_L - 6}" y="{y + 4:.1f}" text-anchor="end" '
                   f'font-size="11">1e{e}</text>')
    for t in range(T):
        if T <= 16 or t % 2 == 0 or t == T - 1:
            out.append(f'<text x="{px(t):.1f}" y="{PAD_T + ph + 16}" text-anchor="middle" '
                       f'font-size="11">{t}</text>')
    out.append(f'<text x="{x0 + PAD_L + pw / 2}" y="{PAD_T + ph + 34}" text-anchor="middle" '
               'font-size="12">time step t (the backward loop runs right to left)</text>')
    out.append(f'<text x="{x0 + 14}" y="{PAD_T + ph / 2}" text-anchor="middle" font-size="12" '
               f'transform="rotate(-90 {x0 + 14} {PAD_T + ph / 2})">|dh_t|</text>')
    for k, (label, vs, colour, dashed) in enumerate(curves):
        points = " ".join(f"{px(t):.1f},{py(v):.1f}" for t, v in enumerate(vs) if v > 0)
        dash = ' stroke-dasharray="6 4"' if dashed else ""
        out.append(f'<polyline points="{points}" fill="none" stroke="{colour}" '
                   f'stroke-width="2.5"{dash}/>')
        for t, v in enumerate(vs):
            if v > 0:
                out.append(f'<circle cx="{px(t):.1f}" cy="{py(v):.1f}" r="3" fill="{colour}"/>')
        ly = PAD_T + ph + 58 + 16 * k
        out.append(f'<line x1="{x0 + PAD_L + 10}" x2="{x0 + PAD_L + 30}" y1="{ly - 4}" '
                   f'y2="{ly - 4}" stroke="{colour}" stroke-width="2.5"{dash}/>')
        out.append(f'<text x="{x0 + PAD_L + 36}" y="{ly}" font-size="12">{label}</text>')
    out.append(f'<text x="{x0 + W / 2}" y="{H - 8}" text-anchor="middle" font-size="11" '
               f'fill="#555">{note}</text>')
    return out


def svg(left: list[str], right: list[str]) -> str:
    return "\n".join([
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{2 * W}" height="{H}" '
        f'viewBox="0 0 {2 * W} {H}" font-family="DejaVu Sans, Helvetica, sans-serif">',
        f'<rect width="{2 * W}" height="{H}" fill="white"/>', *left, *right, "</svg>", ""])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bias", type=float, default=6.0,
                        help="the forget gate's bias when pinned: -BIAS shut, +BIAS open")
    parser.add_argument("--mistake", type=int, default=2,
                        help="which of exercise 2's catalogued mistakes plays the learner's loop")
    parser.add_argument("--repeat", type=int, default=3,
                        help="the right panel reads the lesson's batch this many times over")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "bptt_dh.svg")
    args = parser.parse_args()
    torch.manual_seed(0)

    pack = load_pack(ROOT / "exercises" / "lstm")
    network = Network(pack, torch.device("cpu"), Settings().seed)
    step = pack.step(STEP)
    outputs = step.function.outputs
    autograd = autograd_function(step)
    mistake = step.mistakes[args.mistake]

    inputs = lesson_inputs(step, network)
    theirs = dh_steps(autograd, inputs, outputs)
    yours = dh_steps(backward_function(mistake.code, step.function.name), inputs, outputs)
    reference = dh_steps(backward_function(step.solution, step.function.name), inputs, outputs)
    apart = [float((y - a).norm()) for y, a in zip(yours, theirs, strict=True)]
    scale = max(float(a.norm()) for a in theirs)
    first = next((t for t in reversed(range(len(theirs))) if apart[t] > 1e-5 * scale), None)
    print("t          " + " ".join(f"{t:>9d}" for t in range(len(theirs))))
    for label, steps in (("autograd", theirs), ("reference", reference), ("mistake", yours)):
        print(f"{label:11s}" + " ".join(f"{float(v.norm()):9.2e}" for v in steps))
    print("|apart|    " + " ".join(f"{v:9.2e}" for v in apart))
    print(f"the mistake's dh_t first leaves autograd's at t = {first}")

    # Only the last step's output sends a gradient, of size 1: how much of it reaches each
    # earlier step, over the batch read three times (a longer sequence shows the trend).
    gates = {}
    runs = (("shut", -args.bias, 1.0), ("initialised", None, 1.0), ("open", args.bias, 1.0),
            ("open, Wh x2", args.bias, 2.0))
    for label, bias, recurrent in runs:
        pinned = lesson_inputs(step, network, bias, recurrent, repeat=args.repeat)
        last = torch.zeros_like(pinned["dhs"])
        last[:, -1] = 1 / math.sqrt(last[:, -1].numel())
        pinned["dhs"] = last
        gates[label] = dh_sizes(autograd, pinned, outputs)
        print(f"{label:11s}" + " ".join(f"{v:9.2e}" for v in gates[label][::3]) + "  (every 3rd)")

    slip = " ".join(mistake.message.split()[:6]).rstrip(",.:;") + " ..."
    left = panel(0, "dh_t: a wrong loop beside autograd's", [
        ("|dh_t|, autograd", [float(a.norm()) for a in theirs], COLOURS["autograd"], False),
        ("|dh_t|, yours", [float(y.norm()) for y in yours], COLOURS["yours"], True),
        ("|yours − autograd|", apart, "#555555", False)],
        f"yours: “{_escape(slip)}”, wrong from t = {first} back")
    right = panel(W, "a gradient of 1 sent back from the last step", [
        (f"forget gate shut (bias −{args.bias:g})", gates["shut"], COLOURS["shut"], False),
        ("forget gate as initialised", gates["initialised"], COLOURS["initialised"], False),
        (f"forget gate open (bias +{args.bias:g})", gates["open"], COLOURS["open"], False),
        ("open, and Wh doubled", gates["open, Wh x2"], "#a050a0", True)],
        f"autograd's |dh_t|; the lesson's batch read {args.repeat} times over")
    args.out.write_text(svg(left, right))
    print(f"wrote {args.out}")


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("`", "")


if __name__ == "__main__":
    main()
