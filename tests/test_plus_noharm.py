"""TokenWorth+ must never make an agent worse than no memory (docs/tokenworth-plus.md, "No harm"): the
no-memory arm's own posterior, the no-harm guard, the decision on streams where injecting hurts, plain-text
memories, and the harm-majority stream family of ``tokenworth_bench.plus.streams``."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tokenworth_jax as tw
from tokenworth_bench.plus import streams
from tokenworth_jax.modes import Feedback
from tokenworth_jax.plus.abstain import null_logit_sd, null_stats
from tokenworth_jax.plus.config import N_LIFT_FEATURES as F
from tokenworth_jax.plus.guard import Retired, allows
from tokenworth_jax.plus.mode import update

from tests.controller_helpers import FAST_SCHEDULE, SMALL_SPEC, unit

WORDS, ACTIONS = 16, 8
# The no-harm decision rule switched off: "no memory" learned only from the rule's own abstentions.
BEFORE = dict(plus_optimism=1.0, plus_explore=0.0, plus_margin=-0.05, plus_guard=0.0, plus_null_explore=0.0,
              plus_null_first=0.0, plus_null_all=0.0, plus_reoffset=0.0)


def setup(**overrides):
    spec = tw.Spec(**SMALL_SPEC, mode=tw.plus_mode(null_window=10, word_dim=WORDS, action_dim=ACTIONS),
                   scorer=tw.scorers.full())
    return spec, tw.hparams("db", mode=spec.mode, **{**FAST_SCHEDULE, **overrides})


def _ring(n: int, rate: float, dim: int = SMALL_SPEC["dim"], window: int = 64):
    """A no-memory ring of ``n`` outcomes (successes first) around random unit queries."""
    mode = tw.plus_mode(null_window=window)
    spec = tw.Spec(**SMALL_SPEC, mode=mode, scorer=tw.scorers.full())
    ring = mode.init(spec, tw.hparams("db", mode=mode)).null_ring
    q = unit(np.random.default_rng(n), max(n, 1), dim)
    from tokenworth_jax.ring import ring_push
    for i in range(n):
        ring = ring_push(ring, (jnp.asarray(q[i], jnp.float32), jnp.float32(i < rate * n)), jnp.asarray(True))
    return ring


# ------------------------------------------------------------------ the no-memory arm's posterior
def test_no_memory_posterior_is_the_prior_without_outcomes_and_shrinks_with_its_own():
    far = jnp.zeros((1, SMALL_SPEC["dim"])).at[0, 0].set(1.0)
    prior, strength = 0.5, 2.0
    sds = [float(null_logit_sd(null_stats(far, _ring(n, 0.5), 0.05), prior, strength)[0]) for n in (0, 8, 32, 60)]
    # no outcome: the Beta(aπ, a(1−π)) prior's sd of the rate, in log-odds: √(π(1−π)/(a+1)) / (π(1−π))
    assert sds[0] == pytest.approx(np.sqrt(0.25 / 3) / 0.25, rel=1e-5)
    assert all(a > b for a, b in zip(sds, sds[1:]))  # every outcome of its own arm tightens it
    assert sds[-1] == pytest.approx(np.sqrt(0.25 / 63) / 0.25, rel=0.05)  # ~ 1/√n


def test_no_memory_arm_learns_only_from_tasks_with_nothing_injected():
    spec, hp = setup()
    state = tw.init(spec, hp).mode
    key = jnp.asarray(unit(np.random.default_rng(0), 1, SMALL_SPEC["dim"])[0], jnp.float32)
    q = tw.Query(key, {"words": jnp.zeros(WORDS)})

    def judged(s, injected: bool, reward: int):
        return update(s, Feedback(query=q, selected=jnp.asarray(injected), slot=jnp.int32(0 if injected else -1),
                                  reward=jnp.int32(reward)), hp)

    after_injection = judged(state, True, 0)
    assert float(after_injection.null_n) == 0 and int(after_injection.null_ring.idx) == 0
    assert int(after_injection.lift_ring.idx) == 1
    after_none = judged(after_injection, False, 1)
    assert float(after_none.null_n) == 1 and float(after_none.null_y) == 1 and int(after_none.null_ring.idx) == 1
    assert int(after_none.lift_ring.idx) == 1


# ------------------------------------------------------------------ the guard
def _guard(past_y, *, gain: float, theta_sd: float = 0.1, sd0: float = 0.1, allowance: float = 1.0, kappa=1.0,
           retired: Retired = Retired(gain=jnp.float32(0.0), var=jnp.float32(0.0))):
    """The guard for a candidate whose log-odds gain is ``gain`` at p0 = 0.5, after injected tasks
    with outcomes ``past_y`` at p0 = 0.5."""
    psi = jnp.zeros(F).at[0].set(1.0)
    theta = jnp.zeros(F).at[0].set(gain)
    past_y = jnp.asarray(past_y, jnp.float32)
    return bool(allows(psi, jnp.float32(0.0), past_y, jnp.zeros_like(past_y), jnp.ones(past_y.shape, bool), retired, theta,
                       jnp.eye(F) * theta_sd, jnp.float32(sd0), jnp.float32(kappa), jnp.float32(allowance)))


def test_guard_blocks_once_past_injections_did_harm_and_lets_a_confident_gain_through():
    # no harm done so far: exploring an uncertain injection is within an allowance of 4 (20 coins: ±2.2)
    assert _guard([1, 0] * 10, gain=0.0, allowance=4.0)
    assert not _guard([1, 0] * 10, gain=0.0, allowance=1.0)  # but not within 1: the past could be 1 lucky
    harmful = [0, 0, 0, 1] * 10  # 10 of 40 against the 20 no memory would give
    assert not _guard(harmful, gain=0.0)  # the allowance of 1 is spent
    assert not _guard(harmful, gain=0.3, theta_sd=2.0)  # a gain the posterior is unsure of does not unlock it
    assert _guard(harmful, gain=1.0)  # a confidently helpful injection raises the bound: allowed
    assert _guard(harmful, gain=0.0, allowance=30.0)


def test_guard_counts_the_baselines_uncertainty_once_per_injection():
    lucky = [1, 1, 1, 0] * 25  # 75 of 100 where no memory is expected to give 50 ± (its sd)
    assert _guard(lucky, gain=0.0, sd0=0.1, kappa=2.0)
    # a baseline known to ±1.5 in log-odds makes 100 injections' total gain uncertain by ±37 successes
    assert not _guard(lucky, gain=0.0, sd0=1.5, kappa=2.0)


def test_guard_counts_each_past_tasks_own_coin():
    # 40 injections at p0 = 0.5 that gave 23 successes: +3 over the 20 expected, well inside the ±3.2
    # (one sd) that 40 no-memory coins would spread by; the baseline itself known almost exactly
    lucky = [1, 0] * 17 + [1] * 6
    harmful = dict(gain=-0.2, sd0=1e-3, allowance=0.0)
    assert not _guard(lucky, **harmful)  # luck is not evidence: a harmful candidate stays blocked
    assert _guard([1] * 40, **harmful)  # +20 is: the run can afford it


def test_guard_remembers_the_injections_that_left_the_window():
    neutral = [1, 0] * 10
    assert _guard(neutral, gain=0.0, allowance=4.0)
    forgotten_harm = Retired(gain=jnp.float32(-12.0), var=jnp.float32(60.0))
    assert not _guard(neutral, gain=0.0, retired=forgotten_harm, allowance=4.0)
    assert _guard(neutral, gain=0.0, retired=forgotten_harm, allowance=40.0)


def test_a_row_leaving_the_lift_window_is_retired_with_its_outcome():
    spec = tw.Spec(**{**SMALL_SPEC, "base_window": 2}, scorer=tw.scorers.full(),
                   mode=tw.plus_mode(null_window=10, word_dim=WORDS, action_dim=ACTIONS))
    hp = tw.hparams("db", mode=spec.mode, **FAST_SCHEDULE)
    state = tw.init(spec, hp).mode
    key = jnp.asarray(unit(np.random.default_rng(1), 1, SMALL_SPEC["dim"])[0], jnp.float32)
    q = tw.Query(key, {"words": jnp.zeros(WORDS)})

    def judged(s, reward: int):
        return update(s, Feedback(query=q, selected=jnp.asarray(True), slot=jnp.int32(0), reward=jnp.int32(reward)),
                      hp)

    first = judged(judged(state, 0), 1)  # the window (2 rows) is full; nothing has left it
    assert float(first.retired.gain) == 0 and float(first.retired.var) == 0
    third = judged(first, 1)  # the first row (a failure at p̂₀ = 0.5) leaves
    assert float(third.retired.gain) == pytest.approx(-0.5, abs=0.05)
    assert float(third.retired.var) == pytest.approx(0.25, abs=0.01)
    fourth = judged(third, 0)  # then the second (a success)
    assert float(fourth.retired.gain) == pytest.approx(0.0, abs=0.1)


# ------------------------------------------------------------------ the decision on toy streams
def _toy(effect: float, T: int = 400, seed: int = 0):
    """Clustered queries; each memory's text is its query; injecting changes p0 by ``effect``."""
    rng = np.random.default_rng(seed)
    centres = unit(rng, 5, SMALL_SPEC["dim"])
    q = centres[rng.integers(0, 5, size=T)] + 0.3 * unit(rng, T, SMALL_SPEC["dim"])
    q = jnp.asarray(q / np.linalg.norm(q, axis=1, keepdims=True), jnp.float32)
    words = jnp.asarray(unit(rng, T, WORDS), jnp.float32)
    ev = tw.Event(query=tw.Query(q, {"words": words}), reward=jnp.zeros((T,), jnp.int32),
                  memory=tw.MemoryText(q, {"actions": jnp.asarray(unit(rng, T, ACTIONS), jnp.float32)}),
                  memory_id=jnp.arange(T, dtype=jnp.int32))
    p0 = jnp.asarray(rng.uniform(0.3, 0.9, size=T), jnp.float32)  # easy tasks: a prior of 0.5 is wrong
    v = jnp.asarray(rng.uniform(size=T), jnp.float32)
    # a Partial: its arrays are traced, so every toy stream of one length runs one compiled program (a closure made
    # here per stream was a new reward_fn, so a new program, for each)
    reward = jax.tree_util.Partial(_toy_reward, p0, v, jnp.float32(effect))
    no_memory = float(np.mean(np.asarray(v) < np.asarray(p0)))
    return ev, reward, no_memory


