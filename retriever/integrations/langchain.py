"""A LangChain retriever over wikiground: ``WikigroundRetriever(retriever=...)`` or ``(url=...)``.

Returns the top k passages (passage level, in the order of their scores) as ``Document``s whose ``id`` is the
passage id, whose ``page_content`` is the evidence text and whose ``metadata`` holds the evidence fields (``title``,
``page_id``, ``passage_id``, ``section``, ``source``, ``score``, ``ranks``, ``url``, ``rev_id``, ``origin``, ...) and
``fusion``, the fusion that ranked them. ``fusion`` (``rrf``, ``rrf-plain`` or ``score``; None: the index's or the
server's own) is the retriever's; ``invoke(query, fusion=...)`` names one for a call. Needs
``pip install wikiground[langchain]``.
"""

from __future__ import annotations

from typing import Any

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, PrivateAttr

from retriever.integrations.source import EvidenceSource


class WikigroundRetriever(BaseRetriever):
    """Evidence for a query from a local index (``retriever``, in-process) or a wikiground server (``url``)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    retriever: Any = None
    url: str | None = None
    k: int = 5
    fusion: str | None = None
    _source: EvidenceSource = PrivateAttr()

    def model_post_init(self, context: Any) -> None:
        self._source = EvidenceSource(self.retriever, self.url, fusion=self.fusion)

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, fusion: str | None = None
    ) -> list[Document]:
        line = self._source.search(query, self.k, passages=True, fusion=fusion)
        return [
            Document(
                id=str(e["passage_id"]),
                page_content=e["evidence_text"],
                metadata={**{k: v for k, v in e.items() if k != "evidence_text"}, "fusion": line.get("fusion")},
            )
            for e in sorted(line["evidence"], key=lambda e: -e["score"])
        ]
