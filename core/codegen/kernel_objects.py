"""Kernels -> one object file each: taken from the kernel cache, or compiled (in parallel processes when several miss).

A model's build compiles each kernel in the forked process that lowered it (core/lowering/executable.py calls
`objects_here` there and hands the objects to `prefetch`); `python -m core.codegen.object_worker` processes compile
the rest (kernels recalled from the lowering memo whose objects are not cached, libraries built on their own).

Each kernel is compiled in its canonical form (its structural key's: core/tir/kernel_dedup.py) under a symbol
named by its cache key, so its object code depends on nothing but the key: a cache hit, a serial build and a
parallel build give the same bytes. The library's own entry module calls these symbols and exports the kernels'
names. Kernels start compiling as soon as they are lowered (`prefetch`), while the next ones are lowered.
"""
from __future__ import annotations

import atexit
import dataclasses
import os
import select
import threading
import time
from dataclasses import dataclass
from typing import NoReturn, Optional, Sequence

import llvmlite.binding as llvm
from llvmlite import ir

from ..debug import DEBUG
from ..errors import CodegenError
from ..tir.kernel_dedup import digest_of_key, note_digest, structural_digest, structural_key
from ..process.child import ChildProcess
from ..target import Target
from ..tir.stmt import PrimFunc
from . import vecmath
from .codegen_llvm import ModuleContext, emit_kernel
from .kernel_cache import CachedObject, KernelCache, current_cache, current_stats, object_key
from .llvm_env import LLVM_LOCK, initialize_llvm, print_ir

ENV_JOBS = "KILN_BUILD_JOBS"  # processes that compile kernels missing from the cache; default: one per CPU
SYMBOL_PREFIX = "kiln_kernel_"
# The LLVM pipeline every kernel object goes through; part of the cache key. LLVM's loop unroller stays on even
# behind a schedule's own unrolled, vectorized loops: off there, it saved a third of LLVM's optimization time on
# resnet18 (0.6 s of CPU) but the model ran 1-5% slower (README, "Compile time").
PIPELINE = ("O3", "vectorize", "slp", "unroll", "interleave")


@dataclass(frozen=True)
class KernelObject:
    """One distinct kernel of a library: its canonical symbol, cache key, and its compiled object."""

    symbol: str
    key: str
    func: PrimFunc  # named `symbol`; in canonical form when it is compiled here
    compiled: Optional[CachedObject] = None


_machines: dict[tuple[str, str, str], llvm.TargetMachine] = {}


def target_machine(target: Target) -> llvm.TargetMachine:
    with LLVM_LOCK:
        initialize_llvm()
        key = (target.triple, target.cpu, target.features)
        if key not in _machines:
            try:
                llvm_target = llvm.Target.from_triple(target.triple)
            except RuntimeError as e:
                raise CodegenError(f"LLVM has no backend for {target.triple}: {e}") from None
            _machines[key] = llvm_target.create_target_machine(cpu=target.cpu, features=target.features, opt=3,
                                                               reloc="pic", codemodel="default")
        return _machines[key]


def optimize_module(module: ir.Module, target: Target) -> tuple[llvm.ModuleRef, llvm.TargetMachine]:
    """`module` parsed, verified and run through LLVM's O3 pipeline for `target`."""
    text = str(module)
    print_ir(text, optimized=False)
    with LLVM_LOCK:
        tm = target_machine(target)
        try:
            mod = llvm.parse_assembly(text)
            mod.verify()
        except RuntimeError as e:
            raise CodegenError(f"generated LLVM IR is invalid (a codegen bug): {e}") from None
        pto = llvm.create_pipeline_tuning_options(speed_level=3)
        pto.loop_vectorization = True
        pto.slp_vectorization = True
        pto.loop_unrolling = True
        pto.loop_interleaving = True
        pb = llvm.create_pass_builder(tm, pto)
        pb.getModulePassManager().run(mod, pb)
    print_ir(mod, optimized=True)
    return mod, tm


def new_module(target: Target) -> ir.Module:
    module = ir.Module(name="kiln")
    module.triple = target.triple
    module.data_layout = str(target_machine(target).target_data)
    return module


def compile_object(func: PrimFunc, target: Target) -> CachedObject:
    """One kernel alone in a module, optimized and compiled to object code."""
    module = new_module(target)
    emit_kernel(ModuleContext(module, target), func)
    libs = ("-lmvec",) if vecmath.uses_libmvec(module) else ()
    mod, tm = optimize_module(module, target)
    with LLVM_LOCK:
        return CachedObject(tm.emit_object(mod), libs)


