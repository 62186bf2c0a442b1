"""Kernel benchmark: default-schedule GFLOP/s of hot ops (resnet18 convs, matmuls) next to ONNX Runtime;
convs also in the blocked layout (Conv2dNCHWc, what -O3 compiles them to).

Run by hand, never from tests: `python bench/bench_default_schedules.py [--threads 2] [name ...]`.
Both sides get the same thread count; each number is the best median over a few rounds.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # core and tests.helpers from this checkout


@dataclass
class Workload:
    name: str
    op: str
    shapes: list[tuple[int, ...]]
    attrs: dict = field(default_factory=dict)
    onnx_attrs: dict = field(default_factory=dict)
    flops: int = 0


def _conv(name: str, c: int, hw: int, m: int, k: int, stride: int, pad: int, group: int = 1) -> Workload:
    out = (hw + 2 * pad - k) // stride + 1
    attrs = {"strides": (stride, stride), "pads": (pad,) * 4, "dilations": (1, 1), "group": group}
    onnx = {"strides": [stride] * 2, "pads": [pad] * 4, "group": group, "kernel_shape": [k, k]}
    return Workload(name, "Conv", [(1, c, hw, hw), (m, c // group, k, k), (m,)], attrs, onnx,
                    2 * m * (c // group) * k * k * out * out)


def _matmul(name: str, a: tuple[int, ...], b: tuple[int, ...]) -> Workload:
    return Workload(name, "MatMul", [a, b], flops=2 * int(np.prod(a)) * b[-1])


WORKLOADS = [
    _conv("resnet_stem_7x7s2", 3, 224, 64, 7, 2, 3),
    _conv("resnet_3x3_64x56", 64, 56, 64, 3, 1, 1),
    _conv("resnet_3x3s2_64to128", 64, 56, 128, 3, 2, 1),
    _conv("resnet_3x3_128x28", 128, 28, 128, 3, 1, 1),
    _conv("resnet_3x3_256x14", 256, 14, 256, 3, 1, 1),
    _conv("resnet_3x3_512x7", 512, 7, 512, 3, 1, 1),
    _conv("resnet_1x1s2_256to512", 256, 14, 512, 1, 2, 0),
    _conv("mobilenet_dw_3x3_144x56", 144, 56, 144, 3, 1, 1, group=144),
    _conv("mobilenet_dw_3x3s2_96x112", 96, 112, 96, 3, 2, 1, group=96),
    _conv("mobilenet_dw_3x3_960x7", 960, 7, 960, 3, 1, 1, group=960),
    _conv("regnet_grouped_3x3_104x28", 104, 28, 104, 3, 1, 1, group=13),  # 8 channels per group
    _conv("resnext_grouped_3x3_128x56", 128, 56, 128, 3, 1, 1, group=32),  # 4 per group: block-diagonal
    _conv("mobilenet_1x1_96to24x56", 96, 56, 24, 1, 1, 0),
    _conv("mobilenet_1x1_16to96x112", 16, 112, 96, 1, 1, 0),
    _conv("mobilenet_1x1_320to1280x7", 320, 7, 1280, 1, 1, 0),
    _conv("squeezenet_1x1_512to1000x13", 512, 13, 1000, 1, 1, 0),
    _matmul("matmul_512", (512, 512), (512, 512)),
    _matmul("bert_ffn_64x128x512", (1, 64, 128), (128, 512)),
    _matmul("bert_attn_2x64x64x64", (1, 2, 64, 64), (1, 2, 64, 64)),
]


def _ort_ms(w: Workload, arrays: list[np.ndarray], threads: int) -> Optional[float]:
    try:
        import onnxruntime as ort
        from onnx import helper
    except ImportError:  # pragma: no cover - onnxruntime is a dependency, but keep the tool usable
        return None
    names = [f"x{k}" for k in range(len(arrays))]
    node = helper.make_node(w.op, names, ["y"], **w.onnx_attrs)
    ins = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
           for n, a in zip(names, arrays)]
    graph = helper.make_graph([node], "bench", ins, [helper.make_tensor_value_info("y", 1, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")  # do not steal our cores later
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    feed = dict(zip(names, arrays))
    for _ in range(3):
        session.run(None, feed)
    best = float("inf")
    for _ in range(3):
        samples = []
        for _ in range(15):
            start = time.perf_counter()
            session.run(None, feed)
            samples.append((time.perf_counter() - start) * 1e3)
        best = min(best, float(np.median(samples)))
    return best


def _blocked_kernel(w: Workload, arrays: list[np.ndarray]):
    """The conv as -O3 compiles it: Conv2dNCHWc on blocked data with packed weights (None if it stays NCHW)."""
    from core.packing.blocked import block_for, expand_groups, grouped_blocking, pack_weights, to_blocked
    from core.graph.passes.alter_layout import MIN_BLOCK_SHARE
    from core.target import host_target
    from tests.helpers.kernel_runs import OpKernel

    if w.op != "Conv":
        return None
    x, weights, bias = arrays
    lanes, group = host_target().lanes("float32"), w.attrs["group"]  # OpKernel builds for the host
    depthwise = group > 1 and group == x.shape[1] == weights.shape[0]
    attrs = {k: w.attrs[k] for k in ("strides", "pads", "dilations")}
    if group > 1 and not depthwise:
        blocking = grouped_blocking(x.shape[1], weights.shape[0], group, lanes, -(-lanes // MIN_BLOCK_SHARE))
        if blocking is None:
            return None
        (ib, blocked_groups), ob = blocking, blocking[0]
        weights, attrs["group"] = expand_groups(weights, group, blocked_groups), blocked_groups
    else:
        ob = block_for(weights.shape[0], lanes)
        if ob * MIN_BLOCK_SHARE < lanes:
            return None
        ib = ob if depthwise else block_for(x.shape[1], lanes)
    return OpKernel(f"bench_{w.name}_nchwc", "Conv2dNCHWc",
                    [to_blocked(x, ib), pack_weights(weights, ib, ob, depthwise), bias.reshape(-1, ob)],
                    dict(attrs, depthwise=depthwise))


def _best_ms(kernel_run) -> float:
    kernel_run.run()
    return min(kernel_run.time_ms(repeat=15, number=3) for _ in range(3))


def run(names: list[str], threads: int) -> list[dict[str, Any]]:
    from tests.helpers.kernel_runs import OpKernel, build_kernels

    chosen = [w for w in WORKLOADS if not names or w.name in names]
    rng = np.random.default_rng(0)
    inputs = [[rng.standard_normal(s).astype(np.float32) for s in w.shapes] for w in chosen]
    kernels = [OpKernel(f"bench_{w.name}", w.op, arrs, w.attrs) for w, arrs in zip(chosen, inputs)]
    blocked = [_blocked_kernel(w, arrs) for w, arrs in zip(chosen, inputs)]
    runs = build_kernels(kernels + [k for k in blocked if k is not None])
    blocked_runs = iter(runs[len(kernels):])
    rows = []
    for w, arrs, kernel_run, nchwc in zip(chosen, inputs, runs, blocked):
        ms = _best_ms(kernel_run)
        nchwc_ms = _best_ms(next(blocked_runs)) if nchwc is not None else None
        ort_ms = _ort_ms(w, arrs, threads)
        rows.append({"name": w.name, "ms": ms, "gflops": w.flops / ms / 1e6, "ort_ms": ort_ms,
                     "nchwc_ms": nchwc_ms, "nchwc_gflops": w.flops / nchwc_ms / 1e6 if nchwc_ms else None,
                     "ort_gflops": w.flops / ort_ms / 1e6 if ort_ms else None})
    return rows


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help=f"workloads (default: all): {', '.join(w.name for w in WORKLOADS)}")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))  # before the first kernel starts libgomp
    print(f"{'workload':30s} {'kiln ms':>9s} {'GFLOP/s':>8s} {'NCHWc ms':>9s} {'GFLOP/s':>8s} "
          f"{'ort ms':>9s} {'GFLOP/s':>8s} {'ratio':>6s}")
    for r in run(args.names, args.threads):
        ort_ms, nchwc_ms = r["ort_ms"], r["nchwc_ms"]
        best = min(r["ms"], nchwc_ms or r["ms"])
        print(f"{r['name']:30s} {r['ms']:9.3f} {r['gflops']:8.1f} "
              + (f"{nchwc_ms:9.3f} {r['nchwc_gflops']:8.1f} " if nchwc_ms else f"{'-':>9s} {'-':>8s} ")
              + (f"{ort_ms:9.3f} {r['ort_gflops']:8.1f} {best / ort_ms:6.2f}" if ort_ms else "      n/a"))


if __name__ == "__main__":
    main()
