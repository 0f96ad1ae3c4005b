"""The knowledge-graph channel: the store's `triples` table and the `kg` channel's paths, on real pages."""

from __future__ import annotations

import json
import shutil

import duckdb
import pytest

from indexer.triples import infobox_link_targets, link_relation, normalise_relation
from indexer.wikitext import parse_wikitext
from tests.conftest import DATA
from wikiground.errors import ConfigError, IndexMissingError

HOTPOT = DATA / "corpora" / "hotpotqa2017_abstracts.jsonl"
HOTPOT_CLAIMS = DATA / "claims" / "hotpotqa_dev_multihop.jsonl"
# A real HotpotQA dev question whose two gold pages ("Gum Wall", "San Luis Obispo, California") both name the
# place, and whose other entity ("Bubblegum Alley") names it too.
BRIDGE_ID = "5ae0006755429925eb1afbd3"
BRIDGE_PAGES = ("Gum Wall", "Bubblegum Alley", "San Luis Obispo, California")


def triples(index, where: str, params=()) -> list[tuple]:
    con = duckdb.connect(str(index / "wiki.duckdb"), read_only=True)
    try:
        return con.execute(
            "SELECT subject_title, relation, object_title, object_page_id, source, passage_id, sentence_id, rev_id "
            f"FROM triples WHERE {where}",
            list(params),
        ).fetchall()
    finally:
        con.close()


def test_relations_are_normalised():
    assert {normalise_relation(k) for k in ("birth_place", "birthplace", "place_of_birth", "Birth place")} == {
        "birth_place"
    }
    assert normalise_relation("place_of_death") == normalise_relation("deathplace") == "death_place"
    assert normalise_relation("date_of_birth") == "birth_date"
    assert link_relation("birth_date", "Stagira (ancient city)") == "birth_place"
    assert link_relation("birth_date", "384 BC") == "birth_date"


def test_aristotle_infobox_gives_one_triple_per_link(gensim_store):
    rows = triples(gensim_store, "subject_title = 'Aristotle' AND source = 'infobox'")
    influences = {r[2] for r in rows if r[1] == "influences"}
    assert {"Plato", "Socrates", "Parmenides", "Heraclitus", "Democritus"} <= influences
    # Stagira is linked inside the birth_date value (`384 BC {{longitem|[[Stagira (ancient city)|Stagira]], ...`):
    # a place in a date field is the birth place, stated by the infobox's "birth date" row.
    (stagira,) = [r for r in rows if r[2] == "Stagira (ancient city)"]
    assert stagira[1] == "birth_place" and stagira[3] is None  # no Stagira page in the dump: object_page_id NULL
    con = duckdb.connect(str(gensim_store / "wiki.duckdb"), read_only=True)
    try:
        row = con.execute(
            "SELECT s.text, p.source, pg.rev_id FROM sentences s JOIN passages p USING (passage_id) "
            "JOIN pages pg ON pg.page_id = p.page_id WHERE s.passage_id = ? AND s.page_sentence_index = ?",
            [stagira[5], stagira[6]],
        ).fetchone()
    finally:
        con.close()
    assert row[0].startswith("birth date: 384 BC") and "Stagira" in row[0] and row[1] == "info"
    assert stagira[7] == row[2]


def test_infobox_value_with_several_links():
    text = (
        "{{Infobox philosopher\n| influences = {{hlist |[[Parmenides]] |[[Socrates]] |[[Plato|P.]]}}"
        "<ref>[[Cited Book]]</ref>\n| era = [[Ancient philosophy]]\n| name = Someone\n}}\nBody."
    )
    # A footnote's links are its sources, not the value's facts.
    assert infobox_link_targets(parse_wikitext(text)) == {
        "influences": ["Parmenides", "Socrates", "Plato"],
        "era": ["Ancient philosophy"],
    }


def test_links_keep_their_sentence(gensim_store):
    con = duckdb.connect(str(gensim_store / "wiki.duckdb"), read_only=True)
    try:
        stated = con.execute(
            "SELECT count(*), count(*) FILTER (WHERE strpos(s.text, l.anchor_text) > 0) FROM triples t "
            "JOIN sentences s ON s.passage_id = t.passage_id AND s.page_sentence_index = t.sentence_id "
            "JOIN (SELECT page_id, target_title, first(anchor_text) AS anchor_text FROM links GROUP BY ALL) l "
            "ON l.page_id = t.subject_page_id AND l.target_title = t.object_title WHERE t.source = 'link'"
        ).fetchone()
        links = con.execute("SELECT count(DISTINCT (page_id, target_title)) FROM links").fetchone()[0]
        relations = set(
            con.execute("SELECT DISTINCT source, relation FROM triples WHERE source <> 'infobox'").fetchall()
        )
        sources = {r[0] for r in con.execute("SELECT DISTINCT source FROM triples").fetchall()}
        infobox_relations = con.execute("SELECT count(*) FROM triples WHERE relation IS NULL").fetchone()[0]
    finally:
        con.close()
    # One mentions triple per linked title of a page, nearly all with the sentence that holds the link.
    assert stated[0] >= 0.99 * links and stated[1] >= 0.95 * stated[0]
    assert relations == {("link", "mentions"), ("see_also", "see_also"), ("category", "category")}
    assert sources == {"infobox", "link", "see_also", "category"} and infobox_relations == 0
    # The facts staged during the build are gone from the finished index.
    assert sorted(p.name for p in gensim_store.iterdir()) == ["lookups", "manifest.json", "wiki.duckdb"]


