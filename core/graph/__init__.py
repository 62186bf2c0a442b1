"""The graph IR, its op registry and passes; importing any of it registers every op (core/graph/op_defs)."""
from . import op_defs  # noqa: F401 (fills core.graph.ops' registry before anything looks an op up)