def _toy_reward(p0, v, effect, event, selection):
    """A toy task's reward: its coin ``v`` under ``p0``, moved by ``effect`` where a memory was injected."""
    p = p0[event.memory_id] + jnp.where(selection.memory_id >= 0, effect, 0.0)
    return (v[event.memory_id] < p).astype(jnp.int32)


def _run(effect: float, seed: int = 0, **overrides):
    spec, hp = setup(plus_seed=seed, **overrides)
    ev, reward, no_memory = _toy(effect, seed=seed)
    _, out = tw.run(tw.init(spec, hp), ev, hp, spec, reward)
    injected = np.asarray(out.selection.memory_id) >= 0
    return float(np.mean(np.asarray(out.reward))), no_memory, injected


@pytest.mark.parametrize("seed", [0, 1])
def test_abstains_where_injecting_hurts(seed):
    sr, no_memory, injected = _run(-0.3, seed)
    assert injected[200:].mean() < 0.05  # it learned that injecting hurts here
    # the expected loss stays within the guard's allowance, 4 + 0.002·400 = 4.8 successes (1.2 points) ...
    assert 0.3 * injected.sum() <= 4.8
    assert sr >= no_memory - 0.03  # ... and the realised one within it plus the noise of those few injections


def test_on_a_harm_majority_stream_the_rule_before_loses_and_the_default_does_not():
    """The failure the no-harm rule fixes: a quarter of the memories help, the rest hurt by 0.15. The rule
    before learned "no memory" only from its own rare abstentions and kept injecting."""
    st = streams.make_stream("h25-x15-s2-n2", 1, 1000)
    no_memory = streams.no_memory(st)
    now = streams.run_controller(st, True, plus_seed=1)
    before = streams.run_controller(st, True, plus_seed=1, **BEFORE)
    assert before["injected"] > 0.8 and before["sr"] < no_memory - 3
    assert now["sr"] >= no_memory - 1 and now["injected"] < 0.2


