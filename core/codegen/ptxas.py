"""NVIDIA's PTX assembler, when installed (PATH, $KILN_PTXAS, or the `nvidia-cuda-nvcc-cu12` wheel):
assembling generated PTX for a GPU architecture checks it without a GPU."""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Optional

from ..errors import BuildError
from .toolchain import run_tool


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
    ptxas = ptxas or find_ptxas()
    if ptxas is None:
        raise BuildError("ptxas not found: install nvidia-cuda-nvcc-cu12 or set KILN_PTXAS")
    with tempfile.TemporaryDirectory(prefix="kiln-ptxas-") as tmp:
        src, out = Path(tmp) / "kernels.ptx", Path(tmp) / "kernels.cubin"
        src.write_text(ptx)
        run_tool([ptxas, f"-arch={arch}", "-o", str(out), str(src)], f"ptxas ({arch})")
        return out.read_bytes()
