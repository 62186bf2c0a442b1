"""The persistent compiled-kernel cache: one object file per kernel, keyed by its structural key, target and compiler.

Shared by every compile on the machine (default ~/.cache/kiln/kernels; $KILN_KERNEL_CACHE moves it, "off"
disables it; `core.compile(kernel_cache=...)` and `kiln compile --kernel-cache` do the same per compile).
Entries are written to a temporary file and renamed, so several processes may fill it at once; each carries a
checksum, so a damaged entry is dropped and rebuilt, never linked. Its size is bounded ($KILN_KERNEL_CACHE_MB,
default 2048): the least recently used entries go first.
"""
from __future__ import annotations

import contextlib
import contextvars
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Optional, Sequence, Union

import llvmlite
import llvmlite.binding as llvm

from .._version import __version__, source_digest
from ..errors import KilnError
from ..files.atomic import atomic_path
from ..target import Target

ENV_DIR = "KILN_KERNEL_CACHE"
ENV_MAX_MB = "KILN_KERNEL_CACHE_MB"
DEFAULT_MAX_MB = 2048
OFF = "off"
_MAGIC = b"KILNOBJ1"
# What turns a canonical PrimFunc (whose whole value is in the key) into object code: the rest of the compiler
# (frontend, passes, kernels, lowering) only shapes the PrimFunc, so editing it does not invalidate the cache.
CODEGEN_SOURCES = ("codegen", "tir", "backends", "target.py", "narrow_dtypes.py", "errors.py", "debug.py",
                   "_version.py")
_SUFFIX = ".kobj"

CacheSetting = Union[None, bool, str, Path, "KernelCache"]


class KernelCacheError(KilnError):
    """The kernel cache setting names something that cannot be a cache directory."""

    code = "bad_kernel_cache"


@dataclass(frozen=True)
class CachedObject:
    data: bytes  # object code, or a pickled lowered kernel (core/lowering/lowering_memo.py)
    libs: tuple[str, ...]  # extra link flags the object needs (-lmvec)


class KernelCache:
    """A directory of compiled kernel objects, bounded to `max_bytes` (least recently used evicted)."""

    def __init__(self, directory: "str | Path", max_bytes: int = DEFAULT_MAX_MB << 20):
        self.directory = Path(directory).expanduser()
        self.max_bytes = max_bytes

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / (key + _SUFFIX)

    def get(self, key: str) -> Optional[CachedObject]:
        """The entry under `key`, or None when there is none or it is damaged (then it is removed)."""
        path = self._path(key)
        try:
            data = path.read_bytes()
        except OSError:
            return None
        entry = _decode(data, key)
        if entry is None:
            path.unlink(missing_ok=True)
            return None
        with contextlib.suppress(OSError):
            os.utime(path)  # its use time: eviction takes the least recently used
        return entry

    def put(self, key: str, entry: CachedObject) -> None:
        """Stores `entry` (a write that fails, such as a full disk, leaves the cache as it was)."""
        with contextlib.suppress(OSError):
            with atomic_path(self._path(key)) as partial:
                partial.write_bytes(_encode(key, entry))

    def evict(self) -> int:
        """Removes the least recently used entries until the cache holds at most `max_bytes`; how many went."""
        entries = []
        with contextlib.suppress(OSError):
            for sub in os.scandir(self.directory):
                if sub.is_dir():
                    for e in os.scandir(sub.path):
                        if e.name.endswith(_SUFFIX):
                            with contextlib.suppress(OSError):
                                st = e.stat()
                                entries.append((st.st_mtime, st.st_size, e.path))
        total = sum(size for _, size, _ in entries)
        removed = 0
        for _, size, path in sorted(entries):
            if total <= self.max_bytes:
                break
            with contextlib.suppress(OSError):
                os.unlink(path)
                removed += 1
            total -= size
        return removed


def _encode(key: str, entry: CachedObject) -> bytes:
    meta = json.dumps({"key": key, "libs": list(entry.libs)}).encode()
    body = len(meta).to_bytes(4, "little") + meta + entry.data
    return _MAGIC + hashlib.sha256(body).digest() + body


