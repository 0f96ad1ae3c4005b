"""TF-IDF backend (hashed uni+bigrams, term-major impact-ordered postings) over real HotpotQA-2017 abstracts."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import numpy as np
import pytest

from backends import tfidf_postings
from indexer.schema import DDL
from tests.conftest import DATA, ROOT

N_PASSAGES = 200
STEP = 28  # every 28th abstract: a spread over the alphabetically sorted file
N_FEATURES = 2**18  # small enough for scikit-learn's reference pipeline, which holds arrays of every bucket
QUERIES = [
    "Who founded Pershing Square Capital Management?",
    "Båstad clay courts tennis 1972",
    "American film directed in 1945",
    "genus of orchids",
    "football season club league",
    "the of and in the",
]


def make_store(path: Path, *, n: int = N_PASSAGES, step: int = STEP) -> list[dict]:
    """A store with one passage per abstract (passage ids 0..n-1); returns the records."""
    lines = (DATA / "corpora" / "hotpotqa2017_abstracts.jsonl").read_text(encoding="utf-8").splitlines()
    recs = [json.loads(line) for line in lines[::step][:n]]
    con = duckdb.connect(str(path))
    con.execute(DDL)
    rows = [
        (i, 5000 + i, 0, " ".join(s.strip() for s in r["sentences"]), r["title"], "", "text", 0)
        for i, r in enumerate(recs)
    ]
    if rows:
        con.executemany("INSERT INTO passages VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
    con.close()
    return recs


def _docs(recs: list[dict]) -> list[str]:
    from backends.encoder import passage_text

    return [passage_text(r["title"], "", " ".join(s.strip() for s in r["sentences"])) for r in recs]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from backends import tfidf

    root = tmp_path_factory.mktemp("tfidf")
    recs = make_store(root / "wiki.duckdb")
    entry = tfidf.build(root / "wiki.duckdb", root / "tfidf", n_features=N_FEATURES)
    return root, recs, entry


@pytest.fixture(scope="module")
def backend(built):
    from backends import tfidf

    return tfidf.load(built[0] / "tfidf")


@pytest.fixture(scope="module")
def reference(built):
    """scikit-learn's own pipeline over the same passages: HashingVectorizer counts, then TfidfTransformer; its
    matrix restricted to the filled buckets (columns in bucket order, as the backend numbers its terms)."""
    from sklearn.feature_extraction.text import TfidfTransformer

    from backends import tfidf_postings

    params = json.loads((built[0] / "tfidf" / "params.json").read_text())["vectorizer"]
    hv = tfidf_postings.hasher(params)
    counts = hv.transform(_docs(built[1])).tocsc()
    tt = TfidfTransformer(norm="l2", sublinear_tf=True, smooth_idf=True).fit(counts)
    filled = np.flatnonzero(np.diff(counts.indptr))
    return hv, tt, filled, tt.transform(counts).tocsc()[:, filled].astype(np.float32)


def _sklearn_query(reference, query: str) -> np.ndarray:
    """scikit-learn's vector of the query over the filled buckets: buckets no passage filled are dropped first,
    as a TfidfVectorizer drops words outside its vocabulary."""
    hv, tt, filled, _ = reference
    counts = hv.transform([query])
    counts.data[~np.isin(counts.indices, filled)] = 0
    counts.eliminate_zeros()
    return tt.transform(counts).tocsc()[:, filled].toarray()[0]


def _tail(backend, t: int, count: int) -> tuple[np.ndarray, np.ndarray]:
    """(ids, weights) of the last ``count`` postings of term ``t``, as a search reads them."""
    ends, take = np.array([backend.indptr[t + 1]]), np.array([count])
    wlo, wstep = backend.wlo[[t]], backend.wstep[[t]]
    return tfidf_postings.read_lists(
        backend.indices, backend.weights, ends, take, wlo, wstep, backend.params["id_bits"]
    )


def _list(backend, t: int) -> tuple[np.ndarray, np.ndarray]:
    return _tail(backend, t, int(backend.indptr[t + 1] - backend.indptr[t]))


def _dense_query(backend, query: str) -> np.ndarray:
    tids, weights = backend.vectorize(query)
    out = np.zeros(len(backend.buckets), dtype=np.float32)
    out[tids] = weights
    return out


def test_manifest_entry(built):
    _, recs, entry = built
    assert entry["type"] == "tfidf" and entry["documents"] == len(recs)
    vec = entry["params"]["vectorizer"]
    assert vec["ngram_range"] == [1, 2] and vec["sublinear_tf"] is True and vec["n_features"] == N_FEATURES
    assert entry["params"]["format_version"] == 4
    assert entry["params"]["id_bits"] == (N_PASSAGES - 1).bit_length()  # 200 passages: ids of 8 bits
    assert entry["params"]["terms"] > 1000 and entry["params"]["nnz"] > entry["params"]["terms"]
    assert entry["build_seconds"] >= 0


def test_arrays_are_memory_mapped(backend):
    for name in ("buckets", "idf", "indptr", "indices", "weights", "wlo", "wstep"):
        assert isinstance(getattr(backend, name), np.memmap), name
    assert not hasattr(backend, "vocabulary") and not hasattr(backend, "matrix")


def test_postings_equal_sklearn_tfidf_of_hashed_counts(backend, reference):
    """Each term's posting list is exactly the column scikit-learn computes for its hash bucket."""
    _, tt, filled, matrix = reference
    buckets = np.asarray(backend.buckets)
    assert np.array_equal(buckets, filled)  # every filled bucket, sorted
    np.testing.assert_allclose(backend.idf, tt.idf_[buckets], rtol=1e-6)
    for t in range(0, len(buckets), 97):
        col = matrix[:, t]
        rows, vals = _list(backend, t)
        assert np.all(np.diff(vals) >= 0)  # impact order: the tail weighs most
        assert sorted(rows.tolist()) == sorted(col.indices.tolist())
        # A weight is stored as one of 256 steps of its list's log range: back within half a step.
        half_step = float(np.exp(backend.wstep[t] / 2)) - 1
        np.testing.assert_allclose(vals, col.toarray()[rows, 0], rtol=half_step + 1e-5)


