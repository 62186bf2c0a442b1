"""DEBUG=N is read from the environment once, by core/debug.py alone; debug_level overrides it for a block."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from core.debug import DEBUG, debug_level

ROOT = Path(__file__).resolve().parents[2]


def level_seen(environment_debug: str | None) -> str:
    """The level a fresh interpreter reads, then again after DEBUG changes in its environment."""
    env = {k: v for k, v in os.environ.items() if k != "DEBUG"}
    if environment_debug is not None:
        env["DEBUG"] = environment_debug
    code = ("import os; from core.debug import DEBUG; first = DEBUG.get(); os.environ['DEBUG'] = '4';"
            "print(first, DEBUG.get())")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, check=True)
    return proc.stdout.strip()


@pytest.mark.parametrize("value,level", [("2", 2), (None, 0), ("", 0), ("yes", 0)])
def test_the_level_comes_from_the_environment_once(value, level):
    assert level_seen(value) == f"{level} {level}"


def test_debug_level_sets_the_level_inside_the_block_only():
    before = DEBUG.get()
    with debug_level(3):
        assert DEBUG.get() == 3
        with debug_level(0):
            assert DEBUG.get() == 0
        assert DEBUG.get() == 3
    assert DEBUG.get() == before


def test_no_other_module_reads_debug_from_the_environment():
    reads = re.compile(r"""(environ(\.get)?\s*[\[(]|getenv\()\s*["']DEBUG["']""")
    found = [str(p.relative_to(ROOT)) for package in ("core", "cli", "workers", "service")
             for p in (ROOT / package).rglob("*.py") if reads.search(p.read_text())]
    assert found == ["core/debug.py"]
