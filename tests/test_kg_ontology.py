"""LAB's KG ontology by default: a KG run reads the data's knowledge_graph/ontology/ unless told otherwise.

The plan (which writes nothing) resolves ``--kg-vocab``: not given and the folder there -> that folder, its
digest in the run's config (``harness.kg_vocab_sha256``); ``none`` -> no ontology; a folder named -> that one.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tokenworth_agent.benchmarks.kg.env import KGEnvironment
from tokenworth_agent.benchmarks.kg.sparql import FreebaseQueries, OxigraphEndpoint
from tokenworth_agent.experiment import DataConfig, OutputConfig, RunConfig, Streams, make_plan
from tokenworth_agent.experiment.config import HarnessConfig
from tokenworth_agent.experiment.plan import LaunchError
from tokenworth_agent.benchmarks.kg.tasks import kg_gold_replies
from tokenworth_agent.benchmarks.kg.ontology import load_kg_vocabulary
from tokenworth_agent.tasks import load_tasks
from tests.kg_fixture import build_fixture_store

ENDPOINT = "http://127.0.0.1:9/sparql"  # never queried: the plan only needs one named


def plan(data_dir, tmp_path: Path, kg_vocab=None, envs=("kg",)):
    return make_plan(RunConfig(Streams(envs=envs, methods=("standard",)),
                               data=DataConfig(data_dir=Path(data_dir), limit=1),
                               harness=HarnessConfig(options={"kg_endpoint": ENDPOINT, **({} if kg_vocab is None
                                                                                       else {"kg_vocab": Path(kg_vocab)})}),
                               output=OutputConfig(out=tmp_path / "run")))


def digest(folder: Path) -> str:
    """How the run's identity hashes an ontology folder (vocab.json, then fb_roles)."""
    parts = [hashlib.sha256((folder / name).read_bytes()).hexdigest().encode() for name in ("vocab.json", "fb_roles")]
    return hashlib.sha256(b"".join(parts)).hexdigest()


@pytest.fixture(scope="module")
def ontology(data_dir) -> Path:
    folder = Path(data_dir) / "knowledge_graph" / "ontology"
    if not (folder / "vocab.json").is_file():
        pytest.fail(f"{folder}: the shared data should ship LAB's KG ontology")
    return folder


def test_a_kg_run_uses_the_data_s_ontology_and_records_its_digest(data_dir, ontology, tmp_path) -> None:
    made = plan(data_dir, tmp_path)
    assert made.harness.kg_vocab == str(ontology)
    assert made.settings["harness"]["kg_vocab_sha256"] == digest(ontology)
    assert not (tmp_path / "run").exists()  # planning writes nothing


def test_kg_vocab_none_turns_it_off_and_a_named_folder_wins(data_dir, ontology, tmp_path) -> None:
    off = plan(data_dir, tmp_path, kg_vocab="none")
    assert off.harness.kg_vocab is None and off.settings["harness"]["kg_vocab_sha256"] is None
    other = tmp_path / "onto"
    other.mkdir()
    (other / "vocab.json").write_text('{"relations": [], "attributes": []}')
    (other / "fb_roles").write_text("a a.b.c a.thing\n")
    named = plan(data_dir, tmp_path, kg_vocab=other)
    assert named.settings["harness"]["kg_vocab_sha256"] == digest(other) != digest(ontology)


def test_without_the_folder_the_run_is_refused_never_run_without_it(data_dir, tmp_path) -> None:
    lab = tmp_path / "lifelongagentbench" / "knowledge_graph"
    lab.mkdir(parents=True)
    parquet = "train-00000-of-00001.parquet"
    (lab / parquet).symlink_to(Path(data_dir) / "knowledge_graph" / parquet)
    with pytest.raises(LaunchError, match=r"data fetch --env kg.*--kg-vocab none"):
        plan(tmp_path, tmp_path)
    (lab / "ontology").mkdir()
    (lab / "ontology" / "vocab.json").symlink_to(Path(data_dir) / "knowledge_graph/ontology/vocab.json")
    with pytest.raises(LaunchError, match="no fb_roles in"):  # one of the two is as missing as both
        plan(tmp_path, tmp_path)
    made = plan(tmp_path, tmp_path, kg_vocab="none")  # said out loud: runs without it
    assert made.harness.kg_vocab is None and made.settings["harness"]["kg_vocab_sha256"] is None


def test_a_db_run_is_untouched(data_dir, tmp_path) -> None:
    made = plan(data_dir, tmp_path, envs=("db",))
    assert made.harness.kg_vocab is None and "kg_vocab_sha256" not in made.settings["harness"]


def test_the_default_ontology_filters_an_attribute_listing(data_dir, tmp_path) -> None:
    """docs/kg.md's before/after: record 13 on the fixture graph, gold replies up to get_attributes."""
    vocabulary = load_kg_vocabulary(plan(data_dir, tmp_path).harness.kg_vocab)
    task = load_tasks("kg", data_dir)[13]
    store = build_fixture_store()
    listings = []
    for kb in (FreebaseQueries(OxigraphEndpoint(store)),
               FreebaseQueries(OxigraphEndpoint(store), relation_vocabulary=vocabulary.relations,
                               attribute_vocabulary=vocabulary.attributes, ranges=vocabulary.ranges)):
        env = KGEnvironment(kb)
        env.reset(task)
        listings.append([env.step(reply).observation for reply in kg_gold_replies(task)[:3]])
    before, after = listings
    assert before[:2] == after[:2]  # the relation listing and the variable's type agree here
    assert before[2].endswith("Observation: [book.written_work.copyright_date, book.written_work.number_of_pages]")
    assert after[2].endswith("Observation: [book.written_work.copyright_date]")


def test_none_means_no_ontology_for_every_caller_of_the_harness_flags() -> None:
    from tokenworth_agent.core.harness import harness_from_cli

    assert harness_from_cli("kg", kg_vocab="none").kg_vocab is None
    assert harness_from_cli("kg", kg_vocab=Path("None")).identity("kg")["kg_vocab_sha256"] is None
