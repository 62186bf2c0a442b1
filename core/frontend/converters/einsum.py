"""Einsum: the equation is parsed here (ellipses expanded to letters, the implicit output made
explicit) so the graph op sees one subscript letter per axis."""
from __future__ import annotations

import string

from .registry import ConvertContext, converter


def _expand(ctx: ConvertContext, term: str, rank: int, spare: str) -> tuple[str, str]:
    """`term` with its ellipsis replaced by letters for the axes it covers (the last ones of `spare`)."""
    if "..." not in term:
        return term, ""
    covered = rank - len(term.replace("...", ""))
    if covered < 0:
        ctx.fail(f"subscripts {term!r} have more letters than the input has axes ({rank})")
    ellipsis = spare[len(spare) - covered:] if covered else ""
    return term.replace("...", ellipsis), ellipsis


@converter("Einsum", since_version=12)
def einsum(ctx: ConvertContext) -> str:
    equation = str(ctx.attr("equation", "")).replace(" ", "")
    lhs, arrow, rhs = equation.partition("->")
    given = lhs.split(",")
    if len(given) != len(ctx.node.input):
        ctx.fail(f"equation {equation!r} names {len(given)} inputs, the node has {len(ctx.node.input)}")
    used = set(lhs.replace(".", "").replace(",", ""))
    spare = "".join(c for c in string.ascii_letters if c not in used)
    terms, widest = [], ""
    for k, term in enumerate(given):
        expanded, ellipsis = _expand(ctx, term, ctx.type_of(k).rank, spare)
        terms.append(expanded)
        widest = ellipsis if len(ellipsis) > len(widest) else widest
    if arrow:
        output = _expand(ctx, rhs, len(rhs.replace("...", "")) + len(widest), spare)[0]
    else:
        # Implicit output: the ellipsis axes, then the letters used once, in alphabetical order.
        counts = {c: "".join(terms).count(c) for c in used}
        output = widest + "".join(sorted(c for c, n in counts.items() if n == 1))
    extents: dict[str, set[int]] = {}
    for k, term in enumerate(terms):
        for letter, dim in zip(term, ctx.shape(k)):
            extents.setdefault(letter, set()).add(dim)
    if any(len(dims) > 1 for dims in extents.values()):
        ctx.unsupported("Einsum with axes that broadcast (one letter, different extents)")
    return ctx.emit1("Einsum", [ctx.input(k) for k in range(len(terms))], terms=tuple(terms), output=output)
