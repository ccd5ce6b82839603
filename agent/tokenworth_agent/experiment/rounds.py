"""``tokenworth run --until-decided``: task orders in rounds, until every comparison with the baseline is decided.

A comparison is one method against the run's baseline (``standard``) in one env. The decision rule is
:func:`tokenworth_agent.results.sequential.decide_streams` (better, worse, smaller than the effect, or undecided
after ``--max-orders`` orders); this module only drives the rounds:

* **Round r** runs order r of every stream (each seed) of a comparison still undecided on orders 0..r-1, and the
  baseline's streams in an env where any comparison is; the streams of a round run together, in one batch
  (lockstep), through the run's executor. A method whose comparisons are all decided runs no more streams.
* Orders before the rule's first look (:func:`~tokenworth_agent.results.sequential.first_look`: no comparison can
  be decided on fewer) run as one round: the same records (streams are independent), one batch.
* **Resume.** The folder is the state: before round r the decisions are made again from the finished streams of
  orders 0..r-1 alone, so the same command makes the same rounds and finishes an interrupted one, whatever later
  orders the folder already holds. The orders the run may hold (0..max_orders-1) and the rule's settings are in
  ``config.json`` (``orders``, ``until_decided``), so another ``--effect`` or ``--max-orders`` is another run.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Sequence

from tokenworth_agent.experiment.config import UntilDecided
from tokenworth_agent.experiment.plan import Plan, note

UNDECIDED = "undecided"


def round_orders(max_orders: int) -> list[list[int]]:
    """The orders of each round: those before the rule's first look together, then one order a round."""
    from tokenworth_agent.results.sequential import first_look

    start = min(first_look(max_orders), max_orders)
    return [list(range(start))] + [[r] for r in range(start, max_orders)]


def decisions_before(plan: Plan, until: UntilDecided, order: int) -> dict[str, Any]:
    """The rule's decisions (``"<env>/<method>"`` -> Decision) on the plan's finished streams of orders below
    ``order``: what they were when round ``order`` was planned, however far the folder has got since."""
    from tokenworth_agent.results.runs import streams
    from tokenworth_agent.results.sequential import decide_streams
    from tokenworth_agent.storage import runfolder

    present = set(runfolder.streams_in(plan.out_dir))
    names = [n for s, n in zip(plan.streams, plan.names) if n in present and s.task_order < order]
    found = streams(plan.out_dir, finished_only=True, names=names) if names else []
    if not found:
        return {}
    return decide_streams(found, baseline=until.baseline, effect=until.effect, max_orders=until.max_orders)


def needed(plan: Plan, until: UntilDecided, decisions: Mapping[str, Any]) -> dict[str, list[str]]:
    """env -> the methods to run in the next round: each whose comparison there is not decided (none made yet
    counts as undecided), and the baseline where any is."""
    out: dict[str, list[str]] = {}
    for env in plan.envs:
        methods = list(dict.fromkeys(s.method for s in plan.streams if s.env == env))
        open_ = [m for m in methods if m != until.baseline
                 and getattr(decisions.get(f"{env}/{m}"), "decision", UNDECIDED) == UNDECIDED]
        if open_:
            out[env] = [until.baseline, *open_]
    return out


def round_plan(plan: Plan, orders: Sequence[int], wanted: Mapping[str, Sequence[str]]) -> Plan:
    """The plan restricted to the round's streams: its orders, the wanted methods of each env."""
    keep = [(s, n) for s, n in zip(plan.streams, plan.names)
            if s.task_order in orders and s.method in wanted.get(s.env, ())]
    return dataclasses.replace(plan, streams=tuple(s for s, _ in keep), names=tuple(n for _, n in keep))


def run_rounds(plan: Plan, until: UntilDecided, run: Callable[[Plan], Any]) -> list[Any]:
    """Every round of ``plan`` (see the module docstring), each through ``run`` (the executor over a round's plan);
    what each round returned."""
    results = []
    for orders in round_orders(until.max_orders):
        wanted = needed(plan, until, decisions_before(plan, until, orders[0]))
        if not wanted:
            break
        part = round_plan(plan, orders, wanted)
        note(f"until decided: order{'s' if len(orders) > 1 else ''} {','.join(map(str, orders))} for "
             + "; ".join(f"{env}: {', '.join(methods)}" for env, methods in wanted.items()))
        results.append(run(part))
    final = decisions_before(plan, until, until.max_orders)
    if final:
        note("until decided: " + "; ".join(f"{k} {d.decision} after {d.orders_used} order(s)"
                                           for k, d in final.items()))
    return results


def ran(plan: Plan) -> Plan:
    """The plan restricted to the streams the folder holds (what the summary and the trackers are about)."""
    from tokenworth_agent.storage import runfolder

    present = set(runfolder.streams_in(plan.out_dir))
    keep = [(s, n) for s, n in zip(plan.streams, plan.names) if n in present]
    return dataclasses.replace(plan, streams=tuple(s for s, _ in keep), names=tuple(n for _, n in keep))


__all__ = ["round_orders", "decisions_before", "needed", "round_plan", "run_rounds", "ran"]
