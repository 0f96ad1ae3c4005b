"""``wikiground compact`` over an index with a dense channel (the gensim fixture's BM25, dense and TF-IDF, updated
as ``tests/test_update.py`` updates it): the vectors of the passages that survived are carried from the base, not
embedded again; only the shards holding a changed or new passage are encoded."""

from __future__ import annotations

import shutil

import duckdb
import numpy as np
import pytest

from backends.delta_store import write_parts
from backends.dense import embed
from backends.encoder import passage_text
from indexer.compact import compact_index
from indexer.update import update_index
from retriever import Retriever
from tests.support.wikidump import read_pages
from tests.test_update import CLAIMS, DELETED, EDITED, MOVED, _inputs
from wikiground.layout import store_path


def _vectors_by_text(index) -> dict[str, np.ndarray]:
    """Each embedded passage's text -> its vector (the dense index embeds every passage of a small store)."""
    vectors = np.load(index / "dense" / "vectors.npy")
    with duckdb.connect(str(store_path(index)), read_only=True) as con:
        rows = con.execute("SELECT passage_id, title, heading_path, text FROM passages ORDER BY passage_id").fetchall()
    assert len(rows) == len(vectors)
    return {passage_text(t, h, x): vectors[pid] for pid, t, h, x in rows}


@pytest.fixture(scope="module")
def compacted(gensim_index, gensim_dump, tmp_path_factory):
    index = tmp_path_factory.mktemp("compact-dense") / "index"
    shutil.copytree(gensim_index, index)
    pages = read_pages(gensim_dump, [EDITED, DELETED, MOVED])
    dump, events = _inputs(tmp_path_factory.mktemp("inputs"), pages)
    update_index(index, [dump], [events], workers=1, prepare=write_parts)
    before = _vectors_by_text(index)
    encoded: list[tuple[int, int]] = []
    original = embed._encode_shards

    def recording(con, db_path, shards_dir, todo, *args, **kwargs):
        encoded.extend(todo)
        return original(con, db_path, shards_dir, todo, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(embed, "_encode_shards", recording)
        result = compact_index(index, force=True)
    assert result["compacted"]
    return index, before, encoded


def test_only_the_shards_of_changed_passages_are_embedded_again(compacted):
    index, before, encoded = compacted
    after = _vectors_by_text(index)
    with duckdb.connect(str(store_path(index)), read_only=True) as con:
        n = con.execute("SELECT count(*) FROM passages").fetchone()[0]
        changed = con.execute(
            "SELECT min(passage_id) FROM passages WHERE page_id IN (SELECT page_id FROM pages WHERE title IN (?, ?))",
            [EDITED, "Achilles (hero)"],
        ).fetchone()[0]
    embedded = sum(b - a for a, b in encoded)
    assert encoded and 0 < embedded < n and all(b > changed for _, b in encoded)  # a shard of survivors: carried
    carried = [t for t in after if t in before]
    assert len(carried) > n // 2
    assert all(np.array_equal(after[t], before[t]) for t in carried)
    assert not (index.parent / f"{index.name}.survivors.npy").exists()
    assert not list(index.parent.glob("*.survivors.npy"))


def test_the_compacted_dense_channel_finds_the_new_text(compacted):
    index = compacted[0]
    with Retriever.open(index, channels="dense") as r:
        found = r.search(CLAIMS[0], 5, channels="dense", passages=True).evidence
    assert found[0].title == EDITED and found[0].origin == "local"
