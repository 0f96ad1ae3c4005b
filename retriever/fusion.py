"""Fusing ranked lists from several channels: weighted reciprocal rank fusion or weighted scores.

Fusion runs at page level (a page's best rank in each channel counts once, so one long page cannot
crowd a channel's list) and at passage level; a page is represented by its best passage, and its
other passages stay attached as further evidence.

Rank 1 (RRF): a channel's vote counts more where the channel is sure (``Promotion``). A text channel
whose first page leads its second by a wide score margin adds that margin to its rank-1 vote, and the
title channel's first page, when it names an entity of the claim exactly and early, is put first. Both
only reorder the fused top few pages; that title page, when it falls below them, is made the last of them. Then a
learned rank 1 (``retriever.rank1``, a linear model fitted on the dev claims) orders the top 5 by what every channel
says of each page. Everything else stays plain RRF (benchmarks/bench_fusion.py measures it on held-apart folds of
the dev claims).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, get_args

from retriever import rank1 as rank1_model
from wikiground.errors import ConfigError, QueryError
from wikiground.layout import CHANNELS
from wikiground.records import Hit

RRF_K = 60
# Channel weights for RRF, chosen on the dev sets (fever_dev_vital, hotpotqa_dev_multihop; see
# benchmarks/RESULTS.md): equal weight for the three strong channels, TF-IDF as a tie-breaker (it mostly
# duplicates BM25). With these, fused recall@5 is above every channel alone on both sets.
DEFAULT_WEIGHTS: Mapping[str, float] = {"title": 1.0, "dense": 1.0, "bm25": 1.0, "tfidf": 0.3, "kg": 1.0}
# The fusions a request, a server or ``--fusion`` names: RRF with the rank-1 promotion below (the default), plain
# RRF, and the channels' min-max normalised scores.
Fusion = Literal["rrf", "rrf-plain", "score"]
FUSIONS: tuple[Fusion, ...] = get_args(Fusion)
MARGIN_CHANNELS = ("bm25", "dense", "tfidf")  # channels whose scores rank texts (title and kg scores do not)


@dataclass(frozen=True, slots=True)
class Promotion:
    """How RRF's rank 1 listens to sure channels. ``margin_gain``: a text channel's rank-1 vote grows by this times
    its relative lead over its second page; ``title_protect``: the title channel's first page goes first from this
    score on (None: never); ``within``: only the fused top pages this many are reordered."""

    margin_gain: float = 0.0
    title_protect: float | None = None
    within: int = 5


# Chosen by 5-fold cross-validation on the dev claims (FEVER vital and HotpotQA; benchmarks/bench_fusion.py): the
# parameters picked on most training folds. A title score of 2.75 is an exact, direct name at the claim's start (or
# a longer one near it). Within 5: which pages make the top 5, and all below, stay those of plain RRF.
PROMOTION = Promotion(margin_gain=8.0, title_protect=2.75, within=5)
PLAIN = Promotion()  # plain RRF


def check_fusion(name: object, *, what: str = "fusion") -> Fusion:
    """A fusion's name, one of FUSIONS; else QueryError naming ``what`` and the choices."""
    if not isinstance(name, str) or name not in FUSIONS:
        raise QueryError(f"{what}: unknown fusion {str(name)[:40]!r}; choose one of {', '.join(FUSIONS)}")
    return name


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
    promotion: Promotion = PROMOTION,
    rank1: rank1_model.Rank1 | Literal["shipped"] | None = "shipped",
) -> list[FusedPage]:
    """Fuse per-channel hit lists into pages, best first (ties by page id). With RRF the ``promotion`` reorders the
    top pages, then ``rank1`` the top 5 (``retriever.rank1``; "shipped": the package's model; None: none); ``rrf-plain``
    has neither. Every claim's hits pass through here: hence one loop with the per-hit work inline."""
    if method not in FUSIONS:
        raise ValueError(f"unknown fusion method {method!r}; choose one of {', '.join(FUSIONS)}")
    if method == "rrf-plain":
        method, promotion = "rrf", PLAIN
    w = dict(DEFAULT_WEIGHTS)
    if weights:
        w.update(check_weights(weights))

    passages: dict[int, FusedPassage] = {}
    page_score: dict[int, float] = {}
    page_ranks: dict[int, dict[str, int]] = {}
    firsts: dict[str, list[Hit]] = {}  # each channel's first two pages' hits, for the rank-1 promotion
    for channel, hits in results.items():
        if not hits:
            continue
        contrib = _contributions(method, hits, w.get(channel, 1.0), rrf_k)
        page_rank, seen_pages = 0, set()
        firsts[channel] = tops = []
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
            if page_rank <= 2:
                tops.append(h)
            page_ranks.setdefault(h.page_id, {})[channel] = page_rank
            page_score[h.page_id] = page_score.get(h.page_id, 0.0) + contrib(page_rank, h.score)

    pages = _pages(passages, page_score, page_ranks)
    if method == "rrf" and promotion != PLAIN:
        _rank_top(pages, results, firsts, w, rrf_k, promotion, rank1)
    return pages


