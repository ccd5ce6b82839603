"""The learned ranker (tokenworth_jax.rank), its policy (tokenworth-rank) and the ranking instrument."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agent.budget import Budget
from agent.memory import Memory, Turn, build_memory
from agent.policies.base import Outcome
from tokenworth_jax.rank import model as M
from tokenworth_jax.rank import standalone as S
from tokenworth_jax.rank.text import action_vectors, query_vectors, text_features

DB = Budget.for_env("db")


# ------------------------------------------------------------------ the action model
def test_recursive_least_squares_equals_the_batch_ridge_solution() -> None:
    rng = np.random.default_rng(0)
    X, A, on = rng.normal(size=(40, 16)), rng.normal(size=(40, 8)), rng.random(40) < 0.7
    model = M.init(M.RankDims(query_dim=16, action_dim=8), M.rank_params(action_lambda=0.5)).actions
    for x, a, enabled in zip(X, A, on):
        model = M.learn_actions(model, jnp.asarray(x, jnp.float32), jnp.asarray(a, jnp.float32), bool(enabled))
    W = np.linalg.solve(X[on].T @ X[on] + 0.5 * np.eye(16), X[on].T @ A[on])  # only the enabled pairs
    assert int(model.n) == int(on.sum())
    np.testing.assert_allclose(np.asarray(model.W), W, atol=2e-4)


def test_action_model_ranks_the_memory_whose_actions_the_words_predict() -> None:
    """Trained on (question, actions) pairs, ŝ prefers the memory with the predicted actions even
    when another memory's question shares more words with the query."""
    pairs = [("how many rows have status open", "SELECT COUNT(*) FROM t WHERE status = 'open'"),
             ("how many orders were late", "SELECT COUNT(*) FROM orders WHERE late = 1"),
             ("list the names sorted by age", "SELECT name FROM p ORDER BY age"),
             ("list the cities sorted by size", "SELECT city FROM c ORDER BY size")] * 3
    model = M.init(M.RankDims(), M.rank_params()).actions
    for q, a in pairs:
        model = M.learn_actions(model, jnp.asarray(query_vectors(q)), jnp.asarray(action_vectors(a)))
    query = jnp.asarray(query_vectors("how many cities are sorted here"))
    counting, sorting = action_vectors(["SELECT COUNT(*) FROM x WHERE y = 2", "SELECT z FROM x ORDER BY w"])
    s = M.pair_scores(model, query, jnp.asarray(np.stack([counting, sorting])))
    assert float(s[0]) > float(s[1])


def test_text_features_are_words_and_bigrams_presence_only() -> None:
    feats = text_features("GROUP BY a, b GROUP BY", actions=True)
    assert feats[:3] == ["w:group", "w:by", "w:a"] and "w:," in feats and "b:group by" in feats
    assert len(feats) == len(set(feats))
    v = query_vectors("Which customers?")
    assert v.shape == (512,) and abs(float(np.linalg.norm(v)) - 1) < 1e-6
    assert not np.any(query_vectors(""))


# ------------------------------------------------------------------ the lift model
def _ring(psi: np.ndarray, y: np.ndarray) -> tuple[jax.Array, ...]:
    return (jnp.asarray(psi, jnp.float32), jnp.asarray(y, jnp.float32), jnp.zeros(len(y), jnp.float32),
            jnp.ones(len(y), bool))


