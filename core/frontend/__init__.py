"""ONNX frontend: `import_onnx(model, input_shapes)` turns an ONNX model into the graph IR."""
from .onnx_importer import import_onnx, import_onnx_with_lengths

__all__ = ["import_onnx", "import_onnx_with_lengths"]
