"""compile(): import -> optimize -> (tune) -> build -> validate -> benchmark -> package -> report.

The one entry point the CLI, the Python API and the service's workers all call.
"""
from __future__ import annotations

import hashlib
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Union

import numpy as np

from .._version import __version__
from .artifact import HEADER, LIBRARY, WEIGHTS, Artifact, new_workdir, write_metadata
from .benchmark import compare_latency
from ..codegen import build_library, load_kernels
from ..codegen.ptxas import find_ptxas
from ..errors import ValidationError
from ..lowering.executable import Executable, build_executable
from ..frontend import import_onnx
from ..graph.ir import Graph
from ..graph.passes.alter_layout import layout_target
from ..graph.passes.manager import LEVELS, optimize
from ..narrow_dtypes import NARROW_DTYPES
from ..report.schema import SCHEMA_VERSION
from ..runtime.header import render_header
from ..runtime.loader import KilnRuntimeError, cuda_device_count
from ..runtime.package import gpu_metadata
from ..target import Target, get_target
from .validate import index_bounds, onnxruntime_session, random_inputs, validate as validate_against_ort

ProgressFn = Callable[[str, float], None]
ModelLike = Union[str, Path, bytes, Any]  # a path, serialized bytes or an onnx.ModelProto


def _model_bytes(model: ModelLike) -> bytes:
    if isinstance(model, (str, Path)):
        return Path(model).read_bytes()
    if isinstance(model, (bytes, bytearray)):
        return bytes(model)
    return model.SerializeToString()


def _io_info(graph: Graph, names) -> list[dict]:
    return [{"name": n, "shape": list(graph.type_of(n).shape), "dtype": graph.type_of(n).dtype} for n in names]


def time_kernels(lib_path: Path, exe: Executable, min_ms: float = 5.0) -> dict[str, float]:
    """Median-free quick timing of each compiled function alone on zero-filled buffers (zeros keep every
    gather in bounds), by function name: kernels sharing a function (KernelInfo.func) share its time."""
    lib = load_kernels(lib_path)
    times = {}
    for func in exe.funcs:
        arrays = [np.zeros(b.shape, dtype=b.dtype) for b in func.params]
        lib.call(func.name, *arrays)
        start, runs = time.perf_counter(), 0
        while (time.perf_counter() - start) * 1000 < min_ms or runs < 3:
            lib.call(func.name, *arrays)
            runs += 1
        times[func.name] = (time.perf_counter() - start) * 1000 / runs
    return times


def _cpu_runs_here(target: Target) -> Optional[str]:
    return None if target.runs_on_host() else f"target {target.name} cannot run on this host"


def _cuda_runs_here(target: Target) -> Optional[str]:
    if cuda_device_count() == 0:
        return (f"no NVIDIA GPU on this machine: the {target.cpu} artifact was built"
                f"{' and its PTX assembled by ptxas' if find_ptxas() else ''} but not run")
    return None


# Why a target's artifact cannot run on this machine (so validation and benchmarks are skipped), or None.
_RUNS_HERE: dict[str, Callable[[Target], Optional[str]]] = {"cpu": _cpu_runs_here, "cuda": _cuda_runs_here}


def profile_kernels(module, exe: Executable) -> dict[str, float]:
    """Each compiled function's time from the runtime's own per-call profile (GPU libraries: device
    timers), by function name; calls sharing a function take the first call's time."""
    times: dict[str, float] = {}
    for call, info in zip(module.profile(repeat=5), exe.kernels):
        times.setdefault(info.func, call["time_ms"])
    return times


@contextmanager
def _runtime_failures(target: Target):
    """The artifact refused to load or run here (a GPU kernel faulted, the driver rejected the PTX, ...):
    a code generation bug to report as this compile's failure, not a crash of the caller."""
    try:
        yield
    except KilnRuntimeError as err:
        raise ValidationError(f"the compiled model failed on {target.name} while being validated: {err}") from None


