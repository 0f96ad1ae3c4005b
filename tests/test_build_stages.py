"""A build cut off after a finished stage continues from there with ``resume`` (``--resume``): finished stages are
kept while their checksums match, a broken one is built again, and without ``resume`` a build starts clean."""

from __future__ import annotations

import json
import logging

import pytest

from indexer.build import build_index
from indexer.stages import JOURNAL_FILE
from wikiground.errors import BuildError
from wikiground.layout import build_tmp_prefix

FAILING_BM25 = {"bm25": {"k1": -1.0}}  # BM25 is built last (indexer.build.build_order)


def _kept(out):
    return sorted(out.parent.glob(build_tmp_prefix(out) + "*"))


@pytest.fixture()
def cut_off(gensim_dump, tmp_path):
    """A build of the gensim dump whose BM25 stage failed after the store and TF-IDF were finished."""
    out = tmp_path / "idx"
    with pytest.raises(BuildError):
        build_index([gensim_dump], out, indexes=("bm25", "tfidf"), workers=1, index_options=FAILING_BM25)
    assert not out.exists()
    (folder,) = _kept(out)
    journal = json.loads((folder / JOURNAL_FILE).read_text())
    assert journal["order"] == ["ingest", "tfidf"] and sorted(journal["stages"]) == ["ingest", "tfidf"]
    return out, folder, journal


def test_resume_keeps_finished_stages(cut_off, gensim_dump, caplog):
    out, folder, journal = cut_off
    caplog.set_level(logging.INFO)
    manifest = build_index([gensim_dump], out, indexes=("bm25", "tfidf"), workers=1, resume=True)
    kept = [r.getMessage() for r in caplog.records if "resume:" in r.getMessage()]
    assert any("ingest kept" in m for m in kept) and any("tfidf kept" in m for m in kept)
    assert not any("building tfidf" in r.getMessage() for r in caplog.records)
    assert manifest["build_id"] == journal["build_id"]
    assert sorted(manifest["indexes"]) == ["bm25", "tfidf"] and not (out / JOURNAL_FILE).exists()
    assert _kept(out) == []
    from retriever.service import OpenOptions, SearchOptions, answer

    with OpenOptions(index=out).open() as r:
        line = answer(r, "Aristotle tutored Alexander the Great.", SearchOptions(k=3))
    assert line["evidence"][0]["title"] == "Aristotle"
    assert {"bm25", "tfidf"} <= set(line["evidence"][0]["ranks"])


def test_a_stage_whose_files_changed_is_built_again(cut_off, gensim_dump, caplog):
    out, folder, _ = cut_off
    idf = folder / "tfidf" / "idf.npy"
    idf.write_bytes(idf.read_bytes() + b"\0")
    caplog.set_level(logging.INFO)
    build_index([gensim_dump], out, indexes=("bm25", "tfidf"), workers=1, resume=True)
    messages = [r.getMessage() for r in caplog.records]
    assert any("ingest kept" in m for m in messages)
    assert any("tfidf" in m and "does not check out" in m for m in messages)
    assert any("building tfidf" in m for m in messages)


def test_without_resume_a_build_starts_clean(cut_off, gensim_dump, caplog):
    out, folder, _ = cut_off
    caplog.set_level(logging.INFO)
    build_index([gensim_dump], out, indexes=("bm25",), workers=1)
    assert not folder.exists() and _kept(out) == []
    assert not any("kept from" in r.getMessage() for r in caplog.records)


def test_resume_with_other_inputs_starts_clean(cut_off, tmp_path, caplog):
    out, folder, _ = cut_off
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"title": "Plato", "text": "Plato was a philosopher in Athens. " * 20}) + "\n")
    build_index([other], out, indexes=(), workers=1, resume=True)
    assert "no cut-off build" in caplog.text and not folder.exists()
