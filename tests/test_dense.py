"""Dense backend, encoder and resumable embedding shards over real HotpotQA-2017 abstracts."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import ROOT
from tests.test_tfidf import make_store

SHARD = 64  # 200 passages -> 4 shards, the last one short


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from backends import dense

    root = tmp_path_factory.mktemp("dense")
    recs = make_store(root / "wiki.duckdb")
    entry = dense.build(root / "wiki.duckdb", root / "dense", shard_size=SHARD, keep_shards=True)
    return root, recs, entry


@pytest.fixture(scope="module")
def backend(built):
    from backends import dense

    return dense.load(built[0])  # the index folder: dense/ is found inside


def test_manifest_and_params(built):
    from backends.encoder import WEIGHTS_SHA256

    root, recs, entry = built
    assert entry["type"] == "dense" and entry["documents"] == len(recs)
    params = json.loads((root / "dense" / "params.json").read_text())
    assert params["index_type"] == "exact" and params["count"] == len(recs)
    assert params["sha256"] == WEIGHTS_SHA256 and params["dim"] == 384 and params["normalize"] is True
    assert params["package_version"] == "0.1.0" and params["encoder_backend"] in ("onnx", "torch")
    vecs = np.load(root / "dense" / "vectors.npy", mmap_mode="r")
    assert vecs.dtype == np.float32 and vecs.shape == (len(recs), 384)
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-4)


PARAPHRASES = [
    ("plant family that includes celery, carrots and parsley", "Apiaceae"),
    ("a former hairdresser who invented a heat-resistant material", "Maurice Ward"),
    ("tiny crustaceans that live in caves and groundwater", "Stygobromus"),
    ("investment firm of Bill Ackman", "Pershing Square Capital Management"),
    ("French thinker who wrote about time and intuition and died in 1941", "Henri Bergson"),
]


@pytest.mark.parametrize("query,title", PARAPHRASES)
def test_paraphrase_found_top3(backend, query, title):
    hits = backend.search(query, k=3)
    assert title in [h.title for h in hits], hits
    assert [h.rank for h in hits] == [1, 2, 3]
    assert all(h.channel == "dense" and h.page_id == 5000 + h.passage_id for h in hits)
    assert hits[0].score >= hits[1].score >= hits[2].score


def test_search_batch_equals_single(backend):
    queries = [q for q, _ in PARAPHRASES]
    batch = backend.search_batch(queries, k=4)
    for q, hits in zip(queries, batch):
        single = backend.search(q, k=4)
        assert [h.passage_id for h in hits] == [h.passage_id for h in single]
        np.testing.assert_allclose([h.score for h in hits], [h.score for h in single], atol=1e-5)


@pytest.mark.parametrize("query", ["", "   \n", "?!...", "—"])
def test_empty_queries(backend, query):
    assert backend.search(query) == []
    assert backend.search_batch([query, "investment firm of Bill Ackman"], k=2)[0] == []


def test_k_long_and_unicode(backend):
    assert len(backend.search("football", k=7)) == 7
    assert len(backend.search("football", k=10_000)) == len(backend)
    assert backend.search("football", k=0) == []
    assert len(backend.search("history of the club " * 3000, k=2)) == 2  # truncated at 256 tokens
    hits = backend.search("Květa Peschke, Czech tennis player", k=3)
    assert "Květa Peschke" in [h.title for h in hits]
    assert len(backend.search("東京 の 歴史", k=2)) == 2


def test_score_texts(backend):
    s = backend.score_texts(
        "investment firm of Bill Ackman",
        ["Pershing Square is a hedge fund run by Bill Ackman.", "Celery is a marsh plant.", ""],
    )
    assert s[0] > s[1] + 0.2 and s[2] == 0.0
    assert backend.score_texts("", ["x"]) == [0.0]
    assert backend.score_texts("anything", []) == []


def test_resume_reencodes_only_missing_shard(built, tmp_path):
    """Delete one shard (an interrupted run), re-run: the kept shards are reused, the vectors match."""
    from backends.dense.embed import embed_range, shard_path

    root, recs, _ = built
    shards = tmp_path / "shards"
    shutil.copytree(root / "dense" / "shards", shards)
    missing = shard_path(shards, 192, 200)  # the short last shard: cheap to re-encode
    before = np.load(missing)
    missing.unlink()
    (shards / (missing.name + ".x.part")).write_bytes(b"half-written")  # a crash leftover
    stats = embed_range(root / "wiki.duckdb", shards, shard_size=SHARD)
    assert stats["shards_written"] == 1 and stats["shards_skipped"] == 3 and stats["encoded"] == 8
    np.testing.assert_allclose(np.load(missing), before, atol=1e-5)
    again = embed_range(root / "wiki.duckdb", shards, shard_size=SHARD)
    assert again["shards_written"] == 0 and again["encoded"] == 0


def test_assemble_refuses_gap(built, tmp_path):
    from backends import dense
    from wikiground.errors import BuildError

    root = built[0]
    out = tmp_path / "dense"
    shutil.copytree(root / "dense" / "shards", out / "shards")
    (out / "shards" / "000000000128-000000000192.npy").unlink()
    with pytest.raises(BuildError, match=r"\[128, 192\)"):
        dense.assemble(root / "wiki.duckdb", out)
    assert not (out / "params.json").exists()


def test_approximate_index_path(built, tmp_path, backend):
    """Above exact_threshold: IVF fast-scan (lists mmap-loaded) + exact re-rank gives the exact top results here."""
    from backends import dense

    root = built[0]
    out = tmp_path / "dense"
    shutil.copytree(root / "dense" / "shards", out / "shards")
    params = dense.assemble(root / "wiki.duckdb", out, exact_threshold=100, nprobe=4)
    assert params["index_type"] == "ivf_pq4fs+rerank" and params["nlist"] >= 2
    assert (out / "ivf_pq4fs.faiss").is_file() and (out / "ivf_pq4fs.lists").is_file()
    approx = dense.load(out)
    assert approx.ivf is not None and approx.ivf.ntotal == len(built[1])
    recall = []
    for query, title in PARAPHRASES:
        exact = {h.passage_id: h.score for h in backend.search(query, k=5)}
        hits = approx.search(query, k=5)
        assert title in [h.title for h in hits[:3]]
        recall.append(len(exact.keys() & {h.passage_id for h in hits}) / 5)
        for h in hits:  # re-ranked scores are the exact cosines, not SQ8 approximations
            if h.passage_id in exact:
                assert h.score == pytest.approx(exact[h.passage_id], abs=1e-5)
    assert np.mean(recall) >= 0.8


def test_vectors_are_memory_mapped(backend):
    assert isinstance(backend.vectors, np.memmap)
    assert isinstance(backend.table.page_of, np.memmap)


def test_no_pickle_in_index(built):
    for p in (built[0] / "dense").rglob("*"):
        if p.is_file():
            assert not p.name.endswith((".pkl", ".pickle", ".joblib", ".pt"))
            assert p.read_bytes()[:1] != b"\x80", f"{p} looks like a pickle"
            if p.suffix == ".npy":
                np.load(p, allow_pickle=False)


def test_sha256_mismatch_is_clear(tmp_path):
    from backends.encoder import WEIGHTS_FILE, model_dir, verify_weights
    from wikiground.errors import ModelError

    fake = tmp_path / "model"
    fake.mkdir()
    (fake / WEIGHTS_FILE).write_bytes(b"tampered weights")
    with pytest.raises(ModelError, match="does not match the pinned"):
        verify_weights(fake)
    with pytest.raises(ModelError, match="not found"):
        verify_weights(tmp_path / "nowhere")
    assert verify_weights(model_dir()) == verify_weights(model_dir())  # the real file passes


def test_onnx_matches_torch(built):
    """The ONNX export (onnxruntime + tokenizers) reproduces sentence-transformers' vectors."""
    from backends.encoder import load_encoder, passage_text
    from tests.support.vectors import cosine_rows

    texts = [passage_text(r["title"], "", " ".join(r["sentences"])) for r in built[1][:12]]
    texts.append("short")
    a = load_encoder(backend="onnx", threads=2).encode(texts, batch_size=8)
    b = load_encoder(backend="torch", threads=2).encode(texts, batch_size=8)
    assert a.shape == b.shape == (len(texts), 384)
    assert cosine_rows(a, b).min() > 0.9999


