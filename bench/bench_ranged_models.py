"""Real exports with every symbolic dim ranged: a transformers T5 (encoder + decoder with past) and a torchvision
Faster R-CNN with dynamic height and width, each compiled once by Kiln and compared with ONNX Runtime at sizes in
range (T5: greedy decode of N tokens, token for token).

    /path/to/torch-env/bin/python bench/bench_ranged_models.py export [--only t5 fasterrcnn]
    .venv/bin/python bench/bench_ranged_models.py run [--only t5 fasterrcnn] [--tokens 16] [--threads 2]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

CACHE = Path.home() / ".cache" / "kiln" / "ranged"
T5_LAYERS, T5_HEADS, T5_DKV, T5_VOCAB = 2, 2, 32, 512


def export_t5(torch, folder: Path = CACHE, d_model: int = 64, d_ff: int = 128, d_kv: int = T5_DKV,
              vocab: int = T5_VOCAB, init_scale: float = 1.0) -> None:
    """T5 as optimum splits it: an encoder, and one decoder that takes the self-attention past (possibly empty:
    the first step) and the encoder's states, and returns the logits and the grown past (t5_encoder.onnx and
    t5_decoder.onnx in `folder`). `init_scale`: T5's initializer_factor; random weights at 1.0 make greedy decoding
    repeat one token, larger ones vary the tokens but make attention so peaked that float32 rounding shows (at 2.0
    a static compile of this size is off by 4e-4 in one logit; the tiny test model takes 2.0)."""
    import transformers.masking_utils as masking
    from transformers import T5Config, T5ForConditionalGeneration
    from transformers.cache_utils import DynamicCache, EncoderDecoderCache

    masking._vmap_for_bhqkv = lambda fn, bh_indices=True: (lambda b, h, q, kv: fn(b, h, q[:, None], kv[None, :]))
    masking.sdpa_mask = masking.sdpa_mask_older_torch
    torch.manual_seed(0)
    model = T5ForConditionalGeneration(T5Config(
        d_model=d_model, num_layers=T5_LAYERS, num_heads=T5_HEADS, d_kv=d_kv, d_ff=d_ff, vocab_size=vocab,
        initializer_factor=init_scale, attn_implementation="eager")).eval()

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask):
            return self.model.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    class Decoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids, encoder_hidden_states, encoder_attention_mask, *past):
            cache = DynamicCache()
            for i in range(T5_LAYERS):
                cache.update(past[2 * i], past[2 * i + 1], i)
            out = self.model(decoder_input_ids=input_ids, encoder_outputs=(encoder_hidden_states,),
                        attention_mask=encoder_attention_mask, use_cache=True,
                        past_key_values=EncoderDecoderCache(cache, DynamicCache()))
            present = out.past_key_values.self_attention_cache
            return (out.logits, *[t for layer in present.layers for t in (layer.keys, layer.values)])

    ids = torch.randint(0, vocab, (2, 7))
    torch.onnx.export(Encoder(), (ids, torch.ones_like(ids)), str(folder / "t5_encoder.onnx"),
                      input_names=["input_ids", "attention_mask"], output_names=["last_hidden_state"],
                      dynamic_axes={"input_ids": {0: "batch_size", 1: "encoder_sequence_length"},
                                    "attention_mask": {0: "batch_size", 1: "encoder_sequence_length"},
                                    "last_hidden_state": {0: "batch_size", 1: "encoder_sequence_length"}},
                      opset_version=17, dynamo=False)
    past_names = [f"past_key_values.{i}.decoder.{n}" for i in range(T5_LAYERS) for n in ("key", "value")]
    present_names = [n.replace("past_key_values", "present") for n in past_names]
    total = "past_decoder_sequence_length + decoder_sequence_length"
    axes = {"input_ids": {0: "batch_size", 1: "decoder_sequence_length"},
            "encoder_hidden_states": {0: "batch_size", 1: "encoder_sequence_length"},
            "encoder_attention_mask": {0: "batch_size", 1: "encoder_sequence_length"},
            "logits": {0: "batch_size", 1: "decoder_sequence_length"},
            **{n: {0: "batch_size", 2: "past_decoder_sequence_length"} for n in past_names},
            **{n: {0: "batch_size", 2: total} for n in present_names}}
    example = (torch.randint(0, vocab, (2, 3)), torch.randn(2, 7, d_model), torch.ones(2, 7, dtype=torch.int64),
               *[torch.randn(2, T5_HEADS, 5, d_kv) for _ in past_names])
    torch.onnx.export(Decoder(), example, str(folder / "t5_decoder.onnx"),
                      input_names=["input_ids", "encoder_hidden_states", "encoder_attention_mask", *past_names],
                      output_names=["logits", *present_names], dynamic_axes=axes, opset_version=17, dynamo=False)


def _ops_present() -> bool:  # scripted by torchvision's nms: a plain function, not a lambda
    return True


def _torchvision_ops_in_python(torch, torchvision) -> None:
    """torchvision's nms and roi_align as Python ops where its C extension cannot load (a CUDA build of
    torchvision beside a CPU torch): the exporter only needs the op's schema and a result to trace through."""
    if hasattr(torch.ops.torchvision, "nms"):
        return
    import importlib

    align = importlib.import_module("torchvision.ops.roi_align")  # the module: torchvision.ops.roi_align is the op
    torchvision.extension._has_ops = align._has_ops = _ops_present

    def nms(boxes, scores, iou_threshold):
        order, keep = scores.argsort(descending=True), []
        while order.numel():
            keep.append(order[0])
            iou = torchvision.ops.box_iou(boxes[order[:1]], boxes[order[1:]])[0]
            order = order[1:][iou <= iou_threshold]
        return torch.stack(keep) if keep else torch.zeros(0, dtype=torch.int64)

    library = torch.library.Library("torchvision", "DEF")
    library.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    library.impl("nms", nms, "CPU")
    library.define("roi_align(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, "
                   "SymInt pooled_width, int sampling_ratio, bool aligned) -> Tensor")
    library.impl("roi_align", align._roi_align.__wrapped__, "CPU")  # torchvision's own, without its torch.compile
    _torchvision_ops_in_python.library = library  # kept alive


