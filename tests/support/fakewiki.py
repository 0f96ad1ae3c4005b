"""A small MediaWiki-compatible Action API server on 127.0.0.1, for tests and benchmarks.

It answers the calls the fallback makes, in the formatversion=2 shapes of the real
recorded responses (``shared/data/mediawiki_api``): ``normalized``/``redirects`` (with
``tofragment``), ``missing: true``, ``invalid: true``, ``pageprops.disambiguation``,
``extracts`` with ``excontinue``, ``info`` URLs, ``revisions`` ids, ``categories`` with
``clcontinue``, ``links`` with ``plcontinue``, ``list=search`` with ``searchinfo`` and
``sroffset`` continuation, ``generator=search`` (pages with an ``index`` rank, beside or without
``list=search``), ``generator=links``, and ``action=parse`` (sections, a section's text/wikitext/links).
Faults are queued per request (or per matching parameter) and every request is recorded.
"""

from __future__ import annotations

import difflib
import gzip
import html
import json
import re
import socket
import struct
import threading
import time
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qsl, quote, urlsplit

FaultKind = Literal["429", "503", "maxlag", "slow", "truncated", "reset", "redirect", "error"]

_WORD = re.compile(r"\w+", re.UNICODE)
_INVALID_TITLE = re.compile(r"[#<>\[\]|{}]")
_STOP = frozenset("a an and are as at be by for from in is it of on or the to was were with".split())
_API_NOTE = (
    "See http://127.0.0.1/w/api.php for API usage. Subscribe to the mediawiki-api-announce mailing list "
    "for notice of API deprecations and breaking changes."
)


def _words(text: str) -> list[str]:
    return _WORD.findall(text.casefold())


def _stem(word: str) -> str:
    """Plural folding, standing in for CirrusSearch's English stemmer ("bears" finds "bear")."""
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


def _stems(text: str) -> list[str]:
    return [_stem(w) for w in _words(text)]


def canonical(title: str) -> str:
    t = " ".join(title.replace("_", " ").split())
    return t[:1].upper() + t[1:]


def stable_id(title: str) -> int:
    """A reproducible positive page id for a title."""
    return zlib.crc32(title.encode("utf-8")) % 90_000_000 + 10_000


@dataclass(frozen=True)
class FakePage:
    title: str
    pageid: int
    revid: int
    intro: str
    sections: Sequence[tuple[str, str]] = ()  # (heading, plain text), after the lead
    categories: Sequence[str] = ()  # visible categories, without "Category:"
    hidden_categories: Sequence[str] = ()
    see_also: Sequence[str] = ()
    redirects_from: Sequence[str | tuple[str, str]] = ()  # alias, or (alias, fragment)
    is_disambiguation: bool = False
    options: Sequence[str] = ()  # a disambiguation page's targets

    def all_sections(self) -> list[tuple[str, str]]:
        secs = list(self.sections)
        if self.see_also and not any(h.casefold() == "see also" for h, _ in secs):
            secs.append(("See also", "\n".join(self.see_also)))
        return secs

    def full_text(self) -> str:
        return "\n\n".join([self.intro] + [f"== {h} ==\n{t}" for h, t in self.all_sections()])


@dataclass
class Fault:
    kind: FaultKind
    match: Mapping[str, str] = field(default_factory=dict)  # params the request must carry
    times: int = 1
    retry_after: str | None = "5"
    delay: float = 1.0  # slow: seconds before answering
    location: str = ""  # redirect target
    code: str = "internal_api_error_DBQueryError"  # error: the error code

    def matches(self, params: Mapping[str, str]) -> bool:
        return all(params.get(k) == v for k, v in self.match.items())


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    params: dict[str, str]
    headers: dict[str, str]
    host: str


