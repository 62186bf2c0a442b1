"""`report.html`: one self-contained page with charts (charts.py) and the report's JSON embedded for scripts."""
from __future__ import annotations

import json
import logging
import math
from typing import Any, Callable, Optional

from .markup import esc, fmt as _fmt, note as _note, num as _num, section as _section, table as _table
from .schema import SCHEMA_VERSION


log = logging.getLogger(__name__)

_CSS = """
:root{--ink:#1f2430;--muted:#5c6370;--line:#e3e6eb;--bg:#f4f5f7;--kiln:KILN;--ort:ORT;--ok:#2e7d4f;--bad:#b3261e}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--ink);font:15px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif}
main{max-width:1040px;margin:0 auto;padding:2rem 1.25rem 3rem}
header h1{font-size:1.6rem;margin:0 0 .25rem}header h1 span{color:var(--kiln)}
.meta{color:var(--muted);margin:0 0 1.25rem}.meta b{color:var(--ink);font-weight:600}
.tiles{display:grid;grid-template-columns:repeat(auto-fit,minmax(170px,1fr));gap:.75rem;margin-bottom:1.25rem}
.tile{background:#fff;border:1px solid var(--line);border-radius:10px;padding:.75rem 1rem}
.tile .k{color:var(--muted);font-size:.8rem;text-transform:uppercase;letter-spacing:.04em}
.tile .v{font-size:1.35rem;font-weight:650;font-variant-numeric:tabular-nums}
.tile .s{color:var(--muted);font-size:.85rem}
section{background:#fff;border:1px solid var(--line);border-radius:10px;padding:1rem 1.25rem;margin-bottom:1rem}
section h2{font-size:1.1rem;margin:0 0 .5rem}
section p{margin:.25rem 0 .75rem}
.note{color:var(--muted);font-style:italic}
svg.chart{display:block;max-width:100%;height:auto;margin:.25rem 0}
table{border-collapse:collapse;width:100%;margin:.25rem 0 .5rem;font-size:.9rem}
th,td{border-bottom:1px solid var(--line);padding:.3rem .5rem;text-align:left;vertical-align:top}
th{color:var(--muted);font-weight:600;white-space:nowrap}td:first-child{white-space:nowrap}td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
code{font:.85em ui-monospace,"DejaVu Sans Mono",monospace;overflow-wrap:anywhere}
details summary{cursor:pointer;color:var(--muted);margin:.25rem 0}
.ok{color:var(--ok);font-weight:600}.bad{color:var(--bad);font-weight:600}
footer{color:var(--muted);font-size:.8rem;text-align:center}
@media print{body{background:#fff}section,.tile{break-inside:avoid}}
"""


def _ms(value: float) -> str:
    return f"{value:.{1 if value >= 100 else 2 if value >= 1 else 3}f} ms"


def _chart(draw: Callable[[Any], Optional[str]], data: Any, absent: str) -> str:
    """The chart, or a sentence when there is nothing to draw. A chart that fails to draw must not take the
    whole artifact down with it after minutes of compiling: it becomes a visible note and a logged error."""
    try:
        svg = draw(data)
    except Exception as exc:  # noqa: BLE001 - any plotting failure degrades to text
        log.exception("report chart %s failed", getattr(draw, "__name__", draw))
        return _note(f"This chart could not be drawn ({type(exc).__name__}: {exc}).")
    return svg if svg else _note(absent)


