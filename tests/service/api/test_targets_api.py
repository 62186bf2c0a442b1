"""GET /targets: the Arm device presets with their CPU, NEON width and the emulator that validates them here."""
from __future__ import annotations


def test_targets_list_the_arm_presets_with_their_emulator(api):
    targets = {t["name"]: t for t in api.client.get("/api/v1/targets", headers=api.auth()).json()}
    for name, cpu in (("rpi4", "cortex-a72"), ("rpi5", "cortex-a76"), ("graviton2", "neoverse-n1"),
                      ("graviton3", "neoverse-v1"), ("ampere-altra", "neoverse-n1"), ("jetson-orin", "cortex-a78ae")):
        t = targets[name]
        assert (t["cpu"], t["vector_bits"], t["runs_on_host"], t["emulator"]) == (cpu, 128, False, "qemu-aarch64")
    assert "+dotprod" in targets["rpi5"]["features"]
    assert targets["native"]["runs_on_host"] and targets["native"]["emulator"] is None


def test_an_arm_preset_compiles_here_but_is_tuned_only_where_a_worker_measures_it(api, make_model):
    headers = api.auth()
    model_id = api.upload(headers, make_model()).json()["id"]
    tuned = api.client.post("/api/v1/jobs", headers=headers,
                            json={"model_id": model_id, "target": "rpi5", "tuning": {"trials": 8}})
    assert tuned.status_code == 422 and "no worker of this server can measure rpi5 code" in str(tuned.json()["detail"])
    plain = api.client.post("/api/v1/jobs", headers=headers, json={"model_id": model_id, "target": "rpi5"})
    assert plain.status_code == 201 and api.queued == [plain.json()["id"]]  # cross-compiled, validated under qemu


def test_a_worker_announcing_measure_rpi5_makes_rpi5_tunable(api, make_model):
    """`kiln worker --measure rpi5` beats with its queues: while that beat is fresh, rpi5 tuning jobs are accepted
    (and compile on the compile queue, sending only their measurements to measure.rpi5)."""
    import json
    import time

    from service.core.worker_beats import FRESH_FOR_S, beat_path, write_beat

    headers = api.auth()
    model_id = api.upload(headers, make_model()).json()["id"]
    body = {"model_id": model_id, "target": "rpi5", "tuning": {"trials": 8}}
    path = write_beat(api.settings.data_dir, "kiln-1@board", ["measure.rpi5"])
    tuned = api.client.post("/api/v1/jobs", headers=headers, json=body)
    assert tuned.status_code == 201, tuned.text
    assert api.queued == [tuned.json()["id"]]
    stale = json.loads(path.read_text()) | {"seen_at": time.time() - FRESH_FOR_S - 1}  # the worker is gone
    beat_path(api.settings.data_dir, "kiln-1@board").write_text(json.dumps(stale))
    refused = api.client.post("/api/v1/jobs", headers=headers, json=body)
    assert refused.status_code == 422 and "no worker of this server can measure rpi5 code" in refused.text
