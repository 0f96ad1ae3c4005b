"""Many claims at once: each channel searches a block of claims in one call, then every claim is fused and given
its evidence exactly as :meth:`Retriever.search` does, one claim at a time.

The answers are those of the single-claim path, evidence and order included; what changes is the cost. The
channels' batch searches run side by side (Lucene's batch search on Java threads, the TF-IDF and dense batch
searches in numpy and onnxruntime, all outside the GIL), and the store's lookups are made once per block instead
of once per claim: a DuckDB round trip costs milliseconds, more than the lookups themselves. Those lookups are
found by a dry run (:class:`_BlockStore` records what the per-claim code asks for and stops it), fetched in one
query, and then the per-claim code runs for real, answered from that one fetch. Each lookup answers every key on
its own, so a block's answers are those of one query per claim.

Not here: the live fallback and multi-hop retrieval, which go claim by claim (``retriever.batch``).
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Executor
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import backends
from backends.entities import Mention
from retriever.api import STATUS_EMPTY_QUERY, STATUS_NO_EVIDENCE, STATUS_OK, SearchResult, check_k, parse_channels
from retriever.fusion import check_fusion, fuse
from retriever.lanes import run_tasks
from wikiground.errors import IndexMissingError
from wikiground.records import Hit
from wikiground.text import clean_surrogates

log = logging.getLogger(__name__)

__all__ = ["search_block", "search_many"]

T = TypeVar("T")
MAX_ROUNDS = 8  # of dependent lookups one call makes (the title channel: concept words, then lead passages)


class _Planned(Exception):
    """Raised by a planning :class:`_BlockStore` at the first lookup it records: the rest of the dry run is not
    needed (its later lookups depend on this one's answer)."""


class _Memo:
    """One store lookup (keys -> {key: row}), each key fetched once: the misses of a call in one query."""

    def __init__(self, fetch: Callable[[list[Any]], dict[Any, Any]], key: Callable[[Any], Any]):
        self.fetch, self.key = fetch, key
        self.known: set[Any] = set()
        self.found: dict[Any, Any] = {}
        self.wanted: list[Any] = []

    def plan(self, keys: Iterable[Any]) -> None:
        self.wanted.extend(self.key(x) for x in keys)

    def knows(self, keys: Iterable[Any]) -> bool:
        return all(self.key(x) in self.known for x in keys)

    def prefetch(self) -> bool:
        """Fetch the keys planned since the last prefetch; whether there were any."""
        wanted, self.wanted = self.wanted, []
        self.get(wanted)
        return bool(wanted)

    def get(self, keys: Iterable[Any]) -> dict[Any, Any]:
        keys = [self.key(x) for x in keys]
        missing = [x for x in dict.fromkeys(keys) if x not in self.known]
        if missing:
            self.found.update(self.fetch(missing))
            self.known.update(missing)
        return {x: self.found[x] for x in keys if x in self.found}


class _BlockStore:
    """The store, as seen by the claims of one block: the per-claim lookups of the search path (title resolution,
    lead passages, evidence rows, live fetch times) are answered from one query per block; everything else goes to
    the store. While :meth:`each` plans (in its thread), those lookups record their keys and raise
    :class:`_Planned`. The memos are not locked: a block uses them from one thread at a time."""

    def __init__(self, store: Any):
        self._store = store
        self._planning = threading.local()
        self._memos = {
            "resolve_titles": _Memo(store.resolve_titles, str),
            "lead_passages": _Memo(store.lead_passages, int),
            "lead_passage_ids": _Memo(store.lead_passage_ids, int),
            "passages_with_pages": _Memo(store.passages_with_pages, int),
            "live_fetch_times": _Memo(store.live_fetch_times, int),
            "delta_origins": _Memo(store.delta_origins, int),
        }

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_store", "_planning", "_memos"):
            raise AttributeError(name)  # not set yet (copying, unpickling): never the store's
        return getattr(self._store, name)

    def _lookup(self, name: str, keys: Iterable[Any]) -> dict[Any, Any]:
        memo = self._memos[name]
        if getattr(self._planning, "on", False):
            keys = list(keys)
            if not memo.knows(keys):
                memo.plan(keys)
                raise _Planned
        return memo.get(keys)

    def resolve_titles(self, titles: Iterable[str], *, loose: bool = True) -> dict[str, Any]:
        if not loose:
            return self._store.resolve_titles(titles, loose=False)
        # The store skips blank strings; so does the memo (they would be fetched, and found, never).
        return self._lookup("resolve_titles", [t for t in titles if t and t.strip()])

    def lead_passages(self, page_ids: Iterable[int]) -> dict[int, Any]:
        return self._lookup("lead_passages", page_ids)

    def lead_passage_ids(self, page_ids: Iterable[int]) -> dict[int, Any]:
        return self._lookup("lead_passage_ids", page_ids)

    def passages_with_pages(self, passage_ids: Iterable[int]) -> dict[int, Any]:
        return self._lookup("passages_with_pages", passage_ids)

    def live_fetch_times(self, page_ids: Iterable[int]) -> dict[int, Any]:
        return self._lookup("live_fetch_times", page_ids)

    def delta_origins(self, page_ids: Iterable[int]) -> dict[int, Any]:
        return self._lookup("delta_origins", page_ids)

    def each(self, calls: Sequence[Callable[[], T]]) -> list[T]:
        """``[call() for call in calls]``, the store lookups they make fetched for all of them at once, round by
        round: each round runs the calls not finished yet up to their first lookup of keys not fetched yet, which
        it records, then fetches the recorded keys of all of them with one query per lookup. A call whose lookups
        were all fetched finishes in its round (the calls are pure functions of their lookups)."""
        results: list[Any] = [None] * len(calls)
        pending = list(range(len(calls)))
        for _ in range(MAX_ROUNDS):
            waiting = []
            self._planning.on = True
            try:
                for i in pending:
                    try:
                        results[i] = calls[i]()
                    except Exception:  # noqa: BLE001 - _Planned, or an error the unplanned run below raises again
                        waiting.append(i)
            finally:
                self._planning.on = False
            planned = False
            for memo in self._memos.values():
                planned = memo.prefetch() or planned
            pending = waiting
            if not pending or not planned:
                break  # all finished, or the rest fail on their own
        for i in pending:  # the calls that failed, or still look up after MAX_ROUNDS: for real, in order
            results[i] = calls[i]()
        return results


def search_block(
    retriever: Any,
    claims: Sequence[str],
    k: int = 10,
    *,
    channels: str | Sequence[str] | None = None,
    passages: bool = False,
    pool: Executor | None = None,
    fusion: str | None = None,
) -> list[SearchResult]:
    """``[retriever.search(c, k, channels=channels, passages=passages, fusion=fusion) for c in claims]`` without
    the live fallback, with each channel searching the whole block at once (on ``pool``'s threads, side by side).

    ``timings_ms`` are the block's per channel and in total, divided by the claims searched (each claim's share).
    """
    check_k(k)
    fusion = retriever.fusion if fusion is None else check_fusion(fusion)
    claims = [clean_surrogates(c if isinstance(c, str) else str(c)) for c in claims]
    asked = [i for i, c in enumerate(claims) if c.strip()]
    out = [SearchResult(c, STATUS_EMPTY_QUERY, (), (), {"timings_ms": {}}) for c in claims]
    if not asked:
        return out
    t0 = time.perf_counter()
    chans = parse_channels(channels) or retriever.channels
    unknown = [c for c in chans if c not in retriever.channels]
    if unknown:
        raise IndexMissingError(f"channel(s) {', '.join(unknown)} not open in this retriever")
    retriever.store.check_files(chans)  # a file cut under the process: an error, not a SIGBUS (indexer.integrity)
    for c in chans:
        retriever.backend(c)  # loaded in this thread: the JVM and the model are not loaded concurrently
    texts = [claims[i] for i in asked]
    store = _BlockStore(retriever.store)
    depth = max(retriever.depth, 4 * k)
    found = _search_channels(retriever, chans, texts, depth, store, pool)
    view = copy.copy(retriever)  # the retriever's evidence path, over the block's store
    view.store = store
    pages = [
        fuse(
            {c: found[c][0][j] for c in found},  # in Retriever.search_hits's order: fusion sums in it
            weights=retriever.weights,
            method=fusion,
            rrf_k=retriever.rrf_k,
        )
        for j in range(len(texts))
    ]
    evidence = store.each([lambda p=p: view._evidence(p, k=k, passages=passages) for p in pages])
    share = 1000 / len(texts)
    timings = {c: round(found[c][2] * share, 3) for c in found}
    timings["total"] = round((time.perf_counter() - t0) * share, 3)
    for j, i in enumerate(asked):
        mentions = tuple(m for c in found if found[c][1] is not None for m in found[c][1][j])
        status = STATUS_OK if evidence[j] else STATUS_NO_EVIDENCE
        stats = {"timings_ms": dict(timings), **retriever.answered_by(chans, fusion)}
        out[i] = SearchResult(texts[j], status, tuple(evidence[j]), mentions, stats)
    return out


def _search_channels(
    retriever: Any, chans: Sequence[str], texts: list[str], depth: int, store: _BlockStore, pool: Executor | None
) -> dict[str, tuple[list[list[Hit]], list[list[Mention]] | None, float]]:
    """Each channel's hits for every claim, the claims' mentions (for the first entity channel, as
    ``Retriever.search_hits`` keeps them) and the channel's seconds. The entity channels run as one task, from one
    resolution of the claims' entities; the other channels each search the block in one batch call."""
    entity = [c for c in chans if isinstance(retriever.backend(c), backends.EntityBackend)]
    tasks: list[list[str]] = [[c] for c in chans if c not in entity] + ([entity] if entity else [])

    def run(group: list[str]) -> list[tuple[str, list[list[Hit]], list[list[Mention]] | None, float]]:
        if group is entity:
            return _entity_block(retriever, group, texts, depth, store)
        t0 = time.perf_counter()
        b = retriever.backend(group[0])
        batch = getattr(b, "search_batch", None)
        hits = batch(texts, depth) if batch is not None else [b.search(q, depth) for q in texts]
        return [(group[0], hits, None, time.perf_counter() - t0)]

    if pool is not None and len(tasks) > 1:
        outs = [o for out in run_tasks(pool, tasks, run, name=lambda g: g[0]) for o in out]
    else:
        outs = [o for group in tasks for o in run(group)]
    return {c: (hits, mentions, seconds) for c, hits, mentions, seconds in outs}


def _entity_block(
    retriever: Any, chans: Sequence[str], texts: list[str], depth: int, store: _BlockStore
) -> list[tuple[str, list[list[Hit]], list[list[Mention]] | None, float]]:
    """The entity channels' hits for every claim, from one resolution of each claim's entities by the first of
    them; the title channel's store lookups are made once for the whole block."""
    t0 = time.perf_counter()
    title = backends.load("title", retriever.index_dir or Path(), store=store) if "title" in chans else None

    def backend(c: str) -> Any:
        return title if c == "title" else retriever.backend(c)

    first = backend(chans[0])
    resolving = [partial(first.mentions, q) for q in texts]
    found = store.each(resolving) if first is title else [call() for call in resolving]
    resolve = time.perf_counter() - t0
    outs: list[tuple[str, list[list[Hit]], list[list[Mention]] | None, float]] = []
    for c in chans:
        t1 = time.perf_counter()
        b = backend(c)
        calls = [partial(_mention_hits, b, ms, depth, q) for q, ms in zip(texts, found)]
        hits = store.each(calls) if c == "title" else [call() for call in calls]
        outs.append((c, hits, found if c == chans[0] else None, resolve + time.perf_counter() - t1))
    return outs


def _mention_hits(b: Any, mentions: list[Mention], depth: int, query: str) -> list[Hit]:
    if getattr(b, "wants_query", False):  # as Retriever.search_hits asks it
        return b.search_mentions(mentions, depth, query_length=len(query), query=query)
    return b.search_mentions(mentions, depth, query_length=len(query))


def search_many(
    retriever: Any,
    claims: Sequence[str],
    k: int = 10,
    *,
    channels: str | Sequence[str] | None = None,
    passages: bool = False,
    fusion: str | None = None,
) -> list[SearchResult]:
    """``retriever.search`` of many claims, without the live fallback: the same answers, each channel searching
    them all at once and the channels side by side in the retriever's pool."""
    pool = retriever._pool()
    return search_block(retriever, claims, k, channels=channels, passages=passages, pool=pool, fusion=fusion)
