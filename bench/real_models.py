"""Models Kiln was never tuned for, tried as a new user would: ONNX files shipped in PyPI packages
(OCR, speech), torchvision's classifiers (random weights) and models exported from Hugging Face `transformers`
configs (vision, NLP, speech). Each is compiled at -O3, validated against ONNX Runtime and timed against it in
the same run.

    .venv/bin/python bench/real_models.py fetch            # pip-download the packaged models (network)
    .venv/bin/python bench/real_models.py export [--only NAME ...]  # needs torch + torchvision (+ transformers)
    .venv/bin/python bench/real_models.py run [--only NAME ...] [-t TARGET]   # TARGET: native (default), x86-64-v3...
"""
from __future__ import annotations

import argparse
import io
import math
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
CACHE = Path.home() / ".cache" / "kiln" / "real-models"

# Wheels that ship ONNX models: (requirement, member path in the wheel, model name, fixed input shapes).
PACKAGED = [
    ("rapidocr_onnxruntime==1.4.4", "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
     "ppocr_cls", {"x": (1, 3, 48, 192)}),
    ("rapidocr_onnxruntime==1.4.4", "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
     "ppocrv4_rec", {"x": (1, 3, 48, 320)}),
    ("rapidocr_onnxruntime==1.4.4", "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
     "ppocrv4_det", {"x": (1, 3, 640, 640)}),
    ("silero-vad==6.2.3", "silero_vad/data/silero_vad.onnx", "silero_vad", {"input": (1, 512), "state": (2, 1, 128)}),
    ("silero-vad==6.2.3", "silero_vad/data/silero_vad_16k_sequence.onnx", "silero_vad_seq", {"input": (8, 576)}),
    ("silero-vad==6.2.3", "silero_vad/data/silero_vad_openvino_16k.onnx", "silero_vad_ov", {}),
]

# torchvision classifiers at their own sizes (random weights: the architecture is what is compiled).
TORCHVISION = ["resnet50", "resnext50_32x4d", "mobilenet_v3_large", "efficientnet_b0", "shufflenet_v2_x1_0",
               "regnet_y_400mf", "densenet121", "googlenet", "mnasnet1_0", "convnext_tiny", "squeezenet1_0",
               "vit_b_16", "swin_t", "wide_resnet50_2"]

# Random-weight models from transformers configs (small sizes, real architectures): name -> shapes.
EXPORTED = {"distilbert": {}, "t5_encoder": {}, "vit": {}, "convnext": {}, "swin": {}, "segformer": {},
            "resnet_bottleneck": {}, "whisper_encoder": {}, "wav2vec2": {}, "gpt2_decoder": {}, "llama_decoder": {}}

# Small models written here in torch.nn (random weights): name -> shapes.
TORCH_MODULES = {"crnn": {}}


def real_inputs(name: str) -> "bytes | None":
    """Validation inputs (.npz bytes) for a model whose random inputs take a path no runtime can run: silero_vad's
    `sr` picks its If branch; at a random rate ONNX Runtime fails too, at 16000 Hz with 512 samples it runs."""
    if name != "silero_vad":
        return None
    rng = np.random.default_rng(0)
    buffer = io.BytesIO()
    np.savez(buffer, input=rng.uniform(-0.5, 0.5, (1, 512)).astype(np.float32),
             state=np.zeros((2, 1, 128), np.float32), sr=np.array(16000, np.int64))
    return buffer.getvalue()


def fetch() -> None:
    CACHE.mkdir(parents=True, exist_ok=True)
    wheels = CACHE / "wheels"
    for requirement in sorted({p[0] for p in PACKAGED}):
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(wheels), requirement],
                       check=True)
    for requirement, member, name, _ in PACKAGED:
        package = requirement.split("==")[0].replace("-", "_")
        wheel = next(wheels.glob(f"{package}-{requirement.split('==')[1]}-*.whl"))
        with zipfile.ZipFile(wheel) as zf:
            (CACHE / f"{name}.onnx").write_bytes(zf.read(member))
        print("fetched", name)


