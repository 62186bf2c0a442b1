"""The Backend base class: one target kind's capabilities (class attributes) and its pipeline hooks."""
from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Iterable, Optional, Sequence

from ..target import Target

if TYPE_CHECKING:
    from ..codegen.model_entry import ModelPlan
    from ..graph.ir import Graph, Node
    from ..graph.passes.registry import GraphPass
    from ..kernels.registry import ScheduleFn
    from ..runtime.emulated import QemuUser
    from ..tir.stmt import PrimFunc
    from ..tune.measuring_device import MeasuringDevice

# Passes that rewrite the graph for a CPU's micro-kernels: NCHW[x]c blocks (sized to a SIMD register)
# and B panels (sized to a 6 x 16 FMA tile). A backend without `blocked_layouts` skips them: on a GPU
# they only make the shared-memory tiles gather strided data; its schedules tile the plain NCHW conv
# and the plain MatMul themselves (fusion stays: epilogues fuse into the conv/matmul kernels there too).
# fuse_attention's kernel is a CPU loop program (one thread per row block), so it goes with them.
# (pack_int8_weights is not one of them: it packs for the target's dot intrinsic, dp4a on cuda.)
BLOCKED_LAYOUT_PASSES = frozenset({"alter_layout", "alter_layout_3d", "pack_matmul_weights", "fuse_attention"})


def level_pass_names(opt_level: int, blocked_layouts: bool) -> tuple[str, ...]:
    """The passes of -O`opt_level` (graph/passes/manager.py LEVELS), less BLOCKED_LAYOUT_PASSES without
    `blocked_layouts`: what each kind's pipeline starts from."""
    from ..graph.passes.manager import level_passes

    return level_passes(opt_level, frozenset() if blocked_layouts else BLOCKED_LAYOUT_PASSES)


def bind_passes(names: Sequence[str], options: dict[str, dict[str, Any]]) -> list[tuple[str, "GraphPass"]]:
    """The required passes, then `names`, each with its `options` bound: a pipeline run_passes takes."""
    from ..graph.passes.manager import REQUIRED
    from ..graph.passes.registry import get_pass

    return [(name, functools.partial(get_pass(name), **options[name]) if name in options else get_pass(name))
            for name in REQUIRED + tuple(names)]


