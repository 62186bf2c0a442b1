"""Rebuild an artifact from its manifest and the model it was built from, and say which part differs and why."""
from __future__ import annotations

import hashlib
import json
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ..errors import ArtifactError
from ..runtime.package import METADATA, WEIGHTS
from .manifest import ManifestError

# What the environment must match for identical bytes: any of these differing explains a difference.
_ENVIRONMENT = ("compiler_version", "git_commit", "compiler_source_sha256", "llvmlite_version", "llvm_version")
_TARGET_KEYS = ("name", "triple", "cpu", "features", "vector_bits")


@dataclass
class Difference:
    part: str  # library, weights, header, metadata
    detail: str
    why: str

    def as_dict(self) -> dict[str, str]:
        return {"part": self.part, "detail": self.detail, "why": self.why}


@dataclass
class RebuildResult:
    """The comparison of an artifact and its rebuild: `identical`, or the parts that differ and why."""

    parts: dict[str, bool] = field(default_factory=dict)  # part -> identical
    differences: list[Difference] = field(default_factory=list)
    artifact: Any = None  # the rebuilt core Artifact (its files are removed by cleanup())

    @property
    def identical(self) -> bool:
        return not self.differences

    def summary(self) -> str:
        if self.identical:
            return f"byte-identical: {', '.join(self.parts)}"
        return "; ".join(f"{d.part} differs ({d.detail}): {d.why}" for d in self.differences)

    def as_report(self) -> dict[str, Any]:
        return {"identical": self.identical, "parts": dict(self.parts),
                "differences": [d.as_dict() for d in self.differences], "summary": self.summary()}


def read_members(path: "str | Path") -> dict[str, bytes]:
    """Every regular file of an artifact `.tar.gz`, by name."""
    try:
        with tarfile.open(path, "r:gz") as tar:
            return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    except (tarfile.TarError, OSError, EOFError) as e:
        raise ArtifactError(f"cannot read artifact {path}: {e}") from None


def manifest_of(metadata: Mapping[str, Any], where: str) -> dict[str, Any]:
    manifest = metadata.get("manifest")
    if not isinstance(manifest, dict) or "options" not in manifest:
        raise ManifestError(f"{where} has no reproducibility manifest (built by a Kiln before manifests): "
                            "it cannot be rebuilt")
    return manifest


