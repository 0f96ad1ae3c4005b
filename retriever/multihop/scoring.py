"""Final relevance scoring of a claim's candidate pages (local: no model)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from retriever.multihop.state import ClaimState
from retriever.multihop.terms import content_words, coverage, pool_idf
from wikiground.text import normalize_title


class Scorer(Protocol):
    def score(self, state: ClaimState, texts: Mapping[str, str]) -> None:
        """Set ``score`` (and ``features``) of every candidate; ``texts``: title -> page text."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class LocalScorer:
    """Fused retrieval strength + IDF-weighted coverage of the claim's words + named entity + bridge.

    A bridge page (linked or named by a strong page) inherits part of that page's score: it is why
    multi-hop finds pages that share no words with the claim.
    """

    retrieval: float = 1.0
    coverage: float = 0.6
    named: float = 0.5
    bridge: float = 0.7

    def score(self, state: ClaimState, texts: Mapping[str, str]) -> None:
        cands = list(state.candidates.values())
        if not cands:
            return
        wanted = content_words(state.claim)
        idf = pool_idf(wanted, [f"{c.title} {texts.get(c.title, '')}" for c in cands])
        top = max(c.retrieval for c in cands) or 1.0
        named = {normalize_title(t) for t in state.claim_entities}
        base: dict[str, float] = {}
        for c in cands:
            f = {
                "retrieval": c.retrieval / top,
                "coverage": coverage(wanted, f"{c.title} {texts.get(c.title, '')}", idf),
                "named": 1.0 if normalize_title(c.title) in named else 0.0,
            }
            c.features = f
            base[normalize_title(c.title)] = (
                self.retrieval * f["retrieval"] + self.coverage * f["coverage"] + self.named * f["named"]
            )
        hi = max(base.values()) or 1.0
        for c in cands:
            c.parents = {
                t: v
                for t, v in state.pointers.get(normalize_title(c.title), {}).items()
                if normalize_title(t) != normalize_title(c.title)
            }
            link = max((base.get(normalize_title(p), 0.0) / hi * s for p, s in c.parents.items()), default=0.0)
            c.features["bridge"] = link
            c.score = base[normalize_title(c.title)] + self.bridge * link
