"""wikiground's shared ground: the version, the error tree, text normalisation, records and the index layout.

Nothing here imports another package of the project: ``indexer`` (ingest and store), ``backends`` (one
module per search channel), ``retriever`` (entities, fusion, multi-hop, the Python API) and ``fallback``
(the live MediaWiki API) all build on it. The ``wikiground`` command is :mod:`wikiground.cli`.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
