"""The compiler's stages called with a target alone, for tests and benchmarks: each looks the target's Backend up
here (at the top, as core.compile does) and hands it down to the stage, which never looks it up itself."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from core.backends import Backend, get_backend, measuring_device  # noqa: F401 (measuring_device: re-exported)
from core.lowering import executable
from core.runtime import package
from core.target import Target, get_target, host_target
from core.tune import session, task, templates


def backend_of(target: "str | Target") -> Backend:
    return get_backend(get_target(target))


def optimize(graph, opt_level: int, target: "Optional[Target | str]" = None):
    """The passes `target`'s backend runs at -O`opt_level` (default target: the host)."""
    target = get_target(target) if target is not None else host_target()
    return backend_of(target).optimize(graph, opt_level, target)


def build_executable(graph, target: Target, *args, **kwargs):
    return executable.build_executable(graph, target, backend_of(target), *args, **kwargs)


def build_library(funcs, target: Target, out_path: "str | Path", plan=None) -> Path:
    """The shared library that `target`'s backend builds from `funcs` (and `plan`)."""
    return backend_of(target).build_library(list(funcs), target, Path(out_path), plan)


def extract_tasks(graph, target: Target):
    return task.extract_tasks(graph, target, backend_of(target))


def tune_graph(graph, target: Target, opts):
    return session.tune_graph(graph, target, backend_of(target), opts)


def target_metadata(target: Target) -> dict:
    return package.target_metadata(target, backend_of(target))


def runs_on_host(target: "str | Target") -> bool:
    """Whether this machine has the hardware `target`'s code runs on."""
    return backend_of(target).has_device(get_target(target))


def get_template(op: str, target: Target):
    backend_of(target).load_templates()
    return templates.get_template(op, target)


def tunable_ops(target: Target) -> list[str]:
    backend_of(target).load_templates()
    return templates.tunable_ops(target)


def get_schedule(op: str, target: Target):
    """The op's schedule for `target`, its backend's generic one when it has none of its own."""
    return backend_of(target).schedule(op, get_target(target))
