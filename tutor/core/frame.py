"""A notebook in its own frame: where a learner's forward pass is their own (a model class, a dict
of activations, their own names throughout), its tensors are found among what it computed by
their values, not by their names.

The notebook runs as it was written, on its own data, parameters and batch (tutor/core/trace.py
records every op and keeps every value). Its parameters and batch are then the tensors of the
lesson's parameters' and batch's shapes that its ops read first; the lesson's forward pass, run
on them, must give the loss the notebook computed (else they were not). On that batch the
lesson's forward values and autograd's gradients are the reference: each of the notebook's
versions whose value is one of the lesson's forward tensors is read as that tensor, by its
name, so that what made a step's answer is written out from the step's inputs in the lesson's
names, and the ordinary check runs it on the tutor's own batches (trace.py `written_out`).
"""

from __future__ import annotations

import ast
import itertools
import math
import re

import torch
from torch import Tensor

from tutor.core.network import Batch, Network
from tutor.core.trace import (
    Read,
    Traces,
    axis_order,
    gradient_of,
    laid_out,
    layout_code,
    regroup_code,
    regrouped,
)
from tutor.pack.flow import gradient

# The notebook's full data is also an integer tensor of the batch's shape: a batch this large
# is no batch (and running the forward pass on it would take long).
MAX_BATCH = 4096
MAX_TRIES = 48  # assignments of same-shaped parameters tried


def found(network: Network, trace: dict) -> tuple[Batch, Traces] | None:
    """The notebook's batch pushed through the lesson's forward pass with its parameters, and
    its trace read with the lesson's tensors named; None where no assignment gives its loss."""
    try:
        read = Read.of(trace)
    except (KeyError, IndexError, TypeError, ValueError, AttributeError):
        return None
    first_read: dict[tuple[int, int], int] = {}
    for i, op in enumerate(read.ops):
        for r in op["reads"]:
            first_read.setdefault(tuple(r), i)
    assigned = _assigned(network, read, first_read)
    if assigned is None:
        return None
    batch, made_loss, chosen, parts = assigned
    read.expressed.update(parts)
    _name(read, batch, network, made_loss, chosen)
    _through_layouts(read, made_loss)
    _sliced(read, batch, network, made_loss)
    read.assembles = True
    n = batch.n
    sizes = frozenset(d for p in network.params.values() for d in p.shape)
    return batch, Traces(read, read, {i: i for i in range(len(read.ops))}, (n, n), own=n,
                         sizes=sizes)


