"""``wikiground update --index DIR --dump FILE... [--events FILE...]``: an index made current without a rebuild.

What changed since the base goes into the delta (``INDEX/delta/``) as one new segment per update, keyed by page id:
the newest revision of a page wins over the base and over older segments, a deleted page is a tombstone, a moved
page is its text under the new title with its old title a redirect to it. Every channel searches the base and the
delta as one (``backends.delta_parts``).

An update is all or nothing: its segment is renamed in whole, under the delta's lock held exclusively, so readers
see the index before or after it and two updates never interleave. It is idempotent: a file already applied (by its
sha256) is skipped, and so is a revision the index already holds; an older one is skipped with a message. The
manifest's ``updates`` lists every applied file, read back from the segments (what they hold is the record).
"""

from __future__ import annotations

import itertools
import logging
import pickle
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from indexer.delta_schema import ORIGIN_UPDATE
from indexer.delta_segment import delta_lock, remove_stale_parts, write_segment
from indexer.manifest import read_manifest, write_manifest
from indexer.readers import RawPage
from indexer.store import Store, in_keys, open_delta
from indexer.update_events import Held, apply_event
from indexer.update_inputs import DumpStats, PageEvent, dump_pages, read_events, sha256_of
from indexer.update_rows import copied_tables, page_tables, parse_pages, redirect_row, retitle
from wikiground.errors import InputError

log = logging.getLogger(__name__)

FOLDED_KEY = "folded_updates"  # the manifest's record of the files a compaction folded into the base
PARSE_CHUNK = 64  # pages handed to a cleaner process at a time
WRITE_BATCH_PAGES = 2000  # pending pages unpacked and inserted into the segment at a time
PACK_LEVEL = 1  # zlib: a pending page packed at the fastest level already takes a fraction of its rows' memory


@dataclass(slots=True)
class FileRecord:
    """What one applied file did: a ``delta_files`` row and an entry of the manifest's ``updates``."""

    name: str
    sha256: str
    kind: str
    max_rev_id: int | None = None
    newest_timestamp: str | None = None
    pages_added: int = 0
    pages_changed: int = 0
    pages_deleted: int = 0
    pages_moved: int = 0
    pages_undeleted: int = 0
    pages_stale: int = 0
    skipped_older: int = 0

    def row(self, applied_at: str) -> tuple:
        return (
            self.name,
            self.sha256,
            self.kind,
            self.max_rev_id,
            self.newest_timestamp,
            self.pages_added,
            self.pages_changed,
            self.pages_deleted,
            self.pages_moved,
            self.pages_undeleted,
            self.pages_stale,
            self.skipped_older,
            applied_at,
        )


@dataclass(slots=True)
class _Pending:
    """The new segment's content, by page id: the page's tables, or a tombstone row; stale notes; redirects.

    A page's tables are held packed (pickled, then zlib-compressed), and unpacked a batch of pages at a time as the
    segment is written: as Python tuples, an increment's rows took many times their text's size, and all of them
    stayed in memory until the end of the update."""

    pages: dict[int, bytes] = field(default_factory=dict)
    tombstones: dict[int, tuple] = field(default_factory=dict)
    stale: dict[int, tuple] = field(default_factory=dict)
    redirects: dict[str, tuple] = field(default_factory=dict)

    def put_page(self, page_id: int, tables: dict[str, list[tuple]]) -> None:
        self.tombstones.pop(page_id, None)
        self.stale.pop(page_id, None)
        self.pages[page_id] = zlib.compress(pickle.dumps(tables, protocol=pickle.HIGHEST_PROTOCOL), PACK_LEVEL)

    def page(self, page_id: int) -> dict[str, list[tuple]] | None:
        """The tables this update holds for the page (None: none)."""
        return self._unpacked(page_id) if page_id in self.pages else None

    def _unpacked(self, page_id: int) -> dict[str, list[tuple]]:
        return pickle.loads(zlib.decompress(self.pages[page_id]))  # our own bytes, packed by put_page

    def put_tombstone(self, page_id: int, row: tuple) -> None:
        self.pages.pop(page_id, None)
        self.stale.pop(page_id, None)
        self.tombstones[page_id] = row

    def batches(self) -> Iterator[dict[str, list[tuple]]]:
        """The segment's rows (table name -> rows): the pages' tables ``WRITE_BATCH_PAGES`` pages at a time, in the
        order the pages were first put, then the tombstones, the stale notes and the redirects."""
        ids, size = list(self.pages), WRITE_BATCH_PAGES
        for at in range(0, len(ids), size):
            out: dict[str, list[tuple]] = {}
            for page_id in ids[at : at + size]:
                for name, rows in self._unpacked(page_id).items():
                    out.setdefault(name, []).extend(rows)
            yield out
        yield {
            "tombstones": list(self.tombstones.values()),
            "stale_pages": list(self.stale.values()),
            "redirects": list(self.redirects.values()),
        }


