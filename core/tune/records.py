"""Tuning records: versioned JSON lines, one measurement each, in a database keyed by (workload key, target,
compiler version, where it was measured). Appends are whole lines under an exclusive lock, so concurrent tuners and
a crash mid-write never leave a half record that a reader would take.

Where: `native` (the target's own hardware: this machine or a remote device of its kind) or `emulated` (qemu-user:
its timings say nothing about the hardware). Every query takes the kind of the job asking (its runner's
`measured`) and sees only records of that kind: a job timed on a real Raspberry Pi never counts, warm-starts from or
builds with qemu timings recorded under the same target name, while a job measured under emulation still builds
from its own kind's records (see remote.RemoteRunner.measured for a job's kind)."""
from __future__ import annotations

import fcntl
import json
import os
import statistics
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Optional

from .._version import __version__

# 2: CPU costs are timed with cold weights (measure.LocalRunner), not comparable with 1's warm ones.
# 3: records say where they were measured (`measured`); a 2 is native. Readers of 2 skip 3s, so no older Kiln takes
# an emulated timing for a native one.
RECORD_VERSION = 3
READABLE_VERSIONS = (2, 3)

NATIVE = "native"  # timed on the target's hardware
EMULATED = "emulated"  # run under qemu-user: correct or not, but its timings are not meaningful


def _config_key(config: Mapping[str, Any]) -> str:
    """One config's identity across records (its knob values; the index may change with the space)."""
    return json.dumps(dict(config), sort_keys=True)


@dataclass(frozen=True)
class Record:
    workload: str  # the task's workload key
    target: str
    config: dict  # knob values (the index is only a hint: spaces may change, values decide)
    index: int
    costs: tuple[float, ...]
    error_no: int
    gflops: float = 0.0
    op: str = ""
    features: Optional[tuple[float, ...]] = None  # itervar features (for transfer learning), if ok
    feature_version: int = 0
    compiler_version: str = __version__
    timestamp: float = field(default_factory=time.time)
    version: int = RECORD_VERSION
    measured: str = NATIVE  # where: NATIVE or EMULATED (records of one kind never stand in for the other's)

    @property
    def ok(self) -> bool:
        return self.error_no == 0 and bool(self.costs)

    def to_json(self) -> str:
        data = {"v": self.version, "workload": self.workload, "target": self.target, "compiler": self.compiler_version,
                "op": self.op, "config": self.config, "index": self.index, "costs": [round(c, 9) for c in self.costs],
                "error": self.error_no, "gflops": round(self.gflops, 3), "t": round(self.timestamp, 3),
                "measured": self.measured}
        if self.features is not None:
            data["features"] = [round(float(x), 4) for x in self.features]
            data["fv"] = self.feature_version
        return json.dumps(data, separators=(",", ":"))

    @classmethod
    def from_json(cls, line: str) -> Optional["Record"]:
        """The record on `line`, or None for a line of another format version or a torn one."""
        try:
            d = json.loads(line)
            if not isinstance(d, dict) or d.get("v") not in READABLE_VERSIONS:
                return None
            feats = d.get("features")
            return cls(d["workload"], d["target"], dict(d["config"]), int(d["index"]), tuple(d["costs"]),
                       int(d["error"]), float(d.get("gflops", 0.0)), d.get("op", ""),
                       tuple(feats) if feats is not None else None, int(d.get("fv", 0)), d["compiler"],
                       float(d.get("t", 0.0)), RECORD_VERSION, str(d.get("measured", NATIVE)))
        except (ValueError, KeyError, TypeError):
            return None


