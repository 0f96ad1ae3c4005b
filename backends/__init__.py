"""Search channels, one module each (``bm25``, ``dense``, ``tfidf``, ``title``, ``kg``), every one a :class:`Backend`.

A built channel's module has ``build(db_path, out_dir, **options)`` (store -> channel folder) and
``load(folder)`` (channel folder -> backend); the title and kg channels read the store and build nothing. The
modules import one another not at all; this package names them, so callers hold no module strings.
Heavy libraries (the JVM, torch, FAISS, scikit-learn) load inside the module that needs them, on use.
"""

from __future__ import annotations

import inspect
import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from wikiground.errors import ConfigError, IndexChangedError, IndexCorruptError, WikigroundError
from wikiground.layout import BUILT_CHANNELS, CHANNELS, PARAMS_FILE, STORE_CHANNELS, channel_dir

if TYPE_CHECKING:
    from backends.entities import Mention
    from indexer.store import Store
    from wikiground.records import Hit

__all__ = ["Backend", "EntityBackend", "BUILT_CHANNELS", "CHANNELS", "build", "load"]

log = logging.getLogger(__name__)


@runtime_checkable
class Backend(Protocol):
    """What the retriever needs of a channel: ranked passage hits for a query, and a close."""

    name: str

    def search(self, query: str, k: int = 10) -> list[Hit]: ...

    def close(self) -> None: ...


@runtime_checkable
class EntityBackend(Backend, Protocol):
    """A channel that first finds the entities a claim names; the retriever keeps them, so the claim's entities
    are resolved once and reused (the live fallback looks up those the index lacks)."""

    def mentions(self, query: str) -> list[Mention]: ...

    def search_mentions(self, mentions: Sequence[Mention], k: int = 10, *, query_length: int) -> list[Hit]: ...


def _module(channel: str) -> Any:
    if channel == "bm25":
        from backends import bm25 as module
    elif channel == "dense":
        from backends import dense as module
    elif channel == "tfidf":
        from backends import tfidf as module
    elif channel == "title":
        from backends import title as module
    elif channel == "kg":
        from backends import kg as module
    else:
        raise ConfigError(f"unknown channel {channel!r}: choose from {', '.join(CHANNELS)}")
    return module


def build(
    channel: str,
    db_path: Path,
    out_dir: Path,
    *,
    progress: bool = False,
    options: Mapping[str, Any] | None = None,
    memory: int | None = None,
) -> dict[str, Any]:
    """Build ``channel`` from the store at ``db_path`` into ``out_dir``; returns its manifest entry.

    ``memory``: the bytes the build may use. The store's reads take :data:`STORE_READ_SHARE` of them (past it
    DuckDB evicts what it cached); a channel whose build holds more (the BM25 channel's JVM) is given the rest."""
    from backends import passage_table

    module = _module(channel)
    opts = dict(options or {})
    if memory is not None and "memory" in inspect.signature(module.build).parameters:
        opts.setdefault("memory", memory)
    read = None if memory is None else int(memory * STORE_READ_SHARE)
    with passage_table.read_memory(read):
        return module.build(db_path, out_dir, progress=progress, **opts)


# A channel build reads the store's passages once, in order: DuckDB's cache of the blocks it read buys nothing.
STORE_READ_SHARE = 0.15


def load(channel: str, index_dir: Path, *, store: Store | None = None) -> Backend:
    """Open ``channel`` of the index folder ``index_dir`` (the title channel searches ``store``).

    A channel stamped with a build id (in its params.json) must be of the build ``store`` belongs to, and must
    not change while it loads: a rebuild swaps the whole folder with renames, so the same params.json before
    and after the load means every file came from one build. Otherwise :class:`IndexChangedError` (reopen).
    A file shorter or longer than its build recorded, or one the channel's reader cannot parse, is
    :class:`IndexCorruptError` naming it.
    """
    if channel in STORE_CHANNELS:  # served from the store: no folder to check
        return _module(channel).load(index_dir, store=store)
    folder = channel_dir(index_dir, channel)
    before = _stamp(folder)
    expected = getattr(store, "build_id", None)
    _check_generation(folder, expected, before)
    _check_files(folder, before)
    try:
        backend = _module(channel).load(folder)
    except WikigroundError:
        raise
    except Exception as exc:  # a reader's own error on a damaged file (zipfile, numpy, faiss, Java)
        raise IndexCorruptError(
            f"{folder}: the {channel} index cannot be read ({type(exc).__name__}: {exc}); rebuild it"
        ) from exc
    after = _stamp(folder)
    if after.get("build_id") != before.get("build_id"):
        backend.close()
        _changed(folder, before.get("build_id"), after.get("build_id"))
    return backend


def _stamp(folder: Path) -> dict[str, Any]:
    """The build stamp of a channel's params.json (``build_id``, ``files``); {} when absent or unreadable (the
    channel's own loader reports an unreadable params.json)."""
    try:
        params = json.loads((folder / PARAMS_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return {}
    if not isinstance(params, dict):
        return {}
    return {key: params[key] for key in ("build_id", "files") if key in params}


def _check_generation(folder: Path, expected: str | None, stamp: Mapping[str, Any]) -> None:
    found = stamp.get("build_id")
    if expected is None or found is None:
        log.debug("%s: no build id to check (index built by an older version)", folder)
        return
    if found != expected:
        _changed(folder, expected, found)


def _changed(folder: Path, old: str | None, new: str | None) -> None:
    raise IndexChangedError(f"{folder.parent} was rebuilt since it was opened (build {old} -> {new}): reopen it")


def _check_files(folder: Path, stamp: Mapping[str, Any]) -> None:
    files = stamp.get("files")
    if not isinstance(files, dict):
        return
    for rel, size in files.items():
        path = folder / rel
        try:
            actual = path.stat().st_size
        except FileNotFoundError as exc:
            raise IndexCorruptError(f"{path}: missing (rebuild the index)") from exc
        if actual != size:
            raise IndexCorruptError(f"{path}: {actual} bytes where the build wrote {size}: truncated or replaced")
