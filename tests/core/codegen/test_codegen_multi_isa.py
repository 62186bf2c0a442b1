"""The multi-ISA `x86-64` target: one library with each kernel for AVX2 and for AVX-512+VNNI, the variant picked by
CPUID at load (or forced by $KILN_ISA / the loader's isa option), both compared with the reference where they run."""
from __future__ import annotations

import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import numpy as np
import pytest

import core
from core.frontend import import_onnx
from core.driver.reference import reference_session
from core.runtime import loader
from core.target import get_target, host_target
from tests.backend_calls import backend_of, build_executable, build_library, optimize, runs_on_host
from tests.core.graph.test_graph_pack_int8_weights import conv_integer_model
from tests.core.quantize.models import INPUT, SHAPE, small_cnn

pytestmark = pytest.mark.skipif(host_target().arch != "x86_64", reason="x86-64 machine code runs on x86-64 hosts")

HOST_HAS_AVX512 = runs_on_host(get_target("x86-64").isa_variants[1][1])
ISAS_HERE = ["avx2", "avx512"] if HOST_HAS_AVX512 else ["avx2"]


def disassembly(library: Path) -> str:
    if shutil.which("objdump") is None:
        pytest.skip("objdump (binutils) is not installed")
    return subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(library)], capture_output=True, text=True,
                          check=True).stdout


@pytest.fixture(scope="module")
def cnn_artifact(tmp_path_factory):
    path = tmp_path_factory.mktemp("multi") / "cnn.tar.gz"
    core.compile(small_cnn().SerializeToString(), target="x86-64").save(path)
    return path


INT8_MODEL = conv_integer_model("uint8")  # its weights are random: the one model compiled and compared


@pytest.fixture(scope="module")
def int8_artifact(tmp_path_factory):
    path = tmp_path_factory.mktemp("multi8") / "convi.tar.gz"
    core.compile(INT8_MODEL.SerializeToString(), target="x86-64").save(path)
    return path


def library_of(artifact: Path, tmp_path: Path) -> Path:
    with tarfile.open(artifact) as tar:
        tar.extractall(tmp_path, filter="data")
    return tmp_path / "libkiln_model.so"


def test_the_target_is_listed_with_its_variants():
    target = get_target("x86-64")
    assert [name for name, _ in target.isa_variants] == ["avx2", "avx512"]
    assert target.features == get_target("x86-64-v3").features  # the graph and schedules: what every variant has
    assert {"+avx512f", "+avx512vnni", "+avx512vl"} <= set(target.isa_variants[1][1].features.split(","))
    assert target.describe()["isa_variants"] == ["avx2", "avx512"] and runs_on_host(target)
    assert len(target.compiled_for()) == 2 and get_target("x86-64-v3").compiled_for() == (get_target("x86-64-v3"),)


