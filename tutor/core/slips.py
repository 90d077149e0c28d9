"""Slips of operations: a wrong gradient named by the operation it got wrong, on every line.

A catalogue lists the mistakes of one step; a slip belongs to an operation and its rule, so it
is found wherever that operation occurs: on every layer of a lesson, in every lesson, and in a
lesson `pack new` made. Each slip is a change to the step's forward line that the slip amounts
to (a convolution's taps in the other order, another dilation, the padding on the other side, a
max-pool spread over its window, a softmax over another dim, an activation's slope taken at the
wrong tensor), or a change to the line's local derivative. Autograd differentiates the changed
line with the upstream gradient the learner's code was given; the learner's tensor matching
what it gives, and not the right answer, names the slip.

A changed line is compared through its difference from the unchanged one, added to autograd's
reference for the step: a backward pass is linear in its upstream gradient and a tensor's other
branches are the same either way, so the slip's value is right wherever the step's gradient is
more than this one line's.

Messages speak of the operation and its line, and of what the numbers show (a shift, a
dilation, a factor), never of code the learner may not have written.
"""

from __future__ import annotations

import ast
import itertools
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache

import torch
import torch.nn.functional as F

from tutor.core.diagnosis import close, diagnosis, permuted
from tutor.core.quick import vjp
from tutor.pack.flow import gradient
from tutor.pack.model import ForwardLine, Pack, Step
from tutor.values.results import Diagnosis

Tensor = torch.Tensor

# What a slip says, given the tensor's role at the operation and its gradient's name.
Say = Callable[[str, str, dict], str | None]


@dataclass(frozen=True)
class Slip:
    """One way to get a line's operation wrong, as the changed line it amounts to."""

    key: str  # the slip's family, for ties and tests ("conv-taps", "pool-spread", ...)
    say: Say
    line: ForwardLine
    expr: ast.expr | None = None  # the changed forward expression of `line`, or
    changes: tuple[tuple[str, ast.expr], ...] = ()  # changed expressions of several lines, or
    detach: tuple[str, ...] = ()  # lines whose output the slip holds constant, or
    local: Callable[[dict], Tensor | None] | None = None  # the changed local gradient itself
    tensor: str | None = None  # for `local`: the tensor it is the gradient of
    kind: str = "derived"  # the diagnosis's kind: "partial" for a path left out, "scale", ...


# --- the operations a line holds -------------------------------------------------------------

def _name(node: ast.AST) -> str:
    """`conv1d` for `F.conv1d(...)`, `tanh` for `torch.tanh(x)` and for `x.tanh()`."""
    f = node.func if isinstance(node, ast.Call) else None
    if isinstance(f, ast.Attribute):
        return f.attr
    if isinstance(f, ast.Name):
        return f.id
    return ""


def _method(node: ast.Call) -> bool:
    """`x.tanh()` rather than `torch.tanh(x)`: the tensor is the call's receiver."""
    f = node.func
    return isinstance(f, ast.Attribute) and not (
        isinstance(f.value, ast.Name) and f.value.id in ("torch", "F", "nn", "math"))


def _subject(node: ast.Call) -> ast.expr | None:
    """The tensor an operation works on: the receiver of a method, else the first argument."""
    if _method(node):
        return node.func.value
    return node.args[0] if node.args else None


def _arg(node: ast.Call, position: int, keyword: str) -> ast.expr | None:
    """An argument given by position (counted after the subject for functions) or keyword."""
    for kw in node.keywords:
        if kw.arg == keyword:
            return kw.value
    args = node.args if _method(node) else node.args[1:]
    return args[position] if len(args) > position else None


def _with_arg(node: ast.Call, position: int, keyword: str, value: ast.expr) -> ast.Call:
    new = _copy(node)
    for kw in new.keywords:
        if kw.arg == keyword:
            kw.value = value
            return new
    args = new.args if _method(new) else new.args[1:]
    if len(args) > position:
        args[position] = value
        new.args = args if _method(new) else [new.args[0], *args]
        return new
    new.keywords.append(ast.keyword(arg=keyword, value=value))
    return new


def _copy(node: ast.AST):
    import copy

    return copy.deepcopy(node)


def _const(node: ast.expr | None) -> object:
    try:
        return ast.literal_eval(node) if node is not None else None
    except (ValueError, SyntaxError, TypeError):
        return None


def _reads(node: ast.AST | None) -> set[str]:
    if node is None:
        return set()
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _text(node: ast.AST, limit: int = 60) -> str:
    text = ast.unparse(node)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _replaced(expr: ast.expr, old: ast.AST, new: ast.expr) -> ast.expr:
    """`expr` with the node `old` (found by identity) replaced by `new`."""

    class Swap(ast.NodeTransformer):
        def visit(self, node):
            if node is old:
                return new
            return super().visit(node)

    return Swap().visit(_copy_keeping(expr, old))


def _copy_keeping(expr: ast.expr, keep: ast.AST) -> ast.expr:
    """A copy of `expr` in which `keep` is still the same object (so it can be found)."""
    import copy

    return copy.deepcopy(expr, {id(keep): keep})


# --- the slips of each operation --------------------------------------------------------------

def _role(call: ast.Call, slots: dict[str, ast.expr | None]) -> Callable[[str], str | None]:
    """Which argument of `call` reads a tensor: 'input', 'weight', 'bias', ... or None."""
    reads = {role: _reads(node) for role, node in slots.items()}

    def role(tensor: str) -> str | None:
        return next((r for r, names in reads.items() if tensor in names), None)

    return role


def _conv_slips(call: ast.Call, line: ForwardLine, dilations: set[int]) -> Iterator[tuple]:
    dims = {"conv1d": 1, "conv2d": 2, "conv3d": 3}[_name(call)]
    x, w = _subject(call), _arg(call, 0, "weight")
    if x is None or w is None:
        return
    role = _role(call, {"input": x, "weight": w, "bias": _arg(call, 1, "bias")})
    d = _const(_arg(call, 4, "dilation"))
    d = 1 if d is None else d
    d = d if isinstance(d, int) else (d[0] if isinstance(d, tuple) and d else 1)
    taps = tuple(range(-dims, 0))
    what = f"`{_text(call)}`"
    line_text = f"`{line.source.strip()}`"
    apart = "next to each other" if d == 1 else f"{d} positions apart"

    def taps_say(tensor: str, grad: str, ns: dict) -> str | None:
        r = role(tensor)
        if r == "input":
            return (f"{grad} uses the kernel's taps in the forward order. Going back through "
                    f"{what}, each position of `{tensor}` collects from the outputs that read "
                    "it, and those lie on the other side of it: the gradient meets the taps in "
                    "reverse order, so the kernel is flipped along its tap axis.")
        if r == "weight":
            return (f"{grad} has its taps in reverse order (flipped). Tap k of `{tensor}` "
                    f"multiplies the input k·dilation positions into each window of {what}: "
                    "its gradient pairs the upstream gradient with the input at that tap's "
                    "own offset, not the other end's.")
        return None

    yield "conv-taps", taps_say, _with_arg(call, 0, "weight", _flip(w, taps))
    if dims == 2:
        # The taps' two axes swapped (a matrix transpose) where they were to be flipped: the
        # input's gradient through the kernel transposed, read as a flipped one.
        ws = ast.unparse(w)
        swapped = ast.parse(f"({ws}).transpose(-2, -1).flip(-2, -1)", mode="eval").body

        def swapped_say(tensor: str, grad: str, ns: dict) -> str | None:
            if role(tensor) != "input":
                return None
            return (f"{grad} meets the kernel with its two tap axes swapped (a transpose), "
                    f"where going back through {what} turns each tap around the centre (both "
                    "tap axes flipped): a transpose is a mirror along the diagonal only.")

        yield "conv-taps-transposed", swapped_say, _with_arg(call, 0, "weight", swapped)
    for axis in taps if dims > 1 else ():

        def axis_say(tensor: str, grad: str, ns: dict, axis: int = axis) -> str | None:
            r = role(tensor)
            if r not in ("input", "weight"):
                return None
            return (f"{grad} has the kernel flipped along one of its axes only (dim "
                    f"{axis} left as it was). Going back through {what}, the kernel is "
                    "reversed along every axis it slides over.")

        others = tuple(t for t in taps if t != axis)
        yield "conv-taps-one-axis", axis_say, _with_arg(call, 0, "weight", _flip(w, others))

    def channels_say(tensor: str, grad: str, ns: dict) -> str | None:
        if role(tensor) != "input":
            return None
        return (f"{grad} has the kernel flipped over its channel axes (dims 0 and 1). Going "
                f"back through {what}, the channels keep their places (the output's channels "
                "become the inputs by a transpose of those two axes, not by a flip); only the "
                "axes it slides along are reversed, where the formula needs it.")

    # `.flip(0, 1)` where the taps' axes belong (the channels reversed, the taps as they were),
    # or on a transposed convolution that needs no flip at all.
    for dims_flipped in ((0, 1, *taps), (0, 1)):
        yield "conv-taps-wrong-axes", channels_say, _with_arg(call, 0, "weight",
                                                              _flip(w, dims_flipped))

    padding = _const(_arg(call, 3, "padding"))
    if isinstance(padding, int) and padding > 0 and _padding(x) is None:
        for step in (1, -1):
            pads = tuple(p for _ in range(dims) for p in (padding + step, padding - step))

            def kw_shift_say(tensor: str, grad: str, ns: dict) -> str | None:
                if role(tensor) not in ("input", "weight"):
                    return None
                return (f"{grad} is off by one position: it is the gradient of {line_text} "
                        "with every window moved by one, as if the padding were on one side "
                        "only. Count again which positions each output read.")

            unpadded = _with_arg(call, 3, "padding", ast.Constant(0))
            pad_call = ast.parse(f"F.pad({ast.unparse(x)}, {pads})", mode="eval").body
            yield "conv-shift", kw_shift_say, _with_input(unpadded, pad_call)
    pad = _padding(x)
    if pad is not None:
        inner, pads = pad
        swapped = _swap_sides(pads)
        if swapped != pads:
            side = _side(pads)

            def side_say(tensor: str, grad: str, ns: dict) -> str | None:
                shift = _shift(pads)
                r = role(tensor)
                where = (f"the gradient of {line_text} as if its input were padded on the "
                         f"{side[1]} instead of the {side[0]}")
                if r == "input":
                    return (f"{grad} is shifted by {shift} along the positions: it is {where}. "
                            f"Which outputs read each position of `{tensor}`, and which of "
                            "those lie past the end of the sequence?")
                if r == "weight":
                    return (f"{grad} pairs the upstream gradient with input windows shifted "
                            f"by {shift}: it is {where}. Which positions did each output "
                            "read?")
                return None

            yield "conv-side", side_say, _with_input(call, _padded(x, swapped))

            def forward_say(tensor: str, grad: str, ns: dict) -> str | None:
                r = role(tensor)
                if r == "input":
                    return (f"{grad} is the forward convolution run over the gradient: the taps "
                            "in their forward order, looking the forward way. The gradient of "
                            f"{what} looks the other way: each position collects from the "
                            "outputs that read it, so the taps are reversed and what was "
                            f"padded on the {side[0]} is padded on the {side[1]}.")
                if r == "weight":
                    return (f"{grad} has its taps reversed and its windows shifted by "
                            f"{_shift(pads)}: it pairs each tap with the input of the other "
                            f"end of the window. Which positions did each output of {what} "
                            "read through each tap?")
                return None

            both = _with_input(_with_arg(call, 0, "weight", _flip(w, taps)),
                               _padded(x, swapped))
            yield "conv-forward", forward_say, both
            # ... and with the kernel's channels as the forward pass has them, too
            yield "conv-forward", forward_say, _with_arg(both, 0, "weight", _method_call(
                _flip(w, taps), "transpose", ast.Constant(0), ast.Constant(1)))
        for step in (1, -1):
            moved = _moved(pads, step)
            if moved is None:
                continue

            def shift_say(tensor: str, grad: str, ns: dict) -> str | None:
                r = role(tensor)
                if r in ("input", "weight"):
                    return (f"{grad} is off by one position: it is the gradient of "
                            f"{line_text} with every window moved by one. Count again which "
                            "positions each output read.")
                return None

            yield "conv-shift", shift_say, _with_input(call, _padded(x, moved))
        for other in sorted((dilations | {1}) - {d}):
            scaled = _scaled_pads(pads, d, other)
            if scaled is None:
                continue

            def dilation_say(tensor: str, grad: str, ns: dict, other: int = other) -> str | None:
                if role(tensor) not in ("input", "weight"):
                    return None
                return (f"{grad} is what {what} would send back at dilation {other}, but this "
                        f"convolution's taps are {apart} (dilation {d}). The gradient reads "
                        "the same spacing as the forward pass.")

            call_d = _with_arg(call, 4, "dilation", ast.Constant(other))
            yield "conv-dilation", dilation_say, _with_input(call_d, _padded(x, scaled))
        if len(pads) == 2 and min(pads) == 0 and max(pads) > 0 and dims == 1:
            # The padding of this dilation kept, the taps read at another: tap k from k·other
            # positions along the padded input, the far end of it left unread.
            kept = max(pads)
            for other in sorted((dilations | {1}) - {d}):
                rest = ast.parse(f"({ast.unparse(w)}.shape[-1] - 1) * {other} - {kept}",
                                 mode="eval").body
                sides = [ast.Constant(kept), rest] if pads[0] else [rest, ast.Constant(kept)]
                narrowed = _copy(x)
                narrowed.args[1] = ast.Tuple(sides, ast.Load())

                def kept_say(tensor: str, grad: str, ns: dict, other: int = other
                             ) -> str | None:
                    if role(tensor) not in ("input", "weight"):
                        return None
                    spacing = "next to each other" if other == 1 else f"{other} apart"
                    return (f"{grad} reads the kernel's taps {spacing} (dilation {other}) "
                            f"from the input as {what} pads it for dilation {d}: tap k reads "
                            f"k·{d} positions along, and the gradient pairs each tap with the "
                            "input at that tap's own offset.")

                call_d = _with_arg(call, 4, "dilation", ast.Constant(other))
                yield "conv-dilation-padding-kept", kept_say, _with_input(call_d, narrowed)

    def channels_say(tensor: str, grad: str, ns: dict) -> str | None:
        r = role(tensor)
        if r == "input":
            return (f"{grad} uses the kernel without swapping its input and output channels. "
                    f"Going back through {what}, output channel o sends to input channel i "
                    "through the weight that carried i to o: each tap's matrix is transposed.")
        if r == "weight":
            return (f"{grad} has its output and input channels swapped: `{tensor}` is "
                    "[out, in, taps], and the gradient of each weight pairs its own output "
                    "channel's gradient with its own input channel.")
        return None

    yield "conv-channels", channels_say, _with_arg(
        call, 0, "weight", _method_call(w, "transpose", ast.Constant(0), ast.Constant(1)))
    def maps_say(tensor: str, grad: str, ns: dict) -> str | None:
        if role(tensor) != "weight":
            return None
        return (f"{grad} gives every output channel the same kernel gradient, summed over all "
                f"of them. Each output channel of {what} has its own kernel, and its gradient "
                "pairs only that channel's upstream gradient with the input.")

    shared = _method_call(_method_call(w, "sum", ast.Constant(0)), "expand_as", _copy(w))
    shared.func.value.keywords = [ast.keyword("keepdim", ast.Constant(True))]  # type: ignore[attr-defined]
    yield "conv-maps-summed", maps_say, _with_arg(call, 0, "weight", shared)
    for k in range(2):  # a tap left out; kernels of two taps are the common case

        def tap_say(tensor: str, grad: str, ns: dict, k: int = k) -> str | None:
            if role(tensor) not in ("input", "weight"):
                return None
            return (f"{grad} leaves out what goes through one tap of the kernel (tap {k}): "
                    f"every tap of {what} read the input, and each sends gradient back.")

        yield "conv-tap-missing", tap_say, _with_arg(call, 0, "weight", _without_tap(w, k))


def _conv_stride_slips(call: ast.Call, line: ForwardLine) -> Iterator[Slip]:
    """A dilated convolution's input gradient taken as a transposed convolution with the
    dilation given as its stride (the taps' spacing put between the outputs instead), cut
    to the input's length at either end."""
    d = _const(_arg(call, 4, "dilation"))
    x, w = _subject(call), _arg(call, 0, "weight")
    pad = _padding(x) if x is not None else None
    inner = pad[0] if pad is not None else x
    if _name(call) != "conv1d" or not isinstance(d, int) or d < 2 or w is None \
            or not isinstance(inner, ast.Name):
        return
    what = f"`{_text(call)}`"

    def say(tensor: str, grad: str, ns: dict) -> str | None:
        return (f"{grad} spaces the upstream gradient {d} apart, as a stride of {d} would: "
                f"the transposed convolution was given the dilation as its stride. {what} "
                f"has stride 1 and its taps {d} apart (dilation {d}): the gradient goes back "
                f"through the same dilation.")

    for end in (True, False):

        def value(ns: dict, end: bool = end) -> Tensor | None:
            up, xv, wv = ns.get(gradient(line.target)), ns.get(inner.id), _evaluate_call(w, ns)
            if not all(isinstance(t, Tensor) for t in (up, xv, wv)) or up.dim() != 3:
                return None
            full = F.conv_transpose1d(up.double(), wv.double(), stride=d)
            n = xv.shape[-1]
            if full.shape[-1] < n:
                return None
            return full[..., -n:] if end else full[..., :n]

        yield Slip("conv-stride", say, line, local=value, tensor=inner.id)


def _flip(w: ast.expr, dims: tuple[int, ...]) -> ast.expr:
    return ast.Call(func=ast.Attribute(value=ast.Name("torch", ast.Load()), attr="flip",
                                       ctx=ast.Load()),
                    args=[_copy(w), ast.Tuple([ast.Constant(d) for d in dims], ast.Load())],
                    keywords=[])


def _method_call(obj: ast.expr, name: str, *args: ast.expr) -> ast.expr:
    return ast.Call(func=ast.Attribute(value=_copy(obj), attr=name, ctx=ast.Load()),
                    args=list(args), keywords=[])


def _without_tap(w: ast.expr, k: int) -> ast.expr:
    """`w` with tap `k` of its last axis zeroed (only for the last axis of a 1-D kernel, and
    the last axis of each row of a larger one)."""
    return ast.parse(f"__slip_zero_tap({ast.unparse(w)}, {k})", mode="eval").body


def _zero_tap(w: Tensor, k: int) -> Tensor:
    if w.shape[-1] <= k:
        raise ValueError("no such tap")
    mask = torch.ones(w.shape[-1], dtype=w.dtype, device=w.device)
    mask[k] = 0
    return w * mask


def _padding(x: ast.expr) -> tuple[ast.expr, tuple[int, ...]] | None:
    """`F.pad(inner, (a, b, ...))` read as (inner, pads), or None."""
    if isinstance(x, ast.Call) and _name(x) == "pad" and len(x.args) >= 2:
        pads = _const(x.args[1])
        if isinstance(pads, tuple) and pads and all(isinstance(p, int) for p in pads):
            return x.args[0], pads
    return None


