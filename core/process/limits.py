"""Resource limits for a child process (setrlimit), applied in the child before it runs anything."""
from __future__ import annotations

import resource
from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class Limits:
    """Per-child limits; None leaves a limit as inherited. Sizes in bytes, times in seconds."""

    wall_s: Optional[float] = None       # the parent kills the child (with its process group) after this long
    cpu_s: Optional[int] = None          # RLIMIT_CPU: SIGXCPU, then SIGKILL
    memory_bytes: Optional[int] = None   # RLIMIT_AS: allocations fail (MemoryError) past it
    file_bytes: Optional[int] = None     # RLIMIT_FSIZE: writes past it fail with EFBIG (or SIGXFSZ)
    open_files: Optional[int] = 256      # RLIMIT_NOFILE
    processes: Optional[int] = None      # RLIMIT_NPROC counts the whole user's threads: only for lone measurers

    def apply(self) -> None:
        """Sets these limits on this process (a child, before its work starts) and turns off core files.

        A limit above the inherited hard limit gets the hard limit. RLIMIT_CPU keeps its hard limit, so
        the soft one ends the process with SIGXCPU (the parent can name the cause)."""
        for which, value in ((resource.RLIMIT_CPU, self.cpu_s), (resource.RLIMIT_AS, self.memory_bytes),
                             (resource.RLIMIT_FSIZE, self.file_bytes), (resource.RLIMIT_NOFILE, self.open_files),
                             (resource.RLIMIT_NPROC, self.processes)):
            if value is not None:
                _, hard = resource.getrlimit(which)
                value = int(value) if hard == resource.RLIM_INFINITY else min(int(value), hard)
                resource.setrlimit(which, (value, value if which != resource.RLIMIT_CPU else hard))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a crash leaves no core file behind