def _tiles(report: dict, charts: Any) -> str:
    lat, val, mem = report.get("latency_ms") or {}, report.get("validation") or {}, report.get("memory") or {}
    graph, times = report.get("graph") or {}, report.get("timings_s") or {}
    kiln, ort = _num(lat.get("kiln")), _num(lat.get("onnxruntime"))
    # (label, value, sub-line as HTML: escaped here, since one sub-line carries our own verdict markup)
    tiles = [("latency", _ms(kiln) if kiln is not None else "not measured",
              esc(f"ONNX Runtime {_ms(ort)}" if kiln is not None and ort is not None else lat.get("skipped", "")))]
    if "max_abs_err" in val:
        tiles.append(("max abs error", _fmt(val.get("max_abs_err"), ".2g"), _verdict(val.get("passed"))))
    else:
        tiles.append(("validation", "skipped", esc(val.get("skipped", ""))))
    tiles.append(("kernels", _fmt(graph.get("kernels", len(report.get("kernels") or [])), ".0f"),
                  esc(f"from {_fmt(graph.get('nodes_in'), '.0f')} graph nodes")))
    arena = _num(mem.get("arena_bytes"))
    tiles.append(("activation arena", charts.human_bytes(arena) if arena is not None else "–",
                  esc(f"naive {charts.human_bytes(_num(mem.get('naive_bytes')) or 0)}")))
    tiles.append(("compile time", f"{_fmt(times.get('total'), '.2f')} s", esc(f"tuning {_fmt(times.get('tune'), '.2f')} s")))
    return "<div class=tiles>" + "".join(
        f"<div class=tile><div class=k>{esc(k)}</div><div class=v>{esc(v)}</div><div class=s>{s}</div></div>"
        for k, v, s in tiles) + "</div>"


def _verdict(passed: Any) -> str:
    return "" if passed is None else ("<span class=ok>passed</span>" if passed else "<span class=bad>failed</span>")


def _latency(report: dict, charts: Any) -> str:
    lat = report.get("latency_ms") or {}
    kiln, ort = _num(lat.get("kiln")), _num(lat.get("onnxruntime"))
    if kiln is None or ort is None:
        return _note(f"Latency was not measured: {lat.get('skipped', 'no measurement in this report')}.")
    threads = report.get("threads")
    text = f"<p>{esc(charts.ratio_sentence(kiln, ort))}, measured in the same run" + (
        f" with {esc(threads)} threads.</p>" if threads else ".</p>")
    return text + _spread(lat) + _chart(charts.latency, lat, "")


def _spread(lat: dict) -> str:
    """The medians' spread over the rounds (quartiles), the busy-machine warning, and how much of the
    end-to-end time the kernels explain."""
    parts = []
    quartiles = {k: lat.get(f"{k}_quartiles") for k in ("kiln", "onnxruntime", "ratio")}
    if all(isinstance(q, list) and len(q) == 3 for q in quartiles.values()):
        k, o, r = (quartiles[key] for key in ("kiln", "onnxruntime", "ratio"))
        parts.append(f"<p>Over {_fmt(lat.get('rounds'), '.0f')} interleaved rounds (first quartile, median, third "
                     f"quartile): Kiln {_fmt(k[0], '.4f')} / {_fmt(k[1], '.4f')} / {_fmt(k[2], '.4f')} ms, ONNX Runtime "
                     f"{_fmt(o[0], '.4f')} / {_fmt(o[1], '.4f')} / {_fmt(o[2], '.4f')} ms; ratio per round "
                     f"{_fmt(r[0], '.2f')}x to {_fmt(r[2], '.2f')}x.</p>")
    if lat.get("busy"):
        parts.append(f"<p class=bad>{esc(lat.get('warning', 'The machine was busy: the ratio is uncertain.'))}</p>")
    kb = lat.get("kernel_breakdown") or {}
    if _num(kb.get("kernels_sum_ms")) is not None and _num(kb.get("end_to_end_ms")):
        parts.append(f"<p>The kernels add up to {_fmt(kb.get('kernels_sum_ms'), '.4f')} ms of the "
                     f"{_fmt(kb.get('end_to_end_ms'), '.4f')} ms end to end ({_fmt((_num(kb.get('ratio')) or 0) * 100, '.0f')}%), "
                     f"timed inside runs of the whole model; the rest is the call itself.</p>")
    return "".join(parts)


def _kernels(report: dict, charts: Any) -> str:
    kernels = report.get("kernels") or []
    if not kernels:
        return _note("The report lists no kernels.")
    chart = _chart(charts.kernel_breakdown, kernels,
                   "Kernel times were not measured (the target cannot run on this host, or benchmarking was off).")
    rows = [[esc(k.get("name", "")), esc(" + ".join(map(str, k.get("ops") or []))), _fmt(k.get("flops"), ",.0f"),
             _fmt(k.get("time_ms"), ".4f"), _fmt(k.get("gflops"), ".2f"), "yes" if k.get("tuned") else "no",
             esc(", ".join(map(str, k.get("onnx_nodes") or [])))]
             for k in kernels]
    table = _table(["kernel", "ops", "FLOPs", "time ms", "GFLOP/s", "tuned", "ONNX nodes"], rows, numeric={2, 3, 4})
    return f"{chart}<details><summary>All {len(kernels)} kernels</summary>{table}</details>"


