"""TokenWorth+ as a policy: the TokenWorth controller with ``Spec(plus=True)``.

Same protocol and bank bookkeeping as :class:`~agent.policies.tokenworth.TokenWorthPolicy`;
the controller may now abstain (inject nothing although the bank has candidates). The
decision log adds the no-memory estimate ``p0``, the chosen candidate's predicted advantage
``gain`` and ``abstained``. The exploration key is seeded with the run's ``seed``, so a run
is deterministic per seed and resumes exactly (the key is part of the checkpointed state).
See docs/tokenworth-plus.md.
"""

from __future__ import annotations

from typing import Any

import jax

from agent.budget import Budget
from agent.data import Task
from agent.policies.tokenworth import TokenWorthPolicy


class TokenWorthPlusPolicy(TokenWorthPolicy):
    name = "tokenworth+"

    def __init__(self, env: str, budget: Budget, seed: int = 0, **overrides: Any) -> None:
        super().__init__(env, budget, seed, **{"plus_seed": seed, **overrides})
        from tokenworth_jax import Controller

        ctl = self.controller
        self.controller = Controller(ctl.spec._replace(plus=True), ctl.hp)

    def retrieve(self, task: Task) -> list:
        memories = super().retrieve(task)
        state = self.controller.state
        retrieved, pending = jax.device_get((state.pending.retrieved, state.plus.pending))
        self.note(plus={"p0": float(pending.p0), "gain": float(pending.gain) if retrieved else None,
                        "abstained": bool(pending.abstained)})
        return memories


__all__ = ["TokenWorthPlusPolicy"]
