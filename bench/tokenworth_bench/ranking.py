"""The ranking instrument (docs/ranking-research.md): which memory each method injects, measured by the sim.

For every method's records of a simulated-backbone run (any env, every seed) it reports, per
block of ``--block`` tasks and overall:

* **J chosen**: the skill overlap J (the simulator's Jaccard, :func:`tokenworth_agent.sim.skill_overlap`)
  between the injected memory's source task and the current task, over tasks with an injection;
* **J top-cos** and **J best**: the J of the recall set's most cosine-similar candidate and of its
  best candidate (methods that log their recall set: the TokenWorth family, MemRL, tokenworth-rank);
* **AUC** of each logged scorer *within* the recall set against the realised reward: for every
  candidate the bench asks the simulator whether the task would have succeeded with that memory
  (``sim.decide``: common random numbers, so this is the reward the method would have seen, budget
  cuts aside), and takes the fraction of (succeeding, failing) candidate pairs the scorer orders
  correctly, ties counted half; averaged over tasks whose recall set holds both kinds;
* **harmful**: the fraction of all tasks on which a memory with J < ``harm_threshold`` (0.25) was
  injected, and **injected**, the fraction with any injection; SR for reference.

J, skills and the simulator's draws are read only here, from the records (``skill_list``, the
seed in ``stream``) and :class:`~tokenworth_agent.sim.SimParams`; no method sees them. A memory's
source task is found from the decision log of the task that wrote it (``write`` for the store
methods, ``admission.memory_id`` for TokenWorth, ``offer.memory_id`` for tokenworth-rank).

    python -m tokenworth_bench.ranking --experiment db=runs/base-db --experiment os=runs/base-os \
        --out bench/results/ranking            # or: tokenworth-bench ranking ...

Each experiment folder is a ``tokenworth run`` output (``seed<k>/<method>/records.jsonl``, or a
single-seed ``<method>/records.jsonl``); several folders of one env are merged into one table.
Writes ``<name>.md``, ``<name>.json`` and ``<name>.png``.
"""

from __future__ import annotations

from .paths import RESULTS
import argparse
import json
import types
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from tokenworth_agent.sim import SimParams, decide, skill_overlap
from tokenworth_agent.results.record import TaskRecord, read_records

SCORER_NAMES = {"relevance": "cosine", "base_scores": "base", "scores": "score", "sims": "cosine"}


def written_id(decision: dict[str, Any]) -> int | None:
    """The id of the memory this task wrote (or None), from any method's decision log."""
    for key in ("admission", "offer"):
        entry = decision.get(key)
        if isinstance(entry, dict) and entry.get("memory_id") is not None:
            return int(entry["memory_id"])
    write = decision.get("write")
    if isinstance(write, (int, np.integer)) and not isinstance(write, bool):
        return int(write)
    return None


def recall_set(decision: dict[str, Any]) -> tuple[list[int], dict[str, list[float]]] | None:
    """(candidate ids, {scorer: scores}) of a logged recall set, or None if the method logs none."""
    sel = decision.get("selection")
    if isinstance(sel, dict) and "candidate_ids" in sel:
        ids = [int(i) for i in sel["candidate_ids"]]
        scorers = {SCORER_NAMES.get(k, k): list(map(float, sel[k])) for k in ("relevance", "base_scores", "scores")
                   if k in sel and len(sel[k]) == len(ids)}
        for name, values in (sel.get("scorers") or {}).items():  # extra scorers (tokenworth-rank)
            if len(values) == len(ids):
                scorers[name] = list(map(float, values))
        return ids, scorers
    if "recalled_ids" in decision:  # MemRL
        ids = [int(i) for i in decision["recalled_ids"]]
        scorers = {SCORER_NAMES.get(k, k): list(map(float, decision[k])) for k in ("sims", "scores")
                   if k in decision and len(decision[k]) == len(ids)}
        return ids, scorers
    return None


def pair_auc(scores: Sequence[float], positive: Sequence[bool]) -> float | None:
    """P(score of a positive > score of a negative), ties 1/2; None without both classes."""
    s, y = np.asarray(scores, float), np.asarray(positive, bool)
    pos, neg = s[y], s[~y]
    if not len(pos) or not len(neg):
        return None
    diff = pos[:, None] - neg[None, :]
    return float(np.mean((diff > 0) + 0.5 * (diff == 0)))


