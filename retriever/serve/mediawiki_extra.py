"""More of the MediaWiki Action API subset: what the common Python clients send besides ``prop=extracts``.

``prop=revisions`` (the ``wikipedia`` package reads ``revid``/``parentid`` with every ``page.content``, and the
options of a disambiguation page from ``rvparse`` HTML; mwclient's ``page.text()`` reads the content),
``meta=siteinfo|userinfo`` (mwclient asks both when it connects, and ``userinfo`` with every query), ``list=random``
(``wikipedia.random()``) and ``action=parse`` with ``prop=sections|text|categories|links|revid|displaytitle``
(``page.sections`` of the ``wikipedia`` package). The store keeps a page's text, not its wikitext: revision content
is that text with ``== Heading ==`` marks, and the options of a disambiguation page as ``* [[Title]]`` lines.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

from retriever import pages as page_lookup
from retriever.serve import mediawiki_common as mw
from wikiground.records import Page
from wikiground.text import canonical_title

GENERATOR = "MediaWiki 1.43.0 (wikiground offline subset)"
RVPROPS = ("ids", "timestamp", "content", "size", "contentmodel")
PARSE_PROPS = ("sections", "text", "categories", "links", "revid", "displaytitle")
PARSE_PARAMS = ("action", "format", "formatversion", "prop", "redirects", "utf8", "origin", "page", "pageid", "oldid")
NAMESPACES = {0: "", 1: "Talk", 2: "User", 4: "Wikipedia", 6: "File", 10: "Template", 14: "Category"}
RANDOM_MAX = 500


def _flag(fv2: bool) -> Any:
    return True if fv2 else ""


# -- prop=revisions ------------------------------------------------------------------------------------


def disambiguation_options(store: Any, page: Page) -> list[str]:
    """The pages a disambiguation page points to: its links, in order, once each."""
    return list(dict.fromkeys(t for t, _ in store.links(page.page_id) if t.strip())) if page.is_disambiguation else []


def page_source(store: Any, page: Page) -> str:
    """What the store can give for a page's source: its text with ``== Heading ==`` marks, and for a
    disambiguation page its options as ``* [[Title]]`` lines."""
    text = mw.extract_text(store, page, intro=False, sectionformat="wiki")
    options = disambiguation_options(store, page)
    return text + ("\n\n" + "\n".join(f"* [[{t}]]" for t in options) if options else "")


def page_html(store: Any, page: Page) -> str:
    """The page as simple HTML: paragraphs, ``<h2>``.. headings, and a disambiguation page's options as a list of
    links (``<li><a>``, which is where clients read them from)."""
    parts = [f"<p>{html.escape(x)}</p>" for x in page.lead.split("\n") if x.strip()]
    for s in page_lookup.sections(store, page.page_id):
        if s["index"] == 0:
            continue
        level = min(6, max(2, s["level"]))
        anchor = html.escape(s["heading"].replace(" ", "_"), quote=True)
        parts.append(f'<h{level}><span class="mw-headline" id="{anchor}">{html.escape(s["heading"])}</span></h{level}>')
        parts.extend(f"<p>{html.escape(x)}</p>" for x in s["text"].split("\n") if x.strip())
    options = disambiguation_options(store, page)
    if options:
        items = "".join(
            f'<li><a href="/wiki/{html.escape(t.replace(" ", "_"), quote=True)}" title="{html.escape(t, quote=True)}">'
            f"{html.escape(t)}</a></li>"
            for t in options
        )
        parts.append(f"<ul>{items}</ul>")
    return '<div class="mw-parser-output">' + "\n".join(parts) + "</div>"


def _revision(
    store: Any, page: Page, wanted: list[str], *, parse: bool, slots: bool, fv2: bool, section: int | None = None
) -> dict[str, Any]:
    rev: dict[str, Any] = {}
    if "ids" in wanted:
        rev.update(revid=page.rev_id or 0, parentid=0)
    if "timestamp" in wanted and page.rev_timestamp:
        rev["timestamp"] = page.rev_timestamp
    if "content" in wanted or "size" in wanted:
        content = page_html(store, page) if parse else page_source(store, page)
        if section is not None and not parse:
            content = mw.section_source(store, page, section) or ""
        if "size" in wanted:
            rev["size"] = len(content.encode("utf-8"))
        if "content" in wanted:
            body = {"contentformat": "text/x-wiki", "contentmodel": "wikitext", ("content" if fv2 else "*"): content}
            rev.update({"slots": {"main": body}} if slots else body)
    elif "contentmodel" in wanted:
        rev["contentmodel"] = "wikitext"
    return rev


def prop_revisions(store: Any, p: Mapping[str, str], reply: Any, existing: list[tuple[dict, Page]]) -> None:
    """The one revision the store has of each page (its latest): ids, timestamp, size, content."""
    wanted = mw._values(p, "rvprop") if "rvprop" in p else ["ids", "timestamp", "flags", "comment", "user"]
    unserved = [v for v in wanted if v not in RVPROPS]
    if unserved:
        reply.warn("revisions", f"Not served offline (left out): rvprop={'|'.join(unserved)}.")
    parse = "rvparse" in p and p["rvparse"] not in ("0", "false")
    if "content" in wanted:
        reply.warn(
            "revisions",
            "Revision content is the page's stored text with == Heading == marks (and a disambiguation page's "
            "options as * [[Title]] lines), not its wikitext."
            if not parse
            else "Revision content is HTML made from the page's stored text.",
        )
    for name in ("rvstartid", "rvendid", "rvstart", "rvend", "rvdiffto"):
        if name in p:
            reply.warn("revisions", f"{name} is not served offline (the latest revision is given).")
    slots = "rvslots" in p
    section = mw._int(p["rvsection"]) if p.get("rvsection", "").isdigit() else None
    for d, page in existing:
        d["revisions"] = [_revision(store, page, wanted, parse=parse, slots=slots, fv2=reply.fv2, section=section)]


# -- meta=siteinfo|userinfo, list=random ------------------------------------------------------------------


def meta_siteinfo(store: Any, retriever: Any, p: Mapping[str, str], reply: Any) -> None:
    from retriever.serve.mediawiki_clients import siteinfo_extra

    wanted = mw._values(p, "siprop") or ["general"]
    unserved = [v for v in wanted if v not in ("general", "namespaces", "extensions", "namespacealiases")]
    if unserved:
        reply.warn("siteinfo", f"Not served offline (left out): siprop={'|'.join(unserved)}.")
    if "general" in wanted:
        reply.query["general"] = {
            "mainpage": "Main Page",
            "base": "https://en.wikipedia.org/wiki/Main_Page",
            "sitename": "Wikipedia",
            "generator": GENERATOR,
            "lang": "en",
            "case": "first-letter",
            "articlepath": "/wiki/$1",
            "server": "https://en.wikipedia.org",
            "servername": "en.wikipedia.org",
            "scriptpath": "/w",
            "readonly": reply.flag(),
        }
    if "namespaces" in wanted:
        spaces = {}
        for number, name in NAMESPACES.items():
            entry = {"id": number, "case": "first-letter", "canonical": name}
            entry.update({"name": name} if reply.fv2 else {"*": name})
            spaces[str(number)] = entry
        reply.query["namespaces"] = spaces
    siteinfo_extra(wanted, reply)


def meta_userinfo(store: Any, retriever: Any, p: Mapping[str, str], reply: Any) -> None:
    """An anonymous reader (the offline subset has no accounts)."""
    reply.query["userinfo"] = {"id": 0, "name": "127.0.0.1", "anon": reply.flag(), "groups": ["*"], "rights": ["read"]}


META_MODULES = {"siteinfo": meta_siteinfo, "userinfo": meta_userinfo}


def list_random(store: Any, retriever: Any, p: Mapping[str, str], reply: Any) -> None:
    limit = mw._limit(p, "rnlimit", 1, reply, "random", cap=RANDOM_MAX)
    found = page_lookup.rows(
        store, "SELECT page_id, title FROM pages WHERE namespace = 0 ORDER BY random() LIMIT ?", [limit]
    )
    reply.query["random"] = [{"id": int(i), "ns": 0, "title": t} for i, t in found]


# -- action=parse ---------------------------------------------------------------------------------------


def parse(store: Any, p: Mapping[str, str]) -> dict[str, Any]:
    """``action=parse`` of a stored page (``page`` or ``pageid``), after redirects."""
    fv2 = p.get("formatversion") in ("2", "latest")
    if not any(k in p for k in ("page", "pageid", "oldid")):
        return _parse_nothing(p, fv2)
    page = _parse_target(store, p)
    if page is None and "oldid" in p and not ("page" in p or "pageid" in p):
        return mw.error("nosuchrevid", f"There is no revision with ID {p['oldid']}.")
    if page is None:
        return mw.error("missingtitle", "The page you specified doesn't exist.")
    wanted = mw._values(p, "prop") if "prop" in p else list(PARSE_PROPS)
    out: dict[str, Any] = {"title": page.title, "pageid": page.page_id}
    warnings = {
        "main": [f"Unrecognized parameter: {k}." for k in p if k not in PARSE_PARAMS],
        "parse": [f"Not served offline: prop={v}." for v in wanted if v not in PARSE_PROPS],
    }
    if "revid" in wanted:
        out["revid"] = page.rev_id or 0
    if "text" in wanted:
        text = page_html(store, page)
        out["text"] = text if fv2 else {"*": text}
    if "displaytitle" in wanted:
        out["displaytitle"] = html.escape(page.title)
    if "sections" in wanted:
        out["sections"] = parse_sections(store, page)
    if "categories" in wanted:
        names = [c.replace(" ", "_") for c in store.categories(page.page_id)]
        out["categories"] = [{"sortkey": "", "category": n} if fv2 else {"sortkey": "", "*": n} for n in names]
    if "links" in wanted:
        titles = mw.linked_titles(store, page)
        found = store.resolve_titles(titles, loose=False)
        out["links"] = [_parse_link(t, t in found, fv2) for t in titles]
    body: dict[str, Any] = {"parse": out}
    key = "warnings" if fv2 else "*"
    if any(warnings.values()):
        body["warnings"] = {m: {key: "\n".join(ws)} for m, ws in warnings.items() if ws}
    return body


def _parse_nothing(p: Mapping[str, str], fv2: bool) -> dict[str, Any]:
    """No ``page``, ``pageid`` or ``oldid``: MediaWiki parses empty text titled "API" (``titles`` is not one of
    parse's parameters, and is warned about)."""
    unknown = [k for k in p if k not in PARSE_PARAMS]
    out: dict[str, Any] = {"title": "API", "pageid": 0}
    for name in mw._values(p, "prop") if "prop" in p else PARSE_PROPS:
        if name in ("sections", "categories", "links"):
            out[name] = []
        elif name == "text":
            out["text"] = "" if fv2 else {"*": ""}
    body: dict[str, Any] = {"parse": out}
    if unknown:
        key = "warnings" if fv2 else "*"
        body["warnings"] = {"main": {key: "\n".join(f"Unrecognized parameter: {k}." for k in unknown)}}
    return body


def _parse_target(store: Any, p: Mapping[str, str]) -> Page | None:
    """The page ``page`` (after redirects), ``pageid`` or ``oldid`` (the store holds one revision a page) names."""
    if "oldid" in p and not ("page" in p or "pageid" in p):
        oldid = p["oldid"]
        found = (
            page_lookup.rows(store, "SELECT page_id FROM pages WHERE rev_id = ? LIMIT 1", [int(oldid)])
            if (oldid.isascii() and oldid.isdigit() and len(oldid) < 19)
            else []
        )
        return store.page(int(found[0][0])) if found else None
    if p.get("pageid", "").isascii() and p.get("pageid", "").isdigit() and len(p["pageid"]) < 19:
        return store.page(int(p["pageid"]))
    title = canonical_title(p.get("page") or "")
    if not title:
        return None
    found = page_lookup.resolve(store, title)
    return found[1] if found is not None else None


def _parse_link(title: str, exists: bool, fv2: bool) -> dict[str, Any]:
    if fv2:
        return {"ns": 0, "exists": exists, "title": title}
    return {"ns": 0, **({"exists": ""} if exists else {}), "*": title}


def parse_sections(store: Any, page: Page) -> list[dict[str, Any]]:
    """The table of contents as ``action=parse`` gives it: level, numbered ``1``, ``1.1``, ..."""
    out: list[dict[str, Any]] = []
    counters: list[int] = []
    base = min((s["level"] for s in page_lookup.sections(store, page.page_id) if s["index"] > 0), default=2)
    for s in page_lookup.sections(store, page.page_id):
        if s["index"] == 0:
            continue
        depth = max(1, s["level"] - base + 1)
        counters = (counters + [0] * depth)[:depth]
        counters[-1] += 1
        anchor = s["heading"].replace(" ", "_")
        out.append(
            {
                "toclevel": depth,
                "level": str(s["level"]),
                "line": s["heading"],
                "number": ".".join(map(str, counters)),
                "index": str(s["index"]),
                "fromtitle": page.title.replace(" ", "_"),
                "byteoffset": None,
                "anchor": anchor,
                "linkAnchor": anchor,
            }
        )
    return out


# -- generator=categories|backlinks|categorymembers (mwclient's page.categories(), backlinks(), members) ------


def _listed(p: Mapping[str, str], reply: Any, prefix: str, module: str, entries: list[mw.Entry]) -> list[mw.Entry]:
    """``entries`` cut at ``{prefix}limit``, continued by ``{prefix}continue``."""
    limit = mw._limit(p, f"{prefix}limit", 10, reply, module)
    start = mw._int(p.get(f"{prefix}continue", "").rpartition("|")[2])
    if start + limit < len(entries):
        reply.cont[f"{prefix}continue"] = f"page|{start + limit}"
    return entries[start : start + limit]


def generator_categories(store: Any, p: Mapping[str, str], reply: Any) -> list[mw.Entry]:
    """The categories of the given pages, as pages of namespace 14 (the store keeps no category pages: each is
    listed as missing, as a category without a description page is)."""
    sources = mw.source_pages(store, p, reply)
    reply.query.pop("normalized", None)
    names = sorted({c for pg in sources for c in store.categories(pg.page_id)})
    return _listed(p, reply, "gcl", "categories", [mw.Entry(f"Category:{c}", ns=14) for c in names])


def generator_backlinks(store: Any, p: Mapping[str, str], reply: Any) -> list[mw.Entry]:
    title = canonical_title(p.get("gbltitle") or "")
    if p.get("gblfilterredir") == "redirects":  # the redirects to the page (pywikibot follows them)
        entries = [mw.Entry(t, redirect_id=i) for i, t in mw.redirects_to(store, title)] if title else []
        return _listed(p, reply, "gbl", "backlinks", entries)
    pages = page_lookup.backlinks(store, title) if title else []
    return _listed(p, reply, "gbl", "backlinks", [mw.Entry(pg.title, pg) for pg in pages])


def generator_categorymembers(store: Any, p: Mapping[str, str], reply: Any) -> list[mw.Entry]:
    title = p.get("gcmtitle") or ""
    if not title.startswith("Category:"):
        reply.warn("categorymembers", 'The "gcmtitle" parameter must name a category ("Category:...").')
        return []
    members = page_lookup.category_members(store, canonical_title(title.split(":", 1)[1]))
    return _listed(p, reply, "gcm", "categorymembers", [mw.Entry(pg.title, pg) for pg in members])


GENERATORS = {
    "categories": generator_categories,
    "backlinks": generator_backlinks,
    "categorymembers": generator_categorymembers,
}