def update_index(
    index_dir: str | Path,
    dumps: Sequence[str | Path] = (),
    events: Sequence[str | Path] = (),
    *,
    workers: int | None = None,
    prepare: Callable[[Path, Path, str], object] | None = None,
) -> dict[str, Any]:
    """Apply ``dumps`` (adds-changes or pages-articles XML) then ``events`` (page_change JSON lines) to the index
    at ``index_dir``; returns a summary: the files applied or skipped, the segment written (None: nothing new), the
    delta's counts once applied (the manifest's ``delta``).
    ``prepare(index_dir, staged, name)`` runs on the new segment before it is renamed in (the command passes
    ``backends.delta_store.write_parts``: the channels' delta parts written in the same update)."""
    index_dir = Path(index_dir)
    paths = [(Path(p), "dump") for p in dumps] + [(Path(p), "events") for p in events]
    if not paths:
        raise InputError("nothing to apply: give --dump and/or --events files")
    for path, _ in paths:
        if not path.is_file():
            raise InputError("no such file", path=str(path))
    started = time.perf_counter()
    manifest = read_manifest(index_dir)
    params = manifest.get("parameters") or {}
    with Store.open(index_dir) as store, delta_lock(index_dir, exclusive=True) as folder:
        remove_stale_parts(folder)
        store.reload_delta()
        run = _Run(store, params, (manifest.get("siteinfo") or {}).get("base"), workers)
        run.applied |= {u.get("sha256") for u in manifest.get(FOLDED_KEY) or []}  # compacted into the base
        records, skipped = run.apply(paths)
        name = None
        if records:
            files = {"delta_files": [r.row(_now()) for r in records]}
            ready = (lambda staged, final: prepare(index_dir, staged, final)) if prepare is not None else None
            name = write_segment(folder, itertools.chain(run.pending.batches(), [files]), before_commit=ready)
    # Also completes the record of an update killed between its segment and this; its counts are the delta's.
    delta = record_updates(index_dir).get("delta") or {}
    seconds = time.perf_counter() - started
    log.info("update of %s: %d file(s) applied, %d skipped, %.1f s", index_dir, len(records), len(skipped), seconds)
    return {
        "segment": name,
        "applied": [_record_dict(r) for r in records],
        "skipped_files": skipped,
        "messages": run.messages,
        "seconds": round(seconds, 3),
        "delta": delta,
    }


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _record_dict(record: FileRecord) -> dict[str, Any]:
    from dataclasses import asdict

    return asdict(record)


