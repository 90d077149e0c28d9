"""Every message on a pipe, framed in one place: a length header, then a pickle.

Two pipes, two headers. The worker's pipe to the UI/CLI process carries messages between two
trusted ends of this program (`send`, `receive`): learner code never sees it, so pickle is safe
there. A child's pipes carry plans in and answers out (`write_message`, `read_frame`,
`frame`); the engine reads an answer only through `isolate.loads_plain`, whose unpickler accepts
no classes, and refuses any frame over `MAX_MESSAGE` before reading it.
"""

from __future__ import annotations

import os
import pickle
import struct
from typing import Any, BinaryIO

WORKER_HEADER = struct.Struct("!I")
CHILD_HEADER = struct.Struct("!Q")
MAX_MESSAGE = 64 * 2**20  # a lesson's tensors are a few hundred kB; anything near this is hostile


class TooLarge(Exception):
    """A message from the child would pass its limit; the text says what, in the learner's terms."""


def megabytes(size: int) -> str:
    return f"{size / 2**20:.1f} MB" if size < 10 * 2**20 else f"{size / 2**20:.0f} MB"


# -- the worker's pipe -----------------------------------------------------------------------
def send(stream: BinaryIO, message: dict) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(WORKER_HEADER.pack(len(data)) + data)
    stream.flush()


def receive(stream: BinaryIO) -> dict | None:
    """The next message, or None when the other end has gone."""
    header = read_exact(stream, WORKER_HEADER.size)
    if header is None:
        return None
    (size,) = WORKER_HEADER.unpack(header)
    data = read_exact(stream, size)
    return None if data is None else pickle.loads(data)


def read_exact(stream: Any, size: int) -> bytes | None:
    """`size` bytes from a stream, or None when it ends (or is closed) first."""
    chunks, remaining = [], size
    while remaining:
        try:
            chunk = stream.read(remaining)
        except (OSError, ValueError):  # closed under us: the other end is gone
            return None
        if not chunk:
            return None
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


# -- a child's pipes -------------------------------------------------------------------------
def frame(data: bytes) -> bytes:
    """Pickled bytes with the child pipes' header in front."""
    return CHILD_HEADER.pack(len(data)) + data


def write_message(fd: int, message: Any) -> None:
    """One message to a child pipe (a file descriptor), within MAX_MESSAGE."""
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    if len(data) > MAX_MESSAGE:  # said here, where it is known, rather than refused by the reader
        raise TooLarge(f"the sandbox's answer came to {megabytes(len(data))}; the limit is "
                       f"{megabytes(MAX_MESSAGE)}")
    view = memoryview(frame(data))
    while view:
        written = os.write(fd, view)
        view = view[written:]


def read_frame(fd: int) -> bytes:
    """The next message's bytes from a child pipe; EOFError when the other end went away."""
    (size,) = CHILD_HEADER.unpack(read_exact_fd(fd, CHILD_HEADER.size))
    return read_exact_fd(fd, size)


def read_exact_fd(fd: int, size: int) -> bytes:
    chunks, remaining = [], size
    while remaining:
        chunk = os.read(fd, remaining)
        if not chunk:
            raise EOFError("the parent went away")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)
