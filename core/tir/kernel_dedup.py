"""Kernel deduplication: kernels that lower to the same loop program share one compiled function.

Repeated transformer layers, and recurrent/loop ops unrolled at import, produce the same kernel
many times; compiling each copy costs LLVM time (the bulk of a compile) for identical machine code.
Two kernels are identical when their PrimFuncs are equal once the function name and the parameter
buffers' names are normalized: TIR nodes are frozen dataclasses compared by value (loop variables
by name and dtype, constants by value and dtype, buffers by name/shape/dtype/scope), so equality
covers parameter shapes and dtypes, workspaces, local allocations, loop kinds and annotations.
"""
from __future__ import annotations

import dataclasses
import hashlib
import weakref
from typing import Hashable, Sequence

from .expr import Load, Var
from .functor import rewrite_stmt
from .stmt import For, LetStmt, PrimFunc, Store


def structural_key(func: PrimFunc) -> Hashable:
    """Equal for kernels that differ only in their name, their parameters' names and their loop/let
    variables' names (lowering numbers variables globally, so each copy of a layer has its own)."""
    renamed = {b: dataclasses.replace(b, name=f"p{i}") for i, b in enumerate(func.params)}
    if len(renamed) != len(func.params):  # a buffer passed twice: keep its names (never shared wrongly)
        renamed = {}
    variables: dict[Var, Var] = {}  # numbered in traversal order: a bijection, so distinct stays distinct

    def canonical(var: Var) -> Var:
        if var not in variables:
            variables[var] = Var(f"v{len(variables)}", var.dtype)
        return variables[var]

    def expr(e):
        if isinstance(e, Var):
            return canonical(e)
        if isinstance(e, Load) and e.buffer in renamed:
            return Load(renamed[e.buffer], e.index)
        return None

    def stmt(s):
        if isinstance(s, Store) and s.buffer in renamed:
            return Store(renamed[s.buffer], s.index, s.value)
        if isinstance(s, For):
            return dataclasses.replace(s, var=canonical(s.var))
        if isinstance(s, LetStmt):
            return dataclasses.replace(s, var=canonical(s.var))
        return None

    body = rewrite_stmt(func.body, expr, stmt)
    params = tuple(renamed.get(b, b) for b in func.params)
    attrs = tuple(sorted((k, repr(v)) for k, v in func.attrs.items()))
    return (params, body, func.num_inputs, func.num_outputs, attrs)


_DIGESTS: dict[int, tuple[weakref.ref, str]] = {}


def structural_digest(func: PrimFunc) -> str:
    """sha256 of the structural key's repr (TIR nodes have no custom reprs, so every field shows), computed once
    per PrimFunc object: deduplication, the kernel cache and the lowering memo all ask for it."""
    known = _DIGESTS.get(id(func))
    if known is not None and known[0]() is func:
        return known[1]
    digest = digest_of_key(structural_key(func))
    note_digest(func, digest)
    return digest


def digest_of_key(key: Hashable) -> str:
    """structural_digest of a kernel whose structural key is `key`."""
    return hashlib.sha256(repr(key).encode()).hexdigest()


def note_digest(func: PrimFunc, digest: str) -> None:
    """Records `func`'s structural digest, known without walking it (a kernel recalled from the lowering memo)."""
    _DIGESTS[id(func)] = (weakref.ref(func, lambda _, key=id(func): _DIGESTS.pop(key, None)), digest)


def share_identical(funcs: Sequence[PrimFunc]) -> tuple[list[PrimFunc], list[str]]:
    """(the distinct kernels, each first of its kind, in order; per input kernel, the name of the
    function it calls)."""
    first_of: dict[str, PrimFunc] = {}
    unique: list[PrimFunc] = []
    called: list[str] = []
    for func in funcs:
        key = structural_digest(func)
        shared = first_of.get(key)
        if shared is None:
            first_of[key] = shared = func
            unique.append(func)
        called.append(shared.name)
    return unique, called


__all__ = ["structural_key", "structural_digest", "digest_of_key", "note_digest", "share_identical"]