def export_fasterrcnn(torch) -> None:
    """torchvision's Faster R-CNN (MobileNetV3 FPN, 320 px, random weights) with the image's height and width
    dynamic, as torchvision's own ONNX test exports it."""
    import torchvision

    _torchvision_ops_in_python(torch, torchvision)
    torch.manual_seed(0)
    model = torchvision.models.detection.fasterrcnn_mobilenet_v3_large_320_fpn(
        weights=None, weights_backbone=None, num_classes=5).eval()
    torch.onnx.export(model, ([torch.rand(3, 320, 320)],), str(CACHE / "fasterrcnn.onnx"),
                      input_names=["image"], output_names=["boxes", "labels", "scores"],
                      dynamic_axes={"image": {1: "height", 2: "width"}, "boxes": {0: "detections"},
                                    "labels": {0: "detections"}, "scores": {0: "detections"}},
                      opset_version=17, dynamo=False)


T5_RANGES = {"encoder": {"input_ids": "1..4,1..128"},
             "decoder": {"input_ids": "1..4,1..128", "encoder_hidden_states": "1..4,1..128,64",
                         "past_key_values.0.decoder.key": f"1..4,{T5_HEADS},0..128,{T5_DKV}"}}


def _compile(core, name: str, ranges: dict, threads: int):
    start = time.perf_counter()
    artifact = core.compile(str(CACHE / f"{name}.onnx"), benchmark=False, threads=threads, input_shapes=ranges)
    validation = artifact.report["validation"]
    print(f"{name}: {ranges} compiled in {time.perf_counter() - start:.1f} s, "
          f"{len(artifact.metadata['dynamic_shapes']['buckets'])} compiled shapes, validated at "
          f"{len(validation.get('shapes', []))} shapes, max abs err {validation.get('max_abs_err')}")
    return artifact


