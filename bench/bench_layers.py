"""Single layers of the models that lose on AVX2 (depthwise and pointwise convs at mobilenet shapes, dilated
ASPP convs, a bilinear segmentation head, a classifier's GEMV), each a small ONNX model built here, compiled
by Kiln and timed against ONNX Runtime in the same process: interleaved rounds, medians, every layer
validated first. Each model includes its layout transforms, as a layer on its own needs them (ORT's too).

    .venv/bin/python bench/bench_layers.py [-t x86-64-v3] [--threads 1 --cpu-time] [--rounds 11] [NAME ...]

On a busy machine, `--threads 1 --cpu-time` times the calling thread's CPU time (neighbours' preemption adds
nothing to it; both runtimes run a one-thread model on the caller).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def _model(nodes, inits, x_shape, y_shape):
    from onnx import TensorProto, helper

    graph = helper.make_graph(nodes, "layer", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def conv(ic: int, oc: int, hw: int, k: int = 1, stride: int = 1, group: int = 1, dilation: int = 1,
         clip: bool = True, upsample: int = 0) -> tuple[bytes, float]:
    """Conv (+ Clip(0, 6), + a bilinear `upsample`x Resize): the model and its conv's FLOPs."""
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(0)
    pad = dilation * (k - 1) // 2
    out = (hw + 2 * pad - dilation * (k - 1) - 1) // stride + 1
    inits = [numpy_helper.from_array((rng.standard_normal((oc, ic // group, k, k)) * 0.1).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(oc).astype(np.float32), "b")]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[k, k], strides=[stride] * 2,
                              pads=[pad] * 4, group=group, dilations=[dilation] * 2)]
    last = "c"
    if clip:
        inits += [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in (("lo", 0), ("hi", 6))]
        nodes.append(helper.make_node("Clip", [last, "lo", "hi"], ["clipped"]))
        last = "clipped"
    if upsample:
        inits.append(numpy_helper.from_array(np.array([1, 1, upsample, upsample], np.float32), "scales"))
        nodes.append(helper.make_node("Resize", [last, "", "scales"], ["up"], mode="linear",
                                      coordinate_transformation_mode="half_pixel"))
        last, out = "up", out * upsample
    nodes.append(helper.make_node("Identity", [last], ["y"]))
    flops = 2.0 * oc * (ic // group) * k * k * ((out // max(upsample, 1)) ** 2)
    return _model(nodes, inits, [1, ic, hw, hw], [1, oc, out, out]), flops


def gemv(k: int, n: int, m: int = 1) -> tuple[bytes, float]:
    """A classifier or a decoder step: [m, k] @ constant [k, n] + bias (MatMul + Add, as torch exports Linear)."""
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((k, n)).astype(np.float32) * 0.05, "w"),
             numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), "b")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["y"])]
    return _model(nodes, inits, [m, k], [m, n]), 2.0 * m * k * n


LAYERS = {
    "pw_16x96_112": lambda: conv(16, 96, 112),  # mobilenet_v2's expansions: short reductions, large maps
    "pw_24x144_56": lambda: conv(24, 144, 56),
    "pw_96x576_14": lambda: conv(96, 576, 14),
    "pw_320x1280_7": lambda: conv(320, 1280, 7),  # its last conv: 7 columns
    "dw_32_112": lambda: conv(32, 32, 112, 3, group=32),
    "dw_96_112_s2": lambda: conv(96, 96, 112, 3, stride=2, group=96),
    "dw_144_56": lambda: conv(144, 144, 56, 3, group=144),
    "dw_576_14": lambda: conv(576, 576, 14, 3, group=576),
    "conv3_128_65": lambda: conv(128, 128, 65, 3, clip=False),
    "aspp_d12_128_65": lambda: conv(128, 128, 65, 3, dilation=12, clip=False),  # DeepLabV3's atrous branches
    "aspp_d24_128_65": lambda: conv(128, 128, 65, 3, dilation=24, clip=False),
    "head_up4_64_28": lambda: conv(64, 64, 28, 3, clip=False, upsample=4),  # conv + 4x bilinear to the output
    "gemv_1280x1000": lambda: gemv(1280, 1000),  # mobilenet_v2's classifier
    "gemv_512x1000": lambda: gemv(512, 1000),  # resnet18's classifier
    "gemv_768x768": lambda: gemv(768, 768),  # GPT-2's attention projection at one token
    "gemv_768x2304": lambda: gemv(768, 2304),  # ... its fused q, k, v
    "gemv_768x3072": lambda: gemv(768, 3072),  # a decoder step's feed-forward
    "gemv_3072x768": lambda: gemv(3072, 768),  # ... and back
    "gemv_128x512": lambda: gemv(128, 512),  # bert_tiny's feed-forward at one token
    "gemm_2x768x3072": lambda: gemv(768, 3072, 2),  # decoder steps of batch 2 and 4
    "gemm_4x768x3072": lambda: gemv(768, 3072, 4),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help=f"layers (default: all of {list(LAYERS)})")
    parser.add_argument("-t", "--target", default="native")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--cpu-time", action="store_true", help="the calling thread's CPU time (use with --threads 1)")
    args = parser.parse_args()

    import core
    from bench_models import interleaved
    from core.driver.validate import onnxruntime_session

    names = args.names or list(LAYERS)
    unknown = [n for n in names if n not in LAYERS]
    if unknown:
        parser.error(f"unknown layers {unknown}; known: {list(LAYERS)}")
    clock = time.thread_time if args.cpu_time else time.perf_counter
    rows = []
    for name in names:
        data, flops = LAYERS[name]()
        module = core.compile(data, args.target, 3, benchmark=False, threads=args.threads).load()
        module.set_num_threads(args.threads)
        session = onnxruntime_session(data, args.threads)
        feeds = {"x": np.random.default_rng(1).standard_normal(session.get_inputs()[0].shape).astype(np.float32)}
        expected, got = session.run(["y"], feeds)[0], module.run(feeds)["y"]
        err = float(np.abs(expected - got).max())
        times = interleaved({"kiln": lambda: module.run(feeds), "ort": lambda: session.run(["y"], feeds)},
                            args.rounds, settle_s=0.05, clock=clock)
        module.close()
        rows.append((name, times["kiln"], times["ort"], flops, err))
        print(f"  {name}: kiln {times['kiln']:.3f} ms, onnxruntime {times['ort']:.3f} ms", file=sys.stderr)
    what = "CPU time of the calling thread" if args.cpu_time else "wall clock"
    print(f"\ntarget {args.target}, {args.threads} threads, median of {args.rounds} interleaved rounds, {what}\n")
    print("| layer | Kiln ms | ORT ms | Kiln/ORT | Kiln GFLOP/s | max abs err |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, kiln, ort, flops, err in rows:
        print(f"| {name} | {kiln:.3f} | {ort:.3f} | {kiln / ort:.2f}x | {flops / kiln / 1e6:.1f} | {err:.1e} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
