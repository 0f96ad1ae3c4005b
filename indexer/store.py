"""Read side of the DuckDB store (``INDEX/wiki.duckdb``), plus the live delta (segments in ``INDEX/delta/``).

Accepts a path to an index folder, a path to a ``.duckdb`` file, or an open DuckDB connection
(sqlite-utils style). Everything returned is a record from :mod:`wikiground.records`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from indexer import delta_lookups
from indexer.delta_lookups import DeltaLookups
from indexer.integrity import FileGuard, listed_records, refuse_damaged, sampled_problems
from indexer.schema import SCHEMA_VERSION
from indexer.store_memory import MemoryFit, limit_bytes
from indexer.trust import refuse_links
from indexer.verify import listed_files
from wikiground.errors import IndexChangedError, IndexCorruptError, IndexFormatError, IndexMissingError
from wikiground.layout import (
    LIVE_PASSAGE_ID_BASE,
    LOOKUPS_DIR,
    MANIFEST_FILE,
    STORE_FILE,
    delta_dir,
    delta_segments,
)
from wikiground.records import Page, Passage
from wikiground.system import quiet
from wikiground.text import canonical_title, normalize_title

if TYPE_CHECKING:
    from indexer.graph_lookups import Graph
    from indexer.lookups import Lookups

__all__ = ["DeltaShadow", "Resolution", "Store", "in_keys"]

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Resolution:
    """A title string resolved to a page of the store."""

    query: str
    page_id: int
    title: str
    via_redirect: str | None = None  # the redirect title that led here
    fragment: str | None = None
    exact: bool = True  # False when matched only through the loose normalised key
    origin: str = "local"
    is_disambiguation: bool = False  # the page it resolves to


@dataclass(frozen=True, slots=True)
class DeltaShadow:
    """What the delta hides of the base: pages it holds a newer revision of (``replaced``), pages deleted since
    (``deleted``), and ``listing``, the delta files it was read from (a channel's delta part is rebuilt when it
    changes)."""

    replaced: frozenset[int] = frozenset()
    deleted: frozenset[int] = frozenset()
    listing: tuple = ()
    # Page ids whose base passages no channel may return: ``replaced | deleted``, made once (every channel of every
    # query asks, and the union of a large delta's sets costs milliseconds).
    hidden: frozenset[int] = frozenset()


def _shadow_of(delta: Any | None, listing: tuple) -> DeltaShadow:
    if delta is None:
        return DeltaShadow(listing=listing)
    cur = delta.cursor()
    replaced = frozenset(int(r[0]) for r in cur.execute("SELECT page_id FROM pages").fetchall())
    deleted = frozenset(int(r[0]) for r in cur.execute("SELECT page_id FROM tombstones").fetchall())
    return DeltaShadow(replaced, deleted, listing, replaced | deleted)


_PAGE_COLS = "page_id, title, namespace, rev_id, rev_timestamp, is_disambiguation, url, lead"
_PASSAGE_COLS = "passage_id, page_id, section_index, text, title, heading_path, source"
# The page columns evidence shows: all but the lead, whose text would be read (a block of it for each page) to be
# dropped.
_EVIDENCE_PAGE_COLS = _PAGE_COLS.removesuffix(", lead")


# resolve_titles in one round trip: rows (kind, key, redirect source, target title, fragment, page_id,
# is_disambiguation) of kind 0 exact title, 1 redirect, 2 normalised title, 3 normalised redirect ($1: canonical
# titles, $2: normalised keys). Several pages may share a normalised key ("Paris" / "PARIS"): the shortest title
# wins, then the lowest id.
_RESOLVE_SQL = """
SELECT 0, title, NULL, title, NULL, page_id, is_disambiguation FROM pages WHERE title IN (SELECT unnest($1))
UNION ALL
SELECT 1, r.source_title, r.source_title, r.target_title, r.target_fragment, p.page_id, p.is_disambiguation
FROM redirects r JOIN pages p ON p.title = r.target_title WHERE r.source_title IN (SELECT unnest($1))
UNION ALL
SELECT 2, title_norm, NULL, arg_min(title, length(title) * 1e12 + page_id), NULL,
       arg_min(page_id, length(title) * 1e12 + page_id), arg_min(is_disambiguation, length(title) * 1e12 + page_id)
FROM pages WHERE title_norm IN (SELECT unnest($2)) GROUP BY title_norm
UNION ALL
SELECT 3, r.source_norm, arg_min(r.source_title, r.source_title), arg_min(r.target_title, r.source_title),
       arg_min(r.target_fragment, r.source_title), arg_min(p.page_id, r.source_title),
       arg_min(p.is_disambiguation, r.source_title)
