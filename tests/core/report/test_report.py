"""report.html: charts for every section that has data, sentences for the ones that do not, and no way for a
model's names to inject markup."""
from __future__ import annotations

import copy
import json
import re
import tarfile
from collections import Counter
from html.parser import HTMLParser

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import core
from core.report import charts as report_charts
from core.report.html import render_html


def conv_relu_matmul() -> bytes:
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    m = numpy_helper.from_array(rng.standard_normal((4 * 6 * 6, 5)).astype(np.float32), "m")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Flatten", ["r"], ["f"]),
             helper.make_node("MatMul", ["f", "m"], ["y"])]
    graph = helper.make_graph(nodes, "conv_relu_matmul", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])], [w, m])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


class _Page(HTMLParser):
    """What a browser would see: every element's attributes, and the text of the embedded JSON."""

    def __init__(self):
        super().__init__()
        self.elements: list[tuple[str, dict]] = []
        self.script_json: list[str] = []
        self._in_json = False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.elements.append((tag, attrs))
        self._in_json = tag == "script" and attrs.get("type") == "application/json"

    def handle_endtag(self, tag):
        self._in_json = False

    def handle_data(self, data):
        if self._in_json:
            self.script_json.append(data)


def parse(page: str) -> _Page:
    parser = _Page()
    parser.feed(page)
    parser.close()
    return parser


def charts_in(page: str) -> set[str]:
    return {a.get("data-chart") for tag, a in parse(page).elements if tag == "svg" and a.get("data-chart")}


def embedded(page: str) -> dict:
    texts = parse(page).script_json
    assert len(texts) == 1
    return json.loads("".join(texts))


def tuning_section(tasks: int = 3) -> dict:
    return {"trials": 64 * tasks, "time_s": 12.5, "cache_hits": 1, "tasks": [
        {"workload": f"dense_{i}", "trials": 64, "best_gflops": 10.0 + i,
         "curve": [[t, round(10.0 + i - 8.0 / t, 3)] for t in range(1, 65, 7)]} for i in range(tasks)]}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """One real compile with validation and latency; tests take copies of its report."""
    artifact = core.compile(conv_relu_matmul(), target="native")
    path = artifact.save(tmp_path_factory.mktemp("report") / "model.tar.gz")
    with tarfile.open(path) as tar:
        saved = tar.extractfile("report.html").read().decode()
    return artifact.report, saved


def test_full_report_has_every_chart_and_the_numbers(compiled):
    report, saved = compiled
    page = render_html(report)
    assert charts_in(page) == {"latency", "kernels", "memory", "timings"}
    assert charts_in(saved) == {"latency", "kernels", "memory", "timings"}  # the artifact ships the charted page
    assert "not tuned" in page  # the real compile is untuned: a sentence stands in for the curves
    val, lat = report["validation"], report["latency_ms"]
    assert f"{val['max_abs_err']:.3g}" in page and f"{val['max_rel_err']:.3g}" in page
    assert ("faster than ONNX Runtime" in page) or ("slower than ONNX Runtime" in page)
    assert f"{lat['kiln']:.3f} ms" in page  # the latency bar's own label
    for kernel in report["kernels"]:
        assert kernel["name"] in page
    assert embedded(page) == json.loads(json.dumps(report))


def test_page_is_self_contained_and_ids_are_unique(compiled):
    page = render_html(compiled[0])
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert "<link" not in page and "@import" not in page
    ids = Counter(re.findall(r'\sid="([^"]+)"', page))
    assert ids and not [i for i, n in ids.items() if n > 1]
    # every clip path a chart uses is defined on the page
    for ref in set(re.findall(r'url\(#([^)]+)\)', page)):
        assert ref in ids


def test_skipped_validation_latency_and_kernel_times_render_as_sentences(compiled):
    report = copy.deepcopy(compiled[0])
    reason = "target aarch64 cannot run on this host"
    report["validation"] = {"skipped": reason}
    report["latency_ms"] = {"skipped": reason}
    for kernel in report["kernels"]:
        kernel["time_ms"] = kernel["gflops"] = None
    page = render_html(report)
    assert charts_in(page) == {"memory", "timings"}
    assert f"Latency was not measured: {reason}." in page
    assert f"Validation was skipped: {reason}." in page
    assert "Kernel times were not measured" in page


def test_a_nearly_empty_report_still_renders():
    page = render_html({"schema": 1})
    assert charts_in(page) == set()
    assert "not tuned" in page and "no memory plan" in page and "no compile timings" in page
    assert embedded(page) == {"schema": 1}


