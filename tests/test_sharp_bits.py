"""The "Sharp bits" page (docs/api/sharp_bits.rst) says only what is true.

* its misuse table is read from the page, and every cell is run: the plain functions, tw.checked and the host
  Controller each get what the cell's first word says (an exception class, a decision code, "no-op", ...);
  a row without a case here, or a case without a row, fails;
* its differentiation claims: grad through select and worth (query, memory, float hyperparameters), no reverse
  mode through a refit or a stream (lax.while_loop), forward mode through both;
* what a user's own jit does with int64 ids under JAX's default 32-bit mode (they wrap round at jit's boundary,
  before the library runs).
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import checkify

import tokenworth_jax as tw

from tests.controller_helpers import (SMALL_SPEC, assert_no_callback_log, clustered_stream, made_for, same,
                                      small_setup)

pytestmark = pytest.mark.library  # imports nothing of the harness: runs in the library's own venvs too

PAGE = Path(__file__).resolve().parents[1] / "docs" / "api" / "sharp_bits.rst"
PATHS = ("plain", "checked", "Controller")
T = 6


def misuse_table() -> dict[str, tuple[str, str, str]]:
    """{row label: (plain, checked, Controller) outcome}: the first word of each cell of the page's misuse table."""
    text = PAGE.read_text()
    table = text[text.index(".. misuse-table"):]
    rows = re.findall(r"^   \* - (.*?)\n((?:     - .*\n?)+)", table, re.M)
    out = {}
    for label, cells in rows[1:]:  # the first row is the header
        words = [re.sub(r"[`:,]", "", cell.split()[0]) for cell in re.findall(r"^     - (.*)$", cells, re.M)]
        assert len(words) == 3, (label, words)
        out[label] = tuple(words)
    return out


# ----- the state of a task in each phase ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def s():
    spec, hp = small_setup(jnp.float32)
    q, m, _ = clustered_stream(seed=11, T=T, dim=spec.dim)
    q, m = jnp.asarray(q, jnp.float32), jnp.asarray(m, jnp.float32)
    events = tw.Event(q, jnp.ones(T, jnp.int32), m, jnp.arange(T, dtype=jnp.int32))
    idle, _ = tw.run(tw.init(spec, hp), events, hp, spec)  # a bank with memories
    opened, _ = tw.select(idle, q[0], hp, spec)
    judged = tw.observe(opened, 1, hp, spec)
    failed = tw.observe(opened, 0, hp, spec)
    fresh = rng_unit(spec.dim)  # a memory unlike the bank's: admitted
    offered, dec = tw.offer(judged, fresh, 40, hp, spec)
    assert tw.Admission(int(dec.code)).name.startswith("ADMITTED")
    return dict(spec=spec, hp=hp, events=events, q=q, m=m, fresh=fresh, idle=idle, opened=opened, judged=judged,
                failed=failed, offered=offered)


def rng_unit(dim):
    v = np.random.default_rng(0).normal(size=dim)
    return jnp.asarray(v / np.linalg.norm(v), jnp.float32)


def finite(tree) -> bool:
    return all(bool(np.all(np.isfinite(np.asarray(x)))) for x in jax.tree_util.tree_leaves(tree)
               if jnp.issubdtype(jnp.asarray(x).dtype, jnp.inexact))


def code(dec) -> str:
    return tw.Admission(int(dec.code)).name


def gets(call, meaning=lambda result: "accepted"):
    """What ``call()`` gets, in the table's words: the class of what it raises, else ``meaning(result)``."""
    try:
        result = jax.block_until_ready(call())
    except checkify.JaxRuntimeError:  # raised by the call (a ValueError: before ValueError)
        return "checkify.JaxRuntimeError"
    except jax.errors.JaxRuntimeError:  # raised when the program runs
        return "jax.errors.JaxRuntimeError"
    except tw.ProtocolError:
        return "ProtocolError"
    except TypeError:
        return "TypeError"
    except ValueError:
        return "ValueError"
    return meaning(result)


def both(*outcomes: str) -> str:
    """One word for several calls of a row, if they agree."""
    return outcomes[0] if len(set(outcomes)) == 1 else " / ".join(outcomes)


def unchanged_with(expected_code, before):
    return lambda out: expected_code if code(out[1]) == expected_code and same(out[0], before) else \
        f"{code(out[1])} (changed: {not same(out[0], before)})"


def no_op(before):
    return lambda out: "no-op" if same(out, before) else "changed"