def _padded(x: ast.Call, pads: tuple[int, ...]) -> ast.expr:
    new = _copy(x)
    new.args[1] = ast.Tuple([ast.Constant(p) for p in pads], ast.Load())
    return new


def _with_input(call: ast.Call, new: ast.expr) -> ast.Call:
    out = _copy(call)
    if _method(out):
        out.func.value = new
    else:
        out.args[0] = new
    return out


def _swap_sides(pads: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(p for i in range(0, len(pads) - 1, 2) for p in (pads[i + 1], pads[i]))


def _side(pads: tuple[int, ...]) -> tuple[str, str]:
    before, after = pads[0], pads[1] if len(pads) > 1 else 0
    return ("left", "right") if before > after else ("right", "left")


def _shift(pads: tuple[int, ...]) -> str:
    k = abs(pads[0] - (pads[1] if len(pads) > 1 else 0))
    return f"{k} position{'s' if k != 1 else ''}"


def _moved(pads: tuple[int, ...], step: int) -> tuple[int, ...] | None:
    a, b = pads[0] + step, pads[1] - step
    if a < -abs(pads[0]) - 1 or b < -abs(pads[1]) - 1:
        return None
    return (a, b, *pads[2:])


def _scaled_pads(pads: tuple[int, ...], d: int, other: int) -> tuple[int, ...] | None:
    if d <= 0 or any((p * other) % d for p in pads):
        return None
    return tuple(p * other // d for p in pads)


def _pool_slips(call: ast.Call, line: ForwardLine) -> Iterator[tuple]:
    name = _name(call)
    dims = 2 if name.endswith("2d") else 1
    x = _subject(call)
    size = _const(_arg(call, 0, "kernel_size"))
    stride = _const(_arg(call, 1, "stride"))
    if x is None or size is None:
        return
    role = _role(call, {"input": x})
    what = f"`{_text(call)}`"
    avg = ast.Call(func=ast.Attribute(value=ast.Name("F", ast.Load()),
                                      attr=f"avg_pool{dims}d", ctx=ast.Load()),
                   args=[_copy(a) for a in call.args], keywords=[_copy(k) for k in call.keywords])
    if _method(call):
        avg.args.insert(0, _copy(x))

    def spread_say(tensor: str, grad: str, ns: dict) -> str | None:
        if role(tensor) != "input":
            return None
        return (f"{grad} spreads each window's gradient evenly over the window, as an average "
                f"pool would. {what} passed on only the largest entry of each window: its "
                "gradient goes to that entry alone, and the others get none.")

    yield "pool-spread", spread_say, avg
    count = size ** dims if isinstance(size, int) else math.prod(size)
    if isinstance(size, int) and stride in (None, size):
        # Windows walked one entry at a time (`h[i:i+k]` for `h[k*i:k*i+k]`): the first
        # windows of a pool with stride 1, as many as the pool has, overlapping.
        xs = f"({ast.unparse(x)})"
        crop = ", ".join(f":{xs}.shape[{d}] // {size}" for d in range(-dims, 0))
        walked = ast.parse(f"F.max_pool{dims}d({xs}, {size}, 1)[..., {crop}]",
                           mode="eval").body

        def walked_say(tensor: str, grad: str, ns: dict) -> str | None:
            if role(tensor) != "input":
                return None
            return (f"{grad} routes each window's gradient through windows that start one "
                    f"entry apart, overlapping in the top-left corner: {what} steps its "
                    f"windows by {size}, so window i starts at {size} * i.")

        yield "pool-stride-one", walked_say, walked

    def all_say(tensor: str, grad: str, ns: dict) -> str | None:
        if role(tensor) != "input":
            return None
        return (f"{grad} gives every entry of a window the window's whole gradient. {what} "
                "passed on only the largest entry of each window, so only that entry has a "
                "gradient.")

    yield "pool-all", all_say, ast.BinOp(avg, ast.Mult(), ast.Constant(count))
    # Every window's gradient sent to the largest entry of the whole map, not of each window:
    # the map's maximum, as the pool's output, read in every window's place.
    axes = ast.Tuple([ast.Constant(-i) for i in range(dims, 0, -1)], ast.Load())
    whole = ast.Call(func=ast.Attribute(value=_copy(x), attr="amax", ctx=ast.Load()),
                     args=[axes], keywords=[ast.keyword("keepdim", ast.Constant(True))])
    spread = ast.Call(func=ast.Attribute(value=whole, attr="expand_as", ctx=ast.Load()),
                      args=[_copy(call)], keywords=[])

    def global_say(tensor: str, grad: str, ns: dict) -> str | None:
        if role(tensor) != "input":
            return None
        return (f"{grad} sends every window's gradient to the largest entry of the whole map. "
                f"{what} takes the largest entry of each window: each window's gradient goes to "
                "its own largest entry.")

    yield "pool-global-max", global_say, spread
    # The same with the map's first largest entry (`argmax`), where entries tie for it.
    xs, ones = ast.unparse(x), ", ".join(["1"] * dims)
    first = ast.parse(
        f"({xs}).flatten(-{dims}).gather(-1, ({xs}).flatten(-{dims}).argmax(-1, keepdim=True))"
        f".view(*({xs}).shape[:-{dims}], {ones}).expand_as({ast.unparse(call)})",
        mode="eval").body
    yield "pool-global-max", global_say, first
    # Only the window that holds the map's first largest entry passes its gradient on, to that
    # entry (the map's argmax where each window's belongs).
    indexed = _copy(call)
    indexed.keywords = [k for k in indexed.keywords if k.arg != "return_indices"] + [
        ast.keyword("return_indices", ast.Constant(True))]
    holder = ast.parse(
        f"({ast.unparse(first)}) * ({ast.unparse(indexed)}[1] == ({xs}).flatten(-{dims})"
        f".argmax(-1, keepdim=True).view(*({xs}).shape[:-{dims}], {ones})).to(({xs}).dtype)",
        mode="eval").body

    def holder_say(tensor: str, grad: str, ns: dict) -> str | None:
        if role(tensor) != "input":
            return None
        return (f"{grad} has a gradient at one entry of each map only, the whole map's "
                f"largest. {what} takes the largest entry of each window: every window's "
                "gradient goes to its own largest entry.")

    yield "pool-global-max", holder_say, holder
    # Every positive entry of the window given the window's gradient (a ReLU's mask taken for
    # the max's): the whole window's gradient where the entry is above zero.
    masked = _copy(avg)
    masked.args[0] = ast.BinOp(_copy(x), ast.Mult(),
                               ast.Compare(_copy(x), [ast.Gt()], [ast.Constant(0)]))

    def positive_say(tensor: str, grad: str, ns: dict) -> str | None:
        if role(tensor) != "input":
            return None
        return (f"{grad} gives the window's gradient to every positive entry of the window, "
                f"as a ReLU's mask would. {what} passed on only the largest entry of each "
                "window: only that one gets the gradient.")

    yield "pool-positive", positive_say, ast.BinOp(masked, ast.Mult(), ast.Constant(count))
    # The pool's indices count positions within one map; scattered over all of a sample's
    # maps flattened together, every map's gradient lands in the first map.
    indexed = _copy(call)
    indexed.keywords = [*indexed.keywords, ast.keyword("return_indices", ast.Constant(True))]
    over = ast.parse(
        f"({xs}).flatten(2)[:, :1].expand(-1, ({xs}).shape[1], -1).gather(2, "
        f"{ast.unparse(indexed)}[1].flatten(2)).view_as({ast.unparse(call)})",
        mode="eval").body

    def maps_say(tensor: str, grad: str, ns: dict) -> str | None:
        if role(tensor) != "input":
            return None
        return (f"{grad} puts every map's gradient into the first map. The indices of {what} "
                "count positions within one map: each map's gradient goes to the largest "
                "entry of its own map, at that position.")

    if dims == 2 or dims == 1:
        yield "pool-indices-maps", maps_say, over
    k = size if isinstance(size, int) else None
    s = stride if isinstance(stride, int) else k
    if k is not None and s == k and _arg(call, 2, "padding") is None:
        from itertools import product

        # Every window's gradient sent to the same place in it, whatever is largest there:
        # its first entry, its last (the bottom-right corner), or any other offset.
        for offset in product(range(k), repeat=dims):
            index = ast.Tuple([ast.Constant(...), *(
                ast.Slice(ast.Constant(o) if o else None, None, ast.Constant(k))
                for o in offset)], ast.Load())
            if not any(offset):
                where = "the window's first entry"
            elif all(o == k - 1 for o in offset):
                where = ("the window's last entry" + (" (its bottom-right corner)"
                                                      if dims == 2 else ""))
            else:
                where = f"the entry at position {offset if dims > 1 else offset[0]} of the window"

            def first_say(tensor: str, grad: str, ns: dict, where=where) -> str | None:
                if role(tensor) != "input":
                    return None
                return (f"{grad} sends each window's gradient to {where}, the same position "
                        f"in every window. {what} passed on the largest entry, wherever it is "
                        "in the window: that is where the gradient goes.")

            yield ("pool-first" if not any(offset) else "pool-fixed", first_say,
                   ast.Subscript(_copy(x), index, ast.Load()))
    if dims == 2 and k is not None and s == k and _arg(call, 2, "padding") is None:
        # Windows made by a plain reshape of each map: k*k entries in a row, not k x k squares
        # (the same count of windows, in the same order).
        rowed = ast.parse(f"F.max_pool2d({xs}, (1, {k * k})).reshape("
                          f"{ast.unparse(call)}.shape)", mode="eval").body

        def rows_say(tensor: str, grad: str, ns: dict) -> str | None:
            if role(tensor) != "input":
                return None
            return (f"{grad} takes each window as {k * k} entries in a row, as a plain reshape "
                    f"of the map groups them, not as the {k}x{k} squares {what} pools: each "
                    "window's gradient goes to the largest entry of its own square.")

        yield "pool-row-windows", rows_say, rowed
    if dims == 2 and k is not None and s == k and _arg(call, 2, "padding") is None:
        yield from _pool_window_slips(call, xs, k, what, role)
    if dims == 2:
        # The arriving gradient read transposed: window (i, j)'s gradient sent to the largest
        # entry of window (j, i).
        turned = _method_call(_copy(call), "transpose", ast.Constant(-2), ast.Constant(-1))

        def turned_say(tensor: str, grad: str, ns: dict) -> str | None:
            if role(tensor) != "input":
                return None
            return (f"{grad} sends the gradient of window (i, j) to the largest entry of "
                    f"window (j, i): `{gradient(line.target)}` is read with its rows and "
                    f"columns swapped (transposed). Each window of {what} gets its own "
                    "gradient.")

        yield "pool-transposed", turned_say, turned


def _pool_window_slips(call: ast.Call, xs: str, k: int, what: str,
                       role: Callable[[str], str | None]) -> Iterator[tuple]:
    """A 2-D max-pool's windows put back in the wrong places: the windows' gradients tiled over
    the map, the winner's row and column swapped inside its window, windows of entries spread
    across the map (a dilation) instead of k x k neighbours."""
    pooled = ast.unparse(call)
    rows, cols = f"({xs}).shape[-2] // {k}", f"({xs}).shape[-1] // {k}"
    # dh[r, c] = dpooled[r % H/k, c % W/k] at each window's largest entry: what `tile` gives.
    # The largest entry of each window, one per window as the pool's indices say (a window of
    # zeros after a ReLU has one too).
    winners = (f"torch.zeros_like({xs}).flatten(-2).scatter(-1, F.max_pool2d({xs}, {k}, "
               f"return_indices=True)[1].flatten(-2), 1.0).view_as({xs})")
    tiled = ast.parse(
        f"(({xs}) * {winners}).reshape(*({xs}).shape[:-2], {k}, {rows}, {k}, {cols})"
        ".sum((-4, -2))", mode="eval").body

    def tiled_say(tensor: str, grad: str, ns: dict) -> str | None:
        if role(tensor) != "input":
            return None
        return (f"{grad} repeats the whole map of window gradients side by side (a tile), so "
                f"the gradient of window (i, j) lands in other windows. Each window of {what} "
                f"is a {k}x{k} block of neighbours: its gradient goes into that block "
                "(each entry repeated into its own window, `repeat_interleave`), at its largest "
                "entry.")

    yield "pool-tiled", tiled_say, tiled
    # The same with the mask tiled too: each entry compared with the tiled map of maxima.
    both = ast.parse(
        f"(({xs}) * (({xs}) == {pooled}.tile(({k}, {k})))).reshape(*({xs}).shape[:-2], {k}, "
        f"{rows}, {k}, {cols}).sum((-4, -2))", mode="eval").body
    yield "pool-tiled", tiled_say, both
    # The winner's offset inside its window read with row and column swapped.
    turned = (f"({xs}).reshape(*({xs}).shape[:-2], {rows}, {k}, {cols}, {k})"
              f".transpose(-3, -1).reshape(({xs}).shape)")
    indexed = ast.parse(
        f"({turned}).flatten(-2).gather(-1, F.max_pool2d({xs}, {k}, return_indices=True)[1]"
        f".flatten(-2)).view_as({pooled})", mode="eval").body

    def offset_say(tensor: str, grad: str, ns: dict) -> str | None:
        if role(tensor) != "input":
            return None
        return (f"{grad} sends each window's gradient into the right window, but to the entry "
                "with the largest entry's row and column swapped. A window's entries count "
                f"row by row: the winner at offset `idx` sits at row `idx // {k}`, column "
                f"`idx % {k}` of its window.")

    yield "pool-offset-swapped", offset_say, indexed
    spread = ast.parse(f"F.max_pool2d({xs}, {k}, stride=1, dilation=({rows}, {cols}))",
                       mode="eval").body

    def spread_say(tensor: str, grad: str, ns: dict) -> str | None:
        if role(tensor) != "input":
            return None
        return (f"{grad} takes each window as {k}x{k} entries spread across the map, "
                f"{k} apart by a whole window's count of positions (a dilated window), not as "
                f"the block of neighbours {what} pools: window (i, j) covers rows {k}i to "
                f"{k}i+{k - 1} and columns {k}j to {k}j+{k - 1}.")

    yield "pool-spread-windows", spread_say, spread


_DIMMED = {"softmax": 0, "log_softmax": 0, "sum": 0, "mean": 0, "cumsum": 0, "logsumexp": 0,
           "var": 0, "std": 0, "amax": 0}


def _dim_slips(call: ast.Call, line: ForwardLine, rank: Callable[[ast.expr], int | None]
               ) -> Iterator[tuple]:
    x = _subject(call)
    dim_node = _arg(call, 0, "dim")
    d = _const(dim_node)
    r = rank(x) if x is not None else None
    if not isinstance(d, int) or r is None:
        return
    here = d % r
    what = f"`{_text(call)}`"
    for other in range(r):
        if other == here:
            continue

        def say(tensor: str, grad: str, ns: dict, other: int = other) -> str:
            return (f"{grad} is the gradient of {what} taken along dim {other}, but the line "
                    f"works along dim {here}: the entries that share a {_name(call)} are the "
                    f"ones along dim {here}.")

        yield f"{_name(call)}-dim", say, _with_arg(call, 0, "dim", ast.Constant(other))


def _count_slips(call: ast.Call, line: ForwardLine) -> Iterator[tuple]:
    name = _name(call)
    what = f"`{_text(call)}`"
    if name in ("mean", "sum"):
        other = "sum" if name == "mean" else "mean"
        new = _copy(call)
        new.func.attr = other if isinstance(new.func, ast.Attribute) else other
        if isinstance(new.func, ast.Name):
            new.func.id = other

        def say(tensor: str, grad: str, ns: dict) -> str:
            count = _count(call, ns)
            counted = f" ({count}, the entries it adds up)" if count else ""
            if name == "mean":
                return (f"{grad} leaves out the division by the count{counted}: {what} is a "
                        "mean, so "
                        "each entry's share of the gradient is divided by how many entries "
                        "were averaged.")
            return (f"{grad} divides by a count{counted}, but {what} is a sum: each entry "
                    "receives the whole upstream gradient, undivided.")

        yield "count", say, new
    if name in ("var", "std"):
        flag = _arg(call, 1, "unbiased")
        biased = _const(_arg(call, 99, "correction")) == 0 or _const(flag) is False
        new = _copy(call)
        new.keywords = [k for k in new.keywords if k.arg not in ("unbiased", "correction")]
        new.keywords.append(ast.keyword(arg="correction", value=ast.Constant(1 if biased else 0)))

        def say_var(tensor: str, grad: str, ns: dict) -> str:
            return (f"{grad} divides by {'n - 1' if biased else 'n'} where {what} divides by "
                    f"{'n' if biased else 'n - 1'}: check which count the variance uses "
                    "(Bessel's correction).")

        yield "bessel", say_var, new


def _conv_bias(line: ForwardLine, tensor: str) -> bool:
    expr = _parsed(line.source)
    return any(isinstance(n, ast.Call) and _name(n) in _CONVS
               and tensor in _reads(_arg(n, 1, "bias")) for n in ast.walk(expr or ast.Pass()))


def _broadcast_slips(line: ForwardLine, tensor: str, ns: dict, channels: bool = False
                     ) -> Iterator[tuple[str, str, Tensor]]:
    """A tensor the line broadcast gets the sum of its copies' gradients over the broadcast
    dims: the slips of that sum (a mean, one position only, one of the dims left out)."""
    up, x = ns.get(gradient(line.target)), ns.get(tensor)
    if not isinstance(up, Tensor) or not isinstance(x, Tensor) or x.dim() > up.dim() \
            or x.shape == up.shape:
        return
    # A convolution's bias runs along the channels, dim 1, whatever the sizes say.
    kept = [1] if channels and x.dim() == 1 and up.dim() > 2 and up.shape[1] == x.shape[0] \
        else _aligned(tuple(up.shape), tuple(x.shape))
    if kept is None:
        return
    dims = [d for d in range(up.dim()) if d not in kept]
    up = up.detach().to("cpu", torch.float64)

    def shaped(t: Tensor) -> Tensor:
        return t.reshape(x.shape)

    names = {0: "the batch"} | {d: f"dim {d}" for d in range(1, up.dim())}
    yield ("mean", "averages over the copies where their gradients add up: each copy sends back "
           "its whole gradient", shaped(up.mean(dims, keepdim=True)))
    for d in dims:
        rest = [e for e in dims if e != d]
        for which, at in (("the last", -1), ("the first", 0)):
            t = up.narrow(d, up.shape[d] - 1 if at == -1 else 0, 1)
            t = t.sum(rest, keepdim=True) if rest else t
            yield ("one", f"keeps only {which} entry along {names[d]}, where every entry along "
                   "it sends back gradient", shaped(t))
        t = up.sum(rest, keepdim=True) if rest else up
        yield ("mean", f"averages over {names[d]} where the copies' gradients add up",
               shaped(t.mean(d, keepdim=True)))
    right = up.sum(dims, keepdim=True)
    for d in kept:
        if up.shape[d] > 1:
            yield ("own-axis", f"adds up over {names[d]} too, an axis `{tensor}` has entries "
                   "of its own along: each of them gets its own gradient, summed only over "
                   "the copies", shaped(right.sum(d, keepdim=True).expand_as(right)))


def _aligned(big: tuple[int, ...], small: tuple[int, ...]) -> list[int] | None:
    """Which dims of `big` a tensor of shape `small` lines up with (its size-1 dims left out):
    the trailing ones where they fit, as broadcasting has it, else the first that fit in order
    (a convolution's bias, along the channels)."""
    want = [s for s in small if s != 1]
    if not want or len(want) >= len(big):
        return None
    trailing = list(range(len(big) - len(small), len(big)))
    if all(big[d] == s or s == 1 for d, s in zip(trailing, small, strict=True)):
        return [d for d, s in zip(trailing, small, strict=True) if s != 1]
    kept, d = [], 0
    for s in want:
        while d < len(big) and big[d] != s:
            d += 1
        if d == len(big):
            return None
        kept.append(d)
        d += 1
    return kept


def _count(call: ast.Call, ns: dict) -> int | None:
    """How many entries the reduction `call` adds into each of its results."""
    x, y = _subject(call), call
    xv = _evaluate_call(x, ns) if x is not None else None
    yv = _evaluate_call(y, ns)
    if xv is None or yv is None or not yv.numel() or xv.numel() % yv.numel():
        return None
    return xv.numel() // yv.numel()


def _matmul_slips(node: ast.BinOp, line: ForwardLine) -> Iterator[tuple]:
    """A matrix product whose arriving gradient is used transposed: the roles of the rows and
    the columns of the product swapped (`dscores.T @ k` for `q`'s gradient)."""
    what = f"`{_text(node)}`"
    swapped = ast.Call(func=ast.Attribute(value=_copy(node), attr="transpose", ctx=ast.Load()),
                       args=[ast.Constant(-2), ast.Constant(-1)], keywords=[])
    a, b = _reads(node.left), _reads(node.right)

    def say(tensor: str, grad: str, ns: dict) -> str | None:
        if tensor not in a and tensor not in b:
            return None
        side = "rows" if tensor in a else "columns"
        return (f"{grad} reads the arriving gradient transposed. In {what} the {side} of the "
                f"product belong to `{tensor}`: the gradient's matching axis has to line up "
                "with them.")

    yield "matmul-upstream-transposed", say, swapped
    # An operand used as it stands where its transpose belongs (`dq @ Wq` for `dq @ Wq.T`):
    # the product of the other operand with this one transposed, which fits where the
    # operand is square.
    for side, operand in (("left", node.left), ("right", node.right)):
        flipped = ast.Call(func=ast.Attribute(value=_copy(operand), attr="transpose",
                                              ctx=ast.Load()),
                           args=[ast.Constant(-2), ast.Constant(-1)], keywords=[])
        changed = ast.BinOp(flipped if side == "left" else _copy(node.left), ast.MatMult(),
                            flipped if side == "right" else _copy(node.right))
        names = _reads(operand)

        def untransposed_say(tensor: str, grad: str, ns: dict, names: set = names,
                             operand: ast.expr = operand) -> str | None:
            if tensor in names:
                return None
            return (f"{grad} multiplies by `{_text(operand)}` as it stands. In {what} the "
                    f"gradient of the other operand goes through `{_text(operand)}` "
                    "transposed: its rows and columns trade places.")

        yield f"matmul-{side}-untransposed", untransposed_say, changed

        # Laid out by a reshape (or a view) to the transposed shape where the transpose
        # belongs (`W.view(V, H)` for `W.T`, `x.reshape(C, -1)` for the rows' `x.T`): the
        # entries in memory order, scrambled. What the other operand's gradient then reads is
        # the operand `scrambled.T`, as a line that read this in its place.
        x = f"({ast.unparse(operand)})"
        for scrambled in (f"{x}.reshape({x}.shape[-1], -1).transpose(0, 1).reshape({x}.shape)",
                          f"({x}.reshape(*{x}.shape[:-2], {x}.shape[-1], {x}.shape[-2])"
                          f".transpose(-2, -1) if {x}.dim() > 2 else {x})"):
            laid = ast.parse(scrambled, mode="eval").body
            reshaped = ast.BinOp(laid if side == "left" else _copy(node.left), ast.MatMult(),
                                 laid if side == "right" else _copy(node.right))

            def reshaped_say(tensor: str, grad: str, ns: dict, names: set = names,
                             operand: ast.expr = operand) -> str | None:
                if tensor in names:
                    return None
                return (f"{grad} lays `{_text(operand)}` out with a reshape (or a view) where "
                        "its transpose belongs: a reshape to the transposed shape keeps the "
                        "entries in memory order, so its rows and columns come out scrambled, "
                        "not swapped.")

            yield f"matmul-{side}-reshaped", reshaped_say, reshaped
    # The right operand's gradient from sums: the left operand and the arriving gradient each
    # added up over their rows (batch and positions) before the product, so that one outer
    # product stands for the sum of a product per row.
    left = f"({ast.unparse(node.left)})"
    summed = ast.parse(
        f"({left}.detach().sum(tuple(range({left}.dim() - 1)), keepdim=True).expand_as({left})"
        f" @ ({ast.unparse(node.right)})) if {left}.dim() > 1 else {ast.unparse(node)}",
        mode="eval").body
    right_names = _reads(node.right)

    def sums_say(tensor: str, grad: str, ns: dict) -> str | None:
        if tensor not in right_names:
            return None
        return (f"{grad} is one outer product of two sums: `{_text(node.left)}` and the "
                f"arriving gradient each added up over their rows first. In {what} every row "
                "makes its own product with its own gradient, and those products add up: the "
                "sum of products, not the product of sums.")

    yield "matmul-sums-first", sums_say, summed


def _loss_slips(call: ast.Call, line: ForwardLine) -> Iterator[tuple]:
    """A mean loss's gradient without its division by the count, or divided by only a part
    of it (the batch, where the loss averages over every position too)."""
    what = f"`{_text(call)}`"
    if _const(_arg(call, 99, "reduction")) not in (None, "mean"):
        return
    summed = _copy(call)
    summed.keywords = [k for k in summed.keywords if k.arg != "reduction"]
    summed.keywords.append(ast.keyword(arg="reduction", value=ast.Constant("sum")))

    def say(tensor: str, grad: str, ns: dict) -> str:
        count = _count_of_loss(call, ns)
        many = f" of its {count} terms" if count else ""
        return (f"{grad} leaves out the division by the count: {what} is the mean{many}, so "
                "each term's gradient is divided by how many there are.")

    yield "loss-no-mean", say, summed
    x = _subject(call)
    plain = not {k.arg for k in call.keywords} - {"reduction"}
    if _name(call) == "cross_entropy" and x is not None and plain and len(call.args) == 2:
        # One subtracted from every entry of the row, not from the target's alone: the
        # gradient of each row's logsumexp less the sum of all its entries.
        xs = ast.unparse(x)
        every = ast.parse(f"(torch.logsumexp({xs}, 1) - ({xs}).sum(1)).mean()",
                          mode="eval").body

        def every_say(tensor: str, grad: str, ns: dict) -> str | None:
            if tensor != _root(x):
                return None
            return (f"{grad} subtracts 1 from every entry of each row. In the gradient of "
                    f"{what}, the 1 comes from the target's own logit only: each row loses "
                    "1 at its target's class, and nowhere else.")

        yield "loss-one-everywhere", every_say, every


def _loss_dim_slips(call: ast.Call, line: ForwardLine,
                    rank: Callable[[ast.expr], int | None]) -> Iterator[tuple]:
    """The cross-entropy's rule, softmax less the one-hot target over the count, with the
    softmax taken along another dim of the logits (of the tensor the line reads a view of:
    `logits.view(-1, V)` has the logits' last dim for its classes)."""
    x = _subject(call)
    root = _root(x) if x is not None else None
    r = rank(ast.Name(root, ast.Load())) if root else None
    target = _arg(call, 0, "target")
    plain = not {k.arg for k in call.keywords} - {"reduction"}
    if _name(call) != "cross_entropy" or root is None or r is None or r < 2 \
            or target is None or not plain or len(call.args) != 2 \
            or _const(_arg(call, 99, "reduction")) not in (None, "mean"):
        return
    classes = 1 if isinstance(x, ast.Name) else r - 1
    what = f"`{_text(call)}`"
    up = gradient(line.target)

    for d in [*range(r), "log", "exp", "probs", "inner", "diagonal", "argmax", "columns",
              "unweighted", "sigmoid", "overwritten", "rows", "pfree", "negp"]:
        if d == classes:
            continue

        def local(ns: dict, d: int | str = d) -> Tensor | None:
            return _softmax_less_hot(ns, root, _evaluate_call(target, ns), classes, up, d)

        def say(tensor: str, grad: str, ns: dict, d: int | str = d) -> str | None:
            return (f"{grad} takes the softmax along dim {d} of `{root}`, but {what} takes it "
                    f"along the classes, dim {classes}: each example's probabilities add up to "
                    f"one across the classes, not across dim {d}.")

        def log_say(tensor: str, grad: str, ns: dict) -> str | None:
            return (f"{grad} takes the wrong function of the logits: it starts from the "
                    f"log-probabilities (`log_softmax`), where {what}'s gradient is built from "
                    "the probabilities themselves. The log belongs to the loss, not to its "
                    "derivative.")

        def exp_say(tensor: str, grad: str, ns: dict) -> str | None:
            return (f"{grad} takes `exp({root})` for the probabilities: the softmax in {what} "
                    "also divides each row by its sum, so that a row's probabilities add up to "
                    "one. Without that division each entry is off by its row's factor.")

        def probs_say(tensor: str, grad: str, ns: dict) -> str | None:
            return (f"{grad} is the gradient with respect to the probabilities, `-1 / p` at "
                    f"each target over the count: {what} takes a softmax of `{root}` first, "
                    "and that softmax's backward is never taken. Carry the gradient on through "
                    "it to the logits.")

        def inner_say(tensor: str, grad: str, ns: dict) -> str | None:
            return (f"{grad} goes through the softmax in {what} with a Jacobian built from the "
                    "inner product of the probabilities (one number per row, broadcast) where "
                    "`diag(p) - p p^T` needs the outer product: its entry (i, j) is "
                    "`-p_i * p_j`.")

        def diagonal_say(tensor: str, grad: str, ns: dict) -> str | None:
            return (f"{grad} goes through the softmax in {what} with only its Jacobian's "
                    "diagonal, `p * (1 - p)` for each entry, as for an elementwise sigmoid: "
                    "every probability of a row also depends on the row's other logits, "
                    "through the sum that normalises them, so the other classes get a "
                    "gradient too.")

        def argmax_say(tensor: str, grad: str, ns: dict) -> str | None:
            return (f"{grad} subtracts the one-hot of the model's own prediction (the "
                    f"largest logit of each row) where {what} compares each row with its "
                    f"target `{_text(target)}`: the 1 comes off at the right answer's class, "
                    "whatever the model guessed.")

        def columns_say(tensor: str, grad: str, ns: dict) -> str | None:
            return (f"{grad} takes 1 off every row at every class that is some row's target "
                    "(a whole column indexed where each row has its own entry): in "
                    f"{what} each row loses 1 at its own target only. Pair each row with its "
                    "own target.")

        def unweighted_say(tensor: str, grad: str, ns: dict) -> str | None:
            return (f"{grad} goes through the softmax in {what} with a row term that sums the "
                    "arriving gradient plainly, where it is weighted by the probabilities: "
                    "`p * (g - (p * g).sum())`, not `p * (g - g.sum())`.")

        def sigmoid_say(tensor: str, grad: str, ns: dict) -> str | None:
            return (f"{grad} takes an elementwise sigmoid of `{root}` for the probabilities, "
                    f"as a binary cross-entropy would: {what} takes a softmax, which divides "
                    "each row's exponentials by their sum, so that the classes share one.")

        def overwritten_say(tensor: str, grad: str, ns: dict) -> str | None:
            return (f"{grad} sets each target's entry to -1 (an assignment, `=` or "
                    "`scatter_`) where 1 comes off the probability there: the target's entry "
                    f"of {what}'s gradient is `p - 1`, not `-1`. Subtract, or `scatter_add_`.")

        def rows_say(tensor: str, grad: str, ns: dict) -> str | None:
            return (f"{grad} indexes with the targets alone (`g[{_text(target)}] -= 1`), which "
                    "picks whole rows numbered by the targets' values and takes 1 off every "
                    f"entry of them. In {what} each row loses 1 at its own target's column: "
                    "pair the rows' numbers with the targets, `g[range(n), y]`.")

        def pfree_say(tensor: str, grad: str, ns: dict) -> str | None:
            return (f"{grad} goes through the softmax in {what} as `g - (p * g).sum()`, "
                    "without the probabilities in front: the softmax's backward is "
                    "`p * (g - (p * g).sum())`, each entry scaled by its own probability.")

        def negp_say(tensor: str, grad: str, ns: dict) -> str | None:
            return (f"{grad} takes the derivative of `-log p` as `-p`: it is `-1 / p`. The "
                    f"rest of the chain through the softmax in {what} is right.")

        yield {"log": ("loss-log-softmax", log_say, local, root),
               "sigmoid": ("loss-sigmoid", sigmoid_say, local, root),
               "overwritten": ("loss-target-overwritten", overwritten_say, local, root),
               "rows": ("loss-target-rows", rows_say, local, root),
               "pfree": ("loss-softmax-no-leading-p", pfree_say, local, root),
               "negp": ("loss-log-derivative", negp_say, local, root),
               "unweighted": ("loss-softmax-row-unweighted", unweighted_say, local, root),
               "exp": ("loss-unnormalised", exp_say, local, root),
               "probs": ("loss-stopped-at-probs", probs_say, local, root),
               "inner": ("loss-softmax-inner-product", inner_say, local, root),
               "diagonal": ("loss-softmax-diagonal", diagonal_say, local, root),
               "argmax": ("loss-prediction-target", argmax_say, local, root),
               "columns": ("loss-target-columns", columns_say, local, root)}.get(
            d, ("loss-softmax-dim", say, local, root))
    # The one-hot of other indices than the targets: a column of the inputs (the context's
    # last character, say), which a learner takes for what comes next.
    for place, column in (("first", 0), ("last", -1)):

        def wrong_target(ns: dict, column: int = column) -> tuple[str, Tensor] | None:
            y = _evaluate_call(target, ns)
            if not isinstance(y, Tensor) or y.dim() != 1:
                return None
            for name, t in ns.items():
                if isinstance(t, Tensor) and t is not y and not t.is_floating_point() \
                        and t.dim() == 2 and t.shape[0] == y.shape[0] and t.dtype != torch.bool:
                    return name, t[:, column]
            return None

        def target_local(ns: dict, wrong_target=wrong_target) -> Tensor | None:
            found = wrong_target(ns)
            return _softmax_less_hot(ns, root, found[1], classes, up, classes) if found else None

        def target_say(tensor: str, grad: str, ns: dict, wrong_target=wrong_target,
                       place: str = place) -> str | None:
            found = wrong_target(ns)
            if found is None:
                return None
            return (f"{grad} subtracts the one-hot of the wrong indices: {what} compares each "
                    f"row with its target `{_text(target)}`, but this one-hot is built from "
                    f"the {place} column of `{found[0]}`, the inputs.")

        yield "loss-wrong-target", target_say, target_local, root


def _softmax_less_hot(ns: dict, root: str, y: Tensor | None, classes: int, up: str,
                      d: int | str) -> Tensor | None:
    """The cross-entropy's gradient, softmax less the one-hot of `y` over the count, with the
    softmax along `d` (the log-softmax for "log")."""
    logits = ns.get(root)
    if not isinstance(logits, Tensor) or not isinstance(y, Tensor) or y.is_floating_point():
        return None
    z = logits.detach().to("cpu", torch.float64)
    moved = z.movedim(classes, -1)
    if y.numel() * moved.shape[-1] != moved.numel():
        return None
    hot = F.one_hot(y.reshape(-1).long().cpu(), moved.shape[-1]).to(z.dtype)
    hot = hot.reshape(moved.shape).movedim(-1, classes)
    scale = ns.get(up)
    scale = float(scale) if isinstance(scale, Tensor) and scale.numel() == 1 else 1.0
    if d == "log":
        # the log-probabilities where the probabilities belong
        return (F.log_softmax(z, dim=classes) - hot) * scale / y.numel()
    if d == "exp":
        # the exponentials, never divided by their row's sum
        return (z.exp() - hot) * scale / y.numel()
    p = F.softmax(z, dim=classes)
    if d == "argmax":
        # the one-hot of the prediction, the largest logit, for the target's
        guess = F.one_hot(z.argmax(classes).reshape(-1), moved.shape[-1]).to(z.dtype)
        return (p - guess.reshape(moved.shape).movedim(-1, classes)) * scale / y.numel()
    if d == "sigmoid":
        # an elementwise sigmoid for the probabilities, as in a binary cross-entropy
        return (torch.sigmoid(z) - hot) * scale / y.numel()
    if d == "overwritten":
        # `scatter_(..., -1)` or `g[i, y] = -1`: the target's entry set to -1, not p - 1
        return (p * (1 - hot) - hot) * scale / y.numel()
    if d == "rows":
        # `g[y] -= 1`: the rows numbered like the targets lose 1 in every column
        flat = p.movedim(classes, -1).reshape(-1, moved.shape[-1]).clone()
        picked = torch.zeros(flat.shape[0], dtype=torch.bool)
        index = y.reshape(-1).long().cpu()
        if int(index.max()) >= flat.shape[0]:
            return None
        picked[index] = True
        flat[picked] -= 1
        return flat.reshape(moved.shape).movedim(-1, classes) * scale / y.numel()
    if d == "columns":
        # `p[:, y] -= 1`: every row loses 1 at every class some row has for its target
        seen = hot.movedim(classes, -1).reshape(-1, moved.shape[-1]).amax(0)
        shape = [1] * z.dim()
        shape[classes] = -1
        return (p - seen.view(shape)) * scale / y.numel()
    dp = -hot / p * scale / y.numel()  # the gradient with respect to the probabilities
    if d == "diagonal":
        return p * (1 - p) * dp
    if d == "unweighted":
        # the softmax's backward with its row term `g.sum()` where `(p * g).sum()` belongs
        return p * (dp - dp.sum(classes, keepdim=True))
    if d == "probs":
        return dp
    if d == "pfree":
        # the softmax's backward without the probabilities in front: `g - (p * g).sum()`
        return dp - (p * dp).sum(classes, keepdim=True)
    if d == "negp":
        # the log's derivative taken as `-p` where it is `-1 / p`
        flipped = -hot * p * scale / y.numel()
        return p * (flipped - (p * flipped).sum(classes, keepdim=True))
    if d == "inner":
        # the softmax's Jacobian with `p^T p`, one number per row, for `p p^T`
        return p * dp - (p * p).sum(classes, keepdim=True) * dp.sum(classes, keepdim=True)
    return (F.softmax(z, dim=d) - hot) * scale / y.numel()


def _root_node(x: ast.expr) -> ast.expr:
    while isinstance(x, ast.Call) and isinstance(x.func, ast.Attribute):
        x = x.func.value
    return x


def _root(x: ast.expr) -> str | None:
    """The tensor an expression like `logits.view(-1, V)` is a view of."""
    while isinstance(x, ast.Call) and isinstance(x.func, ast.Attribute):
        x = x.func.value
    return x.id if isinstance(x, ast.Name) else None


def _count_of_loss(call: ast.Call, ns: dict) -> int | None:
    target = _arg(call, 0, "target")
    t = _evaluate_call(target, ns) if target is not None else None
    return t.numel() if t is not None else None


def _normaliser_slips(call: ast.Call, line: ForwardLine, sources: tuple[str, ...] = ()
                      ) -> Iterator[tuple]:
    """A softmax (or log-softmax) whose normalising sum is taken for a constant: only each
    entry's own path, none through the sum that every entry of the row shares. `sources`: the
    forward tensors the softmax's input is made from (the scores a mask was laid over), which
    its backward may be fed in place of the probabilities too."""
    name = _name(call)
    x, dim = _subject(call), _arg(call, 0, "dim")
    if name not in ("softmax", "log_softmax") or x is None or dim is None:
        return
    what = f"`{_text(call)}`"
    d = ast.unparse(dim)
    shifted = f"(({ast.unparse(x)}) - ({ast.unparse(x)}).amax({d}, keepdim=True).detach())"
    total = f"torch.logsumexp({shifted}, {d}, keepdim=True).detach()"
    text = (f"torch.exp({shifted} - {total})" if name == "softmax" else f"{shifted} - {total}")

    def say(tensor: str, grad: str, ns: dict) -> str:
        return (f"{grad} has only each entry's own path through {what}: the sum that "
                f"normalises the row is treated as a constant. Every output of the row "
                "depends on every input through that sum, so each entry's gradient also has a "
                "share of the whole row's.")

    yield f"{name}-sum-constant", say, ast.parse(text, mode="eval").body
    if name == "softmax":
        # Only the Jacobian's diagonal, `s·(1 - s)`, as for an elementwise sigmoid: a line
        # whose local derivative is that, held constant.
        probs = f"torch.softmax({ast.unparse(x)}, {d})"
        diagonal = f"({ast.unparse(x)}) * ({probs} * (1 - {probs})).detach()"

        def diagonal_say(tensor: str, grad: str, ns: dict) -> str:
            return (f"{grad} takes only the diagonal of the softmax's Jacobian, `s * (1 - s)` "
                    f"for each entry, as for an elementwise sigmoid. In {what} every output "
                    "of a row also depends on the row's other inputs, through the sum that "
                    "normalises them: those entries, `-s_i * s_j`, are missing.")

        yield "softmax-diagonal", diagonal_say, ast.parse(diagonal, mode="eval").body
        # The softmax's backward taken with the exponentials for the probabilities: a line
        # whose Jacobian is `diag(e) - e e^T`, e = exp(x), left unnormalised.
        xs = ast.unparse(x)
        e = f"torch.exp({xs})"
        plain = f"{e} - {e}.detach() * {e}.sum({d}, keepdim=True)"

        def exp_say(tensor: str, grad: str, ns: dict) -> str:
            return (f"{grad} is the softmax's backward taken with `exp({xs})` in place of the "
                    f"probabilities: {what} divides the exponentials by their row's sum, and "
                    "its local derivative is made of those normalised values.")

        yield "softmax-unnormalised", exp_say, ast.parse(plain, mode="eval").body
        # The backward's formula without the probabilities in front, `g - (s * g).sum()`: a
        # line whose Jacobian is `I - 1 s^T`.
        leading = f"({xs}) - ({probs}).detach() * ({xs}).sum({d}, keepdim=True)"

        def leading_say(tensor: str, grad: str, ns: dict) -> str:
            return (f"{grad} is `g - (s * g).sum()`, the softmax's backward through {what} "
                    "without the probabilities in front: it is `s * (g - (s * g).sum())`, "
                    "each entry scaled by its own probability.")

        yield "softmax-no-leading-p", leading_say, ast.parse(leading, mode="eval").body

        # The backward's formula, `s * (g - (s * g).sum())`, fed other values for `s`: the
        # line's input (the scores before the softmax), or probabilities taken along another
        # dim. A line linear in its input whose Jacobian is `diag(p) - p p^T` for those `p`.
        def fed(p: str) -> str:
            return (f"({p}).detach() * ({xs}) - ({p}).detach() * "
                    f"(({p}).detach() * ({xs})).sum({d}, keepdim=True)")

        def input_say(tensor: str, grad: str, ns: dict) -> str:
            return (f"{grad} is the softmax's backward with `{xs}`, the line's input, where its "
                    f"output belongs: `s * (g - (s * g).sum())` takes the probabilities that "
                    f"{what} made, not the scores it was given.")

        yield "softmax-fed-input", input_say, ast.parse(fed(xs), mode="eval").body
        # The Jacobian `diag(s) - s s^T` built with the inner product `s^T s` (one number per
        # row, broadcast) where the outer product belongs.
        p_ = f"torch.softmax({xs}, {d}).detach()"
        inner = (f"{p_} * ({xs}) - ({p_} * {p_}).sum({d}, keepdim=True) * "
                 f"({xs}).sum({d}, keepdim=True)")

        def inner_say(tensor: str, grad: str, ns: dict) -> str:
            return (f"{grad} builds the softmax's Jacobian `diag(s) - s s^T` with the inner "
                    "product of the probabilities (one number per row, broadcast) where the "
                    f"outer product belongs: in {what} the entry (i, j) is `-s_i * s_j`, a "
                    "matrix per row.")

        yield "softmax-inner-product", inner_say, ast.parse(inner, mode="eval").body

        def skipped_say(tensor: str, grad: str, ns: dict) -> str:
            return (f"{grad} is the arriving gradient handed straight through, as if {what} "
                    "were not there: the softmax's own derivative, `s * (g - (s * g).sum())`, "
                    "is left out.")

        yield "softmax-skipped", skipped_say, _copy(x)
        # The same, with nothing sent back to the entries a mask set to -inf, which the
        # softmax gave probability 0 (a learner who masks the gradient as the forward did).
        kept = ast.parse(f"torch.where(torch.isfinite({xs}), {xs}, ({xs}).detach())",
                         mode="eval").body
        yield "softmax-skipped", skipped_say, kept
        # Fed what the input was made from: a masked input holds -inf, so the unmasked scores
        # a line earlier are the ones a learner reaches for.
        for source in sources:
            guarded = (f"({fed(source)}) if ({source}).shape == ({xs}).shape "
                       f"else {ast.unparse(call)}")

            def source_say(tensor: str, grad: str, ns: dict, source: str = source) -> str:
                return (f"{grad} is the softmax's backward with `{source}`, the tensor {xs} was "
                        f"made from, where the softmax's output belongs: `s * (g - (s * "
                        f"g).sum())` takes the probabilities that {what} made.")

            yield "softmax-fed-input", source_say, ast.parse(guarded, mode="eval").body
        for other_dim in range(4):
            p_other = f"torch.softmax({xs}, {other_dim})"
            guarded = (f"({fed(p_other)}) if ({xs}).dim() > {other_dim} and {other_dim} != "
                       f"({d}) % ({xs}).dim() else {ast.unparse(call)}")

            def dim_say(tensor: str, grad: str, ns: dict, other_dim: int = other_dim) -> str:
                return (f"{grad} is the softmax's backward with probabilities taken along dim "
                        f"{other_dim}: {what} normalises along dim {d}, so the `s` in "
                        "`s * (g - (s * g).sum())` is that softmax's own output.")

            yield "softmax-fed-other-dim", dim_say, ast.parse(guarded, mode="eval").body
    # The other one's backward: softmax's `s * (g - (s * g).sum())` and log-softmax's
    # `g - softmax * g.sum()` are easily taken for each other.
    other = "log_softmax" if name == "softmax" else "softmax"
    swapped = _copy(call)
    if isinstance(swapped.func, ast.Attribute):
        swapped.func.attr = other
    elif isinstance(swapped.func, ast.Name):
        swapped.func.id = other

    def other_say(tensor: str, grad: str, ns: dict, other: str = other) -> str:
        return (f"{grad} is the backward of a {other.replace('_', '-')}, but {what} is a "
                f"{name.replace('_', '-')}: its local derivative is the "
                f"{name.replace('_', '-')}'s.")

    yield f"{name}-as-{other}", other_say, swapped


def _mask_slips(call: ast.Call, line: ForwardLine) -> Iterator[tuple]:
    x = _subject(call)
    if x is None:
        return
    what = f"`{_text(call)}`"

    def say(tensor: str, grad: str, ns: dict) -> str:
        return (f"{grad} has gradient at the entries {what} replaced by a constant. Those "
                "entries no longer depend on the input, so their gradient is zero.")

    yield "mask-ignored", say, _copy(x)


# Each activation's slope written with its output `v`, as people write it (`1 - h**2`).
OUTPUT_SLOPES: dict[str, tuple[Callable[[Tensor], Tensor], str]] = {
    "tanh": (lambda v: 1 - v ** 2, "1 - {}**2"),
    "sigmoid": (lambda v: v * (1 - v), "{0} * (1 - {0})"),
    "exp": (lambda v: v, "{}"),
}
_ELEMENTWISE = {"tanh", "sigmoid", "relu", "gelu", "silu", "exp", "log", "sqrt", "rsqrt",
                "softplus", "elu", "leaky_relu", "sin", "cos", "abs", "square", "reciprocal"}


def _activation_slips(call: ast.Call, line: ForwardLine) -> Iterator[tuple]:
    """Slips of an elementwise function's slope, made on the local gradient itself."""
    name = _name(call)
    x = _subject(call)
    if x is None or not isinstance(x, ast.Name) or call is not _parsed(line.source):
        return
    inp, out = x.id, line.target
    what = f"`{line.source.strip()}`"

    def slope(ns: dict) -> tuple[Tensor, Tensor, Tensor] | None:
        xv, up = ns.get(inp), ns.get(gradient(out))
        if not isinstance(xv, Tensor) or not isinstance(up, Tensor):
            return None
        leaf = xv.detach().double().requires_grad_()
        with torch.enable_grad():
            y = _evaluate_call(call, {**ns, inp: leaf})
            if y is None or y.shape != up.shape or not y.requires_grad:
                return None
            (s,) = torch.autograd.grad(y.sum(), leaf)
        return s, y.detach(), up.double()

    def local(make: Callable[[Tensor, Tensor, Tensor, Tensor], Tensor | None]):
        def value(ns: dict) -> Tensor | None:
            got = slope(ns)
            if got is None:
                return None
            s, y, up = got
            return make(s, y, up, ns[inp].detach().double())
        return value

    def none_say(tensor: str, grad: str, ns: dict) -> str:
        return (f"{grad} is the upstream gradient `{gradient(out)}` passed straight through: "
                f"{what} multiplies it by its local derivative, the slope of {name} at each "
                "entry.")

    yield "slope-missing", none_say, local(lambda s, y, up, xv: up), inp

    def twice_say(tensor: str, grad: str, ns: dict) -> str:
        return (f"{grad} has the slope of {name} twice: {what} multiplies the upstream gradient "
                "by its slope once.")

    yield "slope-twice", twice_say, local(lambda s, y, up, xv: up * s * s), inp
    if name == "relu":
        # The step taken as the input clamped into [0, 1]: right where the input is 0 or
        # above 1, the input's own value in between.
        def clamped_say(tensor: str, grad: str, ns: dict) -> str:
            return (f"{grad} multiplies by `{inp}` clamped into [0, 1], which is not the "
                    f"slope of {what}: the slope is 1 for every positive entry, and entries "
                    "between 0 and 1 must pass the gradient whole, not scaled by their own "
                    "value.")

        yield "slope-clamped", clamped_say, local(lambda s, y, up, xv: up * xv.clamp(0, 1)), inp
    if name in OUTPUT_SLOPES:
        fn, form = OUTPUT_SLOPES[name]

        def input_say(tensor: str, grad: str, ns: dict) -> str:
            return (f"{grad} takes {name}'s slope at `{inp}`, the line's input: the slope "
                    f"written as `{form.format(out)}` needs the line's output, `{out}`.")

        yield "slope-at-input", input_say, local(lambda s, y, up, xv: up * fn(xv)), inp
    # Another activation's slope in place of this one's, whatever this one is: each slope
    # that people write from an output, taken at this line's output or worked out at its
    # input.
    for other, (ofn, oform) in OUTPUT_SLOPES.items():
        if other == name or other == "exp":
            continue

        def other_say(tensor: str, grad: str, ns: dict, other: str = other,
                      oform: str = oform) -> str:
            return (f"{grad} uses {other}'s slope, `{oform.format(out)}`, but {what} is a "
                    f"{name}: its local derivative is {name}'s.")

        yield f"slope-of-{other}", other_say, local(
            lambda s, y, up, xv, ofn=ofn: up * ofn(y)), inp

        def other_at_say(tensor: str, grad: str, ns: dict, other: str = other) -> str:
            return (f"{grad} uses {other}'s slope at `{inp}`, but {what} is a {name}: the "
                    f"local derivative is {name}'s.")

        # the other activation's slope at the input, worked out from its own output
        at_input = local(
            lambda s, y, up, xv, ofn=ofn, other=other: up * ofn(getattr(torch, other)(xv)))
        yield f"slope-of-{other}", other_at_say, at_input, inp

    def inverted_say(tensor: str, grad: str, ns: dict) -> str:
        return (f"{grad} passes the gradient where {what} blocks it and blocks it where it "
                f"passes: the mask is the other way round. {name}'s slope is 1 at the entries "
                f"of `{inp}` it lets through and 0 at the others.")

    def inverted(s, y, up, xv):
        # Only a slope that is a mask (0 or 1 at every entry) has another way round.
        if not bool(((s == 0) | (s == 1)).all()):
            return None
        return up * (1 - s)

    yield "mask-inverted", inverted_say, local(inverted), inp

    def sign_say(tensor: str, grad: str, ns: dict) -> str:
        return (f"{grad} takes the sign of `{inp}` for {name}'s slope: that is -1 where it is "
                f"negative, but {what} lets nothing through there, so its slope is 0 at those "
                "entries, and 1 where it passes.")

    def sign(s, y, up, xv):
        # A slope that is a mask read as the input's sign: -1 where it blocks.
        if not bool(((s == 0) | (s == 1)).all()) or not bool((xv < 0).any()):
            return None
        return up * torch.sign(xv)

    yield "mask-as-sign", sign_say, local(sign), inp

    def output_say(tensor: str, grad: str, ns: dict) -> str:
        return (f"{grad} takes {name}'s slope at `{out}`, the line's output: the slope belongs "
                f"at its input, `{inp}`.")

    def at_output(s, y, up, xv):
        leaf = y.clone().requires_grad_()
        with torch.enable_grad():
            z = _evaluate_call(call, {inp: leaf})
            if z is None or not z.requires_grad:
                return None
            (s2,) = torch.autograd.grad(z.sum(), leaf)
        return up * s2

    if name not in OUTPUT_SLOPES:
        yield "slope-at-output", output_say, local(at_output), inp


@lru_cache(maxsize=512)
def _parsed(source: str) -> ast.expr | None:
    try:
        tree = ast.parse(source.strip())
    except SyntaxError:
        return None
    stmt = tree.body[0] if len(tree.body) == 1 else None
    return stmt.value if isinstance(stmt, ast.Assign) else None


def _evaluate_call(node: ast.expr, ns: dict) -> Tensor | None:
    try:
        tree = ast.fix_missing_locations(ast.Expression(_copy(node)))
        value = eval(compile(tree, "<slip>", "eval"),  # noqa: S307 - the pack's own line
                     {"torch": torch, "F": F, "math": math, "__slip_zero_tap": _zero_tap,
                      "__builtins__": {"float": float, "int": int, "len": len, "tuple": tuple,
                                      "range": range}}, ns)
    except Exception:  # noqa: BLE001 - a change that cannot run is no slip here
        return None
    return value if isinstance(value, Tensor) else None


# --- slips of a count or a constant factor ----------------------------------------------------

def _dims_text(t: ast.expr, dims: tuple[int, ...], ns: dict) -> tuple[int, str] | None:
    """How many entries the dims `dims` of `t` hold, and which they are, said."""
    v = _evaluate_call(t, ns)
    if v is None or any(d >= v.dim() for d in dims):
        return None
    m = math.prod(v.shape[d] for d in dims)
    if len(dims) == 1:
        which = "the batch" if dims[0] == 0 else f"dim {dims[0]}"
        return m, f"{m}, {which} of `{_text(t)}`"
    sizes = " × ".join(str(v.shape[d]) for d in dims)
    return m, f"{m} = {sizes}, every row of `{_text(t)}`"


def _matmul_count_slips(node: ast.BinOp, line: ForwardLine,
                        rank: Callable[[ast.expr], int | None]) -> Iterator[tuple]:
    """A matrix's gradient in a product with a batch of rows divided by how many rows were
    added up (a mean over the batch where the product's gradient is a sum over it)."""
    what = f"`{_text(node)}`"
    for side, w, other in (("right", node.right, node.left), ("left", node.left, node.right)):
        r = rank(other)
        if rank(w) != 2 or r is None or r < 2:
            continue
        # The entries of the other operand that `w`'s gradient adds up: every row for `x @ W`,
        # every column (and batch) for `W @ x`.
        summed = list(range(r - 1)) if side == "right" else [d for d in range(r) if d != r - 2]
        subsets = [(d,) for d in summed] + ([tuple(summed)] if len(summed) > 1 else [])
        names = _reads(w)
        for dims in subsets:
            count = ast.parse(" * ".join(f"({ast.unparse(other)}).shape[{d}]" for d in dims),
                              mode="eval").body
            scaled = ast.BinOp(_copy(w), ast.Div(), count)
            changed = ast.BinOp(_copy(node.left) if side == "right" else scaled, ast.MatMult(),
                                scaled if side == "right" else _copy(node.right))

            def say(tensor: str, grad: str, ns: dict, dims=dims, names=names,
                    other=other) -> str | None:
                if tensor not in names:
                    return None
                told = _dims_text(other, dims, ns)
                if told is None:
                    return None
                return (f"{grad} is divided by {told[1]}. {what} adds the contributions of "
                        f"every row of `{_text(other)}` into the gradient of `{tensor}`: a "
                        "sum, not a mean (any mean the loss takes is already in "
                        f"`{gradient(line.target)}`).")

            yield "matmul-mean", say, changed
    yield from _unpaired_slips(node, rank)


def _unpaired_slips(node: ast.BinOp, rank: Callable[[ast.expr], int | None]
                    ) -> Iterator[tuple]:
    """A product's gradient whose contraction is split: each operand added up over an axis
    on its own and the sums multiplied (an einsum that gives the axis a letter on each side),
    where the product pairs each entry of one with the matching entry of the other. It is the
    gradient of the product with the other operand summed over that axis, on every entry."""
    what = f"`{_text(node)}`"
    for side, w, other in (("right", node.right, node.left), ("left", node.left, node.right)):
        r = rank(other)
        if r is None or r < 2:
            continue
        # The axes of the other operand that `w`'s gradient adds up: its rows (and batch) for
        # `x @ W`, its columns for `W @ x` (a batch that `w` has too is no sum for it).
        w_rank = rank(w) or 2
        batch = list(range(r - 2)) if w_rank == 2 else []
        paired = [*batch, r - 2] if side == "right" else [*batch, r - 1]
        subsets = [(d,) for d in paired] + ([tuple(paired)] if len(paired) > 1 else [])
        names = _reads(w)
        for dims in subsets:
            summed = ast.parse(f"({ast.unparse(other)}).sum({dims}, keepdim=True)"
                               f".expand_as({ast.unparse(other)})", mode="eval").body
            changed = ast.BinOp(summed if side == "right" else _copy(node.left), ast.MatMult(),
                                _copy(node.right) if side == "right" else summed)

            def say(tensor: str, grad: str, ns: dict, dims=dims, names=names,
                    other=other) -> str | None:
                if tensor not in names:
                    return None
                told = _dims_text(other, dims, ns)
                if told is None:
                    return None
                return (f"{grad} adds up `{_text(other)}` and the arriving gradient over "
                        f"{told[1]} each on its own and multiplies the sums. In {what} each "
                        f"entry of `{_text(other)}` pairs with the gradient's entry at the "
                        "same place: multiply them first, then add up (in an einsum, that "
                        "axis has one letter on both operands).")

            yield "matmul-unpaired", say, changed


def _conv_unpaired_slips(call: ast.Call, line: ForwardLine) -> Iterator[tuple]:
    """A kernel's gradient whose sum over the positions is split: the input's windows and the
    arriving gradient each added up over the positions on their own, and the sums multiplied
    (an einsum over unfolded windows that gives the positions two letters). It is the kernel's
    gradient for an arriving gradient spread evenly over each map."""
    dims = {"conv1d": 1, "conv2d": 2, "conv3d": 3}[_name(call)]
    w = _arg(call, 0, "weight")
    if not isinstance(w, ast.Name) or _parsed(line.source) is not call:
        return
    kernel, up = w.id, gradient(line.target)

    def local(ns: dict) -> Tensor | None:
        g = ns.get(up)
        if not isinstance(g, Tensor) or g.dim() <= dims:
            return None
        spatial = tuple(range(g.dim() - dims, g.dim()))
        spread = g.detach().double().sum(spatial, keepdim=True).expand_as(g)
        return _branch(call, kernel, spread, ns)

    def say(tensor: str, grad: str, ns: dict) -> str | None:
        if tensor != kernel:
            return None
        return (f"{grad} adds up the input's windows and `{up}` over the positions each on "
                f"its own and multiplies the sums. In `{line.source.strip()}` each position's "
                "window pairs with the gradient at that same position: multiply them first, "
                "then add up (in an einsum, the positions have one letter on both operands).")

    yield "conv-unpaired", say, local, kernel


_PAD_MODES = ("replicate", "reflect", "circular")


def _conv_padding_mode_slips(call: ast.Call, line: ForwardLine) -> Iterator[tuple]:
    """A convolution's zero padding done with another padding mode in its backward: the
    input padded by copying or mirroring its border for the kernel's gradient, or the
    arriving gradient padded so for the input's (a stride-1 convolution, as the full
    convolution with the flipped kernel computes it)."""
    dims = {"conv1d": 1, "conv2d": 2, "conv3d": 3}[_name(call)]
    x, w = _subject(call), _arg(call, 0, "weight")
    pad = _const(_arg(call, 3, "padding"))
    if not isinstance(x, ast.Name) or not isinstance(w, ast.Name) or dims > 2 \
            or not isinstance(pad, int) or pad < 1 or _parsed(line.source) is not call \
            or {k.arg for k in call.keywords} - {"padding", "bias"} \
            or len(call.args) > 3:
        return
    up, kernel, image = gradient(line.target), w.id, x.id
    what = f"`{line.source.strip()}`"

    for mode in _PAD_MODES:
        def weight_local(ns: dict, mode: str = mode) -> Tensor | None:
            xv, g = ns.get(image), ns.get(up)
            if not isinstance(xv, Tensor) or not isinstance(g, Tensor):
                return None
            padded = F.pad(xv.detach().double(), (pad,) * (2 * dims), mode=mode)
            return _branch(ast.parse(f"F.conv{dims}d(__padded, {kernel})", mode="eval").body,
                           kernel, g, {**ns, "__padded": padded})

        def input_local(ns: dict, mode: str = mode) -> Tensor | None:
            wv, g = ns.get(kernel), ns.get(up)
            if not isinstance(wv, Tensor) or not isinstance(g, Tensor):
                return None
            k = wv.shape[-1]
            full = F.pad(g.detach().double(), (k - 1 - pad,) * (2 * dims), mode=mode)
            flipped = wv.detach().double().flip(list(range(2, 2 + dims))).transpose(0, 1)
            conv = F.conv1d if dims == 1 else F.conv2d
            return conv(full, flipped)

        def say(tensor: str, grad: str, ns: dict, mode: str = mode) -> str | None:
            which = "the input" if tensor == kernel else f"`{up}`"
            return (f"{grad} pads {which} by {mode} padding (its border "
                    + {"replicate": "copied outwards", "reflect": "mirrored",
                       "circular": "wrapped around"}[mode]
                    + f"), where {what} pads with zeros: the border's taps meet numbers the "
                    "forward pass never had there.")

        yield f"conv-pad-{mode}", say, weight_local, kernel
        yield f"conv-pad-{mode}", say, input_local, image


def _conv_count_slips(call: ast.Call, line: ForwardLine) -> Iterator[tuple]:
    """A convolution's input gradient averaged over the output channels where each channel's
    contribution adds up, and its kernel's gradient divided by the batch."""
    x, w = _subject(call), _arg(call, 0, "weight")
    if x is None or w is None:
        return
    role = _role(call, {"input": x, "weight": w})
    what = f"`{_text(call)}`"

    def maps_say(tensor: str, grad: str, ns: dict) -> str | None:
        wv = _evaluate_call(w, ns)
        if role(tensor) != "input" or wv is None:
            return None
        return (f"{grad} is the mean over the {wv.shape[0]} output channels (maps) of what "
                f"each sends back. Every output channel of {what} reads `{tensor}`, and their "
                "contributions add up: a sum over the maps, not an average.")

    per_map = ast.BinOp(_copy(w), ast.Div(), ast.parse(f"({ast.unparse(w)}).shape[0]",
                                                        mode="eval").body)
    yield "conv-maps-mean", maps_say, _with_arg(call, 0, "weight", per_map)

    def batch_say(tensor: str, grad: str, ns: dict) -> str | None:
        xv = _evaluate_call(x, ns)
        if role(tensor) != "weight" or xv is None:
            return None
        return (f"{grad} is divided by {xv.shape[0]}, the batch. {what} slides the same "
                f"kernel over every sample, and the kernel's gradient adds up all their "
                "contributions: a sum, not a mean (any mean the loss takes is already in "
                f"`{gradient(line.target)}`).")

    per_batch = ast.BinOp(_copy(w), ast.Div(), ast.parse(f"({ast.unparse(x)}).shape[0]",
                                                          mode="eval").body)
    yield "conv-batch-mean", batch_say, _with_arg(call, 0, "weight", per_batch)
    xs = f"({ast.unparse(x)})"
    summed = ast.parse(f"{xs}.detach().sum(0, keepdim=True).expand_as({xs})", mode="eval").body

    def sums_say(tensor: str, grad: str, ns: dict) -> str | None:
        if role(tensor) != "weight":
            return None
        return (f"{grad} comes from sums: the input and the arriving gradient each added up "
                f"over the batch before they meet. In {what} each sample's input meets its own "
                "gradient, and the kernel's gradient adds up those products: the sum of "
                "products, not the product of sums.")

    yield "conv-batch-summed-first", sums_say, _with_input(call, summed)
    bias = _arg(call, 1, "bias")
    if bias is not None and not (isinstance(bias, ast.Constant) and bias.value is None):
        def split_say(tensor: str, grad: str, ns: dict) -> str | None:
            if tensor not in _reads(bias):
                return None
            return (f"{grad} is half of what the bias of {what} is sent: the convolution's "
                    "output and its bias are added, and the gradient of a sum is not split "
                    f"between its terms; each gets the whole of `{gradient(line.target)}`.")

        halved = ast.BinOp(_copy(bias), ast.Div(), ast.Constant(2))
        yield "sum-split", split_say, _with_arg(call, 1, "bias", halved)


def _constant(node: ast.expr, tensors: set[str]) -> bool:
    """An expression of numbers and the lesson's sizes only (`head_size ** -0.5`)."""
    return not any(isinstance(n, ast.Call) for n in ast.walk(node)) and not (
        _reads(node) & tensors)


def _scale_slips(expr: ast.expr, line: ForwardLine, tensors: set[str], sizes: dict[str, int]
                 ) -> Iterator[tuple]:
    """A line that scales by a constant (`scores = q @ k.T * head_size ** -0.5`): the factor
    left out, taken twice, the other way round, without its root, or with another of the
    lesson's sizes in its place."""
    text = f"`{line.source.strip()}`"
    for node in [n for n in ast.walk(expr) if isinstance(n, ast.BinOp)
                 and isinstance(n.op, (ast.Mult, ast.Div))]:
        for c, t in ((node.right, node.left), (node.left, node.right)):
            if isinstance(node.op, ast.Div) and c is node.left:
                continue  # `2 / x` is no scale
            if not _constant(c, tensors) or _constant(t, tensors):
                continue
            cs, times = ast.unparse(c), isinstance(node.op, ast.Mult)
            verb = "multiplies by" if times else "divides by"

            def value(ns: dict, c=c) -> float | None:
                try:
                    v = eval(compile(ast.Expression(_copy(c)), "<scale>", "eval"),  # noqa: S307
                             {"__builtins__": {}}, {k: v for k, v in ns.items()
                                                    if isinstance(v, (int, float))})
                except Exception:  # noqa: BLE001 - the pack's own constant
                    return None
                return float(v) if isinstance(v, (int, float)) and v not in (0, 1, -1) else None

            def missing_say(tensor: str, grad: str, ns: dict, value=value, cs=cs, verb=verb
                            ) -> str | None:
                if value(ns) is None:
                    return None
                return (f"{grad} leaves out the constant factor of {text}: the line {verb} "
                        f"`{cs}`, so the gradient through it is scaled by it too.")

            yield "scale-missing", missing_say, _replaced(expr, node, _copy(t))

            def twice_say(tensor: str, grad: str, ns: dict, value=value, cs=cs, verb=verb
                          ) -> str | None:
                if value(ns) is None:
                    return None
                return (f"{grad} has the constant factor of {text} twice: the line {verb} "
                        f"`{cs}` once, and the gradient is scaled by it once.")

            twice = ast.BinOp(_copy(node), node.op, _copy(c))
            yield "scale-twice", twice_say, _replaced(expr, node, twice)

            def inverted_say(tensor: str, grad: str, ns: dict, value=value, cs=cs, times=times
                             ) -> str | None:
                if value(ns) is None:
                    return None
                done, belongs = ("divides by", "multiplies by") if times else \
                    ("multiplies by", "divides by")
                return (f"{grad} {done} `{cs}` where {text} {belongs} it: the constant "
                        "factor is inverted, so the gradient's scale is off by its square.")

            inverted = ast.BinOp(_copy(t), ast.Div() if times else ast.Mult(), _copy(c))
            yield "scale-inverted", inverted_say, _replaced(expr, node, inverted)
            # a root of a size left off, or put in (`head_size ** -1` for `** -0.5`)
            for p in [n for n in ast.walk(c) if isinstance(n, ast.BinOp)
                      and isinstance(n.op, ast.Pow) and isinstance(_const(n.right), float)
                      and abs(abs(_const(n.right)) - 0.5) < 1e-12]:
                base = ast.unparse(p.left)
                whole = ast.BinOp(_copy(p.left), ast.Pow(),
                                  ast.Constant(2 * _const(p.right)))

                def root_say(tensor: str, grad: str, ns: dict, value=value, base=base
                             ) -> str | None:
                    if value(ns) is None:
                        return None
                    return (f"{grad} is scaled by `{base}` itself where {text} takes its "
                            "square root: the factor lost its root.")

                yield "scale-root", root_say, _replaced(
                    expr, node, ast.BinOp(_copy(t), node.op, _replaced(c, p, whole)))
            # another of the lesson's sizes in the place of the one the constant has
            for name in sorted(_reads(c)):
                if name not in sizes:
                    continue
                for other, size in sorted(sizes.items()):
                    if size == sizes[name] or other == name:
                        continue
                    swapped = _replaced(c, next(n for n in ast.walk(c) if isinstance(
                        n, ast.Name) and n.id == name), ast.Name(other, ast.Load()))

                    def size_say(tensor: str, grad: str, ns: dict, name=name, other=other,
                                 value=value, swapped=swapped) -> str | None:
                        if value(ns) is None:
                            return None
                        return (f"{grad} is scaled by `{ast.unparse(swapped)}`, but {text} "
                                f"has `{name}` ({sizes[name]}) there, not `{other}` "
                                f"({sizes[other]}): the constant's size is the wrong one.")

                    yield "scale-size", size_say, _replaced(
                        expr, node, ast.BinOp(_copy(t), node.op, swapped))


def _sum_split_slips(expr: ast.expr, line: ForwardLine) -> Iterator[tuple]:
    """A sum of tensors (`x = tok + pos`) whose gradient is shared out among its terms: each
    term gets the whole of it."""
    terms: list[ast.expr] = []

    def collect(n: ast.expr) -> bool:
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Add):
            return collect(n.left) and collect(n.right)
        if not isinstance(n, ast.Constant) and _reads(n):
            terms.append(n)  # a tensor, or a product (`x @ W` in `x @ W + b`)
            return True
        return False

    if not collect(expr) or len(terms) < 2:
        return
    k = len(terms)
    names = set().union(*(_reads(t) for t in terms))
    share = "half" if k == 2 else f"1/{k}"

    def say(tensor: str, grad: str, ns: dict) -> str | None:
        if tensor not in names:
            return None
        return (f"{grad} is {share} of what `{line.source.strip()}` sends back: the gradient "
                f"of a sum is not split among its {k} terms; each term gets the whole of "
                f"`{gradient(line.target)}`.")

    yield "sum-split", say, ast.BinOp(_copy(expr), ast.Div(), ast.Constant(k))


def _lookup_slips(expr: ast.expr, line: ForwardLine) -> Iterator[tuple]:
    """An embedding lookup `C[X]` whose rows' gradients are averaged over their uses, where
    every use adds its own."""
    if not (isinstance(expr, ast.Subscript) and isinstance(expr.value, ast.Name)
            and isinstance(expr.slice, ast.Name)):
        return
    table, index = expr.value.id, expr.slice.id
    scaled = ast.parse(
        f"({table} / torch.bincount({index}.flatten(), minlength={table}.shape[0]).clamp(min=1)"
        f".view(-1, *([1] * ({table}.dim() - 1))).to({table}.dtype))[{index}]",
        mode="eval").body

    def say(tensor: str, grad: str, ns: dict) -> str | None:
        if tensor != table:
            return None
        return (f"{grad} divides each row by how many times `{line.source.strip()}` looks it "
                "up, as a mean over its uses. Every lookup of a row sends its own gradient "
                "back, and a repeated row's gradients add up: a sum, not an average.")

    yield "lookup-mean", say, scaled
    # Rows picked by the position instead of by the index's value (the positions' table's
    # rule), and one total given to every row (no lookup at all).
    by_position = ast.parse(
        f"{table}[torch.arange({index}.shape[-1]).expand_as({index})] "
        f"if {index}.shape[-1] <= {table}.shape[0] else {table}[{index}]", mode="eval").body

    def position_say(tensor: str, grad: str, ns: dict) -> str | None:
        if tensor != table:
            return None
        return (f"{grad} sends each position's gradient to the row numbered by the position, "
                f"as a table of positions would: in `{line.source.strip()}` a position reads "
                f"the row of the index at it (`{index}`), and its gradient goes back there.")

    yield "lookup-by-position", position_say, by_position
    total = ast.parse(f"{table}.sum(0).expand(*{index}.shape, *{table}.shape[1:])",
                      mode="eval").body

    def total_say(tensor: str, grad: str, ns: dict) -> str | None:
        if tensor != table:
            return None
        return (f"{grad} gives every row of `{table}` the same total, the arriving gradient "
                f"added up over every lookup: in `{line.source.strip()}` each lookup's gradient "
                "goes to the one row it read, and a row never read gets nothing.")

    yield "lookup-total", total_say, total
    # The lookup as a product with the index's one-hot rows, its positions added up apart:
    # every row of the table gets the whole example's gradient, once per time it is used.
    for d in (1, 0, "every"):
        dims = f"tuple(range({index}.dim()))" if d == "every" else d
        apart = ast.parse(
            f"(F.one_hot({index}, {table}.shape[0]).to({table}.dtype).sum({dims}, keepdim=True)"
            f".expand(*{index}.shape, {table}.shape[0]) @ {table}) if {index}.dim() > "
            f"{0 if d == 'every' else d} else {table}[{index}]", mode="eval").body

        def apart_say(tensor: str, grad: str, ns: dict, d: int | str = d) -> str | None:
            if tensor != table:
                return None
            if d == "every":
                return (f"{grad} is one outer product of two sums: how often each row of "
                        f"`{table}` is looked up, times the arriving gradient added up over "
                        f"every lookup. In `{line.source.strip()}` each lookup sends its own "
                        "gradient to its own row: the sum of products, not the product of sums.")
            return (f"{grad} gives each row of `{table}` the gradient of every position of "
                    f"the example (dim {d} added up apart from the lookups). In "
                    f"`{line.source.strip()}` a row gets the gradient of the positions that "
                    "look it up, and only those: pair each lookup with its own gradient.")

        yield "lookup-unpaired", apart_say, apart


# --- the extra factor of another line --------------------------------------------------------

def _early_slope_slips(step: Step, pack: Pack, lines: list[ForwardLine]) -> Iterator[Slip]:
    """An activation's slope multiplied in a step that is not its own: `(1 - last**2)` in the
    step before the tanh's (or after it), at a tensor of this step's line."""
    own = {_name(e) for e in map(_parsed, (line.source for line in lines))
           if isinstance(e, ast.Call)}
    at = min((line.index for line in lines), default=0)
    seen: set[tuple[str, str]] = set()
    # The nearest line of each activation first: the one the learner most likely borrowed from.
    for other in sorted(pack.forward_lines, key=lambda o: (abs(o.index - at), o.index)):
        expr = _parsed(other.source)
        name = _name(expr) if isinstance(expr, ast.Call) else ""
        if name not in OUTPUT_SLOPES or name in own:
            continue  # a slope of this step's own activation is that line's slip, not this
        fn, form = OUTPUT_SLOPES[name]
        for line in lines:
            for tensor in (line.target, *line.operands):
                if (name, tensor) in seen:
                    continue
                seen.add((name, tensor))

                def say(t: str, grad: str, ns: dict, tensor=tensor, other=other, form=form,
                        name=name, line=line) -> str:
                    return (f"{grad} carries an extra factor, `{form.format(tensor)}`: the slope "
                            f"of {name}, which belongs to the step of `{other.source.strip()}`. "
                            f"This step's line, `{line.source.strip()}`, has no {name} in it.")

                def value(ns: dict, tensor=tensor, fn=fn) -> Tensor | None:
                    v = ns.get(tensor)
                    return fn(v.detach().double()) if isinstance(v, Tensor) else None

                yield Slip(f"slope-early-{name}", say, line, local=value, tensor=f"*{tensor}")


def _biasless_slope_slips(pack: Pack, lines: list[ForwardLine]) -> Iterator[Slip]:
    """An activation's slope taken at its input recomputed without the bias the line before it
    adds (`F.conv2d(img, K)` for the mask, where the layer is `F.conv2d(img, K, kb)`)."""
    made = {line.target: line for line in pack.forward_lines}
    for line in lines:
        call = _parsed(line.source)
        if not isinstance(call, ast.Call) or _name(call) not in _ELEMENTWISE:
            continue
        x = _subject(call)
        before = made.get(x.id) if isinstance(x, ast.Name) else None
        expr = _parsed(before.source) if before is not None else None
        bias, channel = None, False
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add) \
                and isinstance(expr.right, ast.Name):
            bias = expr.right.id  # `x @ W + b`
        elif isinstance(expr, ast.Call) and _name(expr) in ("conv1d", "conv2d", "conv3d", "linear"):
            b = _arg(expr, 1, "bias")
            bias, channel = (b.id if isinstance(b, ast.Name) else None), _name(expr) != "linear"
        if bias is None or not isinstance(x, ast.Name):
            continue
        inp, up, name = x.id, gradient(line.target), _name(call)

        def value(ns: dict, inp=inp, up=up, bias=bias, channel=channel, call=call
                  ) -> Tensor | None:
            xv, g, b = ns.get(inp), ns.get(up), ns.get(bias)
            if not all(isinstance(t, Tensor) for t in (xv, g, b)) or b.dim() != 1:
                return None
            shift = b.detach().double().view(-1, *([1] * (xv.dim() - 2))) if channel else \
                b.detach().double()
            leaf = (xv.detach().double() - shift).requires_grad_()
            with torch.enable_grad():
                y = _evaluate_call(call, {**ns, inp: leaf})
                if y is None or not y.requires_grad or y.shape != g.shape:
                    return None
                (slope,) = torch.autograd.grad(y.sum(), leaf)
            return g.detach().double() * slope

        def say(t: str, grad: str, ns: dict, inp=inp, bias=bias, name=name, before=before
                ) -> str | None:
            if t != inp:
                return None
            return (f"{grad} takes {name}'s slope at `{inp}` without `{bias}`: "
                    f"`{before.source.strip()}` adds the bias before {name}, so its slope "
                    f"belongs at `{inp}` as that line made it, bias and all.")

        yield Slip("slope-without-bias", say, line, local=value, tensor=inp)


