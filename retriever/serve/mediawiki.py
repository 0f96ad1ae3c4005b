"""A subset of the MediaWiki Action API at ``/w/api.php``, answered from the local store.

A tool written against live Wikipedia runs air-gapped by changing its base URL. Served: ``action=query`` with
``titles`` or ``pageids``, ``redirects``, ``format=json`` in formatversion 1 (pages keyed by page id, missing pages
with negative ids) and 2; ``prop=extracts|info|categories|links|pageprops`` with ``continue``; ``list=search|
categorymembers|backlinks``; ``generator=search|links``. As MediaWiki does, an unknown action or module gets
``{"error": {"code", "info"}}``, and a parameter or value the store cannot serve is left out with a ``warnings``
entry. Nothing here answers a 500: an unexpected failure is an ``internal_api_error`` body.
"""

from __future__ import annotations

import html
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from fastapi import Request
from fastapi.responses import JSONResponse

from retriever.serve import pages as page_lookup
from wikiground.records import Page
from wikiground.text import canonical_title

log = logging.getLogger(__name__)

PROPS = ("extracts", "info", "categories", "links", "pageprops")
LISTS = ("search", "categorymembers", "backlinks")
GENERATORS = ("search", "links")
INPROPS = ("url",)
MAX_LIMIT = 500
MAX_TITLES = 50
INTRO_EXTRACTS = 20  # TextExtracts' cap per request for intros; a whole-article extract is one per request
CORE_PARAMS = {"action", "format", "formatversion", "redirects", "titles", "pageids", "prop", "list", "generator"}
IGNORED_PARAMS = {"maxlag", "utf8", "origin", "continue", "errorformat", "uselang", "smaxage", "maxage", "curtimestamp"}
PARAM_PREFIXES = ("ex", "in", "pp", "cl", "pl", "sr", "cm", "bl", "gsr", "gpl")