def _why(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    """The inputs of the two builds that differ (the likely reason for different bytes)."""
    reasons = [f"{key} differs ({old.get(key)} then, {new.get(key)} now)" for key in _ENVIRONMENT
               if old.get(key) != new.get(key)]
    reasons += [f"target {key} differs ({old['target'].get(key)} then, {new['target'].get(key)} now)"
                for key in _TARGET_KEYS if old.get("target", {}).get(key) != new.get("target", {}).get(key)]
    reasons += [f"option {key} differs ({entry_at(old['options'], key)} then, {entry_at(new['options'], key)} now)"
                for key in differing_keys(old.get("options") or {}, new.get("options") or {})]
    if old.get("records_applied") != new.get("records_applied"):
        reasons.append("the applied tuning records differ")
    if old.get("validation_inputs") != new.get("validation_inputs"):
        reasons.append("the validation inputs differ (give the rebuild the original's --validation-inputs)")
    return "; ".join(reasons) or ("same compiler, LLVM, target, options and records: the build is not deterministic "
                                  "(a bug: please report it)")


def entry_at(tree: Mapping[str, Any], dotted: str) -> Any:
    """The entry at a dotted path of nested dicts (None where it is missing)."""
    for part in dotted.split("."):
        tree = tree.get(part) if isinstance(tree, Mapping) else None
    return tree


def differing_keys(old: Mapping[str, Any], new: Mapping[str, Any], prefix: str = "") -> list[str]:
    """The dotted paths of the entries of two nested dicts that differ."""
    keys = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            keys += differing_keys(a, b, f"{prefix}{key}.")
        elif a != b:
            keys.append(prefix + key)
    return keys


def compare(original: Mapping[str, bytes], rebuilt: Mapping[str, bytes]) -> RebuildResult:
    """Library, weights, header byte for byte; metadata key by key (it holds no paths or timestamps)."""
    old_meta, new_meta = json.loads(original[METADATA]), json.loads(rebuilt[METADATA])
    why = _why(manifest_of(old_meta, "the artifact"), manifest_of(new_meta, "the rebuild"))
    result = RebuildResult()
    for part, name in (("library", old_meta["library"]), ("weights", WEIGHTS), ("header", old_meta["header"])):
        a, b = original.get(name), rebuilt.get(name)
        result.parts[part] = a == b
        if a != b:
            detail = (f"{name}: {len(a or b'')} bytes sha256 {hashlib.sha256(a or b'').hexdigest()[:12]} then, "
                      f"{len(b or b'')} bytes sha256 {hashlib.sha256(b or b'').hexdigest()[:12]} now")
            result.differences.append(Difference(part, detail, why))
    keys = differing_keys(old_meta, new_meta)
    result.parts["metadata"] = not keys
    if keys:
        result.differences.append(Difference("metadata", f"keys {', '.join(keys[:8])}", why))
    return result


def rebuild(artifact: "str | Path", model: "str | Path | bytes", *, validation_inputs: Any = None,
            calibration: "str | Path | None" = None, progress=None) -> RebuildResult:
    """Compile `model` again with the artifact's manifest (its target, options and applied tuning records; no
    records database, no tuning) and compare the result with the artifact; an int8 artifact quantizes `model` again
    on its `calibration` samples (their sha256 is checked). The caller saves or cleans up `result.artifact`."""
    from ..tune.options import TuningOptions
    from .pipeline import compile as compile_model

    original = read_members(artifact)
    if METADATA not in original:
        raise ArtifactError(f"{artifact} is not a Kiln artifact: it has no {METADATA}")
    manifest = manifest_of(json.loads(original[METADATA]), str(artifact))
    data = model if isinstance(model, bytes) else Path(model).read_bytes()
    sha = hashlib.sha256(data).hexdigest()
    if sha != manifest["model_sha256"]:
        raise ManifestError(f"the model (sha256 {sha[:12]}) is not the one the artifact was built from "
                            f"(sha256 {manifest['model_sha256'][:12]})")
    # The manifest's options are compile()'s keywords (what a newer option adds comes along), three in JSON form.
    options = dict(manifest["options"])
    tuning = options.pop("tuning", None)
    tolerance = options.pop("tolerance", None)
    wanted_calibration = options.pop("calibration_sha256", None)
    if wanted_calibration is not None:
        if calibration is None:
            raise ManifestError(f"{artifact} is an int8 build: rebuilding it needs its calibration samples "
                                f"(--calibration DATA.npz, sha256 {wanted_calibration[:12]})")
        got = hashlib.sha256(Path(calibration).read_bytes()).hexdigest()
        if got != wanted_calibration:
            raise ManifestError(f"the calibration samples (sha256 {got[:12]}) are not the ones the artifact was "
                                f"quantized on (sha256 {wanted_calibration[:12]})")
        options["calibration"] = str(calibration)
    built = compile_model(data, target=manifest["target"]["spec"], **{
        **options, "input_shapes": {k: tuple(v) for k, v in options.get("input_shapes", {}).items()} or None,
        "tuning": TuningOptions(**tuning) if tuning is not None else None,
        "tolerance": tuple(tolerance) if tolerance else None, "pinned_records": manifest.get("records_applied") or [],
        "validation_inputs": validation_inputs, "benchmark": False, "progress": progress})
    return compare_with_artifact(original, built)


def compare_with_artifact(original: "str | Path | Mapping[str, bytes]", built) -> RebuildResult:
    """An artifact (a `.tar.gz`, or its members) against a fresh build (a core Artifact, not yet saved)."""
    if not isinstance(original, Mapping):
        original = read_members(original)
    rebuilt = {METADATA: json.dumps(built.metadata).encode(), WEIGHTS: (built.directory / WEIGHTS).read_bytes(),
               built.metadata["library"]: built.library.read_bytes(),
               built.metadata["header"]: (built.directory / built.metadata["header"]).read_bytes()}
    result = compare(original, rebuilt)
    result.artifact = built
    return result

