"""The store's point lookups as mmap'd files (``DIR/lookups``, issue 21): the same answers as the store's SQL.

Titles (exact, redirect, loose), lead passages and sentence ids are read from arrays written at build time; a
store without them, or with files of another build or cut short, is asked in SQL instead.
"""

from __future__ import annotations

import json
import shutil

import pytest

from indexer import lookups
from indexer.manifest import read_manifest, write_manifest
from indexer.store import Store
from wikiground.layout import LOOKUPS_DIR, PARAMS_FILE


def _keys(store: Store) -> list[str]:
    titles = [r[0] for r in store.rows("SELECT title FROM pages ORDER BY page_id")]
    redirects = [r[0] for r in store.rows("SELECT source_title FROM redirects ORDER BY source_title")]
    names = titles + redirects
    # Loose matches (case, underscores, spacing) and strings that name nothing.
    variants = [t.lower() for t in names] + [t.upper() for t in names[:200]] + [t.replace(" ", "_") for t in names]
    return names + variants + ["  ", "No such page at all", "zzzz qqqq", "Aristotle's", "the"]


def _sql_answers(store: Store, fn):
    saved, store._lookups = store._lookups, None
    try:
        return fn()
    finally:
        store._lookups = saved


def test_built_with_every_index(gensim_store):
    manifest = json.loads((gensim_store / "manifest.json").read_text())
    params = json.loads((gensim_store / LOOKUPS_DIR / PARAMS_FILE).read_text())
    assert params["build_id"] == manifest["build_id"]
    assert manifest["lookups"] == params["keys"]
    assert params["keys"]["exact"] > params["keys"]["lead"] > 0  # titles and redirects; pages with passages
    with Store.open(gensim_store) as store:
        assert store._lookups is not None
        assert params["keys"]["sentences"] == store.count("passages")


@pytest.mark.parametrize("loose", [True, False])
def test_titles_resolve_as_in_the_store(gensim_store, loose):
    with Store.open(gensim_store) as store:
        keys = _keys(store)
        got = store.resolve_titles(keys, loose=loose)
        want = _sql_answers(store, lambda: store.resolve_titles(keys, loose=loose))
    assert got == want
    assert len(got) > 200
    assert any(r.via_redirect for r in got.values()) and any(not r.exact for r in got.values()) == loose


def test_leads_and_sentence_ids_as_in_the_store(gensim_store):
    with Store.open(gensim_store) as store:
        pages = [r[0] for r in store.rows("SELECT page_id FROM pages")] + [10**12]
        leads = store.lead_passage_ids(pages)
        assert leads == {pid: (p.passage_id, p.title) for pid, p in store.lead_passages(pages).items()}
        n = store.count("passages")
        ids = list(range(n)) + [n + 5]
        assert store.passages_with_pages(ids) == _sql_answers(store, lambda: store.passages_with_pages(ids))
        assert any(sids for _, _, sids in store.passages_with_pages(ids).values())


def test_hash_collisions_compare_the_keys(gensim_store, tmp_path, monkeypatch):
    """Every key hashed alike: a lookup still finds its own key among them, or nothing."""
    monkeypatch.setattr(lookups, "key_hash", lambda key: 7)
    folder = tmp_path / LOOKUPS_DIR
    with Store.open(gensim_store) as store:
        lookups.build(gensim_store / "wiki.duckdb", folder, store.build_id)
        table = lookups.Lookups.open(folder, store.build_id)
        assert table is not None
        titles = [r[0] for r in store.rows("SELECT title FROM pages ORDER BY page_id LIMIT 30")]
        for title in titles:
            entry = table.exact(title)
            assert entry is not None and entry.target == title and entry.via is None
        assert table.exact("No such page at all") is None


def _copy(gensim_store, tmp_path):
    out = tmp_path / "index"
    shutil.copytree(gensim_store, out)
    return out


def test_files_of_another_build_are_not_used(gensim_store, tmp_path, caplog):
    out = _copy(gensim_store, tmp_path)
    params_path = out / LOOKUPS_DIR / PARAMS_FILE
    params = json.loads(params_path.read_text())
    params_path.write_text(json.dumps({**params, "build_id": "another"}))
    with Store.open(out) as store:
        assert store._lookups is None
        assert "not the store's" in caplog.text
        title = store.rows("SELECT title FROM pages LIMIT 1")[0][0]
        assert store.resolve_title(title) is not None  # answered by the store


