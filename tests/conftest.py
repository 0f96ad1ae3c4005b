"""Shared fixtures: the tests' real data (committed under tests/data plus what `make test-data` fetches, laid out in
one folder per session) and one built index per session. No test reads ../shared: a fresh clone and CI run the same."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.support.testdata import FETCHED, GENSIM_NAME, materialise

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(tempfile.mkdtemp(prefix="wikiground-test-data-"))
atexit.register(shutil.rmtree, DATA, ignore_errors=True)
MISSING = materialise(DATA)
DUMPS = DATA / "dumps"
GENSIM_DUMP = DUMPS / GENSIM_NAME


def pytest_report_header(config):
    fetched = ", ".join(str(p.relative_to(ROOT)) for p in MISSING) or "none missing"
    return f"test data: {DATA} (tests/data + fetched by `make test-data`: {fetched})"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A test that failed on a fetched file which `make test-data` has not fetched is skipped, naming the file."""
    outcome = yield
    report = outcome.get_result()
    if not (MISSING and report.failed and call.excinfo is not None):
        return
    text = str(report.longrepr)
    lacking = [src for rel, src in FETCHED.items() if src in MISSING and rel.name in text]
    if lacking:
        names = ", ".join(str(p.relative_to(ROOT)) for p in lacking)
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1] or 0, f"Skipped: {names} missing (run `make test-data`)")


@pytest.fixture(scope="session")
def data_dir() -> Path:
    return DATA


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


@pytest.fixture(scope="session")
def gensim_tfidf(tmp_path_factory) -> Path:
    """The gensim fixture dump with the TF-IDF index alone (no JVM, no model: quick to build and open)."""
    from indexer.build import build_index

    out = tmp_path_factory.mktemp("tfidf") / "index"
    build_index([GENSIM_DUMP], out, indexes=("tfidf",))
    return out
