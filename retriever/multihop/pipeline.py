"""The iterative multi-hop pipeline: plan queries, run them fused, dedup by title, follow bridges, score.

Deterministic for a given index, params and planner: queries run in plan order, ties break by title.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from backends.entities import find_mentions
from retriever.api import NO_ID, delta_origins, output_line, stored_evidence
from retriever.multihop.bridges import find_bridges
from retriever.multihop.params import KINDS, MultiHopParams
from retriever.multihop.planner import LocalPlanner, Planner
from retriever.multihop.scoring import LocalScorer, Scorer
from retriever.multihop.state import Candidate, ClaimState, HopQuery, HopRecord
from retriever.multihop.terms import content_words, pool_idf
from wikiground.records import Evidence, Hit
from wikiground.text import normalize_title

log = logging.getLogger(__name__)

STATUS_OK = "ok"
STATUS_NO_EVIDENCE = "no_evidence"
STATUS_EMPTY_QUERY = "empty_query"

# A page's retrieval strength from one query: kind weight / (rank + RANK_OFFSET), decayed per hop.
KIND_WEIGHTS: Mapping[str, float] = {"claim": 1.0, "semantic": 0.8, "entity": 0.9, "attribute": 0.7}
RANK_OFFSET = 1
HOP_DECAY = 0.85
EVIDENCE_CHARS = 3000  # page text the scorer and the bridge finder read (lead + matched passages)
PASSAGES_PER_PAGE = 3  # matched passages of a page kept per query


@dataclass(frozen=True, slots=True)
class MultiHopResult:
    query: str
    status: str
    evidence: tuple[Evidence, ...]
    hops: tuple[dict[str, Any], ...] = ()
    stats: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self, id: Any = NO_ID) -> dict[str, Any]:
        d = output_line(id, self.query, self.status, self.evidence)
        d["hops"] = list(self.hops)
        d.update(self.stats)
        return d


class MultiHopRetriever:
    """Multi-hop search over a :class:`~retriever.api.Retriever`; ``search(claim)`` -> :class:`MultiHopResult`."""

    def __init__(
        self,
        retriever: Any,
        *,
        params: MultiHopParams | None = None,
        planner: Planner | None = None,
        scorer: Scorer | None = None,
    ):
        self.retriever = retriever
        self.store = retriever.store
        self.params = params or MultiHopParams()
        self.planner: Planner = planner or LocalPlanner()
        # An LLM planner may also score (1-10 relevance); otherwise the local scorer decides.
        self.scorer: Scorer = scorer or (planner if _is_scorer(planner) else LocalScorer())
        wanted = self.params.channels or tuple(retriever.channels)
        self.channels = tuple(c for c in wanted if c in retriever.channels)
        self.entity_channels = tuple(c for c in self.params.entity_channels if c in retriever.channels)

    # -- public ------------------------------------------------------------------------------
    def search(self, claim: str) -> MultiHopResult:
        t0 = time.perf_counter()
        claim = claim if isinstance(claim, str) else str(claim)
        if not claim.strip():
            return MultiHopResult(claim, STATUS_EMPTY_QUERY, (), (), {"timings_ms": {"total": 0.0}})
        p = self.params
        mentions = find_mentions(claim, self.store)
        state = _claim_state(claim, mentions)
        texts: dict[str, str] = {}
        loaded: dict[str, int] = {}
        expanded: set[str] = set()
        for hop in range(1, p.hops + 1):
            record = self._hop(state, hop, texts, loaded, expanded)
            if record is None:
                break
            state.hops.append(record)
        final = state.ranked()[: p.final_k]
        evidence_items = self._evidence(final)
        status = STATUS_OK if evidence_items else STATUS_NO_EVIDENCE
        live_stats: dict[str, Any] = {}
        if self.retriever.on_the_fly:  # what the hops found locally is the context of the live lookups
            evidence_items, live_status, live_stats = self.retriever.with_live(
                claim, evidence_items, mentions, k=p.final_k
            )
            status = live_status or status
        stats = {
            "queries": sum(len(h.queries) for h in state.hops),
            "candidates": len(state.candidates),
            "fusion": p.fusion or self.retriever.fusion,
            **live_stats,
            "timings_ms": {"total": round((time.perf_counter() - t0) * 1000, 3)},
        }
        return MultiHopResult(claim, status, tuple(evidence_items), tuple(h.to_dict() for h in state.hops), stats)

    def _hop(
        self, state: ClaimState, hop: int, texts: dict[str, str], loaded: dict[str, int], expanded: set[str]
    ) -> HopRecord | None:
        """One hop: plan queries, run them, add their pages, re-score, follow bridges; None when nothing is left
        to ask."""
        p = self.params
        th = time.perf_counter()
        evidence = [(c.title, texts.get(c.title, "")) for c in state.ranked()[: p.bridge_pages]]
        plan = self.planner.plan(state.claim, state, hop=hop, params=p, evidence=evidence)
        queries = self._bounded(plan, state, hop)
        if not queries:
            return None
        record = HopRecord(hop)
        before = set(state.candidates)
        for q, pages in zip(queries, self._run(queries)):
            state.mark_tried(q.kind, q.text)
            added = [
                self._add(state, q, hop, rank, pid, psg, title, ranks)
                for rank, (pid, psg, title, ranks) in enumerate(pages, 1)
            ]
            record.queries.append((q, added))
        record.new_titles = [state.candidates[k].title for k in state.candidates if k not in before]
        self._load_texts(state, texts, loaded)
        self.scorer.score(state, texts)
        if hop < p.hops:
            self._follow_bridges(state, texts, expanded)
            self.scorer.score(state, texts)
        record.ranking = [c.title for c in state.ranked()[: p.final_k]]
        record.ms = (time.perf_counter() - th) * 1000
        return record

    # -- planning and running ----------------------------------------------------------------
    def _bounded(self, plan: Any, state: ClaimState, hop: int) -> list[HopQuery]:
        """The plan cut to the per-kind limits, minus queries already tried (this claim, any hop)."""
        p = self.params
        out: list[HopQuery] = []
        seen: set[tuple[str, str]] = set()
        if hop == 1 and p.claim_k:
            out.append(HopQuery("claim", state.claim, p.claim_k))
            seen.add(("text", " ".join(state.claim.casefold().split())))
        for kind in KINDS:
            n = 0
            for text in plan.of(kind):
                text = " ".join(str(text).split())
                key = ("entity" if kind == "entity" else "text", text.casefold())
                if n >= p.queries_of(kind) or not text or key in seen or state.was_tried(kind, text):
                    continue
                seen.add(key)
                out.append(HopQuery(kind, text, p.k_of(kind)))
                n += 1
        return out

    def _run(self, queries: Sequence[HopQuery]) -> list[list[tuple[int, list[int], str, dict[str, int]]]]:
        """Each query's top-k pages (page_id, matched passage ids, title, channel ranks); one batch per channel."""
        r = self.retriever
        per_query: list[dict[str, list[Hit]]] = [{} for _ in queries]
        for channel in dict.fromkeys((*self.channels, *self.entity_channels)):
            idx = [
                i
                for i, q in enumerate(queries)
                if channel in (self.entity_channels if q.kind == "entity" else self.channels)
            ]
            if not idx:
                continue
            backend = r.backend(channel)
            texts = [queries[i].text for i in idx]
            depth = max(self.params.depth, max(queries[i].k for i in idx))
            batch = getattr(backend, "search_batch", None)
            lists = batch(texts, depth) if batch else [backend.search(t, depth) for t in texts]
            for i, hits in zip(idx, lists):
                per_query[i][channel] = hits
        # A literal entity title that names a page puts that page first, whatever the channels say.
        titles = self.store.resolve_titles([q.text for q in queries if q.kind == "entity"])
        leads = self.store.lead_passages({res.page_id for res in titles.values()})
        out = []
        for q, results in zip(queries, per_query):
            pages: list[tuple[int, list[int], str, dict[str, int]]] = []
            res = titles.get(q.text) if q.kind == "entity" else None
            if res is not None and res.page_id in leads:
                pages.append((res.page_id, [leads[res.page_id].passage_id], res.title, {"title": 1}))
            # The learned rank 1 was fitted on whole claims: a hop's entity or bridge query fuses without it.
            for fp in r.fuse(results, self.params.fusion, learned=q.kind == "claim"):
                if len(pages) >= q.k:
                    break
                if any(fp.page_id == x[0] for x in pages):
                    continue
                pids = [x.passage_id for x in fp.passages[:PASSAGES_PER_PAGE]]
                pages.append((fp.page_id, pids, fp.best.title, dict(fp.ranks)))
            out.append(pages[: q.k])
        return out

    def _add(
        self,
        state: ClaimState,
        q: HopQuery,
        hop: int,
        rank: int,
        page_id: int,
        passage_ids: list[int],
        title: str,
        ranks: dict[str, int],
    ) -> str:
        if not title:
            page = self.store.page(page_id)
            title = page.title if page else str(page_id)
        key = normalize_title(title)
        strength = KIND_WEIGHTS.get(q.kind, 0.5) * HOP_DECAY ** (hop - 1) / (rank + RANK_OFFSET)
        c = state.candidates.get(key)
        if c is None:
            c = state.candidates[key] = Candidate(page_id, title, hop, passage_ids[0], q.kind, q.text)
        c.found_by += 1
        c.passages.extend(p for p in passage_ids if p not in c.passages)
        if strength > c.retrieval:
            c.retrieval = strength
            c.ranks = ranks
        return c.title

    def _load_texts(self, state: ClaimState, texts: dict[str, str], loaded: dict[str, int]) -> None:
        """Lead + matched passages of each candidate, for scoring and bridge finding (reloaded as matches grow)."""
        todo = [c for c in state.candidates.values() if loaded.get(c.title) != len(c.passages)]
        if not todo:
            return
        leads = self.store.lead_passages({c.page_id for c in todo})
        psgs = self.store.passages({p for c in todo for p in c.passages})
        for c in todo:
            lead = leads.get(c.page_id)
            ids = ([lead.passage_id] if lead is not None else []) + [
                p for p in c.passages if lead is None or p != lead.passage_id
            ]
            parts = [
                lead.text if lead is not None and i == lead.passage_id else psgs[i].text
                for i in ids
                if i in psgs or (lead is not None and i == lead.passage_id)
            ]
            texts[c.title] = " ".join(parts)[:EVIDENCE_CHARS]
            loaded[c.title] = len(c.passages)

    def _follow_bridges(self, state: ClaimState, texts: Mapping[str, str], expanded: set[str]) -> None:
        """Bridges out of the best pages not yet expanded; they feed the next hop's queries and the scorer."""
        ranked = state.ranked()
        if not ranked:
            return
        top = ranked[0].score or 1.0
        parents = [c for c in ranked[: self.params.bridge_pages] if c.title not in expanded]
        if not parents:
            return
        expanded.update(c.title for c in parents)
        wanted = content_words(state.claim)
        idf = pool_idf(wanted, list(texts.values()))
        rel = {c.title: max(c.score, 0.0) / top for c in parents}
        kg = self.retriever.backend("kg") if "kg" in self.channels else None
        for b in find_bridges(
            self.store,
            [(c.page_id, c.title, texts.get(c.title, "")) for c in parents],
            wanted,
            idf=idf,
            kg=kg,
            claim=state.claim,
        ):
            strength = b.strength * rel[b.parent]
            old = state.bridges.get(b.title)
            if old is None or strength > old[0]:
                state.bridges[b.title] = (strength, b.parent)
            ptr = state.pointers.setdefault(normalize_title(b.title), {})
            ptr[b.parent] = max(ptr.get(b.parent, 0.0), b.strength)

    # -- output ------------------------------------------------------------------------------
    def _evidence(self, final: Sequence[Candidate]) -> list[Evidence]:
        psgs = self.store.passages({c.passage_id for c in final})
        pages = self.store.pages({c.page_id for c in final})
        found = {c.passage_id: (psgs.get(c.passage_id), pages.get(c.page_id)) for c in final}
        fetched = delta_origins(self.store, [(psg, page) for psg, page in found.values() if psg and page])
        out: list[Evidence] = []
        for c in final:
            psg, page = found[c.passage_id]
            if psg is None or page is None:
                continue
            extra: dict[str, Any] = {
                "found_by": {"kind": c.kind, "query": c.query},
                "features": {k: round(v, 4) for k, v in c.features.items()},
            }
            if c.parents:
                extra["via"] = sorted(c.parents, key=lambda t: (-c.parents[t], t))[0]
            out.append(stored_evidence(psg, page, fetched, score=c.score, ranks=c.ranks, hop=c.hop, extra=extra))
        return out


def _is_scorer(obj: Any) -> bool:
    return obj is not None and callable(getattr(obj, "score", None))


def _claim_state(claim: str, mentions: Sequence[Any]) -> ClaimState:
    """A claim's state before the first hop: the local pages it names, and the names that resolve to none."""
    state = ClaimState(claim)
    for m in mentions:
        if m.resolution is not None:
            if m.resolution.title not in state.claim_entities:
                state.claim_entities.append(m.resolution.title)
        elif len(m.text) > 1 and m.text not in state.claim_mentions:
            state.claim_mentions.append(m.text)
    return state