class Backend:
    """How targets of one kind are optimized, scheduled, built, run, measured, packaged and routed.

    The boundary (core.compile, the API, the CLI, a measuring worker) looks the Backend of a target up once
    and hands it down as an argument to the passes, lowering, tuning and building, which never look it up.
    Backends sit above the subsystems: they import them (inside the hooks, so that importing the registry
    stays light), and nothing below imports them. Subclasses set the capabilities and implement the hooks;
    each kind's package (core/backends/<kind>/) holds its pass pipeline in `pipeline.py`."""

    kind: ClassVar[str]  # Target.kind of the targets it serves; the key of every per-kind registry
    host_code: ClassVar[bool] = True  # kernels are CPU machine code (LLVM's CPU backends, the C toolchain)
    has_shared: ClassVar[bool] = False  # a GPU's thread hierarchy and shared memory (NVPTX code generation)
    blocked_layouts: ClassVar[bool] = True  # runs BLOCKED_LAYOUT_PASSES
    device_queue: ClassVar[Optional[str]] = None  # the service queue every job goes to (tuned or not)
    profiles_in_runtime: ClassVar[bool] = False  # per-kernel times from the runtime's profile, not one call each
    # Graph ops (their ONNX names) whose kernels this kind cannot compile: refused before any work is queued.
    unsupported_ops: ClassVar[frozenset[str]] = frozenset()

    def check_ops(self, op_types: Iterable[str], target: Target) -> None:
        """UnsupportedOnTargetError listing every op of `op_types` this kind cannot compile for `target`."""
        from ..errors import UnsupportedOnTargetError

        refused = sorted(set(op_types) & self.unsupported_ops)
        if refused:
            raise UnsupportedOnTargetError(target.name, refused)

    # -- graph passes (each kind's pipeline.py) ------------------------------------------------------
    def pass_names(self, opt_level: int) -> tuple[str, ...]:
        """The optimization passes -O`opt_level` runs for this backend (what the report lists)."""
        raise NotImplementedError

    def pass_options(self, target: Target, quick: bool = False) -> dict[str, dict[str, Any]]:
        """Keyword arguments of the passes that depend on `target`, by pass name; `quick`: a quick compile's, which
        prefer kernels that are cheap to build where the default choice is expensive."""
        return {}

    def weight_storage_dtypes(self, target: Target) -> tuple[str, ...]:
        """Narrow float types this target's kernels widen cheaply when loading weights, preferred first
        (core/graph/passes/narrow_weight_storage.py); none: weights stay float32."""
        return ()

    def graph_passes(self, opt_level: int, target: Target, quick: bool = False) -> list[tuple[str, "GraphPass"]]:
        """The passes to run on a graph compiled for `target` at -O`opt_level`, their options bound."""
        return bind_passes(self.pass_names(opt_level), self.pass_options(target, quick=quick))

    def optimize(self, graph: "Graph", opt_level: int, target: Target, quick: bool = False) -> "Graph":
        """`graph` after the passes this backend runs for `target` at -O`opt_level` (`quick`: pass_options')."""
        from ..graph.op_defs.control_flow import optimize_subgraphs
        from ..graph.passes.manager import run_passes

        graph = run_passes(graph, self.graph_passes(opt_level, target, quick))
        return optimize_subgraphs(graph, lambda sub: self.optimize(sub, opt_level, target, quick))  # If/Loop bodies

    # -- schedules and tuning ----------------------------------------------------------------------
    def fallback_schedules(self) -> tuple["ScheduleFn", "ScheduleFn"]:
        """The generic (injective, reduction) schedules of ops without their own."""
        raise NotImplementedError

    def epilogue_schedule(self) -> "ScheduleFn":
        """How a fused kernel's epilogue (what follows a conv/matmul anchor) is placed."""
        raise NotImplementedError

    def finish_graph(self, graph: "Graph", target: Target) -> "Graph":
        """The optimized graph once its weights are stored (precision.store_weights), as this target's kernels
        want it; the identity unless a backend rewrites it."""
        return graph

    def schedule(self, op: str, target: Target) -> "ScheduleFn":
        """The op's schedule for `target.kind`, else this backend's generic one of the op's fusion pattern."""
        from ..kernels.registry import get_schedule

        return get_schedule(op, target, self.fallback_schedules())

    def group_kernel(self, nodes: Sequence["Node"], graph: "Graph", target: Target, name: str,
                     outputs: Sequence[str], inputs: Sequence[str]) -> Optional["PrimFunc"]:
        """A hand-built kernel for a whole fused group (inputs, then outputs, as lower_group's), or None: the
        group's computes are scheduled as usual."""
        return None

    def load_templates(self) -> None:
        """Register this backend's tuning templates (the CPU's live in core/tune/templates.py itself); the tuner
        calls it before it looks templates up (core/tune/task.py extract_tasks)."""

    # -- building ----------------------------------------------------------------------------------
    def start_build(self, target: Target) -> None:
        """Starts, before the kernels are lowered, what the model's library needs whatever its kernels, so that it
        runs alongside the lowering (the CPU runtime's C objects with a cold cache); nothing by default."""

    def build_library(self, funcs: Sequence["PrimFunc"], target: Target, out_path: Path,
                      plan: Optional["ModelPlan"] = None) -> Path:
        """The artifact's shared library at `out_path`: the kernels, and the model entry when `plan` is given."""
        raise NotImplementedError

    def build_candidate(self, funcs: Sequence["PrimFunc"], target: Target, directory: Path, name: str) -> Path:
        """One tuning candidate, built into `directory` in the form the tuner's runner loads."""
        raise NotImplementedError

    def runtime_metadata(self, target: Target) -> dict[str, Any]:
        """Artifact metadata the standalone loader needs beyond the target's triple and features."""
        return {}

    # -- running and measuring here ----------------------------------------------------------------
    def describe(self, target: Target) -> dict[str, Any]:
        """`target.describe()` and whether its code runs on this machine, or under which emulator."""
        runs_on_host = self.has_device(target)
        emulator = None if runs_on_host else self.emulator(target)
        return {**target.describe(), "runs_on_host": runs_on_host,
                "emulator": emulator.name if emulator is not None else None}

    def has_device(self, target: Target) -> bool:
        """Whether this machine has the hardware `target`'s code runs on, found without initializing a
        device driver (a process that did cannot use the device in the children it forks)."""
        raise NotImplementedError

    def cannot_run_reason(self, target: Target) -> Optional[str]:
        """Why `target`'s artifacts cannot run on this machine (validation and benchmarks are skipped), or None."""
        return None if self.has_device(target) else f"target {target.name} cannot run on this host"

    def emulator(self, target: Target) -> Optional["QemuUser"]:
        """What runs `target`'s artifacts on this machine when its hardware cannot (validation only: no
        timings), or None."""
        return None

    def can_measure(self, target: Target) -> bool:
        """Whether tuning candidates for `target` can be measured on this machine."""
        return self.has_device(target)

    def measuring_device(self, target: Target) -> "MeasuringDevice":
        """How this machine measures `target`'s code: natively where it has the hardware, else under qemu-user;
        NoMeasuringDeviceError when neither."""
        from ..tune.measuring_device import EmulatedDevice, NativeDevice, NoMeasuringDeviceError

        if self.can_measure(target):
            return NativeDevice(target)
        emulator = self.emulator(target) if self.host_code else None
        if emulator is None:
            reason = self.cannot_run_reason(target) or f"target {target.name} cannot run on this host"
            raise NoMeasuringDeviceError(f"this machine cannot measure {target.name} code: {reason}")
        return EmulatedDevice(target, emulator)

    def measures_remotely(self, target: Target) -> bool:
        """Whether tuning for `target` measures on devices of its kind elsewhere (remote measuring workers, its
        candidates built here) rather than on the machine that compiles."""
        return False

    def runner_options(self, target: Target) -> dict[str, Any]:
        """Keyword arguments of the tuner's LocalRunner for `target`'s candidates."""
        return {}

    def report_device(self, target: Target, ran: bool) -> Optional[dict[str, Any]]:
        """The report's `device` section (None: the report has none)."""
        return None


__all__ = ["BLOCKED_LAYOUT_PASSES", "Backend", "bind_passes", "level_pass_names"]
