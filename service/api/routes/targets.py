"""GET /targets: what a job may compile for, and whether this server's hardware runs it."""
from __future__ import annotations

from fastapi import APIRouter

from core.backends import get_backend
from core.target import all_targets

from ..deps import UserDep
from ..schemas.targets import TargetOut

router = APIRouter(tags=["targets"])


@router.get("/targets", response_model=list[TargetOut])
def list_targets(_user: UserDep) -> list[TargetOut]:
    # runs_on_host: a GPU target where the GPU is
    return [TargetOut(**t.describe(), unsupported_ops=sorted(get_backend(t).unsupported_ops)) for t in all_targets()]
