// The "new compile" panel: upload a model (drag and drop or file picker, with upload progress),
// show its inputs and outputs, then choose target, optimization level, tuning budget and the shapes
// of symbolic inputs, and create the job.

import { api, ApiError, uploadModel, uploadValidationInputs } from "./api.js";
import { announce } from "./jobs_list.js";
import { precisionFields } from "./precision.js";
import { putJob, refreshJobs, refreshModels, store } from "./store.js";
import { formatBytes, formatShape, h, progressBar, setProgress, showMessage } from "./ui.js";

// What each -O level runs (core/graph/passes/manager.py's LEVELS; the README's table says more).
const OPT_LEVELS = [
  [3, "O3 · everything (default)", "O2 plus the target's data layouts (NCHW[x]c blocks, Winograd convs, packed matmul weights): usually the fastest."],
  [2, "O2 · fusion", "O1 plus operator fusion: a conv or matmul takes the elementwise ops after it into one kernel."],
  [1, "O1 · graph clean-up", "Constant folding, common subexpressions, dead code, BatchNorm folded into convs: one kernel per remaining op."],
  [0, "O0 · as imported", "The imported graph as it is, one kernel per op: for debugging a mismatch."],
];

const VALIDATE_MODES = [
  ["error", "fail the job (default)"],
  ["warn", "keep the artifact, report the mismatch"],
  ["off", "do not validate"],
];

let selectedModelId = null;

function tensorTable(caption, tensors) {
  return h("table", { class: "tensors" },
    h("caption", {}, caption),
    h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Name"), h("th", { scope: "col" }, "Shape"),
      h("th", { scope: "col" }, "Type"))),
    h("tbody", {}, tensors.map((t) => h("tr", {},
      h("td", {}, h("code", {}, t.name)), h("td", {}, formatShape(t.shape)), h("td", {}, t.dtype)))));
}

function renderModelInfo(box, model) {
  box.replaceChildren();
  box.hidden = !model;
  if (!model) return;
  const opsets = Object.entries(model.opsets || {}).map(([d, v]) => `${d} ${v}`).join(", ") || "–";
  box.append(
    h("p", { class: "model-summary" },
      h("strong", {}, model.filename), ` · ${formatBytes(model.size_bytes)} · opset ${opsets}`),
    h("div", { class: "tensor-tables" }, tensorTable("Inputs", model.inputs), tensorTable("Outputs", model.outputs)));
}

// For each input with symbolic dimensions, a number field per symbolic dimension (the fixed ones
// are shown as text); an input of unknown rank gets one comma-separated text field instead.
function renderShapeFields(fieldset, model) {
  fieldset.replaceChildren();
  const symbolic = model ? model.symbolic_inputs || [] : [];
  fieldset.hidden = symbolic.length === 0;
  if (!symbolic.length) return;
  fieldset.append(h("legend", {}, "Input shapes"),
    h("p", { class: "hint" }, "These inputs have symbolic dimensions: give each one a size, or a range " +
      "(1..8, 224..512:32) or list of sizes (8|128|384) for one artifact that serves every shape in range."));
  symbolic.forEach((name, n) => {
    const info = model.inputs.find((t) => t.name === name);
    const dims = info && Array.isArray(info.shape) ? info.shape : null;
    const row = h("div", { class: "shape-row", dataset: { input: name } }, h("code", { class: "shape-name" }, name));
    if (!dims) {
      const id = `shape-${n}`;
      row.append(h("label", { for: id, class: "visually-hidden" }, `Shape of ${name}, comma-separated`),
        h("input", { id, type: "text", class: "shape-free", placeholder: "e.g. 1,3,224,224 or 1..8,3,224,224", testid: `shape-input-${name}` }));
    } else {
      row.append("[");
      dims.forEach((d, i) => {
        if (i) row.append(h("span", { class: "shape-sep", "aria-hidden": "true" }, "×"));
        if (typeof d === "number") {
          row.append(h("span", { class: "shape-fixed", dataset: { dim: i, value: d } }, String(d)));
        } else {
          row.append(h("input", {
            type: "text", inputmode: "numeric", size: 9, required: true, class: "shape-dim", placeholder: d || "?",
            "aria-label": `${name}: dimension ${i}${d ? ` (${d})` : ""}`, dataset: { dim: i },
            testid: `shape-dim-${name}-${i}`,
          }));
        }
      });
      row.append("]");
    }
    fieldset.append(row);
  });
}

