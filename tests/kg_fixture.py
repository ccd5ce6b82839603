"""A small Freebase-shaped graph for the KG environment's tests and demos.

It holds, for ten real LifelongAgentBench KG records (:data:`REPLAYED_RECORDS`), triples
that make each record's gold ``action_list`` valid and its ``s_expression`` evaluate to
its ``answer_list``. The triples are invented but plausible: the topic entities and
answer MIDs are the record's own; intermediate entities get fixture MIDs (``m.0fx_…``).
Each record also has distractors (members that an intersection or a superlative must
drop, extra relations), so a wrong tool semantics gives a wrong answer.

Freebase conventions kept: every property has schema triples
(``type.property.schema`` / ``expected_type`` / ``reverse_property``) and its reverse is
materialised as its own forward predicate; entities carry ``type.object.type`` and an
English ``type.object.name``; numbers and dates are typed literals (xsd:float, xsd:int,
xsd:gYear, xsd:date, xsd:dateTime).
"""

from __future__ import annotations

import dataclasses
import re

import pyoxigraph as ox

NS = "http://rdf.freebase.com/ns/"
XSD = "http://www.w3.org/2001/XMLSchema#"

# sample_index -> what it exercises
REPLAYED_RECORDS: dict[int, str] = {
    0: "two intersections (nested AND)",
    1: "two-hop chains on both sides, then intersection; two answers",
    2: "two-hop chain, count = 45",
    4: "one hop, count = 1",
    6: "intersection, then get_relations/get_neighbors on the intersection; 13 answers",
    8: "two-hop chain, intersection, count = 4",
    12: "argmax over dates; the topic entity is in the set and must be filtered out",
    13: "argmin over gYear",
    25: "argmax over xsd:float with a tie: both tied engines are answers",
    38: "two-hop chain, argmin over gYear",
}


def _node(freebase_id: str) -> ox.NamedNode:
    return ox.NamedNode(NS + freebase_id)


@dataclasses.dataclass
class FreebaseGraph:
    """Builds Freebase-style triples into an oxigraph store."""

    store: ox.Store = dataclasses.field(default_factory=ox.Store)
    reverse: dict[str, str] = dataclasses.field(default_factory=dict)

    def add(self, subject: str, predicate: str, obj: ox.NamedNode | ox.Literal) -> None:
        self.store.add(ox.Quad(_node(subject), _node(predicate), obj))

    def entity(self, mid: str, name: str, *types: str) -> str:
        if not re.match(r"^m\.[0-9a-z_]+$", mid):
            raise ValueError(f"fixture MID {mid!r} does not look like a Freebase MID")
        self.add(mid, "type.object.name", ox.Literal(name, language="en"))
        for type_ in types:
            self.add(mid, "type.object.type", _node(type_))
        return mid

    def prop(self, relation: str, domain: str, range_: str, reverse: str | None = None, reverse_range: str | None = None) -> None:
        """A property and, when given, its reverse (domain and range swapped)."""
        self.add(relation, "type.property.schema", _node(domain))
        self.add(relation, "type.property.expected_type", _node(range_))
        if reverse is not None:
            self.add(relation, "type.property.reverse_property", _node(reverse))
            self.add(reverse, "type.property.schema", _node(range_))
            self.add(reverse, "type.property.expected_type", _node(reverse_range or domain))
            self.add(reverse, "type.property.reverse_property", _node(relation))
            self.reverse[relation] = reverse
            self.reverse[reverse] = relation

    def link(self, subject: str, relation: str, *objects: str) -> None:
        """``subject relation object`` for each object, plus the reverse edge as Freebase stores it."""
        for obj in objects:
            self.add(subject, relation, _node(obj))
            if relation in self.reverse:
                self.add(obj, self.reverse[relation], _node(subject))

    def value(self, subject: str, attribute: str, lexical: str, datatype: str) -> None:
        self.add(subject, attribute, ox.Literal(lexical, datatype=ox.NamedNode(XSD + datatype)))