# --- the slips of a step ---------------------------------------------------------------------

def step_slips(pack: Pack, step: Step, ranks: dict[str, int],
               sizes: dict[str, int] | None = None) -> list[Slip]:
    """Every slip the operations of the step's lines admit, in a fixed order (`sizes`: the
    lesson's named sizes, for a constant that may have the wrong one)."""
    lines = [pack.line_for(t) for t in step.lines]
    dilations = set()
    for line in pack.forward_lines:
        expr = _parsed(line.source)
        for node in ast.walk(expr) if expr is not None else ():
            if isinstance(node, ast.Call) and _name(node) in ("conv1d", "conv2d", "conv3d"):
                d = _const(_arg(node, 4, "dilation"))
                if isinstance(d, int):
                    dilations.add(d)

    def rank(node: ast.expr) -> int | None:
        # An elementwise expression has the rank of the largest tensor it reads.
        found = [ranks[n] for n in _reads(node) if n in ranks]
        return max(found) if found else None

    out: list[Slip] = []
    for line in lines:
        expr = _parsed(line.source)
        if expr is None:
            continue
        for node in [n for n in ast.walk(expr) if isinstance(n, ast.BinOp)
                     and isinstance(n.op, ast.MatMult)]:
            for key, say, changed in [*_matmul_slips(node, line),
                                      *_matmul_count_slips(node, line, rank)]:
                out.append(Slip(key, say, line, expr=_replaced(expr, node, changed),
                                kind=_KINDS.get(key, "derived")))
        for key, say, changed in [*_scale_slips(expr, line, set(ranks), sizes or {}),
                                  *_sum_split_slips(expr, line), *_lookup_slips(expr, line)]:
            out.append(Slip(key, say, line, expr=changed, kind=_KINDS.get(key, "derived")))
        for call in [n for n in ast.walk(expr) if isinstance(n, ast.Call)]:
            name = _name(call)
            if name in ("cross_entropy", "nll_loss", "mse_loss", "l1_loss"):
                found = _loss_slips(call, line)
                for key, say, local, tensor in _loss_dim_slips(call, line, rank):
                    out.append(Slip(key, say, line, local=local, tensor=tensor))
            elif name in ("conv1d", "conv2d", "conv3d"):
                found = iter([*_conv_slips(call, line, dilations),
                              *_conv_count_slips(call, line)])
                out += _conv_stride_slips(call, line)
                for key, say, local, tensor in [*_conv_unpaired_slips(call, line),
                                                *_conv_padding_mode_slips(call, line)]:
                    out.append(Slip(key, say, line, local=local, tensor=tensor))
            elif name in ("max_pool1d", "max_pool2d"):
                found = _pool_slips(call, line)
            elif name in _DIMMED:
                found = iter([*_dim_slips(call, line, rank), *_count_slips(call, line),
                              *_normaliser_slips(call, line, _sources(pack, call))])
            elif name == "masked_fill":
                found = _mask_slips(call, line)
            elif name in _ELEMENTWISE:
                for key, say, local, tensor in _activation_slips(call, line):
                    out.append(Slip(key, say, line, local=local, tensor=tensor))
                continue
            else:
                continue
            for key, say, changed in found:
                out.append(Slip(key, say, line, expr=_replaced(expr, call, changed),
                                kind=_KINDS.get(key, "derived")))
    out += _early_slope_slips(step, pack, lines)
    out += _biasless_slope_slips(pack, lines)
    out += _composite_slips(lines, out)
    out += _branch_slips(step, lines)
    out += _branch_again_slips(pack, step, lines)
    out += _swapped_slips(step, lines)
    return out


