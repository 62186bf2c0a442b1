// The one place that talks to the Kiln HTTP API (/api/v1): the bearer token, readable errors,
// uploads with progress (XMLHttpRequest, since fetch() has no upload progress), the job event
// stream (fetch + ReadableStream, since EventSource cannot send an Authorization header), and
// authenticated downloads.

const BASE = "/api/v1";
const TOKEN_KEY = "kiln.token";

export function getToken() {
  return localStorage.getItem(TOKEN_KEY) || "";
}

export function setToken(token) {
  if (token) localStorage.setItem(TOKEN_KEY, token);
  else localStorage.removeItem(TOKEN_KEY);
}

// An API failure with a message meant for people; `lines` holds extra detail shown one per line.
export class ApiError extends Error {
  constructor(status, message, lines = [], code = null) {
    super(message);
    this.status = status;
    this.lines = lines;
    this.code = code;
  }
}

// Listeners told when the server refuses the token, so the app can go back to the sign-in form.
const unauthorizedListeners = new Set();
export function onUnauthorized(fn) {
  unauthorizedListeners.add(fn);
}

// The service answers {"detail": {"code", "message", ...}} on every route (with `unsupported_ops`, or pydantic's
// `errors`: [{"loc", "msg"}, ...]); older servers sent a bare string or list. All become one message plus lines.
export function errorFromBody(status, body, fallbackText = "") {
  const detail = body && typeof body === "object" ? body.detail : undefined;
  let message = "";
  let lines = [];
  let code = null;
  if (typeof detail === "string") {
    message = detail;
  } else if (Array.isArray(detail)) {
    message = "The request was not accepted:";
    lines = detail.map((d) => {
      const where = Array.isArray(d.loc) ? d.loc.filter((p) => p !== "body").join(".") : "";
      return where ? `${where}: ${d.msg}` : String(d.msg ?? JSON.stringify(d));
    });
  } else if (detail && typeof detail === "object") {
    message = detail.message || JSON.stringify(detail);
    code = detail.code || null;
    if (Array.isArray(detail.unsupported_ops) && detail.unsupported_ops.length) {
      // The server's message lists them inline; one per line reads better, so say it once here.
      const n = detail.unsupported_ops.length;
      const ops = `ONNX op${n === 1 ? "" : "s"}`;
      message = code === "unsupported_on_target"
        ? `Target ${detail.target} cannot compile ${n} ${ops} of this model (a CPU target can):`
        : `The model uses ${n} ${ops} that Kiln does not support yet:`;
      lines = detail.unsupported_ops.map((o) => `${o.op} (${o.domain || "ai.onnx"}, opset ${o.opset})`);
    } else if (Array.isArray(detail.errors) && detail.errors.length) {
      message = "The request was not accepted:";
      lines = detail.errors.map((d) => {
        const where = Array.isArray(d.loc) ? d.loc.filter((p) => p !== "body").join(".") : "";
        return where ? `${where}: ${d.msg}` : String(d.msg ?? JSON.stringify(d));
      });
    }
  } else {
    message = (fallbackText || "").trim().slice(0, 300) || `The server answered ${status}.`;
  }
  if (status === 401) {
    message = `The server refused this token (${message}). Check it, or create a new one with "kiln token create".`;
  } else if (status === 413) {
    message = `The file is too large for this server: ${message}.`;
  } else if (status >= 500) {
    message = `Server error ${status}: ${message}`;
  }
  return new ApiError(status, message, lines, code);
}

async function readError(response) {
  const text = await response.text().catch(() => "");
  let body = null;
  try {
    body = JSON.parse(text);
  } catch {
    body = null;
  }
  return errorFromBody(response.status, body, text);
}

function authHeaders(extra = {}) {
  return { Authorization: `Bearer ${getToken()}`, ...extra };
}

function failed(error) {
  if (error.status === 401) unauthorizedListeners.forEach((fn) => fn(error));
  return error;
}

// fetch() with the token; resolves to the Response, or throws an ApiError with a readable message.
export async function request(path, { method = "GET", json, signal, token } = {}) {
  const headers = token ? { Authorization: `Bearer ${token}` } : authHeaders();
  let body;
  if (json !== undefined) {
    headers["Content-Type"] = "application/json";
    body = JSON.stringify(json);
  }
  let response;
  try {
    response = await fetch(BASE + path, { method, headers, body, signal });
  } catch (err) {
    if (err.name === "AbortError") throw err;
    throw new ApiError(0, "Cannot reach the Kiln server. Is it running?");
  }
  if (!response.ok) {
    const error = await readError(response);
    throw token ? error : failed(error);
  }
  return response;
}

export async function getJson(path, options) {
  return (await request(path, options)).json();
}

