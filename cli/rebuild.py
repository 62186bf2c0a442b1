"""`kiln rebuild ARTIFACT --model MODEL.onnx [-o OUT]`: build again from the manifest and compare, part by part."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

EXIT_DIFFERS = 1  # the rebuild ran and is not identical: a failure, not a user mistake


def cmd_rebuild(args: argparse.Namespace) -> int:
    from core.driver.rebuild import rebuild
    from core.errors import InvalidModelError

    for path, what in ((Path(args.artifact), "artifact"), (Path(args.model), "model file")):
        if not path.is_file():
            raise InvalidModelError(f"no such {what}: {path}")
    result = rebuild(args.artifact, Path(args.model), validation_inputs=args.validation_inputs or None,
                     calibration=args.calibration)
    try:
        if args.output:
            out = result.artifact.save(args.output)
            print(f"wrote {out}")
    finally:
        result.artifact.cleanup()
    if args.json:
        print(json.dumps(result.as_report(), indent=2))
    if result.identical:
        print(f"rebuild: {result.summary()}")
        return 0
    print(f"kiln: error: the rebuild is not identical: {result.summary()}", file=sys.stderr)
    return EXIT_DIFFERS


def add_parser(sub) -> None:
    p = sub.add_parser("rebuild", help="rebuild an artifact from its manifest and model; say which part differs, if any")
    p.add_argument("artifact", help="the artifact (.tar.gz) to reproduce")
    p.add_argument("-m", "--model", required=True, help="the ONNX model it was built from (its sha256 is checked)")
    p.add_argument("-o", "--output", help="also write the rebuilt artifact here")
    p.add_argument("--validation-inputs", action="append", metavar="FILE.npz",
                   help="the original build's --validation-inputs, if it had any (their hash is in the manifest)")
    p.add_argument("--calibration", metavar="DATA.npz",
                   help="an int8 artifact's calibration samples (their hash is in the manifest): it is quantized again")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON too")
    p.set_defaults(func=cmd_rebuild)
