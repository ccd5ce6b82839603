"""Projection: the paper's table (DB/OS/KG × 5 methods × 3 seeds) on one A800, sequential vs engine.

``python -m tokenworth_bench engine-projection [--out bench/results/engine_speed] [--db-tasks N]``

GPU time follows from counts alone under the decode cost of :mod:`tokenworth_bench.gpu_model_server`
(``step = a + Σ_i (b + κ·c_i)``, Qwen2.5-14B-Instruct BF16 from Qwen's vLLM speed benchmark on an
A100-80GB; the A800-80GB is the same GPU with NVLink cut to 400 GB/s, which one GPU does not use).
Summing the step cost over a schedule's steps gives, for any schedule,

    GPU seconds = steps · a + tokens · (b + κ·c)

with ``tokens`` the generated tokens (every call decodes at least one) and ``c`` the mean context.
Only ``steps`` depends on the schedule:

* **sequential** (today: one conversation per call): every token is its own step, steps = tokens;
* **lockstep** (one batched generate per tick, each tick waits for its longest reply): steps =
  Σ over ticks of the longest call in the tick, where tick t holds every live stream's t-th call;
* **continuous** (no tick barrier: a stream sends its next call as soon as its reply is back, and
  the server batches whatever is in flight): steps = the largest per-stream token total, the
  critical path (harness time aside).

Token counts per call are measured with the simulated backbone: DB from full sim runs of all five
methods on the real DB environment (:func:`tokenworth_agent.experiment.runner.run_stream`, per-call accounting, the
Table A1 budget); OS and KG from the sim's own replies without memory (the KG environment needs a
Freebase endpoint this machine does not have; memory moves OS/DB token totals by about ±3 %,
bench/results/agent_*), one episode per (seed, task), the same for every method. The worst case
is every call at its cap and every round used (DB 3 × 128, OS 5 × 512, KG 15 × 128 tokens).

Writes ``<out>/projection.{json,md}``; docs/performance.md explains the arithmetic.
"""

from __future__ import annotations

from .paths import RESULTS
import argparse
import json
import tempfile
from pathlib import Path
from typing import Any, Sequence

from tokenworth_agent.storage.checkpoint import atomic_write_json, atomic_write_text
from tokenworth_bench.gpu_model_server import DecodeCost

METHODS = ("standard", "rag", "memrl", "memp", "tokenworth")
SEEDS = (0, 1, 2)
ENVS = ("db", "os", "kg")
# mean context per call (tokens): DB about what the GPU-model server measured (661 prompt tokens per
# request over 15 streams × 100 tasks; κ·61 tokens is 0.06 % of a step); OS and KG set at 2048, above
# what their instructions and a few rounds need (κ·c is ~2 % of a step)
DEFAULT_CONTEXT = {"db": 600, "os": 2048, "kg": 2048}

Calls = list[list[int]]  # one stream: per task, the output tokens of each model call in order


def db_calls_from_sim_runs(tasks: Sequence[Any], methods: Sequence[str], seeds: Sequence[int]) -> dict[str, Calls]:
    """Every (method, seed) stream of the sim on the real DB environment: its per-call tokens."""
    from tokenworth_agent.core.budget import Budget
    from tokenworth_agent.experiment.runner import run_stream
    from tokenworth_agent.sim import SimBackbone

    streams = {}
    with tempfile.TemporaryDirectory(prefix="tokenworth-projection-") as scratch:
        for seed in seeds:
            backbone = SimBackbone(seed=seed)
            for method in methods:
                records = run_stream(method, "db", tasks, backbone, Budget.for_env("db"), seed,
                                     Path(scratch) / f"seed{seed}")
                streams[f"{method}/seed{seed}"] = [
                    [int(e["tokens"]) for e in r.trajectory or ()] +
                    [int(c["tokens"]) for c in r.aux_calls if "skipped" not in c] for r in records]
    return streams


def _ends_episode(env: str, reply: str) -> bool:
    if env == "os":
        from tokenworth_agent.benchmarks.os_env.env import parse_action

        return parse_action(reply).kind != "bash"
    from tokenworth_agent.benchmarks.kg.env import parse_reply

    return parse_reply(reply).kind != "action"


def offline_calls(env: str, tasks: Sequence[Any], seed: int) -> Calls:
    """Per task, the tokens of the sim's replies without memory, round by round until the episode ends."""
    from tokenworth_agent.core.budget import Budget
    from tokenworth_agent.sim import Facts
    from tokenworth_agent.sim.backbone import SimBackbone, _apply_stop

    budget = Budget.for_env(env)
    cap = min(budget.per_call_cap, budget.max_output_tokens)
    sim = SimBackbone(seed=seed)
    calls = []
    for task in tasks:
        tokens = []
        for round_index in range(budget.max_rounds):
            reply = _apply_stop(sim.reply([], Facts(task, seed, round=round_index)), None)
            tokens.append(min(cap, sim._tokens.count(reply)))
            if _ends_episode(env, reply):
                break
        calls.append(tokens)
    return calls


def schedule_steps(streams: dict[str, Calls]) -> dict[str, int]:
    """Decode steps of each schedule for these streams (a call decodes at least one token)."""
    flat = {key: [max(1, n) for task in stream for n in task] for key, stream in streams.items()}
    tokens = sum(sum(calls) for calls in flat.values())
    ticks = max((len(calls) for calls in flat.values()), default=0)
    lockstep = sum(max((calls[t] for calls in flat.values() if t < len(calls)), default=0) for t in range(ticks))
    continuous = max((sum(calls) for calls in flat.values()), default=0)
    return {"tokens": tokens, "calls": sum(len(c) for c in flat.values()), "ticks": ticks,
            "sequential": tokens, "lockstep": lockstep, "continuous": continuous}


