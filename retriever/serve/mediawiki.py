"""A subset of the MediaWiki Action API at ``/w/api.php``, answered from the local store.

A tool written against live Wikipedia runs air-gapped by changing its base URL. Served: ``action=query`` with
``titles`` or ``pageids``, ``redirects``, ``format=json`` in formatversion 1 (pages keyed by page id, missing pages
with negative ids) and 2; ``prop=extracts|info|categories|links|pageprops|revisions`` with ``continue``;
``list=search|categorymembers|backlinks|random``; ``meta=siteinfo|userinfo``; ``generator=search|links``; and
``action=parse`` (:mod:`retriever.serve.mediawiki_extra`). As MediaWiki does, an unknown action or generator gets
``{"error": {"code", "info"}}``; a ``prop``, ``list`` or ``meta`` value it does not serve (they are multi-valued) and
a parameter or value the store cannot serve are left out with a ``warnings`` entry. Nothing here answers a 500: an
unexpected failure is an ``internal_api_error`` body.
"""

from __future__ import annotations

import html
import logging
import re
from collections.abc import Mapping
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse

from retriever import pages as page_lookup
from retriever.serve import mediawiki_checks, mediawiki_pages
from retriever.serve import mediawiki_clients as clients
from retriever.serve.mediawiki_common import (
    MAX_LIMIT,
    MAX_TITLES,  # noqa: F401 -- re-exported, it was defined here
    Entry,
    Reply,
    _by_titles,
    _int,
    _limit,
    _redirect_page_id,  # noqa: F401 -- re-exported, it was defined here
    _values,
    error,
    extract_text,
    linked_titles,
    page_url,
    source_pages,
)
from retriever.serve.mediawiki_common import redirects_to as mw_redirects_to
from retriever.serve.mediawiki_extra import GENERATORS as MORE_GENERATORS
from retriever.serve.mediawiki_extra import META_MODULES, list_random, parse, prop_revisions
from wikiground.records import Page
from wikiground.text import canonical_title

log = logging.getLogger(__name__)

PROPS = ("extracts", "info", "categories", "links", "pageprops", "revisions")
LISTS = ("search", "categorymembers", "backlinks", "random", *clients.LIST_MODULES)
METAS = ("siteinfo", "userinfo")
GENERATORS = ("search", "links", "categories", "backlinks", "categorymembers", *clients.GENERATORS)
INPROPS = ("url", "displaytitle")
INTRO_EXTRACTS = 20  # TextExtracts' cap per request for intros; a whole-article extract is one per request
CORE_PARAMS = {
    "action",
    "format",
    "formatversion",
    "redirects",
    "titles",
    "pageids",
    "revids",
    "indexpageids",
    "prop",
    "list",
    "generator",
    "meta",
}
IGNORED_PARAMS = {
    "maxlag",
    "utf8",
    "origin",
    "continue",
    "errorformat",
    "errorlang",
    "errorsuselocal",
    "uselang",
    "smaxage",
    "maxage",
    "curtimestamp",
    "requestid",
    "servedby",
    "responselanginfo",
}
# A module's parameters are recognized when the module is asked for (as MediaWiki does: rvprop without
# prop=revisions is an "Unrecognized parameter").
MODULE_PREFIXES = {
    "extracts": "ex",
    "info": "in",
    "pageprops": "pp",
    "categories": "cl",
    "links": "pl",
    "revisions": "rv",
    "search": "sr",
    "categorymembers": "cm",
    "backlinks": "bl",
    "random": "rn",
    "siteinfo": "si",
    "userinfo": "ui",
    **clients.LIST_PREFIXES,
}
GENERATOR_PREFIXES = {
    **clients.GENERATOR_PREFIXES,
    "search": "gsr",
    "links": "gpl",
    "categories": "gcl",
    "backlinks": "gbl",
    "categorymembers": "gcm",
}


def answer(store: Any, retriever: Any, params: Mapping[str, str]) -> dict[str, Any]:
    """The API's answer to ``params`` (never raises: an unexpected failure becomes an error body)."""
    try:
        return _answer(store, retriever, params)
    except Exception as exc:  # the API's contract: an error body, not a 500
        log.exception("api.php %s failed", dict(params))
        return error("internal_api_error_" + type(exc).__name__, "internal error (see the server's log)")


