"""Where an integration's evidence comes from: an in-process Retriever, or a server's ``POST /search``."""

from __future__ import annotations

from typing import Any

from wikiground.errors import ConfigError, ServerAnswerError


def _checked(fusion: str | None) -> str | None:
    """A fusion's name checked as a server checks a request's (QueryError); None stays None."""
    if fusion is None:
        return None
    from retriever.service import check_fusion

    return check_fusion(fusion)


class EvidenceSource:
    """``search(query, k)`` -> one output line (``{query, status, evidence: [...]}``), from ``retriever`` (a
    :class:`~retriever.api.Retriever`) or ``url`` (a server's base URL, e.g. ``http://127.0.0.1:8765``).
    ``fusion``: the fusion each search asks for (one of ``retriever.fusion.FUSIONS``; None: the Retriever's or the
    server's own), checked here (QueryError), as a server checks a request's."""

    def __init__(
        self, retriever: Any = None, url: str | None = None, *, timeout: float = 60.0, fusion: str | None = None
    ):
        if (retriever is None) == (url is None):
            raise ConfigError("give a Retriever or the URL of a server (python -m retriever.serve), not both")
        self.retriever = retriever
        self.url = url.rstrip("/") if url else None
        self.timeout = timeout
        self.fusion = _checked(fusion)

    def search(self, query: str, k: int, *, passages: bool = False, fusion: str | None = None) -> dict[str, Any]:
        """One output line; ``passages``: the top k passages rather than the top k pages; ``fusion``: this search's
        fusion, over the source's own (QueryError for an unknown one, before any work)."""
        fusion = _checked(fusion) if fusion is not None else self.fusion
        if self.retriever is not None:
            from retriever.service import SearchOptions, answer

            return answer(self.retriever, query, SearchOptions(k=k, passages=passages, fusion=fusion))
        request = {"claim": query, "k": k, "passages": passages}
        body = self._ask("POST", "/search", json=request if fusion is None else {**request, "fusion": fusion})
        if not isinstance(body, dict) or not isinstance(body.get("evidence"), list):
            raise ServerAnswerError(
                "answered /search without an 'evidence' list: not a wikiground server (python -m retriever.serve)?",
                url=self.url or "",
            )
        return body

    def page(self, title: str) -> dict[str, Any] | None:
        if self.retriever is not None:
            from retriever.pages import page_view

            return page_view(self.retriever.store, title)
        from urllib.parse import quote

        try:
            body = self._ask("GET", f"/pages/{quote(title, safe='')}")
        except ServerAnswerError as exc:
            if exc.status == 404 and exc.kind == "NotFound" and not exc.route_missing:
                return None  # the server's own "no such page", not a missing route
            raise
        if not isinstance(body, dict) or "title" not in body:
            raise ServerAnswerError("answered /pages without a page: not a wikiground server?", url=self.url or "")
        return body

    def _ask(self, method: str, path: str, **kw: Any) -> Any:
        """The JSON of the server's 200 answer; ServerAnswerError naming the URL and what answered otherwise."""
        import httpx

        where = f"{self.url}{path.split('?')[0][:80]}"
        try:
            response = httpx.request(method, f"{self.url}{path}", timeout=self.timeout, **kw)
        except httpx.HTTPError as exc:
            raise ServerAnswerError(
                f"the server cannot be reached ({type(exc).__name__}: {exc}); is `python -m retriever.serve` running "
                "there?",
                url=where,
            ) from exc
        try:
            body = response.json()
        except ValueError:
            kind = response.headers.get("content-type", "no content type")
            raise ServerAnswerError(
                f"HTTP {response.status_code} with a body that is not JSON ({kind}): not a wikiground server, or a "
                "wrong base path?",
                url=where,
                status=response.status_code,
            ) from None
        if response.status_code != 200:
            error = body.get("error") if isinstance(body, dict) else None
            if not isinstance(error, dict):
                raise ServerAnswerError(
                    f"HTTP {response.status_code} without a wikiground error: not a wikiground server, or a wrong "
                    "base path?",
                    url=where,
                    status=response.status_code,
                )
            exc = ServerAnswerError(
                f"HTTP {response.status_code}: {error.get('message')}", url=where, status=response.status_code
            )
            exc.kind = str(error.get("type"))
            exc.route_missing = str(error.get("message", "")).startswith("no route")
            raise exc
        return body
