"""``POST /retrieve`` in the shape of Search-R1's retrieval server (``search_r1/search/retrieval_server.py``), which
most agentic-search training code launches and calls:

``{"queries": [...], "topk": 3, "return_scores": true}`` -> ``{"result": [[{"document": {"id", "contents"},
"score"}, ...], ...]}``, one list per query in query order; without ``return_scores`` each list holds the documents
alone. A document is one passage: ``id`` its passage id (a string, as the corpus rows of Search-R1 have it) and
``contents`` its page title, a newline, then its text. Each list holds the top ``topk`` passages in the order of
their scores.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt

from wikiground.errors import QueryError

__all__ = ["DEFAULT_TOPK", "install", "search_r1_documents"]

DEFAULT_TOPK = 3  # Search-R1's retrieval_topk default


class RetrieveRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")  # Search-R1's clients send nothing else, but derivatives may
    queries: list[str] = Field(description="the queries, answered in this order")
    topk: StrictInt | None = Field(None, description=f"passages per query (default {DEFAULT_TOPK})")
    return_scores: StrictBool = Field(False, description="each passage as {document, score}")


def search_r1_documents(result: dict[str, Any], *, scores: bool) -> list[dict[str, Any]]:
    """A passage search's output line as Search-R1's documents, best score first."""
    out = []
    for e in sorted(result["evidence"], key=lambda e: -e["score"]):
        doc = {"id": str(e["passage_id"]), "contents": f"{e['title']}\n{e['evidence_text']}"}
        out.append({"document": doc, "score": e["score"]} if scores else doc)
    return out


def install(app: FastAPI, state: Any, runner: Any) -> None:
    """The ``/retrieve`` route over the server's ``state`` and ``runner`` (retriever/serve/app.py)."""

    @app.post("/retrieve", summary="Search-R1's retrieval server: {queries, topk, return_scores} -> {result}")
    async def retrieve(req: RetrieveRequest) -> Any:
        state.count("retrieve")
        if len(req.queries) > state.limits.max_batch:
            raise QueryError(f"{len(req.queries)} queries; the limit is {state.limits.max_batch}")
        k = state.check_k(DEFAULT_TOPK if req.topk is None else req.topk)
        queries = [state.check_claim(q, what=f"query {n}") for n, q in enumerate(req.queries)]
        opts = replace(state.defaults.merged(k=k), multihop=False, passages=True)
        results = await asyncio.gather(*(runner.search(q, opts) for q in queries))
        return {"result": [search_r1_documents(r, scores=req.return_scores) for r in results]}
