"""``--check-fresh``: the local pages among a claim's top evidence checked against their live revision (FakeWiki on
127.0.0.1), those that changed answered from their new text (``origin: live``); off by default; replayed offline
from the cache, the same answers."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

import httpx
import pytest

from fallback.settings import FallbackSettings
from retriever.api import Retriever
from tests.support.fakewiki import FakeWiki, pages_from_vital
from tests.support.wikidump import DumpPage, Revision, write_dump

from .conftest import ROOT

CONTACT = "tests@example.org"
LOCAL = ["Aristotle", "Plato", "Athens"]
NEW_SENTENCE = "In 2025 the Lyceum Society of Stagira named its new observatory after Aristotle."
CHANGED_CLAIM = "An observatory was named after Aristotle in 2025."
UNCHANGED_CLAIM = "Plato lived in Athens."


class NoNetwork(httpx.BaseTransport):
    def handle_request(self, request: httpx.Request) -> httpx.Response:
        raise AssertionError(f"network used in replay: {request.url}")


@pytest.fixture(scope="module")
def pages(data_dir):
    """The local pages as the index holds them, and as the live wiki holds them: Aristotle edited since."""
    local = pages_from_vital(data_dir / "corpora" / "vital_articles_summaries.json", titles=LOCAL)
    old = local["Aristotle"]
    live = dict(local, Aristotle=replace(old, revid=old.revid + 7, intro=f"{old.intro} {NEW_SENTENCE}"))
    return local, live


@pytest.fixture(scope="module")
def local_index(pages, tmp_path_factory):
    from indexer.build import build_index

    folder = tmp_path_factory.mktemp("fresh")
    dump = write_dump(
        folder / "enwiki-pages-articles.xml",
        [DumpPage(p.pageid, p.title, [Revision(p.revid, "2026-11-01T00:00:00Z", p.intro)]) for p in pages[0].values()],
    )
    out = folder / "index"
    build_index([dump], out, indexes=())
    return out


def _open(index, api_url, cache, **kw) -> Retriever:
    settings = FallbackSettings(api_url=api_url, contact=CONTACT, cache_dir=cache, rate=1000, **kw)
    return Retriever.open(index, on_the_fly=True, fallback=settings, check_fresh=True)


def _stable(res) -> dict:
    d = res.to_dict()
    for key in ("timings_ms", "requests", "cache_hits"):
        d.pop(key, None)
    return d


def test_off_by_default_no_request_for_local_entities(local_index, pages, tmp_path):
    with FakeWiki(pages[1]) as wiki:
        settings = FallbackSettings(api_url=wiki.api_url, contact=CONTACT, cache_dir=tmp_path / "cache", rate=1000)
        with Retriever.open(local_index, on_the_fly=True, fallback=settings) as r:
            res = r.search(CHANGED_CLAIM, 5)
        assert wiki.requests == []
    assert res.stats["requests"] == 0 and "refreshed" not in res.stats
    assert all(e.origin == "local" for e in res.evidence)


def test_a_changed_page_is_answered_from_its_new_text(local_index, pages, tmp_path):
    with FakeWiki(pages[1]) as wiki, _open(local_index, wiki.api_url, tmp_path / "cache") as r:
        changed = r.search(CHANGED_CLAIM, 5)
        asked = len(wiki.requests)
        unchanged = r.search(UNCHANGED_CLAIM, 5)
        info = [q.params for q in wiki.requests[asked:]]
    top = changed.evidence[0]
    assert changed.stats["refreshed"] == ["Aristotle"]
    assert (top.title, top.origin, top.rev_id) == ("Aristotle", "live", pages[1]["Aristotle"].revid)
    assert NEW_SENTENCE in top.evidence_text
    assert not any(e.title == "Aristotle" and e.origin == "local" for e in changed.evidence)
    # The unchanged pages: one prop=info request for every local title of the evidence, nothing read.
    assert unchanged.stats["refreshed"] == [] and unchanged.stats["requests"] == 1
    assert len(info) == 1 and "info" in info[0]["prop"] and {"Plato", "Athens"} <= set(info[0]["titles"].split("|"))
    assert all(e.origin == "local" for e in unchanged.evidence)


def test_replay_offline_gives_identical_answers(local_index, pages, tmp_path):
    cache = tmp_path / "cache"
    with FakeWiki(pages[1]) as wiki, _open(local_index, wiki.api_url, cache) as r:
        recorded = [_stable(r.search(c, 5)) for c in (CHANGED_CLAIM, UNCHANGED_CLAIM)]
        api_url = wiki.api_url
    assert recorded[0]["refreshed"] == ["Aristotle"]
    settings = FallbackSettings(api_url=api_url, cache_dir=cache, cache_mode="replay")
    with Retriever.open(
        local_index,
        on_the_fly=True,
        fallback=settings,
        check_fresh=True,
        http_client=httpx.Client(transport=NoNetwork()),
    ) as r:
        replayed = [_stable(r.search(c, 5)) for c in (CHANGED_CLAIM, UNCHANGED_CLAIM)]
    assert replayed == recorded


def test_cli_check_fresh_needs_on_the_fly(local_index):
    cmd = [sys.executable, "-m", "retriever.query", "--index", str(local_index), "--check-fresh", "claim"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--check-fresh works with --on-the-fly" in proc.stderr
