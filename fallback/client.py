"""The MediaWiki Action API client: polite, serial, cached, bounded, and confined to one host.

One injected ``httpx.Client``; every call is ``format=json&formatversion=2&maxlag=5``,
spaced by a token bucket, retried on 429 / 503 / maxlag / network failures with waits
that honour ``Retry-After`` (never under 5 s for server pushback, capped at ``max_retry_after``)
and capped exponential backoff. Answers that are HTTP 200 with an ``error`` body, or not JSON
at all, are errors. Bounds: a deadline per claim (or per call) that every socket read, token
wait and retry sleep ends by; a size cap on each decoded body; a circuit breaker after
consecutive transport failures; redirects never followed, and page URLs kept only when http(s).
Every option comes in one checked ``FallbackSettings``.
"""

from __future__ import annotations

import email.utils
import json
import logging
import math
import threading
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpcore
import httpx

from fallback.cache import ResponseCache, request_key
from fallback.clock import Clock, SystemClock, TokenBucket
from fallback.responses import html_to_text, merge_query, resolve_titles, web_url
from fallback.settings import DEFAULT_API_URL, MIN_RETRY_WAIT, CacheMode, FallbackSettings
from fallback.settings import ReplayMiss as ReplayMiss  # once defined here
from wikiground import __version__
from wikiground.errors import (
    ApiError,
    CacheMissError,
    CircuitOpenError,
    ConfigError,
    ContactRequiredError,
    DeadlineExceededError,
    ForbiddenHostError,
    ResponseTooLargeError,
    RetryExhaustedError,
    TransportError,
)

log = logging.getLogger(__name__)

TITLES_PER_QUERY = 50  # the API's limit for titles= (non-bot clients)
EXTRACTS_PER_QUERY = 20  # prop=extracts with exintro serves at most 20 pages per request
RETRY_STATUSES = frozenset({429, 502, 503, 504})
PUSHBACK_CODES = frozenset({"maxlag", "ratelimited", "readonly"})
_CORE_PARAMS = frozenset({"action", "format", "formatversion", "maxlag"})


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
        url=web_url(page.get("canonicalurl")) or web_url(page.get("fullurl")),
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
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return 0.0
        if when.tzinfo is None:
            return 0.0
        seconds = (when - datetime.now(UTC)).total_seconds()
    return max(0.0, seconds) if math.isfinite(seconds) else 0.0


def _preview(content: bytes, n: int = 80) -> str:
    return repr(content[:n].decode("utf-8", "replace"))


def _clamp(timeout: float | None, left: float | None) -> float | None:
    """A socket timeout that ends by the deadline: the smaller of the two (never 0, which means non-blocking)."""
    if left is None:
        return timeout
    left = max(left, 0.001)
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    """A connection whose every read and write waits at most the time left before the live deadline: a server that
    drips a byte now and then cannot hold a claim past it (the per-request timeout bounds each read only)."""

    def __init__(self, stream: httpcore.NetworkStream, left: Callable[[], float | None]):
        self._stream = stream
        self._left = left

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, _clamp(timeout, self._left()))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, _clamp(timeout, self._left()))

    def close(self) -> None:
        self._stream.close()

    def start_tls(self, ssl_context, server_hostname: str | None = None, timeout: float | None = None):
        tls = self._stream.start_tls(ssl_context, server_hostname, _clamp(timeout, self._left()))
        return _DeadlineStream(tls, self._left)

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _DeadlineBackend(httpcore.SyncBackend):
    """httpcore's socket backend, with connections that honour the live deadline."""

    def __init__(self, left: Callable[[], float | None]):
        super().__init__()
        self._left = left

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        stream = super().connect_tcp(host, port, _clamp(timeout, self._left()), local_address, socket_options)
        return _DeadlineStream(stream, self._left)


def _decoder(encoding: str) -> Any:
    """A streaming decompressor for a Content-Encoding (None for identity); we only ever ask for gzip."""
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return None
    if encoding in ("gzip", "x-gzip"):
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    if encoding == "deflate":
        return zlib.decompressobj()
    raise ApiError(f"unsupported Content-Encoding {encoding[:40]!r} (only gzip was accepted)", code="badencoding")


