"""passage_id -> (page_id, title) as plain files in an index folder, so search needs no DuckDB.

Files: ``passage_page.npy`` (int64 page_id per passage, passage ids dense 0..N-1),
``page_ids.npy`` (sorted unique page ids), ``page_titles.bin`` (UTF-8 titles, one per
page, concatenated) and ``page_title_offsets.npy`` (int64 byte offsets, len P+1).
All are memory-mapped on open: millions of titles cost nothing until used.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

import numpy as np

from wikiground.errors import IndexCorruptError, InputError
from wikiground.layout import atomic_write, map_bytes, save_npy
from wikiground.system import duckdb_size

FILES = ("passage_page.npy", "page_ids.npy", "page_titles.bin", "page_title_offsets.npy")
BATCH_ROWS = 100_000


_READ_MEMORY: ContextVar[int | None] = ContextVar("wikiground_store_read_memory", default=None)


@contextmanager
def read_memory(nbytes: int | None) -> Iterator[None]:
    """Connections opened inside keep DuckDB within ``nbytes`` (None: DuckDB's default)."""
    token = _READ_MEMORY.set(nbytes)
    try:
        yield
    finally:
        _READ_MEMORY.reset(token)


def read_config() -> dict[str, str]:
    """The DuckDB configuration of a store read inside :func:`read_memory`."""
    nbytes = _READ_MEMORY.get()
    return {} if nbytes is None else {"memory_limit": duckdb_size(nbytes)}


def connect(db_path: Path):
    """Read-only DuckDB connection to the store."""
    import duckdb

    if not Path(db_path).is_file():
        raise InputError("store not found", path=str(db_path))
    try:
        return duckdb.connect(str(db_path), read_only=True, config=read_config())
    except duckdb.Error as exc:
        raise InputError(f"cannot open the store read-only: {exc}", path=str(db_path)) from exc


def passage_count(con, db_path: Path) -> int:
    """N, after checking passage ids are exactly 0..N-1 (the contract shards rely on)."""
    ((n, lo, hi),) = con.execute("SELECT count(*), min(passage_id), max(passage_id) FROM passages").fetchall()
    if n and (lo != 0 or hi != n - 1):
        raise InputError(
            f"passage ids are not dense 0..N-1 (count {n}, min {lo}, max {hi})",
            path=str(db_path),
            where="table passages",
        )
    return int(n)


def write(con, db_path: Path, out_dir: Path) -> int:
    """Write the passage table files for the store behind ``con``; return N."""
    n = passage_count(con, db_path)
    page_of = np.empty(n, dtype=np.int64)
    reader = con.sql("SELECT passage_id, page_id FROM passages ORDER BY passage_id").to_arrow_reader(BATCH_ROWS)
    pos = 0
    for batch in reader:
        ids = batch.column(0).to_numpy()
        page_of[pos : pos + len(ids)] = batch.column(1).to_numpy()
        pos += len(ids)
    pages = con.sql("SELECT page_id, min(title) FROM passages GROUP BY page_id ORDER BY page_id").to_arrow_reader(
        BATCH_ROWS
    )
    page_ids: list[np.ndarray] = []
    blobs: list[bytes] = []
    offsets = [0]
    for batch in pages:
        page_ids.append(batch.column(0).to_numpy())
        for title in batch.column(1).to_pylist():
            b = title.encode("utf-8")
            blobs.append(b)
            offsets.append(offsets[-1] + len(b))
    out_dir.mkdir(parents=True, exist_ok=True)
    save_npy(out_dir / "passage_page.npy", page_of)
    save_npy(out_dir / "page_ids.npy", np.concatenate(page_ids) if page_ids else np.zeros(0, dtype=np.int64))
    save_npy(out_dir / "page_title_offsets.npy", np.asarray(offsets, dtype=np.int64))
    atomic_write(out_dir / "page_titles.bin", b"".join(blobs))
    return n


class PassageTable:
    """Memory-mapped lookups from passage id to page id and title."""

    def __init__(self, folder: Path):
        try:
            self.page_of = np.load(folder / "passage_page.npy", mmap_mode="r", allow_pickle=False)
            self.page_ids = np.load(folder / "page_ids.npy", mmap_mode="r", allow_pickle=False)
            self.offsets = np.load(folder / "page_title_offsets.npy", mmap_mode="r", allow_pickle=False)
            self._titles = map_bytes(folder / "page_titles.bin")
        except (OSError, ValueError) as exc:
            raise IndexCorruptError(f"{folder}: passage table unreadable: {exc}") from exc
        if len(self.offsets) != len(self.page_ids) + 1:
            raise IndexCorruptError(f"{folder}: page_title_offsets.npy does not match page_ids.npy")
        self._text = memoryview(self._titles)  # sliced without making a numpy view per title

    def __len__(self) -> int:
        return len(self.page_of)

    def pages_and_titles(self, passage_ids: Sequence[int] | np.ndarray) -> tuple[list[int], list[str]]:
        """The page id and title of each passage, looked up for all of them at once (a search's hits)."""
        pids = self.page_of[np.asarray(passage_ids, dtype=np.int64)]
        n = len(self.page_ids)
        if not n or not len(pids):
            return pids.tolist(), [""] * len(pids)
        rows = np.minimum(np.searchsorted(self.page_ids, pids), n - 1)
        found = (self.page_ids[rows] == pids).tolist()
        starts, ends = self.offsets[rows].tolist(), self.offsets[rows + 1].tolist()
        text = self._text
        titles = [str(text[a:b], "utf-8") if ok else "" for a, b, ok in zip(starts, ends, found)]
        return pids.tolist(), titles
