"""TokenWorth+'s no-harm targets, from measured result files: no harm, gain kept, harm halved
(docs/tokenworth-plus.md, "No harm").

Reads (all written by other benches, nothing re-run here):

* ``--streams`` JSON of :mod:`tokenworth_bench.plus.streams` (trap, mixed, the harm-majority family; held-out
  variants marked): per variant and seed, SR − no memory and the share of the oracle's gap closed;
* ``--run ENV=FOLDER`` engine runs (``tokenworth run`` output, ``summary.json``): every method's
  SR and OutputTok per env; several folders per env are merged (a method measured twice is an error);
* ``--table ENV=FILE`` JSON of :mod:`tokenworth_bench.methods_table` (the other methods measured at an earlier
  release with the same engine and seeds; its TokenWorth+ row is skipped, and a method also in a
  ``--run`` is taken from the run);
* ``--ranking ENV=FILE`` JSON of :mod:`tokenworth_bench.ranking`: the harmful-injection share per method.

Targets: TokenWorth+ ≥ no memory − 1 point on every stream and seed; on each env SR ≥
the best other method + 2 with OutputTok no higher than that method's; harmful ≤ half of RAG's;
trap and mixed close ≥ 85 % of the gap to the oracle. Writes ``<out>.md`` and ``<out>.json``.

    python -m tokenworth_bench.plus.targets --streams bench/results/plus/streams.json \
        --run db=runs/db-others --run db=runs/db-plus --ranking db=bench/results/plus/noharm_db.json \
        --out bench/results/plus/targets
"""

from __future__ import annotations

from ..paths import RESULTS
import argparse
import json
from pathlib import Path
from typing import Any, Sequence

PLUS = "tokenworth+"
NO_HARM = -1.0  # SR points against no memory, every stream and seed (inclusive)
EPS = 1e-6  # SR points are differences of float percentages: 48.2 - 49.2 = -1.000000000000007
GAIN = 2.0  # SR points over the best other method
GAP = 0.85  # share of the oracle's gap on trap and mixed


def _pairs(items: Sequence[str], what: str) -> list[tuple[str, Path]]:
    out = []
    for item in items:
        env, sep, path = item.partition("=")
        if not sep or not Path(path).exists():
            raise SystemExit(f"{what} wants ENV=PATH with an existing path, got {item!r}")
        out.append((env, Path(path)))
    return out


def engine_rows(runs: Sequence[tuple[str, Path]]) -> dict[str, dict[str, dict[str, Any]]]:
    """{env: {method: summary row}} from the runs' summary.json."""
    table: dict[str, dict[str, dict[str, Any]]] = {}
    for env, folder in runs:
        for row in json.loads((folder / "summary.json").read_text()):
            if row["env"] != env:
                continue
            methods = table.setdefault(env, {})
            if row["method"] in methods:
                raise SystemExit(f"{env}: {row['method']} is in two runs ({folder})")
            methods[row["method"]] = dict(row, run=str(folder))
    return table


