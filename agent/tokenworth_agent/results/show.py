"""``tokenworth show RUN [--method M] [--task I]``: one task's conversation as the model saw it.

The record (``<RUN>/<method>/records.jsonl``) holds everything that varies per task: the task
prompt, the injected block, and per round the reply, the parsed action or the reason the
environment rejected it, and the observation (cut to ``OBSERVATION_CAP`` characters, the full
length kept). The constant part of the prompt (system prompt and the environment's
instructions) is taken from the code, and checked against the digest the record stores, so a
changed prompt is reported rather than shown as if it had been sent.

Rendering rules: the messages appear in the order they were sent. An observation that no later
call received (the episode ended after it) is shown as the environment's last word, marked
"not sent to the model". The judge's verdict closes the page.

The header states the stream's SR so far with its 95 % interval (:func:`tokenworth_agent.results.estimate.rate`),
so one task's page is read against the stream's rate, not as if it were the rate.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Sequence

from tokenworth_agent.results.record import RecordError, TaskRecord

RULE = "─" * 72


class ShowError(ValueError):
    """A run folder, method or task that cannot be shown (the message says which and why)."""


def env_instructions(env: str) -> str:
    """The instructions text of ``env`` (a module constant; no environment is started)."""
    from tokenworth_agent.envs.registry import env_names, instructions

    if env not in env_names():
        raise ShowError(f"unknown environment {env!r} in the record (no installed benchmark of that name)")
    return str(instructions(env))


def _methods(run: Path) -> list[str]:
    """The streams of the run folder with records: ``<method>``, or nested ``<env>/seed<k>/<method>@<point>``."""
    from tokenworth_agent.policies.registry import POLICIES

    present = [p.parent.relative_to(run).as_posix() for depth in ("*", "*/*", "*/*/*")
               for p in run.glob(f"{depth}/records.jsonl")]
    order = {m: i for i, m in enumerate(POLICIES.names)}
    return sorted(present, key=lambda m: (m.count("/"), order.get(m.rsplit("/", 1)[-1].split("@")[0], len(order)), m))


def find_record(run: str | Path, method: str | None = None, task: int | None = None) -> TaskRecord:
    """The record of task index ``task`` (default: the first) of ``method`` (default: the first present)."""
    run = Path(run)
    if not run.is_dir():
        raise ShowError(f"{run} is not a folder; pass a run folder (e.g. runs/db-sim-seed0)")
    methods = _methods(run)
    if not methods:
        raise ShowError(f"{run} holds no <method>/records.jsonl; is it a run folder?")
    method = method or methods[0]
    if method not in methods:
        raise ShowError(f"{run} has no records for method {method!r}; it has: {', '.join(methods)}")
    path = run / method / "records.jsonl"
    indices: list[int] = []
    with path.open("rb") as fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                record = TaskRecord.from_json(json.loads(line), f"{path}:{number}")
            except json.JSONDecodeError:
                if not line.endswith(b"\n"):  # a half-written last line of a killed run
                    break
                raise ShowError(f"{path}:{number} is not valid JSON") from None
            except RecordError as exc:
                raise ShowError(str(exc)) from None
            if task is None or record.index == task:
                return record
            indices.append(record.index)
    if task is None:
        raise ShowError(f"{path} holds no records yet")
    span = f"{min(indices)}..{max(indices)}" if indices else "none"
    raise ShowError(f"{path} has no record for task {task}; recorded task indices: {span}")


def _block(role: str, text: str, note: str = "") -> list[str]:
    head = f"── {role}" + (f"  [{note}]" if note else "")
    return [head, text if text else "(empty)", ""]


def stream_line(rewards: Sequence[int]) -> str:
    """The stream's SR over its recorded tasks with its 95 % interval (one seed: Wilson)."""
    from tokenworth_agent.results.estimate import rate

    est = rate(rewards)
    return (f"stream SR {100 * est.mean:.1f} % (95 % CI {100 * est.ci_low:.1f}–{100 * est.ci_high:.1f}) over "
            f"{len(rewards)} recorded task{'s' if len(rewards) != 1 else ''}")


