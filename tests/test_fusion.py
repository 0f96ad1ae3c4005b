"""Reciprocal rank fusion and weighted-score fusion, page-level dedup."""

from __future__ import annotations

import pytest

from retriever.fusion import fuse
from wikiground.records import Hit


def hits(channel: str, items: list[tuple[int, int, float]]) -> list[Hit]:
    return [Hit(pid, page, score, rank, channel) for rank, (pid, page, score) in enumerate(items, 1)]


def test_rrf_combines_and_dedups_by_page():
    res = {
        "bm25": hits("bm25", [(10, 1, 9.0), (11, 1, 8.0), (20, 2, 7.0)]),
        "dense": hits("dense", [(20, 2, 0.9), (10, 1, 0.8), (30, 3, 0.7)]),
    }
    pages = fuse(res, weights={"bm25": 1.0, "dense": 1.0})
    assert [p.page_id for p in pages] == [1, 2, 3]  # ties broken by page id, deterministic
    # Page 1's second passage does not push page 2 down in bm25: page-level ranks are 1, 2.
    assert pages[0].ranks == {"bm25": 1, "dense": 2} and pages[1].ranks == {"bm25": 2, "dense": 1}
    assert pages[0].score == pytest.approx(1 / 61 + 1 / 62)
    assert pages[0].best.passage_id == 10 and [p.passage_id for p in pages[0].passages] == [10, 11]


def test_weights_change_the_winner():
    res = {
        "bm25": hits("bm25", [(10, 1, 9.0), (20, 2, 7.0)]),
        "dense": hits("dense", [(20, 2, 0.9), (10, 1, 0.8)]),
    }
    assert fuse(res, weights={"bm25": 1.0, "dense": 2.0})[0].page_id == 2
    assert fuse(res, weights={"bm25": 2.0, "dense": 1.0})[0].page_id == 1


def test_score_fusion_normalises_per_channel():
    res = {
        "bm25": hits("bm25", [(10, 1, 30.0), (20, 2, 10.0)]),
        "dense": hits("dense", [(20, 2, 0.95), (10, 1, 0.10)]),
    }
    pages = fuse(res, method="score", weights={"bm25": 1.0, "dense": 1.0})
    assert pages[0].score == pytest.approx(1.0) and pages[1].score == pytest.approx(1.0)
    with pytest.raises(ValueError):
        fuse(res, method="nope")


def test_title_match_carried_to_representative_passage():
    res = {
        "title": [Hit(11, 1, 2.0, 1, "title", matched="Aristotle")],
        "bm25": hits("bm25", [(10, 1, 9.0)]),
        "dense": hits("dense", [(10, 1, 0.9)]),
    }
    page = fuse(res)[0]
    assert page.best.passage_id == 10 and page.best.matched == "Aristotle"


def test_empty_and_passage_level():
    assert fuse({}) == [] and fuse({"bm25": []}) == []
    res = {"bm25": hits("bm25", [(10, 1, 9.0), (11, 1, 8.0), (20, 2, 7.0)])}
    assert [p.passage_id for p in fuse(res)[0].passages] == [10, 11]
