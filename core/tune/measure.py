"""Measurement: a Builder compiles each candidate into its own kernel library; a Runner runs them in
a separate process (new session, resource limits, timeout) against the reference kernel. A crash,
hang or wrong answer becomes an error code on that candidate, and tuning goes on."""
from __future__ import annotations

import enum
import os
import select
import signal
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from ..errors import KilnError, ScheduleError
from ..process.child import ChildProcess
from ..process.limits import Limits
from ..tir.stmt import PrimFunc
from .records import NATIVE
from .space import Config
from .task import Task, group_inputs


class MeasureErrorNo(enum.IntEnum):
    NO_ERROR = 0
    INSTANTIATION_ERROR = 1  # the config is invalid for the workload (or the schedule refuses it)
    COMPILE_HOST = 2  # code generation or linking failed
    RUNTIME_DEVICE = 4  # the kernel crashed (signal) or raised while running
    WRONG_ANSWER = 5  # output differs from the untuned kernel's
    BUILD_TIMEOUT = 6
    RUN_TIMEOUT = 7
    UNKNOWN_ERROR = 8


@dataclass(frozen=True)
class BuildResult:
    lib: Optional[str]  # path of the kernel library (None when the build failed)
    name: str  # the kernel's symbol
    error_no: MeasureErrorNo = MeasureErrorNo.NO_ERROR
    error_msg: str = ""
    build_s: float = 0.0
    func: Optional[PrimFunc] = field(default=None, compare=False, repr=False)  # the lowered candidate (features)


