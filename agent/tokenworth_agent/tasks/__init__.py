"""What every task record shares, the data root, and the task loaders by benchmark name (see :mod:`tokenworth_agent.tasks.base`).

* :mod:`~tokenworth_agent.tasks.base` — :class:`Task` (what every record shares), the data root, loader errors;
* :mod:`~tokenworth_agent.tasks.lab` — LifelongAgentBench's folder and parquet files (DB, OS and KG read them);
* :mod:`~tokenworth_agent.tasks.registry` — :func:`load_tasks` by benchmark name, and :func:`fetch`;
* :mod:`~tokenworth_agent.tasks.download` — how ``tokenworth data fetch`` downloads and checks a file, resumable.

Each benchmark's own record and loader live in its folder (:mod:`tokenworth_agent.benchmarks`).
"""

from tokenworth_agent.tasks.base import DEFAULT_DATA_ROOT, DataError, DataFolder, EnvName, Task, resolve_data_root
from tokenworth_agent.tasks.registry import data_folder, fetch, load_tasks

__all__ = ["Task", "EnvName", "DataError", "DataFolder", "DEFAULT_DATA_ROOT", "resolve_data_root", "data_folder", "fetch",
           "load_tasks"]
