"""Summaries of a run: the metrics table (Markdown + JSON) and the cumulative-SR plot.

Metrics (spec §1): SR = mean reward × 100; OutputTok = mean output tokens per task
(execution + auxiliary); ΔTok = (OutputTok_method − OutputTok_Standard) / OutputTok_Standard,
shown only when a Standard run is part of the comparison. Per-skill SR is the SR over the
tasks whose ``skill_list`` contains that skill.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np


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


def summarize(records_by_method: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[MethodSummary]:
    standard = records_by_method.get("standard")
    standard_tok = float(np.mean([r["output_tokens"] for r in standard])) if standard else None
    summaries = []
    for method, records in records_by_method.items():
        if not records:
            continue
        rewards = np.asarray([r["reward"] for r in records], dtype=np.float64)
        tokens = np.asarray([r["output_tokens"] for r in records], dtype=np.float64)
        skill_hits: dict[str, list[int]] = {}
        statuses: dict[str, int] = {}
        for r in records:
            statuses[r["status"]] = statuses.get(r["status"], 0) + 1
            for skill in r["skill_list"]:
                skill_hits.setdefault(skill, []).append(int(r["reward"]))
        output_tok = float(tokens.mean())
        delta = (output_tok - standard_tok) / standard_tok if standard_tok else None
        summaries.append(MethodSummary(
            method=method,
            tasks=len(records),
            sr=100.0 * float(rewards.mean()),
            output_tok=output_tok,
            execution_tok=float(np.mean([r["execution_tokens"] for r in records])),
            auxiliary_tok=float(np.mean([r["auxiliary_tokens"] for r in records])),
            delta_tok=delta,
            statuses=dict(sorted(statuses.items())),
            skill_sr={s: 100.0 * float(np.mean(v)) for s, v in sorted(skill_hits.items())},
            skill_counts={s: len(v) for s, v in sorted(skill_hits.items())},
        ))
    return summaries


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{100.0 * value:+.1f}%"


def markdown_table(summaries: Sequence[MethodSummary], title: str = "") -> str:
    lines = [f"## {title}", ""] if title else []
    lines += [
        "| Method | Tasks | SR (%) | OutputTok | ΔTok vs Standard | Exec tok | Aux tok | Statuses |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for s in summaries:
        statuses = ", ".join(f"{k} {v}" for k, v in s.statuses.items())
        lines.append(f"| {s.method} | {s.tasks} | {s.sr:.1f} | {s.output_tok:.1f} | {_pct(s.delta_tok)} | "
                     f"{s.execution_tok:.1f} | {s.auxiliary_tok:.1f} | {statuses} |")
    skills = sorted({k for s in summaries for k in s.skill_sr})
    if skills:
        lines += ["", "### Per-skill SR (%)", "",
                  "| Skill | n | " + " | ".join(s.method for s in summaries) + " |",
                  "|---|---:|" + "---:|" * len(summaries)]
        for skill in skills:
            n = max(s.skill_counts.get(skill, 0) for s in summaries)
            cells = " | ".join(f"{s.skill_sr[skill]:.1f}" if skill in s.skill_sr else "—" for s in summaries)
            lines.append(f"| {skill} | {n} | {cells} |")
    return "\n".join(lines) + "\n"


def summaries_json(summaries: Sequence[MethodSummary]) -> list[dict[str, Any]]:
    return [dataclasses.asdict(s) for s in summaries]


def cumulative_sr(records: Sequence[Mapping[str, Any]]) -> np.ndarray:
    rewards = np.asarray([r["reward"] for r in records], dtype=np.float64)
    return 100.0 * np.cumsum(rewards) / np.arange(1, len(rewards) + 1)


def plot_cumulative_sr(records_by_method: Mapping[str, Sequence[Mapping[str, Any]]], path: str | Path,
                       title: str = "") -> Path:
    """PNG of cumulative SR over the stream, one line per method (Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9.5, 4.5), dpi=120)
    for method, records in records_by_method.items():
        if records:
            curve = cumulative_sr(records)
            ax.plot(np.arange(1, len(curve) + 1), curve, label=f"{method} ({curve[-1]:.1f}%)")
    ax.set_xlabel("task in stream")
    ax.set_ylabel("cumulative SR (%)")
    ax.set_ylim(0, 100)
    ax.grid(alpha=0.3)
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5))  # outside: never hides the curves
    if title:
        ax.set_title(title)
    fig.tight_layout()
    target = Path(path)
    tmp = target.with_name(f".{target.name}.tmp.png")
    fig.savefig(tmp, format="png")
    plt.close(fig)
    tmp.replace(target)
    return target
