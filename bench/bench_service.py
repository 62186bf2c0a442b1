"""Service latency: upload -> artifact for a model through a real `kiln serve` (API + Celery worker),
split into where the time goes, and the API's own overhead per job (everything but the compile itself).
The server starts with an empty data dir, so its kernel cache is cold for the first job and warm after it
(`hit` is the share of kernels each job took from the cache); `--quick` sends the quick job option.

    .venv/bin/python bench/bench_service.py [--model ../shared/models/squeezenet1_1.onnx] [--jobs 5] [--quick]
"""
from __future__ import annotations

import argparse
import os
import signal
import statistics
import tempfile
import time
from datetime import datetime
from pathlib import Path

import httpx
from serve_harness import start_serve

ROOT = Path(__file__).resolve().parents[1]


def _seconds(a: str, b: str) -> float:
    return (datetime.fromisoformat(b) - datetime.fromisoformat(a)).total_seconds()


def one_job(client: httpx.Client, model: Path, opt_level: int, quick: bool) -> dict:
    t0 = time.perf_counter()
    with model.open("rb") as f:
        uploaded = client.post("/api/v1/models", files={"file": (model.name, f)}).raise_for_status().json()
    t_upload = time.perf_counter() - t0
    t1 = time.perf_counter()
    job = client.post("/api/v1/jobs", json={"model_id": uploaded["id"], "opt_level": opt_level,
                                            **({"quick": True} if quick else {})}).raise_for_status().json()
    t_create = time.perf_counter() - t1
    while job["status"] in ("queued", "running"):
        time.sleep(0.05)
        job = client.get(f"/api/v1/jobs/{job['id']}").raise_for_status().json()
    assert job["status"] == "succeeded", job
    t2 = time.perf_counter()
    size = len(client.get(job["links"]["artifact"]).raise_for_status().content)
    t_download = time.perf_counter() - t2
    report = client.get(job["links"]["report"]).raise_for_status().json()
    total = time.perf_counter() - t0
    compile_s = report["timings_s"]["total"]
    run_s = _seconds(job["started_at"], job["finished_at"])
    return {"upload_s": t_upload, "create_s": t_create, "queue_wait_s": _seconds(job["created_at"], job["started_at"]),
            "worker_s": run_s, "compile_s": compile_s, "packaging_s": run_s - compile_s, "download_s": t_download,
            "total_s": total, "overhead_s": total - compile_s, "artifact_mb": size / 1e6, "hit": report["build"]["hit_rate"],
            "deduplicated": uploaded["deduplicated"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=str(ROOT.parent / "shared" / "models" / "squeezenet1_1.onnx"))
    parser.add_argument("--jobs", type=int, default=3)
    parser.add_argument("--opt-level", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="quick jobs: no latency benchmark, one validation sample")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kiln-bench-service-") as tmp:
        proc, url, token = start_serve(Path(tmp) / "data")
        try:
            with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=600) as client:
                runs = [one_job(client, Path(args.model), args.opt_level, args.quick) for _ in range(args.jobs)]
        finally:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=30)
    print(f"{Path(args.model).name}: {args.jobs} {'quick ' if args.quick else ''}jobs through kiln serve (SQLite broker), "
          f"seconds")
    keys = [k for k in runs[0] if k != "deduplicated"]
    print("run  " + "  ".join(f"{k:>12}" for k in keys))
    for i, run in enumerate(runs):
        print(f"{i:<4} " + "  ".join(f"{run[k]:12.3f}" for k in keys) + ("  (upload deduplicated)" if run["deduplicated"] else ""))
    print("med  " + "  ".join(f"{statistics.median(r[k] for r in runs):12.3f}" for k in keys))
    warm = [r["total_s"] for r in runs[1:]]
    print(f"first upload -> artifact (cold kernel cache): {runs[0]['total_s']:.1f} s"
          + (f"; later (warm), median: {statistics.median(warm):.1f} s" if warm else "")
          + f"; API overhead per job (total - compile), median: {statistics.median(r['overhead_s'] for r in runs):.2f} s")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
