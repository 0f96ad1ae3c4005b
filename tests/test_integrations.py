"""Library integrations, each with the real library: DSPy's own ColBERTv2 client against ``/api/search``, the
DSPy retriever module, the LangChain retriever, and the MCP server's tools through the mcp package's client."""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.test_serve import ThreadServer, light_state

CLAIM = "Aristotle was a Greek philosopher who tutored Alexander the Great."


@pytest.fixture(scope="module")
def served(gensim_index):
    # DSPy caches ColBERTv2 answers by URL: the server's port is new each run, so each call reaches the server.
    state = light_state(gensim_index)
    with ThreadServer(state) as url:
        yield url, state.generation.retriever


def test_dspy_colbertv2_client_unchanged(served):
    import dspy

    url, retriever = served
    want = retriever.search(CLAIM, 4, passages=True).to_dict()["evidence"]
    for post in (False, True):
        got = dspy.ColBERTv2(url=f"{url}/api/search", post_requests=post)(CLAIM, k=4)
        assert [p["title"] for p in got] == [e["title"] for e in want]
        assert [p["rank"] for p in got] == [1, 2, 3, 4]
        assert got[0]["pid"] == want[0]["passage_id"] and got[0]["url"] == want[0]["url"]
        assert got[0]["text"] == f"{want[0]['title']} | {want[0]['evidence_text']}"
        assert abs(sum(p["prob"] for p in got) - 1) < 1e-6
    simple = dspy.ColBERTv2(url=f"{url}/api/search")(CLAIM, k=2, simplify=True)
    assert simple[0].startswith(want[0]["title"] + " | ")


def test_colbert_endpoint_bounds(served):
    import httpx

    url, _ = served
    assert httpx.get(f"{url}/api/search", params={"query": CLAIM, "k": 0}).status_code == 400
    assert httpx.get(f"{url}/api/search", params={"k": 3}).status_code == 422


def test_dspy_retrieve_module_carries_titles(served):
    from retriever.integrations.dspy import WikigroundRetrieve

    url, retriever = served
    want = [e["title"] for e in retriever.search(CLAIM, 3, passages=True).to_dict()["evidence"]]
    for module in (WikigroundRetrieve(k=3, retriever=retriever), WikigroundRetrieve(k=3, url=url)):
        pred = module(CLAIM)
        assert pred.titles == want
        assert [p.split(" | ", 1)[0] for p in pred.passages] == want
        assert pred.evidence[0]["page_id"]


def test_langchain_retriever_documents_hold_the_evidence(served):
    from langchain_core.documents import Document

    from retriever.integrations.langchain import WikigroundRetriever

    url, retriever = served
    want = retriever.search(CLAIM, 3, passages=True).to_dict()["evidence"]
    for lc in (WikigroundRetriever(retriever=retriever, k=3), WikigroundRetriever(url=url, k=3)):
        docs = lc.invoke(CLAIM)
        assert all(isinstance(d, Document) for d in docs)
        assert [d.page_content for d in docs] == [e["evidence_text"] for e in want]
        assert docs[0].metadata["title"] == want[0]["title"] and docs[0].metadata["ranks"] == want[0]["ranks"]
        assert {"page_id", "passage_id", "section", "score", "url", "origin"} <= set(docs[0].metadata)


def test_mcp_tools_search_wikipedia_and_get_page(served):
    from mcp.client.client import Client

    from retriever.mcp import build_server

    _, retriever = served
    server = build_server(retriever)

    async def run():
        async with Client(server) as client:
            tools = {t.name for t in (await client.list_tools()).tools}
            found = await client.call_tool("search_wikipedia", {"claim": CLAIM, "k": 2})
            page = await client.call_tool("get_page", {"title": "aristotle"})
            bad = await client.call_tool("get_page", {"title": "No such page at all"})
            return tools, found, page, bad

    tools, found, page, bad = asyncio.run(run())
    assert {"search_wikipedia", "get_page"} <= tools
    result = found.structured_content or json.loads(found.content[0].text)
    want = retriever.search(CLAIM, 2).to_dict()["evidence"]
    assert [e["title"] for e in result["evidence"]] == [e["title"] for e in want]
    view = page.structured_content or json.loads(page.content[0].text)
    assert view["title"] == "Aristotle" and view["sections"]
    assert bad.is_error and "No such page at all" in bad.content[0].text


