"""`kiln quantize`: a float32 ONNX model -> a QDQ int8 one, calibrated on the user's samples, with its accuracy cost."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from core.files.atomic import atomic_path


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number, not {text!r}")
    return value


def summary_lines(section: dict) -> list[str]:
    """The quantization section for people: layers, accuracy per output, sensitivity, fallback (the CLI and submit)."""
    layers, acc, sens = section["layers"], section["accuracy"], section["sensitivity"]
    cal = section["calibration"]
    lines = [f"int8: {layers['quantized']} of {layers['quantizable']} Conv/MatMul/Gemm layers quantized "
             f"({section['method']}, {'per-channel' if section['per_channel'] else 'per-tensor'} weights, "
             f"calibrated on {cal['samples']} samples)"]
    if section["keep_float"]:
        lines.append(f"float32 by request: {', '.join(section['keep_float'])}")
    if section["fallback"]:
        lines.append(f"float32 by the fallback ({len(section['fallback'])}, most sensitive first): "
                     f"{', '.join(section['fallback'])}")
    for out in acc["outputs"]:
        lines.append(f"accuracy on {cal['held_back']} held-back samples: {_accuracy(out)}")
    for out in acc.get("before_fallback") or []:
        lines.append(f"before the fallback: {_accuracy(out)}")
    if sens["layers"]:
        worst = ", ".join(f"{s['layer']} {s['rel_err']:.3g}" for s in sens["layers"][:5])
        lines.append(f"most sensitive layers (relative error, that layer alone in int8): {worst}")
    if sens["note"]:
        lines.append(f"note: {sens['note']}")
    if section["budget_met"] is False:
        lines.append(f"warning: the error budget {section['max_error']:g} is not met (relative error "
                     f"{acc['rel_err']:.3g} with every measured layer in float32)")
    return lines


def _accuracy(out: dict) -> str:
    top1 = (f", top-1 agreement {out['top1_agreement']:.2%} of {out['top1_positions']}"
            if out["top1_agreement"] is not None else "")
    return (f"{out['name']}: max abs {out['max_abs_err']:.3g}, mean abs {out['mean_abs_err']:.3g}, "
            f"relative {out['rel_err']:.3g}{top1}")


def cmd_quantize(args: argparse.Namespace) -> int:
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from core.errors import InvalidModelError
    from core.quantize import quantize_model

    model = Path(args.model)
    if not model.is_file():
        raise InvalidModelError(f"no such model file: {model}")
    options = quantize_options(args)
    with Progress(TextColumn("[bold]{task.description:<18}"), BarColumn(), TimeElapsedColumn(), transient=True,
                  disable=not sys.stderr.isatty()) as bar:
        task = bar.add_task("quantize", total=1.0)
        result = quantize_model(model, args.calibration, options,
                                progress=lambda done, detail: bar.update(task, completed=done, description=detail))
    with atomic_path(Path(args.output), shared=True) as partial:
        Path(partial).write_bytes(result.model)
    if args.report:
        with atomic_path(Path(args.report), shared=True) as partial:
            Path(partial).write_text(json.dumps(result.report, indent=2))
    print(f"wrote {args.output} ({result.report['time_s']:.1f} s)")
    print("\n".join(summary_lines(result.report)))
    return 0


def add_int8_arguments(p, when: str = "") -> None:
    """The quantization options `kiln quantize`, `kiln compile --precision int8` and `kiln submit` share; `when`
    prefixes their help ("with --precision int8: ")."""
    from core.quantize import METHOD_NAMES

    p.add_argument("--per-channel", action="store_true", help=f"{when}one scale per output channel of each weight")
    p.add_argument("--method", choices=METHOD_NAMES, default="minmax", help=f"{when}calibration method (default minmax)")
    p.add_argument("--keep-float", nargs="+", metavar="LAYER", help=f"{when}node names to leave in float32")
    p.add_argument("--op-types", nargs="+", metavar="OP",
                   help=f"{when}quantize only these op types (e.g. Conv MatMul Gemm: every layer can then fall back); "
                        "default: every op ONNX Runtime's QDQ quantizer handles")
    p.add_argument("--max-error", type=_positive_float, metavar="E",
                   help=f"{when}error budget: the largest relative error ||int8 - fp32|| / ||fp32|| of any output on "
                        "the held-back samples; the most sensitive layers fall back to float32 until it holds")
    p.add_argument("--sensitivity-layers", type=int, default=16, metavar="N",
                   help=f"{when}measure the sensitivity of at most N Conv/MatMul/Gemm layers (default 16; 0: none)")


def quantize_options(args: argparse.Namespace):
    """core.quantize.QuantizeOptions from add_int8_arguments' flags."""
    from core.quantize import QuantizeOptions

    return QuantizeOptions(per_channel=args.per_channel, method=args.method, keep_float=tuple(args.keep_float or ()),
                           max_error=args.max_error, sensitivity_layers=args.sensitivity_layers,
                           op_types=tuple(args.op_types or ()))


def add_parser(sub) -> None:
    p = sub.add_parser("quantize", help="quantize a float32 ONNX model to int8 (QDQ) on calibration samples",
                       description="Calibrate MODEL on the samples of DATA.npz (ONNX Runtime's quantize_static, QDQ "
                                   "format, int8 weights and activations), write the QDQ model, and report its accuracy "
                                   "cost against float32 on held-back samples (20%), each Conv/MatMul/Gemm layer's "
                                   "sensitivity, and which layers fell back to float32 to meet --max-error.")
    p.add_argument("model", help="the float32 ONNX model")
    p.add_argument("--calibration", required=True, metavar="DATA.npz",
                   help="calibration samples: one array per model input, named as the input, first axis = samples")
    add_int8_arguments(p)
    p.add_argument("--report", metavar="FILE.json", help="also write the quantization report as JSON")
    p.add_argument("-o", "--output", required=True, help="where to write the QDQ model (.onnx)")
    p.set_defaults(func=cmd_quantize)