function shapeError(name, input) {
  input.focus();
  return new ApiError(0, `Give the shape of input "${name}" as positive whole numbers or ranges (1..8, 224..512:32, 8|128|384).`);
}

// A dimension: a size (a number) or a range kept as its text ("1..8", "224..512:32", "8|128|384"), which the
// server parses and checks (its 422 says what is wrong with a range); NaN when it is neither.
const RANGE = /^\d+\.\.\d+(:\d+)?$|^\d+(\|\d+)+$/;
function readDim(text) {
  const t = text.trim();
  if (RANGE.test(t)) return t;
  const d = t === "" ? NaN : Number(t);
  return Number.isInteger(d) && d >= 1 ? d : NaN;
}

function readShapes(fieldset) {
  const shapes = {};
  for (const row of fieldset.querySelectorAll(".shape-row")) {
    const name = row.dataset.input;
    const free = row.querySelector(".shape-free");
    if (free) {
      const dims = free.value.split(",").map(readDim);
      if (!dims.length || dims.some((d) => Number.isNaN(d))) throw shapeError(name, free);
      shapes[name] = dims;
      continue;
    }
    const dims = [];
    for (const part of row.querySelectorAll("[data-dim]")) {
      if (part.tagName !== "INPUT") {
        dims.push(Number(part.dataset.value));
        continue;
      }
      const d = readDim(part.value);
      if (Number.isNaN(d)) throw shapeError(name, part);
      dims.push(d);
    }
    shapes[name] = dims;
  }
  return shapes;
}

