"""An index's files checked when it is opened and while it is open (issue 40, items 10, 12 and 14): sampled blocks
of the big files and the small files whole against the manifest's records, a manifest that is missing, nested or
points outside the folder, a link loop in ``delta/``, and a file cut under a running server (a SIGBUS on its memory
map killed the process; now the request touching it gets an error and the server stays up)."""

from __future__ import annotations

import json
import logging
import shutil
import signal
import sys

import httpx
import pytest

from indexer.integrity import BLOCK_BYTES, SAMPLED_BLOCKS, SMALL_FILE, block_offsets
from indexer.verify import verify
from retriever.api import Retriever
from wikiground.errors import IndexCorruptError

CLAIM = "Aristotle tutored Alexander the Great."
BIG = "tfidf/indptr.npy"  # the biggest array of the TF-IDF channel: memory-mapped, sampled at open


@pytest.fixture
def index(gensim_tfidf, tmp_path):
    out = tmp_path / "index"
    shutil.copytree(gensim_tfidf, out)
    return out


def _files(index) -> dict:
    return json.loads((index / "manifest.json").read_text())["files"]


def _flip(path, at: int) -> None:
    with path.open("r+b") as fh:
        fh.seek(at)
        byte = fh.read(1)
        fh.seek(at)
        fh.write(bytes([byte[0] ^ 0x01]))


def test_big_files_have_sampled_blocks_recorded_and_small_ones_none(index):
    files = _files(index)
    big = {rel: r for rel, r in files.items() if r["bytes"] > SMALL_FILE}
    assert BIG in big and all(len(r["blocks"]) == len(block_offsets(r["bytes"])) for r in big.values())
    assert len(big[BIG]["blocks"]) == SAMPLED_BLOCKS
    assert not any("blocks" in r for rel, r in files.items() if r["bytes"] <= SMALL_FILE)
    offsets = block_offsets(big[BIG]["bytes"])
    assert offsets[0] == 0 and offsets[-1] == big[BIG]["bytes"] - BLOCK_BYTES


