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
from wikiground.layout import atomic_path, map_bytes, npy_stream
from wikiground.system import duckdb_size, quiet

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
        return quiet(duckdb.connect(str(db_path), read_only=True, config=read_config()))
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
    """Write the passage table files for the store behind ``con``; return N. Each file is written a batch at a
    time (never a Python object per page, nor an array of the corpus held whole)."""
    n = passage_count(con, db_path)
    ((n_pages,),) = con.execute("SELECT count(DISTINCT page_id) FROM passages").fetchall()
    out_dir.mkdir(parents=True, exist_ok=True)
    reader = con.sql("SELECT page_id FROM passages ORDER BY passage_id").to_arrow_reader(BATCH_ROWS)
    with npy_stream(out_dir / "passage_page.npy", np.int64, n) as write_pages:
        for batch in reader:
            write_pages(batch.column(0).to_numpy())
    pages = con.sql("SELECT page_id, min(title) FROM passages GROUP BY page_id ORDER BY page_id").to_arrow_reader(
        BATCH_ROWS
    )
    with (
        npy_stream(out_dir / "page_ids.npy", np.int64, n_pages) as write_ids,
        npy_stream(out_dir / "page_title_offsets.npy", np.int64, n_pages + 1) as write_offsets,
        atomic_path(out_dir / "page_titles.bin") as tmp,
        open(tmp, "wb") as titles,
    ):
        write_offsets(np.zeros(1, dtype=np.int64))
        end = 0
        for batch in pages:
            write_ids(batch.column(0).to_numpy())
            data, ends = _utf8(batch.column(1))
            titles.write(data)
            write_offsets(end + ends)
            end += len(data)
    return n


def _utf8(column) -> tuple[memoryview | bytes, np.ndarray]:
    """An Arrow string column's UTF-8 bytes, concatenated, and where each string ends in them: read from the
    column's own buffers."""
    import pyarrow as pa

    col = column.cast(pa.large_string()).fill_null("")
    if not len(col):
        return b"", np.zeros(0, dtype=np.int64)
    _, offsets_buf, data_buf = col.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=np.int64)[col.offset : col.offset + len(col) + 1]
    first, last = int(offsets[0]), int(offsets[-1])
    data = memoryview(data_buf)[first:last] if data_buf is not None else b""
    return data, offsets[1:] - first


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
