"""A tiny compiled model shared by the runtime tests: two kernels, an arena intermediate, two weights."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from core.codegen import BufferRef, KernelCall, ModelPlan
from tests.backend_calls import build_library, target_metadata
from core.runtime.header import render_header
from core.runtime.package import write_artifact
from core.target import get_target
from core.tir import Buffer, FloatImm, For, ForKind, IntImm, PrimFunc, Store, Var, maximum, seq

ROWS, K, COLS = 3, 8, 16


@dataclass
class TinyModel:
    artifact: Path
    weights: np.ndarray  # W (K x COLS) then b (COLS), as stored in weights.bin
    W: np.ndarray
    b: np.ndarray

    def reference(self, x: np.ndarray) -> dict[str, np.ndarray]:
        t = x @ self.W + self.b
        return {"y": np.maximum(t, 0) * 2, "t_plus_one": t + 1}


def tiny_kernels() -> list[PrimFunc]:
    X, W, B = Buffer("x", (ROWS, K), "float32"), Buffer("W", (K, COLS), "float32"), Buffer("b", (COLS,), "float32")
    T = Buffer("t", (ROWS, COLS), "float32")
    i, j, k = Var("i"), Var("j"), Var("k")
    dense = For(i, IntImm(ROWS), ForKind.PARALLEL, For(j, IntImm(COLS), ForKind.VECTORIZED, seq(
        Store(T, i * COLS + j, B.load(j)),
        For(k, IntImm(K), ForKind.SERIAL, Store(T, i * COLS + j, T.load(i * COLS + j) + X.load(i * K + k) * W.load(k * COLS + j))))))
    T2, Y, Z = Buffer("t", (ROWS * COLS,), "float32"), Buffer("y", (ROWS * COLS,), "float32"), Buffer("z", (ROWS * COLS,), "float32")
    n = Var("n")
    post = For(n, IntImm(ROWS * COLS), ForKind.VECTORIZED, seq(
        Store(Y, n, maximum(T2.load(n), FloatImm(0.0)) * 2.0), Store(Z, n, T2.load(n) + 1.0)))
    return [PrimFunc("dense_bias", (X, W, B, T), dense, 3, 1), PrimFunc("relu_scale", (T2, Y, Z), post, 1, 2)]


def tiny_plan() -> ModelPlan:
    w_bytes, b_bytes, t_bytes = K * COLS * 4, COLS * 4, ROWS * COLS * 4
    calls = (KernelCall("dense_bias", (BufferRef("input", 0), BufferRef("weight", 0, 0), BufferRef("weight", 0, w_bytes),
                                       BufferRef("arena", 0, 64))),
             KernelCall("relu_scale", (BufferRef("arena", 0, 64), BufferRef("output", 0), BufferRef("output", 1))))
    return ModelPlan(calls, num_inputs=1, num_outputs=2, arena_bytes=64 + t_bytes, weights_bytes=w_bytes + b_bytes)


def tiny_metadata() -> dict:
    meta = {"inputs": [{"name": "x", "shape": [ROWS, K], "dtype": "float32"}],
            "outputs": [{"name": "y", "shape": [ROWS, COLS], "dtype": "float32"},
                        {"name": "t_plus_one", "shape": [ROWS, COLS], "dtype": "float32"}],
            "compiler_version": "test", "model_sha256": "0" * 64}
    meta.update(target_metadata(get_target("native")))
    return meta


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> TinyModel:
    tmp = tmp_path_factory.mktemp("tiny")
    rng = np.random.default_rng(0)
    W = rng.standard_normal((K, COLS)).astype("float32")
    b = rng.standard_normal(COLS).astype("float32")
    lib = build_library(tiny_kernels(), get_target("native"), tmp / "libkiln_model.so", plan=tiny_plan())
    meta = tiny_metadata()
    blob = W.tobytes() + b.tobytes()
    art = write_artifact(tmp / "tiny.tar.gz", library=lib, weights=blob, metadata=meta, header=render_header(meta),
                         report={"schema": 1}, report_html="<html><body>tiny</body></html>")
    return TinyModel(art, np.frombuffer(blob, "float32"), W, b)
