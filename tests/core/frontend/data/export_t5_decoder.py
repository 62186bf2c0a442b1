"""Exports t5_tiny_decoder.onnx (run with torch + transformers): a T5 decoder with its self-attention past, as
bench/bench_ranged_models.py exports it, at a tiny size (random weights): its causal mask over past + new tokens
and its position bias cut to the new tokens (x[-n:]) are what ranges must follow."""
import shutil
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[4] / "bench"))
from bench_ranged_models import export_t5  # noqa: E402

with tempfile.TemporaryDirectory() as folder:
    export_t5(torch, Path(folder), d_model=16, d_ff=32, d_kv=8, vocab=48, init_scale=2.0)  # greedy tokens vary
    shutil.copy(Path(folder) / "t5_decoder.onnx", sys.argv[1])
