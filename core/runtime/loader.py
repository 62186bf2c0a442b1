"""Load a Kiln artifact (.tar.gz or its extracted folder) and run it on numpy arrays.
Only numpy, ctypes and the standard library: this file ships in every artifact as `kiln_loader.py`."""
from __future__ import annotations

import ctypes
import importlib
import json
import os
import platform
import shutil
import statistics
import tarfile
import tempfile
import time
from typing import Mapping

import numpy as np

__all__ = ["load", "Module", "KilnRuntimeError", "cuda_device_count"]

# LLVM feature name -> the /proc/cpuinfo flag that says the CPU has it (only ones worth checking).
_CPU_FLAGS = {"avx": "avx", "avx2": "avx2", "fma": "fma", "f16c": "f16c", "sse4.1": "sse4_1", "sse4.2": "sse4_2",
              "avx512f": "avx512f", "avx512bw": "avx512bw", "avx512cd": "avx512cd", "avx512dq": "avx512dq",
              "avx512vl": "avx512vl", "avx512vnni": "avx512_vnni", "avx512bf16": "avx512_bf16",
              "avx512fp16": "avx512_fp16", "bmi2": "bmi2", "neon": "asimd", "sve": "sve"}


class KilnRuntimeError(RuntimeError):
    """The native library refused to load or run (its message comes from kiln_last_error())."""


try:  # optional (the loader needs numpy alone): with ml_dtypes, narrow tensors are ml_dtypes arrays
    ml_dtypes = importlib.import_module("ml_dtypes")
except ImportError:  # pragma: no cover - then they travel as raw bits (_RAW_BITS)
    ml_dtypes = None

# Narrow dtypes (see kiln_model.h): bfloat16 is 2 bytes, float8/float8_e8m0fnu 1 byte; int4/uint4/int2/
# uint2/float4_e2m1fn take one byte per element, the value's bits in the low bits (ml_dtypes' layout:
# int4 -1 is 0x0F). Without ml_dtypes numpy does not know these names: they travel as these raw types.
_RAW_BITS = {"bfloat16": "uint16", "float8_e4m3fn": "uint8", "float8_e4m3fnuz": "uint8", "float8_e5m2": "uint8",
             "float8_e5m2fnuz": "uint8", "float8_e8m0fnu": "uint8", "float4_e2m1fn": "uint8", "int4": "uint8",
             "uint4": "uint8", "int2": "uint8", "uint2": "uint8"}
_SUBBYTE_BITS = {"int4": 4, "uint4": 4, "int2": 2, "uint2": 2, "float4_e2m1fn": 4}


def _raw_bits_of(given: np.dtype, name: str) -> bool:
    """Whether an array of `given` dtype holds a narrow dtype's raw bits: its raw stand-in (uint8/uint16),
    or plain void of the same size, which is what np.save/np.load make of ml_dtypes arrays."""
    raw = np.dtype(_RAW_BITS[name])
    return given == raw or (given.type is np.void and given.fields is None and given.itemsize == raw.itemsize)


def _np_dtype(name: str) -> np.dtype:
    if name in _RAW_BITS:
        scalar = getattr(ml_dtypes, name, None)
        return np.dtype(scalar if scalar is not None else _RAW_BITS[name])
    return np.dtype(name)


def _host_arch() -> str:
    machine = platform.machine().lower()
    return {"arm64": "aarch64", "amd64": "x86_64"}.get(machine, machine)


def _cpu_flags() -> set[str] | None:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return None


_CUDA_DRIVER = "libcuda.so.1"


def _cuda_driver():
    """The NVIDIA driver's library, or None when this machine has none."""
    try:
        return ctypes.CDLL(_CUDA_DRIVER)
    except OSError:
        return None


def cuda_device_count() -> int:
    """How many NVIDIA GPUs the CUDA driver sees here (0 without a driver or a GPU)."""
    driver = _cuda_driver()
    if driver is None:
        return 0
    count = ctypes.c_int(0)
    if driver.cuInit(0) != 0 or driver.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return 0
    return count.value


def _needs_cuda_driver(meta: dict) -> bool:
    """Whether the artifact's library launches GPU kernels through the CUDA driver, as its backend wrote.
    Artifacts from before that key: only GPU ones had a target_kind; older ones still, an nvptx triple."""
    if "needs_cuda_driver" in meta:
        return bool(meta["needs_cuda_driver"])
    return "target_kind" in meta or str(meta.get("triple") or meta.get("target_triple") or "").startswith("nvptx")


