// The job page (#/jobs/ID): live status and progress, the error of a failed job, the key numbers of
// the report (latency against ONNX Runtime, validation error, kernels, memory arena), the full HTML
// report in a sandboxed iframe, and the artifact download (fetched with the token, saved as a Blob).

import { api, ApiError, downloadFile } from "./api.js";
import { modelName, putJob, store, subscribe } from "./store.js";
import {
  elapsedText, formatBytes, formatMs, formatNumber, formatSci, formatTime, h, isActive, jobBadges, percent,
  progressBar, setProgress, showMessage,
} from "./ui.js";
import { canFinishTuning, tuningChart, tuningText } from "./tuning.js";

function tile(label, value, testid, note = "") {
  return h("div", { class: "tile" },
    h("div", { class: "tile-label" }, label),
    h("div", { class: "tile-value", testid }, value),
    note ? h("div", { class: "tile-note" }, note) : null);
}

// The numbers people look for first; each is "–" when the report does not have it (e.g. a
// cross-compiled target is neither benchmarked nor validated on this server).
function summaryTiles(report) {
  const latency = report.latency_ms || {};
  const validation = report.validation || {};
  const memory = report.memory || {};
  const graph = report.graph || {};
  const kernels = graph.kernels ?? (Array.isArray(report.kernels) ? report.kernels.length : undefined);
  const ratio = latency.ratio;
  let verdict = "not measured on this server";
  if (typeof ratio === "number" && ratio > 0) {
    verdict = ratio <= 1 ? `Kiln is ${formatNumber(1 / ratio)}× faster` : `Kiln is ${formatNumber(ratio)}× slower`;
  }
  const saved = memory.naive_bytes ? 1 - memory.arena_bytes / memory.naive_bytes : null;
  const passed = validation.passed === undefined ? "" : validation.passed ? "within tolerance" : "OUT OF TOLERANCE";
  const measured = typeof latency.kiln === "number";
  const ms = (v) => (typeof v === "number" ? formatMs(v) : "not measured");
  const validated = typeof validation.max_abs_err === "number";
  return h("div", { class: "tiles", testid: "report-summary" },
    tile("Kiln latency", ms(latency.kiln), "report-latency-kiln",
      measured ? "median, after warm-up" : "the target cannot run on this server"),
    tile("ONNX Runtime latency", ms(latency.onnxruntime), "report-latency-ort", measured ? "same run, same threads" : ""),
    tile("Ratio (Kiln / ORT)", formatNumber(ratio, 3), "report-ratio", verdict),
    tile("Max abs error vs ORT", validated ? formatSci(validation.max_abs_err) : "skipped", "report-max-abs-err",
      validated ? `max rel ${formatSci(validation.max_rel_err)}${passed ? ` · ${passed}` : ""}` : "not validated on this server"),
    tile("Kernels", kernels ?? "–", "report-kernels",
      graph.nodes_in ? `from ${graph.nodes_in} graph nodes` : ""),
    tile("Memory arena", formatBytes(memory.arena_bytes), "report-arena",
      saved !== null ? `vs ${formatBytes(memory.naive_bytes)} unplanned (${Math.round(saved * 100)}% saved)` : ""),
    tile("Compile time", `${formatNumber(report.timings_s?.total, 1)} s`, "report-compile-time",
      report.tuning?.trials ? `${report.tuning.trials} tuning trials` : "no tuning"),
    report.baseline ? tile("CI gate", report.baseline.passed ? "passed" : "FAILED", "report-gate",
      report.baseline.message || "") : null);
}

