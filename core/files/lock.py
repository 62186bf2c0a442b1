"""An exclusive lock on a file (flock), held by one process of a machine at a time: records, timing, migrations."""
from __future__ import annotations

import contextlib
import fcntl
from pathlib import Path
from typing import Iterator


@contextlib.contextmanager
def exclusive_lock(path: "str | Path") -> Iterator[None]:
    """Blocks until this process holds `path`'s lock (the file is made if missing), and releases it after."""
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