def _tuning(report: dict, charts: Any) -> str:
    tuning = report.get("tuning") or {}
    tasks = tuning.get("tasks") or []
    if not tasks:
        return _note("This compile was not tuned: every kernel used its default schedule.")
    summary = (f"<p>{_fmt(tuning.get('trials'), ',.0f')} trials in {_fmt(tuning.get('time_s'), '.1f')} s over "
               f"{len(tasks)} tasks; {_fmt(tuning.get('cache_hits'), ',.0f')} answered from tuning records.</p>")
    if tuning.get("trials_from_records"):
        summary += (f"<p>{_fmt(tuning.get('trials_from_records'), ',.0f')} earlier trials came from the records: a budget "
                    f"is the total per workload, so only the difference was measured.</p>")
    remote = tuning.get("measurement")
    if remote:  # measured by workers of the target's kind elsewhere (core.tune.remote)
        summary += (f"<p>Measured remotely on {esc(', '.join(remote.get('devices') or ['?']))} "
                    f"({esc(remote.get('remote', ''))}): {_fmt(remote.get('batches'), ',.0f')} batches, "
                    f"{_fmt(remote.get('resent'), ',.0f')} sent again, {_fmt(remote.get('lost'), ',.0f')} lost."
                    f"{' ' + esc(remote['note']) + '.' if remote.get('note') else ''}</p>")
    chart = _chart(charts.tuning_curves, tasks, "The tuning tasks recorded no curves.")
    rows = [[f"<code>{esc(t.get('workload', ''))}</code>", _fmt(t.get("trials"), ",.0f"),
             _fmt(t.get("trials_from_records", 0), ",.0f"), _fmt(t.get("best_gflops"), ".2f")] for t in tasks]
    table = _table(["workload", "new trials", "from records", "best GFLOP/s"], rows, numeric={1, 2, 3})
    return f"{summary}{chart}<details><summary>All {len(tasks)} tasks</summary>{table}</details>"


def _fusion(report: dict) -> str:
    graph = report.get("graph") or {}
    groups = graph.get("fusion_groups") or []
    text = (f"<p>{_fmt(graph.get('nodes_in'), '.0f')} graph nodes became {_fmt(graph.get('kernels'), '.0f')} kernels; "
            f"{len(groups)} of them fuse several ops; {_fmt(graph.get('layout_transforms', 0), '.0f')} layout transforms.</p>")
    if not groups:
        return text + _note("No operators were fused: each kernel runs one op.")
    # One row per op pattern: a CNN repeats "Conv → Relu" dozens of times, one row per kernel buries the rest.
    patterns: dict[str, list[str]] = {}
    for g in groups:
        patterns.setdefault(" → ".join(map(str, g.get("ops") or [])), []).append(str(g.get("kernel", "")))
    rows = [[esc(ops), str(len(names)), esc(", ".join(names))]
            for ops, names in sorted(patterns.items(), key=lambda item: -len(item[1]))]
    return text + _table(["fused ops", "count", "kernels"], rows, numeric={1})


