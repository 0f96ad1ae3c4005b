"""WikiApi against a real HTTP server on 127.0.0.1 (FakeWiki): etiquette, retries, batching, confinement."""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import replace

import httpx
import pytest

from fallback.client import WikiApi
from fallback.live import open_fallback
from fallback.settings import DEFAULT_LIVE_DEADLINE, FallbackSettings
from retriever import __version__
from retriever.cli_options import fallback_settings
from retriever.query import build_parser
from retriever.query import main as query_main
from tests.support.clock import FakeClock
from tests.support.fakewiki import FakePage, FakeWiki, pages_from_vital, stable_id
from wikiground.errors import (
    ApiError,
    CircuitOpenError,
    ConfigError,
    ContactRequiredError,
    DeadlineExceededError,
    ForbiddenHostError,
    ResponseTooLargeError,
    RetryExhaustedError,
)

CONTACT = "https://example.org/wikiground-tests; tests@example.org"


@pytest.fixture(scope="module")
def vital(data_dir):
    return data_dir / "corpora" / "vital_articles_summaries.json"


@pytest.fixture(scope="module")
def corpus(vital) -> dict[str, FakePage]:
    pages = pages_from_vital(vital, limit=150)
    first = next(iter(pages))
    pages[first] = replace(
        pages[first],
        redirects_from=("Redirect one", ("Redirect two", "History")),
        categories=tuple(f"Topic {i}" for i in range(25)),
        hidden_categories=("Hidden maint",),
    )
    mercury = "Mercury"
    pages[mercury] = FakePage(
        mercury,
        stable_id(mercury),
        1,
        "Mercury may refer to:",
        is_disambiguation=True,
        options=("Mercury (planet)", "Mercury (element)"),
    )
    return pages


@pytest.fixture()
def wiki(corpus):
    with FakeWiki(corpus) as w:
        yield w


def make_api(
    wiki: FakeWiki, *, clock: FakeClock | None = None, http_client: httpx.Client | None = None, **options
) -> WikiApi:
    options.setdefault("rate", 1000.0)
    options.setdefault("timeout", 2.0)
    options.setdefault("cache_mode", "off")
    options.setdefault("live_deadline", 1000.0)  # the retry policy's fake waits, not the deadline, are under test here
    settings = FallbackSettings(api_url=wiki.api_url, contact=CONTACT, **options)
    return WikiApi(settings, clock=clock or FakeClock(), http_client=http_client)


def test_user_agent_and_common_params(wiki, corpus):
    api = make_api(wiki)
    api.resolve([next(iter(corpus))])
    req = wiki.requests[-1]
    ua = req.headers["user-agent"]
    assert ua.startswith(f"wikiground/{__version__} (") and CONTACT in ua and "httpx/" in ua
    assert req.params["format"] == "json" and req.params["formatversion"] == "2" and req.params["maxlag"] == "5"
    assert "gzip" in req.headers["accept-encoding"]


@pytest.mark.parametrize("contact", [None, "", "   "])
def test_no_contact_refused_before_any_request(wiki, contact):
    with pytest.raises(ContactRequiredError, match="contact"):
        WikiApi(FallbackSettings(api_url=wiki.api_url, contact=contact))
    with pytest.raises(ContactRequiredError):
        open_fallback(FallbackSettings(api_url=wiki.api_url, contact=contact))
    assert wiki.requests == []


def test_resolution_shapes(wiki, corpus):
    first = next(iter(corpus))
    api = make_api(wiki)
    got = api.resolve(
        ["redirect one", "Redirect two", "No such page xyz", "Mercury", first.lower(), "bad|title", "a[b]"]
    )
    assert (
        got["redirect one"].title == first
        and got["redirect one"].redirected
        and got["redirect one"].pageid == corpus[first].pageid
    )
    assert got["Redirect two"].fragment == "History"
    assert got["No such page xyz"].missing and got["No such page xyz"].pageid is None
    assert got["Mercury"].is_disambiguation and not got[first.lower()].is_disambiguation
    assert got[first.lower()].title == first  # normalised first letter
    assert got["bad|title"].invalid and got["a[b]"].invalid
    assert got[first.lower()].url == wiki.page_url(first) and got[first.lower()].rev_id == corpus[first].revid


