"""Entity mentions of a claim: n-grams matched against local titles and redirects, plus capitalised spans.

A mention that resolves to a local page feeds the title channel; a capitalised span that resolves to
nothing is a *missing* entity, the only thing the live fallback may look up.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from retriever.text import normalize_title, words

if TYPE_CHECKING:
    from retriever.store import Resolution, Store

_TOKEN = re.compile(r"\w+(?:[’'.\-&]\w+)*", re.UNICODE)
_POSSESSIVE = re.compile(r"['’]s?$")

STOPWORDS = frozenset(
    """a an the and or but nor of in on at to for from by with without into onto over under about as is
    are was were be been being has have had do does did not no yes it its it's this that these those he
    she they them his her their him we us our you your i me my mine who whom whose which what when where
    why how than then there here also only just very more most less least some any all each every both
    either neither one can could may might must shall should will would after before during while since
    until upon within among between through against along across behind beyond near off out up down so
    such same other another own if else s""".split()
)
# Connectors allowed inside a capitalised span: "Alexander the Great", "Bank of America".
_CONNECTORS = frozenset({"of", "the", "de", "la", "le", "von", "van", "der", "du", "da", "di", "&", "y", "del"})


@dataclass(frozen=True, slots=True)
class Mention:
    text: str
    start: int  # character offsets in the claim
    end: int
    resolution: Resolution | None = None

    @property
    def resolved(self) -> bool:
        return self.resolution is not None


def _tokens(claim: str) -> list[tuple[str, int, int]]:
    return [(m.group(), m.start(), m.end()) for m in _TOKEN.finditer(claim)]


def _is_cap(tok: str) -> bool:
    return tok[:1].isupper() or tok[:1].isdigit()


def _candidate_spans(toks: list[tuple[str, int, int]], max_ngram: int) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    n = len(toks)
    for i in range(n):
        first = toks[i][0]
        if first.lower() in STOPWORDS and not _is_cap(first):
            continue
        for j in range(i + 1, min(n, i + max_ngram) + 1):
            last = toks[j - 1][0]
            if last.lower() in STOPWORDS and not (j - i == 1 and _is_cap(last) and i > 0):
                continue
            words_ = [t[0] for t in toks[i:j]]
            if j - i == 1:
                # A single word must look like a name: capitalised mid-sentence, or any capitalised/digit word
                # that is not a sentence-initial function word ("The", "In").
                if not _is_cap(first) or first.lower() in STOPWORDS:
                    continue
            elif not any(_is_cap(w) for w in words_) and (j - i) < 2:
                continue
            spans.append((i, j))
    return spans


def find_mentions(claim: str, store: Store, *, max_ngram: int = 8) -> list[Mention]:
    """Non-overlapping entity mentions, longest first; unresolved capitalised spans included."""
    toks = _tokens(claim)
    if not toks:
        return []
    spans = _candidate_spans(toks, max_ngram)
    texts: dict[tuple[int, int], list[str]] = {}
    for i, j in spans:
        s = claim[toks[i][1] : toks[j - 1][2]]
        variants = [s]
        stripped = _POSSESSIVE.sub("", s)
        if stripped and stripped != s:
            variants.append(stripped)
        texts[(i, j)] = variants
    resolved = store.resolve_titles([v for vs in texts.values() for v in vs])

    chosen: list[tuple[int, int, Resolution]] = []
    taken = [False] * len(toks)
    # Longest span first; exact matches before loose ones; then leftmost.
    order = sorted(
        ((i, j, res) for (i, j), vs in texts.items() for v in vs if (res := resolved.get(v)) is not None),
        key=lambda x: (-(x[1] - x[0]), not x[2].exact, x[0]),
    )
    for i, j, res in order:
        if any(taken[i:j]):
            continue
        # Loose single lowercase-initial matches are too noisy to keep ("may" -> "MAY").
        if j - i == 1 and not res.exact and not _is_cap(toks[i][0]):
            continue
        chosen.append((i, j, res))
        for t in range(i, j):
            taken[t] = True

    mentions = [Mention(claim[toks[i][1] : toks[j - 1][2]], toks[i][1], toks[j - 1][2], res) for i, j, res in chosen]
    for i, j in capitalised_spans(toks):
        text = claim[toks[i][1] : toks[j - 1][2]]
        key = normalize_title(_POSSESSIVE.sub("", text))
        if any(m.resolution is not None and normalize_title(m.text) == key for m in mentions):
            continue
        if all(taken[i:j]):
            continue
        mentions.append(Mention(_POSSESSIVE.sub("", text), toks[i][1], toks[j - 1][2], None))
    mentions.sort(key=lambda m: (m.start, -m.end))
    return mentions


def capitalised_spans(toks: Sequence[tuple[str, int, int]]) -> list[tuple[int, int]]:
    """Maximal runs of capitalised tokens, joined by connectors ("Alexander the Great")."""
    out: list[tuple[int, int]] = []
    i, n = 0, len(toks)
    while i < n:
        tok = toks[i][0]
        if not _is_cap(tok) or (i == 0 and tok.lower() in STOPWORDS):
            i += 1
            continue
        j = i + 1
        while j < n:
            if _is_cap(toks[j][0]):
                j += 1
            elif toks[j][0].lower() in _CONNECTORS and j + 1 < n and _is_cap(toks[j + 1][0]):
                j += 2
            else:
                break
        # A lone capitalised word at the start of the claim is usually just sentence case.
        if not (j - i == 1 and i == 0 and toks[i][0].lower() in STOPWORDS):
            if not (j - i == 1 and tok.isdigit()):
                out.append((i, j))
        i = j
    return out


# Dates and quantities ("June 12, 1875", "3103 BC", "8th", "1992-93") are capitalised spans, not entities.
_QUANTITY_TOKEN = re.compile(r"^\d[\d,.]*(?:st|nd|rd|th|s)?$")
_CALENDAR = frozenset(
    """january february march april may june july august september october november december
    jan feb mar apr jun jul aug sep sept oct nov dec bc ad bce ce""".split()
)
# A capitalised run can swallow a list or a quotation ("England, Fireflight"): each piece is judged alone.
_PIECES = re.compile(r"""[,;:"“”()]|\s['‘’](?=\w)|(?<=\w)['‘’]\s""")
COVER_DEPTH = 10  # how many top local evidence items may cover a mention


