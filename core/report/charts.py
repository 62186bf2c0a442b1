"""Charts for report.html: one function per chart, each returning inline SVG markup (or None when there is
no data to draw). matplotlib's object API with no pyplot, so no GUI backend and no global figure state."""
from __future__ import annotations

import io
import math
import re
from contextlib import contextmanager
from typing import Any, Iterator, Optional, Sequence

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.figure import Figure

KILN = "#d35f1f"  # ember orange: everything Kiln produced
ORT = "#6b7a8f"  # slate: the ONNX Runtime reference
NAIVE = "#b8c0cc"  # light grey: the baseline a Kiln number is compared with
WEIGHTS = "#3b7ea1"  # blue: constant data
OTHER = "#c9ced6"  # the "other kernels" remainder bar
INK, MUTED = "#1f2430", "#5c6370"

WIDTH_IN = 10.0  # 720 pt: about 960 px at natural size; CSS scales it down on narrow screens
LABEL_CHARS = 56  # longer axis labels get an ellipsis so the bars keep their room

_STYLE = {
    # Text stays text in the SVG: small, selectable, and drawn with the page's fallback font elsewhere.
    "svg.fonttype": "none",
    "font.family": "sans-serif",
    "font.sans-serif": ["DejaVu Sans"],
    "font.size": 10,
    # Names come from uploaded models: a "$" must never switch on mathtext (which can raise on bad TeX).
    "text.parse_math": False,
    "text.usetex": False,
    "text.color": INK,
    "axes.labelcolor": INK,
    "axes.edgecolor": "#d0d4da",
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.titlesize": 11,
    "axes.titleweight": "bold",
    "axes.titlelocation": "left",
    "xtick.color": MUTED,
    "ytick.color": INK,
    "grid.color": "#e6e8ec",
    "figure.facecolor": "white",
    "axes.facecolor": "white",
}


def _matplotlib():
    """matplotlib, imported when the first chart is drawn (seconds on a busy machine): a page without charts (a
    quick compile's) and the helpers below never pay for it."""
    import matplotlib
    import matplotlib.figure
    import matplotlib.ticker

    return matplotlib


@contextmanager
def _style(name: str) -> Iterator[None]:
    # A per-chart salt makes the SVG ids deterministic (reproducible artifacts) yet distinct between the
    # charts of one page, where clip-path references would otherwise collide.
    with _matplotlib().rc_context({**_STYLE, "svg.hashsalt": f"kiln-{name}"}):
        yield


def _figure(height_in: float) -> tuple[Figure, Any]:
    fig = _matplotlib().figure.Figure(figsize=(WIDTH_IN, height_in), layout="constrained")
    return fig, fig.add_subplot()


_ID = re.compile(r' id="([^"]+)"')