def test_error_body_is_an_error_not_data(wiki, corpus):
    api = make_api(wiki)
    wiki.add_fault("error", code="internal_api_error_DBQueryError")
    with pytest.raises(ApiError) as info:
        api.resolve([next(iter(corpus))])
    assert info.value.code == "internal_api_error_DBQueryError" and info.value.status == 200
    assert len(wiki.requests) == 1  # a real error is not retried
    with pytest.raises(ApiError) as info:
        api.sections("Page that is not there")
    assert info.value.code == "missingtitle"


def test_non_json_bodies_are_errors_and_bounded(wiki, corpus):
    api = make_api(wiki, max_tries=3)
    wiki.add_fault("truncated", times=3)
    with pytest.raises(RetryExhaustedError) as info:
        api.resolve([next(iter(corpus))])
    assert isinstance(info.value.__cause__, ApiError) and info.value.__cause__.code == "badjson"
    assert len(wiki.requests) == 3


def test_http_error_status_not_retried(wiki):
    api = WikiApi(
        FallbackSettings(api_url=wiki.api_url.replace("/w/api.php", "/nope.php"), contact=CONTACT, rate=1000),
        clock=FakeClock(),
    )
    with pytest.raises(ApiError) as info:
        api.resolve(["X"])
    assert info.value.status == 404 and len(wiki.requests) == 1


def test_429_waits_at_least_retry_after_and_5s(wiki, corpus):
    clock = FakeClock()
    api = make_api(wiki, clock=clock)
    wiki.add_fault("429", retry_after="12")
    wiki.add_fault("429", retry_after="1")
    wiki.add_fault("429", retry_after=None)
    got = api.resolve([next(iter(corpus))])
    assert not next(iter(got.values())).missing
    assert len(wiki.requests) == 4
    waits = [s for s in clock.sleeps if s >= 1.0]
    assert waits[0] >= 12 and waits[1] >= 5 and waits[2] >= 5
    assert api.requests == 4


def test_maxlag_exponential_capped_then_exhausted(wiki, corpus):
    clock = FakeClock()
    api = make_api(wiki, clock=clock, max_tries=6, backoff_cap=30.0)
    wiki.add_fault("maxlag", times=10)
    with pytest.raises(RetryExhaustedError) as info:
        api.resolve([next(iter(corpus))])
    assert isinstance(info.value.__cause__, ApiError) and info.value.__cause__.code == "maxlag"
    waits = [s for s in clock.sleeps if s >= 1.0]
    assert waits == [5.0, 10.0, 20.0, 30.0, 30.0]
    assert len(wiki.requests) == 6


def test_503_then_success(wiki, corpus):
    clock = FakeClock()
    api = make_api(wiki, clock=clock)
    wiki.add_fault("503", retry_after="3")
    assert api.intros([next(iter(corpus))])
    assert max(clock.sleeps) >= 5.0 and len(wiki.requests) == 2


def test_timeout_and_reset_are_retried(wiki, corpus):
    clock = FakeClock()
    api = make_api(wiki, clock=clock, timeout=0.25)
    wiki.add_fault("slow", delay=0.8)
    wiki.add_fault("reset")
    title = next(iter(corpus))
    got = api.intros([title])
    assert got[title].extract == corpus[title].intro
    assert len(wiki.requests) == 3
    retry_waits = [s for s in clock.sleeps if s >= 1.0]
    assert retry_waits == [1.0, 2.0]  # exponential from 1 s for network failures


def test_token_bucket_spacing(wiki, corpus):
    clock = FakeClock()
    api = make_api(wiki, clock=clock, rate=2.0)
    for title in list(corpus)[:5]:
        api.resolve([title])
    assert clock.sleeps == pytest.approx([0.5, 0.5, 0.5, 0.5])
    assert len(wiki.requests) == 5


