"""tokenworth-rank (experimental, issue 24): the learned ranker on a FIFO bank, as a policy.

The controller is :mod:`tokenworth_jax.rank.standalone`: recall the K_c = 12 most cosine-similar
memories (the same hashed question vectors as TokenWorth), let the ranker pick one or none, and
learn from two signals:

* every memory offered after a success trains the **action model** (question words → action
  tokens), from the memory's own texts: its question (``key_text``) and its actions
  (``action_text``, :class:`agent.memory.Memory`);
* the grader's reward trains the **lift model** on the injected pair, net of the no-memory rate.

What the controller is given, and nothing else: hashed vectors of the current question, of each
offered memory's question and actions, and the 0/1 reward (``tests/test_rank.py`` checks that
skill lists, task ids and gold answers change no decision). The bank keeps the last B_max
offered memories. The decision log holds the recall set in cosine order (``selection``: ids,
cosines, predicted advantages and ŝ, for ``bench.ranking``) and the id each offer received.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from agent.budget import Budget
from agent.memory import Memory, Turn
from agent.policies.base import MemoryPolicy, Outcome


class TokenWorthRankPolicy(MemoryPolicy):
    name = "tokenworth-rank"
    first_task_note = "compiling the ranker…"

    def __init__(self, env: str, budget: Budget, seed: int = 0, **overrides: Any) -> None:
        super().__init__(env, budget, seed)
        import jax

        from tokenworth_jax.rank import standalone as S

        self._S = S
        self.dims = S.Dims(capacity=budget.bank_capacity)
        self.hp = S.params(**{"seed": seed, **overrides})
        self.state = S.init(self.dims, self.hp)
        self._select = jax.jit(S.select, static_argnames="dims")
        self._update = jax.jit(S.update)
        self.payloads: dict[int, Memory] = {}  # memory id -> memory, for the ids in the bank
        self.next_id = 0
        self._query: tuple[np.ndarray, np.ndarray] | None = None

    def _vectors(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        from tokenworth_jax.featurize import featurize
        from tokenworth_jax.rank.text import query_vectors

        r = self.dims.rank
        return featurize(text, r.key_dim), query_vectors(text, r.query_dim)

    def retrieve(self, task: Any) -> list[Memory]:
        import jax

        key_vec, words = self._query = self._vectors(task.query_text)
        self.state, sel = self._select(self.state, key_vec, words, self.hp, dims=self.dims)
        ids, recall, cos, s, gain, mid, p0 = jax.device_get((self.state.bank.ids, sel.recall, sel.cos, sel.s, sel.gain,
                                                            sel.memory_id, sel.p0))
        order = [int(k) for k in np.argsort(-np.where(recall, cos, -np.inf), kind="stable") if recall[k]]
        self.note(selection={"candidate_ids": [int(ids[k]) for k in order],
                             "relevance": [round(float(cos[k]), 6) for k in order],
                             "scores": [round(float(gain[k]), 6) for k in order],
                             "scorers": {"action model": [round(float(s[k]), 6) for k in order]},
                             "memory_id": int(mid) if mid >= 0 else None, "p0": round(float(p0), 6)})
        return [self.payloads[int(mid)]][: self.budget.max_memories] if mid >= 0 else []

    def update(self, task: Any, memories: Sequence[Memory], outcome: Outcome, trajectory: Sequence[Turn]) -> None:
        from tokenworth_jax.rank.text import action_vectors

        if self._query is None:  # update without retrieve: the protocol was broken upstream
            raise RuntimeError("tokenworth-rank: update() before retrieve() for this task")
        key_vec, words = self._query
        memory = self.candidate(task, outcome, trajectory)
        offer = memory is not None and bool(memory.action_text.strip())
        actions = action_vectors(memory.action_text if offer else "", self.dims.rank.action_dim)
        if offer:
            # the memory's own question is this task's question: its vectors are the ones just used
            slot = int(self.state.bank.next) % self.dims.capacity
            evicted = int(self.state.bank.ids[slot])
            self.payloads.pop(evicted, None)
            self.payloads[self.next_id] = memory.with_id(self.next_id)
            self.note(offer={"memory_id": self.next_id, "evicted_id": evicted if evicted >= 0 else None})
        else:
            self.note(offer=None)
        self.state = self._update(self.state, key_vec, words, np.int32(outcome.reward), np.bool_(offer), actions,
                                  np.int32(self.next_id), self.hp)
        self.next_id += int(offer)
        self._query = None

    @property
    def memories(self) -> dict[int, Memory]:
        return dict(self.payloads)

    def bank_size(self) -> int:
        return len(self.payloads)

    def state_dict(self) -> dict[str, Any]:
        import jax

        return {"state": jax.tree_util.tree_map(np.asarray, jax.device_get(self.state)),
                "payloads": {i: m.as_dict() for i, m in self.payloads.items()}, "next_id": self.next_id}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        import jax
        import jax.numpy as jnp

        self.state = jax.tree_util.tree_map(jnp.asarray, state["state"])
        self.payloads = {int(i): Memory.from_dict(m) for i, m in state["payloads"].items()}
        self.next_id = int(state["next_id"])


__all__ = ["TokenWorthRankPolicy"]
