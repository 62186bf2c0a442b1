"""GPU schedule of elementwise and data-movement ops: every output axis fused into one loop, a thread
per element (consecutive threads, consecutive addresses), blocks of DEFAULT_THREADS threads."""
from __future__ import annotations

from typing import Optional, Sequence

from ....target import Target
from ....te.schedule import Schedule, Stage
from ....te.tensor import Tensor
from .launch import bind_flat, inline_intermediates, is_scheduled, output_stages, reject_extern, threads_of
from .reduce import attach_reductions


def injective_stage(sch: Schedule, stage: Stage, target: Target, threads: Optional[int] = None,
                    outs: Sequence[Tensor] = ()) -> None:
    """Bind the stage's whole index space to blocks x threads; stages it reads that are not inlined
    (an op's own intermediates) are inlined, or computed per thread when they reduce."""
    inline_intermediates(sch, stage, outs)
    count = 1
    for iv in stage.leaf_iter_vars:
        count *= iv.extent
    threads = threads or min(threads_of(target), max(32, 1 << max(0, (count - 1).bit_length())))
    bind_flat(stage, list(stage.leaf_iter_vars), threads)
    thread_loop = next(iv for iv, tag in stage.bindings.items() if tag == "threadIdx.x")
    attach_reductions(sch, stage, thread_loop, target, "local")


def schedule_injective(sch: Schedule, outs: Sequence[Tensor], target: Target, threads: Optional[int] = None) -> None:
    """`threads` (a knob): threads per block."""
    reject_extern(sch, target)
    for stage in output_stages(sch, outs):
        if not is_scheduled(stage):
            injective_stage(sch, stage, target, threads, outs)
