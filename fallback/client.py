"""The MediaWiki Action API client: polite, serial, cached, and confined to one host.

One injected ``httpx.Client``; every call is ``format=json&formatversion=2&maxlag=5``,
spaced by a token bucket, retried on 429 / 503 / maxlag / network failures with waits
that honour ``Retry-After`` (never under 5 s for server pushback) and capped exponential
backoff. Answers that are HTTP 200 with an ``error`` body, or not JSON at all, are errors.
"""

from __future__ import annotations

import email.utils
import logging
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import httpx

from fallback.cache import ResponseCache, request_key
from fallback.clock import Clock, SystemClock, TokenBucket
from fallback.responses import html_to_text, merge_query, resolve_titles
from fallback.settings import (
    DEFAULT_API_URL,
    DEFAULT_BACKOFF_CAP,
    DEFAULT_MAX_CONTINUE,
    DEFAULT_MAX_TRIES,
    DEFAULT_MAX_WAIT,
    DEFAULT_MAXLAG,
    DEFAULT_RATE,
    DEFAULT_TIMEOUT,
    MIN_RETRY_WAIT,
    CacheMode,
)
from wikiground import __version__
from wikiground.errors import (
    ApiError,
    CacheMissError,
    ConfigError,
    ContactRequiredError,
    ForbiddenHostError,
    RetryExhaustedError,
    TransportError,
)

log = logging.getLogger(__name__)

TITLES_PER_QUERY = 50  # the API's limit for titles= (non-bot clients)
EXTRACTS_PER_QUERY = 20  # prop=extracts with exintro serves at most 20 pages per request
RETRY_STATUSES = frozenset({429, 502, 503, 504})
PUSHBACK_CODES = frozenset({"maxlag", "ratelimited", "readonly"})
_CORE_PARAMS = frozenset({"action", "format", "formatversion", "maxlag"})

ReplayMiss = Literal["error", "skip"]


def user_agent(contact: str | None) -> str:
    """Wikimedia's User-Agent policy: client/version (contact) library/version."""
    if contact is None or not contact.strip():
        raise ContactRequiredError(
            "live MediaWiki requests need a contact (URL or e-mail) for the User-Agent, per Wikimedia's "
            "User-Agent policy: pass --contact TEXT or set WIKIGROUND_CONTACT (or use --cache-mode replay)"
        )
    return f"wikiground/{__version__} ({contact.strip()}) httpx/{httpx.__version__}"


@dataclass(frozen=True, slots=True)
class ApiResponse:
    body: dict[str, Any] | None  # None only for an explicit replay miss
    fetched_at: str | None
    from_cache: bool = False
    status: int = 200


@dataclass(frozen=True, slots=True)
class PageInfo:
    """One requested title after normalisation and redirects."""

    requested: str
    title: str
    pageid: int | None
    missing: bool = False
    invalid: bool = False
    is_disambiguation: bool = False
    url: str | None = None
    rev_id: int | None = None
    fragment: str | None = None
    redirected: bool = False
    extract: str | None = None
    fetched_at: str | None = None


@dataclass(frozen=True, slots=True)
class SearchHit:
    title: str
    pageid: int | None
    snippet: str = ""


@dataclass(frozen=True, slots=True)
class SearchResult:
    query: str
    hits: tuple[SearchHit, ...]
    suggestion: str | None = None
    next_offset: int | None = None


@dataclass(frozen=True, slots=True)
class SectionInfo:
    index: int
    level: int
    heading: str
    anchor: str = ""


@dataclass(frozen=True, slots=True)
class PageSections:
    title: str
    pageid: int | None
    rev_id: int | None
    sections: tuple[SectionInfo, ...]
    fetched_at: str | None = None


def _page_info(
    requested: str,
    page: Mapping[str, Any],
    fetched_at: str | None,
    *,
    fragment: str | None = None,
    redirected: bool = False,
) -> PageInfo:
    """A ``query.pages`` entry as a PageInfo."""
    pageid = page.get("pageid")
    return PageInfo(
        requested=requested,
        title=page.get("title", requested),
        pageid=pageid if isinstance(pageid, int) and pageid > 0 else None,
        missing=bool(page.get("missing")),
        invalid=bool(page.get("invalid")),
        is_disambiguation="disambiguation" in (page.get("pageprops") or {}),
        url=page.get("canonicalurl") or page.get("fullurl"),
        rev_id=page.get("lastrevid"),
        fragment=fragment,
        redirected=redirected,
        extract=page.get("extract"),
        fetched_at=fetched_at,
    )


