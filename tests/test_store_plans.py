"""Point lookups of the store reach their indexes, so their cost does not grow with the corpus (issue 21).

Each test records the SQL a Store lookup really runs (through a connection proxy) and reads DuckDB's
EXPLAIN ANALYZE of it: every scan of the big tables must be an index scan, never a full sequential scan.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from indexer.store import Store, _connect
from wikiground.text import normalize_title


class _Recorder:
    """A DuckDB connection stand-in that remembers every (sql, params) its cursors run."""

    def __init__(self, con: Any):
        self.con = con
        self.calls: list[tuple[str, list]] = []

    def cursor(self) -> _Recorder:
        return self

    def execute(self, sql: str, params: Any = ()):
        self.calls.append((sql, list(params)))
        return self.con.cursor().execute(sql, list(params))

    def close(self) -> None:
        self.con.close()


def _scans(con: Any, sql: str, params: list) -> list[tuple[str, str]]:
    """(table, how it was read) of every table scan in the executed plan: "Index Scan", or for a sequential scan
    "read a / b" row groups."""
    text = con.cursor().execute("EXPLAIN ANALYZE " + sql, params).fetchall()[0][1]
    lines = text.splitlines()
    out = []
    for i, line in enumerate(lines):
        for m in re.finditer(r"Table: (?:\w+\.)*(\w+)", line):
            col = m.start()
            # The scan's details are in the same box: the lines below, from the same column.
            box = [below[col : col + 60] for below in lines[i + 1 : i + 12]]
            kind = next((re.search(r"Type: (\w+ Scan)", b).group(1) for b in box if "Type: " in b), "?")
            groups = next(
                (re.search(r"Row Groups Scanned: ([0-9,]+) / ([0-9,]+)", b) for b in box if "Row Gr" in b), None
            )
            if kind != "Index Scan" and groups is not None:
                kind = f"read {groups.group(1)} / {groups.group(2)}"
            out.append((m.group(1), kind))
    return out


def _indexed(scans: list[tuple[str, str]]) -> bool:
    return all(kind == "Index Scan" or kind.startswith("read 0 /") for _, kind in scans)


@pytest.fixture
def recorded(gensim_store):
    rec = _Recorder(_connect(gensim_store / "wiki.duckdb"))
    yield Store(rec), rec
    rec.close()


def test_title_resolution_uses_the_title_indexes(recorded, gensim_store):
    store, rec = recorded
    titles = [r[0] for r in rec.con.execute("SELECT title FROM pages ORDER BY page_id LIMIT 40").fetchall()]
    redirects = [
        r[0] for r in rec.con.execute("SELECT source_title FROM redirects WHERE target_page_id IS NOT NULL").fetchall()
    ]
    # A claim's n-grams: far more keys than pages found (DuckDB's default pushes at most 50 into a scan).
    keys = titles + redirects + [f"no such page {i}" for i in range(80)]
    found = store.resolve_titles(keys)
    assert set(titles) | set(redirects) <= set(found)
    sql, params = rec.calls[-1]
    scans = _scans(rec.con, sql, params)
    assert {t for t, _ in scans} >= {"pages", "redirects"}
    assert _indexed(scans), scans


def test_known_keys_uses_the_index(recorded):
    store, rec = recorded
    keys = [normalize_title(r[0]) for r in rec.con.execute("SELECT title FROM pages LIMIT 30").fetchall()]
    keys += [f"nothing {i}" for i in range(70)]
    assert len(store.known_keys(keys)) >= 30
    for sql, params in rec.calls:
        scans = _scans(rec.con, sql, params)
        assert scans and _indexed(scans), scans


def test_evidence_fetch_reads_no_whole_table(recorded):
    store, rec = recorded
    n = rec.con.execute("SELECT count(*) FROM passages").fetchone()[0]
    ids = list(range(0, n, max(1, n // 20)))[:20]
    got = store.passages_with_pages(ids)
    assert sorted(got) == ids
    # The sentence ids are those of the public `sentences` view.
    for pid in ids[:5]:
        want = [b for _, b, _ in store.sentences(pid)]
        assert got[pid][2] == want
    scans = [s for sql, params in rec.calls if "passage_id IN" in sql for s in _scans(rec.con, sql, params)]
    # Whether DuckDB reads `passages` and `pages` by index or by zone maps depends on their size (a fixture this
    # small fits one row group); what must not happen at any size is a second read of `passages`, by the join of
    # the `sentences` view, which no filter reaches: at 0.5M passages it read every row group.
    assert [t for t, _ in scans].count("passages") == 1, scans
    assert [t for t, _ in scans].count("sentence_spans") == 1, scans


def test_sentence_spans_found_by_sort_order(gensim_store):
    """`sentence_spans` is kept in passage_id order and has no ART index (its min/max per row group find a
    passage's spans; the index cost ~45 bytes of build RAM per span)."""
    import duckdb

    con = duckdb.connect(str(gensim_store / "wiki.duckdb"), read_only=True)
    try:
        indexed = con.execute("SELECT index_name FROM duckdb_indexes() WHERE table_name = 'sentence_spans'").fetchall()
        ordered = con.execute(
            "SELECT bool_and(passage_id >= prev) FROM "
            "(SELECT passage_id, lag(passage_id, 1, 0) OVER (ORDER BY rowid) AS prev FROM sentence_spans)"
        ).fetchone()[0]
    finally:
        con.close()
    assert indexed == [] and ordered


def test_store_cache_is_bounded(gensim_store):
    """The read connection's buffer pool has a small limit: it used to keep every block a lookup read, up to 80% of
    the machine's RAM (at 0.5M passages a query process grew by ~5 MB per evidence fetch). The fixture store is
    too small to fill any workable limit, so the limit itself is checked, and that lookups work under it."""
    import indexer.store as store_mod
    from indexer.store_memory import HEADROOM

    units = {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "KB": 1e3, "MB": 1e6, "GB": 1e9}
    with Store.open(gensim_store) as store:
        value, unit = store._main.cursor().execute("SELECT current_setting('memory_limit')").fetchone()[0].split()
        n = store.count("passages")
        assert len(store.passages_with_pages(range(0, n, max(1, n // 1000)))) > 0
    limit = float(value) * units[unit]
    want = float(store_mod.STORE_MEMORY_LIMIT[:-2]) * units[store_mod.STORE_MEMORY_LIMIT[-2:]]
    # The pool, and room for the indexes (indexer.store_memory): the fixture's are a few MB at most.
    assert limit <= (want + HEADROOM + (4 << 20)) * 1.01


def test_triples_found_by_sort_order(gensim_store):
    """`triples` is kept in subject order and has no ART index: the row groups' min/max find a page's facts, where
    an index scan fetched them row by row (2-3x slower for a page stating hundreds of facts)."""
    import duckdb

    con = duckdb.connect(str(gensim_store / "wiki.duckdb"), read_only=True)
    try:
        indexed = con.execute("SELECT index_name FROM duckdb_indexes() WHERE table_name = 'triples'").fetchall()
        ordered, rows = con.execute(
            "SELECT bool_and(subject_page_id >= prev), count(*) FROM "
            "(SELECT subject_page_id, lag(subject_page_id, 1, 0) OVER (ORDER BY rowid) AS prev FROM triples)"
        ).fetchone()
    finally:
        con.close()
    assert indexed == [] and ordered and rows > 0


def test_few_keys_inlined_many_passed_as_a_list(recorded):
    """A few integer keys go into the SQL text (a plain lookup, planned in half the time of the list parameter's
    semi-join); a long list stays one parameter. Both give the rows one lookup per key gives."""
    store, rec = recorded
    ids = [r[0] for r in rec.con.execute("SELECT page_id FROM pages ORDER BY page_id LIMIT 40").fetchall()]
    one_by_one = {i: store.page(i) for i in ids}
    for keys in (ids[:3], ids):
        rec.calls.clear()
        got = store.pages(keys)
        assert got == {i: one_by_one[i] for i in keys}
        (sql, params), *_ = rec.calls
        if len(keys) <= 16:
            assert params == [] and f"IN ({', '.join(map(str, sorted(keys)))})" in sql
        else:
            assert "unnest(?)" in sql and params == [sorted(keys)]
        assert _indexed(_scans(rec.con, sql, params))
