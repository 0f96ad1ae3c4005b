"""A DSPy retriever module over wikiground: ``WikigroundRetrieve(retriever=...)`` or ``(url=...)``.

``forward(query)`` returns the top k passages (passage level, in the order of their scores) as a ``dspy.Prediction``
whose ``passages`` are ``"Title | text"`` strings (the convention of DSPy's Wikipedia abstracts server, so programs
that split titles off work unchanged), with ``titles``, ``scores`` and the full ``evidence`` items beside them. The
module also serves as DSPy's retrieval model: with ``dspy.configure(rm=WikigroundRetrieve(...))``,
``dspy.Retrieve(k=3)(query)`` reads the passages, as it reads those of ``dspy.ColBERTv2``. ``fusion`` (``rrf``,
``rrf-plain`` or ``score``; None: the index's or the server's own) is the module's, and ``forward`` may name its own
per call; the prediction's ``fusion`` names the one used. Needs ``pip install wikiground[dspy]``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import dspy
from dspy.dsp.utils import dotdict

from retriever.integrations.source import EvidenceSource


class WikigroundPrediction(dspy.Prediction):
    """The module's prediction; iterated, it gives one ``dotdict`` per passage with ``long_text`` (what
    ``dspy.Retrieve`` reads from a retrieval model), as ``dspy.ColBERTv2`` answers."""

    def __iter__(self) -> Iterator[Any]:
        for text, e in zip(self.passages, self.evidence):
            yield dotdict(long_text=text, text=text, title=e["title"], pid=e["passage_id"], score=e["score"])


class WikigroundRetrieve(dspy.Retrieve):
    """``dspy.Retrieve`` answering from a local index (in-process) or a wikiground server."""

    def __init__(
        self,
        k: int = 3,
        *,
        retriever: Any = None,
        url: str | None = None,
        fusion: str | None = None,
        callbacks: Any = None,
    ):
        super().__init__(k=k, callbacks=callbacks)
        self.source = EvidenceSource(retriever, url, fusion=fusion)

    def forward(
        self, query: str, k: int | None = None, fusion: str | None = None, **kwargs: Any
    ) -> WikigroundPrediction:
        line = self.source.search(query, k if k is not None else self.k, passages=True, fusion=fusion)
        evidence = sorted(line["evidence"], key=lambda e: -e["score"])
        return WikigroundPrediction(
            passages=[f"{e['title']} | {e['evidence_text']}" for e in evidence],
            titles=[e["title"] for e in evidence],
            scores=[e["score"] for e in evidence],
            evidence=evidence,
            fusion=line.get("fusion"),
        )
