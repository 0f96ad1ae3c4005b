"""Rank 1 by a learned choice among the fused top pages (issue 43).

RRF (with ``retriever.fusion``'s promotion) decides which pages make the fused top ``within`` (5); this module only
reorders them. Each of those pages is described by what every channel says of it (its page rank there, its score
against the channel's first page's, the channel's lead when it ranks the page first, whether the title channel
named it as an entity or as a concept word, the kg path's score, how many channels name it, its fused place,
whether it is a disambiguation page), and
is scored by a dot product with the weights of a small linear model (``rank1.json`` beside this module, fitted by
``benchmarks/bench_fusion.py`` on the FEVER and HotpotQA dev claims; see benchmarks/RESULTS.md). The pages are then
ordered by that score, ties in the fused order: which pages are in the top 5, and the list below it, stay as fused,
so recall at 5 and beyond cannot change.

A channel the index lacks, or one that found nothing, gives every candidate the same "absent" features (0). A
feature equal for every candidate of a claim moves no candidate, so the model ranks by the channels that are there.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wikiground.errors import ConfigError
from wikiground.layout import CHANNELS
from wikiground.records import Hit
from wikiground.text import is_disambiguation_title

MODEL_FILE = Path(__file__).with_name("rank1.json")
TEXT_CHANNELS = ("bm25", "dense", "tfidf")  # channels whose scores rank texts: a score against the first's means much
EXACT_TITLE = 2.75  # a title score from which the name is exact, direct and at the claim's start (backends/title.py)


def _channel_features(channel: str) -> tuple[str, ...]:
    names = [f"{channel}.rr", f"{channel}.first", f"{channel}.rel"]
    return (*names, f"{channel}.lead") if channel in TEXT_CHANNELS else tuple(names)


# Every feature, in the order rows hold them (a model names each one; see ``load``).
FEATURES: tuple[str, ...] = (
    *(name for c in CHANNELS for name in _channel_features(c)),
    "title.exact",
    "title.named",
    "title.concept",
    "title.rr_per",
    "kg.rr_per",
    "text.best",
    "fused.rr",
    "fused.rel",
    "plain.first",
    "n.channels",
    "page.disambiguation",
)


@dataclass(frozen=True, slots=True)
class Rank1:
    """A linear model of rank 1: one weight per feature (``FEATURES``' order); ``within``: the fused top pages it
    reorders; ``fitted_on``: what it was fitted on, as its file says."""

    weights: tuple[float, ...]
    within: int = 5
    fitted_on: str = ""


def load(path: Path | str) -> Rank1:
    """A model file read and checked: a JSON object with ``weights`` naming every feature of ``FEATURES`` (and no
    other) with a finite number, ``within`` from 1 to 21; else ConfigError saying what is wrong."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ConfigError(f"rank-1 model {path}: cannot read it as JSON ({e})") from None
    if not isinstance(data, dict) or not isinstance(data.get("weights"), dict):
        raise ConfigError(f"rank-1 model {path}: expected an object with a 'weights' object")
    given: dict[str, Any] = data["weights"]
    missing = [f for f in FEATURES if f not in given]
    unknown = [f for f in given if f not in FEATURES]
    if missing or unknown:
        raise ConfigError(
            f"rank-1 model {path}: weights must name every feature of retriever.rank1.FEATURES; "
            f"missing {', '.join(missing) or 'none'}; unknown {', '.join(unknown) or 'none'}"
        )
    bad = [f for f, v in given.items() if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v)]
    if bad:
        raise ConfigError(f"rank-1 model {path}: weights must be finite numbers: {', '.join(bad)}")
    within = data.get("within", 5)
    if isinstance(within, bool) or not isinstance(within, int) or not 1 <= within <= 21:
        raise ConfigError(f"rank-1 model {path}: within must be a whole number from 1 to 21, got {within!r}")
    return Rank1(tuple(float(given[f]) for f in FEATURES), within, str(data.get("fitted_on", "")))


@functools.cache
def shipped() -> Rank1:
    """The model shipped beside this module (read once)."""
    return load(MODEL_FILE)


