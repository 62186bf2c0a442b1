"""SASS instruction counts without a GPU: the cubin decoder agrees with the PTX it was assembled from (one HMMA per
mma.sync m16n8k16, one LDSM per ldmatrix, one LDGSTS per cp.async, in a kernel whose loop ptxas keeps), and with
cuobjdump's disassembly where nvdisasm is installed."""
from __future__ import annotations

import pytest

from core.codegen.mma_gemm import build_gemm
from core.codegen.ptxas import assemble_with_usage, find_ptxas
from core.codegen.sass import decode_counts, disassembled_counts, elf_sections, find_cuobjdump
from core.kernels.gemm_plan.gemm_mma import GemmConfig, GemmProblem
from core.target import get_target

needs_ptxas = pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed (pip install nvidia-cuda-nvcc-cu12)")


def gemm_cubin(arch: str):
    kernels = build_gemm(GemmProblem(256, 256, 4096, "float16", "float32"),
                         GemmConfig(block_m=64, block_n=64, block_k=32, warps_m=2, warps_n=2, stages=2),
                         get_target(f"cuda -arch={arch}"))
    return kernels.ptx, assemble_with_usage(kernels.ptx, arch)[0]


@needs_ptxas
@pytest.mark.parametrize("arch", ["sm_80", "sm_86", "sm_90"])
def test_decoded_counts_match_the_ptx(arch):
    ptx, cubin = gemm_cubin(arch)
    counts = decode_counts(cubin)["kiln_gemm"]
    assert counts["HMMA"] == ptx.count("mma.sync.aligned") > 0
    assert counts["LDSM"] == ptx.count("ldmatrix.sync.aligned") > 0
    assert counts["LDGSTS"] == ptx.count("cp.async.cg.shared.global") > 0
    assert counts["BAR"] == ptx.count("bar.sync") + ptx.count("barrier.sync") > 0


@needs_ptxas
def test_cuobjdump_agrees_where_it_can_disassemble():
    tool = find_cuobjdump()
    _, cubin = gemm_cubin("sm_80")
    listed = disassembled_counts(cubin, tool) if tool else None
    if not listed:
        pytest.skip("no cuobjdump with nvdisasm on this machine")
    decoded = decode_counts(cubin)["kiln_gemm"]
    assert {k: listed["kiln_gemm"][k] for k in ("HMMA", "LDSM", "LDGSTS")} == \
        {k: decoded[k] for k in ("HMMA", "LDSM", "LDGSTS")}


def test_a_file_that_is_not_a_cubin_is_refused():
    with pytest.raises(ValueError, match="not a 64-bit ELF"):
        elf_sections(b"PTX text, not a cubin")
