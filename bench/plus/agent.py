"""TokenWorth+ against every baseline on the simulated backbone (DB, OS): SR and OutputTok
(mean ± std over seeds), the fraction of tasks on which the bank had candidates but nothing
was injected (abstained), and the mean skill overlap J of the injected memory against the
best candidate of the same recall set (TokenWorth-family methods, whose logs hold the set).

The runs themselves are ordinary ``tokenworth run`` directories (``runs/plus/<env>-sim-seed<s>``,
made by ``tokenworth run --methods standard,rag,memrl,memp,tokenworth,tokenworth+``; they resume);
this script only reads their ``records.jsonl`` files, so it also reports a prefix of an
unfinished run (the task count is in the table).

    python -m bench.plus.agent --runs runs/plus --envs db,os --seeds 0,1,2 --out bench/results/plus
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from agent.sim import skill_overlap
from agent.checkpoint import read_records

METHODS = ("standard", "rag", "memrl", "memp", "tokenworth", "tokenworth+")


def overlap_stats(records: Sequence[dict[str, Any]]) -> tuple[float | None, float | None, float]:
    """(mean J of injected memories, mean best J in their recall sets, abstained fraction)."""
    skills_of: dict[int, tuple[str, ...]] = {}
    next_id = 0
    chosen_j, best_j, abstained, with_candidates = [], [], 0, 0
    for r in records:
        sel = r["decision"].get("selection")
        if sel is None:
            return None, None, 0.0
        ids = [i for i in sel["candidate_ids"] if i in skills_of]
        if sel["candidate_ids"]:
            with_candidates += 1
            abstained += sel["memory_id"] is None
        if sel["memory_id"] is not None and ids:
            chosen_j.append(skill_overlap(skills_of[sel["memory_id"]], r["skill_list"]))
            best_j.append(max(skill_overlap(skills_of[i], r["skill_list"]) for i in ids))
        if r["decision"].get("admission") is not None:  # an offer consumed the next controller id
            skills_of[next_id] = tuple(r["skill_list"])
            next_id += 1
    mean = (lambda v: float(np.mean(v)) if v else None)
    return mean(chosen_j), mean(best_j), abstained / max(1, len(records))


def summarize(runs: Path, env: str, seeds: Sequence[int], methods: Sequence[str]) -> list[dict[str, Any]]:
    rows = []
    for method in methods:
        per_seed = []
        for seed in seeds:
            path = runs / f"{env}-sim-seed{seed}" / method / "records.jsonl"
            if not path.exists():
                continue
            recs = read_records(path)
            if not recs:
                continue
            j, best, abst = overlap_stats(recs)
            per_seed.append(dict(tasks=len(recs), sr=100 * np.mean([r["reward"] for r in recs]),
                                 tok=np.mean([r["output_tokens"] for r in recs]), abstained=abst, j=j, best=best,
                                 injected=np.mean([bool(r["injected_memory_ids"]) for r in recs])))
        if not per_seed:
            continue
        agg: dict[str, Any] = {"method": method, "seeds": len(per_seed), "tasks": min(p["tasks"] for p in per_seed)}
        for key in ("sr", "tok", "abstained", "injected", "j", "best"):
            vals = [p[key] for p in per_seed if p[key] is not None]
            agg[key] = (float(np.mean(vals)), float(np.std(vals))) if vals else None
        rows.append(agg)
    return rows


# Extra run folders kept for comparison (renamed ``tokenworth+`` folders of earlier defaults).
VARIANTS = {
    "tokenworth+_rank_adv": "tokenworth+ with plus_rank = 1 (rank by predicted advantage)",
    "tokenworth+_v1": "tokenworth+ with the first defaults: plus_margin = 0, plus_theta0 = (0, 0, 0)",
}


def markdown(results: dict[str, list[dict[str, Any]]], seeds: Sequence[int]) -> str:
    lines = [f"# TokenWorth+ vs baselines · simulated backbone · seeds {list(seeds)}", ""]
    shown = {r["method"] for rows in results.values() for r in rows}
    lines += [f"- `{k}`: {v}" for k, v in VARIANTS.items() if k in shown]
    lines += ["- abstained: the bank had candidates but nothing was injected; J: skill overlap (sim's Jaccard) of "
              "the injected memory and of the best candidate in the same recall set", ""]
    for env, rows in results.items():
        lines += [f"## {env.upper()}", "",
                  "| method | tasks | SR (%) | OutputTok | injected (%) | abstained (%) | J injected | J best in recall |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for r in rows:
            fmt = (lambda v, s=1: "—" if v is None else f"{v[0]:.{s}f} ± {v[1]:.{s}f}")
            lines.append(f"| {r['method']} | {r['tasks']} | {fmt(r['sr'])} | {fmt(r['tok'])} | "
                         f"{100 * r['injected'][0]:.1f} | {100 * r['abstained'][0]:.1f} | {fmt(r['j'], 3)} | "
                         f"{fmt(r['best'], 3)} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", default="runs/plus")
    parser.add_argument("--envs", default="db,os")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--out", default="bench/results/plus")
    parser.add_argument("--name", default="agent")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    results = {env: summarize(Path(args.runs), env, seeds, args.methods.split(",")) for env in args.envs.split(",")}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    text = markdown(results, seeds)
    (out / f"{args.name}.md").write_text(text)
    (out / f"{args.name}.json").write_text(json.dumps({"seeds": seeds, "results": results}, indent=1))
    print(text)
    return results


if __name__ == "__main__":
    main()
