"""``tokenworth export inspect RUN``: every stream of a run folder as an Inspect eval log.

Each stream (env × method × seed × grid point) becomes one ``.eval`` file, written by
:func:`inspect_ai.log.write_eval_log` from ``inspect_ai``'s own models (``EvalLog``, ``EvalSpec``,
``EvalSample``, ``EvalResults``, chat messages, ``Score``), so it opens in Inspect View, ``inspect view
bundle``'s static site and ``inspect_ai.analysis.samples_df``. Layout (docs/viewing.md)::

    RUN/inspect/<stream>.eval         one log per stream; <stream> is the stream's folder name, so a plain
                                      run gives standard.eval, rag.eval, ...; an experiment over several
                                      envs, seeds or grid points db/seed1/rag@o_max=64.eval
    RUN/inspect/.tokenworth-export    what each log was made from (its fingerprint), so a second export
                                      rewrites only the streams whose records changed

What goes where in a log:

* ``eval``: ``task`` the benchmark (env), ``model`` ``<backbone>/<model>`` (``sim/default`` for the simulated
  backbone), ``task_args`` the stream (method, seed, grid point), ``solver`` the method; ``metadata`` the env, method, seed, grid point, stream folder, the
  stream's budget and controller overrides, the run's whole ``config.json`` and the harness version.
  ``created`` is the time ``config.json`` was last written (the run's start) and ``stats.completed_at`` the
  records' last write for a finished stream: both read from the run folder, never the clock, so the same
  run exports to the same logs.
* one sample per record, in stream order, its ``id`` the task index (the same id in every stream of the
  run, so two methods' conversations on one task are the same sample id in two logs): ``input`` the task
  prompt; ``messages`` the conversation as the model saw it (:func:`tokenworth_agent.results.show.conversation`:
  system prompt, instructions with the injected block, "OK.", the task, then each round's reply and
  observation); ``output`` the last reply; ``target`` the judge's expected answer when it names one;
  ``scores["reward"]`` the reward, with the judge's parsed answer, its verdict as the explanation and its
  status, details and error as metadata; ``metadata`` the task index and id, skills, ``injected`` and the
  injected memory ids and block, the method's decision (candidates, scores or worths, admission,
  eviction), tokens (execution, auxiliary, output, auxiliary calls), rounds, status, time, and
  ``method_rewards``: the reward every method of the same env, seed and grid point got on this task.
  ``model_usage`` holds the task's output tokens (the harness counts no input tokens), ``total_time`` its
  wall clock.
* ``results``: the SR as ``accuracy`` with its ``stderr`` (and the 95 % interval) from
  :func:`tokenworth_agent.results.estimate.rate`, the estimator of the summary.

Decisions: the environment's last observation that no model call received is not a message (the model
never saw it); it is kept in the sample's metadata as ``last_observation``. Nothing is cut: every reply
and observation goes in whole (observations are as the record kept them; ``observation_chars`` gives the
full length where the record cut one). ``viewer.trust_content`` is False, so the viewer shows model text
as the plain text the model wrote and read (no markdown rendering, no live links in a shared bundle).
A stream that has not finished exports the records it holds with status ``started``. The ``.eval``
container stamps its zip entries with the write time, so two exports are the same logs (every field read
back equal) rather than the same bytes; an export that finds a stream unchanged leaves its file alone.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from tokenworth_agent.results.record import TaskRecord
from tokenworth_agent.results.show import ShowError, conversation, verdict_lines

if TYPE_CHECKING:  # inspect_ai is the `view` extra: imported where a log is made
    from inspect_ai.log import EvalLog, EvalSample

    from tokenworth_agent.results.runs import Stream

FORMAT = 1  # bump when a log's content changes for the same records: every stream is then rewritten
STATE = ".tokenworth-export"  # not *.json: Inspect lists every .json/.eval file under the folder as a log
SCORER = "reward"
TARGET_KEYS = ("expected", "gold", "target")  # where judges keep the reference answer
ANSWER_KEYS = ("answer", "given")  # ... and the answer they parsed from the replies
STOP_REASONS = {"stop": "stop", "length": "max_tokens", "eos": "stop"}
INSTALL_HINT = "install the view extra: pip install 'tokenworth-agent[view]'"


class ExportError(ValueError):
    """A run folder or output folder that cannot be exported as asked (the message says what to do)."""


@dataclasses.dataclass(frozen=True)
class ExportResult:
    out: Path
    written: tuple[Path, ...]  # logs (re)written by this export
    kept: tuple[Path, ...]  # logs already up to date
    removed: tuple[Path, ...]  # logs of streams the run no longer has

    @property
    def logs(self) -> tuple[Path, ...]:
        return tuple(sorted(self.written + self.kept))


# ------------------------------------------------------------------------- the pieces of a log
def _iso(timestamp: float) -> str:
    return datetime.datetime.fromtimestamp(timestamp, datetime.timezone.utc).isoformat(timespec="seconds")


def _digest(*parts: Any, size: int = 22) -> str:
    text = json.dumps(parts, sort_keys=True, default=str, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:size]


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def model_name(config: Mapping[str, Any]) -> str:
    """``<backbone>/<model>`` as Inspect names models; ``default`` where the run named no model."""
    options = config.get("backbone_options") or {}
    return f"{config.get('backbone', 'unknown')}/{options.get('model') or 'default'}"


def harness_version() -> str:
    """The installed harness's version (from its metadata: importing the library for it would import JAX)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tokenworth-agent")
    except PackageNotFoundError:  # a source tree on sys.path, not installed
        from tokenworth_jax import __version__

        return str(__version__)