@pytest.mark.parametrize("signal", [True, False])
def test_evidence_frees_a_feature_only_when_the_rewards_support_it(signal: bool) -> None:
    rng = np.random.default_rng(1)
    n = 256
    bump = (rng.random(n) < 0.5).astype(float)
    logits = (-2.0 * bump) if signal else np.zeros(n)
    y = np.where(rng.random(n) < 1 / (1 + np.exp(-logits)), 1.0, -1.0)
    psi = np.zeros((n, M.N_PAIR))
    psi[:, 0], psi[:, 3] = 1.0, bump
    lam = jnp.ones(M.N_PAIR)
    adaptive = jnp.asarray([0, 0, 0, 1, 1, 1, 1], jnp.float32)
    grid = jnp.asarray([1.0, 3.0, 10.0, 30.0, 100.0])
    theta, chol = M.fit_by_evidence(*_ring(psi, y), jnp.zeros(M.N_PAIR), jnp.zeros(M.N_PAIR), lam, adaptive, grid)
    free, _ = M.newton_fit(*_ring(psi, y), jnp.zeros(M.N_PAIR), jnp.zeros(M.N_PAIR), lam)
    assert np.all(np.isfinite(np.asarray(chol)))
    if signal:  # a strong effect: the smallest ridge wins and the weight is learned
        assert float(theta[3]) < -1.0 and abs(float(theta[3]) - float(free[3])) < 1e-3
    else:  # no effect: shrunk harder than the plain ridge fit
        assert abs(float(theta[3])) < abs(float(free[3]))


def _chooser(**overrides: Any) -> tuple[M.RankState, M.RankParams]:
    hp = M.rank_params(**overrides)
    return M.init(M.RankDims(query_dim=8, action_dim=4, key_dim=8, window=16, null_window=8), hp), hp


def test_choose_prefers_the_higher_predicted_overlap_and_abstains_on_predicted_harm() -> None:
    state, hp = _chooser()
    state = state._replace(actions=state.actions._replace(W=jnp.eye(8, 4)))  # â = the first 4 word dims
    x = jnp.asarray([1, 0, 0, 0, 0, 0, 0, 0], jnp.float32)
    key = jnp.zeros(8).at[0].set(1.0)
    acts = jnp.asarray([[0, 1, 0, 0], [1, 0, 0, 0], [0, 0, 1, 0]], jnp.float32)
    cos = jnp.asarray([0.5, 0.2, 0.9])
    valid = jnp.asarray([True, True, False])
    _, choice = M.choose(state, hp, key, x, cos, acts, valid)
    assert int(choice.index) == 1 and float(choice.gain[2]) == -np.inf  # ŝ beats cosine; invalid never chosen
    harmful = state._replace(theta=jnp.asarray([-6.0, 1.0, 2.0, 0, 0, 0, 0]), chol=jnp.eye(M.N_PAIR) * 0.01)
    _, choice = M.choose(harmful, hp, key, x, cos, acts, valid)
    assert int(choice.index) == -1 and int(choice.best) == 1
    _, choice = M.choose(harmful, hp._replace(abstain=jnp.asarray(0.0)), key, x, cos, acts, valid)
    assert int(choice.index) == 1
    unsure = harmful._replace(chol=jnp.eye(M.N_PAIR) * 10.0)  # the same mean, little evidence: optimism injects
    _, choice = M.choose(unsure, hp, key, x, cos, acts, valid)
    assert int(choice.index) == 1
    _, choice = M.choose(unsure, hp._replace(optimism=jnp.asarray(0.0)), key, x, cos, acts, valid)
    assert int(choice.index) == -1


def test_rank_params_reject_unknown_names_and_bad_shapes() -> None:
    with pytest.raises(ValueError, match="unknown rank hyperparameter"):
        M.rank_params(margn=0.1)
    with pytest.raises(ValueError, match="theta0 must have shape"):
        M.rank_params(theta0=(1.0, 2.0))
    assert M.rank_params(lam=2.0).lam.shape == (M.N_PAIR,)


def test_standalone_run_learns_and_stays_finite() -> None:
    dims = S.Dims(rank=M.RankDims(query_dim=16, action_dim=8, key_dim=16, window=32, null_window=16), capacity=8,
                  k_candidates=4)
    rng = np.random.default_rng(3)
    T = 60
    unit = lambda n, d: (lambda v: v / np.linalg.norm(v, axis=1, keepdims=True))(rng.normal(size=(n, d)))
    stream = S.Stream(*(jnp.asarray(unit(T, d), jnp.float32) for d in (16, 16, 8)))
    rewards = jnp.asarray(rng.random(T) < 0.6)
    state, sel, r = jax.jit(lambda: S.run(S.init(dims, S.params()), stream, S.params(), dims,
                                          lambda t, m: rewards[t].astype(jnp.int32)))()
    assert int(state.rank.actions.n) == int(np.sum(r)) and int(state.bank.next) == int(np.sum(r))
    assert np.all(np.isfinite(np.asarray(state.rank.theta))) and np.all(np.isfinite(np.asarray(state.rank.actions.W)))
    ids = np.asarray(sel.memory_id)
    assert np.all(ids < np.arange(T))  # only earlier tasks' memories are ever injected


