"""The explorer's routes: its page at ``/``, its files under ``/explorer/static/``, and ``/explorer/api/*``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import Query
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

from retriever import pages as page_lookup
from retriever.service import FUSIONS
from wikiground.errors import QueryError

STATIC = Path(__file__).resolve().parent / "static"
MAX_IDS = 200  # ids in one passages or revisions request: an answer's k items and their next passages
# The page and its scripts talk to this server only; links to Wikipedia are navigation, not requests.
CSP = (
    "default-src 'self'; connect-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
    "object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"
)
PAGE_HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "Cache-Control": "no-cache"}


def parse_ids(text: str, name: str) -> list[int]:
    """A comma list of non-negative integers, at most MAX_IDS of them."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if len(parts) > MAX_IDS:
        raise QueryError(f"{name}: {len(parts)} ids; the limit is {MAX_IDS}")
    try:
        ids = [int(p) for p in parts]
    except ValueError:
        raise QueryError(f"{name}: expected a comma list of integers, got {text[:80]!r}") from None
    if any(i < 0 for i in ids):
        raise QueryError(f"{name}: ids are non-negative")
    return ids


def options(state: Any, retriever: Any) -> dict[str, Any]:
    """What the page offers: the channels open, the fusions (the server's default first named), the server's
    defaults and bounds."""
    d = state.defaults
    return {
        "channels": list(retriever.channels),
        "fusion": d.fusion or retriever.fusion,
        "fusions": list(FUSIONS),
        "weights": {c: retriever.weights.get(c) for c in retriever.channels},
        "on_the_fly": retriever.fallback is not None,
        "defaults": {"k": d.k, "indexes": d.indexes, "multihop": d.multihop, "on_the_fly": bool(d.on_the_fly)},
        "max_k": state.limits.max_k,
        "max_claim_chars": state.limits.max_claim_chars,
    }


def install(app: Any, state: Any, runner: Any) -> None:
    """The explorer's page, files and routes on the application."""

    async def explorer_page() -> Any:
        return FileResponse(STATIC / "index.html", media_type="text/html", headers=PAGE_HEADERS)

    async def explorer_options() -> Any:
        return await runner.run(lambda r: options(state, r))

    async def explorer_passages(ids: str = Query(..., description="comma list of passage ids")) -> Any:
        wanted = parse_ids(ids, "ids")
        state.count("explorer")
        return {"passages": await runner.run(lambda r: page_lookup.passages_view(r.store, wanted))}

    async def explorer_revisions(page_ids: str = Query(..., description="comma list of page ids")) -> Any:
        wanted = parse_ids(page_ids, "page_ids")
        state.count("explorer")
        found = await runner.run(lambda r: page_lookup.revisions(r.store, wanted))
        return {"pages": {str(k): v for k, v in found.items()}}

    app.add_api_route("/", explorer_page, methods=["GET"], summary="The evidence explorer (a web page)")
    app.add_api_route("/explorer/api/options", explorer_options, methods=["GET"], summary="The explorer's options")
    app.add_api_route("/explorer/api/passages", explorer_passages, methods=["GET"], summary="Passages by id")
    app.add_api_route("/explorer/api/revisions", explorer_revisions, methods=["GET"], summary="Pages' revisions")
    app.mount("/explorer/static", StaticFiles(directory=STATIC), name="explorer")
