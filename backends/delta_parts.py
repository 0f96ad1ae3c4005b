"""The delta part of each built channel: the base channel and the delta's passages searched as one.

The delta (``INDEX/delta/``: pages applied by ``wikiground update`` or fetched live) is small next to the base, so
each channel scores its passages directly, with the base's own statistics where a score needs them, and merges
them into the base's hits by score: BM25 with the base's document frequencies, document count and average field
lengths, through the base's Lucene analyzer (``bm25_delta``); TF-IDF with the base's hashing and idf; dense with the
base's encoder, against the same query vector. A base hit of a page the delta replaced or deleted is dropped, so a
page of the delta ranks as it would had it been built into the base. The delta's passages are read and indexed
again whenever the delta's files change (:attr:`indexer.store.Store.shadow`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

from backends.delta_corpus import DeltaCorpus, read_corpus, top_hits  # noqa: F401 -- the parts' shared corpus
from indexer.store import DeltaShadow, Store
from wikiground.records import Hit

log = logging.getLogger(__name__)


class MergedChannel:
    """A built channel over the base and the delta: :meth:`search` / :meth:`search_batch` answer both as one list;
    every other attribute is the base backend's (``score_texts``, ``idf_of``, ``warm`` ...)."""

    def __init__(self, base: Any, store: Store, make_part: Callable[[Any, DeltaCorpus, Any], Any]):
        self.base = base
        self.name = base.name
        self.store = store
        self._make_part = make_part
        self._part: tuple[tuple, Any] | None = None  # (delta listing, part)
        self._lock = threading.Lock()

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.base, attr)

    def part(self, shadow: DeltaShadow) -> Any:
        """The delta part for the delta as ``shadow`` saw it (built again when its files changed)."""
        held = self._part
        if held is not None and held[0] == shadow.listing:
            return held[1]
        with self._lock:
            held = self._part
            if held is None or held[0] != shadow.listing:
                corpus = read_corpus(self.store)
                previous = held[1] if held is not None else None
                part = self._make_part(self.base, corpus, previous) if len(corpus) else None
                self._part = held = (shadow.listing, part)
        return held[1]

    def search(self, query: str, k: int = 10) -> list[Hit]:
        return self.search_batch([query], k)[0]

    def search_batch(self, queries: list[str], k: int = 10) -> list[list[Hit]]:
        shadow = self.store.shadow
        part = self.part(shadow) if shadow.listing else None
        if part is None and not shadow.hidden:
            return _batch(self.base, queries, k)
        if k <= 0:
            return [[] for _ in queries]
        # Base hits of hidden pages are dropped below: ask for more, so that k remain.
        if part is not None and hasattr(part, "search_with_base"):
            base_hits, delta_hits = part.search_with_base(queries, k + k)
        else:
            base_hits = _batch(self.base, queries, k + k if shadow.hidden else k)
            delta_hits = part.search_batch(queries, k) if part is not None else [[] for _ in queries]
        return [merge_hits(b, d, shadow.hidden, k, self.name) for b, d in zip(base_hits, delta_hits, strict=True)]

    def close(self) -> None:
        self._part = None
        close = getattr(self.base, "close", None)  # the Backend protocol's close, where the base has one
        if close is not None:
            close()


def _batch(backend: Any, queries: list[str], k: int) -> list[list[Hit]]:
    batch = getattr(backend, "search_batch", None)
    return batch(queries, k) if batch is not None else [backend.search(q, k) for q in queries]


def merge_hits(base: Sequence[Hit], delta: Sequence[Hit], hidden: frozenset[int], k: int, channel: str) -> list[Hit]:
    """One ranked list: the base's hits less those of ``hidden`` pages, and the delta's, by score (ties by passage
    id, as the channels break them), ranks from 1."""
    kept = [h for h in base if h.page_id not in hidden]
    both = sorted([*kept, *delta], key=lambda h: (-h.score, h.passage_id))[:k]
    return [
        Hit(h.passage_id, h.page_id, h.score, r, channel, h.title, h.matched, h.triples, h.stated)
        for r, h in enumerate(both, 1)
    ]


def merged(channel: str, base: Any, store: Store) -> Any:
    """``base`` (a built channel's backend) searched with the delta of ``store`` as one."""
    if channel == "tfidf":
        from backends.delta_scoring import TfidfPart as part
    elif channel == "dense":
        from backends.delta_scoring import DensePart as part
    elif channel == "bm25":
        from backends.bm25_delta import BM25Part as part
    else:
        return base
    return MergedChannel(base, store, part)