@pytest.mark.parametrize("isa", [None] + ISAS_HERE)
def test_float_model_runs_each_variant_here_and_matches_onnxruntime(cnn_artifact, isa):
    x = np.random.default_rng(3).standard_normal(SHAPE).astype(np.float32)
    want = reference_session(small_cnn().SerializeToString(), 1).run(None, {INPUT: x})[0]
    with loader.load(cnn_artifact, isa=isa) as module:
        assert module.isa == (isa or ("avx512" if HOST_HAS_AVX512 else "avx2"))
        np.testing.assert_allclose(module.run({INPUT: x})["scores"], want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("isa", ISAS_HERE)
def test_int8_conv_runs_each_variant_here_exactly(int8_artifact, isa):
    model = INT8_MODEL
    x = np.random.default_rng(4).integers(0, 256, (1, 6, 9, 8)).astype(np.uint8)
    want = reference_session(model.SerializeToString(), 1).run(None, {"x": x})[0]
    with loader.load(int8_artifact, isa=isa) as module:
        assert module.isa == isa
        np.testing.assert_array_equal(module.run({"x": x})["y"], want)


def test_the_library_holds_both_variants_int8_as_vpmaddwd_and_vnni(int8_artifact, tmp_path):
    text = disassembly(library_of(int8_artifact, tmp_path))
    assert "vpmaddwd" in text  # the exact AVX2 lowering
    assert re.search(r"vpdp(busd|wssd)\s+[^\n]*%ymm", text)  # the same 8-lane dots, one VNNI instruction each


def test_the_float_variants_differ_in_instruction_set(cnn_artifact, tmp_path):
    text = disassembly(library_of(cnn_artifact, tmp_path))
    assert re.search(r"vfmadd\d+ps\s+[^\n]*%ymm", text)
    assert re.search(r"%[xyz]mm(1[6-9]|2\d|3[01])\b|%zmm|\{%k[1-7]\}", text)  # only EVEX (AVX-512) encodes these


@pytest.mark.skipif(HOST_HAS_AVX512, reason="this host runs the AVX-512 variant")
def test_forcing_a_variant_this_cpu_lacks_is_refused_cleanly(cnn_artifact, monkeypatch):
    with pytest.raises(loader.KilnRuntimeError, match="avx512 variant was asked for.*best here: avx2"):
        loader.load(cnn_artifact, isa="avx512")
    monkeypatch.setenv("KILN_ISA", "avx512")  # read when the library loads: kiln_load refuses the model
    with pytest.raises(loader.KilnRuntimeError, match="kiln_load: the avx512 variant"):
        loader.load(cnn_artifact)
    monkeypatch.setenv("KILN_ISA", "avx2")
    with loader.load(cnn_artifact) as module:
        assert module.isa == "avx2"


def test_a_named_artifact_exports_the_choice_under_its_name(tmp_path):
    path = tmp_path / "named.tar.gz"
    core.compile(small_cnn().SerializeToString(), target="x86-64", name="edge_cnn", benchmark=False).save(path)
    x = np.random.default_rng(5).standard_normal(SHAPE).astype(np.float32)
    want = reference_session(small_cnn().SerializeToString(), 1).run(None, {INPUT: x})[0]
    with loader.load(path, isa="avx2") as module:
        assert module.isa == "avx2"
        np.testing.assert_allclose(module.run({INPUT: x})["scores"], want, rtol=1e-4, atol=1e-4)
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(library_of(path, tmp_path).with_name("libedge_cnn.so"))],
                             capture_output=True, text=True, check=True).stdout
    assert " T edge_cnn_set_isa\n" in symbols and " kiln_isa" not in symbols  # its names only


def test_an_unknown_variant_is_refused(cnn_artifact, monkeypatch):
    with pytest.raises(loader.KilnRuntimeError, match="unknown ISA variant 'sse2'"):
        loader.load(cnn_artifact, isa="sse2")
    monkeypatch.setenv("KILN_ISA", "sse2")
    with pytest.raises(loader.KilnRuntimeError, match="unknown ISA variant 'sse2'"):
        loader.load(cnn_artifact)


def test_the_isa_option_of_a_single_isa_artifact_is_refused(tmp_path):
    path = tmp_path / "v3.tar.gz"
    core.compile(small_cnn().SerializeToString(), target="x86-64-v3", validate=False, benchmark=False).save(path)
    with pytest.raises(loader.KilnRuntimeError, match="one ISA variant"):
        loader.load(path, isa="avx2")
    with loader.load(path) as module:
        assert module.isa is None


def cnn_kernels(target):
    return build_executable(optimize(import_onnx(small_cnn().SerializeToString()), 3, target), target).funcs


def test_kernels_without_a_model_dispatch_too(tmp_path):
    """A library of kernels alone: each exported kernel is its dispatcher."""
    target = get_target("x86-64")
    funcs = cnn_kernels(target)
    library = build_library(funcs, target, tmp_path / "kernels.so")
    symbols = subprocess.run(["nm", "-D", str(library)], capture_output=True, text=True, check=True).stdout
    assert "kiln_isa_dispatch_" in symbols and " T kiln_isa\n" in symbols
    assert all(f" T {f.name}\n" in symbols for f in funcs)


def test_a_tuning_candidate_is_built_for_the_variant_that_runs_here(tmp_path):
    target = get_target("x86-64")
    backend = backend_of(target)
    assert backend.measured_variant(target).name == ("x86-64-v4-vnni" if HOST_HAS_AVX512 else "x86-64-v3")
    first = cnn_kernels(target)[0]
    library = backend.build_candidate([first], target, tmp_path, "candidate")
    symbols = subprocess.run(["nm", "-D", str(library)], capture_output=True, text=True, check=True).stdout
    assert f" T {first.name}\n" in symbols and "kiln_isa" not in symbols  # one variant: no dispatch
