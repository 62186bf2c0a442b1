"""One library for several shape buckets: their executables' kernels deduplicated across buckets, their
weights stored once by content, one arena sized for the largest bucket."""
from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from typing import Sequence

from ..codegen.bucket_entry import BucketedPlan
from ..codegen.model_entry import BufferRef, ModelPlan
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


def _renamed(exe: Executable, prefix: str) -> Executable:
    """The executable with every function and kernel named PREFIX_NAME (kernel names repeat across buckets)."""
    funcs = tuple(dataclasses.replace(f, name=f"{prefix}_{f.name}") for f in exe.funcs)
    calls = tuple(dataclasses.replace(c, func=f"{prefix}_{c.func}", label=f"{prefix}_{c.label or c.func}")
                  for c in exe.plan.calls)
    kernels = tuple(dataclasses.replace(k, name=f"{prefix}_{k.name}", func=f"{prefix}_{k.func}") for k in exe.kernels)
    return dataclasses.replace(exe, funcs=funcs, kernels=kernels, plan=dataclasses.replace(exe.plan, calls=calls))


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
            params = funcs_by_name[call.func].params
            args = tuple(BufferRef("weight", offset=place(exe.weights[r.offset:r.offset + p.nbytes]))
                         if r.kind == "weight" else r for r, p in zip(call.args, params))
            calls.append(dataclasses.replace(call, func=alias[call.func], args=args))
        plans.append(dataclasses.replace(exe.plan, calls=tuple(calls)))
    plans = [dataclasses.replace(p, weights_bytes=len(blob)) for p in plans]
    renamed = [dataclasses.replace(exe, kernels=tuple(dataclasses.replace(k, func=alias[k.func]) for k in exe.kernels))
               for exe in renamed]
    arena = max(p.arena_bytes for p in plans)
    top: ModelPlan = plans[-1]
    plan = BucketedPlan(tuple(plans), top.num_inputs - hidden_inputs, top.num_outputs, arena, len(blob), tables=tables)
    return BucketedExecutable(tuple(unique), plan, bytes(blob), tuple(renamed))


__all__ = ["BucketedExecutable", "merge_buckets"]
