"""The measuring process (run as `python -m core.tune.measure_worker`): loads kernel libraries, runs
each candidate on seeded inputs (data-dependent kernels: on the model's own constants and several draws of
the other inputs, core/tune/measure.py `real_inputs`), checks it against the reference kernel and times it.

Requests (dicts) come in as framed pickles on stdin, answers go out the same way on stdout
(core.process.channel); the parent kills this process when a kernel crashes it or hangs, and
starts a fresh one for the next candidate.
"""
from __future__ import annotations

import contextlib
import itertools
import time

import numpy as np

from core.process.channel import messages, send, stdio_channel


def _arrays(lib, name: str, seed: int) -> list[np.ndarray]:
    return seeded_arrays(lib.signatures[name], seed)


def seeded_arrays(sig: dict, seed: int) -> list[np.ndarray]:
    """A kernel's arguments (its signature: `kiln_kernels_json`): inputs drawn from `seed` (the same for every
    candidate of a task), zero outputs, poisoned workspaces."""
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


def mismatch(got: list[np.ndarray], reference: list[np.ndarray], rtol: float = 1e-3, atol: float = 1e-3) -> str:
    """Why a candidate's outputs are not the reference kernel's (atol scales with the reference's magnitude), or ""."""
    bad = [k for k, (g, r) in enumerate(zip(got, reference))
           if g.shape != r.shape or not np.allclose(g, r, rtol=rtol, atol=atol * (1 + float(np.abs(r).max(initial=0))))]
    if not bad:
        return ""
    errors = [float(np.abs(g - r).max()) for g, r in zip(got, reference) if g.shape == r.shape and g.size]
    return f"max abs error {max(errors, default=float('inf')):.3g}"


def cold_sets(arrays: list[np.ndarray], cold_inputs, cold_bytes: int) -> list[list[np.ndarray]]:
    """Argument lists that differ in their weight arrays, enough copies to total `cold_bytes` (at most
    MAX_COLD_COPIES): calling them in turn reads the weights from memory, not from the cache."""
    weights = [k for k in cold_inputs if k < len(arrays)]
    size = sum(arrays[k].nbytes for k in weights)
    if not size or not cold_bytes:
        return [arrays]
    sets = [arrays]
    for _ in range(min(MAX_COLD_COPIES, -(-cold_bytes // size)) - 1):
        copy = list(arrays)
        for k in weights:
            copy[k] = arrays[k].copy()
        sets.append(copy)
    return sets


MAX_COLD_COPIES = 64  # small weights: a few MB of copies already leave the private caches


def with_real_inputs(arrays: list[np.ndarray], inputs: dict) -> list[np.ndarray]:
    """The model's own values (by parameter index) in place of the seeded draws, in each parameter's dtype."""
    out = list(arrays)
    for k, value in inputs.items():
        out[int(k)] = np.ascontiguousarray(np.asarray(value, out[int(k)].dtype).reshape(out[int(k)].shape))
    return out


def distinct_sets(sets: list[list[np.ndarray]], sig: dict, seed: int, fixed, count: int) -> list[list[np.ndarray]]:
    """At least `count` argument lists, the inputs other than `fixed` (the model's constants) drawn anew for
    each (seeds seed + 1, ...; the first list keeps its draw): timing goes round them, so that the branch
    predictor cannot learn one input's paths. Outputs and workspaces stay shared."""
    out = list(sets)
    for n in range(len(sets), count):
        fresh, base = seeded_arrays(sig, seed + n), sets[n % len(sets)]
        out.append([fresh[k] if k < sig["num_inputs"] and k not in fixed else a for k, a in enumerate(base)])
    return out


def _time(lib, name: str, sets, min_repeat_ms: float, repeat: int) -> list[float]:
    """`repeat` samples, each long enough (>= min_repeat_ms) for the timer: seconds per call, the
    calls going round the argument `sets`."""
    start = time.perf_counter()
    lib.call(name, *sets[0])
    once = max(time.perf_counter() - start, 1e-7)
    number = max(1, int(min_repeat_ms / 1e3 / once))
    if not hasattr(lib, "bind"):  # a GPU bundle: its own timer, on device-resident copies
        return [lib.time_ms(name, *sets[0], repeat=1, number=number, warmup=0) / 1e3 for _ in range(repeat)]
    calls = [lib.bind(name, *arrays) for arrays in sets]
    for call in calls:  # warm-up: each copy's pages are touched once
        call()
    turn, samples = itertools.cycle(calls), []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            next(turn)()
        samples.append((time.perf_counter() - start) / number)
    return samples


@contextlib.contextmanager
def _timing_lock(path: "str | None"):
    """Holds an exclusive lock on `path` while timing, so that tuning processes sharing a device
    (several jobs, or a benchmark's parallel runs) never time their kernels at the same moment."""
    if not path:
        yield
        return
    from ..files.lock import exclusive_lock

    with exclusive_lock(path):
        yield


def main() -> None:
    from core.codegen.kernel_library import load_kernels

    def load(path: str):
        if path.endswith(".cuda.json"):  # a GPU kernel bundle (PTX), run through the CUDA driver
            from core.codegen.cuda_kernels import load_cuda_kernel_bundle

            return load_cuda_kernel_bundle(path)
        return load_kernels(path)

    reference: list[np.ndarray] | None = None
    requests, answers = stdio_channel()
    lib = None
    for req in messages(requests):
        if hasattr(lib, "close"):  # a GPU module holds device memory until unloaded
            lib.close()
        try:
            lib = load(req["lib"])
            if req.get("threads") and hasattr(lib, "set_num_threads"):
                lib.set_num_threads(int(req["threads"]))
            arrays = with_real_inputs(_arrays(lib, req["name"], int(req.get("seed", 0))), req.get("inputs", {}))
            send(answers, {"started": req["id"]})
            lib.call(req["name"], *arrays)
            got = _outputs(lib, req["name"], arrays)
            if req.get("reference"):
                reference = got
            elif reference is not None:
                wrong = mismatch(got, reference, req.get("rtol", 1e-3), req.get("atol", 1e-3))
                if wrong:
                    send(answers, {"id": req["id"], "error": "wrong_answer", "msg": wrong})
                    continue
            sets = cold_sets(arrays, req.get("cold_inputs", ()), int(req.get("cold_bytes", 0)))
            if int(req.get("distinct", 1)) > 1:
                sets = distinct_sets(sets, lib.signatures[req["name"]], int(req.get("seed", 0)),
                                     {int(k) for k in req.get("inputs", {})}, int(req["distinct"]))
            with _timing_lock(req.get("timing_lock")):
                costs = _time(lib, req["name"], sets, float(req.get("min_repeat_ms", 20)), int(req.get("repeat", 3)))
            send(answers, {"id": req["id"], "costs": costs})
        except Exception as e:  # a bad library or call: report it and go on with the next request
            send(answers, {"id": req["id"], "error": "runtime", "msg": f"{type(e).__name__}: {e}"})


if __name__ == "__main__":
    main()
