"""Exactly k passages, in the order of their own scores, from every passage front: DSPy's own ColBERTv2 client at
``/api/search``, ``WikigroundRetrieve`` (alone and as DSPy's ``rm`` behind ``dspy.Retrieve``), the LangChain
retriever, and ``POST /retrieve`` in Search-R1's shape; for each of the fixture claims at k = 1, 5 and 21."""

from __future__ import annotations

import json
import math

import httpx
import pytest

from tests.test_serve import ThreadServer, light_state

KS = (1, 5, 21)


@pytest.fixture(scope="module")
def served(gensim_tfidf):
    state = light_state(gensim_tfidf)
    with ThreadServer(state) as url:
        yield url, state.generation.retriever


@pytest.fixture(scope="module")
def claims(data_dir):
    lines = (data_dir / "claims" / "fever_dev_fixture_dumps.jsonl").read_text().splitlines()
    return [json.loads(x)["claim"] for x in lines if x.strip()]


def _falling(scores):
    return all(a >= b for a, b in zip(scores, scores[1:]))


def test_colbertv2_client_gets_k_passages_ranked_by_score(served, claims):
    import dspy

    url, _ = served
    colbert = dspy.ColBERTv2(url=f"{url}/api/search")
    for k in KS:
        for claim in claims:
            got = colbert(claim, k=k)
            assert len(got) == k, (claim, k)
            scores = [p["score"] for p in got]
            assert _falling(scores) and [p["rank"] for p in got] == list(range(1, k + 1))
            top = max(scores)
            total = sum(math.exp(s - top) for s in scores)
            assert [p["prob"] for p in got] == pytest.approx([math.exp(s - top) / total for s in scores])
    assert len({p["pid"] for p in colbert(claims[0], k=21)}) == 21  # passages, not pages


def test_dspy_module_and_rm_behind_dspy_retrieve(served, claims):
    import dspy

    from retriever.integrations.dspy import WikigroundRetrieve

    url, retriever = served
    module = WikigroundRetrieve(k=5, url=url)
    for k in KS:
        for claim in claims:
            pred = module(claim, k=k)
            assert len(pred.passages) == k and _falling(pred.scores)
    local = WikigroundRetrieve(k=3, retriever=retriever)(claims[0])
    assert local.passages == module(claims[0], k=3).passages
    with dspy.context(rm=WikigroundRetrieve(url=url)):
        for k in KS:
            got = dspy.Retrieve(k=k)(claims[0])
            assert got.passages == module(claims[0], k=k).passages


def test_langchain_documents_have_ids_and_k_of_them(served, claims):
    from retriever.integrations.langchain import WikigroundRetriever

    url, _ = served
    for k in KS:
        lc = WikigroundRetriever(url=url, k=k)
        for claim in claims:
            docs = lc.invoke(claim)
            assert len(docs) == k and _falling([d.metadata["score"] for d in docs])
            assert [d.id for d in docs] == [str(d.metadata["passage_id"]) for d in docs]


def test_search_r1_retrieve(served, claims):
    url, retriever = served
    for k in KS:
        r = httpx.post(f"{url}/retrieve", json={"queries": claims, "topk": k, "return_scores": True}, timeout=120)
        assert r.status_code == 200
        result = r.json()["result"]
        assert len(result) == len(claims) and all(len(docs) == k for docs in result)
        assert all(_falling([d["score"] for d in docs]) for docs in result)
    first = retriever.search(claims[0], 3, passages=True).evidence[0]
    r = httpx.post(f"{url}/retrieve", json={"queries": [claims[0]], "topk": 3}).json()
    assert r["result"][0][0] == {"id": str(first.passage_id), "contents": f"{first.title}\n{first.evidence_text}"}
    assert len(httpx.post(f"{url}/retrieve", json={"queries": [claims[0]]}).json()["result"][0]) == 3


def test_4xx_bodies_carry_a_top_level_message(served):
    url, _ = served
    r = httpx.get(f"{url}/api/search", params={"query": "Aristotle", "k": 0})
    assert r.status_code == 400
    body = r.json()
    assert body["message"] == body["error"]["message"] and "k must be" in body["message"]
    r = httpx.post(f"{url}/retrieve", json={"queries": ["x" * 5000]})
    assert r.status_code == 400 and "limit" in r.json()["message"]
    assert httpx.post(f"{url}/retrieve", json={"topk": 3}).status_code == 422
