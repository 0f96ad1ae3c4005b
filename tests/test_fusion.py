"""Reciprocal rank fusion and weighted-score fusion, page-level dedup."""

from __future__ import annotations

import pytest

from retriever.fusion import PLAIN, PROMOTION, Promotion, fuse
from wikiground.records import Hit

# The tests of the promotion pin ``rank1=None`` (the promotion alone); the learned rank 1 has tests of its own
# (tests/test_rank1.py).

MARGIN_GAIN, TITLE_PROTECT, PROMOTE_WITHIN = PROMOTION.margin_gain, PROMOTION.title_protect, PROMOTION.within


def hits(channel: str, items: list[tuple[int, int, float]]) -> list[Hit]:
    return [Hit(pid, page, score, rank, channel) for rank, (pid, page, score) in enumerate(items, 1)]


def test_rrf_combines_and_dedups_by_page():
    res = {
        "bm25": hits("bm25", [(10, 1, 9.0), (11, 1, 8.0), (20, 2, 7.0)]),
        "dense": hits("dense", [(20, 2, 0.9), (10, 1, 0.8), (30, 3, 0.7)]),
    }
    pages = fuse(res, weights={"bm25": 1.0, "dense": 1.0}, rank1=None)
    assert [p.page_id for p in pages] == [1, 2, 3]  # ties broken by page id, deterministic
    # Page 1's second passage does not push page 2 down in bm25: page-level ranks are 1, 2.
    assert pages[0].ranks == {"bm25": 1, "dense": 2} and pages[1].ranks == {"bm25": 2, "dense": 1}
    # Plain RRF, plus bm25's rank-1 lead (9 over 7, to a thousandth) as a promotion of its first page.
    assert pages[0].score == pytest.approx(1 / 61 + 1 / 62 + MARGIN_GAIN / 61 * round((9 - 7) / 9, 3))
    assert pages[0].best.passage_id == 10 and [p.passage_id for p in pages[0].passages] == [10, 11]


def test_weights_change_the_winner():
    res = {
        "bm25": hits("bm25", [(10, 1, 9.0), (20, 2, 7.0)]),
        "dense": hits("dense", [(20, 2, 0.9), (10, 1, 0.8)]),
    }
    assert fuse(res, weights={"bm25": 1.0, "dense": 2.0}, rank1=None)[0].page_id == 2
    assert fuse(res, weights={"bm25": 2.0, "dense": 1.0}, rank1=None)[0].page_id == 1


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
    page = fuse(res, rank1=None)[0]
    assert page.best.passage_id == 10 and page.best.matched == "Aristotle"


def test_empty_and_passage_level():
    assert fuse({}) == [] and fuse({"bm25": []}) == []
    res = {"bm25": hits("bm25", [(10, 1, 9.0), (11, 1, 8.0), (20, 2, 7.0)])}
    assert [p.passage_id for p in fuse(res, rank1=None)[0].passages] == [10, 11]


def test_a_sure_channel_puts_its_first_page_first():
    # Plain RRF puts page 1 first (two channels' second rank against one rank 1 and a rank 3); bm25 leads by far.
    res = {
        "bm25": hits("bm25", [(20, 2, 30.0), (10, 1, 10.0)]),
        "dense": hits("dense", [(30, 3, 0.80), (10, 1, 0.79), (20, 2, 0.78)]),
        "tfidf": hits("tfidf", [(30, 3, 0.50), (10, 1, 0.49)]),
    }
    assert fuse(res, promotion=PLAIN, rank1=None)[0].page_id == 1
    pages = fuse(res, rank1=None)
    assert pages[0].page_id == 2
    assert [p.score for p in pages] == sorted((p.score for p in pages), reverse=True)
    # Without its lead (a close second), bm25's rank 1 no longer outweighs the others.
    res["bm25"] = hits("bm25", [(20, 2, 30.0), (10, 1, 29.9)])
    assert fuse(res, rank1=None)[0].page_id != 2