def _decode(data: bytes, key: str) -> Optional[CachedObject]:
    head = len(_MAGIC) + 32
    if len(data) < head + 4 or not data.startswith(_MAGIC):
        return None
    body = data[head:]
    if hashlib.sha256(body).digest() != data[len(_MAGIC):head]:
        return None
    size = int.from_bytes(body[:4], "little")
    try:
        meta = json.loads(body[4:4 + size])
    except ValueError:
        return None
    if meta.get("key") != key:
        return None
    return CachedObject(body[4 + size:], tuple(meta.get("libs", ())))


def object_key(structural_digest: str, target: Target, options: Sequence[str]) -> str:
    """The cache key of one kernel: its structural digest (its canonical form: core/tir/kernel_dedup.py),
    the target (triple, CPU, features), llvmlite/LLVM, Kiln's version and code generator source, the codegen options."""
    digest = hashlib.sha256()
    for part in (_MAGIC.decode(), target.triple, target.cpu, target.features, llvmlite.__version__,
                 ".".join(map(str, llvm.llvm_version_info)), __version__, source_digest(*CODEGEN_SOURCES), *options, structural_digest):
        digest.update(part.encode() + b"\0")
    return digest.hexdigest()


def default_directory() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "kiln" / "kernels"


def _max_bytes() -> int:
    text = os.environ.get(ENV_MAX_MB, "")
    try:
        return max(0, int(text)) << 20 if text else DEFAULT_MAX_MB << 20
    except ValueError:
        raise KernelCacheError(f"${ENV_MAX_MB} must be a number of megabytes, not {text!r}") from None


def resolve(setting: CacheSetting) -> Optional[KernelCache]:
    """The cache a setting names: None the default ($KILN_KERNEL_CACHE, else ~/.cache/kiln/kernels); False or
    "off" none; a path that directory."""
    if isinstance(setting, KernelCache):
        return setting
    if setting is None:
        setting = os.environ.get(ENV_DIR) or default_directory()
    if setting is False or (isinstance(setting, str) and setting.strip().lower() in (OFF, "0", "none", "false")):
        return None
    if setting is True:
        return resolve(None)
    path = Path(setting).expanduser()
    if path.exists() and not path.is_dir():
        raise KernelCacheError(f"kernel cache {path} is a file, not a directory")
    return KernelCache(path, _max_bytes())


@dataclass
class BuildStats:
    """What one build took from the cache and what it compiled (the report's `build` section)."""

    kernels: int = 0
    cache_hits: int = 0
    built: int = 0
    lowered_from_cache: int = 0  # fused groups whose lowering came from the cache (core/lowering/lowering_memo.py)
    workers: int = 0
    cache_dir: Optional[str] = None
    evicted: int = 0
    seconds: dict = field(default_factory=dict)
    # Per target, the ObjectBuilder of this build (core/codegen/kernel_objects.py): kernels prefetched while
    # lowering and the worker processes compiling them.
    builders: dict = field(default_factory=dict, repr=False)

    def add(self, kernels: int, hits: int, workers: int) -> None:
        self.kernels += kernels
        self.cache_hits += hits
        self.built += kernels - hits
        self.workers = max(self.workers, workers)

    def as_report(self) -> dict:
        rate = round(self.cache_hits / self.kernels, 4) if self.kernels else None
        return {"kernels": self.kernels, "cache_hits": self.cache_hits, "built": self.built, "hit_rate": rate,
                "lowered_from_cache": self.lowered_from_cache, "workers": self.workers, "cache_dir": self.cache_dir,
                "evicted": self.evicted}


_CACHE: contextvars.ContextVar = contextvars.ContextVar("kiln_kernel_cache", default=None)
_STATS: contextvars.ContextVar = contextvars.ContextVar("kiln_build_stats", default=None)


@contextlib.contextmanager
def building(setting: CacheSetting = None) -> Iterator[BuildStats]:
    """Builds inside the block use the cache `setting` names and add what they did to the stats it yields."""
    cache = resolve(setting)
    stats = BuildStats(cache_dir=str(cache.directory) if cache is not None else None)
    tokens = _CACHE.set((cache,)), _STATS.set(stats)
    try:
        yield stats
    finally:
        for builder in stats.builders.values():
            builder.close()
        _CACHE.reset(tokens[0])
        _STATS.reset(tokens[1])


def current_cache() -> Optional[KernelCache]:
    """The cache of the enclosing `building` block, else the default one."""
    chosen = _CACHE.get()
    return chosen[0] if chosen is not None else resolve(None)


def current_stats() -> Optional[BuildStats]:
    return _STATS.get()
