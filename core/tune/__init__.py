"""Schedule tuning (AutoTVM): tasks, config spaces, features, XGBoost cost model, search, measurement, records."""
from .records import Record, RecordsDB
from .options import TuningOptions
from .session import TuningOutcome, tune_graph
from .space import Config, ConfigSpace
from .task import Task, extract_tasks

__all__ = ["Config", "ConfigSpace", "Record", "RecordsDB", "Task", "TuningOptions", "TuningOutcome", "extract_tasks",
           "tune_graph"]
