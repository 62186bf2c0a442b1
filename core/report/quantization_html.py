"""The report page's "Quantization" section: the accuracy cost of int8, layer sensitivity and the float32 fallback."""
from __future__ import annotations

from typing import Any

from .markup import esc, fmt as _fmt, note as _note, section as _section, table as _table


def quantization_section(report: dict[str, Any]) -> str:
    """The section, or "" for a compile that did not quantize (no "quantization" key)."""
    q = report.get("quantization")
    if not q:
        return ""
    layers, cal, acc, sens = q.get("layers") or {}, q.get("calibration") or {}, q.get("accuracy") or {}, q.get("sensitivity") or {}
    text = (f"<p>Quantized to int8 (QDQ, {esc(q.get('method', '?'))} calibration, "
            f"{'per-channel' if q.get('per_channel') else 'per-tensor'} weights) on {_fmt(cal.get('samples'), '.0f')} "
            f"calibration samples: {_fmt(layers.get('quantized'), '.0f')} of {_fmt(layers.get('quantizable'), '.0f')} "
            f"Conv/MatMul/Gemm layers run in int8. The accuracy cost is measured against the float32 model on "
            f"{_fmt(cal.get('held_back'), '.0f')} held-back samples (ONNX Runtime runs both).</p>")
    rows = [[esc(o.get("name", "")), _fmt(o.get("max_abs_err"), ".3g"), _fmt(o.get("mean_abs_err"), ".3g"),
             _fmt(o.get("rel_err"), ".3g"),
             "–" if o.get("top1_agreement") is None else f"{_fmt(o['top1_agreement'] * 100, '.2f')}% of "
                                                          f"{_fmt(o.get('top1_positions'), '.0f')}"]
            for o in acc.get("outputs") or []]
    text += _table(["output", "max abs error", "mean abs error", "relative error", "top-1 agreement"], rows,
                   numeric={1, 2, 3, 4})
    if q.get("float_layers"):
        text += (f"<p>Left in float32: {esc(', '.join(q.get('keep_float') or []) or 'none')} by request; "
                 f"{esc(', '.join(q.get('fallback') or []) or 'none')} by the automatic fallback.</p>")
    if q.get("max_error") is not None:
        met = q.get("budget_met")
        text += (f"<p>Error budget {_fmt(q['max_error'], '.3g')} (largest relative error of any output): "
                 + ("<span class=ok>met</span>" if met else "<span class=bad>not met</span> with every measured "
                    "layer in float32") + f", final relative error {_fmt(acc.get('rel_err'), '.3g')}.</p>")
    sens_rows = [[esc(s.get("layer", "")), esc(s.get("op", "")), _fmt(s.get("rel_err"), ".3g")]
                 for s in sens.get("layers") or []]
    if sens_rows:
        text += ("<p>Sensitivity: the relative error when only that layer is quantized, most sensitive first.</p>"
                 + _table(["layer", "op", "relative error"], sens_rows, numeric={2}))
    if sens.get("note"):
        text += _note(sens["note"])
    return _section("quantization", "Quantization", text)
