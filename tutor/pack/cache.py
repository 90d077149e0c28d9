"""Parsed pack files, kept between launches.

Parsing a pack's TOML is most of what loading a pack costs, and every launch of the tutor (and
of its checker) loads one. A file's parsed tables are kept under a fingerprint of its bytes, so an
edited file is simply parsed again: nothing ever has to be invalidated. The cache is a
convenience: a folder that cannot be read or written only means parsing each time. See
docs/packs.md.
"""

from __future__ import annotations

import marshal
import os
import sys
import tempfile
import zlib
from pathlib import Path

ENV = "BACKPROP_TUTOR_CACHE"  # a folder for the cache; by default the platform's cache folder
# marshal's format may change between Python versions: each version keeps its own entries.
FORMAT = f"py{sys.version_info[0]}{sys.version_info[1]}-m{marshal.version}"


def cache_dir() -> Path:
    if os.environ.get(ENV):
        return Path(os.environ[ENV]).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("backprop-tutor")) / "packs"


def _entry(content: bytes) -> Path:
    # Two independent checksums and the length: zlib is loaded already, where hashlib would
    # cost the launch more than the cache saves.
    fingerprint = f"{len(content):x}-{zlib.crc32(content):08x}-{zlib.adler32(content):08x}"
    return cache_dir() / f"{fingerprint}.{FORMAT}"


def recall(content: bytes) -> dict | None:
    """The tables parsed from `content` before, or None."""
    try:
        tables = marshal.loads(_entry(content).read_bytes())
    except (OSError, ValueError, EOFError, TypeError):  # absent, unreadable or damaged
        return None
    return tables if isinstance(tables, dict) else None


def keep(content: bytes, tables: dict) -> None:
    """Remember the tables parsed from `content`; quietly nothing if they cannot be kept."""
    try:
        data = marshal.dumps(tables)  # TOML dates are not marshallable: those are not kept
    except ValueError:
        return
    entry = _entry(content)
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        # Written aside and renamed, so a reader never sees half an entry.
        fd, tmp = tempfile.mkstemp(dir=entry.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, entry)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError:
        pass
