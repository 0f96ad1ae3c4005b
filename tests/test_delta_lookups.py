"""The delta's lookups made once per delta read (``indexer.delta_lookups``) answer as the SQL they replace, and a
delta part's top hits (``backends.delta_corpus.top_hits``, which orders only the scores above a sampled floor) are
those of ordering every score."""

from __future__ import annotations

import duckdb
import numpy as np
import pytest

from backends.delta_corpus import DeltaCorpus, top_hits
from indexer.delta_lookups import DeltaTitles, prepare
from indexer.schema import DDL
from indexer.store import _RESOLVE_SQL
from wikiground.text import canonical_title, normalize_title

# (page_id, title, is_disambiguation): two titles sharing a normalised key (the shorter wins, then the lower id).
PAGES = [(10, "Paris", False), (11, "PARIS", False), (12, "Paris (disambiguation)", True), (13, "Mercury", False)]
PAGES += [(14, "MERCURY", False)]
# (source, target): a redirect to a page outside the delta (never answered from the delta), two sources sharing a
# normalised key (the lower source title wins), a loop (no target).
REDIRECTS = [("City of Light", "Paris"), ("Planet Mercury", "Mercury"), ("planet mercury", "MERCURY")]
REDIRECTS += [("Lutetia", "Not In The Delta"), ("Loop", None)]


@pytest.fixture
def delta():
    con = duckdb.connect()
    con.execute(DDL)
    for pid, title, dab in PAGES:
        con.execute(
            "INSERT INTO pages (page_id, title, namespace, is_disambiguation, title_norm) VALUES (?, ?, 0, ?, ?)",
            [pid, title, dab, normalize_title(title)],
        )
    for source, target in REDIRECTS:
        con.execute(
            "INSERT INTO redirects (source_title, target_title, source_norm, namespace, direct_target) "
            "VALUES (?, ?, ?, 0, ?)",
            [source, target, normalize_title(source), target or source],
        )
    yield con
    con.close()


ASKED = ["Paris", "paris", "PARIS", "City of Light", "city of light", "Planet Mercury", "PLANET MERCURY", "Lutetia"]
ASKED += ["Loop", "Mercury", "mercury", "Nowhere", "Paris (disambiguation)"]


def test_delta_titles_answer_as_the_resolve_sql(delta):
    titles = sorted({canonical_title(t) for t in ASKED})
    keys = sorted({normalize_title(t) for t in ASKED} - {""})
    sql = delta.execute(_RESOLVE_SQL, [titles, keys]).fetchall()
    mine = DeltaTitles.of(delta).rows(titles, keys)
    assert sorted(mine) == sorted(sql)
    assert {r[1] for r in mine if r[0] == 2} >= {"paris", "mercury"} and len(mine) == len(sql) > 8


