"""The artifact runs in a fresh virtual environment that has nothing but numpy, via its own kiln_loader.py."""
from __future__ import annotations

import json
import subprocess
import sys
import tarfile

import numpy as np
import pytest

PROBE = """
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import kiln_loader
assert "core" not in sys.modules
m = kiln_loader.load(sys.argv[2])
x = np.linspace(-1, 1, 24, dtype=np.float32).reshape(3, 8)
out = m.run({"x": x})
print(json.dumps({k: v.tolist() for k, v in out.items()}))
m.close()
"""


@pytest.mark.slow
def test_artifact_in_fresh_numpy_only_venv(tiny_model, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=120)
    py = venv / "bin" / "python"
    pip = subprocess.run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", "numpy"],
                         capture_output=True, text=True, timeout=600)
    if pip.returncode != 0:
        pytest.skip(f"cannot install numpy into a fresh venv (no package index?): {pip.stderr.strip()[-300:]}")
    listed = subprocess.run([str(py), "-m", "pip", "list", "--format=json"], capture_output=True, text=True, check=True)
    assert {p["name"] for p in json.loads(listed.stdout)} <= {"numpy", "pip", "setuptools"}

    shipped = tmp_path / "shipped"
    with tarfile.open(tiny_model.artifact) as tar:
        tar.extract("kiln_loader.py", shipped, filter="data")
    (tmp_path / "probe.py").write_text(PROBE)
    # Run from an unrelated folder so that nothing of the repository can be imported by accident.
    proc = subprocess.run([str(py), str(tmp_path / "probe.py"), str(shipped), str(tiny_model.artifact)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path, env={"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    ref = tiny_model.reference(np.linspace(-1, 1, 24, dtype=np.float32).reshape(3, 8))
    for name in ref:
        np.testing.assert_allclose(np.array(out[name], "float32"), ref[name], rtol=1e-5, atol=1e-5)
