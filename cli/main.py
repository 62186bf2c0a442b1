"""The `kiln` command line: compile, run, targets; serve, worker, token and submit for the service.

User mistakes print one line `kiln: error: ...` and exit non-zero; never a traceback.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Optional, Sequence

from . import gate

EXIT_USER_ERROR = 2
EXIT_FAILURE = 1
USER_ERROR_CODES = ("invalid_model", "unsupported_op", "shape_error", "unknown_target", "bad_tuning_options",
                    "bad_validation_inputs", "too_large", "unsupported_opset", "unsupported_on_target",
                    "bad_artifact_name", "submit_refused", "bad_manifest",
                    "bad_calibration", "already_quantized", "bad_quantize_options", "bad_precision")


def _parse_shape(spec: str) -> tuple[str, tuple]:
    """NAME=d0,d1,...; each d a size (224), a range (1..8, 224..512:32) or a list of sizes (8|128|384)."""
    from core.driver.shape_ranges import parse_input_shape
    from core.errors import ShapeError

    try:
        return parse_input_shape(spec)
    except ShapeError as err:
        raise argparse.ArgumentTypeError(f"bad --input-shape: {err}") from None


def _parse_input(spec: str) -> tuple[str, Path]:
    """NAME=FILE.npy, NAME=FILE.npz (its array named NAME, or its only one), or FILE.npz alone (an array per input,
    by name: what --validation-inputs takes); a bare FILE.npz has the name ""."""
    name, sep, path = spec.partition("=")
    if not sep and spec.endswith(".npz"):
        return "", Path(spec)
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"bad --input {spec!r}: expected NAME=FILE.npy, NAME=FILE.npz or FILE.npz "
                                         f"(one array per input, named as the input)")
    return name, Path(path)


def _input_arrays(given: list[tuple[str, Path]], inputs: list[dict], ranged: Optional[list] = None) -> dict:
    """The arrays --input names, checked against the model's inputs (names, dtypes, shapes; one line for a mistake).
    `ranged`: an artifact's declared ranges (metadata `dynamic_shapes.inputs`): their sizes are the runtime's to
    check, which names the dim and its range."""
    import numpy as np

    wanted = {i["name"]: (tuple(i["shape"]), np.dtype(i["dtype"])) for i in inputs}
    ranged_inputs = {r["name"] for r in ranged or ()}
    arrays: dict = {}
    for name, path in given:
        if not path.is_file():
            raise ValueError(f"--input {name + '=' if name else ''}{path}: no such file")
        try:
            loaded = np.load(path, allow_pickle=False)
        except (OSError, ValueError, EOFError) as err:
            raise ValueError(f"--input {path}: not an .npy or .npz file ({err})") from None
        if isinstance(loaded, np.ndarray):
            arrays[name] = loaded
            continue
        with loaded:
            files = loaded.files
            if not name:
                arrays.update({key: loaded[key] for key in files})
            elif name in files or len(files) == 1:
                arrays[name] = loaded[name if name in files else files[0]]
            else:
                raise ValueError(f"--input {name}={path}: the .npz holds {', '.join(files)}, none named {name!r}: "
                                 f"name its array {name!r}, or give FILE.npz alone to feed every input by name")
    unknown = [n for n in arrays if n not in wanted]
    if unknown:
        raise ValueError(f"unknown input(s) {', '.join(unknown)}; the model takes {', '.join(wanted)}")
    for name, array in arrays.items():
        shape, dtype = wanted[name]
        if array.dtype != dtype or len(array.shape) != len(shape) or (name not in ranged_inputs and any(
                isinstance(d, int) and d != g for d, g in zip(shape, array.shape))):
            raise ValueError(f"--input {name}: {array.dtype}{list(array.shape)} given, the model takes "
                             f"{dtype}{list(shape)}" + (" (its largest shape in range)" if name in ranged_inputs else ""))
    return arrays


def cmd_compile(args: argparse.Namespace) -> int:
    import core
    from core.frontend.model_loading import loads_remembered

    from .quantize import quantize_options, summary_lines
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    model = Path(args.model)
    if not model.is_file():
        from core.errors import InvalidModelError

        raise InvalidModelError(f"no such model file: {model}")
    if args.jobs is not None:  # read by every build of this process (core/codegen/kernel_objects.py)
        from core.errors import KilnError

        if args.jobs < 1:
            raise KilnError(f"--jobs must be at least 1, not {args.jobs}")
        os.environ["KILN_BUILD_JOBS"] = str(args.jobs)
    gate.check_local_baseline(args)
    with loads_remembered():  # the pre-flight checks the model file, the compile takes a copy
        _preflight(model)
        with Progress(TextColumn("[bold]{task.description:<10}"), BarColumn(), TimeElapsedColumn(),
                      transient=True, disable=not sys.stderr.isatty(), console=None) as bar:
            task = bar.add_task("compile", total=1.0)
            artifact = core.compile(model, target=args.target, opt_level=args.opt_level,
                                    input_shapes=dict(args.input_shape or []), tuning=_tuning_options(args, bar),
                                    validate=args.validate, tolerance=args.tolerance, bisect=args.bisect, precision=args.precision,
                                    calibration=args.calibration,
                                    quantization=quantize_options(args) if args.precision == "int8" else None,
                                    validation_inputs=args.validation_inputs or None, name=args.name,
                                    kernel_cache=args.kernel_cache, quick=args.quick, max_trip_count=args.max_trip_count,
                                    progress=lambda stage, done, detail: bar.update(task, description=detail or stage.value,
                                                                                    completed=done))
            gate.add_local_baseline(artifact, args, model)
            out = artifact.save(args.output)
    report = artifact.report
    lat, val = report["latency_ms"], report["validation"]
    print(f"wrote {out} ({report['graph']['kernels']} kernels, {report['timings_s']['total']:.1f} s)")
    built = report.get("build") or {}
    if built.get("kernels"):
        print(f"build: {built['cache_hits']} of {built['kernels']} kernels from the kernel cache "
              f"({built['hit_rate']:.0%}), {built['built']} compiled" + (f" on {built['workers']} processes"
                                                                        if built['workers'] > 1 else "")
              + ("" if built.get("cache_dir") else " (kernel cache off)"))
    if report.get("quick"):
        print("quick: latency benchmark skipped" + (", validation on one sample" if "max_abs_err" in val else ""))
    precision = report.get("precision") or {}
    if precision.get("requested") or precision.get("precision", "fp32") != "fp32":
        stored = ", ".join(f"{b / 1e6:.2f} MB {d}" for d, b in precision["weights_bytes_by_dtype"].items() if b)
        print(f"precision: {precision['precision']} (weights {stored or 'none'}; float32 arithmetic)")
    tuned = report["tuning"]
    if tuned["trials"] or tuned["cache_hits"] or tuned.get("trials_from_records"):
        print(f"tuning: {tuned['trials']} new trials in {tuned['time_s']:.1f} s, "
              f"{tuned.get('trials_from_records', 0)} from records; {tuned['cache_hits']} of "
              f"{tuned.get('num_tasks', len(tuned['tasks']))} tasks reused their records without measuring")
    if report.get("quantization"):
        print("\n".join(summary_lines(report["quantization"])))
    if "max_abs_err" in val:
        against = "ONNX Runtime" if val.get("reference", "onnxruntime") == "onnxruntime" else f"the {val['reference']}"
        print(f"validation: max abs error {val['max_abs_err']:.2e} against {against} on {val.get('inputs', 'random inputs')}"
              + (f", {val['mode']} under {val['emulator'].split()[0]}" if val.get("mode") else "")
              + ("" if val.get("passed", True) else ": DOES NOT MATCH (kept: --validate warn)"))
        host = val.get("onnxruntime_on_host") or {}
        if host.get("matches_exact") is False:
            print(f"note: {host['note']} (max abs error {host['max_abs_err']:.3g} on {host['mismatches']} of "
                  f"{host['size']} elements of {host['output']!r})")
        divergent = (val.get("bisect") or {}).get("summary") or (val.get("bisect") or {}).get("skipped")
        if divergent and (args.bisect or not val.get("passed", True)):
            print(f"bisect: {divergent}")
    elif val.get("skipped"):
        print(f"validation: skipped ({val['skipped']})")
    if "ratio" in lat:
        spread = (f"; {lat['ratio_quartiles'][0]:.2f}x-{lat['ratio_quartiles'][2]:.2f}x over the middle half of "
                  f"{lat['rounds']} rounds" if lat.get("ratio_quartiles") else "")
        print(f"latency: {lat['kiln']:.3f} ms (ONNX Runtime {lat['onnxruntime']:.3f} ms, {lat['ratio']:.2f}x{spread})")
        if lat.get("busy"):
            print(f"latency: warning: {lat['warning']}")
    return gate.verdict_exit(report["baseline"]) if args.baseline else 0


def _preflight(model: Path) -> None:
    """The upload's checks before any work: the file parses, and every op without a converter is listed
    at once (the same check as the service's; sizes are checked right after the import)."""
    from core.frontend.inspect import check_supported
    from core.frontend.model_loading import load_model

    check_supported(load_model(model))


def default_records_path() -> Path:
    """Where tuning records live unless --records says otherwise ($KILN_RECORDS overrides)."""
    return Path(os.environ.get("KILN_RECORDS") or Path.home() / ".cache" / "kiln" / "records.jsonl")


def _tuning_options(args: argparse.Namespace, bar):
    """Tuning with --tune-trials N; records from --records, else the user's default file, which every
    compile consults when it exists (tuned once, every later compile gets the best configs)."""
    from core.tune import TuningOptions
    from core.tune.options import TuningOptionsError
    from core.target import get_target
    from service.core.queues import host_device_kinds, untunable_reason

    reason = (untunable_reason(get_target(args.target), args.target, host_device_kinds(), "nothing on this machine")
              if args.tune_trials else None)
    if reason:  # the service answers 422 for the same request: refuse before any work, not build untuned
        raise TuningOptionsError(f"{reason}; compile without --tune-trials (a server with measuring workers of that "
                                 f"kind can tune it: kiln submit)")
    records = args.records or str(default_records_path())
    if not args.tune_trials and not args.records and not Path(records).is_file():
        return None

    def on_plan(p: dict) -> None:
        if not p["trials"]:
            bar.console.print(f"tuning records: {p['cache_hits']} of {p['tasks']} tasks have a tuned config", highlight=False)
            return
        bar.console.print(f"tuning {p['tuned_tasks']} of {p['tasks']} tasks: {p['trials']} new trials "
                          f"({p.get('trials_from_records', 0)} already in records, {p['cache_hits']} tasks reused as is), "
                          f"about {p['estimate_s']:.0f} s", highlight=False)

    return TuningOptions(trials=args.tune_trials, time_budget_s=args.tune_time or None, records=records,
                         on_plan=on_plan)


def cmd_run(args: argparse.Namespace) -> int:
    import numpy as np

    from .run_emulated import load_for_run

    module = load_for_run(args.artifact)  # an artifact for another CPU runs under qemu-user where it can
    try:
        if args.threads:
            module.set_num_threads(args.threads)
        feeds = {}
        given = _input_arrays(args.input or [], module.inputs,
                              (getattr(module, "metadata", {}).get("dynamic_shapes") or {}).get("inputs"))
        rng = np.random.default_rng(0)
        for info in module.inputs:
            name, shape, dtype = info["name"], tuple(info["shape"]), np.dtype(info["dtype"])
            if name in given:
                feeds[name] = given[name]
            elif dtype.kind in "iu":
                feeds[name] = rng.integers(0, 2, size=shape).astype(dtype)
            elif dtype.kind == "b":
                feeds[name] = rng.random(shape) < 0.5
            else:
                feeds[name] = rng.standard_normal(shape).astype(dtype)
        with _random_feeds_explained([n for n in feeds if n not in given]):
            if args.bench:
                stats = module.benchmark(feeds=feeds, repeat=args.repeat) if _takes_feeds(module) else module.benchmark(repeat=args.repeat)
                print(json.dumps(stats, indent=2) if args.json else _bench_table(stats, module.num_threads))
                return 0
            if args.compare:
                return _compare(module, feeds, Path(args.compare), args.tolerance, args.threads)
            outputs = module.run(feeds)
        for name, value in outputs.items():
            if args.save:
                Path(args.save).mkdir(parents=True, exist_ok=True)
                np.save(Path(args.save) / f"{name}.npy", value)
            flat = value.ravel()
            preview = np.array2string(flat[:8], precision=5, separator=", ")
            print(f"{name}: {value.dtype}{list(value.shape)} {preview}{' ...' if flat.size > 8 else ''}")
    finally:
        module.close()
    return 0


@contextmanager
def _random_feeds_explained(drawn: Sequence[str]):
    """A run stopped by control flow (an If branch refused at the compiled shapes) on seeded random inputs is the
    inputs' doing: one line naming them and how to give real ones (a user error), not the artifact's failure."""
    from core.codegen.control_flow import CONTROL_ERROR
    from core.runtime.loader import KilnRuntimeError

    try:
        yield
    except KilnRuntimeError as err:
        if not drawn or err.rc != CONTROL_ERROR:
            raise
        raise ValueError(f"the seeded random {', '.join(map(repr, drawn))} took a path this artifact does not run "
                         f"({err}): give real inputs with --input NAME=FILE.npy or --input FILE.npz") from None


def _compare(module, feeds: dict, model: Path, tolerance: Optional[str], threads: Optional[int]) -> int:
    """`kiln run --compare`: the artifact and ONNX Runtime on the same inputs, one line per output, under the policy."""
    from core.driver.precision import judged_as
    from core.driver.tolerance import origins_or_empty, parse_tolerance
    from core.driver.reference import reference_session
    from core.driver.validate import validate
    from core.frontend.model_loading import serialized_model

    if not model.is_file():
        raise ValueError(f"no such model file: {model}")
    data = serialized_model(model)  # external data files are found beside the model
    session = reference_session(data, threads or os.cpu_count() or 1)
    # An artifact compiled at a half precision is judged at that format's tolerance, as its compile was.
    judged = judged_as(getattr(module, "metadata", {}).get("precision", "fp32"), True,
                       {o["name"]: o["dtype"] for o in module.outputs})
    result, _ = validate(module, session, None, samples=[feeds], origins={**origins_or_empty(data), **judged},
                         user_tolerance=parse_tolerance(tolerance) if tolerance else None)
    for out in result.outputs:
        extra = f", top-1 {out.top1:.0%}, top-5 {out.top5:.0%}" if out.top1 is not None else ""
        cosine = f"{out.cosine:.6f}" if out.cosine is not None else "-"
        print(f"{out.name}: {out.dtype} max abs {out.max_abs_err:.3g}, max rel {out.max_rel_err:.3g}, cosine {cosine}"
              f"{extra}; tolerance {out.tolerance.describe()}: {'ok' if out.passed else 'MISMATCH'}")
    if not result.ok:
        print(f"kiln: error: {result.message()}", file=sys.stderr)
        return EXIT_FAILURE
    print("matches ONNX Runtime" if getattr(session, "reference_name", "onnxruntime") == "onnxruntime"
          else f"matches the {session.reference_name}")
    return 0


def _bench_table(stats: dict, threads: int) -> str:
    """`kiln run --bench` for people: one statistic a line, milliseconds aligned."""
    rows = [("median", stats.get("median_ms")), ("first quartile", stats.get("p25_ms")),
            ("third quartile", stats.get("p75_ms")), ("90th percentile", stats.get("p90_ms")),
            ("min", stats.get("min_ms")), ("mean", stats.get("mean_ms"))]
    lines = [f"latency over {stats.get('runs', '?')} runs, {threads} threads"]
    lines += [f"  {label:<16} {value:>10.4f} ms" for label, value in rows if value is not None]
    return "\n".join(lines)


def _takes_feeds(module) -> bool:
    import inspect

    return "feeds" in inspect.signature(module.benchmark).parameters


def cmd_targets(args: argparse.Namespace) -> int:
    from core.backends import all_targets_with_backends

    targets = all_targets_with_backends()
    if args.json:
        print(json.dumps([backend.describe(t) for t, backend in targets], indent=2))
        return 0
    rows = []
    for target, backend in targets:
        t = backend.describe(target)  # runs_on_host: a GPU target where this machine has the GPU and its driver
        if backend.has_shared:  # a GPU: its code is PTX for a compute capability, not SIMD registers
            code = f"{t['cpu']} PTX"
            runs = "runs here (GPU)" if t["runs_on_host"] else "build only: no GPU"
        else:
            code = f"{t['vector_bits']}-bit SIMD"
            runs = ("runs here" if t["runs_on_host"] else f"validated under {t['emulator']}" if t["emulator"]
                    else "cross-compile only")
        rows.append((t["name"], t["triple"], code, runs, t["description"]))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]  # every column as wide as its widest entry
    for row in rows:
        print("  ".join(f"{cell:<{width}}" for cell, width in zip(row, widths)) + "  " + row[4])
    return 0