def replaces(s, query):
    """The open task is dropped without feedback and the new one opened: no tick, no feedback, the new query."""
    def meaning(out):
        state = out[0]
        ok = (int(state.clock.t) == int(s["opened"].clock.t) and int(state.clock.n_feedback) ==
              int(s["opened"].clock.n_feedback) and int(state.task.progress.phase) == tw.protocol.SELECTED
              and np.array_equal(np.asarray(state.task.query.key), np.asarray(query)))
        return "replaces" if ok else "something else"
    return meaning


# ----- the host Controller in each phase ------------------------------------------------------------------------
def ctl(s, phase="idle"):
    c = tw.Controller(s["spec"], s["hp"])
    if phase in ("selected", "judged", "failed"):
        c.select("count the rows")
    if phase == "judged":
        c.observe(1)
    if phase == "failed":
        c.observe(0)
    return c


def ctl_next_id(s, next_id):
    c = ctl(s, "judged")
    c.memories.next_id = next_id
    return gets(lambda: c.offer("SELECT 1"))


def ctl_spec_changed(s):
    """A Controller whose ``spec`` was replaced under it (the attribute is public) runs its state under the new one."""
    c = ctl(s, "judged")
    c.spec = s["spec"]._replace(capacity=s["spec"].capacity + 2)
    return gets(lambda: c.offer("SELECT 1"))


def ctl_twice(s, first, second, phase="idle"):
    c = ctl(s, phase)
    first(c)
    return gets(lambda: second(c))