def _max_error(module, session, feeds) -> float:
    expected = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
    got = module.run(feeds)
    errors = []
    for name, want in expected.items():
        if got[name].shape != want.shape:
            raise AssertionError(f"{name}: shape {got[name].shape}, ONNX Runtime {want.shape}")
        errors.append(float(np.abs(got[name] - want).max()) if want.size else 0.0)
    return max(errors)


def run_t5(core, ort, threads: int, tokens: int) -> bool:
    encoder, decoder = (_compile(core, f"t5_{part}", T5_RANGES[part], threads) for part in ("encoder", "decoder"))
    sessions = {part: ort.InferenceSession(str(CACHE / f"t5_{part}.onnx")) for part in ("encoder", "decoder")}
    rng = np.random.default_rng(0)
    past_names = [f"past_key_values.{i}.decoder.{n}" for i in range(T5_LAYERS) for n in ("key", "value")]
    ok = True
    with encoder.load() as enc, decoder.load() as dec:
        for batch, source, new, past in ((1, 1, 1, 0), (3, 37, 1, 0), (2, 100, 5, 17), (4, 128, 1, 127), (1, 9, 64, 64)):
            ids = rng.integers(0, T5_VOCAB, (batch, source)).astype(np.int64)
            mask = np.ones_like(ids)
            mask[0, source // 2 + 1:] = 0  # a padded source row
            err_enc = _max_error(enc, sessions["encoder"], {"input_ids": ids, "attention_mask": mask})
            feeds = {"input_ids": rng.integers(0, T5_VOCAB, (batch, new)).astype(np.int64),
                     "encoder_hidden_states": rng.standard_normal((batch, source, 64)).astype(np.float32),
                     "encoder_attention_mask": mask,
                     **{n: rng.standard_normal((batch, T5_HEADS, past, T5_DKV)).astype(np.float32) for n in past_names}}
            err_dec = _max_error(dec, sessions["decoder"], feeds)
            print(f"  batch {batch}, source {source}, new {new}, past {past}: max abs err encoder {err_enc:.2e}, "
                  f"decoder {err_dec:.2e}")
            ok = ok and max(err_enc, err_dec) < 1e-4
        for batch, source in ((1, 12), (3, 40)):
            ids = rng.integers(0, T5_VOCAB, (batch, source)).astype(np.int64)
            mask = np.ones_like(ids)
            sequences, logits = {}, {}
            for engine in ("kiln", "onnxruntime"):
                run_enc = enc.run if engine == "kiln" else (
                    lambda f: {"last_hidden_state": sessions["encoder"].run(None, f)[0]})
                names = [o.name for o in sessions["decoder"].get_outputs()]
                run_dec = dec.run if engine == "kiln" else (
                    lambda f: dict(zip(names, sessions["decoder"].run(None, f))))
                states = run_enc({"input_ids": ids, "attention_mask": mask})["last_hidden_state"]
                past = {n: np.zeros((batch, T5_HEADS, 0, T5_DKV), np.float32) for n in past_names}
                step = np.zeros((batch, 1), np.int64)  # T5's decoder start token (the pad id)
                generated = []
                for _ in range(tokens):
                    out = run_dec({"input_ids": step, "encoder_hidden_states": states, "encoder_attention_mask": mask,
                                   **past})
                    logits.setdefault(engine, []).append(out["logits"])
                    step = out["logits"][:, -1].argmax(-1).reshape(batch, 1).astype(np.int64)
                    generated.append(step[:, 0])
                    past = {n: out[n.replace("past_key_values", "present")] for n in past_names}
                sequences[engine] = np.stack(generated, 1)
            same = np.array_equal(sequences["kiln"], sequences["onnxruntime"])
            err = max(float(np.abs(a - b).max()) for a, b in zip(logits["kiln"], logits["onnxruntime"]))
            print(f"  greedy decode, batch {batch}, source {source}: {tokens} tokens identical to ONNX Runtime: "
                  f"{same} ({sequences['kiln'][0, :10].tolist()}...), logits max abs err {err:.2e} over the steps")
            ok = ok and same
    return ok


def run_fasterrcnn(core, ort, threads: int) -> bool:
    """Height and width run on run-time lengths inside each shape bucket (the variables are "masked"): the
    transform's Resize and Pad, the backbone, the pyramid's upsampling, the anchors (Range, height x width x
    anchors flattened), RoiAlign and the detection count (an output of its own length) all take them, so one
    artifact runs any size in range. The random weights of this export still score boxes alike (2 distinct scores
    in 100): NMS/TopK tie-breaks then decide which boxes are kept and in what order, so a static compile of the
    very size differs from ONNX Runtime as much (hundreds of pixels, sorted or not; validation is set to warn
    here). What this checks is the ranged artifact against a static compile of each size (the same tie-breaks);
    tests/core/frontend/test_frontend_detectors.py exports with fan-in weights (distinct scores) and matches ONNX
    Runtime at sizes between the buckets."""
    start = time.perf_counter()
    artifact = core.compile(str(CACHE / "fasterrcnn.onnx"), benchmark=False, threads=threads, validate="warn",
                            input_shapes={"image": "3,256..512,256..512"})
    shapes = artifact.metadata["dynamic_shapes"]
    print(f"fasterrcnn: compiled in {time.perf_counter() - start:.1f} s, {len(shapes['buckets'])} buckets, "
          f"run-time sides: {[v['name'] for v in shapes['variables'] if v['masked']]}")
    session = ort.InferenceSession(str(CACHE / "fasterrcnn.onnx"))
    rng = np.random.default_rng(0)
    ok = True
    with artifact.load() as module:
        for height, width in ((300, 420), (512, 256), (257, 511), (384, 384)):
            image = rng.random((3, height, width), np.float32)
            try:
                err = _max_error(module, session, {"image": image})
            except AssertionError as mismatch:  # a detection count that differs (a tie at the threshold)
                print(f"  image {height} x {width}: {mismatch}")
                ok = False
                continue
            unordered = _unordered_detection_error(module, session, {"image": image})
            static = core.compile(str(CACHE / "fasterrcnn.onnx"), benchmark=False, threads=threads, validate="off",
                                  input_shapes={"image": [3, height, width]})
            with static.load() as exact:
                want, got = exact.run({"image": image}), module.run({"image": image})
            same_shapes = all(got[n].shape == want[n].shape for n in want)
            versus_static = max((float(np.abs(got[n].astype(np.float64) - want[n]).max()) for n in want
                                 if want[n].size), default=0.0) if same_shapes else float("inf")
            print(f"  image {height} x {width}: max abs err {err:.2e}; detections sorted by their boxes on both "
                  f"sides: {unordered:.2e}; against a static compile of this size: {versus_static:.2e}")
            ok = ok and versus_static < 1e-3
    return ok


def _unordered_detection_error(module, session, feeds) -> float:
    """The largest difference once each side's detections are put in the order of their boxes (lexicographic):
    what is left when only NMS/TopK tie-breaks ordered them differently."""
    expected = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
    got = module.run(feeds)
    errors = []
    orders = {side: np.lexsort(outs["boxes"].T[::-1]) for side, outs in (("kiln", got), ("ort", expected))}
    for name, want in expected.items():
        if want.size:
            mine, theirs = got[name][orders["kiln"]], want[orders["ort"]]
            errors.append(float(np.abs(mine.astype(np.float64) - theirs).max()))
    return max(errors, default=0.0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("export", "run"))
    parser.add_argument("--only", nargs="*", choices=("t5", "fasterrcnn"), default=["t5", "fasterrcnn"])
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    if args.command == "export":
        import torch

        CACHE.mkdir(parents=True, exist_ok=True)
        for name in args.only:
            globals()[f"export_{name}"](torch)
            print("exported", name)
        return 0
    import onnxruntime as ort

    import core

    ok = True
    for name in args.only:
        ok = (run_t5(core, ort, args.threads, args.tokens) if name == "t5" else
              run_fasterrcnn(core, ort, args.threads)) and ok
    return 0 if ok else 2


if __name__ == "__main__":
    sys.exit(main())
