"""A job's production checks in the compile child: the rebuild comparison and the CI gate against a baseline build."""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional


def add_production_sections(artifact, report: Callable, model_path: str, options: dict,
                            input_shapes: Optional[dict], threads: Optional[int]) -> None:
    """The report's `rebuild` section (Job.options["rebuild"]: the artifact this job rebuilds) and `baseline`
    section (Job.options["baseline"]: the build this one is gated against), before the HTML is rendered."""
    from core.driver.stages import Stage
    from core.errors import KilnError
    from core.runtime.loader import KilnRuntimeError

    rebuild = options.get("rebuild")
    if rebuild:
        from core.driver.rebuild import compare_with_artifact

        original = Path(rebuild["artifact"])
        if not original.is_file():
            artifact.report["rebuild"] = {"of": rebuild["job_id"], "identical": False,
                                          "summary": f"the artifact of job {rebuild['job_id']} is gone: nothing to compare"}
        else:
            result = compare_with_artifact(original, artifact)
            artifact.report["rebuild"] = {"of": rebuild["job_id"], **result.as_report()}
    baseline = options.get("baseline")
    if baseline:
        from core.driver.gate import GatePolicy, compare_with_baseline

        label = f"baseline job {baseline['job_id']}"
        if not Path(baseline["artifact"]).is_file():
            artifact.report["baseline"] = {"baseline": label, "passed": False, "verdict": "fail",
                                           "message": f"gate failed: the artifact of {label} is gone"}
            return
        report("progress", Stage.PACKAGE, Stage.PACKAGE.start, "timing against the baseline")
        try:
            artifact.report["baseline"] = compare_with_baseline(
                artifact.directory, baseline["artifact"], model_path, baseline_label=label, threads=threads,
                input_shapes={k: tuple(v) for k, v in (input_shapes or {}).items()} or None,
                policy=GatePolicy(baseline["max_slowdown"], baseline["max_error_growth"]),
                validation_inputs=options.get("validation_inputs"))
        except (KilnError, KilnRuntimeError) as err:  # e.g. a target this worker cannot run: no timing, no pass
            artifact.report["baseline"] = {"baseline": label, "passed": False, "verdict": "fail",
                                           "message": f"gate failed: the builds could not be timed here: {err}"}
