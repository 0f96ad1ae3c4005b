"""An MCP server for LLM agents: ``wikiground mcp --index DIR`` (stdio; needs ``wikiground[mcp]``).

Tools: ``search_wikipedia(claim, k, fusion)`` (the evidence of one query command's output line; ``fusion`` as a
``/search`` request names it, the server's ``--fusion`` by default) and ``get_page(title)`` (the page after redirects,
with its sections, categories, "See also", infobox and links). The index is opened once, when the server starts.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from retriever.serve.state import Limits
from retriever.service import FUSIONS, Fusion, check_fusion
from wikiground.errors import ConfigError, QueryError, WikigroundError

MAX_K = 50  # evidence items one tool call may ask for: an agent's context is the limit
MAX_CLAIM_CHARS = Limits().max_claim_chars  # the HTTP server's cap: the same claims are accepted over both
# The bounds live in the tool's input schema, where an agent reads them before it calls.
Claim = Annotated[str, Field(max_length=MAX_CLAIM_CHARS, description="a claim or question")]
K = Annotated[int, Field(ge=1, le=MAX_K, description=f"evidence items, 1 to {MAX_K}")]
FusionName = Annotated[
    Fusion | None,
    Field(
        description=f"how the channels' lists are fused: {', '.join(FUSIONS)} (rrf: reciprocal rank fusion with the "
        "sure channels' rank-1 promotion and the learned rank 1; rrf-plain: without them; score: min-max scores); "
        "null: the server's own"
    ),
]


def build_server(retriever: Any) -> Any:
    """The MCP server (``mcp.server.mcpserver.MCPServer``) over an open Retriever."""
    try:
        from mcp.server.mcpserver import MCPServer
        from mcp.server.mcpserver.exceptions import ToolError
    except ImportError as exc:
        raise ConfigError(
            f"the MCP server needs the mcp extra ({exc.name} is missing): pip install 'wikiground[mcp]'"
        ) from exc

    from retriever.pages import page_view
    from retriever.service import SearchOptions, answer
    from wikiground import __version__

    server = MCPServer(
        "wikiground",
        version=__version__,
        instructions="Evidence from a local Wikipedia index: search_wikipedia for a claim or question, get_page for "
        "a whole page by title.",
    )

    @server.tool()
    def search_wikipedia(claim: Claim, k: K = 5, fusion: FusionName = None) -> dict[str, Any]:
        """Evidence passages for a claim or question, best first: title, section, text, score, url; ``fusion``
        names the fusion that ranked them."""
        if not 1 <= k <= MAX_K:
            raise ToolError(f"k must be from 1 to {MAX_K}, got {k}")
        if len(claim) > MAX_CLAIM_CHARS:
            raise ToolError(f"the claim is {len(claim)} characters long; the limit is {MAX_CLAIM_CHARS}")
        try:
            opts = SearchOptions(k=k, fusion=check_fusion(fusion) if fusion is not None else None)
        except QueryError as exc:
            raise ToolError(str(exc)) from None
        line = answer(retriever, claim, opts)
        keep = ("title", "section", "evidence_text", "score", "url", "page_id", "passage_id", "origin")
        return {
            "query": line["query"],
            "status": line["status"],
            "fusion": line.get("fusion"),
            "evidence": [{key: e.get(key) for key in keep} for e in line["evidence"]],
        }

    @server.tool()
    def get_page(title: str) -> dict[str, Any]:
        """A Wikipedia page by title (redirects followed): lead, sections, categories, see also, infobox, links."""
        view = page_view(retriever.store, title)
        if view is None:
            raise ToolError(f"no page or redirect titled {title!r}")
        return view

    return server


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="wikiground mcp", description=__doc__.split("\n")[0])
    p.add_argument("--index", required=True, type=Path, help="index folder built by `python -m indexer build`")
    p.add_argument("--indexes", default="all", help="channels: comma list of bm25,dense,tfidf,title (default all)")
    p.add_argument(
        "--fusion",
        choices=FUSIONS,
        default="rrf",
        help="the fusion of a search that names none: rrf (default), rrf-plain or score, as for `wikiground query`",
    )
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)  # stdout carries the protocol
    try:
        from retriever.service import OpenOptions, warm_up

        with OpenOptions(index=args.index, channels=args.indexes, fusion=args.fusion).open() as retriever:
            warm_up(retriever)
            from retriever.serve.mcp_stdio import run_stdio

            run_stdio(build_server(retriever))  # answers every request, a line it cannot read included
    except WikigroundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