def test_title_channel_exact_entity_is_protected_at_the_top():
    res = {
        "title": [Hit(50, 5, TITLE_PROTECT + 0.1, 1, "title", matched="Aristotle")],
        "bm25": hits("bm25", [(10, 1, 9.0), (20, 2, 8.9), (50, 5, 8.8)]),
        "dense": hits("dense", [(10, 1, 0.9), (20, 2, 0.89)]),
    }
    assert fuse(res, method="score")[0].page_id == 1 and fuse(res, rank1=None)[0].page_id == 5
    res["title"] = [Hit(50, 5, TITLE_PROTECT - 0.5, 1, "title", matched="Aristotle")]  # a partial or late name
    assert fuse(res, rank1=None)[0].page_id == 1
    res["title"] = [Hit(50, 5, TITLE_PROTECT + 0.1, 1, "title", matched="Aristotle")]
    assert fuse(res, weights={"title": 0.0}, rank1=None)[0].page_id == 1  # a channel weighed 0 promotes nothing


def test_promotion_reorders_the_top_pages_only():
    # Page 9 is bm25's sure first page but 6th in plain RRF: it stays out of the top PROMOTE_WITHIN.
    others = [(10 * i, i, 1.0 - i / 100) for i in range(1, PROMOTE_WITHIN + 1)]
    res = {
        "bm25": hits("bm25", [(90, 9, 100.0), *[(pid, page, 1.0) for pid, page, _ in others]]),
        "dense": hits("dense", others),
        "tfidf": hits("tfidf", others),
    }
    plain = [p.page_id for p in fuse(res, promotion=PLAIN, rank1=None)]
    assert plain.index(9) == PROMOTE_WITHIN and fuse(res, rank1=None)[PROMOTE_WITHIN].page_id == 9
    assert (
        fuse(res, promotion=Promotion(margin_gain=MARGIN_GAIN, within=PROMOTE_WITHIN + 1), rank1=None)[0].page_id == 9
    )


def test_a_protected_title_page_below_the_top_is_made_the_last_of_it():
    # Pages 1..6 agree in bm25, dense and tfidf; the title channel's exact name (page 9) is in none of them.
    agreed = [(10 * i, i, 1.0 - i / 100) for i in range(1, PROMOTE_WITHIN + 2)]
    res = {c: hits(c, agreed) for c in ("bm25", "dense", "tfidf")}
    res["title"] = [Hit(90, 9, TITLE_PROTECT + 0.1, 1, "title", matched="Aristotle")]
    order = [p.page_id for p in fuse(res, rank1=None)]
    assert order[:PROMOTE_WITHIN] == [1, 2, 3, 4, 9]  # rank 1 stays the text channels' choice
    assert order[PROMOTE_WITHIN:] == [5, 6]
    scores = [p.score for p in fuse(res, rank1=None)]
    assert scores == sorted(scores, reverse=True)
    res["title"] = [Hit(90, 9, TITLE_PROTECT - 0.5, 1, "title", matched="Aristotle")]  # a partial or late name
    assert [p.page_id for p in fuse(res, rank1=None)].index(9) == PROMOTE_WITHIN + 1
    res["title"] = [Hit(90, 9, TITLE_PROTECT + 0.1, 1, "title", matched="Aristotle")]
    assert [p.page_id for p in fuse(res, promotion=PLAIN, rank1=None)].index(9) == PROMOTE_WITHIN + 1


# -- the fusion a request names ----------------------------------------------------------------------------------

FUSION_CLAIMS = [
    "Aristotle tutored Alexander the Great.",
    "Achilles fought at Troy.",
    "Anarchism is a political philosophy.",
    "Albedo measures how much light a surface reflects.",
    "",
]