export function mountCompose(container) {
  const fileInput = h("input", {
    id: "file-input", type: "file", accept: ".onnx,application/octet-stream", class: "visually-hidden",
    testid: "file-input",
  });
  const dropzone = h("label", { class: "dropzone", for: "file-input", testid: "dropzone" },
    fileInput,
    h("span", { class: "dropzone-icon", "aria-hidden": "true" }, "⇪"),
    h("span", {}, h("strong", {}, "Drop an ONNX model here"), " or ", h("span", { class: "linklike" }, "choose a file")),
    h("small", {}, "The server checks it (ONNX checker, supported ops) before keeping it."));
  const uploadBar = progressBar("Upload progress", "upload-progress");
  const uploadText = h("span", { class: "upload-text", testid: "upload-text" });
  const uploadStatus = h("div", { class: "upload-status", hidden: true, "aria-live": "polite" }, uploadBar, uploadText);
  const uploadError = h("div", { testid: "upload-error", hidden: true, role: "alert" });
  const modelSelect = h("select", { id: "model-select", testid: "model-select" });
  const modelInfo = h("div", { class: "model-info", testid: "model-info", hidden: true });

  const targetSelect = h("select", { id: "target-select", testid: "target-select", required: true });
  const targetHint = h("p", { class: "hint", id: "target-hint" });
  targetSelect.setAttribute("aria-describedby", "target-hint");
  const optSelect = h("select", { id: "opt-select", testid: "opt-level-select" },
    OPT_LEVELS.map(([v, text]) => h("option", { value: v, selected: v === 3 }, text)));
  const optHint = h("p", { class: "hint", id: "opt-hint", testid: "opt-hint" });
  optSelect.setAttribute("aria-describedby", "opt-hint");
  const budgetInput = h("input", {
    id: "budget-input", type: "number", min: 1, step: 1, placeholder: "no limit", testid: "time-budget-input",
    "aria-describedby": "budget-hint",
  });
  const targetWarning = h("div", { testid: "target-warning", hidden: true, role: "alert" });
  const deleteModel = h("button", { type: "button", class: "button button-small button-quiet", testid: "model-delete",
    disabled: true }, "Delete model");
  const trialsInput = h("input", {
    id: "trials-input", type: "number", min: 0, step: 1, value: 0, testid: "trials-input",
    "aria-describedby": "trials-hint",
  });
  const shapes = h("fieldset", { class: "shapes", hidden: true, testid: "shape-fields" });
  const validateSelect = h("select", { id: "validate-select", testid: "validate-select" },
    VALIDATE_MODES.map(([v, text]) => h("option", { value: v }, text)));
  const toleranceInput = h("input", {
    id: "tolerance-input", type: "text", placeholder: "policy (e.g. 1e-3 or 1e-3,1e-2)", testid: "tolerance-input",
    "aria-describedby": "tolerance-hint", autocomplete: "off",
  });
  const inputsFile = h("input", { id: "validation-inputs", type: "file", accept: ".npz", testid: "validation-inputs" });
  const quickBox = h("input", { id: "quick-compile", type: "checkbox", testid: "quick-compile", "aria-describedby": "quick-hint" });
  const validation = h("fieldset", { class: "form-grid validation", testid: "validation-fields" },
    h("legend", {}, "Validation against ONNX Runtime"),
    h("div", { class: "field" }, h("label", { for: "validate-select" }, "On a mismatch"), validateSelect),
    h("div", { class: "field" }, h("label", { for: "tolerance-input" }, "Tolerance ATOL[,RTOL]"), toleranceInput,
      h("p", { class: "hint", id: "tolerance-hint" }, "Empty: each output's own rule (float16 at its epsilon, quantized outputs in steps, integers exact).")),
    h("div", { class: "field" }, h("label", { for: "validation-inputs" }, "Real inputs (.npz, optional)"), inputsFile),
    h("div", { class: "field" }, h("label", { for: "quick-compile" }, quickBox, " Quick compile"),
      h("p", { class: "hint", id: "quick-hint" }, "For fast iteration: no latency benchmark, validation on one sample at most.")));
  const precision = precisionFields();
  const jobError = h("div", { testid: "job-form-error", hidden: true, role: "alert" });
  const jobNotice = h("div", { testid: "job-form-notice", hidden: true, "aria-live": "polite" });
  const submit = h("button", { type: "submit", class: "button", testid: "create-job", disabled: true }, "Compile");
  const form = h("form", { class: "job-form", novalidate: true },
    h("div", { class: "form-grid" },
      h("div", { class: "field" }, h("label", { for: "target-select" }, "Target"), targetSelect, targetHint),
      h("div", { class: "field" }, h("label", { for: "opt-select" }, "Optimization level"), optSelect, optHint),
      h("div", { class: "field" }, h("label", { for: "trials-input" }, "Tuning budget (trials)"), trialsInput,
        h("p", { class: "hint", id: "trials-hint" }, "The total trials each kernel gets, earlier tuning records included: records already holding the budget are reused without measuring; a larger budget measures only the difference. 0 uses records if any, else default schedules.")),
      h("div", { class: "field" }, h("label", { for: "budget-input" }, "Tuning time budget (seconds)"), budgetInput,
        h("p", { class: "hint", id: "budget-hint" }, "Tuning stops after this long, keeping the best schedules found so far; empty: the trials decide."))),
    targetWarning, shapes, precision.element, validation, jobError, jobNotice, h("div", { class: "actions" }, submit));

  container.replaceChildren(
    h("h2", { id: "compose-title" }, "New compile"),
    h("h3", {}, h("span", { class: "step" }, "1"), "Model"),
    dropzone, uploadStatus, uploadError,
    h("div", { class: "field" }, h("label", { for: "model-select" }, "Uploaded model"),
      h("div", { class: "inline" }, modelSelect, deleteModel)),
    modelInfo,
    h("h3", {}, h("span", { class: "step" }, "2"), "Compile"),
    form);

  function fillModels() {
    const models = [...store.models.values()].sort((a, b) => Date.parse(b.created_at) - Date.parse(a.created_at));
    if (!models.some((m) => m.id === selectedModelId)) selectedModelId = models.length ? models[0].id : null;
    modelSelect.replaceChildren(...(models.length
      ? models.map((m) => h("option", { value: m.id, selected: m.id === selectedModelId }, `${m.filename} (${m.id.slice(0, 8)})`))
      : [h("option", { value: "" }, "No model uploaded yet")]));
    modelSelect.disabled = !models.length;
    deleteModel.disabled = !models.length;
    showModel();
  }

  function showModel() {
    const model = store.models.get(selectedModelId) || null;
    renderModelInfo(modelInfo, model);
    renderShapeFields(shapes, model);
    checkTarget();
  }

  // What the chosen target cannot compile in the chosen model (GET /targets' unsupported_ops against the
  // model's op types), said before a job is created; the server refuses such a job the same way.
  function checkTarget() {
    const model = store.models.get(selectedModelId) || null;
    const target = store.targets.find((x) => x.name === targetSelect.value);
    const refused = model && target ? (model.op_types || []).filter((op) => (target.unsupported_ops || []).includes(op)) : [];
    showMessage(targetWarning, refused.length ? new ApiError(422,
      `${target.name} cannot compile ${refused.length === 1 ? "this op" : "these ops"} of ${model.filename}: ` +
      `${refused.join(", ")}. Choose a CPU target, or replace ${refused.length === 1 ? "it" : "them"} in the model.`) : null);
    submit.disabled = !model || !store.targets.length || refused.length > 0;
  }

  function describeOpt() {
    const level = OPT_LEVELS.find(([v]) => v === Number(optSelect.value));
    optHint.textContent = level ? level[2] : "";
  }
  describeOpt();

  function fillTargets() {
    targetSelect.replaceChildren(...store.targets.map((t) => h("option", { value: t.name },
      t.runs_on_host ? t.name : t.emulator ? `${t.name} (cross-compile, validated under ${t.emulator})`
        : `${t.name} (cross-compile, not validated)`)));
    describeTarget();
    showModel();
  }

  function describeTarget() {
    const t = store.targets.find((x) => x.name === targetSelect.value);
    const code = t?.kind === "cuda" ? `${t.cpu} PTX` : `${t?.vector_bits}-bit vectors`; // a GPU has no SIMD width
    targetHint.textContent = !t ? "" : `${t.description} · ${t.triple}, ${code}` +
      (t.runs_on_host ? "" : t.emulator
        ? ` · validated here under ${t.emulator} (emulated: correctness only, not benchmarked)`
        : " · this server cannot run it, so the result is not validated or benchmarked here");
  }

  async function upload(file) {
    if (!file) return;
    showMessage(uploadError, null);
    uploadStatus.hidden = false;
    setProgress(uploadBar, 0, "running");
    uploadText.textContent = `Uploading ${file.name} (${formatBytes(file.size)})…`;
    dropzone.classList.add("busy");
    try {
      const { model, created } = await uploadModel(file, (fraction) => {
        const pct = Math.round(fraction * 100);
        setProgress(uploadBar, pct, "running");
        uploadText.textContent = pct < 100 ? `Uploading ${file.name}: ${pct}%` : `Checking ${file.name} on the server…`;
      });
      store.models.set(model.id, model);
      selectedModelId = model.id;
      setProgress(uploadBar, 100, "succeeded");
      uploadText.textContent = created ? `${model.filename} uploaded and checked.`
        : `${model.filename} was uploaded before: using that model.`;
      fillModels();
    } catch (err) {
      uploadStatus.hidden = true;
      showMessage(uploadError, new ApiError(err.status, `Upload of ${file.name} failed: ${err.message}`, err.lines));
    } finally {
      dropzone.classList.remove("busy");
      fileInput.value = "";
    }
  }

  fileInput.addEventListener("change", () => upload(fileInput.files[0]));
  for (const type of ["dragenter", "dragover"]) {
    dropzone.addEventListener(type, (e) => {
      e.preventDefault();
      dropzone.classList.add("dragging");
    });
  }
  for (const type of ["dragleave", "drop"]) {
    dropzone.addEventListener(type, () => dropzone.classList.remove("dragging"));
  }
  dropzone.addEventListener("drop", (e) => {
    e.preventDefault();
    const files = e.dataTransfer ? e.dataTransfer.files : null;
    if (files && files.length) upload(files[0]);
  });
  // A notice about the last job no longer applies once the form changes.
  function clearNotices() {
    showMessage(jobNotice, null);
    showMessage(jobError, null);
  }
  modelSelect.addEventListener("change", () => {
    selectedModelId = modelSelect.value || null;
    clearNotices();
    showModel();
  });
  targetSelect.addEventListener("change", () => {
    clearNotices();
    describeTarget();
    checkTarget();
  });
  optSelect.addEventListener("change", describeOpt);
  deleteModel.addEventListener("click", async () => {
    const model = store.models.get(selectedModelId);
    if (!model || !window.confirm(`Delete ${model.filename} and all its jobs, artifacts and reports?`)) return;
    deleteModel.disabled = true;
    clearNotices();
    try {
      await api.deleteModel(model.id);
      store.models.delete(model.id);
      await refreshJobs();
      fillModels();
      showMessage(jobNotice, { message: `${model.filename} deleted, with its jobs.` }, "info");
    } catch (err) {
      showMessage(jobError, new ApiError(err.status, `${model.filename} was not deleted: ${err.message}`, err.lines));
    } finally {
      deleteModel.disabled = !store.models.size;
    }
  });

  // The job's validation options; real inputs are uploaded (and checked by the server) before the job is created.
  async function readValidation() {
    const out = { mode: validateSelect.value };
    const text = toleranceInput.value.trim();
    if (text) {
      const numbers = text.split(",").map((part) => Number(part.trim()));
      if (numbers.length > 2 || numbers.some((n) => !Number.isFinite(n) || n < 0) || text.split(",").some((p) => !p.trim())) {
        toleranceInput.focus();
        throw new ApiError(0, "The tolerance must be ATOL or ATOL,RTOL: one or two numbers >= 0 (e.g. 1e-3,1e-2).");
      }
      out.tolerance = numbers;
    }
    const file = inputsFile.files && inputsFile.files[0];
    if (file) {
      try {
        out.inputs_id = (await uploadValidationInputs(selectedModelId, file)).id;
      } catch (err) {
        throw new ApiError(err.status, `The validation inputs ${file.name} were refused: ${err.message}`, err.lines);
      }
    }
    return out;
  }

  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    showMessage(jobError, null);
    showMessage(jobNotice, null);
    submit.disabled = true;
    try {
      const trials = Number(trialsInput.value || 0);
      if (!Number.isInteger(trials) || trials < 0) {
        trialsInput.focus();
        throw new ApiError(0, "The tuning budget must be a whole number of trials (0 for no tuning).");
      }
      const budget = budgetInput.value === "" ? null : Number(budgetInput.value);
      if (budget !== null && !(budget > 0)) {
        budgetInput.focus();
        throw new ApiError(0, "The tuning time budget must be a number of seconds above 0 (empty: no time limit).");
      }
      const job = await api.createJob({
        model_id: selectedModelId, target: targetSelect.value, opt_level: Number(optSelect.value),
        tuning: { trials, time_budget_s: budget }, input_shapes: readShapes(shapes), validation: await readValidation(),
        ...(await precision.read(selectedModelId)), ...(quickBox.checked ? { quick: true } : {}),
      });
      putJob(job);
      announce(`Compile of ${store.models.get(job.model_id)?.filename ?? "the model"} for ${job.target} queued.`);
      location.hash = `#/jobs/${job.id}`; // follow the new job on its own page
    } catch (err) {
      showMessage(jobError, new ApiError(err.status, `The job was not created: ${err.message}`, err.lines));
    } finally {
      submit.disabled = !selectedModelId;
    }
  });

  return { fillModels, fillTargets };
}