def messages_of(record: TaskRecord, key: str, model: str) -> tuple[list[Any], str | None]:
    """The conversation the model saw, as Inspect chat messages with fixed ids; and the environment's last
    word when no call received it (None otherwise)."""
    from inspect_ai.model import ChatMessageAssistant, ChatMessageSystem, ChatMessageUser

    try:
        seen = conversation(record)
    except ShowError as exc:
        raise ExportError(f"{record.method} task {record.index}: {exc}") from None
    messages: list[Any] = []
    last_word = None
    for number, message in enumerate(seen.messages):
        if not message.sent:
            last_word = message.text
            continue
        meta: dict[str, Any] = {"kind": message.kind}
        if message.round is not None:
            meta["round"] = message.round
        meta.update({k: v for k, v in message.details.items() if v is not None})
        if message.kind == "instructions":
            meta["injected_chars"] = seen.injected_chars
            if seen.instructions_changed:
                meta["warning"] = (f"the {record.env} instructions changed since this run: this is today's text, "
                                   "not what was sent")
        ident = f"{key}-m{number}"
        if message.role == "system":
            messages.append(ChatMessageSystem(id=ident, content=message.text, source="input", metadata=meta))
        elif message.role == "user":
            messages.append(ChatMessageUser(id=ident, content=message.text, source="input", metadata=meta))
        else:
            generated = message.kind == "reply"
            messages.append(ChatMessageAssistant(id=ident, content=message.text, metadata=meta,
                                                 source="generate" if generated else "input",
                                                 model=model if generated else None))
    return messages, last_word


def _judge_value(judge: Mapping[str, Any], keys: Sequence[str]) -> str | None:
    for key in keys:
        if judge.get(key) is not None:
            return _text(judge[key])
    return None


