"""``tokenworth-bench`` (or ``python -m tokenworth_bench``): the benchmarks.

``agent`` writes into a run folder under ``runs/`` unless ``--publish`` (``bench/results/``);
the controller and engine benchmarks write their tables under ``bench/results/`` (``--out``
elsewhere): they are the committed measurements ``make bench`` regenerates.

The benchmarks sit on top of the harness (``bench`` imports ``agent``, never the reverse), so
they have their own entry point instead of being a ``tokenworth`` subcommand. Each command
hands its arguments to the benchmark's own parser, so ``tokenworth-bench controller --help``
lists that benchmark's options.
"""

from __future__ import annotations

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="The benchmarks. `tokenworth-bench COMMAND --help` lists a benchmark's options, and where "
                       "it writes.")
PASS_THROUGH = {"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []}


@app.command("controller", context_settings=PASS_THROUGH, add_help_option=False)
def bench_controller(ctx: typer.Context) -> None:
    """Controller suite: per-task cost vs NumPy, roofline, bank scaling, sweeps (`--full` for full sizes)."""
    from tokenworth_bench.controller.suite import main as suite_main

    suite_main(list(ctx.args))


@app.command("agent", context_settings=PASS_THROUGH, add_help_option=False)
def bench_agent(ctx: typer.Context) -> None:
    """Table-1-shaped comparison of all policies on DB and OS over seeds (mean ± std), into a run folder."""
    from tokenworth_bench.agent import main as agent_main

    agent_main(list(ctx.args))


@app.command("engine-speed", context_settings=PASS_THROUGH, add_help_option=False)
def bench_engine_speed(ctx: typer.Context) -> None:
    """Lockstep engine vs sequential path, behind llama.cpp (SmolLM2) or the GPU-economics server."""
    from tokenworth_bench.engine_speed import main as engine_speed_main

    engine_speed_main(list(ctx.args))


@app.command("ray-scaling", context_settings=PASS_THROUGH, add_help_option=False)
def bench_ray_scaling(ctx: typer.Context) -> None:
    """The same run in process, on one Ray node and on two (each with its own server replica)."""
    from tokenworth_bench.ray_scaling import main as ray_scaling_main

    ray_scaling_main(list(ctx.args))


@app.command("engine-projection", context_settings=PASS_THROUGH, add_help_option=False)
def bench_engine_projection(ctx: typer.Context) -> None:
    """GPU hours of DB/OS/KG x 5 methods x 3 seeds on one A800: sequential vs lockstep vs continuous."""
    from tokenworth_bench.engine_projection import main as engine_projection_main

    engine_projection_main(list(ctx.args))


@app.command("bigcodebench-gold", context_settings=PASS_THROUGH, add_help_option=False)
def bench_bigcodebench_gold(ctx: typer.Context) -> None:
    """BigCodeBench: every reference solution (and its mutant) through the sandboxed official evaluator."""
    from tokenworth_bench.bigcodebench_gold import main as gold_main

    gold_main(list(ctx.args))


@app.command("ranking", context_settings=PASS_THROUGH, add_help_option=False)
def bench_ranking(ctx: typer.Context) -> None:
    """Which memory each method injects: J chosen / top-cos / best, rank AUC, harmful rate (sim runs)."""
    from tokenworth_bench.ranking import main as ranking_main

    ranking_main(list(ctx.args))


@app.command("alfworld-replay", context_settings=PASS_THROUGH, add_help_option=False)
def bench_alfworld_replay(ctx: typer.Context) -> None:
    """ALFWorld gold replay: every manifest walkthrough wins in the real engine; truncated/reversed plans do not."""
    from tokenworth_bench.alfworld_replay import main as replay_main

    replay_main(list(ctx.args))


if __name__ == "__main__":  # pragma: no cover
    app()
