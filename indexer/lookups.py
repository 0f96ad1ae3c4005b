"""Point lookups of the store as plain files beside it, loaded with mmap: a title to its page in microseconds.

Resolving a claim's candidate titles (a dozen n-grams) in DuckDB costs milliseconds whatever the store's size: four
key lookups, each planned and run (exact title, redirect, and the normalised key of each). The answers do
not change after the build, so the build writes them out once, one entry per key, and a lookup is a hash and a
binary search over a memory-mapped array. The SQL path (``indexer.store._RESOLVE_SQL``) stays the reference:
the live delta and stores built without these files are resolved by it, with the same answers.

Files in ``DIR/lookups/``:

- two key spaces, each a set of files ``{space}.*``:
  - ``exact``: a title as written (``canonical_title``) -> the page of that title, else the redirect of that name;
  - ``loose``: a normalised key (``normalize_title``) -> the shortest title of that key (then the lowest page
    id), else the redirect of that key with the first source title.

  A space's files: ``hash.npy`` (uint64, sorted; blake2b-8 of the key's UTF-8), ``row.npy`` (the entry each hash
  belongs to), ``page_id.npy`` (int64), ``flags.npy`` (uint8: 1 redirect, 2 disambiguation page), ``offsets.npy``
  (int64, entries + 1) and ``records.bin`` (UTF-8 ``key \\0 target \\0 via \\0 fragment``; absent is ``\\1``);
- each page's lead passage (its first text passage, as ``Store.lead_passages`` picks it) and title:
  ``lead.page_id.npy`` (sorted), ``lead.passage_id.npy``, ``lead.titles.bin``, ``lead.title_offsets.npy``;
- each passage's page-level sentence ids, which are consecutive: ``sentences.first.npy`` and
  ``sentences.count.npy`` (int32, by passage id; written only when every passage's ids are consecutive);
- the facts of ``triples`` by subject, ``graph.*`` (:mod:`indexer.graph_lookups`), when the index is built with
  the kg channel (without them the channel reads the facts in SQL);
- ``params.json``, naming the build: files of another build are not used.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from indexer import graph_lookups
from wikiground.errors import IndexFormatError
from wikiground.layout import PARAMS_FILE, append_blobs, atomic_path, atomic_write_json, map_bytes, npy_stream, save_npy
from wikiground.system import duckdb_size, quiet

logger = logging.getLogger(__name__)

FORMAT_VERSION = 2  # 2: graph columns in their narrowest types, an object's page once per object
SPACES = ("exact", "loose")
KEYS = (*SPACES, "lead", "sentences", "graph")  # what params.json counts (its "keys")
REDIRECT, DISAMBIGUATION = 1, 2
NONE = "\x01"
BATCH_ROWS = 100_000

# One row per key. The exact space prefers the page of that title (kind 0) to a redirect of that name (kind 1),
# the loose space the shortest title of that key (kind 2) to a redirect (kind 3), each as ``_RESOLVE_SQL`` does.
_EXACT_SQL = """
SELECT key, kind, via, target, frag, pid, dab FROM (
  SELECT title AS key, 0 AS kind, NULL::VARCHAR AS via, title AS target, NULL::VARCHAR AS frag, page_id AS pid,
         is_disambiguation AS dab, 0::DOUBLE AS o1, ''::VARCHAR AS o2 FROM pages
  UNION ALL
  SELECT r.source_title, 1, r.source_title, r.target_title, r.target_fragment, p.page_id, p.is_disambiguation, 0, ''
  FROM redirects r JOIN pages p ON p.title = r.target_title
) QUALIFY row_number() OVER (PARTITION BY key ORDER BY kind, o1, o2, pid) = 1
"""
_LOOSE_SQL = """
SELECT key, kind, via, target, frag, pid, dab FROM (
  SELECT title_norm AS key, 2 AS kind, NULL::VARCHAR AS via, title AS target, NULL::VARCHAR AS frag,
         page_id AS pid, is_disambiguation AS dab, length(title) * 1e12 + page_id AS o1, ''::VARCHAR AS o2
  FROM pages WHERE title_norm <> ''
  UNION ALL
  SELECT r.source_norm, 3, r.source_title, r.target_title, r.target_fragment, p.page_id, p.is_disambiguation,
         0, r.source_title
  FROM redirects r JOIN pages p ON p.title = r.target_title WHERE r.source_norm <> ''
) QUALIFY row_number() OVER (PARTITION BY key ORDER BY kind, o1, o2, pid) = 1
"""
_SQL = {"exact": _EXACT_SQL, "loose": _LOOSE_SQL}


def key_hash(key: str) -> int:
    return int.from_bytes(hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest(), "little")


@dataclass(frozen=True)
class Entry:
    """What a key resolves to: the page (``target``, ``page_id``), through the redirect ``via`` when not None."""

    page_id: int
    target: str
    via: str | None
    fragment: str | None
    is_disambiguation: bool


# -- writing ------------------------------------------------------------------------------------------------------


def build(
    db_path: Path, folder: Path, build_id: str | None, *, graph: bool = True, memory_limit: int | None = None
) -> dict[str, int]:
    """Write the lookups of the finished store at ``db_path`` into ``folder``; returns their entry counts.
    ``graph``: the kg channel's arrays too (built when the index has that channel); ``memory_limit``: DuckDB's
    bytes (past them it spills)."""
    import duckdb

    from indexer.store_writer import _sql_string

    con = quiet(duckdb.connect(":memory:"))
    try:
        # The window over every title and redirect may spill (whole enwiki: ~17M keys): beside the store.
        con.execute(f"SET temp_directory = {_sql_string(str(db_path) + '.tmp')}")
        if memory_limit is not None:
            con.execute(f"SET memory_limit = '{duckdb_size(memory_limit)}'")
        con.execute(f"ATTACH {_sql_string(str(db_path))} AS store (READ_ONLY)")
        con.execute("USE store")
        return write(con, folder, build_id, graph=graph)
    finally:
        con.close()


def write(con: Any, folder: Path, build_id: str | None, *, graph: bool = True) -> dict[str, int]:
    """Write the lookups of the store ``con`` (a DuckDB connection) into ``folder``; returns their entry counts.

    Streams the rows: in memory are only the title keys' hashes and fixed-size columns (17 bytes a key) and the
    lead passages' ids (16 bytes a page)."""
    folder.mkdir(parents=True, exist_ok=True)
    warn_duplicate_titles(con)
    counts = {}
    for space in SPACES:
        counts[space] = _write_space(con, folder, space)
    counts["lead"] = _write_leads(con, folder)
    counts["sentences"] = _write_sentence_ranges(con, folder)
    counts["graph"] = graph_lookups.write(con, folder) if graph else 0  # 0: no graph files, the kg channel uses SQL
    atomic_write_json(
        folder / PARAMS_FILE,
        {"kind": "lookups", "format_version": FORMAT_VERSION, "build_id": build_id, "keys": counts},
        sort_keys=True,
    )
    return counts