def compile(model: ModelLike, target: "str | Target" = "native", opt_level: int = 3, tuning: Optional[Mapping] = None,
            input_shapes: Optional[Mapping[str, tuple[int, ...]]] = None, *, validate: bool = True,
            benchmark: bool = True, progress: Optional[ProgressFn] = None, threads: Optional[int] = None) -> Artifact:
    """Compile an ONNX model into an Artifact (native library, weights, metadata, report)."""
    tgt = get_target(target)
    if opt_level not in (0, 1, 2, 3):
        from ..errors import KilnError

        raise KilnError(f"opt level must be 0, 1, 2 or 3, not {opt_level}")
    notify = progress or (lambda stage, fraction: None)
    timings: dict[str, float] = {}

    @contextmanager
    def stage(name: str, fraction: float):
        notify(name, fraction)
        start = time.perf_counter()
        yield
        timings[name] = round(time.perf_counter() - start, 4)

    total_start = time.perf_counter()
    data = _model_bytes(model)
    with stage("import", 0.0):
        graph = import_onnx(model if isinstance(model, (str, Path)) else data, input_shapes=input_shapes)
    nodes_in = len(graph.nodes)
    with stage("optimize", 0.1), layout_target(tgt):  # blocked layouts use the target's vector width
        graph = optimize(graph, opt_level, tgt)
    tuning_report: dict[str, Any] = {"trials": 0, "time_s": 0.0, "cache_hits": 0, "tasks": []}
    schedule_for, tuned_kernels = None, set()
    if tuning is not None:
        from ..tune import tune_graph

        user_progress = tuning.get("progress")

        def tune_progress(name: str, fraction: float) -> None:  # the caller's own bar and the compile's
            if user_progress is not None:
                user_progress(name, fraction)
            notify(name, 0.15 + 0.05 * fraction)

        with stage("tune", 0.15):
            outcome = tune_graph(graph, tgt, {**tuning, "progress": tune_progress})
        tuning_report, schedule_for, tuned_kernels = outcome.report, outcome.schedule_for, outcome.tuned_kernels
    else:
        timings["tune"] = 0.0
    workdir = new_workdir()
    with stage("build", 0.2):
        exe = build_executable(graph, tgt, schedule_for=schedule_for)
        build_library(list(exe.funcs), tgt, workdir / LIBRARY, plan=exe.plan)
        (workdir / WEIGHTS).write_bytes(exe.weights)
    metadata = {
        "format": "kiln-artifact", "version": 1, "compiler_version": __version__, "target": tgt.name,
        "target_triple": tgt.triple, "target_features": tgt.features, "opt_level": opt_level,
        "model_sha256": hashlib.sha256(data).hexdigest(), "inputs": _io_info(graph, graph.inputs),
        "outputs": _io_info(graph, graph.outputs), "library": LIBRARY, "weights": WEIGHTS, "header": HEADER,
        "weights_bytes": len(exe.weights), "arena_bytes": exe.memory.arena_bytes,
    }
    metadata.update(gpu_metadata(tgt))
    write_metadata(workdir, metadata)
    (workdir / HEADER).write_text(render_header(metadata))

    cannot_run = _RUNS_HERE[tgt.kind](tgt)
    runs_here = cannot_run is None
    validation: dict[str, Any] = {"skipped": cannot_run or "validation was not requested"}
    latency: dict[str, Any] = {"skipped": cannot_run or "the benchmark was not requested"}
    kernel_times: dict[str, float] = {}
    nthreads = threads or tgt.num_cores
    session = None
    # ONNX Runtime's Python API takes and returns numpy's own dtypes only, not ml_dtypes' float8/int4/...
    unexchangeable = sorted({graph.type_of(n).dtype for n in (*graph.inputs, *graph.outputs)} & NARROW_DTYPES)
    if runs_here and (validate or benchmark) and unexchangeable:
        reason = f"ONNX Runtime's Python API cannot exchange {', '.join(unexchangeable)} tensors"
        validation, latency = {"skipped": reason}, {"skipped": reason}
    elif runs_here and (validate or benchmark):
        try:
            session = onnxruntime_session(data, nthreads)
        except Exception as err:  # ORT has no kernel for what Kiln compiled (e.g. bfloat16 Mul): nothing to compare to
            if type(err).__name__ != "NotImplemented":
                raise
            reason = f"ONNX Runtime cannot run this model: {str(err).splitlines()[0]}"
            validation, latency = {"skipped": reason}, {"skipped": reason}
    if session is not None:
        with _runtime_failures(tgt):
            module = Artifact(workdir, metadata, {}, owns_directory=False).load()
        module.set_num_threads(nthreads)
        try:
            with _runtime_failures(tgt):
                if validate:
                    with stage("validate", 0.8):
                        validation = validate_against_ort(module, session, graph).as_report()
                if benchmark:
                    with stage("benchmark", 0.9):
                        feeds = random_inputs(graph, 1, index_bounds(graph))
                        latency = compare_latency(module, session, feeds, rounds=7).as_report()
                        kernel_times = (time_kernels(workdir / LIBRARY, exe) if tgt.kind == "cpu"
                                        else profile_kernels(module, exe))
        finally:
            module.close()
    notify("package", 0.98)
    timings["total"] = round(time.perf_counter() - total_start, 4)
    report = {
        "schema": SCHEMA_VERSION,
        "model": {"sha256": metadata["model_sha256"], "inputs": metadata["inputs"], "outputs": metadata["outputs"]},
        "target": tgt.name, "opt_level": opt_level, "compiler_version": __version__,
        "graph": {"nodes_in": nodes_in, "kernels": len(exe.kernels),
                  "fusion_groups": [{"kernel": k.name, "ops": list(k.ops)} for k in exe.kernels if len(k.ops) > 1],
                  "layout_transforms": sum("LayoutTransform" in k.ops for k in exe.kernels), "passes": list(LEVELS[opt_level])},
        "memory": {"arena_bytes": exe.memory.arena_bytes, "naive_bytes": exe.memory.naive_bytes,
                   "weights_bytes": len(exe.weights)},
        "kernels": [{"name": k.name, "ops": list(k.ops), "flops": k.flops, "time_ms": kernel_times.get(k.func),
                     "gflops": (k.flops / kernel_times[k.func] / 1e6) if kernel_times.get(k.func) else None,
                     "tuned": k.name in tuned_kernels} for k in exe.kernels],
        "tuning": tuning_report,
        "validation": validation, "latency_ms": latency, "timings_s": timings,
        "threads": nthreads,
    }
    if tgt.kind == "cuda":
        report["device"] = {"kind": "cuda", "arch": tgt.cpu, "ptxas_checked": find_ptxas() is not None,
                            "ran": runs_here}
    if os.environ.get("DEBUG"):
        import sys

        print(f"[kiln] compiled {len(exe.kernels)} kernels in {timings['total']:.2f} s", file=sys.stderr)
    return Artifact(workdir, metadata, report)