def sample_of(record: TaskRecord, eval_id: str, model: str,
              method_rewards: Mapping[str, int] | None = None) -> "EvalSample":
    """One record as one Inspect sample (see the module docstring for what goes where)."""
    from inspect_ai.log import EvalSample
    from inspect_ai.model import ChatCompletionChoice, ModelOutput
    from inspect_ai.scorer import Score

    key = f"{eval_id}-{record.index}"
    messages, last_word = messages_of(record, key, model)
    replies = [m for m in messages if m.role == "assistant" and (m.metadata or {}).get("kind") == "reply"]
    output = ModelOutput(model=model)
    if replies:
        finish = (replies[-1].metadata or {}).get("finish_reason")
        output = ModelOutput(model=model, completion=replies[-1].text, choices=[ChatCompletionChoice(
            message=replies[-1], stop_reason=STOP_REASONS.get(str(finish), "unknown"))])
    judge = dict(record.judge or {})
    injected = list(record.injected_memory_ids) or ([record.injected_memory_id] if record.injected_memory_id
                                                     is not None else [])  # a schema-1 record names one id
    score = Score(value=record.reward, answer=_judge_value(judge, ANSWER_KEYS),
                  explanation="\n".join(verdict_lines(record)),
                  metadata={"status": record.status, "error": record.error, "judge": judge})
    metadata: dict[str, Any] = {
        "index": record.index, "task_id": record.task_id, "skills": list(record.skill_list),
        "status": record.status, "injected": bool(injected), "injected_memory_ids": injected,
        "injected_chars": record.injected_length,
        "injection_text": record.injection_text, "injection": record.injection, "decision": record.decision,
        "bank_size": record.bank_size, "rounds": record.rounds, "output_tokens": record.output_tokens,
        "execution_tokens": record.execution_tokens, "auxiliary_tokens": record.auxiliary_tokens,
        "aux_calls": record.aux_calls, "finish_reasons": list(record.finish_reasons), "error": record.error,
        "accounting": record.accounting, "time_s": record.time_s,
    }
    if last_word is not None:
        metadata["last_observation"] = last_word
    if method_rewards:
        metadata["method_rewards"] = dict(method_rewards)
    return EvalSample(id=record.index, epoch=1, uuid=key, input=record.task_prompt or "",
                      target=_judge_value(judge, TARGET_KEYS) or "", messages=messages, output=output,
                      scores={SCORER: score}, metadata=metadata, model_usage=_usage(model, record.output_tokens),
                      total_time=record.time_s, working_time=record.time_s)


def results_of(records: Sequence[TaskRecord], planned: int | None) -> Any:
    """The stream's SR as ``accuracy`` with its ``stderr`` and 95 % interval, from the summary's estimator
    (:func:`tokenworth_agent.results.estimate.rate`: one seed, so the standard error is s/sqrt(n))."""
    from inspect_ai.log import EvalMetric, EvalResults, EvalScore

    from tokenworth_agent.results.estimate import rate

    if not records:
        return None
    estimate = rate([r.reward for r in records])
    metrics = {name: EvalMetric(name=name, value=value) for name, value in (
        ("accuracy", estimate.mean), ("stderr", estimate.se), ("ci95_low", estimate.ci_low),
        ("ci95_high", estimate.ci_high))}
    return EvalResults(total_samples=max(planned or 0, len(records)), completed_samples=len(records),
                       scores=[EvalScore(name=SCORER, scorer=SCORER, scored_samples=len(records), unscored_samples=0,
                                         metrics=metrics)])


def planned_tasks(config: Mapping[str, Any]) -> int | None:
    """How many tasks each stream of the run was set to run (``--limit`` when given)."""
    counts = [v for v in (config.get("tasks"), config.get("limit")) if isinstance(v, int)]
    return min(counts) if counts else None


def _usage(model: str, output_tokens: int) -> dict[str, Any]:
    """Output tokens (execution + auxiliary) as Inspect's model usage; the harness counts no input tokens."""
    from inspect_ai.model import ModelUsage

    return {model: ModelUsage(output_tokens=output_tokens, total_tokens=output_tokens)}


