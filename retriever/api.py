"""The Python API: ``Retriever.open(DIR).search(claim, k)``.

Resolves the claim's entities against titles and redirects, searches the chosen channels, fuses the
hits, and returns evidence with provenance. With ``on_the_fly`` it asks the live MediaWiki API, and
only for the entities that the local index lacks.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import backends
from backends.entities import Mention, find_mentions, missing_entities
from indexer.store import Store
from retriever.fusion import DEFAULT_WEIGHTS, RRF_K, FusedPage, check_fusion, check_weights, fuse
from retriever.lanes import run_tasks
from wikiground.errors import ConfigError, IndexCorruptError, IndexMissingError, QueryError
from wikiground.layout import BUILT_CHANNELS, CHANNELS, LIVE_PASSAGE_ID_BASE, MANIFEST_FILE, PARAMS_FILE, STORE_FILE
from wikiground.records import Evidence, Hit, Page, Passage
from wikiground.text import clean_surrogates

if TYPE_CHECKING:
    from fallback.live import LiveFallback
    from fallback.settings import FallbackSettings

log = logging.getLogger(__name__)


STATUS_OK = "ok"
STATUS_NO_EVIDENCE = "no_evidence"
STATUS_EMPTY_QUERY = "empty_query"
STATUS_ERROR = "error"  # a batch line whose claim failed; its "error" key says why
MAX_K = 1000  # evidence items per query: deeper lists cost memory and time in every channel for no use


class _NoId:
    """The default of ``to_dict``'s ``id``: no id key at all (``None`` is a real id, written as null)."""

    def __repr__(self) -> str:
        return "NO_ID"


NO_ID: Any = _NoId()


def output_line(id: Any, query: str, status: str, evidence: Sequence[Evidence]) -> dict[str, Any]:
    """The head every output line shares: ``{id, query, status, evidence: [...]}`` (id omitted when NO_ID)."""
    d: dict[str, Any] = {} if id is NO_ID else {"id": id}
    d.update(query=query, status=status, evidence=[e.to_dict() for e in evidence])
    return d


def error_line(id: Any, query: str, message: str) -> dict[str, Any]:
    """The output line of a claim that failed: ``status: error`` and the ``error`` message, no evidence."""
    d = output_line(id, query, STATUS_ERROR, ())
    d["error"] = message
    return d


def check_k(k: Any, *, what: str = "k") -> int:
    """``k`` as an int in 1..MAX_K, else a QueryError that says the bounds."""
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
        raise QueryError(f"{what} must be a whole number from 1 to {MAX_K}, got {k!r}")
    return k


@dataclass(frozen=True, slots=True)
class SearchResult:
    query: str
    status: str
    evidence: tuple[Evidence, ...]
    mentions: tuple[Mention, ...] = ()
    stats: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self, id: Any = NO_ID) -> dict[str, Any]:
        d = output_line(id, self.query, self.status, self.evidence)
        d["entities"] = [
            {
                "mention": m.text,
                "title": m.resolution.title if m.resolution else None,
                "page_id": m.resolution.page_id if m.resolution else None,
            }
            for m in self.mentions
        ]
        d.update(self.stats)
        return d


def parse_channels(spec: str | Sequence[str] | None) -> tuple[str, ...] | None:
    """``"bm25,dense"`` or a sequence -> validated tuple; None/"all" -> None (every available channel)."""
    if spec is None:
        return None
    items = [s.strip() for s in (spec.split(",") if isinstance(spec, str) else spec) if s and s.strip()]
    if not items or items == ["all"]:
        return None
    bad = [s for s in items if s not in CHANNELS]
    if bad:
        raise ConfigError(f"unknown index/channel {', '.join(bad)}; choose from {', '.join(CHANNELS)}")
    return tuple(dict.fromkeys(items))


