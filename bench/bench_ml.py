"""Tree ensembles (ai.onnx.ml) compiled by Kiln against ONNX Runtime: a 500-tree depth-8 random forest and a
1000-round gradient boosting model (scikit-learn, converted by skl2onnx), batch 1 and 1024, same threads,
warm-up, interleaved rounds, medians; prints the ratios. `--layout R,G,C[,WALK]` adds a TreeEnsemble layout
other than the policy's to the same rounds (rows per block, trees per step, tree chunks, and the walk:
branch_free (the default) or branchy; 1,1,1 is the plain per-row walk on one thread; 8,1,1 interleaves 8 rows;
1,16,1 interleaves 16 trees of one row; 1,1,1,branchy walks one tree at a time, skipping levels past a leaf).

Each call takes the next of `--distinct` different batches (the same sequence for every runtime), so that the
branch predictor cannot learn one batch's paths through the trees (`--distinct 1` repeats one batch).

    .venv/bin/python bench/bench_ml.py [--threads 2] [--rounds 15] [--batches 1 1024] [--distinct 64]
                                       [--layout 1,1,1,branchy ...]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_models import interleaved  # noqa: E402


def build_models(features: int, seed: int) -> dict:
    """name -> (ONNX model, rows to sample batches from)."""
    import numpy as np
    from skl2onnx import to_onnx
    from sklearn.datasets import make_classification
    from sklearn.ensemble import GradientBoostingClassifier, RandomForestClassifier

    x, y = make_classification(4000, features, n_informative=features // 2, random_state=seed)
    x = x.astype(np.float32)
    started = time.perf_counter()
    forest = RandomForestClassifier(500, max_depth=8, n_jobs=-1, random_state=seed).fit(x, y)
    boosting = GradientBoostingClassifier(n_estimators=1000, max_depth=3, random_state=seed).fit(x, y)
    print(f"  trained in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    options = {"zipmap": False}
    return {"random_forest_500x8": (to_onnx(forest, x[:1], options=options), x),
            "gradient_boosting_1000": (to_onnx(boosting, x[:1], options=options), x)}


@contextmanager
def fixed_layout(layout):
    """Compile with TreeEnsemble's layout fixed instead of its policy's choice."""
    from core.kernels import tree_ensemble

    policy = tree_ensemble.tree_layout
    if layout is not None:
        tree_ensemble.tree_layout = lambda rows, trees: layout
    try:
        yield
    finally:
        tree_ensemble.tree_layout = policy


def variants(batch: int, trees: int, extra: list[str]) -> dict:
    """label -> layout to compile (None: the policy's own), then each `--layout R,G,C` asked for."""
    from core.kernels.tree_ensemble import TreeLayout, tree_layout

    out = {f"kiln {tree_layout(batch, trees)}": None}
    for text in extra:
        rows, trees_per_step, chunks, *walk = text.split(",")
        layout = TreeLayout(int(rows), int(trees_per_step), int(chunks), *walk)
        if batch >= layout.rows_per_block:
            out[f"layout {layout}"] = layout
    return out


def cycling(run, feeds: list):
    """A runner that calls `run` on the next of `feeds` each time."""
    state = {"next": 0}

    def call():
        k = state["next"]
        state["next"] = (k + 1) % len(feeds)
        return run(feeds[k])

    return call


def batches(data, batch: int, distinct: int) -> list:
    """`distinct` batches of `batch` rows each, starting at spread-out rows of `data` (wrapping around)."""
    import numpy as np

    starts = np.linspace(0, len(data), distinct, endpoint=False).astype(int)
    return [np.take(data, np.arange(start, start + batch), axis=0, mode="wrap") for start in starts]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 1024])
    parser.add_argument("--features", type=int, default=20)
    parser.add_argument("--distinct", type=int, default=64, help="different batches cycled through (1: one batch)")
    parser.add_argument("--layout", action="append", default=[], metavar="R,G,C[,WALK]",
                        help="also time this TreeEnsemble layout: rows per block, trees per step, tree chunks, "
                             "branch_free or branchy (repeatable; e.g. 1,1,1,branchy walks one tree at a time)")
    args = parser.parse_args()

    import core
    from core.driver.validate import onnxruntime_session

    rows = []
    for name, (model, data) in build_models(args.features, seed=0).items():
        payload = model.SerializeToString()
        session = onnxruntime_session(payload, args.threads)
        input_name, outputs = session.get_inputs()[0].name, [o.name for o in session.get_outputs()]
        for batch in args.batches:
            feeds = [{input_name: rows} for rows in batches(data, batch, args.distinct)]
            runners = {"ort": cycling(lambda f, s=session: s.run(outputs, f), feeds)}
            modules, compile_s = [], {}
            trees = sum(len(set(a.ints)) for n in model.graph.node for a in n.attribute if a.name == "nodes_treeids")
            for label, layout in variants(batch, trees, args.layout).items():
                started = time.perf_counter()
                with fixed_layout(layout):
                    artifact = core.compile(model, input_shapes={input_name: (batch, args.features)},
                                            benchmark=False, threads=args.threads)
                compile_s[label] = time.perf_counter() - started
                module = artifact.load()
                module.set_num_threads(args.threads)
                modules.append(module)
                runners[label] = cycling(module.run, feeds)
            times = interleaved(runners, args.rounds)
            for module in modules:
                module.close()
            for label in compile_s:
                rows.append((name, batch, label, times[label], times["ort"], compile_s[label]))
                print(f"  {name} batch {batch} {label}: {times[label]:.4f} ms, ort {times['ort']:.4f} ms",
                      file=sys.stderr)

    print(f"\n{args.threads} threads, median of {args.rounds} interleaved rounds (ONNX Runtime in the same rounds), "
          f"{args.distinct} distinct batches cycled\n")
    print("| model | batch | variant | Kiln ms | ONNX Runtime ms | ratio (Kiln/ORT) | compile s |")
    print("|---|---:|---|---:|---:|---:|---:|")
    for name, batch, label, kiln, ort, seconds in rows:
        print(f"| {name} | {batch} | {label} | {kiln:.4f} | {ort:.4f} | {kiln / ort:.2f}x | {seconds:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