# ------------------------------------------------------------------ the policy's inputs
@dataclasses.dataclass(frozen=True)
class GoldTask:
    sample_index: int
    query_text: str
    skill_list: tuple[str, ...]
    answer_sql: str
    answer_direct: Any
    env: str = "db"

    @property
    def task_id(self) -> str:
        return f"db-{self.sample_index}"


def _episode(i: int) -> tuple[GoldTask, list[Turn], int]:
    kinds = ("COUNT(*)", "name", "AVG(age)")
    sql = f"SELECT {kinds[i % 3]} FROM t{i % 4} WHERE k = {i}" + (" ORDER BY name" if i % 2 else "")
    task = GoldTask(i, f"Question {i}: how many rows of table t{i % 4} match key {i}?", (f"skill{i % 3}", "select"),
                    sql, [(i,)])
    turns = [Turn(0, f"Action: Operation\n```sql\n{sql}\n```", f"[({i},)]", {"kind": "sql", "sql": sql}),
             Turn(1, f"Action: Answer\nFinal Answer: [({i},)]", "", {"kind": "answer", "answer": f"[({i},)]"})]
    return task, turns, int((i * 7) % 3 != 0)


def _drive(policy: Any, scramble: bool) -> list[dict[str, Any]]:
    logs = []
    for i in range(24):
        task, turns, reward = _episode(i)
        if scramble:  # everything a method must not read, changed; the question and trajectory kept
            task = dataclasses.replace(task, sample_index=1000 + 3 * i, skill_list=("x", f"y{i}"),
                                       answer_sql="DROP TABLE t", answer_direct=[("wrong",)])
        memories = policy.retrieve(task)
        policy.update(task, memories, Outcome(reward, "completed"), turns)
        logs.append(policy.take_log())
    return logs


def test_policy_decisions_ignore_skills_task_ids_and_gold_answers() -> None:
    from agent.policies.registry import make_policy

    real = _drive(make_policy("tokenworth-rank", "db", DB, seed=2), scramble=False)
    blind = _drive(make_policy("tokenworth-rank", "db", DB, seed=2), scramble=True)
    assert [r["selection"] for r in real] == [b["selection"] for b in blind]
    assert [r["offer"] for r in real] == [b["offer"] for b in blind]
    assert any(r["selection"]["memory_id"] is not None for r in real)  # the run did inject memories