class FakeWiki:
    """``with FakeWiki(pages) as wiki: WikiApi(FallbackSettings(api_url=wiki.api_url, ...))``."""

    def __init__(
        self,
        pages: Mapping[str, FakePage] | Iterable[FakePage],
        *,
        path: str = "/w/api.php",
        title_limit: int = 50,
        extract_limit: int = 20,
        default_cllimit: int = 10,
    ):
        items = pages.values() if isinstance(pages, Mapping) else pages
        self.pages: dict[str, FakePage] = {canonical(p.title): p for p in items}
        self.path = path
        self.title_limit = title_limit
        self.extract_limit = extract_limit
        self.default_cllimit = default_cllimit
        self.redirects: dict[str, tuple[str, str | None]] = {}
        for page in self.pages.values():
            for alias in page.redirects_from:
                name, frag = (alias, None) if isinstance(alias, str) else alias
                self.redirects[canonical(name)] = (canonical(page.title), frag)
        self._by_id = {p.pageid: p for p in self.pages.values()}
        self._tokens = {t: (set(_stems(t)), _stems(p.full_text())) for t, p in self.pages.items()}
        self._vocab = sorted({w for ws, body in self._tokens.values() for w in (*ws, *body)})
        self._rank_memo: dict[str, tuple[list[str], list[str]]] = {}
        self.faults: list[Fault] = []
        self.requests: list[RecordedRequest] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._port = 0
        self._thread: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> FakeWiki:
        wiki = self

        class Handler(_Handler):
            fake = wiki

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        server.block_on_close = False
        self._server = server
        self._port = server.server_address[1]  # kept after stop: a handler still finishing a slow answer needs it
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeWiki:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._server is not None, "server not started"
        return self._server.server_address[1]

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.path}"

    def add_fault(self, kind: FaultKind, **kwargs: Any) -> Fault:
        fault = Fault(kind, **kwargs)
        with self._lock:
            self.faults.append(fault)
        return fault

    def take_fault(self, params: Mapping[str, str]) -> Fault | None:
        with self._lock:
            for fault in self.faults:
                if fault.times > 0 and fault.matches(params):
                    fault.times -= 1
                    if fault.times == 0:
                        self.faults.remove(fault)
                    return fault
        return None

    def page_url(self, title: str) -> str:
        port = self._port if self._server is None else self.port
        return f"http://127.0.0.1:{port}/wiki/{quote(title.replace(' ', '_'), safe='()_,:')}"

    # -- API ------------------------------------------------------------------------------------

    def answer(self, params: Mapping[str, str]) -> dict[str, Any]:
        action = params.get("action")
        if action == "query":
            return self._query(params)
        if action == "parse":
            return self._parse(params)
        return _error("badvalue", f'Unrecognized value for parameter "action": {action}.')

    def _resolve(
        self, raw_titles: list[str], follow: bool, out: dict[str, Any]
    ) -> list[tuple[str, FakePage | None, bool]]:
        normalized, redirects, finals = [], [], []
        for raw in raw_titles:
            if not raw.strip() or _INVALID_TITLE.search(raw):
                bad = re.search(_INVALID_TITLE, raw)
                reason = (
                    f'The requested page title contains invalid characters: "{bad.group(0)}".'
                    if bad
                    else "The requested page title is empty or contains only the name of a namespace."
                )
                finals.append((raw, None, True))
                out.setdefault("_invalid", {})[raw] = reason
                continue
            title = canonical(raw)
            if title != raw:
                normalized.append({"fromencoded": False, "from": raw, "to": title})
            if follow and title in self.redirects:
                target, frag = self.redirects[title]
                entry = {"from": title, "to": target}
                if frag:
                    entry["tofragment"] = frag
                redirects.append(entry)
                title = target
            finals.append((title, self.pages.get(title), False))
        if normalized:
            out["normalized"] = normalized
        if redirects:
            out["redirects"] = redirects
        return finals

    def _query(self, p: Mapping[str, str]) -> dict[str, Any]:
        body: dict[str, Any] = {"batchcomplete": True}
        query: dict[str, Any] = {}
        cont: dict[str, Any] = {}
        if p.get("list") == "search":
            self._search(p, query, cont)
        rank: dict[str, int] = {}
        if p.get("generator") == "search":  # the pages of a search, with the props asked for, "index" = rank
            limit = int(p["gsrlimit"]) if p.get("gsrlimit", "").isdigit() else 10
            offset = int(p["gsroffset"]) if p.get("gsroffset", "").isdigit() else 0
            ranked = self._ranked(p.get("gsrsearch", ""))[1]
            rank = {title: offset + n + 1 for n, title in enumerate(ranked[offset : offset + limit])}
            if offset + limit < len(ranked):
                cont["gsroffset"] = offset + limit
            p = {k: v for k, v in p.items() if k != "redirects"}
            if rank:
                p["titles"] = "|".join(rank)
        elif p.get("generator") == "links":  # the pages the given pages link to, with the props asked for
            follow = p.get("redirects") in ("1", "", "true")
            sources = [page for _, page, _ in self._resolve(p.get("titles", "").split("|"), follow, {}) if page]
            linked = list(dict.fromkeys(t for page in sources for t in (*page.options, *page.see_also)))
            limit = int(p["gpllimit"]) if p.get("gpllimit", "").isdigit() else 10
            start = linked.index(p["gplcontinue"]) if p.get("gplcontinue") in linked else 0
            if start + limit < len(linked):
                cont["gplcontinue"] = linked[start + limit]
            p = {**p, "titles": "|".join(linked[start : start + limit])}
            if not linked[start : start + limit]:
                body["query"] = query
                return body
        if "titles" in p:
            raw = p["titles"].split("|")
            if len(raw) > self.title_limit:
                return _error(
                    "toomanyvalues",
                    f'Too many values supplied for parameter "titles". The limit is {self.title_limit}.',
                    limit=self.title_limit,
                    lowlimit=self.title_limit,
                    highlimit=500,
                )
            finals = self._resolve(raw, p.get("redirects") in ("1", "", "true"), query)
            invalid = query.pop("_invalid", {})
            props = set(filter(None, p.get("prop", "").split("|")))
            pages: list[dict[str, Any]] = []
            seen: set[str] = set()
            for title, page, bad in finals:
                if title in seen:
                    continue
                seen.add(title)
                if bad:
                    pages.append({"title": title, "invalidreason": invalid[title], "invalid": True})
                elif page is None:
                    pages.append({"ns": 0, "title": title, "missing": True})
                else:
                    pages.append({"pageid": page.pageid, "ns": 0, "title": page.title})
                    if title in rank:
                        pages[-1]["index"] = rank[title]
            pages.sort(key=lambda d: d.get("pageid", -1))
            existing = [d for d in pages if "pageid" in d]
            for d in existing:
                page = self._by_id[d["pageid"]]
                if "info" in props:
                    d.update(
                        contentmodel="wikitext",
                        pagelanguage="en",
                        pagelanguagehtmlcode="en",
                        pagelanguagedir="ltr",
                        touched="2026-01-01T00:00:00Z",
                        lastrevid=page.revid,
                        length=len(page.full_text()),
                    )
                    if "url" in p.get("inprop", "").split("|"):
                        url = self.page_url(page.title)
                        d.update(
                            fullurl=url,
                            editurl=url.replace("/wiki/", "/w/index.php?title=") + "&action=edit",
                            canonicalurl=url,
                        )
                if (
                    "pageprops" in props
                    and page.is_disambiguation
                    and "disambiguation" in p.get("ppprop", "disambiguation")
                ):
                    d["pageprops"] = {"disambiguation": ""}
                if "revisions" in props:
                    d["revisions"] = [{"revid": page.revid, "parentid": page.revid - 1}]
            if "extracts" in props:
                start = int(p.get("excontinue", "0"))
                limit = min(
                    self.extract_limit,
                    int(p.get("exlimit", "20")) if p.get("exlimit", "").isdigit() else self.extract_limit,
                )
                for n, d in enumerate(existing):
                    if start <= n < start + limit:
                        page = self._by_id[d["pageid"]]
                        d["extract"] = page.intro if "exintro" in p else page.full_text()
                if start + limit < len(existing):
                    cont["excontinue"] = start + limit
                    body["warnings"] = {
                        "extracts": {
                            "warnings": f'"exlimit" was too large for a whole article extracts request, lowered to {limit}.'
                        }
                    }
            if "categories" in props:
                self._paged_list(
                    p,
                    existing,
                    "categories",
                    "cl",
                    cont,
                    lambda page: [
                        ("Category:" + c)
                        for c in (*page.categories, *(() if p.get("clshow") == "!hidden" else page.hidden_categories))
                    ],
                    ns=14,
                )
            if "links" in props:
                self._paged_list(
                    p,
                    existing,
                    "links",
                    "pl",
                    cont,
                    lambda page: list(page.options) + [t for t in page.see_also if t not in page.options],
                    ns=0,
                )
            query["pages"] = pages
        if cont:
            if any(k not in ("sroffset", "gsroffset", "gplcontinue") for k in cont):
                body.pop("batchcomplete", None)
            cont["continue"] = "||" if "sroffset" not in cont else "-||"
            body["continue"] = cont
        body["query"] = query
        return body

    def _paged_list(self, p, existing, name: str, prefix: str, cont: dict, items_of, *, ns: int) -> None:
        limit_raw = p.get(f"{prefix}limit", str(self.default_cllimit))
        limit = 500 if limit_raw == "max" else int(limit_raw)
        flat = [(d, title) for d in existing for title in items_of(self._by_id[d["pageid"]])]
        start = 0
        if f"{prefix}continue" in p:
            marker = p[f"{prefix}continue"]
            keys = [f"{d['pageid']}|{t.split(':', 1)[-1].replace(' ', '_')}" for d, t in flat]
            start = keys.index(marker) if marker in keys else len(flat)
        for d, title in flat[start : start + limit]:
            d.setdefault(name, []).append({"ns": ns, "title": title})
        if start + limit < len(flat):
            d, title = flat[start + limit]
            cont[f"{prefix}continue"] = f"{d['pageid']}|{title.split(':', 1)[-1].replace(' ', '_')}"

    def _ranked(self, text: str) -> tuple[list[str], list[str]]:
        """The search terms of ``text`` and the titles that match them all, best first. Remembered per text: a
        request with ``list=search`` beside ``generator=search`` asks twice, and a scan reads every page."""
        if text not in self._rank_memo:
            self._rank_memo[text] = self._rank(text)
        return self._rank_memo[text]

    def _rank(self, text: str) -> tuple[list[str], list[str]]:
        terms = [_stem(w) for w in _words(text) if w not in _STOP] or _stems(text)
        scored = []
        for title, (title_words, body_words) in self._tokens.items():
            if not terms:
                break
            body_set = set(body_words)
            if not all(t in title_words or t in body_set for t in terms):  # CirrusSearch matches all terms
                continue
            score = sum(3.0 * (t in title_words) + min(5, body_words.count(t)) for t in terms)
            scored.append((-score, title))
        scored.sort()
        return terms, [title for _, title in scored]

    def _search(self, p: Mapping[str, str], query: dict[str, Any], cont: dict[str, Any]) -> None:
        terms, scored = self._ranked(p.get("srsearch", ""))
        limit = int(p.get("srlimit", "10")) if p.get("srlimit", "10").isdigit() else 10
        offset = int(p.get("sroffset", "0"))
        info = set(p.get("srinfo", "totalhits|suggestion").split("|"))
        searchinfo: dict[str, Any] = {}
        if "totalhits" in info:
            searchinfo["totalhits"] = len(scored)
        if "suggestion" in info:
            fixed = [
                w
                if _stem(w) in self._vocab_set
                else (difflib.get_close_matches(w, self._vocab, n=1, cutoff=0.8) or [w])[0]
                for w in _words(p.get("srsearch", ""))
            ]
            suggestion = " ".join(fixed)
            if suggestion != " ".join(_words(p.get("srsearch", ""))):
                searchinfo.update(suggestion=suggestion, suggestionsnippet=suggestion)
        if searchinfo:
            query["searchinfo"] = searchinfo
        results = []
        for title in scored[offset : offset + limit]:
            page = self.pages[title]
            snippet = " ".join(page.intro.split()[:25])
            for t in set(terms):
                snippet = re.sub(
                    rf"\b({re.escape(t)})\b", r'<span class="searchmatch">\1</span>', snippet, flags=re.IGNORECASE
                )
            results.append(
                {
                    "ns": 0,
                    "title": page.title,
                    "pageid": page.pageid,
                    "size": len(page.full_text()),
                    "wordcount": len(page.full_text().split()),
                    "snippet": snippet,
                    "timestamp": "2026-01-01T00:00:00Z",
                }
            )
        query["search"] = results
        if offset + limit < len(scored):
            cont["sroffset"] = offset + limit

    @property
    def _vocab_set(self) -> set[str]:
        if not hasattr(self, "_vocab_set_cache"):
            self._vocab_set_cache = set(self._vocab)
        return self._vocab_set_cache

    def _parse(self, p: Mapping[str, str]) -> dict[str, Any]:
        raw = p.get("page", "")
        title = canonical(raw)
        redirects = []
        if p.get("redirects") in ("1", "", "true") and title in self.redirects:
            target, frag = self.redirects[title]
            redirects.append({"from": title, "to": target, **({"tofragment": frag} if frag else {})})
            title = target
        page = self.pages.get(title)
        if page is None:
            return _error("missingtitle", "The page you specified doesn't exist.")
        props = set(filter(None, p.get("prop", "text").split("|")))
        out: dict[str, Any] = {"title": page.title, "pageid": page.pageid}
        if redirects:
            out["redirects"] = redirects
        sections = page.all_sections()
        if "revid" in props:
            out["revid"] = page.revid
        if "section" in p:
            idx = int(p["section"]) if p["section"].isdigit() else -1
            if not 0 <= idx <= len(sections):
                return _error("nosuchsection", f"There is no section {p['section']} in {page.title}.")
            parts = [(None, page.intro)] if idx == 0 else [sections[idx - 1]]
        else:
            parts = [(None, page.intro), *sections]
        if "sections" in props:
            offset, secs = len(page.intro) + 1, []
            for i, (heading, text) in enumerate(sections, start=1):
                anchor = heading.replace(" ", "_")
                secs.append(
                    {
                        "toclevel": 1,
                        "level": "2",
                        "line": html.escape(heading),
                        "number": str(i),
                        "index": str(i),
                        "fromtitle": page.title.replace(" ", "_"),
                        "byteoffset": offset,
                        "anchor": anchor,
                        "linkAnchor": anchor,
                    }
                )
                offset += len(heading) + len(text) + 8
            out["sections"] = secs
        if "text" in props:
            edit = (
                ""
                if "disableeditsection" in p
                else '<span class="mw-editsection"><span class="mw-editsection-bracket">[</span>edit<span class="mw-editsection-bracket">]</span></span>'
            )
            chunks = []
            for heading, text in parts:
                if heading is not None:
                    chunks.append(
                        f'<h2><span class="mw-headline" id="{html.escape(heading.replace(" ", "_"))}">{html.escape(heading)}</span>{edit}</h2>'
                    )
                for para in filter(None, (s.strip() for s in text.split("\n"))):
                    chunks.append(
                        f'<p>{html.escape(para)}<sup id="cite_ref-1" class="reference"><a href="#cite_note-1">[1]</a></sup>\n</p>'
                    )
            out["text"] = '<div class="mw-parser-output">' + "\n".join(chunks) + "</div>"
        if "wikitext" in props:
            out["wikitext"] = "\n\n".join(
                text if heading is None else f"== {heading} ==\n{text}" for heading, text in parts
            )
        if "links" in props:
            titles: list[str] = []
            for heading, _text in parts:
                if heading is None and page.is_disambiguation:
                    titles.extend(page.options)
                elif heading is not None and heading.casefold() == "see also":
                    titles.extend(page.see_also)
            out["links"] = [
                {"ns": 0, "title": t, "exists": canonical(t) in self.pages or canonical(t) in self.redirects}
                for t in dict.fromkeys(titles)
            ]
        if "categories" in props:
            out["categories"] = [{"sortkey": "", "category": c.replace(" ", "_")} for c in page.categories] + [
                {"sortkey": "", "category": c.replace(" ", "_"), "hidden": True} for c in page.hidden_categories
            ]
        return {"parse": out}


