"""Celery tasks. Each takes ids only and re-reads the state it needs from the database."""
from __future__ import annotations

import os
from functools import lru_cache

import core.driver.pipeline  # noqa: F401 - loaded before the pool forks, so no job pays for importing the compiler

from service.core.db import Database
from service.core.settings import get_settings

from .celery_app import app, sigterm_allowed
from .compile_job import run_compile_job


@lru_cache
def _database() -> Database:
    # Created lazily in each (forked) worker process: SQLite connections must not cross a fork.
    database = Database(get_settings().database)
    database.upgrade_schema()
    return database


@app.task(name="kiln.compile", bind=True)
def compile_model(self, job_id: str) -> str:
    # The pool process's pid, so that an operator (or a fault test) can tell which process runs a job.
    with sigterm_allowed():
        return run_compile_job(job_id, get_settings(), _database(), worker=f"{self.request.hostname} pid {os.getpid()}")
