"""The report page's HTML building blocks (escaping, numbers, notes, tables, sections), shared by its section modules."""
from __future__ import annotations

import html
import math
from typing import Any, Optional


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def num(value: Any) -> Optional[float]:
    try:
        result = float(value)
    except (TypeError, ValueError):
        return None
    return result if math.isfinite(result) else None


def fmt(value: Any, spec: str, missing: str = "–") -> str:
    number = num(value)
    return missing if number is None else format(number, spec)


def note(text: str) -> str:
    return f"<p class=note>{esc(text)}</p>"


def table(headers: list[str], rows: list[list[str]], numeric: "set[int] | frozenset[int]" = frozenset()) -> str:
    """Cells arrive escaped; `numeric` column indices are right-aligned."""
    head = "".join(f"<th{' class=n' if i in numeric else ''}>{h}</th>" for i, h in enumerate(headers))
    body = "".join("<tr>" + "".join(f"<td{' class=n' if i in numeric else ''}>{c}</td>" for i, c in enumerate(row))
                   + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def section(anchor: str, title: str, body: str) -> str:
    return f'<section id="{anchor}"><h2>{esc(title)}</h2>{body}</section>'
