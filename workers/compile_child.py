"""What runs inside the sandboxed compile child: core.compile into a staging folder, and publishing it after.

The child writes only under its staging folder (its TMPDIR too), so a killed or failed attempt leaves
nothing a user could download, and the next attempt removes what it left.
"""
from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Optional

from core.errors import KilnError
from core.tune.options import TuningOptions
from core.tune.remote import RemoteMeasurement
from core.process.limits import Limits
from service.core import storage
from service.core.settings import Settings

from .production import add_production_sections

OUTPUTS = (storage.REPORT_JSON, storage.REPORT_HTML, storage.ARTIFACT)  # the artifact last: it marks completion
_DISK_FULL = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)


class OutputWriteError(KilnError):
    """The job's outputs could not be written (disk full, file size limit)."""

    code = "storage_full"


def staging_dir(settings: Settings, job_id: str) -> Path:
    return settings.tmp_dir / f"job-{job_id}"


def finish_tuning_flag(staging: Path) -> Path:
    """The file whose presence tells a tuning child to stop measuring and build with the best so far
    (written by the worker when the user asks to finish now; the child cannot read the database)."""
    return staging / "finish-tuning"


def staged_records(staging: Path) -> Path:
    """Where the child appends its tuning records; the worker publishes them to the shared records while the job
    stands (workers.compile_job.publish_records), never after it was cancelled."""
    return staging / "records.jsonl"


def remove_staging(settings: Settings, job_id: str) -> None:
    shutil.rmtree(staging_dir(settings, job_id), ignore_errors=True)


def compile_limits(settings: Settings) -> Limits:
    # GPU compiles keep the address-space limit: measured on an H100 (80 GB), core.compile with cuda
    # validation ran in a sandbox child under the default 16 GiB as well as without a limit.
    return Limits(wall_s=settings.job_soft_time_limit_s, memory_bytes=settings.job_memory_limit_bytes,
                  file_bytes=settings.job_file_limit_bytes, open_files=4096)


def tuning_options(tuning: Optional[dict], records: str, timing_lock: Optional[str] = None,
                   report: Optional[Callable] = None, finish_flag: Optional[Path] = None,
                   remote: Optional[RemoteMeasurement] = None, records_out: Optional[Path] = None) -> TuningOptions:
    """A job's tuning: every job reads the shared records (cache hits cost no trials); a job with a budget tunes,
    tells `report` its plan ("tuning_plan") and every batch ("tuning"), and stops early once `finish_flag` exists."""
    tuning = tuning or {}
    trials = int(tuning.get("trials") or 0)
    tells = report is not None and trials > 0  # a job without a budget only reads the records: nothing to show live
    plan = (lambda status: report("tuning_plan", status)) if tells else None
    batch = (lambda status: report("tuning", status)) if tells else None
    return TuningOptions(trials=trials, time_budget_s=tuning.get("time_budget_s") or None,
                         records=records, records_out=str(records_out) if records_out else None,
                         timing_lock=timing_lock, on_plan=plan, on_batch=batch,
                         should_stop=finish_flag.exists if finish_flag is not None else None, remote=remote)


def compile_into(report: Callable, model_path: str, staging: str, *, target: str, opt_level: int,
                 input_shapes: Optional[dict], threads: Optional[int], max_tensor_bytes: int,
                 tuning: Optional[dict] = None, records: Optional[str] = None,
                 timing_lock: Optional[str] = None, options: Optional[dict] = None,
                 remote: Optional[RemoteMeasurement] = None, kernel_cache: Optional[str] = None) -> dict:
    """In the child: compile, then write the artifact and both reports into `staging`. `options`: the
    job's compile options beyond the arguments (Job.options: the artifact `name`, ...). `remote`: where the
    tuning's measurements go when they cannot run here (workers.measure_dispatch). `kernel_cache`: the compiled-kernel
    cache every job of this machine shares (a directory, or "off")."""
    options = options or {}
    import core
    from core.frontend import import_onnx
    from core.frontend.converters.control_flow_runtime import max_trip_count
    from core.frontend.inspect import check_graph_sizes
    from core.driver.shape_ranges import largest_shapes
    from core.frontend.model_loading import SizeBudget

    folder = Path(staging)
    folder.mkdir(parents=True, exist_ok=True)
    os.environ["TMPDIR"] = str(folder)  # build folders and the linker's temp files go where we clean
    tempfile.tempdir = None
    budget = SizeBudget(max_tensor_bytes=max_tensor_bytes, max_weights_bytes=max(max_tensor_bytes, 8 << 30))
    try:
        quantization = options.get("quantization") if options.get("precision") == "int8" else None
        if input_shapes:  # the pre-flight could not size a symbolic model; with the job's shapes it can
            with max_trip_count(options.get("max_trip_count")):
                check_graph_sizes(import_onnx(model_path, input_shapes=largest_shapes(input_shapes)), budget)
        artifact = core.compile(model_path, target=target, opt_level=opt_level, input_shapes=input_shapes,
                                tuning=tuning_options(tuning, records, timing_lock, report, finish_tuning_flag(folder),
                                                      remote, staged_records(folder)) if records else None,
                                progress=lambda stage, done, detail: report("progress", stage, done, detail),
                                threads=threads, name=options.get("name"), validate=options.get("validate", True),
                                tolerance=options.get("tolerance"), bisect=options.get("bisect", False),
                                validation_inputs=options.get("validation_inputs"),
                                precision=options.get("precision"),
                                calibration=quantization["calibration"] if quantization else None,
                                quantization=quantization,
                                pinned_records=(options.get("rebuild") or {}).get("records_applied"),
                                kernel_cache=kernel_cache, quick=bool(options.get("quick")),
                                max_trip_count=options.get("max_trip_count"))
        if artifact.compiled_model is not None and quantization:  # a gate times the QDQ model that was compiled
            model_path = str(folder / "model_int8.onnx")
            Path(model_path).write_bytes(artifact.compiled_model)
        add_production_sections(artifact, report, model_path, options, input_shapes, threads)
        try:
            out = folder / "out"
            artifact.save(out / storage.ARTIFACT)
            storage.write_atomic(out / storage.REPORT_JSON, json.dumps(artifact.report, indent=2))
            storage.write_atomic(out / storage.REPORT_HTML, artifact.report_html)
        finally:
            artifact.cleanup()
    except OSError as err:
        if err.errno in _DISK_FULL:
            raise OutputWriteError(f"the compile could not write its outputs: {os.strerror(err.errno)} "
                                   "(the server's disk is full or the job's file size limit was reached)") from None
        raise
    return {"outputs": [str(out / name) for name in OUTPUTS]}


def publish(staging: Path, job_folder: Path) -> None:
    """Moves the outputs into the job's folder, one rename each; a failure removes whatever was moved."""
    job_folder.mkdir(parents=True, exist_ok=True)
    moved = []
    try:
        for name in OUTPUTS:
            os.replace(staging / "out" / name, job_folder / name)
            moved.append(name)
    except OSError:
        for name in moved:
            (job_folder / name).unlink(missing_ok=True)
        raise