def _rank_top(pages, results, firsts, w, rrf_k: int, promotion: Promotion, rank1) -> None:
    """RRF's top pages reordered by the promotion, the title channel's exact page kept among them, then the top 5
    reordered by the learned rank 1 (in place)."""
    _promote(pages, _boosts(firsts, w, rrf_k, promotion), promotion.within)
    _keep_in_top(pages, firsts.get("title"), promotion)
    if rank1 is not None:
        rank1_model.reorder(pages, results, w, rrf_k, rank1_model.shipped() if rank1 == "shipped" else rank1)


def _boosts(
    firsts: Mapping[str, Sequence[Hit]], w: Mapping[str, float], rrf_k: int, promotion: Promotion
) -> dict[int, float]:
    """What each channel's sure rank-1 page gains: its RRF vote times the margin gain times the channel's relative
    lead over its second page (text channels), or the title channel's weight for an exact entity name."""
    out: dict[int, float] = {}
    protect = promotion.title_protect
    for channel, tops in firsts.items():
        first = tops[0]
        if channel in MARGIN_CHANNELS and len(tops) > 1 and first.score > 0:
            # To a thousandth: a dense score of a claim encoded in a batch differs from its score encoded alone in the
            # last bits, and a block of claims must answer as each claim alone does.
            lead = round((first.score - tops[1].score) / first.score, 3)
            gain = w.get(channel, 1.0) / (rrf_k + 1) * promotion.margin_gain * lead
        elif channel == "title" and protect is not None and first.score >= protect:
            gain = w.get(channel, 1.0)
        else:
            continue
        out[first.page_id] = out.get(first.page_id, 0.0) + gain
    return out


def _promote(pages: list[FusedPage], boosts: Mapping[int, float], within: int) -> None:
    """Reorder the top ``within`` pages by their score plus their boost (in place); their scores become those sums,
    so that the list stays in score order (a boost is never negative)."""
    top = pages[:within]
    if not any(p.page_id in boosts for p in top):
        return
    for p in top:
        p.score += boosts.get(p.page_id, 0.0)
    top.sort(key=lambda p: (-p.score, p.page_id))
    pages[:within] = top


def _keep_in_top(pages: list[FusedPage], title_firsts: Sequence[Hit] | None, promotion: Promotion) -> None:
    """The title channel's protected first page (an exact name at the claim's start) made the last of the top
    ``within`` when the text channels' agreement on other pages left it below (in place). It takes the last place,
    not the first: the text channels' agreement still decides rank 1, and the name's page is shown beside it. The
    bigger the corpus, the more pages share a claim's words, and the more often such a page falls below."""
    protect, within = promotion.title_protect, promotion.within
    if not title_firsts or protect is None or title_firsts[0].score < protect or len(pages) <= within:
        return
    pid = title_firsts[0].page_id
    at = next((i for i, p in enumerate(pages) if p.page_id == pid), None)
    if at is not None and at >= within:
        page = pages.pop(at)
        page.score = max(page.score, pages[within - 1].score)  # the list stays in score order (ties: as placed)
        pages.insert(within - 1, page)


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