def test_tuning_curves_are_charted_with_one_line_per_task(compiled):
    report = copy.deepcopy(compiled[0])
    report["tuning"] = tuning_section(3)
    page = render_html(report)
    assert "tuning" in charts_in(page)
    svg = re.search(r'<svg [^>]*data-chart="tuning".*?</svg>', page, re.S).group(0)
    for i in range(3):
        assert f"dense_{i}" in svg  # legend entries
    assert "192 trials in 12.5 s over 3 tasks" in page
    assert "not tuned" not in page


def test_tasks_without_usable_curves_get_a_sentence():
    page = render_html({"tuning": {"trials": 3, "tasks": [{"workload": "w", "curve": [[1, None], "bad"]}]}})
    assert "tuning" not in charts_in(page)
    assert "recorded no curves" in page


def test_kernel_chart_keeps_the_top_twenty_and_sums_the_rest():
    kernels = [{"name": f"k{i:03d}", "ops": ["Conv", "Relu"], "flops": 1000, "time_ms": float(i + 1)} for i in range(30)]
    svg = report_charts.kernel_breakdown(kernels)
    assert "k029" in svg and "k010" in svg and "k009" not in svg  # the 20 slowest are k010..k029
    assert "other (10 kernels)" in svg
    assert "55.000 ms" in svg  # 1 + 2 + ... + 10
    assert "Conv + Relu" in svg


HOSTILE = '<script>alert("x")</script>'


def test_hostile_names_are_escaped_everywhere(compiled):
    report = copy.deepcopy(compiled[0])
    report["model"]["name"] = HOSTILE
    report["model"]["inputs"][0]["name"] = HOSTILE
    report["kernels"][0]["name"] = HOSTILE
    report["kernels"][0]["ops"] = ["$\\frac{$", "<img src=x onerror=alert(1)>"]  # "$" must not start mathtext
    report["graph"]["fusion_groups"] = [{"kernel": HOSTILE, "ops": ["</td><b>", "Relu"]}]
    report["tuning"] = tuning_section(2)
    report["tuning"]["tasks"][0]["workload"] = HOSTILE + "&amp;"
    report["latency_ms"] = {"skipped": HOSTILE}
    page = render_html(report)
    assert "kernels" in charts_in(page) and "tuning" in charts_in(page)
    assert page.count("<script") == 1  # only the JSON block
    assert "<img" not in page and "</td><b>" not in page and "</script>" not in page.split('id="report">')[0]
    assert page.count("&lt;script&gt;") >= 5  # title, heading, input table, kernel chart, fusion table, ...
    kernel_svg = re.search(r'<svg [^>]*data-chart="kernels".*?</svg>', page, re.S).group(0)
    assert "&lt;script&gt;" in kernel_svg and "$\\frac{$" in kernel_svg
    assert embedded(page) == json.loads(json.dumps(report))  # the JSON survives its escaping intact


def test_embedded_json_is_strict_json_even_with_non_finite_numbers():
    page = render_html({"latency_ms": {"kiln": 1.0, "onnxruntime": 0.0, "ratio": float("inf")},
                        "validation": {"max_abs_err": float("nan"), "max_rel_err": 0.0}})
    data = json.loads("".join(parse(page).script_json), parse_constant=lambda c: pytest.fail(f"bare {c} in JSON"))
    assert data["latency_ms"]["ratio"] is None and data["validation"]["max_abs_err"] is None
    assert "not comparable" in page


def test_a_chart_that_fails_becomes_a_note(compiled, monkeypatch):
    def broken(_):
        raise RuntimeError("no fonts")

    monkeypatch.setattr(report_charts, "memory", broken)
    page = render_html(compiled[0])
    assert "This chart could not be drawn (RuntimeError: no fonts)." in page
    assert charts_in(page) == {"latency", "kernels", "timings"}


def test_fusion_groups_are_listed_by_pattern(compiled):
    report = copy.deepcopy(compiled[0])
    report["graph"].update(nodes_in=9, kernels=4, fusion_groups=[
        {"kernel": "k0", "ops": ["Conv", "Relu"]}, {"kernel": "k1", "ops": ["MatMul", "Add"]},
        {"kernel": "k2", "ops": ["Conv", "Relu"]}])
    page = render_html(report)
    assert "9 graph nodes became 4 kernels; 3 of them fuse several ops" in page
    assert "<td>Conv → Relu</td><td class=n>2</td><td>k0, k2</td>" in page
    assert "<td>MatMul → Add</td><td class=n>1</td><td>k1</td>" in page
    report["graph"]["fusion_groups"] = []
    assert "No operators were fused" in render_html(report)
