"""Plot a `tokenworth sweep --plus` grid like the paper's Table A3: one panel per swept
hyperparameter, SR against its value.

Each panel shows, per value, the mean SR over every configuration of the grid with that value
(error bars: min–max over the other parameters) and, as a line, the slice where every other
parameter is at its TokenWorth+ default. Dashed lines: reference SRs passed with ``--ref``
(e.g. the paper TokenWorth and RAG of the same seed and stream).

    python -m bench.plus.sweep_plot runs/plus/sweep-db-seed0/sweep.json \
        --ref tokenworth=29.8 --ref rag=31.6 --out bench/results/plus/sweep_db.png
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Sequence

import numpy as np


def defaults() -> dict[str, float]:
    from tokenworth_jax.config import PLUS_DEFAULTS as DEFAULTS

    return {k: v for k, v in DEFAULTS.items() if not isinstance(v, tuple)}


def plot(data: dict[str, Any], refs: dict[str, float], path: Path, note: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    streams = data["streams"]
    names = sorted({k for s in streams for k in s["config"]})
    base = defaults()
    fig, axes = plt.subplots(1, len(names), figsize=(3.6 * len(names), 3.4), squeeze=False, sharey=True)
    for ax, name in zip(axes[0], names):
        values = sorted({s["config"][name] for s in streams})
        groups = [[s["sr"] for s in streams if s["config"][name] == v] for v in values]
        mean = np.array([np.mean(g) for g in groups])
        lo = mean - np.array([np.min(g) for g in groups])
        hi = np.array([np.max(g) for g in groups]) - mean
        x = np.arange(len(values))
        ax.errorbar(x, mean, yerr=[lo, hi], fmt="o", capsize=4, color="tab:blue", label="mean over grid (min–max)")
        slice_sr = []
        for v in values:
            match = [s["sr"] for s in streams if s["config"][name] == v
                     and all(np.isclose(s["config"][k], base.get(k, s["config"][k])) for k in names if k != name)]
            slice_sr.append(match[0] if match else np.nan)
        ax.plot(x, slice_sr, "s-", color="tab:orange", label="others at default")
        for (label, value), style in zip(refs.items(), ("--", ":", "-.")):
            ax.axhline(value, ls=style, color="gray", lw=1, label=label)
        ax.set_xticks(x, [f"{v:g}" for v in values])
        ax.set_xlabel(name)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("SR (%)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8, frameon=False)
    fig.suptitle(f"TokenWorth+ sweep · {data['env'].upper()} · seed {data['seed']} · {len(streams)} lockstep streams "
                 f"· simulated backbone" + (f"\n{note}" if note else ""), fontsize=10)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep_json")
    parser.add_argument("--ref", action="append", default=[], help="LABEL=SR, a dashed reference line")
    parser.add_argument("--out", default="bench/results/plus/sweep_db.png")
    parser.add_argument("--note", default="", help="a second title line")
    args = parser.parse_args(argv)
    data = json.loads(Path(args.sweep_json).read_text())
    refs = {k: float(v) for k, v in (r.split("=") for r in args.ref)}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    plot(data, refs, out, args.note)
    print(out)


if __name__ == "__main__":
    main()
