"""Record/replay cache: replay with the network off is identical; misses, errors and atomic writes."""

from __future__ import annotations

import json
from dataclasses import replace

import httpx
import pytest

from fallback.cache import ResponseCache, request_key
from fallback.client import WikiApi
from fallback.delta import LIVE_PASSAGE_ID_BASE, write_live_pages
from fallback.live import STATUS_FAILED, LiveFallback, open_fallback
from fallback.settings import FallbackSettings
from indexer.store import open_delta
from tests.support.clock import FakeClock
from tests.support.fakewiki import FakeWiki, pages_from_vital
from wikiground.errors import ApiError, CacheMissError, ConfigError, IndexFormatError, RetryExhaustedError

CONTACT = "tests@example.org"
CLAIMS = [
    ("There is a capital called Mogadishu.", ["Mogadishu"]),
    ("Aristotle spent time in Athens.", ["Aristotle"]),
    ("The Cretaceous ended.", ["Cretaceous"]),
    ("Mercury is the first planet from the Sun.", ["Mercury (planet)"]),
]


class NoNetwork(httpx.BaseTransport):
    def handle_request(self, request: httpx.Request) -> httpx.Response:
        raise AssertionError(f"network used in replay: {request.url}")


@pytest.fixture(scope="module")
def corpus(data_dir):
    return pages_from_vital(data_dir / "corpora" / "vital_articles_summaries.json", limit=3000) | pages_from_vital(
        data_dir / "corpora" / "vital_articles_summaries.json",
        titles=["Mogadishu", "Aristotle", "Athens", "Cretaceous", "Mercury (planet)", "Somalia"],
    )


def run_all(fb: LiveFallback) -> list[dict]:
    out = []
    for claim, entities in CLAIMS:
        r = fb.retrieve(claim, entities, k=5)
        out.append(
            {
                "status": r.status,
                "evidence": [e.to_dict() for e in r.evidence],
                "pages": [p.to_dict() for p in r.pages],
                "state": r.state.to_dict(),
            }
        )
    return out


def test_replay_with_network_off_is_identical(corpus, tmp_path):
    cache = tmp_path / "cache"
    with FakeWiki(corpus) as wiki:
        recorded_fb = open_fallback(
            FallbackSettings(api_url=wiki.api_url, contact=CONTACT, cache_dir=cache, cache_mode="record", rate=1000),
            clock=FakeClock(),
        )
        recorded = run_all(recorded_fb)
        api_url = wiki.api_url
        sent = len(wiki.requests)
    assert sent > 0 and recorded_fb.api.requests == sent
    # Server stopped, a transport that fails on any use, a clock at another time, and no contact.
    replay_fb = open_fallback(
        FallbackSettings(api_url=api_url, contact=None, cache_dir=cache, cache_mode="replay"),
        http_client=httpx.Client(transport=NoNetwork()),
        clock=FakeClock(start=99_999.0),
    )
    replayed = run_all(replay_fb)
    assert json.dumps(replayed, sort_keys=True) == json.dumps(recorded, sort_keys=True)
    assert replay_fb.api.requests == 0 and replay_fb.api.cache_hits == sent
    assert not list(cache.rglob(".tmp-*"))


def test_record_mode_second_run_is_served_from_cache(corpus, tmp_path):
    with FakeWiki(corpus) as wiki:
        fb = open_fallback(
            FallbackSettings(api_url=wiki.api_url, contact=CONTACT, cache_dir=tmp_path, rate=1000), clock=FakeClock()
        )
        first = fb.retrieve(*CLAIMS[0])
        second = fb.retrieve(*CLAIMS[0])
        assert first.requests > 0 and first.cache_hits == 0
        assert second.requests == 0 and second.cache_hits == first.requests
        assert [e.to_dict() for e in first.evidence] == [e.to_dict() for e in second.evidence]


def test_replay_miss_error_or_explicit(corpus, tmp_path):
    strict = open_fallback(
        FallbackSettings(api_url="http://127.0.0.1:9/w/api.php", cache_dir=tmp_path, cache_mode="replay"),
        http_client=httpx.Client(transport=NoNetwork()),
    )
    with pytest.raises(CacheMissError, match="not in the replay cache") as info:
        strict.retrieve(*CLAIMS[0])
    assert f"cache {tmp_path.name!r}: " in str(info.value)  # names the folder, empty as it is, by its name only
    assert str(tmp_path) not in str(info.value)  # never the absolute path: a server's clients read this message
    lenient = open_fallback(
        FallbackSettings(
            api_url="http://127.0.0.1:9/w/api.php", cache_dir=tmp_path, cache_mode="replay", replay_miss="skip"
        ),
        http_client=httpx.Client(transport=NoNetwork()),
    )
    result = lenient.retrieve(*CLAIMS[0])
    assert result.status == STATUS_FAILED and result.cache_misses > 0 and result.requests == 0


