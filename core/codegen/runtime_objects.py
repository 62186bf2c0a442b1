"""The C runtime linked into every library: the thread pool always, the model runtime with a plan,
the CUDA backend (kernel launches through the driver API) in GPU model libraries.
Each object is compiled once per (compiler, sources): kept in the process (tests build many libraries) and in the
kernel cache; with a cold cache, a model's build starts the compiler on them before its kernels are lowered."""
from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..runtime.header import render_api_shim
from .kernel_cache import CachedObject, current_cache
from ..process.tool import RunningTool
from .toolchain import compile_c, start_compile_c

RUNTIME_DIR = Path(__file__).resolve().parent.parent / "runtime"
POOL_SOURCE = "kiln_threadpool.c"
MODEL_SOURCE = "kiln_runtime.c"
CUDA_SOURCE = "kiln_cuda.c"
SHAPED_SOURCE = "kiln_shaped.c"
ISA_SOURCE = "kiln_isa.c"  # a multi-ISA library's variant choice (core/codegen/isa_dispatch.py)

_objects: dict[tuple[str, str], bytes] = {}
_started: dict[tuple[str, str], "_Started"] = {}
_lock = threading.Lock()


def _sources_digest(source: Path) -> str:
    """The source and every runtime header it may include: an edit to either rebuilds the object."""
    h = hashlib.sha256(source.read_bytes())
    for header in sorted(RUNTIME_DIR.glob("*.h")):
        h.update(header.name.encode() + b"\0" + header.read_bytes())
    return h.hexdigest()


def _compiler_identity(cc: str) -> str:
    """The compiler binary (resolved path, size, mtime): an upgraded compiler builds the runtime again."""
    path = shutil.which(cc) or cc
    try:
        st = os.stat(os.path.realpath(path))
        return f"{os.path.realpath(path)}:{st.st_size}:{st.st_mtime_ns}"
    except OSError:
        return path


def _disk_key(cc: str, digest: str) -> str:
    return hashlib.sha256(f"runtime-object\0{_compiler_identity(cc)}\0{digest}".encode()).hexdigest()


@dataclass
class _Started:
    """A runtime object the C compiler is building while this process goes on (start_runtime_objects)."""

    tool: RunningTool
    folder: Path
    obj: Path
    pid: int  # of the process that started it: only it can wait for the compiler


def _start(cc: str, source: Path) -> _Started:
    folder = Path(tempfile.mkdtemp(prefix="kiln-rt-"))
    obj = folder / (source.stem + ".o")
    try:
        return _Started(start_compile_c(cc, source, obj, include_dirs=(RUNTIME_DIR,)), folder, obj, os.getpid())
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise


def _finish(started: _Started) -> CachedObject:
    try:
        started.tool.wait()
        return CachedObject(started.obj.read_bytes(), ())
    finally:
        shutil.rmtree(started.folder, ignore_errors=True)


def _object_bytes(cc: str, source: Path) -> bytes:
    key = (cc, _sources_digest(source))
    with _lock:
        if key not in _objects:
            started = _started.pop(key, None)
            started = started if started is not None and started.pid == os.getpid() else None
            cache = current_cache()  # shared with the kernels: a fresh process need not run the C compiler
            hit = cache.get(_disk_key(cc, key[1])) if cache is not None and started is None else None
            if hit is None:
                hit = _finish(started or _start(cc, source))
                if cache is not None:
                    cache.put(_disk_key(cc, key[1]), hit)
            _objects[key] = hit.data
        return _objects[key]


def _sources(with_model: bool, with_cuda: bool = False, with_shapes: bool = False, with_isa: bool = False) -> list[str]:
    names = [POOL_SOURCE] + ([MODEL_SOURCE] if with_model else []) + ([CUDA_SOURCE] if with_cuda else [])
    return names + ([SHAPED_SOURCE] if with_shapes else []) + ([ISA_SOURCE] if with_isa else [])


def start_runtime_objects(cc: str, with_model: bool, with_isa: bool = False) -> None:
    """Starts the C compiler on each runtime object a library will link that neither this process nor the kernel
    cache has, so that it compiles while the kernels are lowered (a cold cache); `runtime_objects` takes them."""
    cache = current_cache()
    for name in _sources(with_model, with_isa=with_isa):
        source = RUNTIME_DIR / name
        key = (cc, _sources_digest(source))
        with _lock:
            if key in _objects or key in _started and _started[key].pid == os.getpid():
                continue
            hit = cache.get(_disk_key(cc, key[1])) if cache is not None else None
            if hit is not None:
                _objects[key] = hit.data
            else:
                _started[key] = _start(cc, source)


def runtime_objects(cc: str, out_dir: Path, with_model: bool, with_cuda: bool = False,
                    with_shapes: bool = False, with_isa: bool = False) -> list[Path]:
    """Write the runtime's object files into `out_dir` and return their paths (to pass to the linker)."""
    paths = []
    for name in _sources(with_model, with_cuda, with_shapes, with_isa):
        path = out_dir / (Path(name).stem + ".o")
        path.write_bytes(_object_bytes(cc, RUNTIME_DIR / name))
        paths.append(path)
    return paths


# A multi-ISA library's variant choice (kiln_isa.c) under a named artifact's prefix.
_ISA_SHIM = """const char* kiln_isa(void);
int kiln_set_isa(const char* name);
const char* kiln_isa_refusal(void);
const char* {p}_isa(void) {{ return kiln_isa(); }}
int {p}_set_isa(const char* name) {{ return kiln_set_isa(name); }}
const char* {p}_isa_refusal(void) {{ return kiln_isa_refusal(); }}
"""


def prefixed_exports(cc: str, out_dir: Path, prefix: Optional[str], shaped: bool = False,
                     isa: bool = False) -> tuple[list[Path], Optional[Path]]:
    """For a named artifact (`prefix`): the object exporting the model ABI as PREFIX_load, PREFIX_run, ...
    (and a multi-ISA library's PREFIX_isa, PREFIX_set_isa, PREFIX_isa_refusal when `isa`) and the linker version
    script that exports only those, so the runtime's kiln_ names and the kernels stay internal and libraries of
    several models link into one program. None: nothing ([], None)."""
    if prefix is None:
        return [], None
    source = out_dir / f"{prefix}_api.c"
    source.write_text(render_api_shim(prefix, shaped) + (_ISA_SHIM.format(p=prefix) if isa else ""))
    obj = source.with_suffix(".o")
    compile_c(cc, source, obj)
    script = out_dir / f"{prefix}.map"
    script.write_text(f"{{\n  global: {prefix}_*;\n  local: *;\n}};\n")
    return [obj], script