def test_injects_where_injecting_helps_and_exploring_no_memory_decays():
    sr, no_memory, injected = _run(+0.25)
    assert sr > no_memory + 0.1
    abstained = ~injected[1:]  # the first task has no candidate
    assert abstained[:100].mean() > abstained[-200:].mean()  # the no-memory arm is explored less and less
    assert injected[-200:].mean() > 0.8


def test_no_injection_before_the_baseline_is_measured():
    _, _, injected = _run(+0.25, plus_null_first=30.0)
    first = int(np.argmax(injected))
    assert first >= 30 and (~injected[:first]).all()


# ------------------------------------------------------------------ plain-text memories (Controller.offer(text))
def _plain_stream(effect: float, T: int, seed: int = 0):
    """Questions over a few topics; every memory is offered as one plain string (no action text)."""
    rng = np.random.default_rng(seed)
    topics = ["orders placed by customer", "rows of the inventory table", "employees hired in year",
              "files changed in the folder"]
    p0 = rng.uniform(0.3, 0.9, size=T)
    v = rng.uniform(size=T)
    return [(f"list the {topics[i % 4]} {int(rng.integers(0, 50))}", p0[i], v[i]) for i in range(T)], effect


def _plain_run(effect: float, T: int = 240, seed: int = 0) -> tuple[float, float, float]:
    tasks, effect = _plain_stream(effect, T, seed)
    ctl = tw.Controller.from_preset("db", method="tokenworth+", spec_overrides=dict(capacity=16, dim=64, word_dim=64,
                                                                          action_dim=32), plus_seed=seed)
    wins = injected = 0
    for question, p0, v in tasks:
        sel = ctl.select(question)
        success = int(v < p0 + (effect if sel.memory_id is not None else 0.0))
        ctl.observe(success)
        injected += sel.memory_id is not None
        wins += success
        if success:
            ctl.offer(f"Question: {question}. What worked: look up the table, filter, count the rows.")
        ctl.end_task()
    no_memory = float(np.mean([v < p0 for _, p0, v in tasks]))
    return wins / T, no_memory, injected / T


