"""The CI gate's options for `kiln submit` and `kiln compile` (--baseline, --max-slowdown, --max-error-growth) and
its verdict: one line, exit status 3 when the new build is slower or less accurate than the baseline allows."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional

EXIT_GATE_FAILED = 3  # distinct from 1 (the job or server failed) and 2 (a user mistake)


def _checked(kind: str):
    """An argparse type: the option's value as the gate policy reads it, a bad one refused at once."""
    def parse(text: str) -> str:
        from core.driver.gate import GatePolicy
        from core.errors import KilnError

        try:
            GatePolicy.parse(**{kind: text})
        except KilnError as err:
            raise argparse.ArgumentTypeError(str(err)) from None
        return text
    return parse


def add_arguments(p: argparse.ArgumentParser, baseline_metavar: str, baseline_help: str) -> None:
    p.add_argument("--baseline", metavar=baseline_metavar, help=baseline_help)
    p.add_argument("--max-slowdown", metavar="PERCENT", default="5%", type=_checked("max_slowdown"),
                   help="with --baseline: fail when the new build's median latency is more than this slower: 5%% or 0.05 "
                        "(default 5%%)")
    p.add_argument("--max-error-growth", metavar="FACTOR", default="2x", type=_checked("max_error_growth"),
                   help="with --baseline: fail when its max abs error against ONNX Runtime grows more than this "
                        "(default 2x; errors below 1e-6 count as 1e-6)")


def policy(args: argparse.Namespace):
    from core.driver.gate import GatePolicy

    return GatePolicy.parse(args.max_slowdown, args.max_error_growth)


def submit_request(args: argparse.Namespace) -> dict:
    """The job request's `baseline` (JOB_ID: an earlier job of the server), or nothing without --baseline. A misuse
    raises ValueError: one line and exit 2, like any refused request."""
    if not args.baseline:
        return {}
    if not args.wait:
        raise ValueError("--baseline needs --wait (the gate's verdict comes when the job has finished)")
    if Path(args.baseline).is_file():
        raise ValueError(f"--baseline {args.baseline}: `kiln submit` gates against a job id of the server (the "
                         "build it keeps); gate a local artifact with `kiln compile --baseline ARTIFACT`")
    gate = policy(args)
    return {"baseline": {"job_id": args.baseline, "max_slowdown": gate.max_slowdown,
                         "max_error_growth": gate.max_error_growth}}


def verdict_exit(section: Optional[dict]) -> int:
    """Print the gate's verdict in one line; its exit status."""
    if not section:
        print("kiln: error: gate failed: the report has no baseline comparison", file=sys.stderr)
        return EXIT_GATE_FAILED
    if not section.get("passed"):
        print(f"kiln: error: {section.get('message')}", file=sys.stderr)
        return EXIT_GATE_FAILED
    print(section["message"], file=sys.stderr)
    return 0


def check_local_baseline(args: argparse.Namespace) -> None:
    """`kiln compile --baseline ARTIFACT`: refused before the compile when there is no such file."""
    if args.baseline and not Path(args.baseline).is_file():
        raise ValueError(f"--baseline {args.baseline}: no such artifact (kiln compile gates against a local "
                         "artifact; a server's job id goes with kiln submit)")


def add_local_baseline(artifact, args: argparse.Namespace, model: Path) -> None:
    """`kiln compile --baseline ARTIFACT`: time the new build against the local artifact, before it is saved (its
    report keeps the comparison), on the first --validation-inputs sample when there is one."""
    from core.driver.gate import compare_with_baseline

    if args.baseline:
        baseline = Path(args.baseline)
        artifact.report["baseline"] = compare_with_baseline(
            artifact.directory, baseline, model, policy=policy(args), input_shapes=dict(args.input_shape or []) or None,
            baseline_label=f"the baseline {baseline.name}", validation_inputs=args.validation_inputs or None)
