"""Run folders made by hand for the results tests: config.json, records.jsonl and a checkpoint per stream.

Cheaper and more flexible than running the engine: a test picks every reward, token count, seed and grid
point, so the statistics can be checked against values computed another way.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence

from tests.fakes import task_record

BUDGET = {"accounting": "per-call", "aux_call_cap": None, "bank_capacity": 64, "env": "db", "max_injected_chars": 900,
          "max_memories": 1, "max_output_tokens": 128, "max_rounds": 3, "per_call_cap": 512}


def config(**changes: Any) -> dict[str, Any]:
    base = {"backbone": "sim", "backbone_options": {"eos_tokens": 1, "seed": 0}, "budget": BUDGET, "connection": {},
            "data_dir": "/data", "data_source": {"db": {"sha256": "abc", "source": "hf://x"}}, "env": "db",
            "harness": {"memory_format": "compact"}, "limit": None, "seed": 0, "tasks": 0}
    return {**base, **changes}


def write_stream(run: Path, name: str, rewards: Sequence[int], *, method: str | None = None, seed: int = 0,
                 tokens: Sequence[int] | None = None, finished: bool = True, budget: Mapping[str, Any] = BUDGET,
                 task_ids: Sequence[str] | None = None, hparams: Mapping[str, Any] | None = None,
                 skills: Sequence[Sequence[str]] | None = None, order: int | None = None) -> None:
    """One stream folder: a record per reward (task i is ``db-i`` unless ``task_ids``) and its checkpoint;
    ``order``: the task order its records name (a run of several orders), None for none named."""
    from tokenworth_agent.storage.checkpoint import save_checkpoint

    folder = run / name
    folder.mkdir(parents=True, exist_ok=True)
    method = method or name.rsplit("/", 1)[-1].split("@")[0]
    lines = []
    for i, reward in enumerate(rewards):
        stream = {"env": "db", "method": method, "seed": seed, "budget": dict(budget), "hparams": dict(hparams or {}),
                  "hparams_digest": None, **({"order": order} if order is not None else {})}
        record = task_record(i, int(reward), method=method, task_id=task_ids[i] if task_ids else f"db-{i}",
                             output_tokens=int(tokens[i]) if tokens is not None else 10,
                             execution_tokens=int(tokens[i]) if tokens is not None else 10,
                             skill_list=list(skills[i]) if skills else ["select"], stream=stream)
        lines.append(json.dumps(record.to_json(), sort_keys=True) + "\n")
    (folder / "records.jsonl").write_text("".join(lines))
    save_checkpoint(folder / "checkpoint.pkl", {"identity": {}, "policy": None, "next_index": len(rewards),
                                                 "jsonl_offset": 0, "finished": finished})


def write_run(run: Path, streams: Mapping[str, Sequence[int]], **config_changes: Any) -> Path:
    """A run folder with one finished stream per entry (name -> rewards)."""
    run.mkdir(parents=True, exist_ok=True)
    (run / "config.json").write_text(json.dumps(config(**config_changes)))
    for name, rewards in streams.items():
        write_stream(run, name, rewards)
    return run
