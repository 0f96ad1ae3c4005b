"""The index folder's layout: its file names, its channels, how a channel's ``params.json`` is read, and
the one way files and folders are written (a temp name beside the target, then a rename).

An index folder::

    DIR/manifest.json        what was built, from which inputs (written last)
    DIR/wiki.duckdb          the store: pages, passages, sections, links, ...
    DIR/lookups/             the store's point lookups as mmap'd arrays (titles to pages, lead passages, ...)
    DIR/bm25/ dense/ tfidf/  one folder per built channel, each with its params.json (written last)
    DIR/delta/*.duckdb       pages ingested from the live API (``--ingest-live``): immutable segments,
                             each written under a temp name and renamed; the newest revision of a page wins

Beside ``DIR``, in its parent: ``.DIR.lock`` (the build lock), ``.DIR.tmp-*`` (a build in progress) and
``.DIR.dense-shards`` (resumable embeddings).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from wikiground.errors import IndexCorruptError, IndexFormatError, IndexMissingError

MANIFEST_FILE = "manifest.json"
STORE_FILE = "wiki.duckdb"
PARAMS_FILE = "params.json"
DELTA_DIR = "delta"
LOOKUPS_DIR = "lookups"  # point lookups of the store as mmap'd files (indexer/lookups.py)
DELTA_LOCK_FILE = ".lock"  # inside delta/: delta writers hold it shared, a build carrying delta/ over exclusively
DELTA_SEGMENT_SUFFIX = ".duckdb"
# Every name a built index folder may hold at its top level: a build replaces only a folder holding no other.
INDEX_ENTRIES = frozenset(
    {
        MANIFEST_FILE,
        STORE_FILE,
        f"{STORE_FILE}.wal",
        f"{STORE_FILE}.tmp",
        "bm25",
        "dense",
        "tfidf",
        DELTA_DIR,
        LOOKUPS_DIR,
    }
)
# Passage ids of live pages (the delta) start here, far above the main store's dense 0..N-1 ids;
# a live page's passages are numbered LIVE_PASSAGE_ID_BASE + page_id * LIVE_PASSAGES_PER_PAGE + index.
LIVE_PASSAGE_ID_BASE = 1_000_000_000
LIVE_PASSAGES_PER_PAGE = 10_000

BUILT_CHANNELS = ("bm25", "dense", "tfidf")  # channels with an index folder of their own
STORE_CHANNELS = ("title", "kg")  # channels served from the store's tables: no folder of their own
CHANNELS = (*BUILT_CHANNELS, *STORE_CHANNELS)
# What `--indexes` may name at build time (`all` is every one): the title channel always comes with the store,
# the kg channel's `triples` table too, but a build lists kg in its manifest only when asked (or with `all`).
INDEX_CHOICES = tuple(c for c in CHANNELS if c != "title")

FILE_MODE = 0o644  # mkstemp makes 0600; index files are meant to be shared


def store_path(index_dir: str | Path) -> Path:
    return Path(index_dir) / STORE_FILE


def delta_dir(index_dir: str | Path) -> Path:
    return Path(index_dir) / DELTA_DIR


def delta_segments(index_dir: str | Path) -> list[Path]:
    """The delta's segment files, oldest first."""
    folder = delta_dir(index_dir)
    try:
        names = sorted(
            e.name
            for e in os.scandir(folder)
            if e.name.endswith(DELTA_SEGMENT_SUFFIX) and not e.name.startswith(".") and e.is_file()
        )
    except (FileNotFoundError, NotADirectoryError):
        return []
    if STORE_FILE in names:  # segments have names of their own; one file named as the store is the older delta
        raise IndexFormatError(
            folder / STORE_FILE,
            "a delta of one file",
            f"a delta of segments (delta/seg-*{DELTA_SEGMENT_SUFFIX})",
            remedy="delete it (the pages it holds are fetched again live with --ingest-live)",
        )
    return [folder / n for n in names]


def build_lock_path(out: str | Path) -> Path:
    out = Path(out)
    return out.parent / f".{out.name}.lock"


def build_tmp_prefix(out: str | Path) -> str:
    return f".{Path(out).name}.tmp-"


def channel_dir(index_dir: str | Path, channel: str) -> Path:
    return Path(index_dir) / channel


@contextlib.contextmanager
def atomic_path(path: str | Path, *, suffix: str = ".part") -> Iterator[str]:
    """A temp file name beside ``path`` for writers that take a file name (FAISS, scipy, torch.onnx).

    On success it is made readable by all and moved onto ``path``; on any failure it is removed, so a reader
    sees the old file or the new one, never half of one.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
    os.close(fd)
    try:
        yield tmp
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write(path: str | Path, data: bytes | str) -> None:
    """Write ``data`` to ``path`` atomically (str as UTF-8)."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        f.write(raw)


def save_npy(path: str | Path, array: Any) -> None:
    """``np.save`` without pickle, atomically (numpy imported here, not when the layout module is)."""
    import numpy as np

    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        np.save(f, array, allow_pickle=False)


