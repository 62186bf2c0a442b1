"""Graph passes (Graph -> Graph) and the pass manager that runs them per optimization level."""
from .eliminate_dead_code import eliminate_dead_code
from .fold_constants import fold_constants
from .manager import PASSES_BY_LEVEL, optimize, run_passes

__all__ = ["PASSES_BY_LEVEL", "eliminate_dead_code", "fold_constants", "optimize", "run_passes"]
