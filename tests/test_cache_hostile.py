"""The live cache against entries it did not write (issue 40): a huge file, a FIFO or a link in an entry's place is
a miss, found at once, never read whole or waited on."""

from __future__ import annotations

import os
import threading
import time

import psutil
import pytest

from fallback.cache import ResponseCache

KEY = "query?action=query&titles=Aristotle"
BODY = {"batchcomplete": True, "query": {"pages": [{"title": "Aristotle", "pageid": 308}]}}


@pytest.fixture
def cache(tmp_path):
    c = ResponseCache(tmp_path / "cache", max_entry_bytes=1024 * 1024)
    assert c.put(KEY, status=200, fetched_at="2026-01-01T00:00:00Z", body=BODY) is not None
    assert c.get(KEY).body == BODY
    return c


def _get_within(cache: ResponseCache, seconds: float):
    out: dict = {}
    thread = threading.Thread(target=lambda: out.setdefault("entry", cache.get(KEY)), daemon=True)
    t0 = time.monotonic()
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"the cache read was still waiting after {seconds} s"
    return out["entry"], time.monotonic() - t0


def test_a_huge_entry_is_a_miss_never_read(cache):
    path = cache.path_for(KEY)
    with path.open("r+b") as fh:
        fh.truncate(1024**3)  # a sparse gigabyte
    rss = psutil.Process().memory_info().rss
    entry, _ = _get_within(cache, 5)
    assert entry is None and psutil.Process().memory_info().rss - rss < 50 * 1024 * 1024


def test_a_fifo_in_an_entrys_place_is_a_miss_at_once(cache):
    path = cache.path_for(KEY)
    path.unlink()
    os.mkfifo(path)
    entry, seconds = _get_within(cache, 5)
    assert entry is None and seconds < 1


def test_a_link_in_an_entrys_place_is_a_miss(cache, tmp_path):
    path = cache.path_for(KEY)
    target = tmp_path / "elsewhere.json"
    target.write_bytes(path.read_bytes())
    path.unlink()
    path.symlink_to(target)
    assert cache.get(KEY) is None