def test_embed_cli_resumes_and_assembles(built, tmp_path):
    root = built[0]
    index = tmp_path / "index"
    (index / "dense").mkdir(parents=True)
    shutil.copy(root / "wiki.duckdb", index / "wiki.duckdb")
    shutil.copytree(root / "dense" / "shards", index / "dense" / "shards")
    (index / "dense" / "shards" / "000000000192-000000000200.npy").unlink()
    cmd = [
        sys.executable,
        "-m",
        "indexer.embed",
        "--index",
        str(index),
        "--start",
        "128",
        "--end",
        "200",
        "--shard-size",
        str(SHARD),
        "--assemble",
        "--quiet",
    ]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "embedded 8 passages" in out.stderr
    params = json.loads((index / "dense" / "params.json").read_text())
    assert params["count"] == len(built[1])
    np.testing.assert_allclose(
        np.load(index / "dense" / "vectors.npy"), np.load(root / "dense" / "vectors.npy"), atol=1e-5
    )
    bad = subprocess.run(
        [sys.executable, "-m", "indexer.embed", "--index", str(tmp_path / "nothing"), "--quiet"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "wiki.duckdb" in bad.stderr


def test_query_process_threads(built):
    """Loading the dense channel for searching sets numpy's BLAS to one thread for the process
    (``WIKIGROUND_BLAS_THREADS`` to another count; a bad value is refused), and encodes claims on one thread."""
    import os

    code = (
        "import sys\n"
        "from threadpoolctl import threadpool_info\n"
        "from backends import dense\n"
        "d = dense.load(sys.argv[1])\n"
        "d.search('Aristotle', k=1)\n"
        "print(max(i['num_threads'] for i in threadpool_info() if i['user_api'] == 'blas'))\n"
        "print(d.encoder._session.get_session_options().intra_op_num_threads)\n"
    )

    def run(**env):
        return subprocess.run(
            [sys.executable, "-c", code, str(built[0])],
            cwd=ROOT,
            capture_output=True,
            text=True,
            env={**os.environ, **env},
        )

    plain = run()
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout.split() == ["1", "1"]
    assert run(WIKIGROUND_BLAS_THREADS="2").stdout.split()[0] == "2"
    bad = run(WIKIGROUND_BLAS_THREADS="two")
    assert bad.returncode != 0 and "WIKIGROUND_BLAS_THREADS='two'" in bad.stderr


def test_claims_are_tokenized_as_a_padded_batch(backend):
    """The encoder tokenizes text by text and pads to the longest itself: the same ids, mask and type ids as the
    tokenizer's own padded batch (truncated at the model's length), hence the same vectors."""
    from tokenizers import Tokenizer

    from backends.encoder import MAX_SEQ_LENGTH, _padded, model_dir

    batch = Tokenizer.from_file(str(model_dir() / "tokenizer.json"))
    batch.enable_truncation(max_length=MAX_SEQ_LENGTH)
    batch.enable_padding(pad_id=0, pad_token="[PAD]")
    texts = ["Aristotle", "Aristotle was a pupil of Plato and tutored Alexander the Great.", "", "word " * 400]
    enc = batch.encode_batch(texts)
    ours = _padded([backend.encoder._tok.encode(t) for t in texts])
    for field, got in zip(("ids", "attention_mask", "type_ids"), ours):
        assert got.dtype == np.int64
        assert got.tolist() == [getattr(e, field) for e in enc]
    assert ours[0].shape == (4, MAX_SEQ_LENGTH)
    one = backend.encoder.encode(texts[1:2])
    assert np.array_equal(one, backend.encoder.encode(texts)[1:2])  # alone or padded in a batch: the same vector


def test_short_texts_packed_match_padded_to_the_bit_among_others(backend):
    """A search's short texts run packed in rows: the vectors of the padded graph (to float rounding), and a
    text's vector is the same, to the bit, alone or beside others in any order (a claim searched alone or in a
    server's block); a text over SHORT_TOKENS, and every text of ``encode`` (the build's), runs padded."""
    from backends.encoder import SHORT_TOKENS
    from tests.support.vectors import cosine_rows

    enc = backend.encoder
    assert enc._packed is not None and enc._align in (4, 8, 16)
    claims = [
        "Aristotle",
        "Aristotle was a pupil of Plato and tutored Alexander the Great.",
        "",
        "Nikolaj Coster-Waldau worked with the Fox Broadcasting Company.",
        "The Eiffel Tower is in Paris, and it is made of wrought iron.",
    ] * 12  # 60 texts: several packed rows in one run
    alone = np.vstack([enc.encode_queries([c]) for c in claims[:5]] * 12)
    assert np.array_equal(enc.encode_queries(claims), alone)
    assert np.array_equal(enc.encode_queries(claims[::-1]), alone[::-1])
    padded = enc.encode(claims[:5])  # the build's encode never packs
    assert cosine_rows(alone[:5], padded).min() > 0.99999
    long = "word " * (SHORT_TOKENS + 10)
    both = enc.encode_queries([long, claims[1]])
    assert np.array_equal(both[0], enc.encode([long])[0])  # long texts: the padded graph's own vector
    assert np.array_equal(both[1], alone[1])


def test_packed_rows_are_few_and_even(backend):
    """Texts that overflow one packed row run as two rows of about half the width each (a run's rows are all as
    wide as its widest), every text once, no row over PACK_TOKENS; the vectors stay the texts' own, to the bit."""
    from backends.encoder import PACK_TOKENS

    enc = backend.encoder
    align = enc._align
    size = lambda n: n + -n % align  # noqa: E731 - a text and its alignment gap
    rows = enc._rows([15] * 9)  # 9 x 16 aligned tokens: one row too many for 128
    assert sorted(len(r) for r in rows) == [4, 5]
    assert sorted(j for r in rows for j in r) == list(range(9))
    lengths = [3, 40, 12, 64, 9, 17, 30, 5, 22, 11, 64, 2, 27]
    rows = enc._rows(lengths)
    widths = [sum(size(lengths[j]) for j in r) for r in rows]
    assert sorted(j for r in rows for j in r) == list(range(len(lengths)))
    assert max(widths) <= PACK_TOKENS and len(rows) == -(-sum(map(size, lengths)) // PACK_TOKENS)
    assert max(widths) - min(widths) <= 64  # even: no row left nearly empty
    assert enc._rows([]) == []
    claims = ["Nikolaj Coster-Waldau worked with the Fox Broadcasting Company."] * 3 + [
        "Aristotle tutored Alexander the Great.",
        "The Eiffel Tower is in Paris, and it is made of wrought iron.",
    ] * 3
    assert len(enc._rows([len(enc._tok.encode(c).ids) for c in claims])) == 2
    alone = np.vstack([enc.encode_queries([c]) for c in claims])
    assert np.array_equal(enc.encode_queries(claims), alone)


def test_query_encoder_holds_one_graph_until_a_long_text():
    """A query encoder loads the packed graph only; the padded one comes with the first long text. A build's
    encoder loads the padded graph only; the packed one comes with a first ``encode_queries``."""
    from backends.encoder import SHORT_TOKENS, load_encoder

    q = load_encoder(threads=1, queries=True)
    assert q._packed is not None and q._padded is None
    q.encode_queries(["Aristotle tutored Alexander the Great.", "Plato"])
    assert q._padded is None
    q.encode_queries(["word " * (SHORT_TOKENS + 1)])
    assert q._padded is not None
    b = load_encoder(threads=1)
    assert b._padded is not None and b._packed is None
    b.encode(["Aristotle tutored Alexander the Great."])
    assert b._packed is None
    assert np.array_equal(b.encode_queries(["Plato"]), q.encode_queries(["Plato"]))
    assert b._packed is not None


def test_packed_graph_unavailable_falls_back_to_padded(tmp_path, monkeypatch, caplog):
    """Without the packed export (it fails to build here), short texts run padded with a warning: same vectors."""
    import shutil as sh

    from backends import encoder
    from wikiground.errors import ModelError

    src = encoder.onnx_model_path()
    assert src.exists()  # exported by the fixtures' build
    (tmp_path / "onnx").mkdir()
    sh.copy(src, encoder.onnx_model_path(cache=tmp_path))

    def fail(path, target):
        raise ModelError(f"{target}: no exporter here")

    monkeypatch.setattr(encoder, "export_packed_onnx", fail)
    with caplog.at_level("WARNING", logger="backends.encoder"):
        enc = encoder.OnnxEncoder(encoder.model_dir(), threads=1, cache=tmp_path, queries=True)
    assert enc._packed is None and enc._padded is not None and "short texts will be encoded padded" in caplog.text
    texts = ["Aristotle tutored Alexander the Great.", "Plato"]
    full = encoder.OnnxEncoder(encoder.model_dir(), threads=1)
    assert np.array_equal(enc.encode_queries(texts), full.encode(texts))


def test_no_alignment_turns_packing_off(monkeypatch, caplog):
    """Where no alignment gives a packed text its vector alone (onnxruntime kernels summing attention otherwise),
    packing is off for good with a warning, and short texts get the padded graph's vectors. On this machine's
    kernels an offset of 1 does not hold (the alignment found here is 4), so the check itself turns packing off."""
    from backends import encoder

    monkeypatch.setattr(encoder, "PACK_ALIGNMENTS", (1,))
    with caplog.at_level("WARNING", logger="backends.encoder"):
        enc = encoder.OnnxEncoder(encoder.model_dir(), threads=1, queries=True)
    assert enc._packed is None and not enc._packing and enc._align == 0
    assert "not encoded alike at any offset" in caplog.text
    texts = ["Aristotle tutored Alexander the Great.", "Plato", "Nikolaj Coster-Waldau worked with Fox."]
    full = encoder.OnnxEncoder(encoder.model_dir(), threads=1)
    assert np.array_equal(enc.encode_queries(texts), full.encode(texts))
    assert enc._packed is None  # not tried again


def test_build_prepares_the_query_graph_once(built, tmp_path, monkeypatch, caplog):
    """The dense build exports the packed graph of the queries (the fixture's build did), once a machine: a cached
    one is kept, and a failed export is a warning, not a failed build."""
    from backends import encoder
    from wikiground.errors import ModelError

    assert encoder.onnx_model_path(packed=True).exists()
    made = []

    def export(path, target):
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(b"graph")
        made.append(target)

    monkeypatch.setattr(encoder, "export_packed_onnx", export)
    encoder.prepare_query_graph(cache=tmp_path)
    encoder.prepare_query_graph(cache=tmp_path)
    assert made == [encoder.onnx_model_path(cache=tmp_path, packed=True)]

    def fail(path, target):
        raise ModelError(f"{target}: no exporter here")

    monkeypatch.setattr(encoder, "export_packed_onnx", fail)
    with caplog.at_level("WARNING", logger="backends.encoder"):
        encoder.prepare_query_graph(cache=tmp_path / "other")
    assert "claims will be encoded padded" in caplog.text
