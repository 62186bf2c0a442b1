// The job form's precision fields: float32 as uploaded, or int8 quantized on calibration samples first
// (the server's quantize job: accuracy cost, layer sensitivity and float32 fallback end up in the report).

import { ApiError, uploadCalibration } from "./api.js";
import { h } from "./ui.js";

const PRECISIONS = [
  ["fp32", "float32, as uploaded (default)"],
  ["fp16", "fp16: float16 weights, float32 arithmetic"],
  ["bf16", "bf16: bfloat16 weights, float32 arithmetic"],
  ["int8", "int8: quantize on calibration samples first"],
];
const METHODS = [["minmax", "min-max (default)"], ["percentile", "percentile"], ["entropy", "entropy"]];

export function precisionFields() {
  const select = h("select", { id: "precision-select", testid: "precision-select" },
    PRECISIONS.map(([v, text]) => h("option", { value: v }, text)));
  const calibration = h("input", { id: "calibration-file", type: "file", accept: ".npz", testid: "calibration-file",
    "aria-describedby": "calibration-hint" });
  const method = h("select", { id: "calibration-method", testid: "calibration-method" },
    METHODS.map(([v, text]) => h("option", { value: v }, text)));
  const perChannel = h("input", { id: "per-channel", type: "checkbox", testid: "per-channel" });
  const maxError = h("input", { id: "max-error", type: "text", placeholder: "none (e.g. 0.05)", testid: "max-error",
    autocomplete: "off", "aria-describedby": "max-error-hint" });
  const keepFloat = h("input", { id: "keep-float", type: "text", placeholder: "node names, comma-separated",
    testid: "keep-float", autocomplete: "off" });
  const int8 = h("div", { class: "form-grid", hidden: true, testid: "int8-fields" },
    h("div", { class: "field" }, h("label", { for: "calibration-file" }, "Calibration samples (.npz)"), calibration,
      h("p", { class: "hint", id: "calibration-hint" }, "One array per model input, named as the input, first axis = samples (at least 2; 20% are held back to measure the accuracy cost).")),
    h("div", { class: "field" }, h("label", { for: "calibration-method" }, "Calibration method"), method),
    h("div", { class: "field" }, h("label", { for: "per-channel" }, perChannel, " per-channel weight scales")),
    h("div", { class: "field" }, h("label", { for: "max-error" }, "Error budget"), maxError,
      h("p", { class: "hint", id: "max-error-hint" }, "Largest relative error of any output; the most sensitive layers fall back to float32 until it holds.")),
    h("div", { class: "field" }, h("label", { for: "keep-float" }, "Keep in float32"), keepFloat));
  const element = h("fieldset", { class: "shapes", testid: "precision-fields" },
    h("legend", {}, "Precision"),
    h("div", { class: "field" }, h("label", { for: "precision-select" }, "Precision"), select), int8);
  select.addEventListener("change", () => { int8.hidden = select.value !== "int8"; });

  // The job's precision options; the calibration samples are uploaded (and checked by the server) first.
  async function read(modelId) {
    if (select.value !== "int8") return select.value === "fp32" ? {} : { precision: select.value };
    const file = calibration.files && calibration.files[0];
    if (!file) {
      calibration.focus();
      throw new ApiError(0, "int8 needs calibration samples: choose an .npz of the model's inputs.");
    }
    const budget = maxError.value.trim();
    if (budget && !(Number(budget) > 0)) {
      maxError.focus();
      throw new ApiError(0, "The error budget must be a number above 0 (empty: no budget).");
    }
    let uploaded;
    try {
      uploaded = await uploadCalibration(modelId, file);
    } catch (err) {
      throw new ApiError(err.status, `The calibration samples ${file.name} were refused: ${err.message}`, err.lines);
    }
    const quantization = { calibration_id: uploaded.id, method: method.value, per_channel: perChannel.checked,
      keep_float: keepFloat.value.split(",").map((s) => s.trim()).filter(Boolean) };
    if (budget) quantization.max_error = Number(budget);
    return { precision: "int8", quantization };
  }
  return { element, read };
}