def test_objects_resolve_after_redirects(tmp_path):
    from indexer.build import build_index

    out = tmp_path / "index"
    build_index([DATA / "dumps" / "wikibrain-en_test.xml"], out, indexes=(), workers=1)
    # "Panjabi" links to [[Panjabi language]], a redirect to "Punjabi language", which the dump holds.
    rows = triples(out, "subject_title = 'Panjabi' AND object_title = 'Panjabi language'")
    target = triples(out, "subject_title = 'Punjabi language' LIMIT 1")
    con = duckdb.connect(str(out / "wiki.duckdb"), read_only=True)
    punjabi = con.execute("SELECT page_id FROM pages WHERE title = 'Punjabi language'").fetchone()[0]
    con.close()
    assert target and [r[3] for r in rows] == [punjabi]
    assert all(r[3] is None for r in triples(out, "object_title = 'Nowhere page that does not exist'"))


def test_kg_channel_returns_paths_as_evidence(gensim_store):
    from retriever import Retriever

    with Retriever.open(gensim_store, channels="title,kg") as r:
        result = r.search("Aristotle was influenced by Plato.", k=5, passages=True)
    items = [e.to_dict() for e in result.evidence]
    kg = [e for e in items if e["source"] == "kg"]
    assert kg, items
    fact = {"subject": "Aristotle", "relation": "influences", "object": "Plato", "hop": 1, "origin": "local"}
    (row,) = [e for e in kg if {k: v for k, v in e["triples"][0].items() if k != "score"} == fact]
    assert row["title"] == "Aristotle" and "kg" in row["ranks"]
    assert row["evidence_text"].startswith("influences:") and "Plato" in row["evidence_text"]
    assert row["url"].endswith("/Aristotle") and row["rev_id"] and "section" in row
    # The channel alone ranks that fact first: relation and object both match the claim.
    with Retriever.open(gensim_store, channels="kg") as r:
        hits = r.channel_search("kg", "Aristotle was influenced by Plato.", 3)
    assert hits[0].triples[0]["relation"] == "influences" and hits[0].triples[0]["object"] == "Plato"


def test_kg_is_named_by_all_and_builds_no_folder():
    from indexer.build import parse_index_list
    from wikiground.layout import CHANNELS

    assert "kg" in CHANNELS and "kg" in parse_index_list("all")
    assert parse_index_list("bm25,kg") == ("bm25", "kg")
    with pytest.raises(ConfigError):
        from indexer.build import _check_indexes

        _check_indexes("title")


@pytest.fixture(scope="module")
def bridge_index(tmp_path_factory):
    """The bridge question's three pages among a few dozen other real HotpotQA abstracts, with the kg channel."""
    from indexer.build import build_index

    wanted = set(BRIDGE_PAGES)
    lines = HOTPOT.read_text(encoding="utf-8").splitlines()
    picked = [ln for ln in lines if json.loads(ln)["title"] in wanted] + lines[:40]
    folder = tmp_path_factory.mktemp("kg")
    corpus = folder / "corpus.jsonl"
    corpus.write_text("\n".join(dict.fromkeys(picked)) + "\n", encoding="utf-8")
    out = folder / "index"
    build_index([corpus], out, indexes=("kg",), workers=1)
    return out


def test_two_hop_path_between_a_bridge_questions_entities(bridge_index):
    from retriever import Retriever

    claim = next(json.loads(ln) for ln in HOTPOT_CLAIMS.open(encoding="utf-8") if BRIDGE_ID in ln)
    assert set(claim["gold_titles"]) <= set(BRIDGE_PAGES)
    manifest = json.loads((bridge_index / "manifest.json").read_text(encoding="utf-8"))
    assert "kg" in manifest["indexes"] and not (bridge_index / "kg").exists()
    with Retriever.open(bridge_index) as r:
        assert "kg" in r.channels  # listed in the manifest: part of the default channels
        result = r.search(claim["question"], k=10, passages=True)
    paths = [tuple(e.extra.get("triples", ())) for e in result.evidence]
    two_hop = [p for p in paths if len(p) == 2]
    ends = [{p[0]["subject"], p[0]["object"], p[1]["subject"], p[1]["object"]} for p in two_hop]
    assert {"Gum Wall", "Bubblegum Alley", "San Luis Obispo, California"} in ends, paths
    assert "San Luis Obispo, California" in {e.title for e in result.evidence}