def test_query_vector_matches_sklearn(built, backend, reference):
    for query in [*QUERIES, "zxqv Pershing zxqv", built[1][7]["sentences"][0]]:
        want = _sklearn_query(reference, query)
        np.testing.assert_allclose(_dense_query(backend, query), want, rtol=1e-5, atol=1e-6)


def test_hashing_of_tokens_matches_the_vectorizer(backend, reference):
    """idf_of hashes bare words to the buckets the n-gram hasher gives them; a word no passage holds is rarest."""
    hv, tt, _, _ = reference
    words = ["pershing", "the", "tennis", "zxqvbnotaword"]
    got = backend.idf_of(words)
    for word, idf in zip(words[:3], got):
        (bucket,) = hv.transform([word]).indices
        assert idf == pytest.approx(float(tt.idf_[bucket]), rel=1e-6)
    assert got[3] == pytest.approx(float(np.max(backend.idf))) and got[1] < got[0]
    assert backend.idf_of([]) == []


def test_bounded_build_with_small_batches_and_many_ranges_is_identical(built, tmp_path, monkeypatch):
    """Hashed by 2 processes in 7-passage batches, spilled to 256 range files of ~160 entries: byte-identical."""
    from backends import tfidf, tfidf_postings

    assert tfidf_postings.range_count(N_PASSAGES, N_FEATURES, 300) == 256
    seen = []
    real_spill = tfidf_postings.spill
    monkeypatch.setattr(tfidf, "BATCH_ROWS", 7)
    monkeypatch.setattr(tfidf_postings, "SPILL_ENTRIES", 300)

    def spy(batches, spill_dir, ranges, n_features):
        sizes = []
        n = real_spill((sizes.append(len(b[0]) - 1) or b for b in batches), spill_dir, ranges, n_features)
        seen.append((ranges, max(sizes), len(list(spill_dir.glob("range-*.bin")))))
        return n

    monkeypatch.setattr(tfidf_postings, "spill", spy)
    monkeypatch.setattr(tfidf, "PARALLEL_MIN_PASSAGES", 100)  # hashed by worker processes
    monkeypatch.setattr(tfidf, "BATCH_THREADS", 2)
    tfidf.build(built[0] / "wiki.duckdb", tmp_path / "small", n_features=N_FEATURES)
    assert seen == [(256, 7, 256)]
    assert not list((tmp_path / "small").glob(".spill-*"))  # spill files removed
    for name in tfidf_postings.FILES:
        assert (tmp_path / "small" / name).read_bytes() == (built[0] / "tfidf" / name).read_bytes(), name


