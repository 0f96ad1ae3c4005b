"""An index trusts only what its build wrote (issue 40): the schema version it reads, no links inside the folder,
and a damaged optional file falls back with a warning instead of failing every query."""

from __future__ import annotations

import json
import logging
import shutil

import pytest

from indexer.manifest import read_manifest, write_manifest
from indexer.trust import refuse_links
from retriever.api import Retriever
from wikiground.errors import IndexCorruptError

CLAIM = "Aristotle tutored Alexander the Great."


@pytest.fixture
def index(gensim_store, tmp_path):
    out = tmp_path / "index"
    shutil.copytree(gensim_store, out)
    return out


def _edit_manifest(index, **changes) -> None:
    path = index / "manifest.json"
    manifest = json.loads(path.read_text())
    path.write_text(json.dumps({**manifest, **changes}))


@pytest.mark.parametrize("version", [999, True, "6", None])
def test_a_schema_version_this_version_does_not_read_is_refused(index, version):
    _edit_manifest(index, schema_version=version)
    with pytest.raises(IndexCorruptError, match="schema_version"):
        Retriever.open(index)


def test_a_link_inside_the_index_folder_is_refused(index, gensim_store, tmp_path):
    (index / "delta").mkdir()
    (index / "delta" / "segment-1").symlink_to(gensim_store, target_is_directory=True)
    with pytest.raises(IndexCorruptError, match="symbolic link") as info:
        Retriever.open(index)
    assert "segment-1" in str(info.value)


def test_the_index_folder_itself_may_be_a_link(index, tmp_path):
    link = tmp_path / "current"
    link.symlink_to(index, target_is_directory=True)
    refuse_links(link)  # a symlinked --out: the link is the folder's name, its contents are the build's
    with Retriever.open(link) as r:
        assert r.search(CLAIM, 3).evidence


def test_a_cut_lookups_array_falls_back_to_the_store_with_a_warning(index, caplog):
    with Retriever.open(index) as r:
        expected = [e.title for e in r.search(CLAIM, 5).evidence]
    (index / "lookups" / "sentences.count.npy").write_bytes(b"")  # zero bytes: numpy raises EOFError
    caplog.set_level(logging.WARNING)
    with Retriever.open(index) as r:
        assert [e.title for e in r.search(CLAIM, 5).evidence] == expected
    assert any("resolved in the store" in rec.getMessage() for rec in caplog.records)


@pytest.fixture(scope="module")
def tfidf_index(tmp_path_factory):
    from indexer.build import build_index

    src = tmp_path_factory.mktemp("tfidf") / "pages.jsonl"
    rows = [
        {"id": 1, "title": "Aristotle", "text": "Aristotle was a Greek philosopher who tutored Alexander the Great."},
        {"id": 2, "title": "Alexander the Great", "text": "Alexander the Great was a king of Macedon."},
    ]
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = src.parent / "index"
    build_index([src], out, indexes=("tfidf",))
    return out


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("token_pattern", "(a+)+$", "token_pattern"),
        ("analyzer", "char", "analyzer"),
        ("n_features", 10**12, "n_features"),
        ("n_features", 1024, "smaller than the index's buckets"),
        ("n_features", "67108864", "n_features"),
    ],
)
def test_tfidf_parsing_settings_are_the_formats_own_and_numbers_in_range(tfidf_index, tmp_path, key, value, words):
    index = tmp_path / "index"
    shutil.copytree(tfidf_index, index)
    path = index / "tfidf" / "params.json"
    params = json.loads(path.read_text())
    params["vectorizer"][key] = value
    path.write_text(json.dumps(params))
    write_manifest(index, read_manifest(index))  # the manifest edited too: the settings are checked all the same
    with pytest.raises(IndexCorruptError, match=words) as info:
        with Retriever.open(index, channels="tfidf") as r:
            r.search(CLAIM, 3)
    assert "params.json" in str(info.value)
