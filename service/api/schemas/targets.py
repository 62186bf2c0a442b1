"""Schemas of the targets resource."""
from __future__ import annotations

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
