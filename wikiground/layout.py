"""The index folder's layout: its file names, its channels, how a channel's ``params.json`` is read, and
the one way files and folders are written (a temp name beside the target, then a rename).

An index folder::

    DIR/manifest.json        what was built, from which inputs (written last)
    DIR/wiki.duckdb          the store: pages, passages, sections, links, ...
    DIR/bm25/ dense/ tfidf/  one folder per built channel, each with its params.json (written last)
    DIR/delta/wiki.duckdb    pages ingested from the live API (``--ingest-live``)
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from wikiground.errors import IndexCorruptError, IndexMissingError

MANIFEST_FILE = "manifest.json"
STORE_FILE = "wiki.duckdb"
PARAMS_FILE = "params.json"
DELTA_DIR = "delta"

BUILT_CHANNELS = ("bm25", "dense", "tfidf")  # channels with an index folder of their own
CHANNELS = (*BUILT_CHANNELS, "title")

FILE_MODE = 0o644  # mkstemp makes 0600; index files are meant to be shared


def store_path(index_dir: str | Path) -> Path:
    return Path(index_dir) / STORE_FILE


def delta_path(index_dir: str | Path) -> Path:
    return Path(index_dir) / DELTA_DIR / STORE_FILE


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
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise IndexCorruptError(f"{path}: unreadable: {exc}") from exc
    if not isinstance(params, dict) or params.get("type") != kind or params.get("format_version") != format_version:
        found = params if isinstance(params, dict) else {}
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
    """Put folder ``new`` in the place of ``out`` with renames; on failure ``out`` is as it was."""
    new, out = Path(new), Path(out)
    old = None
    if out.exists():
        old = out.parent / f".{out.name}.old-{uuid.uuid4().hex[:8]}"
        os.rename(out, old)
    try:
        os.rename(new, out)
    except BaseException:
        if old is not None:
            os.rename(old, out)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
