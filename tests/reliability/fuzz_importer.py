"""Atheris harness for the ONNX importer and the pre-flight check: any input is a summary or a KilnError.

Run by hand:  .venv/bin/python tests/reliability/fuzz_importer.py CORPUS_DIR -max_total_time=600
(test_fuzz_importer.py runs it briefly, seeded with a good model and the hostile ones.)
"""
from __future__ import annotations

import sys

import atheris

with atheris.instrument_imports():
    from core.errors import KilnError
    from core.frontend.inspect import inspect_model
    from core.frontend.model_loading import SizeBudget

# Small enough that a fuzzed shape never makes the harness itself allocate much.
BUDGET = SizeBudget(max_tensor_bytes=64 << 20, max_weights_bytes=256 << 20)


def test_one_input(data: bytes) -> None:
    try:
        inspect_model(data, allow_external_data=False, budget=BUDGET)
    except KilnError:
        pass  # the expected answer to a bad model; anything else (or a crash) is a finding


def main() -> None:
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
