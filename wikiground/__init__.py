"""wikiground's shared ground: the version, the error tree, text normalisation, records and the index layout.

Nothing here imports another package of the project: ``indexer`` (ingest and store), ``backends`` (one
module per search channel, with the entity code they use), ``fallback`` (the live MediaWiki API) and ``retriever``
(fusion, the Python API, multi-hop, the service and its fronts) all build on it. The ``wikiground`` command is
:mod:`wikiground.cli`, the top of the stack.
"""

__version__ = "0.1.0"  # the one version string (pyproject.toml reads it)

__all__ = ["__version__"]
