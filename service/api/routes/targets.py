"""GET /targets: what a job may compile for, and whether this server's hardware runs it."""
from __future__ import annotations

from fastapi import APIRouter

from core.target import all_targets

from ..deps import UserDep
from ..schemas.targets import TargetOut

router = APIRouter(tags=["targets"])


@router.get("/targets", response_model=list[TargetOut])
def list_targets(_user: UserDep) -> list[TargetOut]:
    return [TargetOut(**t.describe()) for t in all_targets()]  # runs_on_host: a GPU target where the GPU is