@pytest.mark.parametrize("keep", [tfidf_postings.KEEP, 40])
def test_a_range_too_big_to_hold_is_read_in_pieces_and_gives_the_same_files(built, tmp_path, monkeypatch, keep):
    """One range of all the buckets, held at most 150 entries at a time: its lists are written in runs, and the
    lists of more than 150 postings (common words') keep their highest weights as they pass. Byte-identical to the
    build that holds each range whole."""
    from backends import tfidf, tfidf_postings

    runs: list[int] = []
    real_spans = tfidf_postings.spans
    monkeypatch.setattr(tfidf_postings, "spans", lambda df, cap: runs.append(cap) or real_spans(df, cap))
    monkeypatch.setattr(tfidf, "POSTING_BUDGET", keep)
    whole = tfidf.build(built[0] / "wiki.duckdb", tmp_path / "whole", n_features=N_FEATURES)
    assert runs == []
    real = tfidf_postings.build_postings
    monkeypatch.setattr(
        tfidf_postings, "build_postings", lambda *a, **kw: real(*a, **kw, spill_entries=10**9, piece=150)
    )
    pieces = tfidf.build(built[0] / "wiki.duckdb", tmp_path / "pieces", n_features=N_FEATURES)
    assert runs == [150] and whole["params"]["nnz"] == pieces["params"]["nnz"]
    df = np.diff(np.asarray(tfidf.load(built[0] / "tfidf").indptr))  # the lists uncut
    assert df.sum() > 20 * 150 and df.max() > 150  # many runs, and a list streamed past the cap
    for name in tfidf_postings.FILES:
        assert (tmp_path / "pieces" / name).read_bytes() == (tmp_path / "whole" / name).read_bytes(), name
    assert not list((tmp_path / "pieces").glob(".spill-*"))


def test_min_df_drops_buckets_seen_once(built, tmp_path):
    from backends import tfidf

    entry = tfidf.build(built[0] / "wiki.duckdb", tmp_path / "df2", min_df=2)  # and the default 2**26 buckets
    assert entry["params"]["vectorizer"]["n_features"] == 2**26
    b = tfidf.load(tmp_path / "df2")
    assert entry["params"]["terms"] < built[2]["params"]["terms"] / 2
    assert np.diff(b.indptr).min() >= 2
    assert b.search("hedge fund run by Bill Ackman", k=1)[0].title == "Pershing Square Capital Management"


def test_the_last_pass_deletes_each_spill_file_once_read(built, tmp_path, monkeypatch):
    """The spill shrinks while the postings grow: the peak temporary disk is the spill, not the spill plus them."""
    from backends import tfidf, tfidf_postings

    left: list[int] = []
    real_fromfile = np.fromfile

    def spy(path, dtype, **kw):
        if isinstance(path, Path) and path.suffix == ".bin":  # a spill file read whole (np.load reads a kept file)
            left.append(len(list(path.parent.glob("range-*.bin"))))
        return real_fromfile(path, dtype=dtype, **kw)

    monkeypatch.setattr(tfidf_postings.np, "fromfile", spy)
    tfidf.build(built[0] / "wiki.duckdb", tmp_path / "t", n_features=N_FEATURES)
    ranges = len(left) // 2
    assert left[:ranges] == [ranges] * ranges  # pass 2 reads them all
    assert left[ranges:] == list(range(ranges, 0, -1))  # pass 3 deletes each after reading it


def test_lists_keep_their_high_weight_end(built, backend, tmp_path, monkeypatch):
    """A list keeps at most the postings one query may read of it (the posting budget): its highest weights, so a
    search within that budget answers as over the whole lists."""
    from backends import tfidf

    monkeypatch.setattr(tfidf, "POSTING_BUDGET", 40)
    entry = tfidf.build(built[0] / "wiki.duckdb", tmp_path / "cut", n_features=N_FEATURES)
    cut = tfidf.load(tmp_path / "cut")
    assert entry["params"]["postings_per_term"] == 40 and cut.posting_budget == 40
    full_lengths, cut_lengths = np.diff(np.asarray(backend.indptr)), np.diff(np.asarray(cut.indptr))
    assert cut_lengths.max() == 40 and full_lengths.max() > 40
    assert np.array_equal(cut_lengths, np.minimum(full_lengths, 40))
    (the,) = backend.vectorize("the")[0]
    assert _tail(cut, the, 40)[0].tolist() == _tail(backend, the, 40)[0].tolist()
    over_full = tfidf.TfidfBackend(built[0] / "tfidf", posting_budget=40)
    for query in QUERIES:
        assert [h.passage_id for h in cut.search(query, k=5)] == [h.passage_id for h in over_full.search(query, k=5)]


