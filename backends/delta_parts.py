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
from dataclasses import dataclass
from typing import Any

import numpy as np

from indexer.store import DeltaShadow, Store
from wikiground.records import Hit

log = logging.getLogger(__name__)

# The delta passages' text as the base channels index it (title, heading path, text).
_CORPUS_SQL = (
    "SELECT passage_id, page_id, title, heading_path, text, passage_index, source FROM passages "
    "ORDER BY page_id, passage_index"
)


@dataclass(frozen=True, slots=True)
class DeltaCorpus:
    """The delta's passages, in one order every part indexes them in."""

    passage_ids: np.ndarray
    page_ids: np.ndarray
    titles: list[str]
    headings: list[str]
    texts: list[str]
    leads: np.ndarray  # rows of each page's lead passage (first text passage, else first passage)

    def __len__(self) -> int:
        return len(self.passage_ids)


def read_corpus(store: Store) -> DeltaCorpus:
    rows = store.delta_rows(_CORPUS_SQL)
    leads: dict[int, tuple[bool, int, int]] = {}
    for i, r in enumerate(rows):
        key = (r[6] != "text", int(r[5]), i)
        if r[1] not in leads or key < leads[r[1]]:
            leads[r[1]] = key
    return DeltaCorpus(
        passage_ids=np.array([r[0] for r in rows], dtype=np.int64),
        page_ids=np.array([r[1] for r in rows], dtype=np.int64),
        titles=[r[2] for r in rows],
        headings=[r[3] for r in rows],
        texts=[r[4] for r in rows],
        leads=np.array(sorted(v[2] for v in leads.values()), dtype=np.int64),
    )


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


def top_hits(corpus: DeltaCorpus, scores: np.ndarray, k: int, channel: str, rows: np.ndarray | None = None) -> list:
    """The ``k`` best of ``scores`` (over ``rows`` of the corpus, or all of it) as hits; zero scores left out."""
    rows = np.arange(len(corpus)) if rows is None else rows
    keep = scores > 0
    scores, rows = scores[keep], rows[keep]
    if len(scores) > k:
        part = np.argpartition(-scores, k - 1)[:k]
        scores, rows = scores[part], rows[part]
    order = np.lexsort((corpus.passage_ids[rows], -scores))
    return [
        Hit(int(corpus.passage_ids[r]), int(corpus.page_ids[r]), float(s), 0, channel, title=corpus.titles[r])
        for r, s in zip(rows[order].tolist(), scores[order].tolist())
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
