"""The query store's DuckDB memory limit: a fixed pool for table blocks, plus whatever its indexes hold.

The store's lookups by key (passages and pages by id, passages by page, links by page) go through DuckDB's ART
indexes. An index is read from the file the first time a lookup needs a part of it, and that part then stays in
memory: ART memory is not buffer managed, so it is never evicted, yet it counts against the memory limit. The
evidence path alone reads the passage and page ids' indexes, which grow with the corpus. Under a fixed limit the
lookups of a long-running process fill the limit with index parts until a query cannot pin a block and fails
("failed to pin block of size 256 KiB"), sooner the bigger the index.

So the limit is the pool for evictable table blocks (what bounds the process's memory) plus the index memory now
held plus room for one query's new index parts. It is refitted now and then between searches and whenever a query
fails for memory, which is then run again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

logger = logging.getLogger(__name__)
T = TypeVar("T")

HEADROOM = 64 << 20  # index parts one query may read beyond those already held
STEP = 16 << 20  # the limit is set again only when it would move by more than this
REFIT_EVERY = 64  # searches between two refits (reading DuckDB's memory use costs a query)
RETRIES = 3

_UNITS = {"KB": 10**3, "MB": 10**6, "GB": 10**9, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "B": 1}


def limit_bytes(size: str) -> int:
    """A DuckDB size ("256MB", "16MiB") in bytes."""
    text = size.strip().upper()
    for unit in sorted(_UNITS, key=len, reverse=True):
        if text.endswith(unit):
            return int(float(text[: -len(unit)]) * _UNITS[unit])
    return int(text)


_INDEX_MEMORY_SQL = "SELECT coalesce(sum(memory_usage_bytes), 0) FROM duckdb_memory() WHERE tag = 'ART_INDEX'"


class MemoryFit:
    """Keeps ``con``'s global memory limit at ``pool`` bytes plus its indexes' memory plus :data:`HEADROOM`."""

    def __init__(self, con: Any, pool: int):
        self._con = con
        self._pool = pool
        self._lock = threading.Lock()
        self._limit = 0
        self._searches = 0
        self.refit()

    @property
    def limit(self) -> int:
        return self._limit

    def refit(self) -> bool:
        """Set the limit from the index memory held now; True if it was raised."""
        with self._lock:
            held = int(self._con.cursor().execute(_INDEX_MEMORY_SQL).fetchone()[0])
            want = self._pool + held + HEADROOM
            if abs(want - self._limit) <= STEP and self._limit:
                return False
            raised = want > self._limit
            self._con.execute(f"SET GLOBAL memory_limit = '{want}B'")
            if self._limit:
                logger.debug("store memory limit %d MiB (indexes hold %d MiB)", want >> 20, held >> 20)
            self._limit = want
            return raised

    def searched(self) -> None:
        """Count a search; every :data:`REFIT_EVERY`-th refits the limit."""
        self._searches += 1  # a lost increment between threads only delays a refit
        if self._searches % REFIT_EVERY == 0:
            self.refit()

    def run(self, query: Callable[[], T]) -> T:
        """``query()``, run again after a refit when it fails for memory while the indexes grew under it."""
        import duckdb

        for attempt in range(RETRIES + 1):
            try:
                return query()
            except duckdb.OutOfMemoryException:
                if attempt == RETRIES or not self.refit():
                    raise
        raise AssertionError("unreachable")
