"""Relevance between retrieval attempts: a pluggable scorer, with a default that needs no model."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from wikiground.text import words

STOPWORDS = frozenset(
    """
a about above after again against all also am an and any are as at be been before being below between both but by
can could did do does doing down during each few for from further had has have having he her here hers him his how
i if in into is it its itself just me more most my no nor not now of off on once only or other our out over own same
she should so some such than that the their them then there these they this those through to too under until up
very was we were what when where which while who whom why will with would you your yours
is was were been has had have did does do one two first known called named
""".split()
)


def content_words(text: str) -> list[str]:
    """Lower-cased words minus stopwords and one-letter tokens, in order, unique."""
    return list(dict.fromkeys(w for w in words(text) if w not in STOPWORDS and len(w) > 1))


class RelevanceScorer(Protocol):
    """Scores texts against a claim, higher = more relevant; the default's range is [0, 1]."""

    def score(self, claim: str, texts: Sequence[str]) -> list[float]: ...


class OverlapScorer:
    """Share of the claim's content words found in the text (numbers and names count like any word)."""

    def score(self, claim: str, texts: Sequence[str]) -> list[float]:
        wanted = set(content_words(claim))
        if not wanted:
            return [0.0 for _ in texts]
        return [len(wanted & set(words(t))) / len(wanted) for t in texts]


class FunctionScorer:
    """Adapts the local retriever's ``score_texts(query, texts) -> list[float]`` (TF-IDF or dense)."""

    def __init__(self, score_texts: Callable[[str, Sequence[str]], Sequence[float]]):
        self._fn = score_texts

    def score(self, claim: str, texts: Sequence[str]) -> list[float]:
        return [float(s) for s in self._fn(claim, list(texts))] if texts else []
