"""Kiln: an ONNX deep-learning compiler. Public API: compile(), runtime.load()."""
