"""The report page's Quantization section, from a real quantize run's section."""
from __future__ import annotations

from core.quantize import QuantizeOptions, quantize_model
from core.report.quantization_html import quantization_section
from tests.core.quantize.models import write_calibration, write_model


def test_section_shows_accuracy_sensitivity_and_fallback(tmp_path):
    section = quantize_model(write_model(tmp_path), write_calibration(tmp_path),
                             QuantizeOptions(keep_float=("fc",), max_error=1e-6)).report
    html = quantization_section({"quantization": section})
    assert html.startswith('<section id="quantization">')
    assert "top-1 agreement" in html and "held-back samples" in html
    assert "Left in float32: fc by request" in html
    assert f"{', '.join(section['fallback'])} by the automatic fallback" in html
    assert "not met" in html  # no layer choice gets below 1e-6: the page says so
    for layer in section["sensitivity"]["layers"]:
        assert f"<td>{layer['layer']}</td>" in html


def test_no_section_without_quantization():
    assert quantization_section({"validation": {}}) == ""


def test_the_report_page_has_the_section_after_validation(tmp_path):
    from core.report.html import render_html

    section = quantize_model(write_model(tmp_path), write_calibration(tmp_path), QuantizeOptions(sensitivity_layers=0)).report
    page = render_html({"quantization": section, "validation": {}})
    assert page.index('id="validation"') < page.index('id="quantization"') < page.index('id="timings"')
