"""The CUDA driver API from Python through ctypes (libcuda.so.1, no toolkit): load PTX, move arrays,
launch kernels, time them with events. Serves single-kernel calls (tests, the tuner's GPU runner)."""
from __future__ import annotations

import ctypes
import threading
from typing import Optional, Sequence

import numpy as np

from ..errors import KilnError


class CudaError(KilnError):
    """The CUDA driver is missing, has no GPU, or failed a call (named with its CUresult)."""

    code = "cuda_error"


_c = ctypes
CUdeviceptr = _c.c_uint64
STATIC_SHARED_LIMIT = 48 * 1024  # a kernel gets more dynamic shared memory only once allowed (cuFuncSetAttribute)


class Driver:
    """One process-wide handle on libcuda with the device's primary context current."""

    def __init__(self) -> None:
        try:
            self.lib = _c.CDLL("libcuda.so.1")
        except OSError as e:
            raise CudaError(f"no NVIDIA driver: cannot load libcuda.so.1 ({e})") from None
        self._check(self.lib.cuInit(0), "cuInit")
        count = _c.c_int(0)
        self._check(self.lib.cuDeviceGetCount(_c.byref(count)), "cuDeviceGetCount")
        if count.value < 1:
            raise CudaError("the NVIDIA driver sees no GPU")
        self.device = _c.c_int(0)
        self._check(self.lib.cuDeviceGet(_c.byref(self.device), 0), "cuDeviceGet")
        self.context = _c.c_void_p()
        self._check(self.lib.cuDevicePrimaryCtxRetain(_c.byref(self.context), self.device), "cuDevicePrimaryCtxRetain")
        self.make_current()
        self.lib.cuEventElapsedTime.argtypes = [_c.POINTER(_c.c_float), _c.c_void_p, _c.c_void_p]
        for name in ("cuMemAlloc_v2", "cuMemFree_v2", "cuMemcpyHtoD_v2", "cuMemcpyDtoH_v2", "cuMemsetD8_v2"):
            getattr(self.lib, name).argtypes = {
                "cuMemAlloc_v2": [_c.POINTER(CUdeviceptr), _c.c_size_t],
                "cuMemFree_v2": [CUdeviceptr],
                "cuMemcpyHtoD_v2": [CUdeviceptr, _c.c_void_p, _c.c_size_t],
                "cuMemcpyDtoH_v2": [_c.c_void_p, CUdeviceptr, _c.c_size_t],
                "cuMemsetD8_v2": [CUdeviceptr, _c.c_ubyte, _c.c_size_t],
            }[name]

    def make_current(self) -> None:
        self._check(self.lib.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")

    def _check(self, result: int, what: str) -> None:
        if result != 0:
            name = _c.c_char_p()
            self.lib.cuGetErrorName(result, _c.byref(name))
            raise CudaError(f"{what} failed: {(name.value or b'CUDA error').decode()} ({result})")

    def compute_capability(self) -> tuple[int, int]:
        values = [_c.c_int(0), _c.c_int(0)]
        for value, attribute in zip(values, (75, 76)):  # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, _MINOR
            self._check(self.lib.cuDeviceGetAttribute(_c.byref(value), attribute, self.device), "cuDeviceGetAttribute")
        return values[0].value, values[1].value

    def device_name(self) -> str:
        buf = _c.create_string_buffer(256)
        self._check(self.lib.cuDeviceGetName(buf, 256, self.device), "cuDeviceGetName")
        return buf.value.decode()


_DRIVER: Optional[Driver] = None
_LOCK = threading.Lock()


def driver() -> Driver:
    global _DRIVER
    with _LOCK:
        if _DRIVER is None:
            _DRIVER = Driver()
        _DRIVER.make_current()
        return _DRIVER


def gpu_available() -> bool:
    try:
        driver()
        return True
    except CudaError:
        return False


class DeviceBuffer:
    def __init__(self, nbytes: int):
        self.drv = driver()
        self.nbytes = max(1, int(nbytes))
        self.ptr = CUdeviceptr()
        self.drv._check(self.drv.lib.cuMemAlloc_v2(_c.byref(self.ptr), self.nbytes), "cuMemAlloc")

    def upload(self, array: np.ndarray) -> None:
        self.drv._check(self.drv.lib.cuMemcpyHtoD_v2(self.ptr, array.ctypes.data, array.nbytes), "cuMemcpyHtoD")

    def download(self, array: np.ndarray) -> None:
        self.drv._check(self.drv.lib.cuMemcpyDtoH_v2(array.ctypes.data, self.ptr, array.nbytes), "cuMemcpyDtoH")

    def free(self) -> None:
        if self.ptr.value:
            self.drv.lib.cuMemFree_v2(self.ptr)
            self.ptr = CUdeviceptr()


class Module:
    """PTX loaded on the GPU; `launch(name, grid, block, buffers)` runs one kernel on device buffers."""

    def __init__(self, ptx: str):
        self.drv = driver()
        self.handle = _c.c_void_p()
        log = _c.create_string_buffer(8192)
        # cuModuleLoadDataEx with an error log: a PTX the driver's JIT rejects says why.
        opts = (_c.c_int * 2)(5, 6)  # CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES
        vals = (_c.c_void_p * 2)(_c.cast(log, _c.c_void_p), _c.c_void_p(len(log)))
        result = self.drv.lib.cuModuleLoadDataEx(_c.byref(self.handle), _c.c_char_p(ptx.encode() + b"\0"), 2, opts, vals)
        if result != 0:
            self.drv._check(result, f"loading PTX ({log.value.decode(errors='replace').strip()[:400]})")
        self._functions: dict[str, _c.c_void_p] = {}
        self._allowed: set[str] = set()  # functions allowed more than 48 KiB of dynamic shared memory

    def function(self, name: str) -> _c.c_void_p:
        if name not in self._functions:
            fn = _c.c_void_p()
            self.drv._check(self.drv.lib.cuModuleGetFunction(_c.byref(fn), self.handle, name.encode()),
                            f"cuModuleGetFunction({name})")
            self._functions[name] = fn
        return self._functions[name]

    def launch(self, name: str, grid: Sequence[int], block: Sequence[int], buffers: Sequence[DeviceBuffer],
               dynamic_shared: int = 0) -> None:
        """`dynamic_shared` bytes of dynamic shared memory (beyond 48 KiB the function is allowed them first)."""
        if dynamic_shared > STATIC_SHARED_LIMIT and name not in self._allowed:
            self.drv._check(self.drv.lib.cuFuncSetAttribute(self.function(name), 8, _c.c_int(dynamic_shared)),
                            f"cuFuncSetAttribute({name}, MAX_DYNAMIC_SHARED_SIZE_BYTES={dynamic_shared})")
            self._allowed.add(name)
        args = [CUdeviceptr(b.ptr.value) for b in buffers]
        params = (_c.c_void_p * len(args))(*[_c.cast(_c.byref(a), _c.c_void_p) for a in args])
        self.drv._check(self.drv.lib.cuLaunchKernel(self.function(name), *map(_c.c_uint, grid), *map(_c.c_uint, block),
                                                    _c.c_uint(dynamic_shared), None, params, None),
                        f"launching {name}")

    def synchronize(self) -> None:
        self.drv._check(self.drv.lib.cuCtxSynchronize(), "cuCtxSynchronize")

    def time_ms(self, run, repeat: int, number: int) -> list[float]:
        """Device time of `number` back-to-back `run()`s per sample, by CUDA events: ms per run."""
        start, stop = _c.c_void_p(), _c.c_void_p()
        self.drv._check(self.drv.lib.cuEventCreate(_c.byref(start), 0), "cuEventCreate")
        self.drv._check(self.drv.lib.cuEventCreate(_c.byref(stop), 0), "cuEventCreate")
        samples = []
        try:
            for _ in range(max(1, repeat)):
                self.drv._check(self.drv.lib.cuEventRecord(start, None), "cuEventRecord")
                for _ in range(max(1, number)):
                    run()
                self.drv._check(self.drv.lib.cuEventRecord(stop, None), "cuEventRecord")
                self.drv._check(self.drv.lib.cuEventSynchronize(stop), "cuEventSynchronize")
                ms = _c.c_float()
                self.drv._check(self.drv.lib.cuEventElapsedTime(_c.byref(ms), start, stop), "cuEventElapsedTime")
                samples.append(ms.value / max(1, number))
        finally:
            self.drv.lib.cuEventDestroy_v2(start)
            self.drv.lib.cuEventDestroy_v2(stop)
        return samples

    def close(self) -> None:
        if self.handle.value:
            self.drv.lib.cuModuleUnload(self.handle)
            self.handle = _c.c_void_p()
