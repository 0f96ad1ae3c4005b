"""The MCP server's tool schema and server info, through the mcp package's own client (SDK 2.3.0): k's range and
the claim cap of the HTTP server are in the schema, and enforced; serverInfo names the package version."""

from __future__ import annotations

import asyncio

from retriever.api import Retriever
from wikiground import __version__


def test_schema_bounds_and_version(gensim_tfidf):
    from mcp.client.client import Client

    from retriever.mcp import build_server

    retriever = Retriever.open(gensim_tfidf, channels="tfidf,title")
    server = build_server(retriever)

    async def run():
        async with Client(server) as client:
            info = client.server_info
            tools = {t.name: t for t in (await client.list_tools()).tools}
            long = await client.call_tool("search_wikipedia", {"claim": "x" * 5000, "k": 2})
            big_k = await client.call_tool("search_wikipedia", {"claim": "Aristotle", "k": 51})
            ok = await client.call_tool("search_wikipedia", {"claim": "Aristotle", "k": 50})
            return info, tools, long, big_k, ok

    try:
        info, tools, long, big_k, ok = asyncio.run(run())
    finally:
        retriever.close()
    props = tools["search_wikipedia"].input_schema["properties"]
    assert props["k"]["minimum"] == 1 and props["k"]["maximum"] == 50
    assert props["claim"]["maxLength"] == 2000
    assert long.is_error and big_k.is_error and not ok.is_error
    assert info.name == "wikiground" and info.version == __version__
