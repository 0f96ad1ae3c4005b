"""The delta part of each built channel: the base channel and the delta's passages searched as one.

The delta (``INDEX/delta/``: pages applied by ``wikiground update`` or fetched live) has a part per channel that
scores its passages with the base's own statistics where a score needs them, and merges them into the base's hits
by score: BM25 with the base's document frequencies, document count and average field lengths, through the base's
Lucene analyzer, over postings read by bounds (``bm25_delta``); TF-IDF with the base's hashing and idf, over
postings cut where the base's posting budget cuts its own (``delta_scoring``); dense with the base's encoder,
against the same query vector. A base hit of a page the delta replaced or deleted is dropped, so a
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
        """The delta part for the delta as ``shadow`` saw it: the one saved with it, else built again (when its
        files changed) and saved for the next reader."""
        held = self._part
        if held is not None and held[0] == shadow.listing:
            return held[1]
        with self._lock:
            held = self._part
            if held is None or held[0] != shadow.listing:
                part = self._saved_or_built(shadow, held[1] if held is not None else None)
                self._part = held = (shadow.listing, part)
        return held[1]

    def _saved_or_built(self, shadow: DeltaShadow, previous: Any) -> Any:
        from backends import delta_store

        index_dir, build_id = self.store.path, self.store.build_id
        folder = None
        if index_dir is not None:
            key = delta_store.parts_key(build_id, [entry[0] for entry in shadow.listing])
            folder = delta_store.part_dir(index_dir, key, self.name)
            restore = delta_store.restorer(self.name)
            found, part = delta_store.load_part(folder, self.name, build_id, lambda *a: restore(self.base, *a))
            if found:
                return part
        corpus = read_corpus(self.store)
        part = self._make_part(self.base, corpus, previous) if len(corpus) else None
        built_in_memory[self.name] = built_in_memory.get(self.name, 0) + 1
        if folder is not None and self.store.shadow.listing == shadow.listing:  # the corpus is that delta's
            try:
                delta_store.save_part(folder, self.name, build_id, corpus, part)
            except OSError as exc:  # a read-only index: the next reader builds it again
                log.info("%s: the delta's %s part not saved (%s)", folder, self.name, exc)
        return part

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
        base_k = k + k if shadow.hidden else k
        if part is not None and hasattr(part, "search_with_base"):  # the query analysed once for both
            base_hits, delta_hits = part.search_with_base(queries, k, base_k, shadow.hidden)
        else:
            base_hits = _batch(self.base, queries, base_k)
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


# channel -> delta parts built in memory by this process (none where the update saved them): what tests read
built_in_memory: dict[str, int] = {}


def merged(channel: str, base: Any, store: Store) -> Any:
    """``base`` (a built channel's backend) searched with the delta of ``store`` as one."""
    from backends.delta_store import part_class

    cls = part_class(channel)
    return MergedChannel(base, store, cls) if cls is not None else base