def _error(code: str, info: str, **extra: Any) -> dict[str, Any]:
    return {"error": {"code": code, "info": info, **extra, "docref": _API_NOTE}, "servedby": "fakewiki"}


class _Handler(BaseHTTPRequestHandler):
    fake: FakeWiki
    server_version = "fakewiki/1"
    protocol_version = "HTTP/1.0"  # one request per connection: resets and truncation stay per request

    def log_message(self, format: str, *args: Any) -> None:  # quiet: tests assert on wiki.requests
        pass

    def do_GET(self) -> None:
        self._serve(dict(parse_qsl(urlsplit(self.path).query, keep_blank_values=True)))

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        self._serve(dict(parse_qsl(self.rfile.read(length).decode("utf-8"), keep_blank_values=True)))

    def _serve(self, params: dict[str, str]) -> None:
        fake = self.fake
        path = urlsplit(self.path).path
        with fake._lock:
            fake.requests.append(
                RecordedRequest(
                    self.command,
                    path,
                    params,
                    {k.lower(): v for k, v in self.headers.items()},
                    self.headers.get("host", ""),
                )
            )
            fake.in_flight += 1
            fake.max_in_flight = max(fake.max_in_flight, fake.in_flight)
        try:
            if path != fake.path:
                return self._send(404, b"<html><body>Not Found</body></html>", "text/html")
            fault = fake.take_fault(params)
            if fault is not None and self._fault(fault, params):
                return
            self._send_json(fake.answer(params))
        except (BrokenPipeError, ConnectionResetError):
            pass
        finally:
            with fake._lock:
                fake.in_flight -= 1

    def _fault(self, fault: Fault, params: dict[str, str]) -> bool:
        """Act out a fault; False when the normal answer should still follow (slow)."""
        headers = {"Retry-After": fault.retry_after} if fault.retry_after is not None else {}
        if fault.kind == "429":
            self._send(
                429,
                b"<!DOCTYPE html><html><head><title>Wikimedia Error</title></head><body>"
                b"<p>Too many requests. Please respect our robot policy.</p></body></html>",
                "text/html",
                headers,
            )
        elif fault.kind == "503":
            self._send(503, b"Service Temporarily Unavailable\n", "text/plain", headers)
        elif fault.kind == "maxlag":
            body = _error("maxlag", "Waiting for 10.64.48.35: 6 seconds lagged.", host="10.64.48.35", lag=6, type="db")
            self._send(
                200,
                json.dumps(body).encode(),
                "application/json; charset=utf-8",
                {**headers, "X-Database-Lag": "6", "MediaWiki-API-Error": "maxlag"},
            )
        elif fault.kind == "error":
            body = _error(fault.code, "[fakewiki] A database query error has occurred.")
            self._send(
                200, json.dumps(body).encode(), "application/json; charset=utf-8", {"MediaWiki-API-Error": fault.code}
            )
        elif fault.kind == "truncated":
            data = json.dumps(self.fake.answer(params)).encode()
            self._send(200, data[: max(1, len(data) // 2)], "application/json; charset=utf-8", gzip_ok=False)
        elif fault.kind == "reset":
            # SO_LINGER 0: close() sends RST instead of FIN, like a dropped connection.
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.close_connection = True
            self.connection.close()
        elif fault.kind == "redirect":
            self._send(302, b"", "text/html", {"Location": fault.location})
        elif fault.kind == "slow":
            time.sleep(fault.delay)
            return False
        return True

    def _send_json(self, body: dict[str, Any]) -> None:
        headers = {"MediaWiki-API-Error": body["error"]["code"]} if "error" in body else {}
        self._send(
            200, json.dumps(body, ensure_ascii=False).encode("utf-8"), "application/json; charset=utf-8", headers
        )

    def _send(
        self, status: int, data: bytes, ctype: str, headers: Mapping[str, str] | None = None, *, gzip_ok: bool = True
    ) -> None:
        if gzip_ok and data and "gzip" in self.headers.get("accept-encoding", ""):
            data = gzip.compress(data)
            headers = {**(headers or {}), "Content-Encoding": "gzip"}
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)


# -- pages from the real corpora -------------------------------------------------------------------


def pages_from_hotpot(
    path: Path, *, titles: Iterable[str] | None = None, limit: int | None = None
) -> dict[str, FakePage]:
    """FakePages from ``hotpotqa2017_abstracts.jsonl`` (intro = the abstract's sentences)."""
    wanted = {canonical(t) for t in titles} if titles is not None else None
    out: dict[str, FakePage] = {}
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            title = canonical(html.unescape(row["title"]))
            if wanted is not None and title not in wanted:
                continue
            pid = stable_id(title)
            intro = " ".join(x.strip() for x in row["sentences"] if x.strip())  # sentences come stripped
            out[title] = FakePage(title, pid, pid * 10 + 7, intro)
            if limit is not None and len(out) >= limit:
                break
    return out


def pages_from_vital(
    path: Path, *, titles: Iterable[str] | None = None, limit: int | None = None
) -> dict[str, FakePage]:
    """FakePages from ``vital_articles_summaries.json`` (intro = the REST summary extract)."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    wanted = {canonical(t) for t in titles} if titles is not None else None
    out: dict[str, FakePage] = {}
    for row in data.values():
        title = canonical(row["title"])
        if wanted is not None and title not in wanted:
            continue
        pid = stable_id(title)
        out[title] = FakePage(
            title, pid, pid * 10 + 3, row.get("extract") or "", categories=tuple(filter(None, [row.get("topic")]))
        )
        if limit is not None and len(out) >= limit:
            break
    return out
