"""Where an integration's evidence comes from: an in-process Retriever, or a server's ``POST /search``."""

from __future__ import annotations

from typing import Any

from wikiground.errors import ConfigError, QueryError


class EvidenceSource:
    """``search(query, k)`` -> one output line (``{query, status, evidence: [...]}``), from ``retriever`` (a
    :class:`~retriever.api.Retriever`) or ``url`` (a server's base URL, e.g. ``http://127.0.0.1:8765``)."""

    def __init__(self, retriever: Any = None, url: str | None = None, *, timeout: float = 60.0):
        if (retriever is None) == (url is None):
            raise ConfigError("give a Retriever or the URL of a server (python -m retriever.serve), not both")
        self.retriever = retriever
        self.url = url.rstrip("/") if url else None
        self.timeout = timeout

    def search(self, query: str, k: int, *, passages: bool = False) -> dict[str, Any]:
        """One output line; ``passages``: the top k passages rather than the top k pages."""
        if self.retriever is not None:
            from retriever.service import SearchOptions, answer

            return answer(self.retriever, query, SearchOptions(k=k, passages=passages))
        import httpx

        try:
            body = {"claim": query, "k": k, "passages": passages}
            response = httpx.post(f"{self.url}/search", json=body, timeout=self.timeout)
        except httpx.HTTPError as exc:
            raise QueryError(f"{self.url}: the server cannot be reached: {exc}") from exc
        body = response.json()
        if response.status_code != 200:
            raise QueryError(f"{self.url}/search: {body.get('error', {}).get('message', response.text)}")
        return body

    def page(self, title: str) -> dict[str, Any] | None:
        if self.retriever is not None:
            from retriever.pages import page_view

            return page_view(self.retriever.store, title)
        from urllib.parse import quote

        import httpx

        response = httpx.get(f"{self.url}/pages/{quote(title, safe='')}", timeout=self.timeout)
        if response.status_code == 404:
            return None
        response.raise_for_status()
        return response.json()
