"""CUDA model libraries: the kernels as PTX (nvptx.py) inside a host shared library whose C runtime
(kiln_runtime.c + kiln_cuda.c) launches them through the CUDA driver API, with the CPU library's C ABI.

The per-model part is a generated C file of tables (see core/runtime/kiln_cuda.h): the PTX text, the
kernel names, one launch per plan call (grid, block, arguments as weights/arena offsets) and where
each model input and output is staged in the device arena. Building needs no GPU and no CUDA toolkit;
when ptxas is installed the PTX is assembled for the target's architecture first, so a PTX the GPU
driver would reject fails the build instead of the user's kiln_load.
"""
from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from ..errors import CodegenError
from ..files.atomic import atomic_path
from ..runtime.header import c_string
from ..target import Target, host_target
from ..tir.stmt import PrimFunc
from .model_entry import BufferRef, ModelPlan, validate_plan
from .nvptx import LaunchConfig, emit_ptx, split_reduce_name
from .ptxas import assemble, find_ptxas
from .runtime_objects import RUNTIME_DIR, prefixed_exports, runtime_objects
from .toolchain import compile_c, find_compiler, link_shared

DEVICE_ALIGN = 256  # cuMemAlloc's alignment: staged inputs/outputs start on it too
MAX_ARGS = 256  # KILN_CUDA_MAX_ARGS in kiln_cuda.h
_SPACES = {"weight": 0, "arena": 1}  # KILN_CUDA_WEIGHTS, KILN_CUDA_ARENA


def _align(n: int) -> int:
    return (n + DEVICE_ALIGN - 1) // DEVICE_ALIGN * DEVICE_ALIGN


@dataclass(frozen=True)
class DeviceLayout:
    """The device arena: the plan's arena first, then a staging slot per model input and output."""

    arena_bytes: int
    input_offsets: tuple[int, ...]
    input_bytes: tuple[int, ...]  # 0: no kernel reads that input (nothing is copied)
    output_offsets: tuple[int, ...]
    output_bytes: tuple[int, ...]

    def resolve(self, ref: BufferRef) -> tuple[int, int]:
        """(space, byte offset) of a plan argument on the device."""
        if ref.kind == "input":
            return _SPACES["arena"], self.input_offsets[ref.index]
        if ref.kind == "output":
            return _SPACES["arena"], self.output_offsets[ref.index]
        return _SPACES[ref.kind], ref.offset


def device_layout(plan: ModelPlan, funcs: Mapping[str, PrimFunc]) -> DeviceLayout:
    """Each input/output's size is the largest parameter bound to it (kernels see whole tensors)."""
    sizes = {"input": [0] * plan.num_inputs, "output": [0] * plan.num_outputs}
    for call in plan.calls:
        for ref, param in zip(call.args, funcs[call.func].params):
            if ref.kind in sizes:
                sizes[ref.kind][ref.index] = max(sizes[ref.kind][ref.index], param.nbytes)
    end = _align(plan.arena_bytes)
    offsets: dict[str, list[int]] = {"input": [], "output": []}
    for kind in ("input", "output"):
        for nbytes in sizes[kind]:
            offsets[kind].append(end)
            end += _align(nbytes)
    return DeviceLayout(end, tuple(offsets["input"]), tuple(sizes["input"]), tuple(offsets["output"]),
                        tuple(sizes["output"]))


_C_UNSAFE = re.compile(r'[^\t -~]|[\\"?]')  # `?`: no accidental trigraphs


def _c_text(text: str) -> str:
    """`text` as adjacent C string literals, one per line (quick for compilers even at megabytes)."""
    def escape(m: re.Match) -> str:
        ch = m.group(0)
        return "\\" + ch if ch in '\\"?' else "".join(f"\\{b:03o}" for b in ch.encode())

    lines = text.splitlines(keepends=True) or [""]
    return "\n".join('"' + _C_UNSAFE.sub(escape, line.rstrip("\n")) + ('\\n"' if line.endswith("\n") else '"')
                     for line in lines)


def _array(ctype: str, name: str, items: Sequence[str], filler: str) -> str:
    # A trailing filler keeps every array non-empty (C has no zero-length arrays); counts say how many are real.
    return f"const {ctype} {name}[] = {{{', '.join([*items, filler])}}};"


