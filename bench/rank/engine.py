"""Run ``tokenworth`` with extra tokenworth-rank variants registered (research only).

``tokenworth run --grid`` takes TokenWorth's ``HParams`` only; the ranker's hyperparameters are
its own (:class:`tokenworth_jax.rank.model.RankParams`). This registers each ``--variant
NAME=KEY=VALUE;KEY=VALUE`` (Python literals) as a method ``NAME`` (the tokenworth-rank policy
with those overrides) and then runs the ``tokenworth`` command line given after ``--``:

    python -m bench.rank.engine --variant "rank-greedy=explore=0.0" -- \\
        run --env db --methods tokenworth-rank,rank-greedy --seeds 0,1,2 --out runs/rank-db
"""

from __future__ import annotations

import argparse
import ast
import functools
from typing import Any, Sequence


def parse_variant(item: str) -> tuple[str, dict[str, Any]]:
    name, sep, body = item.partition("=")
    if not sep or not name.strip():
        raise ValueError(f"--variant wants NAME=KEY=VALUE;..., got {item!r}")
    overrides = {}
    for kv in filter(None, body.split(";")):
        key, eq, value = kv.partition("=")
        if not eq:
            raise ValueError(f"--variant {item!r}: {kv!r} is not KEY=VALUE")
        overrides[key.strip()] = ast.literal_eval(value.strip())
    return name.strip(), overrides


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", action="append", default=[])
    parser.add_argument("rest", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    from agent.cli import app
    from agent.policies.registry import POLICIES
    from agent.policies.tokenworth_rank import TokenWorthRankPolicy

    for item in args.variant:
        name, overrides = parse_variant(item)
        POLICIES.register(name, functools.partial(_variant, name, overrides, TokenWorthRankPolicy))
    rest = args.rest[1:] if args.rest[:1] == ["--"] else args.rest
    app(rest, prog_name="tokenworth", standalone_mode=False)


def _variant(name: str, overrides: dict[str, Any], cls: type, env: str, budget: Any, seed: int = 0,
             **more: Any) -> Any:
    policy = cls(env, budget, seed, **{**overrides, **more})
    policy.name = name
    return policy


if __name__ == "__main__":
    main()
