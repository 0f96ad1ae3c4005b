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