def available_channels(
    index_dir: Path, wanted: Sequence[str] | None = None, store: Store | None = None
) -> tuple[str, ...]:
    """The channels built in ``index_dir`` (each with its params.json), plus ``title``, plus ``kg`` when the
    manifest lists it or ``wanted`` names it and ``store`` has its ``triples`` table.

    A channel the manifest lists as built whose folder is gone is reported: with ``wanted`` naming it,
    :class:`IndexMissingError`; otherwise a warning, and the other channels serve.
    """
    have = [c for c in BUILT_CHANNELS if (index_dir / c / PARAMS_FILE).is_file()]
    lost = [c for c in _manifest_channels(index_dir) if c not in have]
    named = [c for c in lost if wanted is not None and c in wanted]
    if named:
        raise IndexMissingError(
            f"{index_dir}: the manifest lists the {', '.join(named)} index but {', '.join(named)}/ is missing or "
            f"incomplete; rebuild it with `python -m indexer build --dump DUMP --out {index_dir}`"
        )
    if lost:
        log.warning(
            "%s: the manifest lists the %s index but its folder is missing or incomplete; searching without it",
            index_dir,
            ", ".join(lost),
        )
    return (*have, "title", *_kg_channel(index_dir, wanted, store))


def _kg_channel(index_dir: Path, wanted: Sequence[str] | None, store: Store | None) -> tuple[str, ...]:
    """("kg",) when the kg channel serves: built (listed in the manifest, `--indexes ...,kg` or `all`), or asked
    for by name over a store that has the triples table (every store of this version)."""
    if "kg" in _manifest_channels(index_dir, ("kg",)):
        return ("kg",)
    if wanted is None or "kg" not in wanted or store is None:
        return ()
    found = store.rows("SELECT count(*) FROM information_schema.tables WHERE table_name = 'triples'")
    return ("kg",) if found and found[0][0] else ()


def pending_channels(index_dir: Path) -> tuple[str, ...]:
    """The channels the manifest lists as pending: published without them, they join once built
    (indexer.dense_later)."""
    import json

    try:
        pending = json.loads((index_dir / MANIFEST_FILE).read_text(encoding="utf-8")).get("pending") or {}
    except (OSError, UnicodeDecodeError, ValueError, AttributeError, RecursionError):
        return ()
    return tuple(c for c in BUILT_CHANNELS if c in pending and not (index_dir / c / PARAMS_FILE).is_file())


def _manifest_channels(index_dir: Path, names: Sequence[str] = BUILT_CHANNELS) -> list[str]:
    import json

    try:
        manifest = json.loads((index_dir / MANIFEST_FILE).read_text(encoding="utf-8"))
        built = manifest.get("indexes") or {}
    except (OSError, UnicodeDecodeError, ValueError, AttributeError, RecursionError):
        return []  # Store.open reports an unreadable manifest
    return [c for c in names if c in built]