# ----- every row: (plain and checked: fns -> outcome, Controller: () -> outcome, or None for n/a) -------------------
def cases(s):
    spec, hp, q, m = s["spec"], s["hp"], s["q"], s["m"]
    D = spec.dim
    nan_q = q[0].at[2].set(jnp.nan)
    stacked = tw.stack_hparams([hp, hp])
    one_event = tw.Event(q[0], jnp.int32(1), m[0], jnp.int32(0))

    def nan_query(fns):
        def meaning(state):
            return "accepted" if not finite((state.base, state.residual)) else "finite"
        return gets(lambda: fns.observe(fns.select(s["idle"], nan_q, hp, spec)[0], 1, hp, spec), meaning)

    def other_dtype(fns):
        want = tw.select(s["idle"], q[0], hp, spec)
        bf16 = q[0].astype(jnp.bfloat16)
        want16 = tw.select(s["idle"], bf16.astype(jnp.float32), hp, spec)
        return both(gets(lambda: fns.select(s["idle"], np.asarray(q[0], np.float64), hp, spec),
                         lambda out: "cast" if same(out, want) else "differs"),
                    gets(lambda: fns.select(s["idle"], bf16, hp, spec),
                         lambda out: "cast" if same(out, want16) else "differs"))

    def ctl_other_dtype():
        v = np.asarray(q[0], np.float64)
        a, b = ctl(s).select(v), ctl(s).select(v.astype(np.float32))
        return "cast" if (a.chosen, a.candidate_ids, a.scores) == (b.chosen, b.candidate_ids, b.scores) else "differs"

    def ctl_float_reward():
        c = ctl(s, "selected")
        return gets(lambda: c.observe(1.0), lambda _: "accepted" if c.phase == "judged" and
                    c.offer("SELECT 1").code.startswith("ADMITTED") else "not as 1")

    jit_observe = lambda fns: jax.jit(lambda st, r: fns.observe(st, r, hp, spec))
    jit_offer = lambda fns: jax.jit(lambda i: fns.offer(s["judged"], s["fresh"], i, hp, spec))
    jit_select = lambda fns: jax.jit(lambda st, qq: fns.select(st, qq, hp, spec))

    return {
        "a query with a non-finite entry": (nan_query, lambda: gets(lambda: ctl(s).select(np.asarray(nan_q)))),
        "an offered memory with a non-finite entry": (
            lambda fns: gets(lambda: fns.offer(s["judged"], s["fresh"].at[0].set(jnp.inf), 41, hp, spec),
                             unchanged_with("INVALID_MEMORY", s["judged"])),
            lambda: gets(lambda: ctl(s, "judged").offer("x", key_text=np.full(D, np.nan)))),
        "a non-finite hyperparameter (``hp._replace(gamma=jnp.nan)``)": (
            lambda fns: gets(lambda: fns.select(s["idle"], q[0], hp._replace(gamma=jnp.float32(jnp.nan)), spec),
                             lambda out: "accepted" if not finite(out[1].scores[out[1].candidates >= 0]) else "finite"),
            lambda: gets(lambda: tw.Controller(spec, hp._replace(gamma=jnp.float32(jnp.nan))))),
        "a query of the wrong width, or a batch of queries": (
            lambda fns: both(gets(lambda: fns.select(s["idle"], jnp.ones(D + 1), hp, spec)),
                             gets(lambda: fns.select(s["idle"], q[:2], hp, spec))),
            lambda: both(gets(lambda: ctl(s).select(np.ones(D + 1))), gets(lambda: ctl(s).select(np.ones((2, D)))))),
        "a query of another float dtype (float64, bfloat16)": (other_dtype, ctl_other_dtype),
        "a graded reward (``0.9``)": (lambda fns: gets(lambda: fns.observe(s["opened"], 0.9, hp, spec)),
                                      lambda: gets(lambda: ctl(s, "selected").observe(0.9))),
        "a float reward of ``1.0``": (lambda fns: gets(lambda: fns.observe(s["opened"], 1.0, hp, spec)),
                                      ctl_float_reward),
        "a concrete integer reward other than 0 or 1 (``2``)": (
            lambda fns: gets(lambda: fns.observe(s["opened"], 2, hp, spec)),
            lambda: gets(lambda: ctl(s, "selected").observe(2))),
        "a traced reward other than 0 or 1": (
            lambda fns: gets(lambda: jit_observe(fns)(s["opened"], jnp.int32(2)), no_op(s["opened"])), None),
        "a memory id that is not an integer (``3.7``, ``True``)": (
            lambda fns: both(*(gets(lambda: fns.offer(s["judged"], s["fresh"], i, hp, spec)) for i in (3.7, True))),
            lambda: both(ctl_next_id(s, 3.7), ctl_next_id(s, True))),
        "a concrete memory id outside int32 (``np.int64(2**32)``)": (
            lambda fns: both(*(gets(lambda: fns.offer(s["judged"], s["fresh"], i, hp, spec))
                               for i in (np.int64(2**32), 2**31))),
            lambda: both(ctl_next_id(s, np.int64(2**32)), ctl_next_id(s, 2**31))),
        "a traced memory id outside int32 (``jnp.uint32(2**32 - 1)``)": (
            lambda fns: gets(lambda: jit_offer(fns)(jnp.uint32(2**32 - 1)), unchanged_with("INVALID_MEMORY",
                                                                                             s["judged"])), None),
        "a memory id below 0": (
            lambda fns: gets(lambda: fns.offer(s["judged"], s["fresh"], -1, hp, spec),
                             unchanged_with("INVALID_MEMORY", s["judged"])),
            lambda: ctl_next_id(s, -1)),
        "a memory id with a shape (``(1,)``)": (
            lambda fns: gets(lambda: fns.offer(s["judged"], s["fresh"], np.zeros(1, np.int32), hp, spec)),
            lambda: ctl_next_id(s, np.zeros(1, np.int64))),
        "``select`` while a task is open": (
            lambda fns: gets(lambda: fns.select(s["opened"], q[1], hp, spec), replaces(s, q[1])),
            lambda: ctl_twice(s, lambda c: c.select("a"), lambda c: c.select("b"))),
        "``select`` while a task is open, inside your own ``jax.jit``": (
            lambda fns: gets(lambda: jit_select(fns)(s["opened"], q[1]), replaces(s, q[1])), None),
        "``observe`` twice": (
            lambda fns: gets(lambda: fns.observe(s["judged"], 1, hp, spec), no_op(s["judged"])),
            lambda: ctl_twice(s, lambda c: c.observe(1), lambda c: c.observe(1), "selected")),
        "``offer`` before ``observe``": (
            lambda fns: gets(lambda: fns.offer(s["opened"], s["fresh"], 41, hp, spec),
                             unchanged_with("NOT_OFFERED", s["opened"])),
            lambda: gets(lambda: ctl(s, "selected").offer("SELECT 1"))),
        "``offer`` after ``observe(0)``": (
            lambda fns: gets(lambda: fns.offer(s["failed"], s["fresh"], 41, hp, spec),
                             unchanged_with("NOT_OFFERED", s["failed"])),
            lambda: gets(lambda: ctl(s, "failed").offer("SELECT 1"))),
        "``offer`` twice": (
            lambda fns: gets(lambda: fns.offer(s["offered"], s["fresh"], 41, hp, spec),
                             unchanged_with("NOT_OFFERED", s["offered"])),
            lambda: ctl_twice(s, lambda c: c.offer("SELECT 1"), lambda c: c.offer("SELECT 2"), "judged")),
        "``end_task`` before ``observe``": (
            lambda fns: gets(lambda: fns.end_task(s["opened"], spec), lambda out: "closes" if (
                int(out.clock.t) == int(s["opened"].clock.t) + 1 and int(out.task.progress.phase) == tw.protocol.IDLE
                and int(out.clock.n_feedback) == int(s["opened"].clock.n_feedback)) else "something else"),
            lambda: gets(lambda: ctl(s, "selected").end_task())),
        "stacked configurations given to a function of one": (
            lambda fns: gets(lambda: fns.select(s["idle"], q[0], stacked, spec)),
            lambda: gets(lambda: tw.Controller(spec, stacked))),
        "a state made for another spec (another ``capacity`` or ``dim``, another method's state)": (
            lambda fns: both(gets(lambda: fns.select(made_for(spec._replace(capacity=spec.capacity + 2), hp), q[0], hp,
                                                     spec)),
                             gets(lambda: fns.end_task(made_for(*tw.preset("db", method="tokenworth+",
                                                                            spec_overrides=SMALL_SPEC)), spec))),
            lambda: ctl_spec_changed(s)),
        "one task's ``Event`` given to ``tw.run``": (lambda fns: gets(lambda: fns.run(s["idle"], one_event, hp, spec)),
                                                    None),
    }