def _check_gpu_machine(meta: dict) -> None:
    """A GPU artifact's library runs on the host CPU and needs the NVIDIA driver; kiln_load checks the GPU itself."""
    host = meta.get("host_triple")
    if host and host.split("-")[0] != _host_arch():
        raise KilnRuntimeError(f"this artifact (target {meta.get('target')}) launches its GPU kernels from a "
                               f"{host.split('-')[0]} library, but this machine is {_host_arch()}")
    if _cuda_driver() is None:
        raise KilnRuntimeError(f"this artifact (target {meta.get('target')}) runs on an NVIDIA GPU "
                               f"({meta.get('cuda_arch') or meta.get('cpu') or 'CUDA'}), but this machine has no NVIDIA "
                               f"driver ({_CUDA_DRIVER} not found): run it on a machine with an NVIDIA GPU and driver")


def _check_machine(meta: dict) -> None:
    """Refuse an artifact built for another CPU with a message, instead of crashing on an illegal instruction."""
    if _needs_cuda_driver(meta):
        return _check_gpu_machine(meta)
    # Both spellings: package.target_metadata() writes triple/cpu_features, the pipeline target_*.
    triple = meta.get("triple") or meta.get("target_triple")
    if triple and triple.split("-")[0] != _host_arch():
        raise KilnRuntimeError(f"this artifact was built for {triple.split('-')[0]} "
                               f"(target {meta.get('target')}), but this machine is {_host_arch()}")
    features = meta.get("cpu_features") or meta.get("target_features") or ""
    need = {_CPU_FLAGS[f[1:]] for f in features.split(",") if f.startswith("+") and f[1:] in _CPU_FLAGS}
    have = _cpu_flags()
    if need and have is not None and not need <= have:
        raise KilnRuntimeError(f"this artifact (target {meta.get('target')}) needs CPU features this machine lacks: "
                               f"{', '.join(sorted(need - have))}")


def _extract(archive: str) -> str:
    dest = tempfile.mkdtemp(prefix="kiln-artifact-")
    try:
        with tarfile.open(archive, "r:gz") as tar:
            if hasattr(tarfile, "data_filter"):
                tar.extractall(dest, filter="data")
            else:  # Python without extraction filters: accept regular files with plain names only
                for member in tar.getmembers():
                    if not member.isfile() or member.name.startswith("/") or ".." in member.name.split("/"):
                        raise KilnRuntimeError(f"unsafe member {member.name!r} in {archive}")
                tar.extractall(dest)
    except (tarfile.TarError, OSError, EOFError) as e:
        shutil.rmtree(dest, ignore_errors=True)
        raise KilnRuntimeError(f"cannot read artifact {archive}: {e}") from None
    except BaseException:
        shutil.rmtree(dest, ignore_errors=True)
        raise
    return dest


def load(path: "str | os.PathLike", num_threads: int | None = None) -> "Module":
    """Open an artifact: a `.tar.gz` (extracted to a fresh temporary folder) or an extracted folder."""
    path = os.fspath(path)
    if os.path.isdir(path):
        return Module(path, num_threads=num_threads)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no artifact at {path}")
    folder = _extract(path)
    try:
        return Module(folder, num_threads=num_threads, owned_dir=True)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise


BOUND_SUFFIX = "::bound"


def trim_bounded(results: dict) -> dict:
    """Outputs with a data-dependent shape (NonZero, Unique, ...) come from the library at their upper
    bound `y`, plus `y::bound` = [axis, length]: the valid part is the first `length` entries along
    `axis`. Returns the trimmed outputs, without the `::bound` ones."""
    for name in [n for n in results if n.endswith(BOUND_SUFFIX)]:
        axis, length = (int(v) for v in results.pop(name))
        target = name[: -len(BOUND_SUFFIX)]
        index = [slice(None)] * results[target].ndim
        index[axis] = slice(0, length)
        results[target] = np.ascontiguousarray(results[target][tuple(index)])
    return results


