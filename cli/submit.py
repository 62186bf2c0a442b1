"""`kiln submit`: the CI client. Upload a model, start a job, follow its progress, download the artifact."""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from core.errors import KilnError
from core.files.atomic import atomic_path


class SubmitError(KilnError):
    """The service refused the request or the job failed; the message is the service's."""

    code = "submit_failed"


def _detail(response) -> str:
    try:
        detail = response.json().get("detail")
    except ValueError:
        return response.text.strip()[:500] or response.reason_phrase
    if isinstance(detail, dict):
        extra = ", ".join(f"{o['op']} (opset {o['opset']})" for o in detail.get("unsupported_ops", []))
        return detail.get("message", json.dumps(detail)) + (f" [{extra}]" if extra and extra not in detail.get("message", "") else "")
    if isinstance(detail, list):  # pydantic validation errors
        return "; ".join(f"{'.'.join(str(p) for p in d.get('loc', []))}: {d.get('msg')}" for d in detail)
    return str(detail)


def _check(response, what: str):
    if response.status_code >= 400:
        raise SubmitError(f"{what} failed: HTTP {response.status_code}: {_detail(response)}")
    return response


def _follow(client, job_id: str, bar, task) -> dict:
    """Read the job's Server-Sent Events until it ends; returns the last job state."""
    job: dict = {}
    with client.stream("GET", f"/api/v1/jobs/{job_id}/events", timeout=None) as response:
        _check(response, "following the job")
        event = None
        for line in response.iter_lines():
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:") and event == "progress":
                job = json.loads(line[5:])
                bar.update(task, completed=job["progress"], description=job["stage"])
            elif line.startswith("data:") and event == "end":
                break
    return job or _check(client.get(f"/api/v1/jobs/{job_id}"), "reading the job").json()


def _download(client, url: str, out: Path) -> None:
    with atomic_path(out) as partial, open(partial, "wb") as f, client.stream("GET", url) as response:
        _check(response, "downloading the artifact")
        for chunk in response.iter_bytes():
            f.write(chunk)


def cmd_submit(args: argparse.Namespace) -> int:
    import httpx
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    model = Path(args.model)
    if not model.is_file():
        raise SubmitError(f"no such model file: {model}")
    if args.output and not args.wait:
        raise SubmitError("-o/--output needs --wait (the artifact exists only once the job has finished)")
    token = args.token or os.environ.get("KILN_TOKEN")
    if not token:
        raise SubmitError("no API token: pass --token or set KILN_TOKEN")
    headers = {"Authorization": f"Bearer {token}"}
    try:
        with httpx.Client(base_url=args.server.rstrip("/"), headers=headers, timeout=600) as client:
            with model.open("rb") as f:
                uploaded = _check(client.post("/api/v1/models", files={"file": (model.name, f)}), "upload").json()
            body = {"model_id": uploaded["id"], "target": args.target, "opt_level": args.opt_level,
                    "tuning": {"trials": args.tune_trials}, "input_shapes": {k: list(v) for k, v in (args.input_shape or [])}}
            job = _check(client.post("/api/v1/jobs", json=body), "creating the job").json()
            print(f"job {job['id']} queued (model {uploaded['id']}, target {args.target})", file=sys.stderr)
            if not args.wait:
                print(job["id"])
                return 0
            with Progress(TextColumn("[bold]{task.description:<14}"), BarColumn(), TimeElapsedColumn(),
                          disable=not sys.stderr.isatty()) as bar:
                task = bar.add_task("queued", total=1.0)
                job = _follow(client, job["id"], bar, task)
            if job["status"] != "succeeded":
                raise SubmitError(f"job {job['id']} {job['status']}: {job.get('error') or 'no reason given'}")
            if args.output:
                _download(client, job["links"]["artifact"], Path(args.output))
                print(f"wrote {args.output}", file=sys.stderr)
            print(job["id"])
    except httpx.HTTPError as err:
        raise SubmitError(f"cannot reach {args.server}: {err}") from None
    return 0


def add_parser(sub, parse_shape) -> None:
    p = sub.add_parser("submit", help="compile a model on a Kiln server (the CI client)")
    p.add_argument("model")
    p.add_argument("--server", default=os.environ.get("KILN_SERVER", "http://127.0.0.1:8000"))
    p.add_argument("--token", help="API token (default $KILN_TOKEN)")
    p.add_argument("-t", "--target", default="native")
    p.add_argument("-O", "--opt-level", type=int, choices=range(4), default=3)
    p.add_argument("--tune-trials", type=int, default=0)
    p.add_argument("--input-shape", type=parse_shape, action="append", metavar="NAME=D0,D1,...")
    p.add_argument("--wait", action="store_true", help="follow the job until it ends; exit non-zero if it fails")
    p.add_argument("-o", "--output", help="with --wait: download the artifact here")
    p.set_defaults(func=cmd_submit)
