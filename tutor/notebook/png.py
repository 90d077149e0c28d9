"""Heatmaps as PNG images, written with zlib and struct alone, for front ends that show images.

The colours follow the TUI's heatmap: zero is the background, the largest |difference| the hot
end, on a square-root scale so that small entries stay visible next to a few large ones.
"""

from __future__ import annotations

import math
import struct
import zlib
from collections.abc import Sequence

Colour = tuple[int, int, int]

COLD: Colour = (40, 44, 52)
HOT: Colour = (224, 108, 117)
NEGATIVE: Colour = (97, 175, 239)
POSITIVE: Colour = (209, 154, 102)
CELL = 12  # pixels per entry: an 8 x 32 heatmap becomes 96 x 384


def colour(value: float, scale: float, signed: bool = False) -> Colour:
    if scale <= 0 or value == 0 or not math.isfinite(value):
        return COLD if value == 0 or scale <= 0 else HOT
    t = 0.15 + 0.85 * math.sqrt(min(1.0, abs(value) / scale))
    end = (NEGATIVE if value < 0 else POSITIVE) if signed else HOT
    return tuple(round(a + (b - a) * t) for a, b in zip(COLD, end, strict=True))  # type: ignore[return-value]


def heatmap_png(values: Sequence[Sequence[float]], signed: bool = False, cell: int = CELL) -> bytes:
    """A PNG of `values`, one `cell` x `cell` square per entry (rows of unequal length are
    padded with the background)."""
    rows = len(values)
    cols = max((len(r) for r in values), default=0)
    if rows == 0 or cols == 0:
        raise ValueError("nothing to draw")
    finite = [abs(v) for r in values for v in r if math.isfinite(v)]
    scale = max(finite, default=0.0)
    lines = []
    for r in values:
        pixels = b"".join(bytes(colour(float(v), scale, signed)) * cell for v in r)
        pixels += bytes(COLD) * cell * (cols - len(r))
        lines += [b"\x00" + pixels] * cell  # filter byte 0: the row as it is
    return encode_png(cols * cell, rows * cell, b"".join(lines))


def encode_png(width: int, height: int, raw_rows: bytes) -> bytes:
    """A PNG file of 8-bit RGB pixels; `raw_rows` is every row with its filter byte first."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
            + chunk(b"IDAT", zlib.compress(raw_rows, 9)) + chunk(b"IEND", b""))


GOOD_CURVE: Colour = (97, 175, 239)  # the TUI's live curve
BROKEN_CURVE: Colour = (224, 108, 117)
AXIS: Colour = (92, 99, 112)


def curves_png(curves: Sequence[tuple[Sequence[float], Colour]], slots: int,
               width: int = 480, height: int = 200) -> bytes:
    """Loss curves on shared axes (the TUI's plot, as an image): each curve's value i at
    x = i / slots of the width, joined column to column, on a frame of the axes' colour. Values
    that are not finite (a run whose loss blew up) end that curve's line."""
    finite = [v for values, _ in curves for v in values if math.isfinite(v)]
    if not finite or width < 4 or height < 4:
        raise ValueError("nothing to draw")
    lo, hi = min(finite), max(finite)
    pad = max(0.01, (hi - lo) * 0.05)
    lo, hi = lo - pad, hi + pad
    pixels = [[COLD] * width for _ in range(height)]
    for x in range(width):
        pixels[height - 1][x] = AXIS
    for y in range(height):
        pixels[y][0] = AXIS
    for values, ink in curves:
        previous: int | None = None
        for i, v in enumerate(values):
            if not math.isfinite(v):
                break
            x = 1 + min(width - 2, int(i * (width - 1) / max(1, slots)))
            y = max(0, min(height - 2, round((hi - v) / (hi - lo) * (height - 2))))
            top, bottom = (y, y) if previous is None else (min(y, previous), max(y, previous))
            for yy in range(top, bottom + 1):
                pixels[yy][x] = ink
            previous = y
    raw = b"".join(b"\x00" + b"".join(bytes(p) for p in row) for row in pixels)
    return encode_png(width, height, raw)


AUTOGRAD_BAR: Colour = (152, 195, 121)  # the TUI's "ok" green: autograd's bar beside yours
LOG_SPREAD = 100.0  # beyond this ratio of the largest to the smallest size, a log scale


def time_bars_png(yours: Sequence[float], autograd: Sequence[float],
                  wrong: Sequence[bool] = (), bar: int = 8, height: int = 160) -> bytes:
    """A gradient's size at each time step as pairs of bars (the TUI's time figure, as an
    image): the learner's in blue, or red at a step where it differs, autograd's in green, time
    running left to right, a red tick under each wrong step. Sizes spanning more than a factor
    of 100 are drawn on a log scale, the smallest still one pixel high."""
    steps = min(len(yours), len(autograd))
    finite = [v for v in [*yours[:steps], *autograd[:steps]] if math.isfinite(v) and v > 0]
    if steps == 0 or not finite:
        raise ValueError("nothing to draw")
    flags = list(wrong) + [False] * steps
    hi, lo = max(finite), min(finite)
    log = hi / lo > LOG_SPREAD
    room = height - 8  # the bars' area, above the axis and the row of ticks

    def tall(v: float) -> int:
        if not (math.isfinite(v) and v > 0):
            return 0
        if log:
            return 1 + round((math.log10(v) - math.log10(lo))
                             / (math.log10(hi) - math.log10(lo)) * (room - 1))
        return max(1, round(v / hi * room))

    gap = bar
    width = 2 + steps * (2 * bar + gap)
    pixels = [[COLD] * width for _ in range(height)]
    for x in range(width):
        pixels[room][x] = AXIS
    for y in range(room + 1):
        pixels[y][0] = AXIS
    for t in range(steps):
        x0 = 2 + t * (2 * bar + gap) + gap // 2
        for k, (v, ink) in enumerate(((yours[t], BROKEN_CURVE if flags[t] else GOOD_CURVE),
                                      (autograd[t], AUTOGRAD_BAR))):
            for y in range(room - tall(v), room):
                for x in range(x0 + k * bar, x0 + (k + 1) * bar):
                    pixels[y][x] = ink
        if flags[t]:
            for y in range(room + 3, height - 1):
                for x in range(x0, x0 + 2 * bar):
                    pixels[y][x] = BROKEN_CURVE
    raw = b"".join(b"\x00" + b"".join(bytes(p) for p in row) for row in pixels)
    return encode_png(width, height, raw)
