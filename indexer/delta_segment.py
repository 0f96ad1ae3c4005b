"""Writing the delta (``INDEX/delta/``): one immutable DuckDB segment per write, filled under a temporary name and
renamed in, under the delta's shared lock (a build carrying the delta into a new folder holds it exclusively).

The live fallback (``fallback.delta``) and ``wikiground update`` (``indexer.update``) both write through here, so
their segments have the same tables: the store's (``indexer.schema.DDL``) and the delta's own
(``indexer.delta_schema``).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from indexer.delta_schema import DELTA_EXTRA_DDL
from indexer.schema import DDL
from wikiground.errors import BuildError
from wikiground.layout import (
    DELTA_LOCK_FILE,
    DELTA_SEGMENT_SUFFIX,
    FILE_MODE,
    LIVE_PASSAGE_ID_BASE,
    LIVE_PASSAGES_PER_PAGE,
    delta_dir,
)
from wikiground.system import quiet

log = logging.getLogger(__name__)

STALE_PART_SECONDS = 3600  # a temporary segment untouched this long belongs to a writer that died


@contextlib.contextmanager
def delta_lock(index_dir: Path, *, exclusive: bool = False) -> Iterator[Path]:
    """Hold ``delta/.lock`` (shared: writers of new segments run side by side; ``exclusive``: one that must see
    the delta unchanged while it decides what to write, as an update does). Yields the delta folder, checked to be
    the one now at ``index_dir`` (a rebuild may have swapped the folder while this writer waited)."""
    while True:
        folder = delta_dir(index_dir)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / DELTA_LOCK_FILE
        fd = os.open(path, os.O_RDWR | os.O_CREAT, FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            try:
                same = os.stat(path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                yield folder
                return
        finally:
            os.close(fd)  # closing releases the lock


def remove_stale_parts(folder: Path) -> None:
    """Temporary segments of writers that died: other writers may be filling theirs now, so only old ones go."""
    cutoff = time.time() - STALE_PART_SECONDS
    for entry in folder.glob(".seg-*.part*"):
        with contextlib.suppress(OSError):
            if entry.stat().st_mtime < cutoff:
                entry.unlink()
                log.info("removed %s, left by an interrupted delta writer", entry)


def delta_passage_id(page_id: int, index: int) -> int:
    """The id of a delta page's passage: fixed per (page id, passage index), clear of the base's 0..N-1 ids, so a
    newer revision of a page reuses its ids."""
    return LIVE_PASSAGE_ID_BASE + int(page_id) * LIVE_PASSAGES_PER_PAGE + index


def _insert(con: Any, table: str, rows: Sequence[tuple]) -> None:
    """Rows into ``table`` as one Arrow table (a row at a time, DuckDB takes seconds for an update's thousands)."""
    import pyarrow as pa

    names = [d[0] for d in con.execute(f"SELECT * FROM {table} LIMIT 0").description]
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in names]
    data = pa.table({name: pa.array(list(col)) for name, col in zip(names, columns, strict=True)})
    con.register("_delta_rows", data)
    try:
        con.execute(f"INSERT INTO {table} SELECT * FROM _delta_rows")
    finally:
        con.unregister("_delta_rows")


def write_segment(
    folder: Path,
    batches: Iterable[Mapping[str, Sequence[tuple]]],
    *,
    before_commit: Callable[[Path, str], None] | None = None,
) -> str:
    """A new segment in ``folder`` (held under :func:`delta_lock`) holding the rows of ``batches`` (each: table
    name -> rows, in the table's column order; a table's rows in the order they come, batch after batch, so that
    an update need not hold them all at once); returns its file name. Readers see all of it or none: it is renamed
    in when whole. ``before_commit(staged, name)`` runs on the whole segment under its temporary name, before it
    is renamed in (the channels' delta parts are written then, so readers find them with it); if it fails, nothing
    is."""
    import duckdb

    name = f"seg-{time.time_ns():020d}-{uuid.uuid4().hex[:8]}{DELTA_SEGMENT_SUFFIX}"
    tmp = folder / f".{name}.part"
    try:
        con = quiet(duckdb.connect(str(tmp)))
        try:
            con.execute(DDL + DELTA_EXTRA_DDL)
            con.execute("BEGIN")
            for tables in batches:
                for table, rows in tables.items():
                    if rows:
                        _insert(con, table, rows)
            con.execute("COMMIT")
            con.execute("CHECKPOINT")
        finally:
            con.close()
        os.chmod(tmp, FILE_MODE)
        if before_commit is not None:
            before_commit(tmp, name)
        os.replace(tmp, folder / name)
    except (duckdb.Error, OSError) as exc:
        raise BuildError(f"{folder / name}: writing the delta segment failed: {exc}") from exc
    finally:
        tmp.unlink(missing_ok=True)
        Path(f"{tmp}.wal").unlink(missing_ok=True)
    return name