def write_npy_header(f: Any, dtype: Any, length: int, *, version: tuple[int, int] = (1, 0)) -> None:
    """The header of a 1-d ``.npy`` of ``length`` items, its data to follow from the caller: version 1.0 is what
    ``np.save`` writes."""
    import numpy as np

    header = {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False, "shape": (length,)}
    write = {(1, 0): np.lib.format.write_array_header_1_0, (2, 0): np.lib.format.write_array_header_2_0}[version]
    write(f, header)


@contextlib.contextmanager
def npy_stream(path: str | Path, dtype: Any, n: int) -> Iterator[Callable[[Any], None]]:
    """Write a 1-d ``.npy`` of ``n`` items a chunk at a time, atomically, as the bytes ``np.save`` would write for
    the whole array: an array that grows with the corpus is never held whole. Yields ``write(chunk)``; fewer or
    more than ``n`` items written is an error and leaves no file."""
    import numpy as np

    dtype = np.dtype(dtype)
    written = 0
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        write_npy_header(f, dtype, n)

        def write(chunk: Any) -> None:
            nonlocal written
            a = np.ascontiguousarray(chunk, dtype=dtype)
            f.write(a.data)
            written += len(a)

        yield write
        if written != n:
            raise ValueError(f"{path}: {written} items written of the {n} its header says")


def map_bytes(path: str | Path) -> Any:
    """A file's bytes as a read-only uint8 memory map (an empty array for an empty file, which numpy cannot map)."""
    import numpy as np

    return np.memmap(path, dtype=np.uint8, mode="r") if Path(path).stat().st_size else np.zeros(0, dtype=np.uint8)


def append_blobs(out: Any, blobs: list[bytes], offsets: list[Any], end: int) -> int:
    """Write ``blobs`` to the file ``out``, add their end offsets (an int64 array) to ``offsets``; returns the new
    end. A list of strings as plain files: the blobs concatenated, and the offsets where each ends."""
    import numpy as np

    lengths = np.fromiter((len(b) for b in blobs), dtype=np.int64, count=len(blobs))
    offsets.append(end + np.cumsum(lengths))
    out.write(b"".join(blobs))
    return end + int(lengths.sum())


def atomic_write_json(path: str | Path, obj: Any, *, sort_keys: bool = False) -> None:
    atomic_write(path, json.dumps(obj, indent=2, ensure_ascii=False, sort_keys=sort_keys) + "\n")


def read_params(folder: str | Path, kind: str, format_version: int, *, required: tuple[str, ...] = ()) -> dict:
    """A channel folder's ``params.json``, checked to be of ``kind`` and ``format_version``."""
    folder = Path(folder)
    path = folder / PARAMS_FILE
    if not folder.is_dir():
        raise IndexMissingError(f"{folder}: no {kind} index here")
    try:
        params = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise IndexCorruptError(f"{path}: missing (rebuild the {kind} index)") from exc
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise IndexCorruptError(f"{path}: unreadable: {exc}") from exc
    found = params if isinstance(params, dict) else {}
    version = found.get("format_version")
    if found.get("type") == kind and isinstance(version, int) and not isinstance(version, bool):
        if version < format_version:
            raise IndexFormatError(folder, version, format_version)
    if found.get("type") != kind or version != format_version:
        raise IndexCorruptError(
            f"{path}: expected a {kind} index of format {format_version}, found "
            f"type={found.get('type')!r} format={found.get('format_version')!r}"
        )
    missing = [key for key in required if key not in params]
    if missing:
        raise IndexCorruptError(f"{path}: no {', '.join(map(repr, missing))}")
    return params


def channel_folder(index_dir: str | Path, kind: str) -> Path:
    """``index_dir`` itself when it is a channel folder of ``kind``, else ``index_dir/kind``."""
    index_dir = Path(index_dir)
    for folder in (index_dir, index_dir / kind):
        if (folder / PARAMS_FILE).is_file():
            return folder
    raise IndexMissingError(f"{index_dir}: no {kind} index ({PARAMS_FILE} not found)")


def swap_folder(new: str | Path, out: str | Path) -> None:
    """Put folder ``new`` in the place of ``out``; on failure ``out`` is as it was.

    Where the kernel can (Linux ``renameat2`` with ``RENAME_EXCHANGE``) the two folders trade places in one
    step, so a reader finds ``out`` complete at every instant; elsewhere ``out`` is missing between two renames.
    """
    new, out = Path(new), Path(out)
    if out.exists() and _exchange(new, out):
        shutil.rmtree(new, ignore_errors=True)  # ``new`` now names the old folder
        return
    old = None
    if out.exists():
        old = out.parent / f"{old_prefix(out)}{uuid.uuid4().hex[:8]}"
        os.rename(out, old)
    try:
        os.rename(new, out)
    except BaseException:
        if old is not None:
            os.rename(old, out)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux renameat2 RENAME_EXCHANGE); False where that is not available."""
    import ctypes
    import ctypes.util
    import sys

    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    return renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0


def old_prefix(out: str | Path) -> str:
    """Name prefix of the folder ``swap_folder`` moves ``out`` to before deleting it."""
    return f".{Path(out).name}.old-"
