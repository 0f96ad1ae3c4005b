"""Query planners: what to search at each hop. ``LocalPlanner`` needs nothing but the store.

A planner returns a :class:`HopPlan` (semantic sub-questions, literal entity titles, attribute
queries); the pipeline bounds, deduplicates and runs them. An LLM planner plugs in through the same
protocol (see :mod:`retriever.multihop.llm`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from retriever.multihop.params import MultiHopParams
from retriever.multihop.state import ClaimState, HopPlan
from retriever.multihop.terms import clauses, content_words, relation_qualifiers, temporal_qualifiers
from wikiground.text import normalize_title, words

# Words of a gap query besides the bridge entity: enough to steer, few enough to keep the entity dominant.
GAP_WORDS = 6


class Planner(Protocol):
    def plan(
        self,
        claim: str,
        state: ClaimState,
        *,
        hop: int,
        params: MultiHopParams,
        evidence: Sequence[tuple[str, str]],
    ) -> HopPlan:
        """Queries for ``hop``; ``evidence``: (title, text) of the best pages found so far, best first."""
        ...


class LocalPlanner:
    """Deterministic queries from the claim and the store (titles, redirects, links, infoboxes).

    Hop 1: the claim's clauses; the titles the claim names; each entity paired with the claim's years,
    dates and relation words. Later hops: bridge entities (pages linked or named by the best pages so
    far) as literal titles, with the claim words their parent page did not cover, and with qualifiers.
    """

    def __init__(self, *, gap_words: int = GAP_WORDS):
        self.gap_words = gap_words

    def plan(
        self,
        claim: str,
        state: ClaimState,
        *,
        hop: int,
        params: MultiHopParams,
        evidence: Sequence[tuple[str, str]],
    ) -> HopPlan:
        if hop == 1:
            entities = list(state.claim_entities) + [m for m in state.claim_mentions if m not in state.claim_entities]
            semantic = [c for c in clauses(claim) if " ".join(c.split()) != " ".join(claim.split())]
            if not params.claim_k:
                semantic.insert(0, claim)
            return HopPlan(
                semantic=tuple(semantic),
                entity=tuple(entities),
                attribute=tuple(self._attributes(claim, entities, exclude=entities)),
            )
        named = {normalize_title(t) for t in state.claim_entities}
        bridges = [
            b
            for b, _ in sorted(state.bridges.items(), key=lambda kv: (-kv[1][0], kv[0]))
            if normalize_title(b) not in named
        ]
        fresh = [b for b in bridges if state.get(b) is None]
        rest = self._gap_terms(claim, state)
        semantic = [f"{b} {' '.join(w for w in rest if w not in set(words(b)))[:200]}".strip() for b in bridges]
        return HopPlan(
            semantic=tuple(q for q in semantic if q),
            entity=tuple(fresh),
            attribute=tuple(self._attributes(claim, bridges, exclude=list(state.claim_entities) + bridges)),
        )

    def _gap_terms(self, claim: str, state: ClaimState) -> list[str]:
        """Claim words outside the entities it names: the relation the bridge page must answer."""
        named = {w for t in [*state.claim_entities, *state.claim_mentions] for w in words(t)}
        return [w for w in content_words(claim) if w not in named][: self.gap_words]

    @staticmethod
    def _attributes(claim: str, entities: Sequence[str], *, exclude: Sequence[str]) -> list[str]:
        """Entity + qualifier pairs, breadth first: each entity with the best qualifier, then the next."""
        quals = temporal_qualifiers(claim) + relation_qualifiers(claim, exclude=exclude)
        out: list[str] = []
        for q in quals[:4]:
            for e in entities[:4]:
                if q.casefold() not in e.casefold():
                    out.append(f"{e} {q}")
        return out
