"""The simulator's reply texts for the agent's rounds (points 4 and 5 of :mod:`tokenworth_agent.sim`).

A success replays the gold actions in the environment's own action format; a failure writes a
plausible wrong action. Each environment's replies are a module of this package with one function,
``reply(task, episode, round_index, conversation, params)``; :data:`REPLIES` names them, and
:func:`thought` opens round 0 the same way for every environment. Adding an environment is its
module and one line here.
"""

from __future__ import annotations

from typing import Callable

from tokenworth_agent.backbones.base import Conversation
from tokenworth_agent.core.registry import Registry
from tokenworth_agent.sim.model import Episode, SimParams
from tokenworth_agent.sim.replies.base import last_observation, thought
from tokenworth_agent.tasks import Task

Reply = Callable[[Task, Episode, int, Conversation, SimParams], str]  # (task, episode, round, conversation, params)

REPLIES: Registry[str] = Registry("environment", {
    "db": "tokenworth_agent.sim.replies.db:reply",
    "os": "tokenworth_agent.sim.replies.os_env:reply",
    "kg": "tokenworth_agent.sim.replies.kg:reply",
    "bigcodebench": "tokenworth_agent.sim.replies.bigcodebench:reply",
    "alfworld": "tokenworth_agent.sim.replies.alfworld:reply",
})

__all__ = ["REPLIES", "Reply", "last_observation", "thought"]
