"""Fixtures of the shape-range tests."""
from __future__ import annotations

import pytest


@pytest.fixture
def one_compiled_shape(monkeypatch):
    """No default specializations nor length classes: the upper bound alone serves every size (what they speed up)."""
    monkeypatch.setattr("core.driver.shape_plan.DEFAULT_SHAPES", 1)
    monkeypatch.setattr("core.driver.shape_plan.LENGTH_CLASSES", 0)
