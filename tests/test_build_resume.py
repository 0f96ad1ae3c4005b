"""A failed index build keeps its dense embedding shards beside the index, and the next build resumes from them."""

from __future__ import annotations

import json
import logging

import pytest

from tests.conftest import DATA
from wikiground.errors import BuildError


@pytest.fixture()
def corpus(tmp_path):
    lines = (DATA / "corpora" / "hotpotqa2017_abstracts.jsonl").read_text(encoding="utf-8").splitlines()[:40]
    p = tmp_path / "abstracts.jsonl"
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return p


def test_failed_build_resumes_dense_from_shards(corpus, tmp_path, caplog):
    from indexer.build import build_index

    out = tmp_path / "idx"
    shards = tmp_path / ".idx.dense-shards"
    # The TF-IDF step fails after the dense step has embedded everything.
    with pytest.raises(BuildError):
        build_index(
            [corpus],
            out,
            indexes=("dense", "tfidf"),
            workers=1,
            index_options={"dense": {"shard_size": 16}, "tfidf": {"no_such_option": 1}},
        )
    assert not out.exists()
    kept = sorted(p.name for p in shards.glob("*.npy"))
    n = int(kept[-1].split("-")[1].split(".")[0])
    assert n >= 40 and len(kept) == -(-n // 16)  # every passage embedded, in 16-passage shards
    assert all(shards.joinpath(k).with_suffix(".sha256").is_file() for k in kept)

    # One shard lost: only it is re-encoded; the others are reused as they are.
    (shards / kept[1]).unlink()
    caplog.set_level(logging.INFO, logger="backends.dense.embed")
    manifest = build_index(
        [corpus], out, indexes=("dense", "tfidf"), workers=1, index_options={"dense": {"shard_size": 16}}
    )
    assert manifest["counts"]["passages"] == n
    assert (out / "dense" / "params.json").is_file()
    assert not shards.exists()  # cleaned up after success
    dense = json.loads((out / "dense" / "params.json").read_text())
    assert dense["count"] == n
    assert f"resuming: {len(kept) - 1} complete shards kept" in caplog.text


def test_stale_shards_from_other_text_are_not_reused(corpus, tmp_path):
    import numpy as np

    from indexer.build import build_index

    n = build_index([corpus], tmp_path / "store", indexes=(), workers=1)["counts"]["passages"]
    out = tmp_path / "idx"
    shards = tmp_path / ".idx.dense-shards"
    shards.mkdir()
    # A complete-looking shard whose digest does not match these passages (left by a build of other inputs).
    name = f"{0:012d}-{n:012d}"
    np.save(shards / f"{name}.npy", np.zeros((n, 384), dtype=np.float32))
    (shards / f"{name}.sha256").write_text("0" * 64 + "\n")
    build_index([corpus], out, indexes=("dense",), workers=1, index_options={"dense": {"shard_size": 64}})
    vecs = np.load(out / "dense" / "vectors.npy")
    assert vecs.shape == (n, 384)
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-3)  # re-encoded, not the stale zeros
