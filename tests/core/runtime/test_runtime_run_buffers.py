"""Module.run's per-call path: feeds passed without copies, caller-owned output buffers (`out=`), and the
checks that keep both safe (dtype, shape, layout, aliasing, one thread at a time on the pointer tables)."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import core.runtime
from core.runtime.loader import _data_pointer

RNG = np.random.default_rng(7)


def x_feed() -> np.ndarray:
    return RNG.standard_normal((3, 8)).astype("float32")


def test_out_buffers_are_written_in_place_and_returned(tiny_model):
    with core.runtime.load(tiny_model.artifact) as m:
        x = x_feed()
        out = {"y": np.full((3, 16), np.nan, "float32"), "t_plus_one": np.full((3, 16), np.nan, "float32")}
        for _ in range(3):  # the same buffers, refilled each call
            x = x_feed()
            got = m.run({"x": x}, out=out)
            assert got["y"] is out["y"] and got["t_plus_one"] is out["t_plus_one"]
            ref = tiny_model.reference(x)
            for name in ref:
                np.testing.assert_allclose(out[name], ref[name], rtol=1e-5, atol=1e-5)
            assert got["y"].tobytes() == m.run({"x": x})["y"].tobytes()


def test_out_may_name_some_outputs_only(tiny_model):
    with core.runtime.load(tiny_model.artifact) as m:
        x, y = x_feed(), np.zeros((3, 16), "float32")
        got = m.run({"x": x}, out={"y": y})
        assert got["y"] is y and got["t_plus_one"] is not None
        np.testing.assert_allclose(got["t_plus_one"], tiny_model.reference(x)["t_plus_one"], rtol=1e-5, atol=1e-5)
        # Through the converting path too (a list feed), the buffer is still the one written.
        assert m.run({"x": x.tolist()}, out={"y": y})["y"] is y


def test_bad_out_buffers_are_refused_clearly(tiny_model):
    with core.runtime.load(tiny_model.artifact) as m:
        x = x_feed()
        good = np.zeros((3, 16), "float32")
        must_be = "out\\['y'\\] must be a writable C-contiguous float32\\[3, 16\\]"
        cases = [({"y": np.zeros((3, 16), "float64")}, must_be),
                 ({"y": np.zeros((16, 3), "float32")}, "got float32\\[16, 3\\]"),
                 ({"y": np.zeros((3, 32), "float32")[:, ::2]}, "C-contiguous"),
                 ({"y": good.copy().tolist()}, "got list"),
                 ({"z": good}, "unknown output\\(s\\) 'z'")]
        read_only = good.copy()
        read_only.flags.writeable = False
        cases.append(({"y": read_only}, "writable"))
        for out, message in cases:
            with pytest.raises(ValueError, match=message):
                m.run({"x": x}, out=out)
        with pytest.raises(TypeError, match="out must be a dict"):
            m.run({"x": x}, out=[good])


def test_out_buffers_that_alias_are_refused(tiny_model):
    with core.runtime.load(tiny_model.artifact) as m:
        block = np.zeros(3 * 16 * 2, "float32")
        x = x_feed()
        with pytest.raises(ValueError, match="shares memory"):  # two outputs on overlapping bytes
            m.run({"x": x}, out={"y": block[:48].reshape(3, 16), "t_plus_one": block[40:88].reshape(3, 16)})
        feed_and_out = np.zeros(48, "float32")
        with pytest.raises(ValueError, match="shares memory"):  # an output over the input it reads
            m.run({"x": feed_and_out[:24].reshape(3, 8)}, out={"y": feed_and_out.reshape(3, 16)})
        # Adjacent, not overlapping: accepted.
        got = m.run({"x": x}, out={"y": block[:48].reshape(3, 16), "t_plus_one": block[48:].reshape(3, 16)})
        np.testing.assert_allclose(got["y"], tiny_model.reference(x)["y"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("variant", ["exact", "read_only", "non_contiguous", "list", "dict_subclass"])
def test_every_kind_of_feed_gives_the_same_bits(tiny_model, variant):
    """The direct path (exact arrays) and the converting one (anything else) run the same computation."""
    with core.runtime.load(tiny_model.artifact) as m:
        x = x_feed()
        ref = m.run({"x": x})
        if variant == "read_only":
            feed = {"x": np.frombuffer(x.tobytes(), "float32").reshape(3, 8)}
        elif variant == "non_contiguous":
            wide = np.zeros((3, 16), "float32")
            wide[:, ::2] = x
            feed = {"x": wide[:, ::2]}
        elif variant == "list":
            feed = {"x": x.tolist()}
        elif variant == "dict_subclass":
            feed = type("Feeds", (dict,), {})(x=x)
        else:
            feed = {"x": x.copy()}
        got = m.run(feed)
        for name in ref:
            assert got[name].tobytes() == ref[name].tobytes()
        np.testing.assert_array_equal(x, feed["x"] if variant != "list" else np.array(feed["x"], "float32"))


def test_data_pointer_is_numpys_address():
    import ml_dtypes

    writable = np.arange(12, dtype="float32").reshape(3, 4)
    read_only = np.frombuffer(b"\x01" * 16, "uint8")
    empty = np.zeros((0, 4), "float32")
    narrow = np.zeros(5, ml_dtypes.bfloat16)  # no buffer-protocol format: numpy's own way
    for a in (writable, read_only, empty, narrow, writable[1:]):
        assert _data_pointer(a) == a.ctypes.data


@pytest.mark.parametrize("recycle", [False, True])
def test_concurrent_runs_on_one_module_keep_their_own_pointers(tiny_model, monkeypatch, recycle):
    """run() reuses one pointer table per module (and, for large outputs, dropped output arrays): threads take
    turns on them, each gets its own answer."""
    if recycle:
        monkeypatch.setattr("core.runtime.loader.RECYCLE_BYTES", 0)
    with core.runtime.load(tiny_model.artifact) as m:
        errors = []

        def work(seed):
            rng = np.random.default_rng(seed)
            for _ in range(200):
                x = rng.standard_normal((3, 8)).astype("float32")
                got = m.run({"x": x})
                if not np.allclose(got["y"], tiny_model.reference(x)["y"], rtol=1e-5, atol=1e-5):
                    errors.append(seed)

        threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []


@pytest.fixture
def recycle_all(monkeypatch):
    """Every output counts as large (the tiny model's are 192 bytes)."""
    monkeypatch.setattr("core.runtime.loader.RECYCLE_BYTES", 0)


def test_a_dropped_large_output_is_refilled_by_the_next_run(tiny_model, recycle_all):
    with core.runtime.load(tiny_model.artifact) as m:
        x1, x2 = x_feed(), x_feed()
        first = m.run({"x": x1})["y"]
        address = first.ctypes.data
        del first  # the caller lets go: the next run may write into that block
        second = m.run({"x": x2})["y"]
        assert second.ctypes.data == address
        np.testing.assert_allclose(second, tiny_model.reference(x2)["y"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("keep", ["array", "view", "dict", "read_only"])
def test_an_output_still_referenced_is_never_overwritten(tiny_model, recycle_all, keep):
    with core.runtime.load(tiny_model.artifact) as m:
        x1, x2 = x_feed(), x_feed()
        results = m.run({"x": x1})
        kept = {"array": results["y"], "view": results["y"][1:], "dict": results}[keep] if keep != "read_only" else None
        if keep == "read_only":  # dropped, but the caller made it read-only first: not written again
            results["y"].flags.writeable = False
            address = results["y"].ctypes.data
        snapshot = results["y"].copy()
        if keep != "dict":
            del results
        second = m.run({"x": x2})
        np.testing.assert_allclose(second["y"], tiny_model.reference(x2)["y"], rtol=1e-5, atol=1e-5)
        if keep == "read_only":
            assert second["y"].ctypes.data != address and second["y"].flags.writeable
        else:
            held = {"array": kept, "view": kept, "dict": kept["y"] if keep == "dict" else None}[keep]
            np.testing.assert_array_equal(held, snapshot[1:] if keep == "view" else snapshot)


def test_small_outputs_are_always_fresh(tiny_model):
    with core.runtime.load(tiny_model.artifact) as m:
        m.run({"x": x_feed()})
        assert m._spare == [None, None]  # 192-byte outputs: np.empty reuses memory cheaply itself
