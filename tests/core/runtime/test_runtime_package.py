"""Artifact packaging: fixed members, regular files, atomic writes, the shipped loader is self-contained."""
from __future__ import annotations

import ast
import json
import tarfile
from pathlib import Path

import pytest

from core.errors import ArtifactError
from core.runtime import loader as loader_module
from core.runtime.package import MEMBERS, read_artifact_member, write_artifact


def test_members_are_fixed_regular_files(tiny_model):
    with tarfile.open(tiny_model.artifact) as tar:
        members = tar.getmembers()
    assert sorted(m.name for m in members) == sorted(MEMBERS)
    assert all(m.isfile() for m in members)
    meta = json.loads(read_artifact_member(tiny_model.artifact, "metadata.json"))
    assert meta["library"] == "libkiln_model.so" and meta["weights"] == "weights.bin"
    assert meta["inputs"][0]["name"] == "x" and meta["triple"]
    assert json.loads(read_artifact_member(tiny_model.artifact, "report.json")) == {"schema": 1}
    readme = read_artifact_member(tiny_model.artifact, "README.txt").decode()
    assert "kiln_loader" in readme and "kiln_run" in readme and len(readme.splitlines()) <= 12
    assert read_artifact_member(tiny_model.artifact, "kiln_loader.py") == Path(loader_module.__file__).read_bytes()


def test_read_missing_member(tiny_model, tmp_path):
    with pytest.raises(ArtifactError, match="no member"):
        read_artifact_member(tiny_model.artifact, "nope.txt")
    (tmp_path / "bad.tar.gz").write_bytes(b"\x1f\x8b broken")
    with pytest.raises(ArtifactError, match="cannot read"):
        read_artifact_member(tmp_path / "bad.tar.gz", "metadata.json")


def test_failed_write_leaves_nothing_behind(tmp_path):
    meta = {"inputs": [], "outputs": []}
    out = tmp_path / "a.tar.gz"
    with pytest.raises(ArtifactError, match="does not exist"):
        write_artifact(out, library=tmp_path / "missing.so", weights=b"", metadata=meta, header="")
    lib = tmp_path / "lib.so"
    lib.write_bytes(b"\x7fELF fake")
    with pytest.raises(FileNotFoundError):
        write_artifact(out, library=lib, weights=tmp_path / "missing.bin", metadata=meta, header="")
    with pytest.raises(ArtifactError, match="inputs"):
        write_artifact(out, library=lib, weights=b"", metadata={"outputs": []}, header="")
    assert list(tmp_path.iterdir()) == [lib]


def test_write_replaces_atomically_and_reproducibly(tmp_path):
    lib = tmp_path / "lib.so"
    lib.write_bytes(b"\x7fELF fake")
    meta = {"inputs": [{"name": "a", "shape": [1], "dtype": "float32"}], "outputs": []}
    out = tmp_path / "sub" / "a.tar.gz"
    write_artifact(out, library=lib, weights=b"1234", metadata=meta, header="/* h */")
    first = out.read_bytes()
    write_artifact(out, library=lib, weights=b"1234", metadata=meta, header="/* h */")
    assert out.read_bytes() == first  # same inputs, same bytes (mtime pinned)
    assert [p.name for p in out.parent.iterdir()] == ["a.tar.gz"]  # no temp files left


def test_loader_imports_only_numpy_ctypes_and_stdlib():
    import sys
    tree = ast.parse(Path(loader_module.__file__).read_text())
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "relative imports would break the shipped copy"
            roots.add(node.module.split(".")[0])
    allowed = set(sys.stdlib_module_names) | {"numpy"}
    assert roots <= allowed, roots - allowed
    assert "ctypes" in roots
