// The jobs list: one row per job with its status, stage, a live progress bar, elapsed time, a cancel
// button while it is active, and once it ended a delete button (and, if it succeeded, its latency ratio); a
// tuning job's stage shows its best GFLOP/s so far and time left. A search box, a status filter and pages of 20.
// Rows are updated in place (not redrawn) so bars animate and keyboard focus stays where it was.

import { api } from "./api.js";
import { forgetJob, jobsNewestFirst, modelName, putJob, store, subscribe } from "./store.js";
import {
  elapsedText, h, isActive, jobBadges, percent, progressBar, setProgress, shortId, showMessage,
} from "./ui.js";
import { tuningText } from "./tuning.js";

const OPT_NAMES = ["O0", "O1", "O2", "O3"];
const PAGE_SIZE = 20;
const STATUSES = ["queued", "running", "succeeded", "failed", "cancelled"];

export function announce(text) {
  const region = document.getElementById("announcer");
  if (region) region.textContent = text;
}

function buildRow(job) {
  const bar = progressBar(`Progress of job ${shortId(job.id)}`, "job-progress");
  const cancel = h("button", { type: "button", class: "button button-small button-quiet", testid: "job-cancel" },
    "Cancel");
  cancel.addEventListener("click", () => cancelJob(job.id, cancel));
  const remove = h("button", { type: "button", class: "button button-small button-quiet", testid: "job-delete" },
    "Delete");
  remove.addEventListener("click", () => removeJob(job.id, remove));
  const row = h("li", { class: "job", testid: "job-row", dataset: { jobId: job.id } },
    h("div", { class: "job-head" },
      h("a", { class: "job-title", href: `#/jobs/${job.id}`, testid: "job-open" }, ""),
      h("span", { class: "job-meta" }, ""),
      h("span", { class: "job-badge" })),
    h("div", { class: "job-bar" }, bar, h("span", { class: "job-percent", testid: "job-percent" })),
    h("div", { class: "job-foot" },
      h("span", { class: "job-stage", testid: "job-stage" }),
      h("span", { class: "job-elapsed", testid: "job-elapsed" }),
      h("span", { class: "job-result", testid: "job-result" }),
      cancel, remove),
    h("p", { class: "job-error", testid: "job-row-error", hidden: true }));
  updateRow(row, job);
  return row;
}

function updateRow(row, job) {
  row.dataset.status = job.status;
  row.querySelector(".job-title").textContent = modelName(job.model_id);
  row.querySelector(".job-meta").textContent = `${job.target} · ${OPT_NAMES[job.opt_level] ?? job.opt_level} · #${shortId(job.id)}`;
  row.querySelector(".job-badge").replaceChildren(...jobBadges(job, "job-status"));
  const pct = percent(job);
  setProgress(row.querySelector(".bar"), pct, job.status);
  row.querySelector(".job-percent").textContent = `${pct}%`;
  row.querySelector(".job-stage").textContent = tuningText(job) || (isActive(job) ? `stage: ${job.stage}` : job.stage);
  row.querySelector(".job-elapsed").textContent = elapsedText(job);
  row.querySelector("[data-testid=job-cancel]").hidden = !isActive(job);
  row.querySelector("[data-testid=job-delete]").hidden = isActive(job);
  const error = row.querySelector(".job-error");
  error.hidden = !job.error;
  error.textContent = job.error || "";
  if (job.status === "succeeded") showResult(row, job.id);
}

// A succeeded job's latency ratio to ONNX Runtime and whether it was tuned, from its report: fetched once
// per job, one report at a time, so that a long list does not flood the server.
const results = new Map(); // job id -> text ("" while it loads)
let reportQueue = Promise.resolve();

function resultText(report) {
  const ratio = report.latency_ms && report.latency_ms.ratio;
  const tuned = (report.tuning && report.tuning.trials > 0) || (report.kernels || []).some((k) => k.tuned);
  return (typeof ratio === "number" ? `${ratio.toFixed(2)}× ORT latency` : "not benchmarked") + (tuned ? " · tuned" : "");
}

function showResult(row, id) {
  const span = row.querySelector(".job-result");
  if (results.has(id)) {
    span.textContent = results.get(id);
    return;
  }
  results.set(id, "");
  reportQueue = reportQueue.then(async () => {
    try {
      results.set(id, resultText(await api.report(id)));
    } catch {
      results.delete(id); // removed meanwhile, or a transient failure: the next redraw asks again
      return;
    }
    if (row.isConnected) span.textContent = results.get(id);
  });
}

async function cancelJob(id, button) {
  button.disabled = true;
  const box = document.querySelector("[data-testid=jobs-error]");
  try {
    putJob(await api.cancelJob(id));
    showMessage(box, null);
  } catch (err) {
    // 409: it ended meanwhile; show why and pick up its final state.
    showMessage(box, err);
    api.job(id).then(putJob).catch(() => {});
  } finally {
    button.disabled = false;
  }
}

