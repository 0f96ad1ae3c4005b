"""Output formats for the field's scorers (retriever/formats.py): through ``retriever.query --format`` and
``/search/batch?format=``, over the gensim index and the fixture claims."""

from __future__ import annotations

import json

import httpx
import pytest

from retriever.formats import fever_title, ranked_sentences, render_all, trec_title
from retriever.query import main as query_main
from tests.test_serve import ThreadServer, light_state

CLAIMS = "claims/fever_dev_fixture_dumps.jsonl"


@pytest.fixture(scope="module")
def lines(gensim_tfidf, data_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "run.jsonl"
    args = ["--index", str(gensim_tfidf), "--indexes", "tfidf,title", "--queries", str(data_dir / CLAIMS)]
    assert query_main([*args, "--out", str(out), "--quiet", "--k", "5"]) == 0
    return [json.loads(x) for x in out.read_text().splitlines()]


def test_titles_as_one_column():
    assert trec_title("Philip II of Macedon") == "Philip_II_of_Macedon"
    assert fever_title("Alexander (film): cut") == "Alexander_-LRB-film-RRB--COLON-_cut"


def test_trec_rows_keep_six_columns_and_the_rank_order(lines):
    text = render_all(lines, "trec", run_tag="tfidf-run")
    rows = [r.split() for r in text.splitlines()]
    assert rows and all(len(r) == 6 and r[1] == "Q0" and r[5] == "tfidf-run" for r in rows)
    by_query: dict[str, list[list[str]]] = {}
    for r in rows:
        by_query.setdefault(r[0], []).append(r)
    spaced = [e["title"] for line in lines for e in line["evidence"] if " " in e["title"]]
    assert spaced and all(" " not in r[2] for r in rows)
    for line in lines:
        got = by_query.get(str(line["id"]), [])
        titles = list(dict.fromkeys(e["title"].replace(" ", "_") for e in line["evidence"]))
        assert [r[2] for r in got] == titles
        assert [int(r[3]) for r in got] == list(range(1, len(got) + 1))
        scores = [float(r[4]) for r in got]
        assert all(a > b for a, b in zip(scores, scores[1:]))  # trec_eval sorts by score: it must keep the ranks


def test_trec_docids_and_kilt_provenance(lines):
    first = next(line for line in lines if line["evidence"])
    rows = render_all([first], "trec", docid="page_id").split()
    assert rows[2] == str(first["evidence"][0]["page_id"])
    rows = render_all([first], "trec", docid="passage_id").split()
    assert rows[2] == str(first["evidence"][0]["passage_id"])
    kilt = [json.loads(x) for x in render_all(lines, "kilt").splitlines()]
    assert [k["id"] for k in kilt] == [line["id"] for line in lines]  # input order
    prov = kilt[0]["output"][0]["provenance"]
    assert prov[0] == {
        "wikipedia_id": str(lines[0]["evidence"][0]["page_id"]),
        "wikipedia_title": lines[0]["evidence"][0]["title"],
    }


def test_sentence_formats_rank_the_passages_sentences(lines):
    fever = [json.loads(x) for x in render_all(lines, "fever").splitlines()]
    hotpot = [json.loads(x) for x in render_all(lines, "hotpot").splitlines()]
    for line, f, h in zip(lines, fever, hotpot):
        stored = {(e["title"], s) for e in line["evidence"] for s in e["sentence_ids"]}
        pairs = [tuple(p) for p in h["supporting_facts"]]
        assert set(pairs) <= stored and len(pairs) == len(set(pairs))
        assert len(pairs) == min(20, len(stored))
        assert [p[1] for p in f["predicted_evidence"]] == [p[1] for p in pairs]
        assert f["predicted_pages"] == list(dict.fromkeys(fever_title(e["title"]) for e in line["evidence"]))
        assert h["_id"] == line["id"] and f["id"] == line["id"]
    # the sentence with most of the claim's words comes first, whatever its place in the passage
    line = {
        "query": "Nicomachus died young",
        "evidence": [_passage("A", [0, 1], "Alpha is here. Nicomachus died young.")],
    }
    assert ranked_sentences(line) == [("A", 1), ("A", 0)]


def _passage(title: str, ids: list[int], text: str) -> dict:
    return {"title": title, "page_id": 1, "passage_id": 1, "sentence_ids": ids, "evidence_text": text}


def test_query_command_writes_each_format(gensim_tfidf, data_dir, tmp_path, capsys, lines):
    args = ["--index", str(gensim_tfidf), "--indexes", "tfidf,title", "--k", "5", "--quiet"]
    out = tmp_path / "run.trec"
    assert query_main([*args, "--queries", str(data_dir / CLAIMS), "--format", "trec", "--out", str(out)]) == 0
    assert out.read_text() == render_all(lines, "trec")
    capsys.readouterr()
    assert query_main([*args, "--format", "kilt", lines[0]["query"]]) == 0
    assert json.loads(capsys.readouterr().out)["output"][0]["provenance"][0]["wikipedia_title"]
    assert query_main([*args, "--format", "trec", "--run-tag", "two words", "x"]) == 2
    assert "run tag" in capsys.readouterr().err


def test_batch_route_answers_in_the_format(gensim_tfidf, lines):
    state = light_state(gensim_tfidf)
    items = [{"id": line["id"], "claim": line["query"]} for line in lines[:6]]
    with ThreadServer(state) as url:
        r = httpx.post(f"{url}/search/batch", params={"format": "trec", "k": 5, "run_tag": "srv"}, json=items)
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
        got = sorted(r.text.splitlines())
        assert got == sorted(render_all(lines[:6], "trec", run_tag="srv").splitlines())
        r = httpx.post(f"{url}/search/batch", params={"format": "fever", "k": 5}, json=items)
        assert sorted(json.loads(x)["id"] for x in r.text.splitlines()) == sorted(i["id"] for i in items)
        bad = httpx.post(f"{url}/search/batch", params={"format": "csv"}, json=items)
        assert bad.status_code == 400 and "csv" in bad.json()["error"]["message"]