def test_batching(wiki, corpus):
    titles = list(corpus)[:60]
    api = make_api(wiki)
    got = api.resolve(titles)
    assert len(wiki.requests) == 2 and sorted(got) == sorted(titles)
    assert all(len(r.params["titles"].split("|")) <= 50 for r in wiki.requests)
    n = len(wiki.requests)
    intros = api.intros(titles[:25])
    assert len(wiki.requests) - n == 2
    assert all(intros[t].extract == corpus[t].intro for t in titles[:25])


def test_continuation_followed_up_to_a_limit(wiki, corpus):
    first = next(iter(corpus))
    api = make_api(wiki)
    params = {"action": "query", "titles": first, "prop": "categories", "clshow": "!hidden", "cllimit": "10"}
    full = api.call_all(params)
    assert len(full) == 3 and full[-1].body.get("batchcomplete") is True
    n = len(wiki.requests)
    cut = api.call_all(params, max_continue=1)
    assert len(cut) == 2 and api.truncated == 1 and len(wiki.requests) - n == 2
    assert api.categories(first) == [f"Topic {i}" for i in range(25)]  # hidden category not shown


def test_extract_continuation(vital):
    pages = pages_from_vital(vital, limit=12)
    with FakeWiki(pages, extract_limit=5) as small:
        api = make_api(small)
        got = api.intros(list(pages))
        assert len(small.requests) == 3
        assert {t: i.extract for t, i in got.items()} == {t: p.intro for t, p in pages.items()}


def test_nothing_lost_or_duplicated_under_faults(wiki, corpus):
    titles = list(corpus)[:120]
    for kind in ("429", "reset", "truncated", "maxlag", "503", "reset"):
        wiki.add_fault(kind, retry_after="5")
    api = make_api(wiki, timeout=1.0, max_tries=8)
    got = api.intros(titles)
    assert sorted(got) == sorted(titles)
    assert all(got[t].extract == corpus[t].intro and got[t].pageid == corpus[t].pageid for t in titles)
    served = [t for r in wiki.requests for t in r.params.get("titles", "").split("|") if t]
    assert sorted(set(served)) == sorted(titles)
    assert len(wiki.requests) == 6 + 6  # 6 batches of 20 + one retry per fault


def test_never_leaves_the_configured_host(wiki, corpus):
    seen_hosts: list[str] = []
    client = httpx.Client(event_hooks={"request": [lambda r: seen_hosts.append(r.url.host)]})
    api = make_api(wiki, http_client=client)
    wiki.add_fault("redirect", location="http://example.com/w/api.php")
    with pytest.raises(ForbiddenHostError):
        api.resolve([next(iter(corpus))])
    wiki.add_fault("redirect", location=wiki.api_url + "?x=1")
    with pytest.raises(ApiError, match="redirect"):
        api.resolve([next(iter(corpus))])
    assert set(seen_hosts) == {"127.0.0.1"}


def test_continue_cannot_rewrite_action_or_host():
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if len(seen) == 1:
            return httpx.Response(
                200,
                json={
                    "continue": {"clcontinue": "1|X", "action": "parse", "format": "xml", "continue": "||"},
                    "query": {"pages": []},
                },
            )
        return httpx.Response(200, json={"batchcomplete": True, "query": {"pages": []}})

    api = WikiApi(
        FallbackSettings(api_url="https://wiki.test/w/api.php", contact=CONTACT, rate=1000),
        clock=FakeClock(),
        http_client=httpx.Client(transport=httpx.MockTransport(handler)),
    )
    api.call_all({"action": "query", "titles": "X", "prop": "categories"})
    assert len(seen) == 2
    second = dict(seen[1].url.params)
    assert second["action"] == "query" and second["format"] == "json" and second["clcontinue"] == "1|X"
    assert {r.url.host for r in seen} == {"wiki.test"}


