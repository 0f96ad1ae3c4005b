"""Records produced by the wikitext cleaner and consumed by the store writer."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple


@dataclass(frozen=True, slots=True)
class ParsedSection:
    index: int  # 0 = lead
    level: int  # 1 = lead, 2 = "== h ==", 3 = "=== h ===", ...
    heading: str  # "" for the lead
    parent_index: int | None  # enclosing section; None for the lead
    heading_path: str  # "History > Early life"; "" for the lead
    text: str  # clean prose: templates, refs, files, comments, tables removed; lists as sentences


class ParsedLink(NamedTuple):
    """A named tuple, not a dataclass: pages hold hundreds of links, and a tuple is built in a
    fraction of a frozen dataclass's time and goes into the store's rows as it is."""

    target_title: str  # canonical title (first letter upper, spaces), fragment stripped
    anchor_text: str
    section_index: int


@dataclass(frozen=True, slots=True)
class ParsedChunk:
    """A passage: about 100 words, never crossing a section."""

    section_index: int
    text: str
    sentences: tuple[tuple[int, int], ...]  # (start, end) character offsets into text
    source: str = "text"  # 'text' | 'table' | 'info'


@dataclass(frozen=True, slots=True)
class ParsedPage:
    redirect_target: str | None = None  # canonical target title when the page is a redirect
    redirect_fragment: str | None = None
    is_disambiguation: bool = False
    sections: tuple[ParsedSection, ...] = ()
    links: tuple[ParsedLink, ...] = ()
    categories: tuple[str, ...] = ()  # names without the "Category:" prefix
    see_also: tuple[str, ...] = ()  # canonical target titles from the "See also" section
    infoboxes: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()  # (type, ((key, clean value), ...))
    # (key, value wikitext) of the infobox values holding links, nested templates already expanded
    infobox_links: tuple[tuple[str, str], ...] = ()
    tables: tuple[tuple[str, ...], ...] = ()  # per table, per row: clean text "cell | cell | cell"
    warnings: tuple[str, ...] = field(default=())
