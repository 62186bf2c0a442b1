"""`make serve` installs only what serving needs; `make test` installs the dev toolchain too."""
from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _dry_run(target: str, venv: Path) -> str:
    return subprocess.run(["make", "-n", "-C", str(ROOT), target, f"VENV={venv}"], capture_output=True, text=True,
                          check=True, timeout=60).stdout


def test_serve_installs_the_package_without_its_dev_extras(tmp_path):
    serve = _dry_run("serve", tmp_path / "fresh-venv")
    assert "pip install -q -e .\n" in serve and "[dev]" not in serve
    test = _dry_run("test", tmp_path / "fresh-venv")
    assert "pip install -q -e '.[dev]'" in test