def conversation_lines(record: TaskRecord, stream_rewards: Sequence[int] | None = None) -> list[str]:
    """The record rendered as the conversation the model saw, then the verdict; ``stream_rewards`` (the
    stream's recorded rewards) adds the stream's SR with its interval to the header."""
    from tokenworth_agent.envs.base import SYSTEM_PROMPT, instructions_digest

    lines = [f"{record.method} · task {record.index} ({record.task_id}) · env {record.env}"
             f" · accounting {record.accounting or '?'} · status {record.status}"
             f" · {record.output_tokens} output tokens in {record.rounds} rounds"]
    if stream_rewards:
        lines.append(stream_line(stream_rewards))
    lines.append(RULE)
    if record.trajectory is None:
        raise ShowError("this record predates trajectory logging (no 'trajectory' field); rerun the task to see it")
    instructions = env_instructions(record.env)
    expected = record.instructions_sha256
    if expected and expected != instructions_digest(instructions):
        lines += [f"warning: the {record.env} instructions changed since this run; the first user turn below is "
                  "today's text, not what was sent", ""]
    first_user = instructions
    block = record.injection_text or ""
    if block:
        first_user = f"{instructions.rstrip()}\n\n{block.rstrip()}\n"
    lines += _block("system", SYSTEM_PROMPT)
    lines += _block("user", first_user, f"instructions + injected block, {len(block)} chars" if block
                    else "instructions; nothing injected")
    lines += _block("assistant", "OK.")
    lines += _block("user", record.task_prompt or "(task prompt not recorded: the environment failed to start)",
                    "task")
    rounds: Sequence[dict[str, Any]] = record.trajectory
    for i, entry in enumerate(rounds):
        note = (f"round {i + 1} · {entry.get('tokens')} tokens of max {entry.get('max_tokens')}"
                f" · finish {entry.get('finish_reason')}")
        lines += _block("assistant", entry.get("reply", ""), note)
        if entry.get("invalid"):
            lines += [f"   ✗ invalid action: {entry['invalid']}", ""]
        elif entry.get("action") is not None:
            lines += [f"   parsed: {json.dumps(entry['action'], ensure_ascii=False)}", ""]
        if "observation" in entry:
            sent = i + 1 < len(rounds)
            if not sent and entry["observation"].strip() in ("", (entry.get("invalid") or "").strip()):
                continue  # nothing the model missed: an empty last word, or the reason shown above
            full, shown = entry.get("observation_chars", 0), len(entry["observation"])
            cut = f" · {full} chars, cut for the record" if full > shown else ""
            role = "user" if sent else "environment"
            lines += _block(role, entry["observation"], ("observation" if sent else
                                                        "last observation, not sent to the model") + cut)
    lines.append(RULE)
    lines += verdict_lines(record)
    return lines


def verdict_lines(record: TaskRecord) -> list[str]:
    verdict = dict(record.judge or {})
    reward = verdict.pop("reward", record.reward)
    out = [f"verdict: reward {reward} · status {record.status}"]
    if record.error:
        out.append(f"error: {record.error}")
    for key, value in verdict.items():
        out.append(f"  {key}: {json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else value}")
    return out


def stream_rewards(run: str | Path, method: str) -> list[int]:
    """The rewards of every complete record of the stream (a torn last line left out)."""
    from tokenworth_agent.results.runs import RunError, read_stream_records

    try:
        return [r.reward for r in read_stream_records(Path(run) / method / "records.jsonl")]
    except RunError as exc:
        raise ShowError(str(exc)) from None


def render(run: str | Path, method: str | None = None, task: int | None = None) -> str:
    record = find_record(run, method, task)
    stream = method or _methods(Path(run))[0]
    return "\n".join(conversation_lines(record, stream_rewards(run, stream))) + "\n"


def main(argv: Iterable[str] | None = None) -> None:  # pragma: no cover - the CLI wraps render()
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run")
    parser.add_argument("--method")
    parser.add_argument("--task", type=int)
    args = parser.parse_args(list(argv) if argv is not None else None)
    print(render(args.run, args.method, args.task), end="")
