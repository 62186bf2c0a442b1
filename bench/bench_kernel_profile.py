"""Per kernel, Kiln's time against ONNX Runtime's nodes for the same ONNX nodes, grouped by conv kind.

    .venv/bin/python bench/bench_kernel_profile.py [-t x86-64-v3] [--threads 1] [--runs 40] MODEL.onnx ...

Both sides are timed inside runs of the whole model (Kiln: the runtime's per-call profile; ONNX Runtime:
its session profiler), medians per kernel; each Kiln kernel is matched to the ORT nodes named after the ONNX
nodes it fuses (ORT's fused and NCHWc nodes keep the first node's name, with a suffix). Conv kinds: `dwKsS`
(depthwise, kernel K, stride S), `pw` (1x1), `convKsS`; other kernels by their first ONNX op. Both profiles
are wall clock: on a busy machine run it more than once (the kinds' ratios held within ~5% here). Single-layer
models (bench_layers.py) can take other layouts than the same layer in a network (a lone depthwise conv stays NCHW), so
this is the profile that says which in-model kernels lose.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def node_kinds(model) -> dict[str, str]:
    """ONNX node name -> its kind (convs by depthwise / 1x1 / kernel and stride; others by op type)."""
    import onnx

    kinds = {}
    for node in model.graph.node:
        if node.op_type != "Conv":
            kinds[node.name] = node.op_type
            continue
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        k, s = attrs.get("kernel_shape", [0])[0], attrs.get("strides", [1])[0]
        kinds[node.name] = f"dw{k}s{s}" if attrs.get("group", 1) > 1 else ("pw" if k == 1 else f"conv{k}s{s}")
    return kinds


def ort_node_ms(path: str, feeds: dict, threads: int, runs: int) -> dict[str, float]:
    """ONNX Runtime's median time per node over `runs` profiled runs."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads, opts.enable_profiling = threads, 1, True
    opts.profile_file_prefix = os.path.join(tempfile.mkdtemp(prefix="kiln-ort-profile-"), "ort")
    session = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    for _ in range(runs):
        session.run(None, feeds)
    profile = Path(session.end_profiling())
    samples = collections.defaultdict(list)
    for event in json.loads(profile.read_text()):
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            samples[event["name"][: -len("_kernel_time")]].append(event["dur"] / 1000.0)
    profile.unlink()
    profile.parent.rmdir()
    return {name: float(np.median(v)) for name, v in samples.items()}


def kiln_kernel_ms(module, feeds: dict, runs: int) -> dict[str, float]:
    samples = collections.defaultdict(list)
    for _ in range(max(1, runs // 10)):
        for call in module.profile(repeat=10, feeds=feeds):
            samples[call["name"]].append(call["time_ms"])
    return {name: float(np.median(v)) for name, v in samples.items()}


def profile_model(path: str, target: str, threads: int, runs: int) -> None:
    import onnx

    import core
    from core.driver.validate import onnxruntime_session

    kinds = node_kinds(onnx.load(path))
    session = onnxruntime_session(Path(path).read_bytes(), threads)
    feeds = {i.name: np.random.default_rng(1).standard_normal([d if isinstance(d, int) else 1 for d in i.shape])
             .astype(np.float32) for i in session.get_inputs()}
    ort_ms = ort_node_ms(path, feeds, threads, runs)
    artifact = core.compile(path, target, 3, benchmark=False, threads=threads)
    with artifact.load() as module:
        module.set_num_threads(threads)
        kiln_ms = kiln_kernel_ms(module, feeds, runs)
    artifact.cleanup()
    matched: set[str] = set()
    by_kind = collections.defaultdict(lambda: [0.0, 0.0])
    rows = []
    for kernel in artifact.report["kernels"]:
        nodes = kernel["onnx_nodes"]
        kind = next((kinds[n] for n in nodes if kinds.get(n, "").startswith(("dw", "pw", "conv"))),
                    kinds.get(nodes[0], "other") if nodes else "layout")
        ort = 0.0
        for name in nodes:
            for ort_name, ms in ort_ms.items():
                if ort_name not in matched and ort_name.startswith(name):
                    ort += ms
                    matched.add(ort_name)
        ms = kiln_ms.get(kernel["name"], 0.0)
        by_kind[kind][0] += ms
        by_kind[kind][1] += ort
        rows.append((ms - ort, kernel["name"], kind, ms, ort, kernel["flops"]))
    rest = sum(ms for name, ms in ort_ms.items() if name not in matched)
    print(f"\n{Path(path).name}, {target}, {threads} thread(s), medians of {runs} profiled runs (wall clock):"
          f" Kiln kernels {sum(kiln_ms.values()):.2f} ms, ORT nodes {sum(ort_ms.values()):.2f} ms"
          f" ({rest:.2f} ms in ORT nodes of no Kiln kernel: its layout reorders)\n")
    print("| kind | Kiln ms | ORT ms | Kiln/ORT |\n|---|---:|---:|---:|")
    for kind, (kiln, ort) in sorted(by_kind.items(), key=lambda item: -item[1][0]):
        print(f"| {kind} | {kiln:.2f} | {ort:.2f} | {f'{kiln / ort:.2f}x' if ort else '-'} |")
    print("\n| kernel (most ms behind ORT) | kind | Kiln us | ORT us | Kiln GFLOP/s |\n|---|---|---:|---:|---:|")
    for _, name, kind, ms, ort, flops in sorted(rows, reverse=True)[:12]:
        print(f"| {name} | {kind} | {ms * 1000:.0f} | {ort * 1000:.0f} | {flops / ms / 1e6 if ms else 0:.1f} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+", help="ONNX files")
    parser.add_argument("-t", "--target", default="x86-64-v3")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--runs", type=int, default=40, help="profiled runs per side")
    args = parser.parse_args()
    for path in args.models:
        profile_model(path, args.target, args.threads, args.runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
