"""3-D convs and pools: Kiln with the blocked layout NCDHW[x]c (alter_layout_3d) and without it (the same -O3
compile with that pass replaced by the identity), against ONNX Runtime: same inputs and threads, warm-up,
interleaved rounds, medians. Models: the r3d-style video ResNet and the 3-D U-Net of the tests (larger inputs),
MaxPool3d and AveragePool3d.

    .venv/bin/python bench/bench_conv3d.py [--threads 2] [--rounds 20] [--only r3d unet3d maxpool3d avgpool3d]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_models import interleaved  # noqa: E402
from tests.core.kernels.conv_nd_models import r3d_block_net, unet3d  # noqa: E402


def pool3d(op: str, shape=(1, 32, 16, 56, 56)):
    attrs = {"kernel_shape": [3, 3, 3], "strides": [2, 2, 2], "pads": [1] * 6}
    node = helper.make_node(op, ["x"], ["y"], **attrs)
    out = [shape[0], shape[1]] + [(s + 2 - 3) // 2 + 1 for s in shape[2:]]
    graph = helper.make_graph([node], op, [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


MODELS = {
    "r3d": lambda: r3d_block_net(shape=(1, 3, 8, 56, 56), width=32),
    "unet3d": lambda: unet3d(shape=(1, 2, 16, 48, 48), width=16),
    "maxpool3d": lambda: pool3d("MaxPool"),
    "avgpool3d": lambda: pool3d("AveragePool"),
}


def compile_model(path: Path, threads: int, blocked: bool):
    import core
    from core.graph.passes import registry

    saved = registry._PASSES["alter_layout_3d"]
    if not blocked:
        registry._PASSES["alter_layout_3d"] = lambda graph, **_: graph
    try:
        artifact = core.compile(path, opt_level=3, validate=True, benchmark=False, threads=threads)
    finally:
        registry._PASSES["alter_layout_3d"] = saved
    module = artifact.load()
    module.set_num_threads(threads)
    blocked_ops = ("ConvNDNCHWc", "PoolNDNCHWc")
    blocked_kernels = sum(any(op in k["ops"] for op in blocked_ops) for k in artifact.report["kernels"])
    return module, blocked_kernels


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--only", nargs="+", default=list(MODELS), choices=list(MODELS))
    args = parser.parse_args()
    from core.driver.validate import onnxruntime_session

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.only:
            model = MODELS[name]()
            path = Path(tmp) / f"{name}.onnx"
            path.write_bytes(model.SerializeToString())
            shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
            feeds = {"x": np.random.default_rng(7).standard_normal(shape).astype(np.float32)}
            session = onnxruntime_session(path.read_bytes(), args.threads)
            blocked, nb = compile_model(path, args.threads, True)
            plain = compile_model(path, args.threads, False)[0] if nb else None  # else the same compile
            modules = {"blocked": blocked, "plain": plain} if plain else {"blocked": blocked}
            ref = session.run(None, feeds)[0]
            err = max(float(np.max(np.abs(next(iter(m.run(feeds).values())) - ref))) for m in modules.values())
            runners = {k: (lambda m: lambda: m.run(feeds))(m) for k, m in modules.items()}
            times = interleaved(dict(runners, ort=lambda: session.run(None, feeds)), args.rounds)
            rows.append((name, times.get("plain", times["blocked"]), times["blocked"], times["ort"], nb, err))
            for module in modules.values():
                module.close()
    print(f"\n{args.threads} threads, median of {args.rounds} interleaved rounds (ORT, plain and blocked in the same "
          "rounds); ratio = Kiln ms / ORT ms; a model without NCDHW[x]c kernels compiles\n"
          "the same either way (plain = blocked, timed once)\n")
    print("| model | plain ms | blocked ms | ORT ms | plain/ORT | blocked/ORT | NCDHW[x]c kernels | max abs err |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, p, b, o, nb, err in rows:
        print(f"| {name} | {p:.3f} | {b:.3f} | {o:.3f} | {p / o:.2f}x | {b / o:.2f}x | {nb} | {err:.1e} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
