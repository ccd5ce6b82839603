"""A third mode, defined here and nowhere else: the core builds a controller from it with no edit.

"nearest": inject the top-cosine candidate (recall rank 0) when its cosine reaches a threshold and the
question does not ask for no memory; keep a FIFO bank (worth = recency). It declares everything a
mode can: its own state (a ring of the rewards of injected tasks), a shape field (that ring's length),
a traced hyperparameter with a range and a flat name (``nearest_min_cosine``), a per-candidate score
it reports, and a query-side text feature the host hashes ("skip": the question asks for no memory).
It runs through ``tw.run``, ``jax.vmap`` over configurations, ``tw.run_batched``, ``tw.checked`` and
the host ``Controller`` (checkpoints included).
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.typing import ArrayLike

import tokenworth_jax as tw
from tokenworth_jax.config import Range, Schema, check_shapes
from tokenworth_jax.modes import Candidates, Choice, Feedback
from tokenworth_jax.ring import Ring, ring_count, ring_init, ring_push

from tests.controller_helpers import FAST_SCHEDULE, SMALL_SPEC, clustered_stream, with_default_emitters

pytestmark = pytest.mark.library  # imports nothing of the harness: runs in the library's own venvs too

SKIP = "no memory"  # a question containing this asks for no memory


# ------------------------------------------------------------------ the mode, defined in this file only
class _Fields(NamedTuple):
    history: int = 8  # rewards of injected tasks kept


class NearestShapes(_Fields):
    __slots__ = ()

    def __new__(cls, *args: Any, **kwargs: Any) -> "NearestShapes":
        self = super().__new__(cls, *args, **kwargs)
        check_shapes("NearestShapes", self._asdict(), {"history": 1})
        return self


class NearestHParams(NamedTuple):
    min_cosine: ArrayLike  # inject the top candidate only from this cosine on


SCHEMA = Schema(cls=NearestHParams, fields=NearestHParams._fields, prefix="nearest_",
                defaults=dict(min_cosine=0.0), ranges=dict(min_cosine=Range(-1, 1)))


class NearestState(NamedTuple):
    rewards: Ring  # data = (history,) rewards of the tasks on which a memory was injected
    n_injected: jax.Array  # int32


def skip_feature(text: str, dim: int) -> np.ndarray:
    return np.full((dim,), float(SKIP in text.lower()))


def _init(spec: Any, hp: tw.HParams) -> NearestState:
    return NearestState(rewards=ring_init(jnp.zeros((spec.mode.shapes.history,), spec.float_dtype)),
                        n_injected=jnp.zeros((), jnp.int32))


def _choose(state: NearestState, cands: Candidates, hp: tw.HParams) -> tuple[NearestState, Choice]:
    skip = cands.query.features["skip"][0] > 0.5
    inject = cands.valid[0] & (cands.relevance[0] >= hp.mode.min_cosine) & ~skip
    nan = jnp.full((), jnp.nan, cands.score.dtype)
    return state, Choice(index=jnp.where(inject, 0, -1).astype(jnp.int32), p0=nan,
                         advantage=jnp.where(cands.valid[0], cands.relevance[0], nan),
                         abstained=cands.valid[0] & ~inject,
                         scores={"cosine": jnp.where(cands.valid, cands.relevance, nan)})


def _target(state: NearestState, y: jax.Array, s_base: jax.Array, hp: tw.HParams) -> jax.Array:
    return y - (2 * jax.nn.sigmoid(s_base) - 1)  # the paper's residual target: its learners keep learning


def _update(state: NearestState, fb: Feedback, hp: tw.HParams) -> NearestState:
    return NearestState(rewards=ring_push(state.rewards, fb.reward.astype(state.rewards.data.dtype), fb.selected),
                        n_injected=state.n_injected + fb.selected.astype(jnp.int32))


def _worth(state: NearestState, probes: tw.Query, scores: Any, memory: tw.MemoryText, created: jax.Array,
           hp: tw.HParams) -> jax.Array:
    # recency: every offer passes the gate and the oldest memory is evicted (a FIFO bank)
    return jnp.broadcast_to(created.astype(state.rewards.data.dtype) + 1, (probes.key.shape[0], created.shape[0]))


def _write(state: NearestState, slot: jax.Array, writes: jax.Array, memory: tw.MemoryText,
           offered: jax.Array) -> NearestState:
    return state


def nearest(**shapes: int) -> tw.Mode:
    own = NearestShapes(**shapes)
    return tw.Mode(name="nearest", init=_init, choose=_choose, target=_target, update=_update, worth=_worth,
                   write=_write, shapes=own, hparams=SCHEMA,
                   features=(tw.Feature("skip", "query", 1, skip_feature, "whether the question asks for no memory"),))


# ------------------------------------------------------------------ helpers
def setup(**overrides: Any) -> tuple[tw.Spec, tw.HParams]:
    spec = tw.Spec(**SMALL_SPEC, mode=nearest(history=5))
    return spec, tw.hparams("db", mode=spec.mode, **{**FAST_SCHEDULE, **overrides})


# Every check's stream has T tasks: tw.run's program for this spec is compiled once in this module (a stream's
# length only sizes the scan; the checks read what happens in it).
T = 60


def stream(T: int = T, seed: int = 4) -> tuple[tw.Event, np.ndarray]:
    q, m, r = clustered_stream(seed, T, SMALL_SPEC["dim"])
    skip = (np.arange(T) % 7 == 3).astype(np.float32)[:, None]
    return tw.Event(query=tw.Query(jnp.asarray(q, jnp.float32), {"skip": jnp.asarray(skip)}), reward=jnp.asarray(r),
                    memory=jnp.asarray(m, jnp.float32), memory_id=jnp.arange(T, dtype=jnp.int32)), skip[:, 0]


# ------------------------------------------------------------------ the checks
def test_the_mode_runs_through_tw_run_with_its_rules():
    spec, hp = setup(nearest_min_cosine=0.3)
    events, skip = stream()
    state, out = tw.run(tw.init(spec, hp), events, hp, spec)
    rel0 = np.asarray(out.selection.relevance)[:, 0]
    valid0 = np.asarray(out.selection.candidate_ids)[:, 0] >= 0
    want = np.where(valid0 & (rel0 >= 0.3) & (skip < 0.5), 0, -1)
    np.testing.assert_array_equal(np.asarray(out.selection.chosen), want)  # the top cosine, or nothing
    assert 0 < int(np.sum(want == 0)) < len(want) and np.any(valid0 & (skip > 0.5))  # both rules were exercised
    np.testing.assert_array_equal(np.asarray(out.selection.abstained), valid0 & (want < 0))
    np.testing.assert_allclose(np.asarray(out.selection.mode_scores["cosine"])[valid0, 0], rel0[valid0])
    assert int(state.mode.n_injected) == int(np.sum(want == 0))
    assert int(ring_count(state.mode.rewards)) == min(5, int(np.sum(want == 0)))  # its own shape field sizes it
    # FIFO: every offer of a success is admitted; once full, the oldest memory leaves first
    codes = np.asarray(out.decision.code)
    offered = np.asarray(events.reward) == 1
    assert set(codes[offered].tolist()) <= {int(tw.Admission.ADMITTED_ROOM), int(tw.Admission.ADMITTED_NOVEL),
                                            int(tw.Admission.ADMITTED_WORTH)}
    evicted = np.asarray(out.decision.evicted_id)
    admitted_ids = np.arange(len(codes))[offered]
    np.testing.assert_array_equal(evicted[evicted >= 0], admitted_ids[:int(np.sum(evicted >= 0))])


def test_vmap_over_configurations_and_run_batched_equal_separate_runs():
    events, _ = stream(seed=5)
    spec, _ = setup()
    hp_list = [setup(nearest_min_cosine=c, eta_max=e)[1] for c, e in ((-1.0, 0.1), (0.5, 0.2), (0.9, 0.05))]
    hps = tw.stack_hparams(hp_list)
    states = jax.vmap(functools.partial(tw.init, spec))(hps)
    vmapped, vout = jax.jit(jax.vmap(lambda s, h: tw.run(s, events, h, spec)))(states, hps)
    outs = {strategy: tw.run_batched(states, events, hps, spec, strategy=strategy)[1] for strategy in ("vmap", "map")}
    for i, hp in enumerate(hp_list):
        final, single = tw.run(tw.init(spec, hp), events, hp, spec)
        for out in (vout, *outs.values()):
            np.testing.assert_array_equal(np.asarray(out.selection.chosen[i]), np.asarray(single.selection.chosen))
            np.testing.assert_array_equal(np.asarray(out.decision.code[i]), np.asarray(single.decision.code))
        # configuration i read on the host (NumPy indexing compiles nothing; a jax.Array's x[i] compiles per leaf shape)
        chex.assert_trees_all_close(jax.tree_util.tree_map(lambda x: np.asarray(x)[i], vmapped), final, rtol=2e-4,
                                    atol=2e-4)
    assert len({tuple(np.asarray(vout.selection.chosen[i]).tolist()) for i in range(3)}) == 3  # the values matter


def test_new_values_of_its_hyperparameter_compile_nothing_and_bad_ones_are_refused():
    events, _ = stream()
    spec, hp = setup()
    run = tw.controller(spec.scorer, spec.mode).run
    tw.run(tw.init(spec, hp), events, hp, spec)
    size = run._cache_size()
    for value in (-0.5, 0.2, 0.9):
        h = setup(nearest_min_cosine=value)[1]
        tw.run(tw.init(spec, h), events, h, spec)
    assert run._cache_size() == size
    with pytest.raises(ValueError, match=r"nearest_min_cosine = 2.0 is out of range: must be a finite number in "
                                         r"\[-1, 1\]"):
        setup(nearest_min_cosine=2.0)
    with pytest.raises(ValueError, match=r"NearestShapes.history = 0"):
        nearest(history=0)
    with pytest.raises(ValueError, match=r"reads whether the question asks for no memory \(query feature 'skip'"):
        tw.select(tw.init(spec, hp), events.query.key[0], hp, spec)


def test_checked_mode_runs_it():
    events, _ = stream()
    spec, hp = setup(nearest_min_cosine=0.2)
    # bit for bit: a claim about the programs a user compiles, so with XLA's default emitters (controller_helpers)
    run, checked_run = (with_default_emitters(fn, static_argnames=("spec",)) for fn in (tw.run, tw.checked.run))
    chex.assert_trees_all_equal(checked_run(tw.init(spec, hp), events, hp, spec),
                                run(tw.init(spec, hp), events, hp, spec))


def test_the_host_controller_hashes_its_feature_and_checkpoints_it():
    spec, hp = setup(nearest_min_cosine=0.2)
    ctl = tw.Controller(spec, hp)
    for i in range(4):
        ctl.select(f"how many rows of table t{i} are open")
        ctl.observe(1)
        ctl.offer(f"SELECT COUNT(*) FROM t{i}", key_text=f"how many rows of table t{i} are open", payload=i)
        ctl.end_task()
    sel = ctl.select("how many rows of table t2 are open")
    assert sel.memory == 2 and sel.chosen == 0 and sel.scorers["cosine"][0] == pytest.approx(1.0, abs=1e-5)
    ctl.observe(0)
    ctl.end_task()
    skipped = ctl.select(f"how many rows of table t2 are open, {SKIP} please")
    assert skipped.memory is None and skipped.abstained
    ctl.observe(1)
    data = ctl.state_dict()
    assert data["spec"]["mode"] == {"name": "nearest", "shapes": {"history": 5}}
    assert "nearest_min_cosine" in data["hparams"]
    with pytest.raises(ValueError, match=r"the spec's mode 'nearest' is not in the preset table: pass it"):
        tw.Controller.from_state_dict(data)
    twin = tw.Controller.from_state_dict(data, parts={"nearest": nearest(history=5)})
    assert twin.phase == "judged" and int(twin.state.mode.n_injected) == int(ctl.state.mode.n_injected) >= 1
    for c in (ctl, twin):
        c.offer("another memory", key_text="a new question", payload=9)
    assert ctl.select("a new question").as_dict() == twin.select("a new question").as_dict()
