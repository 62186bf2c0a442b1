"""Kiln's cuda artifacts against PyTorch on the same GPU: torchvision resnet18 / resnet50 / mobilenet_v2 and a
BERT-base encoder (12 post-LayerNorm layers, 768 wide, 12 heads, 3072 hidden, sequence 128, float input), exported to ONNX here, at batch 1 and 32, in
float32 and float16 (the model itself in half precision: float16 end to end). Optionally the GEMM table against
cuBLAS first (bench_gpu_gemm.py). ONNX Runtime's CUDA provider is timed too when onnxruntime-gpu is installed.

    python bench/bench_gpu.py [--runs resnet50:fp16:32 resnet18:fp32+fp16:32 ...] [-t "cuda -arch=sm_90"] [--rounds 20]
                              [--gemm] [--json OUT.json] [--budget-s 300]

Columns: Kiln host (kiln_run with host arrays in and out, as `Module.run`), Kiln kernels (the sum of its kernels'
device times, kiln_profile), Kiln device (Module.run_device on torch's device tensors: the model as one CUDA graph,
CUDA-event time: the throughput comparison with PyTorch's CUDA graph), PyTorch eager with host arrays in and out (the batch-1 comparison), PyTorch with a
CUDA graph on device-resident data (channels_last for the convnets; cuDNN / cuBLAS: the throughput comparison).
PyTorch runs in strict float32 (TF32 off: the arithmetic Kiln's float32 kernels do); a float32 model's CUDA graph is
timed with TF32 too (torch's default for cuDNN convs), in its own column.
Errors are Kiln's against PyTorch's output, relative to its largest magnitude.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_gpu_gemm import torch_ms  # noqa: E402

CONVNETS = ("resnet18", "resnet50", "mobilenet_v2")
DEFAULT_RUNS = ["bert_base:fp16:32", "resnet50:fp16:32", "resnet18:fp32:32", "mobilenet_v2:fp32:32",
                "resnet18:fp32:1", "resnet50:fp16:1", "bert_base:fp32:1", "mobilenet_v2:fp16:32",
                "resnet50:fp32:32", "resnet18:fp16:32", "bert_base:fp16:1", "mobilenet_v2:fp32:1"]


def torch_model(name: str):
    """(module, input shape without the batch) of a randomly initialized model in eval mode."""
    import torch
    import torchvision

    torch.manual_seed(0)
    if name in CONVNETS:
        return getattr(torchvision.models, name)(weights=None).eval(), (3, 224, 224)
    if name == "bert_base":
        return torch.nn.Sequential(*(_bert_layer() for _ in range(12))).eval(), (128, 768)
    raise SystemExit(f"unknown model {name!r}: one of {', '.join(CONVNETS + ('bert_base',))}")


def _bert_layer(width: int = 768, heads: int = 12, hidden: int = 3072):
    """One post-LayerNorm BERT encoder layer written out (no fused fast path for the exporter to meet)."""
    import torch
    from torch import nn

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv, self.out = nn.Linear(width, 3 * width), nn.Linear(width, width)
            self.up, self.down = nn.Linear(width, hidden), nn.Linear(hidden, width)
            self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)

        def forward(self, x):
            batch, seq, _ = x.shape
            q, k, v = self.qkv(x).reshape(batch, seq, 3, heads, width // heads).permute(2, 0, 3, 1, 4)
            attention = torch.softmax(q @ k.transpose(-1, -2) * (width // heads) ** -0.5, dim=-1) @ v
            x = self.norm1(x + self.out(attention.transpose(1, 2).reshape(batch, seq, width)))
            return self.norm2(x + self.down(nn.functional.gelu(self.up(x))))

    return Layer()


def export(model, example, path: Path) -> bytes:
    import torch

    kwargs = dict(input_names=["input"], output_names=["output"], opset_version=17)
    try:
        torch.onnx.export(model, (example,), str(path), dynamo=False, **kwargs)
    except TypeError:  # a torch without the dynamo switch
        torch.onnx.export(model, (example,), str(path), **kwargs)
    return path.read_bytes()


def wall_ms(fn, repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(samples)


def set_tf32(on: bool) -> None:
    """TF32 for float32 convs and matmuls (torch's default: on for cuDNN convs, off for matmuls)."""
    import torch

    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = on


def torch_times(model, x: np.ndarray, conv: bool, rounds: int) -> tuple[float, float, float | None, np.ndarray]:
    """(eager ms with host arrays in and out, CUDA-graph ms on device data, both in strict float32 as Kiln
    computes; for a float32 model the CUDA-graph ms with TF32 as well (None for float16); the output)."""
    import torch

    set_tf32(False)
    with torch.inference_mode():
        host = lambda: model(torch.from_numpy(x).cuda()).cpu()  # noqa: E731
        for _ in range(3):
            out = host()
        eager = wall_ms(host, rounds)
        graphed = graph_ms(model, x, conv, rounds)
        tf32 = None
        if x.dtype == np.float32:
            set_tf32(True)
            tf32 = graph_ms(model, x, conv, rounds)
            set_tf32(False)
    return eager, graphed, tf32, out.float().numpy()


def graph_ms(model, x: np.ndarray, conv: bool, rounds: int) -> float:
    """CUDA-event ms of the model captured as one CUDA graph on device-resident data (channels_last convnets)."""
    import torch

    with torch.inference_mode():
        fmt = torch.channels_last if conv else torch.contiguous_format
        graph_model = model.to(memory_format=fmt) if conv else model
        static_x = torch.from_numpy(x).cuda().contiguous(memory_format=fmt)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                graph_model(static_x)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            graph_model(static_x)
        for _ in range(3):
            graph.replay()
        return torch_ms(graph.replay, rounds, warmup=0)


def ort_cuda_ms(model_bytes: bytes, x: np.ndarray, rounds: int) -> float | None:
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return None
    session = ort.InferenceSession(model_bytes, providers=["CUDAExecutionProvider"])
    run = lambda: session.run(None, {"input": x})  # noqa: E731
    for _ in range(3):
        run()
    return wall_ms(run, rounds)


def bench_one(spec: str, target: str, rounds: int, folder: Path) -> dict:
    import torch

    import core

    name, precision, batch = spec.split(":")
    precision, _, kiln_precision = precision.partition("+")  # fp32+fp16: the float32 model at --precision fp16
    batch = int(batch)
    model, shape = torch_model(name)
    dtype = torch.float16 if precision == "fp16" else torch.float32
    model = model.to("cuda", dtype)
    x = np.random.default_rng(0).standard_normal((batch, *shape)).astype(np.float32)
    x = x.astype(np.float16) if precision == "fp16" else x
    with torch.no_grad():
        model_bytes = export(model, torch.from_numpy(x).cuda(), folder / f"{name}_{precision}_{batch}.onnx")
    eager, graphed, graphed_tf32, want = torch_times(model, x, name in CONVNETS, rounds)
    start = time.perf_counter()
    artifact = core.compile(model_bytes, target=target, validate=False, benchmark=False,
                            precision=kiln_precision or None)
    compile_s = time.perf_counter() - start
    module = artifact.load()
    got = np.asarray(list(module.run({"input": x}).values())[0]).astype(np.float32)
    err = float(np.max(np.abs(got - want)) / max(1e-6, float(np.max(np.abs(want)))))
    host = module.benchmark(repeat=rounds, warmup=3, feeds={"input": x})["median_ms"]
    profile = module.profile(repeat=5, feeds={"input": x})
    kernels = sum(c["time_ms"] for c in profile)
    top = sorted(profile, key=lambda c: -c["time_ms"])[:5]
    device, device_err = device_ms(module, x, want, rounds)
    module.close()
    label = precision + (f"+{kiln_precision}" if kiln_precision else "")
    return {"model": name, "precision": label, "batch": batch, "kiln_host_ms": host, "kiln_kernels_ms": kernels,
            "kiln_device_ms": device, "device_max_rel_err": device_err,
            "torch_eager_host_ms": eager, "torch_cuda_graph_ms": graphed, "torch_cuda_graph_tf32_ms": graphed_tf32,
            "ort_cuda_ms": ort_cuda_ms(model_bytes, x, rounds),
            "compile_s": compile_s, "max_rel_err": err, "top_kernels": [(c["name"], c["time_ms"]) for c in top]}


def device_ms(module, x: np.ndarray, want: np.ndarray, rounds: int) -> tuple[float, float]:
    """(CUDA-event ms of Module.run_device on device-resident torch tensors, its max relative error)."""
    import torch

    feeds = {"input": torch.from_numpy(x).cuda()}
    outs = {o["name"]: torch.empty(o["shape"], dtype=getattr(torch, o["dtype"]), device="cuda") for o in module.outputs}
    run = lambda: module.run_device(feeds, outs, torch.cuda.current_stream().cuda_stream)  # noqa: E731
    run()
    torch.cuda.synchronize()
    got = next(iter(outs.values())).float().cpu().numpy()
    return torch_ms(run, rounds), float(np.max(np.abs(got - want)) / max(1e-6, float(np.max(np.abs(want)))))


def print_rows(rows, target: str) -> None:
    import torch

    print(f"\nModels, {target}, {torch.cuda.get_device_name()}, torch {torch.__version__}; medians\n")
    print("| model | precision | batch | Kiln host ms | Kiln kernels ms | Kiln device ms | torch eager (host) ms | "
          "torch CUDA graph ms | torch graph TF32 ms | Kiln host / eager | Kiln device / graph | ORT CUDA ms | compile s | "
          "max rel err |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        if "error" in r:
            print(f"| {r['spec']} | failed: {r['error'][:150]} |")
            continue
        ort = f"{r['ort_cuda_ms']:.3f}" if r["ort_cuda_ms"] else "-"
        tf32 = f"{r['torch_cuda_graph_tf32_ms']:.3f}" if r.get("torch_cuda_graph_tf32_ms") else "-"
        print(f"| {r['model']} | {r['precision']} | {r['batch']} | {r['kiln_host_ms']:.3f} | {r['kiln_kernels_ms']:.3f} | "
              f"{r['kiln_device_ms']:.3f} | {r['torch_eager_host_ms']:.3f} | {r['torch_cuda_graph_ms']:.3f} | {tf32} | "
              f"{r['kiln_host_ms'] / r['torch_eager_host_ms']:.2f}x | {r['kiln_device_ms'] / r['torch_cuda_graph_ms']:.2f}x | "
              f"{ort} | {r['compile_s']:.1f} | {max(r['max_rel_err'], r['device_max_rel_err']):.1e} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", nargs="+", default=DEFAULT_RUNS,
                        help="MODEL:fp32|fp16|fp32+fp16|fp32+bf16:BATCH, in order (+: Kiln's --precision)")
    parser.add_argument("-t", "--target", default="cuda -arch=sm_90")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--gemm", action="store_true", help="the GEMM table against cuBLAS first")
    parser.add_argument("--json", type=Path, help="write the rows here (after each run)")
    parser.add_argument("--budget-s", type=float, default=float("inf"), help="start no model run after this long")
    args = parser.parse_args()
    began = time.perf_counter()
    results: dict = {"target": args.target}
    if args.gemm:
        import bench_gpu_gemm

        results["gemm"] = bench_gpu_gemm.run([1024, 2048, 4096, 8192], ["fp16", "bf16", "fp32"], args.target)
        bench_gpu_gemm.print_table(results["gemm"], args.target)
    rows = results["models"] = []
    folder = Path(tempfile.mkdtemp(prefix="kiln-bench-gpu-"))
    for spec in args.runs:
        if time.perf_counter() - began > args.budget_s:
            print(f"  budget spent: {spec} and later runs skipped", file=sys.stderr)
            break
        try:
            rows.append(bench_one(spec, args.target, args.rounds, folder))
        except Exception as e:  # one model's failure must not lose the others' numbers
            rows.append({"spec": spec, "error": f"{type(e).__name__}: {e}"})
        print(f"  {spec}: {json.dumps(rows[-1])}", file=sys.stderr, flush=True)
        if args.json:
            args.json.write_text(json.dumps(results, indent=1))
    print_rows(rows, args.target)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
