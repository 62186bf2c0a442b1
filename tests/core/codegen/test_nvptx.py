"""GPU code generation without a GPU: cooperative shared-memory schedules lowered with thread
bindings and barriers run correctly on the CPU (a block's threads in turn), their PTX assembles
with ptxas for sm_80 and sm_90, and schedules a GPU cannot run are rejected with one clear error."""
from __future__ import annotations

import numpy as np
import pytest

from tests.backend_calls import build_library
from core.codegen.kernel_library import load_kernels
from core.codegen.nvptx import GPUScheduleError, emit_ptx, launch_config
from core.codegen.ptxas import assemble, find_ptxas
from core.errors import ScheduleError
from core.te import tensor as te
from core.te.lower import lower
from core.te.schedule import create_schedule
from tests.helpers.gpu_prim_funcs import elementwise_on_grid, tiled_matmul
from core.target import get_target
from core.tir.expr import INTRINSICS, binop, call
from core.tir.functor import walk_stmt
from core.tir.stmt import Allocate, Barrier

CUDA = get_target("cuda")

needs_ptxas = pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed (pip install nvidia-cuda-nvcc-cu12)")


@pytest.mark.parametrize("m,n,k", [(64, 96, 128), (32, 48, 80)])
def test_cooperative_matmul_runs_correctly_on_the_cpu(tmp_path, m, n, k):
    func = tiled_matmul(m, n, k)
    lib = load_kernels(build_library([func], get_target("native"), tmp_path / "mm.so"))
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
    c = np.zeros((m, n), np.float32)
    lib.call(func.name, a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_shared_copy_is_the_blocks_tile_fenced_by_barriers():
    func = tiled_matmul(64, 96, 128)
    shared = [s.buffer for s in walk_stmt(func.body) if isinstance(s, Allocate) and s.buffer.scope == "shared"]
    # Bounds are relaxed over the block's threads: each copy holds a 16 x 16 tile, not one thread's row.
    assert sorted(b.numel for b in shared) == [256, 256]
    assert sum(isinstance(s, Barrier) for s in walk_stmt(func.body)) == 4
    launch = launch_config(func)
    assert (launch.grid, launch.block, launch.shared_bytes) == ((6, 4, 1), (16, 16, 1), 2048)


@needs_ptxas
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_ptx_assembles(arch):
    ptx, launches = emit_ptx([tiled_matmul(64, 96, 128)], get_target(f"cuda -arch={arch}"))
    assert ".shared" in ptx and "bar.sync" in ptx and f".target {arch}" in ptx
    assert launches["mm_64_96_128"].block == (16, 16, 1)
    assert len(assemble(ptx, arch)) > 0


@needs_ptxas
def test_math_needs_no_libm():
    """Every float intrinsic lowers to PTX instructions: nothing left for a missing libm to resolve."""
    names = [n for n in INTRINSICS if n not in ("reinterpret", "isnan")]
    funcs = [elementwise_on_grid(lambda v, n=n: call(n, v), f"f_{n}") for n in names]
    funcs.append(elementwise_on_grid(lambda v: binop("pow", v, v), "f_pow"))
    funcs.append(elementwise_on_grid(lambda v: call("exp", v), "f_exp_half", dtype="float16"))
    ptx, launches = emit_ptx(funcs, CUDA)
    assert ".extern" not in ptx and "ex2.approx" in ptx
    assert launches["f_exp"].grid == (8, 1, 1) and launches["f_exp"].block == (128, 1, 1)
    assemble(ptx, "sm_80")


def test_a_guarded_last_block_is_launched_whole():
    # 1000 = 7 * 128 + 104: the last block's extra threads are guarded off.
    func = elementwise_on_grid(lambda v: v + 1, "plus_one")
    assert launch_config(func).grid == (8, 1, 1)
    assert "setp" in emit_ptx([func], CUDA)[0]


def test_invalid_bindings_are_rejected():
    x = te.placeholder((64, 64), "float32", "x")
    r = te.reduce_axis(64, "r")
    y = te.compute((64,), lambda i: te.sum(x[i, r], axis=r), "rowsum")
    s = create_schedule(y)
    with pytest.raises(ScheduleError, match="reduce axis"):
        s[y].bind(r, "threadIdx.x")
    with pytest.raises(ScheduleError, match="unknown thread tag"):
        s[y].bind(y.op.axis[0], "warpIdx.x")
    outer, inner = s[y].split(y.op.axis[0], 8)
    s[y].bind(outer, "blockIdx.x")
    with pytest.raises(ScheduleError, match="already binds"):
        s[y].bind(inner, "blockIdx.x")
    with pytest.raises(ScheduleError, match="bound to blockIdx.x"):
        s[y].vectorize(outer)


def test_kernels_a_gpu_cannot_run_are_rejected():
    with pytest.raises(GPUScheduleError, match="2048 threads"):
        emit_ptx([elementwise_on_grid(lambda v: v, "too_wide", n=4096, threads=2048)], CUDA)
    x = te.placeholder((256,), "float32", "x")
    y = te.compute((256,), lambda i: x[i] * 2, "unbound")
    with pytest.raises(GPUScheduleError, match="outside every loop bound"):
        emit_ptx([lower(create_schedule(y), [x, y], "unbound")], CUDA)
    s = create_schedule(y)
    s[y].parallel(y.op.axis[0])
    with pytest.raises(GPUScheduleError, match="parallel"):
        emit_ptx([lower(s, [x, y], "cpu_parallel")], CUDA)


def test_a_barrier_some_threads_skip_is_rejected():
    # The shared copy's fetch loop is bound to threadIdx.x inside a consumer thread loop shorter than
    # the block: the barriers around it would be reached by some threads only.
    func = tiled_matmul(64, 96, 128, tile=16, k_tile=32)  # fetch: 16 x 32 = 512 -> threadIdx.x spans 32 > 16
    with pytest.raises(GPUScheduleError, match="barrier"):
        emit_ptx([func], CUDA)


@needs_ptxas
def test_kernel_bundle_carries_ptx_launches_and_signatures(tmp_path):
    """What the tuner's Builder hands a GPU Runner: everything needed to launch, as one JSON file."""
    import json

    from core.codegen.cuda_kernels import save_cuda_kernels

    path = save_cuda_kernels([tiled_matmul(32, 48, 80, tile=8, k_tile=8)], CUDA, tmp_path / "k.cuda.json")
    bundle = json.loads(path.read_text())
    assert bundle["launches"]["mm_32_48_80"] == {"grid": [6, 4, 1], "block": [8, 8, 1], "shared_bytes": 512,
                                                 "dynamic_shared_bytes": 0}
    assert [p["shape"] for p in bundle["signatures"][0]["params"]] == [[32, 80], [80, 48], [32, 48]]
    assemble(bundle["ptx"], "sm_80")


def test_a_single_output_keeps_its_thread_binding(tmp_path):
    """A one-element output (a global sum) is still written by one bound thread, not by every thread."""
    x = te.placeholder((256,), "float32", "x")
    r = te.reduce_axis(256, "r")
    y = te.compute((1,), lambda i: te.sum(x[r], axis=r), "total")
    s = create_schedule(y)
    s[y].bind(y.op.axis[0], "threadIdx.x")
    func = lower(s, [x, y], "total")
    ptx, launches = emit_ptx([func], CUDA)
    assert launches["total"].block == (1, 1, 1) and launches["total"].grid == (1, 1, 1)
    lib = load_kernels(build_library([func], get_target("native"), tmp_path / "total.so"))
    xs, out = np.random.default_rng(4).standard_normal(256, dtype=np.float32), np.zeros(1, np.float32)
    lib.call("total", xs, out)
    np.testing.assert_allclose(out[0], xs.sum(dtype=np.float64), rtol=1e-5)
