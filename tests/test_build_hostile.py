"""The build against inputs and folders a user should not give it (issue 40): clear errors naming the file and the
place, or warnings with counts, never a silent wrong index."""

from __future__ import annotations

import json
import logging
import os

import pytest

from indexer.build import build_index
from retriever.api import Retriever
from wikiground.errors import InputError, WikigroundError


def _jsonl(path, rows) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def test_two_pages_with_one_title_are_a_warning_naming_the_winner(tmp_path, caplog):
    src = tmp_path / "pages.jsonl"
    _jsonl(
        src,
        [
            {"id": 9, "title": "Mercury", "text": "Mercury is a planet of the Solar System, the closest to the Sun."},
            {"id": 3, "title": "Mercury", "text": "Mercury is a chemical element with the symbol Hg."},
            {"id": 4, "title": "Venus", "text": "Venus is the second planet from the Sun."},
        ],
    )
    caplog.set_level(logging.WARNING)
    build_index([src], tmp_path / "index", indexes=())
    warned = [r.getMessage() for r in caplog.records if "more than one page" in r.getMessage()]
    assert warned and warned[0].startswith("1 titles") and "'Mercury': page 3 wins over 9" in warned[0]
    with Retriever.open(tmp_path / "index") as r:
        assert r.store.page_by_title("Mercury").page_id == 3


@pytest.mark.parametrize("given", [2**70, "1180591620717411303424", -5])
def test_a_page_id_out_of_range_is_a_clear_error(tmp_path, given):
    src = tmp_path / "pages.jsonl"
    _jsonl(src, [{"id": 1, "title": "A", "text": "First page."}, {"id": given, "title": "B", "text": "Second."}])
    with pytest.raises(InputError, match="out of range") as info:
        build_index([src], tmp_path / "index", indexes=())
    assert "pages.jsonl" in str(info.value) and "line 2" in str(info.value)


def test_a_fifo_dump_is_refused(tmp_path):
    fifo = tmp_path / "dump.xml"
    os.mkfifo(fifo)
    with pytest.raises(WikigroundError, match="not a regular file"):
        build_index([fifo], tmp_path / "index", indexes=())


@pytest.fixture
def one_page(tmp_path):
    src = tmp_path / "pages.jsonl"
    _jsonl(src, [{"id": 1, "title": "Aristotle", "text": "Aristotle was a Greek philosopher."}])
    return src


def test_a_symlinked_out_is_followed_and_the_link_kept(tmp_path, one_page):
    target = tmp_path / "real-index"
    build_index([one_page], target, indexes=())
    link = tmp_path / "current"
    link.symlink_to(target, target_is_directory=True)
    first = json.loads((target / "manifest.json").read_text())["build_id"]
    build_index([one_page], link, indexes=())
    assert link.is_symlink() and link.resolve() == target.resolve()
    assert json.loads((target / "manifest.json").read_text())["build_id"] != first  # the target was rebuilt
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".") and p.is_symlink()]


def test_an_out_under_a_file_is_a_clear_error(tmp_path, one_page):
    from wikiground.errors import ConfigError

    blocker = tmp_path / "FILE"
    blocker.write_text("not a folder")
    with pytest.raises(ConfigError, match="which is a file"):
        build_index([one_page], blocker / "sub", indexes=())