class Retriever:
    """Offline-first evidence retrieval over one index folder."""

    def __init__(
        self,
        store: Store,
        *,
        index_dir: Path | None = None,
        channels: Sequence[str] = CHANNELS,
        weights: Mapping[str, float] | None = None,
        fusion: str = "rrf",
        rrf_k: int = RRF_K,
        depth: int = 50,
        fallback: Any | None = None,
        on_the_fly: bool = False,
        ingest_live: bool = False,
        live_bridges: bool = False,
        check_fresh: bool = False,
    ):
        self.store = store
        self.index_dir = index_dir
        self.channels = tuple(channels)
        self.weights = check_weights({**DEFAULT_WEIGHTS, **(weights or {})})
        try:
            self.fusion = check_fusion(fusion)
        except QueryError as exc:
            raise ConfigError(str(exc)) from None
        self.rrf_k = rrf_k
        self.depth = depth
        self.fallback = fallback
        self.on_the_fly = on_the_fly
        self.ingest_live = ingest_live
        self.live_bridges = live_bridges
        self.check_fresh = check_fresh
        self.pending: tuple[str, ...] = ()  # channels the index lists as pending (indexer.dense_later)
        self._backends: dict[str, Any] = {}
        self._load_lock = threading.Lock()
        self._executor: Any | None = None

    # -- opening -----------------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        index_dir: str | Path,
        *,
        channels: str | Sequence[str] | None = None,
        weights: Mapping[str, float] | None = None,
        fusion: str = "rrf",
        rrf_k: int = RRF_K,
        depth: int = 50,
        on_the_fly: bool = False,
        fallback: FallbackSettings | LiveFallback | None = None,
        ingest_live: bool = False,
        live_bridges: bool = False,
        check_fresh: bool = False,
        http_client: Any | None = None,
    ) -> Retriever:
        """Open an index folder. Backends load lazily on first use; the live fallback only with ``on_the_fly``.

        ``fallback``: the live fallback's settings (unset ones come from ``WIKIGROUND_*`` variables), or a ready
        :class:`~fallback.live.LiveFallback`. ``http_client`` replaces the fallback's HTTP client (tests, proxies).
        ``check_fresh`` (with ``on_the_fly``): the local pages among a claim's top evidence are checked against
        their latest revision live, and those that changed answered from their new text (``origin: live``).
        """
        settings = _settings_of(fallback, on_the_fly)
        if settings is not None:
            fallback = None  # built below from the settings, with on_the_fly
        d = Path(index_dir)
        store, wanted = _open_store(d, channels)
        retriever = cls(
            store,
            index_dir=d,
            channels=wanted,
            weights=weights,
            fusion=fusion,
            rrf_k=rrf_k,
            depth=depth,
            fallback=fallback,
            on_the_fly=on_the_fly,
            ingest_live=ingest_live,
            live_bridges=live_bridges,
            check_fresh=check_fresh,
        )
        retriever.pending = pending_channels(d)
        if on_the_fly and fallback is None:
            try:
                retriever.fallback = _open_live(retriever, settings, http_client)
            except Exception:
                store.close()
                raise
        return retriever

    def backend(self, name: str) -> Any:
        """The channel's backend, loaded on first use from the build this retriever's store belongs to.

        A rebuild of the folder after :meth:`open` makes a not yet loaded channel raise
        :class:`~wikiground.errors.IndexChangedError` (reopen). Channels already loaded keep answering from the
        generation they were opened on (their open files outlive the swap) until the retriever is reopened.
        """
        b = self._backends.get(name)
        if b is None:
            if name != "title" and self.index_dir is None:
                raise IndexMissingError(f"no index folder for channel {name}")
            with self._load_lock:
                b = self._backends.get(name)
                if b is None:
                    b = backends.load(name, self.index_dir or Path(), store=self.store)
                    if name in BUILT_CHANNELS:
                        from backends.delta_parts import merged

                        b = merged(name, b, self.store)  # the base and the delta searched as one
                    self._backends[name] = b
        return b

    def warm_up(self, *, jit: bool = False) -> None:
        """Load every backend now (the JVM, the model), so the first query is not the slow one; ``jit``: also let
        the backends that compile code as they run (Lucene, in Java) do so now, with searches of the index's own
        texts (seconds: for a long-running process such as the server)."""
        for c in self.channels:
            b = self.backend(c)
            b.search("warm up", 1)
            if jit and hasattr(b, "warm"):
                b.warm()

    def close(self) -> None:
        for b in self._backends.values():
            close = getattr(b, "close", None)
            if close:
                close()
        self._backends.clear()
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
        self.store.close()

    def __enter__(self) -> Retriever:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- searching ---------------------------------------------------------------------------
    def channel_search(self, channel: str, query: str, k: int = 10) -> list[Hit]:
        return self.backend(channel).search(query, k)

    def search_hits(
        self, query: str, *, k: int, channels: Sequence[str] | None = None, mentions_out: list[Mention] | None = None
    ) -> tuple[dict[str, list[Hit]], dict[str, float]]:
        """Raw per-channel hits and per-channel latency (ms); channels run concurrently.

        The backends spend much of their time outside the GIL (Lucene, onnxruntime, DuckDB, scipy), so the
        channels searching side by side (``retriever.lanes``: a thread per core, the slowest channel first) bring
        a query's latency down to about that of its slowest channel.
        """
        query = clean_surrogates(query)  # Lucene and the tokenizers refuse lone surrogates
        chans = list(channels or self.channels)
        self.store.check_files(chans)  # a file cut under the process: an error, not a SIGBUS (indexer.integrity)
        for c in chans:
            self.backend(c)  # load in this thread: the JVM and the model are not loaded concurrently
        # The entity channels (title, kg) run as one task: the claim's entities are resolved once, by the first,
        # and the others search from them.
        entity = [c for c in chans if isinstance(self.backend(c), backends.EntityBackend)]
        tasks: list[list[str]] = [[c] for c in chans if c not in entity] + ([entity] if entity else [])

        def run(group: list[str]) -> list[tuple[str, list[Hit], float]]:
            if group is not entity:
                t0 = time.perf_counter()
                return [(group[0], self.backend(group[0]).search(query, k), (time.perf_counter() - t0) * 1000)]
            return self._entity_search(group, query, k, mentions_out)

        if len(tasks) > 1:
            outs = [o for out in run_tasks(self._pool(), tasks, run, name=lambda g: g[0]) for o in out]
        else:
            outs = [o for group in tasks for o in run(group)]
        return {c: h for c, h, _ in outs}, {c: t for c, _, t in outs}

    def _entity_search(
        self, chans: Sequence[str], query: str, k: int, mentions_out: list[Mention] | None
    ) -> list[tuple[str, list[Hit], float]]:
        """Hits of the entity channels from one resolution of the claim's entities (the first channel's, the title
        channel when it is chosen: it comes first); each channel's time includes the resolution."""
        t0 = time.perf_counter()
        ms = self.backend(chans[0]).mentions(query)
        if mentions_out is not None:
            mentions_out.extend(ms)
        resolve = (time.perf_counter() - t0) * 1000
        outs = []
        for c in chans:
            t1 = time.perf_counter()
            b = self.backend(c)
            if getattr(b, "wants_query", False):
                hits = b.search_mentions(ms, k, query_length=len(query), query=query)
            else:
                hits = b.search_mentions(ms, k, query_length=len(query))
            outs.append((c, hits, resolve + (time.perf_counter() - t1) * 1000))
        return outs

    def _pool(self):
        if self._executor is None:
            from concurrent.futures import ThreadPoolExecutor

            self._executor = ThreadPoolExecutor(max_workers=len(CHANNELS), thread_name_prefix="channel")
        return self._executor

    def fused_pages(
        self, query: str, *, k: int = 10, channels: Sequence[str] | None = None, fusion: str | None = None
    ) -> list[FusedPage]:
        depth = max(self.depth, 4 * k)
        results, _ = self.search_hits(query, k=depth, channels=channels)
        return self.fuse(results, fusion)[:k]

    def fuse(
        self, results: Mapping[str, Sequence[Hit]], fusion: str | None = None, *, learned: bool = True
    ) -> list[FusedPage]:
        """Per-channel hits fused into pages by ``fusion`` (None: the retriever's), with its weights; ``learned``:
        with RRF, the learned rank 1 orders the top 5 (``retriever.rank1``: fitted on claims, not on other queries)."""
        method = self.fusion if fusion is None else check_fusion(fusion)
        rank1 = "shipped" if learned else None
        return fuse(results, weights=self.weights, method=method, rrf_k=self.rrf_k, rank1=rank1)

    def search(
        self,
        claim: str,
        k: int = 10,
        *,
        channels: str | Sequence[str] | None = None,
        on_the_fly: bool | None = None,
        passages: bool = False,
        fusion: str | None = None,
    ) -> SearchResult:
        """Top-k evidence for a claim: pages (each by its best passage), or top-k passages with ``passages``;
        fused by ``fusion`` (one of ``retriever.fusion.FUSIONS``; None: the retriever's own).

        ``k`` is 1..MAX_K (QueryError otherwise); lone surrogates in the claim become U+FFFD.
        """
        claim = clean_surrogates(claim if isinstance(claim, str) else str(claim))
        check_k(k)
        fusion = self.fusion if fusion is None else check_fusion(fusion)
        t0 = time.perf_counter()
        if not claim.strip():
            return SearchResult(claim, STATUS_EMPTY_QUERY, (), (), {"timings_ms": {}})
        chans = parse_channels(channels) or self.channels
        unknown = [c for c in chans if c not in self.channels]
        if unknown:
            raise IndexMissingError(f"channel(s) {', '.join(unknown)} not open in this retriever")
        depth = max(self.depth, 4 * k)
        found: list[Mention] = []
        results, timings = self.search_hits(claim, k=depth, channels=chans, mentions_out=found)
        pages = self.fuse(results, fusion)
        evidence = self._evidence(pages, k=k, passages=passages)
        mentions: tuple[Mention, ...] = tuple(found)
        stats: dict[str, Any] = {}
        status = STATUS_OK if evidence else STATUS_NO_EVIDENCE

        use_live = self.on_the_fly if on_the_fly is None else on_the_fly
        if use_live and "title" not in chans:
            mentions = tuple(find_mentions(claim, self.store))
        if use_live:
            evidence, live_status, live_stats = self.with_live(claim, evidence, mentions, k=k)
            status = live_status or status
            stats.update(live_stats)
        timings["total"] = (time.perf_counter() - t0) * 1000
        stats["timings_ms"] = {c: round(v, 3) for c, v in timings.items()}
        stats.update(self.answered_by(chans, fusion))
        return SearchResult(claim, status, tuple(evidence), mentions, stats)

    def with_live(
        self, claim: str, evidence: Sequence[Evidence], mentions: Sequence[Mention], *, k: int
    ) -> tuple[list[Evidence], str | None, dict[str, Any]]:
        """Local evidence completed from the live fallback: the claim's ``mentions`` that the local index lacks
        are looked up (live evidence first), or with ``live_bridges`` the second hop of a claim whose entities
        are all local (local evidence first); with ``check_fresh``, first, the local pages among the evidence
        that changed since are read live and replace it. Returns the evidence, the live status when the claim was
        looked up (else None), and the request counts."""
        if self.fallback is None:
            raise ConfigError("on_the_fly needs a fallback: open the Retriever with on_the_fly=True")
        if not self.check_fresh:
            return self._looked_up(claim, evidence, mentions, k=k)
        with self.fallback.api.deadline_scope():  # the freshness check and the lookups share the claim's deadline
            fresh = self.fallback.refresh(claim, [(e.title, e.rev_id) for e in evidence if e.origin != "live"], k=k)
            if fresh.refreshed:
                stale = set(fresh.refreshed)
                evidence = _interleave(list(fresh.evidence), [e for e in evidence if e.title not in stale], k)
            evidence, status, stats = self._looked_up(claim, evidence, mentions, k=k)
        stats["refreshed"] = list(fresh.refreshed)
        stats["requests"] += fresh.requests
        stats["cache_hits"] += fresh.cache_hits
        if stats.get("live_status", "ok") == "ok":  # fallback.live.LIVE_OK: the lookups were not cut short
            stats["live_status"] = fresh.live_status
        if self.ingest_live and fresh.pages and self.index_dir is not None:
            stats["ingested"] = stats.get("ingested", 0) + self._ingest(fresh.pages)
        return evidence, status, stats

    def _looked_up(
        self, claim: str, evidence: Sequence[Evidence], mentions: Sequence[Mention], *, k: int
    ) -> tuple[list[Evidence], str | None, dict[str, Any]]:
        """The claim's missing entities looked up live, or with ``live_bridges`` its second hop (:meth:`with_live`)."""
        evidence = list(evidence)
        covered = [(e.title, e.evidence_text) for e in evidence]
        missing = missing_entities(mentions, claim=claim, covered=covered)
        stats: dict[str, Any] = {"missing_entities": missing, "requests": 0, "cache_hits": 0}
        status = live = None
        if missing:
            live = self.fallback.retrieve(claim, missing, k=k, context=covered)
            status = live.status
            # Live evidence first, alternating with the local evidence that the live scorer finds relevant to the
            # claim; the rest of the local evidence (pages about other things of the claim's words) comes last.
            scores = self.fallback.scorer.score(claim, [e.evidence_text for e in evidence])
            weak = [s < self.fallback.min_relevance for s in scores]
            evidence = _interleave(
                list(live.evidence),
                [e for e, w in zip(evidence, weak) if not w],
                k,
                then=[e for e, w in zip(evidence, weak) if w],
            )
        elif self.live_bridges and covered:
            # Every entity is local, but the page the claim leads to may not be: the second hop's names that
            # resolve to no local page are asked for. The claim's own pages stay first.
            live = self.fallback.bridge(claim, covered, k=k, known=lambda names: set(self.store.resolve_titles(names)))
            evidence = _interleave(evidence, list(live.evidence), k)
        if live is not None:
            stats.update({"requests": live.requests, "cache_hits": live.cache_hits, "attempts": live.attempts})
            stats["live_status"] = live.live_status  # ok, deadline_exceeded or circuit_open
            if self.ingest_live and live.pages and self.index_dir is not None:
                stats["ingested"] = self._ingest(live.pages)
        return evidence, status, stats

    def _ingest(self, pages: Sequence[Any]) -> int:
        """Live pages into the index's delta; with the kg channel open, with their links and categories (asked of
        the API), so that the following searches find paths through them (``origin: live``)."""
        from fallback.delta import write_live_pages

        if "kg" in self.channels:
            pages = self.fallback.with_structure(pages)

        def resolve(titles: list[str]) -> dict[str, int]:
            return {t: r.page_id for t, r in self.store.resolve_titles(titles, loose=False).items()}

        written = write_live_pages(self.index_dir, pages, resolve=resolve)
        self.store.reload_delta()
        return written

    def answered_by(self, chans: Sequence[str], fusion: str | None = None) -> dict[str, Any]:
        """An answer's ``channels`` (those that answered), its ``fusion`` and, while the index has any, ``pending``
        (the channels that will join it once built)."""
        out: dict[str, Any] = {"channels": list(chans), "fusion": fusion or self.fusion}
        return {**out, **({"pending": list(self.pending)} if self.pending else {})}

    def search_batch(self, claims: Iterable[str], k: int = 10, **kwargs: Any) -> Iterator[SearchResult]:
        for c in claims:
            yield self.search(c, k, **kwargs)

    # -- evidence ----------------------------------------------------------------------------
    def _evidence(self, pages: list[FusedPage], *, k: int, passages: bool) -> list[Evidence]:
        if passages:
            chosen = sorted((p for page in pages for p in page.passages), key=lambda p: (-p.score, p.passage_id))[:k]
            page_ranks = {page.page_id: page.ranks for page in pages}
            items = [(p, p.ranks or page_ranks.get(p.page_id, {}), [], None) for p in chosen]
        else:
            items = [
                (page.best, page.ranks, [p.passage_id for p in page.passages[1:4]], page.score) for page in pages[:k]
            ]
        rows = self.store.passages_with_pages(p.passage_id for p, _, _, _ in items)
        fetched = delta_origins(self.store, [(psg, page) for psg, page, _ in rows.values()])
        out: list[Evidence] = []
        for fp, ranks, more, page_score in items:
            if fp.passage_id not in rows:
                continue
            psg, page, sentence_ids = rows[fp.passage_id]
            extra: dict[str, Any] = {"sentence_ids": sentence_ids}
            if page_score is not None:  # what orders page evidence; ``score`` is its best passage's
                extra["page_score"] = round(page_score, 6)
            if more:
                extra["more_passages"] = more
            ev = stored_evidence(
                psg, page, fetched, score=fp.score, ranks=ranks, retrieved_for_entity=fp.matched, extra=extra
            )
            out.append(kg_evidence(ev, fp.triples, fp.stated) if fp.triples else ev)
        return out


