"""Sentence splitting and ~100-word passages (chunks) that never cross a section."""

from __future__ import annotations

import re

from indexer.parsed import ParsedChunk, ParsedPage

DEFAULT_TARGET_WORDS = 100

# Words that end with a period without ending the sentence (compared casefolded, no period).
ABBREVIATIONS: frozenset[str] = frozenset(
    {
        "mr",
        "mrs",
        "ms",
        "dr",
        "prof",
        "rev",
        "fr",
        "st",
        "sr",
        "jr",
        "mt",
        "ft",
        "gen",
        "col",
        "lt",
        "sgt",
        "capt",
        "cmdr",
        "adm",
        "gov",
        "sen",
        "rep",
        "pres",
        "hon",
        "messrs",
        "mme",
        "vs",
        "etc",
        "cf",
        "ca",
        "c",
        "approx",
        "fl",
        "b",
        "d",
        "r",
        "no",
        "nos",
        "vol",
        "vols",
        "pp",
        "p",
        "ed",
        "eds",
        "fig",
        "figs",
        "al",
        "inc",
        "ltd",
        "co",
        "corp",
        "bros",
        "dept",
        "univ",
        "assn",
        "est",
        "op",
        "cit",
        "ibid",
        "viz",
        "jan",
        "feb",
        "mar",
        "apr",
        "jun",
        "jul",
        "aug",
        "sep",
        "sept",
        "oct",
        "nov",
        "dec",
        "mon",
        "tue",
        "wed",
        "thu",
        "fri",
        "sat",
        "sun",
        "ave",
        "blvd",
        "rd",
        "hwy",
        "mi",
        "km",
        "lb",
        "lbs",
        "oz",
        "in",
        "sq",
        "cu",
        "ph",
        "a.m",
        "p.m",
        "e.g",
        "i.e",
        "u.s",
        "u.k",
        "u.n",
        "a.d",
        "b.c",
    }
)

# A sentence ends at a newline, or at terminal punctuation (with closing quotes/brackets) followed by
# whitespace on the same line: one regex pass over a whole section finds both kinds of cut.
# Written to start with one character set (a newline or a first punctuation mark), which the regex engine
# scans for; the alternation "\n|[.!?]+..." has no such set and is tried at every offset.
_CUT = re.compile(r"[\n.!?\u2026\u3002](?:(?<=\n)|(?<!\n)[.!?\u2026\u3002]*[\"'\u201d\u2019)\]]*(?=[^\S\n]))")
# _CUT's matches in a text without "!", "?", "\u2026" or "\u3002", as two scans for a literal first character
# ("\.\.*", not "\.+": the regex engine only finds the literal prefix in the former).
_DOT_CUT = re.compile(r"\.\.*[\"'\u201d\u2019)\]]*(?=[^\S\n])")
_NEWLINE = re.compile(r"\n")
_WORD_BEFORE = re.compile(r"[\w.\-']*$")
_INITIALS = re.compile(r"(?:\w\.)+\w?$")
_WORDS = re.compile(r"\S+")
# Infobox fields that hold layout or file names, not facts.
_LAYOUT_KEY = re.compile(r"(?:size|width|alt|upright|style|colou?r)$|^(?:embedded|module)", re.IGNORECASE)
_IMAGE_VALUE = re.compile(r"\.(?:jpe?g|png|svg|gif|tiff?|webp)$", re.IGNORECASE)
# Whitespace other than spaces and newlines, i.e. str.isspace() less " \n" (see _word_counts); listed
# explicitly, which the regex engine scans faster than the equivalent [^\S \n].
_ODD_SPACE = re.compile(r"[\t\r\x0b\x0c\x1c-\x1f\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]")
_STARTS_LOWER = re.compile(r"\s+[\"'(\[\u201c\u2018]*[a-z]")


