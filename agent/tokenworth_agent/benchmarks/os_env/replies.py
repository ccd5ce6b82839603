"""OS replies: the ground-truth script then ``Act: finish``, or a command that does not solve the task."""

from __future__ import annotations

from tokenworth_agent.backbones.base import Conversation
from tokenworth_agent.sim.model import Episode, SimParams
from tokenworth_agent.benchmarks.os_env.tasks import OSTask

_WRONG_COMMANDS = ("ls -la", "pwd && ls -la /tmp", "echo \"checking\" && whoami")


def reply(task: OSTask, episode: Episode, round_index: int, conversation: Conversation, params: SimParams) -> str:
    commands = 1 if episode.success or not episode.harmful else 1 + params.harmful_extra_rounds
    if round_index >= commands:
        return "Act: finish"
    if episode.success and task.ground_truth is not None:
        script = task.ground_truth.script
    else:
        script = _WRONG_COMMANDS[min(round_index, len(_WRONG_COMMANDS) - 1)]
    return f"Act: bash\n```bash\n{script.strip()}\n```"


__all__ = ["reply"]
