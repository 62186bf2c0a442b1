"""Pre-flight check of an uploaded model before anything is queued, in a child process.

The ONNX checker and shape inference are native code: a hostile model that crashes or hangs them
costs the child, never the API. Limits on memory and CPU time bound what one check may take.
"""
from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.process.child import child_env
from core.process.limits import Limits

_MEMORY_LIMIT = 8 << 30


@dataclass
class PreflightResult:
    ok: bool
    message: str = ""
    code: str = ""
    summary: dict[str, Any] = field(default_factory=dict)
    unsupported_ops: list[dict[str, Any]] = field(default_factory=list)


def inspect_command(path: Path, max_tensor_bytes: int, with_data_files: bool = False) -> list[str]:
    """The child's command line (a test substitutes one that crashes or hangs)."""
    return [sys.executable, "-m", "core.frontend.inspect", str(path), *([] if with_data_files else ["--upload"]),
            "--max-tensor-bytes", str(max_tensor_bytes)]


async def run_preflight(path: Path, timeout_s: float, max_tensor_bytes: int = 4 << 30,
                        with_data_files: bool = False) -> PreflightResult:
    """Checks an uploaded model in a limited child process: a single file has no external data; one unpacked from
    an archive (`with_data_files`) may read data files inside its own folder."""
    limits = Limits(cpu_s=int(timeout_s) + 1, memory_bytes=_MEMORY_LIMIT, open_files=None)
    proc = await asyncio.create_subprocess_exec(
        *inspect_command(path, max_tensor_bytes, with_data_files), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        cwd=str(path.parent), env=child_env(), preexec_fn=limits.apply, start_new_session=True)
    try:
        stdout, stderr = await asyncio.wait_for(proc.communicate(), timeout_s)
    except (asyncio.TimeoutError, asyncio.CancelledError) as err:  # also when the client went away
        proc.kill()
        await proc.wait()
        if isinstance(err, asyncio.CancelledError):
            raise
        return PreflightResult(False, f"the model check did not finish within {timeout_s:g} s", "check_timeout")
    if proc.returncode != 0:
        how = f"signal {-proc.returncode}" if proc.returncode < 0 else f"exit status {proc.returncode}"
        return PreflightResult(False, f"the ONNX checker crashed on this model ({how})", "checker_crashed")
    try:
        payload = json.loads(stdout.decode().strip().splitlines()[-1])
    except (ValueError, IndexError):
        return PreflightResult(False, "the model check gave no answer", "checker_crashed")
    if not payload.pop("ok"):
        return PreflightResult(False, payload["message"], payload["code"],
                               unsupported_ops=payload.get("unsupported_ops", []))
    return PreflightResult(True, summary=payload)