def test_errors_are_never_cached(corpus, tmp_path):
    with FakeWiki(corpus) as wiki:
        api = WikiApi(
            FallbackSettings(api_url=wiki.api_url, contact=CONTACT, cache_dir=tmp_path, rate=1000, max_tries=2),
            clock=FakeClock(),
        )
        wiki.add_fault("error")
        with pytest.raises(ApiError):
            api.intros(["Aristotle"])
        wiki.add_fault("429", times=2)
        with pytest.raises(RetryExhaustedError):
            api.intros(["Aristotle"])
        assert len(ResponseCache(tmp_path)) == 0
        got = api.intros(["Aristotle"])  # the same request, now answered, is cached once
        assert got["Aristotle"].extract == corpus["Aristotle"].intro
        assert len(ResponseCache(tmp_path)) == 1
        n = len(wiki.requests)
        api.intros(["Aristotle"])
        assert len(wiki.requests) == n and api.cache_hits == 1
    entry = json.loads(next(tmp_path.glob("*/*.json")).read_text())
    assert entry["status"] == 200 and entry["fetched_at"].endswith("Z")
    assert entry["rev_ids"] == [corpus["Aristotle"].revid]
    assert not list(tmp_path.rglob(".tmp-*"))


def test_key_ignores_volatile_params_only():
    a = request_key("https://en.wikipedia.org/w/api.php", {"action": "query", "titles": "A", "maxlag": "5"})
    b = request_key("https://en.wikipedia.org/w/api.php", {"titles": "A", "action": "query", "maxlag": "9"})
    c = request_key("https://de.wikipedia.org/w/api.php", {"titles": "A", "action": "query"})
    d = request_key("https://en.wikipedia.org/w/api.php", {"titles": "B", "action": "query"})
    assert a == b and a != c and a != d


def test_delta_store_ingest_is_idempotent(corpus, tmp_path):
    with FakeWiki(corpus) as wiki:
        fb = open_fallback(
            FallbackSettings(api_url=wiki.api_url, contact=CONTACT, cache_mode="off", rate=1000), clock=FakeClock()
        )
        result = fb.retrieve(*CLAIMS[0])
    assert result.pages
    assert write_live_pages(tmp_path, result.pages) == len({p.pageid for p in result.pages})
    assert write_live_pages(tmp_path, result.pages) == 0
    con, _ = open_delta(tmp_path)  # the segments of delta/, merged
    try:
        rows = con.execute("SELECT page_id, title, origin, rev_id, url, rev_timestamp FROM pages").fetchall()
        assert len(rows) == len(result.pages) and all(r[2] == "live" for r in rows)
        mog = next(r for r in rows if r[1] == "Mogadishu")
        assert mog[3] == corpus["Mogadishu"].revid and mog[4] and mog[5]
        pids = [r[0] for r in con.execute("SELECT passage_id FROM passages").fetchall()]
        assert min(pids) >= LIVE_PASSAGE_ID_BASE and len(pids) == len(set(pids))
        assert con.execute("SELECT count(*) FROM sentences").fetchone()[0] >= len(pids)
    finally:
        con.close()


def test_delta_store_replaces_a_page_on_a_new_revision(tmp_path):
    from dataclasses import replace

    from fallback.live import LivePage

    page = LivePage(
        "T", 5, 1, "http://127.0.0.1/wiki/T", "2026-01-01T00:00:00Z", "Intro one. Two.", (("H", "Section text."),)
    )
    assert write_live_pages(tmp_path, [page]) == 1
    assert write_live_pages(tmp_path, [replace(page, rev_id=2, intro="New intro.")]) == 1
    con, _ = open_delta(tmp_path)  # the segments of delta/, merged
    try:
        assert con.execute("SELECT rev_id, lead FROM pages").fetchall() == [(2, "New intro.")]
        assert [t for (t,) in con.execute("SELECT text FROM passages ORDER BY passage_id").fetchall()] == [
            "New intro.",
            "Section text.",
        ]
    finally:
        con.close()


# -- unusable entries, bad answers, replay without --api-url ------------------------------------------------------


def _record_one(wiki: FakeWiki, cache) -> WikiApi:
    api = WikiApi(
        FallbackSettings(api_url=wiki.api_url, contact=CONTACT, cache_dir=cache, rate=1000), clock=FakeClock()
    )
    assert api.intros(["Aristotle"])["Aristotle"].extract
    return api


@pytest.mark.parametrize("damage", [b"", b"   \n", b'{"key": "\xff\xfe broken', b'{"format": 1, "key": "x"'])
def test_an_unusable_entry_is_a_miss_refetched_in_record_mode(corpus, tmp_path, damage, caplog):
    """Invalid UTF-8, an empty file or a cut-short one: never fatal. Record mode asks again and rewrites the entry;
    replay reports a miss that names the entry."""
    with FakeWiki(corpus) as wiki:
        _record_one(wiki, tmp_path)
        (entry,) = list(tmp_path.glob("*/*.json"))
        entry.write_bytes(damage)
        api = _record_one(wiki, tmp_path)
        assert api.cache_hits == 0 and api.requests == 1 and len(wiki.requests) == 2
        assert "unusable" in caplog.text and "treated as a miss" in caplog.text
        assert json.loads(entry.read_text(encoding="utf-8"))["status"] == 200  # rewritten whole
        api_url = wiki.api_url
    entry.write_bytes(damage)
    replay = WikiApi(
        FallbackSettings(api_url=api_url, cache_dir=tmp_path, cache_mode="replay"),
        http_client=httpx.Client(transport=NoNetwork()),
    )
    with pytest.raises(CacheMissError, match="unusable"):
        replay.intros(["Aristotle"])