def _answer(store: Any, retriever: Any, p: Mapping[str, str]) -> dict[str, Any]:
    action = p.get("action")
    if action is None:
        return error("missingparam", 'The "action" parameter must be set.')
    refused = mediawiki_checks.check(p, error)
    if refused is not None:
        return refused
    if action == "parse":
        return mediawiki_pages.parse_more(store, p) or parse(store, p)
    if action == "opensearch":
        return clients.opensearch(store, p)  # type: ignore[return-value] - OpenSearch answers a JSON array
    if action == "paraminfo":
        return clients.paraminfo(p)
    if action != "query":
        return error("badvalue", f'Unrecognized value for parameter "action": {action}.')
    gen = p.get("generator")
    if gen is not None and gen not in GENERATORS:
        return error("badvalue", f'Unrecognized value for parameter "generator": {gen}.')
    reply = Reply(fv2=p.get("formatversion") in ("2", "latest"))
    if p.get("format", "json") not in ("json", "jsonfm"):
        reply.warn("main", f'Only format=json is served; "{p.get("format")}" was answered as json.')
    _check_params(p, reply)
    for kind, known in (("prop", PROPS), ("list", LISTS), ("meta", METAS)):
        unknown = [v for v in _values(p, kind) if v not in known]
        if unknown:  # multi-valued: MediaWiki answers the rest, with a warning
            reply.warn(
                "main",
                f'Unrecognized value{"s" if len(unknown) > 1 else ""} for parameter "{kind}": {", ".join(unknown)}.',
            )
    for name in _values(p, "meta"):
        if name in META_MODULES:
            META_MODULES[name](store, retriever, p, reply)
    for name in _values(p, "list"):
        if name in LIST_MODULES:
            LIST_MODULES[name](store, retriever, p, reply)
    titles = _page_set(store, retriever, p, reply)
    if titles is not None:
        _pages(store, p, reply, titles)
    return reply.body()


def _check_params(p: Mapping[str, str], reply: Reply) -> None:
    asked = [*_values(p, "prop"), *_values(p, "list"), *_values(p, "meta")]
    prefixes = tuple(MODULE_PREFIXES[m] for m in asked if m in MODULE_PREFIXES)
    prefixes += tuple(v for k, v in GENERATOR_PREFIXES.items() if p.get("generator") == k)
    for name in p:
        if name in CORE_PARAMS or name in IGNORED_PARAMS or (prefixes and name.startswith(prefixes)):
            continue
        reply.warn("main", f"Unrecognized parameter: {name}.")
    unserved = [v for v in _values(p, "inprop") if v not in INPROPS]
    if unserved:
        reply.warn("info", f"Not served offline (left out): inprop={'|'.join(unserved)}.")


# -- the page set -------------------------------------------------------------------------------------


def _page_set(store: Any, retriever: Any, p: Mapping[str, str], reply: Reply) -> list[Entry] | None:
    gen = p.get("generator")
    if gen == "search":
        return _generator_search(store, retriever, p, reply)
    if gen == "links":
        return _generator_links(store, p, reply)
    if gen in ("categories", "backlinks", "categorymembers"):
        return MORE_GENERATORS[gen](store, p, reply)
    if gen in clients.GENERATORS:
        return clients.GENERATORS[gen](store, p, reply)
    if "titles" in p:
        return _by_titles(store, _values(p, "titles") or [p["titles"]], p, reply)
    if "pageids" in p:
        return _by_ids(store, _values(p, "pageids"), reply)
    if "revids" in p:
        return mediawiki_pages.by_revids(store, _values(p, "revids"), reply)
    return None


def _by_ids(store: Any, raw: list[str], reply: Reply) -> list[Entry]:
    ok = [v for v in raw if mediawiki_checks.is_integer(v.removeprefix("-")) and len(v) < 19]  # DuckDB's BIGINT
    ids = [int(v) for v in ok]
    bad = [v for v in raw if v not in ok]
    if bad:
        reply.warn("main", f'Invalid value for parameter "pageids": {"|".join(bad)}.')
    found = store.pages(i for i in ids if i > 0)
    return [Entry(found[i].title, found[i]) if i in found else Entry("", invalid=None, index=i) for i in ids]


def _generator_search(store: Any, retriever: Any, p: Mapping[str, str], reply: Reply) -> list[Entry]:
    limit = _limit(p, "gsrlimit", 10, reply, "search")
    offset = _int(p.get("gsroffset"))
    ranked = search_pages(retriever, p.get("gsrsearch", ""), offset + limit + 1)
    if len(ranked) > offset + limit:
        reply.cont["gsroffset"] = offset + limit
    chosen = ranked[offset : offset + limit]
    return [Entry(pg.title, pg, index=offset + n) for n, pg in enumerate(chosen, start=1)]


