// A tuning job's live line (JobOut.tuning_progress): the estimate before it measures, then trials done,
// the best GFLOP/s so far and the time left; shared by the job list and the job page.

function seconds(s) {
  if (typeof s !== "number") return "?";
  return s >= 90 ? `${Math.round(s / 60)} min` : `${Math.round(s)} s`;
}

// The line for an active job that tunes, or null (not tuning, or no progress written yet).
export function tuningText(job) {
  const live = job.tuning_progress;
  if (!live || !["queued", "running"].includes(job.status) || !String(job.stage).startsWith("tuning")) return null;
  const parts = live.trials > 0
    ? [`tuning ${live.trials}/${live.planned} trials`,
       typeof live.best_gflops === "number" ? `best ${live.best_gflops.toFixed(1)} GFLOP/s` : null,
       `~${seconds(live.left_s)} left`]
    : [`tuning ${live.planned} trials`, `estimate ~${seconds(live.estimate_s)}`];
  if (live.finishing || job.tuning?.finish_now) parts.push("finishing with the best so far");
  return parts.filter(Boolean).join(" · ");
}

// Whether the "finish now with the best so far" action applies to the job.
export function canFinishTuning(job) {
  return ["queued", "running"].includes(job.status) && (job.tuning?.trials ?? 0) > 0 && !job.tuning?.finish_now;
}
