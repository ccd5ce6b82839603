"""BigCodeBench gold replay: every reference solution through the sandboxed official evaluator.

``python -m tokenworth_bench.bigcodebench_gold [--venv .venv-bcb] [--jobs 2] [--mutants]`` (or ``tokenworth-bench
bigcodebench-gold``) judges, for each of the 1,140 tasks in stream order, the reply the simulated
backbone writes on a success: the official response prefix and the task's ``code_prompt`` plus
reference body in a markdown block. It goes through the judge exactly as a model's reply does
(sanitise, calibrate, ``untrusted_check`` in a fresh sandbox, upstream's 240 s limit). ``--mutants``
also judges the reply the simulator writes on a failure (the mutant: every returned value
``None``), which must fail.

Writes to ``--out`` (default ``bench/results/bigcodebench/``): ``gold.jsonl`` (one line per task
and kind; a rerun skips what is there, so an interrupted replay resumes), ``gold.md`` and
``gold.json`` (the pass counts, the tasks that do not pass with the reason their tests give, and the
mutants that pass, if any). The judge's verdicts also go to ``--verdicts`` (default
``<out>/runs/verdicts.jsonl``, not committed): a ``tokenworth run --env bigcodebench --bcb-verdicts``
with the same venv then tests none of these solutions again.

An infrastructure error (the evaluator cannot start) stops the replay with its message; what was
judged is kept.
"""

from __future__ import annotations

from .paths import RESULTS
import argparse
import collections
import concurrent.futures
import json
import re
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from tokenworth_agent.storage.checkpoint import atomic_write_json, atomic_write_text

OUT = RESULTS / "bigcodebench"

# What a failing test's text says about why a reference solution cannot pass here, first match wins.
CAUSES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("NLTK corpus not downloaded", re.compile(r"Resource .{0,40}not found|nltk_data|nltk\.download", re.S)),
    ("network (the sandbox has none)", re.compile(
        r"Temporary failure in name resolution|Name or service not known|Network is unreachable|urlopen error|"
        r"Max retries exceeded|gaierror|ConnectionError|Failed to establish a new connection|dns\.google")),
    ("library not installed", re.compile(r"No module named|ModuleNotFoundError")),
)


def cause(row: dict[str, Any]) -> str:
    """Why a reference solution failed, from its verdict (the docs review each one)."""
    if row["reason"] == "wall-cap":
        return "evaluator hang (no result before the wall cap)"
    text = "\n".join(row.get("tests", {}).values())
    for name, pattern in CAUSES:
        if pattern.search(text):
            return name
    if row["status"] == "timeout":
        return "time limit"
    return "test failure"


def first_error(tests: dict[str, str]) -> str:
    """The last line of the first traceback (the exception), short."""
    for text in tests.values():
        lines = [line for line in text.strip().splitlines() if line.strip()]
        if lines:
            return lines[-1].strip()[:160]
    return ""


def summary(rows: Sequence[dict[str, Any]], total: int, seconds: float, venv: dict[str, str]) -> dict[str, Any]:
    gold = [r for r in rows if r["kind"] == "gold"]
    mutants = [r for r in rows if r["kind"] == "mutant"]
    failing = [dict(task_id=r["task_id"], hard=r["hard"], status=r["status"], reason=r["reason"], cause=cause(r),
                    error=first_error(r.get("tests", {}))) for r in gold if r["status"] != "pass"]
    return {"tasks": total, "judged": len(gold), "passed": sum(r["status"] == "pass" for r in gold),
            "hard_judged": sum(r["hard"] for r in gold),
            "hard_passed": sum(r["hard"] and r["status"] == "pass" for r in gold),
            "failing": failing, "causes": dict(collections.Counter(f["cause"] for f in failing)),
            "mutants_judged": len(mutants), "mutants_passed": [r["task_id"] for r in mutants if r["status"] == "pass"],
            "judge_seconds": round(sum(r["seconds"] for r in rows if not r["cached"]), 1),
            "wall_seconds_this_call": round(seconds, 1), "evaluator": venv}


def read_prior(path: Path) -> dict[str, str]:
    """task id -> status of an earlier replay's log (a torn last line is skipped)."""
    out = {}
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if row.get("kind", "gold") == "gold":
            out[row["task_id"]] = row["status"]
    return out


def union(rows: Sequence[dict[str, Any]], prior: dict[str, str], source: str) -> dict[str, Any]:
    """Coverage of this replay and an earlier one together; where both judged a task, this replay's verdict."""
    status = dict(prior) | {r["task_id"]: r["status"] for r in rows if r["kind"] == "gold"}
    both = [r["task_id"] for r in rows if r["kind"] == "gold" and r["task_id"] in prior]
    return {"source": source, "judged": len(status), "passed": sum(s == "pass" for s in status.values()),
            "from_prior": len(status) - sum(r["kind"] == "gold" for r in rows), "both": len(both),
            "disagree": sorted(t for t in both if prior[t] != status[t]),
            "failing": sorted((t for t, s in status.items() if s != "pass"), key=lambda t: int(t.split("/")[1]))}