def _is_false_stop(text: str, dot: int, end: int) -> bool:
    """Whether the punctuation at ``dot`` (a period) ends an abbreviation, not a sentence."""
    if text[dot] != ".":
        return False
    # A capital or digit after the one whitespace character at ``end`` cannot start _STARTS_LOWER: no regex.
    after = text[end + 1 : end + 2]
    if not (after.isupper() or after.isdigit()) and _STARTS_LOWER.match(text, end):
        return True  # "approx. three", "et al. found": a lower-case continuation
    # The token right before the period, up to 20 characters back; usually letters or digits after a space,
    # taken without the regex, which retries at every offset of the window.
    window = text[max(0, dot - 20) : dot]
    word = window[window.rfind(" ") + 1 :]
    if word and not word.isalnum():
        word = _WORD_BEFORE.search(window).group()
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
    # Spans are trimmed as they are cut (one pass, not a second one over all spans).
    spans: list[tuple[int, int]] = []
    start = 0
    for cut, end in _cuts(text):
        if text[cut] == "\n":
            while start < cut and text[start].isspace():
                start += 1
            stop = cut
            while stop > start and text[stop - 1].isspace():
                stop -= 1
            if stop > start:
                spans.append((start, stop))
            start = end
        elif not _is_false_stop(text, cut, end):
            # The span ends with the punctuation or closing quote the cut matched (never whitespace,
            # and at ``cut`` or after it, so the trimmed span is not empty); ``text[end]`` is the
            # whitespace of the cut's lookahead, which the next span's trimming would skip.
            while text[start].isspace():
                start += 1
            spans.append((start, end))
            start = end + 1
    end = len(text)
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    if end > start:
        spans.append((start, end))
    return spans


