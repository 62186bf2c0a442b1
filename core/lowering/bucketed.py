"""One library for several shape buckets: their executables' kernels deduplicated across buckets, their
weights stored once by content, one arena sized for the largest bucket. Run-time If/Loop calls come along: their
branches' and bodies' plans renamed per bucket, and each one's weights placed as one block."""
from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from typing import Callable, Sequence

from ..codegen.bucket_entry import BucketedPlan
from ..codegen.control_flow import IfCall, LoopCall, SubCall
from ..codegen.model_entry import BufferRef, KernelCall, ModelPlan
from ..tir.stmt import PrimFunc
from .executable import Executable
from ..tir.kernel_dedup import share_identical
from .memory import align


@dataclass(frozen=True)
class BucketedExecutable:
    funcs: tuple[PrimFunc, ...]  # distinct compiled functions of every bucket
    plan: BucketedPlan
    weights: bytes
    buckets: tuple[Executable, ...]  # each bucket's own executable (kernels, memory plan), renamed


def _with_subs(call, change: Callable[[SubCall], SubCall]):
    """A control call with each branch or body changed (a kernel call as it is)."""
    if isinstance(call, IfCall):
        return dataclasses.replace(call, branches=tuple(None if s is None else change(s) for s in call.branches))
    if isinstance(call, LoopCall):
        return dataclasses.replace(call, body=change(call.body))
    return call


def _kernels_renamed(plan: ModelPlan, name: Callable[[str], str]) -> ModelPlan:
    """`plan` with every kernel call's function, in branches and bodies too, named name(func)."""
    return dataclasses.replace(plan, calls=tuple(
        dataclasses.replace(c, func=name(c.func)) if isinstance(c, KernelCall) else
        _with_subs(c, lambda sub: dataclasses.replace(sub, plan=_kernels_renamed(sub.plan, name))) for c in plan.calls))


def _renamed(exe: Executable, prefix: str) -> Executable:
    """The executable with every function, kernel and control-flow runner named PREFIX_NAME (they repeat across
    buckets)."""
    funcs = tuple(dataclasses.replace(f, name=f"{prefix}_{f.name}") for f in exe.funcs)

    def runners(plan: ModelPlan) -> ModelPlan:
        return dataclasses.replace(plan, calls=tuple(_with_subs(c, lambda sub: dataclasses.replace(
            sub, runner=f"{prefix}_{sub.runner}", plan=runners(sub.plan))) for c in plan.calls))

    plan = runners(_kernels_renamed(exe.plan, lambda func: f"{prefix}_{func}"))
    plan = dataclasses.replace(plan, calls=tuple(dataclasses.replace(c, label=f"{prefix}_{c.label or c.func}")
                                                 for c in plan.calls))
    kernels = tuple(dataclasses.replace(k, name=f"{prefix}_{k.name}", func=f"{prefix}_{k.func}") for k in exe.kernels)
    return dataclasses.replace(exe, funcs=funcs, kernels=kernels, plan=plan)


def merge_buckets(executables: Sequence[Executable], tables: dict, hidden_inputs: int = 0) -> BucketedExecutable:
    """`executables` in bucket order; `tables` the dispatch data of BucketedPlan (core/codegen/bucket_entry.py);
    the last `hidden_inputs` inputs of each bucket are the run-time lengths its dispatcher passes."""
    renamed = [_renamed(exe, f"b{i}") for i, exe in enumerate(executables)]
    funcs_by_name = {f.name: f for exe in renamed for f in exe.funcs}
    unique, called = share_identical(list(funcs_by_name.values()))
    alias = dict(zip(funcs_by_name, called))

    blob = bytearray()
    placed: dict[bytes, int] = {}  # sha256 of a weight's bytes -> its offset in the shared blob

    def place(data: bytes) -> int:
        key = hashlib.sha256(data).digest()
        if key not in placed:
            blob.extend(b"\0" * (align(len(blob)) - len(blob)))
            placed[key] = len(blob)
            blob.extend(data)
        return placed[key]

    plans = []
    for exe in renamed:
        calls = []
        for call in exe.plan.calls:
            if not isinstance(call, KernelCall):  # a branch's or body's weights: one block, its offsets kept
                calls.append(_with_subs(call, lambda sub, w=exe.weights: dataclasses.replace(sub, weights_offset=place(
                    w[sub.weights_offset:sub.weights_offset + sub.plan.weights_bytes]))))
                continue
            params = funcs_by_name[call.func].params
            args = tuple(BufferRef("weight", offset=place(exe.weights[r.offset:r.offset + p.nbytes]))
                         if r.kind == "weight" else r for r, p in zip(call.args, params))
            calls.append(dataclasses.replace(call, args=args))
        plans.append(_kernels_renamed(dataclasses.replace(exe.plan, calls=tuple(calls)), alias.__getitem__))
    plans = [dataclasses.replace(p, weights_bytes=len(blob)) for p in plans]
    renamed = [dataclasses.replace(exe, kernels=tuple(dataclasses.replace(k, func=alias.get(k.func, k.func)) for k in exe.kernels))
               for exe in renamed]
    arena = max(p.arena_bytes for p in plans)
    top: ModelPlan = plans[-1]
    plan = BucketedPlan(tuple(plans), top.num_inputs - hidden_inputs, top.num_outputs, arena, len(blob), tables=tables)
    return BucketedExecutable(tuple(unique), plan, bytes(blob), tuple(renamed))


__all__ = ["BucketedExecutable", "merge_buckets"]
