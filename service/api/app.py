"""The FastAPI application: `/api/v1` routers, the web UI as static files, OpenAPI at `/docs`."""
from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Callable, Optional

from fastapi import FastAPI, HTTPException, Request, status
from fastapi.exception_handlers import http_exception_handler, request_validation_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from fastapi.staticfiles import StaticFiles

import core
from core.errors import KilnError

from .auth import bearer_token, user_for_token
from ..core.db import Database
from ..core.tables import Job
from .rate_limits import Limiter
from .routes import health, jobs, models, targets
from ..core.settings import Settings, get_settings
from .sweeper import sweep_forever

WEB_DIR = Path(__file__).resolve().parents[2] / "web"
API_PREFIX = "/api/v1"


def celery_enqueue(settings: Settings, database: Database) -> Callable[[str], None]:
    """Send compile jobs to the Celery broker by task name (the API never imports the tasks), on the
    queue the job needs: `compile`, or `measure.<device kind>` when it tunes."""
    from ..core.celery import create_celery
    from ..core.queues import job_queue

    celery = create_celery(settings)

    def enqueue(job_id: str) -> None:
        with database.session() as db:
            job = db.get(Job, job_id)
            queue = job_queue(job.target, int(job.tuning.get("trials", 0)))
        celery.send_task("kiln.compile", args=[job_id], queue=queue, task_id=f"compile-{job_id}")
    return enqueue


def create_app(settings: Optional[Settings] = None, enqueue: Optional[Callable[[str], None]] = None) -> FastAPI:
    settings = settings or get_settings()
    settings.ensure_dirs()
    database = Database(settings.database)
    database.create_tables()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        sweeper = asyncio.create_task(sweep_forever(database, settings, lambda job_id: app.state.enqueue(job_id)))
        yield
        sweeper.cancel()
        database.dispose()

    app = FastAPI(title="Kiln", version=core.__version__, lifespan=lifespan,
                  description="Compile ONNX models into native deployment artifacts, validated against ONNX Runtime.")
    app.state.settings = settings
    app.state.db = database
    app.state.enqueue = enqueue or celery_enqueue(settings, database)
    app.state.limiter = Limiter()
    # Each pre-flight check is a child process importing ONNX: bound how many run at once, not who may upload.
    app.state.preflight_slots = asyncio.Semaphore(settings.preflight_concurrency)

    @app.exception_handler(KilnError)
    async def kiln_error(_request: Request, err: KilnError) -> JSONResponse:
        return JSONResponse({"detail": {"message": str(err), "code": err.code}},
                            status_code=status.HTTP_422_UNPROCESSABLE_CONTENT)

    def authenticated(request: Request) -> bool:
        try:
            token = bearer_token(request)
        except HTTPException:
            return False
        with database.session() as db:
            return user_for_token(db, token) is not None

    async def unauthorized_first(request: Request) -> Optional[JSONResponse]:
        # FastAPI parses a JSON body before it runs the auth dependency: without a valid token the
        # answer is still 401, so that nothing about the API is learned without one.
        path = request.url.path
        if path.startswith(API_PREFIX) and path != f"{API_PREFIX}/health" \
                and not await run_in_threadpool(authenticated, request):
            return JSONResponse({"detail": "missing, invalid or revoked token: send `Authorization: Bearer <token>`"},
                                status_code=status.HTTP_401_UNAUTHORIZED, headers={"WWW-Authenticate": "Bearer"})
        return None

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, err: RequestValidationError) -> JSONResponse:
        return await unauthorized_first(request) or await request_validation_exception_handler(request, err)

    @app.exception_handler(StarletteHTTPException)  # FastAPI raises Starlette's for an unparsable body
    async def http_error(request: Request, err: StarletteHTTPException) -> JSONResponse:
        if err.status_code == status.HTTP_400_BAD_REQUEST:  # FastAPI's "error parsing the body"
            refused = await unauthorized_first(request)
            if refused is not None:
                return refused
        return await http_exception_handler(request, err)

    for module in (health, targets, models, jobs):
        app.include_router(module.router, prefix=API_PREFIX)
    if WEB_DIR.is_dir():
        app.mount("/", StaticFiles(directory=WEB_DIR, html=True), name="web")
    return app