def _sources(pack: Pack, call: ast.Call) -> tuple[str, ...]:
    """The forward tensors that a call's subject, itself a forward tensor, is made from."""
    x = _subject(call)
    if not isinstance(x, ast.Name):
        return ()
    try:
        return tuple(pack.line_for(x.id).operands)
    except KeyError:
        return ()


def _swapped_slips(step: Step, lines: list[ForwardLine]) -> list[Slip]:
    """Two gradients of the step that traded places (a helper's results unpacked in the wrong
    order, `dk, dq = ...`): one holds what the other's lines give the other."""
    out: list[Slip] = []
    for tensor, other in itertools.permutations(step.checks, 2):
        readers = [(line, _parsed(line.source)) for line in lines
                   if other in _reads(_parsed(line.source)) and line.target != other]
        if not readers or any(expr is None for _, expr in readers):
            continue

        def local(ns: dict, readers=readers, other=other) -> Tensor | None:
            total = None
            for line, expr in readers:
                part = _branch(expr, other, ns.get(gradient(line.target)), ns)
                if part is None:
                    return None
                total = part if total is None else total + part
            return total

        def say(t: str, grad: str, ns: dict, tensor=tensor, other=other) -> str | None:
            if t != tensor:
                return None
            return (f"{grad} holds what `{gradient(other)}` should be: the gradients of "
                    f"`{tensor}` and `{other}` have traded places (results unpacked or "
                    "assigned in the other order).")

        out.append(Slip("swapped", say, readers[0][0], local=local, tensor=tensor))
    return out


