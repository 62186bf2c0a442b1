"""One artifact for many shapes versus one static compile per shape: bert_tiny (the shared model's architecture,
exported with dynamic batch and sequence axes) at (batch, seq) = (1, 7), (3, 200), (1, 511).

    /path/to/torch-env/bin/python bench/bench_dynamic.py export    # needs torch + transformers
    .venv/bin/python bench/bench_dynamic.py run [--rounds 15] [--threads N]

`run` compiles one artifact with --input-shape input_ids=1..4,1..512 (attention_mask follows its dim_params: the
batch is padded, the sequence masked, so one compiled shape, the upper bounds, serves every size; --ranges gives
others, e.g. 1..4,1..512:8|64|512 to specialize some sizes) and one static artifact per shape,
checks all against ONNX Runtime, then times them in interleaved rounds (same threads, warm-up, medians) and
prints dynamic/static and dynamic/ONNX Runtime ratios. The machine is shared: read the ratios, not the ms.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
MODEL = Path.home() / ".cache" / "kiln" / "bench-dynamic" / "bert_tiny_dynamic.onnx"
SHAPES = [(1, 7), (3, 200), (1, 511)]
RANGES = {"input_ids": "1..4,1..512"}
SETTLE_S = 0.15  # ONNX Runtime's workers spin ~40 ms after a call; Kiln's pools park within ~2 ms


def export() -> None:
    import torch
    import transformers as hf

    torch.manual_seed(0)
    config = hf.BertConfig(vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                           intermediate_size=512, max_position_embeddings=512)
    bert = hf.BertModel(config).eval()

    class Encoder(torch.nn.Module):  # keyword arguments: BertModel.forward's positional order varies by version
        def __init__(self):
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask):
            return self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    model = Encoder().eval()
    ids = torch.randint(0, 1000, (1, 64))
    MODEL.parent.mkdir(parents=True, exist_ok=True)
    axes = {0: "batch", 1: "seq"}
    torch.onnx.export(model, (ids, torch.ones_like(ids)), str(MODEL), input_names=["input_ids", "attention_mask"],
                      output_names=["last_hidden_state"], opset_version=17, dynamo=False,
                      dynamic_axes={"input_ids": axes, "attention_mask": axes, "last_hidden_state": axes})
    print("exported", MODEL)


def _feeds(batch: int, seq: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(batch * 1000 + seq)
    return {"input_ids": rng.integers(0, 1000, (batch, seq)).astype(np.int64),
            "attention_mask": np.ones((batch, seq), np.int64)}


def _median_ms(fn, number: int) -> float:
    start = time.perf_counter()
    for _ in range(number):
        fn()
    return (time.perf_counter() - start) * 1e3 / number


def run(rounds: int, threads: int, ranges: dict) -> int:
    import onnxruntime as ort

    import core

    if not MODEL.exists():
        print(f"no {MODEL}: run `export` first (with torch + transformers)", file=sys.stderr)
        return 1
    start = time.perf_counter()
    dynamic = core.compile(str(MODEL), input_shapes=ranges, benchmark=False, threads=threads)
    print(f"dynamic artifact {ranges}: {len(dynamic.metadata['dynamic_shapes']['buckets'])} buckets, "
          f"{dynamic.report['dynamic_shapes']['kernels_compiled']} distinct kernels for "
          f"{dynamic.report['dynamic_shapes']['kernel_calls']} calls, weights {dynamic.metadata['weights_bytes']:,} B, "
          f"compiled and validated in {time.perf_counter() - start:.0f} s")
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    session = ort.InferenceSession(str(MODEL), options, providers=["CPUExecutionProvider"])
    print(f"{'shape':<12}{'dynamic ms':>11}{'static ms':>11}{'ORT ms':>9}{'dyn/static':>11}{'dyn/ORT':>9}"
          f"{'C dyn/stat':>12}{'max err':>10}")
    with dynamic.load() as dyn:
        dyn.set_num_threads(threads)
        for batch, seq in SHAPES:
            feeds = _feeds(batch, seq)
            static_art = core.compile(str(MODEL), input_shapes={k: v.shape for k, v in feeds.items()},
                                      validate=False, benchmark=False)
            with static_art.load() as static:
                static.set_num_threads(threads)
                ref = session.run(None, feeds)[0]
                got = dyn.run(feeds)["last_hidden_state"]
                err = float(np.abs(got - ref).max())
                np.testing.assert_allclose(static.run(feeds)["last_hidden_state"], ref, rtol=1e-3, atol=1e-3)
                runners = {"dynamic": lambda: dyn.run(feeds), "static": lambda: static.run(feeds),
                           "ort": lambda: session.run(None, feeds)}
                for fn in runners.values():  # warm-up
                    for _ in range(3):
                        fn()
                number = max(1, int(20 / max(_median_ms(runners["ort"], 1), 1e-3)))
                times = {k: [] for k in runners}
                order = list(runners)
                for r in range(rounds):  # interleaved: drift on the shared machine hits all three alike
                    for key in order[r % 3:] + order[:r % 3]:  # rotated: none always follows ORT's spinning pool
                        time.sleep(SETTLE_S)
                        times[key].append(_median_ms(runners[key], number))
                med = {k: statistics.median(v) for k, v in times.items()}
                # The libraries alone (Module.benchmark: prepared pointer tables, no per-call Python work), alternated.
                c_level = {"dynamic": [], "static": []}
                for _ in range(5):
                    for key, module in (("dynamic", dyn), ("static", static)):
                        time.sleep(SETTLE_S)
                        c_level[key].append(module.benchmark(feeds=feeds, repeat=number, warmup=1)["median_ms"])
                c_ratio = statistics.median(c_level["dynamic"]) / statistics.median(c_level["static"])
                print(f"{f'({batch}, {seq})':<12}{med['dynamic']:>11.3f}{med['static']:>11.3f}{med['ort']:>9.3f}"
                      f"{med['dynamic'] / med['static']:>10.2f}x{med['dynamic'] / med['ort']:>8.2f}x{c_ratio:>11.2f}x"
                      f"{err:>10.1e}")
            static_art.cleanup()
    print(f"medians of {rounds} interleaved rounds (Module.run, ONNX Runtime's session.run), {threads} thread(s); "
          f"C dyn/stat: the libraries alone, medians of 5 alternated Module.benchmark runs")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("export")
    r = sub.add_parser("run")
    r.add_argument("--rounds", type=int, default=15)
    r.add_argument("--threads", type=int, default=2)
    r.add_argument("--ranges", default=RANGES["input_ids"], help="input_ids' ranges (default %(default)s)")
    args = parser.parse_args(argv)
    if args.command == "export":
        export()
        return 0
    return run(args.rounds, args.threads, {"input_ids": args.ranges})


if __name__ == "__main__":
    sys.exit(main())
