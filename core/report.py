"""The compile report: `report.json` (stable schema, DESIGN.md) and a readable `report.html`."""
from __future__ import annotations

import html
import json
from typing import Any

SCHEMA_VERSION = 1


def render_html(report: dict[str, Any]) -> str:
    """A self-contained page: summary, latency against ONNX Runtime, kernels, memory, validation."""
    esc = lambda v: html.escape(str(v))  # noqa: E731
    lat = report.get("latency_ms") or {}
    val = report.get("validation") or {}
    mem = report.get("memory") or {}
    model = report.get("model") or {}
    num = lambda v, fmt: "" if v is None else format(v, fmt)  # noqa: E731
    rows = "".join(
        f"<tr><td>{esc(k['name'])}</td><td>{esc(' + '.join(k['ops']))}</td><td class=n>{k['flops']:,}</td>"
        f"<td class=n>{num(k.get('time_ms'), '.4f')}</td><td class=n>{num(k.get('gflops'), '.2f')}</td></tr>"
        for k in report.get("kernels", []))
    io = "".join(f"<tr><td>{kind}</td><td>{esc(t['name'])}</td><td>{esc(t['dtype'])}</td><td>{esc(t['shape'])}</td></tr>"
                 for kind in ("input", "output") for t in model.get(kind + "s", []))
    timings = " · ".join(f"{k} {v:.2f} s" for k, v in (report.get("timings_s") or {}).items())
    latency = (f"Kiln {lat['kiln']:.3f} ms · ONNX Runtime {lat['onnxruntime']:.3f} ms · ratio {lat['ratio']:.2f}x"
               if lat.get("kiln") is not None else esc(lat.get("skipped", "not measured")))
    validation = (f"max abs error {val['max_abs_err']:.3g} · max rel error {val['max_rel_err']:.3g} "
                  f"against {esc(val.get('reference', 'onnxruntime'))}" if "max_abs_err" in val else esc(val.get("skipped", "")))
    memory = (f"arena {mem.get('arena_bytes', 0):,} bytes (naive {mem.get('naive_bytes', 0):,}) · "
              f"weights {mem.get('weights_bytes', 0):,} bytes")
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Kiln report</title>
<style>body{{font-family:system-ui,sans-serif;margin:2rem;max-width:1100px;color:#222}}
table{{border-collapse:collapse;width:100%;margin:.5rem 0 1.5rem}}td,th{{border-bottom:1px solid #ddd;padding:.25rem .5rem;text-align:left}}
td.n{{text-align:right;font-variant-numeric:tabular-nums}}h1{{font-size:1.5rem}}h2{{font-size:1.15rem;margin-top:1.5rem}}
.card{{background:#f6f6f8;padding:.75rem 1rem;border-radius:6px}}</style></head><body>
<h1>Kiln compile report</h1>
<p class=card>target <b>{esc(report.get('target'))}</b> · opt level {esc(report.get('opt_level'))} ·
compiler {esc(report.get('compiler_version'))} · model sha256 <code>{esc(model.get('sha256', '')[:16])}…</code></p>
<h2>Latency</h2><p>{latency}</p>
<h2>Validation</h2><p>{validation}</p>
<h2>Model</h2><table><tr><th></th><th>name</th><th>dtype</th><th>shape</th></tr>{io}</table>
<h2>Memory</h2><p>{memory}</p>
<h2>Kernels ({len(report.get('kernels', []))})</h2>
<table><tr><th>kernel</th><th>ops</th><th>flops</th><th>time ms</th><th>GFLOP/s</th></tr>{rows}</table>
<h2>Compile time</h2><p>{timings}</p>
<script type="application/json" id="report">{html.escape(json.dumps(report))}</script>
</body></html>
"""
