"""Fusing ranked lists from several channels: weighted reciprocal rank fusion or weighted scores.

Fusion runs at page level (a page's best rank in each channel counts once, so one long page cannot
crowd a channel's list) and at passage level; a page is represented by its best passage, and its
other passages stay attached as further evidence.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from wikiground.errors import ConfigError
from wikiground.layout import CHANNELS
from wikiground.records import Hit

RRF_K = 60
# Channel weights for RRF, chosen on the dev sets (fever_dev_vital, hotpotqa_dev_multihop; see
# benchmarks/RESULTS.md): equal weight for the three strong channels, TF-IDF as a tie-breaker (it mostly
# duplicates BM25). With these, fused recall@5 is above every channel alone on both sets.
DEFAULT_WEIGHTS: Mapping[str, float] = {"title": 1.0, "dense": 1.0, "bm25": 1.0, "tfidf": 0.3, "kg": 1.0}
FUSION_METHODS = ("rrf", "score")


MAX_WEIGHT = 1000.0  # a channel weight beyond this drowns the others: a typo, not a choice


def check_weights(weights: Mapping[str, float] | None) -> dict[str, float]:
    """Channel weights checked: known channels, finite numbers from 0 to MAX_WEIGHT; else ConfigError."""
    out: dict[str, float] = {}
    for name, value in (weights or {}).items():
        if name not in CHANNELS:
            raise ConfigError(f"weights: unknown channel {name!r}; choose from {', '.join(CHANNELS)}")
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise ConfigError(f"weights: {name} must be a number, got {value!r}")
        if not math.isfinite(value) or not 0 <= value <= MAX_WEIGHT:
            raise ConfigError(f"weights: {name} must be a finite number from 0 to {MAX_WEIGHT:g}, got {value!r}")
        out[name] = float(value)
    return out


@dataclass(slots=True)
class FusedPassage:
    passage_id: int
    page_id: int
    score: float
    ranks: dict[str, int] = field(default_factory=dict)
    scores: dict[str, float] = field(default_factory=dict)
    matched: str | None = None
    title: str = ""
    triples: tuple = ()  # the kg path that led to this passage (Hit.triples)
    stated: str | None = None  # the sentence or infobox row of this passage stating the path's last fact


@dataclass(slots=True)
class FusedPage:
    page_id: int
    score: float
    best: FusedPassage
    ranks: dict[str, int] = field(default_factory=dict)  # the page's best rank per channel
    passages: list[FusedPassage] = field(default_factory=list)  # all its passages, best first


def _contributions(method: str, hits: Sequence[Hit], cw: float, rrf_k: int) -> Callable[[int, float], float]:
    """A channel's contribution for a rank and score: weighted RRF, or its min-max normalised score (a single-hit
    channel counts fully)."""
    if method == "rrf":
        return lambda rank, score: cw * (1.0 / (rrf_k + rank))
    lo = min(h.score for h in hits)
    hi = max(h.score for h in hits)
    if hi <= lo:
        return lambda rank, score: cw * 1.0
    return lambda rank, score: cw * ((score - lo) / (hi - lo))


def _passage_order(p: FusedPassage) -> tuple[float, int, int]:
    return (-p.score, min(p.ranks.values()), p.passage_id)


def fuse(
    results: Mapping[str, Sequence[Hit]],
    *,
    weights: Mapping[str, float] | None = None,
    method: str = "rrf",
    rrf_k: int = RRF_K,
) -> list[FusedPage]:
    """Fuse per-channel hit lists into pages, best first (deterministic tie-break by page id).

    Every claim's hits pass through here, a few hundred of them: hence one loop with the per-hit work inline."""
    if method not in FUSION_METHODS:
        raise ValueError(f"unknown fusion method {method!r}; choose one of {', '.join(FUSION_METHODS)}")
    w = dict(DEFAULT_WEIGHTS)
    if weights:
        w.update(check_weights(weights))

    passages: dict[int, FusedPassage] = {}
    page_score: dict[int, float] = {}
    page_ranks: dict[int, dict[str, int]] = {}
    for channel, hits in results.items():
        if not hits:
            continue
        contrib = _contributions(method, hits, w.get(channel, 1.0), rrf_k)
        page_rank = 0
        seen_pages: set[int] = set()
        for h in hits:
            # The hit counts towards its passage (once per channel) ...
            fp = passages.get(h.passage_id)
            if fp is None:
                fp = passages[h.passage_id] = FusedPassage(h.passage_id, h.page_id, 0.0, title=h.title)
            if channel not in fp.ranks:
                fp.ranks[channel] = h.rank
                fp.scores[channel] = h.score
                fp.score += contrib(h.rank, h.score)
            if h.matched and not fp.matched:
                fp.matched = h.matched
            if not fp.title and h.title:
                fp.title = h.title
            if h.triples and not fp.triples:
                fp.triples, fp.stated = h.triples, h.stated
            # ... and, the first time the channel names the page, towards the page at the page's own rank.
            if h.page_id in seen_pages:
                continue
            seen_pages.add(h.page_id)
            page_rank += 1
            page_ranks.setdefault(h.page_id, {})[channel] = page_rank
            page_score[h.page_id] = page_score.get(h.page_id, 0.0) + contrib(page_rank, h.score)

    return _pages(passages, page_score, page_ranks)


def _pages(
    passages: Mapping[int, FusedPassage], page_score: Mapping[int, float], page_ranks: Mapping[int, dict[str, int]]
) -> list[FusedPage]:
    """The fused passages gathered into their pages, best first; each page's passages best first."""
    by_page: dict[int, list[FusedPassage]] = {}
    for fp in passages.values():
        by_page.setdefault(fp.page_id, []).append(fp)
    pages: list[FusedPage] = []
    for pid, plist in by_page.items():
        best = plist[0]
        if len(plist) > 1:  # most pages have one passage among the hits
            plist.sort(key=_passage_order)
            best = plist[0]
            # A title-channel match names the entity: carry it to the page's representative passage.
            if not best.matched:
                best.matched = next((p.matched for p in plist if p.matched), None)
        pages.append(FusedPage(pid, page_score[pid], best, page_ranks[pid], plist))
    pages.sort(key=lambda p: (-p.score, p.page_id))
    return pages
