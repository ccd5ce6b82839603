"""The per-task record: the project's main product, one JSON line per task in ``<stream>/records.jsonl``.

:class:`TaskRecord` is the one definition of its fields and types; the engine makes one per task
(:func:`tokenworth_agent.experiment.task.make_record`), and the summaries, the sweep table, ``tokenworth
show``, the progress lines and the benches read its fields, never string keys.

**Schema version.** Each record carries its own, ``"schema": 2``, so a record read anywhere
(one line of a copied file, a record printed by ``show``) says what it is. Decision: per record
rather than per folder, because a run folder outlives releases (its streams may have been made by
different releases, and a stream made before releases were recorded resumes once under the next one:
``tokenworth_agent.experiment.releases``) and a record travels without its folder. A stream that records
its releases is never resumed under another one.

* **1** — the previous release: the same fields, no ``schema`` key. It loads as it is.
* **2** — this release: the fields of 1 plus ``schema``. Nothing else changed, so a run resumed
  across the two releases stays one stream, and records compare field for field (but ``time_s``
  and ``schema``).
* Records of older releases, which lack some of the fields (``trajectory``, ``judge``,
  ``aux_calls``, ...), are refused with a :class:`RecordError` that names the converter:
  ``python -m tokenworth_agent.results.record upgrade RUN`` rewrites every stream of the run folder ``RUN``
  at schema 2, the missing fields set to their "not recorded" value (``None``; ``[]`` for the
  lists), and moves each stream's checkpoint to the rewritten file, so the run still resumes.

On disk the JSON is what :meth:`TaskRecord.to_json` returns, keys sorted (:class:`RecordLog`).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

from tokenworth_agent.storage import runfolder
from tokenworth_agent.storage.checkpoint import (CheckpointError, atomic_write_bytes, iter_records, load_checkpoint,
                                      save_checkpoint)

SCHEMA_VERSION = 2
SCHEMA_KEY = "schema"
NONDETERMINISTIC_FIELDS = frozenset({"time_s"})  # wall clock; everything else must replay exactly


class RecordError(ValueError):
    """A record that is not a task record of a known schema; the message says how to convert it."""


@dataclasses.dataclass(frozen=True)
class TaskRecord:
    """One task of one stream, as judged (the JSON names are the field names)."""

    method: str
    index: int  # the task's place in the stream, 0..N-1
    task_id: str
    env: str
    reward: int  # 0 or 1, the environment's own verdict
    status: str | None  # how the episode ended: completed, round_limit, budget_exhausted, invalid_action, ...
    rounds: int
    output_tokens: int  # execution + auxiliary: what OutputTok averages
    execution_tokens: int
    auxiliary_tokens: int
    aux_calls: list[dict[str, Any]]  # one entry per auxiliary call (phase, purpose, tokens, ...)
    injected_memory_id: int | None
    injected_memory_ids: list[int]
    injected_length: int  # characters of the injected block
    injection: dict[str, Any]  # the block's log: memory ids, dropped and truncated ones
    skill_list: list[str]
    decision: dict[str, Any]  # the method's own log (TokenWorth: selection and admission)
    bank_size: int
    finish_reasons: list[str]
    error: str | None
    accounting: str | None  # how O_max was spent (None: not recorded)
    instructions_sha256: str | None
    task_prompt: str | None
    injection_text: str | None
    trajectory: list[dict[str, Any]] | None  # per round: reply, parsed action, observation (None: not recorded)
    judge: dict[str, Any] | None  # the environment's verdict and its details
    time_s: float  # wall clock of the task (the one field that does not replay)
    stream: dict[str, Any] | None = None  # what every record says about its stream (env, method, seed, budget, ...)
    schema: int = SCHEMA_VERSION

    def to_json(self) -> dict[str, Any]:
        """The record as written (``stream`` only when there is one)."""
        data = {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}
        if data["stream"] is None:
            del data["stream"]
        return data

    def comparable(self) -> dict[str, Any]:
        """The JSON without the fields that need not replay (``time_s``) or that name the release (``schema``)."""
        return {k: v for k, v in self.to_json().items() if k not in NONDETERMINISTIC_FIELDS and k != SCHEMA_KEY}

    @classmethod
    def from_json(cls, data: Mapping[str, Any], where: str = "a record") -> "TaskRecord":
        """A record as read back; one of an older release, or a foreign object, is a :class:`RecordError`."""
        if not isinstance(data, Mapping):
            raise RecordError(f"{where} is not a JSON object")
        version = data.get(SCHEMA_KEY, 1)
        if not isinstance(version, int) or version > SCHEMA_VERSION:
            raise RecordError(f"{where} has record schema {version!r}, newer than this release's "
                              f"{SCHEMA_VERSION}; read it with the release that wrote it")
        missing = [f for f in _REQUIRED if f not in data]
        if missing:
            raise RecordError(f"{where} was written by an older release (it lacks {', '.join(missing)}); convert the "
                              f"run folder with `python -m tokenworth_agent.results.record upgrade RUN`, then read it again")
        unknown = sorted(set(data) - set(_FIELDS))
        if unknown:
            raise RecordError(f"{where} holds fields no task record has ({', '.join(unknown)}); it is not a record of "
                              "this project")
        return cls(**{**data, SCHEMA_KEY: SCHEMA_VERSION})


_FIELDS = tuple(f.name for f in dataclasses.fields(TaskRecord))
_REQUIRED = tuple(f.name for f in dataclasses.fields(TaskRecord) if f.name not in ("stream", SCHEMA_KEY))
# What a converted record of an older release holds where the field was not recorded.
_NOT_RECORDED: dict[str, Any] = {"aux_calls": [], "injected_memory_ids": [], "finish_reasons": [],
                                 "skill_list": [], "injection": {}, "decision": {}}


def read_records(path: str | Path) -> list[TaskRecord]:
    """Every record of a ``records.jsonl`` (none when the file does not exist), typed."""
    return list(iter_task_records(path))


def iter_task_records(path: str | Path) -> Iterator[TaskRecord]:
    for number, data in enumerate(iter_records(path), 1):
        yield TaskRecord.from_json(data, f"{path}: record {number}")


def comparable(records: Iterable[TaskRecord | Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Records (typed, or as JSON read back) without the fields that need not replay, for replay comparisons."""
    return [r.comparable() if isinstance(r, TaskRecord) else
            {k: v for k, v in r.items() if k not in NONDETERMINISTIC_FIELDS and k != SCHEMA_KEY} for r in records]


