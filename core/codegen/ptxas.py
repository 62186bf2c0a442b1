"""NVIDIA's PTX assembler, when installed (PATH, $KILN_PTXAS, or the `nvidia-cuda-nvcc-cu12` wheel):
assembling generated PTX for a GPU architecture checks it without a GPU."""
from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Optional

from ..errors import BuildError
from ..process.tool import run_tool


def find_ptxas() -> Optional[str]:
    override = os.environ.get("KILN_PTXAS")
    if override:
        return override
    try:
        import nvidia.cuda_nvcc  # the wheel ships bin/ptxas inside the package

        for root in nvidia.cuda_nvcc.__path__:
            candidate = Path(root) / "bin" / "ptxas"
            if candidate.is_file():
                return str(candidate)
    except ImportError:
        pass
    return shutil.which("ptxas")


def assemble(ptx: str, arch: str, ptxas: Optional[str] = None) -> bytes:
    """The cubin that ptxas makes of `ptx` for `arch` (sm_80, ...); BuildError with its messages if it rejects it."""
    return assemble_with_usage(ptx, arch, ptxas)[0]


_USAGE = re.compile(r"Compiling entry function '(\w+)'|(\d+) bytes spill stores, (\d+) bytes spill loads|"
                    r"Used (\d+) registers(?:.*?(\d+) bytes smem)?")


_SERIALIZED = re.compile(r"wgmma\.mma_async instructions are serialized .*? in the function '(\w+)'")


def assemble_with_usage(ptx: str, arch: str, ptxas: Optional[str] = None) -> tuple[bytes, dict[str, dict[str, int]]]:
    """The cubin of `ptx` for `arch` and what `ptxas -v` says of each kernel: registers, spill_stores and
    spill_loads (bytes), shared_bytes (static), wgmma_serialized (1 when ptxas serialized its wgmma pipeline)."""
    ptxas = ptxas or find_ptxas()
    if ptxas is None:
        raise BuildError("ptxas not found: install nvidia-cuda-nvcc-cu12 or set KILN_PTXAS")
    with tempfile.TemporaryDirectory(prefix="kiln-ptxas-") as tmp:
        src, out = Path(tmp) / "kernels.ptx", Path(tmp) / "kernels.cubin"
        src.write_text(ptx)
        proc = run_tool([ptxas, f"-arch={arch}", "-v", "-o", str(out), str(src)], f"ptxas ({arch})")
        usage: dict[str, dict[str, int]] = {}
        kernel = None
        for m in _USAGE.finditer(proc.stderr + proc.stdout):
            if m.group(1):
                kernel = m.group(1)
                usage[kernel] = {"registers": 0, "spill_stores": 0, "spill_loads": 0, "shared_bytes": 0,
                                 "wgmma_serialized": 0}
            elif m.group(2) and kernel:
                usage[kernel].update(spill_stores=int(m.group(2)), spill_loads=int(m.group(3)))
            elif m.group(4) and kernel:
                usage[kernel].update(registers=int(m.group(4)), shared_bytes=int(m.group(5) or 0))
        for serialized in _SERIALIZED.finditer(proc.stderr + proc.stdout):
            usage.setdefault(serialized.group(1), {})["wgmma_serialized"] = 1
        return out.read_bytes(), usage
