"""The store's ``triples`` by subject as mmap'd arrays (``lookups/graph.*``, written by builds with the kg channel,
issue 24): the kg channel reads a page's facts from them with the answers, and the order, of its SQL over the
store."""

from __future__ import annotations

import json
import random
import re
import shutil

import pytest

import backends.kg as kg
from indexer import lookups
from indexer.store import Store
from tests.conftest import GENSIM_DUMP
from wikiground.errors import IndexFormatError
from wikiground.layout import LOOKUPS_DIR, PARAMS_FILE


@pytest.fixture(scope="module")
def kg_store(tmp_path_factory):
    """The gensim fixture dump built with the kg channel (it has no folder: its arrays go into lookups/)."""
    from indexer.build import build_index

    out = tmp_path_factory.mktemp("kg") / "index"
    build_index([GENSIM_DUMP], out, indexes=("kg",))
    return out


def _without_graph(store: Store, fn):
    saved, store._lookups.graph = store._lookups.graph, None
    try:
        return fn()
    finally:
        store._lookups.graph = saved


def test_written_with_the_kg_channel_only(kg_store, gensim_store):
    params = json.loads((kg_store / LOOKUPS_DIR / PARAMS_FILE).read_text())
    with Store.open(kg_store) as store:
        assert store.graph is not None
        assert params["keys"]["graph"] == len(store.graph) == store.count("triples") > 1000
    with Store.open(gensim_store) as plain:  # built without kg: the channel reads the triples in SQL
        assert plain._lookups is not None and plain.graph is None
        assert not list((gensim_store / LOOKUPS_DIR).glob("graph.*"))
        assert json.loads((gensim_store / LOOKUPS_DIR / PARAMS_FILE).read_text())["keys"]["graph"] == 0


def test_facts_as_in_the_store(kg_store):
    """Every subject's facts, in the SQL's order, with where their sentence lies."""
    with Store.open(kg_store) as store:
        graph = store.graph
        subjects = [r[0] for r in store.rows("SELECT DISTINCT subject_page_id FROM triples ORDER BY 1")]
        for at in range(0, len(subjects), 25):
            ids = [*subjects[at : at + 25], 10**12]  # and a page that states nothing
            got = graph.facts(ids)
            assert [r[:8] for r in got] == store.rows(*kg._hop1_sql(ids))
        capped = graph.facts(subjects[:40], per_subject=3)
        assert len(capped) == sum(min(3, len(graph.facts([s]))) for s in subjects[:40])
        facts = graph.facts(subjects)
        spans = {(p, s): (a, b) for p, s, a, b in store.rows("SELECT * EXCLUDE (sentence_index) FROM sentence_spans")}
        for r in facts:
            want = spans.get((r[6], r[7])) if r[6] is not None and r[7] is not None else None
            assert r[8] == want
        assert any(r[8] for r in facts) and any(r[5] == "infobox" for r in facts)


def test_facts_reaching_as_in_the_store(kg_store):
    """Hop 2: the facts reaching an entity, or whose object or relation a claim's word starts, up to a limit."""
    rng = random.Random(24)
    with Store.open(kg_store) as store:
        graph = store.graph
        subjects = [r[0] for r in store.rows("SELECT DISTINCT subject_page_id FROM triples ORDER BY 1")]
        objects = [r[0] for r in store.rows("SELECT DISTINCT object_title FROM triples")]
        for _ in range(60):
            mids = rng.sample(subjects, rng.randint(1, 60))
            entities = rng.sample(subjects, 3)
            words = [w for t in rng.sample(objects, 3) for w in re.findall(r"\w+", t.lower()) if len(w) > 1]
            terms = {w[:5] for w in words} | {rng.choice(["born", "influ", "menti", "is"])}
            pattern = r"\b(" + "|".join(sorted(re.escape(t) for t in terms)) + ")"
            limit = rng.choice([3, 40, 2000])
            want = store.rows(*kg._hop2_sql(sorted(mids), entities, pattern, limit))
            got = graph.facts_reaching(mids, entities, re.compile(pattern, re.ASCII), limit)
            assert [r[:8] for r in got] == want, pattern
        # Lower-cased as DuckDB does: "İsmet İnönü" is "ismet inönü", not with a combining dot after each "i"
        # (which would put a word boundary before "s" and "n").
        assert any(o.startswith("İ") for o in objects)
        want = store.rows(*kg._hop2_sql(subjects, [], r"\b(s|n)", 10**6))
        assert [r[:8] for r in graph.facts_reaching(subjects, [], re.compile(r"\b(s|n)", re.ASCII), 10**6)] == want
        assert graph.facts_reaching(subjects, [], None, 10) == []


