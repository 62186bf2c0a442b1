"""Calling single kernels of a built library from Python (tests, the tuner's measurements), with
arguments checked against the parameter list every library embeds (`kiln_kernels_json`)."""
from __future__ import annotations

import ctypes
import json
import os
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

import numpy as np

from ..errors import BuildError

_NUMPY_NAMES = {"bfloat16": "uint16"}  # numpy has no bfloat16; its raw bits travel as uint16


class KernelLibrary:
    def __init__(self, path: "str | Path"):
        self.path = Path(path)
        try:
            self._lib = _dlopen(self.path)
        except OSError as e:
            raise BuildError(f"cannot load kernel library {self.path}: {e}") from None
        # The symbol is the string's bytes themselves (a char array), not a pointer to them.
        try:
            start = ctypes.addressof(ctypes.c_char.in_dll(self._lib, "kiln_kernels_json"))
        except ValueError:
            raise BuildError(f"{self.path} is not a Kiln kernel library (no kiln_kernels_json)") from None
        text = ctypes.string_at(start)
        self.signatures: dict[str, dict] = {k["name"]: k for k in json.loads(text.decode())}
        self._funcs: dict[str, ctypes._CFuncPtr] = {}

    @property
    def names(self) -> list[str]:
        return list(self.signatures)

    def set_num_threads(self, n: int) -> None:
        """Threads of this library's pool for parallel loops; 0 restores the default
        ($KILN_NUM_THREADS, else $OMP_NUM_THREADS, else one per CPU)."""
        self._lib.kiln_pool_set_threads(ctypes.c_int(int(n)))

    @property
    def num_threads(self) -> int:
        return int(self._lib.kiln_pool_get_threads())

    @property
    def worker_chunks(self) -> int:
        """Parallel-loop chunks run by pool workers rather than the calling thread, since loading."""
        fn = self._lib.kiln_pool_worker_chunks
        fn.restype = ctypes.c_int64
        return int(fn())

    def _func(self, name: str):
        if name not in self.signatures:
            raise KeyError(f"kernel {name!r} is not in {self.path.name}; it has {', '.join(self.signatures)}")
        fn = self._funcs.get(name)
        if fn is None:
            fn = getattr(self._lib, name)
            fn.restype = None
            fn.argtypes = [ctypes.c_void_p] * len(self.signatures[name]["params"])
            self._funcs[name] = fn
        return fn

    def _pointers(self, name: str, arrays) -> list[int]:
        if name not in self.signatures:
            raise KeyError(f"kernel {name!r} is not in {self.path.name}; it has {', '.join(self.signatures)}")
        return [a.ctypes.data for a in checked_arrays(self.signatures[name], arrays)]

    def call(self, name: str, *arrays: np.ndarray) -> None:
        """Run kernel `name` once on `arrays` (inputs, outputs, workspaces, in parameter order)."""
        self._func(name)(*self._pointers(name, arrays))

    def bind(self, name: str, *arrays: np.ndarray) -> Callable[[], None]:
        """Kernel `name` on `arrays`, checked once: a call that costs no more than the kernel (timing loops)."""
        fn, ptrs = self._func(name), self._pointers(name, arrays)

        def call() -> None:
            fn(*ptrs)

        call.arrays = arrays  # the pointers are into these: they must live as long as the call
        return call

    def time_ms(self, name: str, *arrays: np.ndarray, repeat: int = 10, number: int = 1, warmup: int = 1) -> float:
        """Median wall time of one call in milliseconds (each sample averages `number` calls)."""
        call = self.bind(name, *arrays)
        for _ in range(warmup):
            call()
        samples = []
        for _ in range(max(1, repeat)):
            t0 = time.perf_counter()
            for _ in range(max(1, number)):
                call()
            samples.append((time.perf_counter() - t0) * 1e3 / max(1, number))
        return statistics.median(samples)


def checked_arrays(signature: dict, arrays) -> list[np.ndarray]:
    """`arrays` after checking them against a kernel's parameters (count, dtype, size, contiguity)."""
    name, params = signature["name"], signature["params"]
    if len(arrays) != len(params):
        raise ValueError(f"kernel {name} takes {len(params)} arrays, got {len(arrays)}")
    for arr, p in zip(arrays, params):
        if not isinstance(arr, np.ndarray):
            raise TypeError(f"kernel {name} parameter {p['name']}: expected a numpy array, got {type(arr).__name__}")
        want = np.dtype(_NUMPY_NAMES.get(p["dtype"], p["dtype"]))
        numel = int(np.prod(p["shape"], dtype=np.int64))
        if arr.dtype != want and not (p["dtype"] == "bfloat16" and arr.dtype.itemsize == 2):
            raise ValueError(f"kernel {name} parameter {p['name']}: dtype {arr.dtype}, expected {want}")
        if arr.size != numel:
            raise ValueError(f"kernel {name} parameter {p['name']}: {arr.size} elements, expected {numel}")
        if not arr.flags.c_contiguous:
            raise ValueError(f"kernel {name} parameter {p['name']}: array must be C-contiguous")
    return list(arrays)


# realpath -> (device, inode) of the file first loaded under that name in this process.
_LOADED: dict[str, tuple[int, int]] = {}
_LOADED_LOCK = threading.Lock()


def _dlopen(path: Path) -> ctypes.CDLL:
    """dlopen `path`, even when another library was loaded from the same path before (a rebuild):
    glibc would hand back the old one by name, so a new file goes in under a fresh alias."""
    key, st = os.path.realpath(path), os.stat(path)
    ident = (st.st_dev, st.st_ino)
    with _LOADED_LOCK:
        first = _LOADED.setdefault(key, ident)
    if first == ident:
        return ctypes.CDLL(key)
    alias_dir = tempfile.mkdtemp(prefix="kiln-kernels-")
    try:
        alias = os.path.join(alias_dir, os.path.basename(key))
        shutil.copyfile(key, alias)
        return ctypes.CDLL(alias)  # the mapping outlives the file
    finally:
        shutil.rmtree(alias_dir, ignore_errors=True)


def load_kernels(lib_path: "str | Path") -> KernelLibrary:
    return KernelLibrary(lib_path)