async function removeJob(id, button) {
  const job = store.jobs.get(id);
  if (!window.confirm(`Delete job ${shortId(id)} (${job ? modelName(job.model_id) : "?"}) with its artifact and report?`)) return;
  button.disabled = true;
  const box = document.querySelector("[data-testid=jobs-error]");
  try {
    await api.removeJob(id);
    showMessage(box, null);
    forgetJob(id);
    announce(`Job ${shortId(id)} deleted`);
  } catch (err) {
    showMessage(box, err);
    button.disabled = false;
  }
}

// Whether the job matches the search text (part of its model's file name or its target, any case) and status;
// the same rules as GET /jobs?q=&status=.
function matches(job, text, status) {
  const needle = text.trim().toLowerCase();
  return (!status || job.status === status)
    && (!needle || modelName(job.model_id).toLowerCase().includes(needle) || job.target.toLowerCase().includes(needle));
}

// Mount the list into `container`; returns a function that unmounts it.
export function mountJobsList(container) {
  const list = h("ul", { class: "jobs", testid: "jobs-list", "aria-label": "Compile jobs" });
  const empty = h("p", { class: "empty", testid: "jobs-empty" }, "No jobs yet: upload a model and start a compile.");
  const errorBox = h("div", { testid: "jobs-error", hidden: true, role: "alert" });
  const search = h("input", { type: "search", class: "jobs-search", testid: "jobs-search",
    placeholder: "Search model file or target", "aria-label": "Search jobs by model file name or target" });
  const statusFilter = h("select", { class: "jobs-status-filter", testid: "jobs-status-filter",
    "aria-label": "Show jobs with status" }, h("option", { value: "" }, "all statuses"),
  ...STATUSES.map((s) => h("option", { value: s }, s)));
  const newer = h("button", { type: "button", class: "button button-small button-quiet", testid: "jobs-newer" }, "← Newer");
  const older = h("button", { type: "button", class: "button button-small button-quiet", testid: "jobs-older" }, "Older →");
  const pageText = h("span", { class: "jobs-page", testid: "jobs-page", "aria-live": "polite" });
  const pager = h("nav", { class: "jobs-pager", "aria-label": "Pages of jobs", hidden: true }, newer, pageText, older);
  container.replaceChildren(h("div", { class: "jobs-toolbar", role: "search" }, search, statusFilter),
    errorBox, empty, list, pager);
  const rows = new Map();
  const lastStatus = new Map();
  let page = 0;
  search.addEventListener("input", () => { page = 0; redrawAll(); });
  statusFilter.addEventListener("change", () => { page = 0; redrawAll(); });
  newer.addEventListener("click", () => { page -= 1; redrawAll(); });
  older.addEventListener("click", () => { page += 1; redrawAll(); });

  function redrawAll() {
    const all = jobsNewestFirst();
    const found = all.filter((job) => matches(job, search.value, statusFilter.value));
    const pages = Math.max(1, Math.ceil(found.length / PAGE_SIZE));
    page = Math.min(Math.max(page, 0), pages - 1);
    const jobs = found.slice(page * PAGE_SIZE, (page + 1) * PAGE_SIZE);
    empty.hidden = jobs.length > 0;
    empty.textContent = all.length ? "No job matches the search." : "No jobs yet: upload a model and start a compile.";
    pager.hidden = found.length <= PAGE_SIZE;
    pageText.textContent = `${page * PAGE_SIZE + 1}–${page * PAGE_SIZE + jobs.length} of ${found.length}`;
    newer.disabled = page === 0;
    older.disabled = page >= pages - 1;
    const keep = new Set(jobs.map((j) => j.id));
    for (const [id, row] of rows) {
      if (!keep.has(id)) {
        row.remove();
        rows.delete(id);
      }
    }
    jobs.forEach((job, i) => {
      let row = rows.get(job.id);
      if (!row) {
        row = buildRow(job);
        rows.set(job.id, row);
      } else {
        updateRow(row, job);
      }
      if (list.children[i] !== row) list.insertBefore(row, list.children[i] || null);
      lastStatus.set(job.id, job.status);
    });
  }

  const unsubscribe = subscribe((job) => {
    if (!job || !rows.has(job.id)) {
      redrawAll();
      return;
    }
    updateRow(rows.get(job.id), job);
    if (lastStatus.get(job.id) !== job.status) {
      announce(`Job ${modelName(job.model_id)} on ${job.target}: ${job.status}`);
      lastStatus.set(job.id, job.status);
      if (statusFilter.value) redrawAll(); // it may have left the status shown
    }
  });
  // Elapsed time of active jobs moves even when no event comes.
  const ticker = setInterval(() => {
    for (const [id, row] of rows) {
      const job = store.jobs.get(id);
      if (job && isActive(job)) row.querySelector(".job-elapsed").textContent = elapsedText(job);
    }
  }, 1000);
  redrawAll();
  return () => {
    unsubscribe();
    clearInterval(ticker);
  };
}
