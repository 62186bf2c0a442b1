"""The service's settings, read from `KILN_*` environment variables (pydantic-settings)."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Optional

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Defaults make `kiln serve` self-contained: everything lives under `data_dir` in SQLite files."""

    model_config = SettingsConfigDict(env_prefix="KILN_", extra="ignore")

    data_dir: Path = Path("kiln-data")
    # Unset URLs default to SQLite files in data_dir: the embedded, no-server configuration.
    database_url: Optional[str] = None
    broker_url: Optional[str] = None
    result_backend: Optional[str] = None

    # 1 GiB; at most 2 GiB, protobuf's own limit for one file (larger models need external data,
    # which a single-file upload cannot carry).
    max_upload_bytes: int = Field(default=1 << 30, gt=0, le=2 << 30)
    preflight_timeout_s: float = Field(default=120.0, gt=0)
    job_soft_time_limit_s: int = Field(default=3600, gt=0)
    job_hard_time_limit_s: int = Field(default=3720, gt=0)
    job_max_attempts: int = Field(default=3, ge=1)
    max_tuning_trials: int = Field(default=20000, ge=0)
    # Tuning records every job reads and extends (keyed by workload, target, compiler version).
    records_file: Optional[Path] = None
    # A file tuning jobs lock while they time a kernel: set it (a path every worker on this machine
    # sees) when several workers tune on one machine, so their timings do not disturb each other.
    timing_lock_file: Optional[Path] = None
    # Device kinds some worker measures on (`kiln worker` serves measure.<kind> for its own hardware);
    # None: this machine's. A tuning job for another kind would wait forever, so it is refused.
    measure_kinds: Optional[list[str]] = None
    # A tuning compile for a CPU this machine is not (aarch64, the Arm presets) sends its candidates to
    # measure.<kind> in batches; one unanswered this long is sent again once, then counts as failed, and a
    # round with no answer at all fails the job (its measuring workers are gone).
    measure_batch_timeout_s: float = Field(default=300.0, gt=0)
    # A tensor (declared, inferred, or an input fixed by input_shapes) larger than this is refused with a
    # 422 before anything allocates it: a 1 KB model may ask for a ConstantOfShape of 10^12 elements.
    max_tensor_bytes: int = Field(default=4 << 30, gt=0)
    preflight_concurrency: int = Field(default=2, ge=1)            # model checks at once; more uploads wait
    # The compile runs in a child with these limits, so a runaway in generated code fails only its job.
    job_memory_limit_bytes: int = Field(default=16 << 30, gt=0)
    job_file_limit_bytes: int = Field(default=8 << 30, gt=0)
    # Per-user limits (429 with Retry-After): requests per minute, and work in flight at once.
    uploads_per_minute: int = Field(default=30, ge=1)
    jobs_per_minute: int = Field(default=60, ge=1)
    max_active_jobs: int = Field(default=20, ge=1)                 # queued + running, per user
    max_concurrent_uploads: int = Field(default=4, ge=1)           # uploads streaming or being checked, per user
    compile_threads: Optional[int] = Field(default=None, ge=1)     # None: all cores
    # The compiled-kernel cache every job shares (core/codegen/kernel_cache.py): a directory or "off";
    # None: data_dir/kernel-cache.
    kernel_cache: Optional[str] = None
    events_poll_s: float = Field(default=0.25, gt=0)
    # A running job's worker writes a heartbeat; a job silent for stale_after_s lost its worker
    # (killed, machine gone) and is queued again by the API's sweeper, up to job_max_attempts.
    heartbeat_s: float = Field(default=5.0, gt=0)
    stale_after_s: float = Field(default=45.0, gt=0)
    sweep_interval_s: float = Field(default=10.0, gt=0)
    # `kiln serve` stopping (Ctrl+C, SIGTERM): how long its embedded worker may finish running jobs before it is
    # killed and they are queued again.
    shutdown_grace_s: float = Field(default=20.0, ge=0)

    @property
    def models_dir(self) -> Path:
        return self.data_dir / "models"

    @property
    def jobs_dir(self) -> Path:
        return self.data_dir / "jobs"

    @property
    def tmp_dir(self) -> Path:
        return self.data_dir / "tmp"

    @property
    def kernel_cache_setting(self) -> str:
        """What the workers' compiles use as their kernel cache: a directory, or "off"."""
        return self.kernel_cache or str(self.data_dir / "kernel-cache")

    @property
    def records(self) -> Path:
        return self.records_file or self.data_dir / "tuning-records.jsonl"

    @property
    def database(self) -> str:
        return self.database_url or f"sqlite:///{self.data_dir.absolute() / 'kiln.db'}"

    @property
    def broker(self) -> str:
        return self.broker_url or f"sqla+sqlite:///{self.data_dir.absolute() / 'broker.db'}"

    @property
    def results(self) -> str:
        return self.result_backend or f"db+sqlite:///{self.data_dir.absolute() / 'results.db'}"

    def ensure_dirs(self) -> None:
        for folder in (self.data_dir, self.models_dir, self.jobs_dir, self.tmp_dir):
            folder.mkdir(parents=True, exist_ok=True)


@lru_cache
def get_settings() -> Settings:
    return Settings()
