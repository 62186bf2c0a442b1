"""compile() for declared input-shape ranges: one compile per shape bucket, linked into one library with
one weights file, validated against ONNX Runtime at every bucket and at padded shapes."""
from __future__ import annotations

import dataclasses
import hashlib
import time
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import onnx

from .._version import __version__
from ..codegen import build_library
from ..codegen.llvm_types import itemsize as element_bytes
from ..errors import ShapeError
from ..frontend import import_onnx
from ..frontend.inspect import check_graph_sizes, onnx_node_names
from ..graph.ir import Graph
from ..graph.padding import NotPaddable, padded_output_axes
from ..graph.passes.manager import optimize
from ..lowering.bucketed import merge_buckets
from ..lowering.executable import build_executable
from ..report.schema import build_report
from ..runtime.header import render_header
from ..runtime.naming import ArtifactNames
from ..target import Target
from .artifact import WEIGHTS, Artifact, new_workdir, write_metadata
from .benchmark import compare_latency, profile_kernels
from .bucket_masks import MaskedBuckets, between_bucket_samples, find_masked
from .buckets import BucketPlan, plan_buckets
from .shape_ranges import check_ranges_supported
from .numerics import ValidationOptions
from .precision import judged_as, model_precision, store_weights
from .stages import ProgressFn, Stage
from .tolerance import origins_or_empty
from .validate import index_bounds, onnxruntime_session, random_inputs, validate as validate_against_ort

MAX_RANK = 16  # kiln_shaped.c's limit


def _io_info(graph: Graph, names) -> list[dict]:
    return [{"name": n, "shape": list(graph.type_of(n).shape), "dtype": graph.type_of(n).dtype} for n in names]


def find_padded(plan: BucketPlan, graphs: list[Graph]
                ) -> tuple[BucketPlan, dict[str, dict[str, list[int]]], dict[str, str]]:
    """The plan with the variables that may be zero-padded (core/graph/padding.py on every bucket's imported
    graph, the largest last); per padded variable the output axes it carries; per other variable why not."""
    padded, carried, refused = set(), {}, {}
    for var in plan.variables:
        if len(var.sizes) == 1 and var.range.lo == var.range.hi:
            continue
        seeds: dict[str, set[int]] = {}
        for name, axis in var.dims:
            seeds.setdefault(name, set()).add(axis)
        try:
            name, axis = var.dims[0]
            for graph in graphs:  # each bucket padded into (above lo) has its own folded shapes and indices
                if graph is graphs[-1] or graph.type_of(name).shape[axis] > var.range.lo:
                    outputs = padded_output_axes(graph, {n: frozenset(a) for n, a in seeds.items()})
        except NotPaddable as why:
            refused[var.name] = str(why)
            continue
        padded.add(var.name)
        carried[var.name] = {o: sorted(a) for o, a in outputs.items() if a}
    return replace(plan, padded=frozenset(padded)), carried, refused


def _user_inputs(graph: Graph, masks: MaskedBuckets) -> tuple[str, ...]:
    """The model's inputs (the graph's without the run-time lengths that follow them)."""
    return graph.inputs[:len(graph.inputs) - len(masks.length_variables)]


def _tables(plan: BucketPlan, graphs: list[Graph], carried: dict[str, dict[str, list[int]]],
            masks: MaskedBuckets) -> dict:
    """The dispatch tables of core/codegen/bucket_entry.py."""
    top, count = graphs[-1], len(plan.variables)
    inputs = _user_inputs(top, masks)
    in_var, in_fixed, in_coef, in_const, out_var, out_coef, out_const, out_shapes = [], [], [], [], [], [], [], []
    for name in inputs:
        for axis, size in enumerate(top.type_of(name).shape):
            var = plan.var_of(name, axis)
            variables, constant = plan.derived.get((name, axis), ((), 0))
            in_var.append(var if var is not None else -2 if variables else -1)  # -2: a sum of variables
            in_fixed.append(size)
            in_coef += [variables.count(k) for k in range(count)]
            in_const.append(constant)
    index = {v.name: k for k, v in enumerate(plan.variables)}
    for name in top.outputs:
        axes_var = {a: index[v] for v, outs in carried.items() for a in outs.get(name, [])}
        lengths = masks.outputs.get(name, {})
        for axis in range(len(top.type_of(name).shape)):
            coefs, constant = lengths.get(axis, ({}, 0))
            out_var.append(-2 if axis in lengths else axes_var.get(axis, -1))  # -2: its run-time length
            out_coef += [coefs.get(v.name, 0) for v in plan.variables]
            out_const.append(constant)
    for graph in graphs:
        out_shapes += [d for name in graph.outputs for d in graph.type_of(name).shape]
    itemsize = lambda n: element_bytes(top.type_of(n).dtype)  # noqa: E731
    return {
        "num_buckets": ("i32", len(plan.buckets)), "num_vars": ("i32", len(plan.variables)),
        "in_ndim": ("i32", tuple(len(top.type_of(n).shape) for n in inputs)),
        "out_ndim": ("i32", tuple(len(top.type_of(n).shape) for n in top.outputs)),
        "in_var": ("i32", tuple(in_var)), "in_fixed": ("i64", tuple(in_fixed)),
        "out_var": ("i32", tuple(out_var)), "out_shapes": ("i64", tuple(out_shapes)),
        "in_coef": ("i64", tuple(in_coef)), "in_const": ("i64", tuple(in_const)),
        "out_coef": ("i64", tuple(out_coef)), "out_const": ("i64", tuple(out_const)),
        "var_mode": ("i32", tuple(1 if v.name in plan.padded else 2 if v.name in plan.masked else 0
                                  for v in plan.variables)),
        "num_lengths": ("i32", len(masks.length_variables)), "length_var": ("i32", masks.length_variables),
        "var_lo": ("i64", tuple(v.range.lo for v in plan.variables)),
        "var_hi": ("i64", tuple(v.range.hi for v in plan.variables)),
        "bucket_sizes": ("i64", tuple(s for combo in plan.buckets for s in combo)),
        "in_itemsize": ("i32", tuple(itemsize(n) for n in inputs)),
        "out_itemsize": ("i32", tuple(itemsize(n) for n in top.outputs)),
        "in_names": ("str", tuple(inputs)), "var_names": ("str", tuple(v.name for v in plan.variables)),
    }


