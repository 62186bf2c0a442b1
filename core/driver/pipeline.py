"""compile(): import -> optimize -> (tune) -> build -> validate -> benchmark -> package -> report.

The one entry point the CLI, the Python API and the service's workers all call.
"""
from __future__ import annotations

import hashlib
import sys
import time
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping, Optional, Union

import numpy as np

from .._version import __version__
from .artifact import HEADER, LIBRARY, WEIGHTS, Artifact, new_workdir, write_metadata
from .benchmark import compare_latency
from ..backends import get_backend
from ..codegen import build_library, load_kernels
from ..debug import DEBUG
from ..errors import KilnError, ValidationError
from ..lowering.executable import Executable, build_executable
from ..frontend import import_onnx
from ..graph.ir import Graph
from ..graph.passes.manager import optimize
from ..narrow_dtypes import NARROW_DTYPES
from ..report.schema import build_report
from ..runtime.header import render_header
from ..runtime.loader import KilnRuntimeError
from ..target import Target, get_target
from ..tune.options import TuningOptions
from .stages import ProgressFn, Stage
from .validate import index_bounds, onnxruntime_session, random_inputs, validate as validate_against_ort

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


def compile(model: ModelLike, target: "str | Target" = "native", opt_level: int = 3,
            tuning: "TuningOptions | Mapping[str, Any] | None" = None,
            input_shapes: Optional[Mapping[str, tuple[int, ...]]] = None, *, validate: bool = True,
            benchmark: bool = True, progress: Optional[ProgressFn] = None, threads: Optional[int] = None) -> Artifact:
    """Compile an ONNX model into an Artifact (native library, weights, metadata, report). `tuning` is a
    TuningOptions (a plain mapping of its fields is accepted too); None: no tuning and no records."""
    tgt = get_target(target)
    backend = get_backend(tgt)
    if opt_level not in (0, 1, 2, 3):
        raise KilnError(f"opt level must be 0, 1, 2 or 3, not {opt_level}")
    if tuning is not None and not isinstance(tuning, TuningOptions):
        tuning = TuningOptions.from_mapping(tuning)
    notify = progress or (lambda stage, fraction, detail: None)
    timings: dict[str, float] = {}

    @contextmanager
    def stage(step: Stage):
        notify(step, step.start, "")
        start = time.perf_counter()
        yield
        timings[step.value] = round(time.perf_counter() - start, 4)

    total_start = time.perf_counter()
    data = _model_bytes(model)
    with stage(Stage.IMPORT):
        graph = import_onnx(model if isinstance(model, (str, Path)) else data, input_shapes=input_shapes)
    nodes_in = len(graph.nodes)
    with stage(Stage.OPTIMIZE):
        graph = optimize(graph, opt_level, tgt)
    tuning_report: dict[str, Any] = {"trials": 0, "time_s": 0.0, "cache_hits": 0, "tasks": []}
    schedule_for, tuned_kernels = None, set()
    if tuning is not None:
        from ..tune import tune_graph

        def tune_progress(done: int, planned: int, user_progress=tuning.progress) -> None:
            if user_progress is not None:
                user_progress(done, planned)
            notify(Stage.TUNE, Stage.TUNE.at(done / max(1, planned)), f"tuning {done}/{planned}")

        with stage(Stage.TUNE):
            outcome = tune_graph(graph, tgt, replace(tuning, progress=tune_progress))
        tuning_report, schedule_for, tuned_kernels = outcome.report, outcome.schedule_for, outcome.tuned_kernels
    else:
        timings["tune"] = 0.0
    workdir = new_workdir()
    with stage(Stage.BUILD):
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
    metadata.update(backend.runtime_metadata(tgt))
    write_metadata(workdir, metadata)
    (workdir / HEADER).write_text(render_header(metadata))

    cannot_run = backend.cannot_run_reason(tgt)
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
                    with stage(Stage.VALIDATE):
                        validation = validate_against_ort(module, session, graph).as_report()
                if benchmark:
                    with stage(Stage.BENCHMARK):
                        feeds = random_inputs(graph, 1, index_bounds(graph))
                        latency = compare_latency(module, session, feeds, rounds=7).as_report()
                        kernel_times = (profile_kernels(module, exe) if backend.profiles_in_runtime
                                        else time_kernels(workdir / LIBRARY, exe))
        finally:
            module.close()
    notify(Stage.PACKAGE, Stage.PACKAGE.start, "")
    timings["total"] = round(time.perf_counter() - total_start, 4)
    report = build_report(metadata=metadata, target=tgt, opt_level=opt_level, nodes_in=nodes_in, exe=exe,
                          passes=list(backend.pass_names(opt_level)), kernel_times=kernel_times, tuned_kernels=tuned_kernels,
                          tuning=tuning_report, validation=validation, latency=latency, timings=timings,
                          threads=nthreads)
    device = backend.report_device(tgt, runs_here)
    if device is not None:
        report["device"] = device
    if DEBUG.get() >= 1:
        print(f"[kiln] compiled {len(exe.kernels)} kernels in {timings['total']:.2f} s", file=sys.stderr)
    return Artifact(workdir, metadata, report)
