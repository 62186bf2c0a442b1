"""The service's settings, read from `KILN_*` environment variables (pydantic-settings).

Defaults make `kiln serve` self-contained: everything lives under `data_dir` in SQLite files.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Optional

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="KILN_", extra="ignore")

    data_dir: Path = Path("kiln-data")
    # Unset URLs default to SQLite files in data_dir: the embedded, no-server configuration.
    database_url: Optional[str] = None
    broker_url: Optional[str] = None
    result_backend: Optional[str] = None

    max_upload_bytes: int = Field(default=1 << 30, gt=0)          # 1 GiB
    preflight_timeout_s: float = Field(default=120.0, gt=0)
    job_soft_time_limit_s: int = Field(default=3600, gt=0)
    job_hard_time_limit_s: int = Field(default=3720, gt=0)
    job_max_attempts: int = Field(default=3, ge=1)
    max_tuning_trials: int = Field(default=20000, ge=0)
    compile_threads: Optional[int] = Field(default=None, ge=1)     # None: all cores
    events_poll_s: float = Field(default=0.25, gt=0)
    # A running job's worker writes a heartbeat; a job silent for stale_after_s lost its worker
    # (killed, machine gone) and is queued again by the API's sweeper, up to job_max_attempts.
    heartbeat_s: float = Field(default=5.0, gt=0)
    stale_after_s: float = Field(default=45.0, gt=0)
    sweep_interval_s: float = Field(default=10.0, gt=0)

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