def kernel_objects(funcs: Sequence[PrimFunc], target: Target) -> dict[str, KernelObject]:
    """Per kernel name, its compiled object (kernels with one structural key share one). Kernels handed to
    `prefetch` earlier in the same build are already compiled or being compiled."""
    stats = current_stats()
    builder = _builder(target)
    start = time.perf_counter()
    try:
        of_name = {func.name: builder.want(func) for func in funcs}
        builder.finish()
    finally:
        if stats is None:
            builder.close()
    distinct = {obj.key: obj for obj in of_name.values()}
    hits = sum(builder.from_cache[key] for key in distinct)
    if stats is not None:
        stats.add(len(distinct), hits, builder.processes)
        stats.seconds["kernel_objects"] = round(stats.seconds.get("kernel_objects", 0.0) + time.perf_counter() - start, 4)
    if builder.cache is not None and hits < len(distinct):
        evicted = builder.cache.evict()
        if stats is not None:
            stats.evicted += evicted
    return {name: dataclasses.replace(obj, compiled=builder.compiled[obj.key]) for name, obj in of_name.items()}


def prefetch(func: PrimFunc, target: Target, compiled: Optional[Sequence[tuple[CachedObject, bool]]] = None,
             workers: int = 1) -> None:
    """Starts compiling `func`'s object now, on a worker process, when it is not in the cache: lowering goes on
    with the next kernel meanwhile; or takes the objects `compiled` already (objects_here's, by `workers` processes).
    Only inside a `building` block (core/codegen/kernel_cache.py), else nothing. For CPU code (a Backend with
    `host_code`: the caller knows)."""
    if current_stats() is not None:
        for k, variant in enumerate(target.compiled_for()):  # a multi-ISA target's kernels: each variant's object
            _builder(variant).want(func, None if compiled is None else compiled[k], workers)


def objects_here(func: PrimFunc, target: Target) -> Optional[list[tuple[CachedObject, bool]]]:
    """`func`'s object for each of `target`'s variants, from the kernel cache or compiled in this process (a forked
    lowering worker: core/lowering/executable.py), each with whether the cache had it; for `prefetch`. None outside
    a `building` block."""
    if current_stats() is None:
        return None
    key = structural_key(func)
    digest = digest_of_key(key)
    note_digest(func, digest)
    canonical = dataclasses.replace(func, name=SYMBOL_PREFIX, params=key[0], body=key[1])
    cache, objects = current_cache(), []
    for variant in target.compiled_for():
        object_name = object_key(digest, variant, PIPELINE)
        hit = cache.get(object_name) if cache is not None else None
        if hit is None:
            try:
                compiled = compile_object(dataclasses.replace(canonical, name=SYMBOL_PREFIX + object_name[:24]), variant)
            except Exception as err:
                _raise_named(func, variant, err)
            if cache is not None:
                cache.put(object_name, compiled)
        objects.append((hit or compiled, hit is not None))
    return objects


def _builder(target: Target) -> "ObjectBuilder":
    stats = current_stats()
    if stats is None:  # a library on its own (a tuning candidate, a test): workers only for two kernels or more
        return ObjectBuilder(target, current_cache(), eager=False)
    key = (target.triple, target.cpu, target.features)
    if key not in stats.builders:
        stats.builders[key] = ObjectBuilder(target, current_cache(), eager=True)
    return stats.builders[key]


def build_jobs() -> int:
    """Processes for missing kernels: $KILN_BUILD_JOBS (`kiln compile --jobs`), else one per CPU this process may
    run on; one under DEBUG>=3 (workers' IR dumps would not reach this process's stderr)."""
    if DEBUG.get() >= 3:
        return 1
    text = os.environ.get(ENV_JOBS, "")
    if text.isdigit():
        return max(1, int(text))
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