def _validation(report: dict, charts: Any) -> str:
    val = report.get("validation") or {}
    if "max_abs_err" not in val:
        return _note(f"Validation was skipped: {val.get('skipped', 'no validation in this report')}.")
    verdict = _verdict(val.get("passed"))
    rows = [["max absolute error", _fmt(val.get("max_abs_err"), ".3g")],
            ["max relative error", _fmt(val.get("max_rel_err"), ".3g")],
            ["reference", esc(val.get("reference", "onnxruntime"))]]
    if val.get("inputs"):
        rows.append(["inputs", esc(val["inputs"])])
    if val.get("mode"):  # the target's CPU is not this machine's: its artifact ran under an emulator
        rows.append(["run", esc(f"{val['mode']}, under {val.get('emulator', 'an emulator')}")])
    if "atol" in val or "rtol" in val:
        rows.append(["tolerance", f"atol {_fmt(val.get('atol'), '.0e')}, rtol {_fmt(val.get('rtol'), '.0e')}"])
    if verdict:
        kept = " (kept: on a mismatch this compile warns)" if val.get("on_mismatch") == "warn" and not val.get("passed") else ""
        rows.append(["result", verdict + esc(kept)])
    text = "<p>The compiled model's outputs compared with the reference on the same inputs.</p>" + _table(["measure", "value"], rows)
    outputs = val.get("outputs") or []
    if outputs:
        out_rows = [[esc(o.get("name", "")), esc(o.get("dtype", "")), _fmt(o.get("max_abs_err"), ".3g"),
                     _fmt(o.get("max_rel_err"), ".3g"), _fmt(o.get("cosine"), ".6f"),
                     "–" if o.get("top1") is None else f"{_fmt(o.get('top1'), '.0%')} / {_fmt(o.get('top5'), '.0%')}",
                     f"<code>{esc(o.get('rule', ''))}</code><br>{esc((o.get('tolerance') or {}).get('why', ''))}",
                     _verdict(o.get("passed"))] for o in outputs]
        text += _table(["output", "dtype", "max abs", "max rel", "cosine", "top-1 / top-5", "tolerance and why", ""],
                       out_rows, numeric={2, 3, 4})
    return text + "".join(_shape_mismatch(o) for o in outputs if o.get("shape_mismatch")) + _bisect(val, charts)


def _shape_mismatch(output: dict) -> str:
    """An output whose shape differs from the reference's: both shapes, its node, and which side the spec backs."""
    m = output["shape_mismatch"]
    follows = {"kiln": "Kiln follows the spec, the reference does not", "reference": "the reference follows the spec, "
               "Kiln does not", "neither": "neither follows it", "both": "both follow it"}.get(m.get("follows_spec"))
    spec = (f" ONNX's reference evaluator (the spec) gives {esc(m.get('spec'))}: {follows}." if follows else
            " The spec's shape could not be computed.")
    made = f", made by {esc(m['node'])}," if m.get("node") else ""
    return (f"<p>Output <code>{esc(output.get('name', ''))}</code>{made} has shape {esc(m.get('kiln'))} in Kiln "
            f"but {esc(m.get('reference'))} in the reference: no element compares.{spec}</p>")


def _bisect(val: dict, charts: Any) -> str:
    trace = val.get("bisect")
    if not trace:
        return ""
    if trace.get("skipped"):
        return _note(f"No kernel-by-kernel comparison: {trace['skipped']}.")
    first = val.get("first_divergent_kernel")
    if first:
        nodes = ", ".join(f"{n.get('name', '')} ({n.get('op', '')})" for n in first.get("onnx_nodes") or []) or "none"
        head = (f"<p>First kernel out of tolerance: <b>{esc(first.get('kernel', ''))}</b> "
                f"({esc(' + '.join(first.get('ops') or []))}), made by <code>{esc(first.get('created_by', ''))}</code> "
                f"from the ONNX nodes {esc(nodes)}; its output <code>{esc(first.get('value', ''))}</code> is off by "
                f"{_fmt(first.get('max_abs_err'), '.3g')} while its inputs were off by "
                f"{_fmt(first.get('input_abs_err'), '.3g', 'nothing compared')}.</p>")
    else:
        head = "<p>Every compared kernel output is within tolerance.</p>"
    kernels = trace.get("kernels") or []
    rows = [[esc(k.get("kernel", "")), esc(" + ".join(k.get("ops") or [])),
             esc(", ".join(n.get("name", "") for n in k.get("onnx_nodes") or [])), _fmt(k.get("input_abs_err"), ".3g"),
             _fmt(k.get("max_abs_err"), ".3g"), _verdict(k.get("passed"))] for k in kernels]
    table = _table(["kernel", "ops", "ONNX nodes", "input err", "output err", ""], rows, numeric={3, 4})
    chart = _chart(charts.kernel_errors, kernels, "No kernel output had an ONNX Runtime twin to compare with.")
    return (head + chart + f"<details><summary>{len(kernels)} of {_fmt(trace.get('total_kernels'), '.0f')} kernels "
            f"compared</summary>{table}</details>")


