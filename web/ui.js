// Small DOM and formatting helpers shared by the views: an element builder (text is always set as
// text, never parsed as HTML, so names from uploaded models cannot inject markup), number/time
// formats, the progress bar, and the message box used for errors.

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") el.className = value;
    else if (key === "dataset") Object.assign(el.dataset, value);
    else if (key === "testid") el.dataset.testid = value;
    else if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (value === true) el.setAttribute(key, "");
    else el.setAttribute(key, String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

export function $(selector, root = document) {
  return root.querySelector(selector);
}

export const ACTIVE = new Set(["queued", "running"]);

export function isActive(job) {
  return ACTIVE.has(job.status);
}

export function shortId(id) {
  return String(id).slice(0, 8);
}

export function formatBytes(n) {
  if (typeof n !== "number" || !Number.isFinite(n)) return "–";
  const units = ["B", "KiB", "MiB", "GiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i += 1;
  }
  return `${n.toFixed(i === 0 ? 0 : 1)} ${units[i]}`;
}

export function formatNumber(value, digits = 2) {
  return typeof value === "number" && Number.isFinite(value) ? value.toFixed(digits) : "–";
}

export function formatSci(value) {
  if (value === 0) return "0";
  return typeof value === "number" && Number.isFinite(value) ? value.toExponential(2) : "–";
}

// Milliseconds with sensible precision: 24.41 ms, 0.0213 ms.
export function formatMs(value) {
  if (typeof value !== "number" || !Number.isFinite(value)) return "–";
  return `${value >= 1 ? value.toFixed(2) : Number(value.toPrecision(3))} ms`;
}

export function formatShape(shape) {
  return Array.isArray(shape) ? `[${shape.join(", ")}]` : "unknown";
}

// Seconds as "42 s", "3 min 05 s" or "1 h 02 min".
export function formatDuration(seconds) {
  const s = Math.max(0, Math.floor(seconds));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${String(s % 60).padStart(2, "0")} s`;
  return `${Math.floor(s / 3600)} h ${String(Math.floor((s % 3600) / 60)).padStart(2, "0")} min`;
}

export function formatTime(iso) {
  if (!iso) return "–";
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? "–" : d.toLocaleString();
}

// How long a job has run (or has waited, while queued); it stops counting when the job ends.
export function elapsedText(job, now = Date.now()) {
  const start = Date.parse(job.started_at || job.created_at);
  if (Number.isNaN(start)) return "";
  const end = job.finished_at ? Date.parse(job.finished_at) : now;
  const text = formatDuration((end - start) / 1000);
  return job.status === "queued" ? `waiting ${text}` : text;
}

export function percent(job) {
  const p = job.status === "succeeded" ? 1 : Number(job.progress) || 0;
  return Math.round(Math.min(1, Math.max(0, p)) * 100);
}

// A bar with role=progressbar (screen readers read aria-valuenow); update with setProgress().
export function progressBar(label, testid) {
  const fill = h("div", { class: "bar-fill" });
  const bar = h("div", {
    class: "bar", role: "progressbar", "aria-label": label, "aria-valuemin": 0, "aria-valuemax": 100,
    "aria-valuenow": 0, testid,
  }, fill);
  return bar;
}

export function setProgress(bar, pct, status = "running") {
  bar.setAttribute("aria-valuenow", String(pct));
  bar.setAttribute("aria-valuetext", `${pct}% (${status})`);
  bar.dataset.status = status;
  bar.firstElementChild.style.width = `${pct}%`;
}

export function statusBadge(status, testid) {
  return h("span", { class: `badge badge-${status}`, testid }, status);
}

// A job's status, marked when it built but failed its CI gate (JobOut.gate), then what kind of build it is.
export function jobBadges(job, testid) {
  const gateFailed = job.gate && job.gate.passed === false;
  const tags = [];
  if (job.precision && job.precision !== "fp32") tags.push(job.precision);
  if (Object.values(job.input_shapes || {}).some((dims) => dims.some((d) => typeof d === "string"))) tags.push("ranges");
  if ((job.tuning?.trials ?? 0) > 0) tags.push(`tuned ${job.tuning.trials}`);
  return [
    statusBadge(job.status, testid),
    gateFailed ? h("span", { class: "badge badge-gate-failed", testid: "gate-failed", title: job.gate.message || "" },
      "gate failed") : null,
    ...tags.map((tag) => h("span", { class: "badge badge-tag", testid: "job-tag" }, tag)),
  ].filter(Boolean);
}

// Show an error (message + optional lines, e.g. unsupported ops) in a box, or clear it with null.
export function showMessage(box, error, kind = "error") {
  box.replaceChildren();
  box.hidden = !error;
  if (!error) return;
  box.className = `message message-${kind}`;
  box.append(h("p", {}, error.message || String(error)));
  if (error.lines && error.lines.length) {
    box.append(h("ul", {}, error.lines.map((line) => h("li", {}, line))));
  }
}
