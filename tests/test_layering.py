"""The package layers import only downwards (an ast walk over every import, lazy ones included)."""
from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("core", "service", "workers", "cli")

# Each layer and the layers it may import: the compiler at the bottom, the service's shared core above it,
# the API and the workers side by side on both, the command line on top of everything.
MAY_IMPORT = {
    "core": set(),
    "service.core": {"core"},
    "service.api": {"core", "service.core"},
    "workers": {"core", "service.core"},
    "cli": {"core", "service.core", "service.api", "workers"},
}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@lru_cache(maxsize=None)  # every package's test walks the same files
def imported_names(path: Path) -> list[tuple[str, int]]:
    """(dotted name, line) of every import in the file, relative ones resolved; `from m import x` gives m.x."""
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names = []
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):  # drop `if TYPE_CHECKING:` blocks: their imports are for type hints only
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            node.body = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            parts = package.split(".")[:len(package.split(".")) - node.level + 1] if node.level else []
            base = ".".join(parts + ([node.module] if node.module else []))
            names += [(f"{base}.{alias.name}", node.lineno) for alias in node.names]
    return names


@lru_cache
def modules() -> dict[str, Path]:
    return {module_name(path): path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))}


def layer(name: str) -> str | None:
    for candidate in sorted(MAY_IMPORT, key=len, reverse=True):
        if name == candidate or name.startswith(candidate + "."):
            return candidate
    return None


def own_module(name: str) -> str | None:
    """The module of ours that a dotted name lives in (`service.core.tables.Job` -> `service.core.tables`)."""
    while name and name not in modules():
        name = name.rpartition(".")[0]
    return name or None


def cycle(graph: dict[str, set[str]]) -> list[str]:
    """One circle in the graph as [a, b, ..., a], or [] when there is none."""
    state: dict[str, str] = {}
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = "open"
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = "done"
        path.pop()
        return []

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return []


def layer_imports() -> dict[tuple[str, str], list[str]]:
    """(from layer, to layer) -> the imports that make that edge, as `module:line imports name`."""
    edges: dict[tuple[str, str], list[str]] = {}
    for name, path in modules().items():
        source = layer(name)
        for imported, line in imported_names(path):
            target = layer(imported)
            if target is not None and target != source:
                edges.setdefault((source, target), []).append(f"{name}:{line} imports {imported}")
    return edges


@pytest.mark.parametrize("source", list(MAY_IMPORT))
def test_a_layer_imports_only_the_layers_below_it(source):
    wrong = [where for (src, dst), found in layer_imports().items() if src == source and dst not in MAY_IMPORT[src]
             for where in found]
    assert not wrong, "\n".join(wrong)


def circle_between(edges) -> list[str]:
    """One circle among the (source, target) pairs `edges`, as cycle() gives it."""
    graph: dict[str, set[str]] = {}
    for source, target in edges:
        graph.setdefault(source, set()).add(target)
    return cycle(graph)


def test_the_layers_import_each_other_without_a_circle():
    assert not (found := circle_between(layer_imports())), " -> ".join(found)


def packages() -> list[str]:
    """Every package (a folder with __init__.py), sub-packages included, but `core` itself: a circle there runs
    between its packages, whose order is checked on its own."""
    return sorted(name for name, path in modules().items() if path.name == "__init__.py" and name != "core")


# Every package's modules import each other without a circle (imports under `if TYPE_CHECKING:` never run and
# are not counted; lazy imports inside functions are): a registry never imports what registers into it (the
# package's __init__ does, as core/graph and core/kernels load their ops).
@pytest.mark.parametrize("package", packages())
def test_no_import_circle_between_modules(package):
    graph = {name: {dep for imported, _ in imported_names(path) if (dep := own_module(imported)) and dep != name}
             for name, path in modules().items() if name == package or name.startswith(package + ".")}
    assert not (found := cycle(graph)), " -> ".join(found)


def test_the_walk_sees_relative_and_lazy_imports():
    edges = layer_imports()
    assert any("imports service.core.tables." in where for where in edges[("service.api", "service.core")])
    assert any(where.startswith("cli.service_commands:") for where in edges[("cli", "workers")])  # inside a function
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"] and cycle({"a": {"b"}, "b": set()}) == []
    assert {"service.api", "workers", "cli", "core.kernels", "core.backends.cuda.schedules", "core.te", "core.tune"} \
        <= set(packages())  # every package, sub-packages included


def test_the_shared_service_core_needs_no_web_framework():
    """Workers and `kiln token` load service.core without FastAPI or Starlette."""
    web = [f"{name}:{line} imports {imported}" for name, path in modules().items() if name.startswith("service.core")
           for imported, line in imported_names(path) if imported.split(".")[0] in ("fastapi", "starlette")]
    assert not web, "\n".join(web)


# core's packages (and its top-level modules) from the bottom up: each imports only those of the rows before its own,
# never one of its own row or above. The Backend sits above every subsystem it drives (made once at the boundary and
# handed down, never looked up from below); the runtime (artifact loader, CUDA driver bindings) below the codegen that
# loads kernels through it.
CORE_LAYERS = (
    ("_version", "debug", "errors", "narrow_dtypes"),
    ("target", "files", "process", "packing"),
    ("tir",),
    ("te",),
    ("graph",),
    ("frontend", "kernels"),
    ("runtime", "quantize"),
    ("codegen",),
    ("lowering",),
    ("tune",),
    ("backends", "report"),
    ("driver",),
    ("onnx_backend",),
)
def core_package(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "core" and len(parts) > 1 else None


def core_package_imports() -> dict[tuple[str, str], list[str]]:
    """(importing package, imported package) -> `module:line imports name` of each import between two of core's
    packages, lazy ones included."""
    edges: dict[tuple[str, str], list[str]] = {}
    for name, path in modules().items():
        source = core_package(name)
        for imported, line in imported_names(path):
            target = core_package(own_module(imported) or "")
            if source and target and target != source:
                edges.setdefault((source, target), []).append(f"{name}:{line} imports {imported}")
    return edges


def test_core_packages_import_only_the_layers_below_theirs():
    rank = {package: row for row, packages in enumerate(CORE_LAYERS) for package in packages}
    unplaced = sorted({core_package(name) for name in modules()} - set(rank) - {None})
    assert not unplaced, f"place {unplaced} in CORE_LAYERS"
    upward = [where for (source, target), found in core_package_imports().items() if rank[target] >= rank[source]
              for where in found]
    assert not upward, "\n".join(upward)


def test_core_packages_import_each_other_without_a_circle():
    assert not (found := circle_between(core_package_imports())), " -> ".join(found)


def test_nothing_below_the_backends_looks_a_backend_up():
    """Only the boundary resolves a target's Backend (core.backends itself, the driver, the service, the CLI, the
    workers); every other package takes it as an argument (importing its type for hints only)."""
    boundary = ("core.backends", "core.driver", "service", "workers", "cli")
    lookups = [f"{name}:{line} imports {imported}" for name, path in modules().items()
               if not any(name == b or name.startswith(b + ".") for b in boundary)
               for imported, line in imported_names(path) if imported.startswith("core.backends")]
    assert not lookups, "\n".join(lookups)
