"""`onnx.backend.base` adapter (backend.py) so that ONNX's own node test suite runs against Kiln."""