def _model_feeds(graph: Graph, inputs, gathered: dict[str, int]) -> dict[str, np.ndarray]:
    feeds = random_inputs(graph, 0, gathered)
    return {name: feeds[name] for name in inputs}


def compile_bucketed(source, data: bytes, plan: BucketPlan, tgt: Target, backend, names: ArtifactNames, *,
                     opt_level: int, tuning, checks: ValidationOptions, benchmark: bool, notify: ProgressFn,
                     threads: Optional[int], precision: Optional[str] = None) -> Artifact:
    """compile() of the model (`source`: a path, or `data`, its bytes) for every bucket of `plan`; `precision`
    as compile()'s (core/driver/precision.py), the same weights in every bucket."""
    check_ranges_supported(tgt, backend, validation_inputs=bool(checks.inputs), bisect=bool(checks.bisect))
    timings: dict[str, float] = {}

    @contextmanager
    def stage(step: Stage, what: str = ""):
        notify(step, step.start, what)
        start = time.perf_counter()
        yield
        timings[step.value] = round(timings.get(step.value, 0.0) + time.perf_counter() - start, 4)

    total_start = time.perf_counter()
    with stage(Stage.IMPORT):
        top = import_onnx(source, input_shapes=plan.input_shapes(len(plan.buckets) - 1))
        check_graph_sizes(top)  # the largest bucket: an absurd range fails before any other bucket is imported
        imported = [import_onnx(source, input_shapes=plan.input_shapes(b)) for b in range(len(plan.buckets) - 1)]
        imported.append(top)
        backend.check_ops((node.op for node in top.nodes), tgt)
        deep = [n for n in top.inputs + top.outputs if len(top.type_of(n).shape) > MAX_RANK]
        if deep:
            raise ShapeError(f"input-shape ranges support tensors of rank {MAX_RANK} at most; {deep} have more")
        plan, carried, refused = find_padded(plan, imported)
        masks = find_masked(plan, source, refused)
        plan, refused = masks.plan, dict(masks.refused)
        gathered = index_bounds(imported[-1])  # the ids each input indexes (masked graphs gather through masks)
        imported = list(masks.graphs) or imported
    nodes_in = len(top.nodes)
    graphs = []
    weights_precision = precision or model_precision(imported[-1])
    storage_dtypes = backend.weight_storage_dtypes(tgt)
    with stage(Stage.OPTIMIZE):
        graphs = [store_weights(optimize(g, opt_level, tgt), weights_precision, precision is not None, storage_dtypes,
                                tgt) for g in imported]
    tuning_report: dict[str, Any] = {"trials": 0, "time_s": 0.0, "cache_hits": 0, "tasks": []}
    schedules: list[Optional[Callable]] = [None] * len(graphs)
    tuned_kernels: set[str] = set()
    if tuning is not None:
        from ..tune import tune_graph

        with stage(Stage.TUNE):
            for b, graph in enumerate(graphs):
                outcome = tune_graph(graph, tgt, tuning)
                schedules[b] = outcome.schedule_for
                tuned_kernels |= {f"b{b}_{k}" for k in outcome.tuned_kernels}
                tuning_report["trials"] += outcome.report.get("trials", 0)
                tuning_report["time_s"] += outcome.report.get("time_s", 0.0)
                tuning_report["cache_hits"] += outcome.report.get("cache_hits", 0)
                tuning_report["tasks"] += outcome.report.get("tasks", [])
    else:
        timings["tune"] = 0.0
    workdir = new_workdir()
    with stage(Stage.BUILD):
        exes = [build_executable(g, tgt, schedule_for=s) for g, s in zip(graphs, schedules)]
        merged = merge_buckets(exes, _tables(plan, graphs, carried, masks),
                               hidden_inputs=len(masks.length_variables))
        build_library(list(merged.funcs), tgt, workdir / names.library,
                      plan=merged.plan if names.is_default else replace(merged.plan, export_prefix=names.prefix))
        (workdir / WEIGHTS).write_bytes(merged.weights)
    shapes = {**plan.describe(), "padded_outputs": carried, "not_padded": refused,
              "masked_outputs": {o: {a: {"variables": c, "constant": k} for a, (c, k) in axes.items()}
                                 for o, axes in masks.outputs.items()}}
    inputs = _user_inputs(graphs[-1], masks)
    metadata = {
        "format": "kiln-artifact", "version": 1, "compiler_version": __version__, "target": tgt.name,
        "target_triple": tgt.triple, "target_features": tgt.features, "opt_level": opt_level,
        "model_sha256": hashlib.sha256(data).hexdigest(), "inputs": _io_info(graphs[-1], inputs),
        "outputs": _io_info(graphs[-1], graphs[-1].outputs), "library": names.library, "weights": WEIGHTS,
        "header": names.header, "symbol_prefix": names.prefix, "weights_bytes": len(merged.weights),
        "arena_bytes": merged.plan.arena_bytes, "dynamic_shapes": shapes, "precision": weights_precision,
    }
    metadata.update(backend.runtime_metadata(tgt))
    write_metadata(workdir, metadata)
    (workdir / names.header).write_text(render_header(metadata))

    top_exe = dataclasses.replace(merged.buckets[-1], weights=merged.weights)
    cannot_run = backend.cannot_run_reason(tgt)
    validation: dict[str, Any] = {"skipped": cannot_run or "validation was not requested"}
    latency: dict[str, Any] = {"skipped": cannot_run or "the benchmark was not requested"}
    kernel_times: dict[str, float] = {}
    nthreads = threads or tgt.num_cores
    if cannot_run is None and (checks.enabled or benchmark):
        session = onnxruntime_session(data, nthreads)
        module = Artifact(workdir, metadata, {}, owns_directory=False).load()
        module.set_num_threads(nthreads)
        try:
            top_feeds = _model_feeds(graphs[-1], inputs, gathered)
            if checks.enabled:
                with stage(Stage.VALIDATE):
                    samples = [_model_feeds(g, inputs, gathered) for g in graphs[:-1]] + [top_feeds]
                    samples += between_bucket_samples(plan, top_feeds)
                    origins = {**origins_or_empty(data), **judged_as(weights_precision, precision is not None, {
                        n: graphs[-1].type_of(n).dtype for n in graphs[-1].outputs})}
                    comparison, _ = validate_against_ort(module, session, graphs[-1], samples=samples, origins=origins,
                                                         user_tolerance=checks.tolerance)
                    validation = checks.verdict(comparison, samples, "a shape-bucketed library is compared as a whole")
                    validation["shapes"] = [{n: list(a.shape) for n, a in s.items()} for s in samples]
            if benchmark:
                with stage(Stage.BENCHMARK):
                    latency = compare_latency(module, session, top_feeds, rounds=7).as_report()
                    latency["shapes"] = {n: list(a.shape) for n, a in top_feeds.items()}
                    profile = profile_kernels(module, top_exe, top_feeds)
                    kernel_times = profile.by_func
                    latency["kernel_breakdown"] = profile.breakdown(latency["kiln"])
        finally:
            module.close()
    notify(Stage.PACKAGE, Stage.PACKAGE.start, "")
    timings["total"] = round(time.perf_counter() - total_start, 4)
    report = build_report(metadata=metadata, target=tgt, opt_level=opt_level, nodes_in=nodes_in, exe=top_exe,
                          passes=list(backend.pass_names(opt_level)), kernel_times=kernel_times,
                          tuned_kernels=tuned_kernels, tuning=tuning_report, validation=validation, latency=latency,
                          timings=timings, threads=nthreads, onnx_nodes=onnx_node_names(data))
    report["dynamic_shapes"] = {**shapes, "kernels_compiled": len(merged.funcs),
                                "kernel_calls": sum(len(p.calls) for p in merged.plan.plans)}
    return Artifact(workdir, metadata, report)


def compile_ranges(model, data: bytes, input_shapes, tgt: Target, backend, names: ArtifactNames, *,
                   unsupported: dict, **options) -> Artifact:
    """compile() with ranged `input_shapes`: its bucket plan (ShapeError for bad ranges), then every bucket."""
    given = sorted(k for k, v in unsupported.items() if v)
    if given:
        raise ShapeError(f"input-shape ranges cannot be combined with {', '.join(given)} yet")
    plan = plan_buckets(onnx.load_from_string(data), input_shapes)
    source = model if isinstance(model, (str, Path)) else data
    return compile_bucketed(source, data, plan, tgt, backend, names, **options)


__all__ = ["compile_bucketed", "compile_ranges", "find_padded"]
