"""Named compilation targets and their properties (triple, CPU, features, vector width, cores).

`get_target("x86-64-v4")` or `get_target("native")`; options follow TVM's style
(`"cuda -arch=sm_90"`). One registry: adding a target is one `register_target` call; its `kind`
picks the Backend that compiles for it (core/backends/<kind>/), which the boundary (compile, the API, the CLI)
looks up once and hands down.
"""
from __future__ import annotations

import os
import platform
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Callable

from .errors import UnknownTargetError

# Target kinds: each has its Backend (core/backends/<kind>/) and keys the per-kind tables below it (computes,
# schedules, tuning templates).
CPU_KIND = "cpu"
CUDA_KIND = "cuda"


@dataclass(frozen=True)
class Target:
    name: str
    kind: str  # picks its Backend (core/backends/): how its code is optimized, built, run and measured
    triple: str
    cpu: str  # LLVM CPU name
    features: str  # LLVM feature string, e.g. "+avx2,+fma"
    vector_bits: int  # SIMD register width the schedules block for
    description: str
    num_cores: int = field(default_factory=lambda: os.cpu_count() or 1)
    l1_bytes: int = 32 * 1024
    l2_bytes: int = 512 * 1024
    options: tuple[tuple[str, str], ...] = ()
    # GPU targets: the launch limits that schedules tile for and verification enforces.
    max_threads_per_block: int = 0
    max_shared_bytes: int = 0  # static shared memory per block
    warp_size: int = 0
    # A multi-ISA target: each kernel is also compiled for these (name, target) variants into the same library,
    # which picks one by CPUID when it loads (core/runtime/kiln_isa.c). The graph, layouts and schedules are
    # this target's own (its features are what every variant has); empty: kernels are compiled for it alone.
    isa_variants: tuple[tuple[str, "Target"], ...] = ()

    def lanes(self, dtype: str = "float32") -> int:
        """How many elements of `dtype` fit in one vector register."""
        from numpy import dtype as np_dtype

        return max(1, self.vector_bits // (8 * np_dtype(dtype).itemsize))

    @property
    def arch(self) -> str:
        return self.triple.split("-")[0]

    @property
    def sm(self) -> int:
        """A GPU target's architecture as a number ("sm_90a" -> 90); 0 for any other target."""
        digits = self.cpu.removeprefix("sm_").rstrip("a")
        return int(digits) if self.cpu.startswith("sm_") and digits.isdigit() else 0

    @property
    def vector_registers(self) -> int:
        """Architectural SIMD registers: 32 with AVX-512 and on AArch64, else 16 (SSE, AVX2)."""
        return 32 if self.arch == "aarch64" or self.vector_bits >= 512 else 16

    def compiled_for(self) -> tuple["Target", ...]:
        """The targets each kernel's object code is built for: the ISA variants, else this target alone."""
        return tuple(variant for _, variant in self.isa_variants) or (self,)

    def describe(self) -> dict:
        """What the target is (whether it runs here is its Backend's answer: Backend.describe)."""
        return {"name": self.name, "kind": self.kind, "triple": self.triple, "cpu": self.cpu,
                "features": self.features, "vector_bits": self.vector_bits, "description": self.description,
                **({"isa_variants": [name for name, _ in self.isa_variants]} if self.isa_variants else {})}

    def __str__(self) -> str:
        return self.name


_X86_V3 = "+avx,+avx2,+fma,+f16c,+bmi,+bmi2,+lzcnt,+movbe,+popcnt,+sse4.1,+sse4.2,+ssse3"
_X86_V4 = _X86_V3 + ",+avx512f,+avx512bw,+avx512cd,+avx512dq,+avx512vl"

_FACTORIES: dict[str, Callable[[dict[str, str]], Target]] = {}


def register_target(name: str):
    def wrap(factory: Callable[[dict[str, str]], Target]):
        _FACTORIES[name] = factory
        return factory

    return wrap


@lru_cache(maxsize=1)
def host_target() -> Target:
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    features = llvm.get_host_cpu_features().flatten()
    have = {f[1:] for f in features.split(",") if f.startswith("+")}
    bits = 512 if "avx512f" in have else 256 if "avx2" in have else 128
    machine = platform.machine().lower()
    arch = "aarch64" if machine in ("arm64", "aarch64") else machine
    return Target("native", CPU_KIND, f"{arch}-unknown-linux-gnu", llvm.get_host_cpu_name(), features, bits,
                  "the machine Kiln runs on (host CPU and features)")


@register_target("native")
def _native(opts: dict[str, str]) -> Target:
    return host_target()


@register_target("x86-64-v3")
def _x86_v3(opts: dict[str, str]) -> Target:
    return Target("x86-64-v3", CPU_KIND, "x86_64-unknown-linux-gnu", "haswell", _X86_V3, 256, "x86-64 with AVX2 and FMA")


@register_target("x86-64-v4")
def _x86_v4(opts: dict[str, str]) -> Target:
    return Target("x86-64-v4", CPU_KIND, "x86_64-unknown-linux-gnu", "skylake-avx512", _X86_V4, 512,
                  "x86-64 with AVX-512 (F, BW, CD, DQ, VL)")


# The AVX-512 variant of the multi-ISA x86-64 target: AVX-512 with VNNI (Ice Lake, Sapphire Rapids, Zen 4/5).
_X86_V4_VNNI = _X86_V4 + ",+avx512vnni"


@register_target("x86-64")
def _x86_multi_isa(opts: dict[str, str]) -> Target:
    # Variant order and names are kiln_isa.c's table (index 0: avx2, 1: avx512).
    variants = (("avx2", _x86_v3(opts)),
                ("avx512", Target("x86-64-v4-vnni", "cpu", "x86_64-unknown-linux-gnu", "x86-64-v4", _X86_V4_VNNI, 512,
                                  "x86-64 with AVX-512 and VNNI")))
    return Target("x86-64", "cpu", "x86_64-unknown-linux-gnu", "haswell", _X86_V3, 256,
                  "any x86-64 with AVX2+FMA: each kernel for AVX2 and AVX-512+VNNI, picked by CPUID at load",
                  isa_variants=variants)


_SAPPHIRE_RAPIDS = _X86_V4 + ",+avx512vnni,+avx512bf16,+avx512fp16,+avxvnni,+amx-tile,+amx-int8,+amx-bf16"


@register_target("sapphirerapids")
def _sapphire_rapids(opts: dict[str, str]) -> Target:
    return Target("sapphirerapids", CPU_KIND, "x86_64-unknown-linux-gnu", "sapphirerapids", _SAPPHIRE_RAPIDS, 512,
                  "Intel Xeon 4th gen (Sapphire Rapids): AVX-512 with VNNI, BF16 and FP16; AMX", l2_bytes=2048 * 1024)


@register_target("aarch64")
def _aarch64(opts: dict[str, str]) -> Target:
    return Target("aarch64", CPU_KIND, "aarch64-unknown-linux-gnu", "cortex-a72", "+neon", 128,
                  "64-bit Arm with NEON (cross-compiled)")


@dataclass(frozen=True)
class ArmDevice:
    """An Arm device preset: LLVM CPU and features beyond NEON, cores, per-core L1d and L2."""
    cpu: str
    features: str
    cores: int
    l1_kib: int
    l2_kib: int
    description: str


# Schedules block for NEON's 128-bit registers on all of them: SVE (Graviton3) is used by LLVM where it
# vectorizes by itself; dot-product/i8mm kernels for the int8 paths come with the low-precision kernels.
ARM_DEVICES = {
    "rpi4": ArmDevice("cortex-a72", "", 4, 32, 1024, "Raspberry Pi 4 (Cortex-A72)"),
    "rpi5": ArmDevice("cortex-a76", "+dotprod", 4, 64, 512, "Raspberry Pi 5 (Cortex-A76, dot product)"),
    "graviton2": ArmDevice("neoverse-n1", "+dotprod", 64, 64, 1024, "AWS Graviton2 (Neoverse N1)"),
    "graviton3": ArmDevice("neoverse-v1", "+dotprod,+sve,+bf16,+i8mm", 64, 64, 1024,
                           "AWS Graviton3 (Neoverse V1: SVE, bfloat16, int8 matrix multiply)"),
    "ampere-altra": ArmDevice("neoverse-n1", "+dotprod", 80, 64, 1024, "Ampere Altra (Neoverse N1)"),
    "jetson-orin": ArmDevice("cortex-a78ae", "+dotprod", 12, 64, 256, "NVIDIA Jetson AGX Orin CPU (Cortex-A78AE)"),
}


def _arm_device_factory(name: str, device: ArmDevice) -> Callable[[dict[str, str]], Target]:
    def factory(opts: dict[str, str]) -> Target:
        features = ",".join(["+neon"] + [f for f in device.features.split(",") if f])
        return Target(name, CPU_KIND, "aarch64-unknown-linux-gnu", device.cpu, features, 128,
                      device.description, num_cores=device.cores, l1_bytes=device.l1_kib * 1024,
                      l2_bytes=device.l2_kib * 1024)

    return factory


for _name, _device in ARM_DEVICES.items():
    register_target(_name)(_arm_device_factory(_name, _device))


# PTX ISA version per GPU architecture: the lowest that knows the architecture, at least 7.8
# (CUDA 11.8 drivers and later load it), so one artifact runs on any driver of the last years. sm_90a: sm_90's
# arch-specific PTX (8.0, runs on sm_90 GPUs only) with wgmma, which its MatMul groups use (core/codegen/wgmma_gemm.py);
# sm_90 keeps the mma.sync GEMM until a GPU session has validated the wgmma kernel.
_CUDA_ARCHS = {"sm_70": "+ptx78", "sm_75": "+ptx78", "sm_80": "+ptx78", "sm_86": "+ptx78", "sm_89": "+ptx78",
               "sm_90": "+ptx78", "sm_90a": "+ptx80"}


@register_target("cuda")
def _cuda(opts: dict[str, str]) -> Target:
    arch = opts.get("arch", "sm_80")
    if arch not in _CUDA_ARCHS:
        raise UnknownTargetError(f"cuda: unknown -arch={arch}; known: {', '.join(_CUDA_ARCHS)}")
    return Target("cuda", CUDA_KIND, "nvptx64-nvidia-cuda", arch, _CUDA_ARCHS[arch], 32,
                  f"NVIDIA GPU ({arch}): PTX from LLVM's NVPTX backend, launched through the CUDA driver",
                  max_threads_per_block=1024, max_shared_bytes=48 * 1024, warp_size=32)


def get_target(spec: "str | Target") -> Target:
    """Parse `"name -key=value ..."` into a Target; raises UnknownTargetError listing the known ones."""
    if isinstance(spec, Target):
        return spec
    words = str(spec).split()
    if not words or words[0] not in _FACTORIES:
        raise UnknownTargetError(f"unknown target {spec!r}; known targets: {', '.join(target_names())}")
    opts: dict[str, str] = {}
    for word in words[1:]:
        if not word.startswith("-") or "=" not in word:
            raise UnknownTargetError(f"bad target option {word!r} in {spec!r}; expected -key=value")
        key, value = word.lstrip("-").split("=", 1)
        opts[key] = value
    target = _FACTORIES[words[0]](opts)
    return replace(target, options=tuple(sorted(opts.items()))) if opts else target


def target_names() -> list[str]:
    return list(_FACTORIES)


def all_targets() -> list[Target]:
    return [get_target(n) for n in target_names()]