@dataclass
class Reply:
    """One API answer being built: the query block, warnings per module, the continuation."""

    fv2: bool
    query: dict[str, Any] = field(default_factory=dict)
    warnings: dict[str, list[str]] = field(default_factory=dict)
    cont: dict[str, Any] = field(default_factory=dict)
    props_incomplete: bool = False

    def warn(self, module: str, text: str) -> None:
        self.warnings.setdefault(module, []).append(text)

    def flag(self) -> Any:
        return True if self.fv2 else ""

    def body(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if not self.props_incomplete:
            out["batchcomplete"] = self.flag()
        if self.warnings:
            key = "warnings" if self.fv2 else "*"
            out["warnings"] = {m: {key: "\n".join(ws)} for m, ws in self.warnings.items()}
        if self.cont:
            out["continue"] = {**self.cont, "continue": "-||" if "sroffset" in self.cont else "||"}
        if self.query:
            out["query"] = self.query
        return out


def error(code: str, info: str) -> dict[str, Any]:
    return {"error": {"code": code, "info": info, "docref": "This is wikiground's offline subset of the API."}}


def _limit(p: Mapping[str, str], name: str, default: int, reply: Reply, module: str, cap: int = MAX_LIMIT) -> int:
    raw = p.get(name)
    if raw is None or raw == "":
        return default
    if raw == "max":
        return cap
    if not raw.isdigit() or int(raw) < 1:
        reply.warn(module, f'Invalid value "{raw}" for integer parameter "{name}"; using {default}.')
        return default
    if int(raw) > cap:
        reply.warn(module, f'"{name}" may not be over {cap} (set to {raw}) for users.')
        return cap
    return int(raw)


def _int(raw: str | None, default: int = 0) -> int:
    return int(raw) if raw and raw.isdigit() else default


def _values(p: Mapping[str, str], name: str) -> list[str]:
    return [v for v in (p.get(name) or "").split("|") if v]


def page_url(page: Page) -> str:
    return page.url or "https://en.wikipedia.org/wiki/" + quote(page.title.replace(" ", "_"), safe="()_,:'!")


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
    if action != "query":
        return error("badvalue", f'Unrecognized value for parameter "action": {action}.')
    reply = Reply(fv2=p.get("formatversion") in ("2", "latest"))
    if p.get("format", "json") not in ("json", "jsonfm"):
        reply.warn("main", f'Only format=json is served; "{p.get("format")}" was answered as json.')
    _check_params(p, reply)
    for kind, known in (("prop", PROPS), ("list", LISTS), ("generator", GENERATORS)):
        for value in _values(p, kind) if kind != "generator" else [v for v in [p.get(kind)] if v]:
            if value not in known:
                return error("badvalue", f'Unrecognized value for parameter "{kind}": {value}.')
    for name in _values(p, "list"):
        LIST_MODULES[name](store, retriever, p, reply)
    titles = _page_set(store, retriever, p, reply)
    if titles is not None:
        _pages(store, p, reply, titles)
    return reply.body()


def _check_params(p: Mapping[str, str], reply: Reply) -> None:
    for name in p:
        if name in CORE_PARAMS or name in IGNORED_PARAMS or name.startswith(PARAM_PREFIXES):
            continue
        reply.warn("main", f"Unrecognized parameter: {name}.")
    unserved = [v for v in _values(p, "inprop") if v not in INPROPS]
    if unserved:
        reply.warn("info", f"Not served offline (left out): inprop={'|'.join(unserved)}.")


# -- the page set -------------------------------------------------------------------------------------


@dataclass
class Entry:
    """One page of the answer: found (with its Page) or missing/invalid."""

    title: str
    page: Page | None = None
    invalid: str | None = None
    index: int | None = None
    redirect_id: int | None = None  # a redirect page, not followed (no ``redirects`` parameter)


def _page_set(store: Any, retriever: Any, p: Mapping[str, str], reply: Reply) -> list[Entry] | None:
    gen = p.get("generator")
    if gen == "search":
        return _generator_search(store, retriever, p, reply)
    if gen == "links":
        return _generator_links(store, p, reply)
    if "titles" in p:
        return _by_titles(store, _values(p, "titles") or [p["titles"]], p, reply)
    if "pageids" in p:
        return _by_ids(store, _values(p, "pageids"), reply)
    return None


def _by_titles(store: Any, raw: list[str], p: Mapping[str, str], reply: Reply) -> list[Entry]:
    if len(raw) > MAX_TITLES:
        reply.warn("main", f'Too many values supplied for parameter "titles". The limit is {MAX_TITLES}.')
        raw = raw[:MAX_TITLES]
    follow = "redirects" in p and p["redirects"] not in ("0", "false")
    normalized, redirects, out = [], [], []
    for t in raw:
        title = canonical_title(t)
        if not title or re.search(r"[#<>\[\]|{}]", title):
            out.append(Entry(t, invalid="The requested page title is empty or contains invalid characters."))
            continue
        if title != t:
            normalized.append({"from": t, "to": title})
        res = store.resolve_titles([title], loose=False).get(title)
        if res is not None and res.via_redirect and follow:
            item = {"from": title, "to": res.title}
            if res.fragment:
                item["tofragment"] = res.fragment
            redirects.append(item)
        if res is not None and res.via_redirect and not follow:
            out.append(Entry(title, redirect_id=_redirect_page_id(store, title)))
            continue
        page = store.page(res.page_id) if res is not None else None
        out.append(Entry(page.title if page else title, page))
    if normalized:
        reply.query["normalized"] = normalized
    if redirects:
        reply.query["redirects"] = redirects
    return out


def _redirect_page_id(store: Any, title: str) -> int | None:
    found = page_lookup.rows(store, "SELECT source_page_id FROM redirects WHERE source_title = ? LIMIT 1", [title])
    return int(found[0][0]) if found and found[0][0] is not None else None


def _by_ids(store: Any, raw: list[str], reply: Reply) -> list[Entry]:
    ids = [int(v) for v in raw if v.lstrip("-").isdigit()]
    bad = [v for v in raw if not v.lstrip("-").isdigit()]
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
    sources = [e.page for e in _by_titles(store, _values(p, "titles"), p, reply) if e.page is not None]
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


def linked_titles(store: Any, page: Page) -> list[str]:
    """The titles a page links to, canonical, once each, sorted (MediaWiki lists links by title)."""
    return sorted({canonical_title(t) for t, _ in store.links(page.page_id) if t.strip()})


def search_pages(retriever: Any, text: str, k: int) -> list[Page]:
    """The pages of the local index's fused search for ``text``, best first."""
    return [page for page, _ in search_hits(retriever, text, k)]


def search_hits(retriever: Any, text: str, k: int) -> list[tuple[Page, str]]:
    """(page, text of its best passage) of the local index's fused search for ``text``, best first."""
    if not text.strip():
        return []
    fused = retriever.fused_pages(text, k=min(k, MAX_LIMIT + 1))
    pages = retriever.store.pages(f.page_id for f in fused)
    passages = retriever.store.passages(f.best.passage_id for f in fused)
    return [
        (pages[f.page_id], passages[f.best.passage_id].text if f.best.passage_id in passages else pages[f.page_id].lead)
        for f in fused
        if f.page_id in pages
    ]


# -- the pages' props -----------------------------------------------------------------------------------


def _pages(store: Any, p: Mapping[str, str], reply: Reply, entries: list[Entry]) -> None:
    seen: dict[str, dict[str, Any]] = {}
    existing: list[tuple[dict[str, Any], Page]] = []
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
        elif e.invalid:
            missing += 1
            seen[str(-missing)] = {"title": e.title, "invalidreason": e.invalid, "invalid": reply.flag()}
        elif e.title:
            missing += 1
            seen[str(-missing)] = {"ns": 0, "title": e.title, "missing": reply.flag()}
        else:  # a page id with no page
            seen[str(e.index)] = {"pageid": e.index, "missing": reply.flag()}
    for module in _values(p, "prop"):
        PROP_MODULES[module](store, p, reply, existing)
    if reply.fv2:
        reply.query["pages"] = sorted(
            seen.values(), key=lambda d: ("missing" in d or "invalid" in d, d.get("pageid", 0))
        )
    else:
        reply.query["pages"] = seen


def _prop_info(store: Any, p: Mapping[str, str], reply: Reply, existing: list[tuple[dict, Page]]) -> None:
    want_url = "url" in _values(p, "inprop")
    for d, page in existing:
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


def extract_text(store: Any, page: Page, *, intro: bool, sectionformat: str) -> str:
    """A page's plain text: the lead alone, or every section with ``== Heading ==`` marks (``wiki``) or bare
    headings (``plain``)."""
    if intro:
        return page.lead
    secs = page_lookup.sections(store, page.page_id)
    parts = [page.lead]
    for s in secs:
        if s["index"] == 0:
            continue
        marks = "=" * max(2, s["level"])
        head = f"{marks} {s['heading']} {marks}" if sectionformat == "wiki" else s["heading"]
        parts.append(f"\n\n{head}\n{s['text']}")
    return "".join(parts).strip()


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
    for name in ("exchars", "exsentences"):
        if name in p:
            reply.warn("extracts", f"{name} is not served offline (left out).")
    start = _int(p.get("excontinue"))
    for n, (d, page) in enumerate(existing):
        if start <= n < start + limit:
            text = extract_text(store, page, intro=intro, sectionformat=fmt)
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
    ranked = search_hits(retriever, text, offset + limit + 1)
    info = _values(p, "srinfo") if "srinfo" in p else ["totalhits"]
    if "totalhits" in info:
        reply.query["searchinfo"] = {"totalhits": len(ranked)}
    srprop = _values(p, "srprop") if "srprop" in p else ["size", "wordcount", "timestamp", "snippet"]
    hits = []
    for page, best in ranked[offset : offset + limit]:
        hit: dict[str, Any] = {"ns": page.namespace, "title": page.title, "pageid": page.page_id}
        if "size" in srprop or "wordcount" in srprop:
            hit.update(size=len(page.lead), wordcount=len(page.lead.split()))
        if "snippet" in srprop:
            hit["snippet"] = _snippet(best, text)
        if "timestamp" in srprop and page.rev_timestamp:
            hit["timestamp"] = page.rev_timestamp
        hits.append(hit)
    reply.query["search"] = hits
    if len(ranked) > offset + limit:
        reply.cont["sroffset"] = offset + limit


def _member_list(p: Mapping[str, str], reply: Reply, name: str, prefix: str, pages: list[Page]) -> None:
    limit = _limit(p, f"{prefix}limit", 10, reply, name)
    start = _int(p.get(f"{prefix}continue", "").rpartition("|")[2])
    reply.query[name] = [
        {"pageid": pg.page_id, "ns": pg.namespace, "title": pg.title} for pg in pages[start : start + limit]
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
    _member_list(p, reply, "backlinks", "bl", page_lookup.backlinks(store, title) if title else [])


LIST_MODULES = {"search": _list_search, "categorymembers": _list_categorymembers, "backlinks": _list_backlinks}


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
