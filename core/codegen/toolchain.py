"""The system C toolchain: `cc` for the host, `<arch>-linux-gnu-gcc` for other architectures
(or $KILN_CC); compiling C and linking shared libraries, failures raised as BuildError."""
from __future__ import annotations

import os
import platform
import shutil
from pathlib import Path
from typing import Optional

from ..errors import BuildError
from ..process.tool import RunningTool, run_tool, start_tool
from ..target import Target

# The architectures whose machine code LLVM's CPU backends emit here and the C toolchain links (NVPTX is not one).
CPU_ARCHES = ("x86_64", "aarch64")


def _host_arch() -> str:
    machine = platform.machine().lower()
    return "aarch64" if machine in ("arm64", "aarch64") else machine


def find_compiler(target: Target) -> str:
    """The C compiler driver that produces code (and links) for `target`."""
    if target.arch not in CPU_ARCHES:
        raise BuildError(f"target {target.name} ({target.kind}) cannot be linked into a CPU shared library")
    override = os.environ.get("KILN_CC")
    if override:
        return override
    if target.arch == _host_arch():
        for name in ("cc", "gcc", "clang"):
            path = shutil.which(name)
            if path:
                return path
        raise BuildError("no C compiler found (looked for cc, gcc, clang); install gcc to build libraries")
    cross = f"{target.arch}-linux-gnu-gcc"
    path = shutil.which(cross)
    if path:
        return path
    raise BuildError(f"cannot link for target {target.name} ({target.triple}): cross compiler {cross} not found; "
                     f"install it (Debian: apt-get install gcc-{target.arch.replace('_', '-')}-linux-gnu) "
                     f"or set KILN_CC to a compiler for {target.arch}")


def compile_c(cc: str, source: Path, obj: Path, include_dirs: tuple[Path, ...] = ()) -> None:
    start_compile_c(cc, source, obj, include_dirs).wait()


def start_compile_c(cc: str, source: Path, obj: Path, include_dirs: tuple[Path, ...] = ()) -> RunningTool:
    """compile_c started, to run while this process goes on (`wait()` ends it as compile_c would)."""
    cmd = [cc, "-c", "-O2", "-fPIC", "-std=c11", "-D_POSIX_C_SOURCE=200809L", "-fvisibility=default"]
    cmd += [f"-I{d}" for d in include_dirs] + ["-o", str(obj), str(source)]
    return start_tool(cmd, f"compiling {source.name}")


def link_shared(cc: str, objects: list[Path], out: Path, libs: list[str] = (),
                version_script: Optional[Path] = None) -> None:
    # -Bsymbolic: calls between the library's own symbols stay inside it, so several models (or
    # tuning candidates with the same kernel names) can be loaded into one process side by side.
    # No libgomp: parallel loops run on Kiln's own pool (core/runtime/kiln_threadpool.c), on pthreads.
    # A version script limits what the library exports (a named artifact: its own prefix only).
    cmd = [cc, "-shared", "-fPIC", "-pthread", "-o", str(out), *map(str, objects),
           "-Wl,-Bsymbolic", "-Wl,-z,noexecstack", *libs, "-lm"]
    if version_script is not None:
        cmd.append(f"-Wl,--version-script={version_script}")
    run_tool(cmd, "linking the shared library")