def test_policy_reads_only_question_and_memory_texts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every text the policy hashes is a task's question or a memory's action text; and its
    constructor takes no simulator parameters."""
    import inspect

    from agent.policies import tokenworth_rank
    from agent.policies.registry import make_policy
    from tokenworth_jax.rank import text

    seen: list[str] = []
    for name in ("query_vectors", "action_vectors"):
        original = getattr(text, name)
        monkeypatch.setattr(text, name, lambda texts, *a, _f=original, **k: (seen.append(texts), _f(texts, *a, **k))[1])
    policy = make_policy("tokenworth-rank", "db", DB, seed=0)
    allowed = set()
    for i in range(10):
        task, turns, reward = _episode(i)
        allowed.add(task.query_text)
        memory = build_memory("db", task, turns, reward, DB)
        allowed.add(memory.action_text if memory else "")
        policy.update(task, policy.retrieve(task), Outcome(reward, "completed"), turns)
    assert seen and set(seen) <= allowed | {""}
    params = set(inspect.signature(tokenworth_rank.TokenWorthRankPolicy.__init__).parameters)
    assert params == {"self", "env", "budget", "seed", "overrides"}


def test_policy_resume_equals_uninterrupted(tmp_path) -> None:
    from agent.runner import comparable, run_stream
    from tests.fakes import FakeBackbone, FakeDBEnv, make_tasks

    tasks = make_tasks(14)
    reference = run_stream("tokenworth-rank", "db", tasks, FakeBackbone(), DB, 1, tmp_path / "ref", env=FakeDBEnv())
    out = tmp_path / "split"
    run_stream("tokenworth-rank", "db", tasks, FakeBackbone(), DB, 1, out, env=FakeDBEnv(), stop_after=5)
    resumed = run_stream("tokenworth-rank", "db", tasks, FakeBackbone(), DB, 1, out, env=FakeDBEnv())
    assert comparable(resumed) == comparable(reference)


# ------------------------------------------------------------------ memory action text
def test_memory_action_text_holds_the_actions_the_text_shows() -> None:
    task, turns, _ = _episode(5)
    memory = build_memory("db", task, turns, 1, DB)
    assert memory.action_text == task.answer_sql and task.answer_sql in memory.text
    old = {k: v for k, v in memory.as_dict().items() if k != "action_text"}
    assert Memory.from_dict(old).action_text == ""  # checkpoints from before the field load


# ------------------------------------------------------------------ the instrument
def test_ranking_instrument_measures_j_harm_and_auc() -> None:
    from bench.ranking import pair_auc, summarise, task_rows

    assert pair_auc([0.9, 0.1, 0.5], [True, False, False]) == 1.0
    assert pair_auc([0.1, 0.9], [True, False]) == 0.0
    assert pair_auc([0.5, 0.5], [True, False]) == 0.5
    assert pair_auc([1.0, 2.0], [True, True]) is None

    def record(i: int, skills: list[str], injected: int | None, wrote: int | None, cands: list[int]) -> dict:
        sel = {"candidate_ids": cands, "relevance": [1.0 - 0.1 * k for k in range(len(cands))],
               "scores": [0.1 * k for k in range(len(cands))], "memory_id": injected}
        return {"index": i, "task_id": f"db-{i}", "env": "db", "reward": 0, "skill_list": skills,
                "injected_memory_id": injected, "stream": {"seed": 0},
                "decision": {"selection": sel, "offer": None if wrote is None else {"memory_id": wrote}}}

    recs = [record(0, ["a", "b"], None, 0, []), record(1, ["c"], None, 1, [0]),
            record(2, ["a", "b"], 0, None, [1, 0]), record(3, ["a", "b"], 1, None, [1, 0])]
    rows = task_rows(recs)
    assert rows[2]["j"] == 1.0 and not rows[2]["harmful"]
    assert rows[3]["j"] == 0.0 and rows[3]["harmful"]
    assert rows[2]["j_top"] == 0.0 and rows[2]["j_best"] == 1.0  # recall order: memory 1 is the most similar
    summary = summarise(rows)
    assert summary["harmful"] == 0.25 and summary["j_chosen"] == 0.5 and summary["injected"] == 0.5


# ------------------------------------------------------------------ the research lab
def test_lab_runs_db_and_a_stream(data_dir) -> None:
    """Smoke: the lab's DB run and a relevance ≠ worth stream produce sane measures; the lab's
    reward is the simulator's own (bench.controller.simdb, checked against sim.decide elsewhere)."""
    from pathlib import Path

    from bench.rank import lab

    if not (Path(data_dir) / "db_bench").exists():
        pytest.skip(f"DB task data not found under {data_dir}")
    db = lab.Lab("db", 40, [0])
    none, ranked = (db.run(0, S.params(**lab.CONFIGS[name])) for name in ("no memory", "default"))
    assert none["injected"] == 0 and ranked["injected"] > 0 and 0 <= ranked["harmful"] <= ranked["injected"]
    assert 0 <= ranked["j"] <= 1 and ranked["j_best"] >= ranked["j_top"] - 1e-9
    trap = lab.StreamLab("trap", 80, [0])
    row = trap.run(0, S.params())
    assert row["oracle"] > row["none"] and 0 <= row["injected"] <= 1