def test_plain_text_memories_where_injecting_hurts_stay_safe():
    sr, no_memory, injected = _plain_run(-0.3)
    assert sr >= no_memory - 0.02 and injected < 0.2


def test_plain_text_memories_that_help_are_still_injected():
    sr, no_memory, injected = _plain_run(+0.25)
    assert sr > no_memory + 0.08 and injected > 0.5


# ------------------------------------------------------------------ hyperparameters
@pytest.mark.parametrize("name, bad", [("plus_guard_sds", -1.0), ("plus_guard", 2.0), ("plus_null_first", -3.0),
                                       ("plus_guard_rate", float("nan")), ("plus_null_all", 0.5 + 1.0)])
def test_new_hyperparameters_are_validated_by_flat_name(name, bad):
    with pytest.raises(ValueError, match=name):
        tw.hparams("db", mode="tokenworth+", **{name: bad})


def test_guard_values_do_not_recompile():
    spec, hp = setup()
    ev, reward, _ = _toy(-0.3, T=30)
    run = jax.jit(lambda h: tw.run(tw.init(spec, h), ev, h, spec, reward)[1].reward)
    run(hp)
    before = run._cache_size()
    for values in ({"plus_guard_sds": 2.0}, {"plus_guard": 0.0, "plus_null_first": 5.0}, {"plus_guard_rate": 0.02}):
        run(tw.hparams("db", mode=spec.mode, **{**FAST_SCHEDULE, **values}))
    assert run._cache_size() == before