def _task(record: TaskRecord) -> Any:
    """What ``sim.decide`` reads of a task (env, sample index, skills), rebuilt from its record."""
    _, _, index = record.task_id.rpartition("-")
    return types.SimpleNamespace(env=record.env, sample_index=int(index), skill_list=tuple(record.skill_list))


def task_rows(records: Sequence[TaskRecord], params: SimParams = SimParams(),
              seed: int | None = None) -> list[dict[str, Any]]:
    """One row per task: reward, injection, J measures, harmful flag, per-scorer AUC."""
    skills_of: dict[int, tuple[str, ...]] = {}
    rows = []
    for r in records:
        decision = r.decision
        run_seed = int(seed if seed is not None else (r.stream or {}).get("seed", 0))
        task = _task(r)
        mid = r.injected_memory_id
        row: dict[str, Any] = {"index": r.index, "reward": r.reward, "injected": mid is not None,
                               "j": None, "harmful": False, "j_top": None, "j_best": None, "auc": {},
                               "consistent": True}
        if mid is not None and int(mid) in skills_of:
            j = skill_overlap(skills_of[int(mid)], task.skill_list)
            row["j"], row["harmful"] = j, j < params.harm_threshold
        episode = decide(params, run_seed, task, skills_of.get(int(mid)) if mid is not None else None)
        row["consistent"] = not (r.reward and not episode.success)  # a sim success is necessary
        recall = recall_set(decision)
        if recall is not None:
            ids, scorers = recall
            known = [k for k, i in enumerate(ids) if i in skills_of]
            if known:
                js = np.array([skill_overlap(skills_of[ids[k]], task.skill_list) for k in known])
                wins = [decide(params, run_seed, task, skills_of[ids[k]]).success for k in known]
                if "cosine" in scorers:
                    row["j_top"] = float(js[int(np.argmax([scorers["cosine"][k] for k in known]))])
                else:  # recall order is cosine order for every logged method without the scores
                    row["j_top"] = float(js[0])
                row["j_best"] = float(js.max())
                for name, values in scorers.items():
                    row["auc"][name] = pair_auc([values[k] for k in known], wins)
        written = written_id(decision)
        if written is not None:
            skills_of[written] = task.skill_list
        rows.append(row)
    return rows


def _mean(values: Iterable[Any]) -> float | None:
    v = [float(x) for x in values if x is not None]
    return float(np.mean(v)) if v else None