def test_search_equals_brute_force(backend, reference):
    """Over the stored weights, search is exact; against scikit-learn's float weights, within the stored steps."""
    stored = np.zeros(reference[3].shape, dtype=np.float32)
    for t in range(len(backend.buckets)):
        ids, weights = _list(backend, t)
        stored[ids, t] = weights
    worst_step = float(np.exp(np.max(backend.wstep) / 2)) - 1
    for query in QUERIES:
        scores = stored @ _dense_query(backend, query)
        hits = backend.search(query, k=5)
        assert [h.rank for h in hits] == [1, 2, 3, 4, 5]
        np.testing.assert_allclose([h.score for h in hits], np.sort(scores)[::-1][:5], rtol=1e-5)
        np.testing.assert_allclose(scores[[h.passage_id for h in hits]], [h.score for h in hits], rtol=1e-5)
        exact = reference[3].toarray() @ _dense_query(backend, query)
        np.testing.assert_allclose(exact[[h.passage_id for h in hits]], [h.score for h in hits], rtol=worst_step)
        assert all(h.channel == "tfidf" and h.page_id == 5000 + h.passage_id for h in hits)


def test_frequent_terms_are_capped_to_the_posting_budget(built, backend):
    from backends import tfidf

    lengths = np.array([5, 1000, 40, 3000])
    assert tfidf.water_fill(lengths, 10_000).tolist() == [5, 1000, 40, 3000]  # fits: read whole
    assert tfidf.water_fill(lengths, 1045).tolist() == [5, 500, 40, 500]
    assert tfidf.water_fill(lengths, 1045).sum() <= 1045
    capped = tfidf.TfidfBackend(built[0] / "tfidf", posting_budget=60)
    query = "The hedge fund of the investor Bill Ackman, in New York"
    tids, weights = capped.vectorize(query)
    lengths = np.diff(np.asarray(capped.indptr))[tids]
    assert lengths.sum() > 200 and lengths.max() > 60  # "the", "of", "in" span most passages
    ids, scores = capped._scores(tids, weights)
    assert len(ids) <= 60 and len(set(ids.tolist())) == len(ids)
    assert capped.search(query, k=1)[0].title == backend.search(query, k=1)[0].title
    # What a cut list keeps is its high-weight end: the passages where "the" weighs most.
    (the,) = capped.vectorize("the")[0]
    top = capped.search("the", k=5)
    assert {h.passage_id for h in top} <= set(_tail(capped, the, 60)[0].tolist())
    assert [h.score for h in top] == pytest.approx(sorted(_list(capped, the)[1].tolist())[::-1][:5], rel=1e-5)


def test_batch_equals_single(backend, built):
    """A batch's hits are those of one search at a time, scored in the calling thread by default, or on threads
    when asked."""
    queries = [*QUERIES, "", None, "?!", *(r["sentences"][0] for r in built[1][::9])]
    single = [backend.search(q, 7) if isinstance(q, str) else [] for q in queries]
    assert backend.search_batch(queries, 7) == single
    for threads in (1, 2, 4):
        assert backend.search_batch(queries, 7, threads=threads) == single
    assert backend.search_batch([], 5) == [] and backend.search_batch(["x y"], 0) == [[]]


def test_finds_pages_by_content(backend, built):
    recs = built[1]
    title_of = {i: r["title"] for i, r in enumerate(recs)}
    for query, title in [
        ("hedge fund run by Bill Ackman", "Pershing Square Capital Management"),
        ("plant family of celery, carrot and parsley", "Apiaceae"),
        ("inventor of the thermal shielding material Starlite", "Maurice Ward"),
    ]:
        hits = backend.search(query, k=3)
        assert title in [title_of[h.passage_id] for h in hits], (query, hits)
        assert hits[0].title == title


@pytest.mark.parametrize("query", ["", "   \n\t", "?!...,;", "a"])
def test_empty_queries(backend, query):
    assert backend.search(query) == []
    assert backend.search_batch([query, query]) == [[], []]