TABLE = misuse_table()


def test_the_table_and_the_cases_name_the_same_rows(s):
    assert list(TABLE) == list(cases(s))
    for label, (plain, checked, host) in TABLE.items():
        assert (host == "n/a") == (cases(s)[label][1] is None), label


@pytest.mark.parametrize("label", list(TABLE))
def test_each_misuse_gets_what_the_page_says(s, label):
    """Every cell of a row, run: plain functions, tw.checked, the host Controller."""
    fns_case, host_case = cases(s)[label]
    got = (fns_case(tw), fns_case(tw.checked), "n/a" if host_case is None else host_case())
    assert got == TABLE[label], dict(zip(PATHS, got))


# ----- differentiation ------------------------------------------------------------------------------------------
def masked_sum(scores):
    return jnp.sum(jnp.where(jnp.isfinite(scores), scores, 0.0))


def test_grad_through_select_and_worth_matches_finite_differences(s):
    spec, hp, idle, q, fresh = s["spec"], s["hp"], s["idle"], s["q"], s["fresh"]
    score = lambda query, gamma: masked_sum(tw.select(idle, query, hp._replace(gamma=gamma), spec)[1].scores)
    g_q, g_gamma = jax.grad(score, argnums=(0, 1))(q[0], hp.gamma)
    eps = 1e-3
    fd = (score(q[0], hp.gamma + eps) - score(q[0], hp.gamma - eps)) / (2 * eps)
    np.testing.assert_allclose(float(g_gamma), float(fd), rtol=2e-2)
    direction = rng_unit(spec.dim)
    fd_q = (score(q[0] + eps * direction, hp.gamma) - score(q[0] - eps * direction, hp.gamma)) / (2 * eps)
    np.testing.assert_allclose(float(g_q @ direction), float(fd_q), rtol=5e-2, atol=1e-3)
    full = jax.grad(lambda h: masked_sum(tw.select(idle, q[0], h, spec)[1].scores), allow_int=True)(hp)
    assert float(full.gamma) == pytest.approx(float(g_gamma), rel=1e-5)
    assert full.base_interval.dtype == jax.dtypes.float0  # integer leaves: float0 zeros
    worth = lambda memory: tw.worth(idle, memory, hp, spec).new
    g_m = jax.grad(worth)(fresh)
    fd_m = (worth(fresh + eps * direction) - worth(fresh - eps * direction)) / (2 * eps)
    np.testing.assert_allclose(float(g_m @ direction), float(fd_m), rtol=5e-2, atol=1e-3)
    assert bool(jnp.any(g_m != 0))


