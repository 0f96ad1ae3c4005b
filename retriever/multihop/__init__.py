"""Multi-hop claim retrieval: iterative semantic / entity-title / attribute queries with bridge entities.

``MultiHopRetriever(Retriever.open(DIR), params=MultiHopParams(final_k=21)).search(claim)``. The
default planner and scorer are local and deterministic; an LLM planner (DSPy) plugs in through
:mod:`retriever.multihop.llm`.
"""

from __future__ import annotations

from retriever.multihop.params import MultiHopParams
from retriever.multihop.pipeline import MultiHopResult, MultiHopRetriever
from retriever.multihop.planner import LocalPlanner, Planner
from retriever.multihop.scoring import LocalScorer, Scorer
from retriever.multihop.state import ClaimState, HopPlan

__all__ = [
    "ClaimState",
    "HopPlan",
    "LocalPlanner",
    "LocalScorer",
    "MultiHopParams",
    "MultiHopResult",
    "MultiHopRetriever",
    "Planner",
    "Scorer",
]