def test_k_and_odd_input(backend):
    assert len(backend.search("the season", k=3)) == 3
    many = backend.search("the", k=10_000)
    assert 3 < len(many) <= len(backend)
    assert backend.search("the", k=0) == []
    long_query = " ".join(["football season league club"] * 5000)
    assert backend.search(long_query, k=5)
    assert backend.search("Květa Peschke tennis", k=1)[0].title == "Květa Peschke"
    assert backend.search("kveta peschke", k=1)[0].title == "Květa Peschke"  # strip_accents
    batch = backend.search_batch(["football season", "", "American film"], k=2)
    assert [len(b) for b in batch] == [2, 0, 2]


def test_score_texts(backend):
    scores = backend.score_texts(
        "hedge fund Bill Ackman",
        [
            "Pershing Square is a hedge fund founded by Bill Ackman.",
            "Apiaceae is a family of flowering plants.",
            "",
            "!!",
        ],
    )
    assert scores[0] > 0.3 and scores[1] == 0.0 and scores[2:] == [0.0, 0.0]
    assert backend.score_texts("", ["anything"]) == [0.0]
    assert backend.score_texts("hedge fund", []) == []
    same = backend.score_texts("hedge fund Bill Ackman", ["hedge fund Bill Ackman"])[0]
    assert same == pytest.approx(1.0, abs=1e-5)


def test_empty_store(tmp_path):
    from backends import tfidf

    make_store(tmp_path / "wiki.duckdb", n=0)
    entry = tfidf.build(tmp_path / "wiki.duckdb", tmp_path / "tfidf")
    assert entry["documents"] == 0 and entry["params"]["nnz"] == 0
    b = tfidf.load(tmp_path / "tfidf")
    assert b.search("anything at all") == [] and b.search_batch(["a b", "c d"]) == [[], []]
    assert b.idf_of(["word"]) == [1.0]


def test_plain_files_no_pickle(built):
    folder = built[0] / "tfidf"
    names = {p.name for p in folder.iterdir()}
    assert {"buckets.npy", "idf.npy", "indptr.npy", "indices.npy", "weights.npy", "params.json"} <= names
    assert not names & {"matrix.npz", "vocabulary.json"}
    for p in folder.iterdir():
        assert not p.name.endswith((".pkl", ".pickle", ".joblib"))
        assert not p.read_bytes()[:1] == b"\x80", f"{p} looks like a pickle"
        if p.suffix == ".npy":
            np.load(p, allow_pickle=False)


def test_missing_and_corrupt(tmp_path, built):
    from backends import tfidf
    from wikiground.errors import IndexCorruptError, IndexMissingError

    with pytest.raises(IndexMissingError):
        tfidf.load(tmp_path)
    copy = tmp_path / "tfidf"
    shutil.copytree(built[0] / "tfidf", copy)
    (copy / "idf.npy").write_bytes(b"not a numpy file")
    with pytest.raises(IndexCorruptError, match="idf.npy"):
        tfidf.load(copy)
    shutil.copy(built[0] / "tfidf" / "idf.npy", copy / "idf.npy")
    np.save(copy / "indptr.npy", np.zeros(3, dtype=np.int64))
    with pytest.raises(IndexCorruptError, match="sizes disagree"):
        tfidf.load(copy)


def test_old_format_folder_says_rebuild(tmp_path, built):
    """A folder of the format-1 layout (vocabulary.json + matrix.npz) is refused with a word to rebuild it."""
    import backends
    from backends import tfidf
    from wikiground.errors import IndexFormatError

    old = tmp_path / "idx" / "tfidf"
    old.mkdir(parents=True)
    for name in ("passage_page.npy", "page_ids.npy", "page_titles.bin", "page_title_offsets.npy"):
        shutil.copy(built[0] / "tfidf" / name, old / name)
    (old / "vocabulary.json").write_text('{"pershing": 0}')
    np.save(old / "idf.npy", np.ones(1, dtype=np.float32))
    params = {"type": "tfidf", "format_version": 1, "count": N_PASSAGES, "layout": "csc", "vectorizer": {}}
    (old / "params.json").write_text(json.dumps(params))
    for load in (lambda: tfidf.load(old), lambda: backends.load("tfidf", old.parent)):
        with pytest.raises(
            IndexFormatError, match=r"older wikiground \(format 1\); this version reads format 4: rebuild"
        ):
            load()


