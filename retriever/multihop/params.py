"""The multi-hop pipeline's knobs: hops, queries and depth per query kind, final k."""

from __future__ import annotations

from dataclasses import dataclass, fields

from wikiground.errors import ConfigError

# The field's reference pipeline (issue 5): 3 iterations; up to 3 semantic sub-questions (k=5),
# 3 entity-title queries (k=3) and 4 attribute queries (k=3) per hop; keep the top 21 pages.
HOPS = 3
SEMANTIC_QUERIES, SEMANTIC_K = 3, 5
ENTITY_QUERIES, ENTITY_K = 3, 3
ATTRIBUTE_QUERIES, ATTRIBUTE_K = 4, 3
FINAL_K = 21
# Local planner: how many of the best pages found so far feed bridge entities to the next hop.
BRIDGE_PAGES = 5
# Hits per channel per query before fusion: deeper lists steady RRF, at a latency cost.
DEPTH = 30

KINDS = ("semantic", "entity", "attribute")


@dataclass(frozen=True, slots=True, kw_only=True)
class MultiHopParams:
    """Every bound of one multi-hop search. ``claim_k``: pages kept from the claim itself (hop 1)."""

    hops: int = HOPS
    semantic_queries: int = SEMANTIC_QUERIES
    semantic_k: int = SEMANTIC_K
    entity_queries: int = ENTITY_QUERIES
    entity_k: int = ENTITY_K
    attribute_queries: int = ATTRIBUTE_QUERIES
    attribute_k: int = ATTRIBUTE_K
    final_k: int = FINAL_K
    claim_k: int = FINAL_K
    bridge_pages: int = BRIDGE_PAGES
    depth: int = DEPTH
    channels: tuple[str, ...] | None = None  # None: every channel the Retriever has open
    entity_channels: tuple[str, ...] = ("title", "bm25")  # literal titles need no semantic channel
    fusion: str | None = None  # each query's fusion (retriever.fusion.FUSIONS); None: the Retriever's

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, int) and not isinstance(v, bool):
                low = (
                    0
                    if f.name in ("semantic_queries", "entity_queries", "attribute_queries", "claim_k", "bridge_pages")
                    else 1
                )
                if v < low:
                    raise ConfigError(f"MultiHopParams.{f.name} must be >= {low}, got {v}")

    def queries_of(self, kind: str) -> int:
        return {"semantic": self.semantic_queries, "entity": self.entity_queries, "attribute": self.attribute_queries}[
            kind
        ]

    def k_of(self, kind: str) -> int:
        return {"semantic": self.semantic_k, "entity": self.entity_k, "attribute": self.attribute_k}[kind]

    @property
    def max_queries(self) -> int:
        """Upper bound on the queries one claim can issue (hop 1 also searches the claim itself)."""
        return self.hops * (self.semantic_queries + self.entity_queries + self.attribute_queries) + (
            1 if self.claim_k else 0
        )
