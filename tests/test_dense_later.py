"""Usable first, dense later (indexer.dense_later): a build publishes the index with the dense channel pending,
queries answer without it and say so, `wikiground embed --index DIR` completes it, and readers see the channel join
without failing or mixing generations (real dbpedia mini-dump pages; the dense channel over their 11 leads)."""

from __future__ import annotations

import json
import shutil
import threading
import time

import pytest

from tests.conftest import DUMPS

DUMP = DUMPS / "dbpedia-mini-enwiki.xml.bz2"
LEADS = {"dense": {"scope": "leads"}}
CLAIM = "Ranma is a manga series written by Rumiko Takahashi."


@pytest.fixture(scope="module")
def pending_index(tmp_path_factory):
    from indexer.build import build_index

    out = tmp_path_factory.mktemp("later") / "index"
    build_index([DUMP], out, indexes=("bm25", "dense"), workers=1, index_options=LEADS, dense_later="yes")
    return out


@pytest.fixture
def index(pending_index, tmp_path):
    """A copy of the pending index, for a test that completes it."""
    out = tmp_path / "index"
    shutil.copytree(pending_index, out)
    return out


def _manifest(index) -> dict:
    return json.loads((index / "manifest.json").read_text(encoding="utf-8"))


def test_decide_waits_for_a_short_embed_and_publishes_early_for_a_long_one():
    from indexer.dense_later import LATER_SECONDS, decide

    assert decide("auto", 60)[0] is False
    later, why = decide("auto", LATER_SECONDS * 10)
    assert later and "estimated" in why
    assert decide("yes", 1)[0] is True and decide("no", 10**9)[0] is False


def test_pending_dense_is_published_and_answered_without_dense(pending_index):
    from retriever import Retriever
    from wikiground.errors import IndexMissingError

    manifest = _manifest(pending_index)
    assert "dense" not in manifest["indexes"] and "bm25" in manifest["indexes"]
    entry = manifest["pending"]["dense"]
    assert entry["scope"] == "leads" and entry["passages"] == 11 and entry["eta_seconds"] > 0
    assert not (pending_index / "dense" / "params.json").exists()
    with Retriever.open(pending_index) as r:
        assert "dense" not in r.channels and r.pending == ("dense",)
        answer = r.search(CLAIM, 5).to_dict()
    assert answer["channels"] == ["bm25", "title"] and answer["pending"] == ["dense"]
    assert answer["evidence"][0]["title"] == "Ranma ½"
    with pytest.raises(IndexMissingError, match="pending.*wikiground embed --index"):
        Retriever.open(pending_index, channels="dense")


def test_build_prints_what_is_ready_and_pending(tmp_path, capsys):
    from indexer.__main__ import main

    out = tmp_path / "index"
    argv = ["build", "--dump", str(DUMP), "--out", str(out), "--indexes", "bm25,dense", "--workers", "1"]
    assert main([*argv, "--dense-scope", "leads", "--dense-later", "yes", "--no-embed"]) == 0
    err = capsys.readouterr().err
    assert "ready: bm25, title; pending: dense (11 passages, leads" in err
    assert f"wikiground embed --index {out}" in err


def test_embed_index_completes_the_pending_channel(index):
    from indexer.embed import main
    from retriever import Retriever

    build_id = _manifest(index)["build_id"]
    assert main(["--index", str(index), "--quiet"]) == 0
    manifest = _manifest(index)
    assert "pending" not in manifest and manifest["indexes"]["dense"]["documents"] == 11
    params = json.loads((index / "dense" / "params.json").read_text(encoding="utf-8"))
    assert params["build_id"] == build_id and params["scope"] == "leads"
    assert not (index / "dense" / "shards").exists()
    assert not list(index.parent.glob(".index.tmp-*"))
    with Retriever.open(index) as r:
        answer = r.search(CLAIM, 5).to_dict()
        assert r.channel_search("dense", CLAIM, 1)[0].title == "Ranma ½"
    assert answer["channels"] == ["bm25", "dense", "title"] and "pending" not in answer


