"""GET /health: liveness for load balancers and `kiln submit`, no auth."""
from __future__ import annotations

from fastapi import APIRouter
from sqlalchemy import text

from core._version import __version__

from ..deps import DbDep, SettingsDep

router = APIRouter(tags=["health"])


@router.get("/health")
def health(db: DbDep, settings: SettingsDep) -> dict:
    db.execute(text("SELECT 1"))
    # What this server offers, so that clients can adapt their forms before a request is refused.
    return {"status": "ok", "version": __version__,
            "features": {"tuning": True, "max_tuning_trials": settings.max_tuning_trials,
                         "max_upload_bytes": settings.max_upload_bytes}}
