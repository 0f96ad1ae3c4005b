"""Triples of the knowledge-graph channel, taken from a parsed page's own structure.

A page's facts come as columns (:class:`PageTriples`: relation, object title, source, chunk, page sentence), where
the source is ``infobox``, ``link``, ``see_also`` or ``category`` and the chunk/sentence say where the fact is
stated. The store writer stages them and turns them into ``triples`` rows; object pages are resolved there, after
redirects.

Infobox relations are normalised (``birthplace``, ``place_of_birth`` -> ``birth_place``). The cleaner renders an
infobox value to plain text, so its links are read from the value's wikitext, which the cleaner keeps (nested
templates expanded as the page shows them): a value holding several links gives one triple per link. A link in
the running text is ``mentions``, kept with the sentence holding it.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from functools import lru_cache
from typing import NamedTuple

from indexer.parsed import ParsedChunk, ParsedPage
from wikiground.text import canonical_title

MENTIONS = "mentions"
SEE_ALSO = "see_also"
CATEGORY = "category"
SOURCES = ("infobox", "link", "see_also", "category")  # staged as their index (PageTriples.sources)
_INFOBOX, _LINK, _SEE_ALSO, _CATEGORY = range(len(SOURCES))
RELATION_OF_SOURCE = {"link": MENTIONS, "see_also": SEE_ALSO, "category": CATEGORY}  # infobox facts have their own
_NO_END = 1 << 62  # sorts after every sentence end (link_triples' bisect over (start, end) pairs)
MAX_VALUE_CHARS = 80  # a plain infobox value longer than this is prose, not an entity
MAX_LINKS_PER_VALUE = 20  # a value listing more is a navigation list

_SEPARATORS = re.compile(r"[\s\-]+")
_TRAILING_NUMBER = re.compile(r"_?\d+$")
_OF_FORM = re.compile(r"^(place|date|year|city|country|cause)_of_([a-z]+)$")
_GLUED = re.compile(r"^(birth|death|burial|resting)(place|date)$")
# Aliases no rule above covers; keys map to the one relation the claims phrase ("was born in").
_ALIASES = {
    "born": "birth_date",
    "died": "death_date",
    "birth_city": "birth_place",
    "death_city": "death_place",
    "hometown": "origin",
    "genres": "genre",
    "occupations": "occupation",
    "spouses": "spouse",
    "labels": "label",
    "associated_acts": "associated_acts",
    "influenced_by": "influences",
    "resting_place": "burial_place",
}
# Keys that hold layout, media or references, never a fact about the subject.
_LAYOUT_KEY = re.compile(
    r"(?:image|caption|alt|size|width|height|upright|style|colou?r|signature|logo|map|footnotes|module|embed|"
    r"website|url|coordinates|coords|_ref|^ref|pushpin|label_position|mark)",
    re.IGNORECASE,
)
_DATE_LIKE = re.compile(
    r"^(?:\d{1,4}(?:\s*(?:BC|BCE|AD|CE|s))?|(?:January|February|March|April|May|June|July|August|September|"
    r"October|November|December)(?:\s+\d{1,2})?|\d{1,2}\s+\w+|\d{1,4}s?\s+in\s+.+|Circa|C\.)$"
)
_VALUE_SPLIT = re.compile(r"\s*(?:[,;/\n•]|\band\b|\bor\b)\s*")
_RAW_LINK = re.compile(r"\[\[([^\[\]|]*)(?:\|[^\[\]]*)?\]\]")
_SKIP_PREFIXES = frozenset({"file", "image", "media", "category", "wikt", "wiktionary", "commons", "s", "q", "w"})


@lru_cache(maxsize=65536)  # infobox keys repeat across pages
def _fact_relation(key: str) -> str | None:
    """The relation an infobox key states, None for a key of layout, media or references."""
    return None if _LAYOUT_KEY.search(key) else normalise_relation(key)


@lru_cache(maxsize=65536)
def normalise_relation(key: str) -> str:
    """One name per relation: ``birth_place``, ``birthplace``, ``place_of_birth``, ``Birth place`` are one."""
    k = _SEPARATORS.sub("_", key.strip().casefold()).strip("_")
    k = _TRAILING_NUMBER.sub("", k) or k
    m = _OF_FORM.match(k)
    if m:
        k = f"{m.group(2)}_{m.group(1)}"
    m = _GLUED.match(k)
    if m:
        k = f"{m.group(1)}_{m.group(2)}"
    return _ALIASES.get(k, k)


def link_relation(relation: str, target: str) -> str:
    """The relation of a page linked in an infobox value: a place linked inside a date (``birth_date = 384 BC
    [[Stagira]]``, a common way to give both) is the matching ``_place``."""
    if relation.endswith("_date") and not _DATE_LIKE.match(target):
        return relation[: -len("_date")] + "_place"
    return relation


def _link_targets(value: str) -> list[str]:
    out: list[str] = []
    for m in _RAW_LINK.finditer(value):
        target = m.group(1).split("#", 1)[0].strip()
        if ":" in target:
            prefix = target.split(":", 1)[0].strip().casefold()
            if prefix in _SKIP_PREFIXES or len(prefix) <= 3:
                continue
        target = canonical_title(target)
        if target and target not in out:
            out.append(target)
    return out[:MAX_LINKS_PER_VALUE]


def infobox_link_targets(parsed: ParsedPage) -> dict[str, list[str]]:
    """Key (as written) -> the titles its value links to, over every infobox of the page."""
    found: dict[str, list[str]] = {}
    for key, value in parsed.infobox_links:
        targets = _link_targets(value)
        if targets:
            found.setdefault(key, []).extend(targets)
    return found


def _sentence_starts(chunks: Sequence[ParsedChunk]) -> list[int]:
    """Page-level number of each chunk's first sentence (as the store numbers them)."""
    starts, n = [], 0
    for chunk in chunks:
        starts.append(n)
        n += len(chunk.sentences)
    return starts


