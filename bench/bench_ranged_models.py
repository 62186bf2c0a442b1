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


def export_t5(torch) -> None:
    """T5 as optimum splits it: an encoder, and one decoder that takes the self-attention past (possibly empty:
    the first step) and the encoder's states, and returns the logits and the grown past."""
    import transformers.masking_utils as masking
    from transformers import T5Config, T5ForConditionalGeneration
    from transformers.cache_utils import DynamicCache, EncoderDecoderCache

    masking._vmap_for_bhqkv = lambda fn, bh_indices=True: (lambda b, h, q, kv: fn(b, h, q[:, None], kv[None, :]))
    masking.sdpa_mask = masking.sdpa_mask_older_torch
    torch.manual_seed(0)
    model = T5ForConditionalGeneration(T5Config(d_model=64, num_layers=T5_LAYERS, num_heads=T5_HEADS, d_kv=T5_DKV,
                                                d_ff=128, vocab_size=T5_VOCAB, attn_implementation="eager")).eval()

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

    ids = torch.randint(0, T5_VOCAB, (2, 7))
    torch.onnx.export(Encoder(), (ids, torch.ones_like(ids)), str(CACHE / "t5_encoder.onnx"),
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
    example = (torch.randint(0, T5_VOCAB, (2, 3)), torch.randn(2, 7, 64), torch.ones(2, 7, dtype=torch.int64),
               *[torch.randn(2, T5_HEADS, 5, T5_DKV) for _ in past_names])
    torch.onnx.export(Decoder(), example, str(CACHE / "t5_decoder.onnx"),
                      input_names=["input_ids", "encoder_hidden_states", "encoder_attention_mask", *past_names],
                      output_names=["logits", *present_names], dynamic_axes=axes, opset_version=17, dynamo=False)


def _ops_present() -> bool:  # scripted by torchvision's nms: a plain function, not a lambda
    return True


def _torchvision_ops_in_python(torch, torchvision) -> None:
    """torchvision's nms and roi_align as Python ops where its C extension cannot load (a CUDA build of
    torchvision beside a CPU torch): the exporter only needs the op's schema and a result to trace through."""
    if hasattr(torch.ops.torchvision, "nms"):
        return
    import torchvision.extension
    import torchvision.ops.roi_align
    from torchvision.ops.roi_align import _roi_align

    torchvision.extension._has_ops = torchvision.ops.roi_align._has_ops = _ops_present

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
    library.impl("roi_align", _roi_align.__wrapped__, "CPU")  # torchvision's own, without its torch.compile
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