def test_reverse_mode_stops_at_a_refit_and_forward_mode_goes_through(s):
    spec, hp, opened, events = s["spec"], s["hp"], s["opened"], s["events"]
    while_loop = r"Reverse-mode differentiation does not work for lax\.while_loop"
    w_after_observe = lambda lam: jnp.sum(tw.observe(opened, 1, hp._replace(lambda_w=lam), spec).base.w)
    with pytest.raises(ValueError, match=while_loop):
        jax.grad(w_after_observe)(hp.lambda_w)
    w_after_run = lambda qs: jnp.sum(tw.run(tw.init(spec, hp), events._replace(query=qs), hp, spec)[0].base.w)
    with pytest.raises(ValueError, match=while_loop):
        jax.grad(w_after_run)(events.query)
    _, dw = jax.jvp(w_after_observe, (hp.lambda_w,), (jnp.ones_like(hp.lambda_w),))
    assert bool(jnp.isfinite(dw))
    direction = jnp.ones_like(events.query)
    w, dw = jax.jvp(w_after_run, (events.query,), (direction,))
    eps = 1e-3
    fd = (w_after_run(events.query + eps * direction) - w_after_run(events.query - eps * direction)) / (2 * eps)
    np.testing.assert_allclose(float(dw), float(fd), rtol=5e-2, atol=1e-3)


def test_the_page_says_what_your_own_jit_does_with_int64_ids(s):
    """The page's account, checked: under JAX's default 32-bit mode a user's own jax.jit casts a NumPy int64 id to
    int32 at its boundary, before any code of the library runs, so np.int64(2**32) is admitted as id 0 and
    np.int64(2**40 + 5) as 5, by the plain functions, tw.checked and tw.run alike (no error, no warning); a Python
    int beyond int32 is JAX's OverflowError; under 64-bit JAX the id reaches the program as int64 (whose rule,
    INVALID_MEMORY: tests/test_memory_ids.py); and called as they are, the library's functions refuse it."""
    text = " ".join(PAGE.read_text().split())
    for claim in ("wrapping round with no error and no warning: ``np.int64(2**32)`` arrives as ``0`` and "
                  "``np.int64(2**40 + 5)`` as ``5``", "``tw.checked`` included", "The same holds for "
                  "``jax.jit(tw.run)``", "A Python ``int`` beyond int32 is refused by JAX itself, at the same boundary "
                  "(``OverflowError``)", "Under 64-bit JAX the id keeps its int64 dtype inside your program"):
        assert claim in text, claim
    spec, hp, judged, fresh = s["spec"], s["hp"], s["judged"], s["fresh"]
    assert not jax.config.jax_enable_x64

    @jax.jit
    def yours(memory_id):
        return tw.offer(judged, fresh, memory_id, hp, spec), tw.checked.offer(judged, fresh, memory_id, hp, spec)

    for big, wrapped in ((np.int64(2**32), 0), (np.int64(2**40 + 5), 5)):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no warning either
            for state, decision in yours(big):
                assert code(decision).startswith("ADMITTED") and int(state.bank.ids[int(decision.slot)]) == wrapped
        with pytest.raises(ValueError, match=rf"^offer: input memory_id .*, got {int(big)}$"):
            tw.offer(judged, fresh, big, hp, spec)  # outside your jit: refused
    with pytest.raises(OverflowError):
        yours(2**32)
    # a stream's ids alike (jax.jit(tw.run)'s events.memory_id): the boundary is jit's, whatever it wraps
    assert jax.jit(lambda ids: ids)(np.arange(3, dtype=np.int64) + 2**32).tolist() == [0, 1, 2]
    dtype_inside = lambda i: jax.make_jaxpr(lambda x: x)(i).jaxpr.invars[0].aval.dtype  # noqa: E731
    assert dtype_inside(np.int64(2**32)) == jnp.int32
    with jax.enable_x64(True):
        assert dtype_inside(np.int64(2**32)) == jnp.int64


# ----- the page's example of a failed check inside a user's jit, against the real output --------------------------
def test_the_page_shows_what_a_failed_check_inside_a_jit_raises(capfd):
    """The block after ``.. staged-report`` is run as the doctest it is (ELLIPSIS for the frames, which depend on
    the caller's stack): the first line is XLA's, the last the check's with its task; nothing reaches stderr."""
    import doctest

    text = PAGE.read_text()
    block = text[text.index(".. staged-report"):]
    block = block[:block.index("\n---")].rsplit("\n", 1)[0]  # up to the next section's title
    spec, hp = small_setup(jnp.float32)
    globs = dict(tw=tw, jax=jax, jnp=jnp, np=np, spec=spec, hp=hp,
                 vec=lambda text: jnp.asarray(tw.featurize(text, spec.dim)))
    test = doctest.DocTestParser().get_doctest(block, globs, "sharp_bits staged-report", str(PAGE), 0)
    assert len(test.examples) == 3
    out: list[str] = []
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    runner.run(test, out=out.append)
    assert runner.failures == 0, "".join(out)
    assert_no_callback_log(capfd.readouterr().err)  # JAX's log of the failed callback is not repeated
