"""Sentence splitting and ~100-word passages (chunks) that never cross a section."""

from __future__ import annotations

import re

from indexer.parsed import ParsedChunk, ParsedPage

DEFAULT_TARGET_WORDS = 100

# Words that end with a period without ending the sentence (compared casefolded, no period).
ABBREVIATIONS: frozenset[str] = frozenset({
    "mr", "mrs", "ms", "dr", "prof", "rev", "fr", "st", "sr", "jr", "mt", "ft", "gen", "col",
    "lt", "sgt", "capt", "cmdr", "adm", "gov", "sen", "rep", "pres", "hon", "messrs", "mme",
    "vs", "etc", "cf", "ca", "c", "approx", "fl", "b", "d", "r", "no", "nos", "vol", "vols",
    "pp", "p", "ed", "eds", "fig", "figs", "al", "inc", "ltd", "co", "corp", "bros", "dept",
    "univ", "assn", "est", "op", "cit", "ibid", "viz", "jan", "feb", "mar", "apr", "jun",
    "jul", "aug", "sep", "sept", "oct", "nov", "dec", "mon", "tue", "wed", "thu", "fri",
    "sat", "sun", "ave", "blvd", "rd", "hwy", "mi", "km", "lb", "lbs", "oz", "in", "sq", "cu",
    "no", "ph", "ms", "a.m", "p.m", "e.g", "i.e", "u.s", "u.k", "u.n", "a.d", "b.c",
})

# A candidate boundary: terminal punctuation, closing quotes/brackets, whitespace.
_BOUNDARY = re.compile(r"[.!?\u2026\u3002]+[\"'\u201d\u2019)\]]*(?=\s)")
_WORD_BEFORE = re.compile(r"[\w.\-']*$")
_INITIALS = re.compile(r"(?:\w\.)+\w?$")
_WORDS = re.compile(r"\S+")
# Infobox fields that hold layout or file names, not facts.
_LAYOUT_KEY = re.compile(r"(?:size|width|alt|upright|style|colou?r)$|^(?:embedded|module)",
                         re.IGNORECASE)
_IMAGE_VALUE = re.compile(r"\.(?:jpe?g|png|svg|gif|tiff?|webp)$", re.IGNORECASE)
_STARTS_LOWER = re.compile(r"\s+[\"'(\[\u201c\u2018]*[a-z]")


def _is_false_stop(text: str, dot: int, end: int) -> bool:
    """Whether the punctuation at ``dot`` (a period) ends an abbreviation, not a sentence."""
    if text[dot] != ".":
        return False
    if _STARTS_LOWER.match(text, end):
        return True  # "approx. three", "et al. found": a lower-case continuation
    # The token right before the period, up to 20 characters back.
    m = _WORD_BEFORE.search(text, max(0, dot - 20), dot)
    word = m.group() if m else ""
    if not word:
        return False
    if word.casefold().strip("'") in ABBREVIATIONS:
        return True
    if len(word) == 1 and word.isupper():
        return True  # an initial: "J. R. R. Tolkien", "George W. Bush"
    if "." in word and _INITIALS.fullmatch(word):
        return True  # "U.S.", "e.g.", "Ph.D."
    return False


def split_sentences(text: str) -> list[tuple[int, int]]:
    """Sentence spans as ``(start, end)`` offsets; ``text[start:end]`` is stripped.

    Newlines always end a sentence (paragraphs and list items); inside a line a sentence
    ends at ``.``/``!``/``?`` followed by whitespace, unless the period closes an
    abbreviation, an initial or a dotted acronym, or the next word starts lower-case.
    Decimals ("3.14") never split since no whitespace follows the period.
    """
    spans: list[tuple[int, int]] = []
    pos = 0
    n = len(text)
    while pos < n:
        nl = text.find("\n", pos)
        line_end = n if nl < 0 else nl
        start = pos
        for m in _BOUNDARY.finditer(text, pos, line_end):
            end = m.end()
            if _is_false_stop(text, m.start(), end):
                continue
            _add_span(text, start, end, spans)
            start = end
        _add_span(text, start, line_end, spans)
        pos = line_end + 1
    return spans


def _add_span(text: str, start: int, end: int, spans: list[tuple[int, int]]) -> None:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    if end > start:
        spans.append((start, end))


