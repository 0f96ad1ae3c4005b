"""A DSPy retriever module over wikiground: ``WikigroundRetrieve(retriever=...)`` or ``(url=...)``.

``forward(query)`` returns a ``dspy.Prediction`` whose ``passages`` are ``"Title | text"`` strings (the convention of
DSPy's Wikipedia abstracts server, so programs that split titles off work unchanged), with ``titles`` and the full
``evidence`` items beside them. Needs ``pip install wikiground[dspy]``.
"""

from __future__ import annotations

from typing import Any

import dspy

from retriever.integrations.source import EvidenceSource


class WikigroundRetrieve(dspy.Retrieve):
    """``dspy.Retrieve`` answering from a local index (in-process) or a wikiground server."""

    def __init__(self, k: int = 3, *, retriever: Any = None, url: str | None = None, callbacks: Any = None):
        super().__init__(k=k, callbacks=callbacks)
        self.source = EvidenceSource(retriever, url)

    def forward(self, query: str, k: int | None = None, **kwargs: Any) -> dspy.Prediction:
        line = self.source.search(query, k if k is not None else self.k)
        evidence = line["evidence"]
        return dspy.Prediction(
            passages=[f"{e['title']} | {e['evidence_text']}" for e in evidence],
            titles=[e["title"] for e in evidence],
            evidence=evidence,
        )
