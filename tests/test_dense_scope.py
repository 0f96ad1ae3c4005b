"""`--dense-scope leads`: the dense channel embeds and searches each page's lead passage only, fusion still
works, and a big store gets leads by itself with an estimate said first (real dbpedia mini-dump pages)."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from tests.conftest import DUMPS
from tests.support.vectors import cosine_rows

DUMP = DUMPS / "dbpedia-mini-enwiki.xml.bz2"  # 11 long pages: many passages each, one lead each


@pytest.fixture(scope="module")
def leads_index(tmp_path_factory):
    from indexer.build import build_index

    out = tmp_path_factory.mktemp("scope") / "index"
    build_index([DUMP], out, indexes=("bm25", "dense"), workers=1, index_options={"dense": {"scope": "leads"}})
    return out


def _con(index):
    import duckdb

    return duckdb.connect(str(index / "wiki.duckdb"), read_only=True)


def test_lead_ids_are_each_pages_first_text_passage(leads_index):
    from backends.dense.embed import lead_ids

    con = _con(leads_index)
    try:
        ids = lead_ids(con)
        pages, passages = con.execute("SELECT count(DISTINCT page_id), count(*) FROM passages").fetchone()
        rows = con.execute(
            "SELECT page_id, passage_id, passage_index, source FROM passages ORDER BY page_id, passage_index"
        ).fetchall()
    finally:
        con.close()
    first: dict[int, int] = {}
    for page, pid, _, source in rows:
        if source == "text":
            first.setdefault(page, pid)
    assert passages > 3 * pages  # the dump's pages have bodies: leads are a real subset
    assert ids.tolist() == sorted(first.values()) and len(ids) == pages


def test_leads_index_maps_rows_to_passage_ids(leads_index):
    from backends import dense
    from backends.encoder import load_encoder, passage_text

    backend = dense.load(leads_index)
    rows = np.load(leads_index / "dense" / "ids.npy")
    assert backend.params["scope"] == "leads" and backend.params["count"] == len(rows) == len(backend.vectors)
    con = _con(leads_index)
    try:
        assert backend.params["passages"] == con.execute("SELECT count(*) FROM passages").fetchone()[0]
        texts = {
            pid: passage_text(t, h, x)
            for pid, t, h, x in con.execute("SELECT passage_id, title, heading_path, text FROM passages").fetchall()
        }
        title_of = dict(con.execute("SELECT passage_id, title FROM passages").fetchall())
    finally:
        con.close()
    # Row r holds the vector of passage rows[r]: re-encoding those texts gives the same vectors.
    fresh = load_encoder().encode([texts[int(p)] for p in rows])
    assert cosine_rows(fresh, np.asarray(backend.vectors)).min() >= 0.9999
    lead_set = set(rows.tolist())
    for title in ["Arthur Schopenhauer", "Atlantic Ocean", "Kerala Agricultural University"]:
        hits = backend.search(f"{title}: history", k=5)
        assert hits and all(h.passage_id in lead_set for h in hits)
        assert all(h.title == title_of[h.passage_id] for h in hits)


def test_fusion_searches_leads_beside_bm25(leads_index):
    from retriever import Retriever

    with Retriever.open(leads_index) as r:
        result = r.search("Arthur Schopenhauer was a German philosopher who wrote about the will.", k=10)
    assert result.evidence
    dense_ranked = [ev for ev in result.evidence if "dense" in ev.ranks]
    assert dense_ranked, "the dense channel took part in the fusion"
    assert any("bm25" in ev.ranks for ev in result.evidence)


def test_auto_picks_leads_above_the_threshold_and_says_so(leads_index, monkeypatch, caplog, tmp_path):
    from backends.dense import embed
    from indexer import build

    db = leads_index / "wiki.duckdb"
    with caplog.at_level(logging.INFO, logger="indexer.build"):
        assert build._dense_estimate(db, tmp_path / "new", "auto")["scope"] == "all"  # small: every passage
    monkeypatch.setattr(embed, "LEADS_THRESHOLD", 100)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="indexer.build"):
        assert build._dense_estimate(db, tmp_path / "new", "auto")["scope"] == "leads"
    (rec,) = [r for r in caplog.records if r.name == "indexer.build"]
    assert rec.levelno == logging.WARNING and "above 100 passages" in rec.getMessage()
    assert "lead passage" in rec.getMessage() and "--dense-scope all" in rec.getMessage()
    assert build._dense_estimate(db, tmp_path / "new", "all")["scope"] == "all"  # asked for: kept


def test_estimate_names_both_scopes_with_real_counts(leads_index):
    from backends.dense.embed import duration, embed_estimate, estimate_message

    est = embed_estimate(leads_index / "wiki.duckdb", "all", rate=33.0)
    assert est["rate_source"] == "recorded" and est["leads"] < est["passages"]
    msg = estimate_message(est, "all")
    assert f"{est['passages']:,} passages at ~33/s" in msg and "--engine ray" in msg
    assert f"{est['leads']:,} lead passages" in msg
    assert duration(40_000_000 / 33) == "14 days" and duration(7_000_000 / 33) == "2.5 days"
    assert duration(120) == "2 min" and duration(5 * 3600) == "5.0 h"


def test_embed_assemble_lists_the_channel_in_the_manifest(leads_index, tmp_path, capsys):
    """The cluster recipe's last step: an index built without dense gets it from `indexer.embed --assemble`,
    stamped with the store's build id, and queries use it."""
    import json
    import shutil

    from indexer.embed import main
    from retriever import Retriever

    index = tmp_path / "index"
    shutil.copytree(leads_index, index)
    shutil.rmtree(index / "dense")
    manifest = json.loads((index / "manifest.json").read_text())
    del manifest["indexes"]["dense"]
    (index / "manifest.json").write_text(json.dumps(manifest))
    with Retriever.open(index) as r:
        assert "dense" not in r.channels

    assert main(["--index", str(index), "--dense-scope", "leads", "--assemble", "--quiet"]) == 0
    assert "listed in the manifest" in capsys.readouterr().err
    manifest = json.loads((index / "manifest.json").read_text())
    params = json.loads((index / "dense" / "params.json").read_text())
    assert manifest["indexes"]["dense"]["documents"] == params["count"] and params["scope"] == "leads"
    assert params["build_id"] == manifest["build_id"] and "ids.npy" in params["files"]
    assert not any(f.startswith("shards/") for f in params["files"])
    with Retriever.open(index) as r:
        assert "dense" in r.channels
        assert r.channel_search("dense", "Arthur Schopenhauer philosophy", 3)