def test_kg_channel_answers_alike_without_the_graph(kg_store):
    claims = [
        "Aristotle was influenced by Plato and Socrates.",
        "Aristotle was born in Stagira.",
        "Ayn Rand wrote novels.",
        "Alain Connes is a French mathematician.",
        "Achilles fought in the Trojan War.",
        "Albedo is the fraction of light that a surface reflects.",
    ]
    with Store.open(kg_store) as store:
        channel = kg.KgBackend(store)
        for claim in claims:
            got = channel.search(claim, 20)
            assert got == _without_graph(store, lambda c=claim: channel.search(c, 20))
        assert any(hit.triples for hit in channel.search(claims[0], 20))


def test_lookups_written_before_the_graph_arrays_get_the_older_format_error(kg_store, tmp_path):
    """Lookups of an older version had no graph arrays and no count of them in params.json."""
    out = tmp_path / "index"
    shutil.copytree(kg_store, out)
    folder = out / LOOKUPS_DIR
    for f in folder.glob("graph.*"):
        f.unlink()
    params = json.loads((folder / PARAMS_FILE).read_text())
    del params["keys"]["graph"]
    (folder / PARAMS_FILE).write_text(json.dumps(params))
    with pytest.raises(
        IndexFormatError, match=r"lookups: built by an older wikiground \(format 2, counting no graph\)"
    ):
        Store.open(out)
    with pytest.raises(IndexFormatError, match=r"rebuild it with `wikiground index \.\.\.`"):
        Store.open(out)


@pytest.mark.parametrize("name", ["graph.object.npy", "graph.objects.bin", "graph.subject_start.npy"])
def test_cut_graph_files_are_not_used(kg_store, tmp_path, name, caplog):
    out = tmp_path / "index"
    shutil.copytree(kg_store, out)
    path = out / LOOKUPS_DIR / name
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with Store.open(out) as store:
        assert store.graph is None
        assert kg.KgBackend(store).search("Aristotle was influenced by Plato.", 10)  # the store answers
    assert LOOKUPS_DIR in caplog.text


def test_no_graph_when_a_sentence_span_is_ambiguous(kg_store, tmp_path, caplog):
    import duckdb

    out = tmp_path / "store.duckdb"
    shutil.copy(kg_store / "wiki.duckdb", out)
    con = duckdb.connect(str(out))
    try:
        con.execute(
            "INSERT INTO sentence_spans SELECT * FROM sentence_spans WHERE (passage_id, page_sentence_index) IN "
            "(SELECT (passage_id, sentence_id) FROM triples WHERE sentence_id IS NOT NULL LIMIT 1)"
        )
    finally:
        con.close()
    counts = lookups.build(out, tmp_path / "lookups", "some-build")
    assert counts["graph"] == 0 and not list((tmp_path / "lookups").glob("graph.*"))
    assert "not unique" in caplog.text


def test_columns_take_the_narrowest_type_their_values_need():
    """Each per-fact column is as narrow as this store's values allow (-1 stands for NULL); a larger id widens it."""
    import duckdb
    import numpy as np

    from indexer import graph_lookups

    con = duckdb.connect()
    con.execute(
        "CREATE TABLE triples (object_title VARCHAR, object_page_id BIGINT, relation VARCHAR, passage_id BIGINT, "
        "sentence_id INTEGER)"
    )
    con.execute("CREATE TABLE sentence_spans (end_char INTEGER)")
    con.execute("INSERT INTO triples VALUES ('A', NULL, 'mentions', 7, NULL), ('B', 3, 'category', 127, 40)")
    con.execute("INSERT INTO sentence_spans VALUES (128)")
    types = graph_lookups.column_types(con)
    assert types == {
        "object": np.int8,
        "relation": np.int8,
        "passage_id": np.int8,
        "sentence_id": np.int8,
        "start": np.int16,
        "end": np.int16,
        "source": np.uint8,
    }
    con.execute("INSERT INTO triples VALUES ('C', 4, 'mentions', 2147483648, 70000)")
    types = graph_lookups.column_types(con)
    assert types["passage_id"] == np.int64 and types["sentence_id"] == np.int32
    assert graph_lookups.narrowest(-1, 32767) == np.int16 and graph_lookups.narrowest(-129, 0) == np.int16


def test_an_object_page_is_kept_once_per_object(kg_store):
    """One page id per distinct (object title, page) pair (a category and an article of one name are two objects;
    test_facts_as_in_the_store checks every fact's page against the SQL's)."""
    from indexer import graph_lookups

    with Store.open(kg_store) as store:
        pairs = store.rows("SELECT count(*) FROM (SELECT DISTINCT object_title, object_page_id FROM triples)")[0][0]
        assert len(store.graph.object_page) == len(store.graph.strings["objects"]) == pairs
        assert store.graph.columns["object"].dtype == graph_lookups.narrowest(-1, pairs - 1)
