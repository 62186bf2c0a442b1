"""Runs the atheris harness (fuzz_importer.py) briefly, seeded with a good model and every hostile one."""
from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import hostile_models as hostile  # noqa: E402

pytestmark = pytest.mark.slow
HARNESS = Path(__file__).with_name("fuzz_importer.py")


def test_importer_and_preflight_survive_fuzzing(tmp_path, make_model):
    pytest.importorskip("atheris")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "tiny").write_bytes(make_model())
    for name, build in vars(hostile).items():
        if inspect.isfunction(build) and build.__module__ == hostile.__name__ and not name.startswith("_"):
            (corpus / name).write_bytes(build("../x.bin") if name == "external_initializer" else build())
    result = subprocess.run([sys.executable, str(HARNESS), str(corpus), "-max_total_time=20", "-rss_limit_mb=4096",
                             f"-artifact_prefix={tmp_path}/"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-4000:]
    assert "Done" in result.stderr
