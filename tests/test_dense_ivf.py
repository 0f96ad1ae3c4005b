"""Dense IVF (backends/dense/ivf.py, 4-bit PQ fast-scan): the switch above a lowered threshold, PQ sizing, nprobe
chosen for recall@10 >= 0.95 and stored, the lists memory-mapped from their own file (the same answers as in RAM,
a cut file refused), and old IVF-PQ and IVF-SQ8 indexes still loading.

Two data sets: cheap synthetic vectors shaped like the scale benchmark's (passages as normalised mixtures
of 3-5 "sentence" vectors) for the recall checks, and real MiniLM vectors of HotpotQA abstracts for the
backend path."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.test_dense import PARAPHRASES
from tests.test_tfidf import make_store

DIM = 384
N_SYNTH = 4000


def mixtures(rng, base: np.ndarray, n: int, lo: int, hi: int) -> np.ndarray:
    """n unit vectors, each a weighted sum of lo..hi random rows of ``base``."""
    out = np.empty((n, base.shape[1]), dtype=np.float32)
    for i in range(n):
        rows = rng.choice(len(base), size=rng.integers(lo, hi + 1), replace=False)
        v = rng.dirichlet(np.ones(len(rows))) @ base[rows]
        out[i] = v / np.linalg.norm(v)
    return out


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    from backends.dense import ivf

    rng = np.random.default_rng(7)
    base = rng.standard_normal((600, DIM)).astype(np.float32)
    vecs = mixtures(rng, base, N_SYNTH, 3, 5)
    queries = mixtures(rng, base, 200, 1, 2)  # not in the corpus, like claims against passages
    folder = tmp_path_factory.mktemp("ivf")
    np.save(folder / "vectors.npy", vecs)
    params = ivf.build(folder / "vectors.npy", folder)
    return folder, vecs, queries, params


def test_pq_params_and_size(synth):
    from backends.dense import ivf

    folder, vecs, _, params = synth
    assert params["index_type"] == "ivf_pq4fs+rerank" and params["ivf_file"] == "ivf_pq4fs.faiss"
    assert params["lists_file"] == "ivf_pq4fs.lists"
    assert params["pq_m"] == 96 and params["pq_bits"] == 4 and params["bytes_per_vector"] == 56
    assert params["nlist"] == ivf.default_nlist(N_SYNTH) and params["train_vectors"] <= N_SYNTH
    lists = (folder / "ivf_pq4fs.lists").stat().st_size
    # codes + ids in whole blocks of 32 (each list's last one partly empty): no float vectors
    assert N_SYNTH * 56 <= lists < (N_SYNTH + 32 * params["nlist"]) * 56
    size = lists + (folder / "ivf_pq4fs.faiss").stat().st_size
    assert size == params["index_bytes"]
    fixed = params["nlist"] * DIM * 4 + 96 * 16 * (DIM // 96) * 4  # coarse centroids, PQ codebooks
    assert abs(ivf.estimate(N_SYNTH)["index_bytes"] - size) < 0.15 * (size - fixed)


def test_nprobe_chosen_for_recall(synth):
    _, _, _, params = synth
    curve = {int(p): r for p, r in params["nprobe_recall"].items()}
    assert params["recall_target"] == 0.95 and params["recall_at_10"] >= 0.95
    assert params["nprobe"] == max(curve) and curve[params["nprobe"]] == params["recall_at_10"]
    assert all(r < 0.95 for p, r in curve.items() if p < params["nprobe"])  # the smallest that reaches it
    assert params["recall_queries"] == 1000 and params["nprobe"] < params["nlist"]


def test_mmap_load_and_recall_on_new_queries(synth):
    import faiss

    from backends.dense import ivf

    folder, vecs, queries, params = synth
    index = ivf.load(folder, {**params, "count": N_SYNTH})
    lists = faiss.downcast_InvertedLists(faiss.extract_index_ivf(index).invlists)
    assert isinstance(lists, faiss.OnDiskInvertedLists)  # mapped from the file, not copied into RAM
    assert str(folder / "ivf_pq4fs.lists") in Path("/proc/self/maps").read_text()
    assert lists.prefetch_nthread == 0  # no prefetch threads started by each search
    assert faiss.extract_index_ivf(index).nprobe == params["nprobe"]
    found, scores = ivf.search(index, ivf.RowReader(folder / "vectors.npy"), queries, 10)
    truth = ivf.exact_top(vecs, queries, 10)
    assert ivf.recall_at(found, truth, 10) >= 0.9
    np.testing.assert_allclose(scores, np.take_along_axis(queries @ vecs.T, found, axis=1), atol=1e-5)
    one_probe, _ = ivf.search(index, ivf.RowReader(folder / "vectors.npy"), queries, 10, nprobe=1)
    assert ivf.recall_at(one_probe, truth, 10) < ivf.recall_at(found, truth, 10)


def test_given_nprobe_kept_and_measured(synth):
    from backends.dense import ivf

    folder, vecs, _, params = synth
    index = ivf.load(folder, {**params, "count": N_SYNTH})
    assert params["train_vectors"] == N_SYNTH  # every row trained on: the same held-out queries as the build
    tuned = ivf.tune_nprobe(index, ivf.RowReader(folder / "vectors.npy"), vecs, np.arange(N_SYNTH), nprobe=2)
    assert tuned["nprobe"] == 2 and list(tuned["nprobe_recall"]) == ["2"]
    assert tuned["recall_at_10"] == params["nprobe_recall"]["2"] < 0.95  # same held-out queries, same figure


def test_sizing_for_whole_wikipedia():
    from backends.dense import ivf

    est = ivf.estimate(40_000_000)
    assert est["bytes_per_vector"] == 56
    assert est["query_resident_bytes"] <= 4 * 10**9 and est["build_ram_bytes"] <= 8 * 10**9


def test_resource_check_says_so_before_building(synth, tmp_path, monkeypatch):
    from backends.dense import ivf
    from wikiground.errors import BuildError

    folder = synth[0]
    shutil.copy(folder / "vectors.npy", tmp_path / "vectors.npy")
    monkeypatch.setattr(ivf, "_mem_available", lambda: 1 << 20)
    with pytest.raises(BuildError, match=r"needs ~[0-9.]+ GB of RAM, 0\.0 GB available"):
        ivf.build(tmp_path / "vectors.npy", tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["vectors.npy"]


def test_row_reader(synth, tmp_path):
    from backends.dense import ivf
    from wikiground.errors import IndexCorruptError

    folder, vecs, _, _ = synth
    ids = np.array([0, 5, 6, N_SYNTH - 1])
    np.testing.assert_array_equal(ivf.RowReader(folder / "vectors.npy")(ids), vecs[ids])
    np.save(tmp_path / "f64.npy", vecs[:4].astype(np.float64))
    with pytest.raises(IndexCorruptError, match="f64.npy"):
        ivf.RowReader(tmp_path / "f64.npy")


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    """Real MiniLM vectors of 200 abstracts: an exact index and an IVF-PQ one (threshold lowered)."""
    from backends import dense

    root = tmp_path_factory.mktemp("dense_ivf")
    make_store(root / "wiki.duckdb")
    dense.build(root / "wiki.duckdb", root / "exact", keep_shards=True)
    shutil.copytree(root / "exact" / "shards", root / "ivf" / "shards")
    params = dense.assemble(root / "wiki.duckdb", root / "ivf", exact_threshold=100)
    return root, dense.load(root / "exact"), params


def test_backend_switches_to_ivf_pq(real):
    from backends import dense

    root, exact, params = real
    stored = json.loads((root / "ivf" / "params.json").read_text())
    assert stored == params and params["index_type"] == "ivf_pq4fs+rerank" and params["recall_at_10"] >= 0.95
    assert (root / "ivf" / "ivf_pq4fs.faiss").is_file() and (root / "ivf" / "ivf_pq4fs.lists").is_file()
    assert not (root / "exact" / "ivf_pq4fs.faiss").exists() and not (root / "exact" / "ivf_pq4fs.lists").exists()
    approx = dense.load(root / "ivf")
    assert approx.ivf is not None and approx.ivf.ntotal == 200
    for query, title in PARAPHRASES:
        want = exact.search(query, k=5)
        got = approx.search(query, k=5)
        assert title in [h.title for h in got[:3]]
        for h in got:  # re-ranked: exact cosines
            match = [w for w in want if w.passage_id == h.passage_id]
            assert not match or h.score == pytest.approx(match[0].score, abs=1e-5)


def test_an_ivf_index_of_an_older_format_gets_the_clear_error(real, tmp_path):
    """Before fast-scan the IVF index was 8-bit IVF-PQ (or IVF-SQ8) with its lists inside the one .faiss file."""
    from backends import dense
    from wikiground.errors import IndexCorruptError, IndexFormatError

    root, _, _ = real
    old = tmp_path / "old"
    shutil.copytree(root / "ivf", old, ignore=shutil.ignore_patterns("shards"))
    (old / "ivf_pq4fs.lists").unlink()
    (old / "ivf_pq4fs.faiss").rename(old / "ivf_pq.faiss")
    params = json.loads((old / "params.json").read_text())
    params.update(index_type="ivf_pq+rerank", ivf_file="ivf_pq.faiss")
    del params["lists_file"]
    (old / "params.json").write_text(json.dumps(params))
    with pytest.raises(IndexFormatError) as err:
        dense.load(old)
    assert str(err.value) == (
        f"{old}: built by an older wikiground (format 1 with index_type 'ivf_pq+rerank'); this version reads "
        "format 1 with index_type 'ivf_pq4fs+rerank': rebuild it with `wikiground index ...`"
    )
    params["index_type"] = "ivf_hnsw"
    (old / "params.json").write_text(json.dumps(params))
    with pytest.raises(IndexCorruptError, match="unknown dense index_type"):
        dense.load(old)


def test_nprobe_chosen_on_given_queries(synth):
    """Queries unlike the passages (mixtures of 1-2 "sentences", as claims are shorter than passages) choose their
    own nprobe, which reaches the target on them; params.json says what it was measured on."""
    from backends.dense import ivf

    folder, vecs, queries, params = synth
    index = ivf.load(folder, {**params, "count": N_SYNTH})
    rows = ivf.RowReader(folder / "vectors.npy")
    tuned = ivf.tune_nprobe(index, rows, vecs, np.arange(N_SYNTH), queries=queries[:100])
    assert tuned["recall_query_source"] == "100 given queries" and tuned["recall_queries"] == 100
    assert tuned["recall_at_10"] >= 0.95
    truth = ivf.exact_top(vecs, queries[:100], 10)
    found, _ = ivf.search(index, rows, queries[:100], 10, nprobe=tuned["nprobe"])
    assert ivf.recall_at(found, truth, 10) == pytest.approx(tuned["recall_at_10"], abs=1e-4)


def test_assemble_tunes_on_a_queries_file(real, tmp_path):
    from backends import dense
    from wikiground.errors import BuildError

    root, _, _ = real
    queries = tmp_path / "claims.jsonl"
    queries.write_text(
        "\n".join(json.dumps({"id": i, "claim": q}) for i, (q, _) in enumerate(PARAPHRASES)) + "\n\nplain line query\n"
    )
    assert dense.read_tune_queries(queries)[-1] == "plain line query"
    shutil.copytree(root / "ivf" / "shards", tmp_path / "ivf" / "shards")
    params = dense.assemble(root / "wiki.duckdb", tmp_path / "ivf", exact_threshold=100, tune_queries=queries)
    assert params["recall_query_source"] == f"{len(PARAPHRASES) + 1} given queries" and params["recall_at_10"] >= 0.95
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"claim": "fine"}\n{"title": "no text"}\n')
    with pytest.raises(BuildError, match=r"bad.jsonl:2: no claim"):
        dense.read_tune_queries(bad)
    bad.write_text('{"claim": \n')
    with pytest.raises(BuildError, match=r"bad.jsonl:1: not JSON"):
        dense.read_tune_queries(bad)


def test_mapped_lists_answer_as_in_ram(synth, tmp_path):
    """The lists written to their own file and mapped give the answers the index gave with its lists in RAM."""
    from backends.dense import ivf

    folder, vecs, queries, params = synth
    index, _ = ivf._train(vecs, params["nlist"], ivf.PQ_M, 1234)
    ivf._add(index, vecs)
    rows = ivf.RowReader(folder / "vectors.npy")
    in_ram = [ivf.search(index, rows, queries, 10, nprobe=p) for p in (1, 8, params["nlist"])]
    ivf._write_lists(index, tmp_path)
    import faiss

    faiss.write_index(index, str(tmp_path / ivf.IVF_FILE))
    mapped = ivf.load(tmp_path, {"index_type": ivf.INDEX_TYPE, "count": N_SYNTH})
    for p, (ids, scores) in zip((1, 8, params["nlist"]), in_ram):
        got_ids, got_scores = ivf.search(mapped, rows, queries, 10, nprobe=p)
        np.testing.assert_array_equal(got_ids, ids)
        np.testing.assert_array_equal(got_scores, scores)


def test_cut_or_missing_lists_file_refused(synth, tmp_path):
    from backends.dense import ivf
    from wikiground.errors import IndexCorruptError

    folder, _, _, params = synth
    for name in ("ivf_pq4fs.faiss", "ivf_pq4fs.lists"):
        shutil.copy(folder / name, tmp_path / name)
    lists = tmp_path / "ivf_pq4fs.lists"
    with open(lists, "r+b") as fh:
        fh.truncate(lists.stat().st_size - 100)
    with pytest.raises(IndexCorruptError, match=r"ivf_pq4fs\.lists: .* bytes, the index expects"):
        ivf.load(tmp_path, {**params, "count": N_SYNTH})
    lists.unlink()
    with pytest.raises(IndexCorruptError, match=r"ivf_pq4fs\.lists: missing"):
        ivf.load(tmp_path, {**params, "count": N_SYNTH})
