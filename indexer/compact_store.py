"""The store of a compaction (``indexer.compact``): the base store's rows with the delta applied, in a new file.

The base's rows of the pages the delta holds or deleted are left out, the delta's pages added (their origin
``local``, their revision kept), passage ids numbered again densely (0..N-1, the base's survivors in their order,
then the delta's passages), the tables written as a build writes them (``indexer.schema.STORE_DDL``: section heads
with their text, sentence offsets) and a new ``build_info``.

The delta's tables are streamed into a scratch database file beside the new store, :data:`BATCH_ROWS` rows at a
time, so that a compaction holds a batch of the delta in memory, not the whole of each table twice (the merged
delta, then an Arrow copy of it); the scratch file is removed once the store is written.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from wikiground.system import quiet

BATCH_ROWS = 20_000  # delta rows read at a time: passages of a few kilobytes each, tens of megabytes a batch

_KEPT = "page_id NOT IN (SELECT page_id FROM _hidden)"
_BY_PAGE = ("categories", "see_also", "links", "infobox", "table_rows")
_TRIPLE_COLUMNS = "subject_page_id, subject_title, relation, object_title, {obj}, source, {pid}, sentence_id, rev_id"
_OBJECT = "CASE WHEN t.object_page_id IN (SELECT page_id FROM _gone) THEN NULL ELSE t.object_page_id END"

_FOLD_SQL = (
    f"INSERT INTO pages SELECT * FROM old.pages WHERE {_KEPT}",
    "INSERT INTO pages SELECT * REPLACE ('local' AS origin) FROM d_pages ORDER BY page_id",
    "INSERT INTO redirects SELECT * FROM old.redirects WHERE source_title NOT IN (SELECT source_title FROM d_redirects)"
    " AND (target_page_id IS NULL OR target_page_id NOT IN (SELECT page_id FROM _gone))",
    "INSERT INTO redirects SELECT * FROM d_redirects",
    "INSERT INTO passages SELECT m.new_id, p.* EXCLUDE (passage_id) FROM old.passages p "
    "JOIN _pmap m ON p.passage_id = m.old_id ORDER BY m.new_id",
    "INSERT INTO passages SELECT m.new_id, p.* EXCLUDE (passage_id) FROM d_passages p "
    "JOIN _dmap m ON p.passage_id = m.old_id ORDER BY m.new_id",
    f"INSERT INTO section_heads SELECT * FROM old.section_heads WHERE {_KEPT}",
    "INSERT INTO section_heads SELECT page_id, section_index, level, heading, parent_index, heading_path, text "
    "FROM d_sections ORDER BY page_id, section_index",
    "INSERT INTO passage_joints SELECT m.new_id, j.* EXCLUDE (passage_id) FROM old.passage_joints j "
    "JOIN _pmap m ON j.passage_id = m.old_id ORDER BY m.new_id",
    "INSERT INTO sentence_spans SELECT m.new_id, s.sentence_index, s.page_sentence_index, s.start_char, s.end_char "
    "FROM old.sentence_spans s JOIN _pmap m ON s.passage_id = m.old_id ORDER BY m.new_id, s.sentence_index",
    "INSERT INTO sentence_spans SELECT m.new_id, s.sentence_index, s.page_sentence_index, s.start_char, s.end_char "
    "FROM d_sentences s JOIN _dmap m ON s.passage_id = m.old_id ORDER BY m.new_id, s.sentence_index",
    *(f"INSERT INTO {t} SELECT * FROM old.{t} WHERE {_KEPT}" for t in _BY_PAGE),
    *(f"INSERT INTO {t} SELECT * FROM d_{t} ORDER BY page_id" for t in _BY_PAGE),
    "INSERT INTO triples SELECT * FROM ("
    f"SELECT {_TRIPLE_COLUMNS.format(obj=_OBJECT, pid='m.new_id')} FROM old.triples t "
    "LEFT JOIN _pmap m ON t.passage_id = m.old_id WHERE t.subject_page_id NOT IN (SELECT page_id FROM _hidden) "
    f"UNION ALL SELECT {_TRIPLE_COLUMNS.format(obj=_OBJECT, pid='m.new_id')} FROM d_triples t "
    "LEFT JOIN _dmap m ON t.passage_id = m.old_id) ORDER BY subject_page_id",
)

# The manifest's counts: the public names, the views counted by their tables (every span has its passage).
_COUNTED = {"sections": "section_heads", "sentences": "sentence_spans"}


def fold_store(
    old_db: Path,
    delta: Any,
    db: Path,
    build_id: str,
    memory: int | None,
    *,
    batch_rows: int = BATCH_ROWS,
    survivors: Path | None = None,
) -> dict[str, int]:
    """Write ``db`` from the store ``old_db`` and the merged delta ``delta`` (an open DuckDB connection); returns
    the manifest's counts. ``survivors``: where to save the old id of each surviving base passage, by new id (the
    dense channel carries their vectors: ``indexer.compact_dense``)."""
    import duckdb

    from indexer.schema import BUILD_INFO_DDL, INDEXES, STORE_DDL, TABLES
    from wikiground.system import duckdb_size

    scratch = Path(str(db) + ".delta")
    con = quiet(duckdb.connect())
    try:
        con.execute(f"ATTACH '{_quoted(db)}' AS store")
        con.execute("USE store")
        con.execute(f"SET temp_directory = '{_quoted(Path(str(db) + '.tmp'))}'")
        if memory is not None:
            con.execute(f"SET memory_limit = '{duckdb_size(memory)}'")
        con.execute(STORE_DDL)
        con.execute(f"ATTACH '{_quoted(old_db)}' AS old (READ_ONLY)")
        con.execute(f"ATTACH '{_quoted(scratch)}' AS dl")
        for table in (*TABLES, "tombstones"):  # the delta's tables, read as ``d_<name>``
            stream_table(delta, table, con, f"dl.{table}", batch_rows)
            con.execute(f"CREATE TEMP VIEW d_{table} AS SELECT * FROM dl.{table}")
        _maps(con)
        if survivors is not None:
            import numpy as np

            ids = con.execute("SELECT old_id FROM _pmap ORDER BY new_id").fetchnumpy()["old_id"]
            np.save(survivors, np.asarray(ids, dtype=np.int64), allow_pickle=False)
        for sql in _FOLD_SQL:
            con.execute(sql)
        con.execute(INDEXES)
        con.execute(BUILD_INFO_DDL)
        con.execute("INSERT INTO build_info VALUES (?, ?)", [build_id, _now()])
        counts = {t: con.execute(f"SELECT count(*) FROM {_COUNTED.get(t, t)}").fetchone()[0] for t in TABLES}
        counts["disambiguation_pages"] = con.execute("SELECT count(*) FROM pages WHERE is_disambiguation").fetchone()[0]
        con.execute("CHECKPOINT store")
        return counts
    finally:
        con.close()
        for path in (scratch, Path(str(scratch) + ".wal")):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


def stream_table(source: Any, table: str, con: Any, target: str, batch_rows: int) -> None:
    """``source``'s ``table`` (DuckDB connections both) written to ``target`` of ``con``, ``batch_rows`` rows at a
    time: the Arrow reader, on a cursor of its own, is scanned once, batch by batch."""
    cur = source.cursor()
    try:
        con.register("_delta_rows", cur.sql(f"SELECT * FROM {table}").to_arrow_reader(batch_rows))
        con.execute(f"CREATE TABLE {target} AS SELECT * FROM _delta_rows")
    finally:
        con.unregister("_delta_rows")
        cur.close()


def newest_revision(db: Path, base: str | None) -> str | None:
    """The newest revision timestamp the compacted store ``db`` holds, or the base's (``base``, the manifest's
    ``newest_rev_timestamp``) where that is newer: the base's newest page may be one the delta deleted."""
    import duckdb

    con = quiet(duckdb.connect(str(db), read_only=True))
    try:
        folded = con.execute("SELECT max(rev_timestamp) FROM pages").fetchone()[0]
    finally:
        con.close()
    return max((s for s in (base, folded) if s), default=None)


