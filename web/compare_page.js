// The compare page (#/compare/A/B): two jobs of the same model side by side: latency with quartiles, errors against
// ONNX Runtime, tuning, options, time per kernel, and where their reproducibility manifests differ. #/compare/A lets
// the user pick the second job among the model's other finished builds.

import { api, ApiError } from "./api.js";
import { jobsNewestFirst, modelName } from "./store.js";
import { ratioBars } from "./charts.js";
import { formatMs, formatNumber, formatSci, formatTime, h, showMessage } from "./ui.js";

const quartileText = (q) => (Array.isArray(q) && q.length === 3 ? `${formatMs(q[0])} – ${formatMs(q[2])}` : "–");
const ms = (v) => (typeof v === "number" ? formatMs(v) : "–");
const short = (value) => {
  const text = typeof value === "string" ? value : JSON.stringify(value);
  return text === undefined ? "–" : text.length > 80 ? `${text.slice(0, 77)}…` : text;
};

function table(testid, headers, rows) {
  return h("table", { class: "tensors compare-table", testid },
    h("thead", {}, h("tr", {}, headers.map((x) => h("th", { scope: "col" }, x)))),
    h("tbody", {}, rows.map(([label, ...cells]) =>
      h("tr", { dataset: { row: label } }, h("th", { scope: "row" }, label), cells.map((c) => h("td", {}, c))))));
}

function tuningSummary(tuning) {
  if (!tuning || (!tuning.trials && !tuning.cache_hits && !tuning.pinned_from_manifest)) return "no tuning";
  const tasks = tuning.num_tasks ?? (tuning.tasks || []).length;
  const best = Math.max(0, ...(tuning.tasks || []).map((t) => t.best_gflops || 0));
  return `${tuning.trials} trials, ${tasks} tasks, ${tuning.cache_hits} from records` +
    (best ? `, best ${formatNumber(best, 1)} GFLOP/s` : "") +
    (tuning.pinned_from_manifest ? ` (${tuning.pinned_from_manifest} pinned by a manifest)` : "");
}

function summaryRows(a, b) {
  const row = (label, pick) => [label, pick(a), pick(b)];
  const lat = (side) => side.report?.latency_ms || {};
  const val = (side) => side.report?.validation || {};
  const options = (side) => short(Object.fromEntries(Object.entries(side.options || {})
    .filter(([k]) => !["baseline", "rebuild", "validation_inputs"].includes(k))));
  return [
    row("Target", (s) => s.target),
    row("Optimization level", (s) => `O${s.opt_level}`),
    row("Status", (s) => s.status),
    row("Latency (median)", (s) => ms(lat(s).kiln)),
    row("Latency quartiles", (s) => quartileText(lat(s).kiln_quartiles)),
    row("Kiln / ONNX Runtime", (s) => (typeof lat(s).ratio === "number" ? `${formatNumber(lat(s).ratio, 3)}×` : "–")),
    row("Max abs error vs ORT", (s) => (typeof val(s).max_abs_err === "number" ? formatSci(val(s).max_abs_err) : "–")),
    row("Max rel error vs ORT", (s) => (typeof val(s).max_rel_err === "number" ? formatSci(val(s).max_rel_err) : "–")),
    row("Kernels", (s) => String(s.report?.graph?.kernels ?? "–")),
    row("Tuning", (s) => tuningSummary(s.report?.tuning)),
    row("Options", options),
  ];
}

// Kernels are matched by what they compute, not their position: "k003_conv_relu" and "k001_conv_relu" are the same
// kernel in builds that fused differently before it (a repeated name matches its n-th occurrence).
function kernelKeys(kernels) {
  const seen = new Map();
  return kernels.map((k) => {
    const base = k.name.replace(/^k\d+_/, "");
    seen.set(base, (seen.get(base) || 0) + 1);
    return [seen.get(base) > 1 ? `${base} (${seen.get(base)})` : base, k];
  });
}

function kernelTimes(a, b) {
  const times = (side) => new Map(kernelKeys(side.report?.kernels || []));
  const ka = times(a);
  const kb = times(b);
  return [...new Set([...ka.keys(), ...kb.keys()])].map((name) => [name, ka.get(name)?.time_ms ?? null,
    kb.get(name)?.time_ms ?? null]);
}

