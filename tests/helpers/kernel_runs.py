"""Build single-op kernels from numpy inputs and run them: for tests and the kernel benchmarks in bench/.

`OpKernel` holds one lowered kernel; `build_kernels` compiles many into one library (one LLVM build
is the slow part), and `KernelRun.run()` allocates outputs and workspaces and calls it.
"""
from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np

from core.graph.ir import TensorType
from core.target import Target, get_target
from core.te import tensor as te
from core.te.lower import lower
from core.te.schedule import Schedule, create_schedule
from core.tir.stmt import PrimFunc
from core.kernels.registry import get_compute, get_schedule
from core.kernels.schedules.generic import CPU_GENERIC


@dataclass
class OpKernel:
    """One graph op on concrete inputs (None for an absent optional input), lowered to `func`."""

    name: str
    op: str
    inputs: list[Optional[np.ndarray]]
    attrs: Mapping[str, Any] = field(default_factory=dict)
    out_types: Optional[list[TensorType]] = None
    scheduled: bool = True
    schedule_fn: Optional[Callable[[Schedule, list[te.Tensor], Target], None]] = None  # instead of the registry's
    func: Optional[PrimFunc] = None
    schedule: Optional[Schedule] = None

    def lower(self, target: Target) -> PrimFunc:
        holders = [None if a is None else te.placeholder(a.shape, a.dtype.name, f"in{k}")
                   for k, a in enumerate(self.inputs)]
        outs = get_compute(self.op)(holders, self.attrs, list(self.out_types or []))
        sch = create_schedule(outs)
        if self.scheduled:
            # CPU kernels (get_compute's default kind, load_kernels): the CPU's generic schedules for ops without one
            (self.schedule_fn or get_schedule(self.op, target, CPU_GENERIC))(sch, outs, target)
        args = [h for h in holders if h is not None] + list(outs)
        self.func = lower(sch, args, self.name, num_outputs=len(outs))
        self.schedule = sch
        return self.func


class KernelRun:
    def __init__(self, lib, kernel: OpKernel):
        self.lib, self.kernel = lib, kernel
        func = kernel.func
        self.args = [np.ascontiguousarray(a) for a in kernel.inputs if a is not None]
        self.outputs = [np.zeros(b.shape, b.dtype) for b in func.outputs]
        # Poison workspaces so a stage that reads before writing shows up as wrong numbers.
        self.workspaces = [np.full(b.shape, 7, b.dtype) for b in func.workspaces]

    def run(self) -> list[np.ndarray]:
        self.lib.call(self.kernel.name, *self.args, *self.outputs, *self.workspaces)
        return [o.copy() for o in self.outputs]

    def time_ms(self, repeat: int = 20, number: int = 5) -> float:
        return self.lib.time_ms(self.kernel.name, *self.args, *self.outputs, *self.workspaces, repeat=repeat,
                                number=number)


def build_kernels(kernels: Sequence[OpKernel], target: "Target | str" = "native",
                  out_dir: "str | Path | None" = None) -> list[KernelRun]:
    """Lower every kernel, compile them all into one shared library and load it."""
    from core.codegen.build import build_cpu_library
    from core.codegen.kernel_library import load_kernels

    target = get_target(target)
    funcs = [k.lower(target) for k in kernels]
    if out_dir is not None:
        lib = load_kernels(build_cpu_library(funcs, target, Path(out_dir) / "kernels.so"))
    else:
        # The loaded library stays mapped after its file is gone, so nothing piles up in /tmp.
        with tempfile.TemporaryDirectory(prefix="kiln-kernels-") as tmp:
            lib = load_kernels(build_cpu_library(funcs, target, Path(tmp) / "kernels.so"))
    return [KernelRun(lib, k) for k in kernels]


def run_op(op: str, inputs: Sequence[Optional[np.ndarray]], attrs: Optional[Mapping[str, Any]] = None,
           out_types: Optional[list[TensorType]] = None, scheduled: bool = True,
           target: "Target | str" = "native") -> list[np.ndarray]:
    """Compile and run one op once (slow: one build per call; batch with build_kernels in tests)."""
    (run,) = build_kernels([OpKernel("kernel", op, list(inputs), dict(attrs or {}), out_types, scheduled)], target)
    return run.run()


def onnx_reference(op_type: str, inputs: Sequence[Optional[np.ndarray]], attrs: Optional[Mapping[str, Any]] = None,
                   num_outputs: int = 1, opset: int = 17) -> list[np.ndarray]:
    """Run one ONNX node in ONNX Runtime (CPU, the reference Kiln is judged against).

    `inputs` may include ONNX-only operands (Reshape's shape, Clip's bounds...) as arrays; None
    marks an absent optional input."""
    import onnx
    import onnxruntime as ort
    from onnx import helper

    inputs = list(inputs)
    while inputs and inputs[-1] is None:  # trailing absent inputs are left out (ORT crashes on them)
        inputs.pop()
    names = ["" if a is None else f"x{k}" for k, a in enumerate(inputs)]
    outs = [f"y{k}" for k in range(num_outputs)]
    node = helper.make_node(op_type, names, outs, **dict(attrs or {}))
    graph_inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
                    for n, a in zip(names, inputs) if a is not None]
    graph = helper.make_graph([node], "reference", graph_inputs, [onnx.ValueInfoProto(name=o) for o in outs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, {n: a for n, a in zip(names, inputs) if a is not None})


@dataclass
class Case:
    """One op test: Kiln's op on `inputs` against `reference()` (ONNX Runtime or numpy)."""

    id: str
    op: str
    inputs: list[Optional[np.ndarray]]
    attrs: Mapping[str, Any]
    reference: Callable[[], list[np.ndarray]]
    rtol: float = 1e-5
    atol: float = 1e-5
    unscheduled_too: bool = False  # also check the compute under the default (naive) schedule
    out_types: Optional[list[TensorType]] = None  # what the graph would pass (decides optional outputs)


def run_cases(cases: Sequence[Case], target: "Target | str" = "native") -> dict[str, list[list[np.ndarray]]]:
    """Build every case (and its unscheduled twin when asked) into one library; outputs by case id."""
    kernels, owners = [], []
    for n, case in enumerate(cases):
        for scheduled in (True, False) if case.unscheduled_too else (True,):
            kernels.append(OpKernel(f"case{n}_{'s' if scheduled else 'u'}", case.op, list(case.inputs),
                                    dict(case.attrs), case.out_types, scheduled))
            owners.append(case.id)
    results: dict[str, list[list[np.ndarray]]] = {}
    for owner, run in zip(owners, build_kernels(kernels, target)):
        results.setdefault(owner, []).append(run.run())
    return results


def assert_matches(case: Case, outputs: list[np.ndarray], expected: Sequence[np.ndarray]) -> None:
    """Same count, shapes, dtypes; values equal for ints/bools and close for floats (NaN == NaN)."""
    assert len(outputs) == len(expected), f"{case.id}: {len(outputs)} outputs, expected {len(expected)}"
    for k, (got, want) in enumerate(zip(outputs, expected)):
        want = np.asarray(want)
        assert got.shape == want.shape, f"{case.id} output {k}: shape {got.shape}, expected {want.shape}"
        assert got.dtype == want.dtype, f"{case.id} output {k}: dtype {got.dtype}, expected {want.dtype}"
        if got.dtype.kind == "f":
            np.testing.assert_allclose(got, want, rtol=case.rtol, atol=case.atol, equal_nan=True,
                                       err_msg=f"{case.id} output {k}")
        else:
            np.testing.assert_array_equal(got, want, err_msg=f"{case.id} output {k}")