def _cheese(g: FreebaseGraph) -> None:  # record 0
    g.prop("food.cheese_milk_source.cheeses", "food.cheese_milk_source", "food.cheese", "food.cheese.source_of_milk")
    g.prop("food.cheese_texture.cheeses", "food.cheese_texture", "food.cheese", "food.cheese.texture")
    g.prop("biology.domesticated_animal.breeds", "biology.domesticated_animal", "biology.animal_breed")
    goat = g.entity("m.03fwl", "Goat", "food.cheese_milk_source", "biology.domesticated_animal")
    cows = g.entity("m.01xq0k1", "Cow", "food.cheese_milk_source")
    semi_firm = g.entity("m.02h82t0", "Semi-firm", "food.cheese_texture")
    answer = g.entity("m.02h8b9t", "Mixed-milk semi-firm cheese", "food.cheese")
    goat_only = g.entity("m.0fx_goat_cheese", "Chevre", "food.cheese")
    cow_semi = g.entity("m.0fx_cow_semi", "Havarti", "food.cheese")
    goat_soft = g.entity("m.0fx_goat_cow_soft", "Robiola", "food.cheese")
    g.entity("m.0fx_saanen", "Saanen goat", "biology.animal_breed")
    g.link(goat, "food.cheese_milk_source.cheeses", answer, goat_only, goat_soft)
    g.link(cows, "food.cheese_milk_source.cheeses", answer, cow_semi, goat_soft)
    g.link(semi_firm, "food.cheese_texture.cheeses", answer, cow_semi)
    g.link(goat, "biology.domesticated_animal.breeds", "m.0fx_saanen")


def _dosage(g: FreebaseGraph) -> None:  # record 1
    g.prop("medicine.drug.marketed_formulations", "medicine.drug", "medicine.drug_formulation", "medicine.drug_formulation.formulation_of")
    g.prop("medicine.drug_formulation.dosage_form", "medicine.drug_formulation", "medicine.drug_dosage_form", "medicine.drug_dosage_form.formulations_available_in_this_form")
    g.prop("medicine.drug_ingredient.active_moiety_of_formulation", "medicine.drug_ingredient", "medicine.drug_formulation", "medicine.drug_formulation.active_ingredient_moieties")
    naloxone = g.entity("m.011_yk", "Naloxone", "medicine.drug", "medicine.drug_ingredient")
    enalaprilat = g.entity("m.0gfdnjk", "Enalaprilat", "medicine.drug_ingredient")
    injection = g.entity("m.04kdvcr", "Injection", "medicine.drug_dosage_form")
    solution = g.entity("m.0hqyxrs", "Solution", "medicine.drug_dosage_form")
    tablet = g.entity("m.0fx_tablet", "Tablet", "medicine.drug_dosage_form")
    spray = g.entity("m.0fx_spray", "Nasal spray", "medicine.drug_dosage_form")
    for mid, name in [("m.0fx_nal_inj", "Naloxone injection"), ("m.0fx_nal_sol", "Naloxone solution"),
                      ("m.0fx_nal_spray", "Naloxone nasal spray"), ("m.0fx_ena_inj", "Enalaprilat injection"),
                      ("m.0fx_ena_sol", "Enalaprilat solution"), ("m.0fx_ena_tab", "Enalaprilat tablet")]:
        g.entity(mid, name, "medicine.drug_formulation")
    g.link(naloxone, "medicine.drug.marketed_formulations", "m.0fx_nal_inj", "m.0fx_nal_sol", "m.0fx_nal_spray")
    g.link(enalaprilat, "medicine.drug_ingredient.active_moiety_of_formulation", "m.0fx_ena_inj", "m.0fx_ena_sol", "m.0fx_ena_tab")
    g.link("m.0fx_nal_inj", "medicine.drug_formulation.dosage_form", injection)
    g.link("m.0fx_nal_sol", "medicine.drug_formulation.dosage_form", solution)
    g.link("m.0fx_nal_spray", "medicine.drug_formulation.dosage_form", spray)
    g.link("m.0fx_ena_inj", "medicine.drug_formulation.dosage_form", injection)
    g.link("m.0fx_ena_sol", "medicine.drug_formulation.dosage_form", solution)
    g.link("m.0fx_ena_tab", "medicine.drug_formulation.dosage_form", tablet)


