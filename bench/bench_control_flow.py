"""Run-time control flow against ONNX Runtime: a greedy decoder loop (growing tokens, early exit), a long plain
loop (the entry's per-iteration cost) and an If whose branches differ in shape, timed interleaved in one process.

    .venv/bin/python bench/bench_control_flow.py [--rounds 15] [--threads 1] [-t x86-64-v3]
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_models import interleaved  # noqa: E402


def cases() -> dict:
    """name -> (model bytes, feeds, compile options)."""
    from onnx import helper

    from tests.core.frontend.test_frontend_control_flow_runtime import (BOOL, F32, I64, _greedy_decoder, _if_model,
                                                                          _model, _value)

    body = helper.make_graph([helper.make_node("Add", ["acc", "w"], ["acc2"]), helper.make_node("Identity", ["c"], ["c2"])],
                             "body", [_value("i", I64, []), _value("c", BOOL, []), _value("acc", F32, [2, 2])],
                             [_value("c2", BOOL, []), _value("acc2", F32, [2, 2])])
    plain = _model([helper.make_node("Loop", ["M", "", "acc0"], ["final"], body=body)],
                   [_value("M", I64, []), _value("acc0", F32, [2, 2]), _value("w", F32, [2, 2])],
                   [_value("final", F32, [2, 2])])
    x = np.abs(np.random.default_rng(0).standard_normal((2, 3))).astype(np.float32)
    return {
        "greedy decoder, 64 steps": (_greedy_decoder(), {"start": np.array([[5]], np.int64), "M": np.array(64, np.int64),
                                                         "eos": np.array(99, np.int64)}, {"max_trip_count": 64}),
        "plain loop, 10000 steps": (plain, {"M": np.array(10000, np.int64), "acc0": np.zeros((2, 2), np.float32),
                                            "w": np.ones((2, 2), np.float32)}, {}),
        "If, then branch": (_if_model(), {"x": x}, {}),
        "If, else branch": (_if_model(), {"x": -x}, {}),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-t", "--target", default="native")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    import onnxruntime as ort

    ort.set_default_logger_severity(3)  # the If output shape warnings (the model declares rank 1)

    import core

    print(f"load {os.getloadavg()[0]:.2f}, {args.threads} thread(s), {args.rounds} interleaved rounds, medians")
    print(f"{'case':<28} {'kiln ms':>10} {'ort ms':>10} {'ratio':>7}")
    for name, (model, feeds, options) in cases().items():
        module = core.compile(model, args.target, validate=False, benchmark=False, threads=args.threads,
                              **options).load()
        so = ort.SessionOptions()
        so.intra_op_num_threads = so.inter_op_num_threads = args.threads
        session = ort.InferenceSession(model, so)
        times = interleaved({"kiln": lambda: module.run(feeds), "ort": lambda: session.run(None, feeds)}, args.rounds)
        print(f"{name:<28} {times['kiln']:>10.4f} {times['ort']:>10.4f} {times['kiln'] / times['ort']:>7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