def _branch(expr: ast.expr, tensor: str, up: object, ns: dict) -> Tensor | None:
    """One line's branch of `tensor`'s gradient: the line differentiated with its upstream."""
    x = ns.get(tensor)
    if not isinstance(x, Tensor) or not isinstance(up, Tensor) or not x.is_floating_point():
        return None
    scope = {k: (v.detach().to("cpu", torch.float64) if isinstance(v, Tensor)
                 and v.is_floating_point() else v) for k, v in ns.items() if isinstance(k, str)}
    leaf = scope[tensor] = x.detach().to("cpu", torch.float64).requires_grad_()
    with torch.enable_grad():
        y = _evaluate_call(expr, scope)
        if y is None or not y.requires_grad or y.shape != up.shape:
            return None
        try:
            (result,) = vjp(y, leaf, up.detach().to("cpu", torch.float64), allow_unused=True)
        except RuntimeError:
            return None
    return result if result is not None else torch.zeros_like(leaf)


def _branch_again_slips(pack: Pack, step: Step, lines: list[ForwardLine]) -> list[Slip]:
    """A tensor other lines also read gets its gradient a branch at a time: another line's
    branch, added in its own step, added again here."""
    out: list[Slip] = []
    mine = {line.target for line in lines}
    for tensor in step.checks:
        here = [line for line in lines if tensor in _reads(_parsed(line.source))]
        others = [line for line in pack.forward_lines if line.target not in mine
                  and line.target != tensor and tensor in _reads(_parsed(line.source))]
        if len(here) != 1 or not others:
            continue
        line, expr = here[0], _parsed(here[0].source)
        for other in others:
            other_expr = _parsed(other.source)
            if expr is None or other_expr is None:
                continue

            def local(ns: dict, expr=expr, other=other, other_expr=other_expr,
                      line=line, tensor=tensor) -> Tensor | None:
                a = _branch(expr, tensor, ns.get(gradient(line.target)), ns)
                b = _branch(other_expr, tensor, ns.get(gradient(other.target)), ns)
                return a + b if a is not None and b is not None else None

            def say(t: str, grad: str, ns: dict, other=other, tensor=tensor) -> str | None:
                if t != tensor:
                    return None
                return (f"{grad} has the branch through `{other.source.strip()}` twice: that "
                        f"line's share of {grad} was added in its own step, and added again "
                        "here. Each line that reads "
                        f"`{tensor}` sends its share back once.")

            out.append(Slip("branch-again", say, line, local=local, tensor=tensor))
    return out


