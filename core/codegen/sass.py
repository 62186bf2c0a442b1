"""What ptxas made of a kernel, without a GPU: counts of the SASS instructions that carry a tensor-core kernel
(HMMA, IMMA = the integer mma.sync, LDSM = ldmatrix, LDGSTS = cp.async, BAR, global loads and stores) per kernel
of a cubin.

`cuobjdump -sass` is used where it can disassemble (it needs NVIDIA's nvdisasm, which no pip package ships);
otherwise the cubin's `.text.<kernel>` sections are decoded directly: sm_80 through sm_90 encode each instruction
in 128 bits with the opcode in the low 12 bits (values below, checked against ptxas's output for PTX of known
mma.sync / ldmatrix / cp.async counts: tests/core/codegen/test_sass.py; IMMA against the int8 kernel's:
tests/core/kernels/test_gpu_gemm_mma_int8.py)."""
from __future__ import annotations

import collections
import os
import re
import shutil
import struct
import subprocess
import tempfile
from pathlib import Path
from typing import Optional

OPCODES = {0x23C: "HMMA", 0x237: "IMMA", 0x9F0: "HGMMA", 0x83B: "LDSM", 0xFAE: "LDGSTS", 0xB1D: "BAR", 0x981: "LDG",
           0x986: "STG"}  # HGMMA: sm_90a's wgmma.mma_async, one per wgmma of known counts (test_gpu_gemm_wgmma.py)
DECODED_ARCHS = ("sm_80", "sm_86", "sm_87", "sm_89", "sm_90")


def elf_sections(cubin: bytes) -> dict[str, bytes]:
    """Section name -> contents of a 64-bit little-endian ELF (a cubin)."""
    if cubin[:4] != b"\x7fELF" or cubin[4] != 2:
        raise ValueError("not a 64-bit ELF cubin")
    shoff = struct.unpack_from("<Q", cubin, 0x28)[0]
    entsize, count, names_index = struct.unpack_from("<HHH", cubin, 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", cubin, shoff + i * entsize) for i in range(count)]
    names_at = headers[names_index][4]

    def name(offset: int) -> str:
        return cubin[names_at + offset:cubin.index(b"\0", names_at + offset)].decode()

    return {name(h[0]): cubin[h[4]:h[4] + h[5]] for h in headers if h[1] != 8}  # 8: SHT_NOBITS


def decode_counts(cubin: bytes) -> dict[str, dict[str, int]]:
    """Per kernel, the counts of OPCODES' instructions in its code (sm_80..sm_90 cubins)."""
    counts = {}
    for section, code in elf_sections(cubin).items():
        if section.startswith(".text."):
            seen = collections.Counter(struct.unpack_from("<Q", code, i)[0] & 0xFFF for i in range(0, len(code), 16))
            counts[section[len(".text."):]] = {mnemonic: seen[op] for op, mnemonic in OPCODES.items()}
    return counts


def find_cuobjdump() -> Optional[str]:
    found = os.environ.get("KILN_CUOBJDUMP") or shutil.which("cuobjdump")
    if found is None:
        try:
            import nvidia

            for root in nvidia.__path__:
                for candidate in Path(root).glob("*/bin/cuobjdump"):
                    found = str(candidate)
        except ImportError:
            return None
    return found


def disassembled_counts(cubin: bytes, cuobjdump: str) -> Optional[dict[str, dict[str, int]]]:
    """The same counts from `cuobjdump -sass` (None when it cannot disassemble: no nvdisasm)."""
    with tempfile.TemporaryDirectory(prefix="kiln-sass-") as tmp:
        path = Path(tmp) / "k.cubin"
        path.write_bytes(cubin)
        proc = subprocess.run([cuobjdump, "-sass", str(path)], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        return None
    counts: dict[str, dict[str, int]] = {}
    kernel = None
    for line in proc.stdout.splitlines():
        header = re.match(r"\s*Function : (\S+)", line)
        if header:
            kernel = header.group(1)
            counts[kernel] = dict.fromkeys(OPCODES.values(), 0)
            continue
        op = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9]+)", line)
        if kernel and op and op.group(1) in counts[kernel]:
            counts[kernel][op.group(1)] += 1
    return counts


def sass_counts(cubin: bytes) -> tuple[dict[str, dict[str, int]], str]:
    """Per kernel instruction counts and how they were read ("cuobjdump" or "decoded")."""
    tool = find_cuobjdump()
    if tool is not None:
        counts = disassembled_counts(cubin, tool)
        if counts:
            return counts, "cuobjdump"
    return decode_counts(cubin), "decoded"


__all__ = ["sass_counts", "decode_counts", "disassembled_counts", "find_cuobjdump", "elf_sections", "OPCODES",
           "DECODED_ARCHS"]