class Module:
    """A loaded model. `run({name: array}) -> {name: array}`; also a context manager."""

    def __init__(self, directory: str, num_threads: int | None = None, owned_dir: bool = False):
        self._handle = None
        self._owned_dir = directory if owned_dir else None
        meta_path = os.path.join(directory, "metadata.json")
        try:
            with open(meta_path) as f:
                self.metadata: dict = json.load(f)
        except (OSError, ValueError) as e:
            raise KilnRuntimeError(f"{directory} is not a Kiln artifact: cannot read metadata.json ({e})") from None
        _check_machine(self.metadata)
        self._inputs = [dict(t, shape=tuple(int(d) for d in t["shape"])) for t in self.metadata.get("inputs", [])]
        self._outputs = [dict(t, shape=tuple(int(d) for d in t["shape"])) for t in self.metadata.get("outputs", [])]
        lib_path = os.path.join(directory, self.metadata.get("library", "libkiln_model.so"))
        try:
            self._lib = ctypes.CDLL(os.path.abspath(lib_path))
        except OSError as e:
            raise KilnRuntimeError(f"cannot load the model library {lib_path}: {e}") from None
        self._bind()
        if self._lib.kiln_num_inputs() != len(self._inputs) or self._lib.kiln_num_outputs() != len(self._outputs):
            raise KilnRuntimeError("metadata.json and the library disagree on the number of inputs/outputs")
        weights = os.path.join(directory, self.metadata.get("weights", "weights.bin"))
        handle = self._lib.kiln_load(os.fsencode(os.path.abspath(weights)))
        if not handle:
            raise KilnRuntimeError(self._lib.kiln_last_error().decode(errors="replace"))
        self._handle = handle
        if num_threads:
            self.set_num_threads(num_threads)

    def _bind(self) -> None:
        """The ABI's functions, under the runtime's kiln_ names whatever the artifact's prefix (metadata's
        symbol_prefix: a named artifact exports NAME_load, NAME_run, ...)."""
        lib, P = self._lib, ctypes.c_void_p
        prefix = self.metadata.get("symbol_prefix", "kiln")
        for name, res, args in (("kiln_load", P, [ctypes.c_char_p]), ("kiln_run", ctypes.c_int, [P, P, P]),
                                ("kiln_profile", ctypes.c_int, [P, P, P, P]), ("kiln_free", None, [P]),
                                ("kiln_last_error", ctypes.c_char_p, []), ("kiln_set_num_threads", None, [ctypes.c_int]),
                                ("kiln_get_num_threads", ctypes.c_int, []), ("kiln_num_inputs", ctypes.c_int, []),
                                ("kiln_num_outputs", ctypes.c_int, []), ("kiln_num_kernel_calls", ctypes.c_int, []),
                                ("kiln_kernel_call_name", ctypes.c_char_p, [ctypes.c_int])):
            try:
                fn = getattr(lib, prefix + name[len("kiln"):])
            except AttributeError:
                raise KilnRuntimeError(f"the model library lacks {prefix + name[len('kiln'):]} "
                                       f"(metadata.json's symbol_prefix is {prefix!r})") from None
            fn.restype, fn.argtypes = res, args
            setattr(lib, name, fn)

    # ------------------------------------------------------------ information

    @property
    def inputs(self) -> list[dict]:
        """[{"name", "shape", "dtype"}, ...] in the model's input order."""
        return [dict(t, shape=list(t["shape"])) for t in self._inputs]

    @property
    def outputs(self) -> list[dict]:
        return [dict(t, shape=list(t["shape"])) for t in self._outputs]

    def set_num_threads(self, n: int) -> None:
        """Threads for parallel kernels; 0 restores the default (KILN_NUM_THREADS, else OMP_NUM_THREADS, else
        one per CPU). The pool belongs to the library, so it applies to every model loaded from it."""
        self._lib.kiln_set_num_threads(int(n))

    @property
    def num_threads(self) -> int:
        return self._lib.kiln_get_num_threads()

    # ------------------------------------------------------------ running

    def _prepare(self, feeds: Mapping[str, object]):
        if self._handle is None:
            raise ValueError("this module is closed")
        if not isinstance(feeds, Mapping):
            raise TypeError(f"feeds must be a dict of input name -> array, got {type(feeds).__name__}")
        names = [t["name"] for t in self._inputs]
        missing = [n for n in names if n not in feeds]
        unknown = [n for n in feeds if n not in names]
        if missing or unknown:
            parts = ([f"missing input(s) {', '.join(map(repr, missing))}"] if missing else []) + \
                    ([f"unknown input(s) {', '.join(map(repr, unknown))}"] if unknown else [])
            raise ValueError(f"{'; '.join(parts)}; the model takes {', '.join(map(repr, names)) or 'no inputs'}")
        arrays = []
        for t in self._inputs:
            want = _np_dtype(t["dtype"])
            value = feeds[t["name"]]
            arr = value if isinstance(value, np.ndarray) else np.asarray(value, dtype=want)
            if arr.dtype != want and t["dtype"] in _RAW_BITS and _raw_bits_of(arr.dtype, t["dtype"]):
                arr = arr.view(want)  # a narrow tensor given as its raw bits (or as np.load's void data)
            if arr.dtype != want:
                hint = (f"ml_dtypes.{t['dtype']}, or pass its raw bits as {_RAW_BITS[t['dtype']]}"
                        if t["dtype"] in _RAW_BITS else f"np.{want.name}")
                raise ValueError(f"input {t['name']!r} has dtype {arr.dtype}, expected {t['dtype']} "
                                 f"(convert it with .astype({hint}))")
            if tuple(arr.shape) != t["shape"]:
                raise ValueError(f"input {t['name']!r} has shape {tuple(arr.shape)}, expected {t['shape']}")
            arrays.append(np.ascontiguousarray(arr))
        outs = [np.empty(t["shape"], dtype=_np_dtype(t["dtype"])) for t in self._outputs]
        return arrays, outs

    @staticmethod
    def _pointer_table(arrays) -> ctypes.Array:
        return (ctypes.c_void_p * max(1, len(arrays)))(*[a.ctypes.data for a in arrays])

    def _check(self, rc: int, what: str) -> None:
        if rc != 0:
            raise KilnRuntimeError(f"{what} failed: {self._lib.kiln_last_error().decode(errors='replace')}")

    def run(self, feeds: Mapping[str, object]) -> dict[str, np.ndarray]:
        """Run once; returns fresh arrays {output name: array}."""
        arrays, outs = self._prepare(feeds)
        rc = self._lib.kiln_run(self._handle, self._pointer_table(arrays), self._pointer_table(outs))
        self._check(rc, "kiln_run")
        return trim_bounded({t["name"]: o for t, o in zip(self._outputs, outs)})

    def random_inputs(self, seed: int = 0) -> dict[str, np.ndarray]:
        """Seeded random feeds of the right shapes and dtypes (for benchmarks and smoke tests)."""
        rng = np.random.default_rng(seed)
        feeds = {}
        for t in self._inputs:
            dt = _np_dtype(t["dtype"])
            if t["dtype"] == "bool":
                feeds[t["name"]] = rng.random(t["shape"]) < 0.5
            elif t["dtype"] in _SUBBYTE_BITS and dt.kind == "u":  # raw stand-in: valid low bits only
                feeds[t["name"]] = rng.integers(0, 1 << _SUBBYTE_BITS[t["dtype"]], size=t["shape"]).astype(dt)
            elif dt.kind in "iu":
                feeds[t["name"]] = rng.integers(0, 10, size=t["shape"]).astype(dt)
            else:
                feeds[t["name"]] = rng.standard_normal(t["shape"]).astype(np.float32).astype(dt)
        return feeds

    def benchmark(self, repeat: int = 50, warmup: int = 5, number: int = 1, *,
                  feeds: Mapping[str, object] | None = None) -> dict:
        """Latency of one run in ms: median/mean/min/quartiles/p90 over `repeat` samples of `number` runs each."""
        arrays, outs = self._prepare(feeds if feeds is not None else self.random_inputs())
        ins, outp = self._pointer_table(arrays), self._pointer_table(outs)
        run, handle = self._lib.kiln_run, self._handle
        for _ in range(max(0, warmup)):
            self._check(run(handle, ins, outp), "kiln_run")
        samples = []
        for _ in range(max(1, repeat)):
            t0 = time.perf_counter()
            for _ in range(max(1, number)):
                rc = run(handle, ins, outp)
            samples.append((time.perf_counter() - t0) * 1e3 / max(1, number))
            self._check(rc, "kiln_run")
        return {"median_ms": statistics.median(samples), "mean_ms": statistics.fmean(samples),
                "min_ms": min(samples), "p25_ms": float(np.percentile(samples, 25)),
                "p75_ms": float(np.percentile(samples, 75)), "p90_ms": float(np.percentile(samples, 90)),
                "runs": len(samples) * max(1, number)}

    def profile(self, repeat: int = 10, *, feeds: Mapping[str, object] | None = None) -> list[dict]:
        """Per kernel call: [{"index", "name", "time_ms"}], the median over `repeat` profiled runs."""
        arrays, outs = self._prepare(feeds if feeds is not None else self.random_inputs())
        ins, outp = self._pointer_table(arrays), self._pointer_table(outs)
        n = self._lib.kiln_num_kernel_calls()
        times = np.zeros((max(1, repeat), max(1, n)), dtype=np.float64)
        for r in range(times.shape[0]):
            row = times[r]
            self._check(self._lib.kiln_profile(self._handle, ins, outp, row.ctypes.data), "kiln_profile")
        med = np.median(times, axis=0)
        return [{"index": i, "name": self._lib.kiln_kernel_call_name(i).decode(), "time_ms": float(med[i])}
                for i in range(n)]

    # ------------------------------------------------------------ lifetime

    def close(self) -> None:
        if self._handle is not None:
            self._lib.kiln_free(self._handle)
            self._handle = None
        if self._owned_dir:
            shutil.rmtree(self._owned_dir, ignore_errors=True)
            self._owned_dir = None

    def __enter__(self) -> "Module":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        sig = lambda ts: ", ".join(f"{t['name']}: {t['dtype']}{list(t['shape'])}" for t in ts)  # noqa: E731
        return f"<kiln Module ({sig(self._inputs)}) -> ({sig(self._outputs)})>"