def test_kg_needs_the_triples_table(gensim_store, tmp_path):
    from retriever import Retriever

    old = tmp_path / "index"
    shutil.copytree(gensim_store, old)
    con = duckdb.connect(str(old / "wiki.duckdb"))
    con.execute("DROP TABLE triples")
    con.execute("CHECKPOINT")
    con.close()
    manifest = json.loads((old / "manifest.json").read_text(encoding="utf-8"))
    manifest["store_bytes"] = (old / "wiki.duckdb").stat().st_size
    (old / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    with pytest.raises(IndexMissingError, match="kg"):
        Retriever.open(old, channels="title,kg")
    with Retriever.open(old) as r:  # an older store still serves its other channels
        assert "kg" not in r.channels


def test_kg_paths_give_multihop_bridges(bridge_index):
    from retriever import Retriever
    from retriever.multihop import MultiHopParams, MultiHopRetriever
    from retriever.multihop.bridges import find_bridges, kg_bridges

    claim = next(json.loads(ln) for ln in HOTPOT_CLAIMS.open(encoding="utf-8") if BRIDGE_ID in ln)
    question = claim["question"]
    with Retriever.open(bridge_index) as r:
        store = r.store
        (bubblegum,) = store.rows("SELECT page_id FROM pages WHERE title = 'Bubblegum Alley'")
        parents = [(bubblegum[0], "Bubblegum Alley", "")]  # no text: only the kg can lead anywhere
        found = {b[0] for b in kg_bridges(r.backend("kg"), parents, question)}
        assert "San Luis Obispo, California" in found
        bridges = find_bridges(
            store, parents, ["bubblegum", "alley", "located", "california"], kg=r.backend("kg"), claim=question
        )
        assert ("San Luis Obispo, California", "kg") in {(b.title, b.via) for b in bridges}
        assert find_bridges(store, parents, ["california"]) == []  # without the kg, an empty text leads nowhere
        result = MultiHopRetriever(r, params=MultiHopParams(final_k=5, hops=2)).search(question)
    assert set(claim["gold_titles"]) <= {e.title for e in result.evidence}


def test_live_pages_add_their_links_and_categories_to_kg_paths(tmp_path):
    """A page fetched live and ingested brings its links and categories (asked of the API) into ``triples``, and
    the next, offline search finds a path through it, marked ``origin: live``."""
    from dataclasses import replace

    from fallback.settings import FallbackSettings
    from indexer.build import build_index
    from indexer.store import Store
    from retriever import Retriever
    from tests.support.fakewiki import FakeWiki, pages_from_vital

    vital = DATA / "corpora" / "vital_articles_summaries.json"
    local = {"Plato", "Athens", "Aristotle"}
    src = tmp_path / "local.jsonl"
    rows = json.loads(vital.read_text(encoding="utf-8")).values()
    src.write_text(
        "".join(json.dumps({"title": r["title"], "text": r["extract"]}) + "\n" for r in rows if r["title"] in local),
        encoding="utf-8",
    )
    index = tmp_path / "index"
    build_index([src], index, indexes=("kg",), workers=1)
    (socrates,) = pages_from_vital(vital, titles=["Socrates"]).values()
    socrates = replace(socrates, see_also=("Plato", "Athens"), categories=("Ancient Greek philosophers",))
    settings = FallbackSettings(api_url="", contact="tests@example.org", cache_dir=tmp_path / "cache", rate=1000)
    claim = "Socrates taught Plato in Athens."
    with FakeWiki([socrates]) as wiki:
        opts = {"on_the_fly": True, "fallback": settings.with_(api_url=wiki.api_url), "ingest_live": True}
        with Retriever.open(index, **opts) as r:
            assert "kg" in r.channels
            assert r.search(claim, 5).stats["ingested"] == 1

    with Store.open(index) as store:
        plato = store.resolve_titles(["Plato"])["Plato"].page_id
        facts = store.rows(
            "SELECT relation, object_title, object_page_id, source FROM triples WHERE subject_title = ?", ["Socrates"]
        )
    assert ("mentions", "Plato", plato, "link") in facts
    assert ("category", "Ancient Greek philosophers", None, "category") in facts

    with Retriever.open(index, channels="title,kg") as r:  # offline: the delta serves
        found = r.search(claim, 5).evidence
    paths = [t for e in found for t in e.extra.get("triples", ())]
    hop = next(t for t in paths if t["subject"] == "Socrates" and t["object"] == "Plato")
    assert hop["origin"] == "live" and hop["relation"] == "mentions"
    assert all(t["origin"] == "local" for t in paths if t["subject"] != "Socrates")
