"""The live fallback against servers that misbehave: real claims through the real pipeline (``Retriever.search``
over the gensim store, title channel) against real loopback servers (tests/support/hostile.py).

For every server: the claim ends within its live deadline plus 10% (the local search's own time aside), keeps its
local evidence, grows the process's RSS by far less than 500 MB, and leaves nothing bad in the cache.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path

import psutil
import pytest

from fallback.settings import FallbackSettings
from retriever.api import Retriever
from tests.support.hostile import HostileServer, down_url

CONTACT = "tests@example.org"
DEADLINE = 2.0  # seconds: each claim's live deadline here
# The claim's subject is on no page, so it is looked up live; "Aristotle" is a local page, its local evidence.
CLAIM = "Zorblax Quintero wrote a book about Aristotle."
BATCH = [
    CLAIM,
    "Zorblax Quintero visited Alabama.",
    "Quentin Zorblax admired Achilles.",
    "Zorblax Quintero met Abraham Lincoln.",
]
MB = 1024 * 1024
MAX_RSS_GROWTH = 250 * MB  # what one claim may add; a fresh process holding the store is ~150 MB
MAX_RSS = 500 * MB


class RssPeak:
    """The process's peak RSS while the block runs, sampled every 5 ms."""

    def __init__(self) -> None:
        self.proc = psutil.Process()
        self.before = self.peak = self.proc.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, self.proc.memory_info().rss)

    def __enter__(self) -> RssPeak:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.proc.memory_info().rss)

    def check(self) -> None:
        growth = self.peak - self.before
        assert growth < MAX_RSS_GROWTH, f"RSS grew by {growth / MB:.0f} MB (peak {self.peak / MB:.0f} MB)"
        if self.before < MAX_RSS - MAX_RSS_GROWTH:  # a process that starts small (this file run alone) stays small
            assert self.peak < MAX_RSS, f"RSS peaked at {self.peak / MB:.0f} MB"


def open_live(store: Path, api_url: str, cache: Path, **kw) -> Retriever:
    kw.setdefault("live_deadline", DEADLINE)
    settings = FallbackSettings(api_url=api_url, contact=CONTACT, cache_dir=cache, rate=50.0, **kw)
    return Retriever.open(store, on_the_fly=True, fallback=settings)


def timed_search(r: Retriever, claim: str, deadline: float = DEADLINE) -> tuple[object, float]:
    """The claim's search and its wall time, run in a thread so that a hang fails the test instead of stalling it."""
    out: dict = {}

    def work() -> None:
        t0 = time.monotonic()
        try:
            out["result"] = r.search(claim, 5)
        except BaseException as exc:  # reported below, in the test's thread
            out["error"] = exc
        out["elapsed"] = time.monotonic() - t0

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(timeout=deadline * 4 + 5)
    if thread.is_alive():
        pytest.fail(f"the claim was still running {deadline * 4 + 5:.0f}s later (live deadline {deadline}s)")
    if "error" in out:
        raise out["error"]
    return out["result"], out["elapsed"]


def local_titles(result) -> list[str]:
    return [e.title for e in result.evidence if e.origin == "local"]


def offline_run(r: Retriever, claim: str) -> tuple[list[str], float]:
    """The claim's local evidence and the time the local search takes (warmed up), with no live lookup."""
    r.search(claim, 5, on_the_fly=False)
    t0 = time.monotonic()
    result = r.search(claim, 5, on_the_fly=False)
    return local_titles(result), time.monotonic() - t0


def cache_entries(cache: Path) -> list[dict]:
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted(cache.glob("*/*.json"))]


def assert_nothing_bad_cached(cache: Path, *, allow_good: bool = False) -> None:
    entries = cache_entries(cache)
    if not allow_good:
        assert entries == [], f"{len(entries)} answers of a hostile server were cached"
    for entry in entries:
        assert entry["status"] == 200 and isinstance(entry["body"], dict) and "error" not in entry["body"]
    assert not list(cache.rglob(".tmp-*")) if cache.exists() else True


EXPECTED_LIVE_STATUS = {
    "drip": "deadline_exceeded",
    "drip_headers": "deadline_exceeded",
    "hang": "deadline_exceeded",
    "429": "deadline_exceeded",  # Retry-After 299, capped to 30 s: still past the deadline, so no wait at all
    "maxlag": "deadline_exceeded",  # its 5 s floor is past the deadline too
    "bad_json": "deadline_exceeded",  # retried 1 s later, then a 2 s wait would pass the deadline
}
SIZE_KINDS = ("gzip_bomb", "big_body", "big_body_undeclared")
LOGGED = {
    "429": "capped to 30s",
    "gzip_bomb": "exceeds the cap of",
    "big_body": "announces 52428800 bytes, over the cap of",
    "big_body_undeclared": "exceeds the cap of",
    "redirect": "refusing to contact http://example.com",
    "bad_json": "response is not JSON",
}


