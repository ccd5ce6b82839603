"""Results: the per-task record, reading run folders, the estimators, the summaries and comparisons.

``load_run(RUN)`` (:mod:`.runs`) is the entry point for analysis: a run folder as a pandas DataFrame, one
row per task record. The estimators every table and figure uses are in :mod:`.estimate`.
"""

from tokenworth_agent.results.runs import load_run

__all__ = ["load_run"]