def _word_spans(text: str, start: int, end: int, size: int) -> list[tuple[int, int]]:
    """Cut one over-long sentence into pieces of ``size`` words (offsets into ``text``)."""
    words = [(m.start(), m.end()) for m in _WORDS.finditer(text, start, end)]
    return [(words[i][0], words[min(i + size, len(words)) - 1][1])
            for i in range(0, len(words), size)]


def _group(text: str, spans: list[tuple[int, int]], *, target_words: int,
           section_index: int, source: str) -> list[ParsedChunk]:
    """Greedy grouping of consecutive sentence spans into chunks of about ``target_words``."""
    chunks: list[ParsedChunk] = []
    units: list[tuple[tuple[int, int], int]] = []
    for s, e in spans:
        # str.split() and \S+ agree on whitespace (both use str.isspace); split is the faster count.
        n = len(text[s:e].split())
        if n > 2 * target_words:
            for ps, pe in _word_spans(text, s, e, target_words):
                units.append(((ps, pe), len(text[ps:pe].split())))
        else:
            units.append(((s, e), n))

    groups: list[list[tuple[int, int]]] = []
    counts: list[int] = []
    current: list[tuple[int, int]] = []
    count = 0
    for span, n in units:
        # Close the chunk before a sentence that would overshoot the target by more than a
        # fifth, as long as the chunk already holds half the target.
        if current and count + n > target_words * 1.2 and count >= target_words / 2:
            groups.append(current)
            counts.append(count)
            current, count = [], 0
        current.append(span)
        count += n
        if count >= target_words:
            groups.append(current)
            counts.append(count)
            current, count = [], 0
    if current:
        # A short tail joins the previous chunk when the two still fit in 1.5x the target.
        if groups and count < target_words / 4 and counts[-1] + count <= target_words * 1.5:
            groups[-1].extend(current)
        else:
            groups.append(current)

    for group in groups:
        base = group[0][0]
        chunks.append(ParsedChunk(section_index=section_index, text=text[base:group[-1][1]],
                                  sentences=tuple((s - base, e - base) for s, e in group),
                                  source=source))
    return chunks


def chunk_section(text: str, *, section_index: int, target_words: int = DEFAULT_TARGET_WORDS,
                  source: str = "text") -> list[ParsedChunk]:
    """Chunks of about ``target_words`` words made of whole sentences of one section's text.

    A sentence is split (at word boundaries) only when it alone exceeds twice the target.
    """
    if target_words < 1:
        raise ValueError(f"target_words must be >= 1, got {target_words}")
    if not text.strip():
        return []
    return _group(text, split_sentences(text), target_words=target_words,
                  section_index=section_index, source=source)


def _line_chunks(lines: list[str], *, sep: str, target_words: int, source: str,
                 section_index: int = 0) -> list[ParsedChunk]:
    """Chunks whose sentences are whole ``lines`` (infobox pairs, table rows) joined by ``sep``."""
    lines = [stripped for stripped in (line.strip() for line in lines) if stripped]
    text = sep.join(lines)
    spans: list[tuple[int, int]] = []
    pos = 0
    for line in lines:
        spans.append((pos, pos + len(line)))
        pos += len(line) + len(sep)
    spans = [(s, e) for s, e in spans if e > s]
    if not spans:
        return []
    return _group(text, spans, target_words=target_words, section_index=section_index,
                  source=source)


def chunk_page(page: ParsedPage, *, target_words: int = DEFAULT_TARGET_WORDS) -> list[ParsedChunk]:
    """All chunks of a page: prose per section, then infoboxes ('info'), then tables ('table').

    Infobox and table chunks carry section index 0: ``ParsedPage`` does not record the
    section a table or infobox came from.
    """
    chunks: list[ParsedChunk] = []
    for section in page.sections:
        chunks.extend(chunk_section(section.text, section_index=section.index,
                                    target_words=target_words))
    for _box_type, pairs in page.infoboxes:
        lines = [f"{key.replace('_', ' ')}: {value}" for key, value in pairs
                 if value and not _LAYOUT_KEY.search(key) and not _IMAGE_VALUE.search(value)]
        chunks.extend(_line_chunks(lines, sep="; ", target_words=target_words, source="info"))
    for rows in page.tables:
        chunks.extend(_line_chunks([r for r in rows if r.strip()], sep="\n",
                                   target_words=target_words, source="table"))
    return chunks
