"""The measuring process (run as `python -m core.tune.measure_worker`): loads kernel libraries, runs
each candidate on seeded inputs, checks it against the reference kernel and times it.

One JSON request per stdin line, one JSON answer per stdout line; the parent kills this process
when a kernel crashes it or hangs, and starts a fresh one for the next candidate.
"""
from __future__ import annotations

import json
import sys
import time

import numpy as np


def _arrays(lib, name: str, seed: int) -> list[np.ndarray]:
    """Inputs drawn from `seed` (the same for every candidate of a task), zero outputs, poisoned workspaces."""
    sig = lib.signatures[name]
    rng = np.random.default_rng(seed)
    out = []
    for k, p in enumerate(sig["params"]):
        dtype = np.dtype("uint16" if p["dtype"] == "bfloat16" else p["dtype"])
        if k < sig["num_inputs"]:
            arr = rng.standard_normal(p["shape"]).astype(dtype) if dtype.kind == "f" else np.zeros(p["shape"], dtype)
        elif k < sig["num_inputs"] + sig["num_outputs"]:
            arr = np.zeros(p["shape"], dtype)
        else:
            arr = np.full(p["shape"], 7, dtype)
        out.append(np.ascontiguousarray(arr))
    return out


def _outputs(lib, name: str, arrays: list[np.ndarray]) -> list[np.ndarray]:
    sig = lib.signatures[name]
    lo = sig["num_inputs"]
    return [a.copy() for a in arrays[lo:lo + sig["num_outputs"]]]


def _time(lib, name: str, arrays, min_repeat_ms: float, repeat: int) -> list[float]:
    """`repeat` samples, each long enough (>= min_repeat_ms) for the timer: seconds per call."""
    number = 1
    start = time.perf_counter()
    lib.call(name, *arrays)
    once = max(time.perf_counter() - start, 1e-7)
    number = max(1, int(min_repeat_ms / 1e3 / once))
    return [lib.time_ms(name, *arrays, repeat=1, number=number, warmup=0) / 1e3 for _ in range(repeat)]


def main() -> None:
    from core.codegen.kernel_library import load_kernels

    def load(path: str):
        if path.endswith(".cuda.json"):  # a GPU kernel bundle (PTX), run through the CUDA driver
            from core.codegen.cuda_kernels import load_cuda_kernel_bundle

            return load_cuda_kernel_bundle(path)
        return load_kernels(path)

    reference: list[np.ndarray] | None = None
    out = sys.stdout
    lib = None
    for line in sys.stdin:
        req = json.loads(line)
        if hasattr(lib, "close"):  # a GPU module holds device memory until unloaded
            lib.close()
        try:
            lib = load(req["lib"])
            if req.get("threads") and hasattr(lib, "set_num_threads"):
                lib.set_num_threads(int(req["threads"]))
            arrays = _arrays(lib, req["name"], int(req.get("seed", 0)))
            print(json.dumps({"started": req["id"]}), file=out, flush=True)
            lib.call(req["name"], *arrays)
            got = _outputs(lib, req["name"], arrays)
            if req.get("reference"):
                reference = got
            elif reference is not None:
                bad = [k for k, (g, r) in enumerate(zip(got, reference))
                       if g.shape != r.shape or not np.allclose(g, r, rtol=req.get("rtol", 1e-3),
                                                                 atol=req.get("atol", 1e-3) * (1 + float(np.abs(r).max(initial=0))))]
                if bad:
                    err = max(float(np.abs(g - r).max()) for g, r in zip(got, reference))
                    print(json.dumps({"id": req["id"], "error": "wrong_answer", "msg": f"max abs error {err:.3g}"}),
                          file=out, flush=True)
                    continue
            costs = _time(lib, req["name"], arrays, float(req.get("min_repeat_ms", 20)), int(req.get("repeat", 3)))
            print(json.dumps({"id": req["id"], "costs": costs}), file=out, flush=True)
        except Exception as e:  # a bad library or call: report it and go on with the next request
            print(json.dumps({"id": req["id"], "error": "runtime", "msg": f"{type(e).__name__}: {e}"}), file=out, flush=True)


if __name__ == "__main__":
    main()