def warn_duplicate_titles(con: Any, examples: int = 3) -> int:
    """Log a warning when pages share a title: a title lookup finds one of them, the lowest page id (``_EXACT_SQL``
    orders by it), and the others only by their ids. Returns how many titles are shared."""
    rows = con.execute(
        "SELECT title, list(page_id ORDER BY page_id), count(*) OVER () FROM pages GROUP BY title "
        f"HAVING count(*) > 1 ORDER BY title LIMIT {int(examples)}"
    ).fetchall()
    if not rows:
        return 0
    shown = "; ".join(f"{t!r}: page {ids[0]} wins over {', '.join(map(str, ids[1:4]))}" for t, ids, _ in rows)
    logger.warning(
        "%d titles are held by more than one page; a title lookup finds the page with the lowest id, the others "
        "only by id (e.g. %s)",
        rows[0][2],
        shown,
    )
    return int(rows[0][2])


def _write_space(con: Any, folder: Path, space: str) -> int:
    hashes: list[np.ndarray] = []
    page_ids: list[np.ndarray] = []
    flags: list[np.ndarray] = []
    offsets = [np.zeros(1, dtype=np.int64)]
    end = 0
    cur = con.execute(_SQL[space])  # on ``con`` itself: a cursor would not inherit its USE
    with atomic_path(folder / f"{space}.records.bin") as tmp, open(tmp, "wb") as out:
        while rows := cur.fetchmany(BATCH_ROWS):
            blobs = [
                "\0".join((key, target, NONE if via is None else via, NONE if frag is None else frag)).encode("utf-8")
                for key, _, via, target, frag, _, _ in rows
            ]
            hashes.append(np.fromiter((key_hash(r[0]) for r in rows), dtype=np.uint64, count=len(rows)))
            page_ids.append(np.fromiter((r[5] for r in rows), dtype=np.int64, count=len(rows)))
            flags.append(
                np.fromiter(
                    ((REDIRECT if r[1] in (1, 3) else 0) | (DISAMBIGUATION if r[6] else 0) for r in rows),
                    dtype=np.uint8,
                    count=len(rows),
                )
            )
            end = append_blobs(out, blobs, offsets, end)
    h = np.concatenate(hashes) if hashes else np.zeros(0, dtype=np.uint64)
    order = np.argsort(h, kind="stable")
    save_npy(folder / f"{space}.hash.npy", h[order])
    save_npy(folder / f"{space}.row.npy", order.astype(np.uint32 if len(h) < 2**32 else np.int64))
    save_npy(folder / f"{space}.page_id.npy", np.concatenate(page_ids) if page_ids else np.zeros(0, dtype=np.int64))
    save_npy(folder / f"{space}.flags.npy", np.concatenate(flags) if flags else np.zeros(0, dtype=np.uint8))
    save_npy(folder / f"{space}.offsets.npy", np.concatenate(offsets))
    return len(h)