def kg_evidence(ev: Evidence, triples: Sequence[Mapping[str, Any]], stated: str | None) -> Evidence:
    """Evidence the kg channel led to, with its path (``triples``). The passage stating the path's last fact is a
    ``kg`` item whose text is that sentence or infobox row; a page the path ends on keeps its own passage."""
    extra = {**ev.extra, "triples": [dict(t) for t in triples]}
    if stated is None:
        return replace(ev, extra=extra)
    return replace(ev, source="kg", evidence_text=stated, extra=extra)


def delta_origins(store: Store, found: Iterable[tuple[Passage, Page]]) -> dict[int, tuple[str, str | None]]:
    """Origin (``update`` or ``live``) and revision time of the pages among ``found`` that the delta holds: one
    query for them all."""
    return store.delta_origins(page.page_id for psg, page in found if psg.passage_id >= LIVE_PASSAGE_ID_BASE)


def live_fetch_times(store: Store, found: Iterable[tuple[Passage, Page]]) -> dict[int, str | None]:
    """Fetch times of the pages among ``found`` that were ingested live (the delta): one query for them all."""
    return {pid: stamp for pid, (origin, stamp) in delta_origins(store, found).items() if origin == "live"}


def stored_evidence(
    psg: Passage,
    page: Page,
    delta: Mapping[int, tuple[str, str | None]],
    *,
    score: float,
    ranks: Mapping[str, int],
    **fields: Any,
) -> Evidence:
    """Evidence for a passage of the store: ``origin`` ``local`` (the built base), or, for a page of the delta
    (``delta``, from :func:`delta_origins`), ``update`` (applied from a dump or events file) or ``live`` (fetched
    live, with its fetch time), each with its revision id and time."""
    origin, stamp = ("local", page.rev_timestamp)
    if psg.passage_id >= LIVE_PASSAGE_ID_BASE and page.page_id in delta:
        origin, stamp = delta[page.page_id]
    return Evidence(
        title=page.title,
        page_id=page.page_id,
        passage_id=psg.passage_id,
        section=psg.heading_path,
        evidence_text=psg.text,
        source=psg.source,
        score=round(score, 6),
        ranks=dict(ranks),
        url=page.url,
        rev_id=page.rev_id,
        origin=origin,
        fetched_at=stamp if origin == "live" else None,
        rev_timestamp=stamp,
        **fields,
    )