def _titles_scores(evidence) -> list[tuple[str, float]]:
    return [(e["title"], round(e["score"], 6)) for e in sorted(evidence, key=lambda e: -e["score"])]


def test_dspy_and_langchain_take_a_fusion_of_their_own_and_per_call(served):
    """``fusion`` as ``/search`` takes it: on the module and per call, in-process and over a server; the answer names
    the fusion used, and its passages are those of that fusion."""
    from retriever.integrations.dspy import WikigroundRetrieve
    from retriever.integrations.langchain import WikigroundRetriever

    url, retriever = served
    want = {f: retriever.search(CLAIM, 3, passages=True, fusion=f).to_dict()["evidence"] for f in ("rrf", "score")}
    assert _titles_scores(want["rrf"]) != _titles_scores(want["score"])  # the fusions rank differently here
    for source in ({"retriever": retriever}, {"url": url}):
        module = WikigroundRetrieve(k=3, fusion="score", **source)
        pred = module(CLAIM)
        assert pred.fusion == "score" and _titles_scores(pred.evidence) == _titles_scores(want["score"])
        pred = module(CLAIM, fusion="rrf")
        assert pred.fusion == "rrf" and _titles_scores(pred.evidence) == _titles_scores(want["rrf"])
        lc = WikigroundRetriever(k=3, fusion="score", **source)
        docs = lc.invoke(CLAIM)
        assert {d.metadata["fusion"] for d in docs} == {"score"}
        assert [(d.metadata["title"], round(d.metadata["score"], 6)) for d in docs] == _titles_scores(want["score"])
        docs = lc.invoke(CLAIM, fusion="rrf")
        assert {d.metadata["fusion"] for d in docs} == {"rrf"}
        assert [(d.metadata["title"], round(d.metadata["score"], 6)) for d in docs] == _titles_scores(want["rrf"])
        assert WikigroundRetriever(k=3, **source).invoke(CLAIM)[0].metadata["fusion"] == "rrf"  # the source's own


def test_an_unknown_fusion_is_refused_as_the_server_refuses_it(served):
    from retriever.integrations.dspy import WikigroundRetrieve
    from retriever.integrations.langchain import WikigroundRetriever
    from wikiground.errors import QueryError

    url, retriever = served
    for source in ({"retriever": retriever}, {"url": url}):
        with pytest.raises(QueryError, match="unknown fusion 'borda'; choose one of rrf, rrf-plain, score"):
            WikigroundRetrieve(k=3, fusion="borda", **source)
        with pytest.raises(QueryError, match="unknown fusion 'borda'"):
            WikigroundRetrieve(k=3, **source)(CLAIM, fusion="borda")
        with pytest.raises(QueryError, match="unknown fusion 'borda'"):
            WikigroundRetriever(k=3, fusion="borda", **source)
        with pytest.raises(QueryError, match="unknown fusion 'borda'"):
            WikigroundRetriever(k=3, **source).invoke(CLAIM, fusion="borda")


def test_mcp_search_wikipedia_takes_a_fusion(served):
    from mcp.client.client import Client

    from retriever.mcp import build_server

    _, retriever = served
    server = build_server(retriever)

    async def run():
        async with Client(server) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            calls = {
                f: await client.call_tool("search_wikipedia", {"claim": CLAIM, "k": 3, "fusion": f})
                for f in ("rrf", "rrf-plain", "score")
            }
            default = await client.call_tool("search_wikipedia", {"claim": CLAIM, "k": 3})
            bad = await client.call_tool("search_wikipedia", {"claim": CLAIM, "k": 3, "fusion": "borda"})
            return tools, calls, default, bad

    tools, calls, default, bad = asyncio.run(run())
    schema = json.dumps(tools["search_wikipedia"].input_schema["properties"]["fusion"])
    assert all(f'"{f}"' in schema for f in ("rrf", "rrf-plain", "score"))
    for fusion, call in calls.items():
        result = call.structured_content or json.loads(call.content[0].text)
        want = retriever.search(CLAIM, 3, fusion=fusion).to_dict()["evidence"]
        assert result["fusion"] == fusion
        assert [(e["title"], e["score"]) for e in result["evidence"]] == [(e["title"], e["score"]) for e in want]
    result = default.structured_content or json.loads(default.content[0].text)
    assert result["fusion"] == "rrf"
    assert bad.is_error and "borda" in bad.content[0].text
