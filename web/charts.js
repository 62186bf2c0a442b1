// Small SVG charts drawn in the page (no library): lines of points on shared axes (the live tuning chart), and
// horizontal bars of ratios around 1 on a log scale (the compare view's kernels).

const NS = "http://www.w3.org/2000/svg";
const COLORS = ["#2563eb", "#16a34a", "#d97706", "#9333ea", "#0891b2", "#dc2626", "#4d7c0f", "#be185d"];

function s(tag, attrs = {}, ...children) {
  const el = document.createElementNS(NS, tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value !== null && value !== undefined) el.setAttribute(key, String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child !== null && child !== undefined) el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

function niceMax(value) {
  if (!(value > 0)) return 1;
  const step = 10 ** Math.floor(Math.log10(value));
  return [1, 2, 2.5, 5, 10].map((m) => m * step).find((v) => v >= value);
}

// series: [{label, points: [[x, y], ...], emphasis}]; the emphasized series is drawn thick and last.
export function lineChart(series, { title, xLabel, yLabel, testid, width = 640, height = 260 } = {}) {
  const pad = { left: 56, right: 16, top: 28, bottom: 40 };
  const all = series.flatMap((line) => line.points);
  const xMax = niceMax(Math.max(1, ...all.map((p) => p[0])));
  const yMax = niceMax(Math.max(0, ...all.map((p) => p[1])));
  const x = (v) => pad.left + (v / xMax) * (width - pad.left - pad.right);
  const y = (v) => height - pad.bottom - (v / yMax) * (height - pad.top - pad.bottom);
  const ticks = [0, 0.25, 0.5, 0.75, 1];
  const grid = ticks.map((t) => [
    s("line", { x1: pad.left, x2: width - pad.right, y1: y(t * yMax), y2: y(t * yMax), class: "chart-grid" }),
    s("text", { x: pad.left - 6, y: y(t * yMax) + 4, "text-anchor": "end", class: "chart-tick" },
      +(t * yMax).toPrecision(3)),
    s("text", { x: x(t * xMax), y: height - pad.bottom + 16, "text-anchor": "middle", class: "chart-tick" },
      +(t * xMax).toPrecision(3)),
  ]);
  const ordered = [...series.filter((l) => !l.emphasis), ...series.filter((l) => l.emphasis)];
  const lines = ordered.map((line) => {
    const color = line.emphasis ? "#111827" : COLORS[series.indexOf(line) % COLORS.length];
    const path = line.points.map((p, i) => `${i ? "L" : "M"}${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join("");
    const [lastX, lastY] = line.points[line.points.length - 1] || [0, 0];
    return [s("path", { d: path, fill: "none", stroke: color, "stroke-width": line.emphasis ? 3 : 1.5,
      "data-series": line.label }, s("title", {}, line.label)),
    s("circle", { cx: x(lastX), cy: y(lastY), r: line.emphasis ? 4 : 3, fill: color })]; // a first batch is one point
  });
  const legend = series.map((line, i) => s("text", {
    x: pad.left + 8, y: pad.top + 14 + i * 14, class: "chart-legend",
    fill: line.emphasis ? "#111827" : COLORS[i % COLORS.length],
  }, line.label)).slice(0, 9);
  return s("svg", { viewBox: `0 0 ${width} ${height}`, class: "live-chart", role: "img", "aria-label": title,
    "data-testid": testid },
  s("text", { x: pad.left, y: 16, class: "chart-title" }, title), grid, lines, legend,
  s("text", { x: (width + pad.left) / 2, y: height - 6, "text-anchor": "middle", class: "chart-axis" }, xLabel),
  s("text", { x: 14, y: (height - pad.bottom + pad.top) / 2, "text-anchor": "middle", class: "chart-axis",
    transform: `rotate(-90 14 ${(height - pad.bottom + pad.top) / 2})` }, yLabel));
}

// rows: [{label, ratio}] (B / A); bars grow right of 1 when B is slower, left when faster (log scale).
export function ratioBars(rows, { title, testid, width = 640 } = {}) {
  const shown = rows.filter((r) => r.ratio > 0);
  const barHeight = 18;
  const pad = { left: 220, right: 60, top: 28, bottom: 24 };
  const height = pad.top + pad.bottom + shown.length * (barHeight + 4);
  const span = Math.max(Math.log2(2), ...shown.map((r) => Math.abs(Math.log2(r.ratio))));
  const mid = pad.left + (width - pad.left - pad.right) / 2;
  const scale = (width - pad.left - pad.right) / 2 / span;
  const bars = shown.map((r, i) => {
    const top = pad.top + i * (barHeight + 4);
    const w = Math.log2(r.ratio) * scale;
    const label = r.label.length > 30 ? `${r.label.slice(0, 29)}…` : r.label;
    return s("g", { "data-kernel": r.label },
      s("text", { x: pad.left - 8, y: top + 13, "text-anchor": "end", class: "chart-tick" }, label),
      s("rect", { x: Math.min(mid, mid + w), y: top, width: Math.max(1, Math.abs(w)), height: barHeight,
        class: r.ratio > 1 ? "bar-slower" : "bar-faster" }, s("title", {}, `${r.label}: ${r.ratio.toFixed(2)}×`)),
      s("text", { x: width - pad.right + 6, y: top + 13, class: "chart-tick" }, `${r.ratio.toFixed(2)}×`));
  });
  return s("svg", { viewBox: `0 0 ${width} ${height}`, class: "live-chart", role: "img", "aria-label": title,
    "data-testid": testid },
  s("text", { x: pad.left, y: 16, class: "chart-title" }, title),
  s("line", { x1: mid, x2: mid, y1: pad.top - 4, y2: height - pad.bottom + 4, class: "chart-axis-line" }),
  s("text", { x: mid, y: height - 6, "text-anchor": "middle", class: "chart-tick" }, "1× (same)"),
  s("text", { x: pad.left, y: height - 6, class: "chart-tick" }, "← B faster"),
  s("text", { x: width - pad.right, y: height - 6, "text-anchor": "end", class: "chart-tick" }, "B slower →"),
  bars);
}
