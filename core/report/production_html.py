"""The report page's production sections: the CI gate against a baseline, a rebuild's comparison, and the manifest."""
from __future__ import annotations

from typing import Any

from .markup import esc, fmt as _fmt, section as _section, table as _table


def baseline_section(report: dict[str, Any]) -> str:
    """The gate's verdict, both builds' latencies (quartiles) and errors; "" without a baseline."""
    gate = report.get("baseline")
    if not gate:
        return ""
    verdict = "<span class=ok>passed</span>" if gate.get("passed") else "<span class=bad>failed</span>"
    text = f"<p>CI gate {verdict}: {esc(gate.get('message', ''))}</p>"
    if "candidate_ms" in gate:
        def quartiles(key: str) -> str:
            q = gate.get(key) or []
            return " / ".join(_fmt(v, ".4g") for v in q) if q else "–"

        rows = [["this build", _fmt(gate.get("candidate_ms"), ".4g"), quartiles("candidate_quartiles"),
                 _fmt(gate.get("candidate_max_abs_err"), ".3g")],
                [esc(gate.get("baseline") or "baseline"), _fmt(gate.get("baseline_ms"), ".4g"),
                 quartiles("baseline_quartiles"), _fmt(gate.get("baseline_max_abs_err"), ".3g")]]
        text += _table(["build", "median ms", "quartiles ms", "max abs error"], rows, numeric={1, 3})
        text += (f"<p>Latency ratio {_fmt(gate.get('ratio'), '.3f')}x (allowed {_fmt(gate.get('max_slowdown', 0) * 100, '.0f')}% "
                 f"slower) over {_fmt(gate.get('rounds'), '.0f')} interleaved rounds on the same worker; error growth "
                 f"{_fmt(gate.get('error_growth'), '.3g')}x (allowed {_fmt(gate.get('max_error_growth'), 'g')}x).</p>")
    return _section("baseline", "Against the baseline", text)


def rebuild_section(report: dict[str, Any]) -> str:
    rebuild = report.get("rebuild")
    if not rebuild:
        return ""
    verdict = "<span class=ok>byte-identical</span>" if rebuild.get("identical") else "<span class=bad>differs</span>"
    rows = [[esc(d.get("part", "")), esc(d.get("detail", "")), esc(d.get("why", ""))]
            for d in rebuild.get("differences") or []]
    return _section("rebuild", "Rebuild", f"<p>Rebuild of job <code>{esc(rebuild.get('of', ''))}</code>: {verdict}. "
                                          f"{esc(rebuild.get('summary', ''))}</p>"
                    + (_table(["part", "what", "why"], rows) if rows else ""))


def manifest_section(report: dict[str, Any]) -> str:
    manifest = report.get("manifest")
    if not manifest:
        return ""
    target = manifest.get("target") or {}
    rows = [[esc(k), f"<code>{esc(v)}</code>"] for k, v in (
        ("model sha256", manifest.get("model_sha256")), ("compiler", manifest.get("compiler_version")),
        ("git commit", manifest.get("git_commit")), ("llvmlite / LLVM",
                                                     f"{manifest.get('llvmlite_version')} / {manifest.get('llvm_version')}"),
        ("target", f"{target.get('name')} ({target.get('triple')}, cpu {target.get('cpu')})"),
        ("validation inputs", (manifest.get("validation_inputs") or {}).get("sha256", "not validated")))]
    rows += [[esc(f"option {k}"), f"<code>{esc(v)}</code>"] for k, v in (manifest.get("options") or {}).items()]
    rows += [[esc("tuning record"), f"<code>{esc(r.get('name', ''))}</code> sha256 <code>{esc(r.get('sha256', '')[:16])}</code>"]
             for r in manifest.get("records_applied") or []]
    return _section("manifest", "Reproducibility manifest",
                    "<p>What this build was made from: <code>kiln rebuild</code> builds it again from these.</p>"
                    + _table(["", ""], rows))