class _InFlight(httpx.BaseTransport):
    """A real HTTP transport that counts the exchanges under way at once, from the request to the end of its body
    (the server's own count is racy: its handler may still be closing when the next request arrives)."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.now = self.max = 0
        self.lock = threading.Lock()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        with self.lock:
            self.now += 1
            self.max = max(self.max, self.now)
        try:
            response = self.inner.handle_request(request)
            response.read()
            return response
        finally:
            with self.lock:
                self.now -= 1


def test_requests_are_serial_across_threads(wiki, corpus):
    counter = _InFlight()
    api = make_api(wiki, http_client=httpx.Client(transport=counter))
    wiki.add_fault("slow", delay=0.1, times=3)
    titles = list(corpus)[:6]
    threads = [threading.Thread(target=api.resolve, args=([t],)) for t in titles]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wiki.requests) == 6 and counter.max == 1


def test_each_thread_counts_its_own_requests(wiki, corpus):
    """A server answers many claims at once through one client: each claim's request count is its own."""
    api = make_api(wiki)
    wiki.add_fault("slow", delay=0.05, times=4)
    titles = list(corpus)[:8]
    counts: dict[str, tuple[int, int, int]] = {}

    def claim(title: str, n: int) -> None:
        start = api.counts_here()
        for i in range(n):
            api.resolve([titles[(titles.index(title) + i) % len(titles)]])
        counts[title] = tuple(b - a for a, b in zip(start, api.counts_here()))

    threads = [threading.Thread(target=claim, args=(t, 1 + i % 3)) for i, t in enumerate(titles)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [counts[t][0] for t in titles] == [1 + i % 3 for i in range(len(titles))]
    assert sum(c[0] for c in counts.values()) == api.requests == len(wiki.requests)


def test_search_with_intros_is_one_request(wiki, corpus):
    """``list=search`` beside ``generator=search``: the ranked hits, the suggestion and the hits' intros (with
    URL and disambiguation flag) come back in one request."""
    api = make_api(wiki)
    title = list(corpus)[5]
    query = " ".join(corpus[title].intro.split()[:6])
    plain = api.search(query, limit=3)
    n = len(wiki.requests)
    result, intros = api.search_intros(query, limit=3)
    assert len(wiki.requests) - n == 1
    params = wiki.requests[-1].params
    assert params["list"] == "search" and params["generator"] == "search" and params["gsrlimit"] == "3"
    assert result.hits == plain.hits and title in [h.title for h in result.hits]
    assert set(intros) == {h.title for h in plain.hits}
    assert all(intros[t].extract == corpus[t].intro and intros[t].url and intros[t].pageid for t in intros)


def test_search_with_intros_reads_the_real_combined_answer(data_dir):
    """The real API's answer to a list=search beside a generator (recorded by the Wikipedia Android app): pages[]
    ordered by pageid with an "index" rank, the search list and its suggestion. Served by a mock transport: no
    socket is opened."""
    recorded = data_dir / "mediawiki_api" / "search" / "android_prefixsearch_plus_search_suggestion_v2.json"
    body = json.loads(recorded.read_text(encoding="utf-8"))
    with httpx.Client(transport=httpx.MockTransport(lambda request: httpx.Response(200, json=body))) as http:
        api = WikiApi(
            FallbackSettings(api_url="http://127.0.0.1:9/w/api.php", contact=CONTACT, rate=1000.0, cache_mode="off"),
            http_client=http,
            clock=FakeClock(),
        )
        result, intros = api.search_intros("aba", limit=10)
    assert result.suggestion == "ababa"
    assert [h.title for h in result.hits] == ["Abama Open de Canarias"]
    page = next(p for p in body["query"]["pages"] if p["title"] == "Abama Open de Canarias")
    assert list(intros) == ["Abama Open de Canarias"] and intros["Abama Open de Canarias"].pageid == page["pageid"]


def test_categories_of_several_pages_in_one_request(wiki, corpus):
    first, second = list(corpus)[:2]
    api = make_api(wiki)
    n = len(wiki.requests)
    got = api.categories_of([first, second, "Redirect one"])
    assert len(wiki.requests) - n == 1
    assert got[first] == got["Redirect one"] == [f"Topic {i}" for i in range(25)]  # redirect followed, hidden not shown
    assert got[second] == list(corpus[second].categories)


# -- bounds: deadline, Retry-After cap, circuit breaker, size cap, URLs, options ----------------------------------


def test_retry_after_is_capped_and_the_cap_logged(wiki, corpus, caplog):
    clock = FakeClock()
    api = make_api(wiki, clock=clock)
    wiki.add_fault("429", retry_after="299")
    with caplog.at_level(logging.WARNING, logger="fallback.client"):
        got = api.resolve([next(iter(corpus))])
    assert not next(iter(got.values())).missing
    assert [s for s in clock.sleeps if s >= 1.0] == [30.0]  # not 299
    assert "asks to wait 299s (Retry-After); capped to 30s" in caplog.text


def test_no_wait_past_the_deadline(wiki, corpus):
    """A retry whose wait ends past the deadline is not waited for: the call gives up at once."""
    clock = FakeClock()
    api = make_api(wiki, clock=clock, live_deadline=20.0)
    wiki.add_fault("429", retry_after="25")
    with pytest.raises(DeadlineExceededError, match="would pass the live deadline"):
        api.resolve([next(iter(corpus))])
    assert len(wiki.requests) == 1 and all(s < 1.0 for s in clock.sleeps)
    # The slowest allowed rate cannot hold a call past its deadline either: the token is not waited for.
    slow = make_api(wiki, clock=clock, rate=0.01, live_deadline=10.0)
    slow.resolve([next(iter(corpus))])
    n = len(wiki.requests)
    with pytest.raises(DeadlineExceededError, match="rate 0.01/s"):
        slow.resolve([list(corpus)[1]])
    assert len(wiki.requests) == n and all(s < 1.0 for s in clock.sleeps)


def test_one_deadline_for_every_call_of_a_claim(wiki, corpus):
    """Inside ``deadline_scope`` the calls share one deadline: waits spent by the first shorten the second's."""
    clock = FakeClock()
    api = make_api(wiki, clock=clock, live_deadline=12.0)
    wiki.add_fault("503", retry_after="6")
    with api.deadline_scope():
        api.resolve([next(iter(corpus))])  # 6 s of its 12 spent waiting
        wiki.add_fault("503", retry_after="6")
        with pytest.raises(DeadlineExceededError):
            api.resolve([list(corpus)[1]])
    api.resolve([list(corpus)[2]])  # outside the scope: a fresh deadline for the call


def _refusing_client(calls: list[httpx.Request]) -> httpx.Client:
    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        raise httpx.ConnectError("connection refused", request=request)

    return httpx.Client(transport=httpx.MockTransport(handler))


def test_circuit_breaker_opens_after_consecutive_transport_failures(caplog, tmp_path):
    calls: list[httpx.Request] = []
    clock = FakeClock()
    api = WikiApi(
        FallbackSettings(
            api_url="http://127.0.0.1:9/w/api.php",
            contact=CONTACT,
            rate=1000.0,
            cache_mode="off",
            live_deadline=1000.0,
            breaker_failures=3,
            breaker_cooldown=60.0,
        ),
        http_client=_refusing_client(calls),
        clock=clock,
    )
    with caplog.at_level(logging.WARNING, logger="fallback.client"), pytest.raises(CircuitOpenError):
        api.resolve(["A"])
    assert len(calls) == 3 and api.breaker_trips == 1
    assert [m for m in caplog.messages if m.startswith("live fallback off for 60s after 3 consecutive")]
    with pytest.raises(CircuitOpenError, match="off for another"):
        api.resolve(["B"])
    assert len(calls) == 3  # no request while it is open
    clock.sleep(61)
    with pytest.raises(CircuitOpenError):
        api.resolve(["C"])
    assert len(calls) == 4 and api.breaker_trips == 2  # after the cool-down one try, and it opens again


def test_response_size_cap(wiki, corpus):
    api = make_api(wiki, max_response_bytes=300)
    with pytest.raises(ResponseTooLargeError, match="cap of 300"):
        api.intros([next(iter(corpus))])
    assert len(wiki.requests) == 1  # the same answer would come again: not retried


def test_page_urls_must_be_http():
    pages = [
        {"pageid": 1, "ns": 0, "title": "A", "fullurl": "javascript:alert(1)", "canonicalurl": "file:///etc/passwd"},
        {"pageid": 2, "ns": 0, "title": "B", "fullurl": "https://en.wikipedia.org/wiki/B"},
        {"pageid": 3, "ns": 0, "title": "C", "canonicalurl": "https://en.wikipedia.org/wiki/C\r\nX-Bad: 1"},
    ]
    body = {"batchcomplete": True, "query": {"pages": pages}}
    with httpx.Client(transport=httpx.MockTransport(lambda request: httpx.Response(200, json=body))) as http:
        api = WikiApi(
            FallbackSettings(api_url="https://wiki.test/w/api.php", contact=CONTACT, rate=1000.0),
            http_client=http,
            clock=FakeClock(),
        )
        got = api.resolve(["A", "B", "C"])
    assert got["A"].url is None and got["C"].url is None
    assert got["B"].url == "https://en.wikipedia.org/wiki/B"


def test_redirects_to_other_schemes_are_refused():
    for location in ("file:///etc/passwd", "ftp://wiki.test/w/api.php", "https://wiki.test:444/w/api.php"):
        response = httpx.Response(302, headers={"Location": location})
        with httpx.Client(transport=httpx.MockTransport(lambda request, r=response: r)) as http:
            api = WikiApi(
                FallbackSettings(api_url="https://wiki.test/w/api.php", contact=CONTACT, rate=1000.0),
                http_client=http,
                clock=FakeClock(),
            )
            with pytest.raises(ForbiddenHostError):
                api.resolve(["A"])


@pytest.mark.parametrize(
    "option",
    [
        {"rate": 0.0001},
        {"rate": float("nan")},
        {"rate": float("inf")},
        {"rate": 0},
        {"timeout": float("inf")},
        {"timeout": -1.0},
        {"live_deadline": 0.0},
        {"live_deadline": float("nan")},
        {"max_retry_after": -5.0},
        {"breaker_failures": 0},
        {"breaker_failures": 2.5},
        {"breaker_cooldown": float("inf")},
        {"max_response_bytes": 0},
        {"rate": "fast"},
        {"max_tries": 0},
        {"max_continue": -1},
        {"max_continue": 1.5},
        {"maxlag": 0},
        {"backoff_base": float("nan")},
        {"backoff_cap": 0.0},
        {"max_wait": float("inf")},
        {"replay_miss": "ignore"},
        {"cache_mode": "offline"},
        {"contact": 42},
        {"cache_dir": 3},
    ],
)
def test_options_are_validated(option):
    with pytest.raises(ConfigError, match=next(iter(option)).split("_")[0]):
        FallbackSettings(**option)
    # A change is a new object, checked as it is made: no WikiApi is ever handed unchecked settings.
    with pytest.raises(ConfigError, match=next(iter(option)).split("_")[0]):
        replace(FallbackSettings(api_url="http://127.0.0.1:9/w/api.php", contact=CONTACT), **option)


def test_live_deadline_from_the_environment_and_the_flag(tmp_path, capsys):
    assert FallbackSettings().live_deadline == DEFAULT_LIVE_DEADLINE == 30.0
    assert FallbackSettings.from_env({"WIKIGROUND_LIVE_DEADLINE": "5"}).live_deadline == 5.0
    assert FallbackSettings.from_env({"WIKIGROUND_LIVE_DEADLINE": "5"}, live_deadline=7.0).live_deadline == 7.0
    with pytest.raises(ConfigError, match="WIKIGROUND_LIVE_DEADLINE"):
        FallbackSettings.from_env({"WIKIGROUND_LIVE_DEADLINE": "soon"})
    args = build_parser().parse_args(["--index", str(tmp_path), "--on-the-fly", "--live-deadline", "4.5", "x"])
    assert fallback_settings(args).live_deadline == 4.5
    # --rate 0.0001 once made every request wait hours for its token: now it is refused before anything opens.
    assert query_main(["--index", str(tmp_path / "none"), "--on-the-fly", "--rate", "0.0001", "claim"]) == 2
    assert "rate (requests/s) must be at least 0.01" in capsys.readouterr().err
