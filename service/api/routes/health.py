"""GET /health: liveness for load balancers and `kiln submit`, no auth; says what is reachable and who works."""
from __future__ import annotations

from fastapi import APIRouter, Request, Response, status
from sqlalchemy import func, select, text
from starlette.concurrency import run_in_threadpool

from core._version import __version__
from service.core.settings import Settings
from service.core.tables import Job
from service.core.worker_beats import workers_seen

from ..deps import SettingsDep

router = APIRouter(tags=["health"])

_CHECK_TIMEOUT_S = 2.0


def _database(request: Request) -> dict:
    try:
        with request.app.state.db.session() as db:
            db.execute(text("SELECT 1"))
            queued = db.scalar(select(func.count()).select_from(Job).where(Job.status == "queued"))
        return {"reachable": True, "queued_jobs": int(queued or 0)}
    except Exception as err:  # noqa: BLE001 (whatever the driver raises: the answer is "unreachable")
        return {"reachable": False, "error": f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"}


def _broker(settings: Settings) -> dict:
    from kombu import Connection

    transport = settings.broker.split("://")[0]
    try:
        with Connection(settings.broker, connect_timeout=_CHECK_TIMEOUT_S) as connection:
            connection.ensure_connection(max_retries=1, timeout=_CHECK_TIMEOUT_S)
        return {"reachable": True, "transport": transport}
    except Exception as err:  # noqa: BLE001
        return {"reachable": False, "transport": transport, "error": f"{type(err).__name__}: {str(err)[:200]}"}


@router.get("/health", responses={503: {"description": "the database or the broker is unreachable"}})
async def health(request: Request, response: Response, settings: SettingsDep) -> dict:
    database = await run_in_threadpool(_database, request)
    broker = await run_in_threadpool(_broker, settings)
    workers = await run_in_threadpool(workers_seen, settings.data_dir)
    ok = database["reachable"] and broker["reachable"]
    if not ok:
        response.status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    # What this server offers, so that clients can adapt their forms before a request is refused.
    return {"status": "ok" if ok else "unavailable", "version": __version__,
            "database": database, "broker": broker, "workers": {"seen": len(workers), "workers": workers},
            "features": {"tuning": True, "max_tuning_trials": settings.max_tuning_trials,
                         "max_upload_bytes": settings.max_upload_bytes}}