def summarise(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The measures over a set of task rows (a block, or all)."""
    inj = [r for r in rows if r["injected"]]
    scorers = sorted({k for r in rows for k in r["auc"]})
    return {
        "tasks": len(rows),
        "sr": 100 * float(np.mean([r["reward"] for r in rows])) if rows else None,
        "injected": float(np.mean([r["injected"] for r in rows])) if rows else None,
        "harmful": float(np.mean([r["harmful"] for r in rows])) if rows else None,
        "j_chosen": _mean(r["j"] for r in inj),
        "j_top": _mean(r["j_top"] for r in inj),
        "j_best": _mean(r["j_best"] for r in inj),
        "auc": {s: _mean(r["auc"].get(s) for r in rows) for s in scorers},
        "consistent": float(np.mean([r["consistent"] for r in rows])) if rows else None,
    }


def seed_folders(experiment: Path) -> list[tuple[int | None, Path]]:
    """``(seed, folder)`` pairs of a run folder: ``seed<k>/`` subfolders, else the folder itself."""
    subs = sorted((int(p.name[4:]), p) for p in experiment.glob("seed*") if p.is_dir() and p.name[4:].isdigit())
    return subs if subs else [(None, experiment)]


def measure(experiment: Path, methods: Sequence[str] | None, block: int,
            params: SimParams = SimParams()) -> dict[str, Any]:
    """{method: {"overall": mean/std over seeds, "blocks": [per-block means over seeds], "seeds": n}}."""
    folders = seed_folders(experiment)
    found = sorted({p.parent.name for _, f in folders for p in f.glob("*/records.jsonl")})
    out: dict[str, Any] = {}
    for method in [m for m in (methods or found) if m in found]:
        per_seed, blocks = [], []
        for seed, folder in folders:
            records = read_records(folder / method / "records.jsonl")
            if not records:
                continue
            rows = task_rows(records, params, seed)
            per_seed.append(summarise(rows))
            blocks.append([summarise(rows[k:k + block]) for k in range(0, len(rows), block)])
        if per_seed:
            out[method] = {"seeds": len(per_seed), "overall": _over_seeds(per_seed),
                           "blocks": [_over_seeds([b[k] for b in blocks if k < len(b)])
                                      for k in range(max(map(len, blocks)))]}
    return out


def _over_seeds(summaries: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Mean (and population std) of each measure over seeds; None where no seed has it."""
    agg: dict[str, Any] = {"tasks": min(s["tasks"] for s in summaries)}
    for key in ("sr", "injected", "harmful", "j_chosen", "j_top", "j_best", "consistent"):
        vals = [s[key] for s in summaries if s[key] is not None]
        agg[key] = [float(np.mean(vals)), float(np.std(vals))] if vals else None
    scorers = sorted({k for s in summaries for k in s["auc"]})
    agg["auc"] = {k: _mean(s["auc"].get(k) for s in summaries) for k in scorers}
    return agg


def markdown(results: dict[str, dict[str, Any]], block: int) -> str:
    def f(v: Any, digits: int = 3, scale: float = 1.0) -> str:
        if v is None:
            return "—"
        if isinstance(v, list):
            return f"{scale * v[0]:.{digits}f} ± {scale * v[1]:.{digits}f}"
        return f"{scale * v:.{digits}f}"

    lines = ["# Ranking instrument · simulated backbone", "",
             "J: the sim's skill overlap of the injected memory (chosen), of the recall set's top-cosine candidate "
             "(top-cos) and of its best candidate (best), over tasks with an injection. Harmful: share of all tasks "
             "with an injected memory of J < 0.25. AUC: within the recall set, against the sim's counterfactual "
             "reward of each candidate (0.5 = no better than chance; ranking by J itself scores 1, since the sim's success "
             "probability rises with J). Sim ✓: share of records whose reward the sim allows (a success needs "
             "`sim.decide` to succeed with the injected memory; below 100% the bench mis-mapped a memory or a seed). "
             "Mean ± std over seeds.", ""]
    for env, methods in results.items():
        scorers = sorted({k for m in methods.values() for k in m["overall"]["auc"]})
        lines += [f"## {env.upper()} (overall)", "",
                  "| method | seeds | tasks | SR (%) | injected (%) | harmful (%) | J chosen | J top-cos | J best | sim ✓ (%) | "
                  + " | ".join(f"AUC {s}" for s in scorers) + " |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|" + "---:|" * len(scorers)]
        for name, m in methods.items():
            o = m["overall"]
            lines.append(f"| {name} | {m['seeds']} | {o['tasks']} | {f(o['sr'], 1)} | {f(o['injected'], 1, 100)} | "
                         f"{f(o['harmful'], 1, 100)} | {f(o['j_chosen'])} | {f(o['j_top'])} | {f(o['j_best'])} | "
                         f"{f(o['consistent'] and o['consistent'][0], 1, 100)} | "
                         + " | ".join(f(o["auc"].get(s)) for s in scorers) + " |")
        lines += ["", f"### {env.upper()} per block of {block} tasks: J chosen (top-cos / best) · harmful (%)", "",
                  "| method | " + " | ".join(f"{block * k}–{block * (k + 1) - 1}"
                                           for k in range(max(len(m["blocks"]) for m in methods.values()))) + " |",
                  "|---|" + "---:|" * max(len(m["blocks"]) for m in methods.values())]
        for name, m in methods.items():
            cells = []
            for b in m["blocks"]:
                extra = f" ({f(b['j_top'], 2)} / {f(b['j_best'], 2)})" if b["j_best"] is not None else ""
                cells.append(f"{f(b['j_chosen'], 2)}{extra} · {f(b['harmful'], 0, 100)}")
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def _first(v: Any) -> float:
    return float("nan") if v is None else float(v[0] if isinstance(v, list) else v)


def figure(results: dict[str, dict[str, Any]], block: int, path: Path) -> None:
    """Per env: J chosen per block (best-in-recall and top-cos dashed for methods that log them),
    the harmful-injection rate per block, and each scorer's overall AUC."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    envs = list(results)
    fig, axes = plt.subplots(len(envs), 3, figsize=(16, 4.4 * len(envs)), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for row, env in enumerate(envs):
        methods = results[env]
        ax_j, ax_h, ax_a = axes[row]
        for k, (name, m) in enumerate(methods.items()):
            if not m["overall"]["injected"] or m["overall"]["injected"][0] == 0:
                continue  # never injects (standard): nothing to draw
            c = colors[k % len(colors)]
            x = [block * (i + 0.5) for i in range(len(m["blocks"]))]
            ax_j.plot(x, [_first(b["j_chosen"]) for b in m["blocks"]], "-o", color=c, label=name, ms=4)
            if any(b["j_best"] is not None for b in m["blocks"]):
                ax_j.plot(x, [_first(b["j_best"]) for b in m["blocks"]], ":", color=c, lw=1)
                ax_j.plot(x, [_first(b["j_top"]) for b in m["blocks"]], "--", color=c, lw=1)
            ax_h.plot(x, [100 * _first(b["harmful"]) for b in m["blocks"]], "-o", color=c, label=name, ms=4)
        ax_j.set(title=f"{env.upper()}: J of the injected memory (dashed: top-cos, dotted: best in recall)",
                 xlabel="task", ylabel="mean J")
        ax_h.set(title=f"{env.upper()}: harmful injections (J < 0.25)", xlabel="task", ylabel="% of tasks")
        ax_j.legend(fontsize=8)
        ax_h.legend(fontsize=8)
        bars = [(name, s, v) for name, m in methods.items() for s, v in m["overall"]["auc"].items() if v is not None]
        scorers = sorted({s for _, s, _ in bars})
        logged = [n for n in methods if methods[n]["overall"]["auc"]]
        width = 0.8 / max(1, len(scorers))
        for k, s in enumerate(scorers):
            vals = [methods[n]["overall"]["auc"].get(s) for n in logged]
            ax_a.bar(np.arange(len(logged)) + k * width, [np.nan if v is None else v for v in vals], width, label=s)
        ax_a.axhline(0.5, color="grey", lw=0.8)
        ax_a.set_xticks(np.arange(len(logged)) + width * (len(scorers) - 1) / 2, logged, fontsize=8)
        ax_a.set(title=f"{env.upper()}: AUC within the recall set vs realised reward", ylim=(0.3, 1.0))
        ax_a.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiment", action="append", required=True,
                        help="ENV=FOLDER (a `tokenworth run` output); repeatable, also for one env")
    parser.add_argument("--methods", default=None, help="comma-separated (default: every method found)")
    parser.add_argument("--block", type=int, default=100)
    parser.add_argument("--out", default=str(RESULTS / "ranking"))
    parser.add_argument("--name", default="ranking")
    args = parser.parse_args(argv)
    if args.block < 1:
        parser.error(f"--block must be >= 1, got {args.block}")
    results: dict[str, Any] = {}
    for item in args.experiment:  # several folders of one env add their methods to one table
        env, sep, folder = item.partition("=")
        if not sep or not Path(folder).is_dir():
            parser.error(f"--experiment wants ENV=FOLDER with an existing folder, got {item!r}")
        found = measure(Path(folder), args.methods.split(",") if args.methods else None, args.block)
        if not found:
            parser.error(f"no records.jsonl under {folder}")
        results.setdefault(env, {}).update(found)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    text = markdown(results, args.block)
    (out / f"{args.name}.md").write_text(text + "\n")
    (out / f"{args.name}.json").write_text(json.dumps({"block": args.block, "results": results}, indent=1))
    figure(results, args.block, out / f"{args.name}.png")
    print(text)
    return results


if __name__ == "__main__":
    main()
