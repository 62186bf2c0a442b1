// Client-side state (jobs, models, targets) and keeping jobs live: each active job gets its Server-
// Sent Events stream, read with fetch(); when a stream cannot be used (too many open, or it failed)
// the job list is polled instead. Views subscribe and redraw what changed.

import { api, streamJobEvents } from "./api.js";
import { isActive } from "./ui.js";

// Browsers allow ~6 HTTP/1.1 connections per origin: keep most of them free for ordinary requests.
const MAX_STREAMS = 3;
const POLL_MS = 2000;

export const store = {
  jobs: new Map(),
  models: new Map(),
  targets: [],
};

const listeners = new Set();
const streams = new Map(); // job id -> AbortController
const streamFailed = new Set(); // job ids whose stream broke: these are polled
let pollTimer = null;
let polling = false;

// fn(job) is called for each changed job, fn(null) when the whole list was replaced.
export function subscribe(fn) {
  listeners.add(fn);
  return () => listeners.delete(fn);
}

function emit(job) {
  for (const fn of [...listeners]) fn(job);
}

function sameState(a, b) {
  // tuning (finish_now), tuning_progress (the live chart) and gate change without the stage changing
  const same = (key) => JSON.stringify(a[key]) === JSON.stringify(b[key]);
  return a && b && a.status === b.status && a.stage === b.stage && a.progress === b.progress &&
    a.error === b.error && a.finished_at === b.finished_at && same("tuning") && same("tuning_progress") && same("gate");
}

export function jobsNewestFirst() {
  return [...store.jobs.values()].sort((a, b) => Date.parse(b.created_at) - Date.parse(a.created_at));
}

export function putJob(job) {
  const before = store.jobs.get(job.id);
  store.jobs.set(job.id, job);
  if (!sameState(before, job)) emit(job);
  watch(job);
}

export async function refreshJobs() {
  const list = await api.jobs();
  store.jobs = new Map(list.map((j) => [j.id, j]));
  emit(null);
  list.forEach(watch);
}

export async function refreshModels() {
  const list = await api.models();
  store.models = new Map(list.map((m) => [m.id, m]));
  emit(null); // jobs that loaded first showed "model 1a2b3c4d": redraw them with the file names
  return list;
}

export function forgetJob(id) {
  store.jobs.delete(id);
  emit(null);
}

export function modelName(modelId) {
  const model = store.models.get(modelId);
  return model ? model.filename : `model ${String(modelId).slice(0, 8)}`;
}

function watch(job) {
  if (!isActive(job) || streams.has(job.id)) return;
  if (streams.size >= MAX_STREAMS || streamFailed.has(job.id)) {
    schedulePoll();
    return;
  }
  const controller = new AbortController();
  streams.set(job.id, controller);
  streamJobEvents(job.id, putJob, controller.signal)
    .then((how) => {
      if (how !== "end") streamFailed.add(job.id); // closed early (proxy, restart): poll it
    })
    .catch((err) => {
      if (err.name !== "AbortError") streamFailed.add(job.id);
    })
    .finally(() => {
      if (streams.get(job.id) === controller) streams.delete(job.id);
      if (controller.signal.aborted) return;
      // A freed slot may serve a job that was waiting in the polled group.
      for (const other of store.jobs.values()) watch(other);
      schedulePoll();
    });
}

// Poll GET /jobs while some active job has no live stream.
function schedulePoll() {
  if (pollTimer !== null || polling) return;
  const unwatched = [...store.jobs.values()].some((j) => isActive(j) && !streams.has(j.id));
  if (!unwatched) return;
  pollTimer = setTimeout(async () => {
    pollTimer = null;
    polling = true;
    try {
      const list = await api.jobs();
      for (const job of list) putJob(job);
    } catch {
      // A transient failure: the next tick tries again (401 is handled by the api module).
    } finally {
      polling = false;
      schedulePoll();
    }
  }, POLL_MS);
}

// Sign-out: close every stream and forget everything.
export function resetStore() {
  for (const controller of streams.values()) controller.abort();
  streams.clear();
  streamFailed.clear();
  clearTimeout(pollTimer);
  pollTimer = null;
  store.jobs = new Map();
  store.models = new Map();
  store.targets = [];
  emit(null);
}
