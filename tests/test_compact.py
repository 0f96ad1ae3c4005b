"""``wikiground compact``: the delta of an update (gensim-fixture pages revised, deleted and moved, as
``tests/test_update.py`` applies them) folded into the base channels, over the TF-IDF fixture index (every channel is
rebuilt by a compaction; TF-IDF alone keeps the test quick)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import duckdb
import pyarrow as pa
import pytest

from backends.delta_store import write_parts
from indexer.compact import compact_index
from indexer.compact_store import fold_store
from indexer.store import open_delta
from indexer.update import update_index
from retriever import Retriever
from tests.support.wikidump import read_pages
from tests.test_update import CLAIMS, DELETED, EDITED, MOVED, NEW_TITLE, _inputs
from wikiground.layout import delta_segments, store_path

from .conftest import ROOT


@pytest.fixture(scope="module")
def updated(gensim_tfidf, gensim_dump, tmp_path_factory):
    index = tmp_path_factory.mktemp("compact") / "index"
    shutil.copytree(gensim_tfidf, index)
    pages = read_pages(gensim_dump, [EDITED, DELETED, MOVED])
    dump, events = _inputs(tmp_path_factory.mktemp("inputs"), pages)
    update_index(index, [dump], [events], workers=1, prepare=write_parts)
    return index, pages, dump, events


def _answers(index) -> list:
    with Retriever.open(index) as r:
        found = [r.search(c, 10, passages=True).evidence for c in CLAIMS]
    return [[(e.title, e.origin, e.rev_id, e.evidence_text) for e in ev] for ev in found]


def test_below_the_share_compact_says_so_and_does_nothing(updated):
    index = updated[0]
    segments = delta_segments(index)
    cmd = [sys.executable, "-m", "wikiground", "compact", "--index", str(index)]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0 and "not compacted" in done.stdout and "below the 10%" in done.stdout, done.stderr
    assert delta_segments(index) == segments and segments


class _Batched:
    """The merged delta, read only as Arrow readers of ``rows`` rows a batch at most (what any other read of it, a
    whole table fetched at once, raises on), counting the rows of each batch."""

    def __init__(self, con, rows: int, batches: list | None = None):
        self.con, self.rows, self.batches = con, rows, [] if batches is None else batches

    def cursor(self):
        return _Batched(self.con.cursor(), self.rows, self.batches)

    def close(self):
        self.con.close()

    def sql(self, query: str):
        return _BatchedRelation(self, self.con.sql(query))

    def __getattr__(self, name):
        raise AssertionError(f"the delta read whole ({name})")


class _BatchedRelation:
    def __init__(self, owner: _Batched, relation):
        self.owner, self.relation = owner, relation

    def to_arrow_reader(self, batch_size: int):
        assert batch_size <= self.owner.rows
        reader = self.relation.to_arrow_reader(batch_size)

        def batches():
            for batch in reader:
                self.owner.batches.append(batch.num_rows)
                yield batch

        return pa.RecordBatchReader.from_batches(reader.schema, batches())

    def __getattr__(self, name):
        raise AssertionError(f"the delta read whole ({name})")


def test_the_compacted_store_is_written_from_the_delta_in_batches(updated, tmp_path):
    """The delta's tables reach the compacted store a few rows at a time, never a table whole; the store holds
    every row of them, and the scratch file they went through is gone."""
    index = updated[0]
    delta, _ = open_delta(index)
    try:
        rows = sum(delta.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("passages", "sentences"))
        passages = delta.execute("SELECT count(*) FROM passages").fetchone()[0]
        spy = _Batched(delta, 3)
        counts = fold_store(store_path(index), spy, tmp_path / "wiki.duckdb", "b" * 32, None, batch_rows=3)
    finally:
        delta.close()
    assert spy.batches and max(spy.batches) <= 3 and sum(spy.batches) >= rows > 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["wiki.duckdb"]
    with duckdb.connect(str(store_path(index)), read_only=True) as old:
        hidden = old.execute(
            "SELECT count(*) FROM passages WHERE page_id IN (SELECT page_id FROM pages WHERE title IN (?, ?, ?))",
            [EDITED, DELETED, MOVED],
        ).fetchone()[0]
        base = old.execute("SELECT count(*) FROM passages").fetchone()[0]
    assert counts["passages"] == base - hidden + passages


def test_compact_folds_the_delta_into_the_base_and_answers_the_same(updated, tmp_path):
    """Forced, the delta is folded into the base: the update's claims answered as before (the folded pages now
    ``local``, their revisions kept), an empty delta, and the applied files still recorded (applying them again
    changes nothing)."""
    index, pages, dump, events = updated
    before = _answers(index)
    base_newest = json.loads((index / "manifest.json").read_text(encoding="utf-8"))["newest_rev_timestamp"]
    result = compact_index(index, force=True)
    assert result["compacted"] and (result["delta_pages"], result["delta_deleted"]) == (2, 1)
    assert delta_segments(index) == []
    after = _answers(index)
    # The pages the update touched come first as before (scores are the new base's statistics'); the deleted
    # page's claim finds other pages, never the deleted one.
    assert [after[i][0][0] for i in (0, 2)] == [before[i][0][0] for i in (0, 2)] == [EDITED, NEW_TITLE]
    assert DELETED not in {e[0] for ev in after for e in ev}
    with Retriever.open(index) as r:
        found = r.search(CLAIMS[0], 5, passages=True).evidence
        new = next(e for e in found if "observatory" in e.evidence_text)
        assert (new.title, new.origin, new.rev_id) == (EDITED, "local", pages[EDITED][1] + 200)
        assert all(e.origin == "local" for e in found)
        assert r.store.resolve_title(DELETED) is None
        moved = r.store.resolve_title(MOVED)
        assert (moved.title, moved.page_id, moved.via_redirect) == (NEW_TITLE, pages[MOVED][0], MOVED)
    manifest = json.loads((index / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["delta"]["pages"] == 0 and {dump.name, events.name} <= {u["name"] for u in manifest["updates"]}
    # The newest revision the base holds now: the move's (its event's time), after the base dump's.
    newest = max(u["newest_timestamp"] for u in manifest["updates"])
    assert base_newest < newest == manifest["newest_rev_timestamp"] == "2026-11-26T11:00:00Z"
    with duckdb.connect(str(store_path(index)), read_only=True) as con:
        assert con.execute("SELECT max(rev_timestamp) FROM pages").fetchone()[0] == newest
    again = update_index(index, [dump], [events], workers=1)
    assert again["segment"] is None and {s["reason"] for s in again["skipped_files"]} == {"already applied"}
    verify = subprocess.run(
        [sys.executable, "-m", "indexer.verify", str(index)], cwd=ROOT, capture_output=True, text=True
    )
    assert verify.returncode == 0, verify.stderr
