"""GET /jobs: search by model file name or target, filters by status and target, and paging (X-Total-Count)."""
from __future__ import annotations


def _jobs(api, headers, **params):
    response = api.client.get("/api/v1/jobs", headers=headers, params=params)
    assert response.status_code == 200, response.text
    return [job["id"] for job in response.json()], int(response.headers["X-Total-Count"])


def _queue(api, headers, model_id, target="native"):
    response = api.client.post("/api/v1/jobs", headers=headers, json={"model_id": model_id, "target": target})
    assert response.status_code == 201, response.text
    return response.json()["id"]


def test_jobs_are_searched_by_model_file_name_and_target(api, make_model):
    headers = api.auth()
    resnet = api.upload(headers, make_model(seed=0), name="resnet_small.onnx").json()["id"]
    mobile = api.upload(headers, make_model(seed=1), name="mobile_net.onnx").json()["id"]
    on_resnet = {_queue(api, headers, resnet), _queue(api, headers, resnet, "x86-64-v3")}
    on_mobile = _queue(api, headers, mobile)

    ids, total = _jobs(api, headers, q="RESNET")
    assert set(ids) == on_resnet and total == 2
    ids, total = _jobs(api, headers, q="e_n")  # LIKE wildcards are searched as themselves ("resnet" has "esn")
    assert ids == [on_mobile] and total == 1
    assert _jobs(api, headers, q="%") == ([], 0)
    ids, _ = _jobs(api, headers, q="v3")  # the target matches too
    assert len(ids) == 1 and ids[0] in on_resnet
    assert _jobs(api, headers, target="x86-64-v3") == (ids, 1)
    assert _jobs(api, headers, q="squeezenet") == ([], 0)
    assert _jobs(api, headers, status="queued")[1] == 3 and _jobs(api, headers, status="failed") == ([], 0)
    assert _jobs(api, api.auth("bob"), q="resnet") == ([], 0)  # another user's jobs are not searched


def test_jobs_are_paged_newest_first(api, make_model):
    headers = api.auth()
    model = api.upload(headers, make_model()).json()["id"]
    queued = [_queue(api, headers, model) for _ in range(5)]
    first, total = _jobs(api, headers, limit=2)
    second, _ = _jobs(api, headers, limit=2, offset=2)
    last, _ = _jobs(api, headers, limit=2, offset=4)
    assert total == 5 and len(first) == len(second) == 2 and len(last) == 1
    assert first + second + last == _jobs(api, headers)[0] and set(first + second + last) == set(queued)
    assert _jobs(api, headers, offset=10) == ([], 5)
    assert api.client.get("/api/v1/jobs", headers=headers, params={"offset": -1}).status_code == 422
    assert api.client.get("/api/v1/jobs", headers=headers, params={"offset": 2**63}).status_code == 422
