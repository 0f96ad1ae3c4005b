"""Bridge entities: pages that a found page points to (links, "See also", infobox values, titles named in its text),
and the pages the kg channel's paths out of it pass through or end on.

The second hop of a bridge claim is a page the claim never names; it is named by the first page.
Each bridge gets a strength from how well the sentence that names it matches the claim.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from backends.entities import find_mentions
from indexer.chunking import split_sentences
from indexer.store import Store
from retriever.multihop.terms import coverage
from wikiground.text import normalize_title

_VALUE_SPLIT = re.compile(r"\s*(?:[,;/\n•]|\band\b|\bor\b)\s*")

# How much each kind of pointer is worth before the context decides: a name in the matching text is the
# strongest hint; an infobox value answers a relation; a link outside the text or "See also" is weak.
IN_TEXT, INFOBOX, LINK_ELSEWHERE, SEE_ALSO = 1.0, 0.8, 0.35, 0.3
# A kg path is worth an infobox value when it matches the claim fully; its score is scaled by KG_FULL_SCORE (a
# 1-hop fact whose object and stating sentence both match the claim).
KG, KG_FULL_SCORE, KG_PATHS = 0.8, 1.5, 20
CONTEXT_FLOOR = 0.3  # share of the strength a pointer keeps when its sentence shares no claim word
MAX_VALUE_CHARS = 120


@dataclass(frozen=True, slots=True)
class Bridge:
    title: str
    page_id: int
    strength: float  # 0..~1.3, before the parent's own score
    parent: str
    via: str  # "text" | "link" | "infobox" | "see_also" | "kg"


def sentences(text: str) -> list[str]:
    """The text's sentences, cut as the store cuts passages into sentences."""
    return [text[a:b] for a, b in split_sentences(text)]


def _context(sents: Sequence[str], needle: str) -> str | None:
    low = needle.casefold()
    for s in sents:
        if low in s.casefold():
            return s
    return None


def find_bridges(
    store: Store,
    parents: Sequence[tuple[int, str, str]],
    claim_words: Sequence[str],
    *,
    idf: dict[str, float] | None = None,
    kg: Any | None = None,
    claim: str = "",
) -> list[Bridge]:
    """Bridges out of ``parents`` ((page_id, title, text) each), strongest first, one per (title, parent).
    With ``kg`` (the kg channel's backend), the pages its paths out of each parent pass through or end on too."""
    raw: list[tuple[str, float, str, str, int]] = []  # (string, strength, parent title, via, parent id)
    if kg is not None:
        raw.extend(kg_bridges(kg, parents, claim))
    for page_id, title, text in parents:
        sents = sentences(text)
        for m in find_mentions(text[:4000], store):
            if m.resolution is None:
                continue
            ctx = _context(sents, m.text) or ""
            raw.append((m.resolution.title, IN_TEXT * _ctx_weight(claim_words, ctx, idf), title, "text", page_id))
        for target, anchor in store.links(page_id):
            ctx = _context(sents, anchor) if anchor else None
            if ctx is None:
                raw.append((target, LINK_ELSEWHERE * CONTEXT_FLOOR, title, "link", page_id))
            else:
                raw.append((target, IN_TEXT * _ctx_weight(claim_words, ctx, idf), title, "link", page_id))
        for target in store.see_also(page_id):
            raw.append((target, SEE_ALSO * CONTEXT_FLOOR, title, "see_also", page_id))
        for _typ, key, value in store.infobox(page_id):
            ctx = f"{key.replace('_', ' ')} {value}"
            w = INFOBOX * _ctx_weight(claim_words, ctx, idf)
            for part in [value, *_VALUE_SPLIT.split(value)]:
                part = part.strip()
                if 1 < len(part) <= MAX_VALUE_CHARS and any(ch.isalpha() for ch in part):
                    raw.append((part, w, title, "infobox", page_id))
    if not raw:
        return []
    resolved = store.resolve_titles([r[0] for r in raw])
    best: dict[tuple[str, str], Bridge] = {}
    for s, strength, parent, via, parent_id in raw:
        res = resolved.get(s)
        if res is None or res.page_id == parent_id:
            continue
        key = (normalize_title(res.title), parent)
        old = best.get(key)
        if old is None or strength > old.strength:
            best[key] = Bridge(res.title, res.page_id, strength, parent, via)
    return sorted(best.values(), key=lambda b: (-b.strength, b.title, b.parent))


def kg_bridges(kg: Any, parents: Sequence[tuple[int, str, str]], claim: str) -> list[tuple[str, float, str, str, int]]:
    """(title, strength, parent title, "kg", parent id) of each page a kg path out of a parent passes through (its
    intermediate page) or ends on, scored against the claim."""
    titles = {page_id: title for page_id, title, _ in parents}
    out: list[tuple[str, float, str, str, int]] = []
    for path in kg.paths_from(titles, claim, limit=KG_PATHS * max(1, len(titles))):
        first = path.facts[0]
        strength = KG * min(1.0, path.score / KG_FULL_SCORE)
        for fact in path.facts:
            if fact.object_id is not None and fact.object_id not in titles:
                out.append((fact.object, strength, titles[first.subject_id], "kg", first.subject_id))
    return out


def _ctx_weight(claim_words: Sequence[str], ctx: str, idf: dict[str, float] | None) -> float:
    if not ctx:
        return CONTEXT_FLOOR
    return CONTEXT_FLOOR + (1.0 - CONTEXT_FLOOR) * coverage(claim_words, ctx, idf)
