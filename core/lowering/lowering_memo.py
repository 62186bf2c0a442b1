"""Lowered kernels kept in the kernel cache: a fused group's lowering (most of a warm build's Python time) is found
again by a description of the group (ops, attributes, value types, wiring), the target and the compiler's source."""
from __future__ import annotations

import dataclasses
import hashlib
import pickle
from typing import Any, Optional, Sequence

import numpy as np

from .._version import __version__, source_digest
from ..codegen.kernel_cache import CachedObject, current_cache, current_stats
from ..graph.ir import Graph, Node, TensorType
from ..target import Target
from ..tir.stmt import PrimFunc
from ..tir.kernel_dedup import note_digest, structural_digest

_FORMAT = "kiln-lowered-2"


class _Undescribed(Exception):
    """An attribute of a type this module does not know how to describe exactly: no memo for that group."""


def _describe(value: Any) -> Any:
    """A repr-able value equal for equal attributes and different for different ones (numpy arrays by their bytes:
    their repr elides elements)."""
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return value
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, tuple(_describe(v) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple(sorted((str(k), _describe(v)) for k, v in value.items())))
    if isinstance(value, np.ndarray):
        data = np.ascontiguousarray(value)
        return ("ndarray", data.dtype.str, data.shape, hashlib.sha256(data.tobytes()).hexdigest())
    if isinstance(value, np.generic):
        return ("scalar", value.dtype.str, value.item())
    if isinstance(value, TensorType):
        return ("type", value.shape, value.dtype)
    raise _Undescribed(type(value).__name__)


def group_key(nodes: Sequence[Node], graph: Graph, outputs: Sequence[str], target: Target) -> Optional[str]:
    """The memo key of lowering `nodes` (typed by `graph`) into a kernel computing `outputs`; None when some
    attribute cannot be described exactly (a nested graph, an unknown object)."""
    ids: dict[str, int] = {}

    def vid(name: str) -> Any:
        return "" if not name else ids.setdefault(name, len(ids))

    try:
        ops = tuple((n.op, tuple(vid(i) for i in n.inputs), tuple(vid(o) for o in n.outputs), _describe(dict(n.attrs)))
                    for n in nodes)
    except _Undescribed:
        return None
    types = tuple((graph.type_of(name).shape, graph.type_of(name).dtype) for name in ids)
    text = repr((ops, types, tuple(vid(o) for o in outputs)))
    digest = hashlib.sha256()
    for part in (_FORMAT, __version__, source_digest(), repr(target), text):
        digest.update(part.encode() + b"\0")
    return digest.hexdigest()


def derived_key(key: Optional[str], step: str) -> Optional[str]:
    """The memo key of a deterministic rewrite `step` of the kernel memoized under `key`."""
    return None if key is None else hashlib.sha256(f"{key}\0{step}".encode()).hexdigest()


def recall(key: Optional[str], name: str) -> Optional[PrimFunc]:
    """The kernel lowered earlier under `key`, named `name`; None when the cache is off or has none."""
    cache = current_cache() if key is not None else None
    entry = cache.get(key) if cache is not None else None
    if entry is None:
        return None
    try:
        func, digest = pickle.loads(entry.data)
    except Exception:  # damaged in a way the checksum cannot see (written by another version): lower again
        return None
    if not isinstance(func, PrimFunc):
        return None
    stats = current_stats()
    if stats is not None:
        stats.lowered_from_cache += 1
    func = dataclasses.replace(func, name=name)
    note_digest(func, digest)  # deduplication and the kernel cache need not walk it again
    return func


def remember(key: Optional[str], func: PrimFunc) -> None:
    cache = current_cache() if key is not None else None
    if cache is not None:
        data = pickle.dumps((func, structural_digest(func)), protocol=pickle.HIGHEST_PROTOCOL)
        cache.put(key, CachedObject(data, ()))
