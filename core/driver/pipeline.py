"""compile(): import -> optimize -> (tune) -> build -> validate -> benchmark -> package -> report.

The one entry point the CLI, the Python API and the service's workers all call.
"""
from __future__ import annotations

import hashlib
import os
import sys
import time
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping, Optional, Union

from .._version import __version__
from .artifact import WEIGHTS, Artifact, new_workdir, write_metadata
from .benchmark import compare_latency, profile_kernels
from ..backends import get_backend
from ..codegen import build_library
from ..codegen.kernel_cache import CacheSetting, building
from ..debug import DEBUG
from ..errors import KilnError, ValidationError
from ..lowering.executable import build_executable
from ..frontend import import_onnx
from ..frontend.inspect import check_graph_sizes, onnx_node_names
from ..frontend.model_loading import serialized_model
from ..graph.ir import Graph
from ..graph.passes.manager import optimize
from ..narrow_dtypes import NARROW_DTYPES
from ..report.schema import build_report
from ..runtime.emulated import EMULATED
from ..runtime.header import render_header
from ..runtime.loader import KilnRuntimeError
from ..runtime.naming import artifact_names
from ..target import Target, get_target
from ..tune.options import TuningOptions
from .stages import ProgressFn, Stage
from .bisect import bisect as bisect_kernels
from .bucketed import compile_ranges
from .shape_ranges import has_ranges
from .manifest import build_manifest, inputs_digest, pinned_outcome, tuning_manifest
from .numerics import ValidationOptions
from .precision import check_precision, judged_as, judged_origin, model_precision, report_section, store_weights
from .tolerance import origins_or_empty
from .validate import (ReferenceEvaluatorSession, index_bounds, onnxruntime_session, random_inputs,
                       validate as validate_against_ort)

ModelLike = Union[str, Path, bytes, Any]  # a path, serialized bytes or an onnx.ModelProto
QUICK_NO_BENCHMARK = "a quick compile (--quick) skips the latency benchmark"


def _model_bytes(model: ModelLike) -> bytes:
    return serialized_model(model)  # a path's external data stays beside it, found by the reference runs


