"""The FastAPI application: `/api/v1` routers, the web UI as static files, OpenAPI at `/docs`."""
from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Callable, Optional

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from core._version import __version__
from service.core.db import Database
from service.core.settings import Settings, get_settings

from .enqueue import celery_enqueue
from .errors import add_error_handlers
from .rate_limits import Limiter
from .routes import health, jobs, models, targets
from .sweeper import sweep_forever

WEB_DIR = Path(__file__).resolve().parents[2] / "web"
API_PREFIX = "/api/v1"


def create_app(settings: Optional[Settings] = None, enqueue: Optional[Callable[[str], None]] = None) -> FastAPI:
    """The app on `settings` (default: from the environment); `enqueue(job_id)` sends a job to the workers
    (default: over Celery; tests capture the jobs instead)."""
    settings = settings or get_settings()
    settings.ensure_dirs()
    database = Database(settings.database)
    database.create_tables()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        # Through app.state, so that the sweeper uses whatever enqueue the app holds now.
        sweeper = asyncio.create_task(sweep_forever(database, settings, lambda job_id: app.state.enqueue(job_id)))
        yield
        sweeper.cancel()
        database.dispose()

    app = FastAPI(title="Kiln", version=__version__, lifespan=lifespan,
                  description="Compile ONNX models into native deployment artifacts, validated against ONNX Runtime.")
    app.state.settings = settings
    app.state.db = database
    app.state.enqueue = enqueue or celery_enqueue(settings, database)
    app.state.limiter = Limiter()
    # Each pre-flight check is a child process importing ONNX: bound how many run at once, not who may upload.
    app.state.preflight_slots = asyncio.Semaphore(settings.preflight_concurrency)

    add_error_handlers(app, database, API_PREFIX, open_paths=frozenset({f"{API_PREFIX}/health"}))
    for module in (health, targets, models, jobs):
        app.include_router(module.router, prefix=API_PREFIX)
    if WEB_DIR.is_dir():
        app.mount("/", StaticFiles(directory=WEB_DIR, html=True), name="web")
    return app