FROM redirects r JOIN pages p ON p.title = r.target_title WHERE r.source_norm IN (SELECT unnest($2))
GROUP BY r.source_norm
"""


# A page's lead passage: its first text passage, else its first passage (indexer/lookups.py writes the same).
_LEAD_SQL = (
    f"SELECT {_PASSAGE_COLS} FROM passages WHERE page_id IN {{keys}} "
    "QUALIFY row_number() OVER (PARTITION BY page_id ORDER BY (source <> 'text'), passage_index) = 1"
)


# Passages one evidence query reads at most: a lookup by keys holds the block of each key's text in memory at once
# (keys spread over the table are as many blocks), so a block of claims' evidence is read in slices of this many.
EVIDENCE_KEYS_PER_QUERY = 64


def _evidence_rows(cur: Any, ids: Sequence[int], known_pages: Mapping[int, tuple] | None = None) -> list[tuple]:
    """The evidence rows: passages with their page's columns after them, by passage id, in slices of
    :data:`EVIDENCE_KEYS_PER_QUERY`. Two point lookups, not a join: DuckDB builds a join's hash table over the pages
    side, whose memory grows with the corpus, while a lookup by keys reads only the blocks that hold them.
    ``known_pages``: every page's row of ``_EVIDENCE_PAGE_COLS`` by page id, read from it instead (the delta's)."""
    rows: list[tuple] = []
    for at in range(0, len(ids), EVIDENCE_KEYS_PER_QUERY):
        keys, params = in_keys(ids[at : at + EVIDENCE_KEYS_PER_QUERY])
        rows.extend(cur.execute(f"SELECT {_PASSAGE_COLS} FROM passages WHERE passage_id IN {keys}", params).fetchall())
    if not rows:
        return []
    if known_pages is not None:
        return [(*r, *known_pages[int(r[1])]) for r in rows if int(r[1]) in known_pages]
    page_ids = sorted({int(r[1]) for r in rows})
    pages: dict[int, tuple] = {}
    for at in range(0, len(page_ids), EVIDENCE_KEYS_PER_QUERY):
        keys, params = in_keys(page_ids[at : at + EVIDENCE_KEYS_PER_QUERY])
        found = cur.execute(f"SELECT {_EVIDENCE_PAGE_COLS} FROM pages WHERE page_id IN {keys}", params).fetchall()
        pages.update((int(p[0]), p) for p in found)
    return [(*r, *pages[int(r[1])]) for r in rows if int(r[1]) in pages]


def _sentence_ids_sql(sentences: str, keys: str) -> str:
    """The page-level sentence ids of passages. Read from ``sentence_spans`` where the store has it (the
    ``sentences`` view joins every passage to slice its text), as plain rows: grouping them in SQL (``list(...
    ORDER BY ...)``) cost more than the lookup itself, and one query joining them to the passages was planned as
    hash joins, slower than the two lookups."""
    return f"SELECT passage_id, sentence_index, page_sentence_index FROM {sentences} WHERE passage_id IN {keys}"


def _sentence_table(con: Any) -> str:
    """``sentence_spans`` (bulk-built stores: offsets only) or ``sentences`` (the delta, older stores)."""
    sql = (
        "SELECT count(*) FROM (SELECT table_name AS name FROM duckdb_tables() UNION ALL "
        "SELECT view_name FROM duckdb_views()) WHERE name = 'sentence_spans'"
    )
    return "sentence_spans" if con.cursor().execute(sql).fetchone()[0] else "sentences"


def _page(row: Sequence[Any]) -> Page:
    return Page(
        page_id=int(row[0]),
        title=row[1],
        namespace=int(row[2]),
        rev_id=row[3],
        rev_timestamp=None if row[4] is None else str(row[4]),
        is_disambiguation=bool(row[5]),
        url=row[6],
        lead=(row[7] if len(row) > 7 else None) or "",  # evidence rows leave it out
    )


def _passage(row: Sequence[Any]) -> Passage:
    return Passage(
        passage_id=int(row[0]),
        page_id=int(row[1]),
        section_index=int(row[2]),
        text=row[3],
        title=row[4],
        heading_path=row[5],
        source=row[6],
    )


def _sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


# Lookups pass their keys as one list (``col IN (SELECT unnest(?))``), which DuckDB plans as a semi-join. It reaches
# the ART index of ``col`` only by pushing the keys into the scan as an IN filter, and it does that for at most
# ``dynamic_or_filter_threshold`` keys (50 by default): with more keys (the entity matcher sends every n-gram of a
# claim), the scan reads the whole table, a cost that grows with the corpus (EXPLAIN ANALYZE: "Sequential Scan,
# Row Groups Scanned: all"). Above this many keys a full scan is the better plan anyway.
LOOKUP_KEYS_MAX = 4096
# A few integer keys go into the SQL text instead: DuckDB plans ``col IN (1, 2, 3)`` as a plain index lookup, cheaper
# than the list parameter's semi-join; for many keys the literal list costs more to plan than the semi-join.
FEW_KEYS = 16


def in_keys(ids: Sequence[int]) -> tuple[str, list]:
    """The operand of ``col IN ...`` for integer keys (at least one: callers skip the query for none), and its
    parameters (none when the keys are inlined)."""
    if len(ids) <= FEW_KEYS:
        return "(" + ", ".join(str(int(i)) for i in ids) + ")", []
    return "(SELECT unnest(?))", [[int(i) for i in ids]]


# DuckDB's buffer pool keeps every block a lookup read (256 KB of passage text for one passage) up to its memory
# limit, 80% of the machine's RAM by default, so a long-running query process would grow towards the size of the
# store. The pool caches clean, read-only blocks (the OS caches the file too), so a small limit only evicts sooner:
# it bounds the query process's RSS without slowing its lookups. The indexes' memory, which DuckDB never evicts,
# comes on top (indexer.store_memory). The live delta, an in-memory database, keeps DuckDB's default.
STORE_MEMORY_LIMIT = "256MB"


def _spill_folder() -> str:
    """A folder of this process's own under the system's temporary folder (the index folder may be read-only)."""
    import tempfile

    return os.path.join(tempfile.gettempdir(), f"wikiground-store-{os.getpid()}")


def _tune(con: Any) -> None:
    """Index scans for key lists up to LOOKUP_KEYS_MAX, on every cursor of ``con`` (hence GLOBAL: a cursor is a
    new session of the same database instance, and ``con`` is an instance of its own)."""
    con.execute(f"SET GLOBAL dynamic_or_filter_threshold = {LOOKUP_KEYS_MAX}")
    con.execute(f"SET GLOBAL index_scan_max_count = {LOOKUP_KEYS_MAX}")


def _connect(path: Path, *, expected_bytes: int | None = None):
    """A connection that sees the store at ``path`` read-only, with its tables and views by their plain names.

    ``duckdb.connect(path)`` would reuse the database instance DuckDB caches per path and process: after a
    rebuild that is still the old (renamed, deleted) file. An in-memory database that attaches the file opens
    whatever file is at ``path`` now; views in the in-memory catalog name the attached tables, so every
    cursor of the connection (cursors do not inherit ``USE``) sees them.
    """
    import duckdb

    if expected_bytes is not None:
        size = path.stat().st_size
        if size != expected_bytes:
            raise IndexCorruptError(
                f"{path}: {size} bytes where the manifest says {expected_bytes}: truncated or replaced (rebuild)"
            )
    con = quiet(duckdb.connect(":memory:"))
    try:
        _tune(con)
        con.execute(f"SET GLOBAL memory_limit = '{STORE_MEMORY_LIMIT}'")
        # A query past the limit spills here rather than failing (DuckDB makes the folder on its first spill).
        con.execute(f"SET GLOBAL temp_directory = {_sql_string(_spill_folder())}")
        con.execute(f"ATTACH {_sql_string(str(path))} AS store (READ_ONLY)")
        names = con.execute(
            "SELECT table_name FROM duckdb_tables() WHERE database_name = 'store' AND schema_name = 'main' "
            "UNION ALL SELECT view_name FROM duckdb_views() WHERE database_name = 'store' AND schema_name = 'main' "
            "AND NOT internal"
        ).fetchall()
        for (name,) in names:
            quoted = '"' + name.replace('"', '""') + '"'
            con.execute(f"CREATE VIEW memory.main.{quoted} AS SELECT * FROM store.main.{quoted}")
    except duckdb.Error as exc:
        con.close()
        raise IndexCorruptError(f"{path}: cannot open the store: {exc}") from exc
    return con


def _build_id(con: Any, db: Path) -> str:
    """The id of the build that wrote the store (its ``build_info`` row); a store without one was written before
    build ids and is refused (``con`` is closed then)."""
    import duckdb

    try:
        row = con.execute("SELECT build_id FROM build_info LIMIT 1").fetchone()
    except duckdb.CatalogException:
        row = None
    if row is None:
        con.close()
        raise IndexFormatError(db, "format 3 or earlier, without a build_info table", SCHEMA_VERSION)
    return str(row[0])


def _manifest_of(index_dir: Path) -> dict[str, Any]:
    """The manifest beside a store, or {} (a bare ``.duckdb`` file, a folder built by hand)."""
    path = index_dir / MANIFEST_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise IndexCorruptError(f"{path}: unreadable manifest ({exc})") from exc
    return data if isinstance(data, dict) else {}


def _open_consistent(db: Path, index_dir: Path) -> tuple[Any, str, dict[str, Any]]:
    """The store, checked to be the build the manifest names (a rebuild may swap the folder in between), and the
    manifest."""
    for _ in range(3):
        manifest = _manifest_of(index_dir)
        _check_schema(index_dir, manifest)
        if manifest:  # an index folder (not a bare store file in any folder): the build's files only, no links
            refuse_links(index_dir)
        expected = manifest.get("build_id")
        con = _connect(db, expected_bytes=manifest.get("store_bytes"))
        build_id = _build_id(con, db)
        if expected is None or build_id == expected:  # None: a bare store file, no manifest to check it against
            return con, build_id, manifest
        con.close()  # the folder was swapped between reading the manifest and opening the store: read both again
    raise IndexChangedError(f"{index_dir}: the store is build {build_id} but the manifest names {expected}")


def _damaged_lookups(index_dir: Path, manifest: dict[str, Any]) -> str | None:
    """What is wrong with the first lookups file that differs from the manifest's record (sampled:
    :mod:`indexer.integrity`), or None; any other file that differs is an IndexCorruptError naming it."""
    files = listed_records(manifest, index_dir / MANIFEST_FILE) if manifest else None
    if not files:
        return None
    problems = sampled_problems(index_dir, files)
    refuse_damaged(index_dir, problems)
    return next((f"{index_dir / rel}: {why}" for rel, why in problems.items()), None)


def _check_schema(index_dir: Path, manifest: dict[str, Any]) -> None:
    if not manifest:
        return
    found = manifest.get("schema_version")
    if isinstance(found, int) and not isinstance(found, bool) and found < SCHEMA_VERSION:
        raise IndexFormatError(index_dir, found, SCHEMA_VERSION)
    if found != SCHEMA_VERSION or isinstance(found, bool):
        raise IndexCorruptError(
            f"{index_dir / MANIFEST_FILE}: schema_version {str(found)[:40]!r}, but this version of wikiground reads "
            f"{SCHEMA_VERSION} only (a newer wikiground's index, or an edited manifest): rebuild it"
        )


# The delta's tables, copied from its segments into one in-memory database (pages ingested live are few).
_DELTA_TABLES = ("pages", "sections", "passages", "categories", "see_also", "links", "infobox", "table_rows")
# Tables keyed by another column than page_id; ``triples`` is missing from segments written before it existed.
_DELTA_KEYED = {"triples": "subject_page_id"}


def open_delta(index_dir: Path, extra: Sequence[Path] = ()) -> tuple[Any | None, tuple]:
    """The delta's segments merged into an in-memory database (the newest revision of each page wins, a deletion
    being one more revision: its tombstone), and the listing it was read from. A segment that cannot be read whole
    is skipped with a warning: the rest serve. ``extra``: segments not yet renamed in, read as the newest (a writer
    preparing what readers will see once they are)."""
    import duckdb

    from indexer.delta_schema import DELTA_EXTRA_DDL
    from indexer.schema import DDL

    segments = [*delta_segments(index_dir), *extra]
    listing = _listing(segments)
    if not segments:
        return None, listing
    con = quiet(duckdb.connect(":memory:"))
    _tune(con)
    con.execute(DDL + DELTA_EXTRA_DDL)
    best: dict[int, tuple[tuple, int, bool]] = {}  # page_id -> (revision key, segment number, is a tombstone)
    staged: list[int] = []
    for n, seg in enumerate(segments):
        try:
            _stage_segment(con, seg, n)
        except duckdb.Error as exc:
            log.warning("%s: damaged delta segment skipped (%s)", seg, str(exc).splitlines()[0])
            con.execute(f"DROP SCHEMA IF EXISTS s{n} CASCADE")
            continue
        finally:
            with contextlib.suppress(duckdb.Error):
                con.execute(f"DETACH DATABASE IF EXISTS seg{n}")
        staged.append(n)
        for table, dead in (("pages", False), ("tombstones", True)):
            for page_id, rev_id, stamp in con.execute(
                f"SELECT page_id, rev_id, rev_timestamp FROM s{n}.{table}"
            ).fetchall():
                key = (-1 if rev_id is None else int(rev_id), stamp or "", n, dead)
                if page_id not in best or key > best[int(page_id)][0]:
                    best[int(page_id)] = (key, n, dead)
    for n in staged:
        ids = sorted(pid for pid, (_, seg, dead) in best.items() if seg == n and not dead)
        gone = sorted(pid for pid, (_, seg, dead) in best.items() if seg == n and dead)
        _merge_segment(con, n, ids, gone)
    _merge_redirects(con, staged, {pid for pid, (_, _, dead) in best.items() if dead})
    for n in staged:
        con.execute(f"DROP SCHEMA s{n} CASCADE")
    return con, listing


def _merge_segment(con: Any, n: int, ids: list[int], gone: list[int]) -> None:
    """The winning pages ``ids`` and tombstones ``gone`` of segment ``n`` into the merged tables."""
    for table in (*_DELTA_TABLES, *_DELTA_KEYED):
        key = _DELTA_KEYED.get(table, "page_id")
        sql = f"INSERT INTO {table} SELECT * FROM s{n}.{table} WHERE {key} IN (SELECT unnest(?))"
        con.execute(sql, [ids])
    con.execute(
        f"INSERT INTO sentences SELECT s.* FROM s{n}.sentences s WHERE s.passage_id IN "
        f"(SELECT passage_id FROM s{n}.passages WHERE page_id IN (SELECT unnest(?)))",
        [ids],
    )
    con.execute(f"INSERT INTO tombstones SELECT * FROM s{n}.tombstones WHERE page_id IN (SELECT unnest(?))", [gone])
    for table in ("stale_pages", "delta_files"):
        con.execute(f"INSERT INTO {table} SELECT * FROM s{n}.{table}")


def _merge_redirects(con: Any, staged: list[int], dead: set[int]) -> None:
    """Redirects the segments hold (a moved page's old title): the newest segment's word on a title wins, and a
    redirect to a deleted page is dropped."""
    seen: set[str] = set()
    for n in reversed(staged):
        rows = con.execute(f"SELECT * FROM s{n}.redirects").fetchall()
        fresh = [r for r in rows if r[0] not in seen and r[7] not in dead]
        seen.update(r[0] for r in rows)
        if fresh:
            con.executemany(f"INSERT INTO redirects VALUES ({', '.join('?' * len(fresh[0]))})", fresh)


def _stage_segment(con: Any, seg: Path, n: int) -> None:
    """Read a whole segment into schema ``s{n}``: a damaged file fails here, before any of it is used."""
    from indexer.delta_schema import DELTA_EXTRA_TABLES

    con.execute(f"ATTACH {_sql_string(str(seg))} AS seg{n} (READ_ONLY)")
    con.execute(f"CREATE SCHEMA s{n}")
    for table in (*_DELTA_TABLES, "sentences", "redirects"):
        con.execute(f"CREATE TABLE s{n}.{table} AS SELECT * FROM seg{n}.{table}")
    sql = "SELECT table_name FROM duckdb_tables() WHERE database_name = ?"
    present = {r[0] for r in con.execute(sql, [f"seg{n}"]).fetchall()}
    for table in (*_DELTA_KEYED, *DELTA_EXTRA_TABLES):
        source = f"seg{n}.{table}" if table in present else f"main.{table} LIMIT 0"  # an older segment: none
        con.execute(f"CREATE TABLE s{n}.{table} AS SELECT * FROM {source}")


def delta_revisions(index_dir: Path) -> set[tuple[int, int | None]]:
    """(page_id, rev_id) of every page in the delta's readable segments (what a writer need not write again)."""
    con, _ = open_delta(index_dir)
    if con is None:
        return set()
    try:
        return {
            (int(a), None if b is None else int(b))
            for a, b in con.execute("SELECT page_id, rev_id FROM pages").fetchall()
        }
    finally:
        con.close()


# How long after its last change a folder's mtime is trusted to say it has not changed since: a change made within
# the same clock tick as an earlier look leaves the mtime as it was, and ticks are at most milliseconds.
SETTLED_NS = 1_000_000_000


def _settled_stamp(folder: Path) -> tuple | None:
    """The delta folder's identity and mtime, or None where it is missing or changed within ``SETTLED_NS``. A writer
    adds or removes a segment by renaming it (segments are immutable), which sets the folder's mtime: while the
    stamp is the one of the last listing, the listing is the same."""
    try:
        st = os.stat(folder)
    except OSError:
        return None
    if time.time_ns() - st.st_mtime_ns < SETTLED_NS:
        return None
    return (st.st_dev, st.st_ino, st.st_mtime_ns)


def _listing(segments: list[Path]) -> tuple:
    out = []
    for seg in segments:
        try:
            st = seg.stat()
        except FileNotFoundError:
            continue
        out.append((seg.name, st.st_size, st.st_mtime_ns))
    return tuple(out)


class Store:
    """Lookups over the store and its live delta. Thread-safe: each call uses its own cursor.

    ``build_id`` names the build the store belongs to (None for a store given as a DuckDB connection). The delta
    is read again whenever its folder's listing changes (a writer adds whole segments by renaming them in).
    """

    def __init__(self, con: Any, *, path: Path | None = None, delta: Any | None = None, build_id: str | None = None):
        self.path = path
        self.build_id = build_id
        self._main = con
        self._delta = delta
        self._delta_listing: tuple = ()
        self._delta_stamp: tuple | None = None  # the delta folder's settled stamp when last listed
        self._delta_folder = delta_dir(path) if path is not None else None
        self._shadow = DeltaShadow()
        self._delta_lookups: tuple[Any, DeltaLookups | None] = (None, None)  # (the delta read, its lookups)
        self._lock = threading.Lock()
        self._sentence_tables: dict[int, str] = {}  # id(connection) -> where its sentence ids are read
        self._lookups: Lookups | None = None  # the main store's point lookups as mmap'd files, if built
        self._guard: FileGuard | None = None  # the index's files as opened (indexer.integrity)
        self._memory: MemoryFit | None = None  # the limit that makes room for the indexes (indexer.store_memory)

    # -- opening -----------------------------------------------------------------------------
    @classmethod
    def open(cls, where: str | Path | Any) -> Store:
        """Open from an index folder, a ``.duckdb`` file or a DuckDB connection."""
        if not isinstance(where, (str, Path)):
            return cls(where)
        p = Path(where)
        db = p / STORE_FILE if p.is_dir() or not p.suffix else p
        if not db.is_file():
            raise IndexMissingError(
                f"no store at {db}: build one with `python -m indexer build --dump DUMP --out {p}` (or `make index`)"
            )
        index_dir = db.parent
        con, build_id, manifest = _open_consistent(db, index_dir)
        store = cls(con, path=index_dir, build_id=build_id)
        store._memory = MemoryFit(con, limit_bytes(STORE_MEMORY_LIMIT))
        from indexer.lookups import Lookups  # numpy: imported when an index is opened

        try:
            # The files as they are now, before any is read (a bare store file: the store alone, not its folder).
            store._guard = FileGuard(index_dir, listed_files(index_dir) if manifest else [db])
            damaged = _damaged_lookups(index_dir, manifest)
            store._lookups = Lookups.open(index_dir / LOOKUPS_DIR, build_id, damaged)
            store.reload_delta()
        except BaseException:  # lookups or a delta of an older format: refused, the store closed
            store.close()
            raise
        return store

    def check_files(self, folders: Iterable[str] = ()) -> None:
        """Before the index's files are read: :class:`IndexCorruptError` naming the store or a file under
        ``folders`` (channel folders) if it was cut since the index was opened (its next read through a memory map
        would kill the process). Lookups cut since are dropped with a warning: the store answers in their place."""
        if self._memory is not None:
            self._memory.searched()
        guard = self._guard
        if guard is None:
            return
        if self._lookups is not None:
            cut = [rel for rel, _, _ in guard.cut((LOOKUPS_DIR,)) if rel != STORE_FILE]
            if cut:
                log.warning("%s: cut since the index was opened; titles are resolved in the store", cut[0])
                self._lookups = None
        guard.check(folders)

    def reload_delta(self) -> None:
        """Read the delta again if segments were added or removed since it was last read."""
        if self.path is None:
            return
        # Called several times a query: one stat of the folder while it is unchanged, not a listing of it.
        stamp = _settled_stamp(self._delta_folder)  # before the listing: a change after it shows next time
        if stamp is not None and stamp == self._delta_stamp:
            return
        listing = _listing(delta_segments(self.path))
        if listing == self._delta_listing:
            self._delta_stamp = stamp
            return
        with self._lock:
            if listing == self._delta_listing:
                return
            # The replaced connection is not closed here: another thread may be reading it (it is garbage
            # collected once no cursor holds it).
            delta, listing = open_delta(self.path)
            lookups = delta_lookups.prepare(delta, _EVIDENCE_PAGE_COLS) if delta is not None else None
            self._shadow = _shadow_of(delta, listing)
            self._delta_lookups = (delta, lookups)
            self._delta, self._delta_listing = delta, listing
            self._delta_stamp = None  # listed again next time: open_delta listed the folder after the stamp

    @property
    def shadow(self) -> DeltaShadow:
        """The pages of the base the delta replaced or deleted, as of the delta last read (read it again first)."""
        if self.path is not None:
            self.reload_delta()
        return self._shadow

    def _delta_read(self) -> tuple[Any, DeltaLookups | None]:
        """The delta as last read, and its lookups in memory (None: a delta given as a connection, asked in SQL)."""
        delta = self._delta
        held, lookups = self._delta_lookups
        return delta, lookups if held is delta else None

    @property
    def delta_graph(self) -> Graph | None:
        """The delta's facts by subject (``indexer.delta_lookups.delta_graph``), as of the delta last read; None
        where the kg channel asks the delta in SQL."""
        _, lookups = self._delta_read()
        return None if lookups is None else lookups.graph

    def delta_origins(self, page_ids: Iterable[int]) -> dict[int, tuple[str, str | None]]:
        """page_id -> (origin, revision time) of the pages among ``page_ids`` that the delta holds."""
        ids = sorted({int(i) for i in page_ids})
        delta, lookups = self._delta_read()
        if not ids or delta is None:
            return {}
        if lookups is not None:
            return {i: lookups.origins[i] for i in ids if i in lookups.origins}
        keys, params = in_keys(ids)
        sql = f"SELECT page_id, origin, rev_timestamp FROM pages WHERE page_id IN {keys}"
        return {int(a): (b, c) for a, b, c in delta.cursor().execute(sql, params).fetchall()}

    def live_fetch_times(self, page_ids: Iterable[int]) -> dict[int, str | None]:
        """page_id -> fetch time (``rev_timestamp`` of a live page) of the pages among ``page_ids`` in the delta."""
        ids = sorted({int(i) for i in page_ids})
        delta = self._delta
        if not ids or delta is None:
            return {}
        keys, params = in_keys(ids)
        rows = (
            delta.cursor()
            .execute(f"SELECT page_id, rev_timestamp FROM pages WHERE page_id IN {keys}", params)
            .fetchall()
        )
        return {int(a): b for a, b in rows}

    def close(self) -> None:
        for con in (self._main, self._delta):
            if con is not None:
                con.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing ----------------------------------------------------------------------------
    def _cons(self) -> Iterator[Any]:
        if self.path is not None:
            self.reload_delta()  # one listing of delta/: a segment written by any process is seen at once
        delta = self._delta
        yield self._main
        if delta is not None:
            yield delta

    def _all(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        rows: list[tuple] = []
        for con in self._cons():
            rows.extend(self._run(con, lambda c=con: c.cursor().execute(sql, list(params)).fetchall()))
        return rows

    def _run(self, con: Any, query: Callable[[], T]) -> T:
        """``query()`` over ``con``; over the main store, run again when it failed for memory while the indexes
        grew under it (indexer.store_memory)."""
        if con is self._main and self._memory is not None:
            return self._memory.run(query)
        return query()

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        """Rows of a read-only ``sql`` over the store, then its live delta (a cursor per call: thread-safe).
        For listings the lookups below do not cover; the tables are those of ``indexer.schema``."""
        return self._all(sql, params)

    def base_rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        """Rows of ``sql`` over the built store only (a page the delta replaced or deleted included)."""
        return self._run(self._main, lambda: self._main.cursor().execute(sql, list(params)).fetchall())

    def delta_rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        """Rows of ``sql`` over the live delta only (none without one): what :attr:`graph` does not hold."""
        rows: list[tuple] = []
        for con in self._cons():
            if con is not self._main:
                rows.extend(con.cursor().execute(sql, list(params)).fetchall())
        return rows

    @property
    def graph(self) -> Graph | None:
        """The main store's ``triples`` by subject as memory-mapped arrays (``indexer.graph_lookups``), or None
        when the index has no such lookups (then ask :meth:`rows`)."""
        table = self._lookups
        return None if table is None else table.graph

    # -- pages and passages ------------------------------------------------------------------
    def count(self, table: str) -> int:
        return sum(con.cursor().execute(f"SELECT count(*) FROM {table}").fetchone()[0] for con in self._cons())

    def pages(self, page_ids: Iterable[int]) -> dict[int, Page]:
        ids = sorted({int(i) for i in page_ids})
        if not ids:
            return {}
        keys, params = in_keys(ids)
        rows = self._all(f"SELECT {_PAGE_COLS} FROM pages WHERE page_id IN {keys}", params)
        return {int(r[0]): _page(r) for r in rows}

    def page(self, page_id: int) -> Page | None:
        return self.pages([page_id]).get(int(page_id))

    def page_by_title(self, title: str) -> Page | None:
        res = self.resolve_title(title)
        return self.page(res.page_id) if res else None

    def passages(self, passage_ids: Iterable[int]) -> dict[int, Passage]:
        ids = sorted({int(i) for i in passage_ids})
        if not ids:
            return {}
        keys, params = in_keys(ids)
        rows = self._all(f"SELECT {_PASSAGE_COLS} FROM passages WHERE passage_id IN {keys}", params)
        return {int(r[0]): _passage(r) for r in rows}

    def passages_with_pages(self, passage_ids: Iterable[int]) -> dict[int, tuple[Passage, Page, list[int]]]:
        """Passages with their page (its ``lead`` left empty: evidence does not show it) and page-level sentence ids,
        in one round trip (the evidence path)."""
        ids = sorted({int(i) for i in passage_ids})
        if not ids:
            return {}
        rows: list[tuple] = []
        spans: dict[int, list[tuple[int, int]]] = {}
        lookups = self._lookups  # read once: a lookups file cut under the process drops them (check_files)
        for con in self._cons():
            # The delta's passage ids start at LIVE_PASSAGE_ID_BASE, above any the base numbers: each store is
            # asked for its own (a large delta made the base's lookups and the delta's scans cost twice).
            mine = [i for i in ids if (i >= LIVE_PASSAGE_ID_BASE) == (con is not self._main)]
            if not mine:
                continue
            cur = con.cursor()
            held, in_memory = self._delta_lookups
            in_memory = in_memory if con is held else None  # the delta's, read once per delta read
            pages = in_memory.pages if in_memory is not None else None
            rows.extend(self._run(con, lambda c=cur, ids_=mine, p=pages: _evidence_rows(c, ids_, p)))
            known = lookups.sentence_ids(mine) if con is self._main and lookups is not None else None
            if in_memory is not None:
                known = in_memory.sentence_ids(mine)
            if known is not None:
                spans.update({pid: list(enumerate(sids)) for pid, sids in known.items()})
                continue
            table = self._sentence_tables.get(id(con))
            if table is None:
                table = self._sentence_tables[id(con)] = _sentence_table(con)
            keys, params = in_keys(mine)
            for pid, idx, sid in cur.execute(_sentence_ids_sql(table, keys), params).fetchall():
                spans.setdefault(int(pid), []).append((int(idx), int(sid)))
        n = len(_PASSAGE_COLS.split(","))
        m = len(_EVIDENCE_PAGE_COLS.split(","))
        return {
            int(r[0]): (_passage(r[:n]), _page(r[n : n + m]), [sid for _, sid in sorted(spans.get(int(r[0]), ()))])
            for r in rows
        }

    def page_passages(self, page_id: int, *, limit: int | None = None) -> list[Passage]:
        sql = f"SELECT {_PASSAGE_COLS} FROM passages WHERE page_id = ? ORDER BY passage_index"
        if limit:
            sql += f" LIMIT {int(limit)}"
        if int(page_id) in self.shadow.hidden:  # the delta's revision of the page, or none
            return [_passage(r) for r in self.delta_rows(sql, [int(page_id)])]
        return [_passage(r) for r in self._all(sql, [int(page_id)])]

    def lead_passages(self, page_ids: Iterable[int]) -> dict[int, Passage]:
        """First text passage of each page (its intro)."""
        ids = sorted({int(i) for i in page_ids})
        if not ids:
            return {}
        keys, params = in_keys(ids)
        rows = self._all(_LEAD_SQL.format(keys=keys), params)
        return {int(r[1]): _passage(r) for r in rows}

    def lead_passage_ids(self, page_ids: Iterable[int]) -> dict[int, tuple[int, str]]:
        """page_id -> (id of its lead passage as :meth:`lead_passages` picks it, page title), without reading the
        passages: from the lookups where the store has them (live pages, in the delta, are looked up in it)."""
        ids = sorted({int(i) for i in page_ids})
        if not ids:
            return {}
        table = self._lookups
        if table is None:
            return {pid: (p.passage_id, p.title) for pid, p in self.lead_passages(ids).items()}
        out = table.leads(ids)
        # The delta after the main store: a page fetched live since the build wins.
        self.reload_delta()
        delta, lookups = self._delta_read()
        if lookups is not None:
            out.update((i, lookups.leads[i]) for i in ids if i in lookups.leads)
        elif delta is not None:
            keys, params = in_keys(ids)
            out.update({int(r[1]): (int(r[0]), r[4]) for r in self.delta_rows(_LEAD_SQL.format(keys=keys), params)})
        for pid in self._shadow.deleted.intersection(out):
            del out[pid]
        return out

    def sentences(self, passage_id: int) -> list[tuple[int, int, str]]:
        """(sentence_index, page_sentence_index, text) of a passage."""
        return [
            (int(a), int(b), c)
            for a, b, c in self._all(
                "SELECT sentence_index, page_sentence_index, text FROM sentences WHERE passage_id = ? "
                "ORDER BY sentence_index",
                [int(passage_id)],
            )
        ]

    def links(self, page_id: int) -> list[tuple[str, str]]:
        return [
            (t, a)
            for t, a in self._all("SELECT target_title, anchor_text FROM links WHERE page_id = ?", [int(page_id)])
        ]

    def see_also(self, page_id: int) -> list[str]:
        return [r[0] for r in self._all("SELECT target_title FROM see_also WHERE page_id = ?", [int(page_id)])]

    def categories(self, page_id: int) -> list[str]:
        return [r[0] for r in self._all("SELECT category FROM categories WHERE page_id = ?", [int(page_id)])]

    def infobox(self, page_id: int) -> list[tuple[str, str, str]]:
        return [
            tuple(r)
            for r in self._all("SELECT infobox_type, key, value FROM infobox WHERE page_id = ?", [int(page_id)])
        ]

    # -- titles ------------------------------------------------------------------------------
    def resolve_title(self, title: str) -> Resolution | None:
        return self.resolve_titles([title]).get(title)

    def resolve_titles(self, titles: Iterable[str], *, loose: bool = True) -> dict[str, Resolution]:
        """Resolve strings to pages: exact title, then redirect, then (``loose``) the normalised key.

        One query per store however many strings (the entity matcher sends every n-gram of a claim): each
        round trip costs DuckDB a few milliseconds, more than the lookups themselves.
        """
        wanted = [t for t in dict.fromkeys(titles) if t and t.strip()]
        if not wanted:
            return {}
        canon = {t: canonical_title(t) for t in wanted}
        norm = {t: normalize_title(t) for t in wanted} if loose else {}
        keys = sorted({k for k in norm.values() if k})

        def from_store(con: Any, origin: str, out: dict[str, Resolution]) -> None:
            found: list[dict[str, tuple]] = [{}, {}, {}, {}]  # by kind: exact, redirect, loose title, loose redirect
            for kind, key, *rest in self._resolve_rows(con, sorted(set(canon.values())), keys):
                found[kind][key] = (kind, *rest)
            for t in wanted:
                c, k = canon[t], norm.get(t)
                row = found[0].get(c) or found[1].get(c) or found[2].get(k) or found[3].get(k)
                if row is not None:
                    kind, source, target, frag, pid, dab = row
                    out[t] = Resolution(t, int(pid), target, source, frag, kind < 2, origin, bool(dab))

        return self._resolved_in_each(
            wanted, lambda table, out: self._resolve_from_table(table, wanted, canon, norm, out), from_store
        )

    def resolve_keys(self, keys: Iterable[str]) -> dict[str, Resolution]:
        """Normalised keys (``normalize_title``) resolved to pages by the loose match alone (``exact`` False): the
        entity matcher's spelling variants of a name, hundreds at once, in one vectorised lookup of the main
        store's table (one query of each other store)."""
        wanted = sorted({k for k in keys if k})
        if not wanted:
            return {}

        def from_table(table: Lookups, out: dict[str, Resolution]) -> None:
            for key, e in table.loose_many(wanted).items():
                out[key] = Resolution(key, e.page_id, e.target, e.via, e.fragment, False, "local", e.is_disambiguation)

        def from_store(con: Any, origin: str, out: dict[str, Resolution]) -> None:
            rows = self._resolve_rows(con, [], wanted)
            for _, key, source, target, frag, pid, dab in sorted(rows, key=lambda r: -r[0]):  # titles last: win
                out[key] = Resolution(key, int(pid), target, source, frag, False, origin, bool(dab))

        return self._resolved_in_each(wanted, from_table, from_store)

    def _resolved_in_each(
        self,
        wanted: list[str],
        from_table: Callable[[Lookups, dict[str, Resolution]], None],
        from_store: Callable[[Any, str, dict[str, Resolution]], None],
    ) -> dict[str, Resolution]:
        """``wanted`` resolved in each store: the main store's lookups where it has them (``from_table``), else its
        SQL, then the delta's (``from_store``, with the origin to name); one answer each (:meth:`_with_delta`)."""
        found_in: list[dict[str, Resolution]] = []
        table = self._lookups
        for con in self._cons():
            out: dict[str, Resolution] = {}
            found_in.append(out)
            if con is self._main and table is not None:
                from_table(table, out)
            else:
                from_store(con, "local" if con is self._main else "delta", out)
        return self._with_delta(wanted, *found_in)

    def _resolve_rows(self, con: Any, titles: list[str], keys: list[str]) -> list[tuple]:
        """``_RESOLVE_SQL``'s rows, from the delta's titles in memory where ``con`` is the delta they were read from."""
        held, lookups = self._delta_lookups
        if con is held and lookups is not None:
            return lookups.titles.rows(titles, keys)
        return con.cursor().execute(_RESOLVE_SQL, [titles, keys]).fetchall()

    def _with_delta(
        self, wanted: list[str], base: dict[str, Resolution], delta: dict[str, Resolution] | None = None
    ) -> dict[str, Resolution]:
        """One answer per title from the base's and the delta's: the delta's exact match first (a page changed,
        moved or added since the base), then the base's unless the delta deleted its page, then the delta's loose
        match. The delta's resolutions say the origin of their page (``update`` or ``live``)."""
        delta = delta or {}
        deleted = self._shadow.deleted
        origins = self.delta_origins(r.page_id for r in delta.values()) if delta else {}
        out: dict[str, Resolution] = {}
        for t in wanted:
            d, b = delta.get(t), base.get(t)
            if b is not None and b.page_id in deleted:
                b = None
            pick = d if d is not None and (d.exact or b is None) else b
            if pick is not None and pick is d:
                pick = replace(pick, origin=origins.get(pick.page_id, ("live",))[0])
            if pick is not None:
                out[t] = pick
        return out

    def _resolve_from_table(
        self, table: Lookups, wanted: list[str], canon: dict[str, str], norm: dict[str, str], out: dict[str, Resolution]
    ) -> None:
        """resolve_titles over the main store's lookups: the same answers as ``_RESOLVE_SQL``."""
        for t in wanted:
            if t in out:
                continue
            entry, exact = table.exact(canon[t]), True
            if entry is None and norm.get(t):
                entry, exact = table.loose(norm[t]), False
            if entry is not None:
                out[t] = Resolution(
                    t,
                    entry.page_id,
                    entry.target,
                    via_redirect=entry.via,
                    fragment=entry.fragment,
                    exact=exact,
                    origin="local",
                    is_disambiguation=entry.is_disambiguation,
                )

    def known_keys(self, keys: Iterable[str]) -> set[str]:
        """Which normalised keys name a page or a redirect (of any target, even one outside the store)."""
        ks = sorted({k for k in keys if k})
        if not ks:
            return set()
        found: set[str] = set()
        for con in self._cons():
            held, lookups = self._delta_lookups
            if con is held and lookups is not None:
                found.update(lookups.titles.norms.intersection(ks))
                continue
            cur = con.cursor()
            found.update(
                r[0]
                for r in cur.execute(
                    "SELECT DISTINCT title_norm FROM pages WHERE title_norm IN (SELECT unnest(?))", [ks]
                ).fetchall()
            )
            found.update(
                r[0]
                for r in cur.execute(
                    "SELECT DISTINCT source_norm FROM redirects WHERE source_norm IN (SELECT unnest(?))", [ks]
                ).fetchall()
            )
        return found