class _Named(ast.NodeTransformer):
    """Every read of one name replaced by an expression."""

    def __init__(self, name: str, new: ast.expr):
        self.name, self.new = name, new

    def visit_Name(self, node: ast.Name) -> ast.AST:
        return _copy(self.new) if node.id == self.name else node


def _branch_slips(step: Step, lines: list[ForwardLine]) -> list[Slip]:
    """A tensor that several of the step's lines read has a branch from each: one of them
    counted twice (added to a gradient that already held it)."""
    out: list[Slip] = []
    for tensor in step.checks:
        readers = [line for line in lines
                   if tensor in _reads(_parsed(line.source)) and line.target != tensor]
        if len(readers) < 2:
            continue
        doubled = ast.parse(f"(2 * {tensor} - {tensor}.detach())", mode="eval").body
        count = len(readers)
        for line in readers:
            expr = _parsed(line.source)
            if expr is None:
                continue
            changed = _Named(tensor, doubled).visit(_copy(expr))

            def say(t: str, grad: str, ns: dict, line=line, tensor=tensor,
                    count=count) -> str | None:
                if t != tensor:
                    return None
                return (f"{grad} has the branch through `{line.source.strip()}` twice: each "
                        f"of the {count} lines that read `{tensor}` sends its share back once, "
                        "and this one's was added again (a gradient that already held it, "
                        "added to).")

            out.append(Slip("branch-twice", say, line, expr=changed))
    return out


# The catalogue's kinds, for slips that are one of them: a count or a mean is a scale.
_KINDS = {"count": "scale", "loss-no-mean": "scale", "bessel": "scale",
          "mask-ignored": "partial", "matmul-mean": "scale", "conv-maps-mean": "scale",
          "conv-batch-mean": "scale", "scale-missing": "scale", "scale-twice": "scale",
          "scale-inverted": "scale", "scale-root": "scale", "scale-size": "scale",
          "sum-split": "scale"}


def _composite_slips(lines: list[ForwardLine], single: list[Slip]) -> list[Slip]:
    """Slips of a step of several lines: a line's output held constant where it depends on the
    tensor too (a norm's mean or spread treated as a constant), and the same change made to
    every reduction of one kind at once (all of a norm's means over the wrong dim)."""
    if len(lines) < 2:
        return []
    out: list[Slip] = []
    inner = [line for line in lines
             if any(line.target in _reads(_parsed(o.source)) for o in lines if o is not line)]
    last = max(lines, key=lambda line: line.index)
    for line in inner:

        def say(tensor: str, grad: str, ns: dict, line=line) -> str | None:
            if tensor == line.target:
                return None
            return (f"{grad} treats `{line.target}` as a constant. It depends on `{tensor}` "
                    f"too (`{line.source.strip()}`), so a change of `{tensor}` also moves it: "
                    "the path through it sends gradient back as well.")

        out.append(Slip("held-constant", say, line, detach=(line.target,), kind="partial"))
    from itertools import combinations

    for pair in combinations([line.target for line in inner], 2):
        names = " and ".join(f"`{t}`" for t in pair)

        def say_pair(tensor: str, grad: str, ns: dict, pair=pair, names=names) -> str | None:
            if tensor in pair:
                return None
            return (f"{grad} treats {names} as constants. Both depend on `{tensor}` too, so "
                    "the paths through them send gradient back as well.")

        out.append(Slip("held-constant", say_pair, last, detach=pair, kind="partial"))
    # The same dim slip on every line that has one: a habit, not a one-off.
    by_key: dict[str, list[Slip]] = {}
    for slip in single:
        if slip.key.endswith("-dim") and slip.expr is not None:
            by_key.setdefault(slip.key + ast.unparse(_dim_of(slip.expr)), []).append(slip)
    for group in by_key.values():
        if len({g.line.target for g in group}) > 1:
            first = group[0]
            out.append(Slip(first.key, first.say, first.line,
                            changes=tuple((g.line.target, g.expr) for g in group)))
    return out


def _dim_of(expr: ast.expr) -> ast.expr:
    """The dim a changed reduction now works along (for grouping the same change)."""
    for node in ast.walk(expr):
        if isinstance(node, ast.keyword) and node.arg == "dim":
            return node.value
    return ast.Constant(None)


@dataclass
class _Prepared:
    slips: list[Slip]
    values: dict[tuple[int, str], Tensor | None]
    base: dict[tuple[str, str], Tensor | None]
    lines: list[ForwardLine] = field(default_factory=list)
    step_base: dict[str, Tensor | None] = field(default_factory=dict)
    loss: str = "loss"
    # Each tensor's readers: the forward lines of the lesson that read it (its branches).
    readers: dict[str, list[str]] = field(default_factory=dict)


_CACHE: dict[tuple, _Prepared] = {}


def explain(pack: Pack, step: Step, tensor: str, value: Tensor, ref: Tensor, before: dict
            ) -> Diagnosis | None:
    """The slip of an operation of the step's lines that the learner's `value` of the gradient
    of `tensor` shows, or None."""
    if value.shape != ref.shape or not bool(torch.isfinite(value).all()):
        return None
    try:
        return _explain(pack, step, tensor, value, ref, before)
    except Exception:  # noqa: BLE001 - a diagnosis that fails says nothing, the verdict stands
        return None


def _explain(pack: Pack, step: Step, tensor: str, value: Tensor, ref: Tensor, before: dict
             ) -> Diagnosis | None:
    key = (pack.id, step.id, id(before))
    prepared = _CACHE.get(key)
    if prepared is None:
        if len(_CACHE) > 32:
            _CACHE.clear()
        ranks = {k: v.dim() for k, v in before.items() if isinstance(v, Tensor)}
        sizes = {k: v for k, v in before.items() if isinstance(k, str) and k == k.lower()
                 and not k.startswith("_") and isinstance(v, int) and not isinstance(v, bool)
                 and v > 1}
        readers: dict[str, list[str]] = {}
        for line in pack.forward_lines:
            for name in sorted(_reads(_parsed(line.source)) - {line.target}):
                readers.setdefault(name, []).append(line.source.strip())
        prepared = _CACHE[key] = _Prepared(step_slips(pack, step, ranks, sizes), {}, {},
                                           [pack.line_for(t) for t in step.lines],
                                           loss=pack.loss, readers=readers)
        prepared.before = before  # type: ignore[attr-defined]  # keeps id(before) unique
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _match(prepared, tensor, value, ref, before)
    finally:
        torch.set_num_threads(threads)


def _match(prepared: _Prepared, tensor: str, value: Tensor, ref: Tensor, before: dict
           ) -> Diagnosis | None:
    grad = gradient(tensor)
    ref64 = ref.detach().to("cpu", torch.float64)
    found: list[tuple[Slip, Tensor]] = []
    for i, slip in enumerate(prepared.slips):
        k = (i, tensor)
        if k not in prepared.values:
            prepared.values[k] = _slip_value(prepared, slip, tensor, ref64, before)
        produced = prepared.values[k]
        if produced is None or not bool(torch.isfinite(produced).all()) \
                or close(produced, ref64) or not _fits(value, produced, ref64):
            continue
        found.append((slip, produced))
    if not found:
        return (_broadcast(prepared, tensor, value, ref64, before)
                or _loss_count(prepared, tensor, value, ref64, before)
                or _summed_share(prepared, tensor, value, ref64, before)
                or _branches_mean(prepared, tensor, value, ref64))
    for slip, produced in found:
        message = slip.say(tensor, grad, before)
        if not message:
            continue
        others = sorted({s.key for s, p in found if s.key != slip.key and close(p, produced)})
        if others:
            message += (" (The numbers fit another slip of this line just as well: "
                        + ", ".join(o.replace("-", " ") for o in others) + ".)")
        return diagnosis(slip.kind, message)
    return None


def _fits(value: Tensor, produced: Tensor, ref: Tensor) -> bool:
    """Whether the learner's value is the slip's: close as numbers are, or, where the slip's
    numbers come out of a cancellation (sums of gradients that nearly add up to nothing), equal
    to float32 rounding on the scale of the right answer or of the slip's."""
    if close(value, produced):
        return True
    if value.shape != produced.shape or not ref.numel():
        return False
    gap = (value.detach().double().cpu() - produced).abs().max()
    # On the scale of the larger of the two: a slip made of sums (an outer product of sums)
    # is far larger than the right answer, and its float32 rounding with it.
    return bool(gap <= 1e-6 * max(float(ref.abs().max()), float(produced.abs().max())))


def patterns(pack: Pack, step: Step, tensor: str, value: Tensor, ref: Tensor, before: dict
             ) -> Diagnosis | None:
    """Patterns of the numbers that the line's operation explains, for a row nothing more
    specific explained (they say what they saw, not a cause): repeated lookups wrong, a
    max-pool's ties, a causal triangle, axes swapped, entries moved."""
    if value.shape != ref.shape or not bool(torch.isfinite(value).all()):
        return None
    try:
        lines = [pack.line_for(t) for t in step.lines]
        prepared = _Prepared([], {}, {}, lines, loss=pack.loss)
        v, r = value.detach().to("cpu", torch.float64), ref.detach().to("cpu", torch.float64)
        return (_repeats_lost(prepared, tensor, v, r, before)
                or _ties(prepared, tensor, v, r, before)
                or _triangle(tensor, v, r) or _swapped_axes(tensor, v, r)
                or _shifted(tensor, v, r)
                or _unflattened_in_another_order(prepared, tensor, v, r, before)
                or _moved_entries(tensor, v, r) or _truth_values(tensor, v, r)
                or _edge_slice(tensor, v, r))
    except Exception:  # noqa: BLE001 - a pattern that fails says nothing
        return None


