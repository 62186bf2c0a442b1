"""The CPU backend (x86-64, AArch64): blocked layouts (pipeline.py), LLVM for the CPU, linked by the C toolchain."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from ...target import CPU_KIND, Target, host_target
from .. import register_backend
from ..base import Backend
from . import pipeline


@register_backend
class CpuBackend(Backend):
    kind = CPU_KIND

    def pass_names(self, opt_level: int) -> tuple[str, ...]:
        return pipeline.pass_names(opt_level, self.blocked_layouts)

    def pass_options(self, target: Target, quick: bool = False) -> dict[str, dict[str, Any]]:
        return pipeline.pass_options(target, quick)

    def weight_storage_dtypes(self, target: Target) -> tuple[str, ...]:
        # float16 -> float32 is one instruction with x86's F16C (vcvtph2ps) and on every AArch64 (fcvtl); without
        # F16C it would be a library call per element. bfloat16 widens by a shift everywhere.
        half = target.arch == "aarch64" or "+f16c" in target.features.split(",")
        return ("float16", "bfloat16") if half else ("bfloat16",)

    def fallback_schedules(self):
        from ...kernels.schedules.generic import CPU_GENERIC

        return CPU_GENERIC

    def epilogue_schedule(self):
        from ...kernels.schedules.epilogue import schedule_epilogue

        return schedule_epilogue

    def start_build(self, target: Target) -> None:
        from ...codegen.runtime_objects import start_runtime_objects
        from ...codegen.toolchain import find_compiler

        start_runtime_objects(find_compiler(target), with_model=True, with_isa=len(target.compiled_for()) > 1)

    def build_library(self, funcs: Sequence, target: Target, out_path: Path, plan=None) -> Path:
        from ...codegen.build import build_cpu_library

        return build_cpu_library(funcs, target, out_path, plan)

    def build_candidate(self, funcs: Sequence, target: Target, directory: Path, name: str) -> Path:
        return self.build_library(funcs, self.measured_variant(target), Path(directory) / f"{name}.so")

    def measured_variant(self, target: Target) -> Target:
        """What a tuning candidate for `target` is built for: a multi-ISA target's best variant this machine runs
        (what its timing measures: building the others too would only double LLVM's time), else `target`."""
        here = [variant for _, variant in target.isa_variants if self.has_device(variant)]
        return here[-1] if here else target

    def runtime_metadata(self, target: Target) -> dict[str, Any]:
        """A multi-ISA target's variants (the library picks one at load; its cpu_features is what all of them need)."""
        if not target.isa_variants:
            return {}
        return {"isa_variants": {name: {"cpu": variant.cpu, "cpu_features": variant.features}
                                 for name, variant in target.isa_variants}}

    def has_device(self, target: Target) -> bool:
        """Same ISA as the host, and every feature the target's code uses present."""
        host = host_target()
        if target.arch != host.arch:
            return False
        have = set(f[1:] for f in host.features.split(",") if f.startswith("+"))
        need = set(f[1:] for f in target.features.split(",") if f.startswith("+"))
        return need <= have

    def cannot_run_reason(self, target: Target):
        reason = super().cannot_run_reason(target)
        if reason and target.arch != host_target().arch:  # what would let this machine validate it after all
            reason += f" (with qemu-user, qemu-{target.arch} would validate it under emulation)"
        return reason

    def emulator(self, target: Target):
        """qemu-user for another architecture, with its cross compiler (which builds the harness)."""
        from ...codegen.toolchain import find_compiler
        from ...errors import BuildError
        from ...runtime.emulated import QemuUser

        if target.arch == host_target().arch:  # same ISA, missing features: qemu's TCG lacks AVX-512
            return None
        try:
            compiler = find_compiler(target)
        except BuildError:
            return None
        return QemuUser.find(target.arch, compiler)

    def measures_remotely(self, target: Target) -> bool:
        """Another CPU family (an Arm board for an x86 compile host): candidates are cross-compiled here and timed
        there. The same family with other features measures where the job runs (its measure.<kind> queue)."""
        return target.arch != host_target().arch

    def runner_options(self, target: Target) -> dict[str, Any]:
        return {"threads": target.num_cores}