def test_backend_imports_are_lazy():
    code = (
        "import sys, backends.dense, backends.tfidf, backends.dense.embed, backends.encoder, indexer.embed\n"
        "heavy = [m for m in ('torch', 'faiss', 'sklearn', 'sentence_transformers', 'transformers', 'onnxruntime',"
        " 'scipy') if m in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_a_build_that_would_not_fit_the_disk_is_refused_before_it_starts(built, tmp_path, monkeypatch):
    from backends import tfidf, tfidf_postings
    from wikiground.errors import BuildError

    monkeypatch.setattr(tfidf_postings, "ENTRIES_PER_PASSAGE", 10**15)
    with pytest.raises(BuildError, match=r"needs about .* GiB of disk"):
        tfidf.build(built[0] / "wiki.duckdb", tmp_path / "big")
    assert not list((tmp_path / "big").glob(".spill-*"))


def test_passage_table_gives_each_passages_page_and_title(built):
    from backends.passage_table import PassageTable

    root, recs, _ = built
    table = PassageTable(root / "tfidf")
    ids = [7, 0, N_PASSAGES - 1, 7, 42]
    # make_store: passage i is page 5000 + i, titled as its abstract.
    assert table.pages_and_titles(ids) == ([5000 + i for i in ids], [recs[i]["title"] for i in ids])
    assert table.pages_and_titles([]) == ([], [])


def test_spill_entries_keep_their_passage_across_long_gaps(tmp_path):
    """A spill entry holds its passage as the gap from its file's previous entry (16 bits); gaps past that are
    carried by filler entries, and every (bucket, passage, count) reads back as written, fillers dropped."""
    from backends import tfidf_postings as tp

    rng = np.random.default_rng(7)
    batches, expected, n = [], [], 0
    for rows, density in ((5, 1.0), (200_000, 0.00002), (3, 1.0), (140_000, 0.0), (4, 1.0)):
        lengths = (rng.random(rows) < density) * rng.integers(1, 4, rows)
        indptr = np.concatenate([[0], np.cumsum(lengths)])
        indices = rng.integers(0, 64, int(indptr[-1])).astype(np.int32)
        counts = rng.integers(1, 9, int(indptr[-1])).astype(np.float32)
        docs = np.repeat(np.arange(n, n + rows), lengths)
        expected += list(zip(indices.tolist(), docs.tolist(), counts.tolist(), strict=True))
        batches.append((indptr, indices, counts))
        n += rows
    assert tp.spill(iter(batches), tmp_path, 4, 64) == n
    raw = np.concatenate([np.fromfile(p, dtype=tp.SPILL) for p in sorted(tmp_path.glob("range-*.bin"))])
    assert tp.SPILL.itemsize == 6 and (raw["key"] == 0).sum() >= 2  # the long gaps needed fillers
    for piece in (10**9, 7):  # a range read whole, and in pieces of 7 records: the gaps carry across pieces
        got = []
        for r in range(4):
            for rec in tp.range_entries(tp.range_path(tmp_path, r), r * 16, 16, False, piece):
                got += list(zip(rec["bucket"].tolist(), rec["doc"].tolist(), rec["tf"].tolist(), strict=True))
        assert sorted(got) == sorted(expected)


def test_the_entries_held_at_once_shrink_with_the_budget_and_the_corpus(built, tmp_path, monkeypatch):
    """The passes over the spill hold what the budget's share leaves beside a norm per passage, between a floor and
    SPILL_ENTRIES; the build passes its budget's share down."""
    import backends
    from backends import tfidf
    from backends import tfidf_postings as tp

    assert tp.piece_entries(10**6, None) == tp.SPILL_ENTRIES
    assert tp.piece_entries(40 * 10**6, int(0.4 * 4 * 2**30)) == tp.SPILL_ENTRIES  # the default budget at enwiki size
    small = [tp.piece_entries(n, 400 << 20) for n in (10**6, 10**7, 3 * 10**7)]
    assert tp.SPILL_ENTRIES > small[0] > small[1] > small[2] >= tp.MIN_PIECE_ENTRIES
    assert tp.piece_entries(10**9, 400 << 20) == tp.MIN_PIECE_ENTRIES
    seen = []
    real = tp.build_postings
    monkeypatch.setattr(tp, "build_postings", lambda *a, **kw: seen.append(kw["memory"]) or real(*a, **kw))

    backends.build(
        "tfidf", built[0] / "wiki.duckdb", tmp_path / "t", options={"n_features": N_FEATURES}, memory=1 << 30
    )
    assert seen == [int((1 << 30) * tfidf.POSTINGS_SHARE)]
