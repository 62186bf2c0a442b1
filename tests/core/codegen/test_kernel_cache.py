"""The compiled-kernel cache and parallel kernel builds: hits, misses, damaged entries, concurrent writers, turning
it off, LRU eviction, and libraries byte-identical whether their kernels came from the cache, one process or several.
Every compiled model here is validated against ONNX Runtime by core.compile itself."""
from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import core
from core.codegen import load_kernels
from tests.backend_calls import build_library
from core.codegen.kernel_cache import CachedObject, KernelCache, resolve
from core.errors import CodegenError, KilnError
from core.graph.ir import Graph, Node, TensorType
from core.lowering.lowering_memo import group_key
from core.target import get_target
from core.tir import Buffer, FloatImm, For, ForKind, IntImm, PrimFunc, Store, Var


def small_cnn() -> bytes:
    """Conv -> Relu -> 1x1 Conv -> residual Add -> pool -> Gemm: several distinct kernels, compiled in seconds."""
    rng = np.random.default_rng(0)
    init = [numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name) for name, shape in
            (("w1", (8, 4, 3, 3)), ("w2", (8, 8, 1, 1)), ("fc", (8, 5)), ("b", (5,)))]
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c1"], ["r1"]),
         helper.make_node("Conv", ["r1", "w2"], ["c2"]),
         helper.make_node("Add", ["c2", "r1"], ["s"]),
         helper.make_node("GlobalAveragePool", ["s"], ["p"]),
         helper.make_node("Flatten", ["p"], ["f"]),
         helper.make_node("Gemm", ["f", "fc", "b"], ["y"])],
        "small_cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 10, 10])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])], init)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def compile_small(cache, **kwargs):
    artifact = core.compile(small_cnn(), benchmark=False, kernel_cache=cache, **kwargs)
    assert artifact.report["validation"]["passed"]
    return artifact, artifact.library.read_bytes()


def entries(directory: Path) -> list[Path]:
    return sorted(directory.glob("*/*.kobj"))


def test_a_second_compile_takes_every_kernel_from_the_cache_and_links_the_same_library(tmp_path):
    cold, cold_lib = compile_small(tmp_path / "cache")
    warm, warm_lib = compile_small(tmp_path / "cache")
    first, second = cold.report["build"], warm.report["build"]
    assert first["kernels"] >= 3 and first["cache_hits"] == 0 and first["built"] == first["kernels"]
    assert second["cache_hits"] == second["kernels"] == first["kernels"] and second["hit_rate"] == 1.0
    assert second["built"] == 0 and second["lowered_from_cache"] >= second["kernels"]
    assert second["cache_dir"] == str(tmp_path / "cache")
    assert warm_lib == cold_lib