def _edge_slice(tensor: str, value: Tensor, ref: Tensor) -> Diagnosis | None:
    """A gradient right everywhere but at the first or the last entry along one axis: what a
    loop that starts one late or stops one early leaves (said as seen, with where)."""
    tol = 1e-5 * float(ref.abs().max()) + 1e-7
    wrong = (value - ref).abs() > tol
    if not bool(wrong.any()):
        return None
    for d in range(value.dim()):
        size = value.shape[d]
        if size < 3:
            continue
        for end, at in (("first", 0), ("last", size - 1)):
            if bool(wrong.narrow(d, 1 if at == 0 else 0, size - 1).any()):
                continue
            seen = f"{gradient(tensor)} is right everywhere but at the {end} of its {size} " \
                   f"entries along dim {d}"
            if not bool(value.select(d, at).any()):
                return diagnosis("derived", (
                    f"{seen}, where it holds nothing at all: a loop that "
                    + ("starts one late (`range(1, n)`)" if at == 0 else
                       "stops one early (`range(n - 1)`)")
                    + " leaves that one out, and so does a slice one short."))
            return diagnosis("derived", (
                f"{seen}, where it holds other numbers: something treats that one apart, a "
                "loop's first or last turn, or a write into it in place (a running sum kept "
                "in a view of it, `db = dlogits[0]`, changes it as it adds)."))
    return None


def _truth_values(tensor: str, value: Tensor, ref: Tensor) -> Diagnosis | None:
    """A gradient that holds nothing but 0s and 1s where the right one holds other numbers:
    what a comparison gives (`dh * h > 0` compares the product, where `dh * (h > 0)` was
    meant), whatever operation the line has."""
    ones = value == 1
    if not bool(((value == 0) | ones).all()) or not bool(ones.any()) \
            or bool(((ref == 0) | (ref == 1)).all()):
        return None
    return diagnosis("derived", f"{gradient(tensor)} holds only 0s and 1s, the values a comparison "
                     "gives: a `>`, `!=` or `==` took in more than the mask it was meant for. "
                     "`*` binds before a comparison, so `g * x > 0` compares the product; the "
                     "mask alone needs its own parentheses.")


def _broadcast(prepared: _Prepared, tensor: str, value: Tensor, ref: Tensor, before: dict
               ) -> Diagnosis | None:
    for line in prepared.lines:
        if tensor not in line.operands:
            continue
        for key, said, produced in _broadcast_slips(line, tensor, before,
                                                    _conv_bias(line, tensor)):
            if produced.shape == ref.shape and not close(produced, ref) \
                    and close(value, produced):
                return diagnosis("scale" if key == "mean" else "derived", (
                    f"{gradient(tensor)} {said}. `{line.source.strip()}` copies `{tensor}` "
                    "along the dims it lacks, and the gradients of all the copies add up."))
    return None


def _shifted(tensor: str, value: Tensor, ref: Tensor) -> Diagnosis | None:
    """The right numbers moved along one axis by a position or two: what the learner's
    indices do, said as what the numbers show."""
    v = value.detach().to("cpu", torch.float64)
    if v.dim() >= 3:  # an image's rows and columns moved together (a padding on one side)
        h, w = v.shape[-2], v.shape[-1]
        for k in (1, -1):
            a = v[..., max(k, 0):h + min(k, 0), max(k, 0):w + min(k, 0)]
            b = ref[..., max(-k, 0):h + min(-k, 0), max(-k, 0):w + min(-k, 0)]
            if h >= 4 and w >= 4 and _share_close(a, b) >= 0.6 \
                    and _share_close(v, ref) < 0.3:
                way = "down and to the right" if k > 0 else "up and to the left"
                return diagnosis("derived", (
                    f"{gradient(tensor)} holds the right numbers moved one position {way}, "
                    "along both of the last two dims: as if one side were padded where the "
                    "line pads both. Check which positions each output read."))
    for d in range(v.dim()):
        size = v.shape[d]
        if size < 4:
            continue
        for k in (1, -1, 2, -2):
            a = v.narrow(d, k, size - k) if k > 0 else v.narrow(d, 0, size + k)
            b = ref.narrow(d, 0, size - k) if k > 0 else ref.narrow(d, -k, size + k)
            same = ref.narrow(d, k, size - k) if k > 0 else ref.narrow(d, 0, size + k)
            if _share_close(a, b) >= 0.6 and _share_close(a, same) < 0.3:
                way = "later" if k > 0 else "earlier"
                n = abs(k)
                return diagnosis("derived", (
                    f"{gradient(tensor)} holds the right numbers moved along dim {d}: each "
                    f"value sits {n} position{'s' if n > 1 else ''} {way} than where it "
                    "belongs. Check the indices that place each contribution."))
    return None


def _axis(up: Tensor, d: int, before: dict) -> str:
    """An axis of a line's output in words: the batch's, or the place along another."""
    if d == 0 and up.shape[0] == before.get("n"):
        return f"the {up.shape[0]} examples of the batch"
    return f"the {up.shape[d]} positions along axis {d}"


def _ends(up: Tensor, before: dict):
    """The first and last entry along each axis of a line's output, then the first and last
    row of it with its leading axes flattened (`x.view(-1, C)`, a loop over every row): each
    as (which end, its index, those places in words, the output's gradient there only)."""
    for d in range(up.dim()):
        if up.shape[d] < 2:
            continue
        for end, at in (("first", 0), ("last", up.shape[d] - 1)):
            only = torch.zeros_like(up)
            only.select(d, at).copy_(up.select(d, at))
            yield end, at, _axis(up, d, before), only
    lead = up.shape[:-1]
    if len([s for s in lead if s > 1]) >= 2:
        rows = math.prod(lead)
        for end, at in (("first", 0), ("last", rows - 1)):
            only = torch.zeros_like(up).reshape(rows, -1)
            only[at] = up.reshape(rows, -1)[at]
            yield end, at, f"the {rows} rows (its leading axes flattened)", only.view(up.shape)


def _summed_share(prepared: _Prepared, tensor: str, value: Tensor, ref: Tensor, before: dict
                  ) -> Diagnosis | None:
    """A gradient that a line sums over entries of its output (a weight over the batch, a bias
    over positions), taken from one entry only (`=` where a loop must add, an index where a
    sum belongs) or averaged over them: what the numbers show, for any such line."""
    v = value.detach().to("cpu", torch.float64)
    for line in prepared.lines:
        if tensor not in line.operands:
            continue
        up, x = before.get(gradient(line.target)), before.get(tensor)
        if not isinstance(up, Tensor) or not isinstance(x, Tensor) or up.dim() == 0:
            continue
        expr = _parsed(line.source)
        if x.shape == up.shape:
            # Elementwise in `tensor` (each entry gets one share, nothing to add up): one
            # entry of the upstream reaches one entry of its gradient.
            probe = torch.zeros_like(up)
            probe.view(-1)[-1] = 1.0
            reach = _line_vjp(prepared, line, expr, tensor,
                              {**before, gradient(line.target): probe})
            if reach is None or int((reach != 0).sum()) <= 1:
                continue
        src = f"`{line.source.strip()}`"
        denom = float(ref.flatten() @ ref.flatten())
        c = float(v.flatten() @ ref.flatten()) / denom if denom else 0.0
        if 0 < c < 1 and close(v, c * ref):
            dims = [d for d in range(up.dim()) if up.shape[d] > 1]
            for k in range(1, len(dims) + 1):
                for chosen in itertools.combinations(dims, k):
                    count = math.prod(up.shape[d] for d in chosen)
                    if abs(c * count - 1) <= 1e-3:
                        said = " and ".join(_axis(up, d, before) for d in chosen)
                        return diagnosis("scale", (
                            f"{gradient(tensor)} is divided by {count}, {said} of {src}: "
                            f"`{tensor}` takes a share from every one of them, and its gradient "
                            "adds those shares up: a sum, not a mean."))
        for end, at, where, only in _ends(up, before):
            got = _line_vjp(prepared, line, expr, tensor,
                            {**before, gradient(line.target): only})
            if got is None or got.shape != v.shape or close(got, ref):
                continue
            if close(v, ref - got) and not close(got, torch.zeros_like(got)):
                return diagnosis("partial", (
                    f"{gradient(tensor)} leaves out the share of the {end} of {where} of "
                    f"{src}: a loop that "
                    + ("starts one late (`range(1, n)`)" if at == 0 else
                       "stops one early (`range(n - 1)`)")
                    + f" adds up all of them but that one. `{tensor}` takes a share from "
                    "every one."))
            if not close(v, got):
                continue
            return diagnosis("derived", (
                f"{gradient(tensor)} holds the share of the {end} of {where} of {src} only. "
                f"`{tensor}` takes a share from every one of them, and its gradient adds them "
                "all up: a loop that assigns (`=`) where it must add (`+=`), or one entry "
                "taken where the sum belongs."))
    return None


def _branches_mean(prepared: _Prepared, tensor: str, value: Tensor, ref: Tensor
                   ) -> Diagnosis | None:
    """A tensor several lines read, its branches averaged where they add up: the whole
    gradient over the number of lines that read it."""
    uses = prepared.readers.get(tensor, [])
    if len(uses) < 2 or not close(value.detach().to("cpu", torch.float64), ref / len(uses)):
        return None
    shown = "; ".join(f"`{u}`" for u in uses[:4]) + ("; ..." if len(uses) > 4 else "")
    return diagnosis("scale", (
        f"{gradient(tensor)} is the mean of its {len(uses)} branches: `{tensor}` is read by "
        f"{len(uses)} lines ({shown}), each sends back its own share, and the shares add up: a "
        "sum, not an average."))


def _loss_count(prepared: _Prepared, tensor: str, value: Tensor, ref: Tensor, before: dict
                ) -> Diagnosis | None:
    """The gradient of a mean loss divided by a part of its count only: right up to a factor
    that is the count over one of the sizes (`n` where the mean runs over `n * block_size`)."""
    for line in prepared.lines:
        expr = _parsed(line.source)
        if not (isinstance(expr, ast.Call) and _name(expr) in ("cross_entropy", "nll_loss",
                                                               "mse_loss")):
            continue
        count = _count_of_loss(expr, before)
        v, r = value.flatten(), ref.flatten()
        denom = float(r @ r)
        if not count or denom == 0:
            return None
        c = float(v.double() @ r) / denom
        if not close(value, c * ref):
            return None
        sizes = sorted({v for k, v in before.items() if isinstance(v, int)
                        and not isinstance(v, bool) and 1 < v < count and count % v == 0})
        for size in sizes:
            if abs(c - count / size) <= 1e-3 * c:
                return diagnosis("derived", (
                    f"{gradient(tensor)} is divided by {size} where `{line.source.strip()}` "
                    f"averages over {count} terms: {c:.4g} times too big. Count every term "
                    "the mean runs over."))
    return None


def _repeats_lost(prepared: _Prepared, tensor: str, value: Tensor, ref: Tensor, before: dict
                  ) -> Diagnosis | None:
    """An embedding table's gradient right on the rows looked up once and wrong exactly on
    those looked up more than once: the copies of a repeated row overwrote each other."""
    for line in prepared.lines:
        expr = _parsed(line.source)
        if not (isinstance(expr, ast.Subscript) and isinstance(expr.value, ast.Name)
                and expr.value.id == tensor and isinstance(expr.slice, ast.Name)):
            continue
        index = before.get(expr.slice.id)
        if not isinstance(index, Tensor) or index.is_floating_point() or value.dim() < 1:
            return None
        counts = torch.bincount(index.flatten().long().cpu(), minlength=value.shape[0])
        scale = max(float(ref.abs().max()), 1e-12)
        wrong = ((value.double() - ref).abs() > 1e-4 * scale).reshape(value.shape[0], -1).any(1)
        repeated = counts[: value.shape[0]] > 1
        up = before.get(gradient(line.target))
        if not isinstance(up, Tensor) or not wrong.any() or (wrong & ~repeated).any():
            continue
        # Each wrong row holds one of its lookups' gradients, or their mean: what the
        # repeats did, seen in the numbers (not a row that lost gradient for another reason).
        rows = up.detach().to("cpu", torch.float64).reshape(index.numel(), -1)
        flat = index.flatten().long().cpu()
        v = value.detach().to("cpu", torch.float64).reshape(value.shape[0], -1)

        if all(_one_or_mean(v[int(r)], rows[flat == int(r)])
               for r in torch.nonzero(wrong).flatten()):
            return diagnosis("derived", (
                f"{gradient(tensor)} is right on the rows `{expr.value.id}[{expr.slice.id}]` "
                f"looked up once and wrong on the {int(wrong.sum())} rows looked up more than "
                "once. Every lookup of a row sends its own gradient back, and a row's "
                "gradients add up: check what happens where an index repeats."))
    return None


def _tied_entries(prepared: _Prepared, tensor: str, before: dict
                  ) -> tuple[Tensor, ForwardLine, Callable[[Tensor], Tensor]] | None:
    """The entries of `tensor` that tie for the largest in a window of a max-pool of the
    step's lines (non-overlapping windows), that line, and what sums a tensor over each window
    and gives every entry its window's sum; None where no such line reads it."""
    for line in prepared.lines:
        expr = _parsed(line.source)
        if not (isinstance(expr, ast.Call) and _name(expr) in ("max_pool1d", "max_pool2d")):
            continue
        x = before.get(tensor)
        first = expr.args[0] if expr.args else None
        if not (isinstance(first, ast.Name) and first.id == tensor):
            continue
        k = _const(_arg(expr, 0, "kernel_size"))
        stride = _const(_arg(expr, 1, "stride"))
        if not isinstance(x, Tensor) or not isinstance(k, int) or stride not in (None, k) \
                or any(kw.arg in ("padding", "dilation", "ceil_mode") for kw in expr.keywords) \
                or len(expr.args) > 2:
            return None
        dims = 2 if _name(expr).endswith("2d") else 1
        xd = x.detach().to("cpu", torch.float64)
        pool = F.max_pool2d if dims == 2 else F.max_pool1d
        top = pool(xd, k)
        for d in range(-dims, 0):
            top = top.repeat_interleave(k, d)
        if top.shape != xd.shape:
            return None

        def window_sums(t: Tensor, k: int = k, dims: int = dims) -> Tensor:
            out = F.avg_pool2d(t, k) * k * k if dims == 2 else F.avg_pool1d(t, k) * k
            for d in range(-dims, 0):
                out = out.repeat_interleave(k, d)
            return out

        at_max = (xd == top).double()
        return (window_sums(at_max) > 1.5) & (at_max > 0), line, window_sums
    return None


def _wrong_entries(value: Tensor, ref: Tensor) -> Tensor:
    scale = max(float(ref.abs().max()), 1e-12)
    return (value.double() - ref).abs() > 1e-4 * scale


def _ties(prepared: _Prepared, tensor: str, value: Tensor, ref: Tensor, before: dict
          ) -> Diagnosis | None:
    """A max-pool's gradient right everywhere but in windows where several entries tie for
    the largest (a window of zeros after a ReLU): it went to more than one, or another one."""
    found = _tied_entries(prepared, tensor, before)
    if found is None:
        return None
    tied, line, window_sums = found
    wrong = _wrong_entries(value, ref)
    if wrong.any() and not (wrong & ~tied).any():
        v, r = value.detach().to("cpu", torch.float64), ref.detach().to("cpu", torch.float64)
        whole, count = window_sums(r), window_sums(tied.double())
        scale = max(float(r.abs().max()), 1e-12)
        near = lambda a, b: bool(((a - b).abs() <= 1e-4 * scale)[tied].all())  # noqa: E731
        if near(v, whole):
            what = ("your code gives the window's whole gradient to every one of the tied "
                    "entries, as a mask that compares each entry with the window's max "
                    "(`==`, `isclose`) marks them all")
        elif near(v, whole / count.clamp(min=1)):
            what = "your code shares the window's gradient equally among the tied entries"
        else:
            what = "your code gives it to another of the tied entries, or to several"
        return diagnosis("derived", (
            f"{gradient(tensor)} is right except in the windows where several entries are "
            f"tied for the largest ({int(tied.sum())} entries, zeros after a ReLU most "
            f"often): `{line.source.strip()}` passes each window's gradient to one entry "
            f"only, the first of the largest, and none to the others; {what}."))
    return None


def tie_equivalent(pack: Pack, step: Step, tensor: str, value: Tensor, ref: Tensor,
                   before: dict) -> str | None:
    """Why `value` is as right as autograd's gradient, or None.

    At entries that tie for a window's largest, a max-pool has no single derivative: autograd
    sends the window's gradient to the first of them, a mask of the max to all of them. Either
    is accepted where it differs from autograd's only there, and where the line that made
    `tensor` passes the difference on as nothing (tied zeros of a ReLU): the gradient that flows
    on is then the same to every later step and to training."""
    if value.shape != ref.shape or not bool(torch.isfinite(value).all()):
        return None
    try:
        return _tie_equivalent(pack, step, tensor, value, ref, before)
    except Exception:  # noqa: BLE001 - what cannot be shown equivalent stays refused
        return None


def _tie_equivalent(pack: Pack, step: Step, tensor: str, value: Tensor, ref: Tensor,
                    before: dict) -> str | None:
    made = next((ln for ln in pack.forward_lines if ln.target == tensor), None)
    if made is None:
        return None  # a parameter or an input: its gradient is used as it is
    prepared = _Prepared([], {}, {}, [pack.line_for(t) for t in step.lines], loss=pack.loss)
    found = _tied_entries(prepared, tensor, before)
    if found is None:
        return None
    tied, line, window_sums = found
    v, r = value.detach().to("cpu", torch.float64), ref.detach().to("cpu", torch.float64)
    wrong = _wrong_entries(v, r)
    if not wrong.any() or (wrong & ~tied).any():
        return None
    # Each tied entry gets its window's whole gradient or none of it (the first, the last, all
    # of them): what a max sends; any other number there is no derivative of it.
    whole = window_sums(r)
    scale = max(float(r.abs().max()), 1e-12)
    if not bool(((v.abs() <= 1e-4 * scale) | ((v - whole).abs() <= 1e-4 * scale))[wrong].all()):
        return None
    expr = _parsed(made.source)
    ns = {k: (x.detach().to("cpu", torch.float64) if isinstance(x, Tensor)
              and x.is_floating_point() else x) for k, x in before.items() if isinstance(k, str)}
    reads = [n.id for n in ast.walk(expr) if isinstance(n, ast.Name)
             and isinstance(ns.get(n.id), Tensor) and ns[n.id].is_floating_point()]
    leaves = {k: ns[k].clone().requires_grad_() for k in dict.fromkeys(reads)}
    if not leaves:
        return None
    with torch.enable_grad():
        out = _evaluate_call(expr, {**ns, **leaves})
        if not isinstance(out, Tensor) or out.shape != v.shape or not out.requires_grad:
            return None
        # only where it differs beyond rounding, which elsewhere would flow on as rounding
        on = vjp(out, list(leaves.values()), (v - r) * wrong, retain_graph=True,
                 allow_unused=True)
        flow = vjp(out, list(leaves.values()), r, allow_unused=True)
    passed = max((float(g.abs().max()) for g in on if g is not None), default=0.0)
    scale = max((float(g.abs().max()) for g in flow if g is not None), default=0.0)
    if passed > 1e-9 * max(scale, 1e-12):
        return None
    return (f"{gradient(tensor)} differs from autograd's only at the {int((wrong).sum())} "
            f"entries that tie for the largest in their window of `{line.source.strip()}`, "
            "where the max has no single derivative (autograd gives the window's gradient to "
            f"the first of them). `{made.source.strip()}` passes nothing back from those "
            "entries, so the gradient that flows on is the same: accepted.")


