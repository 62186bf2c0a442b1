"""Schedule tuning (AutoTVM): tasks, config spaces, features, XGBoost cost model, search, measurement, records."""
from .records import Record, RecordsDB
from .options import TuningOptions
from .session import TuningOutcome, tune_graph
from .space import Config, ConfigSpace
from .task import Task, extract_tasks
# The templates beside templates.py's own register themselves here, as the package loads (they import templates.py):
from . import templates_int8  # noqa: F401 (the tensorized 8-bit kernels' templates)
from . import templates_trees  # noqa: F401 (TreeEnsemble's walk and layout template)
from . import templates_3d  # noqa: F401 (the blocked 3-D conv's template)

__all__ = ["Config", "ConfigSpace", "Record", "RecordsDB", "Task", "TuningOptions", "TuningOutcome", "extract_tasks",
           "tune_graph"]
