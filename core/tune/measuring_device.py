"""Measuring devices: a machine's way of running a batch of tuning candidates (their libraries' bytes and kernel
signatures) against the reference kernel and timing them. The same batch runs natively where the candidates' CPU
is this machine's (loaded as the local tuner loads them), or under qemu-user where it is not (correctness only:
timings are not meaningful)."""
from __future__ import annotations

import base64
import hashlib
import json
import signal
import stat
import subprocess
import tempfile
import zlib
from pathlib import Path
from typing import Optional

import numpy as np

from ..errors import KilnError
from ..runtime.emulated import EMULATED, QemuUser, harness_bytes
from ..target import Target
from .measure import BuildResult, LocalRunner, MeasureErrorNo, MeasureResult
from .measure_worker import mismatch, seeded_arrays

TIMER_SOURCE = Path(__file__).resolve().parent / "kiln_kernel_timer.c"
EMULATION_SLOWDOWN = 20  # a candidate under qemu gets this many times the native run timeout
_KEPT_REFERENCES = 8  # reference outputs an emulated device keeps (one per task being tuned)


class NoMeasuringDeviceError(KilnError):
    """This machine can neither run nor emulate code of the asked device kind."""

    code = "no_measuring_device"


# -- the batch: what travels between a compile and a measuring device (JSON-safe) ------------------------------------

def candidate_entry(candidate_id: str, build: BuildResult, signature: dict) -> dict:
    """One built candidate as a batch carries it: its id (results are keyed by it), kernel name, signature and
    library bytes (compressed, base64)."""
    data = Path(build.lib).read_bytes()
    return {"id": candidate_id, "name": build.name, "file": Path(build.lib).name, "signature": signature,
            "lib": base64.b64encode(zlib.compress(data, 6)).decode("ascii")}


def library_bytes(entry: dict) -> bytes:
    return zlib.decompress(base64.b64decode(entry["lib"]))


def error_answer(error_no: MeasureErrorNo, msg: str) -> dict:
    return {"error": int(error_no), "msg": msg}


def measure_result(answer: dict, all_cost: float, timestamp: float) -> MeasureResult:
    """A candidate's answer (`{"costs"}` or `{"error", "msg"}`) as the tuner's MeasureResult."""
    if "error" in answer:
        return MeasureResult((), MeasureErrorNo(int(answer["error"])), str(answer.get("msg", "")), all_cost, timestamp)
    return MeasureResult(tuple(float(c) for c in answer["costs"]), MeasureErrorNo.NO_ERROR, "", all_cost, timestamp)


# -- devices ---------------------------------------------------------------------------------------------------------

class MeasuringDevice:
    """Runs batches for one device kind on this machine. `measure(batch)` answers
    `{"batch_id", "device", "emulated", "results": {candidate id: {"costs": [s, ...]} | {"error", "msg"}}}`."""

    emulated = False

    def __init__(self, target: Target):
        self.target = target

    def describe(self) -> str:
        raise NotImplementedError

    def measure(self, batch: dict) -> dict:
        with tempfile.TemporaryDirectory(prefix="kiln-measure-") as tmp:
            folder = Path(tmp)
            reference = self._write(batch.get("reference"), folder / "reference")
            candidates = [(entry, self._write(entry, folder / f"c{k}")) for k, entry in enumerate(batch["candidates"])]
            results = self._run(batch, folder, reference, candidates)
        answer = {"batch_id": batch.get("batch_id"), "kind": self.target.name, "device": self.describe(),
                  "emulated": self.emulated, "results": results}
        if self.emulated:
            answer["note"] = EMULATED
        return answer

    @staticmethod
    def _write(entry: Optional[dict], folder: Path) -> Optional[Path]:
        if entry is None:
            return None
        folder.mkdir()
        path = folder / Path(entry["file"]).name
        path.write_bytes(library_bytes(entry))
        return path

    def _run(self, batch: dict, folder: Path, reference: Optional[Path],
             candidates: list[tuple[dict, Path]]) -> dict[str, dict]:
        raise NotImplementedError


class NativeDevice(MeasuringDevice):
    """The candidates' CPU is this machine's: the local tuner's runner loads and times them (a real Arm board
    serving its own kind measures this way)."""

    def describe(self) -> str:
        return f"{self.target.name} (native)"

    def _run(self, batch, folder, reference, candidates):
        runner = LocalRunner(timeout_s=float(batch["timeout_s"]), min_repeat_ms=float(batch["min_repeat_ms"]),
                             repeat=int(batch["repeat"]), threads=int(batch.get("threads") or 0),
                             seed=int(batch.get("seed", 0)))
        ref = BuildResult(str(reference), batch["reference"]["name"]) if reference is not None else None
        try:
            measured = runner.run([BuildResult(str(path), entry["name"]) for entry, path in candidates], ref,
                                  batch.get("constant_inputs", ()))
        finally:
            runner.close()
        return {entry["id"]: ({"costs": list(res.costs)} if res.ok else error_answer(res.error_no, res.error_msg))
                for (entry, _), res in zip(candidates, measured)}


