"""A build that would run out of disk or memory says so before it starts, with its estimate (issue 21)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

import indexer.build as build_mod
from indexer.build import build_index, estimate_resources
from wikiground.errors import BuildError

GB = 2**30


@pytest.fixture
def checked(monkeypatch):
    """The check on for inputs of any size (it normally skips inputs under 64 MB)."""
    monkeypatch.setattr(build_mod, "RESOURCE_CHECK_MIN_BYTES", 0)
    monkeypatch.delenv(build_mod.SKIP_CHECK_ENV, raising=False)


def _leftovers(out: Path) -> list[str]:
    return sorted(p.name for p in out.parent.iterdir() if p.name != "input")


def test_short_disk_refused_before_anything_is_written(gensim_dump, tmp_path, monkeypatch, checked):
    monkeypatch.setattr(build_mod.shutil, "disk_usage", lambda _: SimpleNamespace(total=GB, used=GB, free=1 << 20))
    out = tmp_path / "idx"
    with pytest.raises(BuildError) as err:
        build_index([gensim_dump], out, indexes=("bm25", "tfidf"), workers=1)
    message = str(err.value)
    assert "disk" in message and "GB" in message and "passages" in message
    assert "0.0 GB free" in message
    assert not out.exists() and _leftovers(out) == []  # no temp folder, no lock file


def test_short_memory_refused(gensim_dump, tmp_path, monkeypatch, checked):
    monkeypatch.setattr(build_mod, "_memory", lambda: (GB // 2, GB // 4))
    with pytest.raises(BuildError, match=r"memory: peak about [0-9.]+ GB but the machine has 0\.5 GB"):
        build_index([gensim_dump], tmp_path / "idx", indexes=(), workers=1)


def test_override_builds_anyway(gensim_dump, tmp_path, monkeypatch, checked, caplog):
    monkeypatch.setattr(build_mod, "_memory", lambda: (GB // 2, GB // 4))
    monkeypatch.setenv(build_mod.SKIP_CHECK_ENV, "1")
    out = tmp_path / "idx"
    build_index([gensim_dump], out, indexes=(), workers=1)
    assert (out / "manifest.json").is_file()
    assert any("building anyway" in r.getMessage() for r in caplog.records)


def test_estimate_tracks_real_passage_count(gensim_dump, gensim_store, monkeypatch):
    """The estimate from the input's first bytes against the passages the store really has."""
    actual = json.loads((gensim_store / "manifest.json").read_text())["counts"]["passages"]
    est = estimate_resources([gensim_dump], ("bm25",), workers=2)
    # 1.7 MB of bz2, about 7 MB of XML: the first 2 MB cleaned, the rest extrapolated by the bz2 ratio.
    assert est["passages"] == pytest.approx(actual, rel=0.25)
    monkeypatch.setattr(build_mod, "SAMPLE_BYTES", 256 << 10)  # a much smaller sample still lands near
    est = estimate_resources([gensim_dump], ("bm25",), workers=2, passage_words=100)
    assert actual / 3 < est["passages"] < actual * 3
    assert est["peak_disk_bytes"] == est["disk_bytes"] > 0 and est["ram_bytes"] > 0  # no spill without TF-IDF
    with_tfidf = estimate_resources([gensim_dump], ("bm25", "tfidf"), workers=2, passage_words=100)
    spill = with_tfidf["peak_disk_bytes"] - with_tfidf["disk_bytes"]
    assert spill == pytest.approx(build_mod.TFIDF_SPILL_PER_PASSAGE * with_tfidf["passages"])


def test_a_cut_off_builds_folder_counts_as_free(gensim_dump, tmp_path, monkeypatch, checked):
    """What a cut-off build left is reused (--resume) or removed first: a resume must not be refused for the disk
    its own finished stages hold."""
    from wikiground.layout import build_tmp_prefix

    out = tmp_path / "idx"
    plan = build_mod._plan(("bm25", "tfidf"), (0,), 1, False, None, build_mod.DEFAULT_MAX_PAGE_CHARS, 100, None)
    need = int(estimate_resources([gensim_dump], plan.indexes, workers=1, passage_words=100)["peak_disk_bytes"])
    monkeypatch.setattr(build_mod.shutil, "disk_usage", lambda _: SimpleNamespace(total=GB, used=GB, free=need // 2))
    with pytest.raises(BuildError, match="disk"):
        build_mod._check_resources([gensim_dump], out, plan)
    kept = tmp_path / f"{build_tmp_prefix(out)}cut"
    kept.mkdir()
    (kept / "wiki.duckdb").write_bytes(b"\1" * (need // 2 + (1 << 20)))
    build_mod._check_resources([gensim_dump], out, plan)  # no refusal: the kept half and the free half suffice
