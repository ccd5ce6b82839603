"""Bank lifecycle: every admission branch on hand-built states, capacity invariant, negative control."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

import tokenworth_jax as tw
from tokenworth_jax import Admission

from tests.controller_helpers import clustered_stream, precision, small_setup

D = 4


def _state(us, embs, query, f, capacity=3):
    """A bank of len(us) memories with utilities ``us`` and vectors ``embs``; eta = 0 (no KRR fit)."""
    spec = tw.Spec(dim=D, capacity=capacity, base_window=8, fast_window=4, slow_window=8, k_candidates=3, n_probes=2,
                   dtype=jnp.dtype(f).name)
    hp = tw.hparams("db", dtype=f)
    s = tw.init(spec, hp)
    n = len(us)
    emb = np.zeros((capacity, D))
    emb[:n] = embs
    valid = np.arange(capacity) < n
    bank = s.bank._replace(
        emb=jnp.asarray(emb, f), valid=jnp.asarray(valid), ids=jnp.asarray(np.where(valid, 100 + np.arange(capacity), -1), jnp.int32),
        u=jnp.asarray(np.r_[us, np.zeros(capacity - n)], f),
        last=jnp.full((capacity,), 5, jnp.int32), tau=jnp.zeros((capacity,), jnp.int32))
    judged = tw.protocol.on_device(tw.protocol.Progress(tw.protocol.OBSERVED, 1, False))  # as tw.observe(1) leaves it
    task = s.task._replace(query=tw.Query(jnp.asarray(query, f)), progress=judged, retrieved=jnp.asarray(n > 0))
    return spec, hp, s._replace(bank=bank, task=task, clock=s.clock._replace(t=jnp.int32(5)))


E = np.eye(D)
NEAR0 = np.array([0.96, 0.28, 0.0, 0.0])  # cos with e0 = 0.96: novelty 0.04


# With eta = 0 and w = w0 = [1, .1, .1, .02], the worth of a memory for the single probe is
# cos + 0.1 u + 0.1 rel + 0.02 rec (rel = 0.5, rec = 1 here), so each case is easy to check by hand.
CASES = [
    # name, utilities, bank vectors, probe query, candidate, expected code, slot, evicted id
    ("admit while not full", [1.0, 1.0], E[:2], E[0], E[2], Admission.ADMITTED_ROOM, 2, -1),
    # V = [1.13, 0.15, 0.17], V_new = 0.17; novelty 1 > 0.35; argmin is slot 1
    ("novelty admits, lowest worth evicted", [1.0, -2.0, 1.0], E[:3], NEAR0, E[3], Admission.ADMITTED_NOVEL, 1, 101),
    # V_bank >= 0.57 > V_new = 0.17: the candidate is the argmin
    ("novel but lowest worth: self-evicted", [5.0, 5.0, 5.0], E[:3], NEAR0, E[3], Admission.SELF_EVICTED, -1, -1),
    # novelty 0.04; V_new = 1.17 > max V_bank 0.83 + 0.02 and rho+ = 1; argmin is slot 2 (V = -0.13)
    ("worth gate admits a near duplicate", [-2.0, -2.0, -2.0], E[:3], NEAR0, NEAR0, Admission.ADMITTED_WORTH, 2, 102),
    # probe e1: V_new = 0.45 < V(slot 1) = 1.57; nearest is slot 0 with u = -1 < 0.5 and V = -0.03
    ("weak nearest neighbour replaced", [-1.0, 5.0, 5.0], E[:3], E[1], NEAR0, Admission.REPLACED_NEAREST, 0, 100),
    # same, but the nearest neighbour's u = 0.6 >= tau_util
    ("strong nearest neighbour: rejected", [0.6, 5.0, 5.0], E[:3], E[1], NEAR0, Admission.REJECTED, -1, -1),
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name,us,embs,query,cand,code,slot,evicted", CASES, ids=[c[0] for c in CASES])
def test_admission_branches(dtype, name, us, embs, query, cand, code, slot, evicted):
    with precision(dtype) as f:
        spec, hp, state = _state(us, embs, query, f)
        new, dec = tw.offer(state, jnp.asarray(cand, f), jnp.int32(7), hp, spec)
        assert Admission(int(dec.code)) == code, (name, dec)
        assert int(dec.slot) == slot and int(dec.evicted_id) == evicted
        ids = np.asarray(new.bank.ids)
        if slot >= 0:
            assert ids[slot] == 7 and float(new.bank.u[slot]) == 1.0 and int(new.bank.tau[slot]) == 5
        else:  # nothing written: the bank is untouched
            np.testing.assert_array_equal(ids, np.asarray(state.bank.ids))
        assert int(jnp.sum(new.bank.valid)) <= spec.capacity


def test_failed_task_never_writes():
    with precision("float32") as f:
        spec, hp, state = _state([1.0], E[:1], E[0], f)
        state = state._replace(task=state.task._replace(progress=state.task.progress._replace(reward=jnp.int32(0))))
        new, dec = tw.offer(state, jnp.asarray(E[1], f), jnp.int32(7), hp, spec)
        assert int(dec.code) == Admission.NOT_OFFERED
        np.testing.assert_array_equal(np.asarray(new.bank.valid), np.asarray(state.bank.valid))


def test_capacity_invariant_and_negative_control():
    """Over a long stream the bank never exceeds B_max; a keep-forever policy differs detectably."""
    with precision("float32") as f:
        spec, hp = small_setup(f)
        T = 150
        q, m, rewards = clustered_stream(seed=11, T=T, dim=spec.dim, n_clusters=9, noise=0.9)
        state = tw.init(spec, hp)
        keep_forever: list[int] = []  # admit while there is room, never evict
        evictions = 0
        for t in range(T):
            state, out = tw.step(state, tw.Event(jnp.asarray(q[t], f), jnp.int32(rewards[t]), jnp.asarray(m[t], f),
                                                 jnp.int32(t)), hp, spec)
            assert int(jnp.sum(state.bank.valid)) <= spec.capacity
            ids = np.asarray(state.bank.ids)
            valid = np.asarray(state.bank.valid)
            assert np.all((ids >= 0) == valid) and len(set(ids[valid])) == valid.sum()
            evictions += int(out.decision.evicted_id >= 0)
            if rewards[t] == 1 and len(keep_forever) < spec.capacity:
                keep_forever.append(t)
        final = set(np.asarray(state.bank.ids)[np.asarray(state.bank.valid)].tolist())
        assert evictions > 0
        assert final != set(keep_forever), "worth-guided lifecycle must differ from keep-forever"