def _generator_links(store: Any, p: Mapping[str, str], reply: Reply) -> list[Entry]:
    """The pages the given pages link to, by title as MediaWiki lists them; links to no local page are missing."""
    sources = source_pages(store, p, reply)
    linked = sorted({t for pg in sources for t in linked_titles(store, pg)})
    limit = _limit(p, "gpllimit", 10, reply, "links")
    start = _int(p.get("gplcontinue"))
    if start + limit < len(linked):
        reply.cont["gplcontinue"] = str(start + limit)
    reply.query.pop("normalized", None)
    chunk = linked[start : start + limit]
    found = store.resolve_titles(chunk, loose=False)
    pages = store.pages(r.page_id for r in found.values())
    out = []
    for t in chunk:
        page = pages.get(found[t].page_id) if t in found else None
        out.append(Entry(page.title, page) if page else Entry(t))
    return out


def search_pages(retriever: Any, text: str, k: int) -> list[Page]:
    """The pages of the local index's fused search for ``text``, best first."""
    return [page for page, _ in search_hits(retriever, text, k)]


def search_hits(retriever: Any, text: str, k: int, *, start: int = 0) -> list[tuple[Page, str]]:
    """(page, text of its best passage) of the local index's fused search for ``text``, best first, from the
    ``start``-th; the pages are looked up for those alone."""
    return search_ranked(retriever, text, k, start=start)[1]


def search_ranked(retriever: Any, text: str, k: int, *, start: int = 0) -> tuple[int, list[tuple[Page, str]]]:
    """The number of pages the fused search for ``text`` finds (at most ``k``) and the (page, best passage text)
    of those from the ``start``-th."""
    if not text.strip():
        return 0, []
    fused = retriever.fused_pages(text, k=min(k, MAX_LIMIT + 1))
    chosen = fused[start:]
    pages = retriever.store.pages(f.page_id for f in chosen)
    passages = retriever.store.passages(f.best.passage_id for f in chosen)
    hits = [
        (pages[f.page_id], passages[f.best.passage_id].text if f.best.passage_id in passages else pages[f.page_id].lead)
        for f in chosen
        if f.page_id in pages
    ]
    return len(fused), hits


# -- the pages' props -----------------------------------------------------------------------------------


def _pages(store: Any, p: Mapping[str, str], reply: Reply, entries: list[Entry]) -> None:
    seen: dict[str, dict[str, Any]] = {}
    existing: list[tuple[dict[str, Any], Page]] = []
    redirects: list[tuple[dict[str, Any], str]] = []  # redirect pages asked for themselves (no ``redirects``)
    missing = 0
    for e in entries:
        if e.page is not None:
            key = str(e.page.page_id)
            if key not in seen:
                seen[key] = {"pageid": e.page.page_id, "ns": e.page.namespace, "title": e.page.title}
                if e.index is not None:
                    seen[key]["index"] = e.index
                existing.append((seen[key], e.page))
            continue
        if e.redirect_id is not None:
            seen[str(e.redirect_id)] = {"pageid": e.redirect_id, "ns": 0, "title": e.title, "redirect": reply.flag()}
            redirects.append((seen[str(e.redirect_id)], e.title))
        elif e.invalid:
            missing += 1
            seen[str(-missing)] = {"title": e.title, "invalidreason": e.invalid, "invalid": reply.flag()}
        elif e.title:
            missing += 1
            seen[str(-missing)] = {"ns": e.ns, "title": e.title, "missing": reply.flag()}
        else:  # a page id with no page
            seen[str(e.index)] = {"pageid": e.index, "missing": reply.flag()}
    for module in _values(p, "prop"):
        if module in PROP_MODULES:
            PROP_MODULES[module](store, p, reply, existing)
    if "revisions" in _values(p, "prop"):
        mediawiki_pages.redirect_revisions(store, p, reply, redirects)
    if reply.fv2:
        reply.query["pages"] = sorted(
            seen.values(), key=lambda d: ("missing" in d or "invalid" in d, d.get("pageid", 0))
        )
    else:
        reply.query["pages"] = seen


def _prop_info(store: Any, p: Mapping[str, str], reply: Reply, existing: list[tuple[dict, Page]]) -> None:
    inprop = _values(p, "inprop")
    want_url = "url" in inprop
    for d, page in existing:
        if "displaytitle" in inprop:  # the store keeps no DISPLAYTITLE override: the title, as HTML
            d["displaytitle"] = html.escape(page.title)
        d.update(contentmodel="wikitext", pagelanguage="en", pagelanguagehtmlcode="en", pagelanguagedir="ltr")
        if page.rev_timestamp:
            d["touched"] = page.rev_timestamp
        if page.rev_id is not None:
            d["lastrevid"] = page.rev_id
        d["length"] = len(page.lead)
        if want_url:
            url = page_url(page)
            edit = url.replace("/wiki/", "/w/index.php?title=", 1) + "&action=edit"
            d.update(fullurl=url, editurl=edit, canonicalurl=url)