def test_rrf_plain_is_rrf_without_the_promotion_and_an_unknown_fusion_is_refused():
    from retriever.fusion import FUSIONS, check_fusion
    from wikiground.errors import QueryError

    res = {
        "bm25": hits("bm25", [(10, 1, 9.0), (20, 2, 1.0), (30, 3, 0.5)]),
        "tfidf": hits("tfidf", [(20, 2, 0.9), (30, 3, 0.8), (10, 1, 0.7)]),
    }
    plain = [(p.page_id, p.score) for p in fuse(res, promotion=PLAIN)]
    assert [(p.page_id, p.score) for p in fuse(res, method="rrf-plain")] == plain
    assert [(p.page_id, p.score) for p in fuse(res, rank1=None)] != plain  # bm25's wide lead promotes page 1
    assert FUSIONS == ("rrf", "rrf-plain", "score") and check_fusion("score") == "score"
    with pytest.raises(QueryError, match="unknown fusion 'borda'; choose one of rrf, rrf-plain, score"):
        check_fusion("borda")


def test_each_search_names_its_fusion_and_a_block_fuses_as_one_claim_does(gensim_tfidf):
    """A fusion asked per search (and per block of claims, and per multi-hop search) overrides the retriever's own,
    and the answer names it."""
    from retriever.api import Retriever
    from retriever.batch_search import search_many
    from retriever.fusion import FUSIONS
    from retriever.service import SearchOptions, answer
    from wikiground.errors import ConfigError, QueryError

    def without_timings(result) -> dict:
        return {key: value for key, value in result.to_dict().items() if key != "timings_ms"}

    with Retriever.open(gensim_tfidf, channels="tfidf,title") as r:
        ranked = {}
        for fusion in FUSIONS:
            one = [without_timings(r.search(c, 5, fusion=fusion)) for c in FUSION_CLAIMS]
            assert [without_timings(x) for x in search_many(r, FUSION_CLAIMS, 5, fusion=fusion)] == one
            assert all(x["fusion"] == fusion for x in one[:-1])
            ranked[fusion] = [[(e["title"], e["score"], e.get("page_score")) for e in x["evidence"]] for x in one]
        assert len({repr(v) for v in ranked.values()}) == len(FUSIONS)
        assert r.search(FUSION_CLAIMS[0], 5).to_dict()["fusion"] == r.fusion == "rrf"
        # A multi-hop search's hop queries fuse without the learned rank 1 (retriever.multihop.pipeline).
        results, _ = r.search_hits(FUSION_CLAIMS[0], k=20)
        unlearned = fuse(results, weights=r.weights, rrf_k=r.rrf_k, rank1=None)
        assert [p.page_id for p in r.fuse(results, learned=False)] == [p.page_id for p in unlearned]
        learned = fuse(results, weights=r.weights, rrf_k=r.rrf_k)
        assert [p.page_id for p in r.fuse(results)] == [p.page_id for p in learned]
        hops = answer(r, FUSION_CLAIMS[0], SearchOptions(k=5, multihop=True, hops=1, fusion="score"))
        assert hops["fusion"] == "score" and hops["evidence"]
        with pytest.raises(QueryError, match="unknown fusion"):
            r.search(FUSION_CLAIMS[0], 5, fusion="borda")
    with pytest.raises(ConfigError, match="unknown fusion"):
        Retriever.open(gensim_tfidf, channels="tfidf,title", fusion="borda")


def test_the_fusion_flag_takes_every_fusion_and_refuses_others(capsys):
    import argparse

    from retriever.cli_options import add_search_options, open_options

    parser = argparse.ArgumentParser()
    add_search_options(parser)
    args = parser.parse_args(["--index", "idx", "--fusion", "rrf-plain"])
    assert open_options(args).fusion == "rrf-plain"
    with pytest.raises(SystemExit):
        parser.parse_args(["--index", "idx", "--fusion", "borda"])
    assert "invalid choice: 'borda'" in capsys.readouterr().err
