"""Triples of the knowledge-graph channel, taken from a parsed page's own structure.

``(relation, object_title, source, chunk_index, page_sentence)`` per fact, where ``source`` is ``infobox``,
``link``, ``see_also`` or ``category`` and the chunk/sentence say where the fact is stated (None when no passage
states it). The store writer turns them into ``triples`` rows; object pages are resolved there, after redirects.

Infobox relations are normalised (``birthplace``, ``place_of_birth`` -> ``birth_place``). The cleaner renders an
infobox value to plain text, so its links are read again from the raw template: a value holding several links
gives one triple per link. A link in the running text is ``mentions``, kept with the sentence holding it.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from functools import lru_cache

from indexer.parsed import ParsedChunk, ParsedPage
from wikiground.text import canonical_title

MENTIONS = "mentions"
SEE_ALSO = "see_also"
CATEGORY = "category"
SOURCES = ("infobox", "link", "see_also", "category")
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
_INFOBOX_START = re.compile(r"\{\{\s*[Ii]nfobox")
_BRACES = re.compile(r"\{\{|\}\}")
_ARG_TOKENS = re.compile(r"\[\[|\]\]|\{\{|\}\}|\|")
_COMMENT = re.compile(r"<!--.*?(?:-->|$)", re.S)
_RAW_LINK = re.compile(r"\[\[([^\[\]|]*)(?:\|[^\[\]]*)?\]\]")
_SKIP_PREFIXES = frozenset({"file", "image", "media", "category", "wikt", "wiktionary", "commons", "s", "q", "w"})


@lru_cache(maxsize=65536)  # infobox keys repeat across pages
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


def _template_end(text: str, start: int) -> int:
    """End offset of the ``{{...}}`` opening at ``start`` (the text's end when it never closes)."""
    depth = 0
    for m in _BRACES.finditer(text, start):
        depth += 1 if m.group() == "{{" else -1
        if depth == 0:
            return m.end()
    return len(text)


def _top_level_args(body: str) -> list[str]:
    """``body`` split at the pipes outside nested links and templates."""
    args, depth, last = [], 0, 0
    for m in _ARG_TOKENS.finditer(body):
        tok = m.group()
        if tok in ("[[", "{{"):
            depth += 1
        elif tok in ("]]", "}}"):
            depth = max(0, depth - 1)
        elif depth == 0:
            args.append(body[last : m.start()])
            last = m.end()
    args.append(body[last:])
    return args


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


def raw_infobox_links(wikitext: str) -> dict[str, list[str]]:
    """Key (as written) -> the titles its value links to, over every infobox of the raw wikitext."""
    found: dict[str, list[str]] = {}
    for m in _INFOBOX_START.finditer(wikitext):
        end = _template_end(wikitext, m.start())
        body = _COMMENT.sub("", wikitext[m.start() + 2 : max(m.start() + 2, end - 2)])
        for arg in _top_level_args(body)[1:]:
            eq = arg.find("=")
            if eq <= 0 or "[[" not in arg:
                continue
            targets = _link_targets(arg[eq + 1 :])
            if targets:
                found.setdefault(arg[:eq].strip(), []).extend(targets)
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


def infobox_triples(
    parsed: ParsedPage, chunks: Sequence[ParsedChunk], starts: Sequence[int], wikitext: str | None
) -> Iterator[tuple]:
    """Triples of the infobox fields: one per linked title, else one per short plain value."""
    if not parsed.infoboxes:
        return
    links = raw_infobox_links(wikitext) if wikitext else {}
    where = _info_rows(chunks, starts)
    seen: set[tuple[str, str]] = set()
    for _kind, pairs in parsed.infoboxes:
        for key, value in pairs:
            if _LAYOUT_KEY.search(key):
                continue
            relation = normalise_relation(key)
            chunk, sentence = where.get(key.replace("_", " ").casefold(), (None, None))
            targets = links.get(key)
            if targets:
                objects = [(link_relation(relation, t), t) for t in targets]
            else:
                parts = [p.strip() for p in _VALUE_SPLIT.split(value)]
                objects = [
                    (relation, p) for p in parts if 1 < len(p) <= MAX_VALUE_CHARS and any(c.isalpha() for c in p)
                ]
            for rel, obj in objects:
                if (rel, obj) not in seen:
                    seen.add((rel, obj))
                    yield (rel, obj, "infobox", chunk, sentence)


def link_triples(parsed: ParsedPage, chunks: Sequence[ParsedChunk], starts: Sequence[int]) -> list[tuple]:
    """One ``mentions`` triple per linked title (its first link), with the sentence that holds the link.

    Links come in text order, so each section's anchors are looked for from where the last one was found on."""
    by_section: dict[int, list[int]] = {}
    for i, chunk in enumerate(chunks):
        if chunk.source == "text":
            by_section.setdefault(chunk.section_index, []).append(i)
    texts = [chunk.text for chunk in chunks]
    heads: dict[int, list[int]] = {}  # chunk -> its sentences' start offsets, made on first use
    cursor: dict[int, tuple[int, int]] = {}  # section -> (position in its chunk list, offset) of the last link
    out: list[tuple] = []
    seen: set[str] = set()
    current, order, pos, offset = None, None, 0, 0
    for target, anchor, section in parsed.links:
        if target in seen:
            continue
        seen.add(target)
        if section != current:
            if current is not None:
                cursor[current] = (pos, offset)
            current, order = section, by_section.get(section)
            pos, offset = cursor.get(section, (0, 0))
        at = texts[order[pos]].find(anchor, offset) if order and anchor else -1  # nearly always in the same chunk
        if at < 0:
            found = _locate(texts, order, (pos, offset), anchor) if order and anchor else None
            if found is None:
                out.append((MENTIONS, target, "link", None, None))
                continue
            pos, at = found
        offset = at
        chunk = order[pos]  # type: ignore[index]
        starts_of = heads.get(chunk)
        if starts_of is None:
            starts_of = heads[chunk] = [a for a, _ in chunks[chunk].sentences]
        j = bisect_right(starts_of, at) - 1
        out.append((MENTIONS, target, "link", chunk, starts[chunk] + (j if j > 0 else 0)))
    return out


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


def page_triples(parsed: ParsedPage, chunks: Sequence[ParsedChunk], *, wikitext: str | None = None) -> list[tuple]:
    """Every triple of one page: ``(relation, object_title, source, chunk_index, page_sentence)``."""
    starts = _sentence_starts(chunks)
    out = list(infobox_triples(parsed, chunks, starts, wikitext))
    out.extend(link_triples(parsed, chunks, starts))
    out.extend((SEE_ALSO, t, "see_also", None, None) for t in dict.fromkeys(parsed.see_also))
    out.extend((CATEGORY, c, "category", None, None) for c in dict.fromkeys(parsed.categories))
    return out


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
    """``_triple_raw`` columns of the titles each page's sentences name (first naming per page kept), for
    corpora without links; ``sentences`` are (page_id, passage_id, page_sentence, text) in page order."""
    exact, prefixes = _title_index(titles)
    columns: tuple[list, ...] = ([], [], [], [], [], [])
    seen: set[tuple[int, str]] = set()
    for page_id, passage_id, sentence, text in sentences:
        for name in _named_titles(text, exact, prefixes):
            if (page_id, name) in seen:
                continue
            seen.add((page_id, name))
            for column, value in zip(columns, (page_id, MENTIONS, name, "link", passage_id, sentence)):
                column.append(value)
    return columns
