"""The report page's production sections: the gate's verdict with both builds' figures, a rebuild's differences, and
the manifest of a real compile."""
from __future__ import annotations

import core
from core.driver.gate import GatePolicy, verdict
from core.report.html import render_html
from tests.conftest import tiny_model


def test_the_page_shows_the_gate_the_rebuild_and_the_manifest():
    artifact = core.compile(tiny_model(), benchmark=False)
    report = dict(artifact.report)
    report["baseline"] = verdict([2.0, 2.1, 2.2], [1.0, 1.0, 1.1], (1e-6, 1e-6), GatePolicy(0.05, 2.0), "baseline job j1")
    report["rebuild"] = {"of": "j0", "identical": False, "summary": "metadata differs",
                         "differences": [{"part": "metadata", "detail": "keys manifest.llvm_version",
                                          "why": "llvm_version differs (14.0.6 then, 22.1.0 now)"}]}
    page = render_html(report)
    assert "CI gate <span class=bad>failed</span>: gate failed: 110% slower than baseline job j1" in page
    assert "baseline job j1</td>" in page and "over 3 interleaved rounds" in page
    assert "Rebuild of job <code>j0</code>: <span class=bad>differs</span>" in page
    assert "llvm_version differs (14.0.6 then, 22.1.0 now)" in page
    manifest = report["manifest"]
    assert "Reproducibility manifest" in page and manifest["model_sha256"] in page and manifest["llvm_version"] in page
    assert "Against the baseline" not in render_html(artifact.report)  # no gate, no section
