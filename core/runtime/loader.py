"""Load a Kiln artifact (.tar.gz or its extracted folder) and run it on numpy arrays.
Only numpy, ctypes and the standard library: this file ships in every artifact as `kiln_loader.py`."""
from __future__ import annotations

import ctypes
import functools
import importlib
import json
import os
import platform
import shutil
import statistics
import sys
import tarfile
import tempfile
import threading
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
    """The native library refused to load or run (its message comes from kiln_last_error()); `rc` is what the run
    returned (KILN_CONTROL_ERROR: the taken If branch was refused for the compiled shapes, ...), None before a run."""

    rc = None


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


def load(path: "str | os.PathLike", num_threads: int | None = None, isa: str | None = None) -> "Module":
    """Open an artifact: a `.tar.gz` (extracted to a fresh temporary folder) or an extracted folder. `isa`
    ("avx2", "avx512" or "auto"): which kernel variant a multi-ISA (`x86-64`) artifact runs, instead of the best
    this CPU has (or $KILN_ISA's); refused when this CPU lacks it."""
    path = os.fspath(path)
    if os.path.isdir(path):
        return Module(path, num_threads=num_threads, isa=isa)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no artifact at {path}")
    folder = _extract(path)
    try:
        return Module(folder, num_threads=num_threads, owned_dir=True, isa=isa)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise


BOUND_SUFFIX = "::bound"
SHAPE_SUFFIX = "::shape"


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
    for name in [n for n in results if n.endswith(SHAPE_SUFFIX)]:  # an If's branches differ in shape: the taken
        rank, *dims = (int(v) for v in results.pop(name))  # one's elements come first, contiguous
        target = name[: -len(SHAPE_SUFFIX)]
        shape = tuple(dims[:rank])
        results[target] = results[target].reshape(-1)[:int(np.prod(shape, dtype=np.int64))].reshape(shape).copy()
    return results


_addressof, _char_at = ctypes.addressof, ctypes.c_char.from_buffer

# Outputs this large are reused across runs once their caller drops them (Module._fresh_outputs); that needs
# exact reference counts, which CPython with its GIL keeps (not PyPy, nor free-threaded builds).
RECYCLE_BYTES = 1 << 20


def _refcount_at(items: list, k: int) -> int:
    """sys.getrefcount(items[k]), always through this one function, so that what the interpreter adds or
    leaves out (3.14 borrows some references) is the same here as in _unreferenced_count's probe."""
    return sys.getrefcount(items[k])


def _unreferenced_count() -> int | None:
    """What _refcount_at says of an object only a list refers to; None where counts are not exact."""
    if platform.python_implementation() != "CPython" or not getattr(sys, "_is_gil_enabled", lambda: True)():
        return None
    probe = [object()]
    alone = _refcount_at(probe, 0)
    held = probe[0]  # one more reference must show as one more
    return alone if _refcount_at(probe, 0) == alone + 1 and held is probe[0] else None


_UNREFERENCED = _unreferenced_count()


class _Shaped:
    """A shape standing for an array where only its shape matters (device buffers' shapes for _shaped_call)."""

    def __init__(self, shape) -> None:
        self.shape = tuple(int(d) for d in shape)


def _device_pointers(infos: list[dict], given: Mapping[str, object], shapes) -> ctypes.Array:
    """The device pointers of `given`'s buffers, each checked to be a dense GPU buffer of its tensor's element
    size at its shape in `shapes`."""
    table = (ctypes.c_uint64 * max(1, len(infos)))()
    for i, (t, shape) in enumerate(zip(infos, shapes)):
        face = getattr(given.get(t["name"]), "__cuda_array_interface__", None) or {}
        size, shape = np.dtype(face.get("typestr", "u1")).itemsize, tuple(shape)
        dense = tuple(int(np.prod(shape[d + 1:])) * size for d in range(len(shape)))  # C-contiguous strides
        if (tuple(face.get("shape", ())) != shape or size != _np_dtype(t["dtype"]).itemsize
                or face.get("strides") not in (None, dense)):
            raise KilnRuntimeError(f"run_device: {t['name']!r} must be a C-contiguous GPU buffer "
                                   f"(__cuda_array_interface__) of {t['dtype']} {list(shape)}")
        table[i] = face["data"][0]
    return table