def load_records(path: "str | Path") -> Iterator[Record]:
    p = Path(path)
    if not p.exists():
        return
    with open(p, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                rec = Record.from_json(line)
                if rec is not None:
                    yield rec


def append_records(path: "str | Path", records: Iterable[Record]) -> None:
    """One write of whole lines under an exclusive lock (O_APPEND: never over another writer's)."""
    text = "".join(r.to_json() + "\n" for r in records)
    if not text:
        return
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(p, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        # A previous writer killed mid-line leaves no newline at the end: start ours on a fresh line.
        size = os.fstat(fd).st_size
        if size:
            with open(p, "rb") as f:
                f.seek(size - 1)
                if f.read(1) != b"\n":
                    text = "\n" + text
        data = text.encode()
        while data:
            data = data[os.write(fd, data):]
        os.fsync(fd)
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


class RecordsDB:
    """Records by (workload, target, measurement kind) of one compiler version, from an optional JSON-lines file.
    Its queries take `measured`, the asking job's kind (NATIVE unless said), and see only records of that kind."""

    def __init__(self, path: "str | Path | None" = None, compiler_version: str = __version__,
                 out: "str | Path | None" = None):
        self.path = Path(path).expanduser() if path else None
        # Where new records go (default: `path`): a service job stages its own, published while the job stands.
        self.out = Path(out).expanduser() if out else self.path
        self.compiler_version = compiler_version
        self._by_key: dict[tuple[str, str, str], list[Record]] = {}  # (workload, target, measured)
        self.skipped = 0  # records of another compiler version
        for source in dict.fromkeys(p for p in (self.path, self.out) if p is not None):
            for rec in load_records(source):
                self._index(rec)

    def _index(self, rec: Record) -> None:
        if rec.compiler_version != self.compiler_version:
            self.skipped += 1
            return
        self._by_key.setdefault((rec.workload, rec.target, rec.measured), []).append(rec)

    def add(self, records: Iterable[Record]) -> None:
        """Keep `records` in memory and append them to the `out` file (if any)."""
        records = list(records)
        for rec in records:
            self._index(rec)
        if self.out is not None:
            append_records(self.out, records)

    def records(self, workload: str, target: str, measured: str = NATIVE) -> list[Record]:
        return list(self._by_key.get((workload, target, measured), []))

    def best(self, workload: str, target: str, default: Optional[Mapping[str, Any]] = None,
             min_gain: float = 0.0, measured: str = NATIVE) -> Optional[Record]:
        """The config to apply, as a record whose gflops is the median over that config's records:
        the fastest median, unless the `default` config (its knob values) has records and the
        fastest beats it by less than `min_gain` (a fraction): within the noise, the heuristic's
        schedule stays (a near-tie won by one lucky timing ran 1.6x slower than it in resnet18)."""
        by_config: dict[str, list[Record]] = {}
        for r in self.records(workload, target, measured):
            if r.ok:
                by_config.setdefault(_config_key(r.config), []).append(r)
        if not by_config:
            return None
        medians = {k: replace(recs[-1], gflops=statistics.median(r.gflops for r in recs)) for k, recs in by_config.items()}
        # Once some configs were measured again, only those compete: a config timed once would win
        # by the same luck that the second timing took away from the others.
        confirmed = [medians[k] for k, recs in by_config.items() if len(recs) > 1]
        best = max(confirmed or medians.values(), key=lambda r: r.gflops)
        fallback = medians.get(_config_key(default)) if default is not None else None
        if fallback is not None and best.gflops < fallback.gflops * (1 + min_gain):
            return fallback
        return best

    def top(self, workload: str, target: str, k: int, measured: str = NATIVE) -> list[Record]:
        """The k configs with the fastest single records (one record each): the candidates to confirm."""
        seen, out = set(), []
        for r in sorted((r for r in self.records(workload, target, measured) if r.ok), key=lambda r: -r.gflops):
            key = _config_key(r.config)
            if key not in seen:
                seen.add(key)
                out.append(r)
            if len(out) == k:
                break
        return out

    def others(self, workload: str, target: str, op: str, feature_version: int,
               measured: str = NATIVE) -> dict[str, list[Record]]:
        """Records of other workloads of the same op on the same target that carry features."""
        out: dict[str, list[Record]] = {}
        for (w, t, m), recs in self._by_key.items():
            if w != workload and t == target and m == measured:
                usable = [r for r in recs if r.op == op and r.features is not None and r.feature_version == feature_version]
                if usable:
                    out[w] = usable
        return out

    def __len__(self) -> int:
        return sum(len(v) for v in self._by_key.values())

    def as_dict(self) -> dict[str, Any]:
        by_kind: dict[str, int] = {}
        for (_, _, measured), recs in self._by_key.items():
            by_kind[measured] = by_kind.get(measured, 0) + len(recs)
        return {"path": str(self.path) if self.path else None, "records": len(self), "skipped": self.skipped,
                "measured": dict(sorted(by_kind.items()))}