class _Run:
    """One update: what the index holds, what this update will write, and its messages."""

    def __init__(self, store: Store, params: dict[str, Any], base_url: str | None, workers: int | None):
        self.store = store
        self.namespaces = frozenset(int(n) for n in (params.get("namespaces") or [0]))
        self.max_page_chars = params.get("max_page_chars")
        self.passage_words = params.get("passage_words")
        self.base_url = base_url
        self.workers = workers
        self.pending = _Pending()
        self.held: dict[int, Held] = {}
        self.messages: list[str] = []
        self.applied = {r[0] for r in store.delta_rows("SELECT sha256 FROM delta_files")}

    def apply(self, paths: Sequence[tuple[Path, str]]) -> tuple[list[FileRecord], list[dict[str, str]]]:
        records: list[FileRecord] = []
        skipped: list[dict[str, str]] = []
        for path, kind in paths:
            digest = sha256_of(path)
            if digest in self.applied:
                skipped.append({"name": path.name, "sha256": digest, "reason": "already applied"})
                log.info("%s: already applied (sha256 %s); skipped", path, digest)
                continue
            self.applied.add(digest)
            record = FileRecord(path.name, digest, kind)
            if kind == "dump":
                self._apply_dump(path, record)
            else:
                self._apply_events(path, record)
            records.append(record)
        return records, skipped

    def note(self, message: str) -> None:
        log.warning("%s", message)
        self.messages.append(message)

    # -- what the index holds ----------------------------------------------------------------
    def load_held(self, page_ids: Iterable[int]) -> None:
        """The base's and the delta's revision of each of ``page_ids`` not yet known (the delta's wins)."""
        ids = sorted({int(i) for i in page_ids} - set(self.held))
        for at in range(0, len(ids), 1000):
            keys, params = in_keys(ids[at : at + 1000])
            for pid, rev, stamp, origin, title in self.store.rows(
                f"SELECT page_id, rev_id, rev_timestamp, origin, title FROM pages WHERE page_id IN {keys}", params
            ):
                self.held[int(pid)] = Held(rev, stamp, "base" if origin == "local" else "delta", title)
            for pid, rev, stamp, title in self.store.delta_rows(
                f"SELECT page_id, rev_id, rev_timestamp, title FROM tombstones WHERE page_id IN {keys}", params
            ):
                self.held[int(pid)] = Held(rev, stamp, "deleted", title or "")

    def newer(self, raw: RawPage, record: FileRecord) -> bool:
        """Whether ``raw`` is newer than what the index (or this update) holds of its page; an older revision is
        skipped with a message."""
        held = self.held.get(raw.page_id)
        if held is None or held.rev_id is None or raw.rev_id is None or raw.rev_id > held.rev_id:
            return True
        if raw.rev_id < held.rev_id:
            record.skipped_older += 1
            self.note(
                f"{raw.source_file}: page {raw.title!r} (id {raw.page_id}) revision {raw.rev_id} is older than "
                f"revision {held.rev_id} the index holds; skipped"
            )
        return False

    # -- dumps -------------------------------------------------------------------------------
    def _apply_dump(self, path: Path, record: FileRecord) -> None:
        stats = DumpStats()
        batch: list[RawPage] = []
        for raw in dump_pages(path, self.namespaces, stats):
            batch.append(raw)
            if len(batch) >= 5000:
                self._apply_pages(batch, record)
                batch = []
        self._apply_pages(batch, record)
        record.max_rev_id, record.newest_timestamp = stats.max_rev_id, stats.newest_timestamp

    def _apply_pages(self, batch: list[RawPage], record: FileRecord) -> None:
        if not batch:
            return
        self.load_held(r.page_id for r in batch)
        newest: dict[int, RawPage] = {}
        for raw in batch:  # a page twice in one file: its newest revision
            if raw.page_id not in newest or (raw.rev_id or 0) > (newest[raw.page_id].rev_id or 0):
                newest[raw.page_id] = raw
        todo = [raw for raw in newest.values() if self.newer(raw, record)]
        parsed = parse_pages(todo, self.max_page_chars, self.passage_words, self.workers)
        built = page_tables(parsed, self.store, base_url=self.base_url, origin=ORIGIN_UPDATE)
        for raw, rows in zip(todo, parsed, strict=True):
            self._take(raw, rows, built.get(raw.page_id), record)

    def _take(self, raw: RawPage, rows: Any, tables: dict[str, list[tuple]] | None, record: FileRecord) -> None:
        held = self.held.get(raw.page_id)
        if rows.skipped:
            self.note(f"{raw.source_file}: {rows.skipped}")
            return
        if rows.redirect is not None:  # the page is now a redirect: its article, if held, is gone
            row = redirect_row(self.store, raw.title, rows.redirect, raw.page_id, raw.namespace)
            self.pending.redirects[raw.title] = row
            if held is not None and held.where in ("base", "delta", "pending"):
                self.pending.put_tombstone(
                    raw.page_id, (raw.page_id, raw.title, raw.rev_id, raw.rev_timestamp, "redirect")
                )
                record.pages_deleted += 1
            return
        if tables is None:
            return
        self.pending.put_page(raw.page_id, tables)
        if held is None or held.where == "deleted":
            record.pages_added += 1
        else:
            record.pages_changed += 1
        self.held[raw.page_id] = Held(raw.rev_id, raw.rev_timestamp, "pending", raw.title)

    # -- events ------------------------------------------------------------------------------
    def _apply_events(self, path: Path, record: FileRecord) -> None:
        found = [e for e in read_events(path) if e.namespace in self.namespaces]
        self.load_held(e.page_id for e in found)
        for event in found:
            if event.rev_id is not None and (record.max_rev_id is None or event.rev_id > record.max_rev_id):
                record.max_rev_id = event.rev_id
            if record.newest_timestamp is None or event.dt > record.newest_timestamp:
                record.newest_timestamp = event.dt
            apply_event(self, event, record, path)

    def copy(self, event: PageEvent, title: str) -> bool:
        """The page's current text (this update's, the delta's or the base's) as a new revision under ``title``."""
        tables = self.pending.page(event.page_id) or copied_tables(self.store, event.page_id)
        if not tables:
            return False
        fresh = retitle(tables, title=title, rev_id=event.rev_id, stamp=event.dt, base_url=self.base_url)
        self.pending.put_page(event.page_id, fresh)
        self.held[event.page_id] = Held(event.rev_id, event.dt, "pending", title)
        return True


def delta_counts(con: Any) -> dict[str, int]:
    """The merged delta ``con``'s passages, pages and deletions (tombstones)."""
    tables = (("passages", "passages"), ("pages", "pages"), ("deleted", "tombstones"))
    return {key: int(con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]) for key, table in tables}


def record_updates(index_dir: Path) -> dict[str, Any]:
    """Rewrite the manifest's ``updates`` (every applied file, oldest first: those a compaction folded into the base,
    then the delta's) and ``delta`` (its page counts) from the delta's segments; returns the manifest."""
    manifest = read_manifest(index_dir)
    con, _ = open_delta(index_dir)
    if con is None:
        return manifest
    try:
        cols = [d[0] for d in con.execute("SELECT * FROM delta_files LIMIT 0").description]
        rows = con.execute("SELECT * FROM delta_files").fetchall()
        count = delta_counts(con)
        stale = con.execute("SELECT count(DISTINCT page_id) FROM stale_pages").fetchone()[0]
    finally:
        con.close()
    manifest["updates"] = [*(manifest.get(FOLDED_KEY) or []), *(dict(zip(cols, r, strict=True)) for r in rows)]
    manifest["delta"] = {**count, "stale": stale}
    write_manifest(index_dir, manifest)
    return manifest