def stream_log(stream: "Stream", created: float, completed: float | None = None,
               method_rewards: Mapping[int, Mapping[str, int]] | None = None) -> "EvalLog":
    """The Inspect eval log of one stream of :mod:`tokenworth_agent.results.runs` (built in memory).

    ``created``: when the run started (its config's write time); ``completed``: when the stream's records
    were last written (shown for a finished stream); ``method_rewards``: per task index, the reward of each
    method of the same env, seed and grid point."""
    import inspect_ai
    from inspect_ai.log import EvalConfig, EvalDataset, EvalLog, EvalPlan, EvalPlanStep, EvalSpec, EvalStats
    from inspect_ai.viewer import ViewerConfig

    config = dict(stream.config)
    point = dict(stream.point)
    eval_id = _digest("eval", config, created, stream.name)
    model = model_name(config)
    planned = planned_tasks(config)
    source = (config.get("data_source") or {}).get(stream.env) or {}
    version = harness_version()
    # the order in task_args and tags only when not 0 (absent means 0, as in the records), so a one-order run's
    # logs stay as they were; the metadata always names it
    identity = {"method": stream.method, "seed": stream.seed, **({"order": stream.order} if stream.order else {}),
                **point}
    spec = EvalSpec(
        eval_id=eval_id, run_id=_digest("run", config, created), created=_iso(created), task=stream.env,
        task_id=_digest("task", stream.env, stream.budget), task_version=0, task_args=identity,
        solver=stream.method, solver_args=dict(stream.hparams) or None,
        tags=[stream.method, f"seed{stream.seed}", *([f"order{stream.order}"] if stream.order else []),
              *(f"{k}={v}" for k, v in point.items())],
        dataset=EvalDataset(name=stream.env, location=source.get("source") or config.get("data_dir"),
                            samples=planned, shuffled=False),
        model=model, model_args=dict(config.get("backbone_options") or {}),
        config=EvalConfig(limit=config.get("limit"), epochs=1),
        packages={"tokenworth-agent": version, "inspect_ai": inspect_ai.__version__},
        metadata={"env": stream.env, "method": stream.method, "seed": stream.seed, "order": stream.order,
                  "grid_point": point,
                  "stream": stream.name, "budget": dict(stream.budget), "hparams": dict(stream.hparams),
                  "finished": stream.finished, "records": len(stream.records), "planned_tasks": planned,
                  "run_config": config, "harness_version": version},
        viewer=ViewerConfig(trust_content=False),
    )
    rewards = method_rewards or {}
    samples = [sample_of(r, eval_id, model, rewards.get(r.index)) for r in stream.records]
    finished_at = _iso(completed) if stream.finished and completed is not None else ""
    return EvalLog(
        status="success" if stream.finished else "started", eval=spec,
        plan=EvalPlan(name="plan", steps=[EvalPlanStep(solver=stream.method, params={
            "budget": dict(stream.budget), "hparams": dict(stream.hparams)})]),
        results=results_of(stream.records, planned),
        stats=EvalStats(started_at=_iso(created), completed_at=finished_at,
                        model_usage=_usage(model, sum(r.output_tokens for r in stream.records))),
        samples=samples)


# ------------------------------------------------------------------------- the run folder
def log_path(out: Path, stream: str) -> Path:
    """Where a stream's log goes: its folder name under the run, as a file name under ``out``."""
    return out / f"{stream}.eval"


def _records_mtime(stream: "Stream") -> float | None:
    from tokenworth_agent.storage import runfolder

    try:
        return (stream.run / stream.name / runfolder.RECORDS).stat().st_mtime
    except OSError:
        return None


def _method_rewards(streams: Sequence["Stream"]) -> dict[str, dict[int, dict[str, int]]]:
    """Per stream: task index → {method: reward} over the streams of the same env, seed, task order and grid
    point."""
    groups: dict[str, dict[int, dict[str, int]]] = {}
    for s in streams:
        group = groups.setdefault(_digest(s.env, s.seed, s.order, s.point), {})
        for r in s.records:
            group.setdefault(r.index, {})[s.method] = r.reward
    return {s.name: groups[_digest(s.env, s.seed, s.order, s.point)] for s in streams}


def _fingerprint(stream: "Stream", created: float, completed: float | None,
                 rewards: Mapping[int, Mapping[str, int]]) -> str:
    """Everything a stream's log is made from: the same fingerprint makes the same log."""
    import inspect_ai

    return _digest(FORMAT, inspect_ai.__version__, harness_version(), stream.config, created, stream.name,
                   stream.finished, completed if stream.finished else None, [r.to_json() for r in stream.records],
                   sorted((i, sorted(m.items())) for i, m in rewards.items()), size=64)


