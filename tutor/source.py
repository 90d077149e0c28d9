"""The learner's code as text: UTF-8 or a clear refusal, and never bigger than a gradient needs.

Shared by the command line and the TUI. Code is refused here, before it reaches the evaluator or
the progress store, so a wrong file gives one clear message instead of a timeout, an encoding
traceback, or fifty megabytes saved once per attempt.
"""

from __future__ import annotations

import math
import os
import stat
import sys
from typing import BinaryIO

MAX_CODE_BYTES = 256 * 1024  # one step's code: the longest reference answer is a few hundred bytes
MAX_FILE_BYTES = 4 * 1024 * 1024  # a whole percent-format file: about thirty steps' cells
BOM = "\ufeff"  # the byte-order mark some Windows editors put at the start of UTF-8 files


class SourceError(ValueError):
    """The code cannot be used as it is; the message says why, in one line, for the learner."""


def _size(n: int) -> str:
    # Rounded up, so that a size just over a limit never reads as the limit itself.
    if n >= 2**20:
        return f"{math.ceil(n * 10 / 2**20) / 10:.1f} MB"
    return f"{math.ceil(n / 1024)} KB"


def size_problem(code: str, name: str = "your code", limit: int = MAX_CODE_BYTES) -> str | None:
    """Why `code` is too big to check, or None. Sizes are UTF-8 bytes, as in a file."""
    if len(code) * 4 <= limit:  # cheap for the usual few lines: no character takes more than 4
        return None
    size = len(code.encode("utf-8", "surrogatepass"))
    if size <= limit:
        return None
    return (f"{name} is {_size(size)}; one step's code can be at most {_size(limit)}. A "
            "gradient takes a few lines: is this the right code?")


def _line_of(data: bytes, offset: int) -> int:
    return data.count(b"\n", 0, offset) + 1


def _undecodable(data: bytes, start: int, name: str) -> str:
    line = f" (line {_line_of(data, start)})" if b"\n" in data else ""
    return (f"{name} is not UTF-8 text: byte 0x{data[start]:02x} at offset {start}{line} "
            "cannot be read")


def decode(data: bytes, name: str) -> str:
    """UTF-8 text, with a leading byte-order mark dropped."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SourceError(f"{_undecodable(data, exc.start, name)}. Save it as UTF-8 and try "
                          "again.") from None
    return text.removeprefix(BOM)


def from_argument(text: str, name: str, advice: str = "") -> str:
    """Text given on the command line. Python turns bytes that are not UTF-8 into lone
    surrogates, which could not be stored or written later: refuse them now, naming the byte."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        if _escaped(text):
            raw = text.encode("utf-8", "surrogateescape")
            start = len(text[: exc.start].encode("utf-8", "surrogateescape"))
            raise SourceError(f"{_undecodable(raw, start, name)}.{advice}") from None
        raise SourceError(f"{name} is not UTF-8 text: character {exc.start + 1} cannot be "
                          f"stored.{advice}") from None
    return text.removeprefix(BOM)


def _escaped(text: str) -> bool:
    """Whether every surrogate in `text` stands for an undecodable byte (U+DC80..U+DCFF)."""
    try:
        text.encode("utf-8", "surrogateescape")
        return True
    except UnicodeEncodeError:
        return False


def _read_limited(stream: BinaryIO, name: str, limit: int) -> bytes:
    # Reading one byte past the limit tells "too big" apart without reading all of it.
    data = stream.read(limit + 1)
    if len(data) > limit:
        raise SourceError(f"{name} is larger than {_size(limit)}, the most that can be checked. "
                          "A gradient takes a few lines: is this the right file?")
    return data


def read(path: str, limit: int = MAX_CODE_BYTES) -> str:
    """The text of a file, or of standard input for "-". SourceError when it cannot be used;
    OSError (FileNotFoundError and the like) when it cannot be opened."""
    if path == "-":
        stream = getattr(sys.stdin, "buffer", None)
        if stream is None:  # a text stream put in place of stdin (tests, embedding)
            return from_argument(sys.stdin.read(), "standard input")
        return decode(_read_limited(stream, "standard input", limit), "standard input")
    # Opened without waiting: a pipe or a device among the files would block the open itself
    # (a FIFO with no writer, a tty) and hold a whole class report with it.
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise SourceError(f"{path} is not a regular file (a pipe, a device or a socket); "
                              "give the file itself")
        size = st.st_size
        if size > limit:  # known before reading anything: refuse a huge file at once
            raise SourceError(f"{path} is {_size(size)}; at most {_size(limit)} can be checked. "
                              "A gradient takes a few lines: is this the right file?")
        return decode(_read_limited(fh, path, limit), path)
