"""The TF-IDF delta part's postings (``backends.delta_scoring.TfidfPart``): walked as the base walks its own lists,
with the base's posting budget cutting them where it cuts the base's, they give the scores of scoring every delta
passage by brute force under the same cut."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from backends.delta_corpus import DeltaCorpus
from backends.delta_scoring import TfidfPart
from backends.tfidf import TfidfBackend, water_fill
from backends.tfidf_postings import read_lists
from indexer.store import Store

CLAIMS = [
    "Aristotle was a Greek philosopher and the teacher of Alexander the Great.",
    "The film was directed by an American director in the United States of America.",
    "Alabama is a state in the southeastern region of the United States.",
    "the of and in to a is was",
]


def _corpus(store: Store, n: int) -> DeltaCorpus:
    rows = store.rows(
        "SELECT passage_id, page_id, title, heading_path, text FROM passages ORDER BY passage_id LIMIT ?", [n]
    )
    return DeltaCorpus(
        np.array([r[0] for r in rows]),
        np.array([r[1] for r in rows]),
        [r[2] for r in rows],
        [r[3] for r in rows],
        [r[4] for r in rows],
        np.arange(len(rows)),
    )


def _cuts(base: TfidfBackend, tids: np.ndarray) -> np.ndarray:
    """The lowest weight the base reads of each list, by decoding what it reads (reference for ``base_cut``)."""
    ends = base._indptr[tids + 1]
    lengths = ends - base._indptr[tids]
    take = water_fill(lengths, base.posting_budget)
    _, weights = read_lists(base._indices, base._weights, ends, take, base._wlo[tids], base._wstep[tids], base._id_bits)
    cuts, at = [], 0
    for n, length in zip(take.tolist(), lengths.tolist()):
        cuts.append(-np.inf if n == length else (weights[at] if n else np.inf))
        at += n
    return np.array(cuts, dtype=np.float32)


def _brute_force(part: TfidfPart, claim: str, k: int) -> list[tuple[int, float]]:
    """Every corpus passage scored from its whole vector (the part's postings laid out as a dense matrix), a term
    counted where its weight reaches the base's cut, summed in float32 in term order."""
    tids, q = part.base.vectorize(claim)
    dense = np.zeros((len(part.corpus), len(part.columns)), dtype=np.float32)
    for j in range(len(part.columns)):
        a, b = part.indptr[j], part.indptr[j + 1]
        dense[part.rows[a:b], j] = part.weights[a:b]
    scores = np.zeros(len(part.corpus), dtype=np.float32)
    for t, w, cut in zip(tids.tolist(), q.tolist(), _cuts(part.base, tids).tolist()):
        j = np.searchsorted(part.columns, t)
        if j < len(part.columns) and part.columns[j] == t:
            col = dense[:, j]
            scores += np.where((col > 0) & (col >= cut), col * np.float32(w), np.float32(0))
    order = sorted(np.flatnonzero(scores > 0), key=lambda r: (-scores[r], part.corpus.passage_ids[r]))[:k]
    return [(int(part.corpus.passage_ids[r]), float(scores[r])) for r in order]


@pytest.mark.parametrize("budget", [60, 400, 10**9])
def test_tfidf_delta_postings_score_as_brute_force_under_the_base_cut(gensim_tfidf, budget):
    base = TfidfBackend(gensim_tfidf / "tfidf", posting_budget=budget)
    with Store.open(gensim_tfidf) as store:
        part = TfidfPart(base, _corpus(store, 600))
    cut_somewhere = False
    for claim in CLAIMS:
        tids, _ = base.vectorize(claim)
        assert np.array_equal(part.base_cut(tids), _cuts(base, tids))
        cut_somewhere |= bool(np.isfinite(part.base_cut(tids)).any())
        hits = part.search_batch([claim], 20)[0]
        assert [(h.passage_id, h.score) for h in hits] == _brute_force(part, claim, 20)
        assert hits
    assert cut_somewhere == (budget < 10**9)  # the small budgets cut lists, the large one reads them whole


def test_without_a_cut_the_postings_give_the_base_hits(gensim_tfidf):
    """Base passages scored by the part, with no list cut: the base's own hits and scores (in float32, summed in
    the base's order)."""
    base = TfidfBackend(gensim_tfidf / "tfidf", posting_budget=10**9)
    with Store.open(gensim_tfidf) as store:
        n = store.count("passages")
        part = TfidfPart(base, _corpus(store, n))
    for claim in CLAIMS:
        mine = [(h.passage_id, h.score) for h in part.search_batch([claim], 10)[0]]
        theirs = [(h.passage_id, h.score) for h in base.search(claim, 10)]
        assert [m[0] for m in mine] == [t[0] for t in theirs]
        assert np.allclose([m[1] for m in mine], [t[1] for t in theirs], rtol=0, atol=1e-5)


BM25_CLAIMS = [
    *CLAIMS[:3],
    "Achilles was a hero of the Trojan War and the son of Peleus.",
    "Anarchism is a political philosophy.",
]


def test_bm25_delta_lists_by_impact_score_as_every_row_and_as_lucene(gensim_index, monkeypatch):
    """Every base passage as the BM25 delta part's corpus: its bounded reading of the lists (MaxScore over lists by
    impact) gives the hits of scoring every row, and those are Lucene's own top hits."""
    from backends import bm25_delta, load

    with Store.open(gensim_index) as store:
        bm25 = load("bm25", gensim_index, store=store)
        try:
            part = bm25_delta.BM25Part(bm25, _corpus(store, store.count("passages")))
            pruned = False
            for claim in BM25_CLAIMS:
                monkeypatch.setattr(bm25_delta, "PRUNE_FROM", 0)
                bounded = part.search_batch([claim], 10)[0]
                counts = Counter(part._analyze(part._analyzer, claim).toArray())
                lists = part._lists(counts)
                read, _ = bm25_delta._scores(lists, 10, len(part.corpus))
                pruned |= len(read) < len(np.unique(np.concatenate([t.rows for t in lists])))
                monkeypatch.setattr(bm25_delta, "PRUNE_FROM", 10**12)
                whole = part.search_batch([claim], 10)[0]
                assert [(h.passage_id, h.score) for h in bounded] == [(h.passage_id, h.score) for h in whole]
                assert [(h.passage_id, h.score) for h in whole] == [
                    (h.passage_id, h.score) for h in bm25.search(claim, 10)
                ]
            assert pruned  # the bounds left rows unread
        finally:
            bm25.close()


def _hidden(base_hits) -> frozenset[int]:
    """Every third page among a claim's base hits, as if the delta had replaced them: their hits are dropped."""
    return frozenset(h.page_id for h in base_hits[::3])


def _searched_apart_and_with_the_base(channel: str, base, part, claim: str, k: int, hidden: frozenset[int]):
    """The merged list from the base's hits and the part's searched apart (every delta hit of the part's ``k``
    best), and from ``search_with_base``, which leaves out the delta rows below the base's k-th merged score."""
    from backends.delta_parts import merge_hits

    alone = part.search_batch([claim], k)[0]
    apart = merge_hits(base.search(claim, 2 * k), alone, hidden, k, channel)
    base_hits, delta_hits = part.search_with_base([claim], k, 2 * k, hidden)
    together = merge_hits(base_hits[0], delta_hits[0], hidden, k, channel)
    assert [(h.passage_id, h.score, h.rank) for h in together] == [(h.passage_id, h.score, h.rank) for h in apart]
    return len(delta_hits[0]) < len(alone)  # hits left out


@pytest.mark.parametrize("prune_from", [0, 10**12])
def test_bm25_part_searched_with_the_base_merges_as_searched_apart(gensim_index, monkeypatch, prune_from):
    """The base's k-th merged score as the BM25 part's MaxScore threshold (or, scored whole, as a floor on its
    hits) changes no merged list, and it leaves delta hits out (the part's corpus: the first 600 base passages)."""
    from backends import bm25_delta, load

    monkeypatch.setattr(bm25_delta, "PRUNE_FROM", prune_from)
    with Store.open(gensim_index) as store:
        bm25 = load("bm25", gensim_index, store=store)
        try:
            part = bm25_delta.BM25Part(bm25, _corpus(store, 600))
            left_out = False
            for claim in BM25_CLAIMS:
                for hidden in (_hidden(bm25.search(claim, 20)), frozenset()):  # pages replaced, or only added
                    left_out |= _searched_apart_and_with_the_base("bm25", bm25, part, claim, 10, hidden)
            assert left_out
        finally:
            bm25.close()


def test_tfidf_part_searched_with_the_base_merges_as_searched_apart(gensim_tfidf):
    """One vectorization for the base and the TF-IDF part, and the part's hits below the base's k-th merged score
    left out: the same merged lists."""
    base = TfidfBackend(gensim_tfidf / "tfidf")
    with Store.open(gensim_tfidf) as store:
        part = TfidfPart(base, _corpus(store, 600))
    left_out = False
    for claim in CLAIMS:
        for hidden in (_hidden(base.search(claim, 20)), frozenset()):  # pages replaced, or only added
            left_out |= _searched_apart_and_with_the_base("tfidf", base, part, claim, 10, hidden)
    assert left_out


@pytest.mark.parametrize("slice_size", [1, 7, 1000])
def test_bm25_delta_postings_made_a_slice_at_a_time_are_those_of_the_whole(slice_size):
    """Each term (sorted) with its rows ascending and its counts, whatever the slices the documents come in."""
    from backends.bm25_delta import _packed_postings

    rng = np.random.default_rng(5)
    words = [f"w{i}" for i in range(60)] + ["é", "z", "a"]
    docs = [list(rng.choice(words, size=int(rng.integers(0, 30)))) for _ in range(200)]
    packed, lengths = _packed_postings(docs[a : a + slice_size] for a in range(0, len(docs), slice_size))
    lists: dict[str, list[tuple[int, int]]] = {}
    for row, doc in enumerate(docs):
        for term, tf in Counter(doc).items():
            lists.setdefault(term, []).append((row, tf))
    names = sorted(lists)
    raw, ends = bytes(packed["terms"]), packed["term_ends"].tolist()
    assert [raw[a:b].decode("utf-8") for a, b in zip([0, *ends[:-1]], ends)] == names
    starts = packed["starts"].tolist()
    for i, term in enumerate(names):
        a, b = starts[i], starts[i + 1]
        assert list(zip(packed["rows"][a:b].tolist(), packed["tfs"][a:b].tolist())) == lists[term]
    assert packed["rows"].dtype == np.int32 and packed["tfs"].dtype == np.float32
    assert lengths.tolist() == [len(d) for d in docs]
