"""GET /targets: what a job may compile for, and whether this server's hardware runs it."""
from __future__ import annotations

from fastapi import APIRouter

from core.backends import all_targets_with_backends

from ..deps import UserDep
from ..schemas.targets import TargetOut

router = APIRouter(tags=["targets"])


@router.get("/targets", response_model=list[TargetOut])
def list_targets(_user: UserDep) -> list[TargetOut]:
    # runs_on_host: a GPU target where the GPU is
    return [TargetOut(**backend.describe(t), unsupported_ops=sorted(backend.unsupported_ops))
            for t, backend in all_targets_with_backends()]