@dataclass(frozen=True)
class MeasureResult:
    costs: tuple[float, ...]  # seconds per call, one per repeat (empty on error)
    error_no: MeasureErrorNo
    error_msg: str = ""
    all_cost: float = 0.0  # build + run seconds spent on this candidate
    timestamp: float = 0.0
    measured: str = NATIVE  # where it ran (records.NATIVE or EMULATED): its record's kind

    @property
    def ok(self) -> bool:
        return self.error_no == MeasureErrorNo.NO_ERROR

    @property
    def mean_cost(self) -> float:
        s = sorted(self.costs)
        return s[len(s) // 2] if s else float("inf")  # the median: robust to a noisy neighbour


def candidate_name(task: Task, config: Optional[Config]) -> str:
    """The symbol (and file name) of one candidate's kernel; None: the task's reference kernel."""
    return f"tune_{task.key[:8]}_{'ref' if config is None else config.index}"


def build_candidate(task: Task, config: Optional[Config], directory: "str | Path") -> BuildResult:
    """Lowers and compiles one candidate (None: the task's reference, untuned kernel) into its own
    library in `directory`; a failure is an error code on the result, never an exception."""
    name = candidate_name(task, config)
    start = time.perf_counter()
    if config is not None and not task.valid(config):
        return BuildResult(None, name, MeasureErrorNo.INSTANTIATION_ERROR, "config outside the template's limits")
    try:
        func = task.instantiate(config, name)
    except ScheduleError as e:
        return BuildResult(None, name, MeasureErrorNo.INSTANTIATION_ERROR, str(e), time.perf_counter() - start)
    except Exception as e:  # noqa: BLE001 - a template bug on one config must not end the tuning
        return BuildResult(None, name, MeasureErrorNo.INSTANTIATION_ERROR, f"{type(e).__name__}: {e}",
                           time.perf_counter() - start)
    try:
        path = task.backend.build_candidate([func], task.target, Path(directory), name)
    except (KilnError, OSError) as e:
        return BuildResult(None, name, MeasureErrorNo.COMPILE_HOST, str(e), time.perf_counter() - start, func)
    return BuildResult(str(path), name, build_s=time.perf_counter() - start, func=func)


def default_build_workers() -> int:
    """Build processes for a tuning run: one per core this process may use, at most 8."""
    return max(1, min(8, len(os.sched_getaffinity(0))))


_BUILD_WORKER, _MEASURE_WORKER = "core.tune.build_worker", "core.tune.measure_worker"


class LocalBuilder:
    """Lowers and compiles candidates, one library each, in `n_parallel` build processes (AutoTVM's
    LocalBuilder(n_parallel)): a batch's builds are independent, and building is most of a CPU trial
    (resnet18's convs: 0.4-0.7 s to build, 0.17 s to check and time). A build that crashes its
    process or runs past `timeout_s` fails that candidate only. `n_parallel=0` builds in this
    process instead, without that protection (the reference kernel is always built here). Without
    a `directory`, the libraries go to a temporary one that `close` removes."""

    def __init__(self, directory: "str | Path | None" = None, n_parallel: int = 1, timeout_s: float = 60.0):
        self._tmp = None if directory else tempfile.TemporaryDirectory(prefix="kiln-tune-")
        self.directory = Path(directory or self._tmp.name)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.n_parallel, self.timeout_s = max(0, int(n_parallel)), timeout_s
        self._processes: list[ChildProcess] = []

    def build_reference(self, task: Task) -> BuildResult:
        return build_candidate(task, None, self.directory)

    def build(self, task: Task, configs: Sequence[Config]) -> list[BuildResult]:
        if self.n_parallel == 0:
            return [build_candidate(task, c, self.directory) for c in configs]
        while len(self._processes) < self.n_parallel:  # started once, kept for every later batch
            self._processes.append(ChildProcess(_BUILD_WORKER))
        results: list[Optional[BuildResult]] = [None] * len(configs)
        todo = iter(range(len(configs)))
        busy: dict[int, tuple[int, float]] = {}  # build process -> (its candidate, when it was sent)

        def failed(k: int, i: int, error: MeasureErrorNo, msg: str) -> None:  # a new process goes on
            self._processes[k].kill()
            self._processes[k] = ChildProcess(_BUILD_WORKER)
            results[i] = BuildResult(None, candidate_name(task, configs[i]), error, msg, self.timeout_s)

        def feed(k: int) -> None:  # each process gets the next candidate as soon as it is free
            for i in todo:
                try:
                    self._processes[k].send((task, configs[i], str(self.directory)))
                except OSError:  # its pipe is closed: the process is gone
                    failed(k, i, MeasureErrorNo.COMPILE_HOST, "the build process died")
                    continue
                busy[k] = (i, time.monotonic())
                return

        for k in range(len(self._processes)):
            feed(k)
        while busy:
            wait = max(0.0, min(sent for _, sent in busy.values()) + self.timeout_s - time.monotonic())
            ready, _, _ = select.select([self._processes[k].proc.stdout for k in busy], [], [], wait)
            for k in list(busy):
                i, sent = busy[k]
                if self._processes[k].proc.stdout in ready:
                    del busy[k]
                    try:
                        results[i] = self._processes[k].receive()
                    except EOFError:  # a crash in LLVM, the memory limit
                        failed(k, i, MeasureErrorNo.COMPILE_HOST, "the build process died")
                    feed(k)
                elif time.monotonic() - sent >= self.timeout_s:
                    del busy[k]
                    failed(k, i, MeasureErrorNo.BUILD_TIMEOUT, f"no build in {self.timeout_s:g} s")
                    feed(k)
        return results

    def close(self) -> None:
        for process in self._processes:
            process.close()
        self._processes = []
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None


def _answer(worker: ChildProcess, request_id: str, timeout_s: float) -> Optional[dict]:
    """The measuring process's answer to `request_id`; {"eof": returncode} if it died; None on timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            msg = worker.receive(deadline)
        except TimeoutError:
            return None
        except EOFError:
            return {"eof": worker.proc.wait()}
        if msg.get("id") == request_id:
            return msg


MAX_WORKER_REQUESTS = 512


def last_level_cache_bytes(default: int = 32 << 20) -> int:
    """The largest CPU cache this machine reports (Linux sysfs), or `default`."""
    sizes = []
    for path in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = path.read_text().strip().upper()
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            sizes.append(int(digits) * scale)
    return max(sizes, default=default)


class LocalRunner:
    """Runs built candidates in a child process, each checked against the reference kernel's outputs.

    `cold_bytes`: on the CPU, each timed call reads the kernel's weights from its own copy, copies
    totalling at least this much (default: twice the last-level cache), as in a model whose weights
    do not fit in the cache. Timed warm, the best config of resnet18's 3x3 convs on 7x7 maps took
    1.57 ms, but 1.97 ms cold and in the model; one with sequential weight reads, 1.52 and 1.63 ms.

    `timing_lock`: a file that runners sharing the machine lock while timing, one at a time."""

    measured = NATIVE  # the kind of its results (a runner's `measured`: the records its job may use)

    def __init__(self, timeout_s: float = 10.0, min_repeat_ms: float = 20.0, repeat: int = 3, threads: int = 0,
                 memory_bytes: int = 8 << 30, seed: int = 0, cold_bytes: Optional[int] = None,
                 timing_lock: Optional[str] = None):
        self.timeout_s, self.min_repeat_ms, self.repeat = timeout_s, min_repeat_ms, repeat
        self.timing_lock = timing_lock
        self.threads, self.memory_bytes, self.seed = threads, memory_bytes, seed
        self.cold_bytes = 2 * last_level_cache_bytes() if cold_bytes is None else cold_bytes
        # The measuring process outlives a batch: starting one (Python, numpy, a CUDA context) and
        # running the reference again cost more than timing a batch of small kernels. It is kept
        # for one reference at a time and restarted after MAX_WORKER_REQUESTS, since every library
        # it loads stays mapped.
        self._worker: Optional[ChildProcess] = None  # its own session: a kill takes its threads with it
        self._worker_key: Optional[str] = None
        self._worker_requests = 0
        self._real_inputs: dict = {}  # the request fields of real_inputs(task), for the task being run

    def _request(self, build: BuildResult, rid: str, reference: bool = False, constant_inputs: Sequence[int] = ()) -> dict:
        return {"id": rid, "lib": build.lib, "name": build.name, "seed": self.seed, "threads": self.threads,
                "reference": reference, "min_repeat_ms": self.min_repeat_ms, "repeat": self.repeat,
                "cold_inputs": list(constant_inputs), "cold_bytes": self.cold_bytes, "timing_lock": self.timing_lock,
                **self._real_inputs}

    def _start(self, reference: Optional[BuildResult]) -> tuple[Optional[ChildProcess], str]:
        """The kept worker if it holds `reference`'s outputs, else a fresh one that has run it."""
        key = f"{reference.lib}:{reference.name}" if reference is not None else ""
        if self._worker is not None and self._worker_key == key and self._worker_requests < MAX_WORKER_REQUESTS:
            worker, self._worker = self._worker, None
            return worker, ""
        self.close()
        worker = ChildProcess(_MEASURE_WORKER, Limits(memory_bytes=self.memory_bytes or None, open_files=None))
        self._worker_key, self._worker_requests = key, 0
        if reference is None:
            return worker, ""
        worker.send(self._request(reference, "ref", reference=True))
        msg = _answer(worker, "ref", self.timeout_s)
        if msg is None or "eof" in msg or "error" in msg:
            worker.kill()
            return None, f"the reference kernel failed: {msg}"
        return worker, ""

    def close(self) -> None:
        """Ends the kept measuring process (a later run starts a new one)."""
        if self._worker is not None:
            self._worker.kill()
            self._worker = None

    def run(self, builds: Sequence[BuildResult], reference: Optional[BuildResult] = None,
            constant_inputs: Sequence[int] = (), real_inputs: Optional[dict] = None) -> list[MeasureResult]:
        """`constant_inputs`: the kernel's input parameters that are model weights (timed cold);
        `real_inputs`: what `real_inputs(task)` gives, for kernels whose speed depends on their data."""
        results: list[MeasureResult] = []
        worker: Optional[ChildProcess] = None
        self._real_inputs = dict(real_inputs or {})
        for k, build in enumerate(builds):
            start = time.perf_counter()
            if build.error_no != MeasureErrorNo.NO_ERROR:
                results.append(MeasureResult((), build.error_no, build.error_msg, build.build_s, time.time()))
                continue
            if worker is None:
                worker, failure = self._start(reference)
                if failure:
                    results.append(MeasureResult((), MeasureErrorNo.UNKNOWN_ERROR, failure, build.build_s, time.time()))
                    continue
            self._worker_requests += 1
            rid = str(self._worker_requests)  # unique over the worker's life, not just this batch
            worker.send(self._request(build, rid, constant_inputs=constant_inputs))
            msg = _answer(worker, rid, self.timeout_s)
            spent = build.build_s + time.perf_counter() - start
            if msg is None:
                worker.kill()
                worker = None
                results.append(MeasureResult((), MeasureErrorNo.RUN_TIMEOUT, f"no answer in {self.timeout_s:g} s",
                                             spent, time.time()))
            elif "eof" in msg:
                worker.kill()
                worker = None
                code = msg["eof"]
                what = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exited with status {code}"
                results.append(MeasureResult((), MeasureErrorNo.RUNTIME_DEVICE, f"the kernel {what}", spent, time.time()))
            elif "error" in msg:
                no = MeasureErrorNo.WRONG_ANSWER if msg["error"] == "wrong_answer" else MeasureErrorNo.RUNTIME_DEVICE
                results.append(MeasureResult((), no, msg.get("msg", ""), spent, time.time()))
            else:
                results.append(MeasureResult(tuple(msg["costs"]), MeasureErrorNo.NO_ERROR, "", spent, time.time()))
        self._worker = worker  # kept for the next batch of the same task (None after a crash)
        return results


DISTINCT_INPUTS = 16  # draws of a data-dependent kernel's other inputs, cycled through while timing


def real_inputs(task: Task) -> dict:
    """For a template measured on real data (Template.real_inputs): the request fields giving the worker the
    kernel's constant inputs from the model, by parameter index, and how many distinct draws of the others
    to cycle through; {} for any other template (seeded random inputs, one draw)."""
    if not task.template.real_inputs:
        return {}
    names = group_inputs(task.nodes)
    return {"inputs": {k: np.asarray(task.graph.constants[names[k]]) for k in task.constant_inputs},
            "distinct": DISTINCT_INPUTS}


class Measurer:
    """Builder + Runner for one task: builds the reference (untuned) kernel once, then batches. A
    `builder` passed in is shared (its build processes serve every task) and stays open on close."""

    def __init__(self, task: Task, runner: Optional[LocalRunner] = None, builder: Optional[LocalBuilder] = None):
        self.task = task
        self._owns_builder = builder is None
        self.builder = builder or LocalBuilder(n_parallel=0)
        self.runner = runner or LocalRunner(**task.backend.runner_options(task.target))
        self.reference = self.builder.build_reference(task)

    def measure(self, configs: Sequence[Config]) -> tuple[list[BuildResult], list[MeasureResult]]:
        builds = self.builder.build(self.task, configs)
        results = self.runner.run(builds, self.reference if self.reference.lib else None, self.task.constant_inputs,
                                  real_inputs(self.task))
        for b in builds:  # each library is loaded by the worker only; its file is no longer needed
            if b.lib:
                Path(b.lib).unlink(missing_ok=True)
        return builds, results

    def close(self) -> None:
        self.runner.close()
        if self._owns_builder:
            self.builder.close()
