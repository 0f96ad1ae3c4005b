"""Reading formatversion=2 response bodies: merged continuation pages, title resolution, HTML to text."""

from __future__ import annotations

from collections.abc import Iterable
from html.parser import HTMLParser
from typing import Any
from urllib.parse import urlsplit

_LIST_KEYS_UNIQUE_BY = ("title", "*")


def web_url(value: Any) -> str | None:
    """A page URL the server sent (``canonicalurl``, ``fullurl``) when it is an absolute http(s) URL with a host and
    no whitespace or control characters; anything else (``javascript:``, ``file:``, relative) is dropped."""
    if not isinstance(value, str) or not value or len(value) > 2048:
        return None
    if any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in value):
        return None
    try:
        parts = urlsplit(value)
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        return None
    return value


def merge_query(bodies: Iterable[dict]) -> dict[str, Any]:
    """Merge the ``query`` parts of continuation responses: pages by pageid/title, lists concatenated.

    A page's list props (categories, links) arrive spread over continuation answers; items
    repeated across answers are kept once.
    """
    pages: dict[str, dict] = {}
    order: list[str] = []
    merged: dict[str, Any] = {"normalized": [], "converted": [], "redirects": [], "search": []}
    for body in bodies:
        query = body.get("query") or {}
        raw_pages = query.get("pages") or []
        if isinstance(raw_pages, dict):  # formatversion=1 shape, tolerated
            raw_pages = list(raw_pages.values())
        for page in raw_pages:
            key = str(page.get("pageid")) if page.get("pageid", 0) > 0 else f"t:{page.get('title')}"
            if key not in pages:
                pages[key] = {}
                order.append(key)
            target = pages[key]
            for name, value in page.items():
                if isinstance(value, list) and isinstance(target.get(name), list):
                    seen = {_item_id(x) for x in target[name]}
                    target[name].extend(x for x in value if _item_id(x) not in seen)
                else:
                    target[name] = value
        for name in ("normalized", "converted", "redirects", "search"):
            merged[name].extend(query.get(name) or [])
        for name, value in query.items():
            if name not in merged and name != "pages":
                merged[name] = value
    merged["pages"] = [pages[k] for k in order]
    return merged


def _item_id(item: Any) -> Any:
    if isinstance(item, dict):
        for key in _LIST_KEYS_UNIQUE_BY:
            if key in item:
                return (key, item[key])
        return tuple(sorted((k, str(v)) for k, v in item.items()))
    return item


def resolve_titles(requested: Iterable[str], query: dict[str, Any]) -> dict[str, tuple[str, str | None, bool]]:
    """Map each requested title to (final title, redirect fragment, redirected?) via normalized/converted/redirects."""
    renames = {r["from"]: r["to"] for r in query.get("normalized", []) + query.get("converted", [])}
    redirects = {r["from"]: (r["to"], r.get("tofragment")) for r in query.get("redirects", [])}
    out: dict[str, tuple[str, str | None, bool]] = {}
    for title in requested:
        current = renames.get(title, title)
        fragment = None
        redirected = False
        seen = {current}
        while current in redirects:  # the API resolves chains itself; this just follows its answer
            current, fragment = redirects[current]
            redirected = True
            if current in seen:
                break
            seen.add(current)
        out[title] = (current, fragment, redirected)
    return out


class _TextExtractor(HTMLParser):
    """Visible prose of parser HTML: drops headings, tables, references, styles and edit links."""

    SKIP = frozenset({"style", "script", "table", "sup", "h1", "h2", "h3", "h4", "h5", "h6", "math", "figure"})
    BLOCK = frozenset({"p", "li", "div", "dd", "dt", "br", "ul", "ol", "blockquote"})
    VOID = frozenset({"br", "img", "hr", "meta", "link", "input", "wbr", "source", "area", "col"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skip: list[str] = []

    def handle_starttag(self, tag: str, attrs) -> None:
        if tag in self.VOID:
            if tag == "br" and not self._skip:
                self.parts.append("\n")
            return
        cls = dict(attrs).get("class") or ""
        if self._skip or tag in self.SKIP or "mw-editsection" in cls or "reference" in cls or "navbox" in cls:
            self._skip.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag in self.VOID:
            return
        if self._skip:
            if tag in self._skip:
                while self._skip and self._skip.pop() != tag:
                    pass
            return
        if tag in self.BLOCK:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self.parts.append(data)


def html_to_text(html: str) -> str:
    parser = _TextExtractor()
    parser.feed(html)
    parser.close()
    lines = (" ".join(line.split()) for line in "".join(parser.parts).split("\n"))
    return "\n".join(line for line in lines if line)
