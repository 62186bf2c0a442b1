"""PTX generation time of a model's cuda kernels with 1 and more forked workers (nvptx.emit_ptx), interleaved, and
whether the joined PTX is the same text for each count (and ptxas accepts it, when installed).

    python bench/bench_ptx_jobs.py MODEL.onnx [-t "cuda -arch=sm_90"] [--jobs 1 2] [--rounds 3]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.backends import get_backend  # noqa: E402
from core.codegen.build_cuda import check_ptx  # noqa: E402
from core.codegen.nvptx import emit_ptx  # noqa: E402
from core.driver.precision import model_precision, store_weights  # noqa: E402
from core.frontend import import_onnx  # noqa: E402
from core.lowering.executable import build_executable  # noqa: E402
from core.target import get_target  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("-t", "--target", default="cuda -arch=sm_90")
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    target = get_target(args.target)
    backend = get_backend(target)
    graph = import_onnx(args.model.read_bytes())
    graph = store_weights(backend.optimize(graph, 3, target), model_precision(graph), False,
                          backend.weight_storage_dtypes(target), target)
    funcs = list(build_executable(backend.finish_graph(graph, target), target, backend).funcs)
    times: dict[int, list[float]] = {jobs: [] for jobs in args.jobs}
    texts: dict[int, str] = {}
    for _ in range(args.rounds):
        for jobs in args.jobs:
            start = time.perf_counter()
            texts[jobs], _ = emit_ptx(funcs, target, jobs=jobs)
            times[jobs].append(time.perf_counter() - start)
    same = len(set(texts.values())) == 1
    ptx = texts[args.jobs[0]]
    checked = check_ptx(ptx, target)
    print(f"{args.model.name}, {args.target}: {len(funcs)} kernels, {len(ptx) / 1e6:.2f} MB of PTX; same text for "
          f"every worker count: {same}; ptxas: {'accepted' if checked else 'not installed'}")
    for jobs in args.jobs:
        print(f"  {jobs} job(s): median {statistics.median(times[jobs]):.2f} s over {args.rounds} rounds "
              f"({', '.join(f'{t:.2f}' for t in times[jobs])})")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
