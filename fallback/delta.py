"""Corrective ingest: pages fetched live go into ``INDEX/delta/`` (the store's tables, origin='live').

The delta is a folder of immutable segment files, one per write: a writer fills a DuckDB file under a
temporary name and renames it in, so readers (``indexer.store``, which merges the segments and reads them
again when the folder's listing changes) and other writers never see half of one, and two writers never
share a file. The newest revision of a page wins. Passage ids are fixed per (page id, passage index) above
``LIVE_PASSAGE_ID_BASE``, clear of the main store's dense 0..N-1 ids. Text is split into passages and
sentences by the indexer's own chunker, as the main store's is.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from backends.entities import strip_disambiguator
from fallback.live import LivePage
from indexer.chunking import DEFAULT_TARGET_WORDS, chunk_section
from indexer.delta_segment import delta_lock, remove_stale_parts, write_segment
from indexer.store import delta_revisions
from wikiground.layout import LIVE_PASSAGE_ID_BASE, LIVE_PASSAGES_PER_PAGE, delta_dir
from wikiground.text import normalize_title

__all__ = ["LIVE_PASSAGE_ID_BASE", "delta_dir", "delta_lock", "live_passage_id", "write_live_pages"]

log = logging.getLogger(__name__)


def live_passage_id(page_id: int, index: int) -> int:
    return LIVE_PASSAGE_ID_BASE + int(page_id) * LIVE_PASSAGES_PER_PAGE + index


def _page_rows(page: LivePage, resolved: Mapping[str, int] | None = None) -> dict[str, list[tuple]]:
    """The delta tables' rows of one live page (``resolved``: link title -> page id, after redirects)."""
    rows: dict[str, list[tuple]] = {"pages": [], "sections": [], "passages": [], "sentences": []}
    _text_rows(page, rows)
    rows["triples"] = _triple_rows(page, rows["sentences"], resolved or {})
    return rows


def _text_rows(page: LivePage, rows: dict[str, list[tuple]]) -> None:
    # rev_timestamp holds the fetch time: the API's extracts carry no revision time, and the evidence of a live
    # page reports when it was fetched.
    rows["pages"].append(
        (
            page.pageid,
            page.title,
            0,
            page.rev_id,
            page.fetched_at,
            page.is_disambiguation,
            page.url,
            page.intro,
            normalize_title(page.title),
            page.url,
            "live",
        )
    )
    passage_index = 0
    page_sentence = 0
    for section_index, (heading, text) in enumerate([("", page.intro), *page.sections]):
        lead = section_index == 0
        rows["sections"].append(
            (page.pageid, section_index, 1 if lead else 2, heading, None if lead else 0, text, heading)
        )
        for chunk in chunk_section(text or "", section_index=section_index, target_words=DEFAULT_TARGET_WORDS):
            if passage_index >= LIVE_PASSAGES_PER_PAGE:
                log.warning("live page %r: passages beyond %d dropped", page.title, LIVE_PASSAGES_PER_PAGE)
                return
            pid = live_passage_id(page.pageid, passage_index)
            rows["passages"].append(
                (pid, page.pageid, section_index, chunk.text, page.title, heading, "text", passage_index)
            )
            for i, (s, e) in enumerate(chunk.sentences):
                rows["sentences"].append((pid, i, page_sentence, chunk.text[s:e], s, e))
                page_sentence += 1
            passage_index += 1


def _triple_rows(page: LivePage, sentences: list[tuple], resolved: Mapping[str, int]) -> list[tuple]:
    """``triples`` rows of a live page's links (``mentions``, stated by the first sentence naming the linked
    title, if any) and categories, as a build makes them from a dump's links and categories."""
    out: list[tuple] = []
    folded = [(pid, n, text.casefold()) for pid, _, n, text, _, _ in sentences]  # once, not once per link
    for title in dict.fromkeys(page.links):
        target = resolved.get(title)
        if target == page.pageid:
            continue  # no page points at itself
        name = strip_disambiguator(title).casefold()
        where = next(((pid, n) for pid, n, text in folded if name and name in text), None)
        passage_id, sentence_id = where if where else (None, None)
        out.append((page.pageid, page.title, "mentions", title, target, "link", passage_id, sentence_id, page.rev_id))
    for category in dict.fromkeys(page.categories):
        target = resolved.get(f"Category:{category}")
        out.append((page.pageid, page.title, "category", category, target, "category", None, None, page.rev_id))
    return out


def _segment_tables(pages: Sequence[LivePage], resolved: Mapping[str, int]) -> dict[str, list[tuple]]:
    tables: dict[str, list[tuple]] = {}
    for page in pages:
        for table, rows in _page_rows(page, resolved).items():
            tables.setdefault(table, []).extend(rows)
    return tables


def _resolved(pages: Sequence[LivePage], resolve: Callable[[list[str]], Mapping[str, int]] | None) -> dict[str, int]:
    """Page ids of the titles the pages link to or are categorised in: the pages themselves, then ``resolve``."""
    wanted = list(dict.fromkeys(t for p in pages for t in (*p.links, *(f"Category:{c}" for c in p.categories))))
    out = dict(resolve(wanted)) if resolve is not None and wanted else {}
    named = set(wanted)
    out.update((p.title, int(p.pageid)) for p in pages if p.pageid is not None and p.title in named)
    return out


def write_live_pages(
    index_dir: Path, pages: Sequence[LivePage], *, resolve: Callable[[list[str]], Mapping[str, int]] | None = None
) -> int:
    """Add live pages to the delta as one new segment; returns how many pages were written (a page already in
    the delta at the same revision is skipped). ``resolve`` (titles -> page id after redirects, e.g. from the
    index's store) gives the pages' links and categories their object pages in ``triples``; the pages written
    together resolve one another's titles."""
    index_dir = Path(index_dir)
    wanted: dict[int, LivePage] = {}
    for page in pages:
        if page.pageid is not None:
            wanted[int(page.pageid)] = page  # the last fetch of a page in one batch wins
    if not wanted:
        return 0
    with delta_lock(index_dir) as folder:
        remove_stale_parts(folder)
        known = delta_revisions(index_dir)
        todo = [p for pid, p in wanted.items() if (pid, p.rev_id) not in known]
        if not todo:
            return 0
        name = write_segment(folder, [_segment_tables(todo, _resolved(todo, resolve))])
    log.info("delta %s: %d live page(s) written to %s", folder, len(todo), name)
    return len(todo)