def _assigned(network: Network, read: Read, first_read: dict[tuple[int, int], int]
              ) -> tuple[Batch, int, dict[str, tuple[int, int]], dict[tuple[int, int], str]
                         ] | None:
    """The batch the notebook's parameters and batch give, the op that made its loss, the
    version that is each parameter, and each piece of a parameter the notebook keeps in
    pieces, written as that part of it (`w1.select(2, 0).T`)."""
    main = network.main
    X, Y = main.values["Xb"], main.values["Yb"]
    losses = [(read.maker.get(ov, len(read.ops)), v) for ov, v in read.values.items()
              if v.is_floating_point() and v.dim() == 0]
    if not losses:
        return None
    used = sorted(((i, ov) for ov, i in first_read.items() if ov in read.values
                   and not _drawn_then_scaled(read, ov, i)), key=lambda t: t[0])
    ints = [(ov, read.values[ov]) for _, ov in used if not read.values[ov].is_floating_point()]
    floats = [(ov, read.values[ov]) for _, ov in used if read.values[ov].is_floating_point()]
    # A batch of the lesson's rank: its sequences may be of the notebook's own length (the
    # lesson's forward pass then runs on that length, or the assignment fails).
    xs = [(ox, x) for ox, x in ints if x.dim() == X.dim() and 0 < x.shape[0] <= MAX_BATCH
          and x.numel() <= MAX_BATCH * 64]
    xs.sort(key=lambda item: tuple(item[1].shape[1:]) != tuple(X.shape[1:]))
    pairs = [(ox, x, oy, y) for ox, x in xs[:16] for oy, y in ints
             if ox[0] != oy[0] and y.dim() == Y.dim() and y.shape[0] == x.shape[0]
             and (Y.dim() < 2 or y.shape[1:] == x.shape[1:] or Y.shape[1:] != X.shape[1:])]
    # The batches its first loss was computed from first: both read on the way to it.
    feeds = _ancestors(read, min(i for i, _ in losses))
    pairs.sort(key=lambda p: p[0] not in feeds or p[2] not in feeds)
    batches = [(x, y) for _, x, _, y in pairs][:32]
    if not batches:
        return None
    # Each shape's parameters, in the order the lesson's forward pass first reads them, and
    # the notebook's tensors of that shape in the order its ops first read them; where it has
    # too few, parameters put together from pieces it keeps apart (a gate's own matrix, a
    # tap's), the pieces in the order it reads them.
    first_loss = min(i for i, _ in losses)
    groups: dict[tuple[int, ...], list[str]] = {}
    for name, p in network.params.items():
        groups.setdefault(tuple(p.shape), []).append(name)
    choices: dict[tuple[int, ...], list[Tensor]] = {}
    pieces: dict[int, list[tuple[tuple[int, int], str]]] = {}  # id(made) -> its pieces
    # from what its forward pass reads, before its first loss
    early = [(ov, read.values[ov]) for i, ov in used if i <= first_loss
             and read.values[ov].is_floating_point()]
    # One version per object: a tensor set up in place (`b[2*H:3*H] += 1`, a forget gate's
    # bias) is what its forward pass reads, the last version read before its first loss.
    last: dict[int, tuple[int, int]] = {}
    for i, ov in used:
        if i <= first_loss or ov[0] not in last:
            last[ov[0]] = ov
    before_loss = {ov for i, ov in used if i <= first_loss}
    for shape, names in groups.items():
        seen: list[Tensor] = []
        # What its forward pass reads before its first loss first; later values (a training
        # loop's) only where those are too few.
        for ov, t in sorted(floats, key=lambda f: f[0] not in before_loss):
            if len(seen) >= len(names) and ov not in before_loss:
                break
            if tuple(t.shape) == shape and last.get(ov[0]) == ov \
                    and not any(t is s for s in seen):
                seen.append(t)
            if len(seen) >= 2 * len(names) + 1:
                break
        if len(shape) == 2:
            # A matrix kept the other way round, (out, in) as `F.linear` takes it: square
            # ones too, which only the loss tells from the matrix as it stands.
            flipped: list[Tensor] = []
            for ov, t in early:
                if tuple(t.shape) == shape[::-1] and not any(t is f for f in flipped):
                    flipped.append(t)
                    made = t.T
                    seen.append(made)
                    pieces[id(made)] = [(ov, "{}.T")]
                if len(flipped) >= 2 * len(names) + 1:
                    break
        if len(seen) < len(names):
            for made, parts in _pieced(shape, early):
                seen.append(made)
                pieces[id(made)] = parts
        if len(seen) < len(names):
            return None
        choices[shape] = seen
    options = [[dict(zip(names, pick, strict=True))
                for pick in itertools.islice(itertools.permutations(choices[shape], len(names)),
                                             MAX_TRIES)]
               for shape, names in groups.items()]
    # Every assignment that gives the notebook's loss (a masked loss is the same over padding
    # the notebook never computed), the one under which most of its forward values are the
    # lesson's taken.
    def fit(combo: tuple[dict, ...], x: Tensor, y: Tensor) -> bool:
        params = {k: v for part in combo for k, v in part.items()}
        ns = _forward(network, params, x, y)
        loss = ns.get(network.pack.loss) if ns is not None else None
        made = [i for i, seen in losses if isinstance(loss, Tensor) and loss.dim() == 0
                and _same(loss.detach(), seen)]
        if made:
            fits.append((_named_count(read, ns, min(made)), min(made), params, x, y))
        return bool(made)

    fits: list[tuple[int, int, dict, Tensor, Tensor]] = []
    for x, y in batches[:8]:
        if any(fit(combo, x, y) for combo in itertools.islice(itertools.product(*options),
                                                               MAX_TRIES)) and len(fits) >= 4:
            break
    if not fits and math.prod(len(group) for group in options) > MAX_TRIES:
        # Too many combinations to try them all: one parameter at a time, on the batches
        # most like the lesson's.
        for x, y in batches[:2]:
            if fit(_greedy(network, read, groups, choices, x, y, min(i for i, _ in losses)),
                   x, y):
                break
    if not fits:
        return None
    _, made_loss, params, x, y = max(fits, key=lambda f: f[0])
    where = {id(t): ov for ov, t in floats + ints}
    chosen = {name: where[id(t)] for name, t in params.items() if id(t) in where}
    # Its batch too, as the tensors the assignment took: all zeros (every target the end of
    # its word) is a batch as well as any other.
    chosen |= {name: where[id(t)] for name, t in (("Xb", x), ("Yb", y)) if id(t) in where}
    parts = {ov: text.format(name) for name, t in params.items()
             for ov, text in pieces.get(id(t), ())}
    return network.make_batch(x, y, params=params), made_loss, chosen, parts


