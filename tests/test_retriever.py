"""The fused retriever over a real index built from the gensim enwiki fragment (issue 3)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import DATA, ROOT

GENSIM = "gensim-enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
BAD_QUERIES = [
    '"',
    "a:b",
    "((",
    "AND",
    "-",
    "*",
    "",
    "   ",
    "Zürich 東京 — “quoted”",
    "title:(x OR y) AND -z*",
    "x " * 6000,
]


def fixture_claims() -> list[dict]:
    rows = [json.loads(line) for line in (DATA / "claims" / "fever_dev_fixture_dumps.jsonl").open()]
    return [r for r in rows if GENSIM in r["in_dump"]]


@pytest.fixture(scope="module")
def retriever(gensim_index):
    from retriever.api import Retriever

    with Retriever.open(gensim_index) as r:
        yield r


def _page_rank(evidence_titles: list[str], gold: list[str]) -> int | None:
    for i, t in enumerate(evidence_titles, 1):
        if t in gold:
            return i
    return None


@pytest.mark.parametrize("channel", ["bm25", "dense", "tfidf", "title"])
def test_each_channel_finds_gold_pages(retriever, channel):
    claims = fixture_claims()
    assert len(claims) == 28
    found = 0
    for c in claims:
        res = retriever.search(c["claim"], 10, channels=[channel])
        found += _page_rank([e.title for e in res.evidence], c["gold_titles"]) is not None
    # Every claim names its entity (Aristotle, Schopenhauer, Huxley); a working channel finds nearly all.
    assert found / len(claims) >= 0.85, f"{channel}: {found}/{len(claims)}"


def test_fused_finds_gold_at_top(retriever):
    claims = fixture_claims()
    top1 = sum(
        _page_rank([e.title for e in retriever.search(c["claim"], 5).evidence], c["gold_titles"]) == 1 for c in claims
    )
    assert top1 / len(claims) >= 0.9


def test_evidence_json_shape(retriever):
    res = retriever.search("Aristotle tutored Alexander the Great.", 5).to_dict(id=7)
    assert res["id"] == 7 and res["status"] == "ok"
    ev = res["evidence"]
    assert 1 <= len(ev) <= 5
    first = ev[0]
    for key in (
        "title",
        "page_id",
        "passage_id",
        "section",
        "evidence_text",
        "source",
        "score",
        "ranks",
        "url",
        "rev_id",
        "origin",
    ):
        assert key in first, key
    assert first["title"] == "Aristotle"
    assert first["origin"] == "local" and first["source"] in ("text", "table", "info")
    assert first["url"].startswith("https://en.wikipedia.org/wiki/Aristotle")
    assert first["retrieved_for_entity"] == "Aristotle"
    assert "title" in first["ranks"] and len(first["ranks"]) >= 2
    assert [e["score"] for e in ev] == sorted((e["score"] for e in ev), reverse=True)
    assert [e["page_score"] for e in ev] == sorted((e["page_score"] for e in ev), reverse=True)  # orders the list
    assert len({e["page_id"] for e in ev}) == len(ev)  # deduplicated by page
    json.dumps(res)


def test_passage_mode_returns_passages(retriever):
    res = retriever.search("Schopenhauer pessimism will", 8, passages=True)
    assert len(res.evidence) == 8
    assert len({e.passage_id for e in res.evidence}) == 8
    assert all("page_score" not in e.extra for e in res.evidence)  # ordered by their own score


def test_redirects_resolve_through_title_channel(retriever):
    store = retriever.store
    row = store._main.execute(
        "SELECT r.source_title, r.target_title FROM redirects r JOIN pages p ON p.title = r.target_title "
        "WHERE r.source_title NOT LIKE '%(%' ORDER BY r.source_title LIMIT 1"
    ).fetchone()
    assert row, "the gensim fragment has redirects resolving inside it"
    source, target = row
    res = store.resolve_title(source)
    assert res is not None and res.title == target and res.via_redirect == source
    hits = retriever.channel_search("title", f"Something about {source} here", 5)
    assert target in [h.title for h in hits]


def test_a_disambiguation_page_ranks_below_the_entity_in_the_title_channel(retriever):
    """ "Ada" (a disambiguation page in the fragment) resolves, flagged, and scores below an entity named with it."""
    store = retriever.store
    assert store.resolve_title("Ada").is_disambiguation and store.resolve_title("ada").is_disambiguation
    assert not store.resolve_title("Aristotle").is_disambiguation
    hits = {h.title: h.score for h in retriever.channel_search("title", "Ada and Aristotle", 5)}
    assert hits["Aristotle"] > hits["Ada"]


def test_lowercase_concept_words_name_their_pages_after_the_named_entities(retriever):
    """A common noun in lower case ("algae") surfaces its page, after every named entity, in the claim's order; a
    plural by its singular; a disambiguation page ("ada") and a word naming no page add nothing."""
    hits = retriever.channel_search("title", "Aristotle studied algae, ada and acids in alchemy.", 10)
    assert [h.title for h in hits] == ["Aristotle", "Algae", "Acid", "Alchemy"]
    assert [h.matched for h in hits[1:]] == ["algae", "acids", "alchemy"]
    assert hits[0].score > 0 >= hits[1].score > hits[2].score > hits[3].score
    # The retriever's path (mentions found once, then the channel) gives the same hits.
    found, _ = retriever.search_hits("Aristotle studied algae, ada and acids in alchemy.", k=10, channels=["title"])
    assert [h.title for h in found["title"]] == ["Aristotle", "Algae", "Acid", "Alchemy"]


@pytest.mark.parametrize("query", BAD_QUERIES, ids=range(len(BAD_QUERIES)))
def test_bad_queries_never_crash(retriever, query):
    res = retriever.search(query, 5)
    assert res.status in ("ok", "no_evidence", "empty_query")
    for channel in retriever.channels:
        assert isinstance(retriever.channel_search(channel, query, 5), list)


def test_fusion_methods_and_weights(retriever):
    a = retriever.search("Aldous Huxley wrote Brave New World", 5)
    assert a.evidence[0].title == "Aldous Huxley"
    from retriever.api import Retriever

    with Retriever.open(retriever.index_dir, fusion="score", weights={"title": 0.0}) as r2:
        b = r2.search("Aldous Huxley wrote Brave New World", 5)
        assert b.evidence and "Aldous Huxley" in [e.title for e in b.evidence]


def test_missing_index_gives_clear_error(gensim_store):
    from retriever.api import Retriever
    from wikiground.errors import IndexMissingError

    with pytest.raises(IndexMissingError, match=r"--indexes bm25"):
        Retriever.open(gensim_store, channels="bm25")
    with pytest.raises(IndexMissingError, match="python -m indexer build"):
        Retriever.open(gensim_store.parent / "nowhere")
    # Only the title channel exists in a store-only build, and it works.
    with Retriever.open(gensim_store) as r:
        assert r.channels == ("title",)
        assert r.search("Aristotle was a philosopher", 3).evidence[0].title == "Aristotle"


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "retriever.query", *args], capture_output=True, text=True, cwd=ROOT, timeout=300
    )


def test_cli_json_table_and_batch(gensim_index, tmp_path):
    p = _cli(
        "--index",
        str(gensim_index),
        "--k",
        "3",
        "--indexes",
        "bm25,title",
        "--json",
        "Arthur Schopenhauer was a German philosopher.",
    )
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["evidence"][0]["title"] == "Arthur Schopenhauer"
    assert set(out["evidence"][0]["ranks"]) <= {"bm25", "title"}

    p = _cli("--index", str(gensim_index), "--k", "2", "--indexes", "title", "Aristotle")
    assert p.returncode == 0 and "Aristotle" in p.stdout and "score" in p.stdout

    queries = tmp_path / "q.jsonl"
    queries.write_text(
        '{"id": "a", "claim": "Aristotle spent time in Athens."}\n{"id": 2, "question": "Who was Aldous Huxley?"}\n'
    )
    outf = tmp_path / "out.jsonl"
    p = _cli("--index", str(gensim_index), "--k", "4", "--queries", str(queries), "--out", str(outf), "--quiet")
    assert p.returncode == 0, p.stderr
    lines = [json.loads(x) for x in outf.read_text().splitlines()]
    assert [x["id"] for x in lines] == ["a", 2]
    assert all(set(x) >= {"id", "query", "status", "evidence"} for x in lines)
    assert lines[1]["evidence"][0]["title"] == "Aldous Huxley"


def test_cli_errors(gensim_store, tmp_path):
    p = _cli("--index", str(gensim_store), "--indexes", "dense", "x")
    assert p.returncode == 2 and "error:" in p.stderr and "--indexes dense" in p.stderr and "Traceback" not in p.stderr
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1, "claim": "ok"}\nnot json\n')
    p = _cli("--index", str(gensim_store), "--queries", str(bad), "--out", str(tmp_path / "o.jsonl"))
    assert p.returncode == 2 and f"{bad}:2" in p.stderr
    p = _cli("--index", str(gensim_store), "--indexes", "nosuch", "x")
    assert p.returncode == 2 and "unknown index" in p.stderr


def test_import_is_light():
    code = (
        "import sys, retriever, retriever.api, retriever.query, retriever.fusion, indexer.store;"
        "heavy = [m for m in ('jnius', 'torch', 'faiss', 'sklearn', 'sentence_transformers', 'pyserini') if m in sys.modules];"
        "assert not heavy, heavy"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 0, p.stderr


def test_evidence_to_dict_is_asdict_shape_with_containers_copied():
    from dataclasses import asdict

    from wikiground.records import Evidence

    ev = Evidence(
        "Aristotle", 1, 2, "Life", "Aristotle was ...", "kg", 0.5, ranks={"bm25": 1}, hop=2,
        extra={"sentence_ids": [0, 1], "triples": [{"subject": "Aristotle", "object": ("Plato",)}]},
    )  # fmt: skip
    optional = ("fetched_at", "rev_timestamp", "attempt", "hop", "retrieved_for_entity")  # left out when unset
    plain = asdict(ev)
    expected = {k: v for k, v in plain.items() if k != "extra" and not (k in optional and v is None)} | plain["extra"]
    out = ev.to_dict()
    assert out == expected and list(out) == list(expected)
    out["ranks"]["bm25"] = 9
    out["triples"][0]["subject"] = "x"
    out["sentence_ids"].append(5)
    assert ev.ranks == {"bm25": 1} and ev.extra["triples"][0]["subject"] == "Aristotle"
    assert ev.extra["sentence_ids"] == [0, 1]