def _channel_view(hits: Sequence[Hit], depth: int) -> tuple[dict[int, float], float, float]:
    """The best score of each of a channel's first ``depth`` pages (at least 2), and its first and second pages'."""
    scores: dict[int, float] = {}
    depth = max(depth, 2)
    for h in hits:
        if h.page_id not in scores:
            scores[h.page_id] = h.score
            if len(scores) >= depth:
                break
    firsts = [*list(scores.values())[:2], 0.0, 0.0]
    return scores, firsts[0], firsts[1]


def _per_channel(channel: str, rank: int | None, score: float | None, first: float, second: float) -> list[float]:
    """A page's features in one channel (``_channel_features``): all 0 where the channel does not name it."""
    text = channel in TEXT_CHANNELS
    if rank is None or score is None:
        return [0.0] * (4 if text else 3)
    if not text:
        return [1.0 / rank, float(rank == 1), score]
    rel = score / first if first > 0 else 0.0
    # To a thousandth, as the promotion's lead: a claim's dense scores differ in the last bits batch to batch.
    lead = round((first - second) / first, 3) if rank == 1 and first > 0 else 0.0
    return [1.0 / rank, float(rank == 1), rel, lead]


def features(
    results: Mapping[str, Sequence[Hit]], top: Sequence[Any], weights: Mapping[str, float], rrf_k: int
) -> list[list[float]]:
    """One row of ``FEATURES`` per page of ``top`` (``retriever.fusion.FusedPage``s, in fused order)."""
    depth = {c: max((p.ranks.get(c, 0) for p in top), default=0) for c in CHANNELS}  # the deepest candidate's rank
    views = {c: _channel_view(results[c], depth[c]) for c in CHANNELS if results.get(c)}
    plain = [sum(weights.get(c, 1.0) / (rrf_k + r) for c, r in p.ranks.items()) for p in top]
    plain_first = max(range(len(top)), key=lambda i: (plain[i], -i)) if top else -1
    n_named = {c: len({h.page_id for h in results.get(c, ())}) if depth[c] else 0 for c in ("title", "kg")}
    top_score = top[0].score if top and top[0].score > 0 else 1.0
    rows = []
    for i, p in enumerate(top):
        row: list[float] = []
        for c in CHANNELS:
            view = views.get(c)
            score = view[0].get(p.page_id) if view else None
            row += _per_channel(c, p.ranks.get(c), score, *(view[1:] if view else (0.0, 0.0)))
        title = views["title"][0].get(p.page_id) if "title" in views and "title" in p.ranks else None
        text_ranks = [p.ranks[c] for c in TEXT_CHANNELS if c in p.ranks]
        row += [
            float(title is not None and title >= EXACT_TITLE),
            float(title is not None and title > 0),  # a named entity (a concept word scores 0 or less)
            float(title is not None and title <= 0),
            1.0 / p.ranks["title"] / n_named["title"] if title is not None else 0.0,
            1.0 / p.ranks["kg"] / n_named["kg"] if "kg" in p.ranks and n_named["kg"] else 0.0,
            1.0 / min(text_ranks) if text_ranks else 0.0,
            1.0 / (i + 1),
            p.score / top_score,
            float(i == plain_first),
            len(p.ranks) / len(CHANNELS),
            # A list of senses whose lead repeats the claim's words: the text channels can rank it first.
            float(is_disambiguation_title(p.best.title)),
        ]
        rows.append(row)
    return rows


def reorder(
    pages: list[Any], results: Mapping[str, Sequence[Hit]], weights: Mapping[str, float], rrf_k: int, model: Rank1
) -> None:
    """The top ``model.within`` pages ordered by the model's score, ties in their fused order (in place). They keep
    the top's scores, highest first, so that the list stays in score order; the pages below are not touched."""
    top = pages[: model.within]
    if len(top) < 2:
        return
    scored = [sum(w * x for w, x in zip(model.weights, row)) for row in features(results, top, weights, rrf_k)]
    order = sorted(range(len(top)), key=lambda i: (-scored[i], i))
    if order == list(range(len(top))):
        return
    scores = [p.score for p in top]
    for place, i in enumerate(order):
        pages[place] = top[i]
        top[i].score = scores[place]