def _stem(word: str) -> str:
    """Crude plural folding, enough for "Touchscreens" ~ "Touchscreen"."""
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


def _name_words(text: str) -> set[str]:
    """A mention's identifying words: no function words, no dates or numbers, plurals folded."""
    out = set()
    for w in words(text):
        if w in STOPWORDS or w in _CALENDAR or _QUANTITY_TOKEN.match(w):
            continue
        out.add(_stem(w))
    return out


def is_quantity(text: str) -> bool:
    """True for dates, years, counts and ordinals: spans made only of numbers and calendar words."""
    toks = words(text)
    return bool(toks) and all(_QUANTITY_TOKEN.match(t) or t in _CALENDAR for t in toks)


def missing_entities(
    mentions: Sequence[Mention],
    *,
    covered_text: str = "",
    covered: Sequence[tuple[str, str]] = (),
    depth: int = COVER_DEPTH,
) -> list[str]:
    """Unresolved mentions the local index has nothing for: the only names the live fallback may look up.

    ``covered`` is the top local evidence as (title, text) pairs, best first (``covered_text`` is one more
    text). An unresolved mention is still *known locally*, and never looked up, when it is
    - a date or quantity, not an entity;
    - named by a top evidence title (its words within the title's: "Big Stone Gap" ~ "Big Stone Gap (film)");
    - or, if the claim has at least one resolved entity, present in one top evidence item's title and text
      (all its words in that item). Without a resolved anchor the local index knows none of the claim's
      entities, and a name merely mentioned in passing is not its page, so it is looked up.
    """
    items = [(t or "", x or "") for t, x in list(covered)[:depth]]
    if covered_text:
        items.append(("", covered_text))
    title_words = [{_stem(w) for w in words(t)} for t, _ in items]
    item_words = [tw | {_stem(w) for w in words(x)} for tw, (_, x) in zip(title_words, items)]
    lowered = [x.casefold() for _, x in items]
    anchored = any(m.resolved for m in mentions)

    def known(piece: str) -> bool:
        if is_quantity(piece):
            return True
        name = _name_words(piece)
        if not name:
            return True
        if any(name <= tw for tw in title_words):
            return True
        return anchored and (any(name <= iw for iw in item_words) or any(piece.casefold() in low for low in lowered))

    out: list[str] = []
    for m in mentions:
        if m.resolved or m.text in out:
            continue
        pieces = [p.strip() for p in _PIECES.split(m.text) if p and p.strip()]
        if all(known(p) for p in pieces or [m.text]):
            continue
        out.append(m.text)
    return out
