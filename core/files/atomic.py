"""Atomic file writes: a temporary file beside the target, renamed over it only once complete."""
from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Iterator


def _umask() -> int:
    """The process's umask, read without changing it (os.umask would, racing other threads)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o022


@contextlib.contextmanager
def atomic_path(path: "str | Path", *, durable: bool = False, shared: bool = False) -> Iterator[Path]:
    """A new empty file (mode 0600) beside `path`, for the block to write by name (open() or a linker's
    -o). When the block ends, it replaces `path` in one rename, so a reader sees the old file or the
    whole new one; when the block raises, it is removed. `durable`: fsync it before the rename.
    `shared`: the file ends with the mode open() would give it (0666 less the umask), for files handed
    to the user (artifacts), not 0600."""
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
        if shared:
            os.chmod(partial, 0o666 & ~_umask())
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def write_atomic(path: "str | Path", data: "bytes | str") -> None:
    """Writes `data` (str as UTF-8) to `path` durably and all at once."""
    with atomic_path(path, durable=True) as partial:
        partial.write_bytes(data.encode() if isinstance(data, str) else data)