def test_bad_answers_are_never_written(tmp_path):
    cache = ResponseCache(tmp_path)
    key = request_key("https://en.wikipedia.org/w/api.php", {"action": "query", "titles": "A"})
    assert cache.put(key, status=200, fetched_at="t", body={"error": {"code": "x"}}) is None
    assert cache.put(key, status=503, fetched_at="t", body={"query": {}}) is None
    assert cache.put(key, status=200, fetched_at="t", body=["not", "an", "object"]) is None
    assert len(cache) == 0 and not list(tmp_path.rglob("*"))
    # An entry whose body is an error (written by hand, or by an older version) is not served either.
    assert cache.put(key, status=200, fetched_at="t", body={"query": {}}) is not None
    path = cache.path_for(key)
    payload = json.loads(path.read_text(encoding="utf-8"))
    payload["body"] = {"error": {"code": "maxlag"}}
    path.write_text(json.dumps(payload), encoding="utf-8")
    assert cache.get(key) is None


def test_a_lone_surrogate_in_an_answer_is_cached_and_read_back(tmp_path):
    """Valid JSON may escape a lone surrogate ("\\ud800"): such an answer is still cached, and read back the same."""
    raw = b'{"batchcomplete": true, "query": {"pages": [{"pageid": 7, "ns": 0, "title": "X\\ud800", "lastrevid": 3}]}}'
    mock = httpx.MockTransport(lambda request: httpx.Response(200, content=raw))
    record = FallbackSettings(api_url="https://wiki.test/w/api.php", contact=CONTACT, cache_dir=tmp_path, rate=1000)
    first = WikiApi(record, clock=FakeClock(), http_client=httpx.Client(transport=mock)).call({"action": "query"})
    replay = replace(record, contact=None, cache_mode="replay")
    again = WikiApi(replay, clock=FakeClock(), http_client=httpx.Client(transport=NoNetwork())).call(
        {"action": "query"}
    )
    assert again.from_cache and again.body == first.body
    assert again.body["query"]["pages"][0]["title"] == "X\ud800"


def test_replay_without_api_url_uses_the_one_host_the_cache_holds(corpus, tmp_path):
    with FakeWiki(corpus) as wiki:
        fb = open_fallback(
            FallbackSettings(api_url=wiki.api_url, contact=CONTACT, cache_dir=tmp_path, rate=1000), clock=FakeClock()
        )
        recorded = run_all(fb)
        api_url = wiki.api_url
    replay = open_fallback(
        FallbackSettings(cache_dir=tmp_path, cache_mode="replay"), http_client=httpx.Client(transport=NoNetwork())
    )
    assert replay.api.api_url == api_url
    assert json.dumps(run_all(replay), sort_keys=True) == json.dumps(recorded, sort_keys=True)
    assert json.loads((tmp_path / "endpoints.json").read_text(encoding="utf-8")) == [api_url]
    assert ResponseCache(tmp_path).endpoints() == {api_url}
    # Two hosts: which one is meant is not guessed.
    other = ResponseCache(tmp_path)
    other.put(request_key("https://de.wikipedia.org/w/api.php", {"a": "b"}), status=200, fetched_at="t", body={})
    with pytest.raises(ConfigError, match="--api-url"):
        open_fallback(FallbackSettings(cache_dir=tmp_path, cache_mode="replay"))
    # Named, the URL is used as given.
    named = open_fallback(FallbackSettings(api_url=api_url, cache_dir=tmp_path, cache_mode="replay"))
    assert named.api.api_url == api_url


def test_a_cache_without_endpoints_json_gets_the_older_format_error(corpus, tmp_path):
    """Caches written before endpoints.json hold entries without it; this version refuses them by name."""
    with FakeWiki(corpus) as wiki:
        settings = FallbackSettings(api_url=wiki.api_url, contact=CONTACT, cache_dir=tmp_path, rate=1000)
        fb = open_fallback(settings, clock=FakeClock())
        run_all(fb)
        api_url = wiki.api_url
    assert ResponseCache(tmp_path).endpoints() == {api_url} and len(ResponseCache(tmp_path)) > 0
    (tmp_path / "endpoints.json").unlink()
    message = (
        f"{tmp_path}: built by an older wikiground (cache format 1 without endpoints.json); this version reads "
        "cache format 1 with it: record into a new --cache folder"
    )
    with pytest.raises(IndexFormatError) as err:
        ResponseCache(tmp_path)
    assert str(err.value) == message
    with pytest.raises(IndexFormatError):
        open_fallback(FallbackSettings(cache_dir=tmp_path, cache_mode="replay"))
    assert ResponseCache(tmp_path / "new").endpoints() == set()  # a cache not written yet is not an older one
