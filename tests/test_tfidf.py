"""TF-IDF backend over a small store of real HotpotQA-2017 abstracts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import duckdb
import numpy as np
import pytest

from indexer.schema import DDL
from tests.conftest import ROOT, SHARED

N_PASSAGES = 200
STEP = 28  # every 28th abstract: a spread over the alphabetically sorted file


def make_store(path: Path, *, n: int = N_PASSAGES, step: int = STEP) -> list[dict]:
    """A store with one passage per abstract (passage ids 0..n-1); returns the records."""
    lines = (SHARED / "corpora" / "hotpotqa2017_abstracts.jsonl").read_text(encoding="utf-8").splitlines()
    recs = [json.loads(line) for line in lines[::step][:n]]
    con = duckdb.connect(str(path))
    con.execute(DDL)
    con.executemany(
        "INSERT INTO passages VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (i, 5000 + i, 0, " ".join(s.strip() for s in r["sentences"]), r["title"], "", "text", 0)
            for i, r in enumerate(recs)
        ],
    )
    con.close()
    return recs


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from backends import tfidf

    root = tmp_path_factory.mktemp("tfidf")
    recs = make_store(root / "wiki.duckdb")
    entry = tfidf.build(root / "wiki.duckdb", root / "tfidf")
    return root, recs, entry


@pytest.fixture(scope="module")
def backend(built):
    from backends import tfidf

    return tfidf.load(built[0] / "tfidf")


def test_manifest_entry(built):
    _, recs, entry = built
    assert entry["type"] == "tfidf" and entry["documents"] == len(recs)
    assert entry["params"]["vectorizer"]["ngram_range"] == [1, 2]
    assert entry["params"]["vectorizer"]["sublinear_tf"] is True
    assert entry["params"]["vocabulary_size"] > 1000
    assert entry["build_seconds"] >= 0


def test_query_vector_matches_sklearn(built, backend):
    """The query side (vocabulary.json + idf.npy, no pickle) equals a fitted TfidfVectorizer's transform."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    from backends.encoder import passage_text

    root, recs, _ = built
    docs = [passage_text(r["title"], "", " ".join(s.strip() for s in r["sentences"])) for r in recs]
    p = dict(backend.params["vectorizer"])
    p["ngram_range"] = tuple(p["ngram_range"])
    p["dtype"] = np.float32
    vec = TfidfVectorizer(**p).fit(docs)
    assert vec.vocabulary_ == backend.vocabulary
    for query in [
        "Who founded Pershing Square Capital Management?",
        "Båstad clay courts tennis 1972",
        recs[7]["sentences"][0],
    ]:
        want = vec.transform([query]).toarray()[0]
        cols, weights = backend.vectorize(query)
        got = np.zeros_like(want)
        got[cols] = weights
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_search_equals_brute_force(backend):
    dense = backend.matrix.toarray()
    for query in ["American film directed in 1945", "genus of orchids", "football season club league"]:
        cols, weights = backend.vectorize(query)
        scores = dense[:, cols] @ weights
        hits = backend.search(query, k=5)
        assert [h.rank for h in hits] == [1, 2, 3, 4, 5]
        want = sorted(range(len(scores)), key=lambda i: (-scores[i], i))[:5]
        assert [h.passage_id for h in hits] == want
        np.testing.assert_allclose([h.score for h in hits], scores[want], rtol=1e-5)
        assert all(h.channel == "tfidf" and h.page_id == 5000 + h.passage_id for h in hits)


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


def test_plain_files_no_pickle(built):
    folder = built[0] / "tfidf"
    names = {p.name for p in folder.iterdir()}
    assert {"matrix.npz", "vocabulary.json", "idf.npy", "params.json"} <= names
    for p in folder.iterdir():
        assert not p.name.endswith((".pkl", ".pickle", ".joblib"))
        assert not p.read_bytes()[:1] == b"\x80", f"{p} looks like a pickle"
        if p.suffix == ".npy":
            np.load(p, allow_pickle=False)
    import scipy.sparse

    assert scipy.sparse.load_npz(folder / "matrix.npz").format == "csc"


def test_missing_and_corrupt(tmp_path, built):
    from backends import tfidf
    from wikiground.errors import IndexCorruptError, IndexMissingError

    with pytest.raises(IndexMissingError):
        tfidf.load(tmp_path)
    import shutil

    copy = tmp_path / "tfidf"
    shutil.copytree(built[0] / "tfidf", copy)
    (copy / "idf.npy").write_bytes(b"not a numpy file")
    with pytest.raises(IndexCorruptError, match="idf|unreadable"):
        tfidf.load(copy)


def test_backend_imports_are_lazy():
    code = (
        "import sys, backends.dense, backends.tfidf, backends.dense.embed, backends.encoder, indexer.embed\n"
        "heavy = [m for m in ('torch', 'faiss', 'sklearn', 'sentence_transformers', 'transformers', 'onnxruntime') "
        "if m in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
