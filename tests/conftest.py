"""Shared fixtures: where the reference models live, and ONNX Runtime as the reference."""
from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MODELS_DIR = ROOT.parent / "shared" / "models"


@pytest.fixture(scope="session")
def models_dir() -> Path:
    if not MODELS_DIR.is_dir():
        pytest.skip("../shared/models is not present")
    return MODELS_DIR
