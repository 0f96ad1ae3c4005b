"""Search-term generation per attempt: a pluggable ``QueryPlanner`` and a keyword default.

An LLM planner (e.g. DSPy) only needs ``queries(claim, entities, attempt=, state=)``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from fallback.relevance import content_words

MAX_QUERY_WORDS = 8
# CirrusSearch returns only pages that match every word, so a long query finds nothing: a few rare words find
# the page far more often (benchmarks/RESULTS.md, fallback).
SPECIFIC_QUERY_WORDS = 3


@dataclass
class ClaimState:
    """What was tried for one claim, so no request is repeated."""

    claim: str
    attempts: int = 0
    titles: list[str] = field(default_factory=list)
    search_terms: list[str] = field(default_factory=list)
    suggestions: list[str] = field(default_factory=list)
    categories: list[str] = field(default_factory=list)
    sections: list[str] = field(default_factory=list)  # "Title#index"
    disambiguated: dict[str, str] = field(default_factory=dict)  # entity -> chosen title
    errors: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class QueryPlanner(Protocol):
    def queries(self, claim: str, entities: Sequence[str], *, attempt: int, state: ClaimState) -> list[str]: ...


class KeywordPlanner:
    """Attempt 1: the claim's keywords. Attempt 2: the search's suggestion, then fewer terms.
    Attempt 3: categories of partially relevant pages, narrowed by the entity.

    With ``specificity`` (scores of words, higher = rarer, e.g. the local index's idf), attempt 1 asks for the
    claim's ``specific_words`` rarest words, in the claim's order, instead of its first ``max_words``: a short
    query of discriminating words is what a search that matches every word can answer ("lobbyist consultant
    senator" for "the lawyer, lobbyist and political consultant who ... worked for a senator"). Attempt 2 then
    asks for the rarest words outside the names looked up, instead of the first half of the keywords: the page
    the claim leads to is described by the rest ("consultancy firm founded" for "Which consultancy firm was
    founded by the magician known as X?").
    """

    def __init__(
        self,
        *,
        max_words: int = MAX_QUERY_WORDS,
        per_attempt: int = 3,
        specificity: Callable[[Sequence[str]], Sequence[float]] | None = None,
        specific_words: int = SPECIFIC_QUERY_WORDS,
    ):
        self.max_words = max_words
        self.per_attempt = per_attempt
        self.specificity = specificity
        self.specific_words = specific_words

    def queries(self, claim: str, entities: Sequence[str], *, attempt: int, state: ClaimState) -> list[str]:
        words = content_words(claim)
        keys = words[: self.max_words]
        out: list[str] = []
        if attempt == 1:
            out.append(" ".join(self._specific(words) if self.specificity else keys))
        elif attempt == 2:
            out.extend(state.suggestions)
            entity_words = {w for e in entities for w in content_words(e)}
            rest = [w for w in keys if w not in entity_words]
            for entity in entities:  # the entity with the claim's other words, then the entity alone
                out.append(" ".join([entity, *rest[:2]]))
                out.append(entity)
            if self.specificity and entities:  # the claim's rarest words about something other than its names
                out.append(" ".join(self._specific([w for w in words if w not in entity_words])))
            elif len(keys) > 2:
                out.append(" ".join(keys[: max(2, len(keys) // 2)]))
        else:
            for category in state.categories[:2]:
                out.append(category)
        tried = set(state.search_terms)
        unique = [q for q in dict.fromkeys(q.strip() for q in out) if q and q not in tried]
        return unique[: self.per_attempt]

    def _specific(self, words_: list[str]) -> list[str]:
        """The ``specific_words`` words that score highest (the earlier on a tie), in their order."""
        assert self.specificity is not None
        scores = list(self.specificity(words_))
        best = sorted(range(len(words_)), key=lambda i: (-scores[i], i))[: self.specific_words]
        return [words_[i] for i in sorted(best)]
