"""The FastAPI application: `/api/v1` routers, the web UI as static files, OpenAPI at `/docs` and `/redoc` (offline)."""
from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Callable, Optional

from fastapi import FastAPI
from fastapi_offline import FastAPIOffline
from fastapi.staticfiles import StaticFiles

from core._version import __version__
from service.core.db import Database
from service.core.settings import Settings, get_settings

from .enqueue import celery_enqueue
from .errors import add_error_handlers
from .rate_limits import Limiter
from .routes import builds, health, jobs, models, targets
from .sweeper import sweep_forever
from .uploads import clear_abandoned_uploads

WEB_DIR = Path(__file__).resolve().parents[2] / "web"
API_PREFIX = "/api/v1"
DOCS_PAGES = frozenset({"/docs", "/redoc"})
DOCS_CSP = ("default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
            "img-src 'self' data:; font-src 'self' data:; worker-src 'self' blob:; connect-src 'self'")


def create_app(settings: Optional[Settings] = None, enqueue: Optional[Callable[[str], None]] = None) -> FastAPI:
    """The app on `settings` (default: from the environment); `enqueue(job_id)` sends a job to the workers
    (default: over Celery; tests capture the jobs instead)."""
    settings = settings or get_settings()
    settings.ensure_dirs()
    clear_abandoned_uploads(settings.tmp_dir)
    database = Database(settings.database)
    database.upgrade_schema()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        # Through app.state, so that the sweeper uses whatever enqueue the app holds now.
        sweeper = asyncio.create_task(sweep_forever(database, settings, lambda job_id: app.state.enqueue(job_id)))
        yield
        sweeper.cancel()
        database.dispose()

    # /docs and /redoc from assets of an installed package, not a CDN: a self-hosted server may have no internet.
    app = FastAPIOffline(title="Kiln", version=__version__, lifespan=lifespan, static_url="/docs-assets",
                         description="Compile ONNX models into native deployment artifacts, validated against ONNX "
                                     "Runtime. Errors answer `{\"detail\": {\"code\", \"message\", ...}}`.")
    app.state.settings = settings
    app.state.db = database
    app.state.enqueue = enqueue or celery_enqueue(settings, database)
    app.state.limiter = Limiter()
    # Each pre-flight check is a child process importing ONNX: bound how many run at once, not who may upload.
    app.state.preflight_slots = asyncio.Semaphore(settings.preflight_concurrency)

    add_error_handlers(app, database, API_PREFIX, open_paths=frozenset({f"{API_PREFIX}/health"}))

    @app.middleware("http")
    async def docs_stay_on_this_server(request, call_next):
        # The docs pages' own scripts are inline; everything else they load must come from here (ReDoc
        # links a CDN logo otherwise): an air-gapped server's docs then look the same as a connected one's.
        response = await call_next(request)
        if request.url.path in DOCS_PAGES:
            response.headers["Content-Security-Policy"] = DOCS_CSP
        return response

    for module in (health, targets, models, jobs, builds):
        app.include_router(module.router, prefix=API_PREFIX)
    if WEB_DIR.is_dir():
        app.mount("/", StaticFiles(directory=WEB_DIR, html=True), name="web")
    return app
