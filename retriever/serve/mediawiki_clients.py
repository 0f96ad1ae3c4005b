"""What the common Python clients of the MediaWiki API read besides the modules of :mod:`retriever.serve.mediawiki`
and :mod:`retriever.serve.mediawiki_extra`: pymediawiki, ``wikipedia``, mwclient, Wikipedia-API and pywikibot, in
their read-only calls.

``meta=siteinfo`` with ``extensions`` (the ones this subset emulates), ``namespacealiases`` and the general block's
``thumblimits``, ``imagelimits`` and ``magiclinks`` (pymediawiki and pywikibot read them when they connect);
``action=paraminfo`` for the modules served (pywikibot learns the API from it); ``action=opensearch``;
``list=prefixsearch`` and ``list=allpages`` (and ``generator=allpages|prefixsearch``) from the stored titles;
``generator=templates|images``, which the store cannot fill, answered empty with a warning; a namespace from a
title's prefix (``Category:``, ``Talk:``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from retriever import pages as page_lookup
from retriever.serve import mediawiki_common as mw
from wikiground.text import canonical_title

__all__ = [
    "ACTIONS",
    "EXTENSIONS",
    "EMPTY_GENERATORS",
    "LIST_MODULES",
    "GENERATORS",
    "opensearch",
    "paraminfo",
    "siteinfo_extra",
]

ACTIONS = ("query", "parse", "opensearch", "paraminfo")
# The extensions whose API this subset emulates (the modules and page properties they add).
EXTENSIONS = (
    ("TextExtracts", "prop=extracts"),
    ("Disambiguator", "pageprops disambiguation"),
    ("CirrusSearch", "list=search"),
)
THUMB_LIMITS = [120, 150, 180, 200, 220, 250, 300, 400]
IMAGE_LIMITS = [(320, 240), (640, 480), (800, 600), (1024, 768), (1280, 1024), (2560, 2048)]
EMPTY_GENERATORS = ("templates", "images")


# -- meta=siteinfo ----------------------------------------------------------------------------------------


def siteinfo_extra(wanted: list[str], reply: Any) -> None:
    """The siteinfo parts that clients read when they connect, beside ``general`` and ``namespaces``."""
    general = reply.query.get("general")
    if general is not None:
        # Objects keyed by position in both format versions, as MediaWiki writes these PHP arrays.
        general["thumblimits"] = {str(n): v for n, v in enumerate(THUMB_LIMITS)}
        general["imagelimits"] = {str(n): {"width": w, "height": h} for n, (w, h) in enumerate(IMAGE_LIMITS)}
        general["magiclinks"] = {name: reply.flag() for name in ("ISBN", "PMID", "RFC")}
        general.setdefault("misermode", reply.flag())  # as Wikipedia: expensive queries are cut short
        general.setdefault("maxuploadsize", 0)
        general.setdefault("timezone", "UTC")
        general.setdefault("timeoffset", 0)
        general.setdefault("legaltitlechars", " %!\"$&'()*,\\-.\\/0-9:;=?@A-Z\\\\^_`a-z~\\x80-\\xFF+")
    if "extensions" in wanted:
        reply.query["extensions"] = [
            {"type": "other", "name": name, "descriptionmsg": what, "version": "offline", "license-name": "GPL-2.0"}
            for name, what in EXTENSIONS
        ]
    if "namespacealiases" in wanted:
        key = "alias" if reply.fv2 else "*"
        reply.query["namespacealiases"] = [{"id": n, key: name} for name, n in mw.NAMESPACE_ALIASES.items()]


# -- action=opensearch ---------------------------------------------------------------------------------------


def _title_prefix(store: Any, prefix: str, limit: int, offset: int = 0) -> list[tuple[int, str]]:
    """(page id, title) of the articles whose title starts with ``prefix`` (first letter as MediaWiki cases it),
    in title order."""
    start = canonical_title(prefix) if prefix.strip() else ""
    return [
        (int(i), t)
        for i, t in page_lookup.rows(
            store,
            "SELECT page_id, title FROM pages WHERE namespace = 0 AND starts_with(title, ?) ORDER BY title "
            "LIMIT ? OFFSET ?",
            [start, limit, offset],
        )
    ]


def opensearch(store: Any, p: Mapping[str, str]) -> list[Any]:
    """``[search, [titles], [descriptions], [urls]]``: titles that start with ``search`` (after redirects, the
    redirect's target), with each page's first sentence as the description, as OpenSearch answers."""
    search = p.get("search", "")
    limit = mw._int(p.get("limit"), 10) if p.get("limit") != "max" else 100
    found = _title_prefix(store, search, min(max(limit, 1), 100))
    pages = store.pages(i for i, _ in found)
    titles, descriptions, urls = [], [], []
    for page_id, title in found:
        page = pages.get(page_id)
        titles.append(title)
        descriptions.append((page.lead.split(". ")[0] + ".") if page and page.lead else "")
        urls.append(mw.page_url(page) if page else "")
    return [search, titles, descriptions, urls]


# -- list=prefixsearch|allpages and their generators -----------------------------------------------------------


def list_prefixsearch(store: Any, retriever: Any, p: Mapping[str, str], reply: Any) -> None:
    reply.query["prefixsearch"] = [
        {"ns": 0, "title": t, "pageid": i} for i, t in _prefixsearch(store, p, reply, "ps", "prefixsearch")
    ]


def _prefixsearch(store: Any, p: Mapping[str, str], reply: Any, prefix: str, module: str) -> list[tuple[int, str]]:
    limit = mw._limit(p, f"{prefix}limit", 10, reply, module)
    offset = mw._int(p.get(f"{prefix}offset"))
    found = _title_prefix(store, p.get(f"{prefix}search", ""), limit + 1, offset)
    if len(found) > limit:
        reply.cont[f"{prefix}offset"] = offset + limit
    return found[:limit]


def _allpages(store: Any, p: Mapping[str, str], reply: Any, prefix: str) -> list[tuple[int, str]]:
    """Articles in title order from ``{prefix}from`` (or ``{prefix}continue``), with ``{prefix}prefix``."""
    limit = mw._limit(p, f"{prefix}limit", 10, reply, "allpages")
    start = canonical_title(p.get(f"{prefix}continue") or p.get(f"{prefix}from") or "")
    if mw._int(p.get(f"{prefix}namespace")) != 0:
        reply.warn("allpages", "Only the articles (namespace 0) are stored offline.")
        return []
    found = [
        (int(i), t)
        for i, t in page_lookup.rows(
            store,
            "SELECT page_id, title FROM pages WHERE namespace = 0 AND title >= ? AND starts_with(title, ?) "
            "ORDER BY title LIMIT ?",
            [start.replace("_", " "), canonical_title(p.get(f"{prefix}prefix") or ""), limit + 1],
        )
    ]
    if len(found) > limit:
        reply.cont[f"{prefix}continue"] = found[limit][1].replace(" ", "_")
    return found[:limit]


def list_allpages(store: Any, retriever: Any, p: Mapping[str, str], reply: Any) -> None:
    reply.query["allpages"] = [{"pageid": i, "ns": 0, "title": t} for i, t in _allpages(store, p, reply, "ap")]


def _entries(store: Any, found: list[tuple[int, str]]) -> list[mw.Entry]:
    pages = store.pages(i for i, _ in found)
    return [mw.Entry(pages[i].title, pages[i]) for i, _ in found if i in pages]


def generator_allpages(store: Any, p: Mapping[str, str], reply: Any) -> list[mw.Entry]:
    return _entries(store, _allpages(store, p, reply, "gap"))


def generator_prefixsearch(store: Any, p: Mapping[str, str], reply: Any) -> list[mw.Entry]:
    return _entries(store, _prefixsearch(store, p, reply, "gps", "prefixsearch"))


def generator_random(store: Any, p: Mapping[str, str], reply: Any) -> list[mw.Entry]:
    """``generator=random`` (pywikibot's ``randompages``): random articles."""
    limit = mw._limit(p, "grnlimit", 1, reply, "random")
    found = page_lookup.rows(
        store, "SELECT page_id, title FROM pages WHERE namespace = 0 ORDER BY random() LIMIT ?", [limit]
    )
    return _entries(store, [(int(i), t) for i, t in found])


def generator_empty(name: str) -> Any:
    """A generator the store cannot fill (it keeps no templates or images): no pages, and a warning."""

    def generate(store: Any, p: Mapping[str, str], reply: Any) -> list[mw.Entry]:
        reply.warn(name, f"The {name} of pages are not stored offline: none are listed.")
        return []

    return generate


LIST_MODULES = {"prefixsearch": list_prefixsearch, "allpages": list_allpages}
GENERATORS = {
    "allpages": generator_allpages,
    "prefixsearch": generator_prefixsearch,
    "random": generator_random,
    **{name: generator_empty(name) for name in EMPTY_GENERATORS},
}
LIST_PREFIXES = {"prefixsearch": "ps", "allpages": "ap"}
GENERATOR_PREFIXES = {"allpages": "gap", "prefixsearch": "gps", "random": "grn", "templates": "gtl", "images": "gim"}


# -- action=paraminfo ---------------------------------------------------------------------------------------

# module -> (group, prefix, parameters, usable as a generator)
QUERY_MODULES: dict[str, tuple[str, str, tuple[str, ...], bool]] = {
    "extracts": (
        "prop",
        "ex",
        ("chars", "sentences", "limit", "intro", "plaintext", "sectionformat", "continue"),
        False,
    ),
    "info": ("prop", "in", ("prop",), False),
    "categories": ("prop", "cl", ("limit", "continue"), True),
    "links": ("prop", "pl", ("limit", "continue", "namespace"), True),
    "pageprops": ("prop", "pp", ("prop",), False),
    "revisions": ("prop", "rv", ("prop", "slots", "section", "parse", "limit"), True),
    "templates": ("prop", "tl", ("limit", "continue"), True),
    "images": ("prop", "im", ("limit", "continue"), True),
    "search": ("list", "sr", ("search", "limit", "offset", "info", "prop", "namespace", "what"), True),
    "categorymembers": ("list", "cm", ("title", "limit", "continue", "type", "namespace"), True),
    "backlinks": ("list", "bl", ("title", "limit", "continue", "namespace"), True),
    "random": ("list", "rn", ("limit", "namespace"), True),
    "prefixsearch": ("list", "ps", ("search", "limit", "offset", "namespace"), True),
    "allpages": ("list", "ap", ("from", "continue", "prefix", "limit", "namespace"), True),
    "siteinfo": ("meta", "si", ("prop",), False),
    "userinfo": ("meta", "ui", ("prop",), False),
}


def _param(name: str) -> dict[str, Any]:
    if name.endswith("limit"):
        return {"name": name, "type": "limit", "min": 1, "max": mw.MAX_LIMIT, "highmax": mw.MAX_LIMIT, "default": 10}
    if name.endswith("prop") or name.endswith("namespace") or name.endswith("info"):
        return {"name": name, "type": "string", "multi": True, "limit": 50, "lowlimit": 50, "highlimit": 500}
    return {"name": name, "type": "string"}


def _choice(name: str, values: list[str], path: str) -> dict[str, Any]:
    sub = {v: f"{path}+{v}" if path != "main" else v for v in values}
    multi = {"multi": True, "limit": 50, "lowlimit": 50, "highlimit": 500} if name in ("prop", "list", "meta") else {}
    return {"name": name, "type": values, "submodules": sub, **multi}


def _module_info(path: str) -> dict[str, Any] | None:
    base = {"path": path, "classname": "Wikiground", "source": "wikiground", "sourcename": "wikiground"}
    if path == "main":
        params = [_choice("action", list(ACTIONS), "main"), {"name": "format", "type": ["json"], "default": "json"}]
        params += [_param(n) for n in ("maxlag", "smaxage", "maxage", "assert", "requestid", "servedby", "uselang")]
        return {**base, "name": "main", "prefix": "", "parameters": params}
    if path == "query":
        params = [
            _choice(group, [m for m, v in QUERY_MODULES.items() if v[0] == group], "query")
            for group in ("prop", "list", "meta")
        ]
        generators = [m for m, v in QUERY_MODULES.items() if v[3]]
        params += [_choice("generator", generators, "query"), _param("titles"), _param("pageids"), _param("revids")]
        params += [_param("redirects"), _param("continue"), _param("indexpageids")]
        return {**base, "name": "query", "group": "action", "prefix": "", "parameters": params}
    if path in ("parse", "opensearch", "paraminfo"):
        names = {
            "parse": ("page", "pageid", "oldid", "prop", "section", "text", "title", "redirects"),
            "opensearch": ("search", "limit", "namespace", "redirects", "suggest"),
            "paraminfo": ("modules", "helpformat"),
        }[path]
        return {**base, "name": path, "group": "action", "prefix": "", "parameters": [_param(n) for n in names]}
    name = path.removeprefix("query+")
    if not path.startswith("query+") or name not in QUERY_MODULES:
        return None
    group, prefix, names, generator = QUERY_MODULES[name]
    info = {**base, "name": name, "group": group, "prefix": prefix, "parameters": [_param(n) for n in names]}
    if generator:
        info["generator"] = ""
    return info


def paraminfo(p: Mapping[str, str]) -> dict[str, Any]:
    """``action=paraminfo&modules=...``: the served modules' parameters (names, types, limits, submodules); one
    not served is ``missing``, as MediaWiki lists it."""
    asked = mw._values(p, "modules") + [f"query+{m}" for m in mw._values(p, "querymodules")]
    if p.get("mainmodule"):
        asked.insert(0, "main")
    modules = []
    for path in asked:
        if path == "query+*":
            modules += [_module_info(f"query+{m}") for m in QUERY_MODULES]
            continue
        info = _module_info(path)
        modules.append(info if info is not None else {"name": path, "path": path, "missing": True})
    return {"batchcomplete": True, "paraminfo": {"helpformat": "none", "modules": modules}}