def test_join_refuses_an_index_rebuilt_meanwhile(index):
    from indexer.dense_later import join
    from wikiground.errors import BuildError

    with pytest.raises(BuildError, match="rebuilt while its dense channel was embedded"):
        join(index, {"encoder_backend": "onnx"}, expected_build="another-build")
    assert _manifest(index)["pending"]["dense"]


def test_readers_during_the_join_never_fail_or_mix_generations(index, monkeypatch):
    from indexer.dense_later import complete
    from retriever import Retriever
    from retriever.serve import state as state_module

    monkeypatch.setattr(state_module, "JOIN_CHECK_SECONDS", 0.0)
    state = state_module.ServerState(lambda: Retriever.open(index), warm_up=False)
    state.start()
    held = state.acquire()  # a request that started before the join and ends after it
    seen, errors, stop = [], [], threading.Event()

    def reader() -> None:
        while not stop.is_set():
            gen = state.acquire()
            try:
                answer = gen.retriever.search(CLAIM, 3).to_dict()
                seen.append((gen.number, tuple(gen.retriever.channels), tuple(answer["channels"])))
            except Exception as exc:  # noqa: BLE001 - any failure of a reader fails the test
                errors.append(exc)
            finally:
                gen.leave()
            time.sleep(0.01)

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        assert complete(index) is not None
        deadline = time.monotonic() + 120
        while not any("dense" in channels for _, channels, _ in seen) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop.set()
        thread.join()
    assert not errors
    assert all(opened == answered for _, opened, answered in seen)  # each answer from one generation's channels
    numbers = {number: channels for number, channels, _ in seen}
    assert numbers[1] == ("bm25", "title") and "dense" in numbers[max(numbers)] and max(numbers) >= 2
    assert held.number == 1 and held.retriever.search(CLAIM, 3).to_dict()["channels"] == ["bm25", "title"]
    held.leave()
    assert held.closed
    state.close()


def test_server_answers_through_the_join_and_stats_say_which_channels(index, monkeypatch):
    import httpx

    from indexer.dense_later import complete
    from retriever import Retriever
    from retriever.serve import state as state_module
    from tests.test_serve import ThreadServer

    monkeypatch.setattr(state_module, "JOIN_CHECK_SECONDS", 0.0)
    state = state_module.ServerState(lambda: Retriever.open(index), warm_up=False)
    state.start()
    with ThreadServer(state) as url:
        before = httpx.get(f"{url}/stats", timeout=60).json()
        assert before["channels"] == ["bm25", "title"] and before["pending"] == ["dense"]
        answers, stop = [], threading.Event()

        def reader() -> None:
            while not stop.is_set():
                got = httpx.post(f"{url}/search", json={"claim": CLAIM, "k": 3}, timeout=60)
                answers.append((got.status_code, got.json().get("channels")))

        thread = threading.Thread(target=reader)
        thread.start()
        try:
            complete(index)
            deadline = time.monotonic() + 120
            while not any(c and "dense" in c for _, c in answers) and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            stop.set()
            thread.join()
        after = httpx.get(f"{url}/stats", timeout=60).json()
    state.close()
    assert {status for status, _ in answers} == {200}
    assert {tuple(c) for _, c in answers} <= {("bm25", "title"), ("bm25", "dense", "title")}
    assert answers[-1][1] == ["bm25", "dense", "title"]
    assert after["channels"] == ["bm25", "dense", "title"] and after["pending"] == [] and after["generation"] >= 2


def test_a_partial_embed_leaves_it_pending_and_the_next_run_resumes_from_its_shards(index, capsys):
    from indexer.embed import main

    assert main(["--index", str(index), "--end", "8", "--shard-size", "4", "--quiet"]) == 0
    assert "embedded 8 passages" in capsys.readouterr().err
    assert _manifest(index)["pending"]["dense"] and not (index / "dense" / "params.json").exists()
    assert main(["--index", str(index), "--shard-size", "4", "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "embedded 3 passages" in err and "2 kept" in err and "joined" in err
    assert "pending" not in _manifest(index) and _manifest(index)["indexes"]["dense"]["documents"] == 11
