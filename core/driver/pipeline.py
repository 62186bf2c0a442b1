"""compile(): (quantize) -> import -> optimize -> (tune) -> build -> validate -> benchmark -> package -> report.

The one pipeline and entry point the CLI, the Python API and the service's workers all call: static shapes and
declared ranges alike (core/driver/shape_plan.py says what each stage builds for).
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
from ..backends import resolve
from ..codegen.control_flow import CONTROL_ERROR
from ..codegen.kernel_cache import CacheSetting, building
from ..debug import DEBUG
from ..errors import KilnError, ValidationError
from ..lowering.executable import build_executable
from ..frontend.inspect import onnx_node_names
from ..frontend.model_loading import serialized_model
from ..narrow_dtypes import NARROW_DTYPES
from ..report.schema import build_report
from ..runtime.emulated import EMULATED
from ..runtime.header import render_header
from ..runtime.loader import KilnRuntimeError
from ..runtime.naming import artifact_names
from ..target import Target
from ..tune.options import TuningOptions
from .stages import ProgressFn, Stage
from .bisect import bisect as bisect_kernels
from .manifest import build_manifest, inputs_digest, pinned_outcomes, tuning_manifest
from .numerics import ValidationOptions
from .quantize_stage import (accuracy_not_measured, accuracy_on_artifact, after_quantizing, manifest_options,
                             quantize_first)
from .precision import PrecisionError, check_precision, judged_as, judged_origin, model_precision, report_section, store_weights
from .tolerance import origins_or_empty
from .reference import onnxruntime_on_host, open_sessions
from .reference_ahead import reference_ahead
from .shape_plan import io_info, shape_plan, shapes_option
from ..frontend.converters.control_flow_runtime import max_trip_count as loop_bound
from .validate import validate as validate_against_ort

ModelLike = Union[str, Path, bytes, Any]  # a path, serialized bytes or an onnx.ModelProto
QUICK_NO_BENCHMARK = "a quick compile (--quick) skips the latency benchmark"


def _model_bytes(model: ModelLike) -> bytes:
    return serialized_model(model)  # a path's external data stays beside it, found by the reference runs


def merged_tuning(outcomes) -> tuple[dict[str, Any], set[str]]:
    """The report's tuning section and the tuned kernels' names over every shape bucket's outcome (kernels of bucket
    b are named b{b}_NAME in a bucketed library)."""
    present = [(b, o) for b, o in enumerate(outcomes) if o is not None]
    if not present:
        return {"trials": 0, "time_s": 0.0, "cache_hits": 0, "tasks": []}, set()
    if len(outcomes) == 1:
        return present[0][1].report, present[0][1].tuned_kernels
    report: dict[str, Any] = {"trials": 0, "time_s": 0.0, "cache_hits": 0, "tasks": []}
    for _, outcome in present:
        for key in ("trials", "time_s", "cache_hits", "tasks"):
            report[key] += outcome.report.get(key, type(report[key])())
    return report, {f"b{b}_{k}" for b, o in present for k in o.tuned_kernels}


@contextmanager
def _runtime_failures(target: Target):
    """The artifact refused to load or run here (a GPU kernel faulted, the driver rejected the PTX, ...):
    a code generation bug to report as this compile's failure, not a crash of the caller."""
    try:
        yield
    except KilnRuntimeError as err:
        raise ValidationError(f"the compiled model failed on {target.name} while being validated: {err}") from None


RANDOM_FEEDS_STOPPED = ("the benchmark's seeded random inputs took a path the compiled shapes do not run ({error}): "
                        "give real inputs (--validation-inputs FILE.npz), which the benchmark then runs")


