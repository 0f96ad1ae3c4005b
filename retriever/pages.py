"""Whole pages from the store, for ``GET /pages/{title}`` and the MediaWiki API subset.

The store's lookups (``indexer.store.Store``) answer per page id; the few listings they lack (sections, category
members, backlinks) are read here with the store's own per-call cursors.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from indexer.store import Resolution, Store
from wikiground.records import Page


def rows(store: Store, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
    """Rows of ``sql`` from the store and its live delta (one cursor per call, so safe across threads)."""
    return store.rows(sql, params)


def sections(store: Store, page_id: int) -> list[dict[str, Any]]:
    """The page's sections in order: index, level, heading, heading path and text (index 0 is the lead)."""
    found = rows(
        store,
        "SELECT section_index, level, heading, heading_path, text FROM sections WHERE page_id = ? "
        "ORDER BY section_index",
        [int(page_id)],
    )
    return [
        {"index": int(i), "level": int(lv), "heading": h, "heading_path": hp, "text": t} for i, lv, h, hp, t in found
    ]


def category_members(store: Store, category: str) -> list[Page]:
    """Pages in a category (name without the ``Category:`` prefix), by title."""
    ids = [r[0] for r in rows(store, "SELECT DISTINCT page_id FROM categories WHERE category = ?", [category])]
    pages = store.pages(ids)
    return sorted(pages.values(), key=lambda p: (p.title, p.page_id))


def backlinks(store: Store, title: str) -> list[Page]:
    """Pages that link to ``title`` (a link's target as written, or a redirect to it), by page id."""
    ids = [
        r[0]
        for r in rows(
            store,
            "SELECT DISTINCT page_id FROM links WHERE target_title = ? OR target_title IN "
            "(SELECT source_title FROM redirects WHERE target_title = ?)",
            [title, title],
        )
    ]
    pages = store.pages(ids)
    return sorted(pages.values(), key=lambda p: p.page_id)


def resolve(store: Store, title: str) -> tuple[Resolution, Page] | None:
    res = store.resolve_title(title)
    if res is None:
        return None
    page = store.page(res.page_id)
    return (res, page) if page is not None else None


def page_view(store: Store, title: str) -> dict[str, Any] | None:
    """The page a title leads to (after redirects): its text by section, categories, "See also", infobox
    fields and links; a disambiguation page also lists its options (the pages it links to). None if unknown."""
    found = resolve(store, title)
    if found is None:
        return None
    res, page = found
    links = store.links(page.page_id)
    infobox: dict[str, dict[str, str]] = {}
    for kind, key, value in store.infobox(page.page_id):
        infobox.setdefault(kind, {})[key] = value
    out: dict[str, Any] = {
        "requested": title,
        "title": page.title,
        "page_id": page.page_id,
        "redirected_from": res.via_redirect,
        "fragment": res.fragment,
        "url": page.url,
        "rev_id": page.rev_id,
        "rev_timestamp": page.rev_timestamp,
        "origin": res.origin,
        "is_disambiguation": page.is_disambiguation,
        "lead": page.lead,
        "sections": sections(store, page.page_id),
        "categories": store.categories(page.page_id),
        "see_also": store.see_also(page.page_id),
        "infobox": infobox,
        "links": [{"title": t, "anchor": a} for t, a in links],
        "redirects": redirects_to(store, page.page_id),
    }
    if page.is_disambiguation:
        out["options"] = list(dict.fromkeys(t for t, _ in links))
    return out


def redirects_to(store: Store, page_id: int) -> list[str]:
    """The titles that redirect to the page (after their chains), by title."""
    found = rows(store, "SELECT DISTINCT source_title FROM redirects WHERE target_page_id = ?", [int(page_id)])
    return sorted(r[0] for r in found)


def passages_view(store: Store, passage_ids: Sequence[int]) -> list[dict[str, Any]]:
    """Passages by id, in the order asked (unknown ids left out), each with its page's title, URL and revision:
    what an evidence item's ``more_passages`` point to."""
    found = store.passages_with_pages(passage_ids)
    out = []
    for pid in dict.fromkeys(int(i) for i in passage_ids):
        if pid not in found:
            continue
        passage, page, sentence_ids = found[pid]
        out.append(
            {
                "passage_id": pid,
                "page_id": page.page_id,
                "title": page.title,
                "section": passage.heading_path,
                "source": passage.source,
                "text": passage.text,
                "sentence_ids": sentence_ids,
                "url": page.url,
                "rev_id": page.rev_id,
                "rev_timestamp": page.rev_timestamp,
            }
        )
    return out


def revisions(store: Store, page_ids: Sequence[int]) -> dict[int, dict[str, Any]]:
    """Each known page's revision id and timestamp, by page id."""
    return {
        pid: {"title": p.title, "rev_id": p.rev_id, "rev_timestamp": p.rev_timestamp}
        for pid, p in store.pages(int(i) for i in page_ids).items()
    }