# ------------------------------------------------------------------------- the converter
def upgrade_data(data: Mapping[str, Any]) -> dict[str, Any]:
    """One record of any release as this release writes it (missing fields: "not recorded")."""
    upgraded = {name: data.get(name, _NOT_RECORDED.get(name)) for name in _REQUIRED}
    for name in ("index", "reward", "rounds", "output_tokens"):
        if upgraded[name] is None:
            raise RecordError(f"a record without {name!r} is no task record; it cannot be converted")
    if data.get("stream") is not None:
        upgraded["stream"] = data["stream"]
    return TaskRecord.from_json(upgraded).to_json()


def upgrade_stream(folder: Path) -> int:
    """Rewrite one stream folder's records at this schema; its checkpoint follows. Returns the records rewritten.

    Only the records the checkpoint covers are kept (a record written after the last checkpoint
    would be re-made on resume anyway), and the checkpoint's JSONL offset moves to the new file's end.
    """
    path = folder / runfolder.RECORDS
    checkpoint = folder / runfolder.CHECKPOINT
    state = load_checkpoint(checkpoint)
    raw = list(iter_records(path))
    if state is not None:
        raw = raw[: int(state["next_index"])]
    lines = [json.dumps(upgrade_data(r), sort_keys=True, ensure_ascii=False) + "\n" for r in raw]
    data = "".join(lines).encode("utf-8")
    atomic_write_bytes(path, data)
    if state is not None:
        state = {k: v for k, v in state.items() if k != "version"}
        save_checkpoint(checkpoint, {**state, "jsonl_offset": len(data)})
    return len(lines)


def upgrade_run(run: Path) -> dict[str, int]:
    """Convert every stream of a run folder (each under its lock); returns records rewritten per stream."""
    if runfolder.read_config(run) is None:
        raise RecordError(f"{run} is not a run folder (no {runfolder.CONFIG})")
    done = {}
    for name in runfolder.streams_in(run, depth=4):
        with runfolder.locked(*runfolder.method_lock(run, name)):
            done[name] = upgrade_stream(run / name)
    return done


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tokenworth_agent.results.record upgrade RUN``: the converter (see the module docstring)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2 or args[0] != "upgrade":
        print("usage: python -m tokenworth_agent.results.record upgrade RUN", file=sys.stderr)
        return 2
    try:
        done = upgrade_run(Path(args[1]))
    except (RecordError, CheckpointError, runfolder.RunFolderError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for name, count in done.items():
        print(f"{name}: {count} records at schema {SCHEMA_VERSION}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())


__all__ = ["SCHEMA_VERSION", "NONDETERMINISTIC_FIELDS", "RecordError", "TaskRecord", "read_records",
           "iter_task_records", "comparable", "upgrade_data", "upgrade_stream", "upgrade_run"]