def _species(g: FreebaseGraph) -> None:  # record 2
    g.prop("fictional_universe.fictional_setting.universe", "fictional_universe.fictional_setting", "fictional_universe.fictional_universe", "fictional_universe.fictional_universe.locations")
    g.prop("fictional_universe.fictional_universe.species", "fictional_universe.fictional_universe", "fictional_universe.character_species", "fictional_universe.character_species.found_in_fictional_universe")
    sphere = g.entity("m.0cb9qd6", "Seventh sphere", "fictional_universe.fictional_setting")
    universe = g.entity("m.0fx_ad_universe", "Chronicles universe", "fictional_universe.fictional_universe")
    g.link(sphere, "fictional_universe.fictional_setting.universe", universe)
    species = [g.entity(f"m.0fx_species_{i:02d}", f"Species {i}", "fictional_universe.character_species") for i in range(45)]
    g.link(universe, "fictional_universe.fictional_universe.species", *species)
    # A species of another universe, reachable from nothing the gold path visits.
    g.link(g.entity("m.0fx_other_universe", "Other universe", "fictional_universe.fictional_universe"),
           "fictional_universe.fictional_universe.species", g.entity("m.0fx_species_x", "Outsider", "fictional_universe.character_species"))


def _side_effect(g: FreebaseGraph) -> None:  # record 4
    g.prop("medicine.symptom.side_effect_of", "medicine.symptom", "medicine.medical_treatment", "medicine.medical_treatment.side_effects")
    g.prop("medicine.symptom.symptom_of", "medicine.symptom", "medicine.disease", "medicine.disease.symptoms")
    unsteadiness = g.entity("m.01y2h01", "Unsteadiness", "medicine.symptom")
    g.link(unsteadiness, "medicine.symptom.side_effect_of", g.entity("m.0fx_sedative", "Sedative therapy", "medicine.medical_treatment"))
    g.link(unsteadiness, "medicine.symptom.symptom_of", g.entity("m.0fx_vertigo", "Vertigo", "medicine.disease"),
           g.entity("m.0fx_ataxia", "Ataxia", "medicine.disease"))


_BASIE_RELEASES = ("m.034j2_2", "m.036lglx", "m.036t0zd", "m.038vfnm", "m.039qk15", "m.039v5j5", "m.0dmh_s7",
                   "m.0dntcfd", "m.0dqwvds", "m.0fcks0x", "m.0ff7bxz", "m.0fkbyyj", "m.0g6r1kx")


def _basie(g: FreebaseGraph) -> None:  # record 6
    g.prop("music.artist.track", "music.artist", "music.recording", "music.recording.artist")
    g.prop("music.featured_artist.recordings", "music.featured_artist", "music.recording", "music.recording.featured_artists")
    g.prop("music.recording.releases", "music.recording", "music.release", "music.release.track")
    basie = g.entity("m.01r4szq", "Count Basie Orchestra", "music.artist")
    williams = g.entity("m.01bsdt", "Joe Williams", "music.artist", "music.featured_artist")
    every_day = g.entity("m.0fx_every_day", "Every Day I Have the Blues", "music.recording")
    alright = g.entity("m.0fx_alright", "Alright, Okay, You Win", "music.recording")
    april = g.entity("m.0fx_april", "April in Paris", "music.recording")
    solo = g.entity("m.0fx_williams_solo", "Williams solo recording", "music.recording")
    g.link(basie, "music.artist.track", every_day, alright, april)
    g.link(williams, "music.featured_artist.recordings", every_day, alright, solo)
    for mid in _BASIE_RELEASES:
        g.entity(mid, f"Release {mid}", "music.release")
    g.link(every_day, "music.recording.releases", *_BASIE_RELEASES[:8])
    g.link(alright, "music.recording.releases", *_BASIE_RELEASES[6:])
    g.link(april, "music.recording.releases", g.entity("m.0fx_april_lp", "April in Paris (LP)", "music.release"))
    g.link(solo, "music.recording.releases", g.entity("m.0fx_solo_lp", "A Man Ain't Supposed to Cry", "music.release"))


