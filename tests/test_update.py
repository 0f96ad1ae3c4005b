"""``wikiground update`` and the delta every channel searches: real gensim-fixture pages revised as an editor
would (a sentence changed, a section added), written as Wikimedia writes adds-changes files and page_change events;
live pages (vital-article summaries) that rank as if they had been built."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest

from backends import delta_parts
from backends.delta_store import PARTS_FORMATS, write_parts
from fallback.delta import write_live_pages
from fallback.live import LivePage
from indexer.store import Store
from indexer.update import update_index
from retriever import Retriever
from tests.support.wikidump import DumpPage, Events, Revision, read_pages, write_dump
from wikiground.errors import InputError
from wikiground.layout import delta_segments

from .conftest import ROOT

EDITED = "Aristotle"
DELETED = "Alabama"
MOVED = "Achilles"
NEW_TITLE = "Achilles (hero)"
ADDED_SECTION = (
    "\n\n== Reception in the 21st century ==\n"
    "In 2025 the Lyceum Society of Stagira named its new observatory after Aristotle, the first telescope "
    "dedicated to a philosopher.\n"
)


@pytest.fixture(scope="module")
def base(gensim_index, gensim_dump, tmp_path_factory):
    """A copy of the session's gensim index (BM25, dense, TF-IDF), and the fixture's pages this module revises."""
    out = tmp_path_factory.mktemp("update") / "index"
    shutil.copytree(gensim_index, out)
    return out, read_pages(gensim_dump, [EDITED, DELETED, MOVED])


def _inputs(folder, pages):
    """An adds-changes file revising Aristotle twice (a sentence changed, then a section added), and events that
    delete Alabama and move Achilles."""
    pid, rev, stamp, text = pages[EDITED]
    first = text.replace("and scientist born in the city of", "and polymath born in the town of", 1)
    assert first != text
    dump = write_dump(
        folder / "enwiki-20261126-pages-meta-hist-incr.xml.bz2",
        [
            DumpPage(
                pid,
                EDITED,
                [
                    Revision(rev + 100, "2026-11-25T09:00:00Z", first, "copyedit"),
                    Revision(rev + 200, "2026-11-26T09:00:00Z", first + ADDED_SECTION, "reception"),
                ],
            )
        ],
    )
    dpid, drev, _, _ = pages[DELETED]
    mpid, mrev, _, _ = pages[MOVED]
    events = Events().add("delete", dpid, DELETED, drev, "2026-11-26T10:00:00Z")
    events.add("move", mpid, NEW_TITLE, mrev + 1, "2026-11-26T11:00:00Z", prior_title=MOVED)
    return dump, events.write(folder / "page_change.jsonl")


@pytest.fixture(scope="module")
def updated(base, tmp_path_factory):
    index, pages = base
    folder = tmp_path_factory.mktemp("inputs")
    dump, events = _inputs(folder, pages)
    with Retriever.open(index) as r:
        before = {claim: r.search(claim, 5).to_dict() for claim in CLAIMS}
    summary = update_index(index, [dump], [events], workers=1, prepare=write_parts)
    return index, pages, dump, events, summary, before


CLAIMS = [
    "The Lyceum Society of Stagira named its new observatory after Aristotle.",
    "Alabama is a state in the southeastern United States.",
    "Achilles was a hero of the Trojan War.",
]


def test_an_update_is_recorded_per_file(updated):
    index, pages, dump, events, summary, _ = updated
    by_name = {r["name"]: r for r in summary["applied"]}
    d, e = by_name[dump.name], by_name[events.name]
    assert (d["pages_changed"], d["pages_added"], d["kind"]) == (1, 0, "dump")
    assert d["max_rev_id"] == pages[EDITED][1] + 200 and d["newest_timestamp"] == "2026-11-26T09:00:00Z"
    assert (e["pages_deleted"], e["pages_moved"]) == (1, 1)
    manifest = json.loads((index / "manifest.json").read_text(encoding="utf-8"))
    recorded = {u["name"]: u for u in manifest["updates"]}
    assert recorded[dump.name]["sha256"] == d["sha256"] and len(d["sha256"]) == 64
    assert manifest["delta"]["deleted"] == 1


def test_the_newest_revision_is_found_and_never_the_old(updated):
    index = updated[0]
    with Retriever.open(index) as r:
        res = r.search(CLAIMS[0], 5, passages=True)
        assert res.evidence[0].title == EDITED
        top = next(e for e in res.evidence if "observatory" in e.evidence_text)
        assert top.title == EDITED and top.origin == "update" and top.rev_id == updated[1][EDITED][1] + 200
        assert top.rev_timestamp == "2026-11-26T09:00:00Z"
        for channel in ("bm25", "tfidf", "dense"):
            assert top.ranks.get(channel) == 1, (channel, top.ranks)
        old = r.search(
            "Aristotle was a Greek philosopher and scientist born in the city of Stagira.", 20, passages=True
        )
    texts = [e.evidence_text for e in old.evidence if e.title == EDITED]
    assert any("philosopher and polymath born in the town of Stagira" in t for t in texts), texts
    assert not any("scientist born in the city of" in t for t in texts)
    assert all(e.origin == "update" for e in old.evidence if e.title == EDITED)


def test_a_deleted_page_never_appears(updated):
    index = updated[0]
    with Retriever.open(index) as r:
        res = r.search(CLAIMS[1], 50, passages=True)
        assert DELETED not in {e.title for e in res.evidence}
        for channel in r.channels:
            hits = r.channel_search(channel, CLAIMS[1], 50)
            assert updated[1][DELETED][0] not in {h.page_id for h in hits}, channel
        assert r.store.resolve_title(DELETED) is None


def test_a_moved_page_is_found_under_its_new_title_and_its_old_one_redirects(updated):
    index, pages = updated[0], updated[1]
    with Retriever.open(index) as r:
        res = r.search(CLAIMS[2], 5)
        assert res.evidence[0].title == NEW_TITLE and res.evidence[0].origin == "update"
        assert MOVED not in {e.title for e in res.evidence}
        old = r.store.resolve_title(MOVED)
    assert old.page_id == pages[MOVED][0] and old.title == NEW_TITLE and old.via_redirect == MOVED


def test_the_same_update_twice_changes_nothing(updated):
    index, _, dump, events, _, _ = updated
    segments = delta_segments(index)
    with Retriever.open(index) as r:
        first = [r.search(c, 5).to_dict() for c in CLAIMS]
    again = update_index(index, [dump], [events], workers=1)
    assert again["segment"] is None and {s["reason"] for s in again["skipped_files"]} == {"already applied"}
    assert delta_segments(index) == segments
    with Retriever.open(index) as r:
        second = [r.search(c, 5).to_dict() for c in CLAIMS]
    for a, b in zip(first, second, strict=True):
        a.pop("timings_ms"), b.pop("timings_ms")
        assert a == b


def _segment_rows(index) -> dict[str, list[tuple]]:
    import duckdb

    (segment,) = delta_segments(index)
    con = duckdb.connect(str(segment), read_only=True)
    try:
        tables = [r[0] for r in con.execute("SELECT table_name FROM duckdb_tables() ORDER BY table_name").fetchall()]
        return {t: con.execute(f"SELECT * FROM {t}").fetchall() for t in tables if t != "delta_files"}
    finally:
        con.close()


def test_pending_pages_are_written_a_batch_at_a_time_to_the_same_segment(gensim_index, gensim_dump, tmp_path):
    """An update holds its pages packed and writes them a batch of pages at a time: the segment's rows are the
    same, in the same order, one page a batch or all in one; a page this update revised, then moved, carries its
    revised text to the new title (read back from the packed pages)."""
    import indexer.update as update

    pages = read_pages(gensim_dump, [EDITED, DELETED, MOVED])
    dump, _ = _inputs(tmp_path, pages)
    pid, rev, _, _ = pages[EDITED]
    events = Events().add("move", pid, "Aristotle (philosopher)", rev + 300, "2026-11-27T09:00:00Z", prior_title=EDITED)
    events.add("move", pages[MOVED][0], NEW_TITLE, pages[MOVED][1] + 1, "2026-11-27T10:00:00Z", prior_title=MOVED)
    events.add("delete", pages[DELETED][0], DELETED, pages[DELETED][1], "2026-11-27T11:00:00Z")
    events = events.write(tmp_path / "page_change.jsonl")
    rows = []
    for n, size in enumerate((update.WRITE_BATCH_PAGES, 1)):
        index = tmp_path / f"index{n}"
        shutil.copytree(gensim_index, index, ignore=shutil.ignore_patterns("delta"))
        update.WRITE_BATCH_PAGES, before = size, update.WRITE_BATCH_PAGES
        try:
            update_index(index, [dump], [events], workers=1)
        finally:
            update.WRITE_BATCH_PAGES = before
        rows.append(_segment_rows(index))
    assert rows[0] == rows[1]
    titles = {r[1] for r in rows[0]["pages"]}
    assert titles == {"Aristotle (philosopher)", NEW_TITLE}
    moved = [r[3] for r in rows[0]["passages"] if r[4] == "Aristotle (philosopher)"]
    assert any("Lyceum Society of Stagira" in text for text in moved)
    assert {r[0] for r in rows[0]["tombstones"]} == {pages[DELETED][0]}
    assert {r[0] for r in rows[0]["redirects"]} == {EDITED, MOVED}


def _answers(index, claims=CLAIMS) -> list:
    with Retriever.open(index) as r:
        found = [r.search(c, 10, passages=True).evidence for c in claims]
    return [[(e.title, e.passage_id, e.score, e.origin, e.rev_id, sorted(e.ranks.items())) for e in ev] for ev in found]


def test_an_updated_index_opens_without_building_its_delta_parts(updated, tmp_path, caplog):
    """The update saved every channel's delta part: opening the index builds none, and answers as the parts built
    in memory do (from a copy without them, which builds them with a warning and saves them back)."""
    index = updated[0]
    saved = sorted(p.parent.name for p in (index / "delta").glob("parts-*/*/params.json"))
    assert saved == ["bm25", "dense", "tfidf"]
    built = dict(delta_parts.built_in_memory)
    loaded = _answers(index)
    assert delta_parts.built_in_memory == built
    assert loaded[0][0][0] == EDITED
    copy = tmp_path / "index"
    shutil.copytree(index, copy, ignore=shutil.ignore_patterns("parts-*"))
    with caplog.at_level("WARNING", logger="backends.delta_store"):
        assert _answers(copy) == loaded
    assert "building it in memory" in caplog.text
    assert all(delta_parts.built_in_memory.get(c, 0) == built.get(c, 0) + 1 for c in saved)
    assert sorted(p.parent.name for p in (copy / "delta").glob("parts-*/*/params.json")) == saved  # saved back
    (params,) = (copy / "delta").glob("parts-*/tfidf/params.json")
    older = json.loads(params.read_text(encoding="utf-8")) | {"format_version": PARTS_FORMATS["tfidf"] - 1}
    params.write_text(json.dumps(older), encoding="utf-8")  # the sparse matrix of format 1
    caplog.clear()
    before = dict(delta_parts.built_in_memory)
    with caplog.at_level("WARNING", logger="backends.delta_store"):
        assert _answers(copy) == loaded
    assert "tfidf part is missing or unreadable" in caplog.text and "older wikiground (format 1)" in caplog.text
    assert delta_parts.built_in_memory == before | {"tfidf": built.get("tfidf", 0) + 2}  # the other parts are read
    assert json.loads(params.read_text(encoding="utf-8"))["format_version"] == PARTS_FORMATS["tfidf"]


def test_an_older_revision_is_skipped_with_a_message(updated, tmp_path):
    index, pages = updated[0], updated[1]
    pid, rev, stamp, text = pages[EDITED]
    older = write_dump(tmp_path / "enwiki-pages-articles.xml", [DumpPage(pid, EDITED, [Revision(rev, stamp, text)])])
    summary = update_index(index, [older], workers=1)
    (record,) = summary["applied"]
    assert record["skipped_older"] == 1 and record["pages_changed"] == 0
    assert any("older than revision" in m and EDITED in m for m in summary["messages"])
    with Retriever.open(index) as r:
        found = r.search(CLAIMS[0], 5, passages=True).evidence
    assert any("observatory" in e.evidence_text for e in found if e.title == EDITED)


def test_a_failed_update_leaves_the_index_as_it_was(updated, tmp_path):
    index = updated[0]
    segments = delta_segments(index)
    good = Events().add("delete", updated[1][EDITED][0], EDITED, 10**10, "2026-11-27T00:00:00Z")
    bad = tmp_path / "broken.jsonl"
    bad.write_text('{"page_change_kind": "delete", "page": {"page_id": 1}}\n', encoding="utf-8")
    with pytest.raises(InputError, match=r"broken\.jsonl: line 1"):
        update_index(index, [], [good.write(tmp_path / "good.jsonl"), bad], workers=1)
    assert delta_segments(index) == segments
    with Retriever.open(index) as r:
        assert r.search(CLAIMS[0], 1).evidence[0].title == EDITED


def _live(title: str, vital: dict, page_id: int) -> LivePage:
    return LivePage(
        title,
        page_id,
        page_id * 10 + 3,
        f"https://en.wikipedia.org/wiki/{title.replace(' ', '_')}",
        "2026-11-25T01:00:00Z",
        vital[title],
    )


@pytest.mark.parametrize(
    ("title", "claim"),
    [("Marie Curie", "Marie Curie won two Nobel Prizes."), ("Pretoria", "Pretoria is a city in South Africa.")],
)
def test_a_live_page_ranks_as_if_built(base, data_dir, tmp_path, title, claim):
    index = tmp_path / "index"
    shutil.copytree(base[0], index, ignore=shutil.ignore_patterns("delta"))
    rows = json.loads((data_dir / "corpora" / "vital_articles_summaries.json").read_text(encoding="utf-8"))
    vital = {row["title"]: row["extract"] for row in rows.values()}
    assert write_live_pages(index, [_live(title, vital, 90_000_001)]) == 1
    with Retriever.open(index) as r:
        res = r.search(claim, 5)
    top = res.evidence[0]
    assert top.title == title and top.origin == "live" and top.fetched_at == "2026-11-25T01:00:00Z"
    assert {"bm25", "tfidf", "dense", "title"} <= set(top.ranks), top.ranks


def _corpus_of(store, hits):
    """The passages of ``hits`` as a delta part indexes them: base passages scored outside the base."""
    from backends.delta_parts import DeltaCorpus

    found = store.passages([h.passage_id for h in hits])
    ids = [h.passage_id for h in hits]
    return DeltaCorpus(
        np.array(ids),
        np.array([h.page_id for h in hits]),
        [found[i].title for i in ids],
        [found[i].heading_path for i in ids],
        [found[i].text for i in ids],
        np.arange(len(ids)),
    )


def test_the_bm25_delta_part_scores_as_lucene(base):
    """Base passages scored by the delta part equal Lucene's own scores (to Anserini's 4 decimals)."""
    from backends import load
    from backends.bm25_delta import BM25Part

    index = base[0]
    with Store.open(index) as store:
        bm25 = load("bm25", index, store=store)
        for claim in CLAIMS:
            hits = bm25.search(claim, 10)
            corpus = _corpus_of(store, hits)
            ours = {h.passage_id: h.score for h in BM25Part(bm25, corpus).search_batch([claim], 10)[0]}
            assert ours == {h.passage_id: h.score for h in hits}
        bm25.close()


def test_the_cli_updates_and_reports(base, tmp_path):
    index = tmp_path / "index"
    shutil.copytree(base[0], index, ignore=shutil.ignore_patterns("delta"))
    dump, events = _inputs(tmp_path, base[1])
    cmd = [sys.executable, "-m", "wikiground", "update", "--index", str(index), "--dump", str(dump)]
    done = subprocess.run([*cmd, "--events", str(events), "--json"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["segment"]
    share = summary["delta_share"]
    assert share["delta_passages"] > 0 and share["share"] == round(share["delta_passages"] / share["base_passages"], 6)
    from indexer.compact import delta_share

    assert share == delta_share(index)  # the update's own counts are those of the delta counted afresh
    again = subprocess.run([sys.executable, "-m", "indexer", *cmd[3:]], cwd=ROOT, capture_output=True, text=True)
    assert again.returncode == 0 and "already applied" in again.stdout and "nothing new" in again.stdout
    # past the share worth a compaction, the update names the command
    assert ("wikiground compact --index" in again.stdout) == (share["share"] >= share["threshold"])
    bad = subprocess.run([*cmd[:-1], str(tmp_path / "missing.xml")], cwd=ROOT, capture_output=True, text=True)
    assert bad.returncode == 1 and "missing.xml: no such file" in bad.stderr


def test_the_tfidf_delta_part_scores_as_the_base(base):
    """Base passages scored by the TF-IDF delta part get the base's own cosine scores."""
    from backends import load
    from backends.delta_scoring import TfidfPart

    index = base[0]
    with Store.open(index) as store:
        tfidf = load("tfidf", index, store=store)
        for claim in CLAIMS:
            hits = tfidf.search(claim, 10)
            corpus = _corpus_of(store, hits)
            ours = {h.passage_id: h.score for h in TfidfPart(tfidf, corpus).search_batch([claim], 10)[0]}
            assert ours.keys() == {h.passage_id for h in hits}
            assert all(abs(ours[h.passage_id] - h.score) < 1e-5 for h in hits)


def test_an_update_past_the_share_worth_a_compaction_names_the_command(tmp_path):
    from indexer.update_cli import describe

    summary = {"applied": [], "skipped_files": [], "segment": "seg-1", "seconds": 1.0}
    share = {"delta_passages": 488_424, "base_passages": 1_000_000, "share": 0.488424, "threshold": 0.1}
    said = describe(tmp_path, {**summary, "delta_share": share})
    assert f"wikiground compact --index {tmp_path}" in said and "48.8%" in said
    below = describe(tmp_path, {**summary, "delta_share": {**share, "delta_passages": 50_000, "share": 0.05}})
    assert "compact" not in below