class EmulatedDevice(MeasuringDevice):
    """The candidates' CPU is emulated by qemu-user: each candidate runs once through a small timer program built
    with the cross compiler, its outputs checked against the reference kernel's (computed once per task)."""

    emulated = True

    def __init__(self, target: Target, emulator: QemuUser):
        super().__init__(target)
        self.emulator = emulator
        self._references: dict[str, list[np.ndarray]] = {}

    def describe(self) -> str:
        return f"{self.target.name} (emulated: {self.emulator.describe()})"

    def _timer(self, folder: Path) -> Path:
        exe = folder / "kiln_kernel_timer"
        exe.write_bytes(harness_bytes(self.emulator.compiler, TIMER_SOURCE))
        exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
        return exe

    def _call(self, timer: Path, lib: Path, name: str, signature: dict, seed: int, folder: Path, repeat: int,
              min_repeat_ms: float, timeout_s: float) -> tuple[Optional[list[np.ndarray]], list[float], dict]:
        """Runs kernel `name` once (and `repeat` timed samples): its outputs and costs, or an error answer."""
        arrays = seeded_arrays(signature, seed)
        lo, hi = signature["num_inputs"], signature["num_inputs"] + signature["num_outputs"]
        inputs = hashlib.sha256(json.dumps([signature["params"], seed]).encode()).hexdigest()[:16]
        args = []
        for k, arr in enumerate(arrays):
            if k < lo:
                path = folder / f"in{k}-{inputs}.bin"
                if not path.exists():  # every candidate of the batch reads the same seeded inputs
                    path.write_bytes(arr.tobytes())
                args.append(f"i:{path}")
            elif k < hi:
                args.append(f"o:{folder / f'out{k}.bin'}:{arr.nbytes}")
            else:
                args.append(f"w:{arr.nbytes}")
        # One thread: qemu runs each emulated thread on a host one, and the timings are not meaningful anyway.
        command = self.emulator.command(timer, str(lib), name, "1", str(repeat), str(int(min_repeat_ms * 1e3)), *args)
        try:
            proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None, [], error_answer(MeasureErrorNo.RUN_TIMEOUT, f"no answer in {timeout_s:g} s under emulation")
        if proc.returncode != 0:
            code = proc.returncode
            what = (f"killed by {signal.Signals(-code).name}" if code < 0 else
                    (proc.stderr.strip().splitlines() or [f"exited with status {code}"])[-1])
            return None, [], error_answer(MeasureErrorNo.RUNTIME_DEVICE, f"the kernel {what} (under {self.emulator.name})")
        outputs = [np.fromfile(folder / f"out{k}.bin", dtype=arrays[k].dtype).reshape(arrays[k].shape)
                   for k in range(lo, hi)]
        costs = [float(line.split()[1]) for line in proc.stdout.splitlines() if line.startswith("cost ")]
        return outputs, costs, {}

    def _reference_outputs(self, batch: dict, timer: Path, reference: Path, folder: Path) -> tuple[Optional[list], dict]:
        entry = batch["reference"]
        key = hashlib.sha256(f"{entry['lib']}:{entry['name']}:{batch.get('seed', 0)}".encode()).hexdigest()
        if key not in self._references:
            outputs, _, failure = self._call(timer, reference, entry["name"], entry["signature"],
                                             int(batch.get("seed", 0)), folder, 0, 0.0,
                                             float(batch["timeout_s"]) * EMULATION_SLOWDOWN)
            if failure:
                return None, failure
            while len(self._references) >= _KEPT_REFERENCES:
                self._references.pop(next(iter(self._references)))
            self._references[key] = outputs
        return self._references[key], {}

    def _run(self, batch, folder, reference, candidates):
        timer = self._timer(folder)
        expected, failure = (self._reference_outputs(batch, timer, reference, folder) if reference is not None
                             else (None, {}))
        if failure:
            failure = error_answer(MeasureErrorNo.UNKNOWN_ERROR, f"the reference kernel failed: {failure['msg']}")
            return {entry["id"]: failure for entry, _ in candidates}
        results = {}
        for entry, lib in candidates:
            outputs, costs, failure = self._call(timer, lib, entry["name"], entry["signature"], int(batch.get("seed", 0)),
                                                 folder, int(batch["repeat"]), float(batch["min_repeat_ms"]),
                                                 float(batch["timeout_s"]) * EMULATION_SLOWDOWN)
            wrong = mismatch(outputs, expected) if outputs is not None and expected is not None else ""
            results[entry["id"]] = (failure or (error_answer(MeasureErrorNo.WRONG_ANSWER, wrong) if wrong else
                                                {"costs": costs}))
        return results



__all__ = ["EmulatedDevice", "MeasuringDevice", "NativeDevice", "NoMeasuringDeviceError", "candidate_entry",
           "measure_result"]