def _prop_pageprops(store: Any, p: Mapping[str, str], reply: Reply, existing: list[tuple[dict, Page]]) -> None:
    wanted = _values(p, "ppprop")
    if [v for v in wanted if v != "disambiguation"]:
        reply.warn("pageprops", "Only the disambiguation page property is served offline.")
    for d, page in existing:
        if page.is_disambiguation and (not wanted or "disambiguation" in wanted):
            d["pageprops"] = {"disambiguation": ""}


def _prop_extracts(store: Any, p: Mapping[str, str], reply: Reply, existing: list[tuple[dict, Page]]) -> None:
    intro = "exintro" in p and p["exintro"] not in ("0", "false")
    fmt = p.get("exsectionformat", "wiki")
    if fmt not in ("wiki", "plain"):
        reply.warn("extracts", f'exsectionformat={fmt} is not served offline; answered as "wiki".')
        fmt = "wiki"
    cap = INTRO_EXTRACTS if intro else 1
    limit = _limit(p, "exlimit", cap, reply, "extracts", cap=cap)
    if "exlimit" in p and p["exlimit"] != "max" and _int(p["exlimit"]) > cap:
        pass  # _limit has warned
    start = _int(p.get("excontinue"))
    for n, (d, page) in enumerate(existing):
        if start <= n < start + limit:
            text = mediawiki_pages.cut_extract(store, page, p) or extract_text(
                store, page, intro=intro, sectionformat=fmt
            )
            d["extract"] = (
                text if "explaintext" in p else "".join(f"<p>{html.escape(x)}</p>" for x in text.split("\n") if x)
            )
    if start + limit < len(existing):
        reply.cont["excontinue"] = start + limit
        reply.props_incomplete = True


def _paged(p: Mapping[str, str], reply: Reply, existing, prefix: str, name: str, items_of, ns: int) -> None:
    """A per-page list (categories, links) cut at ``{prefix}limit`` over all pages, continued by
    ``{prefix}continue = "pageid|Title_with_underscores"``."""
    limit = _limit(p, f"{prefix}limit", 10, reply, name)
    flat = [(d, t) for d, page in existing for t in items_of(page)]
    keys = [f"{d['pageid']}|{t.split(':', 1)[-1] if ns == 14 else t}".replace(" ", "_") for d, t in flat]
    marker = p.get(f"{prefix}continue")
    start = keys.index(marker) if marker in keys else (len(flat) if marker else 0)
    for d, t in flat[start : start + limit]:
        d.setdefault(name, []).append({"ns": ns, "title": t})
    if start + limit < len(flat):
        reply.cont[f"{prefix}continue"] = keys[start + limit]
        reply.props_incomplete = True


def _prop_categories(store: Any, p: Mapping[str, str], reply: Reply, existing: list[tuple[dict, Page]]) -> None:
    _paged(
        p, reply, existing, "cl", "categories", lambda pg: ["Category:" + c for c in store.categories(pg.page_id)], 14
    )


def _prop_links(store: Any, p: Mapping[str, str], reply: Reply, existing: list[tuple[dict, Page]]) -> None:
    _paged(p, reply, existing, "pl", "links", lambda page: linked_titles(store, page), 0)


PROP_MODULES = {
    "info": _prop_info,
    "pageprops": _prop_pageprops,
    "extracts": _prop_extracts,
    "categories": _prop_categories,
    "links": _prop_links,
}


# -- lists ----------------------------------------------------------------------------------------------


def _snippet(text: str, query: str) -> str:
    """About 30 words of ``text`` from just before the first word of ``query`` in it, the query's words marked as
    CirrusSearch marks them (``<span class="searchmatch">``)."""
    words = {w.casefold() for w in re.findall(r"\w+", query) if len(w) > 2}
    tokens = text.split()
    first = next((i for i, t in enumerate(tokens) if re.sub(r"\W", "", t).casefold() in words), 0)
    start = max(0, first - 5)
    escaped = html.escape(" ".join(tokens[start : start + 30]))
    for w in sorted(words, key=len, reverse=True):
        escaped = re.sub(rf"\b({re.escape(w)})\b", r'<span class="searchmatch">\1</span>', escaped, flags=re.I)
    return escaped


