"""The model entry of a shape-bucketed library: one runner per bucket plus the dispatch tables that
core/runtime/kiln_shaped.c reads (it defines `kiln_graph_run`, which runs the selected bucket, and
`kiln_run_shaped`). `kiln_bucket_profile` profiles the largest bucket, the one `kiln_run` runs; every bucket has a
profiling runner for `kiln_profile_shaped`.

Tables (`kiln_dyn_NAME`, see kiln_shaped.c): int32 `num_buckets`, `num_vars`, `in_ndim[I]`, `out_ndim[O]`,
`in_var[sum in_ndim]` (the variable setting each input dim, -1 fixed, -2 a sum: `in_coef`, `in_const`),
`out_var[sum out_ndim]` (the padded variable an output dim follows, -1 none, -2 a run-time length: `out_coef`,
`out_const`), `var_mode[V]` (0 exact, 1 padded, 2 masked: run with a run-time length), `num_lengths`,
`length_var[L]` (the variable of each run-time length input, after the model's inputs), `in_itemsize[I]`,
`out_itemsize[O]`; int64 `in_fixed[sum in_ndim]` (the largest shape), `in_coef[sum in_ndim * V]`,
`in_const[sum in_ndim]`, `out_coef[sum out_ndim * V]`, `out_const[sum out_ndim]`, `var_lo[V]`, `var_hi[V]`,
`bucket_sizes[B*V]`, `out_shapes[B * sum out_ndim]`; strings `in_names[I]`, `var_names[V]`; `runners[B]`; and for
`kiln_profile_shaped`: `profilers[B]`, int32 `call_start[B+1]`, strings `call_names[calls of every bucket]`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional

from llvmlite import ir

from ..tir.stmt import PrimFunc
from .control_flow import emit_sub_runners
from .llvm_types import I32, I64, PTR
from .model_entry import ModelPlan, _cstring, _emit_runner, _global, emit_graph_globals, validate_plan

TABLE_TYPES = {"i32": I32, "i64": I64}


@dataclass(frozen=True)
class BucketedPlan:
    plans: tuple[ModelPlan, ...]  # per bucket, ascending; the last is the largest (what kiln_run runs)
    num_inputs: int
    num_outputs: int
    arena_bytes: int  # the largest bucket's
    weights_bytes: int  # one blob shared by every bucket
    tables: Mapping[str, tuple[str, tuple]] = field(default_factory=dict)  # name -> ("i32"|"i64"|"str", values)
    export_prefix: Optional[str] = None


def emit_bucketed_entry(module: ir.Module, plan: BucketedPlan, funcs: Mapping[str, PrimFunc],
                        kernels: Mapping[str, ir.Function]) -> None:
    for name in {call.func for p in plan.plans for call in p.calls}:
        if name in kernels:
            kernels[name].attributes.add("noinline")
    runners = []
    for b, bucket in enumerate(plan.plans):
        validate_plan(bucket, funcs)
        emit_sub_runners(module, bucket, lambda sub, name: _emit_runner(module, sub, kernels, funcs, False, name))
        runners.append(_emit_runner(module, bucket, kernels, funcs, profile=False, name=f"kiln_bucket_run_{b}"))
    top = plan.plans[-1]
    # a profiling runner per bucket (kiln_profile_shaped); the largest's is also kiln_profile's (kiln_shaped.c adds
    # the lengths)
    profilers = [_emit_runner(module, bucket, kernels, funcs, profile=True, name=f"kiln_bucket_profile_{b}")
                 for b, bucket in enumerate(plan.plans[:-1])]
    profilers.append(_emit_runner(module, top, kernels, funcs, profile=True, name="kiln_bucket_profile"))
    emit_graph_globals(module, plan, top.calls)
    _global(module, "kiln_dyn_runners", ir.Constant(ir.ArrayType(PTR, len(runners)), runners))
    _global(module, "kiln_dyn_profilers", ir.Constant(ir.ArrayType(PTR, len(profilers)), profilers))
    starts = [0]
    for bucket in plan.plans:
        starts.append(starts[-1] + len(bucket.calls))
    _global(module, "kiln_dyn_call_start", ir.Constant(ir.ArrayType(I32, len(starts)),
                                                       [ir.Constant(I32, n) for n in starts]))
    names = [_cstring(module, f"kiln.dyn.call_name.{b}.{i}", c.label or c.func)
             for b, bucket in enumerate(plan.plans) for i, c in enumerate(bucket.calls)]
    _global(module, "kiln_dyn_call_names", ir.Constant(ir.ArrayType(PTR, max(1, len(names))),
                                                       names or [ir.Constant(PTR, None)]))
    for name, (kind, values) in plan.tables.items():
        if kind == "str":
            items = [_cstring(module, f"kiln.dyn.{name}.{i}", str(v)) for i, v in enumerate(values)]
            _global(module, f"kiln_dyn_{name}", ir.Constant(ir.ArrayType(PTR, max(1, len(items))),
                                                            items or [ir.Constant(PTR, None)]))
        elif isinstance(values, tuple) and kind in TABLE_TYPES:
            typ = TABLE_TYPES[kind]
            items = [ir.Constant(typ, int(v)) for v in values] or [ir.Constant(typ, 0)]  # never a zero-length array
            _global(module, f"kiln_dyn_{name}", ir.Constant(ir.ArrayType(typ, len(items)), items))
        else:  # a scalar
            _global(module, f"kiln_dyn_{name}", ir.Constant(TABLE_TYPES[kind], int(values)))


__all__ = ["BucketedPlan", "emit_bucketed_entry"]