class ObjectBuilder:
    """The kernel objects of one build: each looked up in the cache when first wanted, else compiled in its
    canonical form on a worker process (llvmlite's codegen is not thread-safe; several missing kernels build on
    several cores), or in this process when only one job is allowed or one kernel is missing. `eager`: send each
    kernel to a worker as soon as it is wanted (a model's build), else only at `finish`."""

    def __init__(self, target: Target, cache: Optional[KernelCache], eager: bool):
        self.target, self.cache, self.eager = target, cache, eager
        self.compiled: dict[str, CachedObject] = {}  # key -> object, once known
        self.from_cache: dict[str, bool] = {}
        self._objects: dict[str, KernelObject] = {}  # key -> KernelObject (without its object)
        self._given: dict[str, PrimFunc] = {}  # key -> the kernel as first given (its own names, for errors)
        self._queue: list[str] = []  # keys waiting for a worker
        self._busy: dict[int, tuple[ChildProcess, str]] = {}  # a worker's stdout fd -> (worker, key)
        self._workers: Optional[list[ChildProcess]] = None
        self.processes = 0

    def want(self, func: PrimFunc, compiled: Optional[tuple[CachedObject, bool]] = None, workers: int = 1) -> KernelObject:
        """`func`'s object, queued to compile unless the cache has it or it is `compiled` already (by `workers`
        processes; with whether the cache had it)."""
        key = object_key(structural_digest(func), self.target, PIPELINE)
        obj = self._objects.get(key)
        if obj is not None:
            return obj
        symbol = SYMBOL_PREFIX + key[:24]
        if compiled is not None:
            self.processes = max(self.processes, workers)
        elif self.cache is not None:
            cached = self.cache.get(key)
            compiled = None if cached is None else (cached, True)
        if compiled is not None:
            obj = KernelObject(symbol, key, dataclasses.replace(func, name=symbol))
            self.compiled[key], self.from_cache[key] = compiled
        else:  # compiled in its canonical form, so that the object depends on nothing but the key
            params, body, _, _, _ = structural_key(func)
            obj = KernelObject(symbol, key, dataclasses.replace(func, name=symbol, params=params, body=body))
            self.from_cache[key] = False
            self._queue.append(key)
        self._objects[key] = obj
        self._given[key] = func
        if self._queue and self.eager and self._lease():
            self._pump(block=False)
        return obj

    def finish(self) -> None:
        """Waits until every wanted object is compiled (in this process when no worker is to be had)."""
        alone = len(self._queue) == 1 and self._workers is None  # one kernel: not worth starting a process
        if self._queue and (alone or not self._lease()):
            self.processes = max(self.processes, 1)
            for key in self._queue:
                self._done(key, self._compile_here(key))
            self._queue = []
        while self._queue or self._busy:
            self._pump(block=True)

    def close(self) -> None:
        """Hands the idle worker processes back to the pool; ends those still compiling (the build failed), whose
        answers the next build must not read."""
        if self._workers:
            for worker, _ in self._busy.values():
                self._drop(worker)
            _POOL.release(self._workers)
        self._workers, self._busy = None, {}

    def _lease(self) -> bool:
        if self._workers is None:
            self._workers = _POOL.lease(build_jobs()) if build_jobs() > 1 else []
            self.processes = max(self.processes, len(self._workers))
        return bool(self._workers)

    def _done(self, key: str, compiled: CachedObject) -> None:
        self.compiled[key] = compiled
        if self.cache is not None:
            self.cache.put(key, compiled)

    def _pump(self, block: bool) -> None:
        """Gives idle workers queued kernels; takes the answers that are ready (waits for one when `block`)."""
        while self._queue and not self._workers:  # every worker died: this process builds the rest
            key = self._queue.pop(0)
            self._done(key, self._compile_here(key))
        idle = [w for w in self._workers if all(w is not busy for busy, _ in self._busy.values())]
        for worker in idle:
            if self._queue:
                self._send(worker, self._queue.pop(0))
        if not self._busy:
            return
        ready, _, _ = select.select(list(self._busy), [], [], None if block else 0)
        for fd in ready:
            worker, key = self._busy.pop(fd)
            try:
                answer = worker.receive()
            except EOFError:  # a worker died: this process builds its kernel
                self._drop(worker)
                self._done(key, self._compile_here(key))
                continue
            if isinstance(answer, BaseException):
                self._failed(key, answer)
            self._done(key, answer)
            if self._queue:
                self._send(worker, self._queue.pop(0))

    def _compile_here(self, key: str) -> CachedObject:
        try:
            return compile_object(self._objects[key].func, self.target)
        except Exception as err:
            self._failed(key, err)

    def _failed(self, key: str, err: BaseException) -> NoReturn:
        _raise_named(self._given[key], self.target, err)

    def _send(self, worker: ChildProcess, key: str) -> None:
        try:
            worker.send((self._objects[key].func, self.target))
            self._busy[worker.proc.stdout.fileno()] = (worker, key)
        except OSError:
            self._drop(worker)
            self._done(key, self._compile_here(key))

    def _drop(self, worker: ChildProcess) -> None:
        worker.kill()
        self._workers.remove(worker)


def _raise_named(func: PrimFunc, target: Target, err: BaseException) -> NoReturn:
    """Raises the error compiling `func` under its own names gives (the canonical form's names mean nothing to a
    user), or `err` when that compiles."""
    compile_object(func, target)
    raise err


class _WorkerPool:
    """`python -m core.codegen.object_worker` processes, kept for the next build of this process."""

    def __init__(self):
        self._idle: list[ChildProcess] = []
        self._pid = os.getpid()
        self._lock = threading.Lock()

    def lease(self, n: int) -> list[ChildProcess]:
        """`n` workers for one build: idle ones first, new ones for the rest."""
        with self._lock:
            if self._pid != os.getpid():  # a forked process (the service's compile sandbox): its parent's workers
                self._idle, self._pid = [], os.getpid()  # are not its own to use or to end
            taken, self._idle = self._idle[:n], self._idle[n:]
        while len(taken) < n:
            taken.append(ChildProcess("core.codegen.object_worker"))
        return taken

    def release(self, workers: list[ChildProcess]) -> None:
        with self._lock:
            if self._pid == os.getpid():
                self._idle.extend(w for w in workers if w.proc.poll() is None)

    def close(self) -> None:
        with self._lock:
            if self._pid != os.getpid():
                return
            for worker in self._idle:
                worker.close()
            self._idle = []


_POOL = _WorkerPool()
atexit.register(_POOL.close)
