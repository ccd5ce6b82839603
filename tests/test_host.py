"""The stateful host wrapper: protocol rules, input validation, checkpoints."""

from __future__ import annotations

import numpy as np
import pytest

import tokenworth_jax as tw
from tokenworth_jax.pytree import to_numpy


def _snapshot(ctl):
    return to_numpy(ctl.state), dict(ctl.texts), ctl.phase


def _same(a, b):
    assert a[1] == b[1] and a[2] == b[2]
    for k in a[0]:
        np.testing.assert_array_equal(a[0][k], b[0][k], err_msg=k)


@pytest.fixture()
def ctl():
    c = tw.Controller(*tw.preset("db", spec_overrides=dict(dim=64, capacity=4)))
    for i in range(3):
        c.select(f"find rows where value is {i}")
        c.observe(1)
        c.offer(f"SELECT * FROM t WHERE v = {i}", key_text=f"find rows where value is {i}")
    return c


BAD_CALLS = {
    "select while a task is open": (lambda c: (c.select("a"), c.select("b")), tw.ProtocolError, 1),
    "observe without a task": (lambda c: c.observe(1), tw.ProtocolError, 0),
    "observe twice": (lambda c: (c.select("a"), c.observe(1), c.observe(1)), tw.ProtocolError, 2),
    "reward 2": (lambda c: (c.select("a"), c.observe(2)), ValueError, 1),
    "reward 0.5": (lambda c: (c.select("a"), c.observe(0.5)), ValueError, 1),
    "reward nan": (lambda c: (c.select("a"), c.observe(float("nan"))), ValueError, 1),
    "offer after failure": (lambda c: (c.select("a"), c.observe(0), c.offer("m")), tw.ProtocolError, 2),
    "offer before observe": (lambda c: (c.select("a"), c.offer("m")), tw.ProtocolError, 1),
    "offer twice": (lambda c: (c.select("a"), c.observe(1), c.offer("m"), c.offer("m2")), tw.ProtocolError, 3),
    "empty memory text": (lambda c: (c.select("a"), c.observe(1), c.offer("  ")), ValueError, 2),
    "non-finite query vector": (lambda c: c.select(np.full(64, np.nan)), ValueError, 0),
    "wrong-shape query vector": (lambda c: c.select(np.ones(63)), ValueError, 0),
    "memory text not a string": (lambda c: (c.select("a"), c.observe(1), c.offer(123)), ValueError, 2),
    "end_task while open": (lambda c: (c.select("a"), c.end_task()), tw.ProtocolError, 1),
}


@pytest.mark.parametrize("name", list(BAD_CALLS))
def test_protocol_violations_raise_and_leave_state_unchanged(ctl, name):
    fn, error, n_ok = BAD_CALLS[name]
    # replay the valid prefix of the calls, snapshot, then check the failing call changes nothing
    calls = []

    class Recorder:
        def __getattr__(self, attr):
            def call(*a, **k):
                calls.append((attr, a, k))
            return call

    try:
        fn(Recorder())
    except Exception:
        pass
    for attr, a, k in calls[:n_ok]:
        getattr(ctl, attr)(*a, **k)
    before = _snapshot(ctl)
    attr, a, k = calls[n_ok]
    with pytest.raises(error):
        getattr(ctl, attr)(*a, **k)
    _same(before, _snapshot(ctl))


def test_selection_returns_texts_and_candidates(ctl):
    sel = ctl.select("find rows where value is 1")
    assert sel.memory_text == "SELECT * FROM t WHERE v = 1"
    assert sel.memory_id == sel.candidate_ids[sel.chosen]
    assert len(sel.scores) == len(sel.candidate_ids) == 3
    ctl.observe(0)
    bank = {m["id"]: m for m in ctl.bank()}
    assert bank[sel.memory_id]["d"] == 1 and bank[sel.memory_id]["u"] == pytest.approx(1.0 - 0.45)


def test_evicted_texts_are_dropped_and_bank_stays_bounded(ctl):
    for i in range(3, 30):
        ctl.select(f"question {i} " * (i % 5 + 1))
        ctl.observe(1)
        dec = ctl.offer(f"memory {i}", key_text=f"totally different topic {i * 7919}")
        if dec.evicted_id is not None:
            assert dec.evicted_id not in ctl.texts
    assert len(ctl.bank()) <= 4
    assert set(ctl.texts) == {m["id"] for m in ctl.bank()}


def test_state_dict_round_trip_resumes_identically(ctl):
    ctl.select("find rows where value is 2")
    ctl.observe(1)
    twin = tw.Controller.from_state_dict(ctl.state_dict())
    for c in (ctl, twin):
        c.offer("new memory", key_text="brand new")
    a = [ctl.select(f"q{i}").as_dict() for i in range(1)]
    b = [twin.select(f"q{i}").as_dict() for i in range(1)]
    assert a == b
    _same(_snapshot(ctl), _snapshot(twin))


def test_checkpoint_shape_mismatch_is_rejected(ctl):
    data = ctl.state_dict()
    key = next(k for k in data["state"] if k.endswith(".w"))
    data["state"][key] = np.zeros(5, np.float32)
    with pytest.raises(ValueError, match="checkpoint state leaf .base.w has"):
        tw.Controller.from_state_dict(data)


def test_checkpoint_of_an_older_layout_is_refused_naming_it(ctl):
    """Checkpoints written before the state had one field per part (layout 1) are refused in one line."""
    data = ctl.state_dict()
    old = {k: v for k, v in data.items() if k != "layout"}
    with pytest.raises(ValueError, match="layout 1; this version reads layout 2"):
        tw.Controller.from_state_dict(old)
    renamed = dict(data, state={k.replace(".base.w", ".w"): v for k, v in data["state"].items()})
    with pytest.raises(ValueError, match="does not know"):
        tw.Controller.from_state_dict(renamed)


def test_read_state_is_a_view_the_live_state_catches_up_to(ctl):
    """Reading .state after observe shows the observed state; the next fused call makes the same one."""
    n = int(ctl.state.clock.n_feedback)
    ctl.select("find rows where value is 1")
    ctl.observe(0)
    seen = ctl.state
    assert int(seen.pending.reward) == 0 and int(seen.clock.n_feedback) == n + 1
    ctl.end_task()
    closed = ctl.state
    assert int(closed.clock.t) == 4 and int(closed.pending.reward) == -1
    twin = tw.Controller.from_state_dict(ctl.state_dict())
    assert ctl.select("q").as_dict() == twin.select("q").as_dict()
    _same(_snapshot(ctl), _snapshot(twin))


def test_plus_selection_reports_the_modes_estimates_and_paper_reports_none(ctl):
    sel = ctl.select("find rows where value is 1")
    assert sel.p0 is None and sel.advantage is None and sel.abstained is False
    plus = tw.Controller.from_preset("db", plus=True, spec_overrides=dict(dim=64, capacity=4))
    first = plus.select("a question")
    assert 0 < first.p0 < 1 and first.advantage is None  # empty bank: nothing to predict a gain for
    plus.observe(1)
    plus.offer("an answer", key_text="a question")
    second = plus.select("a question")
    assert isinstance(second.advantage, float) and np.isfinite(second.advantage)
    assert second.abstained == (second.memory_id is None)