def _io_info(graph: Graph, names) -> list[dict]:
    return [{"name": n, "shape": list(graph.type_of(n).shape), "dtype": graph.type_of(n).dtype} for n in names]


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
            input_shapes: Optional[Mapping[str, tuple[int, ...]]] = None, *, validate: "bool | str" = True,
            benchmark: bool = True, progress: Optional[ProgressFn] = None, threads: Optional[int] = None,
            name: Optional[str] = None, tolerance: "float | str | tuple[float, float] | None" = None,
            validation_inputs: Any = None, bisect: bool = False,
            pinned_records: Optional[list] = None, precision: Optional[str] = None,
            kernel_cache: CacheSetting = None, quick: bool = False) -> Artifact:
    """Compile an ONNX model into an Artifact (native library, weights, metadata, report). `tuning` is a
    TuningOptions (a plain mapping of its fields is accepted too); None: no tuning and no records.
    `name` prefixes the library (libNAME.so), header (NAME.h) and exported C symbols (NAME_load, ...).
    Validation (core/driver/numerics.py): `validate` "error" (True), "warn" or "off" (False); `tolerance` ATOL or
    (ATOL, RTOL) for float outputs; `validation_inputs` .npz path(s) or bytes of real inputs; `bisect` always
    compares kernel by kernel (a mismatch always does). `pinned_records`: a manifest's `records_applied`, applied
    instead of tuning, which then does not run (kiln rebuild: the same configs without a records database).
    `precision` (core/driver/precision.py): fp32, fp16 or bf16 weights (float32 arithmetic); None: the model's own.
    `kernel_cache` (core/codegen/kernel_cache.py): None the machine's default, False/"off" none, or a directory.
    `quick`: no latency benchmark and validation on one sample at most, for fast iteration (the report says so)."""
    tgt = get_target(target)
    names = artifact_names(name)
    if quick:
        benchmark = False
    checks = ValidationOptions.of(validate, tolerance, validation_inputs, bisect, quick=quick)
    check_precision(precision)
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
    if has_ranges(input_shapes):  # declared ranges: one library over several shape buckets
        with building(kernel_cache):
            return compile_ranges(model, data, input_shapes, tgt, backend, names, opt_level=opt_level, tuning=tuning,
                                  checks=checks, benchmark=benchmark, notify=notify, threads=threads, precision=precision,
                                  unsupported={"pinned records": pinned_records})
    with stage(Stage.IMPORT):
        graph = import_onnx(model if isinstance(model, (str, Path)) else data, input_shapes=input_shapes)
        check_graph_sizes(graph)  # an absurd input shape fails here, not after a whole build
        backend.check_ops((node.op for node in graph.nodes), tgt)  # what the target cannot compile, all at once
        samples = checks.samples(graph) if checks.enabled else None  # bad inputs fail before minutes of building
    nodes_in = len(graph.nodes)
    weights_precision = precision or model_precision(graph)
    storage_dtypes = backend.weight_storage_dtypes(tgt)
    with stage(Stage.OPTIMIZE):
        graph = optimize(graph, opt_level, tgt)
        graph = store_weights(graph, weights_precision, precision is not None, storage_dtypes, tgt)
    tuning_report: dict[str, Any] = {"trials": 0, "time_s": 0.0, "cache_hits": 0, "tasks": []}
    schedule_for, tuned_kernels, outcome = None, set(), None
    if pinned_records is not None:
        outcome = pinned_outcome(graph, tgt, pinned_records)
        tuning_report, schedule_for, tuned_kernels = outcome.report, outcome.schedule_for, outcome.tuned_kernels
    elif tuning is not None:
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
    with stage(Stage.BUILD), building(kernel_cache) as build_stats:
        exe = build_executable(graph, tgt, schedule_for=schedule_for)
        build_library(list(exe.funcs), tgt, workdir / names.library,
                      plan=exe.plan if names.is_default else replace(exe.plan, export_prefix=names.prefix))
        (workdir / WEIGHTS).write_bytes(exe.weights)
    metadata = {
        "format": "kiln-artifact", "version": 1, "compiler_version": __version__, "target": tgt.name,
        "target_triple": tgt.triple, "target_features": tgt.features, "opt_level": opt_level,
        "model_sha256": hashlib.sha256(data).hexdigest(), "inputs": _io_info(graph, graph.inputs),
        "outputs": _io_info(graph, graph.outputs), "library": names.library, "weights": WEIGHTS, "header": names.header, "symbol_prefix": names.prefix,
        "weights_bytes": len(exe.weights), "arena_bytes": exe.memory.arena_bytes, "precision": weights_precision,
    }
    metadata.update(backend.runtime_metadata(tgt))
    metadata["manifest"] = build_manifest(
        model_sha256=metadata["model_sha256"], target=tgt, target_spec=target if isinstance(target, str) else tgt.name,
        outcome=outcome, validation_inputs=inputs_digest(samples, graph) if checks.enabled else None,
        options={"opt_level": opt_level, "input_shapes": {k: list(v) for k, v in sorted((input_shapes or {}).items())},
                 "tuning": tuning_manifest(tuning), "threads": threads,
                 "name": name, "validate": checks.mode, "tolerance": list(checks.tolerance) if checks.tolerance else None,
                 "bisect": checks.bisect, "precision": precision})
    write_metadata(workdir, metadata)
    (workdir / names.header).write_text(render_header(metadata))

    cannot_run = backend.cannot_run_reason(tgt)
    emulator = backend.emulator(tgt) if cannot_run else None  # e.g. qemu-aarch64: validated, never timed
    if emulator is not None:
        cannot_run, benchmark = None, False
    runs_here = cannot_run is None
    validation: dict[str, Any] = {"skipped": cannot_run or "validation was not requested"}
    latency: dict[str, Any] = {"skipped": cannot_run or (EMULATED if emulator else QUICK_NO_BENCHMARK if quick else
                                                          "the benchmark was not requested")}
    kernel_times: dict[str, float] = {}
    nthreads = threads or (min(tgt.num_cores, os.cpu_count() or 1) if emulator else tgt.num_cores)
    session = None
    # ONNX Runtime's Python API takes and returns numpy's own dtypes only, not ml_dtypes' float8/int4/...
    unexchangeable = sorted({graph.type_of(n).dtype for n in (*graph.inputs, *graph.outputs)} & NARROW_DTYPES)
    if runs_here and (checks.enabled or benchmark) and unexchangeable:
        reason = f"ONNX Runtime's Python API cannot exchange {', '.join(unexchangeable)} tensors"
        validation, latency = {"skipped": reason}, {"skipped": reason}
    elif runs_here and (checks.enabled or benchmark):
        try:
            session = onnxruntime_session(data, nthreads)
        except Exception as err:  # ORT has no kernel for what Kiln compiled (e.g. bfloat16 Mul): nothing to compare to
            if type(err).__name__ != "NotImplemented":
                raise
            reason = f"ONNX Runtime cannot run this model: {str(err).splitlines()[0]}"
            validation, latency, benchmark = {"skipped": reason}, {"skipped": reason}, False
            if checks.enabled:  # still validated, against ONNX's reference evaluator
                session = ReferenceEvaluatorSession(data)
    if session is not None:
        with _runtime_failures(tgt):
            module = emulator.load(workdir) if emulator else Artifact(workdir, metadata, {}, owns_directory=False).load()
        module.set_num_threads(nthreads)
        try:
            with _runtime_failures(tgt):
                if checks.enabled:
                    with stage(Stage.VALIDATE):
                        comparison, worst_feeds = validate_against_ort(
                            module, session, graph, samples=samples,
                            origins={**origins_or_empty(data), **judged_as(weights_precision, precision is not None, {
                                n: graph.type_of(n).dtype for n in graph.outputs})},
                            user_tolerance=checks.tolerance)
                        # Kernels run one by one from the library itself: only a host CPU library exports them.
                        no_bisect = ("the target does not run here" if emulator is not None else
                                     "a GPU library's kernels run only inside the runtime" if backend.profiles_in_runtime
                                     else "a named library keeps its kernels internal" if not names.is_default else "")
                        validation = checks.verdict(comparison, samples, no_bisect or (
                            lambda: bisect_kernels(exe, graph, workdir / names.library, data, worst_feeds,
                                                   threads=nthreads, user_tolerance=checks.tolerance,
                                                   default_origin=judged_origin(weights_precision, precision is not None))))
                if benchmark:
                    with stage(Stage.BENCHMARK):
                        feeds = random_inputs(graph, 1, index_bounds(graph))
                        latency = compare_latency(module, session, feeds, rounds=7).as_report()
                        # Kernels timed inside runs of the whole model (the runtime's own profile), so that
                        # their sum explains the end-to-end time; the report gives both and their ratio.
                        profile = profile_kernels(module, exe, feeds)
                        kernel_times = profile.by_func
                        latency["kernel_breakdown"] = profile.breakdown(latency["kiln"])
        finally:
            module.close()
    if emulator is not None and "skipped" not in validation:
        validation.update(mode=EMULATED, emulator=emulator.describe())
    notify(Stage.PACKAGE, Stage.PACKAGE.start, "")
    timings["total"] = round(time.perf_counter() - total_start, 4)
    report = build_report(metadata=metadata, target=tgt, opt_level=opt_level, nodes_in=nodes_in, exe=exe,
                          passes=list(backend.pass_names(opt_level)), kernel_times=kernel_times, tuned_kernels=tuned_kernels,
                          tuning=tuning_report, validation=validation, latency=latency, timings=timings,
                          threads=nthreads, onnx_nodes=onnx_node_names(data))
    report["manifest"] = metadata["manifest"]
    report["build"] = build_stats.as_report()
    if quick:
        report["quick"] = {"benchmark": "skipped", "validation": "one sample at most" if checks.enabled else "off"}
    report["precision"] = report_section(weights_precision, precision is not None, storage_dtypes, graph,
                                         (v for kernel in exe.kernels for v in kernel.inputs if v in graph.constants))
    device = backend.report_device(tgt, runs_here)
    if device is not None:
        report["device"] = device
    if DEBUG.get() >= 1:
        print(f"[kiln] compiled {len(exe.kernels)} kernels in {timings['total']:.2f} s", file=sys.stderr)
    return Artifact(workdir, metadata, report)
