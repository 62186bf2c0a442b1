"""A whole (tiny) model: plan -> library -> artifact -> core.runtime.load(...).run(feeds) vs numpy."""
from __future__ import annotations

import json
import tarfile
import threading

import numpy as np
import pytest

import core.runtime
from core.runtime import KilnRuntimeError
from core.runtime.package import read_artifact_member

RNG = np.random.default_rng(1)


def feeds():
    return {"x": RNG.standard_normal((3, 8)).astype("float32")}


def test_run_matches_numpy(tiny_model):
    with core.runtime.load(tiny_model.artifact) as m:
        f = feeds()
        out = m.run(f)
        ref = tiny_model.reference(f["x"])
        assert list(out) == ["y", "t_plus_one"]
        for name in ref:
            np.testing.assert_allclose(out[name], ref[name], rtol=1e-5, atol=1e-5)
            assert out[name].dtype == np.float32 and out[name].shape == (3, 16)
        # Fresh output arrays each time, and a second run gives the same answer.
        again = m.run(f)
        assert again["y"] is not out["y"]
        np.testing.assert_array_equal(again["y"], out["y"])


def test_inputs_outputs_info(tiny_model):
    with core.runtime.load(tiny_model.artifact) as m:
        assert m.inputs == [{"name": "x", "shape": [3, 8], "dtype": "float32"}]
        assert [o["name"] for o in m.outputs] == ["y", "t_plus_one"]
        assert "x: float32[3, 8]" in repr(m)


def test_feed_checks_have_clear_messages(tiny_model):
    with core.runtime.load(tiny_model.artifact) as m:
        x = feeds()["x"]
        with pytest.raises(ValueError, match="missing input.*'x'"):
            m.run({})
        with pytest.raises(ValueError, match="unknown input.*'z'"):
            m.run({"x": x, "z": x})
        with pytest.raises(ValueError, match="shape \\(8, 3\\), expected \\(3, 8\\)"):
            m.run({"x": x.T.copy()})
        with pytest.raises(ValueError, match="dtype float64, expected float32"):
            m.run({"x": x.astype("float64")})
        with pytest.raises(TypeError):
            m.run([x])
        # Non-contiguous arrays and nested lists are accepted and converted.
        wide = np.zeros((3, 16), "float32")
        wide[:, ::2] = x
        np.testing.assert_allclose(m.run({"x": wide[:, ::2]})["y"], m.run({"x": x})["y"])
        np.testing.assert_allclose(m.run({"x": x.tolist()})["y"], m.run({"x": x})["y"])


def test_benchmark_and_profile(tiny_model):
    with core.runtime.load(tiny_model.artifact) as m:
        stats = m.benchmark(repeat=7, warmup=1, number=2)
        assert set(stats) >= {"median_ms", "mean_ms", "min_ms", "p90_ms", "runs"}
        assert stats["runs"] == 14 and 0 < stats["min_ms"] <= stats["median_ms"] <= stats["p90_ms"]
        prof = m.profile(repeat=3)
        assert [p["name"] for p in prof] == ["dense_bias", "relu_scale"]
        assert all(p["time_ms"] >= 0 for p in prof)


def test_extracted_directory_and_threads(tiny_model, tmp_path):
    with tarfile.open(tiny_model.artifact) as tar:
        tar.extractall(tmp_path, filter="data")
    m = core.runtime.load(tmp_path, num_threads=1)
    assert m.num_threads == 1
    m.set_num_threads(2)
    assert m.num_threads == 2
    x = feeds()["x"]
    np.testing.assert_allclose(m.run({"x": x})["y"], tiny_model.reference(x)["y"], rtol=1e-5, atol=1e-5)
    m.close()
    m.close()  # idempotent
    with pytest.raises(ValueError, match="closed"):
        m.run({"x": x})


def test_two_modules_and_threads_side_by_side(tiny_model):
    a, b = core.runtime.load(tiny_model.artifact), core.runtime.load(tiny_model.artifact)
    errors = []

    def work(mod):
        try:
            for _ in range(20):
                f = feeds()
                np.testing.assert_allclose(mod.run(f)["y"], tiny_model.reference(f["x"])["y"], rtol=1e-5, atol=1e-5)
        except Exception as e:  # collected and asserted below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(m,)) for m in (a, b, a)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    a.close(), b.close()
    assert not errors, errors


def test_weights_of_the_wrong_size_are_refused(tiny_model, tmp_path):
    with tarfile.open(tiny_model.artifact) as tar:
        tar.extractall(tmp_path, filter="data")
    (tmp_path / "weights.bin").write_bytes(b"\0" * 12)
    with pytest.raises(KilnRuntimeError, match="has 12 bytes, the model expects 576"):
        core.runtime.load(tmp_path)


def test_artifact_for_another_cpu_is_refused(tiny_model, tmp_path):
    with tarfile.open(tiny_model.artifact) as tar:
        tar.extractall(tmp_path, filter="data")
    meta = json.loads((tmp_path / "metadata.json").read_text())
    (tmp_path / "metadata.json").write_text(json.dumps(dict(meta, triple="aarch64-unknown-linux-gnu", target="aarch64")))
    with pytest.raises(KilnRuntimeError, match="built for aarch64"):
        core.runtime.load(tmp_path)
    (tmp_path / "metadata.json").write_text(json.dumps(dict(meta, triple=None, target_triple="aarch64-linux-gnu")))
    with pytest.raises(KilnRuntimeError, match="built for aarch64"):
        core.runtime.load(tmp_path)
    (tmp_path / "metadata.json").write_text(json.dumps(dict(meta, cpu_features="+avx2,+made-up,+avx512f,+avx512bw")))
    flags = open("/proc/cpuinfo").read()
    if "avx512f" not in flags:
        with pytest.raises(KilnRuntimeError, match="avx512"):
            core.runtime.load(tmp_path)


def test_not_an_artifact(tmp_path):
    with pytest.raises(FileNotFoundError):
        core.runtime.load(tmp_path / "missing.tar.gz")
    (tmp_path / "junk.tar.gz").write_bytes(b"not a tarball")
    with pytest.raises(KilnRuntimeError, match="cannot read artifact"):
        core.runtime.load(tmp_path / "junk.tar.gz")
    with pytest.raises(KilnRuntimeError, match="not a Kiln artifact"):
        core.runtime.load(tmp_path)


def test_weights_bin_is_the_blob(tiny_model):
    blob = read_artifact_member(tiny_model.artifact, "weights.bin")
    np.testing.assert_array_equal(np.frombuffer(blob, "float32"), tiny_model.weights)