def markdown(s: dict[str, Any]) -> str:
    lines = ["# BigCodeBench gold replay", "",
             f"Evaluator {s['evaluator'].get('evaluator')} (libraries {s['evaluator'].get('libraries')}), "
             "in the sandbox, offline, upstream's 240 s limit; the reference solution as the simulator's success "
             "reply, sanitised and calibrated as any reply.", "",
             f"**{s['passed']} / {s['judged']}** reference solutions pass"
             + (f" ({100 * s['passed'] / s['judged']:.1f}%)" if s["judged"] else "")
             + f"; Hard: {s['hard_passed']} / {s['hard_judged']}."
             + ("" if s["judged"] == s["tasks"] else f" Judged so far: {s['judged']} of {s['tasks']}."), ""]
    if s["mutants_judged"]:
        lines += [f"Mutants (the simulator's failure reply): {len(s['mutants_passed'])} of {s['mutants_judged']} "
                  f"pass{': ' + ', '.join(s['mutants_passed']) if s['mutants_passed'] else ''}.", ""]
    lines += ["| cause | tasks |", "|---|---:|"] + [f"| {c} | {n} |" for c, n in sorted(s["causes"].items())]
    lines += ["", "| task | Hard | verdict | cause | what the test says |", "|---|:-:|---|---|---|"]
    for f in s["failing"]:
        verdict = f["status"] + (f" ({f['reason']})" if f["reason"] else "")
        lines.append(f"| {f['task_id']} | {'✓' if f['hard'] else ''} | {verdict} | {f['cause']} | "
                     f"{f['error'].replace('|', '/')} |")
    if "union" in s:
        u = s["union"]
        lines += ["", f"**With the earlier replay** `{u['source']}` ({u['from_prior']} tasks judged only there; "
                      f"{u['both']} judged by both, disagreeing on {', '.join(u['disagree']) or 'none'}): "
                      f"**{u['passed']} / {u['judged']}** pass. Not passing: {', '.join(u['failing']) or 'none'}."]
    lines += ["", f"Judge time (sandbox included, cached verdicts not counted): {s['judge_seconds']:.0f} s.", ""]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    from tokenworth_agent.benchmarks.bigcodebench.eval_venv import open_venv
    from tokenworth_agent.benchmarks.bigcodebench.judge import BigCodeBenchJudge, JudgeSettings
    from tokenworth_agent.benchmarks.bigcodebench.verdicts import VerdictCache
    from tokenworth_agent.benchmarks.bigcodebench.replies import mutant, solution_reply
    from tokenworth_agent.tasks import load_tasks

    parser = argparse.ArgumentParser(prog="tokenworth-bench bigcodebench-gold", description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None, help="The data root (default: $TOKENWORTH_DATA_DIR).")
    parser.add_argument("--venv", default=None, help="The evaluation venv (default: $TOKENWORTH_BCB_VENV, else "
                                                     ".venv-bcb).")
    parser.add_argument("--jobs", type=int, default=2, help="Judgements at once [default: 2].")
    parser.add_argument("--mutants", action="store_true", help="Also judge each task's mutant (it must fail).")
    parser.add_argument("--limit", type=int, default=None, help="Only the first N tasks of the stream.")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--prior", type=Path, default=None,
                        help="A JSONL of an earlier replay (objects with task_id, status): the tasks it holds are "
                             "judged last, so a partial run adds coverage, and gold.md also reports the union.")
    parser.add_argument("--verdicts", type=Path, default=None, help="The verdict file [default: OUT/runs/verdicts.jsonl].")
    args = parser.parse_args(argv)

    tasks = load_tasks("bigcodebench", args.data_dir, limit=args.limit)
    venv = open_venv(args.venv)
    judge = BigCodeBenchJudge(venv, JudgeSettings(slots=args.jobs),
                              cache=VerdictCache(args.verdicts or args.out / "runs" / "verdicts.jsonl"))
    args.out.mkdir(parents=True, exist_ok=True)
    log = args.out / "gold.jsonl"
    rows = [json.loads(line) for line in log.read_text().splitlines() if line.strip()] if log.exists() else []
    rows = [r for r in rows if r.get("judge") == judge.identity()]  # another judge's rows are not this replay's
    done = {(r["task_id"], r["kind"]) for r in rows}
    work = [(t, kind) for kind in (("gold", "mutant") if args.mutants else ("gold",)) for t in tasks
            if (t.task_id, kind) not in done]
    prior = read_prior(args.prior) if args.prior else {}
    work.sort(key=lambda item: item[0].task_id in prior)  # stable: stream order within each group
    print(f"{len(work)} judgements to make ({len(done)} in {log})", flush=True)

    def one(item: tuple[Any, str]) -> dict[str, Any]:
        task, kind = item
        code = task.code_prompt + task.canonical_solution if kind == "gold" else mutant(task)
        v = judge.judge(task, solution_reply(code))
        return {"task_id": task.task_id, "kind": kind, "hard": task.hard, "status": v.status, "reason": v.reason,
                "seconds": v.seconds, "cached": v.cached, "memory_peak_bytes": v.memory_peak_bytes,
                "tests": {k: t[-400:] for k, t in list(v.details.items())[:3]}, "judge": judge.identity()}

    started = time.monotonic()
    pool = concurrent.futures.ThreadPoolExecutor(args.jobs)
    try:
        with log.open("a") as handle:
            for n, row in enumerate(pool.map(one, work), 1):
                handle.write(json.dumps(row) + "\n")
                handle.flush()
                rows.append(row)
                if n % 25 == 0 or row["status"] != ("pass" if row["kind"] == "gold" else "fail"):
                    print(f"[{n}/{len(work)}] {row['task_id']} {row['kind']} {row['status']} {row['reason']} "
                          f"{row['seconds']}s ({time.monotonic() - started:.0f}s)", flush=True)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)  # an error or Ctrl-C drops the queue, ends what runs
        result = summary(rows, len(tasks), time.monotonic() - started, judge.identity())
        if args.prior:
            result["union"] = union(rows, prior, str(args.prior))
        atomic_write_json(args.out / "gold.json", result)
        atomic_write_text(args.out / "gold.md", markdown(result))
    print(markdown(result))
    return result


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
