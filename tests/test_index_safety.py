"""The index folder's lifecycle (issue 20): a build replaces only a folder of ours and never an input, builds take
turns, a reader never mixes two builds, and damaged or missing parts are named. Real corpora from tests/data."""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import stat

import pytest

import backends
from indexer.build import build_index
from indexer.store import Store
from retriever import Retriever
from wikiground.errors import (
    ConfigError,
    IndexChangedError,
    IndexCorruptError,
    IndexFormatError,
    IndexLockedError,
    IndexMissingError,
)
from wikiground.layout import build_lock_path

PAGES = 150


def _write_jsonl(path, rows) -> dict[str, str]:
    with path.open("w", encoding="utf-8") as fh:
        for title, text in rows:
            fh.write(json.dumps({"title": title, "text": text}) + "\n")
    return dict(rows)


@pytest.fixture(scope="module")
def corpora(data_dir, tmp_path_factory):
    """Two different real corpora: vital-article leads (A) and HotpotQA intros (B), title -> text each."""
    root = tmp_path_factory.mktemp("corpora")
    vital = json.loads((data_dir / "corpora" / "vital_articles_summaries.json").read_text(encoding="utf-8"))
    a_rows = [(r["title"], r["extract"]) for r in list(vital.values())[:PAGES] if r["extract"].strip()]
    b_rows = []
    with (data_dir / "corpora" / "hotpotqa2017_abstracts.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            if "&" not in row["title"] and len(" ".join(row["sentences"]).split()) > 30:
                b_rows.append((row["title"], " ".join(row["sentences"])))
            if len(b_rows) == PAGES:
                break
    a = _write_jsonl(root / "a.jsonl", a_rows)
    b = _write_jsonl(root / "b.jsonl", b_rows)
    return {"a": (root / "a.jsonl", a), "b": (root / "b.jsonl", b)}


def _build(src, out, indexes=("tfidf",)):
    return build_index([src], out, indexes=indexes, workers=1)


def _claim(pages: dict[str, str], i: int) -> tuple[str, str]:
    title = list(pages)[i]
    return title, pages[title].split(". ")[0]


# -- what a build may replace -----------------------------------------------------------------------------------------
def test_folder_with_a_foreign_manifest_is_refused_and_kept(corpora, tmp_path):
    out = tmp_path / "ext"
    out.mkdir()
    (out / "manifest.json").write_text('{"manifest_version": 3, "name": "my extension"}')
    (out / "background.js").write_text("// user code")
    with pytest.raises(ConfigError, match="not a wikiground index folder") as err:
        _build(corpora["a"][0], out, indexes=())
    assert "background.js" in str(err.value)
    assert sorted(os.listdir(out)) == ["background.js", "manifest.json"]


def test_our_index_with_user_files_in_it_is_refused(corpora, tmp_path):
    out = tmp_path / "idx"
    _build(corpora["a"][0], out, indexes=())
    (out / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="notes.txt"):
        _build(corpora["b"][0], out, indexes=())
    assert (out / "notes.txt").read_text() == "mine"


def test_an_input_inside_out_is_refused_and_kept(corpora, tmp_path):
    out = tmp_path / "idx"
    _build(corpora["a"][0], out, indexes=())
    corpus = out / "x.jsonl"
    shutil.copy(corpora["b"][0], corpus)
    with pytest.raises(ConfigError, match="inside --out"):
        _build(corpus, out, indexes=())
    assert corpus.read_bytes() == corpora["b"][0].read_bytes()


def test_rebuild_replaces_our_index_and_keeps_the_folder_mode(corpora, tmp_path):
    out = tmp_path / "idx"
    _build(corpora["a"][0], out, indexes=())
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(out.stat().st_mode) == 0o777 & ~umask  # a new folder: as mkdir makes it
    os.chmod(out, 0o750)
    manifest = _build(corpora["b"][0], out, indexes=())
    assert stat.S_IMODE(out.stat().st_mode) == 0o750
    with Store.open(out) as store:
        assert store.build_id == manifest["build_id"]
        assert store.resolve_title(list(corpora["b"][1])[0]) is not None


# -- generations --------------------------------------------------------------------------------------------------
def test_a_reader_opened_before_a_rebuild_never_mixes_two_builds(corpora, tmp_path):
    out = tmp_path / "idx"
    _build(corpora["a"][0], out)
    title_a, claim_a = _claim(corpora["a"][1], 7)
    warm = Retriever.open(out, channels="tfidf")
    warm.warm_up()  # every channel loaded: it keeps answering from the build it opened
    lazy = Retriever.open(out, channels="tfidf")  # nothing loaded yet
    try:
        _build(corpora["b"][0], out)
        # Before the fix the lazy reader loaded the new TF-IDF index and looked its passage ids up in the old
        # store: unrelated pages with status ok.
        with pytest.raises(IndexChangedError, match="rebuilt since it was opened"):
            lazy.search(claim_a, 5)
        res = warm.search(claim_a, 5)
        assert res.status == "ok" and res.evidence[0].title == title_a
        for ev in res.evidence:
            assert ev.evidence_text in corpora["a"][1][ev.title]
    finally:
        warm.close()
        lazy.close()


def test_a_new_open_in_the_same_process_sees_the_new_build(corpora, tmp_path):
    out = tmp_path / "idx"
    _build(corpora["a"][0], out)
    old = Retriever.open(out, channels="tfidf")
    old.warm_up()
    try:
        _build(corpora["b"][0], out)
        # DuckDB's per-path instance cache handed the old store to a new connection while the channels loaded
        # the new build: wrong pages for the new ids.
        for i in (3, 11, 40):
            title_b, claim_b = _claim(corpora["b"][1], i)
            with Retriever.open(out, channels="tfidf") as new:
                res = new.search(claim_b, 5)
            assert res.status == "ok" and res.evidence[0].title == title_b
            for ev in res.evidence:
                assert ev.evidence_text in corpora["b"][1][ev.title]
    finally:
        old.close()


def test_a_channel_of_another_build_is_refused(corpora, tmp_path):
    out = tmp_path / "idx"
    _build(corpora["a"][0], out)
    with Store.open(out) as store:
        _build(corpora["b"][0], out)
        with pytest.raises(IndexChangedError):
            backends.load("tfidf", out, store=store)


# -- builds take turns; interrupted builds are cleaned -------------------------------------------------------------
def test_a_second_build_to_the_same_out_is_locked_out(corpora, tmp_path):
    out = tmp_path / "idx"
    _build(corpora["a"][0], out, indexes=())
    with open(build_lock_path(out), "a+") as held:  # what a running build holds
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(IndexLockedError, match="another build is writing this index"):
            _build(corpora["b"][0], out, indexes=())
    with Store.open(out) as store:
        assert store.resolve_title(list(corpora["a"][1])[0]) is not None
    _build(corpora["b"][0], out, indexes=())  # the lock is free again


def test_temporary_folders_of_a_killed_build_are_removed_by_the_next(corpora, tmp_path):
    out = tmp_path / "idx"
    _build(corpora["a"][0], out, indexes=())
    stale = [tmp_path / ".idx.tmp-k1ll3d", tmp_path / ".idx.old-0badc0de"]
    for folder in stale:
        folder.mkdir()
        (folder / "wiki.duckdb").write_bytes(b"\0" * 4096)
    other = tmp_path / ".other.tmp-abc"  # another index's build: not ours to remove
    other.mkdir()
    _build(corpora["b"][0], out, indexes=())
    assert not any(f.exists() for f in stale)
    assert other.is_dir()


# -- damaged or missing parts ---------------------------------------------------------------------------------------
def _truncate(path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def test_a_truncated_store_is_index_corrupt_naming_it(gensim_store, tmp_path):
    out = tmp_path / "idx"
    shutil.copytree(gensim_store, out)
    _truncate(out / "wiki.duckdb")
    with pytest.raises(IndexCorruptError, match="wiki.duckdb"):
        with Retriever.open(out) as r:
            r.search("Aristotle tutored Alexander the Great.", 5)


def test_a_store_without_build_ids_gets_the_older_format_error(gensim_store, tmp_path):
    """Stores of schema 3 and before had no ``build_info``; their manifests say their schema version."""
    import duckdb

    out = tmp_path / "idx"
    shutil.copytree(gensim_store, out)
    con = duckdb.connect(str(out / "wiki.duckdb"))
    try:
        con.execute("DROP TABLE build_info")
    finally:
        con.close()
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["store_bytes"] = (out / "wiki.duckdb").stat().st_size  # the store was changed on purpose
    (out / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(IndexFormatError) as err:
        Store.open(out)
    assert str(err.value) == (
        f"{out / 'wiki.duckdb'}: built by an older wikiground (format 3 or earlier, without a build_info table); "
        "this version reads format 4: rebuild it with `wikiground index ...`"
    )
    manifest["schema_version"] = 3
    (out / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(
        IndexFormatError, match=r"idx: built by an older wikiground \(format 3\); this version reads format 4"
    ):
        with Retriever.open(out) as r:
            r.search("Aristotle tutored Alexander the Great.", 5)


def test_a_truncated_tfidf_matrix_is_index_corrupt_naming_it(corpora, tmp_path):
    out = tmp_path / "idx"
    _build(corpora["a"][0], out)
    _truncate(out / "tfidf" / "weights.npy")
    with pytest.raises(IndexCorruptError, match="weights.npy"):  # at open: its size is not the manifest's
        with Retriever.open(out, channels="tfidf") as r:
            r.search(_claim(corpora["a"][1], 2)[1], 5)


def test_a_missing_channel_folder_is_reported(corpora, tmp_path, caplog):
    out = tmp_path / "idx"
    _build(corpora["a"][0], out)
    shutil.rmtree(out / "tfidf")
    with caplog.at_level(logging.WARNING, logger="retriever.api"):
        with Retriever.open(out) as r:
            assert r.channels == ("title",)
    assert any("tfidf" in rec.getMessage() and "missing" in rec.getMessage() for rec in caplog.records)
    with pytest.raises(IndexMissingError, match="tfidf"):
        Retriever.open(out, channels="tfidf,title")


def test_an_npy_written_in_chunks_is_the_file_np_save_writes(tmp_path):
    """Arrays that grow with the corpus are written a chunk at a time (wikiground.layout.npy_stream)."""
    import io

    import numpy as np

    from wikiground.layout import npy_stream

    data = np.arange(1_000, dtype=np.int64) * 7 - 300
    with npy_stream(tmp_path / "a.npy", np.int64, len(data)) as write:
        for at in range(0, len(data), 333):
            write(data[at : at + 333])
    whole = io.BytesIO()
    np.save(whole, data, allow_pickle=False)
    assert (tmp_path / "a.npy").read_bytes() == whole.getvalue()
    with pytest.raises(ValueError, match="999 items written of the 1000"):
        with npy_stream(tmp_path / "b.npy", np.int32, 1_000) as write:
            write(data[:999])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.npy"]  # nothing half-written left