export const api = {
  targets: (token) => getJson("/targets", { token }),
  models: () => getJson("/models"),
  jobs: () => getJson("/jobs"),
  job: (id) => getJson(`/jobs/${encodeURIComponent(id)}`),
  createJob: (body) => getJson("/jobs", { method: "POST", json: body }),
  cancelJob: (id) => getJson(`/jobs/${encodeURIComponent(id)}`, { method: "DELETE" }),
  finishTuning: (id) => getJson(`/jobs/${encodeURIComponent(id)}/finish-tuning`, { method: "POST" }),
  // DELETE on an ended job removes it with its artifact and report (204, no body).
  removeJob: (id) => request(`/jobs/${encodeURIComponent(id)}`, { method: "DELETE" }),
  deleteModel: (id) => request(`/models/${encodeURIComponent(id)}`, { method: "DELETE" }),
  report: (id) => getJson(`/jobs/${encodeURIComponent(id)}/report`),
  compareJobs: (a, b) => getJson(`/jobs/${encodeURIComponent(a)}/compare/${encodeURIComponent(b)}`),
  reportHtml: async (id) => (await request(`/jobs/${encodeURIComponent(id)}/report?format=html`)).text(),
};

// POST /models/{id}/validation-inputs: an .npz of real inputs (one array per model input) for a job to
// validate on; resolves to {id, samples, ...}; the server checks names, shapes and dtypes first.
// An .npz for a model (POST /models/{id}/validation-inputs or /calibration): the server checks it against the inputs.
async function uploadModelNpz(modelId, resource, file) {
  const form = new FormData();
  form.append("file", file, file.name);
  let response;
  try {
    response = await fetch(`${BASE}/models/${encodeURIComponent(modelId)}/${resource}`,
      { method: "POST", headers: authHeaders(), body: form });
  } catch {
    throw new ApiError(0, "Cannot reach the Kiln server. Is it running?");
  }
  if (!response.ok) throw failed(await readError(response));
  return response.json();
}

export const uploadValidationInputs = (modelId, file) => uploadModelNpz(modelId, "validation-inputs", file);
export const uploadCalibration = (modelId, file) => uploadModelNpz(modelId, "calibration", file);

// POST /models with upload progress. onProgress(fraction) runs while bytes go out; resolves to
// {model, created} (created is false when the server already had the same file).
export function uploadModel(file, onProgress) {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open("POST", `${BASE}/models`);
    xhr.setRequestHeader("Authorization", `Bearer ${getToken()}`);
    xhr.upload.onprogress = (e) => {
      if (e.lengthComputable) onProgress(e.loaded / e.total);
    };
    xhr.upload.onload = () => onProgress(1);
    xhr.onerror = () => reject(new ApiError(0, "The upload failed: cannot reach the Kiln server."));
    xhr.onabort = () => reject(new ApiError(0, "The upload was cancelled."));
    xhr.onload = () => {
      let body = null;
      try {
        body = JSON.parse(xhr.responseText);
      } catch {
        body = null;
      }
      if (xhr.status === 200 || xhr.status === 201) {
        resolve({ model: body, created: xhr.status === 201 });
      } else {
        reject(failed(errorFromBody(xhr.status, body, xhr.responseText)));
      }
    };
    const form = new FormData();
    form.append("file", file, file.name);
    xhr.send(form);
  });
}

// Read GET /jobs/{id}/events until `event: end` (or abort). onProgress(job) gets each job state.
// Resolves when the stream ends; rejects on network/HTTP errors so the caller can fall back to polling.
export async function streamJobEvents(id, onProgress, signal) {
  const response = await request(`/jobs/${encodeURIComponent(id)}/events`, { signal });
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return "closed";
    buffer += value.replace(/\r\n?/g, "\n");
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      const event = parseSseBlock(block);
      if (event.name === "progress" && event.data) onProgress(JSON.parse(event.data));
      if (event.name === "end") {
        reader.cancel().catch(() => {});
        return "end";
      }
    }
  }
}

// One SSE event block: `event:` names it, `data:` lines join with newlines, `:` lines are comments.
export function parseSseBlock(block) {
  let name = "message";
  const data = [];
  for (const line of block.split("\n")) {
    if (!line || line.startsWith(":")) continue;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
    if (field === "event") name = value;
    else if (field === "data") data.push(value);
  }
  return { name, data: data.join("\n") };
}

// Fetch a file with the token and hand it to the browser as a download (a[download] on a Blob URL).
export async function downloadFile(path, fallbackName) {
  const response = await request(path);
  const blob = await response.blob();
  const disposition = response.headers.get("Content-Disposition") || "";
  const match = /filename\*?=(?:UTF-8'')?"?([^";]+)"?/i.exec(disposition);
  const name = match ? decodeURIComponent(match[1]) : fallbackName;
  const url = URL.createObjectURL(blob);
  const link = document.createElement("a");
  link.href = url;
  link.download = name;
  link.hidden = true;
  document.body.append(link);
  link.click();
  link.remove();
  // Revoke later: the download has to start reading the Blob first.
  setTimeout(() => URL.revokeObjectURL(url), 60_000);
  return name;
}
