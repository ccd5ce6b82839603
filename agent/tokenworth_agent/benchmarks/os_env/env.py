"""The OS environment of LifelongAgentBench: Bash tasks as root, one fresh sandbox each.

Behaviour reproduced from the original harness (a fresh Ubuntu container per task):

* **Per task.** :meth:`OSEnvironment.reset` builds a new :class:`~tokenworth_agent.sandbox.Sandbox`
  and runs the task's initialisation script. If that script fails (non-zero exit or
  timeout), the task cannot start: ``reset`` raises :class:`TaskInitError`, as the
  original raises its environment exception.
* **Actions.** The first ``Act: <word>`` line decides. ``Act: bash`` runs every
  ```` ```bash ```` block of the reply, joined by a blank line, as one new ``bash -c``
  (so no block at all runs an empty script). ``Act: finish`` ends the task. Anything
  else, or no ``Act:``, is an invalid action and ends the task.
* **Commands.** Each runs as root in ``/`` with the environment of ``docker exec``
  (PATH, HOME=/root, HOSTNAME); background processes live until the task ends; the
  working directory and variables do not carry over. A command gets
  ``command_timeout`` seconds (20 in the original) and is finished when its shell
  exits; background jobs keep running (their later output is dropped).
* **Observations.** ``"The output of the OS:\\n\\n" + output`` (stdout and stderr
  interleaved, untruncated), ``"The output of the OS is empty."`` when there is none,
  or ``"The command is marked as timeout since it did not finish within 20 seconds."``.
  Only output past the sandbox's host-memory guard (8 MiB) is cut, with a note.
* **Rounds.** ``max_rounds`` (J_max = 5) agent replies; the action of the last one is
  still run, then the task ends with ``round_limit``.
* **Judging.** :meth:`OSEnvironment.judge` runs the evaluation script whatever
  happened (invalid action, round limit, timeouts); exit code 0 is success. A timed-out
  evaluation fails.
"""

from __future__ import annotations

import dataclasses
import re
import time
from typing import Any, Callable, Literal

from tokenworth_agent.benchmarks.os_env.tasks import CommandItem, OSTask
from tokenworth_agent.envs.base import Environment, Judgement, StepResult
from tokenworth_agent.sandbox import CommandResult, Sandbox, SandboxError, SandboxLimits

INSTRUCTIONS = """You are an assistant that will act like a person who works in a Linux (Ubuntu) terminal. You will be given a task to do in this operating system, and you solve it by running Bash commands as root. Each of your replies is one round; you have at most 5 rounds per task.

In every reply, first think briefly about what to do, then choose exactly one action:

1. To run commands, write a line "Act: bash" followed by the commands in a fenced block:

Act: bash

```bash
# your commands here
```

All ```bash blocks of the reply are joined and run together in a new shell. The next user message shows what they printed. Each reply starts a fresh shell in "/": the working directory and shell variables do not carry over, but files and background processes do. A command that runs longer than 20 seconds is reported as a timeout. Commands are non-interactive: give every input on the command line.

2. When the task is done, write a line:

Act: finish

Your answer is checked against the state of the system when you finish (or when the rounds run out)."""

_ACT = re.compile(r"Act:\s*(.+)")
_BASH_BLOCK = re.compile(r"```bash\n(.*?)\n```", re.DOTALL)

ActionKind = Literal["bash", "finish", "invalid"]


@dataclasses.dataclass(frozen=True)
class OSAction:
    kind: ActionKind
    script: str | None = None  # the joined bash blocks, for "bash"
    reason: str | None = None  # why the reply is invalid, for "invalid"

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"kind": self.kind}
        if self.script is not None:
            data["script"] = self.script
        if self.reason is not None:
            data["reason"] = self.reason
        return data


def parse_action(reply: str) -> OSAction:
    """The original's parser: the first ``Act:`` line decides, case-insensitively by prefix."""
    match = _ACT.search(reply)
    if match is None:
        return OSAction("invalid", reason='no "Act: bash" or "Act: finish" line found')
    word = match.group(1).lower()
    if word.startswith("bash"):
        return OSAction("bash", script="\n\n".join(_BASH_BLOCK.findall(reply)))
    if word.startswith("finish"):
        return OSAction("finish")
    return OSAction("invalid", reason=f'unknown action "Act: {match.group(1).strip()}"; use "Act: bash" or "Act: finish"')


def format_observation(result: CommandResult, timeout: float) -> str:
    """What the agent sees after a command, worded as the original words it."""
    if result.timed_out:
        return f"The command is marked as timeout since it did not finish within {timeout:g} seconds."
    output = result.output
    if result.truncated:
        output += "\n[output cut: it exceeded the sandbox's output limit]"
    return f"The output of the OS:\n\n{output}" if output else "The output of the OS is empty."


class TaskInitError(SandboxError):
    """The task's initialisation script failed, so the task cannot be attempted."""