def _temperament(g: FreebaseGraph) -> None:  # record 8
    g.prop("biology.breed_origin.breeds_originating_here", "biology.breed_origin", "biology.animal_breed", "biology.animal_breed.place_of_origin")
    g.prop("biology.animal_breed.temperament", "biology.animal_breed", "biology.breed_temperament", "biology.breed_temperament.breeds")
    canada = g.entity("m.0d060g", "Canada", "biology.breed_origin", "location.country")
    bull_terrier = g.entity("m.05h0h0", "Bull Terrier", "biology.animal_breed")
    breeds = [g.entity(f"m.0fx_breed_{i}", name, "biology.animal_breed")
              for i, name in enumerate( ("Newfoundland", "Nova Scotia Duck Tolling Retriever", "Labrador Retriever"))]
    g.link(canada, "biology.breed_origin.breeds_originating_here", *breeds)
    temper = {name: g.entity(f"m.0fx_temper_{name.lower()}", name, "biology.breed_temperament")
              for name in ("Friendly", "Loyal", "Playful", "Intelligent", "Gentle", "Patient", "Stubborn")}
    g.link(breeds[0], "biology.animal_breed.temperament", temper["Gentle"], temper["Patient"], temper["Loyal"])
    g.link(breeds[1], "biology.animal_breed.temperament", temper["Playful"], temper["Intelligent"])
    g.link(breeds[2], "biology.animal_breed.temperament", temper["Friendly"], temper["Intelligent"], temper["Gentle"])
    g.link(bull_terrier, "biology.animal_breed.temperament", temper["Friendly"], temper["Loyal"], temper["Playful"],
           temper["Intelligent"], temper["Stubborn"])


def _cyclone(g: FreebaseGraph) -> None:  # record 12
    g.prop("meteorology.tropical_cyclone.category", "meteorology.tropical_cyclone", "meteorology.tropical_cyclone_category", "meteorology.tropical_cyclone_category.tropical_cyclones")
    dolly = g.entity("m.04dn799", "Hurricane Dolly", "meteorology.tropical_cyclone")
    category = g.entity("m.0fx_cat1", "Category 1 hurricane", "meteorology.tropical_cyclone_category")
    answer = g.entity("m.011v6mk8", "Hurricane Nana", "meteorology.tropical_cyclone")
    older = [g.entity(f"m.0fx_cyclone_{i}", f"Hurricane {i}", "meteorology.tropical_cyclone") for i in range(3)]
    for cyclone in (dolly, answer, *older):
        g.link(cyclone, "meteorology.tropical_cyclone.category", category)
    # Dolly formed last of all: argmax must skip the topic entity, as the original's filter does.
    g.value(dolly, "meteorology.tropical_cyclone.formed", "2021-07-20T00:00:00", "dateTime")
    g.value(answer, "meteorology.tropical_cyclone.formed", "2020-09-01T00:00:00", "dateTime")
    for cyclone, when in zip(older, ("1996-08-20T00:00:00", "2002-09-15T00:00:00", "2011-08-21T00:00:00")):
        g.value(cyclone, "meteorology.tropical_cyclone.formed", when, "dateTime")
    g.value(older[0], "meteorology.tropical_cyclone.highest_winds", "140.0", "float")
    g.add(older[1], "common.topic.description", ox.Literal("A short-lived storm.", language="en"))