def _open_store(d: Path, channels: str | Sequence[str] | None) -> tuple[Store, tuple[str, ...]]:
    """The store of ``d`` and the channels to search: those asked for, which must all be built, or every one."""
    _check_manifest(d)
    store = Store.open(d)
    try:
        wanted = parse_channels(channels)
        have = available_channels(d, wanted, store)
        if wanted is None:
            wanted = have
        missing = [c for c in wanted if c not in have]
        waiting = [c for c in missing if c in pending_channels(d)]
        if waiting:
            raise IndexMissingError(
                f"{d}: the {', '.join(waiting)} index is pending (the index was published before it was built); "
                f"`wikiground embed --index {d}` completes it, or search the other channels meanwhile"
            )
        if missing:
            raise IndexMissingError(
                f"{d}: no {', '.join(missing)} index; build it with "
                f"`python -m indexer build --dump DUMP --out {d} --indexes {','.join(missing)}`"
            )
    except BaseException:
        store.close()
        raise
    return store, wanted


def _check_manifest(d: Path) -> None:
    """IndexCorruptError when the index folder ``d`` has no manifest, or one without its ``indexes``: the manifest
    says which channels the index serves (the kg channel is listed there alone), so without it a channel would be
    dropped without a word. A bare store file (``d`` a ``.duckdb`` file) has no manifest and serves the title
    channel."""
    import json

    path = d / MANIFEST_FILE
    if not d.is_dir() or not (d / STORE_FILE).is_file():
        return  # not an index folder: Store.open says so
    if not path.is_file():
        raise IndexCorruptError(
            f"{path}: missing, so which channels the index serves (kg among them), its build and its files are "
            f"unknown: rebuild it with `python -m indexer build --dump DUMP --out {d}`"
        )
    try:
        indexes = json.loads(path.read_text(encoding="utf-8")).get("indexes")
    except (OSError, UnicodeDecodeError, ValueError, AttributeError, RecursionError):
        return  # Store.open reports an unreadable manifest
    if not isinstance(indexes, dict):
        raise IndexCorruptError(f"{path}: no 'indexes' object (the channels the index serves): rebuild the index")