def _endpoint(api_url: str | None, cache_mode: str, cache: ResponseCache | None) -> str:
    """The API to ask: the one given; else, in replay, the only one the cache holds answers from; else Wikipedia's."""
    if api_url is not None:
        return api_url
    if cache_mode != "replay" or cache is None:
        return DEFAULT_API_URL
    hosts = sorted(cache.endpoints())
    if len(hosts) > 1:
        raise ConfigError(
            f"the cache {cache.root} holds answers from {len(hosts)} APIs ({', '.join(hosts)}): name one with --api-url"
        )
    if hosts:
        log.info("replay: answering as %s, the one API the cache %s holds", hosts[0], cache.root)
        return hosts[0]
    return DEFAULT_API_URL


class WikiApi:
    """A MediaWiki site's Action API (English Wikipedia by default).

    Options come from ``settings``. Every network call runs under a deadline (the caller's ``deadline_scope``, else
    ``live_deadline`` for the call): socket reads, token waits and retry sleeps all end by it. ``breaker_failures``
    consecutive transport failures turn the network off for ``breaker_cooldown`` seconds (CircuitOpenError); cache
    hits still answer.
    """

    def __init__(
        self,
        settings: FallbackSettings,
        *,
        http_client: httpx.Client | None = None,
        clock: Clock | None = None,
    ):
        """``settings`` were checked as they were made; ``http_client`` and ``clock`` replace the network and the
        time (tests, proxies)."""
        if not isinstance(settings, FallbackSettings):
            raise TypeError(f"WikiApi takes a FallbackSettings, not {type(settings).__name__}")
        self.settings = settings
        cache_dir = settings.cache_dir if self.cache_mode != "off" else None
        entry_cap = 2 * settings.max_response_bytes + 64 * 1024  # one response re-encoded, with its key
        self.cache = ResponseCache(cache_dir, max_entry_bytes=entry_cap) if cache_dir is not None else None
        api_url = _endpoint(settings.api_url, self.cache_mode, self.cache)
        self.url = httpx.URL(api_url)
        if self.url.scheme not in ("http", "https") or not self.url.host:
            raise ConfigError(f"API URL must be an absolute http(s) URL, not {api_url!r}")
        self.api_url = str(self.url)
        # Replay never touches the network, so it is the one mode that runs without a contact.
        self.user_agent = (
            user_agent(settings.contact)
            if self.cache_mode != "replay" or settings.contact
            else f"wikiground/{__version__} (replay) httpx/{httpx.__version__}"
        )
        self.clock = clock or SystemClock()
        self.bucket = TokenBucket(settings.rate, clock=self.clock)
        self._own_client = http_client is None
        self._http = http_client
        self._lock = threading.Lock()  # requests strictly in series, even across threads
        self._local = threading.local()  # each thread's (claim's) deadline and counts
        self._count_lock = threading.Lock()
        self._failures = 0  # consecutive transport failures
        self._open_until: float | None = None  # the circuit breaker: no network before this (monotonic) time
        self.requests = 0  # HTTP requests sent (retries included)
        self.cache_hits = 0
        self.cache_misses = 0
        self.truncated = 0  # continuation chains cut at max_continue
        self.breaker_trips = 0

    # -- plumbing -------------------------------------------------------------------------------

    @property
    def cache_mode(self) -> CacheMode:
        return self.settings.cache_mode

    @property
    def http(self) -> httpx.Client:
        if self._http is None:
            if self.cache_mode == "replay":
                raise CacheMissError("replay mode never opens a network connection")
            transport = httpx.HTTPTransport()
            pool = getattr(transport, "_pool", None)
            if hasattr(pool, "_network_backend"):  # httpx has no public hook for the socket backend
                pool._network_backend = _DeadlineBackend(self._time_left)  # type: ignore[union-attr]
            self._http = httpx.Client(transport=transport, follow_redirects=False, timeout=self.settings.timeout)
        return self._http

    def close(self) -> None:
        if self._own_client and self._http is not None:
            self._http.close()
            self._http = None

    def __enter__(self) -> WikiApi:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @contextmanager
    def deadline_scope(self, seconds: float | None = None) -> Iterator[None]:
        """Every call in the block (in this thread) shares one deadline, ``seconds`` (default ``live_deadline``)
        from now; inside another scope, the outer deadline holds."""
        if getattr(self._local, "deadline", None) is not None:
            yield
            return
        budget = self.settings.live_deadline if seconds is None else seconds
        self._local.deadline, self._local.budget = self.clock.monotonic() + budget, budget
        try:
            yield
        finally:
            self._local.deadline = None

    def _count(self, what: str) -> None:
        """Count a request, cache hit or miss: in all (the attribute) and for this thread's claim."""
        with self._count_lock:
            setattr(self, what, getattr(self, what) + 1)
        mine = getattr(self._local, "counts", None)
        if mine is None:
            mine = self._local.counts = {"requests": 0, "cache_hits": 0, "cache_misses": 0}
        mine[what] += 1

    def counts_here(self) -> tuple[int, int, int]:
        """(requests, cache hits, cache misses) made by this thread so far: one claim's share, however many
        claims other threads are answering meanwhile."""
        mine = getattr(self._local, "counts", None) or {}
        return mine.get("requests", 0), mine.get("cache_hits", 0), mine.get("cache_misses", 0)

    def _time_left(self) -> float | None:
        deadline = getattr(self._local, "deadline", None)
        return None if deadline is None else deadline - self.clock.monotonic()

    def _deadline_error(self, what: str) -> DeadlineExceededError:
        return DeadlineExceededError(f"live deadline of {getattr(self._local, 'budget', 0.0):g}s reached {what}")

    def _check_host(self, url: httpx.URL) -> None:
        if (url.scheme, url.host, url.port) != (self.url.scheme, self.url.host, self.url.port):
            raise ForbiddenHostError(f"refusing to contact {url.scheme}://{url.host}: only {self.url.host} is allowed")

    def call(self, params: Mapping[str, Any]) -> ApiResponse:
        """One logical API request: from the cache when there, else from the network (then cached)."""
        full = {k: str(v) for k, v in params.items()}
        full.update(format="json", formatversion="2")
        if self.settings.maxlag is not None:
            full["maxlag"] = str(self.settings.maxlag)
        key = request_key(self.api_url, full)
        if self.cache is not None:
            entry = self.cache.get(key)
            if entry is not None:
                self._count("cache_hits")
                return ApiResponse(entry.body, entry.fetched_at, from_cache=True, status=entry.status)
        if self.cache_mode == "replay":
            return self._replay_miss(key, full)
        with self.deadline_scope():
            body, status = self._fetch(full)
        fetched_at = self.clock.now_iso()
        if self.cache is not None:
            self.cache.put(key, status=status, fetched_at=fetched_at, body=body)
        return ApiResponse(body, fetched_at, status=status)

    def _replay_miss(self, key: str, full: Mapping[str, str]) -> ApiResponse:
        self._count("cache_misses")
        described = "&".join(f"{k}={v}" for k, v in sorted(full.items()) if k not in ("format", "formatversion"))
        if self.settings.replay_miss == "error":
            # "is not None": an empty cache is falsy (it has a length). Folder and entry by name only: the message
            # reaches a server's clients, who have no business knowing the server's paths.
            where = f" {self.cache.root.name!r}" if self.cache is not None else " (no --cache folder given)"
            path = self.cache.path_for(key) if self.cache is not None else None
            note = f" (its entry {path.name} is unusable)" if path is not None and path.exists() else ""
            raise CacheMissError(f"replay: request not in the replay cache{where}{note}: {described}")
        log.info("replay miss (skipped): %s", described)
        return ApiResponse(None, None)

    def _backoff(self, attempt: int, floor: float = 0.0) -> float:
        base = max(self.settings.backoff_base, floor)
        return min(max(self.settings.backoff_cap, floor), base * 2 ** (attempt - 1))

    @contextmanager
    def _serial(self) -> Iterator[None]:
        """The request lock, waited for no longer than the deadline allows."""
        left = self._time_left()
        if not self._lock.acquire(timeout=-1 if left is None else max(0.0, left)):
            raise self._deadline_error("waiting for another thread's request")
        try:
            yield
        finally:
            self._lock.release()

    def _fetch(self, params: dict[str, str]) -> tuple[dict[str, Any], int]:
        headers = {"User-Agent": self.user_agent, "Accept-Encoding": "gzip", "Accept": "application/json"}
        with self._serial():
            failure: Exception | None = None
            for attempt in range(1, self.settings.max_tries + 1):
                self._admit()
                self.bucket.acquire(limit=self._time_left())
                left = self._time_left()
                if left is not None and left <= 0:
                    raise self._deadline_error("before the request" + (f" ({failure})" if failure else ""))
                timeout = self.settings.timeout if left is None else min(self.settings.timeout, left)
                request = self.http.build_request("GET", self.url, params=params, headers=headers, timeout=timeout)
                self._check_host(request.url)
                self._count("requests")
                first, second = self._attempt(request, attempt)
                if not isinstance(first, Exception):
                    return first, second
                failure, wait = first, second
                if attempt == self.settings.max_tries:
                    raise RetryExhaustedError(
                        f"{self.settings.max_tries} tries failed for {self.url.host}: {failure}"
                    ) from failure
                if wait > self.settings.max_wait:
                    raise RetryExhaustedError(
                        f"server asks to wait {wait:.0f}s (> {self.settings.max_wait:.0f}s): {failure}"
                    ) from failure
                self._pause(wait, failure, attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    def _pause(self, wait: float, failure: Exception, attempt: int) -> None:
        """Sleep before a retry, unless the wait would end past the deadline (then give up now)."""
        left = self._time_left()
        if left is not None and wait >= left:
            raise DeadlineExceededError(
                f"a retry in {wait:.1f}s would pass the live deadline ({max(0.0, left):.1f}s left): {failure}"
            ) from failure
        log.warning(
            "MediaWiki request failed (%s); retry %d/%d in %.1fs", failure, attempt, self.settings.max_tries - 1, wait
        )
        self.clock.sleep(wait)

    def _attempt(self, request: httpx.Request, attempt: int) -> tuple[Any, Any]:
        """One HTTP exchange: (body, status), or (error to retry on, seconds to wait); raises on final errors."""
        try:
            response = self.http.send(request, stream=True, follow_redirects=False)
            try:
                if 300 <= response.status_code < 400:
                    self._refuse_redirect(response)
                content = self._read_body(response)
            finally:
                response.close()
            self._failures = 0  # a whole answer came: the network is fine, whatever the answer says
        except httpx.HTTPError as exc:  # connect/read errors, timeouts, resets, broken gzip
            return self._transport_failure(exc), self._backoff(attempt)
        return self._judge(response, content, attempt)

    # -- the circuit breaker --------------------------------------------------------------------

    def _admit(self) -> None:
        if self._open_until is None:
            return
        left = self._open_until - self.clock.monotonic()
        if left > 0:
            raise CircuitOpenError(
                f"live fallback off for another {left:.0f}s after {self._failures} consecutive transport failures "
                f"with {self.url.host}"
            )
        self._open_until = None  # cooled down: one request tries, and one more failure opens it again

    def _transport_failure(self, exc: httpx.HTTPError) -> TransportError:
        """A failed exchange: counted by the breaker; raises when it opens, or when the deadline is spent."""
        if isinstance(exc, httpx.TimeoutException):
            err = TransportError(f"timeout ({type(exc).__name__}) talking to {self.url.host}")
        else:
            err = TransportError(f"{type(exc).__name__}: {exc}")
        err.__cause__ = exc
        self._failures += 1
        if self._failures >= self.settings.breaker_failures:
            self._open_until = self.clock.monotonic() + self.settings.breaker_cooldown
            self.breaker_trips += 1
            log.warning(
                "live fallback off for %.0fs after %d consecutive transport failures with %s (last: %s); "
                "claims keep their local evidence",
                self.settings.breaker_cooldown,
                self._failures,
                self.url.host,
                err,
            )
            raise CircuitOpenError(f"circuit breaker opened after {self._failures} transport failures: {err}") from exc
        left = self._time_left()
        if left is not None and left <= 0.05:  # a read cut at the deadline: no time for another try
            raise self._deadline_error(f"talking to {self.url.host}: {err}") from exc
        return err

    # -- reading answers ------------------------------------------------------------------------

    def _refuse_redirect(self, response: httpx.Response) -> None:
        """The API never redirects a GET to itself: a redirect is an error, and one off the host is refused."""
        location = response.headers.get("location", "")
        try:
            target = response.request.url.join(location)
        except (httpx.InvalidURL, ValueError) as exc:
            raise ForbiddenHostError(f"refusing a redirect to an unusable URL {location[:100]!r}") from exc
        self._check_host(target)
        raise ApiError(f"unexpected HTTP {response.status_code} redirect to {target}", status=response.status_code)

    def _read_body(self, response: httpx.Response) -> bytes:
        """The body, streamed: decompressed here so its decoded size is counted as it grows (a gzip bomb stops at
        the cap, not in memory), and the deadline checked between chunks."""
        cap = self.settings.max_response_bytes
        declared = response.headers.get("content-length", "").strip()
        if declared.isdigit() and int(declared) > cap:
            raise ResponseTooLargeError(f"{self.url.host} announces {int(declared)} bytes, over the cap of {cap}")
        if response.is_stream_consumed:  # an in-memory answer (a mock transport): read and decoded already
            if len(response.content) > cap:
                raise ResponseTooLargeError(f"response from {self.url.host} exceeds the cap of {cap} bytes")
            return response.content
        decoder = _decoder(response.headers.get("content-encoding", ""))
        parts: list[bytes] = []
        size = 0
        for raw in response.iter_raw(65536):
            try:
                chunk = raw if decoder is None else decoder.decompress(raw, cap + 1 - size)
            except zlib.error as exc:
                raise httpx.DecodingError(f"broken compressed body: {exc}", request=response.request) from exc
            size += len(chunk)
            if size > cap:
                raise ResponseTooLargeError(f"response from {self.url.host} exceeds the cap of {cap} bytes (decoded)")
            parts.append(chunk)
            left = self._time_left()
            if left is not None and left <= 0:
                raise httpx.ReadTimeout("live deadline reached while reading the response", request=response.request)
        if decoder is not None and not decoder.eof:
            raise httpx.DecodingError("compressed body cut short", request=response.request)
        return b"".join(parts)

    def _pushback_wait(self, response: httpx.Response, attempt: int) -> float:
        asked = _retry_after(response)
        if asked > self.settings.max_retry_after:
            log.warning(
                "%s asks to wait %.0fs (Retry-After); capped to %.0fs",
                self.url.host,
                asked,
                self.settings.max_retry_after,
            )
            asked = self.settings.max_retry_after
        return max(asked, self._backoff(attempt, MIN_RETRY_WAIT))

    def _judge(
        self, response: httpx.Response, content: bytes, attempt: int
    ) -> tuple[dict[str, Any], int] | tuple[Exception, float]:
        """A usable body, or (error to retry on, seconds to wait); raises on final errors."""
        status = response.status_code
        if status in RETRY_STATUSES:
            wait = self._pushback_wait(response, attempt)
            return ApiError(f"HTTP {status}: {_preview(content)}", status=status), wait
        if status != 200:
            raise ApiError(f"HTTP {status} from {self.url.host}: {_preview(content, 200)}", status=status)
        try:
            body = json.loads(content.decode("utf-8"))
        except (ValueError, RecursionError) as exc:  # truncated, HTML, not UTF-8, absurdly nested: never data
            err = ApiError(
                f"response is not JSON ({len(content)} bytes): {_preview(content)}", code="badjson", status=status
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
                return ApiError(f"{code}: {info}", code=code, status=status), self._pushback_wait(response, attempt)
            raise ApiError(f"API error {code}: {info}", code=code, status=status)
        if "warnings" in body:
            log.debug("API warnings: %s", body["warnings"])
        return body, status

    def call_all(self, params: Mapping[str, Any], *, max_continue: int | None = None) -> list[ApiResponse]:
        """A request and its ``continue`` chain, up to ``max_continue`` follow-ups."""
        limit = self.settings.max_continue if max_continue is None else max_continue
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
        params = {"prop": "categories", "clshow": "!hidden", "cllimit": "max"}
        return self._page_lists(titles, params, "categories", lambda c: c["title"].split(":", 1)[-1])

    def links_of(self, titles: Sequence[str]) -> dict[str, list[str]]:
        """Article links (namespace 0) of several pages, 50 titles per request with its ``continue`` chain, keyed
        by requested title."""
        params = {"prop": "links", "plnamespace": "0", "pllimit": "max"}
        return self._page_lists(titles, params, "links", lambda l: l.get("title") or None)

    def _page_lists(
        self, titles: Sequence[str], params: Mapping[str, str], prop: str, item: Callable[[dict], str | None]
    ) -> dict[str, list[str]]:
        """One list prop of several pages (``item`` of each entry; None leaves it out), 50 titles per request with
        its ``continue`` chain, keyed by requested title (after normalisation and redirects)."""
        out: dict[str, list[str]] = {}
        for chunk in _chunks(list(dict.fromkeys(t for t in titles if t and "|" not in t)), TITLES_PER_QUERY):
            responses = self.call_all({"action": "query", "titles": "|".join(chunk), "redirects": "1", **params})
            query = merge_query(r.body for r in responses)
            by_title = {p.get("title"): p for p in query["pages"]}
            for requested, (final, _, _) in resolve_titles(chunk, query).items():
                page = by_title.get(final) or {}
                out[requested] = [x for x in map(item, page.get(prop, [])) if x is not None]
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