def _write_leads(con: Any, folder: Path) -> int:
    """page_id -> its lead passage (the first text passage, else the first passage, as ``Store.lead_passages``
    picks it) and the page's title, streamed."""
    cur = con.execute(
        "SELECT l.page_id, l.lead, p.title FROM (SELECT page_id, "
        "arg_min(passage_id, (source <> 'text')::BIGINT * 4294967296 + passage_index) AS lead "
        "FROM passages GROUP BY page_id) l JOIN pages p ON p.page_id = l.page_id ORDER BY l.page_id"
    )
    pages: list[np.ndarray] = []
    leads: list[np.ndarray] = []
    offsets = [np.zeros(1, dtype=np.int64)]
    end = 0
    with atomic_path(folder / "lead.titles.bin") as tmp, open(tmp, "wb") as out:
        while rows := cur.fetchmany(BATCH_ROWS):
            titles = [r[2].encode("utf-8") for r in rows]
            pages.append(np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows)))
            leads.append(np.fromiter((r[1] for r in rows), dtype=np.int64, count=len(rows)))
            end = append_blobs(out, titles, offsets, end)
    save_npy(folder / "lead.page_id.npy", np.concatenate(pages) if pages else np.zeros(0, dtype=np.int64))
    save_npy(folder / "lead.passage_id.npy", np.concatenate(leads) if leads else np.zeros(0, dtype=np.int64))
    save_npy(folder / "lead.title_offsets.npy", np.concatenate(offsets))
    return sum(len(p) for p in pages)


def _write_sentence_ranges(con: Any, folder: Path) -> int:
    """Per passage id, the page-level id of its first sentence and its number of sentences, streamed to their files
    in passage order as DuckDB's groups arrive (8 bytes a passage on disk, a batch in memory: never the whole
    arrays, nor memory maps whose written pages would count in the build's RSS); 0 and no files when some passage's
    ids are not consecutive in sentence order (the store is asked then)."""
    n = con.execute("SELECT coalesce(max(passage_id) + 1, 0) FROM passages").fetchall()[0][0]
    reader = con.sql(
        "SELECT passage_id, min(page_sentence_index) AS first, count(*)::INTEGER AS n, "
        "min(page_sentence_index - sentence_index) = max(page_sentence_index - sentence_index) "
        "AND min(sentence_index) = 0 AND max(sentence_index) = count(*) - 1 AS consecutive "
        "FROM sentence_spans GROUP BY passage_id ORDER BY passage_id"
    ).to_arrow_reader(BATCH_ROWS)
    try:
        with (
            npy_stream(folder / "sentences.first.npy", np.int32, n) as write_first,
            npy_stream(folder / "sentences.count.npy", np.int32, n) as write_count,
        ):
            done = 0  # passages written; one without sentences gets first -1 and count 0
            for batch in reader:
                cols = {name: batch.column(name).to_numpy(zero_copy_only=False) for name in batch.schema.names}
                if not cols["consecutive"].all():
                    raise _NotConsecutive
                at = cols["passage_id"].astype(np.int64) - done
                span = int(at[-1]) + 1 if len(at) else 0
                first = np.full(span, -1, dtype=np.int32)
                count = np.zeros(span, dtype=np.int32)
                first[at] = cols["first"]
                count[at] = cols["n"]
                write_first(first)
                write_count(count)
                done += span
            write_first(np.full(n - done, -1, dtype=np.int32))
            write_count(np.zeros(n - done, dtype=np.int32))
    except _NotConsecutive:
        return 0
    return n