def table_rows(tables: Sequence[tuple[str, Path]]) -> dict[str, dict[str, dict[str, Any]]]:
    """{env: {method: row}} from methods-table JSON files, TokenWorth+ left out."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for env, path in tables:
        for row in json.loads(path.read_text())["results"].get(env, []):
            if row["method"] != PLUS:
                out.setdefault(env, {})[row["method"]] = dict(sr=row["sr"][0], output_tok=row["output_tok"][0],
                                                              run=str(path))
    return out


def stream_checks(results: dict[str, Any], family: set[str], held_out: set[str]) -> list[dict[str, Any]]:
    rows = []
    for kind, res in results.items():
        m = res["methods"]
        plus = m[PLUS]
        per_seed = plus["vs_no_memory"]
        rows.append(dict(kind=kind, set="held out" if kind in held_out else "family (dev)" if kind in family
                         else "relevance ≠ worth", seeds=res["seeds"], vs_no_memory=per_seed,
                         vs_oracle=plus["vs_oracle"], gap_closed=plus["gap_closed"],
                         explore_cost=[r.get("explore_cost") for r in plus["rows"]],
                         injected=plus["mean"]["injected"], no_harm=min(per_seed) >= NO_HARM - EPS,
                         others={k: v["vs_no_memory"] for k, v in m.items() if k not in (PLUS, "no memory", "oracle")}))
    return rows


def env_checks(table: dict[str, dict[str, dict[str, Any]]], harm: dict[str, dict[str, Any]]) -> dict[str, Any]:
    out = {}
    for env, methods in table.items():
        if PLUS not in methods:
            continue
        others = {k: v for k, v in methods.items() if k != PLUS}
        best = max(others, key=lambda k: others[k]["sr"])
        plus = methods[PLUS]
        row = dict(tasks=plus.get("tasks"), plus_sr=plus["sr"], plus_sr_by_seed=plus.get("sr_by_seed"), plus_tok=plus["output_tok"],
                   best=best, best_sr=others[best]["sr"], best_tok=others[best]["output_tok"],
                   gain=plus["sr"] - others[best]["sr"])
        row["gain_met"] = row["gain"] >= GAIN and plus["output_tok"] <= others[best]["output_tok"]
        if env in harm and "rag" in harm[env] and PLUS in harm[env]:
            h_plus = harm[env][PLUS]["overall"]["harmful"][0]
            h_rag = harm[env]["rag"]["overall"]["harmful"][0]
            row.update(harmful=h_plus, harmful_rag=h_rag, harm_met=h_plus <= h_rag / 2)
        out[env] = row
    return out


def markdown(streams: list[dict[str, Any]], envs: dict[str, Any]) -> str:
    lines = ["# TokenWorth+ against its targets (gain on DB and OS, no harm on the harm-majority family)", "",
             "Per-call accounting, simulated backbone, seeds 0–2. Streams: 1,000 tasks each, Δ₀ = SR − no memory "
             "per seed (points), gap = share of the oracle's gap closed, explore = expected SR points lost by the "
             "decisions that differ from the posterior-mean decision, valued with the true probabilities (per "
             "seed; negative: they did better than the posterior mean, e.g. abstaining while no memory was still "
             "measured where injecting hurts). The family's held-out variants were run once, at the end.", "",
             "## No harm: every stream, every seed ≥ no memory − 1", "",
             "| stream | set | Δ₀ per seed | min | gap closed | explore per seed | injected | met |",
             "|---|---|---|---:|---:|---|---:|---|"]
    for r in streams:
        d0 = " / ".join(f"{x:+.1f}" for x in r["vs_no_memory"])
        ex = " / ".join("—" if x is None else f"{x:+.2f}" for x in r["explore_cost"])
        gap = "—" if r["gap_closed"] is None else f"{100 * r['gap_closed']:.0f}%"
        lines.append(f"| {r['kind']} | {r['set']} | {d0} | {min(r['vs_no_memory']):+.1f} | "
                     f"{gap} | {ex} | {100 * r['injected']:.0f}% | {'yes' if r['no_harm'] else '**no**'} |")
    for kind in ("trap", "mixed"):
        r = next((x for x in streams if x["kind"] == kind), None)
        if r is not None and r["gap_closed"] is not None:
            lines.append(f"\n{kind}: {100 * r['gap_closed']:.0f}% of the gap to the oracle closed "
                         f"({'met' if r['gap_closed'] >= GAP else '**missed**'}: target ≥ {100 * GAP:.0f}%).")
    lines += ["", "## Gain kept and harm halved (engine runs)", "",
              "| env | tasks | TokenWorth+ SR | per seed | best other | its SR | gain | OutputTok (TW+ / best) | met | "
              "harmful (TW+ / RAG) | ≤ half |", "|---|---:|---:|---|---|---:|---:|---|---|---|---|"]
    for env, r in envs.items():
        per = " / ".join(f"{x:.1f}" for x in r["plus_sr_by_seed"] or [])
        harm = (f"{100 * r['harmful']:.1f}% / {100 * r['harmful_rag']:.1f}%", "yes" if r["harm_met"] else "**no**") \
            if "harmful" in r else ("—", "—")
        lines.append(f"| {env} | {r['tasks']} | {r['plus_sr']:.1f} | {per} | {r['best']} | {r['best_sr']:.1f} | {r['gain']:+.1f} | "
                     f"{r['plus_tok']:.1f} / {r['best_tok']:.1f} | {'yes' if r['gain_met'] else '**no**'} | "
                     f"{harm[0]} | {harm[1]} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", required=True, help="JSON of tokenworth_bench.plus.streams")
    parser.add_argument("--run", action="append", default=[], help="ENV=FOLDER of a `tokenworth run` (repeatable)")
    parser.add_argument("--table", action="append", default=[], help="ENV=FILE, JSON of tokenworth_bench.methods_table")
    parser.add_argument("--ranking", action="append", default=[], help="ENV=FILE, JSON of tokenworth_bench.ranking (repeatable)")
    parser.add_argument("--out", default=str(RESULTS / "plus" / "targets"))
    args = parser.parse_args(argv)
    from tokenworth_bench.plus.streams import FAMILY, HELD_OUT

    streams = stream_checks(json.loads(Path(args.streams).read_text())["results"], set(FAMILY), set(HELD_OUT))
    harm = {env: json.loads(path.read_text())["results"][env] for env, path in _pairs(args.ranking, "--ranking")}
    table = table_rows(_pairs(args.table, "--table"))
    for env, methods in engine_rows(_pairs(args.run, "--run")).items():
        table.setdefault(env, {}).update(methods)
    envs = env_checks(table, harm)
    result = dict(streams=streams, envs=envs, runs=args.run, tables=args.table, ranking=args.ranking, streams_file=args.streams)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    text = markdown(streams, envs)
    out.with_suffix(".md").write_text(text)
    out.with_suffix(".json").write_text(json.dumps(result, indent=1, default=float))
    print(text)
    return result


if __name__ == "__main__":
    main()
