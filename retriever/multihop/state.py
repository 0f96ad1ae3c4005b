"""Per-claim state of a multi-hop search: queries tried, pages found (deduplicated by title), hop log."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from wikiground.text import normalize_title


@dataclass(frozen=True, slots=True)
class HopQuery:
    """One query of a hop. ``origin``: the entity or page it was derived from (for the log)."""

    kind: str  # "claim" | "semantic" | "entity" | "attribute"
    text: str
    k: int
    origin: str | None = None


@dataclass(frozen=True, slots=True)
class HopPlan:
    semantic: tuple[str, ...] = ()
    entity: tuple[str, ...] = ()
    attribute: tuple[str, ...] = ()

    def of(self, kind: str) -> tuple[str, ...]:
        return getattr(self, kind)


@dataclass(slots=True)
class Candidate:
    """A page found by some query; the first finder gives its hop."""

    page_id: int
    title: str
    hop: int
    passage_id: int
    kind: str  # kind of the first query that found it
    query: str
    retrieval: float = 0.0  # best weighted reciprocal rank over every query that found it
    found_by: int = 0  # how many queries returned it
    passages: list[int] = field(default_factory=list)  # every passage a query matched, in order found
    ranks: dict[str, int] = field(default_factory=dict)  # fused channel ranks from its best query
    parents: dict[str, float] = field(default_factory=dict)  # pages pointing here -> link strength (set by scoring)
    score: float = 0.0  # final score
    features: dict[str, float] = field(default_factory=dict)


@dataclass(slots=True)
class HopRecord:
    hop: int
    queries: list[tuple[HopQuery, list[str]]] = field(default_factory=list)  # query -> titles it returned
    new_titles: list[str] = field(default_factory=list)
    ranking: list[str] = field(default_factory=list)  # the final-k titles as scored after this hop
    ms: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        by_kind: dict[str, list[dict[str, Any]]] = {}
        for q, titles in self.queries:
            item: dict[str, Any] = {"query": q.text, "k": q.k, "titles": titles}
            if q.origin:
                item["from"] = q.origin
            by_kind.setdefault(q.kind, []).append(item)
        return {
            "hop": self.hop,
            "queries": by_kind,
            "new_titles": self.new_titles,
            "ranking": self.ranking,
            "ms": round(self.ms, 3),
        }


@dataclass(slots=True)
class ClaimState:
    """Everything one claim's search has seen. Titles are the dedup key (normalised)."""

    claim: str
    candidates: dict[str, Candidate] = field(default_factory=dict)
    tried: set[str] = field(default_factory=set)
    hops: list[HopRecord] = field(default_factory=list)
    bridges: dict[str, tuple[float, str]] = field(default_factory=dict)  # bridge title -> (strength, parent title)
    pointers: dict[str, dict[str, float]] = field(default_factory=dict)  # normalised title -> {parent title: strength}
    claim_entities: list[str] = field(default_factory=list)  # titles the claim names (resolved mentions)
    claim_mentions: list[str] = field(default_factory=list)  # capitalised spans no local title matches

    def was_tried(self, kind: str, text: str) -> bool:
        return query_key(kind, text) in self.tried

    def mark_tried(self, kind: str, text: str) -> None:
        self.tried.add(query_key(kind, text))

    def get(self, title: str) -> Candidate | None:
        return self.candidates.get(normalize_title(title))

    def ranked(self) -> list[Candidate]:
        """Candidates by current score, then retrieval, then title (deterministic)."""
        return sorted(self.candidates.values(), key=lambda c: (-c.score, -c.retrieval, c.title))


def query_key(kind: str, text: str) -> str:
    # Entity queries dedupe against other entity queries only: "Paris" as a title and as words differ.
    return f"{'entity' if kind == 'entity' else 'text'}:{' '.join(text.casefold().split())}"