class _NotConsecutive(Exception):
    """Some passage's sentence ids are not consecutive: no ranges are written."""


# -- reading ------------------------------------------------------------------------------------------------------


class Lookups:
    """The lookups of a store (titles, lead passages, sentence ids), memory-mapped. Thread-safe (reads only)."""

    def __init__(self, folder: Path):
        self.folder = folder
        self._spaces = {space: _Space(folder, space) for space in SPACES}
        self._lead_pages = np.load(folder / "lead.page_id.npy", mmap_mode="r", allow_pickle=False)
        self._lead_passages = np.load(folder / "lead.passage_id.npy", mmap_mode="r", allow_pickle=False)
        self._lead_offsets = np.load(folder / "lead.title_offsets.npy", mmap_mode="r", allow_pickle=False)
        self._lead_titles = map_bytes(folder / "lead.titles.bin")
        if not (len(self._lead_pages) == len(self._lead_passages) == len(self._lead_offsets) - 1):
            raise ValueError("lead: arrays of different lengths")
        if int(self._lead_offsets[-1]) != len(self._lead_titles):
            raise ValueError("lead: titles.bin does not end where its offsets do")
        self._first: np.ndarray | None = None
        self._count: np.ndarray | None = None
        if (folder / "sentences.first.npy").is_file():
            self._first = np.load(folder / "sentences.first.npy", mmap_mode="r", allow_pickle=False)
            self._count = np.load(folder / "sentences.count.npy", mmap_mode="r", allow_pickle=False)
            if len(self._first) != len(self._count):
                raise ValueError("sentences: arrays of different lengths")
        self.graph: graph_lookups.Graph | None = None
        if (folder / "graph.subject_id.npy").is_file():
            self.graph = graph_lookups.Graph(folder)

    @classmethod
    def open(cls, folder: Path, build_id: str | None, damaged: str | None = None) -> Lookups | None:
        """The table in ``folder`` if it was written for the store of ``build_id`` and is whole, else None (the
        store then resolves titles in SQL). ``damaged``: a file of it differs from the manifest's record (said
        after the format and build checks, which name the cause more precisely)."""
        try:
            params = json.loads((folder / PARAMS_FILE).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            logger.warning("%s: unreadable (%s); titles are resolved in the store", folder / PARAMS_FILE, exc)
            return None
        if not isinstance(params, dict):
            logger.warning("%s: not a JSON object; titles are resolved in the store", folder / PARAMS_FILE)
            return None
        _check_format(folder, params)
        if params.get("format_version") != FORMAT_VERSION or params.get("build_id") != build_id:
            logger.warning(
                "%s: written for build %s (format %s), not the store's %s; titles are resolved in the store",
                folder,
                params.get("build_id"),
                params.get("format_version"),
                build_id,
            )
            return None
        if damaged:
            logger.warning("%s; titles are resolved in the store", damaged)
            return None
        try:
            table = cls(folder)
        except (OSError, ValueError, EOFError) as exc:  # EOFError: numpy's word for a cut .npy file
            logger.warning("%s: cannot be read (%s); titles are resolved in the store", folder, exc)
            return None
        keys = params["keys"]
        lengths = {
            **{s: len(table._spaces[s]) for s in SPACES},
            "lead": len(table._lead_pages),
            "sentences": 0 if table._first is None else len(table._first),
            "graph": 0 if table.graph is None else len(table.graph),
        }
        if any(lengths[name] != keys[name] for name in lengths):
            logger.warning(
                "%s: incomplete (key counts differ from params.json); titles are resolved in the store", folder
            )
            return None
        return table

    def exact(self, key: str) -> Entry | None:
        return self._spaces["exact"].get(key)

    def loose(self, key: str) -> Entry | None:
        return self._spaces["loose"].get(key)

    def loose_many(self, keys: list[str]) -> dict[str, Entry]:
        """The normalised keys among ``keys`` that name a page, in one vectorised search (hundreds of spelling
        variants of a name cost what a few single lookups do)."""
        return self._spaces["loose"].get_many(keys)

    def sentence_ids(self, passage_ids: list[int]) -> dict[int, list[int]] | None:
        """passage_id -> its page-level sentence ids, in order, for the passages of the store; None when the table
        has none of these (a store whose ids are not all consecutive)."""
        if self._first is None or self._count is None:
            return None
        n = len(self._first)
        out = {}
        for pid in passage_ids:
            if 0 <= pid < n:
                first, count = int(self._first[pid]), int(self._count[pid])
                out[pid] = list(range(first, first + count))
        return out

    def leads(self, page_ids: list[int]) -> dict[int, tuple[int, str]]:
        """page_id -> (lead passage id, page title), for the pages that have passages."""
        if not page_ids or not len(self._lead_pages):
            return {}
        wanted = np.asarray(page_ids, dtype=np.int64)
        at = np.minimum(np.searchsorted(self._lead_pages, wanted), len(self._lead_pages) - 1)
        out = {}
        for pid, i in zip(wanted.tolist(), at.tolist(), strict=True):
            if int(self._lead_pages[i]) == pid:
                a, b = int(self._lead_offsets[i]), int(self._lead_offsets[i + 1])
                out[pid] = (int(self._lead_passages[i]), bytes(self._lead_titles[a:b]).decode("utf-8"))
        return out


def _check_format(folder: Path, params: dict[str, Any]) -> None:
    """Refuse lookups of an older format: an older format number, or params.json without a count of each file set
    (``KEYS``; lookups written before the sentence ranges or the graph arrays count none of them)."""
    version = params.get("format_version")
    if isinstance(version, int) and version < FORMAT_VERSION:
        raise IndexFormatError(folder, version, FORMAT_VERSION)
    keys = params.get("keys")
    missing = [name for name in KEYS if not isinstance(keys, dict) or name not in keys]
    if version == FORMAT_VERSION and missing:
        raise IndexFormatError(
            folder, f"format {version}, counting no {', '.join(missing)}", f"format {FORMAT_VERSION}, counting each"
        )


class _Space:
    def __init__(self, folder: Path, space: str):
        def load(name: str) -> np.ndarray:
            return np.load(folder / f"{space}.{name}.npy", mmap_mode="r", allow_pickle=False)

        self.hash = load("hash")
        self.row = load("row")
        self.page_id = load("page_id")
        self.flags = load("flags")
        self.offsets = load("offsets")
        path = folder / f"{space}.records.bin"
        size = path.stat().st_size
        self.records = map_bytes(path)
        n = len(self.hash)
        if not (len(self.row) == len(self.page_id) == len(self.flags) == n and len(self.offsets) == n + 1):
            raise ValueError(f"{space}: arrays of different lengths")
        if int(self.offsets[-1]) != size:
            raise ValueError(f"{space}: records.bin is {size} bytes, the offsets end at {int(self.offsets[-1])}")

    def __len__(self) -> int:
        return len(self.hash)

    def get(self, key: str) -> Entry | None:
        return self._at(key, int(np.searchsorted(self.hash, np.uint64(key_hash(key)))))

    def get_many(self, keys: list[str]) -> dict[str, Entry]:
        if not keys or not len(self.hash):
            return {}
        hashes = np.fromiter((key_hash(k) for k in keys), dtype=np.uint64, count=len(keys))
        at = np.searchsorted(self.hash, hashes)
        hit = self.hash[np.minimum(at, len(self.hash) - 1)] == hashes
        out = {}
        for j in np.flatnonzero(hit).tolist():  # most keys miss: only the hits read their records
            entry = self._at(keys[j], int(at[j]))
            if entry is not None:
                out[keys[j]] = entry
        return out

    def _at(self, key: str, i: int) -> Entry | None:
        """The entry of ``key`` from position ``i`` of the sorted hashes (its hash's first)."""
        h = np.uint64(key_hash(key))
        while i < len(self.hash) and self.hash[i] == h:  # another key of the same hash: compare the keys
            row = int(self.row[i])
            fields = bytes(self.records[self.offsets[row] : self.offsets[row + 1]]).decode("utf-8").split("\0")
            if fields[0] == key:
                flags = int(self.flags[row])
                _, target, via, frag = fields
                return Entry(
                    page_id=int(self.page_id[row]),
                    target=target,
                    via=None if via == NONE else via,
                    fragment=None if frag == NONE else frag,
                    is_disambiguation=bool(flags & DISAMBIGUATION),
                )
            i += 1
        return None
