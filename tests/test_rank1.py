"""The learned rank 1 (retriever.rank1): it reorders the fused top 5 only, deterministically; its model file is
checked; a channel the index lacks changes nothing."""

from __future__ import annotations

import json

import pytest

from retriever import rank1
from retriever.fusion import PLAIN, fuse
from wikiground.errors import ConfigError
from wikiground.records import Hit


def hits(channel: str, items: list[tuple[int, int, float]]) -> list[Hit]:
    return [Hit(pid, page, score, rank, channel) for rank, (pid, page, score) in enumerate(items, 1)]


def model(**weights: float) -> rank1.Rank1:
    return rank1.Rank1(tuple(weights.get(f, 0.0) for f in rank1.FEATURES))


def ten_pages() -> dict[str, list[Hit]]:
    """bm25, dense and tfidf agree on pages 1..10 in order; dense ranks page 5 first, far ahead."""
    agreed = [(10 * i, i, 10.0 - i) for i in range(1, 11)]
    dense = [(50, 5, 0.9)] + [(10 * i, i, 0.5 - i / 100) for i in range(1, 11) if i != 5]
    return {"bm25": hits("bm25", agreed), "dense": hits("dense", dense), "tfidf": hits("tfidf", agreed)}


def test_the_reorder_stays_within_the_top_5_and_keeps_the_list_in_score_order():
    res = ten_pages()
    before = [p.page_id for p in fuse(res, rank1=None)]
    # A model that puts the fused 5th page first, and one that reverses the top 5.
    after = [p.page_id for p in fuse(res, rank1=model(**{"fused.rr": -1.0}))]
    assert sorted(after[:5]) == sorted(before[:5]) and after[5:] == before[5:]
    assert after[:5] == before[:5][::-1]
    pages = fuse(res, rank1=model(**{"fused.rr": -1.0}))
    assert [p.score for p in pages] == sorted((p.score for p in pages), reverse=True)
    # The dense channel's sure first page, with a weight on that channel's lead.
    assert fuse(res, rank1=model(**{"dense.lead": 5.0}))[0].page_id == 5


def test_ties_keep_the_fused_order_and_the_order_is_deterministic():
    res = ten_pages()
    before = [p.page_id for p in fuse(res, rank1=None)]
    assert [p.page_id for p in fuse(res, rank1=model())] == before  # every score 0: the fused order
    runs = {tuple(p.page_id for p in fuse(res)) for _ in range(3)}
    assert len(runs) == 1


def test_plain_and_score_fusions_do_not_reorder():
    res = ten_pages()
    reverse = model(**{"fused.rr": -1.0})
    assert [p.page_id for p in fuse(res, promotion=PLAIN, rank1=reverse)] == [
        p.page_id for p in fuse(res, promotion=PLAIN, rank1=None)
    ]
    assert [p.page_id for p in fuse(res, method="score", rank1=reverse)] == [
        p.page_id for p in fuse(res, method="score", rank1=None)
    ]


def test_an_absent_channel_changes_nothing():
    """Features of a channel the index lacks are 0 for every candidate: the model orders by the others."""
    res = ten_pages()
    top = fuse(res, rank1=None)[:5]
    rows = rank1.features(res, top, {}, 60)
    assert len(rows) == 5 and all(len(r) == len(rank1.FEATURES) for r in rows)
    for channel in ("title", "kg"):
        for name in rank1.FEATURES:
            if name.startswith(channel + "."):
                assert {r[rank1.FEATURES.index(name)] for r in rows} == {0.0}
    with_kg = model(**{"kg.rr": 50.0, "title.rr": 50.0, "dense.lead": 5.0})
    assert [p.page_id for p in fuse(res, rank1=with_kg)] == [
        p.page_id for p in fuse(res, rank1=model(**{"dense.lead": 5.0}))
    ]
    # An index of bm25 alone (one channel): the shipped model still answers, the top 5 as fused.
    only = {"bm25": res["bm25"]}
    assert sorted(p.page_id for p in fuse(only)[:5]) == [1, 2, 3, 4, 5]