def _open_live(retriever: Retriever, settings: FallbackSettings, http_client: Any | None) -> Any:
    from fallback.live import open_fallback

    scorer, threshold = default_live_scorer(retriever)
    return open_fallback(
        settings,
        http_client=http_client,
        scorer=scorer,
        min_relevance=threshold,
        planner=default_live_planner(retriever),
    )


def _settings_of(fallback: Any, on_the_fly: bool) -> FallbackSettings | None:
    """The fallback's settings: ``fallback`` itself, or from the environment when it is None; None when
    ``fallback`` is a ready fallback."""
    from fallback.settings import FallbackSettings

    if isinstance(fallback, FallbackSettings):
        return fallback
    if fallback is None:
        return FallbackSettings.from_env() if on_the_fly else FallbackSettings()
    return None


LIVE_MIN_TFIDF = (
    0.1  # TF-IDF cosine of a live snippet to the claim; chosen on the dev sets (benchmarks/bench_fallback.py)
)
LIVE_MIN_OVERLAP = 0.5  # share of the claim's content words when no TF-IDF index is built


def default_live_scorer(retriever: Retriever, kind: str = "auto") -> tuple[Any, float]:
    """The relevance scorer for live snippets, and its threshold.

    ``auto``: TF-IDF cosine from the local index when one is built (loaded on first use), else word
    overlap with the claim; ``tfidf`` or ``overlap`` force one.
    """
    from fallback.relevance import FunctionScorer, OverlapScorer

    if kind not in ("auto", "tfidf", "overlap"):
        raise ConfigError(f"unknown live scorer {kind!r}: choose auto, tfidf or overlap")
    has_tfidf = "tfidf" in retriever.channels
    if kind == "tfidf" and not has_tfidf:
        raise IndexMissingError("the tfidf live scorer needs a TF-IDF index: build it with --indexes tfidf")
    if kind == "overlap" or not has_tfidf:
        return OverlapScorer(), LIVE_MIN_OVERLAP

    def score_texts(claim: str, texts: Sequence[str]) -> list[float]:
        return list(retriever.backend("tfidf").score_texts(claim, list(texts)))

    return FunctionScorer(score_texts), LIVE_MIN_TFIDF


def default_live_planner(retriever: Retriever) -> Any:
    """The search-term planner for live lookups: keywords ranked by the local TF-IDF index's idf when one is
    built (loaded on first use; a word the index never saw counts as the rarest), else the claim's first words."""
    from fallback.planner import KeywordPlanner

    if "tfidf" not in retriever.channels:
        return KeywordPlanner()

    def specificity(words_: Sequence[str]) -> list[float]:
        return retriever.backend("tfidf").idf_of(list(words_))

    return KeywordPlanner(specificity=specificity)


def _interleave(
    first: list[Evidence], second: list[Evidence], k: int, *, then: Sequence[Evidence] = ()
) -> list[Evidence]:
    """Live evidence answers what the local index lacks, so it alternates with local evidence from the top:
    live first for the claim's missing entities, local first for a second hop; ``then`` after both."""
    out: list[Evidence] = []
    seen: set[str] = set()
    for i in range(max(len(first), len(second))):
        for src in (first, second):
            if i < len(src) and src[i].title not in seen:
                seen.add(src[i].title)
                out.append(src[i])
    for e in then:
        if e.title not in seen:
            seen.add(e.title)
            out.append(e)
    return out[:k]
