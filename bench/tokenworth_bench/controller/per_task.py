"""Benchmark 1: per-task cost at the paper's setting (DB preset, D = 512, B_max = 64, K_c = 12).

The state is pre-filled by running a stream first, so the windows and the bank are full and
every success runs the full admission path. Then a window of tasks is replayed phase by
phase (select, observe, offer, end_task), each phase timed on its own with
``block_until_ready``. Every task in the window is a success, so offer (admission) runs on
every task. Reported, for the jitted controller and the float64 NumPy reference alike:

* select: median;
* observe, common case: median over feedbacks that trigger no refit;
* observe, amortised: mean over the whole window, which contains the scheduled refits
  (with the DB preset and a 200-task window: 4 base+KRR refits and one AGOP+KRR refit);
* offer: median;
* mean task = select + amortised observe + offer (+ end_task for JAX, a separate call there);
* fused: the per-task time of ``tw.run`` (one ``lax.scan``) over the same window.

And the host :class:`tokenworth_jax.Controller` against the NumPy reference over a **whole
stream** (``Size.stream_tasks``, 500 at the quick size, from an empty controller, the synthetic
stream's own rewards, a memory offered after each success), in the same process: what an agent
loop pays per task, refits and compiles excluded (the host runs the stream once to compile, then
``stream_repeats`` timed runs; the reference runs it once). Target: the host at least 80x the
reference per task.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import tokenworth_jax as tw

from .common import (
    Size,
    Stream,
    block,
    db_setup,
    md_table,
    prefill,
    reference_module,
    reference_prefill,
    state_facts,
    summarise,
    synthetic_stream,
    time_call,
    write_result,
)

PHASES = ("select", "observe_no_refit", "observe_amortised", "offer", "end_task", "mean_task")


def _counts(state: tw.State) -> tuple[int, int, int]:
    return int(state.base.n_fits), int(state.residual.n_fits), int(state.residual.n_agop)


def jax_window(state: tw.State, events: tw.Event, hp: tw.HParams, spec: tw.Spec) -> dict[str, list[float]]:
    """Replay the window phase by phase; per-phase wall times in seconds, refits flagged."""
    times: dict[str, list[float]] = {k: [] for k in ("select", "observe", "offer", "end_task")}
    refit: list[bool] = []
    for i in range(events.query.shape[0]):
        t0 = time.perf_counter()
        state, _ = block(tw.select(state, events.query[i], hp, spec))
        t1 = time.perf_counter()
        before = _counts(state)
        state = block(tw.observe(state, events.reward[i], hp, spec))
        t2 = time.perf_counter()
        refit.append(_counts(state) != before)
        state, _ = block(tw.offer(state, events.memory[i], events.memory_id[i], hp, spec))
        t3 = time.perf_counter()
        state = block(tw.end_task(state, spec))
        t4 = time.perf_counter()
        for k, dt in zip(times, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
            times[k].append(dt)
    return dict(times, refit=refit)


def numpy_window(ref: Any, queries: np.ndarray, memories: np.ndarray, ids: np.ndarray) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {k: [] for k in ("select", "observe", "offer", "end_task")}
    refit: list[bool] = []
    for i in range(queries.shape[0]):
        t0 = time.perf_counter()
        ref.select(queries[i])
        t1 = time.perf_counter()
        before = (ref.n_krr_fits, ref.w.tobytes())
        ref.observe(1)
        t2 = time.perf_counter()
        n, hp = ref.n_feedback, ref.hp
        refit.append(n % hp.base_interval == 0 or n == hp.warmup or (n > hp.warmup and n % hp.krr_interval == 0)
                     or (n % hp.agop_interval == 0) or (ref.n_krr_fits, ref.w.tobytes()) != before)
        ref.offer(memories[i], int(ids[i]))
        t3 = time.perf_counter()
        ref.end_task()
        t4 = time.perf_counter()
        for k, dt in zip(times, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
            times[k].append(dt)
    return dict(times, refit=refit)


def phase_summary(win: dict[str, list[float]]) -> dict[str, Any]:
    obs = np.asarray(win["observe"])
    refit = np.asarray(win["refit"], bool)
    plain = obs[~refit] if np.any(~refit) else obs
    out: dict[str, Any] = dict(
        select=summarise(win["select"]),
        observe_no_refit=summarise(list(plain)),
        observe_refit=summarise(list(obs[refit])) if np.any(refit) else None,
        observe_amortised_ms=float(obs.mean() * 1e3),
        n_refits_in_window=int(refit.sum()),
        offer=summarise(win["offer"]),
        end_task=summarise(win["end_task"]),
    )
    out["mean_task_ms"] = (out["select"]["median_ms"] + out["observe_amortised_ms"] + out["offer"]["median_ms"]
                           + out["end_task"]["median_ms"])
    return out


def run(size: Size, out_dir: Path) -> dict[str, Any]:
    spec, hp = db_setup(size)
    n_pre, n_win = size.prefill_tasks, size.window
    stream = synthetic_stream(n_pre + max(n_win, size.numpy_window), spec.dim, seed=0)

    t0 = time.perf_counter()
    state0 = block(tw.init(spec, hp))
    state = prefill(spec, hp, stream, n_pre)
    prefill_s = time.perf_counter() - t0
    events = stream.events(n_pre, n_pre + n_win, all_success=True)

    # Compile every phase once (warm-up) and time its first call.
    compile_s = {}
    q0 = events.query[0]
    t = time.perf_counter(); s1, _ = block(tw.select(state, q0, hp, spec)); compile_s["select"] = time.perf_counter() - t
    t = time.perf_counter(); s2 = block(tw.observe(s1, jnp.int32(1), hp, spec)); compile_s["observe"] = time.perf_counter() - t
    t = time.perf_counter(); s3, _ = block(tw.offer(s2, events.memory[0], events.memory_id[0], hp, spec))
    compile_s["offer"] = time.perf_counter() - t
    t = time.perf_counter(); block(tw.end_task(s3, spec)); compile_s["end_task"] = time.perf_counter() - t
    del state0

    windows = [jax_window(state, events, hp, spec) for _ in range(size.window_repeats)]
    per_window = [phase_summary(w) for w in windows]
    jax_summary = per_window[len(per_window) // 2] if len(per_window) == 1 else _median_of(per_window)

    refits = refit_breakdown(state, hp, size.micro_repeats)
    fused, compile_run = time_call(lambda: tw.run(state, events, hp, spec), max(3, size.window_repeats))
    compile_s["run"] = compile_run
    fused_per_task_ms = fused["median_ms"] / n_win

    # The NumPy reference: same stream, same pre-fill, same window.
    t = time.perf_counter()
    ref = reference_prefill(spec, hp, stream, n_pre)
    ref_prefill_s = time.perf_counter() - t
    nw = size.numpy_window
    np_win = numpy_window(ref, stream.queries[n_pre:n_pre + nw], stream.memories[n_pre:n_pre + nw],
                          stream.ids[n_pre:n_pre + nw])
    np_summary = phase_summary(np_win)

    ratio = dict(
        select=np_summary["select"]["median_ms"] / jax_summary["select"]["median_ms"],
        observe_no_refit=np_summary["observe_no_refit"]["median_ms"] / jax_summary["observe_no_refit"]["median_ms"],
        observe_amortised=np_summary["observe_amortised_ms"] / jax_summary["observe_amortised_ms"],
        offer=np_summary["offer"]["median_ms"] / jax_summary["offer"]["median_ms"],
        mean_task=np_summary["mean_task_ms"] / jax_summary["mean_task_ms"],
        mean_task_vs_fused=np_summary["mean_task_ms"] / fused_per_task_ms,
    )
    payload = dict(
        size=size.name, spec=tw.presets.describe(spec), preset="db", prefill_tasks=n_pre, window=n_win,
        window_repeats=size.window_repeats, numpy_window=nw, state_before=state_facts(state, spec),
        jax=dict(**jax_summary, fused_run=dict(per_task_ms=fused_per_task_ms, window=fused), refits=refits,
                 dispatch_floor=dispatch_floor(state, spec, size.micro_repeats)),
        numpy=np_summary, ratio_numpy_over_jax=ratio, compile_s=compile_s,
        prefill_s=dict(jax_including_compile=prefill_s, numpy=ref_prefill_s),
        target=dict(mean_task_ms=0.5, met=bool(jax_summary["mean_task_ms"] <= 0.5)),
        notes=("Every task of the window is a success, so offer runs the full admission on each; "
               "observe_amortised is the mean over the window including its scheduled refits; "
               "mean_task = select + observe_amortised + offer + end_task, each a separate jitted call; "
               "fused_run is tw.run (lax.scan) over the same window, per task."),
    )
    payload["stream"] = host_stream(spec, hp, synthetic_stream(size.stream_tasks, spec.dim, seed=2), size.stream_repeats)
    write_result(out_dir, "per_task", payload, markdown(payload))
    return payload


def _host_pass(spec: tw.Spec, hp: tw.HParams, stream: Stream) -> tw.Controller:
    ctl = tw.Controller(spec, hp)
    for i in range(stream.queries.shape[0]):
        ctl.select(stream.queries[i])
        reward = int(stream.rewards[i])
        ctl.observe(reward)
        if reward:
            ctl.offer("memory", key_text=stream.memories[i])
        ctl.end_task()
    return ctl


def host_stream(spec: tw.Spec, hp: tw.HParams, stream: Stream, repeats: int) -> dict[str, Any]:
    """The host Controller and the NumPy reference over one whole stream, per task (wall and CPU time)."""
    T = stream.queries.shape[0]
    t0 = time.perf_counter()
    _host_pass(spec, hp, stream)  # compiles every call the stream needs
    first_s = time.perf_counter() - t0
    host = []
    for _ in range(repeats):
        w, c = time.perf_counter(), time.process_time()
        block(_host_pass(spec, hp, stream)._state)
        host.append((time.perf_counter() - w, time.process_time() - c))
    ref = reference_module().ReferenceController(spec, hp)
    w, c = time.perf_counter(), time.process_time()
    for i in range(T):
        reward = int(stream.rewards[i])
        ref.step(stream.queries[i], reward, stream.memories[i] if reward else None, i)
    ref_s = (time.perf_counter() - w, time.process_time() - c)
    host_ms = dict(wall=1e3 * statistics.median(h[0] for h in host) / T, cpu=1e3 * statistics.median(h[1] for h in host) / T,
                   wall_runs=[1e3 * h[0] / T for h in host])
    ref_ms = dict(wall=1e3 * ref_s[0] / T, cpu=1e3 * ref_s[1] / T)
    ratio = dict(wall=ref_ms["wall"] / host_ms["wall"], cpu=ref_ms["cpu"] / host_ms["cpu"])
    return dict(tasks=T, successes=int(stream.rewards.sum()), repeats=repeats, first_pass_s=first_s, host_ms=host_ms,
                reference_ms=ref_ms, ratio=ratio, target=dict(ratio=80.0, met=bool(ratio["wall"] >= 80.0)))


def refit_breakdown(state: tw.State, hp: tw.HParams, repeats: int) -> dict[str, Any]:
    """Each refit on its own, on the pre-filled state, to say what dominates an observe with refits.

    Uses the components' own fit functions (:mod:`tokenworth_jax.base_scorer`, :mod:`tokenworth_jax.residual`).
    """
    from tokenworth_jax import base_scorer, residual

    fits = (("base_newton", lambda s, h: base_scorer.fit(s.base, h.w0, h.lambda_w, h.beta_w, h.w_min, h.w_max)),
            ("krr_fit", lambda s, h: residual.fit(s.residual, h.gamma, h.lambda_krr)),
            ("agop_plus_krr", lambda s, h: residual.agop(s.residual, h.gamma, h.lambda_krr, h.beta_m, h.m_min, h.m_max)))
    out = {}
    for name, fn in fits:
        jitted = jax.jit(fn)
        summary, compile_s = time_call(lambda: jitted(state, hp), repeats)
        out[name] = dict(**summary, compile_s=compile_s)
    return out


def dispatch_floor(state: tw.State, spec: tw.Spec, repeats: int) -> dict[str, float]:
    """The cost of calling a jitted function that does almost nothing with the whole state
    (``end_task``): the per-call floor of host dispatch for a pytree of this many leaves."""
    summary, _ = time_call(lambda: tw.end_task(state, spec), repeats)
    return dict(median_ms=summary["median_ms"], state_leaves=len(jax.tree_util.tree_leaves(state)))


def _median_of(summaries: list[dict[str, Any]]) -> dict[str, Any]:
    """Pick, per phase, the window whose median is the median across windows."""
    out = dict(summaries[0])
    for key in ("select", "observe_no_refit", "offer", "end_task"):
        ranked = sorted(summaries, key=lambda s: s[key]["median_ms"])
        out[key] = ranked[len(ranked) // 2][key]
    refits = [s["observe_refit"] for s in summaries if s["observe_refit"]]
    out["observe_refit"] = sorted(refits, key=lambda r: r["median_ms"])[len(refits) // 2] if refits else None
    out["observe_amortised_ms"] = statistics.median(s["observe_amortised_ms"] for s in summaries)
    out["mean_task_ms"] = (out["select"]["median_ms"] + out["observe_amortised_ms"] + out["offer"]["median_ms"]
                           + out["end_task"]["median_ms"])
    return out


def markdown(p: dict[str, Any]) -> str:
    j, n, r = p["jax"], p["numpy"], p["ratio_numpy_over_jax"]
    rows = [
        ["select (median)", j["select"]["median_ms"], n["select"]["median_ms"], r["select"]],
        ["observe, no refit (median)", j["observe_no_refit"]["median_ms"], n["observe_no_refit"]["median_ms"],
         r["observe_no_refit"]],
        [f"observe, amortised over {p['window']} / {p['numpy_window']} (mean)", j["observe_amortised_ms"],
         n["observe_amortised_ms"], r["observe_amortised"]],
        ["offer = admission (median)", j["offer"]["median_ms"], n["offer"]["median_ms"], r["offer"]],
        ["end_task (median)", j["end_task"]["median_ms"], n["end_task"]["median_ms"], "-"],
        ["**mean task**", j["mean_task_ms"], n["mean_task_ms"], r["mean_task"]],
        ["fused tw.run, per task", j["fused_run"]["per_task_ms"], "-", r["mean_task_vs_fused"]],
    ]
    if j.get("observe_refit"):
        rows.insert(3, ["observe with a refit (median)", j["observe_refit"]["median_ms"],
                        (n["observe_refit"] or {}).get("median_ms", "-"), "-"])
    text = md_table(["phase", "JAX ms", "NumPy ms", "NumPy / JAX"], rows)
    text += "\nRefits on their own (median ms): " + ", ".join(
        f"{k} {v['median_ms']:.3g}" for k, v in j["refits"].items())
    text += (f"; dispatch floor (end_task, {j['dispatch_floor']['state_leaves']} state leaves) "
             f"{j['dispatch_floor']['median_ms']:.3g} ms.\n")
    text += "\nFirst call (trace + compile + one run, s): " + ", ".join(
        f"{k} {v:.2f}" for k, v in p["compile_s"].items()) + "\n"
    text += f"\nState before the window: {p['state_before']}\n\n{p['notes']}\n"
    s = p.get("stream")
    if s:
        text += (f"\nThe host `Controller` against the NumPy reference over one whole {s['tasks']}-task stream "
                 f"({s['successes']} successes, each offering a memory), per task (host: median of {s['repeats']} runs "
                 f"after a compiling one, {s['first_pass_s']:.1f} s):\n\n")
        text += md_table(["", "host ms", "reference ms", "reference / host"],
                         [["wall", s["host_ms"]["wall"], s["reference_ms"]["wall"], s["ratio"]["wall"]],
                          ["CPU", s["host_ms"]["cpu"], s["reference_ms"]["cpu"], s["ratio"]["cpu"]]])
        text += f"\nTarget: the host at least {s['target']['ratio']:.0f}x the reference per task: " \
                f"{'met' if s['target']['met'] else 'not met'}.\n"
    return text
