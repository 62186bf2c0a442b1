"""The multi-ISA `x86-64` artifact against the single-ISA `x86-64-v3` one and ONNX Runtime: each model compiled (and
validated) once per target, then timed in the same interleaved rounds (x86-64 on the variant this CPU picks and forced
to AVX2, x86-64-v3, ONNX Runtime); prints the library sizes and each variant's kernel code size.

    .venv/bin/python bench/bench_multi_isa.py [--models resnet18 mobilenet_v2] [--rounds 9] [--threads 2]
    .venv/bin/python bench/bench_multi_isa.py --threads 1 --cpu-clock   # on a busy machine: each call's CPU time
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_models import MODELS_DIR, interleaved  # noqa: E402  (puts the repository root on sys.path)


def kernel_code_bytes(library: Path) -> dict[str, int]:
    """Code bytes of each kernel object in `library` (its `kiln_kernel_KEY` symbol and the `kiln_kernel_KEY.parallel.N`
    bodies of its parallel loops), from the symbol table."""
    listing = subprocess.run(["nm", "-S", "--defined-only", str(library)], capture_output=True, text=True,
                             check=True).stdout
    sizes: dict[str, int] = {}
    for m in re.finditer(r"^\w+ (\w+) [tT] (kiln_kernel_[0-9a-f]+)(\.\S+)?$", listing, re.M):
        sizes[m.group(2)] = sizes.get(m.group(2), 0) + int(m.group(1), 16)
    return sizes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["resnet18", "mobilenet_v2"])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--cpu-clock", action="store_true",
                        help="time the calling thread's CPU time (with --threads 1: preemption adds nothing)")
    args = parser.parse_args()
    if args.cpu_clock and args.threads != 1:
        parser.error("--cpu-clock measures the calling thread alone: it needs --threads 1")

    import onnxruntime as ort

    import core
    from core.runtime import loader

    print(f"load: {os.getloadavg()[0]:.2f} (1 min) on {os.cpu_count()} CPUs; {args.rounds} interleaved rounds, medians "
          f"of {'CPU' if args.cpu_clock else 'wall'} time, {args.threads} threads")
    with tempfile.TemporaryDirectory(prefix="kiln-multi-isa-") as tmp:
        for name in args.models:
            path = MODELS_DIR / f"{name}.onnx"
            libraries, modules = {}, {}
            for target in ("x86-64-v3", "x86-64"):
                artifact = core.compile(path, target=target, benchmark=False, threads=args.threads)
                validation = artifact.report["validation"]
                print(f"{name} {target}: validated against {validation.get('reference')}, max abs error "
                      f"{validation.get('max_abs_err'):.3g}")
                folder = Path(tmp) / f"{name}-{target}"
                artifact.save(folder.with_suffix(".tar.gz"))
                libraries[target] = artifact.library.stat().st_size
                modules[target] = loader.load(folder.with_suffix(".tar.gz"), num_threads=args.threads)
                if target == "x86-64":
                    both = kernel_code_bytes(artifact.library)
                    modules["x86-64 avx2"] = loader.load(folder.with_suffix(".tar.gz"), num_threads=args.threads,
                                                         isa="avx2")
                else:
                    avx2 = kernel_code_bytes(artifact.library)
            picked = modules["x86-64"].isa
            avx2_bytes = sum(size for sym, size in both.items() if sym in avx2)
            avx512_bytes = sum(size for sym, size in both.items() if sym not in avx2)
            print(f"{name}: library x86-64-v3 {libraries['x86-64-v3'] / 1024:.0f} KiB, x86-64 "
                  f"{libraries['x86-64'] / 1024:.0f} KiB; kernel code avx2 {avx2_bytes / 1024:.0f} KiB, avx512 "
                  f"{avx512_bytes / 1024:.0f} KiB; this CPU runs the {picked} variant")
            info = modules["x86-64"].inputs
            rng = np.random.default_rng(0)
            feeds = {t["name"]: (rng.standard_normal(t["shape"]).astype(t["dtype"]) if "float" in t["dtype"] else
                                 rng.integers(0, 2, t["shape"]).astype(t["dtype"])) for t in info}
            outs = {k: m.run(feeds) for k, m in modules.items()}
            for k, out in outs.items():  # every variant computes what the single-ISA artifact does
                for o, v in out.items():
                    np.testing.assert_allclose(v, outs["x86-64-v3"][o], rtol=1e-4, atol=1e-4, err_msg=f"{k} {o}")
            options = ort.SessionOptions()
            options.intra_op_num_threads = args.threads
            session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
            runners = {k: (lambda m=m: m.run(feeds)) for k, m in modules.items()}
            runners["onnxruntime"] = lambda: session.run(None, feeds)
            ms = interleaved(runners, args.rounds, clock=time.thread_time if args.cpu_clock else time.perf_counter)
            print(f"{name}: " + ", ".join(f"{k} {v:.3f} ms ({v / ms['onnxruntime']:.2f}x ORT)" for k, v in ms.items()))
            for m in modules.values():
                m.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