@pytest.mark.parametrize(
    "kind",
    [
        "drip",
        "drip_headers",
        "hang",
        "429",
        "maxlag",
        "gzip_bomb",
        "big_body",
        "big_body_undeclared",
        "redirect",
        "bad_json",
        "endless_continue",
    ],
)
def test_a_hostile_server_cannot_hold_sink_or_bloat_a_claim(kind, gensim_store, tmp_path, caplog):
    caplog.set_level(logging.INFO)
    cache = tmp_path / "cache"
    with HostileServer(kind, interval=0.5) as server, open_live(gensim_store, server.api_url, cache) as r:
        offline, local_time = offline_run(r, CLAIM)
        assert offline, "the claim should have local evidence"
        with RssPeak() as rss:
            result, elapsed = timed_search(r, CLAIM)
        truncated = r.fallback.api.truncated
    assert result.stats["missing_entities"] == ["Zorblax Quintero"] and result.stats["requests"] >= 1
    assert elapsed - local_time <= DEADLINE * 1.1, f"{kind}: the claim took {elapsed:.2f}s (deadline {DEADLINE}s)"
    assert local_titles(result) == offline  # local evidence kept, in its order
    assert not [e for e in result.evidence if e.origin == "live"]
    rss.check()
    if kind in EXPECTED_LIVE_STATUS:
        assert result.stats["live_status"] == EXPECTED_LIVE_STATUS[kind]
    elif kind in SIZE_KINDS:  # each refused at once; a slow machine may still reach the deadline over the tiers
        assert result.stats["live_status"] in ("ok", "deadline_exceeded")
    else:
        assert result.stats["live_status"] == "ok"
    if kind in LOGGED:
        assert LOGGED[kind] in caplog.text
    if kind in ("429", "maxlag"):
        assert server.requests == 1  # no retry: the wait it asks for ends past the deadline
    assert_nothing_bad_cached(cache, allow_good=kind == "endless_continue")
    if kind == "endless_continue":
        # Each chain stops after max_continue (10) follow-ups; every request was this claim's.
        assert truncated > 0 and server.requests == result.stats["requests"]


def test_a_down_server_trips_the_circuit_breaker_once(gensim_store, tmp_path, caplog):
    """Connection refused: the first claim gives up by its deadline, the breaker opens at the third consecutive
    failure and says so once; the following claims make no request and keep their local evidence. After the
    cool-down, one request tries again (and fails, so it opens again)."""
    caplog.set_level(logging.WARNING)
    url = down_url()
    with open_live(gensim_store, url, tmp_path / "cache", breaker_cooldown=3.0) as r:
        offline = {claim: offline_run(r, claim) for claim in BATCH}
        results = []
        for claim in BATCH:
            result, elapsed = timed_search(r, claim)
            results.append(result)
            assert elapsed - offline[claim][1] <= DEADLINE * 1.1
            assert local_titles(result) == offline[claim][0] and offline[claim][0]
        opened = [m for m in caplog.messages if m.startswith("live fallback off for")]
        assert len(opened) == 1 and "3 consecutive transport failures" in opened[0]
        statuses = [res.stats["live_status"] for res in results]
        assert statuses[-2:] == ["circuit_open", "circuit_open"]
        assert [res.stats["requests"] for res in results[-2:]] == [0, 0]
        assert sum(res.stats["requests"] for res in results) == 3
        time.sleep(3.1)  # the cool-down ends: one try, one failure, open again
        result, _ = timed_search(r, BATCH[0])
        assert result.stats["requests"] == 1 and result.stats["live_status"] == "circuit_open"
        assert len([m for m in caplog.messages if m.startswith("live fallback off for")]) == 2
    assert_nothing_bad_cached(tmp_path / "cache")


def test_a_server_that_holds_every_claim_trips_the_circuit_breaker(gensim_store, tmp_path, caplog):
    """A server that sends its headers and then drips its body costs each claim its whole deadline: a request cut
    there is a transport failure (headers alone are not an answer), so after three such claims the breaker
    opens, and the fourth claim asks nothing."""
    caplog.set_level(logging.WARNING)
    deadline = 1.5
    with (
        HostileServer("drip", interval=0.3) as server,
        open_live(gensim_store, server.api_url, tmp_path / "cache", live_deadline=deadline) as r,
    ):
        offline = {claim: offline_run(r, claim) for claim in BATCH}
        results = []
        for claim in BATCH:
            result, elapsed = timed_search(r, claim, deadline)
            results.append(result)
            assert elapsed - offline[claim][1] <= deadline * 1.1
            assert local_titles(result) == offline[claim][0]
    assert [res.stats["live_status"] for res in results] == ["deadline_exceeded"] * 2 + ["circuit_open"] * 2
    assert [res.stats["requests"] for res in results] == [1, 1, 1, 0]
    assert len([m for m in caplog.messages if m.startswith("live fallback off for")]) == 1
    assert_nothing_bad_cached(tmp_path / "cache")