def test_prepare_orders_the_facts_by_subject_and_keeps_them(delta):
    rows = [(pid, f"S{pid}", "mentions", f"O{i}", None, "text", None, None, None) for i, pid in enumerate([9, 3, 7, 3])]
    delta.executemany("INSERT INTO triples VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    sentences = [(pid, i, i, "A sentence.", 0, 11) for pid, i in [(5, 1), (2, 0), (5, 0), (2, 1)]]
    delta.executemany("INSERT INTO sentences VALUES (?, ?, ?, ?, ?, ?)", sentences)
    # Page 10: an infobox passage first, its lead is its first text passage; page 13: a table only.
    passages = [(501, 10, "info", 0), (502, 10, "text", 1), (503, 10, "text", 2), (601, 13, "table", 0)]
    delta.executemany(
        "INSERT INTO passages VALUES (?, ?, 0, 'Text.', 'T', '', ?, ?)", [(a, b, c, d) for a, b, c, d in passages]
    )
    delta.execute("UPDATE pages SET origin = 'update', rev_timestamp = '2026-11-26T09:00:00Z' WHERE page_id = 10")
    lookups = prepare(delta)
    assert {10: lookups.leads[10][0], 13: lookups.leads[13][0]} == {10: 502, 13: 601} and 11 not in lookups.leads
    assert lookups.origins[10] == ("update", "2026-11-26T09:00:00Z") and lookups.origins[11][0] == "local"
    assert [r[0] for r in delta.execute("SELECT subject_page_id FROM triples").fetchall()] == [3, 3, 7, 9]
    spans = delta.execute("SELECT passage_id, sentence_index FROM sentence_spans").fetchall()  # the view still reads
    assert spans == [(2, 0), (2, 1), (5, 0), (5, 1)]
    assert lookups.sentence_ids([5, 7, 2]) == {2: [0, 1], 5: [0, 1]}  # evidence's sentence ids, in sentence order
    assert (
        "paris" in lookups.titles.norms and "lutetia" in lookups.titles.norms
    )  # every redirect's key, its target held or not
    indexed = {r[0] for r in delta.execute("SELECT index_name FROM duckdb_indexes()").fetchall()}
    assert {"pages_title", "passages_page"} <= indexed


def test_the_delta_graph_answers_as_the_kg_sql(delta):
    """The delta's facts by subject (``delta_graph``) are the rows and sentence spans the kg channel's SQL over the
    delta's triples gives: hop 1, and hop 2 by object page and by a claim word."""
    import re

    from backends.kg import _hop1_sql, _hop2_sql, _spans_sql

    rows = [
        (13, "Mercury", "orbits", "Sun", None, "infobox", 700, 1, 5),
        (10, "Paris", "capital_of", "France", 20, "infobox", 500, 0, 5),
        (10, "Paris", "mentions", "Seine", 21, "link", 501, 1, 5),
        (10, "Paris", "category", "Capitals in Europe", None, "category", None, None, 5),
        (13, "Mercury", "mentions", "Paris", 10, "link", 701, 0, 5),
        (13, "Mercury", "mentions", "Venus", 22, "link", 700, 0, 5),
    ]
    delta.executemany("INSERT INTO triples VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    sentences = [(500, 0, 0, "Paris is in France.", 0, 19), (501, 0, 1, "On the Seine.", 3, 16)]
    sentences += [(700, 0, 0, "Mercury is near Venus.", 0, 22), (700, 1, 1, "It orbits the Sun.", 23, 41)]
    sentences += [(701, 0, 0, "Paris named it.", 2, 17)]
    delta.executemany("INSERT INTO sentences VALUES (?, ?, ?, ?, ?, ?)", sentences)
    graph = prepare(delta).graph
    spans = {(p, s): (a, b) for p, s, a, b in delta.execute(*_spans_sql([500, 501, 700, 701])).fetchall()}

    def sql(query):
        return [(*r, spans.get((r[6], r[7]))) for r in delta.execute(*query).fetchall()]

    assert graph.facts([13, 10, 99]) == sql(_hop1_sql([13, 10, 99])) and len(graph.facts([10, 13])) == 6
    both = sql(_hop1_sql([10, 13]))
    assert (
        graph.facts([10, 13], per_subject=2)
        == [r for r in both if r[0] == 10][:2] + [r for r in both if r[0] == 13][:2]
    )
    for pattern in (r"\b(venus)", r"\b(sun|capitals)", None):
        regex = re.compile(pattern, re.ASCII) if pattern else None
        want = sql(_hop2_sql([10, 13], [10], pattern or r"^\b$", 50))
        assert graph.facts_reaching([10, 13], [10], regex, 50) == want and want


def _corpus(n: int) -> DeltaCorpus:
    ids = np.arange(1000, 1000 + n, dtype=np.int64)
    return DeltaCorpus(ids, ids // 3, [f"T{i}" for i in range(n)], (), (), np.zeros(0, dtype=np.int64))


def _reference(scores: np.ndarray, k: int, passage_ids: np.ndarray) -> list[tuple[int, float]]:
    order = sorted((i for i in range(len(scores)) if scores[i] > 0), key=lambda i: (-scores[i], passage_ids[i]))
    return [(int(passage_ids[i]), float(scores[i])) for i in order[:k]]


@pytest.mark.parametrize("n, k, zeros", [(5000, 20, 0.0), (5000, 40, 0.97), (300, 40, 0.5), (100, 5, 1.0)])
def test_top_hits_are_those_of_ordering_every_score(n, k, zeros):
    rng = np.random.default_rng(n + k)
    scores = np.round(rng.random(n), 2)  # rounded: many ties, broken by passage id
    scores[rng.random(n) < zeros] = 0.0
    corpus = _corpus(n)
    hits = top_hits(corpus, scores, k, "bm25")
    assert [(h.passage_id, h.score) for h in hits] == _reference(scores, k, corpus.passage_ids)
    rows = rng.permutation(n)[: n // 2]  # scores of some rows only, as the BM25 and dense parts pass them
    some = top_hits(corpus, scores[rows], k, "bm25", rows)
    assert [(h.passage_id, h.score) for h in some] == _reference(scores[rows], k, corpus.passage_ids[rows])
