"""Claim terms: content words, clauses, years and dates, relation words (no model, deterministic)."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence

from backends.entities import STOPWORDS
from wikiground.text import words

# Question words and fillers of claims/questions: never worth a query term.
FILLERS = frozenset(
    """what which who whom whose when where why how name named called known famous also well many much
    person people thing something someone year years time""".split()
)
_MONTHS = "January|February|March|April|May|June|July|August|September|October|November|December"
_DATE = re.compile(rf"\b(?:(?:{_MONTHS})\s+\d{{1,2}}(?:,\s*\d{{4}})?|\d{{1,2}}\s+(?:{_MONTHS})(?:\s+\d{{4}})?)\b")
_YEAR = re.compile(r"\b(1[0-9]{3}|20[0-9]{2})s?\b")
# Split a claim into clauses at punctuation, relative pronouns and conjunctions that start a new predicate.
_CLAUSE_SPLIT = re.compile(
    r"\s*(?:[,;:?!()\"]|\s-\s|\b(?:who|whom|whose|which|that|where|when|while|and|but|than)\b)\s*", re.I
)
# Relational qualifiers that pick one facet of an entity (its season, its director, its birthplace ...).
RELATION_WORDS = frozenset(
    """born birth birthplace died death founded founder founders established created creator directed director
    produced producer written writer wrote author authored novel book album song single film movie series season
    team club league played plays player coach captain member members band group formed debut released
    release starring starred actor actress cast role portrayed character wife husband spouse married daughter son
    father mother brother sister parent children family capital city town county state country located location
    headquarters headquartered based river mountain island university college school school's company owned
    owner parent subsidiary award won prize nominated elected president minister governor mayor senator position
    office party population area language nationality citizenship genre label record records station network
    channel aired premiered episode game games championship tournament stadium arena home venue built designed
    architect""".split()
)


def content_words(text: str) -> list[str]:
    """Lower-cased words without stopwords, fillers and one-letter tokens; in order, unique."""
    return list(dict.fromkeys(w for w in words(text) if len(w) > 1 and w not in STOPWORDS and w not in FILLERS))


def clauses(text: str, *, min_words: int = 2) -> list[str]:
    """The claim's clauses with at least ``min_words`` content words, longest first (ties: in order)."""
    parts = [p.strip() for p in _CLAUSE_SPLIT.split(text) if p and p.strip()]
    keep = [p for p in parts if len(content_words(p)) >= min_words]
    order = sorted(range(len(keep)), key=lambda i: (-len(content_words(keep[i])), i))
    return list(dict.fromkeys(keep[i] for i in order))


def temporal_qualifiers(text: str) -> list[str]:
    """Dates, then years, as written in the claim (unique, in order)."""
    found = [m.group() for m in _DATE.finditer(text)]
    found += [m.group() for m in _YEAR.finditer(text) if not any(m.group() in d for d in found)]
    return list(dict.fromkeys(found))


def relation_qualifiers(text: str, *, exclude: Iterable[str] = ()) -> list[str]:
    """Relation words of the claim first, then its other content words (longest first), minus ``exclude``."""
    skip = {w for e in exclude for w in words(e)}
    cws = [w for w in content_words(text) if w not in skip and not w.isdigit()]
    rel = [w for w in cws if w in RELATION_WORDS]
    other = sorted((w for w in cws if w not in RELATION_WORDS), key=lambda w: (-len(w), cws.index(w)))
    return rel + other


def coverage(wanted: Sequence[str], text: str, idf: dict[str, float] | None = None) -> float:
    """Weighted share of ``wanted`` words present in ``text`` (0..1)."""
    if not wanted:
        return 0.0
    have = set(words(text))
    w = idf or {}
    total = sum(w.get(t, 1.0) for t in wanted)
    return sum(w.get(t, 1.0) for t in wanted if t in have) / total if total else 0.0


def pool_idf(wanted: Sequence[str], texts: Sequence[str]) -> dict[str, float]:
    """IDF of the claim's words over the candidate pool: a word every candidate shares tells nothing apart."""
    n = len(texts)
    sets = [set(words(t)) for t in texts]
    return {w: math.log(1.0 + (n + 1) / (1 + sum(w in s for s in sets))) for w in wanted}
