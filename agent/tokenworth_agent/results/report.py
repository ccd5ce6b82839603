"""Summaries of a run: the metrics table (Markdown + JSON) and the cumulative-SR plot.

Metrics (spec §1): SR = mean reward × 100; OutputTok = mean output tokens per task
(execution + auxiliary); ΔTok = (OutputTok_method − OutputTok_Standard) / OutputTok_Standard,
shown only when a Standard run is part of the comparison. Per-skill SR is the SR over the
tasks whose ``skill_list`` contains that skill.

Every SR and OutputTok carries its standard error and 95 % interval (:mod:`tokenworth_agent.results.estimate`;
over several seeds clustered by task): ``sr_se`` and ``sr_ci`` = [low, high] in percent, ``output_tok_se`` and
``output_tok_ci`` in tokens. The figures draw the interval as a band.

A summary is only made from complete, clean streams: each method's records must hold task
indices 0..N-1, each exactly once, in order (:class:`ReportError` otherwise). The summary of
a run folder covers every method whose checkpoint says it finished
(:func:`finished_records`), whichever process ran it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from tokenworth_agent.results import estimate as E
from tokenworth_agent.results.record import TaskRecord


class ReportError(ValueError):
    """Records that cannot be summarised (duplicated or missing tasks)."""


def check_indices(method: str, records: Sequence[TaskRecord]) -> None:
    """Refuse records whose task indices are not exactly 0..N-1 in order."""
    indices = [r.index for r in records]
    if indices == list(range(len(indices))):
        return
    seen: dict[Any, int] = {}
    for i in indices:
        seen[i] = seen.get(i, 0) + 1
    duplicated = sorted(i for i, c in seen.items() if c > 1 and isinstance(i, int))
    top = max((i for i in indices if isinstance(i, int)), default=-1)
    missing = sorted(set(range(top + 1)) - set(seen))
    raise ReportError(
        f"{method}: its records are not tasks 0..N-1 exactly once in order ({len(duplicated)} duplicated, e.g. "
        f"{duplicated[:5]}; {len(missing)} missing, e.g. {missing[:5]}); they were written by two runs at once or "
        f"edited; redo {method} with --methods {method} --overwrite")


def finished_records(out_dir: str | Path, methods: Sequence[str]) -> dict[str, list[TaskRecord]]:
    """Records of every method in ``out_dir`` whose checkpoint says it finished, in ``methods`` order."""
    from tokenworth_agent.results.record import read_records
    from tokenworth_agent.storage.checkpoint import load_checkpoint

    out = Path(out_dir)
    found: dict[str, list[TaskRecord]] = {}
    for method in methods:
        state = load_checkpoint(out / method / "checkpoint.pkl")
        if state is not None and state.get("finished"):
            found[method] = read_records(out / method / "records.jsonl")
    return found


@dataclasses.dataclass(frozen=True)
class MethodSummary:
    method: str
    tasks: int
    sr: float  # percent
    output_tok: float
    execution_tok: float
    auxiliary_tok: float
    delta_tok: float | None  # fraction vs Standard
    statuses: dict[str, int]
    skill_sr: dict[str, float]
    skill_counts: dict[str, int]
    sr_se: float | None = None  # percent (None: a single task, no spread to estimate)
    sr_ci: tuple[float, float] = (0.0, 100.0)  # percent, 95 %
    output_tok_se: float | None = None
    output_tok_ci: tuple[float | None, float | None] = (None, None)
    skill_ci: dict[str, tuple[float, float]] = dataclasses.field(default_factory=dict)  # percent, 95 %


def percent(estimate: E.Estimate) -> tuple[float | None, tuple[float, float]]:
    """An estimate of a rate as (se, [low, high]) in percent; a NaN standard error (one task) as None."""
    se = 100.0 * float(estimate.se)
    return (se if np.isfinite(se) else None), (100.0 * float(estimate.ci_low), 100.0 * float(estimate.ci_high))


def spread(estimate: E.Estimate) -> tuple[float | None, tuple[float | None, float | None]]:
    """An estimate of a mean (tokens) as (se, [low, high]); NaN (one task) as None."""
    def plain(value: Any) -> float | None:
        return float(value) if np.isfinite(value) else None

    return plain(estimate.se), (plain(estimate.ci_low), plain(estimate.ci_high))


def summarize(records_by_method: Mapping[str, Sequence[TaskRecord]]) -> list[MethodSummary]:
    standard = records_by_method.get("standard")
    standard_tok = float(np.mean([r.output_tokens for r in standard])) if standard else None
    summaries = []
    for method, records in records_by_method.items():
        if not records:
            continue
        check_indices(method, records)
        rewards = rewards_of(records)
        tokens = np.asarray([r.output_tokens for r in records], dtype=np.float64)
        skill_hits: dict[str, list[int]] = {}
        statuses: dict[Any, int] = {}
        for r in records:
            statuses[r.status] = statuses.get(r.status, 0) + 1
            for skill in r.skill_list:
                skill_hits.setdefault(skill, []).append(int(r.reward))
        output_tok = float(tokens.mean())
        delta = (output_tok - standard_tok) / standard_tok if standard_tok else None
        sr_se, sr_ci = percent(E.rate(rewards))
        tok_se, tok_ci = spread(E.mean(tokens))
        summaries.append(MethodSummary(
            method=method,
            tasks=len(records),
            sr=100.0 * float(rewards.mean()),
            output_tok=output_tok,
            execution_tok=float(np.mean([r.execution_tokens for r in records])),
            auxiliary_tok=float(np.mean([r.auxiliary_tokens for r in records])),
            delta_tok=delta,
            statuses=dict(sorted(statuses.items())),
            skill_sr={s: 100.0 * float(np.mean(v)) for s, v in sorted(skill_hits.items())},
            skill_counts={s: len(v) for s, v in sorted(skill_hits.items())},
            sr_se=sr_se, sr_ci=sr_ci, output_tok_se=tok_se, output_tok_ci=tok_ci,
            skill_ci={s: percent(E.rate(v))[1] for s, v in sorted(skill_hits.items())},
        ))
    return summaries


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{100.0 * value:+.1f}%"


def interval(ci: Sequence[float | None], digits: int = 1) -> str:
    """``[low, high]`` as the tables print a 95 % interval."""
    low, high = ci
    if low is None or high is None:
        return "—"
    return f"[{low:.{digits}f}, {high:.{digits}f}]"


def markdown_table(summaries: Sequence[MethodSummary], title: str = "") -> str:
    lines = [f"## {title}", ""] if title else []
    lines += [
        "| Method | Tasks | SR (%) | 95 % CI | OutputTok | 95 % CI | ΔTok vs Standard | Exec tok | Aux tok | Statuses |",
        "|---|---:|---:|---|---:|---|---:|---:|---:|---|",
    ]
    for s in summaries:
        statuses = ", ".join(f"{k} {v}" for k, v in s.statuses.items())
        lines.append(f"| {s.method} | {s.tasks} | {s.sr:.1f} | {interval(s.sr_ci)} | {s.output_tok:.1f} | "
                     f"{interval(s.output_tok_ci)} | {_pct(s.delta_tok)} | {s.execution_tok:.1f} | "
                     f"{s.auxiliary_tok:.1f} | {statuses} |")
    skills = sorted({k for s in summaries for k in s.skill_sr})
    if skills:
        lines += ["", "### Per-skill SR (%) [95 % CI]", "",
                  "| Skill | n | " + " | ".join(s.method for s in summaries) + " |",
                  "|---|---:|" + "---:|" * len(summaries)]
        for skill in skills:
            n = max(s.skill_counts.get(skill, 0) for s in summaries)
            cells = " | ".join(f"{s.skill_sr[skill]:.1f} {interval(s.skill_ci[skill], 0)}" if skill in s.skill_sr
                               else "—" for s in summaries)
            lines.append(f"| {skill} | {n} | {cells} |")
        lines += ["", "n: the tasks with that skill. SR, OutputTok and their 95 % intervals: docs/results.md (\"How the "
                  "numbers are estimated\")."]
    return "\n".join(lines) + "\n"


def summaries_json(summaries: Sequence[MethodSummary]) -> list[dict[str, Any]]:
    return [dataclasses.asdict(s) for s in summaries]


def rewards_of(records: Sequence[TaskRecord]) -> np.ndarray:
    """The stream's rewards, in task order, as float64 (what every SR figure is made of)."""
    return np.asarray([r.reward for r in records], dtype=np.float64)