@pytest.mark.parametrize(
    "name", ["exact.hash.npy", "loose.records.bin", "sentences.count.npy", "lead.titles.bin", "lead.page_id.npy"]
)
def test_cut_files_are_not_used(gensim_store, tmp_path, name, caplog):
    out = _copy(gensim_store, tmp_path)
    path = out / LOOKUPS_DIR / name
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with Store.open(out) as store:
        assert store._lookups is None
        keys = _keys(store)[:300]
        assert store.resolve_titles(keys)  # the store still answers
    assert LOOKUPS_DIR in caplog.text


def test_store_without_lookups_answers_from_sql(gensim_store, tmp_path):
    out = _copy(gensim_store, tmp_path)
    shutil.rmtree(out / LOOKUPS_DIR)
    with Store.open(out) as plain, Store.open(gensim_store) as fast:
        assert plain._lookups is None
        keys = _keys(plain)[:500]
        assert plain.resolve_titles(keys) == fast.resolve_titles(keys)
        pages = [r[0] for r in plain.rows("SELECT page_id FROM pages LIMIT 50")]
        assert plain.lead_passage_ids(pages) == fast.lead_passage_ids(pages)


def test_sentence_ids_not_consecutive_are_read_from_the_store(gensim_store, tmp_path):
    import duckdb

    out = _copy(gensim_store, tmp_path)
    con = duckdb.connect(str(out / "wiki.duckdb"))
    try:
        (pid,) = con.execute(
            "SELECT passage_id FROM sentence_spans GROUP BY passage_id HAVING count(*) > 2 ORDER BY passage_id LIMIT 1"
        ).fetchall()[0]
        con.execute(
            "UPDATE sentence_spans SET page_sentence_index = page_sentence_index * 3 WHERE passage_id = ?", [pid]
        )
        (build_id,) = con.execute("SELECT build_id FROM build_info").fetchall()[0]
    finally:
        con.close()
    shutil.rmtree(out / LOOKUPS_DIR)
    counts = lookups.build(out / "wiki.duckdb", out / LOOKUPS_DIR, build_id)
    manifest = read_manifest(out)
    manifest["store_bytes"] = (out / "wiki.duckdb").stat().st_size  # the store and its lookups changed on purpose
    write_manifest(out, manifest)
    assert counts["sentences"] == 0 and not (out / LOOKUPS_DIR / "sentences.first.npy").exists()
    with Store.open(out) as store:
        assert store._lookups is not None and store._lookups.sentence_ids([pid]) is None
        got = store.passages_with_pages([pid, pid + 1])
        assert got == _sql_answers(store, lambda: store.passages_with_pages([pid, pid + 1]))
        assert got[pid][2] == [b for _, b, _ in store.sentences(pid)]


def test_sentence_ranges_are_written_in_passage_order_across_batches_and_gaps(tmp_path, monkeypatch):
    """Passages 2, 4 and 6 state no sentence (first -1, count 0), one at a batch's edge and one the last."""
    import duckdb
    import numpy as np

    monkeypatch.setattr(lookups, "BATCH_ROWS", 2)
    con = duckdb.connect()
    con.execute("CREATE TABLE passages AS SELECT range AS passage_id FROM range(7)")
    spans = [(p, i, first + i) for p, first, n in ((0, 0, 2), (1, 2, 1), (3, 5, 3), (5, 9, 1)) for i in range(n)]
    con.execute("CREATE TABLE sentence_spans (passage_id BIGINT, sentence_index INT, page_sentence_index INT)")
    con.executemany("INSERT INTO sentence_spans VALUES (?, ?, ?)", spans)
    assert lookups._write_sentence_ranges(con, tmp_path) == 7
    assert np.load(tmp_path / "sentences.first.npy").tolist() == [0, 2, -1, 5, -1, 9, -1]
    assert np.load(tmp_path / "sentences.count.npy").tolist() == [2, 1, 0, 3, 0, 1, 0]