function kernelRows(a, b) {
  return kernelTimes(a, b).map(([name, ta, tb]) => [name, ms(ta), ms(tb), ta && tb ? `${formatNumber(tb / ta, 2)}×` : "–"]);
}

// The kernels both builds have, B's time over A's as bars around 1×.
function kernelChart(a, b) {
  const both = kernelTimes(a, b).filter(([, ta, tb]) => ta && tb).map(([label, ta, tb]) => ({ label, ratio: tb / ta }));
  return both.length ? ratioBars(both, { title: "Kernel time, B / A", testid: "compare-kernel-chart" })
    : h("p", { class: "hint", testid: "compare-kernel-chart" }, "No kernel is in both builds (they fused the graph " +
      "differently): there are no ratios to chart.");
}

// A build timed while the machine was busy (its report's latency_ms.busy) is no base for a comparison: say so.
function busyWarning(a, b) {
  const busy = [["A", a], ["B", b]].filter(([, side]) => side.report?.latency_ms?.busy);
  if (!busy.length) return null;
  return h("p", { class: "busy-warning", testid: "compare-busy", role: "note" },
    `Measured on a busy machine: ${busy.map(([name, side]) => `${name} (${side.report.latency_ms.warning ||
      "other work ran while it was timed"})`).join("; ")}. Its latencies and kernel times may be off; compare them ` +
    "again on an idle machine.");
}

export function mountComparePage(container, idA, idB) {
  const messageBox = h("div", { role: "alert", hidden: true, testid: "compare-error" });
  const body = h("div", { testid: "compare-body" }, h("p", { class: "hint" }, "Loading both builds…"));
  const picker = h("select", { testid: "compare-pick", "aria-label": "Job to compare with" });
  container.replaceChildren(h("div", { class: "job-page", testid: "compare-page" },
    h("nav", { class: "crumbs" }, h("a", { href: `#/jobs/${idA}`, testid: "compare-back" }, "← Back to the job")),
    h("div", { class: "card" }, h("h2", { tabindex: "-1" }, "Compare builds"),
      h("label", {}, "Compare with ", picker), messageBox, body)));

  function fillPicker(modelId) {
    const others = jobsNewestFirst().filter((j) => j.model_id === modelId && j.id !== idA && j.status === "succeeded");
    picker.replaceChildren(h("option", { value: "" }, others.length ? "choose a job…" : "no other finished job"),
      ...others.map((j) => h("option", { value: j.id, selected: j.id === idB },
        `${j.id.slice(0, 8)} · ${j.target} · O${j.opt_level} · ${formatTime(j.finished_at)}`)));
  }
  picker.addEventListener("change", () => {
    if (picker.value) location.hash = `#/compare/${idA}/${picker.value}`;
  });

  api.job(idA).then((job) => {
    fillPicker(job.model_id);
    if (!idB) body.replaceChildren(h("p", { class: "hint" }, `Pick another build of ${modelName(job.model_id)}.`));
  }).catch((err) => showMessage(messageBox, err));
  if (idB) {
    api.compareJobs(idA, idB).then(({ a, b, manifest_differences: diffs }) => {
      const head = ["", `A: ${a.id.slice(0, 8)}`, `B: ${b.id.slice(0, 8)}`];
      body.replaceChildren(
        busyWarning(a, b),
        h("h3", {}, "Summary"), table("compare-summary", head, summaryRows(a, b)),
        h("h3", {}, "Time per kernel"),
        kernelChart(a, b),
        table("compare-kernels", ["kernel", "A", "B", "B / A"], kernelRows(a, b)),
        h("h3", {}, "Manifest differences"),
        diffs.length ? table("compare-manifest", ["entry", "A", "B"], diffs.map((d) => [d.key, short(d.a), short(d.b)]))
          : h("p", { testid: "compare-manifest-same" }, "The manifests agree: same model, compiler, target and options."));
    }).catch((err) => {
      body.replaceChildren();
      showMessage(messageBox, new ApiError(err.status, err.message));
    });
  }
  return () => {};
}
