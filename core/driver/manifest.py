"""The reproducibility manifest: everything a build was made from (model, compiler, LLVM, target, options, records)."""
from __future__ import annotations

import functools
import hashlib
import json
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

import numpy as np

from .._version import __version__, source_digest
from ..errors import KilnError

if TYPE_CHECKING:
    from ..backends.base import Backend
    from ..graph.ir import Graph
    from ..target import Target
    from ..tune.session import TuningOutcome

MANIFEST_VERSION = 1
UNKNOWN = "unknown"
_ROOT = Path(__file__).resolve().parents[2]  # the checkout core/ was imported from, if it is one


class ManifestError(KilnError):
    """An artifact has no manifest, or a rebuild was given another model than the one it was built from."""

    code = "bad_manifest"


@functools.cache
def git_commit() -> str:
    """The commit the compiler was built from ("+dirty" when the checkout has uncommitted changes), else "unknown"."""
    if not (_ROOT / ".git").exists():
        return UNKNOWN
    try:
        head = subprocess.run(["git", "-C", str(_ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(_ROOT), "status", "--porcelain", "--untracked-files=no", "--", "core"],
                               capture_output=True, text=True, timeout=20, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return UNKNOWN
    return head + ("+dirty" if dirty else "") if head else UNKNOWN


@functools.cache
def toolchain() -> dict[str, str]:
    """What decides the generated code besides the model and options: Kiln's version, commit and source, llvmlite's
    version and the LLVM inside it (read once per process: the code this process runs)."""
    import llvmlite
    from llvmlite import binding

    return {"compiler_version": __version__, "git_commit": git_commit(), "compiler_source_sha256": source_digest(),
            "llvmlite_version": llvmlite.__version__, "llvm_version": ".".join(str(v) for v in binding.llvm_version_info)}


def target_info(target: "Target", spec: str) -> dict[str, Any]:
    """`spec`: the target as the user named it (what a rebuild asks for again)."""
    return {"spec": spec, "name": target.name, "triple": target.triple, "cpu": target.cpu, "features": target.features,
            "vector_bits": target.vector_bits}


def canonical_record_line(workload: str, target: str, config: Mapping[str, Any]) -> str:
    """What decides a tuned kernel's code: its workload, target and knob values (timings and dates left out)."""
    return json.dumps({"workload": workload, "target": target, "config": dict(config)}, sort_keys=True,
                      separators=(",", ":"))


def records_applied(outcomes: "Sequence[Optional[TuningOutcome]]") -> list[dict[str, Any]]:
    """The tuned configs this build applied (every shape bucket's), as canonical lines with their sha256, sorted by
    workload."""
    chosen = {key: value for outcome in outcomes if outcome is not None for key, value in outcome.chosen.items()}
    out = []
    for key, (task, values) in sorted(chosen.items()):
        line = canonical_record_line(key, task.target.name, values)
        out.append({"workload": key, "name": task.name, "line": line,
                    "sha256": hashlib.sha256(line.encode()).hexdigest()})
    return out


def pinned_outcomes(graphs: "Sequence[Graph]", target: "Target", backend: "Backend",
                    applied: Sequence[Mapping[str, Any]]) -> "list[TuningOutcome]":
    """The tuning outcomes a manifest's records give these graphs (one per shape bucket): the same configs, no records
    database, no measuring. Every record must name a workload of some graph."""
    from ..tune.session import TuningOutcome
    from ..tune.task import extract_tasks

    wanted = {}
    for entry in applied:
        rec = json.loads(entry["line"])
        wanted[rec["workload"]] = rec["config"]
    outcomes, found = [], set()
    for graph in graphs:
        outcome = TuningOutcome(graph, target, backend)
        for task in (extract_tasks(graph, target, backend) if wanted else ()):
            if task.key in wanted:
                outcome.chosen[task.key] = (task, dict(wanted[task.key]))
        found |= set(outcome.chosen)
        outcome.report = {"trials": 0, "time_s": 0.0, "cache_hits": len(outcome.chosen), "tasks": [],
                          "pinned_from_manifest": len(outcome.chosen)}
        outcomes.append(outcome)
    missing = sorted(set(wanted) - found)
    if missing:
        raise ManifestError(f"the manifest's tuning records name {len(missing)} workload(s) this build does not have "
                            f"(e.g. {missing[0][:16]}): the optimized graph differs from the original build's")
    return outcomes


def inputs_digest(samples: "Optional[Sequence[Mapping[str, np.ndarray]]]", graph: "Graph") -> dict[str, Any]:
    """The validation inputs' sha256 (names, dtypes, shapes and bytes of every sample): the user's, or the seeded
    random ones validation draws."""
    from .validate import index_bounds, random_inputs

    kind = "user" if samples else "seeded random (seed 0)"
    samples = list(samples) if samples else [random_inputs(graph, 0, index_bounds(graph))]
    digest = hashlib.sha256()
    for sample in samples:
        for name in sorted(sample):
            array = np.ascontiguousarray(sample[name])
            digest.update(f"{name}|{array.dtype.str}|{array.shape}|".encode())
            digest.update(array.tobytes())
    return {"kind": kind, "samples": len(samples), "sha256": digest.hexdigest()}


def build_manifest(*, model_sha256: str, target: "Target", target_spec: str, options: Mapping[str, Any],
                   outcomes: "Sequence[Optional[TuningOutcome]]", validation_inputs: Optional[dict]) -> dict[str, Any]:
    """The manifest of one build: no paths and no timestamps, so that two builds of the same inputs agree."""
    return {"version": MANIFEST_VERSION, "model_sha256": model_sha256, **toolchain(),
            "target": target_info(target, target_spec), "options": dict(options),
            "records_applied": records_applied(outcomes), "validation_inputs": validation_inputs}


_TUNING_FIELDS = ("trials", "time_budget_s", "tuner", "batch_size", "early_stopping", "seed", "timeout_s",
                  "min_repeat_ms", "threads")  # the records file is a path: its effect is `records_applied`


def tuning_manifest(tuning) -> Optional[dict[str, Any]]:
    """A TuningOptions' settings that shaped the search (None: no tuning)."""
    return None if tuning is None else {f: getattr(tuning, f) for f in _TUNING_FIELDS}
