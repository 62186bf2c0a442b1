"""Schemas of the models resource (uploaded ONNX files)."""
from __future__ import annotations

from datetime import datetime
from typing import Any, Optional, Union

from pydantic import BaseModel

from service.core.tables import as_utc


class TensorInfo(BaseModel):
    name: str
    shape: Optional[list[Union[int, str]]]  # a string is a symbolic dimension
    dtype: str


class ModelOut(BaseModel):
    id: str
    filename: str
    sha256: str
    size_bytes: int
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    opsets: dict[str, int]
    symbolic_inputs: list[str]
    created_at: datetime
    deduplicated: bool = False

    @classmethod
    def of(cls, row: Any, deduplicated: bool = False) -> "ModelOut":
        s = row.summary
        return cls(id=row.id, filename=row.filename, sha256=row.sha256, size_bytes=row.size_bytes,
                   inputs=s["inputs"], outputs=s["outputs"], opsets=s.get("opsets", {}),
                   symbolic_inputs=s.get("symbolic_inputs", []), created_at=as_utc(row.created_at),
                   deduplicated=deduplicated)