def _short_story(g: FreebaseGraph) -> None:  # record 13
    g.prop("fictional_universe.fictional_universe.works_set_here", "fictional_universe.fictional_universe", "fictional_universe.work_of_fiction", "fictional_universe.work_of_fiction.setting")
    universe = g.entity("m.0ch8hcq", "The Sacred Band of Stepsons universe", "fictional_universe.fictional_universe")
    answer = g.entity("m.0cqztld", "The Face of Chaos", "fictional_universe.work_of_fiction", "book.written_work")
    later = [g.entity(f"m.0fx_story_{i}", f"Story {i}", "fictional_universe.work_of_fiction", "book.written_work") for i in range(3)]
    undated = g.entity("m.0fx_story_undated", "Undated story", "fictional_universe.work_of_fiction")
    g.link(universe, "fictional_universe.fictional_universe.works_set_here", answer, *later, undated)
    g.value(answer, "book.written_work.copyright_date", "1979", "gYear")
    for story, year in zip(later, ("1980", "1985", "2010")):
        g.value(story, "book.written_work.copyright_date", year, "gYear")
    g.value(later[2], "book.written_work.number_of_pages", "312", "int")


def _rocket(g: FreebaseGraph) -> None:  # record 25
    g.prop("spaceflight.rocket_engine_fuel.rocket_engines", "spaceflight.rocket_engine_fuel", "spaceflight.bipropellant_rocket_engine", "spaceflight.bipropellant_rocket_engine.fuel")
    fuel = g.entity("m.04g6yx", "Pentaborane", "spaceflight.rocket_engine_fuel")
    tied = [g.entity(mid, name, "spaceflight.bipropellant_rocket_engine") for mid, name in (("m.02xlt6v", "HEF-1"), ("m.02xlt9t", "Zip-fuel engine"))]
    weaker = g.entity("m.0fx_engine_weak", "Test engine", "spaceflight.bipropellant_rocket_engine")
    unmeasured = g.entity("m.0fx_engine_unknown", "Paper engine", "spaceflight.bipropellant_rocket_engine")
    g.link(fuel, "spaceflight.rocket_engine_fuel.rocket_engines", *tied, weaker, unmeasured)
    for engine in tied:
        g.value(engine, "spaceflight.bipropellant_rocket_engine.chamber_pressure", "6.9", "float")
    g.value(weaker, "spaceflight.bipropellant_rocket_engine.chamber_pressure", "4.1", "float")
    g.value(weaker, "spaceflight.bipropellant_rocket_engine.isp", "310", "int")


def _nobility(g: FreebaseGraph) -> None:  # record 38
    g.prop("royalty.noble_rank.used_in", "royalty.noble_rank", "royalty.system_rank_relationship", "royalty.system_rank_relationship.rank")
    g.prop("royalty.system_rank_relationship.system", "royalty.system_rank_relationship", "royalty.system_of_nobility", "royalty.system_of_nobility.rank_relationships")
    count = g.entity("m.01bxth", "Count", "royalty.noble_rank")
    systems = {"m.01phzd": ("Peerage of England", "1066"), "m.0fx_peerage_fr": ("French nobility", "1100"),
               "m.0fx_peerage_hre": ("Nobility of the Holy Roman Empire", "1200")}
    for i, (mid, (name, since)) in enumerate(systems.items()):
        g.entity(mid, name, "royalty.system_of_nobility")
        g.value(mid, "royalty.system_of_nobility.used_from_date", since, "gYear")
        relationship = g.entity(f"m.0fx_rank_rel_{i}", f"Count in {name}", "royalty.system_rank_relationship")
        g.link(count, "royalty.noble_rank.used_in", relationship)
        g.link(relationship, "royalty.system_rank_relationship.system", mid)
    # A system that has no count: older, but not reachable, so argmin must not see it.
    g.entity("m.0fx_peerage_old", "Ancient peerage", "royalty.system_of_nobility")
    g.value("m.0fx_peerage_old", "royalty.system_of_nobility.used_from_date", "0800", "gYear")


_BUILDERS = (_cheese, _dosage, _species, _side_effect, _basie, _temperament, _cyclone, _short_story, _rocket, _nobility)


def build_fixture_graph() -> FreebaseGraph:
    graph = FreebaseGraph()
    for build in _BUILDERS:
        build(graph)
    return graph


def build_fixture_store() -> ox.Store:
    """The oxigraph store holding the whole fixture graph."""
    return build_fixture_graph().store
