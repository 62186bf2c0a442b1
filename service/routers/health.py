"""GET /health: liveness for load balancers and `kiln submit`, no auth."""
from __future__ import annotations

from fastapi import APIRouter
from sqlalchemy import text

import core

from ..deps import DbDep

router = APIRouter(tags=["health"])


@router.get("/health")
def health(db: DbDep) -> dict:
    db.execute(text("SELECT 1"))
    return {"status": "ok", "version": core.__version__}
