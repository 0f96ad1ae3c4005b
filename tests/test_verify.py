"""``wikiground verify DIR`` and the manifest's file list (issue 40): one flipped byte in any file is found, and a
lookups file cut since the build falls back to the store."""

from __future__ import annotations

import json
import shutil

import pytest

from indexer.verify import listed_files, verify
from retriever.api import Retriever
from wikiground.cli import main as wikiground


@pytest.fixture
def index(gensim_store, tmp_path):
    out = tmp_path / "index"
    shutil.copytree(gensim_store, out)
    return out


def test_the_manifest_lists_every_file_with_size_and_sha256(index):
    files = json.loads((index / "manifest.json").read_text())["files"]
    assert sorted(files) == sorted(p.relative_to(index).as_posix() for p in listed_files(index))
    assert "wiki.duckdb" in files and "lookups/params.json" in files
    assert all(len(r["sha256"]) == 64 and r["bytes"] >= 0 for r in files.values())
    assert verify(index) == []


def test_one_flipped_byte_in_any_file_is_found(index, capsys):
    for path in listed_files(index):
        data = bytearray(path.read_bytes())
        if not data:
            continue
        original = bytes(data)
        data[len(data) // 2] ^= 0x01
        path.write_bytes(bytes(data))
        problems = verify(index)
        assert len(problems) == 1 and str(path) in problems[0] and "sha256" in problems[0], path
        path.write_bytes(original)
    assert wikiground(["verify", str(index)]) == 0
    (index / "lookups" / "lead.titles.bin").write_bytes(b"x")
    assert wikiground(["verify", str(index)]) == 1
    assert "lead.titles.bin" in capsys.readouterr().out


def test_a_lookups_file_cut_since_the_build_falls_back_to_the_store(index, caplog):
    import logging

    with Retriever.open(index) as r:
        expected = [e.title for e in r.search("Aristotle tutored Alexander the Great.", 5).evidence]
    path = index / "lookups" / "exact.hash.npy"
    with path.open("r+b") as fh:
        fh.truncate(128)
    caplog.set_level(logging.WARNING)
    with Retriever.open(index) as r:
        assert [e.title for e in r.search("Aristotle tutored Alexander the Great.", 5).evidence] == expected
    assert any("resolved in the store" in rec.getMessage() for rec in caplog.records)
    assert any("exact.hash.npy" in p for p in verify(index))


def test_a_file_not_written_by_the_build_is_reported(index):
    (index / "lookups" / "extra.npy").write_bytes(b"\x93NUMPY")
    assert any("extra.npy" in p and "not written by the build" in p for p in verify(index))