def export(only: list[str]) -> None:
    import torch

    torch.manual_seed(0)
    CACHE.mkdir(parents=True, exist_ok=True)
    _export_torchvision(torch, only)
    if not only or "crnn" in only:
        torch.onnx.export(_crnn(torch).eval(), (torch.randn(1, 1, 32, 128),), str(CACHE / "crnn.onnx"),
                          input_names=["image"], opset_version=17, dynamo=False)
        print("exported crnn")
    try:
        import transformers  # noqa: F401
    except ImportError:
        print("transformers is not installed: its models are skipped")
        return
    _export_transformers(torch, only)


def _export_torchvision(torch, only: list[str]) -> None:
    import torchvision

    image = torch.randn(1, 3, 224, 224)
    for name in (n for n in TORCHVISION if not only or n in only):
        model = getattr(torchvision.models, name)(weights=None).eval()
        torch.onnx.export(model, (image,), str(CACHE / f"{name}.onnx"), input_names=["image"], opset_version=17,
                          dynamo=False)
        print("exported", name)


def _export_transformers(torch, only: list[str]) -> None:
    import transformers as hf

    ids = torch.randint(0, 1000, (1, 32))
    # its own generator: the other models draw the same weights and inputs as before
    decoder_ids = torch.randint(0, 1000, (1, 128), generator=torch.Generator().manual_seed(0))
    image = torch.randn(1, 3, 224, 224)
    models = {
        "distilbert": (hf.DistilBertModel(hf.DistilBertConfig(vocab_size=1000, dim=256, n_layers=2, n_heads=4,
                                                              hidden_dim=512)),
                       (ids, torch.ones_like(ids)), ["input_ids", "attention_mask"]),
        "t5_encoder": (hf.T5EncoderModel(hf.T5Config(vocab_size=1000, d_model=256, d_ff=512, num_layers=2,
                                                     num_heads=4, d_kv=64)), (ids,), ["input_ids"]),
        "vit": (hf.ViTModel(hf.ViTConfig(hidden_size=192, num_hidden_layers=2, num_attention_heads=3,
                                         intermediate_size=384)), (image,), ["pixel_values"]),
        "convnext": (hf.ConvNextModel(hf.ConvNextConfig(depths=[1, 1, 2, 1], hidden_sizes=[32, 64, 128, 256])),
                     (image,), ["pixel_values"]),
        "swin": (hf.SwinModel(hf.SwinConfig(embed_dim=48, depths=[1, 1, 2, 1], num_heads=[2, 2, 4, 8])),
                 (image,), ["pixel_values"]),
        "segformer": (hf.SegformerForSemanticSegmentation(hf.SegformerConfig(
            depths=[1, 1, 1, 1], hidden_sizes=[16, 32, 64, 128], num_attention_heads=[1, 2, 4, 8],
            decoder_hidden_size=64)), (image,), ["pixel_values"]),
        "resnet_bottleneck": (hf.ResNetModel(hf.ResNetConfig(depths=[1, 1, 1, 1], layer_type="bottleneck",
                                                             hidden_sizes=[64, 128, 256, 512])),
                              (image,), ["pixel_values"]),
        "whisper_encoder": (hf.WhisperModel(hf.WhisperConfig(
            d_model=128, encoder_layers=2, encoder_attention_heads=4, decoder_layers=1, decoder_attention_heads=4,
            encoder_ffn_dim=256, decoder_ffn_dim=256, num_mel_bins=80)).encoder,
            (torch.randn(1, 80, 3000),), ["input_features"]),
        "wav2vec2": (hf.Wav2Vec2Model(hf.Wav2Vec2Config(hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                                                        intermediate_size=256, conv_dim=(64,) * 7)),
                     (torch.randn(1, 16000),), ["input_values"]),
        # Decoders without a KV cache: a full causal sequence of 128 tokens in, the logits out.
        "gpt2_decoder": (_masks_without_vmap(hf.GPT2LMHeadModel(hf.GPT2Config(
            vocab_size=1000, n_positions=128, n_embd=256, n_layer=2, n_head=4, use_cache=False))),
            (decoder_ids,), ["input_ids"]),
        "llama_decoder": (_masks_without_vmap(hf.LlamaForCausalLM(hf.LlamaConfig(
            vocab_size=1000, hidden_size=256, intermediate_size=688, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=128, use_cache=False))), (decoder_ids,), ["input_ids"]),
    }
    for name, (model, args, names) in models.items():
        if only and name not in only:
            continue
        torch.onnx.export(model.eval(), args, str(CACHE / f"{name}.onnx"), input_names=names, opset_version=17,
                          dynamo=False)
        print("exported", name)


