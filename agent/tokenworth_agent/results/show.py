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

import dataclasses
import json
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

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
    """The streams of the run folder with records: ``<method>``, or nested
    ``<env>/seed<k>/order<k>/<method>@<point>``."""
    from tokenworth_agent.policies.registry import POLICIES

    present = [p.parent.relative_to(run).as_posix() for depth in ("*", "*/*", "*/*/*", "*/*/*/*")
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


@dataclasses.dataclass(frozen=True)
class Message:
    """One turn of the conversation a record rebuilds, in the order it was sent.

    ``kind`` says which turn it is: ``system``, ``instructions`` (the first user turn, with the injected
    block when there is one), ``ok`` (the assistant's fixed "OK."), ``task``, ``reply`` or ``observation``.
    ``sent`` is False only for the environment's last word, which no later call received. ``round`` is
    the 1-based round of a reply or observation; ``details`` what the record logged with it (a reply: its
    tokens, max_tokens, finish_reason, the parsed action or the reason it was invalid; an observation:
    the characters kept in the record and the full length).
    """

    role: str  # system, user or assistant: the role the backbone received it under
    text: str
    kind: str
    sent: bool = True
    round: int | None = None
    details: Mapping[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Conversation:
    """A record's conversation: its messages and whether today's instructions differ from those it was sent."""

    messages: tuple[Message, ...]
    instructions_changed: bool
    injected_chars: int


def conversation(record: TaskRecord) -> Conversation:
    """The conversation the model saw for ``record`` (the one rebuild `show` and the Inspect export share).

    The constant turns come from the code (:data:`~tokenworth_agent.envs.base.SYSTEM_PROMPT`, the
    environment's instructions), the rest from the record; an observation nobody received is kept as the
    last message with ``sent=False`` unless it is empty or repeats the reason the reply was rejected.
    """
    from tokenworth_agent.envs.base import SYSTEM_PROMPT, instructions_digest

    if record.trajectory is None:
        raise ShowError("this record predates trajectory logging (no 'trajectory' field); rerun the task to see it")
    instructions = env_instructions(record.env)
    expected = record.instructions_sha256
    changed = bool(expected) and expected != instructions_digest(instructions)
    block = record.injection_text or ""
    first_user = f"{instructions.rstrip()}\n\n{block.rstrip()}\n" if block else instructions
    messages = [Message("system", SYSTEM_PROMPT, "system"), Message("user", first_user, "instructions"),
                Message("assistant", "OK.", "ok"),
                Message("user", record.task_prompt or "(task prompt not recorded: the environment failed to start)",
                        "task")]
    rounds: Sequence[dict[str, Any]] = record.trajectory
    for i, entry in enumerate(rounds):
        messages.append(Message("assistant", entry.get("reply", ""), "reply", round=i + 1, details={
            k: entry.get(k) for k in ("tokens", "max_tokens", "finish_reason", "action", "invalid")}))
        if "observation" in entry:
            sent = i + 1 < len(rounds)
            if not sent and entry["observation"].strip() in ("", (entry.get("invalid") or "").strip()):
                continue  # nothing the model missed: an empty last word, or the reason shown above
            messages.append(Message("user", entry["observation"], "observation", sent=sent, round=i + 1, details={
                "chars": len(entry["observation"]), "full_chars": entry.get("observation_chars", 0)}))
    return Conversation(tuple(messages), changed, len(block))


def _block(role: str, text: str, note: str = "") -> list[str]:
    head = f"── {role}" + (f"  [{note}]" if note else "")
    return [head, text if text else "(empty)", ""]


def _message_lines(message: Message, injected_chars: int) -> list[str]:
    d = message.details
    if message.kind == "instructions":
        return _block("user", message.text, f"instructions + injected block, {injected_chars} chars" if injected_chars
                      else "instructions; nothing injected")
    if message.kind == "task":
        return _block("user", message.text, "task")
    if message.kind == "reply":
        lines = _block("assistant", message.text, f"round {message.round} · {d.get('tokens')} tokens of max "
                                                  f"{d.get('max_tokens')} · finish {d.get('finish_reason')}")
        if d.get("invalid"):
            lines += [f"   ✗ invalid action: {d['invalid']}", ""]
        elif d.get("action") is not None:
            lines += [f"   parsed: {json.dumps(d['action'], ensure_ascii=False)}", ""]
        return lines
    if message.kind == "observation":
        cut = f" · {d['full_chars']} chars, cut for the record" if d["full_chars"] > d["chars"] else ""
        return _block("user" if message.sent else "environment", message.text,
                      ("observation" if message.sent else "last observation, not sent to the model") + cut)
    return _block(message.role, message.text)


def stream_line(rewards: Sequence[int]) -> str:
    """The stream's SR over its recorded tasks with its 95 % interval (one seed: Wilson)."""
    from tokenworth_agent.results.estimate import rate

    est = rate(rewards)
    return (f"stream SR {100 * est.mean:.1f} % (95 % CI {100 * est.ci_low:.1f}–{100 * est.ci_high:.1f}) over "
            f"{len(rewards)} recorded task{'s' if len(rewards) != 1 else ''}")


def conversation_lines(record: TaskRecord, stream_rewards: Sequence[int] | None = None) -> list[str]:
    """The record rendered as the conversation the model saw, then the verdict; ``stream_rewards`` (the
    stream's recorded rewards) adds the stream's SR with its interval to the header."""
    order = (record.stream or {}).get("order")  # named only in a run of several task orders
    lines = [f"{record.method} · task {record.index} ({record.task_id})"
             + (f" · order {order}" if order is not None else "") + f" · env {record.env}"
             f" · accounting {record.accounting or '?'} · status {record.status}"
             f" · {record.output_tokens} output tokens in {record.rounds} rounds"]
    if stream_rewards:
        lines.append(stream_line(stream_rewards))
    lines.append(RULE)
    seen = conversation(record)
    if seen.instructions_changed:
        lines += [f"warning: the {record.env} instructions changed since this run; the first user turn below is "
                  "today's text, not what was sent", ""]
    for message in seen.messages:
        lines += _message_lines(message, seen.injected_chars)
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