def render_tables(plan: ModelPlan, funcs: Sequence[PrimFunc], ptx: str, launches: Mapping[str, LaunchConfig],
                  target: Target) -> str:
    """The C source of one model's tables (the symbols kiln_cuda.h and kiln_runtime.c expect)."""
    by_name = {f.name: f for f in funcs}
    layout = device_layout(plan, by_name)
    # A split-K GEMM's companion that sums its parts is a kernel and a launch (on the same arguments) of its own.
    kernels = [name for f in funcs for name in (f.name, split_reduce_name(f.name)) if name in launches]
    kernel_index = {name: k for k, name in enumerate(kernels)}
    launch_rows, arg_rows, call_names = [], [], []
    for pos, call in enumerate(plan.calls):
        if len(call.args) > MAX_ARGS:
            raise CodegenError(f"kernel {call.func} takes {len(call.args)} buffers; a CUDA launch here takes at most "
                               f"{MAX_ARGS}")
        for kernel in (call.func, split_reduce_name(call.func)):
            if kernel not in launches:
                continue
            cfg = launches[kernel]
            launch_rows.append(f"{{{kernel_index[kernel]}, {{{', '.join(map(str, cfg.grid))}}}, "
                               f"{{{', '.join(map(str, cfg.block))}}}, {len(arg_rows)}, {len(call.args)}, "
                               f"{cfg.dynamic_shared_bytes}}}")
            arg_rows += ["{%d, %d}" % layout.resolve(ref) for ref in call.args]
            call_names.append((call.label or call.func) + kernel[len(call.func):])
    ints = lambda values: [str(v) for v in values]  # noqa: E731
    return "\n".join([
        "/* Generated by Kiln (core/codegen/build_cuda.py) for one model; do not edit. */",
        "#include <stddef.h>",
        '#include "kiln_cuda.h"',
        "",
        f"const int64_t kiln_arena_bytes = {layout.arena_bytes};",
        f"const int64_t kiln_weights_bytes = {plan.weights_bytes};",
        f"const int32_t kiln_graph_num_inputs = {plan.num_inputs};",
        f"const int32_t kiln_graph_num_outputs = {plan.num_outputs};",
        f"const int32_t kiln_graph_num_calls = {len(launch_rows)};",
        _array("char* const", "kiln_graph_call_names", [c_string(name) for name in call_names], "NULL"),
        f"const char kiln_cuda_arch[] = {c_string(target.cpu)};",
        f"const int32_t kiln_cuda_num_kernels = {len(kernels)};",
        _array("char* const", "kiln_cuda_kernel_names", [c_string(name) for name in kernels], "NULL"),
        _array("kiln_cuda_launch", "kiln_cuda_launches", launch_rows, "{0}"),
        _array("kiln_cuda_arg", "kiln_cuda_args", arg_rows, "{0}"),
        _array("int64_t", "kiln_cuda_input_offsets", ints(layout.input_offsets), "0"),
        _array("int64_t", "kiln_cuda_input_bytes", ints(layout.input_bytes), "0"),
        _array("int64_t", "kiln_cuda_output_offsets", ints(layout.output_offsets), "0"),
        _array("int64_t", "kiln_cuda_output_bytes", ints(layout.output_bytes), "0"),
        "const char kiln_cuda_ptx[] =",
        _c_text(ptx) + ";",
        "",
    ])


def check_ptx(ptx: str, target: Target) -> bool:
    """Assemble the PTX with ptxas for the target's architecture when ptxas is installed (BuildError
    with its messages if it rejects it); whether it was checked."""
    if find_ptxas() is None:
        return False
    assemble(ptx, target.cpu)
    return True


def build_cuda_library(funcs: Sequence[PrimFunc], target: Target, out_path: "str | Path",
                       plan: ModelPlan | None) -> Path:
    """The host library of a whole model for a CUDA target at `out_path`, written atomically."""
    if plan is None:
        raise CodegenError(f"target {target.name}: a CUDA library runs a whole model; pass its plan")
    funcs = list(funcs)
    validate_plan(plan, {f.name: f for f in funcs})
    cc = find_compiler(host_target())  # the host side runs on the CPU that loads it
    ptx, launches = emit_ptx(funcs, target)
    check_ptx(ptx, target)
    out_path = Path(out_path)
    with tempfile.TemporaryDirectory(prefix="kiln-build-cuda-") as tmp:
        tables = Path(tmp) / "kiln_cuda_tables.c"
        tables.write_text(render_tables(plan, funcs, ptx, launches, target))
        objects = [Path(tmp) / "kiln_cuda_tables.o"]
        compile_c(cc, tables, objects[0], include_dirs=(RUNTIME_DIR,))
        objects += runtime_objects(cc, Path(tmp), with_model=True, with_cuda=True)
        shim, script = prefixed_exports(cc, Path(tmp), plan.export_prefix)
        objects += shim
        with atomic_path(out_path) as partial:
            # -ldl: dlopen of libcuda.so.1 (libc itself on glibc >= 2.34)
            link_shared(cc, objects, partial, ["-ldl"], script)
    return out_path


__all__ = ["build_cuda_library", "render_tables", "device_layout", "check_ptx", "DeviceLayout"]
