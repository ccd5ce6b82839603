"""TokenWorth+ as a policy: the TokenWorth controller with TokenWorth+'s mode (the preset method ``tokenworth+``).

Same protocol and bank bookkeeping as :class:`~tokenworth_agent.policies.tokenworth.TokenWorthPolicy`; the
controller may now abstain (inject nothing although the bank has candidates). The decision log
adds what the selection reports: the no-memory estimate ``p0``, the chosen candidate's predicted
advantage ``gain`` and ``abstained``. The exploration key is seeded with the run's ``seed``, so
a run is deterministic per seed and resumes exactly (the key is part of the checkpointed state).
See docs/tokenworth-plus.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tokenworth_agent.core.budget import Budget
from tokenworth_agent.policies.tokenworth import TokenWorthPolicy

if TYPE_CHECKING:
    from tokenworth_jax import HostSelection


class TokenWorthPlusPolicy(TokenWorthPolicy):
    name = "tokenworth+"

    def __init__(self, env: str, budget: Budget, seed: int = 0, **overrides: Any) -> None:
        super().__init__(env, budget, seed, **{"plus_seed": seed, **overrides})

    def note_mode(self, selection: HostSelection) -> None:
        self.note(plus={"p0": selection.p0, "gain": selection.advantage, "abstained": selection.abstained})


__all__ = ["TokenWorthPlusPolicy"]