def _benchmark(module, session, exe, shapes, graph, user_samples) -> tuple[dict[str, Any], dict[str, float]]:
    """Latency against ONNX Runtime and the kernels' times inside whole runs, on the user's first sample (random
    inputs may choose a path the compiled shapes do not run: silero VAD's other sample rate), else on seeded random
    inputs; if control flow stops on those (a refused If branch), the benchmark is skipped with the reason."""
    feeds = dict(user_samples[0]) if user_samples else shapes.benchmark_feeds(graph)
    try:
        latency = compare_latency(module, session, feeds, rounds=7).as_report()
    except KilnRuntimeError as err:
        if user_samples or err.rc != CONTROL_ERROR:
            raise
        return {"skipped": RANDOM_FEEDS_STOPPED.format(error=err)}, {}
    if shapes.ranged:
        latency["shapes"] = {n: list(a.shape) for n, a in feeds.items()}
    # Kernels timed inside runs of the whole model (the runtime's own profile), so that
    # their sum explains the end-to-end time; the report gives both and their ratio.
    profile = profile_kernels(module, exe, feeds)
    latency["kernel_breakdown"] = profile.breakdown(latency["kiln"])
    return latency, profile.by_func


def compile(model: ModelLike, target: "str | Target" = "native", opt_level: int = 3,
            tuning: "TuningOptions | Mapping[str, Any] | None" = None,
            input_shapes: Optional[Mapping[str, tuple[int, ...]]] = None, *, validate: "bool | str" = True,
            benchmark: bool = True, progress: Optional[ProgressFn] = None, threads: Optional[int] = None,
            name: Optional[str] = None, tolerance: "float | str | tuple[float, float] | None" = None,
            validation_inputs: Any = None, bisect: bool = False,
            pinned_records: Optional[list] = None, precision: Optional[str] = None,
            kernel_cache: CacheSetting = None, quick: bool = False, calibration: "str | Path | None" = None,
            quantization: Any = None, max_trip_count: Optional[int] = None) -> Artifact:
    """Compile an ONNX model into an Artifact (native library, weights, metadata, report). `tuning` is a
    TuningOptions (a plain mapping of its fields is accepted too); None: no tuning and no records.
    `name` prefixes the library (libNAME.so), header (NAME.h) and exported C symbols (NAME_load, ...).
    Validation (core/driver/numerics.py): `validate` "error" (True), "warn" or "off" (False); `tolerance` ATOL or
    (ATOL, RTOL) for float outputs; `validation_inputs` .npz path(s) or bytes of real inputs; `bisect` always
    compares kernel by kernel (a mismatch always does). `pinned_records`: a manifest's `records_applied`, applied
    instead of tuning, which then does not run (kiln rebuild: the same configs without a records database).
    `precision` (core/driver/precision.py): fp32, fp16 or bf16 weights (float32 arithmetic); None: the model's own;
    int8 quantizes the model first (core/driver/quantize_stage.py) with `calibration` (an .npz of real inputs) and
    `quantization` (core.quantize.QuantizeOptions or a mapping of its fields), then compiles the QDQ model onto
    integer kernels; the report's `quantization` holds the accuracy cost measured on the artifact itself.
    `kernel_cache` (core/codegen/kernel_cache.py): None the machine's default, False/"off" none, or a directory.
    `quick`: no latency benchmark, validation on one sample at most and kernels that are cheap to build (the backend's
    pass_options: e.g. direct convs instead of Winograd), for fast iteration (the report says so).
    `max_trip_count`: the most iterations a Loop run at run time may make when its scan outputs need room for them
    and its trip count is known only at run time (core/frontend/converters/control_flow_runtime.py)."""
    tgt, backend = resolve(target)  # the target's Backend, handed down to every stage from here
    names = artifact_names(name)
    if quick:
        benchmark = False
    checks = ValidationOptions.of(validate, tolerance, validation_inputs, bisect, quick=quick)
    check_precision(precision)
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
    quantized, requested = None, {"precision": precision}
    if precision == "int8":
        source_sha256 = hashlib.sha256(_model_bytes(model)).hexdigest()  # a rebuild starts from the float model
        with stage(Stage.QUANTIZE):
            quantized = quantize_first(model if isinstance(model, (str, Path, bytes)) else _model_bytes(model),
                                       calibration, quantization, notify, threads)
        requested.update(manifest_options(quantization, calibration, threads))
        model, precision, notify = quantized.model, None, after_quantizing(notify)
    elif calibration is not None or quantization is not None:
        raise PrecisionError("calibration samples and quantization options are for precision int8 only")
    data = _model_bytes(model)
    shapes = shape_plan(model if isinstance(model, (str, Path)) else data, data, input_shapes)
    shapes.refuse(tgt, backend, checks)  # what declared ranges cannot be combined with yet, before any work
    with stage(Stage.IMPORT):
        with loop_bound(max_trip_count):
            imported = shapes.import_graphs()  # one graph, or one per shape bucket (the largest last)
        backend.check_ops((node.op for node in imported[-1].nodes), tgt)  # what the target cannot compile, at once
        samples = shapes.samples(checks, imported)  # bad inputs fail before minutes of building
    nodes_in = len(imported[-1].nodes)
    # A quick compile's reference runs on a forked child during the build (core/driver/reference_ahead.py)
    ahead = reference_ahead(data, imported[-1], samples, tgt, backend, threads) if (
        quick and checks.enabled and quantized is None) else None
    weights_precision = precision or model_precision(imported[-1])
    storage_dtypes = backend.weight_storage_dtypes(tgt)
    with stage(Stage.OPTIMIZE):
        graphs = [backend.finish_graph(store_weights(backend.optimize(g, opt_level, tgt, quick), weights_precision,
                                                     precision is not None, storage_dtypes, tgt), tgt)
                  for g in imported]
    outcomes: list = [None] * len(graphs)
    if pinned_records is not None:
        outcomes = pinned_outcomes(graphs, tgt, backend, pinned_records)
    elif tuning is not None:
        from ..tune import tune_graph

        def tune_progress(done: int, planned: int, user_progress=tuning.progress) -> None:
            if user_progress is not None:
                user_progress(done, planned)
            notify(Stage.TUNE, Stage.TUNE.at(done / max(1, planned)), f"tuning {done}/{planned}")

        with stage(Stage.TUNE):
            outcomes = [tune_graph(g, tgt, backend, replace(tuning, progress=tune_progress)) for g in graphs]
    else:
        timings["tune"] = 0.0
    workdir = new_workdir()
    with stage(Stage.BUILD), building(kernel_cache) as build_stats:
        backend.start_build(tgt)
        linked = shapes.link([build_executable(g, tgt, backend, schedule_for=o.schedule_for if o else None)
                              for g, o in zip(graphs, outcomes)], graphs)
        backend.build_library(list(linked.funcs), tgt, workdir / names.library,
                      plan=linked.plan if names.is_default else replace(linked.plan, export_prefix=names.prefix))
        (workdir / WEIGHTS).write_bytes(linked.weights)
    tuning_report, tuned_kernels = merged_tuning(outcomes)  # after the build: it names the kernels tuned configs made
    graph, exe = graphs[-1], linked.top
    metadata = {
        "format": "kiln-artifact", "version": 1, "compiler_version": __version__, "target": tgt.name,
        "target_triple": tgt.triple, "target_features": tgt.features, "opt_level": opt_level,
        "model_sha256": hashlib.sha256(data).hexdigest(), "inputs": io_info(graph, shapes.user_inputs(graph)),
        "outputs": io_info(graph, graph.outputs), "library": names.library, "weights": WEIGHTS, "header": names.header,
        "symbol_prefix": names.prefix, "weights_bytes": len(linked.weights), "arena_bytes": linked.arena_bytes,
        **shapes.metadata(), "precision": weights_precision,
    }
    metadata.update(backend.runtime_metadata(tgt))
    metadata["manifest"] = build_manifest(
        model_sha256=source_sha256 if quantized is not None else metadata["model_sha256"], target=tgt, target_spec=target if isinstance(target, str) else tgt.name,
        outcomes=outcomes, validation_inputs=inputs_digest(samples, graph) if checks.enabled else None,
        options={"opt_level": opt_level, "input_shapes": shapes_option(input_shapes),
                 "tuning": tuning_manifest(tuning), "threads": threads,
                 "name": name, "validate": checks.mode, "tolerance": list(checks.tolerance) if checks.tolerance else None,
                 "bisect": checks.bisect, **requested,
                 **({"max_trip_count": max_trip_count} if max_trip_count is not None else {}),
                 **({"quick": True} if quick else {})})  # a quick build's kernels differ: a rebuild makes the same
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
    quantization_report = None
    nthreads = threads or (min(tgt.num_cores, os.cpu_count() or 1) if emulator else tgt.num_cores)
    sessions = None
    # ONNX Runtime's Python API takes and returns numpy's own dtypes only, not ml_dtypes' float8/int4/...
    unexchangeable = sorted({graph.type_of(n).dtype for n in (*graph.inputs, *graph.outputs)} & NARROW_DTYPES)
    if runs_here and (checks.enabled or benchmark) and unexchangeable:
        reason = f"ONNX Runtime's Python API cannot exchange {', '.join(unexchangeable)} tensors"
        validation, latency = {"skipped": reason}, {"skipped": reason}
    elif runs_here and (checks.enabled or benchmark):
        sessions = (ahead and ahead.sessions()) or open_sessions(data, nthreads)
        if sessions.baseline is None:  # still validated, against ONNX's reference evaluator
            validation, latency, benchmark = {"skipped": sessions.skipped}, {"skipped": sessions.skipped}, False
            if not checks.enabled:
                sessions = None
    if sessions is not None:
        with _runtime_failures(tgt):
            module = emulator.load(workdir) if emulator else Artifact(workdir, metadata, {}, owns_directory=False).load()
        module.set_num_threads(nthreads)
        try:
            with _runtime_failures(tgt):
                if checks.enabled:
                    with stage(Stage.VALIDATE):
                        origins = {**origins_or_empty(data), **judged_as(weights_precision, precision is not None, {
                            n: graph.type_of(n).dtype for n in graph.outputs})}
                        comparison, worst_feeds = validate_against_ort(module, sessions.reference, graph,
                                                                       samples=ahead.samples if ahead else samples,
                                                                       origins=origins, user_tolerance=checks.tolerance)
                        # Kernels run one by one from the library itself: only a host CPU library exports them.
                        no_bisect = shapes.no_bisect or (
                            "the target does not run here" if emulator is not None else
                            "a GPU library's kernels run only inside the runtime" if backend.profiles_in_runtime
                            else "a named library keeps its kernels internal" if not names.is_default else "")
                        validation = checks.verdict(comparison, samples, no_bisect or (
                            lambda: bisect_kernels(exe, graph, workdir / names.library, data, worst_feeds,
                                                   threads=nthreads, user_tolerance=checks.tolerance,
                                                   default_origin=judged_origin(weights_precision, precision is not None))))
                        validation.update(shapes.shapes_of(samples))
                        if sessions.exact:  # what a user deploying ORT on this host would get, for the report
                            validation["onnxruntime_on_host"] = onnxruntime_on_host(
                                sessions, worst_feeds, origins, checks.tolerance)
                if benchmark:
                    with stage(Stage.BENCHMARK):
                        latency, kernel_times = _benchmark(module, sessions.baseline, exe, shapes, graph,
                                                           samples if checks.inputs else None)
                if quantized is not None:
                    quantization_report = accuracy_on_artifact(module, quantized)
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
    report.update(shapes.report(linked))
    report["manifest"] = metadata["manifest"]
    report["build"] = build_stats.as_report()
    if quick:
        report["quick"] = {"benchmark": "skipped", "validation": "one sample at most" if checks.enabled else "off"}
    report["precision"] = report_section(weights_precision, precision is not None, storage_dtypes, graph,
                                         (v for kernel in exe.kernels for v in kernel.inputs if v in graph.constants))
    if quantized is not None:
        report["quantization"] = quantization_report or accuracy_not_measured(
            quantized, validation.get("skipped") or latency.get("skipped") or "the artifact did not run here")
    device = backend.report_device(tgt, runs_here)
    if device is not None:
        report["device"] = device
    if DEBUG.get() >= 1:
        print(f"[kiln] compiled {len(exe.kernels)} kernels in {timings['total']:.2f} s", file=sys.stderr)
    artifact = Artifact(workdir, metadata, report)
    artifact.compiled_model = data  # what was compiled: the QDQ model of an int8 compile (a CI gate times against it)
    return artifact
