"""The stateful host wrapper: protocol rules, input validation, checkpoints."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import tokenworth_jax as tw
from tokenworth_jax.controller import with_progress
from tokenworth_jax.pytree import to_numpy

pytestmark = pytest.mark.library  # imports nothing of the harness: runs in the library's own venvs too


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
    ctl.end_task()
    bank = {m["id"]: m for m in ctl.bank()}
    assert bank[sel.memory_id]["d"] == 0 and ctl.phase == "ended"  # the feedback is pending: the state says so
    ctl.select("another question")  # closes the failed task first: its credit lands
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


def test_a_spec_changed_under_the_controller_is_refused_naming_the_state_with_nothing_changed(ctl):
    """It ran the capacity-4 state under a capacity-8 program, or raised a raw shape error (the pure functions'
    refusal of a state made for another spec: tests/test_misuse.py)."""
    spec = ctl.spec
    ctl.select("find rows where value is 9")
    ctl.observe(1)
    before = _snapshot(ctl)
    ctl.spec = spec._replace(capacity=8)
    with pytest.raises(ValueError, match=r"^Controller: this state was made for another spec: state\.bank\.emb is "
                                         r"\(4, 64\) float32, where tw\.init\(spec, hp\) makes \(8, 64\) float32 for "
                                         r"this spec \(.*capacity 8.*\): make the state with tw\.init") as info:
        ctl.offer("SELECT 9")
    assert "\n" not in str(info.value)
    ctl.spec = spec
    _same(_snapshot(ctl), before)
    assert ctl.offer("SELECT 9").code.startswith("ADMITTED") or ctl.phase == "idle"  # it goes on as if never tried


def test_checkpoint_shape_mismatch_is_rejected(ctl):
    data = ctl.state_dict()
    key = next(k for k in data["state"] if k.endswith(".w"))
    data["state"][key] = np.zeros(5, np.float32)
    with pytest.raises(ValueError, match="checkpoint state leaf .base.w has"):
        tw.Controller.from_state_dict(data)


def test_checkpoint_of_an_older_layout_is_refused_naming_it(ctl):
    """Checkpoints of earlier layouts (1: before one state field per part; 2: the host's protocol flags)
    are refused in one line that says what to do."""
    data = ctl.state_dict()
    old = {k: v for k, v in data.items() if k != "layout"}
    with pytest.raises(ValueError, match="layout 1; this version reads layout 3.*--overwrite"):
        tw.Controller.from_state_dict(old)
    with pytest.raises(ValueError, match="layout 2; this version reads layout 3"):
        tw.Controller.from_state_dict(dict(data, layout=2))
    renamed = dict(data, state={k.replace(".base.w", ".w"): v for k, v in data["state"].items()})
    with pytest.raises(ValueError, match="does not know"):
        tw.Controller.from_state_dict(renamed)


def test_each_protocol_step_is_one_pure_call_and_state_is_the_live_state(ctl):
    """The open task's progress is in the device state and each closing step is one pure call: observe
    and end_task move the host's copy of the progress only (no device call: the live state is the
    same object), the call that closes the task applies its feedback (offer: tw.finish_task; the next
    select: tw.advance). .state is a copy of the live state with the host's progress written in,
    nothing recomputed, and equals what those pure functions make from the same start."""
    P = tw.protocol.Progress

    def judged(state, reward):
        return with_progress(state, tw.protocol.on_device(tw.protocol.after(
            tw.protocol.on_host(state.task.progress), "observe", reward)))

    hp, spec = ctl.hp, ctl.spec
    assert ctl.phase == "idle"  # the fixture's last task offered: that closed it
    want = ctl.state
    # a success that offers
    want, want_sel = tw.select(want, ctl.query("find rows where value is 1"), hp, spec)
    sel = ctl.select("find rows where value is 1")
    assert ctl.phase == "selected" and sel.memory_id == int(want_sel.memory_id)
    chex_equal(ctl.state, want)
    live = ctl._state
    ctl.observe(1)
    assert ctl._state is live  # no device call
    want = judged(want, 1)
    chex_equal(ctl.state, want)  # the reward recorded, the feedback pending
    assert tw.protocol.on_host(ctl.state.task.progress) == P(tw.protocol.JUDGED, 1, False)
    dec = ctl.offer("a memory", key_text="find rows where value is 1")
    want, want_dec = tw.finish_task(want, 1, ctl.memory("a memory", "find rows where value is 1"), 3, True, hp, spec)
    chex_equal(ctl.state, want)
    assert dec.code == tw.Admission(int(want_dec.code)).name and ctl.phase == "idle"
    ctl.end_task()  # nothing left to end
    chex_equal(ctl.state, want)
    # a failure, ended: its feedback and its end run with the next select
    want, _ = tw.select(want, ctl.query("q"), hp, spec)
    ctl.select("q")
    live = ctl._state
    ctl.observe(0)
    ctl.end_task()
    assert ctl._state is live
    assert ctl.phase == "ended" and tw.protocol.on_host(ctl.state.task.progress) == P(tw.protocol.ENDED, 0, False)
    assert int(ctl.state.clock.t) == int(want.clock.t)  # not applied yet: the progress says so
    want = with_progress(want, tw.protocol.on_device(tw.protocol.deferred_end(
        tw.protocol.on_host(judged(want, 0).task.progress))))
    chex_equal(ctl.state, want)
    ctl.select("q2")
    want, _, _ = tw.advance(want, 0, ctl.memory("unused"), -1, False, ctl.query("q2"), hp, spec)
    chex_equal(ctl.state, want)
    assert int(ctl.state.clock.t) == 5 and ctl.phase == "selected"
    # a checkpoint carries it all
    twin = tw.Controller.from_state_dict(ctl.state_dict())
    assert twin.phase == "selected"
    _same(_snapshot(ctl), _snapshot(twin))


def chex_equal(a, b):
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.mark.parametrize("phase", ["selected", "judged", "ended"])
def test_a_checkpoint_mid_task_resumes_the_protocol(ctl, phase):
    """The progress travels in the state: a controller restored mid-task enforces the same next step."""
    ctl.select("find rows where value is 0")
    if phase != "selected":
        ctl.observe(1)
    if phase == "ended":  # its feedback is pending in the checkpoint: the next select applies it
        ctl.end_task()
        twin = tw.Controller.from_state_dict(ctl.state_dict())
        assert twin.phase == "ended"
        assert ctl.select("next").as_dict() == twin.select("next").as_dict()
        _same(_snapshot(ctl), _snapshot(twin))
        return
    twin = tw.Controller.from_state_dict(ctl.state_dict())
    assert twin.phase == phase
    if phase == "selected":
        with pytest.raises(tw.ProtocolError, match="still open"):
            twin.select("again")
        twin.observe(1), ctl.observe(1)
    for c in (ctl, twin):
        c.offer("a memory", key_text="find rows where value is 0")
        with pytest.raises(tw.ProtocolError, match="only allowed after observe"):
            c.offer("again")
    _same(_snapshot(ctl), _snapshot(twin))


def test_a_checkpoint_with_an_unreachable_progress_is_refused(ctl):
    ctl.select("a")
    data = ctl.state_dict()
    key = next(k for k in data["state"] if k.endswith("progress.reward"))
    with pytest.raises(ValueError, match="phase 'selected' has reward 1"):
        tw.Controller.from_state_dict(dict(data, state={**data["state"], key: np.int32(1)}))


def test_the_modes_estimates_are_reported_and_the_papers_are_none(ctl):
    sel = ctl.select("find rows where value is 1")
    assert sel.p0 is None and sel.advantage is None and sel.abstained is False and sel.scorers is None
    assert "scorers" not in sel.as_dict()
    plus = tw.Controller.from_preset("db", method="tokenworth+", spec_overrides=dict(dim=64, capacity=4))
    first = plus.select("a question")
    assert 0 < first.p0 < 1 and first.advantage is None  # empty bank: nothing to predict a gain for
    plus.observe(1)
    plus.offer("an answer", key_text="a question")
    second = plus.select("a question")
    assert isinstance(second.advantage, float) and np.isfinite(second.advantage)
    assert second.abstained == (second.memory_id is None)
