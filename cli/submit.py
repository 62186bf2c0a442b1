"""`kiln submit`: the CI client. Upload a model, start a job, follow its progress, download the artifact."""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from typing import Optional

from core.errors import KilnError
from core.files.atomic import atomic_path

from . import gate


class SubmitError(KilnError):
    """The service refused the request or the job failed; the message is the service's. `code` is the
    service's error code where it gave one (so the exit status matches `kiln compile`'s for the same
    mistake), "submit_refused" for another refusal of the request, else "submit_failed"."""

    code = "submit_failed"

    def __init__(self, message: str, code: Optional[str] = None):
        super().__init__(message)
        if code:
            self.code = code


REFUSED = "submit_refused"  # the request itself was wrong (a 4xx): a user error, like compile's
# The API's field names, as this command's options (the service's messages name the fields).
_OPTION_OF_FIELD = {"input_shapes": "--input-shape", "time_budget_s": "--tune-time", "trials": "--tune-trials",
                    "opt_level": "--opt-level", "model_id": "MODEL", "name": "--name", "target": "--target",
                    "keep_float": "--keep-float", "max_error": "--max-error", "calibration_id": "--calibration",
                    "op_types": "--op-types", "sensitivity_layers": "--sensitivity-layers",
                    "max_trip_count": "--max-trip-count"}


def _as_options(text: str) -> str:
    return re.sub(r"\b(" + "|".join(_OPTION_OF_FIELD) + r")\b", lambda m: _OPTION_OF_FIELD[m.group(1)], text)


def _detail(response) -> tuple[str, Optional[str]]:
    """The service's message (in this command's terms) and its error code, if any."""
    try:
        detail = response.json().get("detail")
    except ValueError:
        return response.text.strip()[:500] or response.reason_phrase, None
    if isinstance(detail, dict):
        message = detail.get("message", json.dumps(detail))
        missing = [o for o in detail.get("unsupported_ops", []) if str(o.get("op")) not in message]
        extra = ", ".join(f"{o['op']} (opset {o['opset']})" for o in missing)  # only what the message leaves out
        return _as_options(message) + (f" [{extra}]" if extra else ""), detail.get("code")
    if isinstance(detail, list):  # pydantic validation errors
        return _as_options("; ".join(f"{'.'.join(str(p) for p in d.get('loc', []) if p != 'body')}: {d.get('msg')}"
                                     for d in detail)), None
    return _as_options(str(detail)), None


def _check(response, what: str):
    if response.status_code >= 400:
        message, code = _detail(response)
        user_error = 400 <= response.status_code < 500 and response.status_code not in (401, 403, 404, 409, 429)
        raise SubmitError(f"{what} failed: HTTP {response.status_code}: {message}", REFUSED if user_error else code)
    return response


def _follow(client, job_id: str, bar, task) -> dict:
    """Read the job's Server-Sent Events until it ends; returns the last job state. The bar shows
    progress on a terminal; elsewhere (CI logs) each new stage is printed as a line."""
    job: dict = {}
    last_stage = None
    with client.stream("GET", f"/api/v1/jobs/{job_id}/events", timeout=None) as response:
        _check(response, "following the job")
        event = None
        for line in response.iter_lines():
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:") and event == "progress":
                job = json.loads(line[5:])
                bar.update(task, completed=job["progress"], description=job["stage"])
                if bar.disable and job["stage"] != last_stage:
                    last_stage = job["stage"]
                    print(f"job {job_id}: {job['stage']} ({job['progress']:.0%})", file=sys.stderr)
            elif line.startswith("data:") and event == "end":
                break
    return job or _check(client.get(f"/api/v1/jobs/{job_id}"), "reading the job").json()


def _download(client, url: str, out: Path) -> None:
    with atomic_path(out, shared=True) as partial, open(partial, "wb") as f, client.stream("GET", url) as response:
        _check(response, "downloading the artifact")
        for chunk in response.iter_bytes():
            f.write(chunk)


def _quantization(client, model_id: str, args: argparse.Namespace) -> dict:
    """Uploads the calibration samples for the model; the job's `quantization` request."""
    if not args.calibration:
        raise SubmitError("--precision int8 needs --calibration DATA.npz (samples of the model's inputs)", REFUSED)
    path = Path(args.calibration)
    if not path.is_file():
        raise SubmitError(f"no such calibration file: {path}", REFUSED)
    with path.open("rb") as f:
        calibration = _check(client.post(f"/api/v1/models/{model_id}/calibration", files={"file": (path.name, f)}),
                             "uploading the calibration samples").json()
    request = {"calibration_id": calibration["id"], "per_channel": args.per_channel, "method": args.method,
               "keep_float": list(args.keep_float or []), "op_types": list(args.op_types or []),
               "sensitivity_layers": args.sensitivity_layers}
    if args.max_error is not None:
        request["max_error"] = args.max_error
    return request


def _print_quantization(client, job: dict) -> None:
    """The job's accuracy cost of int8, as `kiln quantize` prints it (on stderr: stdout keeps the job id)."""
    from .quantize import summary_lines

    section = _check(client.get(job["links"]["report"]), "reading the report").json().get("quantization")
    for line in summary_lines(section) if section else []:
        print(line, file=sys.stderr)