def cumulative_sr(rewards: Sequence[float]) -> np.ndarray:
    """SR (%) of the first 1, 2, ..., N tasks."""
    rewards = np.asarray(rewards, dtype=np.float64)
    return 100.0 * np.cumsum(rewards) / np.arange(1, len(rewards) + 1)


def rolling_sr(rewards: Sequence[float], window: int) -> np.ndarray:
    """SR (%) over the last ``window`` tasks, for tasks window..N (one value per full window)."""
    rewards = np.asarray(rewards, dtype=np.float64)
    if len(rewards) < window:
        return np.zeros(0)
    return 100.0 * np.convolve(rewards, np.ones(window) / window, mode="valid")


def cumulative_band(curves: Any) -> tuple[np.ndarray, np.ndarray]:
    """The 95 % interval (percent) of the SR of the first 1, 2, ..., N tasks: ``curves`` is one stream's rewards
    (N,) or several seeds' (S, N) over the same tasks (then clustered by task, :func:`~.estimate.rate`)."""
    curves = np.atleast_2d(np.asarray(curves, dtype=np.float64))
    seeds, n = curves.shape
    positions = np.tile(np.arange(n), seeds).reshape(seeds, n)
    low, high = np.empty(n), np.empty(n)
    for t in range(1, n + 1):
        est = E.rate(curves[:, :t].ravel(), positions[:, :t].ravel() if seeds > 1 else None)
        low[t - 1], high[t - 1] = est.ci_low, est.ci_high
    return 100.0 * low, 100.0 * high