def _info_rows(chunks: Sequence[ParsedChunk], starts: Sequence[int]) -> dict[str, tuple[int, int]]:
    """Infobox line label ("birth date") -> (chunk index, page sentence) of the line that states it."""
    rows: dict[str, tuple[int, int]] = {}
    for i, chunk in enumerate(chunks):
        if chunk.source != "info":
            continue
        for j, (a, b) in enumerate(chunk.sentences):
            line = chunk.text[a:b]
            colon = line.find(": ")
            if colon > 0:
                rows.setdefault(line[:colon].casefold(), (i, starts[i] + j))
    return rows


def infobox_triples(parsed: ParsedPage, chunks: Sequence[ParsedChunk], starts: Sequence[int]) -> Iterator[tuple]:
    """``(relation, object, chunk, sentence)`` of the infobox fields: one per linked title, else one per short
    plain value."""
    if not parsed.infoboxes:
        return
    links = infobox_link_targets(parsed)
    where = _info_rows(chunks, starts)
    seen: set[tuple[str, str]] = set()
    linked: set[str] = set()  # keys whose link targets (those of all of the key's repeats) were given once
    for _kind, pairs in parsed.infoboxes:
        for key, value in pairs:
            relation = _fact_relation(key)
            if relation is None or key in linked:
                continue
            chunk, sentence = where.get(key.replace("_", " ").casefold(), (None, None))
            targets = links.get(key)
            if targets:
                linked.add(key)
                objects = [(link_relation(relation, t), t) for t in targets]
            else:
                parts = [p.strip() for p in _VALUE_SPLIT.split(value)]
                objects = [
                    (relation, p) for p in parts if 1 < len(p) <= MAX_VALUE_CHARS and any(c.isalpha() for c in p)
                ]
            for rel, obj in objects:
                if (rel, obj) not in seen:
                    seen.add((rel, obj))
                    yield (rel, obj, chunk, sentence)


def link_triples(
    parsed: ParsedPage, chunks: Sequence[ParsedChunk], starts: Sequence[int]
) -> tuple[list[str], list[int | None], list[int | None]]:
    """The ``mentions`` facts as columns: each linked title (its first link), and the chunk and page sentence that
    hold the link (None when its anchor is not found in the section's text).

    Links come in text order, so each section's anchors are looked for from where the last one was found on."""
    by_section: dict[int, list[int]] = {}
    for i, chunk in enumerate(chunks):
        if chunk.source == "text":
            by_section.setdefault(chunk.section_index, []).append(i)
    texts = [chunk.text for chunk in chunks]
    cursor: dict[int, tuple[int, int]] = {}  # section -> (position in its chunk list, offset) of the last link
    out: list[tuple[str, int | None, int | None]] = []
    seen: set[str] = set()
    current, order, pos, offset, text = None, None, 0, 0, ""
    for target, anchor, section in parsed.links:
        if target in seen:
            continue
        seen.add(target)
        if section != current:
            if current is not None:
                cursor[current] = (pos, offset)
            current, order = section, by_section.get(section)
            pos, offset = cursor.get(section, (0, 0))
            text = texts[order[pos]] if order else ""
        at = text.find(anchor, offset) if anchor else -1  # nearly always in the same chunk
        if at < 0:
            found = _locate(texts, order, (pos, offset), anchor) if order and anchor else None
            if found is None:
                out.append((target, None, None))
                continue
            pos, at = found
            text = texts[order[pos]]  # type: ignore[index]
        offset = at
        chunk = order[pos]  # type: ignore[index]
        # The sentences (start, end) that start at or before the anchor, the last of them holding it.
        j = bisect_right(chunks[chunk].sentences, (at, _NO_END)) - 1
        out.append((target, chunk, starts[chunk] + (j if j > 0 else 0)))
    if not out:
        return [], [], []
    objects, in_chunk, in_sentence = zip(*out)
    return list(objects), list(in_chunk), list(in_sentence)