def _crnn(torch):
    """A CRNN text recognizer (Shi et al.): conv features of a 32 x 128 grey line image read as 32 columns
    by two bidirectional LSTM layers (hidden 256), per-column class scores (37 characters)."""
    nn = torch.nn

    def block(cin, cout, pool):
        return [nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(), nn.MaxPool2d(pool)]

    class CRNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.features = nn.Sequential(*block(1, 64, 2), *block(64, 128, (2, 1)), *block(128, 256, (2, 1)),
                                          *block(256, 256, (4, 1)))  # [1, 256, 1, 32] after a 32 x 128 input
            self.lstm = nn.LSTM(256, 256, num_layers=2, bidirectional=True)
            self.classes = nn.Linear(512, 37)

        def forward(self, image):
            columns = self.features(image).squeeze(2).permute(2, 0, 1)  # [width, batch, channels]
            return self.classes(self.lstm(columns)[0])

    return CRNN()


def _masks_without_vmap(model):
    """The causal mask built without torch.vmap, which the TorchScript exporter cannot trace (transformers' own
    export path for decoders, `integrations.executorch`, does the same)."""
    from transformers.integrations.executorch import sdpa_mask_without_vmap
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    ALL_MASK_ATTENTION_FUNCTIONS.register("sdpa_without_vmap", sdpa_mask_without_vmap)
    ALL_ATTENTION_FUNCTIONS.register("sdpa_without_vmap", ALL_ATTENTION_FUNCTIONS["sdpa"])
    model.config._attn_implementation = "sdpa_without_vmap"
    return model


def run(only: list[str], target: str = "native") -> int:
    import onnx

    import core
    from core.errors import KilnError

    shapes = {name: s for _, _, name, s in PACKAGED} | {name: {} for name in TORCHVISION} | EXPORTED | TORCH_MODULES
    names = [n for n in shapes if (CACHE / f"{n}.onnx").exists() and (not only or n in only)]
    if not names:
        print(f"no models in {CACHE}: run `fetch` and/or `export` first", file=sys.stderr)
        return 1
    print(f"{'model':<20}{'nodes':>6}{'kernels':>8}{'compile s':>10}{'max err':>10}{'Kiln ms':>9}{'ORT ms':>9}"
          f"{'ratio':>7}")
    failures, ratios = 0, {}
    for name in names:
        path = CACHE / f"{name}.onnx"
        nodes = len(onnx.load(str(path), load_external_data=False).graph.node)
        start = time.perf_counter()
        try:
            artifact = core.compile(path.read_bytes(), target, 3, input_shapes=shapes[name] or None,
                                    validation_inputs=real_inputs(name))
        except KilnError as err:
            failures += 1
            print(f"{name:<20}{nodes:>6}  FAILED: {err}")
            continue
        except Exception as err:  # a compiler crash is a finding too; the other models still run
            failures += 1
            print(f"{name:<20}{nodes:>6}  CRASHED: {type(err).__name__}: {err}")
            continue
        report = artifact.report
        lat, err = report["latency_ms"], report["validation"]["max_abs_err"]
        print(f"{name:<20}{nodes:>6}{len(report['kernels']):>8}{time.perf_counter() - start:>10.1f}{err:>10.1e}"
              f"{lat['kiln']:>9.2f}{lat['onnxruntime']:>9.2f}{lat['ratio']:>6.2f}x")
        ratios[name] = lat["ratio"]
    if ratios:
        worst = max(ratios, key=ratios.get)
        geomean = math.exp(sum(math.log(r) for r in ratios.values()) / len(ratios))
        print(f"{len(ratios)} models: geomean {geomean:.2f}x of ONNX Runtime's latency; worst {worst} "
              f"{ratios[worst]:.2f}x; {sum(r > 1.25 for r in ratios.values())} above 1.25x")
    return 1 if failures else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("step", choices=["fetch", "export", "run"])
    parser.add_argument("--only", nargs="*", default=[])
    parser.add_argument("-t", "--target", default="native", help="what `run` compiles for (x86-64-v3: the AVX2 path)")
    args = parser.parse_args()
    if args.step == "fetch":
        fetch()
    elif args.step == "export":
        export(args.only)
    else:
        return run(args.only, args.target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