def cmd_submit(args: argparse.Namespace) -> int:
    import httpx
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    model = Path(args.model)
    if not model.is_file():
        raise SubmitError(f"no such model file: {model}", REFUSED)
    if args.output and not args.wait:
        raise SubmitError("-o/--output needs --wait (the artifact exists only once the job has finished)", REFUSED)
    token = args.token or os.environ.get("KILN_TOKEN")
    if not token:
        raise SubmitError("no API token: pass --token or set KILN_TOKEN", REFUSED)
    headers = {"Authorization": f"Bearer {token}"}
    try:
        with httpx.Client(base_url=args.server.rstrip("/"), headers=headers, timeout=600) as client:
            with model.open("rb") as f:
                uploaded = _check(client.post("/api/v1/models", files={"file": (model.name, f)}), "upload").json()
            body = {"model_id": uploaded["id"], "target": args.target, "opt_level": args.opt_level,
                    "tuning": {"trials": args.tune_trials, "time_budget_s": args.tune_time},
                    "input_shapes": {k: [d if isinstance(d, int) else str(d) for d in v]  # ranges as text
                                     for k, v in (args.input_shape or [])}}
            if args.name:
                body["name"] = args.name
            if args.max_trip_count is not None:
                body["max_trip_count"] = args.max_trip_count
            if args.precision in ("fp16", "bf16"):
                body["precision"] = args.precision
            if args.precision == "int8":
                body.update(precision="int8", quantization=_quantization(client, uploaded["id"], args))
            body.update(gate.submit_request(args))
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
                raise SubmitError(f"job {job['id']} {job['status']}: {job.get('error') or 'no reason given'}",
                                  job.get("error_code"))
            if args.output:
                _download(client, job["links"]["artifact"], Path(args.output))
                print(f"wrote {args.output}", file=sys.stderr)
            if args.precision == "int8":
                _print_quantization(client, job)
            verdict = gate.verdict_exit(_check(client.get(job["links"]["report"]), "reading the report").json()
                                        .get("baseline")) if args.baseline else 0
            print(job["id"])
    except httpx.HTTPError as err:
        raise SubmitError(f"cannot reach {args.server}: {err}") from None
    return verdict


def add_parser(sub, parse_shape) -> None:
    from core.driver.precision import PRECISIONS

    from .quantize import add_int8_arguments

    p = sub.add_parser("submit", help="compile a model on a Kiln server (the CI client)",
                       description="Upload MODEL to a Kiln server, start a compile job and (with --wait) follow it "
                                   "and download the artifact. Exits 2 when the request is refused (as `kiln compile` "
                                   "does for the same mistake), 1 when the job or the server fails.")
    p.add_argument("model", help="the ONNX model file")
    p.add_argument("--server", default=os.environ.get("KILN_SERVER", "http://127.0.0.1:8000"),
                   help="the server's URL (default $KILN_SERVER or http://127.0.0.1:8000)")
    p.add_argument("--token", help="API token (default $KILN_TOKEN; `kiln token create NAME` makes one)")
    p.add_argument("-t", "--target", default="native", help="target name (GET /api/v1/targets), default native")
    p.add_argument("-O", "--opt-level", type=int, choices=range(4), default=3, help="graph optimization level 0-3")
    p.add_argument("--tune-trials", type=int, default=0,
                   help="tuning budget: total trials per workload, the server's records included (0: none)")
    p.add_argument("--tune-time", type=float, metavar="SECONDS",
                   help="stop tuning after this long (keeps the best so far)")
    p.add_argument("--input-shape", type=parse_shape, action="append", metavar="NAME=D0,D1,...",
                   help="fix an input's shape (repeatable), for models with symbolic dimensions")
    p.add_argument("--name", help="artifact name: libNAME.so, NAME.h, C symbols NAME_load, ... (see kiln compile)")
    p.add_argument("--max-trip-count", type=int, metavar="N",
                   help="the most iterations a loop run at run time may make (see kiln compile)")
    p.add_argument("--precision", choices=PRECISIONS, default="fp32",
                   help="fp16/bf16: weights stored at half size, float32 arithmetic (see kiln compile); "
                        "int8: the server quantizes the float32 model on --calibration samples, then compiles it "
                        "(options as `kiln quantize`'s)")
    p.add_argument("--calibration", metavar="DATA.npz", help="with --precision int8: calibration samples")
    add_int8_arguments(p, "with --precision int8: ")
    gate.add_arguments(p, "JOB_ID", "CI gate: time the new build against this job's build of the same model on the "
                                    "same worker, interleaved; exit 3 with one line why when it is slower or less "
                                    "accurate than --max-slowdown/--max-error-growth allow (needs --wait)")
    p.add_argument("--wait", action="store_true", help="follow the job until it ends; exit non-zero if it fails")
    p.add_argument("-o", "--output", help="with --wait: download the artifact here")
    p.set_defaults(func=cmd_submit)
