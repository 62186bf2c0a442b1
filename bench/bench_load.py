"""Load on a real `kiln serve`: concurrent uploads, then many queued jobs on N workers.

    .venv/bin/python bench/bench_load.py [--uploads 50] [--jobs 200] [--workers 2]

Prints jobs completed/submitted, duplicated executions, job-creation latency with the burst in flight (p50/p99;
goal: p99 <= 200 ms with 60 jobs in flight: `--jobs 60`), API latency percentiles while the jobs run,
and the API process's RSS before and after. Run by hand; never a timed test.
"""
from __future__ import annotations

import argparse
import asyncio
import re
import signal
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np
from onnx import TensorProto, helper, numpy_helper
from serve_harness import start_serve

LIMITS = {"KILN_UPLOADS_PER_MINUTE": "100000", "KILN_JOBS_PER_MINUTE": "100000", "KILN_MAX_ACTIVE_JOBS": "100000",
          "KILN_MAX_CONCURRENT_UPLOADS": "1000"}


def tiny_model(seed: int) -> bytes:
    """Conv -> Relu -> global average pool, different weights per seed (so no upload is deduplicated)."""
    weight = numpy_helper.from_array(np.random.default_rng(seed).standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["r"]),
         helper.make_node("GlobalAveragePool", ["r"], ["y"])], "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 1, 1])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def rss_mib(pid: int) -> float:
    match = re.search(r"VmRSS:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text())
    return int(match.group(1)) / 1024


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


async def run(args) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="kiln-load-"))
    proc, url, token = start_serve(workdir / "data", concurrency=args.workers, env=LIMITS)
    rss_before = rss_mib(proc.pid)
    latencies: list[float] = []
    server_errors: list[str] = []
    resent: list[str] = []
    limits = httpx.Limits(max_connections=200, max_keepalive_connections=200)
    try:
        async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=300,
                                     limits=limits) as client:

            async def timed(method: str, path: str, **kwargs) -> httpx.Response:
                start = time.perf_counter()
                try:
                    response = await client.request(method, path, **kwargs)
                except httpx.TransportError:
                    # uvicorn closes idle keep-alive connections after 5 s; a request that raced the close
                    # is sent again (GETs only), as any HTTP client does, and counted.
                    if method != "GET":
                        raise
                    resent.append(path)
                    response = await client.request(method, path, **kwargs)
                latencies.append(time.perf_counter() - start)
                if response.status_code >= 500:
                    server_errors.append(f"{method} {path}: {response.status_code}")
                return response

            start = time.perf_counter()
            uploads = await asyncio.gather(*(timed("POST", "/api/v1/models", files={"file": (f"m{i}.onnx", tiny_model(i))})
                                             for i in range(args.uploads)))
            upload_s = time.perf_counter() - start
            model_ids = [r.json()["id"] for r in uploads if r.status_code == 201]
            upload_latencies = list(latencies)
            latencies.clear()

            start = time.perf_counter()
            created = await asyncio.gather(*(timed("POST", "/api/v1/jobs", json={"model_id": model_ids[i % len(model_ids)]})
                                             for i in range(args.jobs)))
            job_ids = [r.json()["id"] for r in created if r.status_code == 201]
            submit_latencies = list(latencies)
            latencies.clear()
            pending, final = set(job_ids), {}
            # Job creation with that many jobs in flight, one request at a time (what a CI client or the UI
            # sees); each probe job is cancelled at once, so that the load stays the burst's.
            probe_latencies: list[float] = []
            for i in range(args.probes):
                probe_start = time.perf_counter()
                probe = await client.post("/api/v1/jobs", json={"model_id": model_ids[i % len(model_ids)]})
                probe_latencies.append(time.perf_counter() - probe_start)
                if probe.status_code >= 500:
                    server_errors.append(f"POST /api/v1/jobs: {probe.status_code}")
                elif probe.status_code == 201:
                    await client.delete(f"/api/v1/jobs/{probe.json()['id']}")
                await asyncio.sleep(0.2)
            in_flight = len(job_ids) - sum(1 for r in await asyncio.gather(*(client.get(f"/api/v1/jobs/{j}")
                                                                              for j in job_ids))
                                           if r.json()["status"] in ("succeeded", "failed", "cancelled"))
            while pending and time.perf_counter() - start < args.timeout_s:
                # The load a UI or CI client puts on the API while jobs run: status polls plus job lists.
                polled = await asyncio.gather(*(timed("GET", f"/api/v1/jobs/{j}") for j in list(pending)[:50]),
                                              timed("GET", "/api/v1/jobs", params={"limit": 100}))
                for response in polled[:-1]:
                    job = response.json()
                    if job["status"] in ("succeeded", "failed", "cancelled"):
                        pending.discard(job["id"])
                        final[job["id"]] = job
                await asyncio.sleep(0.5)
            jobs_s = time.perf_counter() - start
    finally:
        rss_after = rss_mib(proc.pid)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)

    succeeded = [j for j in final.values() if j["status"] == "succeeded"]
    retried = [j for j in final.values() if j["attempts"] != 1]
    artifacts = {j: sorted(p.name for p in (workdir / "data" / "jobs" / j).iterdir())
                 for j in final if (workdir / "data" / "jobs" / j).exists()}
    odd = {j: files for j, files in artifacts.items() if files != ["artifact.tar.gz", "report.html", "report.json"]}
    leftovers = list((workdir / "data" / "tmp").iterdir())
    print(f"uploads: {len(model_ids)}/{args.uploads} accepted in {upload_s:.1f} s "
          f"(p50 {percentile(upload_latencies, 50) * 1000:.0f} ms, p99 {percentile(upload_latencies, 99) * 1000:.0f} ms)")
    print(f"jobs: {len(succeeded)} succeeded / {len(job_ids)} submitted ({args.jobs} requested), "
          f"{len(final) - len(succeeded)} failed or cancelled, {len(pending)} unfinished, {jobs_s:.1f} s on {args.workers} workers")
    print(f"duplicates: {len(retried)} jobs ran more than once, {len(odd)} job folders with other than one artifact, "
          f"{len(leftovers)} temp leftovers")
    print(f"job submissions ({len(submit_latencies)} at once): p50 {percentile(submit_latencies, 50) * 1000:.0f} ms, "
          f"p99 {percentile(submit_latencies, 99) * 1000:.0f} ms")
    print(f"job creation with {in_flight} or more jobs in flight ({len(probe_latencies)} one at a time): "
          f"p50 {percentile(probe_latencies, 50) * 1000:.0f} ms, p99 {percentile(probe_latencies, 99) * 1000:.0f} ms")
    print(f"API latency while the jobs ran ({len(latencies)} status polls and lists): p50 {percentile(latencies, 50) * 1000:.1f} ms, "
          f"p99 {percentile(latencies, 99) * 1000:.1f} ms, max {max(latencies) * 1000:.1f} ms")
    print(f"API RSS: {rss_before:.0f} MiB before, {rss_after:.0f} MiB after; {len(server_errors)} responses were 5xx "
          f"{server_errors[:3]}; {len(resent)} GETs resent after a closed keep-alive connection")
    print(f"(data and serve.log in {workdir})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--uploads", type=int, default=50)
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--probes", type=int, default=40, help="jobs created one at a time while the burst is in flight")
    parser.add_argument("--timeout-s", type=float, default=1800)
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
