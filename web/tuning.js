// A tuning job's live line (JobOut.tuning_progress): the estimate before it measures, then trials done,
// the best GFLOP/s so far and the time left; shared by the job list and the job page. And its live chart.

import { lineChart } from "./charts.js";

function seconds(s) {
  if (typeof s !== "number") return "?";
  return s >= 90 ? `${Math.round(s / 60)} min` : `${Math.round(s)} s`;
}

// The line for an active job that tunes, or null (not tuning, or no progress written yet).
export function tuningText(job) {
  const live = job.tuning_progress;
  const active = ["queued", "running"].includes(job.status);
  if (active && job.tuning?.finish_now && !(live && String(job.stage).startsWith("tuning"))) {
    return "finishing with the best so far"; // asked: acknowledged before the worker's next batch says so
  }
  if (!live || !active || !String(job.stage).startsWith("tuning")) return null;
  const overall = live.best_overall?.gflops;
  const parts = live.trials > 0
    ? [`tuning ${live.trials}/${live.planned} trials`,
       typeof overall === "number" ? `best ${overall.toFixed(1)} GFLOP/s` : null,
       typeof live.best_gflops === "number" && live.best_gflops !== overall
         ? `this task ${live.best_gflops.toFixed(1)}` : null,
       `~${seconds(live.left_s)} left`]
    : [`tuning ${live.planned} trials`, `estimate ~${seconds(live.estimate_s)}`];
  if (live.finishing || job.tuning?.finish_now) parts.push("finishing with the best so far");
  return parts.filter(Boolean).join(" · ");
}

// Whether the "finish now with the best so far" action applies to the job.
export function canFinishTuning(job) {
  return ["queued", "running"].includes(job.status) && (job.tuning?.trials ?? 0) > 0 && !job.tuning?.finish_now;
}

// The live chart: best GFLOP/s against the job's trials so far, one line per task and one (thick) for the tasks
// tuned so far together; null before the first measured batch.
export function tuningChart(job) {
  const live = job.tuning_progress;
  const curves = Object.entries(live?.curves || {});
  if (!curves.length) return null;
  const series = curves.map(([workload, curve]) => ({ label: workload, points: curve.points }));
  if ((live.model_points || []).length) {
    series.push({ label: "whole model (tasks tuned so far)", points: live.model_points, emphasis: true });
  }
  const best = live.best_overall;
  const title = best ? `Best so far: ${best.gflops.toFixed(1)} GFLOP/s (${best.workload})` : "Best GFLOP/s so far";
  return lineChart(series, { title, xLabel: "trials", yLabel: "best GFLOP/s", testid: "tuning-chart" });
}