def _one_or_mean(row: Tensor, lookups: Tensor) -> bool:
    """A row's value is one of its lookups' gradients, or their mean."""
    return any(close(row, c) for c in lookups) or close(row, lookups.mean(0))


def _triangle(tensor: str, value: Tensor, ref: Tensor) -> Diagnosis | None:
    """The right gradient with a triangle of its last two axes zeroed, or only that triangle
    kept: a causal mask applied where the line applies none, or the wrong way round."""
    if value.dim() < 2 or value.shape[-1] != value.shape[-2] or value.shape[-1] < 3:
        return None
    t = value.shape[-1]
    ones = torch.ones(t, t, dtype=torch.float64)
    masks = {"above the diagonal": torch.tril(ones), "below the diagonal": torch.triu(ones),
             "on and above the diagonal": torch.tril(ones, -1),
             "on and below the diagonal": torch.triu(ones, 1)}
    v = value.detach().to("cpu", torch.float64)
    for where, keep in masks.items():
        produced = ref * keep
        if not close(produced, ref) and close(v, produced):
            return diagnosis("derived", (
                f"{gradient(tensor)} is the right gradient with every entry {where} set to "
                "zero, as a causal mask would. Which entries does this step's line itself "
                "zero, and which reach the loss?"))
    return None


def _swapped_axes(tensor: str, value: Tensor, ref: Tensor) -> Diagnosis | None:
    """The right numbers with two axes of the same size swapped."""
    from itertools import combinations

    v = value.detach().to("cpu", torch.float64)
    for i, j in combinations(range(v.dim()), 2):
        if v.shape[i] == v.shape[j] and v.shape[i] > 1 and close(v.transpose(i, j), ref):
            return diagnosis("derived", (
                f"{gradient(tensor)} holds the right numbers with axes {i} and {j} swapped: the "
                f"shape cannot tell, since both have {v.shape[i]} entries. Undo each reshape, "
                "transpose or flatten in the order the forward pass made it."))
    return None


_RESHAPES = ("flatten", "view", "reshape")


def _unflattened_in_another_order(prepared: _Prepared, tensor: str, value: Tensor,
                                  ref: Tensor, before: dict) -> Diagnosis | None:
    """A reshape's gradient put back as if the reshaped tensor's axes (past the first) had been
    in another order: `[N, H, W, C]` read back where the forward pass flattened `[N, C, H, W]`."""
    from itertools import permutations

    x = before.get(tensor)
    if not isinstance(x, Tensor) or x.dim() < 3 or x.dim() > 5 or value.shape != x.shape:
        return None
    for line in prepared.lines:
        expr = _parsed(line.source)
        if not (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute)
                and expr.func.attr in _RESHAPES and isinstance(expr.func.value, ast.Name)
                and expr.func.value.id == tensor):
            continue
        rest = list(range(1, x.dim()))
        flat = ref.reshape(-1)  # a reshape keeps the order of the entries: the gradient's too
        for order in permutations(rest):
            if list(order) == rest:
                continue
            laid = flat.reshape(x.shape[0], *(x.shape[i] for i in order))
            back = laid.permute(0, *(1 + order.index(i) for i in rest))
            if close(value, back) and not close(back, ref):
                sizes = ", ".join(str(x.shape[i]) for i in (0, *order))
                own = ", ".join(str(d) for d in x.shape)
                return diagnosis("derived", (
                    f"{gradient(tensor)} holds the right numbers laid out as if `{tensor}` had "
                    f"been [{sizes}] when `{line.source.strip()}` reshaped it, but it is "
                    f"[{own}]: a reshape reads a tensor's entries in the order of its own axes, "
                    "so the gradient goes back through the same reshape, with no axis moved."))
    return None


def _moved_entries(tensor: str, value: Tensor, ref: Tensor) -> Diagnosis | None:
    """Every right number, each in another place: a reshape undone in the wrong order."""
    v = value.detach().to("cpu", torch.float64).flatten()
    r = ref.flatten()
    if v.numel() < 4 or close(v, r):
        return None
    if close(v.sort().values, r.sort().values) and _share_close(v, r) < 0.9:
        how = _how_moved(tensor, value.detach().to("cpu", torch.float64), ref)
        if how is not None:
            return diagnosis("derived", how)
        return diagnosis("derived", (
            f"{gradient(tensor)} holds exactly the right numbers, but in other places: each "
            "entry's gradient belongs where that entry was. Follow where each one came from in "
            "the forward line."))
    return None


def _how_moved(tensor: str, value: Tensor, ref: Tensor) -> str | None:
    """Where the right numbers went, where one move explains it: reversed along a dim, or laid
    out by a reshape to the tensor's sizes in another order and moved back."""
    from itertools import combinations, permutations

    if value.shape != ref.shape or ref.dim() > 5:
        return None
    r = ref.detach().to("cpu", torch.float64)
    grad = gradient(tensor)
    for k in (1, 2):
        for dims in combinations([d for d in range(r.dim()) if r.shape[d] > 1], k):
            if close(value, r.flip(dims)):
                which = " and ".join(f"dim {d} (size {r.shape[d]})" for d in dims)
                return (f"{grad} holds the right numbers reversed along {which}: a flip that "
                        f"`{tensor}`'s forward line does not make (or one it makes, not undone). "
                        "Each entry's gradient belongs where that entry is.")
    flat = r.reshape(-1)
    for order in permutations(range(r.dim())):
        if list(order) == list(range(r.dim())):
            continue
        sizes = [r.shape[i] for i in order]
        back = flat.reshape(sizes).permute([order.index(i) for i in range(r.dim())])
        read = r.permute(order).reshape(r.shape)
        if close(value, read) and not close(read, r):
            said = ", ".join(str(n) for n in sizes)
            return (f"{grad} holds the right numbers with `{tensor}`'s axes taken in the order "
                    f"[{said}] and then reshaped to its shape: a reshape (or view) keeps the "
                    "order the entries are in, so a gradient built with its axes in another "
                    "order must have them moved back (permute or transpose) before the reshape.")
        if close(value, back) and not close(back, r):
            said = ", ".join(str(n) for n in sizes)
            return (f"{grad} holds the right numbers laid out as if `{tensor}`'s axes came in "
                    f"another order: its entries read into a [{said}] tensor and the axes then "
                    "moved back. A reshape (or view) reads the entries in the order of the "
                    "tensor's own axes and never moves an axis: reshape to the shape the "
                    "entries are in, then permute or transpose.")
    return None


def _share_close(a: Tensor, b: Tensor) -> float:
    """The share of entries of `a` that equal `b`'s (to float32 rounding of the largest)."""
    scale = max(float(b.abs().max()) if b.numel() else 0.0, 1e-12)
    return float(((a - b).abs() <= 1e-4 * scale).double().mean()) if a.numel() else 0.0


def _slip_value(prepared: _Prepared, slip: Slip, tensor: str, ref: Tensor, before: dict
                ) -> Tensor | None:
    """What the learner's gradient of `tensor` is under the slip: autograd's reference plus
    the change the slip makes to this line's share of it."""
    if slip.local is not None:
        if slip.tensor and slip.tensor.startswith("*"):  # a factor on the whole gradient
            factor = slip.local(before)
            if factor is None or factor.shape != ref.shape:
                return None
            return ref * factor
        if slip.tensor != tensor:
            return None
        got = slip.local(before)
        right = _line_vjp(prepared, slip.line, _parsed(slip.line.source), tensor, before,
                          base=True)
        if got is None or right is None or got.shape != ref.shape:
            return None
        return ref + (got - right)
    changes = dict(slip.changes) if slip.changes else (
        {slip.line.target: slip.expr} if slip.expr is not None else {})
    right = _step_vjp(prepared, {}, (), tensor, before)
    changed = _step_vjp(prepared, changes, slip.detach, tensor, before)
    if right is None or changed is None or changed.shape != ref.shape:
        return None
    return ref + (changed - right)


def _step_vjp(prepared: _Prepared, changes: dict[str, ast.expr], detach: tuple[str, ...],
              tensor: str, before: dict) -> Tensor | None:
    """The gradient of `tensor` through the step's lines, run in forward order with some of
    them changed or held constant, given the upstream gradients of the lines' outputs."""
    base = not changes and not detach
    if base and tensor in prepared.step_base:
        return prepared.step_base[tensor]
    lines = sorted(prepared.lines, key=lambda line: line.index)
    exprs = {line.target: changes.get(line.target) or _parsed(line.source) for line in lines}
    made = {line.target for line in lines}
    read_later = {n for line in lines for n in _reads(exprs[line.target])}
    x = before.get(tensor)
    result = None
    if isinstance(x, Tensor) and x.is_floating_point() and any(
            tensor in _reads(e) for e in exprs.values() if e is not None):
        ns = {k: (v.detach().to("cpu", torch.float64) if isinstance(v, Tensor)
                  and v.is_floating_point() else v) for k, v in before.items()
              if isinstance(k, str)}
        with torch.enable_grad():
            leaf = ns[tensor] = ns[tensor].clone().requires_grad_()
            outputs, ups = [], []
            for line in lines:
                value = _evaluate_call(exprs[line.target], ns) if exprs[line.target] else None
                if value is None:
                    break
                if line.target in detach:
                    value = value.detach()
                if line.target == tensor and tensor in made:
                    leaf = value  # the gradient of a tensor the step itself makes
                ns[line.target] = value
                up = before.get(gradient(line.target))
                if up is None and line.target == prepared.loss:
                    up = torch.ones_like(value)  # the loss's own gradient is one
                if line.target not in read_later and isinstance(up, Tensor):
                    if up.shape != value.shape:
                        break
                    outputs.append(value)
                    ups.append(up.detach().to("cpu", torch.float64))
            else:
                live = [(o, u) for o, u in zip(outputs, ups, strict=True) if o.requires_grad]
                if live and leaf.requires_grad:
                    try:
                        (result,) = vjp([o for o, _ in live], leaf, [u for _, u in live],
                                        allow_unused=True)
                    except RuntimeError:
                        result = None
                    if result is None:
                        result = torch.zeros_like(leaf)
                elif outputs:
                    result = torch.zeros_like(leaf)
    if base:
        prepared.step_base[tensor] = result
    return result


def _line_vjp(prepared: _Prepared, line: ForwardLine, expr: ast.expr | None, tensor: str,
              before: dict, base: bool = False) -> Tensor | None:
    """The gradient of `tensor` through the one line `expr`, given the line's upstream."""
    if expr is None or tensor not in _reads(expr):
        return None
    memo = (line.target, tensor)
    if base and memo in prepared.base:
        return prepared.base[memo]
    up = before.get(gradient(line.target))
    x = before.get(tensor)
    result = None
    if isinstance(x, Tensor) and x.is_floating_point() and (up is None or isinstance(up, Tensor)):
        leaf = x.detach().to("cpu", torch.float64).requires_grad_()
        ns = {k: (v.detach().to("cpu", torch.float64) if isinstance(v, Tensor)
                  and v.is_floating_point() else v) for k, v in before.items()
              if isinstance(k, str)}
        ns[tensor] = leaf
        with torch.enable_grad():
            y = _evaluate_call(expr, ns)
            if up is None and y is not None and y.dim() == 0:
                up = torch.ones((), dtype=torch.float64)  # the loss: its own gradient is one
            if y is not None and isinstance(up, Tensor) and y.shape == up.shape \
                    and y.requires_grad:
                try:
                    (result,) = vjp(y, leaf, up.detach().to("cpu", torch.float64),
                                    allow_unused=True)
                except RuntimeError:
                    result = None
                if result is None:
                    result = torch.zeros_like(leaf)
    if base:
        prepared.base[memo] = result
    return result


def explain_layout(pack: Pack, step: Step, tensor: str, value: Tensor, ref: Tensor
                   ) -> Diagnosis | None:
    """A gradient of the wrong shape that holds the right numbers with two axes swapped, named
    by what those axes are to the line's operation (a convolution's output and input
    channels), else by their numbers."""
    if value.dim() != ref.dim() or value.dim() < 2 or value.shape == ref.shape:
        return None
    from itertools import combinations

    grad = gradient(tensor)
    for i, j in combinations(range(value.dim()), 2):
        swapped = value.transpose(i, j)
        if swapped.shape != ref.shape or not close(swapped, ref):
            continue
        conv = _weight_of_conv(pack, step, tensor)
        if conv is not None and {i, j} == {0, 1}:
            return diagnosis("shape", (
                f"{grad} holds the right numbers with its output and input channels swapped: "
                f"`{tensor}` is [out, in, taps] in `{conv}`, and its gradient keeps that layout."))
        return diagnosis("shape", (
            f"{grad} holds the right numbers with axes {i} and {j} swapped: "
            f"{list(value.shape)} where `{tensor}` is {list(ref.shape)}. A gradient is laid out "
            "as its tensor is."))
    order = permuted(value, ref)
    if order is not None:
        return diagnosis("shape", (
            f"{grad} holds the right numbers with its axes in another order: "
            f"{list(value.shape)} is `{tensor}`'s {list(ref.shape)} with its dims taken in the "
            f"order {tuple(order)}. Move the axes back (permute or transpose): a gradient is "
            "laid out as its tensor is."))
    return None


def _weight_of_conv(pack: Pack, step: Step, tensor: str) -> str | None:
    for target in step.lines:
        expr = _parsed(pack.line_for(target).source)
        for node in ast.walk(expr) if expr is not None else ():
            if isinstance(node, ast.Call) and _name(node) in ("conv1d", "conv2d", "conv3d") \
                    and tensor in _reads(_arg(node, 0, "weight")):
                return _text(node)
    return None


# --- the slips written as code, for a lesson `pack new` makes ------------------------------------

def written_slips(pack: Pack, step: Step) -> Iterator[str]:
    """The step's solution with each slip of its operations written in: the code a learner
    who made it would have typed. `pack new` catalogues those the tutor then names (the words
    come from `explain`, said of that line), so a generated lesson's mistakes are the slips of
    its own operations."""
    try:
        tree = ast.parse(step.solution)
    except SyntaxError:
        return
    ops = {_name(n) for t in step.lines for n in ast.walk(_parsed(pack.line_for(t).source)
                                                          or ast.Constant(None))
           if isinstance(n, ast.Call)}
    dilations = sorted({d for line in pack.forward_lines for d in _dilations(line)} | {1})
    seen: set[str] = set()

    def out(new: ast.AST) -> Iterator[str]:
        text = ast.unparse(ast.fix_missing_locations(new)) + "\n"
        if text not in seen and text.strip() != step.solution.strip():
            seen.add(text)
            yield text

    nodes = list(ast.walk(tree))
    for i, node in enumerate(nodes):
        # a kernel's flip or its channels' swap left out; a matrix's transpose left out
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and (
                node.func.attr in ("flip", "transpose") and ops & _CONVS
                or node.func.attr == "t"):
            yield from out(_swapped_in(tree, i, lambda n: n.func.value))
        # a padding on the other side
        if isinstance(node, ast.Call) and _name(node) == "pad" and len(node.args) >= 2:
            pads = _const(node.args[1])
            if isinstance(pads, tuple) and all(isinstance(p, int) for p in pads):
                swapped = _swap_sides(pads)
                if swapped != pads:
                    yield from out(_swapped_in(tree, i, lambda n, s=swapped: _padded(n, s)))
        # another layer's dilation
        if isinstance(node, ast.keyword) and node.arg == "dilation" \
                and isinstance(_const(node.value), int):
            for d in dilations:
                if d != _const(node.value):
                    yield from out(_keyword_set(tree, i, d))
    if ops & {"max_pool1d", "max_pool2d"}:
        yield from (t for t in _pool_codes(pack, step) if t not in seen)


_CONVS = {"conv1d", "conv2d", "conv3d"}


def _dilations(line: ForwardLine) -> set[int]:
    expr = _parsed(line.source)
    found = set()
    for node in ast.walk(expr) if expr is not None else ():
        if isinstance(node, ast.Call) and _name(node) in _CONVS:
            d = _const(_arg(node, 4, "dilation"))
            if isinstance(d, int):
                found.add(d)
    return found


def _swapped_in(tree: ast.Module, index: int, make: Callable[[ast.AST], ast.AST]) -> ast.Module:
    new = _copy(tree)
    old = list(ast.walk(new))[index]
    replacement = make(old)

    class Swap(ast.NodeTransformer):
        def visit(self, node):
            return replacement if node is old else super().visit(node)

    return Swap().visit(new)


def _keyword_set(tree: ast.Module, index: int, value: int) -> ast.Module:
    new = _copy(tree)
    list(ast.walk(new))[index].value = ast.Constant(value)
    return new


def _pool_codes(pack: Pack, step: Step) -> Iterator[str]:
    """A max-pool's gradient spread over its window, or sent to each window's first entry:
    written for a pool whose windows do not overlap (kernel equal to stride, no padding)."""
    for target in step.lines:
        line = pack.line_for(target)
        expr = _parsed(line.source)
        if not (isinstance(expr, ast.Call) and _name(expr) in ("max_pool1d", "max_pool2d")):
            continue
        x, k = _subject(expr), _const(_arg(expr, 0, "kernel_size"))
        stride = _const(_arg(expr, 1, "stride"))
        if not isinstance(x, ast.Name) or not isinstance(k, int) or stride not in (None, k) \
                or _arg(expr, 2, "padding") is not None:
            continue
        dims = 2 if _name(expr).endswith("2d") else 1
        grad, up = gradient(x.id), gradient(line.target)
        count = k ** dims
        slices = ", ".join(["..."] + [f":{x.id}.shape[{-dims + d}] // {k} * {k}"
                                      for d in range(dims)])
        spread = (f"{grad} = torch.zeros_like({x.id})\n"
                  f"{grad}[{slices}] = {up}" + "".join(
                      f".repeat_interleave({k}, {-dims + d})" for d in range(dims))
                  + f" / {count}\n")
        starts = ", ".join(["..."] + [f":{x.id}.shape[{-dims + d}] // {k} * {k}:{k}"
                                      for d in range(dims)])
        first = f"{grad} = torch.zeros_like({x.id})\n{grad}[{starts}] = {up}\n"
        yield spread
        yield first
