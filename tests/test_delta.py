"""The live delta (``--ingest-live``, ``INDEX/delta/``): written many times and by concurrent processes, read by
later offline queries as live evidence, kept by a rebuild, and never fatal when damaged. Real vital-article text,
served by a loopback FakeWiki where the fallback is involved."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap
import time

import pytest

from fallback.delta import live_passage_id, write_live_pages
from fallback.live import LivePage
from fallback.settings import FallbackSettings
from indexer.build import build_index
from indexer.chunking import chunk_section
from indexer.store import Store
from retriever import Retriever
from tests.support.fakewiki import FakeWiki, pages_from_vital
from wikiground.errors import IndexFormatError
from wikiground.layout import LIVE_PASSAGE_ID_BASE, delta_dir, delta_segments

from .conftest import ROOT

LOCAL = ["Aristotle", "Plato", "Athens", "Alexander the Great", "Philosophy", "Ancient Greece"]
REMOTE = [
    "Mogadishu",
    "Socrates",
    "Somalia",
    "Nile",
    "Mount Everest",
    "Amazon River",
    "Sahara",
    "Wolfgang Amadeus Mozart",
]


@pytest.fixture(scope="module")
def vital(data_dir):
    return data_dir / "corpora" / "vital_articles_summaries.json"


@pytest.fixture(scope="module")
def remote_pages(vital):
    return pages_from_vital(vital, titles=REMOTE)


@pytest.fixture
def local_index(vital, tmp_path):
    data = json.loads(vital.read_text(encoding="utf-8"))
    src = tmp_path / "local.jsonl"
    with src.open("w", encoding="utf-8") as fh:
        for row in data.values():
            if row["title"] in LOCAL:
                fh.write(json.dumps({"title": row["title"], "text": row["extract"]}) + "\n")
    out = tmp_path / "index"
    build_index([src], out, indexes=(), workers=1)
    return out


def live_page(fake, *, rev_id=None, intro=None) -> LivePage:
    return LivePage(
        fake.title,
        fake.pageid,
        fake.revid if rev_id is None else rev_id,
        f"http://127.0.0.1/wiki/{fake.title.replace(' ', '_')}",
        "2026-11-25T01:00:00Z",
        fake.intro if intro is None else intro,
    )


def offline_search(index, claim):
    with Retriever.open(index) as r:
        return r.search(claim, 5)


def test_ingest_twice_then_an_offline_query_finds_live_evidence(local_index, remote_pages, tmp_path):
    settings = FallbackSettings(api_url="", contact="tests@example.org", cache_dir=tmp_path / "cache", rate=1000)
    with FakeWiki(remote_pages) as wiki:
        settings = settings.with_(api_url=wiki.api_url)
        with Retriever.open(local_index, on_the_fly=True, fallback=settings, ingest_live=True) as r:
            first = r.search("There is a capital called Mogadishu.", 5)
            # The second write failed with DuckDB's "different configuration" error while the first was open.
            second = r.search("Socrates was a philosopher.", 5)
    assert first.stats["ingested"] >= 1 and second.stats["ingested"] >= 1
    assert len(delta_segments(local_index)) == 2
    for title, claim in (("Mogadishu", "Mogadishu is a city."), ("Socrates", "Socrates taught Plato.")):
        res = offline_search(local_index, claim)
        live = [e for e in res.evidence if e.title == title]
        assert live, (claim, [e.title for e in res.evidence])
        # Labelled origin "local" before, without its fetch time.
        assert live[0].origin == "live" and live[0].fetched_at
        assert live[0].passage_id >= LIVE_PASSAGE_ID_BASE
        assert live[0].evidence_text in remote_pages[title].intro
        assert all(e.origin == "local" for e in res.evidence if e.title in LOCAL)


def test_a_rebuild_keeps_the_delta(local_index, remote_pages, caplog):
    assert write_live_pages(local_index, [live_page(remote_pages["Mogadishu"])]) == 1
    src = local_index.parent / "local.jsonl"
    with caplog.at_level(logging.INFO, logger="indexer.build"):
        build_index([src], local_index, indexes=(), workers=1)
    assert any("carried 1 live delta segment" in rec.getMessage() for rec in caplog.records)
    res = offline_search(local_index, "Mogadishu is a city.")
    assert [e.origin for e in res.evidence if e.title == "Mogadishu"] == ["live"]
    # Multi-hop evidence from the delta is labelled the same way (it said "local" whatever the page's origin).
    from retriever.multihop import MultiHopRetriever

    with Retriever.open(local_index) as r:
        hops = MultiHopRetriever(r).search("Mogadishu is a city.")
    mogadishu = [e for e in hops.evidence if e.title == "Mogadishu"]
    assert mogadishu and all(e.origin == "live" and e.fetched_at for e in mogadishu)


def test_concurrent_writer_processes_lose_nothing(local_index, remote_pages, tmp_path):
    go = tmp_path / "go"
    script = textwrap.dedent(
        """
        import json, sys, time
        from pathlib import Path
        from fallback.delta import write_live_pages
        from fallback.live import LivePage
        index, go, pages = Path(sys.argv[1]), Path(sys.argv[2]), json.loads(sys.argv[3])
        while not go.exists():
            time.sleep(0.01)
        for p in pages:
            for rev in range(3):  # three revisions each: many writes at once from both processes
                write_live_pages(index, [LivePage(p["title"], p["pageid"], p["revid"] + rev, None, "t", p["intro"])])
        """
    )
    halves = [REMOTE[::2], REMOTE[1::2]]
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                script,
                str(local_index),
                str(go),
                json.dumps([vars(remote_pages[t]) | {"sections": []} for t in half], default=list),
            ],
            cwd=ROOT,
            stderr=subprocess.PIPE,
            text=True,
        )
        for half in halves
    ]
    time.sleep(0.5)
    go.touch()
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err[-2000:]
    with Store.open(local_index) as store:
        for title in REMOTE:
            res = store.resolve_title(title)
            assert res is not None and res.origin == "live", title
            page = store.page(res.page_id)
            assert page.rev_id == remote_pages[title].revid + 2  # the newest revision wins


def test_newest_revision_wins_with_stable_passage_ids(local_index, remote_pages):
    fake = remote_pages["Socrates"]
    assert write_live_pages(local_index, [live_page(fake, rev_id=1, intro="Old intro.")]) == 1
    assert write_live_pages(local_index, [live_page(fake, rev_id=2)]) == 1
    assert write_live_pages(local_index, [live_page(fake, rev_id=2)]) == 0  # already there
    assert write_live_pages(local_index, [live_page(fake, rev_id=1, intro="Old intro.")]) == 1  # a stale fetch
    with Store.open(local_index) as store:
        page = store.page(fake.pageid)
        assert page.rev_id == 2 and page.lead == fake.intro
        passages = store.page_passages(fake.pageid)
    # The indexer's own chunker and sentence splitter, as for the main store.
    chunks = chunk_section(fake.intro, section_index=0)
    assert [p.text for p in passages] == [c.text for c in chunks]
    assert [p.passage_id for p in passages] == [live_passage_id(fake.pageid, i) for i in range(len(chunks))]
    with Store.open(local_index) as store:
        for p, c in zip(passages, chunks):
            assert [s[2] for s in store.sentences(p.passage_id)] == [p.text[a:b] for a, b in c.sentences]


def test_a_damaged_delta_is_skipped_with_a_warning(local_index, remote_pages, caplog):
    assert write_live_pages(local_index, [live_page(remote_pages["Nile"])]) == 1
    good = delta_segments(local_index)[0]
    (delta_dir(local_index) / "seg-00000000000000000000-garbage.duckdb").write_bytes(b"not a database " * 100)
    data = good.read_bytes()
    (delta_dir(local_index) / "seg-99999999999999999999-truncat.duckdb").write_bytes(data[: len(data) // 3])
    with caplog.at_level(logging.WARNING, logger="indexer.store"):
        res = offline_search(local_index, "Aristotle was a student of Plato.")
        nile = offline_search(local_index, "The Nile is a river.")
    assert res.status == "ok" and res.evidence[0].title in ("Aristotle", "Plato")
    assert [e.origin for e in nile.evidence if e.title == "Nile"] == ["live"]
    warned = " ".join(rec.getMessage() for rec in caplog.records)
    assert "garbage" in warned and "truncat" in warned


def test_a_delta_of_one_file_gets_the_older_format_error(local_index, remote_pages):
    """Older versions kept the delta in one file, delta/wiki.duckdb: this version reads segments only."""
    assert write_live_pages(local_index, [live_page(remote_pages["Nile"])]) == 1
    (segment,) = delta_segments(local_index)
    segment.rename(delta_dir(local_index) / "wiki.duckdb")
    with pytest.raises(IndexFormatError, match=r"delta/wiki\.duckdb: built by an older wikiground \(a delta of one"):
        Store.open(local_index)