def _model(report: dict) -> str:
    model = report.get("model") or {}
    rows = [[kind, esc(t.get("name", "")), esc(t.get("dtype", "")), esc("×".join(map(str, t.get("shape") or [])))]
            for kind in ("input", "output") for t in model.get(kind + "s") or []]
    return (f"<p>sha256 <code>{esc(model.get('sha256', ''))}</code></p>"
            + _table(["", "name", "dtype", "shape"], rows))


def _finite(value: Any) -> Any:
    """NaN and infinities become null: JSON.parse in a browser rejects the bare words Python writes for them."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def embedded_json(report: dict) -> str:
    """JSON safe inside a <script> element: script text is not entity-decoded, so escape with \\u sequences,
    which keep it valid JSON while no "</script>" or "<!--" can appear."""
    text = json.dumps(_finite(report), default=str)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


CHARTS_LEFT_OUT = "Charts are left out of quick compiles (a compile without --quick draws them)."
_CHART_FUNCTIONS = ("latency", "kernel_breakdown", "tuning_curves", "memory", "timings", "kernel_errors")


class _TextOnly:
    """charts.py without its drawing: each chart is the one line CHARTS_LEFT_OUT (no matplotlib import, no plots)."""

    def __init__(self, charts: Any):
        self._charts = charts

    def __getattr__(self, name: str) -> Any:
        return (lambda data: _note(CHARTS_LEFT_OUT)) if name in _CHART_FUNCTIONS else getattr(self._charts, name)


def render_html(report: dict[str, Any], draw_charts: bool = True) -> str:
    """A self-contained page: summary tiles, then latency, kernels, tuning, memory, fusion, validation, timings.
    `draw_charts` False: the tables and text alone (matplotlib's import and drawing take seconds)."""
    from . import charts as drawn  # imported here: `import core` should not import the report's page
    from .production_html import baseline_section, manifest_section, rebuild_section
    from .quantization_html import quantization_section
    from .shapes_html import shapes_section

    charts = drawn if draw_charts else _TextOnly(drawn)
    model = report.get("model") or {}
    name = model.get("name") or report.get("model_name")
    title = f"Kiln report: {name}" if name else "Kiln compile report"
    meta = (f"target <b>{esc(report.get('target', '?'))}</b> · opt level <b>{esc(report.get('opt_level', '?'))}</b> · "
            f"Kiln {esc(report.get('compiler_version', '?'))} · model <code>{esc(str(model.get('sha256', ''))[:12])}</code>")
    mem = report.get("memory") or {}
    sections = [
        baseline_section(report), rebuild_section(report),
        _section("latency", "End-to-end latency", _latency(report, charts)),
        _section("kernels", "Time per kernel", _kernels(report, charts)),
        _section("tuning", "Tuning", _tuning(report, charts)),
        _section("memory", "Memory plan", _chart(charts.memory, mem, "The report has no memory plan.")),
        _section("fusion", "Operator fusion", _fusion(report)),
        _section("validation", "Validation", _validation(report, charts)),
        quantization_section(report),
        _section("timings", "Compile time", _chart(charts.timings, report.get("timings_s") or {},
                                                   "The report has no compile timings.")),
        _section("model", "Model", _model(report)),
        shapes_section(report),
        manifest_section(report),
    ]
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<title>{esc(title)}</title><style>{_CSS.replace("KILN", charts.KILN).replace("ORT", charts.ORT)}</style></head><body><main>
<header><h1><span>Kiln</span> {esc(f"report: {name}" if name else "compile report")}</h1><p class=meta>{meta}</p></header>
{_tiles(report, charts)}
{"".join(sections)}
<footer>report schema {esc(report.get("schema", SCHEMA_VERSION))} · the full report is embedded below as JSON (script#report)</footer>
</main>
<script type="application/json" id="report">{embedded_json(report)}</script>
</body></html>
"""