class _Parser(argparse.ArgumentParser):
    """Usage mistakes as one line, like every other user error (subcommand parsers are of this class too)."""

    def error(self, message: str):
        self.exit(EXIT_USER_ERROR, f"kiln: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    from core.driver.precision import PRECISIONS

    from .quantize import add_int8_arguments

    from core._version import __version__

    parser = _Parser(prog="kiln", description="Kiln: compile ONNX models into native libraries.")
    parser.add_argument("--version", action="version", version=f"kiln {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("compile", help="compile an ONNX model into a deployment artifact (.tar.gz)")
    p.add_argument("model", help="the ONNX model file")
    p.add_argument("-t", "--target", default="native", help="target name (see `kiln targets`), default native")
    p.add_argument("-O", "--opt-level", type=int, choices=range(4), default=3, help="graph optimization level 0-3")
    p.add_argument("--tune-trials", type=int, default=0, help="schedule tuning budget in trials (0: none)")
    p.add_argument("--tune-time", type=float, metavar="SECONDS", help="stop tuning after this long (keeps the best so far)")
    p.add_argument("--records", help="tuning records database (JSON lines); default with --tune-trials: "
                                     "$KILN_RECORDS or ~/.cache/kiln/records.jsonl")
    p.add_argument("--input-shape", type=_parse_shape, action="append", metavar="NAME=D0,D1,...",
                   help="an input's shape (repeatable), for models with symbolic dimensions; a dim may be a range "
                        "(1..8, 224..512:32) or a list (8|128|384): one artifact then serves every shape in range")
    p.add_argument("--max-trip-count", type=int, metavar="N",
                   help="the most iterations a loop whose trip count is known only at run time may make, where its "
                        "scan outputs need room for every iteration (more stops the run with an error)")
    p.add_argument("-o", "--output", required=True, help="where to write the artifact (.tar.gz)")
    p.add_argument("--name", help="artifact name: libNAME.so, NAME.h and C symbols NAME_load, NAME_run, ... so that "
                                  "several models link into one program (default: libkiln_model.so, kiln_load, ...)")
    p.add_argument("--validate", choices=("error", "warn", "off"), default="error",
                   help="on a mismatch with ONNX Runtime: fail (error, default), keep the artifact and say so (warn); "
                        "or do not validate (off)")
    p.add_argument("--tolerance", metavar="ATOL[,RTOL]",
                   help="float outputs pass when |kiln - ort| <= ATOL + RTOL*|ort| (RTOL defaults to ATOL); "
                        "default: the per-dtype policy (README)")
    p.add_argument("--validation-inputs", action="append", metavar="FILE.npz",
                   help="validate on these inputs (arrays named as the model's inputs; a leading axis holds "
                        "several samples; repeatable) instead of seeded random ones")
    p.add_argument("--bisect", action="store_true",
                   help="compare every kernel's output with ONNX Runtime's (a mismatch always does)")
    p.add_argument("--quick", action="store_true",
                   help="fast iteration: skip the latency benchmark, validate on one sample at most, and build "
                        "kernels that compile fast (direct convs, no Winograd)")
    p.add_argument("--kernel-cache", metavar="DIR|off",
                   help="compiled-kernel cache directory, or off (default: $KILN_KERNEL_CACHE, else ~/.cache/kiln/kernels)")
    p.add_argument("--jobs", type=int, metavar="N",
                   help="processes that lower and compile kernels (default: $KILN_BUILD_JOBS, else one per CPU)")
    p.add_argument("--precision", choices=PRECISIONS,
                   help="fp16/bf16: weights stored as float16 or bfloat16 (half the weights file; arithmetic stays "
                        "float32) and validated at that format's tolerance; int8: quantize on --calibration samples "
                        "(as `kiln quantize`), then compile onto integer kernels; default: the model's own (a float16 "
                        "model stays float16)")
    p.add_argument("--calibration", metavar="DATA.npz",
                   help="with --precision int8: calibration samples (one array per model input, first axis = samples)")
    add_int8_arguments(p, "with --precision int8: ")
    gate.add_arguments(p, "ARTIFACT", "CI gate: time the new build against this artifact (same model) here, "
                                      "interleaved; exit 3 with one line why when it is slower or less accurate than "
                                      "--max-slowdown/--max-error-growth allow")
    p.set_defaults(func=cmd_compile)

    p = sub.add_parser("run", help="run an artifact: print its outputs, or time it with --bench")
    p.add_argument("artifact")
    p.add_argument("--input", type=_parse_input, action="append", metavar="NAME=FILE.npy|FILE.npz",
                   help="an input from a .npy, or an .npz (its array named NAME, or its only one); FILE.npz alone feeds "
                        "every input it names (repeatable); missing inputs are seeded random")
    p.add_argument("--bench", action="store_true", help="print latency statistics instead of outputs")
    p.add_argument("--repeat", type=int, default=50, help="timed runs for --bench")
    p.add_argument("--json", action="store_true", help="with --bench: print the statistics as JSON (for scripts)")
    p.add_argument("--threads", type=int, help="worker threads (default: all cores)")
    p.add_argument("--save", metavar="DIR", help="also save each output as DIR/NAME.npy")
    p.add_argument("--compare", metavar="MODEL.onnx",
                   help="compare the outputs with ONNX Runtime's for this model on the same inputs (exit 1 on a mismatch)")
    p.add_argument("--tolerance", metavar="ATOL[,RTOL]", help="with --compare: the float tolerance (default: the policy)")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("targets", help="list compilation targets")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_targets)

    from . import rebuild, service_commands, submit

    service_commands.add_parsers(sub)
    rebuild.add_parser(sub)
    from . import quantize

    quantize.add_parser(sub)
    submit.add_parser(sub, _parse_shape)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    from core.errors import KilnError
    from core.runtime.loader import KilnRuntimeError

    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except KilnError as err:
        print(f"kiln: error: {err}", file=sys.stderr)
        return EXIT_USER_ERROR if err.code in USER_ERROR_CODES else EXIT_FAILURE
    except KilnRuntimeError as err:  # the artifact cannot load or run here (another CPU, no GPU, ...)
        print(f"kiln: error: {err}", file=sys.stderr)
        return EXIT_FAILURE
    except (OSError, ValueError) as err:
        print(f"kiln: error: {err}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print("kiln: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
