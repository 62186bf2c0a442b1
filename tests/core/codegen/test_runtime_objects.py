"""The C runtime's objects started ahead (start_runtime_objects, while a model's kernels are lowered): the same bytes
as compiled when linked, kept in the kernel cache, nothing started once it has them, and a compiler failure raised
as one BuildError when the object is wanted."""
from __future__ import annotations

import shutil

import pytest

from core.codegen import runtime_objects as rt
from core.codegen.kernel_cache import building
from core.codegen.toolchain import compile_c
from core.errors import BuildError


@pytest.fixture
def fresh_process(monkeypatch):
    """No runtime object compiled or started in this process yet."""
    monkeypatch.setattr(rt, "_objects", {})
    monkeypatch.setattr(rt, "_started", {})


def test_objects_started_ahead_are_the_ones_compiled_and_go_to_the_cache(tmp_path, fresh_process):
    cc = shutil.which("cc") or shutil.which("gcc")
    with building(tmp_path / "cache"):
        rt.start_runtime_objects(cc, with_model=True)
        started = dict(rt._started)
        assert len(started) == 2 and all(s.tool.proc.pid for s in started.values())
        paths = rt.runtime_objects(cc, tmp_path, with_model=True)
    assert not rt._started and not any(s.folder.exists() for s in started.values())
    for path in paths:
        expected = tmp_path / "expected" / path.name
        expected.parent.mkdir(exist_ok=True)
        compile_c(cc, rt.RUNTIME_DIR / (path.stem + ".c"), expected, include_dirs=(rt.RUNTIME_DIR,))
        assert path.read_bytes() == expected.read_bytes()
    rt._objects.clear()  # a new process with the same cache: nothing to start
    with building(tmp_path / "cache"):
        rt.start_runtime_objects(cc, with_model=True)
    assert not rt._started and len(rt._objects) == 2


def test_a_compiler_that_fails_is_one_build_error_when_the_object_is_wanted(tmp_path, fresh_process):
    failing = tmp_path / "cc"
    failing.write_text("#!/bin/sh\necho 'cc: fatal error: out of luck' >&2\nexit 1\n")
    failing.chmod(0o755)
    with building("off"):
        rt.start_runtime_objects(str(failing), with_model=False)
        with pytest.raises(BuildError, match="compiling kiln_threadpool.c failed .*out of luck"):
            rt.runtime_objects(str(failing), tmp_path, with_model=False)
