"""Graph passes (Graph -> Graph, registered by name) and the pass manager that runs them per -O level."""
from .cse import eliminate_common_subexpressions
from .eliminate_dead_code import eliminate_dead_code
from .fold_constants import fold_constants
from .fold_scale_bias import fold_scale_bias
from .fuse import fuse_ops, fusion_groups
from .manager import LEVELS, run_passes
from .registry import get_pass, register_pass
from .simplify import simplify

__all__ = ["LEVELS", "eliminate_common_subexpressions", "eliminate_dead_code",
           "fold_constants", "fold_scale_bias", "fuse_ops", "fusion_groups", "get_pass",
           "register_pass", "run_passes", "simplify"]