def test_features_name_what_the_channels_say():
    res = ten_pages()
    res["title"] = [Hit(30, 3, 2.9, 1, "title", matched="Three"), Hit(80, 8, -0.2, 2, "title", matched="eight")]
    top = fuse(res, rank1=None)[:5]
    rows = {p.page_id: dict(zip(rank1.FEATURES, r)) for p, r in zip(top, rank1.features(res, top, {}, 60))}
    assert rows[3]["title.exact"] == rows[3]["title.named"] == 1.0 and rows[3]["title.rr_per"] == 0.5
    assert rows[5]["dense.first"] == 1.0 and rows[5]["dense.lead"] == round((0.9 - 0.49) / 0.9, 3)
    assert rows[1]["bm25.rel"] == 1.0 and rows[2]["bm25.rel"] == pytest.approx(8.0 / 9.0)


def test_a_disambiguation_page_the_channels_rank_first_gives_way_under_the_shipped_model():
    """Its lead lists the senses of the claim's words, so the text channels can rank it first; it is never evidence.
    The feature is its title's; the shipped model weighs it against every channel agreeing on it."""
    titled = {1: "Mercury (disambiguation)", 2: "Mercury (planet)", 3: "Mercury (element)"}

    def channel(name: str, scores: tuple[float, ...]) -> list[Hit]:
        return [
            Hit(10 * pid, pid, s, rank, name, title=titled[pid])
            for rank, (pid, s) in enumerate(zip((1, 2, 3), scores), 1)
        ]

    res = {"bm25": channel("bm25", (9.0, 8.5, 8.0)), "tfidf": channel("tfidf", (0.6, 0.55, 0.5))}
    top = fuse(res, rank1=None)
    assert top[0].page_id == 1
    rows = {p.page_id: dict(zip(rank1.FEATURES, r)) for p, r in zip(top, rank1.features(res, top[:5], {}, 60))}
    assert rows[1]["page.disambiguation"] == 1.0 and rows[2]["page.disambiguation"] == 0.0
    assert rank1.shipped().weights[rank1.FEATURES.index("page.disambiguation")] < 0
    assert fuse(res)[0].page_id == 2


def test_the_shipped_model_loads_and_names_what_it_was_fitted_on():
    shipped = rank1.shipped()
    assert len(shipped.weights) == len(rank1.FEATURES) and shipped.within == 5
    assert "fever" in shipped.fitted_on and "hotpotqa" in shipped.fitted_on


def _write(tmp_path, data) -> object:
    path = tmp_path / "rank1.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def test_a_bad_model_file_is_refused_with_a_clear_error(tmp_path):
    good = json.loads(rank1.MODEL_FILE.read_text())
    assert rank1.load(_write(tmp_path, good)) == rank1.shipped()
    with pytest.raises(ConfigError, match="cannot read it as JSON"):
        rank1.load(_write(tmp_path, "{not json"))
    with pytest.raises(ConfigError, match="cannot read it as JSON"):
        rank1.load(tmp_path / "missing.json")
    with pytest.raises(ConfigError, match="expected an object with a 'weights' object"):
        rank1.load(_write(tmp_path, [1, 2]))
    weights = dict(good["weights"])
    del weights["kg.rr"]
    with pytest.raises(ConfigError, match="missing kg.rr; unknown none"):
        rank1.load(_write(tmp_path, {**good, "weights": weights}))
    with pytest.raises(ConfigError, match="missing none; unknown bm25.magic"):
        rank1.load(_write(tmp_path, {**good, "weights": {**good["weights"], "bm25.magic": 1.0}}))
    with pytest.raises(ConfigError, match="finite numbers: dense.rr"):
        rank1.load(_write(tmp_path, {**good, "weights": {**good["weights"], "dense.rr": "high"}}))
    with pytest.raises(ConfigError, match="within must be a whole number"):
        rank1.load(_write(tmp_path, {**good, "within": 0}))