def _intro_props(limit: int) -> dict[str, str]:
    """The props of a plain-text lead section with its URL and disambiguation flag, for ``limit`` pages."""
    return {
        "prop": "extracts|info|pageprops",
        "exintro": "1",
        "explaintext": "1",
        "exlimit": str(limit),
        "inprop": "url",
        "ppprop": "disambiguation",
    }


def _chunks(items: Sequence[str], size: int) -> Iterable[Sequence[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _retry_after(response: httpx.Response) -> float:
    value = response.headers.get("retry-after")
    if not value:
        return 0.0
    try:
        return max(0.0, float(value))
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return 0.0
        return max(0.0, (when - datetime.now(UTC)).total_seconds())


class WikiApi:
    """A MediaWiki site's Action API (English Wikipedia by default)."""

    def __init__(
        self,
        *,
        api_url: str = DEFAULT_API_URL,
        contact: str | None = None,
        http_client: httpx.Client | None = None,
        cache_dir: Path | None = None,
        cache_mode: CacheMode = "record",
        replay_miss: ReplayMiss = "error",
        rate: float = DEFAULT_RATE,
        timeout: float = DEFAULT_TIMEOUT,
        clock: Clock | None = None,
        max_tries: int = DEFAULT_MAX_TRIES,
        max_continue: int = DEFAULT_MAX_CONTINUE,
        maxlag: int | None = DEFAULT_MAXLAG,
        backoff_base: float = 1.0,
        backoff_cap: float = DEFAULT_BACKOFF_CAP,
        max_wait: float = DEFAULT_MAX_WAIT,
    ):
        if cache_mode not in ("record", "replay", "off"):
            raise ConfigError(f"cache mode must be record, replay or off, not {cache_mode!r}")
        if replay_miss not in ("error", "skip"):
            raise ConfigError(f"replay_miss must be 'error' or 'skip', not {replay_miss!r}")
        if cache_mode == "replay" and cache_dir is None:
            raise ConfigError("cache mode 'replay' needs a cache directory")
        if max_tries < 1:
            raise ConfigError("max_tries must be >= 1")
        self.url = httpx.URL(api_url)
        if self.url.scheme not in ("http", "https") or not self.url.host:
            raise ConfigError(f"API URL must be an absolute http(s) URL, not {api_url!r}")
        self.api_url = str(self.url)
        self.cache_mode: CacheMode = cache_mode
        # Replay never touches the network, so it is the one mode that runs without a contact.
        self.user_agent = (
            user_agent(contact)
            if cache_mode != "replay"
            else (user_agent(contact) if contact else f"wikiground/{__version__} (replay) httpx/{httpx.__version__}")
        )
        self.cache = ResponseCache(cache_dir) if cache_dir is not None and cache_mode != "off" else None
        self.replay_miss = replay_miss
        self.timeout = timeout
        self.clock = clock or SystemClock()
        self.bucket = TokenBucket(rate, clock=self.clock)
        self.max_tries = max_tries
        self.max_continue = max_continue
        self.maxlag = maxlag
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.max_wait = max_wait
        self._own_client = http_client is None
        self._http = http_client
        self._lock = threading.Lock()  # requests strictly in series, even across threads
        self.requests = 0  # HTTP requests sent (retries included)
        self.cache_hits = 0
        self.cache_misses = 0
        self.truncated = 0  # continuation chains cut at max_continue

    # -- plumbing -------------------------------------------------------------------------------

    @property
    def http(self) -> httpx.Client:
        if self._http is None:
            if self.cache_mode == "replay":
                raise CacheMissError("replay mode never opens a network connection")
            self._http = httpx.Client(follow_redirects=False, timeout=self.timeout)
        return self._http

    def close(self) -> None:
        if self._own_client and self._http is not None:
            self._http.close()
            self._http = None

    def __enter__(self) -> WikiApi:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _check_host(self, url: httpx.URL) -> None:
        if (url.scheme, url.host, url.port) != (self.url.scheme, self.url.host, self.url.port):
            raise ForbiddenHostError(f"refusing to contact {url.scheme}://{url.host}: only {self.url.host} is allowed")

    def call(self, params: Mapping[str, Any]) -> ApiResponse:
        """One logical API request: from the cache when there, else from the network (then cached)."""
        full = {k: str(v) for k, v in params.items()}
        full.update(format="json", formatversion="2")
        if self.maxlag is not None:
            full["maxlag"] = str(self.maxlag)
        key = request_key(self.api_url, full)
        if self.cache is not None:
            entry = self.cache.get(key)
            if entry is not None:
                self.cache_hits += 1
                return ApiResponse(entry.body, entry.fetched_at, from_cache=True, status=entry.status)
        if self.cache_mode == "replay":
            self.cache_misses += 1
            described = "&".join(f"{k}={v}" for k, v in sorted(full.items()) if k not in ("format", "formatversion"))
            if self.replay_miss == "error":
                # "is not None": an empty cache is falsy (it has a length), and its folder is the useful part.
                where = f" {self.cache.root}" if self.cache is not None else " (no --cache folder given)"
                raise CacheMissError(f"replay: request not in the cache{where}: {described}")
            log.info("replay miss (skipped): %s", described)
            return ApiResponse(None, None)
        body, status = self._fetch(full)
        fetched_at = self.clock.now_iso()
        if self.cache is not None:
            self.cache.put(key, status=status, fetched_at=fetched_at, body=body)
        return ApiResponse(body, fetched_at, status=status)

    def _backoff(self, attempt: int, floor: float = 0.0) -> float:
        base = max(self.backoff_base, floor)
        return min(max(self.backoff_cap, floor), base * 2 ** (attempt - 1))

    def _fetch(self, params: dict[str, str]) -> tuple[dict[str, Any], int]:
        headers = {"User-Agent": self.user_agent, "Accept-Encoding": "gzip", "Accept": "application/json"}
        with self._lock:
            failure: Exception | None = None
            for attempt in range(1, self.max_tries + 1):
                self.bucket.acquire()
                request = self.http.build_request("GET", self.url, params=params, headers=headers, timeout=self.timeout)
                self._check_host(request.url)
                self.requests += 1
                try:
                    response = self.http.send(request, follow_redirects=False)
                except httpx.TimeoutException as exc:
                    failure = TransportError(f"timeout after {self.timeout}s: {self.url.host}")
                    failure.__cause__ = exc
                    wait = self._backoff(attempt)
                except httpx.HTTPError as exc:  # connect/read errors, resets, broken gzip
                    failure = TransportError(f"{type(exc).__name__}: {exc}")
                    failure.__cause__ = exc
                    wait = self._backoff(attempt)
                else:
                    first, second = self._judge(response, attempt)
                    if not isinstance(first, Exception):
                        return first, second
                    failure, wait = first, second
                if attempt == self.max_tries:
                    raise RetryExhaustedError(
                        f"{self.max_tries} tries failed for {self.url.host}: {failure}"
                    ) from failure
                if wait > self.max_wait:
                    raise RetryExhaustedError(
                        f"server asks to wait {wait:.0f}s (> {self.max_wait:.0f}s): {failure}"
                    ) from failure
                log.warning(
                    "MediaWiki request failed (%s); retry %d/%d in %.1fs", failure, attempt, self.max_tries - 1, wait
                )
                self.clock.sleep(wait)
        raise AssertionError("unreachable")  # pragma: no cover

    def _judge(self, response: httpx.Response, attempt: int) -> tuple[dict[str, Any], int] | tuple[Exception, float]:
        """A usable body, or (error to retry on, seconds to wait); raises on final errors."""
        status = response.status_code
        if 300 <= status < 400:
            location = response.headers.get("location", "")
            target = response.request.url.join(location)
            self._check_host(target)
            raise ApiError(f"unexpected HTTP {status} redirect to {target}", status=status)
        if status in RETRY_STATUSES:
            wait = max(_retry_after(response), self._backoff(attempt, MIN_RETRY_WAIT))
            return ApiError(f"HTTP {status}: {response.text[:80]!r}", status=status), wait
        if status != 200:
            raise ApiError(f"HTTP {status} from {self.url.host}: {response.text[:200]!r}", status=status)
        try:
            body = response.json()
        except ValueError as exc:  # truncated or HTML: never data
            err = ApiError(
                f"response is not JSON ({len(response.content)} bytes): {response.text[:80]!r}",
                code="badjson",
                status=status,
            )
            err.__cause__ = exc
            return err, self._backoff(attempt)
        if not isinstance(body, dict):
            return ApiError("response JSON is not an object", code="badjson", status=status), self._backoff(attempt)
        error = body.get("error")
        if error is not None:
            code = error.get("code") if isinstance(error, dict) else None
            info = error.get("info", "") if isinstance(error, dict) else str(error)
            if code in PUSHBACK_CODES:
                wait = max(_retry_after(response), self._backoff(attempt, MIN_RETRY_WAIT))
                return ApiError(f"{code}: {info}", code=code, status=status), wait
            raise ApiError(f"API error {code}: {info}", code=code, status=status)
        if "warnings" in body:
            log.debug("API warnings: %s", body["warnings"])
        return body, status

    def call_all(self, params: Mapping[str, Any], *, max_continue: int | None = None) -> list[ApiResponse]:
        """A request and its ``continue`` chain, up to ``max_continue`` follow-ups."""
        limit = self.max_continue if max_continue is None else max_continue
        out: list[ApiResponse] = []
        cont: dict[str, str] = {}
        for _ in range(limit + 1):
            response = self.call({**params, **cont})
            if response.body is None:
                break
            out.append(response)
            nxt = response.body.get("continue")
            if not isinstance(nxt, dict) or not nxt:
                return out
            # Continuation only adds its own keys; it can never rewrite the action or the endpoint.
            cont = {k: str(v) for k, v in nxt.items() if k not in _CORE_PARAMS}
        else:
            self.truncated += 1
            log.warning("continuation stopped after %d requests for %s", limit + 1, dict(params).get("action"))
        return out

    # -- calls ----------------------------------------------------------------------------------

    def _pages(self, titles: Sequence[str], batch: int, extra: Mapping[str, str]) -> dict[str, PageInfo]:
        wanted = list(dict.fromkeys(t for t in titles if t and t.strip()))
        out: dict[str, PageInfo] = {}
        # "|" separates titles in the request, so such a title cannot be asked for; it is invalid anyway.
        for bad in [t for t in wanted if "|" in t]:
            out[bad] = PageInfo(bad, bad, None, missing=True, invalid=True)
        wanted = [t for t in wanted if "|" not in t]
        for chunk in _chunks(wanted, batch):
            params = {
                "action": "query",
                "titles": "|".join(chunk),
                "redirects": "1",
                "prop": "info|pageprops",
                "inprop": "url",
                "ppprop": "disambiguation",
                **extra,
            }
            responses = self.call_all(params)
            if not responses:
                continue
            fetched_at = responses[0].fetched_at
            query = merge_query(r.body for r in responses)
            by_title = {p.get("title"): p for p in query["pages"]}
            for requested, (final, fragment, redirected) in resolve_titles(chunk, query).items():
                page = by_title.get(final)
                if page is None:
                    out[requested] = PageInfo(requested, final, None, missing=True, fetched_at=fetched_at)
                    continue
                out[requested] = _page_info(requested, page, fetched_at, fragment=fragment, redirected=redirected)
        return out

    def resolve(self, titles: Sequence[str]) -> dict[str, PageInfo]:
        """Titles → pages (normalised, redirects followed, missing/invalid flagged, disambiguation marked)."""
        return self._pages(titles, TITLES_PER_QUERY, {})

    def intros(self, titles: Sequence[str]) -> dict[str, PageInfo]:
        """Plain-text lead sections (``exintro&explaintext``), 20 titles per request, with resolution."""
        return self._pages(titles, EXTRACTS_PER_QUERY, _intro_props(EXTRACTS_PER_QUERY))

    def search(self, query: str, *, limit: int = 3, offset: int = 0) -> SearchResult:
        return self._search(query, limit=limit, offset=offset, with_intros=False)[0]

    def search_intros(self, query: str, *, limit: int = 3) -> tuple[SearchResult, dict[str, PageInfo]]:
        """A search and the intros of its hits in one request: ``list=search`` (ranked hits, "did you mean")
        beside ``generator=search`` with the props of ``intros``. Intros keyed by hit title."""
        return self._search(query, limit=min(limit, EXTRACTS_PER_QUERY), offset=0, with_intros=True)

    def _search(
        self, query: str, *, limit: int, offset: int, with_intros: bool
    ) -> tuple[SearchResult, dict[str, PageInfo]]:
        params = {
            "action": "query",
            "list": "search",
            "srsearch": query,
            "srlimit": str(limit),
            "srnamespace": "0",
            "srinfo": "suggestion",
            "srprop": "snippet",
        }
        if offset:
            params["sroffset"] = str(offset)
        if with_intros:
            params.update(
                {
                    "generator": "search",
                    "gsrsearch": query,
                    "gsrlimit": str(limit),
                    "gsrnamespace": "0",
                    **_intro_props(limit),
                }
            )
        response = self.call(params)
        if response.body is None:
            return SearchResult(query, ()), {}
        q = response.body.get("query") or {}
        hits = tuple(
            SearchHit(h["title"], h.get("pageid"), html_to_text(h.get("snippet", "")))
            for h in q.get("search", [])
            if h.get("ns", 0) == 0
        )
        info = q.get("searchinfo") or {}
        nxt = (response.body.get("continue") or {}).get("sroffset")
        result = SearchResult(query, hits, info.get("suggestion") or None, int(nxt) if nxt is not None else None)
        pages = merge_query([response.body])["pages"] if with_intros else []
        by_title = {p.get("title"): p for p in pages}
        intros = {
            h.title: _page_info(h.title, by_title[h.title], response.fetched_at) for h in hits if h.title in by_title
        }
        return result, intros

    def sections(self, title: str) -> PageSections:
        response = self.call({"action": "parse", "page": title, "prop": "sections|revid", "redirects": "1"})
        parse = (response.body or {}).get("parse") or {}
        sections = tuple(
            SectionInfo(int(s["index"]), int(s.get("level", 2)), html_to_text(s.get("line", "")), s.get("anchor", ""))
            for s in parse.get("sections", [])
            if str(s.get("index", "")).isdigit()  # "T-1" = transcluded
        )
        return PageSections(
            parse.get("title", title), parse.get("pageid"), parse.get("revid"), sections, response.fetched_at
        )

    def section_text(self, title: str, index: int) -> str:
        response = self.call(
            {
                "action": "parse",
                "page": title,
                "section": str(index),
                "prop": "text",
                "redirects": "1",
                "disableeditsection": "1",
                "disabletoc": "1",
            }
        )
        text = ((response.body or {}).get("parse") or {}).get("text", "")
        if isinstance(text, dict):  # formatversion=1 shape
            text = text.get("*", "")
        return html_to_text(text)

    def section_links(self, title: str, index: int) -> list[str]:
        response = self.call(
            {"action": "parse", "page": title, "section": str(index), "prop": "links", "redirects": "1"}
        )
        links = ((response.body or {}).get("parse") or {}).get("links", [])
        return [l.get("title") or l.get("*") for l in links if l.get("ns", 0) == 0 and l.get("exists", True)]

    def see_also(self, title: str) -> list[str]:
        for section in self.sections(title).sections:
            if section.heading.strip().casefold() == "see also":
                return self.section_links(title, section.index)
        return []

    def categories(self, title: str) -> list[str]:
        return self.categories_of([title]).get(title, [])

    def categories_of(self, titles: Sequence[str]) -> dict[str, list[str]]:
        """Visible categories (``clshow=!hidden``) of several pages, 50 titles per request, keyed by requested title."""
        out: dict[str, list[str]] = {}
        for chunk in _chunks(list(dict.fromkeys(t for t in titles if t and "|" not in t)), TITLES_PER_QUERY):
            responses = self.call_all(
                {
                    "action": "query",
                    "titles": "|".join(chunk),
                    "redirects": "1",
                    "prop": "categories",
                    "clshow": "!hidden",
                    "cllimit": "max",
                }
            )
            query = merge_query(r.body for r in responses)
            by_title = {p.get("title"): p for p in query["pages"]}
            for requested, (final, _, _) in resolve_titles(chunk, query).items():
                page = by_title.get(final) or {}
                out[requested] = [c["title"].split(":", 1)[-1] for c in page.get("categories", [])]
        return out

    def linked_intros(self, title: str, *, limit: int = EXTRACTS_PER_QUERY) -> dict[str, PageInfo]:
        """The intros of the first ``limit`` pages a page links to (a disambiguation page's options), in one
        request: ``generator=links`` with the props of ``intros``. Keyed by title; links to no page are left out."""
        limit = min(limit, EXTRACTS_PER_QUERY)
        response = self.call(
            {
                "action": "query",
                "titles": title,
                "redirects": "1",
                "generator": "links",
                "gplnamespace": "0",
                "gpllimit": str(limit),
                **_intro_props(limit),
            }
        )
        if response.body is None:
            return {}
        pages = merge_query([response.body])["pages"]
        return {
            p["title"]: _page_info(p["title"], p, response.fetched_at)
            for p in pages
            if p.get("title") and not p.get("missing") and not p.get("invalid")
        }

    def links(self, title: str) -> list[str]:
        """Article links of a page (a disambiguation page's options without their intros: see ``linked_intros``)."""
        responses = self.call_all(
            {
                "action": "query",
                "titles": title,
                "redirects": "1",
                "prop": "links",
                "plnamespace": "0",
                "pllimit": "max",
            }
        )
        query = merge_query(r.body for r in responses)
        return [l["title"] for p in query["pages"] for l in p.get("links", [])]
