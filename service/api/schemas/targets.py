"""Schemas of the targets resource."""
from __future__ import annotations

from typing import Optional

from pydantic import BaseModel


class TargetOut(BaseModel):
    name: str
    kind: str
    triple: str
    cpu: str
    features: str
    vector_bits: int
    description: str
    runs_on_host: bool
    unsupported_ops: list[str] = []  # ops this target cannot compile (a job with them is refused)
    emulator: Optional[str] = None  # what validates its artifacts here when the hardware cannot (qemu-aarch64)