def _list_search(store: Any, retriever: Any, p: Mapping[str, str], reply: Reply) -> None:
    text = p.get("srsearch", "")
    if not text.strip():
        reply.query["search"] = []
        return
    limit = _limit(p, "srlimit", 10, reply, "search")
    offset = _int(p.get("sroffset"))
    # One depth for every srlimit, so that totalhits does not change with it; only the pages shown are looked up.
    total, shown = search_ranked(retriever, text, MAX_LIMIT + 1, start=offset)
    shown = shown[: limit + 1]
    info = _values(p, "srinfo") if "srinfo" in p else ["totalhits"]
    if "totalhits" in info:
        reply.query["searchinfo"] = {"totalhits": total}
    if "suggestion" in info:
        mediawiki_pages.suggest(reply, text, [page for page, _ in shown])
    srprop = _values(p, "srprop") if "srprop" in p else ["size", "wordcount", "timestamp", "snippet"]
    hits = []
    for page, best in shown[:limit]:
        hit: dict[str, Any] = {"ns": page.namespace, "title": page.title, "pageid": page.page_id}
        if "size" in srprop or "wordcount" in srprop:
            hit.update(size=len(page.lead), wordcount=len(page.lead.split()))
        if "snippet" in srprop:
            hit["snippet"] = _snippet(best, text)
        if "timestamp" in srprop and page.rev_timestamp:
            hit["timestamp"] = page.rev_timestamp
        hits.append(hit)
    reply.query["search"] = hits
    if total > offset + limit:
        reply.cont["sroffset"] = offset + limit


def _member_list(p: Mapping[str, str], reply: Reply, name: str, prefix: str, pages: list[Page]) -> None:
    limit = _limit(p, f"{prefix}limit", 10, reply, name)
    start = _int(p.get(f"{prefix}continue", "").rpartition("|")[2])
    typed = "type" in _values(p, f"{prefix}prop")  # categorymembers' cmprop=type: every member is a page
    reply.query[name] = [
        {"pageid": pg.page_id, "ns": pg.namespace, "title": pg.title, **({"type": "page"} if typed else {})}
        for pg in pages[start : start + limit]
    ]
    if start + limit < len(pages):
        reply.cont[f"{prefix}continue"] = f"page|{start + limit}"


def _list_categorymembers(store: Any, retriever: Any, p: Mapping[str, str], reply: Reply) -> None:
    title = p.get("cmtitle") or ""
    if not title.startswith("Category:"):
        reply.warn("categorymembers", 'The "cmtitle" parameter must name a category ("Category:...").')
        reply.query["categorymembers"] = []
        return
    members = page_lookup.category_members(store, canonical_title(title.split(":", 1)[1]))
    _member_list(p, reply, "categorymembers", "cm", members)


def _list_backlinks(store: Any, retriever: Any, p: Mapping[str, str], reply: Reply) -> None:
    title = canonical_title(p.get("bltitle") or "")
    if p.get("blfilterredir") == "redirects":
        limit = _limit(p, "bllimit", 10, reply, "backlinks")
        found = mw_redirects_to(store, title)[:limit] if title else []
        reply.query["backlinks"] = [{"pageid": i, "ns": 0, "title": t, "redirect": reply.flag()} for i, t in found]
        return
    _member_list(p, reply, "backlinks", "bl", page_lookup.backlinks(store, title) if title else [])


def _list_random(store: Any, retriever: Any, p: Mapping[str, str], reply: Reply) -> None:
    list_random(store, retriever, p, reply)


def _prop_revisions(store: Any, p: Mapping[str, str], reply: Reply, existing: list[tuple[dict, Page]]) -> None:
    prop_revisions(store, p, reply, existing)


PROP_MODULES["revisions"] = _prop_revisions
LIST_MODULES = {
    "search": _list_search,
    "categorymembers": _list_categorymembers,
    "backlinks": _list_backlinks,
    "random": _list_random,
    **clients.LIST_MODULES,
}


def install(app: Any, state: Any, runner: Any) -> None:
    """``GET`` and ``POST /w/api.php`` on the application."""

    async def api(request: Request) -> Any:
        state.count("w/api.php")
        params = dict(request.query_params)
        if request.method == "POST":
            try:
                form = await request.form()
                params.update({k: v for k, v in form.items() if isinstance(v, str)})
            except Exception as exc:  # a malformed body is the client's error, in the API's shape
                return JSONResponse(error("badrequest", f"cannot read the request body: {exc}"))
        body = await runner.run(lambda r: answer(r.store, r, params))
        return JSONResponse(body, headers={"MediaWiki-API-Error": body["error"]["code"]} if "error" in body else None)

    app.add_api_route("/w/api.php", api, methods=["GET", "POST"], summary="MediaWiki Action API subset (offline)")
