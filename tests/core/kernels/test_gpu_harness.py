"""Harness of the GPU schedule tests (no tests of its own): ops lowered with the cuda computes and
schedules, run on this CPU (thread-bound loops serially, barriers ignored) and assembled by ptxas."""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

import numpy as np
import pytest

from tests.backend_calls import build_library, get_schedule
from core.codegen.kernel_library import load_kernels
from core.codegen.nvptx import emit_ptx
from core.codegen.ptxas import assemble, find_ptxas
from core.graph.ir import TensorType
from core.kernels.registry import get_compute
from tests.helpers.kernel_runs import onnx_reference
from core.target import get_target
from core.te import tensor as te
from core.te.lower import lower
from core.te.schedule import create_schedule

CUDA = get_target("cuda")
needs_ptxas = pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed (pip install nvidia-cuda-nvcc-cu12)")


def lower_gpu(name: str, op: str, inputs: Sequence[Optional[np.ndarray]], attrs: Mapping[str, Any],
              out_types: Sequence[TensorType], schedule=None, **knobs):
    """One op as a cuda kernel: its cuda compute, its cuda schedule (or `schedule`, with `knobs`)."""
    holders = [None if a is None else te.placeholder(a.shape, a.dtype.name, f"in{k}") for k, a in enumerate(inputs)]
    outs = get_compute(op, "cuda")(holders, attrs, list(out_types))
    sch = create_schedule(outs)
    (schedule or get_schedule(op, CUDA))(sch, outs, CUDA, **knobs)
    return lower(sch, [h for h in holders if h is not None] + list(outs), name, num_outputs=len(outs))


def run_on_cpu(funcs, feeds: Sequence[Sequence[np.ndarray]]) -> list[list[np.ndarray]]:
    """Build the GPU-scheduled kernels for this CPU and call each on its inputs (no workspaces allowed:
    a GPU kernel keeps its intermediates on chip)."""
    with tempfile.TemporaryDirectory(prefix="kiln-gpu-") as tmp:
        lib = load_kernels(build_library(list(funcs), get_target("native"), Path(tmp) / "k.so"))
    results = []
    for func, args in zip(funcs, feeds):
        assert not func.workspaces, f"{func.name} has global workspaces (a second pass over the grid)"
        outs = [np.full(b.shape, np.nan, b.dtype) if b.dtype.startswith("float") else np.zeros(b.shape, b.dtype)
                for b in func.outputs]
        lib.call(func.name, *[np.ascontiguousarray(a) for a in args], *outs)
        results.append(outs)
    return results


def assemble_all(funcs) -> None:
    """The kernels' PTX for sm_80 and sm_90, each assembled by ptxas."""
    for arch in ("sm_80", "sm_90"):
        ptx, _ = emit_ptx(list(funcs), get_target(f"cuda -arch={arch}"))
        assert len(assemble(ptx, arch)) > 0


def check_ops(cases, rtol=1e-4, atol=1e-4) -> list:
    """cases: (op, inputs, attrs, onnx_inputs, onnx_attrs). Lower each for cuda, run on the CPU and
    compare with ONNX Runtime; returns the lowered kernels (for ptxas)."""
    funcs, feeds, refs = [], [], []
    for k, (op, inputs, attrs, onnx_inputs, onnx_attrs) in enumerate(cases):
        ref = onnx_reference(op, onnx_inputs, onnx_attrs)
        funcs.append(lower_gpu(f"g{k}_{op.lower()}", op, inputs, attrs,
                               [TensorType(r.shape, r.dtype.name) for r in ref]))
        feeds.append([a for a in inputs if a is not None])
        refs.append(ref)
    for func, got, want in zip(funcs, run_on_cpu(funcs, feeds), refs):
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=func.name)
    return funcs


rng = np.random.default_rng(7)


def f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)