def _cuts(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of every match of :data:`_CUT` in ``text``, in order."""
    if "!" in text or "?" in text or "\u2026" in text or "\u3002" in text:
        return list(map(_span, _CUT.finditer(text)))
    # Nearly all texts: two scans, each for a literal first character, merged.
    cuts = list(map(_span, _DOT_CUT.finditer(text)))
    cuts += map(_span, _NEWLINE.finditer(text))
    cuts.sort()
    return cuts


_span = re.Match.span


def _word_spans(text: str, start: int, end: int, size: int) -> list[tuple[int, int]]:
    """Cut one over-long sentence into pieces of ``size`` words (offsets into ``text``)."""
    words = [(m.start(), m.end()) for m in _WORDS.finditer(text, start, end)]
    return [(words[i][0], words[min(i + size, len(words)) - 1][1]) for i in range(0, len(words), size)]


def _word_counts(text: str, spans: list[tuple[int, int]], *, one_line: bool) -> list[int]:
    """Words per span, as ``len(text[start:end].split())`` counts them.

    Spans are stripped; when they also hold no newline (``one_line``) and the text's only whitespace
    is single spaces and newlines (as the cleaner leaves it), a span's words are its spaces plus one:
    counted in place, without building the words.
    """
    if one_line and "  " not in text and _no_odd_space(text):
        count = text.count
        return [count(" ", s, e) + 1 for s, e in spans]
    return [len(text[s:e].split()) for s, e in spans]


def _no_odd_space(text: str) -> bool:
    """Whether ``text`` has no whitespace but spaces and newlines."""
    if text.isascii():  # O(1); then eight one-character scans beat isprintable()'s per-character lookups
        return not (
            "\t" in text
            or "\r" in text
            or "\x0b" in text
            or "\x0c" in text
            or "\x1c" in text
            or "\x1d" in text
            or "\x1e" in text
            or "\x1f" in text
        )
    # Every odd space is unprintable: a printable text (newlines aside) skips the regex scan.
    return text.replace("\n", " ").isprintable() or _ODD_SPACE.search(text) is None


def _group(
    text: str, spans: list[tuple[int, int]], *, target_words: int, section_index: int, source: str, one_line: bool
) -> list[ParsedChunk]:
    """Greedy grouping of consecutive sentence spans into chunks of about ``target_words``.

    ``one_line``: no span holds a newline (true of :func:`split_sentences` spans).
    """
    counts = _word_counts(text, spans, one_line=one_line)
    if counts and max(counts) > 2 * target_words:
        # Rare: a sentence longer than twice the target is cut into target-sized pieces.
        units: list[tuple[int, int]] = []
        unit_counts: list[int] = []
        for (s, e), n in zip(spans, counts):
            if n > 2 * target_words:
                for ps, pe in _word_spans(text, s, e, target_words):
                    units.append((ps, pe))
                    unit_counts.append(len(text[ps:pe].split()))
            else:
                units.append((s, e))
                unit_counts.append(n)
        spans, counts = units, unit_counts

    # Groups as [first, end) ranges of span indexes, with their word counts.
    groups: list[tuple[int, int]] = []
    totals: list[int] = []
    first = 0
    count = 0
    for i, n in enumerate(counts):
        # Close the chunk before a sentence that would overshoot the target by more than a
        # fifth, as long as the chunk already holds half the target.
        if i > first and count + n > target_words * 1.2 and count >= target_words / 2:
            groups.append((first, i))
            totals.append(count)
            first, count = i, 0
        count += n
        if count >= target_words:
            groups.append((first, i + 1))
            totals.append(count)
            first, count = i + 1, 0
    if first < len(counts):
        # A short tail joins the previous chunk when the two still fit in 1.5x the target.
        if groups and count < target_words / 4 and totals[-1] + count <= target_words * 1.5:
            groups[-1] = (groups[-1][0], len(counts))
        else:
            groups.append((first, len(counts)))

    chunks: list[ParsedChunk] = []
    for a, b in groups:
        base = spans[a][0]
        chunks.append(
            ParsedChunk(
                section_index,
                text[base : spans[b - 1][1]],
                tuple([(s - base, e - base) for s, e in spans[a:b]]),
                source,
            )
        )
    return chunks


def chunk_section(
    text: str, *, section_index: int, target_words: int = DEFAULT_TARGET_WORDS, source: str = "text"
) -> list[ParsedChunk]:
    """Chunks of about ``target_words`` words made of whole sentences of one section's text.

    A sentence is split (at word boundaries) only when it alone exceeds twice the target.
    """
    if target_words < 1:
        raise ValueError(f"target_words must be >= 1, got {target_words}")
    if not text.strip():
        return []
    return _group(
        text,
        split_sentences(text),
        target_words=target_words,
        section_index=section_index,
        source=source,
        one_line=True,
    )


def _line_chunks(
    lines: list[str], *, sep: str, target_words: int, source: str, section_index: int = 0
) -> list[ParsedChunk]:
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
    return _group(
        text,
        spans,
        target_words=target_words,
        section_index=section_index,
        source=source,
        one_line=not any("\n" in line for line in lines),
    )


def chunk_page(page: ParsedPage, *, target_words: int = DEFAULT_TARGET_WORDS) -> list[ParsedChunk]:
    """All chunks of a page: prose per section, then infoboxes ('info'), then tables ('table').

    Infobox and table chunks carry section index 0: ``ParsedPage`` does not record the
    section a table or infobox came from.
    """
    chunks: list[ParsedChunk] = []
    for section in page.sections:
        chunks.extend(chunk_section(section.text, section_index=section.index, target_words=target_words))
    for _box_type, pairs in page.infoboxes:
        lines = [
            f"{key.replace('_', ' ')}: {value}"
            for key, value in pairs
            if value and not _LAYOUT_KEY.search(key) and not _IMAGE_VALUE.search(value)
        ]
        chunks.extend(_line_chunks(lines, sep="; ", target_words=target_words, source="info"))
    for rows in page.tables:
        chunks.extend(_line_chunks([r for r in rows if r.strip()], sep="\n", target_words=target_words, source="table"))
    return chunks
