"""Shared fixtures: paths to the real data in ../shared/data and one built index per session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("WIKIGROUND_SHARED_DATA", ROOT.parent / "shared" / "data"))
DUMPS = SHARED / "dumps"
GENSIM_DUMP = DUMPS / "gensim-enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"


def pytest_collection_modifyitems(config, items):
    if not SHARED.is_dir():
        skip = pytest.mark.skip(reason=f"real data not found at {SHARED} (set WIKIGROUND_SHARED_DATA)")
        for item in items:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    return SHARED


@pytest.fixture(scope="session")
def gensim_dump() -> Path:
    return GENSIM_DUMP


@pytest.fixture(scope="session")
def gensim_store(tmp_path_factory) -> Path:
    """The gensim fixture dump ingested into a store alone (no search indexes)."""
    from indexer.build import build_index

    out = tmp_path_factory.mktemp("store") / "index"
    build_index([GENSIM_DUMP], out, indexes=())
    return out


@pytest.fixture(scope="session")
def gensim_index(tmp_path_factory) -> Path:
    """The gensim fixture dump with every index (BM25, dense, TF-IDF), built once per session."""
    from indexer.build import build_index

    out = tmp_path_factory.mktemp("full") / "index"
    build_index([GENSIM_DUMP], out, indexes=("bm25", "dense", "tfidf"))
    return out
