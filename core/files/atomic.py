"""Atomic file writes: a temporary file beside the target, renamed over it only once complete."""
from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Iterator


@contextlib.contextmanager
def atomic_path(path: "str | Path", *, durable: bool = False) -> Iterator[Path]:
    """A new empty file (mode 0600) beside `path`, for the block to write by name (open() or a linker's
    -o). When the block ends, it replaces `path` in one rename, so a reader sees the old file or the
    whole new one; when the block raises, it is removed. `durable`: fsync it before the rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
    os.close(fd)
    partial = Path(name)
    try:
        yield partial
        if durable:
            fd = os.open(partial, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def write_atomic(path: "str | Path", data: "bytes | str") -> None:
    """Writes `data` (str as UTF-8) to `path` durably and all at once."""
    with atomic_path(path, durable=True) as partial:
        partial.write_bytes(data.encode() if isinstance(data, str) else data)