@pytest.mark.parametrize("where", ["a sampled block", "the file cut"])
def test_a_damaged_big_file_is_found_at_open(index, where):
    path = index / BIG
    if where == "the file cut":
        with path.open("r+b") as fh:
            fh.truncate(4096)
    else:
        _flip(path, block_offsets(path.stat().st_size)[SAMPLED_BLOCKS // 2] + 100)
    with pytest.raises(IndexCorruptError, match="block at byte|bytes, the build wrote") as info:
        Retriever.open(index, channels="tfidf")
    assert BIG in str(info.value) and "wikiground verify" in str(info.value)


def test_a_changed_small_file_is_found_at_open(index):
    _flip(index / "tfidf" / "params.json", 10)
    with pytest.raises(IndexCorruptError, match="sha256") as info:
        Retriever.open(index, channels="tfidf")
    assert "params.json" in str(info.value)


def test_a_changed_lookups_file_falls_back_to_the_store_with_a_warning(index, caplog):
    with Retriever.open(index, channels="title") as r:
        expected = [e.title for e in r.search(CLAIM, 5).evidence]
    _flip(index / "lookups" / "lead.titles.bin", 3)  # same size: only its checksum tells
    caplog.set_level(logging.WARNING)
    with Retriever.open(index, channels="title") as r:
        assert [e.title for e in r.search(CLAIM, 5).evidence] == expected
    assert any("lead.titles.bin" in m and "resolved in the store" in m for m in caplog.messages)


def test_a_missing_manifest_is_an_error_naming_it_not_a_lost_channel(index):
    (index / "manifest.json").unlink()
    with pytest.raises(IndexCorruptError, match="missing") as info:
        Retriever.open(index)
    assert str(index / "manifest.json") in str(info.value) and "kg" in str(info.value)


def test_a_manifest_without_its_channels_is_an_error_naming_it(index):
    manifest = json.loads((index / "manifest.json").read_text())
    del manifest["indexes"]
    (index / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(IndexCorruptError, match="'indexes'") as info:
        Retriever.open(index)
    assert "manifest.json" in str(info.value)


@pytest.mark.parametrize("outside", ["../outside.npy", "/etc/hostname", "lookups/../../x"])
def test_a_manifest_naming_a_file_outside_the_index_is_refused(index, outside):
    manifest = json.loads((index / "manifest.json").read_text())
    manifest["files"][outside] = {"bytes": 1, "sha256": "0" * 64}
    (index / "manifest.json").write_text(json.dumps(manifest))
    for attempt in (lambda: Retriever.open(index), lambda: verify(index)):
        with pytest.raises(IndexCorruptError, match="outside the index folder") as info:
            attempt()
        assert outside in str(info.value) and "manifest.json" in str(info.value)


def test_a_manifest_in_a_sub_folder_is_refused_naming_it(index, gensim_tfidf):
    shutil.copy(gensim_tfidf / "manifest.json", index / "tfidf" / "manifest.json")
    with pytest.raises(IndexCorruptError, match="a manifest inside the index folder") as info:
        Retriever.open(index)
    assert str(index / "tfidf" / "manifest.json") in str(info.value)


def test_a_deeply_nested_manifest_is_an_error_naming_it(index, tmp_path):
    from indexer.build import build_index
    from wikiground.errors import ConfigError

    (index / "manifest.json").write_text("[" * 100_000 + "]" * 100_000)
    for attempt in (lambda: Retriever.open(index), lambda: verify(index)):
        with pytest.raises(IndexCorruptError, match="unreadable manifest") as info:
            attempt()
        assert "manifest.json" in str(info.value)
    src = tmp_path / "pages.jsonl"
    src.write_text(json.dumps({"id": 1, "title": "Alpha", "text": "Alpha is the first letter."}) + "\n")
    with pytest.raises(ConfigError, match="manifest.json is unreadable"):  # --out over it: refused, not replaced
        build_index([src], index, indexes=())


def test_a_link_loop_in_delta_is_refused_naming_it(index):
    (index / "delta").mkdir()
    (index / "delta" / "loop").symlink_to(index / "delta", target_is_directory=True)
    with pytest.raises(IndexCorruptError, match="symbolic link") as info:
        Retriever.open(index)
    assert str(index / "delta" / "loop") in str(info.value)


def test_a_file_cut_under_an_open_retriever_is_an_error_not_a_crash(index):
    """In a child process: were the guard missing, the SIGBUS would kill pytest itself."""
    import subprocess

    code = (
        "import sys\n"
        "from retriever.api import Retriever\n"
        "from wikiground.errors import IndexCorruptError\n"
        f"r = Retriever.open(sys.argv[1], channels='tfidf,title')\n"
        f"assert r.search({CLAIM!r}, 3).evidence\n"
        f"open(sys.argv[1] + '/{BIG}', 'r+b').truncate(4096)\n"
        "try:\n"
        f"    r.search({CLAIM!r}, 3)\n"
        "except IndexCorruptError as exc:\n"
        "    print('refused:', exc)\n"
        f"print('title:', len(r.search({CLAIM!r}, 3, channels='title').evidence))\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(index)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert f"refused: {BIG} of the index 'index' is 4,096 bytes" in done.stdout
    assert "title: " in done.stdout and "title: 0" not in done.stdout  # a channel not reading it still answers


def test_a_server_survives_a_file_cut_under_it_and_reloads_once_it_is_restored(index):
    from tests.test_serve import start_server

    original = (index / BIG).read_bytes()
    proc, url, _ = start_server(index, "--indexes", "tfidf,title", "--timeout", "60")
    try:
        assert httpx.post(f"{url}/search", json={"claim": CLAIM, "k": 3}, timeout=60).status_code == 200
        with (index / BIG).open("r+b") as fh:
            fh.truncate(4096)
        r = httpx.post(f"{url}/search", json={"claim": CLAIM, "k": 3}, timeout=60)
        assert r.status_code == 500 and proc.poll() is None
        body = r.json()
        assert body["error"]["type"] == "IndexCorruptError" and BIG in body["message"]
        assert str(index) not in r.text  # the index by its folder name, never its path
        title = httpx.post(f"{url}/search", json={"claim": CLAIM, "k": 3, "indexes": "title"}, timeout=60)
        assert title.status_code == 200 and title.json()["evidence"]
        assert httpx.get(f"{url}/stats", timeout=60).status_code == 200
        (index / BIG).write_bytes(original)  # repaired in place
        assert httpx.post(f"{url}/reload", timeout=120).status_code == 200
        again = httpx.post(f"{url}/search", json={"claim": CLAIM, "k": 3}, timeout=60)
        assert again.status_code == 200 and again.json()["evidence"] and proc.poll() is None
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)


def test_the_guard_finds_a_cut_after_earlier_checks_whatever_the_channel_order(index):
    """The guard lists each set of folders' files once: a cut after earlier checks is still found, under the set's
    names in any order, and a set without the file is not refused for it."""
    from indexer.integrity import FileGuard
    from indexer.verify import listed_files

    guard = FileGuard(index, listed_files(index))
    assert guard.cut(["tfidf", "title"]) == [] and guard.cut(("title", "tfidf")) == []
    size = (index / BIG).stat().st_size
    with (index / BIG).open("r+b") as fh:
        fh.truncate(4096)
    assert guard.cut(["title", "tfidf"]) == [(BIG, 4096, size)] == guard.cut(["tfidf", "title", "tfidf"])
    assert guard.cut(["title"]) == []
    guard.check(["title"])
    with pytest.raises(IndexCorruptError, match="is 4,096 bytes"):
        guard.check(["tfidf"])
