"""Search channels, one module each (``bm25``, ``dense``, ``tfidf``, ``title``), every one a :class:`Backend`.

A built channel's module has ``build(db_path, out_dir, **options)`` (store -> channel folder) and
``load(folder)`` (channel folder -> backend); the title channel reads the store and builds nothing. The
modules import one another not at all; this package names them, so callers hold no module strings.
Heavy libraries (the JVM, torch, FAISS, scikit-learn) load inside the module that needs them, on use.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from wikiground.errors import ConfigError
from wikiground.layout import BUILT_CHANNELS, CHANNELS, channel_dir

if TYPE_CHECKING:
    from indexer.store import Store
    from wikiground.records import Hit

__all__ = ["Backend", "BUILT_CHANNELS", "CHANNELS", "build", "load"]


@runtime_checkable
class Backend(Protocol):
    """What the retriever needs of a channel: ranked passage hits for a query, and a close."""

    name: str

    def search(self, query: str, k: int = 10) -> list[Hit]: ...

    def close(self) -> None: ...


def _module(channel: str) -> Any:
    if channel == "bm25":
        from backends import bm25 as module
    elif channel == "dense":
        from backends import dense as module
    elif channel == "tfidf":
        from backends import tfidf as module
    elif channel == "title":
        from backends import title as module
    else:
        raise ConfigError(f"unknown channel {channel!r}: choose from {', '.join(CHANNELS)}")
    return module


def build(
    channel: str, db_path: Path, out_dir: Path, *, progress: bool = False, options: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Build ``channel`` from the store at ``db_path`` into ``out_dir``; returns its manifest entry."""
    return _module(channel).build(db_path, out_dir, progress=progress, **dict(options or {}))


def load(channel: str, index_dir: Path, *, store: Store | None = None) -> Backend:
    """Open ``channel`` of the index folder ``index_dir`` (the title channel searches ``store``)."""
    if channel == "title":
        return _module("title").load(index_dir, store=store)
    return _module(channel).load(channel_dir(index_dir, channel))
