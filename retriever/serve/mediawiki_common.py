"""The basics :mod:`retriever.serve.mediawiki` and :mod:`retriever.serve.mediawiki_extra` share: the answer being
built, errors, parameter parsing, the page set's entries looked up by title, and pages' text and links."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from retriever import pages as page_lookup
from wikiground.records import Page
from wikiground.text import canonical_title

MAX_LIMIT = 500
MAX_TITLES = 50
NAMESPACE_NAMES = {
    "Talk": 1,
    "User": 2,
    "User talk": 3,
    "Wikipedia": 4,
    "Wikipedia talk": 5,
    "File": 6,
    "File talk": 7,
    "MediaWiki": 8,
    "Template": 10,
    "Template talk": 11,
    "Help": 12,
    "Category": 14,
    "Category talk": 15,
    "Portal": 100,
    "Module": 828,
}
NAMESPACE_ALIASES = {"WP": 4, "Project": 4, "Image": 6, "WT": 5, "Project talk": 5, "Image talk": 7}


def namespace_of(title: str) -> int:
    """The namespace a title's prefix names (``Category:Foo`` is 14), else 0 (the articles)."""
    head, colon, _ = title.partition(":")
    if not colon:
        return 0
    name = canonical_title(head)
    return NAMESPACE_NAMES.get(name, NAMESPACE_ALIASES.get(name, 0))


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
    if not (raw.isascii() and raw.isdigit()) or int(raw) < 1:
        reply.warn(module, f'Invalid value "{raw}" for integer parameter "{name}"; using {default}.')
        return default
    if int(raw) > cap:
        reply.warn(module, f'"{name}" may not be over {cap} (set to {raw}) for users.')
        return cap
    return int(raw)


def _int(raw: str | None, default: int = 0) -> int:
    return int(raw) if raw and raw.isascii() and raw.isdigit() else default  # int() reads "²": the API does not


def _values(p: Mapping[str, str], name: str) -> list[str]:
    return [v for v in (p.get(name) or "").split("|") if v]


def page_url(page: Page) -> str:
    return page.url or "https://en.wikipedia.org/wiki/" + quote(page.title.replace(" ", "_"), safe="()_,:'!")


@dataclass
class Entry:
    """One page of the answer: found (with its Page) or missing/invalid."""

    title: str
    page: Page | None = None
    invalid: str | None = None
    index: int | None = None
    redirect_id: int | None = None  # a redirect page, not followed (no ``redirects`` parameter)
    ns: int = 0


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
        target = _dangling_redirect(store, title) if res is None else None
        if target is not None:  # a redirect to a page the store lacks: MediaWiki names the target, missing
            if follow:
                redirects.append({"from": title, "to": target})
                out.append(Entry(target, ns=namespace_of(target)))
            else:
                out.append(Entry(title, redirect_id=_redirect_page_id(store, title)))
            continue
        if res is not None and res.via_redirect and follow:
            item = {"from": title, "to": res.title}
            if res.fragment:
                item["tofragment"] = res.fragment
            redirects.append(item)
        if res is not None and res.via_redirect and not follow:
            out.append(Entry(title, redirect_id=_redirect_page_id(store, title)))
            continue
        page = store.page(res.page_id) if res is not None else None
        out.append(Entry(page.title if page else title, page, ns=0 if page else namespace_of(title)))
    if normalized:
        reply.query["normalized"] = normalized
    if redirects:
        reply.query["redirects"] = redirects
    return out


def source_pages(store: Any, p: Mapping[str, str], reply: Reply) -> list[Page]:
    """The pages a generator starts from: ``titles``, else ``pageids`` (pywikibot names pages by id)."""
    if "titles" in p:
        return [e.page for e in _by_titles(store, _values(p, "titles"), p, reply) if e.page is not None]
    ids = [int(v) for v in _values(p, "pageids") if v.isdigit() and len(v) < 19]
    found = store.pages(ids)
    return [found[i] for i in ids if i in found]


def redirects_to(store: Any, title: str) -> list[tuple[int, str]]:
    """(page id, title) of the redirect pages that point to ``title`` (``blfilterredir=redirects``), by title."""
    found = page_lookup.rows(
        store,
        "SELECT source_page_id, source_title FROM redirects WHERE target_title = ? AND source_page_id IS NOT NULL "
        "ORDER BY source_title",
        [title],
    )
    return [(int(i), t) for i, t in found]


def _dangling_redirect(store: Any, title: str) -> str | None:
    """The target of a redirect titled ``title`` whose target the store lacks, else None."""
    found = page_lookup.rows(
        store,
        "SELECT target_title FROM redirects WHERE source_title = ? AND target_page_id IS NULL AND NOT is_loop LIMIT 1",
        [title],
    )
    return found[0][0] if found and found[0][0] else None


def redirect_target(store: Any, title: str) -> str | None:
    """The title a redirect page ``title`` points to as written (its direct target), else None."""
    found = page_lookup.rows(store, "SELECT direct_target FROM redirects WHERE source_title = ? LIMIT 1", [title])
    return found[0][0] if found and found[0][0] else None


def _redirect_page_id(store: Any, title: str) -> int | None:
    found = page_lookup.rows(store, "SELECT source_page_id FROM redirects WHERE source_title = ? LIMIT 1", [title])
    return int(found[0][0]) if found and found[0][0] is not None else None


def linked_titles(store: Any, page: Page) -> list[str]:
    """The titles a page links to, canonical, once each, sorted (MediaWiki lists links by title)."""
    return sorted({canonical_title(t) for t, _ in store.links(page.page_id) if t.strip()})


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


def section_parts(store: Any, page: Page, n: int) -> list[dict[str, Any]]:
    """Section ``n`` (0: the lead) with its subsections, as MediaWiki counts and cuts them."""
    secs = page_lookup.sections(store, page.page_id)
    at = next((i for i, s in enumerate(secs) if s["index"] == n), None)
    if at is None:
        return []
    if n == 0:
        return [secs[at]]
    level = secs[at]["level"]
    end = next((i for i in range(at + 1, len(secs)) if secs[i]["level"] <= level), len(secs))
    return secs[at:end]


def section_source(store: Any, page: Page, n: int) -> str | None:
    """Section ``n``'s text with ``== Heading ==`` marks (its subsections included); None when the page has no such
    section."""
    parts = section_parts(store, page, n)
    if not parts:
        return None
    if n == 0:
        return page.lead
    out = []
    for s in parts:
        marks = "=" * max(2, s["level"])
        out.append(f"{marks} {s['heading']} {marks}\n{s['text']}".rstrip())
    return "\n\n".join(out)
