"""Which feature combinations compose: precision x shapes x target x tuning, each compiled and rebuilt, or refused.

Every cell compiles one small CNN (a symbolic batch, so that ranges apply) through `core.compile` and then
`kiln rebuild`'s code on the artifact. A cell reads `works` (validated where the target runs here or under
qemu, rebuilt byte for byte), `refused: MESSAGE` when the compile stopped before building (the error came during
the first stages: import or earlier, as the CLI's exit 2 and the API's 422 do), or `FAILED at STAGE: MESSAGE` when
a combination was accepted and then failed: the defect the table exists to find.

    python bench/combinations.py [--targets native rpi5 cuda] [--trials 4] [--json OUT.json]
"""
from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PRECISIONS = ("fp32", "fp16", "bf16", "int8")
SHAPES = {"static": {"x": (2, 3, 16, 16)}, "ranges": {"x": ("1..4", 3, 16, 16)}}


def small_cnn(folder: Path) -> tuple[Path, Path]:
    """x[N,3,16,16] -> conv 3x3 (8) -> relu -> conv 3x3 (8) -> global pool -> dense 10: the model and calibration."""
    rng = np.random.default_rng(0)
    inits = {"w1": rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3,
             "w2": rng.standard_normal((8, 8, 3, 3)).astype(np.float32) * 0.2,
             "fc": rng.standard_normal((8, 10)).astype(np.float32), "b": rng.standard_normal(10).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("GlobalAveragePool", ["c2"], ["p"]), helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "fc", "b"], ["y"])]
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path, calibration = folder / "cnn.onnx", folder / "calibration.npz"
    path.write_bytes(model.SerializeToString())
    np.savez(calibration, x=rng.standard_normal((10, 2, 3, 16, 16)).astype(np.float32))
    return path, calibration


def cell(model: Path, calibration: Path, folder: Path, precision: str, shapes: str, target: str, trials: int) -> str:
    import core
    from core.driver.rebuild import rebuild
    from core.driver.stages import Stage
    from core.errors import KilnError
    from core.tune.options import TuningOptions

    reached = []
    tuning = TuningOptions(trials=trials, records=str(folder / f"records-{target}.jsonl")) if trials else None
    try:
        artifact = core.compile(model, target=target, input_shapes=SHAPES[shapes], tuning=tuning, benchmark=False,
                                precision=precision, calibration=calibration if precision == "int8" else None,
                                progress=lambda stage, done, detail: reached.append(stage))
    except KilnError as err:
        started = [s for s in reached if s not in (Stage.QUANTIZE, Stage.IMPORT)]
        line = str(err).splitlines()[0][:140]
        return f"FAILED at {started[-1].value}: {line}" if started else f"refused: {line}"
    try:
        path = artifact.save(folder / f"{precision}-{shapes}-{target}-{trials}.tar.gz")
        validation = artifact.report["validation"]
        checked = "validated" if validation.get("passed") else f"not validated ({validation.get('skipped', 'failed')})"
        result = rebuild(path, model, calibration=calibration if precision == "int8" else None)
        result.artifact.cleanup()
        return f"works, {checked}, rebuild {'identical' if result.identical else 'DIFFERS: ' + result.summary()[:80]}"
    except KilnError as err:
        return f"FAILED after building: {str(err).splitlines()[0][:140]}"
    finally:
        artifact.cleanup()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", nargs="+", default=["native", "rpi5", "cuda"])
    parser.add_argument("--precisions", nargs="+", default=list(PRECISIONS))
    parser.add_argument("--trials", type=int, default=4, help="tuning budget of the tuned cells")
    parser.add_argument("--json", help="also write the table as JSON")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="kiln-combinations-") as tmp:
        folder = Path(tmp)
        model, calibration = small_cnn(folder)
        for precision, shapes, target, trials in itertools.product(args.precisions, SHAPES, args.targets, (0, args.trials)):
            start = time.perf_counter()
            outcome = cell(model, calibration, folder, precision, shapes, target, trials)
            rows.append({"precision": precision, "shapes": shapes, "target": target, "tuning": trials,
                         "outcome": outcome, "seconds": round(time.perf_counter() - start, 1)})
            print(f"{precision:5} {shapes:7} {target:7} tuning={trials:<3} {outcome} ({rows[-1]['seconds']} s)", flush=True)
    works = sum(r["outcome"].startswith("works") for r in rows)
    refused = sum(r["outcome"].startswith("refused") for r in rows)
    failed = len(rows) - works - refused
    print(f"\n{works} of {len(rows)} combinations work, {refused} are refused up front, {failed} fail after accepting")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