def _ancestors(read: Read, last: int) -> set[tuple[int, int]]:
    """The versions the op at `last` was made from, however far back."""
    if last >= len(read.ops):
        return set()
    seen: set[tuple[int, int]] = set()
    todo = [tuple(r) for r in read.ops[last]["reads"]]
    while todo:
        ov = todo.pop()
        if ov in seen:
            continue
        seen.add(ov)
        maker = read.maker.get(ov)
        if maker is not None:
            todo += [tuple(r) for r in read.ops[maker]["reads"]]
    return seen


MAX_PIECED = 48  # parameters put together from pieces, per shape


def _pieced(shape: tuple[int, ...], floats: list[tuple[tuple[int, int], Tensor]]
            ) -> list[tuple[Tensor, list[tuple[tuple[int, int], str]]]]:
    """Tensors of `shape` put together from equal pieces of the notebook's, each with its
    pieces written as the part of it they are: stacked along one dim (a convolution's taps
    kept as one matrix each) or concatenated (a gate's own matrix), each piece as it is or,
    where it is a matrix, transposed (kept as (in, out)). Runs of pieces in the order the
    notebook first reads them."""
    out: list[tuple[Tensor, list[tuple[tuple[int, int], str]]]] = []
    for d in range(len(shape)):
        layouts = []
        if 2 <= shape[d] <= MAX_CHUNKS:
            layouts.append(("stack", shape[d], shape[:d] + shape[d + 1:]))
        layouts += [("cat", k, shape[:d] + (shape[d] // k,) + shape[d + 1:])
                    for k in range(2, MAX_CHUNKS + 1) if shape[d] % k == 0 and shape[d] // k > 1]
        for how, k, piece in layouts:
            for flipped in (False, True) if len(piece) == 2 else (False,):
                want = piece[::-1] if flipped else piece
                kept: list[tuple[tuple[int, int], Tensor]] = []
                for ov, t in floats:
                    if tuple(t.shape) == want and not any(t is p for _, p in kept):
                        kept.append((ov, t))
                runs = [kept[start:start + k] for start in range(len(kept) - k + 1)]
                # in any order, for a few (its first tap read later, where the padding is)
                runs = [list(p) for run in runs for p in (
                    itertools.permutations(run) if k <= 4 else [run])]
                for run in runs:
                    parts = [t.T if flipped else t for _, t in run]
                    made = torch.stack(parts, d) if how == "stack" else torch.cat(parts, d)
                    size = piece[d] if how == "cat" else 1
                    texts = [(ov, "{}" + (f".select({d}, {i})" if how == "stack"
                                          else f".narrow({d}, {i * size}, {size})")
                              + (".T" if flipped else "")) for i, (ov, _) in enumerate(run)]
                    out.append((made, texts))
                    if len(out) >= MAX_PIECED:
                        return out
    return out


def _greedy(network: Network, read: Read, groups: dict[tuple[int, ...], list[str]],
            choices: dict[tuple[int, ...], list[Tensor]], x: Tensor, y: Tensor,
            first_loss: int) -> tuple[dict[str, Tensor]]:
    """An assignment found one parameter at a time (where every combination of the choices is
    too many to try): each parameter's choice, the others held, the one under which most of
    the notebook's forward values are the lesson's; twice over, as a later layer's right
    parameters let an earlier one's be seen."""
    # Its forward values by their sizes in order: one kept with its axes in another order
    # (time first, `[T, B, C]`) still shows a layer's parameters right.
    # Each with the sum of its magnitudes, which no layout changes: most pairs differ there.
    mine: dict[tuple[int, ...], list[tuple[Tensor, float]]] = {}
    for ov, v in read.values.items():
        if v.is_floating_point() and v.numel() > 1 and read.maker.get(ov, -1) <= first_loss:
            mine.setdefault(tuple(sorted(v.shape)), []).append(
                (v, float(v.double().abs().sum())))

    def found(v: Tensor) -> bool:
        total = float(v.double().abs().sum())
        for m, size in mine.get(tuple(sorted(v.shape)), ()):
            if abs(size - total) > 1e-3 * total + 1e-6:
                continue
            if m.shape == v.shape:
                if _tight(m, v):
                    return True
                continue
            for order in itertools.permutations(range(v.dim())):
                laid = v.permute(order)
                if laid.shape == m.shape and _tight(m, laid):
                    return True
        return False

    def named(ns: dict | None) -> int:
        if ns is None:
            return -1
        return sum(found(v.detach()) for v in ns.values()
                   if isinstance(v, Tensor) and v.is_floating_point() and v.numel() > 1
                   and v.dim() <= 4)

    picked = {name: choices[shape][k] for shape, names in groups.items()
              for k, name in enumerate(names)}
    for _ in range(2):
        for shape, names in groups.items():
            for name in names:
                if len(choices[shape]) < 2:
                    continue
                taken = [picked[n] for n in names if n != name]
                best, score = picked[name], -1
                for option in choices[shape]:
                    if any(option is t for t in taken):
                        continue
                    count = named(_forward(network, {**picked, name: option}, x, y))
                    if count > score:
                        best, score = option, count
                picked[name] = best
            # Two parameters of one shape that only show together (a norm's weight and bias,
            # read in the other order): each pair's choices traded.
            score = named(_forward(network, picked, x, y))
            for a, b in itertools.combinations(names, 2):
                traded = {**picked, a: picked[b], b: picked[a]}
                count = named(_forward(network, traded, x, y))
                if count > score:
                    picked, score = traded, count
    return (picked,)


def _named_count(read: Read, ns: dict, made_loss: int) -> int:
    """How many of the lesson's forward tensors are among the notebook's forward values."""
    mine = [v for ov, v in read.values.items() if v.is_floating_point()
            and read.maker.get(ov, -1) <= made_loss and v.numel() > 1]
    count = 0
    for value in ns.values():
        if isinstance(value, Tensor) and value.is_floating_point() and value.numel() > 1:
            v = value.detach()
            count += any(m.shape == v.shape and _tight(m, v) for m in mine)
    return count


def _drawn_then_scaled(read: Read, ov: tuple[int, int], first: int) -> bool:
    """Whether `ov` is a step on the way to a parameter (`torch.randn(...) * (5 / 3) / fan**0.5`
    makes two): drawn at random, or made from such a step alone, and read first (`first`) alone,
    with constants, into a tensor of its shape."""
    if not _drawn(read, ov, 0):
        return False
    op = read.ops[first]
    if "bad" in op or [tuple(r) for r in op["reads"]] != [ov] or _shape_only(op):
        return False
    made = [(o, 0) for o in op.get("outs") or [] if o is not None] + [
        tuple(b) for b in op.get("bumps") or []]
    return any(m in read.values and read.values[m].shape == read.values[ov].shape
               for m in made)


def _shape_only(op: dict) -> bool:
    """An op that reads only a tensor's shape (`torch.zeros_like(p)`, `p.new_zeros(...)`): a
    buffer made beside a parameter (its gradient, a momentum), not a step on the way to it."""
    call = op.get("call")
    name = str(call[-1]) if isinstance(call, (list, tuple)) and call else str(call)
    name = name.rsplit(".", 1)[-1]
    return name.endswith("_like") or name in ("new_zeros", "new_ones", "new_empty", "new_full")


def _drawn(read: Read, ov: tuple[int, int], depth: int) -> bool:
    """Made by a random draw, or from one alone (a scale, a division)."""
    maker = read.maker.get(ov)
    if maker is None or depth > 8:
        return False
    op = read.ops[maker]
    if "bad" in op:
        return True
    reads = [tuple(r) for r in op["reads"]]
    return len(reads) == 1 and _drawn(read, reads[0], depth + 1)


def _tight(a: Tensor, b: Tensor) -> bool:
    """`a` is `b` as another float32 computation of it gives it: a forward value of the
    notebook's is one of the lesson's to rounding, where an epsilon added (`var + 1e-5`) or any
    other change is not."""
    a, b = a.double(), b.double()
    finite = torch.isfinite(b)
    if not torch.equal(finite, torch.isfinite(a)) or not torch.equal(a[~finite], b[~finite]):
        return False  # a mask's -inf where the other has numbers
    a, b = a[finite], b[finite]
    scale = float(b.abs().max()) if b.numel() else 0.0
    return bool(((a - b).abs() <= 1e-5 * scale + 1e-5 * b.abs()).all())


def _same(a: Tensor, b: Tensor) -> bool:
    """The same loss up to float32 rounding: two parameters swapped give a loss that is close,
    not the same."""
    return abs(float(a) - float(b)) <= 2e-6 * max(abs(float(b)), 1.0)


def _forward(network: Network, params: dict[str, Tensor], x: Tensor, y: Tensor
             ) -> dict | None:
    """The lesson's forward pass on the notebook's parameters and batch (its namespace)."""
    from tutor.core.network import forward_namespace

    pack = network.pack
    try:
        return forward_namespace(pack, params, x, y, torch.float32, torch.device("cpu"),
                                 [line.source for line in pack.forward_lines], network.sizes,
                                 fns=network.fns)
    except Exception:  # noqa: BLE001 - an assignment that does not fit the forward pass
        return None


def _name(read: Read, batch: Batch, network: Network, made_loss: int,
          chosen: dict[str, tuple[int, int]] | None = None) -> None:
    """Each version of the forward pass (made before its loss) whose value is one of the
    lesson's forward tensors (or its batch), read as that tensor: where the written code starts
    from the lesson's own. (A value its backward pass makes, `var + 1e-5`, may be close to one
    and is not it.)"""
    lesson = {k: v for k, v in batch.values.items() if isinstance(v, Tensor)}
    order = {line.target: i for i, line in enumerate(network.pack.forward_lines)}
    # What the lesson's lines read besides each tensor: where two of its tensors are equal (a
    # layer norm's scale of ones, as `nn.LayerNorm` starts, makes `lnf` the same as
    # `lnf_norm`), the notebook's value is the one its own ops go on to read it with.
    beside: dict[str, set[str]] = {}
    for line in network.pack.forward_lines:
        for operand in line.operands:
            beside.setdefault(operand, set()).update(set(line.operands) - {operand})
    if read.readers is None:
        read.descendants(set())  # builds the readers
    # Its parameters are the versions the assignment took (three layer norms' scales of ones
    # are equal in value, but each is the one its own layer reads).
    chosen = chosen or {}
    for name, ov in chosen.items():
        read.leaves[ov[0]] = name
        read.named.add(ov)
        read.maker.pop(ov, None)
    taken = set(chosen.values())
    for ov, value in sorted(read.values.items(), key=lambda item: read.maker.get(item[0], -1)):
        if ov in taken:
            continue
        if value.numel() < 2 or not bool(value.abs().sum()) \
                or read.maker.get(ov, -1) > made_loss:
            continue  # zeros are anything's; after the loss, the backward pass
        names = [k for k, t in lesson.items() if t.shape == value.shape and k not in chosen
                 and t.dtype.is_floating_point == value.is_floating_point()
                 and (_tight(value, t) if value.is_floating_point() else torch.equal(value, t))]
        if not names:
            _regrouped(read, ov, value, lesson, order)
            continue
        name = min(names, key=lambda k: order.get(k, -1))
        if len(names) > 1:
            with_it = _read_with(read, ov)
            name = min(names, key=lambda k: (-len(beside.get(k, set()) & with_it),
                                             order.get(k, -1)))
        read.leaves[ov[0]] = name
        read.named.add(ov)
        read.maker.pop(ov, None)
    _translate_hints(read)


def _regrouped(read: Read, ov: tuple[int, int], value: Tensor, lesson: dict[str, Tensor],
               order: dict[str, int]) -> None:
    """`ov` as one of the lesson's tensors laid out otherwise (activations kept as `[B*T, C]`
    rows, heads folded into the batch, time first), written so: `logits.flatten(0, 1)`,
    `h1.permute(2, 0, 1)`."""
    if not value.is_floating_point() or ov in read.expressed:
        return
    names = [k for k, t in lesson.items() if t.is_floating_point() and t.numel() == value.numel()
             and laid_out(tuple(value.shape), tuple(t.shape))
             and _tight(value, _laid(t, tuple(value.shape)))]
    if names:
        name = min(names, key=lambda k: order.get(k, -1))
        read.expressed[ov] = name + layout_code(tuple(lesson[name].shape), tuple(value.shape))
        return
    # Its axes moved and then merged, a stack of a few kept in the other order (`cat([c, h],
    # 1)` for the lesson's `stack([h, c])`): each such layout of the lesson's tensors whose
    # entries are the value's.
    for name, t in sorted(lesson.items(), key=lambda kv: order.get(kv[0], -1)):
        if t.is_floating_point() and t.numel() == value.numel() and 2 <= t.dim() <= 4:
            code = _rearranged(t, value)
            if code is not None:
                read.expressed[ov] = name + code
                return


def _rearranged(t: Tensor, value: Tensor) -> str | None:
    """The layout code (`.flip(0).permute(1, 0, 2).flatten(1)`) that makes `value` of `t`: an
    axis of two to four entries taken in reverse (or not), the axes moved, and neighbouring
    ones merged or split."""
    target = tuple(value.shape)
    for d in [None, *(d for d in range(t.dim()) if 2 <= t.shape[d] <= 4)]:
        flipped = t if d is None else t.flip(d)
        head = "" if d is None else f".flip({d})"
        for axes in itertools.permutations(range(t.dim())):
            if list(axes) == sorted(axes) and d is None:
                continue  # plain regrouping: `laid_out`'s
            moved = tuple(t.shape[a] for a in axes)
            if moved != target and not regrouped(moved, target):
                continue
            laid = flipped.permute(axes)
            laid = laid if moved == target else laid.reshape(target)
            if _tight(value, laid):
                code = head + (f".permute({', '.join(map(str, axes))})"
                               if list(axes) != sorted(axes) else "")
                return code + ("" if moved == target else regroup_code(moved, target))
    return None


def _laid(t: Tensor, shape: tuple[int, ...]) -> Tensor:
    """`t` laid out as `shape` (`trace.laid_out`): its axes in that order, or reshaped."""
    axes = axis_order(tuple(t.shape), shape)
    return t.permute(axes) if axes is not None else t.reshape(shape)


def _read_with(read: Read, ov: tuple[int, int]) -> set[str]:
    """The lesson's names of what the notebook's own ops read together with `ov` (through a
    layout op: `f @ W.T` reads `W`)."""
    out: set[str] = set()
    for i in (read.readers or {}).get(ov, ()):
        for r in read.ops[i]["reads"]:
            r = tuple(r)
            if r == ov:
                continue
            name = read.leaves.get(r[0])
            if name is None and r in read.maker:
                made = read.ops[read.maker[r]]
                if tuple(made.get("call") or ()) in _LAYOUTS and made["reads"]:
                    name = read.leaves.get(tuple(made["reads"][0])[0])
            if name:
                out.add(name)
    return out


# The ops that only lay a tensor out anew: a notebook that keeps a parameter the other way
# round (`W_out` as [V, H], read as `W_out.T` where the lesson keeps `Wy` as [H, V]) has the
# lesson's tensor as that op's result, and its own gradient, of what it keeps, through the same
# op is the lesson's gradient.
_LAYOUTS = frozenset({("prop", "T"), ("prop", "mT"), ("method", "t"), ("method", "transpose"),
                      ("method", "permute"), ("method", "swapaxes"), ("method", "swapdims"),
                      ("func", "torch.t"), ("func", "torch.transpose"),
                      ("func", "torch.permute")})
MAX_LAID_OUT = 64  # of the notebook's own gradients, per tensor it reads through such an op


def _through_layouts(read: Read, made_loss: int) -> None:
    """For each of the lesson's tensors the notebook made by laying out a tensor of its own
    anew (`W_out.T`): each value its backward pass made in that tensor's shape, laid out by the
    same op, as an op of its own. Where that is the lesson's gradient, the written code is the
    notebook's own work followed by that op."""
    made = {o: i for i, op in enumerate(read.ops) for o in op.get("outs") or [] if o is not None}
    for o, v in sorted(read.named):
        i = made.get(o)
        op = read.ops[i] if i is not None and v == 0 else None
        if op is None or tuple(op.get("call") or ()) not in _LAYOUTS \
                or len({tuple(r) for r in op["reads"]}) != 1:
            continue
        source = tuple(op["reads"][0])
        if source in read.named or source not in read.values:
            continue  # one lesson tensor laid out as another: the search sees both already
        back = _undone(op, read.leaves[o])
        if back is not None:
            # What the notebook keeps is the lesson's tensor laid out back: its forward and
            # backward passes read it, and the written code reads it so.
            read.expressed[source] = back
        shape = read.values[source].shape
        mine = [ov for ov, value in read.values.items() if value.shape == shape
                and value.is_floating_point() and read.maker.get(ov, -1) > made_loss
                and read.ops[read.maker[ov]]["own"]]
        for ov in sorted(mine, key=read.maker.__getitem__, reverse=True)[:MAX_LAID_OUT]:
            laid = _laid_out(op, read.values[ov])
            if laid is None:
                continue
            ref = ("t", ov[0], ov[1])
            read.add_op({**op, "args": [ref if tuple(a) == ("t", *source) else a
                                        for a in op["args"]], "reads": [ov]}, laid)


def _undone(op: dict, name: str | None) -> str | None:
    """The code for what a layout op read, from its result `name` (`Wy.T` for `W_out.T`)."""
    kind, call = op["call"][0], op["call"][1]
    args = op["args"][1:]
    if not name or op.get("kwargs"):
        return None
    if kind == "prop" or call in ("t", "torch.t"):
        return f"{name}.{'mT' if call == 'mT' else 'T'}"
    lits = [a[1] if a[0] == "lit" else None for a in args]
    if call.endswith(("transpose", "swapaxes", "swapdims")) and len(lits) == 2 \
            and all(isinstance(x, int) for x in lits):
        return f"{name}.transpose({lits[0]}, {lits[1]})"
    if call.endswith("permute"):
        order = [x[1] for x in args[0][1]] if len(args) == 1 and args[0][0] in (
            "tuple", "list") else lits
        if order and all(isinstance(x, int) and x >= 0 for x in order) \
                and sorted(order) == list(range(len(order))):
            back = sorted(range(len(order)), key=order.__getitem__)
            return f"{name}.permute({', '.join(map(str, back))})"
    return None


def _laid_out(op: dict, value: Tensor) -> Tensor | None:
    """`op` (a layout op, see `_LAYOUTS`) run on `value` in place of what it read."""
    def plain(a: tuple) -> object:
        if a[0] == "lit":
            return a[1]
        if a[0] in ("tuple", "list"):
            return tuple(plain(x) for x in a[1])
        raise ValueError(a[0])

    kind, name = op["call"][0], op["call"][1]
    try:
        rest = [plain(tuple(a)) for a in op["args"][1:]]
        kwargs = {k: plain(tuple(a)) for k, a in (op.get("kwargs") or {}).items()}
        if kind == "prop":
            return getattr(value, name)
        if kind == "method":
            return getattr(value, name)(*rest, **kwargs)
        return getattr(torch, name.removeprefix("torch."))(value, *rest, **kwargs)
    except (ValueError, TypeError, RuntimeError, IndexError):
        return None


MAX_CHUNKS = 16  # a tensor of the notebook's that is one of at most this many equal slices


def _sliced(read: Read, batch: Batch, network: Network, made_loss: int) -> None:
    """Each version of the forward pass that is an equal slice of one of the lesson's tensors
    along one dim (a gate's own weight, where the lesson keeps the four gates side by side),
    written as that slice: the written code reads it so."""
    lesson = {k: v for k, v in batch.values.items()
              if isinstance(v, Tensor) and v.is_floating_point() and v.dim() >= 1}
    order = {line.target: i for i, line in enumerate(network.pack.forward_lines)}
    names = sorted(lesson, key=lambda k: order.get(k, -1))
    for ov, value in list(read.values.items()):
        if ov in read.named or ov in read.expressed or not value.is_floating_point() \
                or value.numel() < 2 or not bool(value.abs().sum()) \
                or read.maker.get(ov, -1) > made_loss:
            continue
        for name in names:
            t = lesson[name]
            other = [d for d in range(t.dim()) if t.dim() == value.dim()
                     and t.shape[d] != value.shape[d]]
            if len(other) != 1:
                continue
            d, size = other[0], value.shape[other[0]]
            if t.shape[d] % size or t.shape[d] // size > MAX_CHUNKS:
                continue
            start = next((k for k in range(0, t.shape[d], size)
                          if _tight(value, t.narrow(d, k, size))), None)
            if start is not None:
                read.expressed[ov] = f"{name}.narrow({d}, {start}, {size})"
                break


def _translate_hints(read: Read) -> None:
    """The notebook's own names for the lesson's tensors, learned from its forward pass (the
    key `res2` it keeps `x2` under), read in its names for their gradients too (`grads['res2']`,
    `d_res2`): hints, as the lesson's names are in the tutor's frame."""
    alias: dict[str, str] = {}
    clash: set[str] = set()
    for o, _v in read.named:
        for h in read.hints.get(o, ()):
            lesson = read.leaves[o]
            if h != lesson and alias.setdefault(h, lesson) != lesson:
                clash.add(h)
    for h in clash:
        alias.pop(h, None)
    if not alias:
        return
    for o, hints in read.hints.items():
        more = []
        for h in hints:
            base = gradient_of(h)
            if base in alias and base != h:
                more.append(gradient(alias[base]))
            elif h in alias and o not in {ov[0] for ov in read.named}:
                more.append(alias[h])
        hints.extend(m for m in more if m not in hints)


def own_names(read: Read, params: set[str]) -> dict[str, str]:
    """The notebook's own names for the lesson's parameters (`K1` for `w1`: a global or a
    dict's key it kept the tensor under), where one name is one parameter's only."""
    seen: dict[str, set[str]] = {}
    for o, _v in read.named:
        lesson = read.leaves.get(o)
        if lesson in params:
            for h in read.hints.get(o, ()):
                if h.isidentifier() and h != lesson and h not in params:
                    seen.setdefault(h, set()).add(lesson)
    return {h: next(iter(names)) for h, names in seen.items() if len(names) == 1}


def gradients_by_number(batch: Batch, traces: Traces) -> dict[str, Tensor]:
    """Autograd's gradient of each of the notebook's tensors found to be the lesson's, by the
    trace's number for it (`#12`), for a second run whose `.grad` reads read them."""
    read = traces.first
    out = {f"#{o}": batch.gradients[read.leaves[o]] for o, _v in sorted(read.named)
           if read.leaves.get(o) in batch.gradients}
    # A tensor of the lesson's laid out anew (`cat([c, h], 1)`): its gradient so laid out.
    for (o, _v), code in sorted(read.expressed.items()):
        name, _, rest = code.partition(".")
        if f"#{o}" not in out and name in batch.gradients and rest:
            laid = _lay(batch.gradients[name], "." + rest)
            if laid is not None:
                out[f"#{o}"] = laid
    return out


_LAYOUT_CALL = re.compile(r"\.(flip|permute|flatten|unflatten|T)(?:\(([-0-9, ()]*)\))?")


def _lay(t: Tensor, code: str) -> Tensor | None:
    """`code`, a chain of the layout methods this module writes (`.flip(0).permute(1, 0, 2)
    .flatten(1)`), applied to `t`: read off its text, never evaluated."""
    at = 0
    while at < len(code):
        m = _LAYOUT_CALL.match(code, at)
        if m is None:
            return None
        method, args = m.group(1), m.group(2)
        try:
            values = ast.literal_eval(f"({args},)") if args else ()
        except (ValueError, SyntaxError):
            return None
        t = t.T if method == "T" else getattr(t, method)(*values)
        at = m.end()
    return t
