"""GET /targets: what a job may compile for, and whether this server's hardware runs it."""
from __future__ import annotations

from fastapi import APIRouter

from core.target import all_targets

from ..deps import UserDep
from ..schemas.targets import TargetOut

router = APIRouter(tags=["targets"])


@router.get("/targets", response_model=list[TargetOut])
def list_targets(_user: UserDep) -> list[TargetOut]:
    from service.core.queues import has_nvidia_gpu

    gpu = has_nvidia_gpu()  # a GPU target runs here when this server has an NVIDIA GPU and driver
    return [TargetOut(**{**t.describe(), **({"runs_on_host": gpu} if t.kind == "cuda" else {})}) for t in all_targets()]
