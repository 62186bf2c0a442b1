"""build_library: targets, toolchain errors, atomic output, model plans, DEBUG output."""
from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from core.codegen import BufferRef, KernelCall, ModelPlan, lower_to_llvm_ir, optimized_llvm_ir
from tests.backend_calls import build_library
from core.errors import BuildError, CodegenError
from core.tir import Buffer, FloatImm, For, ForKind, IntImm, PrimFunc, Store, Var
from core.target import get_target


def copy_kernel(name="copy", n=16, dtype="float32"):
    A, B = Buffer("A", (n,), dtype), Buffer("B", (n,), dtype)
    i = Var("i")
    return PrimFunc(name, (A, B), For(i, IntImm(n), ForKind.SERIAL, Store(B, i, A.load(i))), 1, 1)


def test_aarch64_needs_a_cross_compiler(tmp_path):
    out = tmp_path / "arm.so"
    if shutil.which("aarch64-linux-gnu-gcc"):
        build_library([copy_kernel()], get_target("aarch64"), out)
        assert b"AArch64" in subprocess.run(["file", str(out)], capture_output=True).stdout or out.exists()
    else:
        with pytest.raises(BuildError, match="aarch64-linux-gnu-gcc not found"):
            build_library([copy_kernel()], get_target("aarch64"), out)
        assert not out.exists()


def test_aarch64_ir_still_lowers():
    text = optimized_llvm_ir([copy_kernel()], get_target("aarch64"))
    assert "aarch64" in text


def test_compiler_failure_is_a_build_error(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_CC", "false")
    with pytest.raises(BuildError, match="compiling kiln_threadpool.c"):
        build_library([copy_kernel()], get_target("native"), tmp_path / "x.so")
    assert list(tmp_path.iterdir()) == []


def test_linker_failure_is_a_build_error(tmp_path, monkeypatch):
    # A compiler that compiles the runtime but refuses to link.
    fake = tmp_path / "bin" / "fake-cc"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\nfor a in "$@"; do [ "$a" = -shared ] && exit 1; done\nexec cc "$@"\n')
    fake.chmod(0o755)
    monkeypatch.setenv("KILN_CC", str(fake))
    out_dir = tmp_path / "out"
    with pytest.raises(BuildError, match="linking"):
        build_library([copy_kernel()], get_target("native"), out_dir / "x.so")
    assert list(out_dir.iterdir()) == []  # no partial library left behind


def test_output_is_replaced_atomically(tmp_path):
    out = tmp_path / "lib.so"
    out.write_bytes(b"old")
    build_library([copy_kernel()], get_target("native"), out)
    assert out.read_bytes()[:4] == b"\x7fELF"
    assert [p.name for p in tmp_path.iterdir()] == ["lib.so"]


def test_cuda_target_is_rejected_clearly(tmp_path):
    from core.target import Target
    cuda = Target("cuda", "cuda", "nvptx64-nvidia-cuda", "sm_80", "", 0, "gpu")
    with pytest.raises((BuildError, CodegenError)):
        build_library([copy_kernel()], cuda, tmp_path / "x.so")


def test_debug_3_prints_optimized_ir():
    code = ("import sys; sys.path.insert(0, '.');"
            "from core.tir import *; from core.codegen import optimized_llvm_ir;"
            "A = Buffer('A', (4,), 'float32'); i = Var('i');"
            "optimized_llvm_ir([PrimFunc('dbg', (A,), For(i, IntImm(4), ForKind.SERIAL, Store(A, i, FloatImm(1.0))), 0, 1)])")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={"DEBUG": "3", "PATH": "/usr/bin"},
                          cwd=__file__.rsplit("/tests/", 1)[0])
    assert proc.returncode == 0, proc.stderr
    assert "define void @dbg" in proc.stderr


def plan_for(calls, arena=256, weights=64, n_in=1, n_out=1):
    return ModelPlan(tuple(calls), n_in, n_out, arena, weights)


@pytest.mark.parametrize("call,message", [
    (KernelCall("nope", ()), "no kernel of that name"),
    (KernelCall("copy", (BufferRef("input", 0),)), "1 arguments for 2 parameters"),
    (KernelCall("copy", (BufferRef("input", 3), BufferRef("output", 0))), "index 3 out of range"),
    (KernelCall("copy", (BufferRef("input", 0), BufferRef("arena", 0, 250))), "outside the arena"),
    (KernelCall("copy", (BufferRef("input", 0), BufferRef("arena", 0, 2))), "not a multiple"),
    (KernelCall("copy", (BufferRef("input", 0), BufferRef("weight", 0, 0))), "weights are read-only"),
    (KernelCall("copy", (BufferRef("output", 0), BufferRef("input", 0))), "inputs are read-only"),
    (KernelCall("copy", (BufferRef("arena", 0, 0), BufferRef("arena", 0, 32))), "overlap"),
    (KernelCall("copy", (BufferRef("heap", 0), BufferRef("output", 0))), "unknown buffer kind"),
])
def test_bad_plans_are_rejected(call, message):
    with pytest.raises(CodegenError, match=message):
        lower_to_llvm_ir([copy_kernel()], get_target("native"), plan_for([call]))


def test_plan_entry_symbols():
    plan = plan_for([KernelCall("copy", (BufferRef("input", 0), BufferRef("arena", 0, 64))),
                     KernelCall("copy", (BufferRef("arena", 0, 64), BufferRef("output", 0)))], arena=128)
    text = lower_to_llvm_ir([copy_kernel()], get_target("native"), plan)
    for sym in ("kiln_graph_run", "kiln_graph_profile", "kiln_arena_bytes", "kiln_weights_bytes",
                "kiln_graph_num_inputs", "kiln_graph_num_outputs", "kiln_graph_call_names"):
        assert f'@"{sym}"' in text, sym
    assert 'constant i64 128' in text


def test_rebuilt_library_at_the_same_path_is_reloaded(tmp_path):
    # The tuner rebuilds candidates at one path; dlopen alone would keep returning the first build.
    from core.codegen import load_kernels
    import numpy as np
    n = 8
    A, B = Buffer("A", (n,), "float32"), Buffer("B", (n,), "float32")
    i = Var("i")
    path = tmp_path / "cand.so"
    a, b = np.ones(n, "float32"), np.zeros(n, "float32")
    for k in (1.0, 2.0, 3.0):
        func = PrimFunc("cand", (A, B), For(i, IntImm(n), ForKind.SERIAL, Store(B, i, A.load(i) * FloatImm(k))), 1, 1)
        load_kernels(build_library([func], get_target("native"), path)).call("cand", a, b)
        assert b[0] == k