def _data_pointer(array: np.ndarray) -> int:
    """The address of a C-contiguous array's first byte. Through the buffer protocol where numpy exports one
    (writable, non-empty, a buffer-protocol dtype): a seventh of `array.ctypes.data`'s cost, which builds a
    helper object per call and was most of a small model's run time."""
    try:
        return _addressof(_char_at(array))
    except (TypeError, ValueError, BufferError):  # read-only, empty, or an ml_dtypes dtype
        return array.ctypes.data


class Module:
    """A loaded model. `run({name: array}) -> {name: array}`; also a context manager."""

    def __init__(self, directory: str, num_threads: int | None = None, owned_dir: bool = False,
                 isa: str | None = None):
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
        # run() refills these tables instead of building new ones; the lock keeps another thread's run from
        # rewriting them while the library reads them (the library runs one model's calls in turn anyway).
        self._run_lock = threading.Lock()
        self._in_table = (ctypes.c_void_p * max(1, len(self._inputs)))()
        self._out_table = (ctypes.c_void_p * max(1, len(self._outputs)))()
        self._spare: list = [None] * len(self._outputs)  # large outputs run() may refill (see _fresh_outputs)
        lib_path = os.path.join(directory, self.metadata.get("library", "libkiln_model.so"))
        try:
            self._lib = ctypes.CDLL(os.path.abspath(lib_path))
        except OSError as e:
            raise KilnRuntimeError(f"cannot load the model library {lib_path}: {e}") from None
        self._bind()
        self._choose_isa(isa)
        self._ranges = self.metadata.get("dynamic_shapes")  # input-shape ranges: runs go through kiln_run_shaped
        self._shape_calls: dict = {}
        if self._ranges:
            self._bind_shaped()
        if self._lib.kiln_num_inputs() != len(self._inputs) or self._lib.kiln_num_outputs() != len(self._outputs):
            raise KilnRuntimeError("metadata.json and the library disagree on the number of inputs/outputs")
        weights = os.path.join(directory, self.metadata.get("weights", "weights.bin"))
        handle = self._lib.kiln_load(os.fsencode(os.path.abspath(weights)))
        if not handle:
            raise KilnRuntimeError(self._lib.kiln_last_error().decode(errors="replace"))
        self._handle = handle
        self._handle_arg = ctypes.c_void_p(handle)
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
        # run()'s own handle on kiln_run, without argtypes: it passes a c_void_p and two c_void_p arrays, which
        # ctypes then hands over as they are instead of converting each argument (half the call's cost).
        self._run_entry = lib._FuncPtr((prefix + "_run", lib))
        self._run_entry.restype = ctypes.c_int

    def _choose_isa(self, isa: str | None) -> None:
        """A multi-ISA library's kernel variant: `isa` when given (PREFIX_set_isa), else what it chose when it loaded."""
        prefix = self.metadata.get("symbol_prefix", "kiln")
        try:
            self._isa = getattr(self._lib, prefix + "_isa")
        except AttributeError:  # one ISA
            self._isa = None
            if isa not in (None, "auto"):
                raise KilnRuntimeError(f"this artifact (target {self.metadata.get('target')}) has one ISA variant: "
                                       f"the isa option ({isa!r}) applies to multi-ISA (x86-64) artifacts") from None
            return
        self._isa.restype = ctypes.c_char_p
        if isa is not None:
            choose, refusal = getattr(self._lib, prefix + "_set_isa"), getattr(self._lib, prefix + "_isa_refusal")
            choose.argtypes, refusal.restype = [ctypes.c_char_p], ctypes.c_char_p
            if choose(isa.encode()) != 0:
                raise KilnRuntimeError(refusal().decode(errors="replace"))

    @property
    def isa(self) -> str | None:
        """The kernel variant a multi-ISA (x86-64) artifact runs ("avx2" or "avx512"); None for a single-ISA one."""
        return self._isa().decode() if self._isa is not None else None

    def _bind_shaped(self) -> None:
        prefix = self.metadata.get("symbol_prefix", "kiln")
        try:
            fn = getattr(self._lib, prefix + "_run_shaped")
        except AttributeError:
            raise KilnRuntimeError(f"metadata.json declares input-shape ranges, but the model library lacks "
                                   f"{prefix}_run_shaped") from None
        fn.restype, fn.argtypes = ctypes.c_int, [ctypes.c_void_p] * 5
        self._lib.kiln_run_shaped = fn
        shapes = getattr(self._lib, prefix + "_output_shapes")
        shapes.restype, shapes.argtypes = ctypes.c_int, [ctypes.c_void_p] * 2
        self._lib.kiln_output_shapes = shapes
        # kiln_profile_shaped and its bucket's call names (a library built before them profiles its largest shapes)
        self._profile_shaped = None
        found = []
        for name, res, args in (("_profile_shaped", ctypes.c_int, [ctypes.c_void_p] * 5),
                                ("_shaped_bucket", ctypes.c_int, [ctypes.c_void_p]),
                                ("_bucket_num_calls", ctypes.c_int, [ctypes.c_int]),
                                ("_bucket_call_name", ctypes.c_char_p, [ctypes.c_int, ctypes.c_int])):
            fn = getattr(self._lib, prefix + name, None)
            if fn is None:
                return
            fn.restype, fn.argtypes = res, args
            found.append(fn)
        self._profile_shaped = tuple(found)

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

    @functools.cached_property
    def _io_plan(self) -> tuple:
        """What run() looks up per call, resolved once: inputs [(name, dtype, shape)], output names, dtypes and
        shapes, and whether an output has a data-dependent length (then results are trimmed)."""
        return ([(t["name"], _np_dtype(t["dtype"]), t["shape"]) for t in self._inputs],
                [t["name"] for t in self._outputs], [_np_dtype(t["dtype"]) for t in self._outputs],
                [t["shape"] for t in self._outputs],
                any(t["name"].endswith((BOUND_SUFFIX, SHAPE_SUFFIX)) for t in self._outputs))

    def _exact_inputs(self, feeds, any_shape: bool = False) -> list[np.ndarray] | None:
        """The feeds in input order when each already is what the library takes (a C-contiguous ndarray of the
        input's dtype and largest shape, or with `any_shape` any shape of its rank: the library checks a ranged
        model's shapes, under its name, nothing else given); else None: then _prepare checks, converts and
        explains."""
        specs = self._io_plan[0]
        if type(feeds) is not dict or len(feeds) != len(specs) or self._handle is None:
            return None
        arrays = []
        for name, dtype, shape in specs:
            a = feeds.get(name)
            if type(a) is not np.ndarray or a.dtype != dtype or not a.flags.c_contiguous or (
                    a.ndim != len(shape) if any_shape else a.shape != shape):
                return None
            arrays.append(a)
        return arrays

    def _output_arrays(self, shapes, out: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        """Fresh arrays for the outputs, except those `out` gives (checked: kernels write them in place)."""
        _, names, dtypes, _, _ = self._io_plan
        if type(out) is not dict and not isinstance(out, Mapping):
            raise TypeError(f"out must be a dict of output name -> array, got {type(out).__name__}")
        unknown = [n for n in out if n not in names]
        if unknown:
            raise ValueError(f"out names unknown output(s) {', '.join(map(repr, unknown))}; the model's outputs are "
                             f"{', '.join(map(repr, names))}")
        outs = []
        for name, shape, dtype in zip(names, shapes, dtypes):
            given = out.get(name)
            if given is None:
                outs.append(np.empty(shape, dtype))
                continue
            if not isinstance(given, np.ndarray) or given.dtype != dtype or given.shape != shape or \
                    not (flags := given.flags).c_contiguous or not flags.writeable:
                what = (f"{given.dtype}{list(given.shape)}" if isinstance(given, np.ndarray) else type(given).__name__)
                raise ValueError(f"out[{name!r}] must be a writable C-contiguous {dtype}{list(shape)} array, "
                                 f"got {what}")
            outs.append(given)
        return outs

    def _refuse_overlaps(self, arrays, outs, in_ptrs, out_ptrs, out: Mapping[str, np.ndarray]) -> None:
        """An `out` buffer may overlap no input (the kernels read the inputs while they write the outputs) and
        no other `out` buffer (fresh outputs overlap nothing); all are C-contiguous: their byte spans say."""
        spans = [(in_ptrs[i] or 0, a.nbytes) for i, a in enumerate(arrays)]
        for k, (name, o) in enumerate(zip(self._io_plan[1], outs)):
            if name in out:
                start, size = out_ptrs[k] or 0, o.nbytes
                for other, other_size in spans:
                    if start < other + other_size and other < start + size:
                        raise ValueError(f"out[{name!r}] shares memory with an input or another output (the model "
                                         f"reads its inputs while it writes its outputs)")
                spans.append((start, size))

    def _prepare(self, feeds: Mapping[str, object], out: Mapping[str, np.ndarray] | None = None):
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
            if self._ranges and arr.ndim != len(t["shape"]):
                raise ValueError(f"input {t['name']!r} has rank {arr.ndim} (shape {tuple(arr.shape)}), expected rank "
                                 f"{len(t['shape'])}")
            if tuple(arr.shape) != t["shape"] and not self._ranges:
                raise ValueError(f"input {t['name']!r} has shape {tuple(arr.shape)}, expected {t['shape']}")
            arrays.append(np.require(arr, requirements="C"))  # (ascontiguousarray makes a 0-d input [1])
        shapes = self._shaped_call(arrays)[1] if self._ranges else [t["shape"] for t in self._outputs]
        if out is None:
            return arrays, [np.empty(s, d) for s, d in zip(shapes, self._io_plan[2])]
        return arrays, self._output_arrays(shapes, out)

    @staticmethod
    def _shape_table(shapes) -> ctypes.Array:
        """int64_t* const* over int64 arrays holding `shapes` (kept alive by the table's _keep)."""
        dims = [(ctypes.c_int64 * max(1, len(s)))(*s) for s in shapes]
        table = (ctypes.c_void_p * max(1, len(dims)))(*[ctypes.addressof(d) for d in dims])
        table._keep = dims
        return table

    def _shaped_call(self, arrays) -> tuple[ctypes.Array, list[tuple[int, ...]]]:
        """For these input shapes: the input-shape table kiln_run_shaped takes and the outputs' actual shapes
        (checked against the ranges by the library), remembered per shape (a server sees few distinct ones)."""
        key = tuple(a.shape for a in arrays)
        known = self._shape_calls.get(key)
        if known is None:
            table, out_shapes = self._shape_table(key), self._shape_table([t["shape"] for t in self._outputs])
            self._check(self._lib.kiln_output_shapes(table, out_shapes), "kiln_run_shaped")
            known = (table, [tuple(dims[:len(t["shape"])]) for dims, t in zip(out_shapes._keep, self._outputs)])
            if len(self._shape_calls) >= 256:
                self._shape_calls.clear()
            self._shape_calls[key] = known
        return known

    @staticmethod
    def _pointer_table(arrays) -> ctypes.Array:
        return (ctypes.c_void_p * max(1, len(arrays)))(*[_data_pointer(a) for a in arrays])

    def _check(self, rc: int, what: str) -> None:
        if rc != 0:
            err = KilnRuntimeError(f"{what} failed: {self._lib.kiln_last_error().decode(errors='replace')}")
            err.rc = rc
            raise err

    @functools.cached_property
    def _recycles(self) -> bool:
        """Whether an output is large enough for _fresh_outputs to reuse."""
        return _UNREFERENCED is not None and any(int(np.prod(t["shape"])) * _np_dtype(t["dtype"]).itemsize >= RECYCLE_BYTES
                                        for t in self._outputs)

    def _fresh_outputs(self, shapes, dtypes) -> list[np.ndarray]:
        """Output arrays for a run (under the run lock). A large one is the array the previous run returned for
        that output when nothing refers to it any more (its caller dropped it): a fresh large block is fresh
        pages each time (glibc maps blocks over 32 MiB anew, musl over 128 KiB), which the kernel zeroes at a
        cost near a fast model's (a 64 MB output: 3 ms more a run). ONNX Runtime's arena reuses outputs too."""
        if not self._recycles:
            return [np.empty(s, d) for s, d in zip(shapes, dtypes)]
        outs, spare = [], self._spare
        for k, (shape, dtype) in enumerate(zip(shapes, dtypes)):
            last = spare[k]
            # Only the spare list refers to it: no caller, no view (a view's base is the array).
            if last is not None and _refcount_at(spare, k) == _UNREFERENCED + 1 and last.shape == shape and \
                    last.dtype == dtype and (flags := last.flags).writeable and flags.c_contiguous:
                outs.append(last)
                continue
            fresh = np.empty(shape, dtype)
            spare[k] = fresh if fresh.nbytes >= RECYCLE_BYTES else None
            outs.append(fresh)
        return outs

    def run(self, feeds: Mapping[str, object], out: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        """Run once; returns {output name: array}: fresh arrays, except the outputs `out` names ({name: array of
        the output's dtype and shape, C-contiguous, writable}), which are written in place and returned (a
        serving loop then allocates nothing per call; a data-dependent output still comes back trimmed, a copy
        of its buffer's valid part). Feeds that already are C-contiguous arrays of the input's dtype and shape
        skip the checks and conversions of the general path."""
        arrays = self._exact_inputs(feeds)
        _, names, dtypes, shapes, bounded = self._io_plan
        outs = None
        if arrays is None and self._ranges and out is None:  # a shape in range, nothing to convert: a decoder's step
            ranged = self._exact_inputs(feeds, any_shape=True)
            if ranged is not None:
                table, out_shapes = self._shaped_call(ranged)
                outs = [np.empty(s, d) for s, d in zip(out_shapes, dtypes)]
                with self._run_lock:  # the tables are the module's own
                    ins, outp = self._in_table, self._out_table
                    for i, a in enumerate(ranged):
                        ins[i] = _data_pointer(a)
                    for i, o in enumerate(outs):
                        outp[i] = _data_pointer(o)
                    rc = self._lib.kiln_run_shaped(self._handle, ins, table, outp, None)
                self._check(rc, "kiln_run_shaped")
                return trim_bounded(dict(zip(names, outs)))
        if arrays is None:  # something to check or convert, or a shape below the ranges' upper bounds
            arrays, outs = self._prepare(feeds, out)
            if self._ranges and self._off_max(arrays):  # the upper bounds are kiln_run's own shapes
                if out is not None:
                    self._refuse_overlaps(arrays, outs, [*map(_data_pointer, arrays)], [*map(_data_pointer, outs)], out)
                return trim_bounded(self._run_shaped(arrays, outs))
        elif out is not None:
            outs = self._output_arrays(shapes, out)
        with self._run_lock:
            if outs is None:
                outs = self._fresh_outputs(shapes, dtypes)
            ins, outp = self._in_table, self._out_table
            for i, a in enumerate(arrays):
                ins[i] = _data_pointer(a)
            for i, o in enumerate(outs):
                outp[i] = _data_pointer(o)
            if out is not None:
                self._refuse_overlaps(arrays, outs, ins, outp, out)
            rc = self._run_entry(self._handle_arg, ins, outp)
        self._check(rc, "kiln_run")
        results = dict(zip(names, outs))
        return trim_bounded(results) if bounded else results

    def run_device(self, feeds: Mapping[str, object], out: Mapping[str, object], stream: object = 0) -> dict:
        """A GPU model on device buffers: `feeds` and `out` (one buffer per output, e.g. torch.empty(shape,
        device="cuda")) are C-contiguous objects with __cuda_array_interface__ (torch.cuda tensors, CuPy arrays,
        ...) of each tensor's shape and element size. All is queued on `stream` (a CUstream handle, or an
        object with .cuda_stream; 0: the default stream) and nothing is waited for (kiln_run_device). With
        input-shape ranges the inputs may have any shape in range and each output must have its actual shape
        (`output_shapes(...)` says it; kiln_run_device_shaped pads and cuts on the device)."""
        faces = [getattr(feeds.get(t["name"]), "__cuda_array_interface__", None) or {} for t in self._inputs]
        in_shapes = [tuple(f.get("shape", ())) if self._ranges else t["shape"] for f, t in zip(faces, self._inputs)]
        for shape, t in zip(in_shapes, self._inputs):
            if len(shape) != len(t["shape"]):
                raise KilnRuntimeError(f"run_device: {t['name']!r} must be a C-contiguous GPU buffer "
                                       f"(__cuda_array_interface__) of {t['dtype']} of rank {len(t['shape'])}")
        out_shapes = self.output_shapes(in_shapes)
        pointers = [_device_pointers(self._inputs, feeds, in_shapes), _device_pointers(self._outputs, out, out_shapes)]
        prefix = self.metadata.get("symbol_prefix", "kiln")
        if self._ranges:
            table = self._shaped_call([_Shaped(s) for s in in_shapes])[0]
            fn, args = getattr(self._lib, prefix + "_run_device_shaped"), (pointers[0], table, pointers[1], None)
        else:
            fn, args = getattr(self._lib, prefix + "_run_device"), tuple(pointers)
        fn.restype = ctypes.c_int
        self._check(fn(self._handle_arg, *args, ctypes.c_void_p(getattr(stream, "cuda_stream", stream) or None)),
                    "kiln_run_device")
        return dict(out)

    def output_shapes(self, input_shapes) -> list[tuple[int, ...]]:
        """The outputs' actual shapes for these input shapes (in the inputs' order), checked against the ranges."""
        if not self._ranges:
            return [t["shape"] for t in self._outputs]
        return self._shaped_call([_Shaped(s) for s in input_shapes])[1]

    def _off_max(self, arrays) -> bool:
        return any(tuple(a.shape) != t["shape"] for a, t in zip(arrays, self._inputs))

    def _run_shaped(self, arrays, outs) -> dict[str, np.ndarray]:
        """Any input shapes within the declared ranges; `outs` already have the actual output shapes."""
        rc = self._lib.kiln_run_shaped(self._handle, self._pointer_table(arrays), self._shaped_call(arrays)[0],
                                       self._pointer_table(outs), None)
        self._check(rc, "kiln_run_shaped")
        return {t["name"]: o for t, o in zip(self._outputs, outs)}

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
        if self._ranges and self._off_max(arrays):  # a shape below the upper bounds: the shaped entry point
            table, shaped = self._shaped_call(arrays)[0], self._lib.kiln_run_shaped
            run = lambda h, i, o: shaped(h, i, table, o, None)  # noqa: E731
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
        n, name = self._lib.kiln_num_kernel_calls(), self._lib.kiln_kernel_call_name
        run = lambda row: self._lib.kiln_profile(self._handle, ins, outp, row.ctypes.data)  # noqa: E731
        if self._ranges and self._off_max(arrays):  # the bucket kiln_run_shaped runs, timed at these shapes
            if self._profile_shaped is None:
                raise ValueError("profile runs the largest input shapes only (this library predates "
                                 "kiln_profile_shaped)")
            shaped, bucket_of, count, bucket_name = self._profile_shaped
            table = self._shaped_call(arrays)[0]
            bucket = bucket_of(table)
            self._check(-1 if bucket < 0 else 0, "kiln_shaped_bucket")
            n, name = count(bucket), functools.partial(bucket_name, bucket)
            run = lambda row: shaped(self._handle, ins, table, outp, row.ctypes.data)  # noqa: E731
        times = np.zeros((max(1, repeat), max(1, n)), dtype=np.float64)
        for r in range(times.shape[0]):
            self._check(run(times[r]), "kiln_profile")
        med = np.median(times, axis=0)
        return [{"index": i, "name": name(i).decode(), "time_ms": float(med[i])} for i in range(n)]

    # ------------------------------------------------------------ lifetime

    def close(self) -> None:
        if self._handle is not None:
            self._lib.kiln_free(self._handle)
            self._handle = None
            self._spare = [None] * len(self._spare)
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
