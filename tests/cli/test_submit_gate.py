"""`kiln submit --baseline JOB_ID`: the CI gate through a live `kiln serve`: an -O0 build against its -O3 baseline
exits 3 with one line why; the same options pass (exit 0); --baseline without --wait is refused (exit 2)."""
from __future__ import annotations

import pytest

from tests.cli.test_submit import submit
from tests.gate_models import elementwise_chain

pytestmark = pytest.mark.slow  # starts `kiln serve` with its embedded worker


def test_submit_gate_fails_O0_against_O3_and_passes_the_same_options(live_service, tmp_path):
    model = tmp_path / "chain.onnx"
    model.write_bytes(elementwise_chain())
    base = submit(live_service, model, "-O", "3", "--wait")
    assert base.returncode == 0, base.stderr
    base_id = base.stdout.strip().splitlines()[-1]

    slower = submit(live_service, model, "-O", "0", "--wait", "--baseline", base_id, "--max-slowdown", "5%",
                    "--max-error-growth", "2x")
    assert slower.returncode == 3, slower.stderr
    errors = [line for line in slower.stderr.splitlines() if line.startswith("kiln: error:")]
    assert len(errors) == 1 and "Traceback" not in slower.stderr
    assert "gate failed: " in errors[0] and f"slower than baseline job {base_id}" in errors[0]

    same = submit(live_service, model, "-O", "3", "--wait", "--baseline", base_id, "--max-slowdown", "100%")
    assert same.returncode == 0, same.stderr
    assert "gate passed:" in same.stderr

    refused = submit(live_service, model, "--baseline", base_id)
    assert refused.returncode == 2 and "--baseline needs --wait" in refused.stderr