export function mountJobPage(container, jobId) {
  const title = h("h2", { class: "job-page-title", tabindex: "-1" }, `Job ${jobId.slice(0, 8)}`);
  const badge = h("span", { class: "job-page-badge" });
  const bar = progressBar("Job progress", "job-page-progress");
  const pctText = h("span", { class: "job-percent" });
  const statusText = h("p", { class: "job-page-status", testid: "job-page-status", "aria-live": "polite" });
  const facts = h("dl", { class: "facts" });
  const errorBox = h("div", { testid: "job-error", hidden: true, role: "alert" });
  const actionError = h("div", { testid: "job-action-error", hidden: true, role: "alert" });
  const downloadButton = h("button", { type: "button", class: "button", testid: "download-artifact", hidden: true },
    "Download artifact");
  const cancelButton = h("button", { type: "button", class: "button button-quiet", testid: "job-page-cancel",
    hidden: true }, "Cancel job");
  const finishButton = h("button", { type: "button", class: "button button-quiet", testid: "job-page-finish-tuning",
    hidden: true, title: "Stop measuring and build with the best configurations found so far" },
    "Finish now with the best so far");
  const tuningLine = h("p", { class: "job-page-tuning", testid: "job-page-tuning", hidden: true });
  const tuningFigure = h("figure", { class: "tuning-live", testid: "tuning-live", hidden: true });
  const finishNote = h("p", { class: "hint", testid: "finish-ack", role: "status", hidden: true });
  const downloadNote = h("span", { class: "hint", "aria-live": "polite" });
  const compareLink = h("a", { href: `#/compare/${jobId}`, class: "button button-quiet", testid: "compare-link",
    hidden: true }, "Compare with another build");
  const reportSection = h("section", { class: "report", hidden: true, "aria-labelledby": "report-title" });

  container.replaceChildren(h("div", { class: "job-page", testid: "job-page", dataset: { jobId } },
    h("nav", { class: "crumbs" }, h("a", { href: "#/", testid: "back-to-jobs" }, "← All jobs")),
    h("div", { class: "card" },
      h("div", { class: "job-page-head" }, title, badge),
      h("div", { class: "job-bar" }, bar, pctText),
      statusText, tuningLine, tuningFigure, errorBox, facts,
      h("div", { class: "actions" }, downloadButton, compareLink, finishButton, cancelButton, downloadNote), finishNote,
      actionError),
    reportSection));

  let job = store.jobs.get(jobId) || null;
  let reportLoaded = false;

  function render() {
    if (!job) return;
    container.firstElementChild.dataset.status = job.status;
    title.textContent = `${modelName(job.model_id)} → ${job.target}`;
    badge.replaceChildren(...jobBadges(job, "job-page-badge"));
    const pct = percent(job);
    setProgress(bar, pct, job.status);
    pctText.textContent = `${pct}%`;
    statusText.textContent = isActive(job) ? `${job.status}: ${job.stage} · ${elapsedText(job)}`
      : `${job.status} · took ${elapsedText(job)}`;
    showMessage(errorBox, job.error ? new ApiError(0, `Failed${job.error_code ? ` (${job.error_code})` : ""}: ${job.error}`) : null);
    const shapes = Object.entries(job.input_shapes || {}).map(([n, s]) => `${n}=[${s.join(", ")}]`).join("; ");
    const rows = [
      ["Job", job.id], ["Model", `${modelName(job.model_id)} (${job.model_id.slice(0, 8)})`], ["Target", job.target],
      ["Optimization level", `O${job.opt_level}`], ["Tuning trials", job.tuning?.trials ?? 0],
      ["Input shapes", shapes || "as declared"], ["Created", formatTime(job.created_at)],
      ["Started", formatTime(job.started_at)], ["Finished", formatTime(job.finished_at)], ["Attempts", job.attempts],
    ];
    facts.replaceChildren(...rows.flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, String(v))]));
    downloadButton.hidden = job.status !== "succeeded";
    compareLink.hidden = job.status !== "succeeded";
    cancelButton.hidden = !isActive(job);
    finishButton.hidden = !canFinishTuning(job);
    const tuning = tuningText(job);
    tuningLine.hidden = !tuning;
    tuningLine.textContent = tuning || "";
    const chart = isActive(job) ? tuningChart(job) : null;
    tuningFigure.hidden = !chart;
    tuningFigure.replaceChildren(...(chart ? [chart] : []));
    if (!isActive(job)) finishNote.hidden = true;
    if (job.status === "succeeded" && !reportLoaded) loadReport();
  }

  async function loadReport() {
    reportLoaded = true;
    reportSection.hidden = false;
    const messageBox = h("div", { hidden: true, role: "alert" });
    reportSection.replaceChildren(h("h3", { id: "report-title" }, "Report"), messageBox,
      h("p", { class: "hint" }, "Loading the report…"));
    try {
      const [report, html] = await Promise.all([api.report(jobId), api.reportHtml(jobId)]);
      // No allow-scripts: nothing in the report runs, so it can never read this app's token. allow-same-origin
      // only lets this page measure the report, which is shown inline at its full height (no inner scrollbar).
      const frame = h("iframe", { class: "report-frame", sandbox: "allow-same-origin", title: "Compile report with charts",
        testid: "report-frame", loading: "eager", scrolling: "no" });
      frame.addEventListener("load", () => fitToContent(frame));
      frame.srcdoc = html;
      const saveHtml = h("button", { type: "button", class: "button button-small button-quiet", testid: "save-report" },
        "Save report (HTML)");
      saveHtml.addEventListener("click", () => saveBlob(html, `kiln-report-${jobId.slice(0, 12)}.html`));
      reportSection.replaceChildren(h("div", { class: "report-head" }, h("h3", { id: "report-title" }, "Report"), saveHtml),
        summaryTiles(report), frame);
    } catch (err) {
      reportLoaded = false;
      showMessage(messageBox, new ApiError(err.status, `The report could not be loaded: ${err.message}`));
      messageBox.nextElementSibling?.remove();
    }
  }

  downloadButton.addEventListener("click", async () => {
    downloadButton.disabled = true;
    showMessage(actionError, null);
    downloadNote.textContent = "Downloading…";
    try {
      const name = await downloadFile(`/jobs/${encodeURIComponent(jobId)}/artifact`, `kiln-${jobId.slice(0, 12)}.tar.gz`);
      downloadNote.textContent = `Saved as ${name}.`;
    } catch (err) {
      downloadNote.textContent = "";
      showMessage(actionError, new ApiError(err.status, `Download failed: ${err.message}`));
    } finally {
      downloadButton.disabled = false;
    }
  });

  cancelButton.addEventListener("click", async () => {
    cancelButton.disabled = true;
    showMessage(actionError, null);
    try {
      putJob(await api.cancelJob(jobId));
    } catch (err) {
      showMessage(actionError, err);
      api.job(jobId).then(putJob).catch(() => {});
    } finally {
      cancelButton.disabled = false;
    }
  });

  finishButton.addEventListener("click", async () => {
    finishButton.disabled = true;
    showMessage(actionError, null);
    // Acknowledged at once: the worker stops at the end of the batch it is measuring, which may take a while.
    finishNote.textContent = "Finishing now: the batch being measured ends, then the model is built with the best " +
      "configurations found so far.";
    finishNote.hidden = false;
    try {
      putJob(await api.finishTuning(jobId));
    } catch (err) {
      finishNote.hidden = true;
      showMessage(actionError, err); // 409: it ended or stopped tuning meanwhile
      api.job(jobId).then(putJob).catch(() => {});
    } finally {
      finishButton.disabled = false;
    }
  });

  const unsubscribe = subscribe((changed) => {
    const latest = store.jobs.get(jobId);
    if (latest && (!changed || changed.id === jobId)) {
      job = latest;
      render();
    }
  });
  const ticker = setInterval(() => {
    if (job && isActive(job)) statusText.textContent = `${job.status}: ${job.stage} · ${elapsedText(job)}`;
  }, 1000);

  // Always fetch the job fresh: the page may be opened directly from a link.
  api.job(jobId).then((fresh) => {
    job = fresh;
    putJob(fresh);
    render();
  }).catch((err) => {
    const message = err.status === 404 ? `There is no job ${jobId} (or it belongs to another user).` : err.message;
    showMessage(errorBox, new ApiError(err.status, message));
    statusText.textContent = "";
  });
  render();
  title.focus({ preventScroll: true });
  return () => {
    unsubscribe();
    clearInterval(ticker);
  };
}

// The report's own height, now and whenever its width changes (the window resized, the layout changed).
function fitToContent(frame) {
  const doc = frame.contentDocument;
  if (!doc?.documentElement) return;
  const fit = () => { frame.style.height = `${doc.documentElement.scrollHeight}px`; };
  fit();
  new ResizeObserver(fit).observe(doc.documentElement);
}

function saveBlob(text, name) {
  const url = URL.createObjectURL(new Blob([text], { type: "text/html" }));
  const link = h("a", { href: url, download: name, hidden: true });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60_000);
}
