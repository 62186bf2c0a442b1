"""Running an artifact built for another CPU under qemu-user: correctness only, never timings."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional

import numpy as np

from .loader import KilnRuntimeError, Module, _np_dtype, trim_bounded

EMULATED = "emulated (correctness only; timings are not meaningful)"
HARNESS_SOURCE = Path(__file__).resolve().parent / "kiln_emulation_harness.c"
RUN_TIMEOUT_S = 900  # a whole model under emulation (tens of times slower than native)
_STDERR_LINES = 6

_harnesses: dict[tuple[str, str], bytes] = {}
_harness_lock = threading.Lock()


def harness_bytes(compiler: str, source: Path = HARNESS_SOURCE) -> bytes:
    """The executable built from the C program `source` (the model harness, or the tuner's kernel timer) for
    `compiler`'s architecture, built once per process."""
    from ..process.tool import run_tool

    key = (compiler, hashlib.sha256(source.read_bytes()).hexdigest())
    with _harness_lock:
        if key not in _harnesses:
            with tempfile.TemporaryDirectory(prefix="kiln-harness-") as tmp:
                exe = Path(tmp) / "harness"
                run_tool([compiler, "-O2", "-std=c11", "-D_POSIX_C_SOURCE=200809L", "-o", str(exe),
                          str(source), "-ldl"], f"building {source.stem}")
                _harnesses[key] = exe.read_bytes()
        return _harnesses[key]


@dataclass(frozen=True)
class QemuUser:
    """qemu-user for one architecture: runs that architecture's Linux programs here, against the cross
    toolchain's libraries (`sysroot`); `compiler` builds the harness the artifact is run through."""

    arch: str
    qemu: str
    sysroot: str
    compiler: str

    @classmethod
    def find(cls, arch: str, compiler: str) -> Optional["QemuUser"]:
        """qemu-`arch` and the cross libraries (KILN_QEMU_LD_PREFIX, else /usr/`arch`-linux-gnu), or None."""
        qemu = shutil.which(f"qemu-{arch}") or shutil.which(f"qemu-{arch}-static")
        sysroot = os.environ.get("KILN_QEMU_LD_PREFIX") or f"/usr/{arch}-linux-gnu"
        if qemu is None or not Path(sysroot, "lib").is_dir():
            return None
        return cls(arch, qemu, sysroot, compiler)

    @property
    def name(self) -> str:
        return Path(self.qemu).name

    def describe(self) -> str:
        return f"{self.name} -L {self.sysroot}"

    def command(self, program: "str | Path", *args: str) -> list[str]:
        return [self.qemu, "-L", self.sysroot, str(program), *args]

    def load(self, directory: "str | Path", num_threads: Optional[int] = None, owned_dir: bool = False) -> "EmulatedModule":
        """`owned_dir`: `directory` is removed on close (an archive extracted for this module)."""
        return EmulatedModule(directory, self, num_threads, owned_dir)


class EmulatedModule(Module):
    """An artifact's model run under an emulator: the same `run(feeds) -> outputs` (and the same input
    checks) as the native Module; each run is one harness process. No benchmark or profile."""

    def __init__(self, directory: "str | Path", emulator: QemuUser, num_threads: Optional[int] = None,
                 owned_dir: bool = False):
        # Not Module.__init__: nothing is loaded into this process; only the tensor bookkeeping is shared.
        self._handle = None
        self._owned_dir = str(directory) if owned_dir else None
        self._scratch = None
        self._emulator = emulator
        self._directory = Path(directory)
        try:
            self.metadata = json.loads((self._directory / "metadata.json").read_text())
        except (OSError, ValueError) as e:
            raise KilnRuntimeError(f"{directory} is not a Kiln artifact: cannot read metadata.json ({e})") from None
        triple = str(self.metadata.get("triple") or self.metadata.get("target_triple") or "")
        if triple.split("-")[0] != emulator.arch:
            raise KilnRuntimeError(f"this artifact was built for {triple.split('-')[0] or 'an unknown CPU'}, "
                                   f"but the emulator runs {emulator.arch}")
        self._inputs = [dict(t, shape=tuple(int(d) for d in t["shape"])) for t in self.metadata.get("inputs", [])]
        self._outputs = [dict(t, shape=tuple(int(d) for d in t["shape"])) for t in self.metadata.get("outputs", [])]
        self._scratch = Path(tempfile.mkdtemp(prefix="kiln-emulated-"))
        self._harness = self._scratch / "harness"
        self._harness.write_bytes(harness_bytes(emulator.compiler))
        self._harness.chmod(self._harness.stat().st_mode | stat.S_IXUSR)
        self._threads = min(num_threads or os.cpu_count() or 1, os.cpu_count() or 1)
        self._ranges = self.metadata.get("dynamic_shapes")  # input-shape ranges: shaped runs (PREFIX_run_shaped)
        self._handle = True  # open: Module._prepare refuses a closed module

    def set_num_threads(self, n: int) -> None:
        """Threads of the emulated pool, at most this machine's CPUs (qemu runs each on a host thread)."""
        self._threads = max(1, min(int(n) or os.cpu_count() or 1, os.cpu_count() or 1))

    @property
    def num_threads(self) -> int:
        return self._threads

    def run(self, feeds: Mapping[str, object]) -> dict[str, np.ndarray]:
        arrays, outs = self._prepare(feeds)
        shaped = bool(self._ranges) and self._off_max(arrays)  # the upper bounds are kiln_run's own shapes
        run_dir = Path(tempfile.mkdtemp(prefix="run-", dir=self._scratch))
        try:
            in_files = []
            for i, arr in enumerate(arrays):
                in_files.append(run_dir / f"in{i}.bin")
                in_files[-1].write_bytes(arr.tobytes())
            out_files = [run_dir / f"out{i}.bin" for i in range(len(outs))]
            lib = self._directory / self.metadata.get("library", "libkiln_model.so")
            weights = self._directory / self.metadata.get("weights", "weights.bin")
            prefix = str(self.metadata.get("symbol_prefix", "kiln"))  # a named artifact exports NAME_load, ...
            # A shaped run: each input with its actual shape, each output's buffer at its largest size (outs are
            # at the upper bounds, see _shaped_call) with what the harness needs to write it at its actual shape.
            ins = [f"{f}:{','.join(map(str, a.shape))}" if shaped else str(f) for f, a in zip(in_files, arrays)]
            out_specs = [f"{f}:{o.nbytes}" + (f":{o.itemsize}:{o.ndim}" if shaped else "") for f, o in zip(out_files, outs)]
            printed = self._execute(self._emulator.command(self._harness, str(lib.resolve()), str(weights.resolve()),
                                                           prefix, str(len(arrays)), *ins, *out_specs))
            shapes = ([tuple(int(d) for d in line.split(",") if d) for line in printed.split("\n")[:len(outs)]]
                      if shaped else [t["shape"] for t in self._outputs])
            results = {t["name"]: np.frombuffer(f.read_bytes(), dtype=_np_dtype(t["dtype"])).reshape(shape).copy()
                       for t, f, shape in zip(self._outputs, out_files, shapes)}
        finally:
            shutil.rmtree(run_dir, ignore_errors=True)
        return trim_bounded(results)

    def _shaped_call(self, arrays) -> tuple[None, list[tuple[int, ...]]]:
        """The library is not loaded here: the harness checks the input shapes and reports the outputs' actual shapes
        at run time; _prepare's output buffers are the largest (what the harness allocates)."""
        return None, [t["shape"] for t in self._outputs]

    def _execute(self, cmd: list[str]) -> str:
        """Runs the harness; returns what it printed (a shaped run's output shapes)."""
        env = dict(os.environ, KILN_NUM_THREADS=str(self._threads))
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, env=env)
        except OSError as e:
            raise KilnRuntimeError(f"cannot run {self._emulator.name}: {e}") from None
        except subprocess.TimeoutExpired:
            raise KilnRuntimeError(f"the model ran for more than {RUN_TIMEOUT_S} s under {self._emulator.name}") from None
        if proc.returncode != 0:
            lines = (proc.stderr or proc.stdout or "").strip().splitlines()[-_STDERR_LINES:]
            why = " | ".join(lines) or f"exit status {proc.returncode}"
            raise KilnRuntimeError(f"the model failed under {self._emulator.name}: {why}")
        return proc.stdout

    def benchmark(self, *args, **kwargs) -> dict:
        raise KilnRuntimeError(f"no benchmark of a model run under {self._emulator.name}: {EMULATED}")

    def profile(self, *args, **kwargs) -> list[dict]:
        raise KilnRuntimeError(f"no profile of a model run under {self._emulator.name}: {EMULATED}")

    def close(self) -> None:
        self._handle = None
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None
        if self._owned_dir is not None:
            shutil.rmtree(self._owned_dir, ignore_errors=True)
            self._owned_dir = None

    def __repr__(self) -> str:
        return super().__repr__().replace("<kiln Module", f"<kiln EmulatedModule ({self._emulator.name})", 1)


__all__ = ["EMULATED", "QemuUser", "EmulatedModule", "harness_bytes"]