def gpu_seconds(steps: int, tokens: int, cost: DecodeCost, context: float) -> float:
    """``steps · a + tokens · (b + κ·c)``: the step cost summed over a schedule."""
    return steps * cost.fixed_s + tokens * (cost.per_sequence_s + cost.per_context_token_s * context)


def project_env(env: str, streams: dict[str, Calls], cost: DecodeCost, context: float,
                worst_calls_per_task: tuple[int, int]) -> dict[str, Any]:
    counts = schedule_steps(streams)
    tasks = sum(len(s) for s in streams.values())
    hours = {name: gpu_seconds(counts[name], counts["tokens"], cost, context) / 3600
             for name in ("sequential", "lockstep", "continuous")}
    rounds, cap = worst_calls_per_task
    worst_tokens = tasks * rounds * cap
    worst = {"tokens": worst_tokens,
             "sequential": gpu_seconds(worst_tokens, worst_tokens, cost, context) / 3600,
             # every call of a tick at its cap: a tick is cap steps, and there are tasks/streams × rounds ticks
             "lockstep": gpu_seconds(tasks // len(streams) * rounds * cap, worst_tokens, cost, context) / 3600}
    return {"env": env, "streams": len(streams), "tasks": tasks, "context": context, **counts, "hours": hours,
            "worst_case": worst}


def render(rows: list[dict[str, Any]], cost: DecodeCost) -> str:
    a, b, k = cost.fixed_s * 1e3, cost.per_sequence_s * 1e3, cost.per_context_token_s * 1e6
    lines = ["# projection", "",
             f"Qwen2.5-14B-Instruct BF16 on one A800/A100-80GB: a = {a:.2f} ms, b = {b:.3f} ms, κ = {k:.3f} µs/token "
             "(bench/tokenworth_bench/gpu_model_server.py). GPU hours = (steps · a + tokens · (b + κ·c)) / 3600. "
             "Harness time not included. Written by `python -m tokenworth_bench engine-projection`.", "",
             "| env | streams | tasks | calls | tokens | c | steps seq / lockstep / continuous | "
             "GPU h sequential | lockstep | continuous | seq ÷ lockstep | worst case seq / lockstep h |",
             "|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---|"]
    for r in rows:
        h, w = r["hours"], r["worst_case"]
        lines.append(f"| {r['env']} | {r['streams']} | {r['tasks']} | {r['calls']} | {r['tokens']} | {r['context']:.0f} | "
                     f"{r['sequential']} / {r['lockstep']} / {r['continuous']} | {h['sequential']:.2f} | "
                     f"{h['lockstep']:.2f} | {h['continuous']:.2f} | {h['sequential'] / h['lockstep']:.1f}× | "
                     f"{w['sequential']:.1f} / {w['lockstep']:.1f} |")
    total = {k: sum(r["hours"][k] for r in rows) for k in ("sequential", "lockstep", "continuous")}
    worst = {k: sum(r["worst_case"][k] for r in rows) for k in ("sequential", "lockstep")}
    lines.append(f"| **all** | | {sum(r['tasks'] for r in rows)} | {sum(r['calls'] for r in rows)} | "
                 f"{sum(r['tokens'] for r in rows)} | | | **{total['sequential']:.1f}** | **{total['lockstep']:.2f}** | "
                 f"**{total['continuous']:.2f}** | {total['sequential'] / total['lockstep']:.1f}× | "
                 f"{worst['sequential']:.0f} / {worst['lockstep']:.1f} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="tokenworth-bench engine-projection", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS / "engine_speed")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--db-tasks", type=int, default=None, help="DB tasks per stream [all 500]")
    parser.add_argument("--db-context", type=float, default=DEFAULT_CONTEXT["db"])
    args = parser.parse_args(argv)
    from tokenworth_agent.core.budget import Budget
    from tokenworth_agent.tasks import load_tasks

    cost = DecodeCost.qwen25_14b_a100()
    rows = []
    for env in ENVS:
        budget = Budget.for_env(env)
        tasks = load_tasks(env, args.data_dir, limit=args.db_tasks if env == "db" else None)
        if env == "db":
            streams = db_calls_from_sim_runs(tasks, METHODS, SEEDS)
        else:
            per_seed = {seed: offline_calls(env, tasks, seed) for seed in SEEDS}
            streams = {f"{m}/seed{s}": per_seed[s] for s in SEEDS for m in METHODS}
        worst = (budget.max_rounds, min(budget.per_call_cap, budget.max_output_tokens))
        context = args.db_context if env == "db" else DEFAULT_CONTEXT[env]
        rows.append(project_env(env, streams, cost, context, worst))
        print(json.dumps({k: rows[-1][k] for k in ("env", "tasks", "tokens", "hours")}), flush=True)
    text = render(rows, cost)
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out / "projection.md", text)
    result = {"cost": {"fixed_s": cost.fixed_s, "per_sequence_s": cost.per_sequence_s,
                       "per_context_token_s": cost.per_context_token_s}, "rows": rows}
    atomic_write_json(args.out / "projection.json", result)
    print(text)
    return result


if __name__ == "__main__":  # pragma: no cover
    main()
