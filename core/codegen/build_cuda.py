"""CUDA model libraries: the kernels as PTX (nvptx.py) inside a host shared library whose C runtime
(kiln_runtime.c + kiln_cuda.c) launches them through the CUDA driver API, with the CPU library's C ABI.

The per-model part is a generated C file of tables (see core/runtime/kiln_cuda.h): the PTX text, the
kernel names, one launch per plan call (grid, block, arguments as weights/arena offsets) and where
each model input and output is staged in the device arena. A library with input-shape ranges (a BucketedPlan) has
those per compiled shape (bucket) and links kiln_shaped.c, which picks the bucket and pads on the host, with the
dispatch tables of core/codegen/bucket_entry.py rendered as C. Building needs no GPU and no CUDA toolkit;
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
from .bucket_entry import BucketedPlan
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
    """The device arena: the plan's arena first (the largest bucket's), then a staging slot per staged input (the
    model's, then its run-time lengths) and model output, sized for the largest bucket."""

    arena_bytes: int
    input_offsets: tuple[int, ...]
    input_bytes: tuple[int, ...]  # 0: no kernel reads that input (nothing is copied)
    output_offsets: tuple[int, ...]
    output_bytes: tuple[int, ...]
    bucket_input_bytes: tuple[tuple[int, ...], ...] = ()  # per bucket (input_bytes: the largest of them)
    bucket_output_bytes: tuple[tuple[int, ...], ...] = ()

    def resolve(self, ref: BufferRef) -> tuple[int, int]:
        """(space, byte offset) of a plan argument on the device."""
        if ref.kind == "input":
            return _SPACES["arena"], self.input_offsets[ref.index]
        if ref.kind == "output":
            return _SPACES["arena"], self.output_offsets[ref.index]
        return _SPACES[ref.kind], ref.offset


def _staged_bytes(plan: ModelPlan, funcs: Mapping[str, PrimFunc]) -> dict[str, list[int]]:
    """Each input/output's size in one plan: the largest parameter bound to it (kernels see whole tensors)."""
    sizes = {"input": [0] * plan.num_inputs, "output": [0] * plan.num_outputs}
    for call in plan.calls:
        for ref, param in zip(call.args, funcs[call.func].params):
            if ref.kind in sizes:
                sizes[ref.kind][ref.index] = max(sizes[ref.kind][ref.index], param.nbytes)
    return sizes


def device_layout(plan: "ModelPlan | BucketedPlan", funcs: Mapping[str, PrimFunc]) -> DeviceLayout:
    """One slot per staged input and output, as large as any bucket's."""
    buckets = [_staged_bytes(p, funcs) for p in (plan.plans if isinstance(plan, BucketedPlan) else (plan,))]
    largest = {kind: [max(sizes) for sizes in zip(*(b[kind] for b in buckets))] for kind in ("input", "output")}
    end = _align(plan.arena_bytes)
    offsets: dict[str, list[int]] = {"input": [], "output": []}
    for kind in ("input", "output"):
        for nbytes in largest[kind]:
            offsets[kind].append(end)
            end += _align(nbytes)
    return DeviceLayout(end, tuple(offsets["input"]), tuple(largest["input"]), tuple(offsets["output"]),
                        tuple(largest["output"]), tuple(tuple(b["input"]) for b in buckets),
                        tuple(tuple(b["output"]) for b in buckets))


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


def _bucket_tables(plan: BucketedPlan) -> list[str]:
    """kiln_shaped.c's symbols: the dispatch tables (bucket_entry.py's, as C), a runner per bucket and the largest
    bucket's profile, each through kiln_cuda_bucket_run."""
    ctypes_ = {"i32": "int32_t", "i64": "int64_t", "str": "char* const"}
    lines = []
    for name, (kind, values) in plan.tables.items():
        render = c_string if kind == "str" else str
        if isinstance(values, tuple):
            lines.append(_array(ctypes_[kind], f"kiln_dyn_{name}", [render(v) for v in values],
                                "NULL" if kind == "str" else "0"))
        else:
            lines.append(f"const {ctypes_[kind]} kiln_dyn_{name} = {int(values)};")
    runners = []
    for b in range(len(plan.plans)):
        lines.append(f"static int32_t run_bucket_{b}(void* arena, const void* weights, const void* const* inputs, "
                     f"void* const* outputs) {{ return kiln_cuda_bucket_run({b}, arena, weights, inputs, outputs, "
                     f"NULL); }}")
        runners.append(f"run_bucket_{b}")
    lines.append("typedef int32_t (*kiln_runner)(void*, const void*, const void* const*, void* const*);")
    lines.append(_array("kiln_runner", "kiln_dyn_runners", runners, "NULL"))
    lines.append("int32_t kiln_bucket_profile(void* arena, const void* weights, const void* const* inputs, "
                 "void* const* outputs, double* call_ms) { return kiln_cuda_bucket_run("
                 f"{len(plan.plans) - 1}, arena, weights, inputs, outputs, call_ms); }}")
    return lines


def render_tables(plan: "ModelPlan | BucketedPlan", funcs: Sequence[PrimFunc], ptx: str,
                  launches: Mapping[str, LaunchConfig], target: Target) -> str:
    """The C source of one model's tables (the symbols kiln_cuda.h and kiln_runtime.c expect, and kiln_shaped.c's
    for a BucketedPlan)."""
    by_name = {f.name: f for f in funcs}
    layout = device_layout(plan, by_name)
    bucketed = isinstance(plan, BucketedPlan)
    buckets = plan.plans if bucketed else (plan,)
    # A split-K GEMM's companion that sums its parts is a kernel and a launch (on the same arguments) of its own.
    kernels = [name for f in funcs for name in (f.name, split_reduce_name(f.name)) if name in launches]
    kernel_index = {name: k for k, name in enumerate(kernels)}
    launch_rows, arg_rows, call_names, first_calls = [], [], [], [0]
    for bucket in buckets:
        for call in bucket.calls:
            if len(call.args) > MAX_ARGS:
                raise CodegenError(f"kernel {call.func} takes {len(call.args)} buffers; a CUDA launch here takes at "
                                   f"most {MAX_ARGS}")
            for kernel in (call.func, split_reduce_name(call.func)):
                if kernel not in launches:
                    continue
                cfg = launches[kernel]
                launch_rows.append(f"{{{kernel_index[kernel]}, {{{', '.join(map(str, cfg.grid))}}}, "
                                   f"{{{', '.join(map(str, cfg.block))}}}, {len(arg_rows)}, {len(call.args)}, "
                                   f"{cfg.dynamic_shared_bytes}}}")
                arg_rows += ["{%d, %d}" % layout.resolve(ref) for ref in call.args]
                call_names.append((call.label or call.func) + kernel[len(call.func):])
        first_calls.append(len(launch_rows))  # each bucket's launches, its split-K companions counted
    top_names = call_names[first_calls[-2]:]  # kiln_profile's: the largest bucket's
    ints = lambda values: [str(v) for v in values]  # noqa: E731
    top = buckets[-1]
    lengths = ()
    if bucketed:  # each run-time length at its variable's upper bound
        hi, length_var = plan.tables["var_hi"][1], plan.tables["length_var"][1]
        lengths = tuple(hi[v] for v in length_var)
    return "\n".join([
        "/* Generated by Kiln (core/codegen/build_cuda.py) for one model; do not edit. */",
        "#include <stddef.h>",
        '#include "kiln_cuda.h"',
        "",
        f"const int64_t kiln_arena_bytes = {layout.arena_bytes};",
        f"const int64_t kiln_weights_bytes = {plan.weights_bytes};",
        f"const int32_t kiln_graph_num_inputs = {plan.num_inputs};",
        f"const int32_t kiln_graph_num_outputs = {plan.num_outputs};",
        f"const int32_t kiln_graph_num_calls = {len(top_names)};",
        _array("char* const", "kiln_graph_call_names", [c_string(name) for name in top_names], "NULL"),
        f"const char kiln_cuda_arch[] = {c_string(target.cpu)};",
        f"const int32_t kiln_cuda_num_kernels = {len(kernels)};",
        _array("char* const", "kiln_cuda_kernel_names", [c_string(name) for name in kernels], "NULL"),
        f"const int32_t kiln_cuda_num_buckets = {len(buckets)};",
        _array("int32_t", "kiln_cuda_bucket_calls", ints(first_calls), "0"),
        _array("kiln_cuda_launch", "kiln_cuda_launches", launch_rows, "{0}"),
        _array("kiln_cuda_arg", "kiln_cuda_args", arg_rows, "{0}"),
        f"const int32_t kiln_cuda_num_staged_inputs = {top.num_inputs};",
        _array("int64_t", "kiln_cuda_top_lengths", ints(lengths), "0"),
        _array("int64_t", "kiln_cuda_input_offsets", ints(layout.input_offsets), "0"),
        _array("int64_t", "kiln_cuda_input_bytes", ints(n for b in layout.bucket_input_bytes for n in b), "0"),
        _array("int64_t", "kiln_cuda_output_offsets", ints(layout.output_offsets), "0"),
        _array("int64_t", "kiln_cuda_output_bytes", ints(n for b in layout.bucket_output_bytes for n in b), "0"),
        *(_bucket_tables(plan) if bucketed else ()),
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
    bucketed = isinstance(plan, BucketedPlan)
    for bucket in plan.plans if bucketed else (plan,):
        validate_plan(bucket, {f.name: f for f in funcs})
    cc = find_compiler(host_target())  # the host side runs on the CPU that loads it
    ptx, launches = emit_ptx(funcs, target)
    check_ptx(ptx, target)
    out_path = Path(out_path)
    with tempfile.TemporaryDirectory(prefix="kiln-build-cuda-") as tmp:
        tables = Path(tmp) / "kiln_cuda_tables.c"
        tables.write_text(render_tables(plan, funcs, ptx, launches, target))
        objects = [Path(tmp) / "kiln_cuda_tables.o"]
        compile_c(cc, tables, objects[0], include_dirs=(RUNTIME_DIR,))
        objects += runtime_objects(cc, Path(tmp), with_model=True, with_cuda=True, with_shapes=bucketed)
        shim, script = prefixed_exports(cc, Path(tmp), plan.export_prefix, bucketed)
        objects += shim
        with atomic_path(out_path) as partial:
            # -ldl: dlopen of libcuda.so.1 (libc itself on glibc >= 2.34)
            link_shared(cc, objects, partial, ["-ldl"], script)
    return out_path


__all__ = ["build_cuda_library", "render_tables", "device_layout", "check_ptx", "DeviceLayout"]
