"""wikiground retriever: offline-first evidence retrieval over a local Wikipedia index.

``import retriever`` is cheap: the JVM, torch, FAISS and scikit-learn load lazily,
inside the backend that needs them.
"""

from __future__ import annotations

from wikiground import __version__

__all__ = ["Retriever", "__version__"]


def __getattr__(name: str):
    if name == "Retriever":
        from retriever.api import Retriever

        return Retriever
    raise AttributeError(name)
