"""LifelongAgentBench's KG stream: tool calls against Freebase over SPARQL, judged on the final answer's entities.

Its options: ``--kg-parser`` (strict: exactly LAB's reply parser; lenient: the project's), ``--kg-vocab``
(LAB's ontology folder; by default the data's, refused when the data has the tasks but not it; ``none``:
off) and ``--kg-endpoint`` (the SPARQL endpoint; ``$TOKENWORTH_KG_ENDPOINT``). The parser's name and
the ontology's digest enter the run's identity (``kg_parser``, ``kg_vocab_sha256``); the endpoint does not.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

from tokenworth_agent.benchmarks.base import Benchmark, BenchmarkOption
from tokenworth_agent.benchmarks.kg.data import downloads
from tokenworth_agent.benchmarks.kg.env import ENDPOINT_ENV_VAR, INSTRUCTIONS
from tokenworth_agent.benchmarks.kg.memory import compact
from tokenworth_agent.benchmarks.kg.replies import reply
from tokenworth_agent.benchmarks.kg.tasks import SOURCE
from tokenworth_agent.core.budget import Budget
from tokenworth_agent.core.harness import HarnessError
from tokenworth_agent.tasks.lab import lab_data_source

KG_PARSERS = ("strict", "lenient")

OPTIONS = (
    BenchmarkOption("kg_parser", str, "strict", "KG reply parser: strict (exactly LAB's) or lenient.", identity=True,
                    choices=KG_PARSERS),
    BenchmarkOption("kg_vocab", Path, None, "KG: LAB's ontology (vocab.json, fb_roles); default: the data's; none: off."),
    BenchmarkOption("kg_endpoint", str, None, "SPARQL endpoint for --env kg.", show_default="$TOKENWORTH_KG_ENDPOINT"),
)


def resolve_options(options: dict[str, Any], data_dir: Any, from_data: bool = True) -> dict[str, Any]:
    """``--kg-vocab`` as the run uses it: the folder given; ``none`` for no ontology; when not given, LAB's ontology
    folder in the KG data (``knowledge_graph/ontology/`` with vocab.json and fb_roles). Not given and not there,
    while the KG tasks are: refused, since a run without the ontology lists other relations and scores
    differently (docs/kg.md); never dropped without a word. Without the tasks either, the data check that
    follows names the fetch that brings both (``from_data`` False: not looked for). ``--kg-endpoint``: the one
    given, else ``$TOKENWORTH_KG_ENDPOINT``."""
    from tokenworth_agent.tasks.lab import ENV_SUBDIR, ONTOLOGY_DIR, ONTOLOGY_FILES, PARQUET_NAME, ontology_folder
    from tokenworth_agent.tasks.registry import data_folder

    given = options.get("kg_vocab")
    if given is not None:
        vocab = None if str(given).strip().lower() == "none" else given
    elif not from_data:  # not a run's plan (a direct call): no ontology unless one is named
        vocab = None
    else:
        folder = data_folder("kg", data_dir)
        found = ontology_folder(folder)
        if found is None and (folder / ENV_SUBDIR["kg"] / PARQUET_NAME).is_file():
            missing = [name for name in ONTOLOGY_FILES if not (folder / ONTOLOGY_DIR / name).is_file()]
            raise HarnessError(f"KG's ontology is missing: no {' or '.join(missing)} in {folder / ONTOLOGY_DIR}, "
                               "where the KG tasks expect it; `tokenworth data fetch --env kg` fetches it with the "
                               "tasks, or pass --kg-vocab none to run without it (or --kg-vocab DIR to name another "
                               "folder)")
        vocab = None if found is None else str(found)
    endpoint = options.get("kg_endpoint") or os.environ.get(ENDPOINT_ENV_VAR)
    if from_data and not endpoint:  # a run needs one (there is no offline Freebase); a direct call may leave it out
        from tokenworth_agent.benchmarks.kg.env import KGEndpointRequired, make_kg_environment

        try:
            make_kg_environment(None)
        except KGEndpointRequired as exc:
            raise HarnessError(str(exc)) from None  # it names --kg-endpoint and TOKENWORTH_KG_ENDPOINT
    return {**options, "kg_vocab": vocab, "kg_endpoint": endpoint}


def _vocab(options: Mapping[str, Any]) -> Any:
    from tokenworth_agent.benchmarks.kg.ontology import load_kg_vocabulary

    folder = options.get("kg_vocab")
    if folder is None or str(folder).strip().lower() == "none":
        return None
    return load_kg_vocabulary(str(folder))


def setup_check(options: Mapping[str, Any]) -> None:
    """The ontology's files read now (the endpoint is checked where a run is planned: resolve_options)."""
    _vocab(options)


def identity(options: Mapping[str, Any]) -> dict[str, Any]:
    from tokenworth_agent.benchmarks.kg.ontology import vocab_digest

    folder = options.get("kg_vocab")
    none = folder is None or str(folder).strip().lower() == "none"
    return {"kg_vocab_sha256": None if none else vocab_digest(str(folder))}


def _environment(budget: Budget, options: Mapping[str, Any], instructions: str | None) -> Any:
    from tokenworth_agent.benchmarks.kg.env import make_kg_environment

    return make_kg_environment(options.get("kg_endpoint"), max_rounds=budget.max_rounds,
                               parser=options.get("kg_parser") or "strict", vocabulary=_vocab(options),
                               instructions=instructions)


def _commands() -> Any:
    from tokenworth_agent.benchmarks.kg.cli import commands

    return commands()


BENCHMARK = Benchmark(
    name="kg", tasks=SOURCE, instructions=INSTRUCTIONS, make_environment=_environment, compact_memory=compact,
    limits=dict(max_output_tokens=128, max_rounds=15, max_memories=1, max_injected_chars=4096),  # Table A1
    sim_reply=reply, sim_p0_range=(0.05, 0.60),
    options=OPTIONS, resolve_options=resolve_options, setup_check=setup_check, identity=identity,
    downloads=downloads, data_source=lambda data_dir, folders: lab_data_source("kg", data_dir, folders),
    data_note="a KG run refuses to start without its ontology (or runs without it with --kg-vocab none)",
    commands=_commands,
    description="LifelongAgentBench KG: Freebase over SPARQL (396 tasks)")