def _svg(fig: Figure, name: str, title: str) -> str:
    """The figure as an `<svg>` element ready to inline: no XML prolog, no unreferenced ids, an accessible title."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    svg = buf.getvalue()
    svg = svg[svg.index("<svg"):]
    svg = re.sub(r"<metadata>.*?</metadata>\s*", "", svg, flags=re.S)
    # matplotlib names every group (figure_1, axes_1, ...); several charts on one page would repeat those
    # ids, so keep only the ids something points at (clip paths, glyphs).
    used = set(re.findall(r"#([\w.-]+)\)?\"", svg))
    svg = _ID.sub(lambda m: m.group(0) if m.group(1) in used else "", svg)
    # matplotlib escapes the text it writes itself; the label is ours to escape.
    return svg.replace("<svg ", f'<svg class="chart" data-chart="{name}" role="img" aria-label="{_attr(title)}" ', 1)


def _attr(text: str) -> str:
    return text.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;").replace(">", "&gt;")


def _short(text: str, limit: int = LABEL_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _number(value: Any) -> Optional[float]:
    """A finite float, or None for anything a chart cannot place (missing, NaN, inf, not a number)."""
    try:
        result = float(value)
    except (TypeError, ValueError):
        return None
    return result if math.isfinite(result) else None


def _byte_unit(n: float) -> tuple[str, int]:
    for power, unit in enumerate(("B", "KiB", "MiB")):
        if abs(n) < 1024 ** (power + 1):
            return unit, 1024 ** power
    return "GiB", 1024 ** 3


def human_bytes(n: float) -> str:
    unit, scale = _byte_unit(n)
    return f"{n:.0f} B" if unit == "B" else f"{n / scale:.1f} {unit}"


def _hbars(ax: Any, labels: Sequence[str], values: Sequence[float], colors: Sequence[str],
           notes: Sequence[str]) -> None:
    """Horizontal bars, first item on top, each annotated at its end; the x axis leaves room for the notes."""
    ys = range(len(values))[::-1]
    ax.barh(list(ys), values, color=colors, height=0.66)
    ax.set_yticks(list(ys), labels)
    ax.tick_params(axis="y", length=0)
    ax.grid(axis="x")
    ax.set_axisbelow(True)
    top = max(values) if values and max(values) > 0 else 1.0
    ax.set_xlim(0, top * 1.22)  # room for the annotation after the longest bar
    for y, value, note in zip(ys, values, notes):
        ax.text(value + top * 0.01, y, note, va="center", fontsize=9, color=MUTED)


def kernel_breakdown(kernels: Sequence[dict], top: int = 20) -> Optional[str]:
    """Where the time goes: the `top` slowest kernels by measured time, the rest summed as one bar."""
    timed = [(k, t) for k in kernels if (t := _number(k.get("time_ms"))) is not None and t >= 0]
    if not timed:
        return None
    timed.sort(key=lambda kt: kt[1], reverse=True)
    total = sum(t for _, t in timed) or 1.0
    shown, rest = timed[:top], timed[top:]
    labels = [_short(f"{k.get('name', '?')}  ·  {' + '.join(map(str, k.get('ops') or [])) or '?'}") for k, _ in shown]
    values = [t for _, t in shown]
    colors = [KILN] * len(shown)
    if rest:
        labels.append(f"other ({len(rest)} kernels)")
        values.append(sum(t for _, t in rest))
        colors.append(OTHER)
    notes = [f"{v:.3f} ms  ({100 * v / total:.1f}%)" for v in values]
    title = f"Time per kernel: {len(timed)} kernels, {total:.2f} ms in all (each timed alone)"
    with _style("kernels"):
        fig, ax = _figure(0.9 + 0.27 * len(values))
        _hbars(ax, labels, values, colors, notes)
        ax.set_xlabel("milliseconds")
        ax.set_title(title)
        return _svg(fig, "kernels", title)


def latency(lat: dict) -> Optional[str]:
    """End-to-end latency of Kiln next to ONNX Runtime from the same run."""
    kiln, ort = _number(lat.get("kiln")), _number(lat.get("onnxruntime"))
    if kiln is None or ort is None:
        return None
    title = "Median latency per inference: same inputs, same threads, interleaved runs"
    with _style("latency"):
        fig, ax = _figure(1.7)
        _hbars(ax, ["Kiln", "ONNX Runtime"], [kiln, ort], [KILN, ORT], [f"{kiln:.3f} ms", f"{ort:.3f} ms"])
        ax.set_xlabel("milliseconds per inference")
        ax.set_title(title)
        return _svg(fig, "latency", title)


def ratio_sentence(kiln: float, ort: float) -> str:
    """Say which side is faster and by how much; a ratio below 1 is easy to misread on its own."""
    if kiln <= 0 or ort <= 0:
        return "not comparable"
    ratio = kiln / ort
    if ratio <= 1:
        return f"Kiln is {1 / ratio:.2f}x faster than ONNX Runtime (ratio {ratio:.2f})"
    return f"Kiln is {ratio:.2f}x slower than ONNX Runtime (ratio {ratio:.2f})"


def tuning_curves(tasks: Sequence[dict]) -> Optional[str]:
    """Best GFLOP/s found so far against trials, one step line per tuning task."""
    curves = []
    for task in tasks:
        points = [(x, y) for p in task.get("curve") or [] if isinstance(p, (list, tuple)) and len(p) >= 2
                  and (x := _number(p[0])) is not None and (y := _number(p[1])) is not None]
        if points:
            curves.append((str(task.get("workload", "?")), sorted(points)))
    if not curves:
        return None
    title = f"Tuning: best GFLOP/s found against trials ({len(curves)} tasks)"
    # tab10 keeps colors distinct for the common case; tab20 before colors would repeat.
    cmap = _matplotlib().colormaps["tab10" if len(curves) <= 10 else "tab20"]
    with _style("tuning"):
        columns = 2 if len(curves) <= 12 else 3  # the legend sits below the plot; keep it from growing too tall
        fig, ax = _figure(3.6 + 0.2 * math.ceil(len(curves) / columns))
        for i, (workload, points) in enumerate(curves):
            xs, ys = zip(*points)
            ax.step(xs, ys, where="post", color=cmap(i % cmap.N), linewidth=1.6, label=_short(workload, 48))
            ax.plot(xs[-1], ys[-1], "o", color=cmap(i % cmap.N), markersize=3.5)
        ax.set_xlabel("trials")
        ax.set_ylabel("best GFLOP/s")
        ax.xaxis.set_major_locator(_matplotlib().ticker.MaxNLocator(integer=True))
        ax.set_ylim(bottom=0)
        ax.grid(True)
        ax.set_axisbelow(True)
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncols=columns, frameon=False, fontsize=8.5)
        ax.set_title(title)
        return _svg(fig, "tuning", title)


def memory(mem: dict) -> Optional[str]:
    """The planned arena next to the naive sum of intermediate buffers, and the weights for scale."""
    items = [(label, value, color) for label, key, color in
             (("arena (planned)", "arena_bytes", KILN), ("naive (one buffer each)", "naive_bytes", NAIVE),
              ("weights", "weights_bytes", WEIGHTS))
             if (value := _number(mem.get(key))) is not None and value >= 0]
    if not items:
        return None
    arena, naive = _number(mem.get("arena_bytes")), _number(mem.get("naive_bytes"))
    saving = f": the arena saves {100 * (1 - arena / naive):.0f}% of the naive size" if arena is not None and naive else ""
    title = f"Memory plan{saving}"
    with _style("memory"):
        fig, ax = _figure(0.9 + 0.32 * len(items))
        labels, values, colors = zip(*items)
        # Plot in the unit of the largest bar so the axis gets round ticks (10 MiB, not 9.5 MiB).
        unit, scale = _byte_unit(max(values))
        _hbars(ax, labels, [v / scale for v in values], colors, [human_bytes(v) for v in values])
        ax.set_xlabel(unit)
        ax.set_title(title)
        return _svg(fig, "memory", title)


def timings(times: dict) -> Optional[str]:
    """Compile time per pipeline stage, in pipeline order; the total goes into the title, not a bar."""
    stages = [(str(k), v) for k, value in times.items() if k != "total" and (v := _number(value)) is not None]
    if not stages:
        return None
    total = _number(times.get("total"))
    title = f"Compile time: {total:.2f} s in all" if total is not None else "Compile time per stage"
    with _style("timings"):
        fig, ax = _figure(0.8 + 0.28 * len(stages))
        labels, values = zip(*stages)
        _hbars(ax, labels, values, [WEIGHTS] * len(values), [f"{v:.2f} s" for v in values])
        ax.set_xlabel("seconds")
        ax.set_title(title)
        return _svg(fig, "timings", title)


def kernel_errors(trace: Sequence[dict]) -> Optional[str]:
    """The bisect: each compared kernel's max abs error against ONNX Runtime's same tensor, in call order (log
    scale), within-tolerance kernels in slate, out-of-tolerance ones in Kiln's colour, the first one marked."""
    points = [(i, e, bool(k.get("passed"))) for i, k in enumerate(trace) if (e := _number(k.get("max_abs_err"))) is not None]
    if not points:
        return None
    floor = min((e for _, e, _ in points if e > 0), default=1e-12) / 10
    first = next((i for i, _, ok in points if not ok), None)
    title = ("Error kernel by kernel: " + (f"first out of tolerance at {trace[first].get('kernel', '?')}" if first is not None
                                           else "every compared kernel within tolerance"))
    with _style("kernel_errors"):
        fig, ax = _figure(3.2)
        xs = [i for i, _, _ in points]
        ys = [max(e, floor) for _, e, _ in points]
        ax.plot(xs, ys, color=ORT, linewidth=1, zorder=1)
        ax.scatter(xs, ys, c=[ORT if ok else KILN for _, _, ok in points], s=14, zorder=2)
        if first is not None:
            ax.axvline(first, color=KILN, linestyle="--", linewidth=1)
        ax.set_yscale("log")
        # Plain labels: the log formatter's default writes mathtext, which this style shows as raw text.
        ax.yaxis.set_major_formatter(_matplotlib().ticker.FuncFormatter(lambda value, _: f"{value:.0e}"))
        ax.yaxis.set_minor_formatter(_matplotlib().ticker.NullFormatter())
        ax.xaxis.set_major_locator(_matplotlib().ticker.MaxNLocator(integer=True))
        ax.set_xlabel("kernel (call order)")
        ax.set_ylabel("max abs error vs ONNX Runtime")
        ax.grid(axis="y")
        ax.set_title(title)
        return _svg(fig, "kernel_errors", title)
