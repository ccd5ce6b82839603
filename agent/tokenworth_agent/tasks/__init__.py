"""Task records and their loaders, one module per environment (see :mod:`tokenworth_agent.tasks.base`).

* :mod:`~tokenworth_agent.tasks.base` — :class:`Task` (what every record shares), the data root, loader errors;
* :mod:`~tokenworth_agent.tasks.lab` — LifelongAgentBench's folder and parquet files;
* :mod:`~tokenworth_agent.tasks.db`, :mod:`~tokenworth_agent.tasks.os_env`, :mod:`~tokenworth_agent.tasks.kg` — each environment's record;
* :mod:`~tokenworth_agent.tasks.bigcodebench` — BigCodeBench's file, record and stream order (v0.1.4 rebuilt by
  :mod:`~tokenworth_agent.tasks.bigcodebench_patches`);
* :mod:`~tokenworth_agent.tasks.registry` — :func:`load_tasks` by environment name, and :func:`fetch`;
* :mod:`~tokenworth_agent.tasks.download` — what ``tokenworth data fetch`` downloads, checked, resumable.
"""

from tokenworth_agent.tasks.base import DEFAULT_DATA_ROOT, Benchmark, DataError, EnvName, Task, resolve_data_root
from tokenworth_agent.tasks.bigcodebench import BCBTask
from tokenworth_agent.tasks.db import ColumnInfo, DBTask, TableInfo
from tokenworth_agent.tasks.kg import KG_VARIABLE_TOOLS, KGTask, kg_gold_calls, kg_gold_replies, kg_variables_made
from tokenworth_agent.tasks.lab import ENV_SUBDIR, EXPECTED_ROWS, HUB_ID, LAB, PARQUET_NAME
from tokenworth_agent.tasks.os_env import CommandItem, OSTask
from tokenworth_agent.tasks.registry import TASK_SOURCES, data_folder, fetch, load_tasks

__all__ = ["Task", "EnvName", "DataError", "Benchmark", "DEFAULT_DATA_ROOT", "resolve_data_root", "BCBTask", "DBTask",
           "ColumnInfo", "TableInfo", "OSTask", "CommandItem", "KGTask", "KG_VARIABLE_TOOLS", "kg_gold_calls",
           "kg_gold_replies", "kg_variables_made", "ENV_SUBDIR", "EXPECTED_ROWS", "HUB_ID", "LAB", "PARQUET_NAME",
           "TASK_SOURCES", "data_folder", "fetch", "load_tasks"]
