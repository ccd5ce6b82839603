"""The simulator's reply texts for the agent's rounds (points 4 and 5 of :mod:`tokenworth_agent.sim`).

A success replays the gold actions in the environment's own action format; a failure writes a
plausible wrong action. Each benchmark brings its replies
(:attr:`~tokenworth_agent.benchmarks.base.Benchmark.sim_reply`, ``reply(task, episode, round_index,
conversation, params)``, written with the helpers of :mod:`.base`); :func:`thought` opens round 0 the
same way for every benchmark. A benchmark without replies cannot run on the simulated backbone.
"""

from __future__ import annotations

from typing import Callable

from tokenworth_agent.backbones.base import Conversation
from tokenworth_agent.sim.model import Episode, SimParams
from tokenworth_agent.sim.replies.base import last_observation, thought
from tokenworth_agent.tasks import Task

Reply = Callable[[Task, Episode, int, Conversation, SimParams], str]  # (task, episode, round, conversation, params)

__all__ = ["Reply", "last_observation", "thought"]