# ------------------------------------------------------------------ the harm-majority stream family
def test_family_variants_are_deterministic_and_held_out_ones_are_apart():
    assert not set(streams.FAMILY) & set(streams.HELD_OUT)
    a, b = streams.make_stream("h25-x15-s2-n2", 3, 200), streams.make_stream("h25-x15-s2-n2", 3, 200)
    assert a["questions"] == b["questions"] and np.array_equal(a["good"], b["good"])
    assert np.array_equal(a["actions"], b["actions"]) and np.array_equal(a["query"], b["query"])
    assert streams.make_stream("h25-x15-s2-n2", 4, 200)["questions"] != a["questions"]


@pytest.mark.parametrize("name", sorted(streams.VARIANTS))
def test_family_stream_follows_its_variant(name):
    v = streams.VARIANTS[name]
    st = streams.make_stream(name, 0, 600)
    assert abs(st["good"].mean() - v.help) < 0.06
    assert v.p0[0] <= st["p0"].min() and st["p0"].max() <= v.p0[1]
    table = streams.effects(name)
    assert table[0, 0] == v.gain and (table[1:] == -v.harm).all()  # only a skill's helpful memories help
    words = [set(q.split()) for q in st["questions"]]
    assert all(len(w) == 6 + v.named for w in words)  # topic 3 + skill names + filler 3
    by_skill = {}
    for w, s in zip(words, st["skill"]):
        by_skill.setdefault(int(s), []).append(w)
    shared = {s: set.intersection(*ws) for s, ws in by_skill.items()}
    assert all(not x for x in shared.values())  # no single word is in every question of a skill
    texts = st["action_texts"]
    helpful_tokens = [set(t.split()) for t, g in zip(texts, st["good"]) if g]
    other_tokens = [set(t.split()) for t, g in zip(texts, st["good"]) if not g]
    # a helpful memory shows `signal` more tokens (its key steps) than the others of its skill
    extra = np.mean([len(t) for t in helpful_tokens]) - np.mean([len(t) for t in other_tokens])
    assert extra == pytest.approx(v.signal, abs=1e-9)
    if v.plain:
        assert all(t.startswith(q) for t, q in zip(texts, st["questions"]))


def test_family_named_skills_appear_in_the_questions_only_when_named():
    named, unnamed = streams.make_stream("h10-x25-s4-n2", 0, 300), streams.make_stream("h25-x25-s4-n0", 0, 300)

    def skill_words(st):  # words shared by many questions of one skill but few of the others
        out = set()
        for s in np.unique(st["skill"]):
            mine = [set(q.split()) for q, k in zip(st["questions"], st["skill"]) if k == s]
            rest = [set(q.split()) for q, k in zip(st["questions"], st["skill"]) if k != s]
            for w in set.union(*mine):
                if np.mean([w in q for q in mine]) > 0.3 and np.mean([w in q for q in rest]) < 0.01:
                    out.add(w)
        return out

    assert len(skill_words(named)) >= 8 and not skill_words(unnamed)


def test_family_oracle_beats_no_memory_and_injecting_blindly_loses():
    st = streams.make_stream("h10-x25-s4-n2", 0, 600)
    sr, injected = streams.oracle(st)
    assert sr > streams.no_memory(st) + 5 and 0 < injected < 1
    row = streams.run_controller(st, False)  # the paper's controller injects nearly always here
    assert row["injected"] > 0.9 and row["sr"] < streams.no_memory(st) - 3 and row["harmful"] > 0.5


def test_the_no_harm_target_is_inclusive_of_exactly_one_point():
    from tokenworth_bench.plus.targets import stream_checks

    def result(plus_sr: float, none_sr: float) -> dict:
        rows = {"tokenworth+": [dict(sr=plus_sr, injected=0.1)], "no memory": [dict(sr=none_sr, injected=0.0)]}
        return {"seeds": [0], "methods": {name: {"rows": r, "mean": r[0], "vs_no_memory": [r[0]["sr"] - none_sr],
                                                 "vs_oracle": [0.0], "gap_closed": None} for name, r in rows.items()}}

    # 48.2 - 49.2 is -1.000000000000007 in floating point: ten successes of 1,000, exactly the target
    assert stream_checks({"s": result(48.2, 49.2)}, {"s"}, set())[0]["no_harm"]
    assert not stream_checks({"s": result(48.1, 49.2)}, {"s"}, set())[0]["no_harm"]
