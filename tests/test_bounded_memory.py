"""Memory that does not grow with the corpus (issue 38), tested with the thresholds lowered: the store's evidence
lookups answer within a buffer pool far smaller than the store's tables."""

from __future__ import annotations

import pytest

import indexer.store as store_module
from indexer.store import Store
from indexer.store_memory import HEADROOM


@pytest.fixture(scope="module")
def vital_store(data_dir, tmp_path_factory):
    """The 10,033 vital-article leads in a store (no search index): its pages table alone is larger than the
    small buffer pools below."""
    from indexer.build import build_index

    out = tmp_path_factory.mktemp("vital") / "index"
    build_index([data_dir / "corpora" / "vital_articles_summaries.json"], out, indexes=())
    return out


def test_evidence_lookups_fit_a_buffer_pool_smaller_than_the_tables(vital_store, monkeypatch):
    with Store.open(vital_store) as store:
        n = store.count("passages")
        wanted = list(range(0, n, n // 40))  # spread over the whole table
        expected = store.passages_with_pages(wanted)
    assert len(expected) == len(wanted)
    # A join of passages to pages held a hash table of the pages side and failed here ("Out of Memory Error").
    monkeypatch.setattr(store_module, "STORE_MEMORY_LIMIT", "16MB")
    with Store.open(vital_store) as store:
        # The pool, and room for the indexes' memory (indexer.store_memory), which DuckDB never evicts.
        assert store._memory.limit <= 16 * 10**6 + HEADROOM + (4 << 20)
        got = store.passages_with_pages(wanted)
    assert got == expected
    assert {page.page_id for _, page, _ in got.values()} == {passage.page_id for passage, _, _ in got.values()}


def test_a_store_written_within_a_few_megabytes_spills_and_matches(gensim_dump, gensim_store, tmp_path, monkeypatch):
    """The writer's DuckDB past its share spills to the build's folder instead of failing or growing."""
    import indexer.build as build_mod
    from indexer.build import build_index

    shares = []

    def tiny(memory: int, workers: int) -> int:
        shares.append(memory)
        return 16 << 20

    monkeypatch.setattr(build_mod, "ingest_duckdb_share", tiny)
    monkeypatch.setattr(build_mod, "LOOKUPS_DUCKDB_SHARE", (16 << 20) / (1 << 30))
    out = tmp_path / "idx"
    build_index([gensim_dump], out, indexes=(), workers=1, memory=1 << 30)
    assert shares == [1 << 30]
    with Store.open(out) as small, Store.open(gensim_store) as reference:
        for table in ("pages", "redirects", "passages", "sentences", "links", "triples"):
            assert small.count(table) == reference.count(table), table
        ids = list(range(0, reference.count("passages"), 97))
        assert small.passages_with_pages(ids) == reference.passages_with_pages(ids)


def test_the_estimate_stays_within_the_budget(gensim_dump, monkeypatch):
    import indexer.build as build_mod
    from indexer.build import estimate_resources

    monkeypatch.setattr(build_mod, "RAM_PER_PASSAGE", 10**9)  # as if the input were all of enwiki and more
    est = estimate_resources([gensim_dump], ("bm25", "tfidf"), workers=2, memory=3 << 30)
    assert est["ram_bytes"] == 3 << 30


def test_memory_flag_is_read_and_checked():
    from indexer.__main__ import _parser
    from wikiground.system import default_build_memory, parse_size

    assert _parser().parse_args(["build", "--dump", "d", "--out", "o", "--memory", "3G"]).memory == 3 << 30
    assert parse_size("512M") == 512 << 20 and parse_size("1.5GiB") == 3 << 29
    with pytest.raises(ValueError):
        parse_size("lots")
    assert default_build_memory(24 << 30) == 4 << 30 and default_build_memory(6 << 30) == 1 << 30


def test_bm25_is_built_after_the_other_channels():
    """The JVM keeps the heap BM25 grew to for the rest of the build process: the other channels come first, so
    the build's peak is the larger of theirs and the JVM's, not their sum."""
    from indexer.build import build_order

    assert build_order(("bm25", "tfidf", "kg", "dense")) == ["tfidf", "kg", "dense", "bm25"]
    assert build_order(("dense", "bm25")) == ["dense", "bm25"]