class OSEnvironment(Environment):
    """Bash tasks in a per-task sandbox. One task at a time; reset() replaces the sandbox."""

    name = "os"
    # a sandbox is processes, mounts and a cgroup of its own, driven through pipes: instances are
    # independent, and a reset (about 1 s, mostly waiting on the kernel) overlaps well across streams
    concurrent_steps = True

    def __init__(
        self,
        max_rounds: int = 5,
        command_timeout: float = 20.0,
        limits: SandboxLimits | None = SandboxLimits(),
        clock: Callable[[], float] = time.monotonic,
        instructions: str | None = None,  # replaces INSTRUCTIONS (--instructions DIR)
    ) -> None:
        if max_rounds < 1:
            raise ValueError(f"max_rounds must be at least 1, got {max_rounds}")
        if command_timeout <= 0:
            raise ValueError(f"command_timeout must be positive, got {command_timeout}")
        self.max_rounds = max_rounds
        self.command_timeout = command_timeout
        self.limits = limits
        self.clock = clock  # the sandboxes measure command timeouts on it (tests inject one)
        self._instructions = instructions
        self._sandbox: Sandbox | None = None
        self._task: OSTask | None = None
        self._rounds = 0
        self._status: str | None = None
        self._init_result: CommandResult | None = None
        self._init_error: str | None = None
        self._judgement: Judgement | None = None
        self._error: str | None = None

    # ----------------------------------------------------------------- Environment API

    def instructions(self) -> str:
        return INSTRUCTIONS if self._instructions is None else self._instructions

    def task_prompt(self, task: OSTask) -> str:
        return task.instruction

    def reset(self, task: OSTask) -> str:
        if not isinstance(task, OSTask):
            raise TypeError(f"OSEnvironment needs an OSTask, got {type(task).__name__}")
        self.close()
        self._task = task
        self._rounds, self._status = 0, None
        self._init_result, self._init_error, self._judgement, self._error = None, None, None, None
        self._sandbox = Sandbox(self.limits, clock=self.clock).start()
        if task.init is not None:
            self._init_result = self.execute(task.init)
            if self._init_result.timed_out or self._init_result.exit_code != 0:
                self._init_error = (
                    f"initialisation of {task.task_id} failed "
                    f"({'timed out' if self._init_result.timed_out else f'exit code {self._init_result.exit_code}'}): "
                    f"{self._init_result.output.strip()[-2000:]}"
                )
                self._status = "env_error"
                self.close()
                raise TaskInitError(self._init_error)
        return self.task_prompt(task)

    def step(self, reply: str) -> StepResult:
        self.check_step(started=self._task is not None, ended=self._status)
        self._rounds += 1
        action = parse_action(reply)
        if action.kind == "invalid":
            return self._end("invalid_action", f"Invalid action: {action.reason}.", action)
        if action.kind == "finish":
            return self._end("completed", "Task finished.", action)
        assert action.script is not None
        try:
            result = self._run(action.script)
        except SandboxError as exc:
            self._error = str(exc)
            return self._end("env_error", f"The sandbox failed: {exc}", action)
        observation = format_observation(result, self.command_timeout)
        if self._rounds >= self.max_rounds:
            return self._end("round_limit", observation, action)
        return StepResult(observation=observation, done=False, action=action.as_dict())

    def judge(self) -> Judgement:
        """Run the evaluation script once (later calls return the same verdict)."""
        if self._task is None:
            raise RuntimeError("call reset(task) and step() before judge()")
        if self._judgement is not None:
            return self._judgement
        details: dict[str, Any] = {"status": self._status, "rounds": self._rounds, "error": self._error}
        if self._init_error is not None:
            details["error"] = self._init_error
            self._judgement = Judgement(reward=0, details=details)
            return self._judgement
        try:
            result = self.execute(self._task.evaluation)
        except SandboxError as exc:
            details["error"] = f"evaluation could not run: {exc}"
            self._judgement = Judgement(reward=0, details=details)
            return self._judgement
        details.update(
            evaluation_exit_code=result.exit_code,
            evaluation_timed_out=result.timed_out,
            evaluation_output=result.output[-2000:],
        )
        self._judgement = Judgement(reward=int(result.exit_code == 0), details=details)
        return self._judgement

    def close(self) -> None:
        sandbox, self._sandbox = self._sandbox, None
        if sandbox is not None:
            sandbox.close()

    # ----------------------------------------------------------------- helpers

    def execute(self, item: CommandItem) -> CommandResult:
        """Run a dataset command item (init, evaluation or ground truth) in the sandbox."""
        if item.command_name != "bash":
            raise SandboxError(f"unsupported command language {item.command_name!r}; the OS tasks only use bash")
        return self._run(item.script)

    def _run(self, script: str) -> CommandResult:
        if self._sandbox is None:
            raise SandboxError("no sandbox: call reset(task) first")
        return self._sandbox.run(script, timeout=self.command_timeout)

    def _end(self, status: str, observation: str, action: OSAction) -> StepResult:
        self._status = status
        return StepResult(observation=observation, done=True, status=status, action=action.as_dict())  # type: ignore[arg-type]
