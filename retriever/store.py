"""Re-export of :mod:`indexer.store`, the read side of the DuckDB store (kept for code that imports it from here)."""

from indexer.store import *  # noqa: F403
from indexer.store import __all__  # noqa: F401