def test_a_damaged_entry_is_rebuilt_never_linked(tmp_path):
    _, cold_lib = compile_small(tmp_path / "cache")
    damaged = entries(tmp_path / "cache")
    for k, path in enumerate(damaged):  # a flipped byte, a truncated file, an empty file
        data = bytearray(path.read_bytes())
        if k % 3 == 0:
            data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data[: len(data) // 2]) if k % 3 == 1 else b"" if k % 3 == 2 else bytes(data))
    again, lib = compile_small(tmp_path / "cache")
    assert again.report["build"]["cache_hits"] == 0 and again.report["build"]["lowered_from_cache"] == 0
    assert lib == cold_lib
    cache = KernelCache(tmp_path / "cache")
    assert all(cache.get(path.stem) is not None for path in entries(tmp_path / "cache"))  # rewritten whole


def test_the_cache_is_off_when_asked_and_the_environment_moves_it(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_KERNEL_CACHE", str(tmp_path / "from-env"))
    assert resolve(None).directory == tmp_path / "from-env"
    assert resolve("off") is None and resolve(False) is None
    off, _ = compile_small("off")
    assert off.report["build"]["cache_dir"] is None and off.report["build"]["cache_hits"] == 0
    assert not (tmp_path / "from-env").exists()
    (tmp_path / "a-file").write_text("")
    with pytest.raises(KilnError, match="is a file"):
        resolve(tmp_path / "a-file")


def test_parallel_builds_give_the_same_library_as_a_serial_build(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_BUILD_JOBS", "1")
    serial, serial_lib = compile_small("off")
    monkeypatch.setenv("KILN_BUILD_JOBS", "2")
    parallel, parallel_lib = compile_small("off")
    assert serial.report["build"]["workers"] == 1 and parallel.report["build"]["workers"] == 2
    assert parallel.report["build"]["built"] == serial.report["build"]["built"] >= 3
    assert parallel_lib == serial_lib


def _writer(directory: str, rounds: int, seen_bad: multiprocessing.Value) -> None:
    cache = KernelCache(directory)
    for r in range(rounds):
        for k in range(8):
            key = f"{k:02d}" + "0" * 62
            payload = bytes([k]) * (100_000 + k)  # one content per key, as for real objects
            cache.put(key, CachedObject(payload, ("-lmvec",) if k % 2 else ()))
            got = cache.get(f"{(k + r) % 8:02d}" + "0" * 62)
            if got is not None and got.data != bytes([(k + r) % 8]) * (100_000 + (k + r) % 8):
                seen_bad.value += 1


def test_concurrent_writers_leave_only_whole_entries(tmp_path):
    context = multiprocessing.get_context("fork")
    bad = context.Value("i", 0)
    writers = [context.Process(target=_writer, args=(str(tmp_path), 10, bad)) for _ in range(4)]
    for w in writers:
        w.start()
    for w in writers:
        w.join(60)
        assert w.exitcode == 0
    assert bad.value == 0  # a reader never saw a partial entry
    cache = KernelCache(tmp_path)
    assert len(entries(tmp_path)) == 8 and all(cache.get(p.stem) is not None for p in entries(tmp_path))
    assert not list(tmp_path.glob("*/*.partial"))


def test_eviction_removes_the_least_recently_used_entries(tmp_path):
    cache = KernelCache(tmp_path, max_bytes=3 * 1200)  # an entry: 1000 bytes and its header
    keys = [f"{k:02d}" + "a" * 62 for k in range(5)]
    for k, key in enumerate(keys):
        cache.put(key, CachedObject(b"x" * 1000, ()))
        path = tmp_path / key[:2] / f"{key}.kobj"
        os.utime(path, (1000 + k, 1000 + k))
    assert cache.get(keys[0]) is not None  # used now: the most recent
    assert cache.evict() == 2
    assert [cache.get(k) is not None for k in keys] == [True, False, False, True, True]


def test_the_lowering_memo_key_sees_every_element_of_an_attribute_array():
    target = get_target("x86-64-v3")
    table = np.zeros(5000, np.float32)
    changed = table.copy()
    changed[2500] = 1.0  # numpy's repr elides the middle of a long array: the key must not
    key = lambda t: group_key([Node("Relu", ("x",), ("y",), {"table": t})], _types(), ["y"], target)
    assert key(table) == key(table.copy()) != key(changed)
    assert key(object()) is None  # an attribute it cannot describe exactly: not memoized


def _types() -> Graph:
    typed = TensorType((2, 3), "float32")
    return Graph(("x",), ("y",), (), {"x": typed, "y": typed}, {})


def _scaled(name: str, factor: float, scope: str = "global") -> PrimFunc:
    x, y, i = Buffer("x", (64,), "float32", scope), Buffer("y", (64,), "float32"), Var("i")
    return PrimFunc(name, (x, y), For(i, IntImm(64), ForKind.SERIAL, Store(y, i, x.load(i) * FloatImm(factor))), 1, 1)


def test_a_kernel_that_fails_on_a_worker_fails_the_build_and_the_next_build_is_sound(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_BUILD_JOBS", "2")
    target = get_target("native")
    bad = [_scaled("twice", 2.0), _scaled("thrice", 3.0), _scaled("broken", 4.0, scope="local")]
    with pytest.raises(CodegenError, match="broken: parameter x has scope 'local'"):
        build_library(bad, target, tmp_path / "bad.so")
    library = load_kernels(build_library([_scaled("twice", 2.0), _scaled("half", 0.5)], target, tmp_path / "ok.so"))
    x = np.arange(64, dtype=np.float32)
    for name, factor in (("twice", 2.0), ("half", 0.5)):
        y = np.zeros(64, np.float32)
        library.call(name, x, y)
        np.testing.assert_array_equal(y, x * np.float32(factor))