def _read_state(out: Path) -> dict[str, str]:
    try:
        state = json.loads((out / STATE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    logs = state.get("logs") if isinstance(state, dict) else None
    return {str(k): str(v) for k, v in logs.items()} if isinstance(logs, dict) else {}


def _write_state(out: Path, logs: Mapping[str, str]) -> None:
    from tokenworth_agent.storage.checkpoint import atomic_write_json

    atomic_write_json(out / STATE, {"format": FORMAT, "logs": dict(sorted(logs.items()))})


def _write_log(log: "EvalLog", path: Path) -> None:
    """Through Inspect's own writer, into a temporary name beside ``path``, then renamed over it."""
    from inspect_ai.log import write_eval_log

    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        write_eval_log(log, temporary.as_posix(), format="eval")
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def _check_out(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise ExportError(f"--out {out} is a file; pass a folder")
    parent = out if out.exists() else next(p for p in out.absolute().parents if p.exists())
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise ExportError(f"cannot write the Inspect logs to {out}: {parent} is not a writable folder; pass --out a "
                          "folder you can write to")


def default_out(run: str | Path) -> Path:
    return Path(run) / "inspect"


def export_run(run: str | Path, out: str | Path | None = None, *, force: bool = False,
               say: Callable[[str], None] | None = None) -> ExportResult:
    """Write (or bring up to date) one Inspect eval log per stream of ``run`` under ``out`` (default ``RUN/inspect``).

    A stream whose log is up to date (the same records, config and exporter) is left alone unless ``force``;
    a log this exporter wrote for a stream the run no longer holds is removed; nothing else in ``out`` is
    touched. ``say`` hears one line per log written.
    """
    from tokenworth_agent.results.runs import RunError, streams as read_streams
    from tokenworth_agent.storage import runfolder

    try:
        import inspect_ai  # noqa: F401
    except ImportError:
        raise ExportError(f"the Inspect export needs inspect_ai; {INSTALL_HINT}") from None
    run = Path(run)
    try:
        streams = read_streams(run)
    except RunError as exc:
        raise ExportError(str(exc)) from None
    if not streams:
        raise ExportError(f"{run} holds no records yet; nothing to export")
    out = Path(out) if out is not None else default_out(run)
    _check_out(out)
    for stream in streams:
        indices = [r.index for r in stream.records]
        if len(set(indices)) != len(indices):
            twice = sorted({i for i in indices if indices.count(i) > 1})
            raise ExportError(f"{run / stream.name}: its records hold task {twice[0]} more than once (written by two "
                              f"runs at once, or edited); redo the stream with --methods {stream.method} --overwrite")
    created = (run / runfolder.CONFIG).stat().st_mtime
    rewards = _method_rewards(streams)
    written: list[Path] = []
    kept: list[Path] = []
    removed: list[Path] = []
    out.mkdir(parents=True, exist_ok=True)
    with runfolder.locked(out / ".lock", f"the Inspect logs in {out}", wait_s=runfolder.FOLDER_LOCK_WAIT_S):
        before = _read_state(out)
        after: dict[str, str] = {}
        for stream in streams:
            path = log_path(out, stream.name)
            completed = _records_mtime(stream)
            after[stream.name] = _fingerprint(stream, created, completed, rewards[stream.name])
            if not force and before.get(stream.name) == after[stream.name] and path.is_file():
                kept.append(path)
                continue
            _write_log(stream_log(stream, created, completed, rewards[stream.name]), path)
            written.append(path)
            if say is not None:
                say(f"{path}: {len(stream.records)} samples")
        for name in sorted(set(before) - set(after)):  # a stream the run no longer holds: only our own file goes
            path = log_path(out, name)
            if path.is_file():
                path.unlink()
                removed.append(path)
        _write_state(out, after)
    return ExportResult(out, tuple(written), tuple(kept), tuple(removed))


__all__ = ["ExportError", "ExportResult", "export_run", "default_out", "stream_log", "sample_of", "messages_of",
           "results_of", "model_name", "log_path"]
