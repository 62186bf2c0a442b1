"""The report page's "Shape buckets" section: the declared ranges, the compiled buckets, the padded and masked axes."""
from __future__ import annotations

from typing import Any

from .markup import esc, section as _section, table as _table


def shapes_section(report: dict[str, Any]) -> str:
    """The section, or "" for a compile without input-shape ranges (no "dynamic_shapes" key)."""
    shapes = report.get("dynamic_shapes")
    if not shapes:
        return ""
    refused = shapes.get("not_padded") or {}
    rows = [[esc(v.get("name", "")), esc(v.get("range", "")), esc(", ".join(map(str, v.get("sizes") or []))),
             "padded into the next bucket" if v.get("padded") else
             "masked in the next bucket (a run-time length)" if v.get("masked") else
             f"exact ({esc(refused.get(v.get('name'), ''))})"] for v in shapes.get("variables") or []]
    text = (f"<p>One library serves every input shape in range: {len(shapes.get('buckets') or [])} shape buckets, "
            f"{esc(shapes.get('kernels_compiled', '?'))} distinct kernels for {esc(shapes.get('kernel_calls', '?'))} "
            f"kernel calls, one weights file. The kernels and latency above are the largest bucket's.</p>")
    text += _table(["dimension", "range", "bucket sizes", "at run time"], rows)
    inputs = [[esc(i.get("name", "")), esc("×".join(map(str, i.get("min_shape") or []))),
               esc("×".join(map(str, i.get("max_shape") or [])))] for i in shapes.get("inputs") or []]
    return _section("shapes", "Shape buckets", text + _table(["input", "smallest shape", "largest shape"], inputs))