def _locate(texts: Sequence[str], order: Sequence[int], at: tuple[int, int], anchor: str) -> tuple[int, int] | None:
    """(position in ``order``, offset) of ``anchor`` in the chunks ``order`` lists, from ``at`` on, else from the
    section's start (a link out of order)."""
    pos, offset = at
    n = len(order)
    while pos < n:
        found = texts[order[pos]].find(anchor, offset)
        if found >= 0:
            return pos, found
        pos, offset = pos + 1, 0
    if at == (0, 0):
        return None
    return _locate(texts, order, (0, 0), anchor)


class PageTriples(NamedTuple):
    """A page's facts as columns, the way the store stages them: ``relation`` is given for infobox facts only (the
    others' relation is their source's, :data:`RELATION_OF_SOURCE`), ``source`` is an index into :data:`SOURCES`,
    ``chunk`` / ``sentence`` say where the fact is stated (None when no passage states it)."""

    relations: list[str | None]
    objects: list[str]
    sources: list[int]
    chunks: list[int | None]
    sentences: list[int | None]


def page_triples(parsed: ParsedPage, chunks: Sequence[ParsedChunk]) -> PageTriples:
    """Every fact of one page: infobox fields, links with their sentence, "See also", categories."""
    starts = _sentence_starts(chunks)
    info = list(infobox_triples(parsed, chunks, starts))
    linked, link_chunks, link_sentences = link_triples(parsed, chunks, starts)
    see_also = list(dict.fromkeys(parsed.see_also))
    categories = list(dict.fromkeys(parsed.categories))
    n_info, n_links, n_see, n_cat = len(info), len(linked), len(see_also), len(categories)
    rest = [None] * (n_see + n_cat)
    if info:
        relations, objects, info_chunks, info_sentences = (list(c) for c in zip(*info))
    else:
        relations, objects, info_chunks, info_sentences = [], [], [], []
    relations.extend([None] * (n_links + n_see + n_cat))
    objects.extend(linked)
    objects.extend(see_also)
    objects.extend(categories)
    sources = [_INFOBOX] * n_info + [_LINK] * n_links + [_SEE_ALSO] * n_see + [_CATEGORY] * n_cat
    where = info_chunks + link_chunks + rest, info_sentences + link_sentences + rest
    return PageTriples(relations, objects, sources, *where)


_OPENING = "\"'“‘(["
_CLOSING = "\"'”’)],.;:!?"
MAX_TITLE_WORDS = 8


def _title_index(titles: Sequence[str]) -> tuple[set[str], set[str]]:
    """The titles, and every run of a title's first words (to stop reading a sentence's words once no title can
    go on)."""
    exact: set[str] = set()
    prefixes: set[str] = set()
    for title in titles:
        words = title.split()
        if not words or len(words) > MAX_TITLE_WORDS or len(title) < 3:
            continue
        exact.add(" ".join(words))
        for i in range(1, len(words)):
            prefixes.add(" ".join(words[:i]))
    return exact, prefixes


def _named_titles(text: str, exact: set[str], prefixes: set[str]) -> Iterator[str]:
    """Titles named in ``text``, the longest at each word; a one-word name opening the sentence is its
    capitalised first word more often than a name, so it does not count."""
    ws = text.split()
    n = len(ws)
    i = 0
    while i < n:
        cur = ws[i]
        if cur[0].islower():  # most words: checked before any string is made
            i += 1
            continue
        cur = cur.lstrip(_OPENING)
        if not cur[:1].isupper() and not cur[:1].isdigit():
            i += 1
            continue
        found, j = None, i
        while True:
            name = cur.rstrip(_CLOSING)
            if name in exact and (j > i or i > 0):
                found, end = name, j
            if j + 1 >= n or cur not in prefixes:
                break
            j += 1
            cur = f"{cur} {ws[j]}"
        if found is None:
            i += 1
        else:
            yield found
            i = end + 1


def text_mention_rows(titles: Sequence[str], sentences: Sequence[tuple]) -> tuple[list, ...]:
    """``_staged_triples`` columns of the titles each page's sentences name (first naming per page kept), for
    corpora without links; ``sentences`` are (page_id, passage_id, page_sentence, text) in page order."""
    exact, prefixes = _title_index(titles)
    columns: tuple[list, ...] = ([], [], [], [], [], [])
    seen: set[tuple[int, str]] = set()
    for page_id, passage_id, sentence, text in sentences:
        for name in _named_titles(text, exact, prefixes):
            if (page_id, name) in seen:
                continue
            seen.add((page_id, name))
            for column, value in zip(columns, (page_id, None, name, _LINK, passage_id, sentence)):
                column.append(value)
    return columns
