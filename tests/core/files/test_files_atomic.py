"""Atomic writes: the target is the old file or the whole new one, and a failed write leaves nothing behind."""
from __future__ import annotations

import pytest

from core.files.atomic import atomic_path, write_atomic


def test_write_atomic_replaces_the_file_and_creates_its_folder(tmp_path):
    path = tmp_path / "a" / "b" / "report.json"
    write_atomic(path, "{}")
    write_atomic(path, b"new")
    assert path.read_bytes() == b"new"
    assert [p.name for p in path.parent.iterdir()] == ["report.json"]


def test_a_failed_write_keeps_the_old_file_and_removes_the_partial_one(tmp_path):
    path = tmp_path / "lib.so"
    path.write_bytes(b"old")
    with pytest.raises(RuntimeError):
        with atomic_path(path, durable=True) as partial:
            assert partial.parent == tmp_path and partial.name.startswith(".lib.so.") and partial.name.endswith(".partial")
            partial.write_bytes(b"half")
            raise RuntimeError("the linker failed")
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["lib.so"]


def test_the_new_file_appears_only_when_the_block_ends(tmp_path):
    path = tmp_path / "artifact.tar.gz"
    with atomic_path(path) as partial:
        partial.write_bytes(b"whole")
        assert not path.exists()
    assert path.read_bytes() == b"whole" and not partial.exists()
