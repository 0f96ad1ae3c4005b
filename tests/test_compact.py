"""``wikiground compact``: the delta of an update (gensim-fixture pages revised, deleted and moved, as
``tests/test_update.py`` applies them) folded into the base channels, over the TF-IDF fixture index (every channel is
rebuilt by a compaction; TF-IDF alone keeps the test quick)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from backends.delta_store import write_parts
from indexer.compact import compact_index
from indexer.update import update_index
from retriever import Retriever
from tests.support.wikidump import read_pages
from tests.test_update import CLAIMS, DELETED, EDITED, MOVED, NEW_TITLE, _inputs
from wikiground.layout import delta_segments

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


def test_compact_folds_the_delta_into_the_base_and_answers_the_same(updated, tmp_path):
    """Forced, the delta is folded into the base: the update's claims answered as before (the folded pages now
    ``local``, their revisions kept), an empty delta, and the applied files still recorded (applying them again
    changes nothing)."""
    index, pages, dump, events = updated
    before = _answers(index)
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
    again = update_index(index, [dump], [events], workers=1)
    assert again["segment"] is None and {s["reason"] for s in again["skipped_files"]} == {"already applied"}
    verify = subprocess.run(
        [sys.executable, "-m", "indexer.verify", str(index)], cwd=ROOT, capture_output=True, text=True
    )
    assert verify.returncode == 0, verify.stderr
