"""Messages between the UI/CLI process and the sandbox worker: length-prefixed pickles on a pipe.

Both ends are this program; learner code never sees the pipe (it runs with a closed namespace),
so pickle is safe here and keeps results as plain Python data.
"""

from __future__ import annotations

import pickle
import struct
from typing import BinaryIO

_HEADER = struct.Struct("!I")


def send(stream: BinaryIO, message: dict) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def receive(stream: BinaryIO) -> dict | None:
    """The next message, or None when the other end has gone."""
    header = _read_exact(stream, _HEADER.size)
    if header is None:
        return None
    (size,) = _HEADER.unpack(header)
    data = _read_exact(stream, size)
    return None if data is None else pickle.loads(data)


def _read_exact(stream: BinaryIO, size: int) -> bytes | None:
    chunks, remaining = [], size
    while remaining:
        chunk = stream.read(remaining)
        if not chunk:
            return None
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)
