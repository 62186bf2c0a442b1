"""The reproducibility manifest and `rebuild`: every build input recorded; a rebuild of an untuned and of a tuned
artifact is byte-identical, and a rebuild that cannot be says which part differs and why."""
from __future__ import annotations

import hashlib
import io
import json
import tarfile

import numpy as np
import pytest

import core
from core._version import __version__
from core.driver.manifest import ManifestError, canonical_record_line
from core.driver.rebuild import compare, read_members, rebuild
from tests.conftest import assert_artifact_matches_onnxruntime, tiny_model


@pytest.fixture(scope="module")
def untuned(tmp_path_factory):
    path = tmp_path_factory.mktemp("untuned") / "a.tar.gz"
    artifact = core.compile(tiny_model(), opt_level=3, benchmark=False, name="tiny", tolerance=1e-4)
    artifact.save(path)
    return path, artifact.metadata["manifest"], artifact.report


def test_the_manifest_names_every_input_of_the_build(untuned):
    path, manifest, report = untuned
    assert manifest["model_sha256"] == hashlib.sha256(tiny_model()).hexdigest()
    assert manifest["compiler_version"] == __version__
    assert manifest["git_commit"] and manifest["llvmlite_version"] and manifest["llvm_version"].count(".") >= 1
    assert len(manifest["compiler_source_sha256"]) == 64  # "+dirty" does not say which edit a build saw; this does
    assert manifest["target"]["spec"] == "native" and manifest["target"]["triple"] and manifest["target"]["cpu"]
    expected = {"opt_level": 3, "input_shapes": {}, "tuning": None, "threads": None, "name": "tiny", "validate": "error",
                "tolerance": [1e-4, 1e-4], "bisect": False}
    assert {k: manifest["options"].get(k) for k in expected} == expected
    assert manifest["records_applied"] == []
    assert manifest["validation_inputs"]["kind"].startswith("seeded random")
    assert report["manifest"] == manifest
    assert json.loads(read_members(path)["metadata.json"])["manifest"] == manifest
    assert "/" not in json.dumps(manifest["options"])  # no paths: two machines' builds can agree
    gzip_header = path.read_bytes()[:10]
    assert gzip_header[4:8] == bytes(4) and not gzip_header[3] & 0x08  # no time and no file name in the archive


def test_user_validation_inputs_are_hashed(tmp_path):
    samples = tmp_path / "x.npz"
    np.savez(samples, x=np.random.default_rng(1).standard_normal((2, 1, 3, 8, 8)).astype(np.float32))
    artifact = core.compile(tiny_model(), benchmark=False, validation_inputs=str(samples))
    digest = artifact.metadata["manifest"]["validation_inputs"]
    assert digest["kind"] == "user" and digest["samples"] == 2 and len(digest["sha256"]) == 64
    assert digest != core.compile(tiny_model(), benchmark=False).metadata["manifest"]["validation_inputs"]


def test_an_untuned_rebuild_is_byte_identical(untuned, tmp_path):
    path, _, _ = untuned
    result = rebuild(path, tiny_model())
    try:
        assert result.identical, result.summary()
        assert result.parts == {"library": True, "weights": True, "header": True, "metadata": True}
        out = result.artifact.save(tmp_path / "again.tar.gz")
    finally:
        result.artifact.cleanup()
    before, after = read_members(path), read_members(out)
    assert before["libtiny.so"] == after["libtiny.so"] and before["weights.bin"] == after["weights.bin"]
    assert_artifact_matches_onnxruntime(out, tiny_model())


def test_a_tuned_rebuild_applies_the_manifest_records_without_a_database(tmp_path):
    records = tmp_path / "records.jsonl"
    artifact = core.compile(tiny_model(), benchmark=False,
                            tuning={"trials": 4, "records": str(records), "build_workers": 1})
    applied = artifact.metadata["manifest"]["records_applied"]
    assert applied and artifact.report["tuning"]["trials"] > 0
    for entry in applied:
        assert entry["sha256"] == hashlib.sha256(entry["line"].encode()).hexdigest()
        line = json.loads(entry["line"])
        assert entry["line"] == canonical_record_line(line["workload"], line["target"], line["config"])
    path = artifact.save(tmp_path / "tuned.tar.gz")
    records.unlink()  # the rebuild needs the manifest only
    result = rebuild(path, tiny_model())
    try:
        assert result.identical, result.summary()
        assert result.artifact.report["tuning"]["pinned_from_manifest"] == len(applied)
        assert all(k["tuned"] for k in result.artifact.report["kernels"] if k["name"] in
                   {k2["name"] for k2 in artifact.report["kernels"] if k2["tuned"]})
    finally:
        result.artifact.cleanup()


def _with_manifest(path, out, **changes):
    """A copy of the artifact whose manifest says it was built with other inputs."""
    members = read_members(path)
    metadata = json.loads(members["metadata.json"])
    metadata["manifest"].update(changes)
    members["metadata.json"] = json.dumps(metadata).encode()
    with tarfile.open(out, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out


def test_a_rebuild_says_which_part_differs_and_why(untuned, tmp_path):
    path, _, _ = untuned
    older = _with_manifest(path, tmp_path / "older.tar.gz", compiler_version="0.0.9", llvm_version="14.0.6")
    result = rebuild(older, tiny_model())
    result.artifact.cleanup()
    assert not result.identical
    assert [d.part for d in result.differences] == ["metadata"]
    assert result.parts["library"] and not result.parts["metadata"]
    summary = result.summary()
    assert "manifest.compiler_version" in summary and "manifest.llvm_version" in summary
    assert "compiler_version differs (0.0.9 then" in summary and "llvm_version differs (14.0.6 then" in summary


def test_options_that_differ_are_named(untuned):
    """A server's rebuild compiles with its workers' settings (threads): a difference there is said, not blamed on
    the compiler."""
    original = read_members(untuned[0])
    metadata = json.loads(original["metadata.json"])
    metadata["manifest"]["options"]["threads"] = 7
    result = compare(original, {**original, "metadata.json": json.dumps(metadata).encode()})
    assert result.parts["library"] and not result.parts["metadata"]
    assert "option threads differs (None then, 7 now)" in result.summary()


def test_a_rebuild_refuses_another_model_and_an_artifact_without_manifest(untuned, tmp_path):
    path, _, _ = untuned
    with pytest.raises(ManifestError, match="not the one the artifact was built from"):
        rebuild(path, tiny_model(seed=1))
    members = read_members(path)
    metadata = json.loads(members["metadata.json"])
    del metadata["manifest"]
    bare = tmp_path / "bare.tar.gz"
    with tarfile.open(bare, "w:gz") as tar:
        data = json.dumps(metadata).encode()
        info = tarfile.TarInfo("metadata.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    with pytest.raises(ManifestError, match="no reproducibility manifest"):
        rebuild(bare, tiny_model())
