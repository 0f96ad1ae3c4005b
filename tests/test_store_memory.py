"""The query store's memory limit makes room for DuckDB's indexes, which are never evicted (indexer.store_memory):
lookups that read more and more of an index keep working under a small pool for table blocks."""

from __future__ import annotations

import duckdb
import pytest

from indexer import store_memory
from indexer.store_memory import HEADROOM, MemoryFit, limit_bytes


def _index_memory(con) -> int:
    return con.execute(
        "SELECT coalesce(sum(memory_usage_bytes), 0) FROM duckdb_memory() WHERE tag = 'ART_INDEX'"
    ).fetchone()[0]


def test_limit_bytes_reads_duckdb_sizes():
    assert limit_bytes("256MB") == 256 * 10**6 and limit_bytes("16MiB") == 16 << 20 and limit_bytes("4GB") == 4 * 10**9
    assert limit_bytes("1000") == 1000


def test_the_limit_is_the_pool_plus_the_index_memory_plus_headroom():
    con = duckdb.connect()
    fit = MemoryFit(con, 32 << 20)
    assert fit.limit == (32 << 20) + HEADROOM
    con.execute("CREATE TABLE t (id BIGINT PRIMARY KEY)")
    con.execute("INSERT INTO t SELECT range FROM range(2000000)")
    held = _index_memory(con)
    assert held > store_memory.STEP  # an index of two million keys, held in memory
    assert fit.refit() is True
    assert fit.limit == (32 << 20) + held + HEADROOM
    assert con.execute("SELECT current_setting('memory_limit')").fetchone()[0] == f"{fit.limit / 2**20:.1f} MiB"


def test_a_query_that_failed_for_memory_while_the_index_grew_runs_again():
    con = duckdb.connect()
    fit = MemoryFit(con, 32 << 20)
    calls = []

    def query():
        calls.append(1)
        if len(calls) == 1:  # the index grows under the query, which then cannot pin a block
            con.execute("CREATE TABLE t AS SELECT range AS id FROM range(2000000)")
            con.execute("CREATE UNIQUE INDEX t_id ON t (id)")
            raise duckdb.OutOfMemoryException("failed to pin block of size 256.0 KiB")
        return "answer"

    assert fit.run(query) == "answer" and len(calls) == 2
    assert fit.limit >= (32 << 20) + _index_memory(con)

    def always():
        raise duckdb.OutOfMemoryException("too big for any limit")

    with pytest.raises(duckdb.OutOfMemoryException):  # the indexes did not grow: a real failure is not hidden
        fit.run(always)


def test_a_store_refits_between_searches(gensim_store, monkeypatch):
    from indexer.store import Store

    monkeypatch.setattr(store_memory, "REFIT_EVERY", 2)
    with Store.open(gensim_store) as store:
        refits = []
        monkeypatch.setattr(store._memory, "refit", lambda: refits.append(1) or False)
        for _ in range(6):
            store.check_files()
        assert len(refits) == 3