def _maps(con: Any) -> None:
    """``_hidden`` (base pages the delta holds or deleted), ``_gone`` (deleted), and the passage id maps: the
    base's surviving passages numbered 0.. in their order (``_pmap``), the delta's after them (``_dmap``)."""
    con.execute(
        "CREATE TEMP TABLE _hidden AS SELECT page_id FROM d_pages UNION SELECT page_id FROM d_tombstones "
        "WHERE page_id NOT IN (SELECT page_id FROM d_pages)"
    )
    con.execute(
        "CREATE TEMP TABLE _gone AS SELECT page_id FROM d_tombstones WHERE page_id NOT IN (SELECT page_id FROM d_pages)"
    )
    con.execute(
        "CREATE TEMP TABLE _pmap AS SELECT passage_id AS old_id, row_number() OVER (ORDER BY passage_id) - 1 AS new_id "
        f"FROM old.passages WHERE {_KEPT}"
    )
    n = con.execute("SELECT count(*) FROM _pmap").fetchone()[0]
    con.execute(
        f"CREATE TEMP TABLE _dmap AS SELECT passage_id AS old_id, {int(n)} + row_number() OVER (ORDER BY page_id, "
        "passage_index) - 1 AS new_id FROM d_passages"
    )


def _quoted(path: Path) -> str:
    return str(path).replace("'", "''")


def _now() -> str:
    import time

    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