def rolling_window(n_tasks: int) -> int:
    """A window long enough to smooth 0/1 rewards, short enough to show change: N/10 in [5, 50]."""
    return int(min(50, max(5, n_tasks // 10)))


def _zoomed(ax: Any, curves: Sequence[np.ndarray], skip: int = 0) -> None:
    """Fit the y axis to the curves (ignoring the first ``skip`` points), with a little margin."""
    values = np.concatenate([c[skip:] if len(c) > skip else c for c in curves]) if curves else np.zeros(0)
    if values.size == 0:
        return
    low, high = float(values.min()), float(values.max())
    pad = max(2.0, 0.08 * (high - low))
    ax.set_ylim(max(0.0, low - pad), min(100.0, high + pad))


def save_figure(fig: Any, path: str | Path, rect: tuple[float, float, float, float] | None = None) -> Path:
    """Lay out (within ``rect`` of the figure, leaving the rest to a figure legend or title), write
    atomically (a reader never sees half a PNG) and close ``fig``."""
    import matplotlib.pyplot as plt

    fig.tight_layout(rect=rect)
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp.png")
    fig.savefig(tmp, format="png")
    plt.close(fig)
    tmp.replace(target)
    return target


def plot_cumulative_sr(rewards_by_method: Mapping[str, Any], path: str | Path,
                       title: str = "") -> Path:
    """PNG of SR over the stream (``rewards_by_method``: each line's rewards in task order, or its seeds'
    rewards as rows of a 2-D array over the same tasks), one colour per method (Agg backend).

    Top: cumulative SR (the mean over seeds) with its 95 % interval as a band
    (:func:`cumulative_band`), the y axis zoomed to the data (the first tasks, where the running
    mean swings between 0 and 100 %, are left out of the zoom). Bottom: SR over a rolling
    window of the last W tasks (:func:`rolling_window`), which shows *when* a method gains
    or loses, where the cumulative curve only drifts.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9.5, 7.0), dpi=120, sharex=True)
    present = {m: np.atleast_2d(np.asarray(r, dtype=np.float64)) for m, r in rewards_by_method.items()
               if np.size(r)}
    n_max = max((r.shape[1] for r in present.values()), default=0)
    window = rolling_window(n_max)
    cumulative, rolling = [], []
    palette = plt.get_cmap("tab10" if len(present) <= 10 else "tab20")  # eleven methods: no colour twice
    for i, (method, seeds) in enumerate(present.items()):
        rewards = seeds.mean(axis=0)
        curve = cumulative_sr(rewards)
        x = np.arange(1, len(curve) + 1)
        line, = top.plot(x, curve, color=palette(i), label=f"{method} ({curve[-1]:.1f}%)")
        low, high = cumulative_band(seeds)
        top.fill_between(x, low, high, color=line.get_color(), alpha=0.12, lw=0)
        cumulative += [curve, low, high]
        roll = rolling_sr(rewards, window)
        if roll.size:
            bottom.plot(np.arange(window, len(rewards) + 1), roll, color=line.get_color(), label=method)
            rolling.append(roll)
    skip = _zoom_skip(n_max)
    _zoomed(top, cumulative, skip=skip)
    _zoomed(bottom, rolling)
    top.set_ylabel("cumulative SR (%)")
    bottom.set_ylabel(f"SR over last {window} tasks (%)")
    bottom.set_xlabel("task in stream")
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
        if n_max > 1:
            ax.set_xlim(1, n_max)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=9)  # outside: never hides curves
    top.set_title((f"{title}\n" if title else "") + _top_caption(skip), fontsize=10)
    return save_figure(fig, path)


def _zoom_skip(n_tasks: int) -> int:
    """Leading tasks left out of the cumulative panel's y range (their running mean swings 0-100 %)."""
    return min(20, max(0, n_tasks // 10))


def _top_caption(skip: int) -> str:
    """What the cumulative panel shows, said on it: its y range leaves out the swing of the first tasks."""
    return ("SR so far (cumulative mean; band: its 95 % interval)" + (
        f";\ny axis fitted to tasks {skip + 1} on (the first {skip} swing between 0 and 100 %)" if skip else ""))


# ------------------------------------------------------------------------- experiments (several streams)
def _std(values: Sequence[float]) -> float:
    """Population std over seeds: the one convention of every table here (bench/tokenworth_bench/agent.py too)."""
    return float(np.std(values))


def experiment_rows(finished: Sequence[tuple[Any, Sequence[TaskRecord]]]) -> list[dict[str, Any]]:
    """One row per (env, grid point, method) over the finished streams: SR and tokens over all seeds with their
    standard error and 95 % interval clustered by task (``sr_se``, ``sr_ci``, ``output_tok_se``,
    ``output_tok_ci``), and the seeds' own SRs (``sr_by_seed``, ``sr_std``: population std over seeds).

    ``finished`` holds (:class:`~tokenworth_agent.experiment.streams.StreamSpec`, records) pairs. ΔTok is
    against Standard in the same env and grid point (a method's own parameters, ``M.NAME``, left aside), when that
    stream ran.
    """
    cells: dict[tuple[str, tuple[Any, ...], str], list[tuple[int, Sequence[Mapping[str, Any]]]]] = {}
    for spec, records in finished:
        if records:
            check_indices(f"{spec.env}/seed{spec.seed}/{spec.method}", records)
            cells.setdefault((spec.env, spec.point, spec.method), []).append((spec.seed, records))
    rows = []
    for (env, point, method), runs in cells.items():
        srs = [100.0 * float(np.mean(rewards_of(recs))) for _, recs in runs]
        toks = [float(np.mean([r.output_tokens for r in recs])) for _, recs in runs]
        aux = [float(np.mean([r.auxiliary_tokens for r in recs])) for _, recs in runs]
        rewards = np.concatenate([rewards_of(recs) for _, recs in runs])
        tokens = np.concatenate([np.asarray([r.output_tokens for r in recs], dtype=np.float64) for _, recs in runs])
        tasks = [r.task_id for _, recs in runs for r in recs]
        sr_se, sr_ci = percent(E.rate(rewards, tasks))
        tok_se, tok_ci = spread(E.mean(tokens, tasks))
        rows.append({"env": env, "point": dict(point), "method": method, "seeds": sorted(s for s, _ in runs),
                     "tasks": len(runs[0][1]), "sr": float(np.mean(srs)), "sr_std": _std(srs), "sr_by_seed": srs,
                     "sr_se": sr_se, "sr_ci": list(sr_ci), "output_tok_se": tok_se, "output_tok_ci": list(tok_ci),
                     "output_tok": float(np.mean(toks)), "output_tok_std": _std(toks), "aux_tok": float(np.mean(aux)),
                     "reward_curve": np.mean([rewards_of(recs) for _, recs in runs], axis=0).tolist()
                     if len({len(recs) for _, recs in runs}) == 1 else None,
                     "reward_curves": [rewards_of(recs).tolist() for _, recs in runs]})
    for row in rows:
        shared = {k: v for k, v in row["point"].items() if "." not in k}  # a method's own parameters (M.NAME) aside
        standard = next((r for r in rows if r["env"] == row["env"] and r["point"] == shared
                         and r["method"] == "standard"), None)
        row["delta_tok"] = ((row["output_tok"] - standard["output_tok"]) / standard["output_tok"]
                            if standard and standard["output_tok"] else None)
    return rows


def experiment_table(rows: Sequence[Mapping[str, Any]], title: str = "") -> str:
    lines = [f"## {title}", ""] if title else []
    lines += ["| Env | Grid point | Method | Seeds | Tasks | SR (%) | 95 % CI | OutputTok | 95 % CI | ΔTok vs Standard "
              "| Aux tok |",
              "|---|---|---|---:|---:|---:|---|---:|---|---:|---:|"]
    for r in rows:
        point = ", ".join(f"{k}={v}" for k, v in r["point"].items()) or "—"
        lines.append(f"| {r['env']} | {point} | {r['method']} | {len(r['seeds'])} | {r['tasks']} | {r['sr']:.1f} "
                     f"| {interval(r['sr_ci'])} | {r['output_tok']:.1f} | {interval(r['output_tok_ci'])} "
                     f"| {_pct(r['delta_tok'])} | {r['aux_tok']:.1f} |")
    several = any(len(r["seeds"]) > 1 for r in rows)
    lines += ["", "95 % CI: " + ("over all seeds, clustered by task (a task's seeds are not independent draws); "
                                 if several else "") + "docs/results.md (\"How the numbers are estimated\")."]
    return "\n".join(lines) + "\n"


def budget_axis(rows: Sequence[Mapping[str, Any]]) -> str | None:
    """The one budget field the grid varies (o_max, ...), or None."""
    from tokenworth_agent.core.budget import BUDGET_AXES

    axes = {k for r in rows for k in r["point"] if k in BUDGET_AXES}
    return next(iter(axes)) if len(axes) == 1 else None


def plot_budget_levels(rows: Sequence[Mapping[str, Any]], path: str | Path, title: str = "") -> Path | None:
    """SR and OutputTok against the budget level, one line per method, its 95 % interval as a band.

    Drawn when the grid varies exactly one budget field (one row of panels per env); None otherwise.
    """
    axis = budget_axis(rows)
    if axis is None:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    envs = list(dict.fromkeys(r["env"] for r in rows))
    fig, axes = plt.subplots(len(envs), 2, figsize=(11, 4.2 * len(envs)), dpi=120, squeeze=False)
    for row_axes, env in zip(axes, envs):
        for method in dict.fromkeys(r["method"] for r in rows if r["env"] == env):
            cells = sorted((r for r in rows if r["env"] == env and r["method"] == method and axis in r["point"]),
                           key=lambda r: r["point"][axis])
            x = np.asarray([c["point"][axis] for c in cells], dtype=np.float64)
            for ax, key in zip(row_axes, ("sr", "output_tok")):
                mean = np.asarray([c[key] for c in cells])
                ci = np.asarray([[np.nan if v is None else v for v in c[f"{key}_ci"]] for c in cells], dtype=float)
                line, = ax.plot(x, mean, marker="o", label=method)
                ax.fill_between(x, ci[:, 0], ci[:, 1], color=line.get_color(), alpha=0.15, lw=0)
        seeds = max(len(r["seeds"]) for r in rows if r["env"] == env)
        for ax, label in zip(row_axes, ("SR (%)", "OutputTok (mean output tokens per task)")):
            ax.set_xlabel(f"budget level {axis}")
            ax.set_ylabel(label)
            ax.set_xscale("log", base=2) if axis == "o_max" else None
            ax.set_xticks(sorted({float(r["point"][axis]) for r in rows}))
            ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
            ax.grid(alpha=0.3)
            ax.set_title(f"{env.upper()}: {label.split(' (')[0]} vs {axis}\n(band: 95 % interval"
                         + (f", {seeds} seeds clustered by task)" if seeds > 1 else ")"), fontsize=10)
        row_axes[1].legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=9)
    if title:
        fig.suptitle(title)
    return save_figure(fig, path)


MAX_LINES = 8  # streams one cumulative_sr.png draws as lines of its own; beyond, it groups by method


def plot_experiment_sr(rows: Sequence[Mapping[str, Any]], path: str | Path, title: str = "", *,
                       streams: int) -> Path:
    """``cumulative_sr.png`` of an experiment (rows of :func:`experiment_rows`).

    Up to :data:`MAX_LINES` streams: one line per (env, method, grid point), the mean over seeds
    (:func:`plot_cumulative_sr`). More: one column of panels per (env, grid point), one colour per
    method, the same in every panel, the mean over seeds as a line and the cumulative SR's 95 % interval
    (clustered by task) as a band; cumulative SR on top, SR over a rolling window below.
    """
    if streams <= MAX_LINES:
        curves = {" ".join(x for x in (r["env"], r["method"], _point_label(r["point"])) if x): r["reward_curves"]
                  for r in rows if r["reward_curve"] is not None}
        return plot_cumulative_sr(curves, path, title)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = list(dict.fromkeys((r["env"], _point_label(r["point"])) for r in rows))
    methods = list(dict.fromkeys(r["method"] for r in rows))
    colours = {m: plt.get_cmap("tab10" if len(methods) <= 10 else "tab20")(i) for i, m in enumerate(methods)}
    columns = min(4, len(groups))
    lines = -(-len(groups) // columns)
    n_max = max((len(c) for r in rows for c in r["reward_curves"]), default=0)
    window, skip = rolling_window(n_max), _zoom_skip(n_max)
    seeds = max((len(r["reward_curves"]) for r in rows), default=0)
    # a method's streams are its seeds and its task orders: position k is the k-th task each of them ran
    band = (f"Lines: the mean over {seeds} streams (seeds × task orders) at each position; the top's band: 95 % "
            "interval, clustered by task." if seeds > 1 else "One stream; the top's band: 95 % interval.")
    width = 3.6 * columns + 1.8
    # The rolling panel has no band: one per method would hide the lines, and the paired question it
    # invites is difference_along_stream.png's, which has its band.
    caption, room = _caption([title, f"Top: {_top_caption(skip)}.",
                              f"Bottom: SR over the last {window} tasks (no band). {band}"], width)
    height = 5.2 * lines + room  # the caption gets room of its own: the panels keep their size
    fig, axes = plt.subplots(2 * lines, columns, figsize=(width, height), dpi=120, squeeze=False)
    for k, (env, point) in enumerate(groups):
        top, bottom = axes[2 * (k // columns), k % columns], axes[2 * (k // columns) + 1, k % columns]
        cumulative, rolling = [], []
        for row in (r for r in rows if (r["env"], _point_label(r["point"])) == (env, point)):
            per_seed = [c for c in row["reward_curves"] if c]
            if not per_seed or len({len(c) for c in per_seed}) != 1:
                continue
            mean_rewards = np.mean(per_seed, axis=0)
            for ax, mean, kept in ((top, cumulative_sr(mean_rewards), cumulative),
                                   (bottom, rolling_sr(mean_rewards, window), rolling)):
                if mean.size == 0:
                    continue
                x = np.arange(1, mean.size + 1) + (0 if ax is top else window - 1)
                ax.plot(x, mean, color=colours[row["method"]], lw=1.3, label=row["method"])
                kept.append(mean)
                if ax is top:
                    low, high = cumulative_band(per_seed)
                    ax.fill_between(x, low, high, color=colours[row["method"]], alpha=0.15, lw=0)
                    kept += [low, high]
        _zoomed(top, cumulative, skip=skip)
        _zoomed(bottom, rolling)
        top.set_title(f"{env.upper()}" + (f" · {point}" if point else ""), fontsize=10)
        bottom.set_xlabel("task in stream")
        for ax in (top, bottom):
            ax.grid(alpha=0.3)
            if n_max > 1:
                ax.set_xlim(1, n_max)
    for k in range(len(groups), lines * columns):  # the empty cells of the last line
        axes[2 * (k // columns), k % columns].set_visible(False)
        axes[2 * (k // columns) + 1, k % columns].set_visible(False)
    for row_axes in axes:  # one y range per row of panels, so panels side by side compare at a glance
        shown = [ax for ax in row_axes if ax.get_visible()]
        low, high = min(ax.get_ylim()[0] for ax in shown), max(ax.get_ylim()[1] for ax in shown)
        for ax in shown:
            ax.set_ylim(low, high)
    for line in range(lines):
        axes[2 * line, 0].set_ylabel("cumulative SR (%)")
        axes[2 * line + 1, 0].set_ylabel(f"SR over last {window} tasks (%)")
    _put_caption(fig, caption, height)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center right", fontsize=9, title="method")
    return save_figure(fig, path, rect=(0, 0, 1 - 1.5 / width, 1 - room / height))


def _put_caption(fig: Any, caption: str, height_in: float) -> None:
    """The caption at the figure's top, as text the layout leaves alone (``rect`` keeps its room free;
    tight_layout's own handling of a suptitle fails on tall figures)."""
    fig.text(0.5, 1 - 0.08 / height_in, caption, ha="center", va="top", fontsize=10)


def _caption(parts: Sequence[str], width_in: float) -> tuple[str, float]:
    """A figure's title lines wrapped to its width (10 pt text), and the height (inches) they take (the figure
    grows by it, so its panels keep their size: :func:`_put_caption`)."""
    import textwrap

    lines = [wrapped for part in parts if part for line in part.split("\n")
             for wrapped in textwrap.wrap(line, max(30, int(width_in * 12.5)))]
    return "\n".join(lines), 0.1 + 0.19 * len(lines)


def _point_label(point: Mapping[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in point.items())


def plot_difference_along_stream(comparisons: Sequence[Any], path: str | Path, title: str = "") -> Path | None:
    """``difference_along_stream.png``: each method's paired ΔSR to the baseline over a sliding window of the
    stream, with its pointwise 95 % interval as a band (:func:`tokenworth_agent.results.compare.along_stream`);
    one panel per method (rows) and per env and budget point (columns), one y axis for all. None when there
    is nothing to compare."""
    if not comparisons:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from tokenworth_agent.results.compare import along_stream, window_along_stream

    columns = list(dict.fromkeys((c.env, c.point) for c in comparisons))
    methods = list(dict.fromkeys(c.method for c in comparisons))
    sizes = {window_along_stream(len(np.unique(c.matched.position))) for c in comparisons}
    window = "/".join(str(w) for w in sorted(sizes))
    width = 5.2 * len(columns) + 1.0
    caption, room = _caption([title, f"Paired ΔSR to the baseline over the last {window} tasks of the stream "
                                     "(line), its 95 % interval (band, pointwise); dotted: the whole stream's ΔSR"],
                             width)
    height = 2.3 * len(methods) + 0.6 + room
    fig, axes = plt.subplots(len(methods), len(columns), figsize=(width, height), dpi=120, squeeze=False,
                             sharex="col", sharey=True)
    palette = plt.get_cmap("tab10" if len(methods) <= 10 else "tab20")
    for c in comparisons:
        ax = axes[methods.index(c.method), columns.index((c.env, c.point))]
        x, diff = along_stream(c.matched)
        colour = palette(methods.index(c.method))
        ax.fill_between(x, 100 * np.asarray(diff.ci_low), 100 * np.asarray(diff.ci_high), color=colour, alpha=0.2,
                        lw=0)
        ax.plot(x, 100 * np.asarray(diff.difference), color=colour, lw=1.3)
        ax.axhline(0.0, color="black", lw=0.8)
        ax.axhline(100 * c.sr.difference, color=colour, lw=0.9, ls=":")
        where = c.env.upper() + (f" · {c.point}" if c.point else "")
        ax.set_title(f"{c.method} − {c.baseline} ({where}): overall {100 * c.sr.difference:+.1f} pp "
                     f"[{100 * c.sr.ci_low:+.1f}, {100 * c.sr.ci_high:+.1f}]", fontsize=9)
        ax.grid(alpha=0.3)
    for ax in axes[:, 0]:
        ax.set_ylabel("ΔSR (pp)")
    for ax in axes[-1, :]:
        ax.set_xlabel("task in stream (end of the window)")
    for row in range(len(methods)):  # a method absent from a column: no empty frame
        for col in range(len(columns)):
            if not axes[row, col].has_data():
                axes[row, col].set_visible(False)
    _put_caption(fig, caption, height)
    return save_figure(fig, path, rect=(0, 0, 1, 1 - room / height))


def orders_forest(comparisons: Sequence[Mapping[str, Any]], title: str = "", dpi: float | None = None) -> Any:
    """A forest plot of the differences over task orders, drawn on the current backend (a notebook's inline one).

    Args:
        comparisons: ``tokenworth compare --json`` rows of a run of several orders (``per_order`` and
            ``over_orders``); rows without ``over_orders`` (a run of one order) are left out.
        title: a line above the panel.
        dpi: the figure's resolution; None: matplotlib's default (a notebook's rc file sets 72).

    Returns:
        The matplotlib figure, or None when no row has a difference over orders. One row per method: a
        point per order (one colour per order, the same in every row, so an order that shifts every
        method alike shows), and below them the difference over orders with its 95 % t interval (a
        diamond on a bar), its verdict written at the right.
    """
    rows = [c for c in comparisons if c.get("over_orders")]
    if not rows:
        return None
    import matplotlib.pyplot as plt

    orders = sorted({p["order"] for c in rows for p in c["per_order"]})
    palette = plt.get_cmap("tab10" if len(orders) <= 10 else "tab20")
    fig, ax = plt.subplots(figsize=(9.5, 0.8 * len(rows) + 1.6), dpi=dpi)
    for i, c in enumerate(rows):
        y = len(rows) - 1 - i  # the table's first row on top
        for p in c["per_order"]:
            k = orders.index(p["order"])
            ax.plot(p["difference"], y + 0.12 + 0.04 * (k - (len(orders) - 1) / 2), "o", ms=5, mfc="none",
                    color=palette(k % 20), label=(f"order {p['order']}" + (" (the benchmark's)" if p["order"] == 0 else "")) if i == 0 else None)
        over = c["over_orders"]
        ax.plot(over["ci"], [y - 0.18] * 2, color="black", lw=1.6)
        ax.plot(over["difference"], y - 0.18, "D", color="black", ms=6, label="over orders, 95 % CI" if i == 0 else None)
        text = (f"{over['difference']:+.1f} [{over['ci'][0]:+.1f}, {over['ci'][1]:+.1f}] pp\n"
                f"{over['favour']}/{len(c['per_order'])} orders favour; {over['verdict']}")
        ax.annotate(text.replace("-", "\u2212"), (1.02, y), va="center", xycoords=("axes fraction", "data"),
                    fontsize=8)
    ax.axvline(0.0, color="grey", lw=0.8)
    ax.set_yticks(range(len(rows)), [f"{c['method']} − {c['baseline']}" for c in reversed(rows)])
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.set_xlabel("paired ΔSR (pp)")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.12 * 6.0 / (0.8 * len(rows) + 1.6)),
              ncol=len(orders) + 1, frameon=False, handletextpad=0.2, columnspacing=1.0)
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig


def plot_orders_forest(comparisons: Sequence[Mapping[str, Any]], path: str | Path, title: str = "") -> Path | None:
    """:func:`orders_forest` written to ``path`` as a PNG (Agg backend).

    Args:
        comparisons: ``tokenworth compare --json`` rows of a run of several orders.
        path: the PNG to write (atomically).
        title: a line above the panel.

    Returns:
        ``path``, or None (nothing written) when no row has a difference over orders.
    """
    import matplotlib

    matplotlib.use("Agg")
    fig = orders_forest(comparisons, title, dpi=120)  # as the run's other figures
    return None if fig is None else save_figure(fig, path)
