"""Batch queries (`--queries` / `--out`): one failing claim gets its own error line and the batch goes on;
`--out` is replaced only when the batch is complete; a batch cut off (kill, full disk) is continued by `--resume`."""

from __future__ import annotations

import errno
import fcntl
import io
import json
import logging
import os
import signal
import subprocess
import sys
import time

import pytest

from retriever.batch_search import search_many
from tests.conftest import DATA, ROOT
from wikiground.errors import QueryError, WikigroundError

FEVER_FIXTURE_CLAIMS = DATA / "claims" / "fever_dev_fixture_dumps.jsonl"


def _main(*args: str) -> int:
    from retriever.query import main

    return main([*map(str, args), "--quiet"])


def _lines(path) -> list[dict]:
    return [json.loads(x) for x in path.read_bytes().decode("utf-8").splitlines()]


def _stable(lines: list[dict]) -> list[dict]:
    return [{k: v for k, v in x.items() if k != "timings_ms"} for x in lines]


def _journal(out):
    return out.parent / f".{out.name}.partial"


def _fixture_claims(tmp_path, n: int | None = None):
    lines = FEVER_FIXTURE_CLAIMS.read_text(encoding="utf-8").splitlines()[:n]
    src = tmp_path / "claims.jsonl"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return src, [json.loads(x) for x in lines]


def test_failing_claims_get_error_lines_and_the_batch_goes_on(gensim_store, tmp_path):
    """A replay cache miss and a lone surrogate used to abort the batch (truncated --out, raw traceback)."""
    queries = tmp_path / "q.jsonl"
    queries.write_text(
        '{"id": 1, "claim": "Aristotle spent time in Athens."}\n'
        '{"id": 2, "claim": "Mogadishu is the capital of Somalia."}\n'  # not local: live lookup, not in the cache
        '{"id": null, "claim": "Aristotle was a \\ud800 philosopher."}\n'
        '{"claim": "Aldous Huxley wrote Brave New World."}\n',
        encoding="utf-8",
    )
    out = tmp_path / "out.jsonl"
    out.write_text("the previous run\n")
    args = ["--index", gensim_store, "--k", "3", "--queries", queries, "--out", out, "--on-the-fly"]
    args += ["--cache-mode", "replay", "--cache", tmp_path / "cache", "--api-url", "http://127.0.0.1:9/w/api.php"]
    assert _main(*args) == 1  # some claims failed
    lines = _lines(out)  # valid UTF-8 JSON, every line
    assert [x.get("id", "absent") for x in lines] == [1, 2, None, 4]  # null kept; the line number when absent
    assert [x["status"] for x in lines] == ["ok", "error", "ok", "ok"]
    assert "not in the replay cache" in lines[1]["error"] and lines[1]["evidence"] == []
    assert lines[2]["query"] == "Aristotle was a \ufffd philosopher."
    assert lines[2]["evidence"][0]["title"] == "Aristotle"
    assert lines[3]["evidence"][0]["title"] == "Aldous Huxley"
    assert not _journal(out).exists()


def test_surrogates_reach_no_channel(gensim_index):
    """Lucene, the dense encoder and DuckDB all refused a lone surrogate; it is U+FFFD at the query boundary."""
    from retriever.api import Retriever

    with Retriever.open(gensim_index) as r:
        res = r.search("Arthur Schopenhauer \ud800 was a German philosopher \udfff.", 3)
    assert res.status == "ok" and res.evidence[0].title == "Arthur Schopenhauer"
    assert "\ufffd" in res.query and "\ud800" not in res.query
    assert set(res.evidence[0].ranks) >= {"bm25", "dense"}
    json.dumps(res.to_dict(None), ensure_ascii=False).encode("utf-8")  # no surrogate left to refuse


def test_unexpected_error_of_one_claim_is_an_error_line_with_a_debug_traceback(gensim_store, tmp_path, caplog):
    from retriever.api import Retriever
    from retriever.batch import BatchRunner
    from retriever.query import read_queries

    src, claims = _fixture_claims(tmp_path, 4)
    out = tmp_path / "out.jsonl"
    with Retriever.open(gensim_store) as r:

        def answer(text, id_):
            if id_ == claims[1]["id"]:
                return {"id": id_, "query": text, "status": "ok", "evidence": [], "bad": {1, 2}}  # not JSON-able
            return r.search(text, 2).to_dict(id_)

        with caplog.at_level(logging.DEBUG, logger="retriever.query"):
            rc = BatchRunner(answer, list(read_queries(src)), out, quiet=True).run()
    assert rc == 1
    lines = _lines(out)
    assert [x["status"] for x in lines] == ["ok", "error", "ok", "ok"]
    assert "unexpected TypeError" in lines[1]["error"]
    assert any(rec.levelno == logging.DEBUG and rec.exc_info for rec in caplog.records)


def test_interrupted_batch_leaves_out_untouched_and_resume_keeps_the_answers(gensim_store, tmp_path):
    from retriever.api import Retriever
    from retriever.batch import BatchRunner
    from retriever.query import read_queries

    src, claims = _fixture_claims(tmp_path, 8)
    queries = list(read_queries(src))
    out = tmp_path / "out.jsonl"
    out.write_text("the previous run\n")
    asked: list = []
    with Retriever.open(gensim_store) as r:

        def answer(text, id_):
            if len(asked) == 5:
                raise KeyboardInterrupt
            asked.append(id_)
            return r.search(text, 2).to_dict(id_)

        with pytest.raises(KeyboardInterrupt):
            BatchRunner(answer, queries, out, quiet=True).run()
        assert out.read_text() == "the previous run\n"
        journal = _journal(out)
        with journal.open("ab") as fh:
            fh.write(b'5\t{"id": 6, "query": "torn by a ki')  # a kill in the middle of a line
        with pytest.raises(QueryError, match="--resume"):
            BatchRunner(answer, queries, out, quiet=True).run()  # a fresh run would lose the answers
        asked.clear()
        assert BatchRunner(answer, queries, out, resume=True, quiet=True).run() == 0
        assert asked == [c["id"] for c in claims[5:]]  # only the rest was asked
        fresh = tmp_path / "fresh.jsonl"
        BatchRunner(lambda text, id_: r.search(text, 2).to_dict(id_), queries, fresh, quiet=True).run()
    assert _stable(_lines(out)) == _stable(_lines(fresh))
    assert not journal.exists()


def test_killed_batch_is_resumed(gensim_store, tmp_path):
    """kill -9 in the middle of a real batch: --out untouched, and --resume finishes with the same answers."""
    src, claims = _fixture_claims(tmp_path)
    out = tmp_path / "out.jsonl"
    out.write_text("the previous run\n")
    cmd = [sys.executable, "-m", "retriever.query", "--index", str(gensim_store), "--k", "3"]
    cmd += ["--queries", str(src), "--out", str(out), "--quiet"]
    env = {**os.environ, "WIKIGROUND_BATCH_BLOCK": "4"}  # answers land a block at a time: several blocks
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    journal = _journal(out)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if journal.exists() and journal.read_bytes().count(b"\n") >= 3:
            break
        time.sleep(0.02)
    assert proc.poll() is None, proc.stderr.read().decode()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert out.read_text() == "the previous run\n"
    answered = journal.read_bytes().count(b"\n")
    assert 3 <= answered < len(claims)
    done = subprocess.run([*cmd, "--resume"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert f"{answered} answers kept" in done.stderr
    assert "leaked" not in done.stderr  # the heap frozen by the blocks (retriever/heap.py) is given back at exit
    lines = _lines(out)
    assert [x["id"] for x in lines] == [c["id"] for c in claims]
    assert all(x["status"] != "error" for x in lines) and not journal.exists()
    # --resume of a finished --out asks nothing again.
    again = subprocess.run([*cmd, "--resume"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and f"{len(claims)} answers kept" in again.stderr and _lines(out) == lines


class _FullDisk(io.FileIO):
    """A file on a disk that fills up after ``budget`` writes."""

    budget = 0

    def write(self, data):
        if _FullDisk.budget <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        _FullDisk.budget -= 1
        return super().write(data)


@pytest.mark.parametrize("writes", [3, 8])  # full while answering; full while writing --out at the end
def test_full_disk_keeps_the_old_out_and_the_answers_for_resume(gensim_store, tmp_path, monkeypatch, writes):
    import retriever.batch as batch
    import retriever.query as query

    src, claims = _fixture_claims(tmp_path, 6)
    out = tmp_path / "out.jsonl"
    out.write_text("the previous run\n")

    def full_open(file, mode="r", buffering=-1, **kw):
        if "b" in mode and ("a" in mode or "w" in mode):
            return _FullDisk(file, mode.replace("b", ""))
        return open(file, mode, buffering, **kw)

    monkeypatch.setattr(batch, "open", full_open, raising=False)
    _FullDisk.budget = writes
    with pytest.raises(QueryError, match="No space left on device") as info:
        query.main(["--index", str(gensim_store), "--queries", str(src), "--out", str(out), "--quiet", "--verbose"])
    assert "--resume" in str(info.value) and str(out) in str(info.value)
    assert out.read_text() == "the previous run\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".out.jsonl.") and p != _journal(out)] == []
    kept = _journal(out).read_bytes().count(b"\n")
    assert kept == min(writes, len(claims))
    monkeypatch.undo()
    assert _main("--index", gensim_store, "--queries", src, "--out", out, "--resume") == 0
    assert [x["id"] for x in _lines(out)] == [c["id"] for c in claims]


def test_resume_refuses_answers_to_other_queries(gensim_store, tmp_path):
    src, _ = _fixture_claims(tmp_path, 3)
    out = tmp_path / "out.jsonl"
    out.write_text('{"id": 999, "query": "Something else.", "status": "ok", "evidence": []}\n')
    with pytest.raises(QueryError, match="not an answer to these queries"):
        from retriever.query import main

        main(["--index", str(gensim_store), "--queries", str(src), "--out", str(out), "--resume", "--verbose"])
    assert out.read_text().startswith('{"id": 999')


def test_two_batches_into_one_out_are_refused(gensim_store, tmp_path):
    src, _ = _fixture_claims(tmp_path, 2)
    out = tmp_path / "out.jsonl"
    with open(_journal(out), "a+b") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        p = subprocess.run(
            [sys.executable, "-m", "retriever.query", "--index", str(gensim_store), "--queries", str(src)]
            + ["--out", str(out), "--resume"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert p.returncode == 2 and "another batch is writing it" in p.stderr and not out.exists()


def test_read_queries_ids_and_bad_lines(tmp_path):
    from retriever.query import read_queries

    src = tmp_path / "q.jsonl"
    src.write_text('{"id": null, "claim": "a"}\n\n{"question": "b"}\n{"id": [1], "claim": "c\\udfff"}\n')
    assert list(read_queries(src)) == [(None, "a"), (3, "b"), ([1], "c\ufffd")]
    for bad, detail in [
        (b'{"id": 1, "claim": "a"}\n{"claim": "\xff"}\n', "not UTF-8"),
        (b'{"id": NaN, "claim": "a"}\n', "not JSON"),
        (b'{"id": 1e999, "claim": "a"}\n', "not JSON"),
        (b"[" * 100_000 + b"\n", "not JSON"),
        (b'{"id": 1}\n', "no 'claim' or 'question'"),
    ]:
        src.write_bytes(bad)
        with pytest.raises(QueryError, match=detail) as info:
            list(read_queries(src))
        assert f"{src}:{len(bad.splitlines())}" in str(info.value)


# -- blocks: each channel searches many claims at once; the answers are those of one claim at a time ----------------


def _block_claims() -> list[str]:
    claims = [json.loads(x)["claim"] for x in FEVER_FIXTURE_CLAIMS.read_text(encoding="utf-8").splitlines()]
    odd = ["", "   ", "Aristotle was a \ud800 philosopher.", '"Brave New World" is a novel by Aldous Huxley.', "the of"]
    return claims[:20] + odd + claims[20:]


def _without_timings(result) -> dict:
    d = result.to_dict()
    d.pop("timings_ms")
    return d


@pytest.mark.parametrize(
    ("channels", "passages"), [(None, False), ("title,bm25,tfidf", True), ("bm25,title", False), ("dense", False)]
)
def test_search_many_answers_as_search_does(gensim_index, channels, passages):
    """Same evidence, same order, same scores and entities as claim by claim, whatever the channels' order (fusion
    sums in it), with pages or passages, for blank claims and lone surrogates too."""
    from retriever.api import Retriever

    claims = _block_claims()
    with Retriever.open(gensim_index) as r:
        one = [_without_timings(r.search(c, 7, channels=channels, passages=passages)) for c in claims]
        many = []
        for a in range(0, len(claims), 9):
            block = search_many(r, claims[a : a + 9], 7, channels=channels, passages=passages)
            many += [_without_timings(x) for x in block]
    assert many == one
    assert [x["status"] for x in many[20:22]] == ["empty_query", "empty_query"]
    assert sum(x["status"] == "ok" for x in many) >= len(claims) - 4


def test_a_block_searches_each_channel_once_and_asks_the_store_once(gensim_index, monkeypatch):
    """Claim by claim, every claim cost each channel a call and the store four round trips (entities, concept words,
    their lead passages, the evidence rows), each a few milliseconds of DuckDB; a block makes one of each."""
    from collections import Counter

    from backends.bm25 import BM25Backend
    from backends.tfidf import TfidfBackend
    from indexer.store import Store
    from retriever.api import Retriever

    calls: Counter = Counter()

    def count(cls, name: str, key: str) -> None:
        orig = getattr(cls, name)

        def counted(self, *args, **kwargs):
            calls[key] += 1
            return orig(self, *args, **kwargs)

        monkeypatch.setattr(cls, name, counted)

    for name in ("resolve_titles", "lead_passage_ids", "passages_with_pages"):
        count(Store, name, name)
    for cls in (BM25Backend, TfidfBackend):
        count(cls, "search", f"{cls.name}.search")
        count(cls, "search_batch", f"{cls.name}.search_batch")
    claims = _block_claims()[:20]
    with Retriever.open(gensim_index, channels="bm25,tfidf,title") as r:
        r.warm_up()
        one = [_without_timings(r.search(c, 5)) for c in claims]
        assert calls["resolve_titles"] >= len(claims) and calls["passages_with_pages"] == len(claims)
        calls.clear()
        many = [_without_timings(x) for x in search_many(r, claims, 5)]
    assert many == one
    assert dict(calls) == {
        "resolve_titles": 2,  # the claims' names, then their concept words
        "lead_passage_ids": 1,
        "passages_with_pages": 1,
        "bm25.search_batch": 1,
        "tfidf.search_batch": 1,
    }


def test_a_failing_block_is_answered_claim_by_claim(gensim_store, tmp_path):
    """Only the failing claim of a block gets an error line; the others get the answers of the sequential path."""
    from retriever.api import Retriever
    from retriever.batch import BatchRunner
    from retriever.query import read_queries
    from retriever.service import BlockAnswerer, SearchOptions, block_answerer

    src, claims = _fixture_claims(tmp_path, 10)
    queries = list(read_queries(src))
    bad = claims[6]["id"]
    with Retriever.open(gensim_store) as r:

        def answer(text, id_):
            if id_ == bad:
                raise RuntimeError("boom")
            return r.search(text, 3).to_dict(id_)

        blocks = BlockAnswerer(r, SearchOptions(k=3), size=4)

        def answer_block(items):
            if any(id_ == bad for id_, _ in items):
                raise RuntimeError("boom")
            return blocks(items)

        out, fresh = tmp_path / "out.jsonl", tmp_path / "fresh.jsonl"
        assert BatchRunner(answer, queries, out, quiet=True, answer_block=answer_block, block_size=4).run() == 1
        BatchRunner(lambda text, id_: r.search(text, 3).to_dict(id_), queries, fresh, quiet=True).run()
        # The live fallback and multi-hop go claim by claim (one request at a time, a deadline per claim).
        assert block_answerer(r, SearchOptions(k=3, on_the_fly=True)) is None
        assert block_answerer(r, SearchOptions(k=3, multihop=True)) is None
    lines = _lines(out)
    assert [x["status"] == "error" for x in lines] == [i == 6 for i in range(10)]
    assert "unexpected RuntimeError: boom" in lines[6]["error"]
    expected, got = _stable(_lines(fresh)), _stable(lines)
    assert got[:6] + got[7:] == expected[:6] + expected[7:]


def test_cli_blocks_write_what_claim_by_claim_writes(gensim_index, tmp_path, monkeypatch):
    src, claims = _fixture_claims(tmp_path)
    outs = {}
    for block in ("0", "7"):  # 0: one claim at a time, as before blocks
        monkeypatch.setenv("WIKIGROUND_BATCH_BLOCK", block)
        out = tmp_path / f"out{block}.jsonl"
        assert (
            _main("--index", gensim_index, "--indexes", "bm25,tfidf,title", "--k", "5", "--queries", src, "--out", out)
            == 0
        )
        outs[block] = _stable(_lines(out))
    assert len(outs["0"]) == len(claims) and outs["7"] == outs["0"]
    monkeypatch.setenv("WIKIGROUND_BATCH_BLOCK", "many")
    from retriever.query import main

    with pytest.raises(WikigroundError, match="WIKIGROUND_BATCH_BLOCK='many'"):
        main(["--index", str(gensim_index), "--queries", str(src), "--out", str(tmp_path / "x.jsonl"), "--verbose"])


def test_bm25_batches_from_threads_match_single_searches(gensim_index):
    """Lucene's batch search runs on Java threads; batches and single searches from several Python threads at once
    still get each query's own hits."""
    from concurrent.futures import ThreadPoolExecutor

    import backends

    claims = _block_claims()
    b = backends.load("bm25", gensim_index)
    try:
        one = [b.search(c, 20) for c in claims]
        assert b.search_batch(claims, 20) == one
        with ThreadPoolExecutor(3) as pool:
            runs = [pool.submit(b.search_batch, claims, 20) for _ in range(2)]
            runs.append(pool.submit(lambda: [b.search(c, 20) for c in claims]))
            assert [f.result() for f in runs] == [one] * 3
    finally:
        b.close()


def test_heap_settled_for_blocks_and_given_back_at_exit(gensim_store):
    """A batch by blocks takes what loading made out of the garbage collector's way (gc.freeze) and collects the
    young generations less often, and the process still exits cleanly: DuckDB's bindings report no leaked
    objects."""
    code = (
        "import gc, sys\n"
        "from retriever.api import Retriever\n"
        "from retriever.service import BlockAnswerer, SearchOptions\n"
        "r = Retriever.open(sys.argv[1], channels='title')\n"
        "assert gc.get_freeze_count() == 0\n"
        "BlockAnswerer(r, SearchOptions(k=2)).prepare()\n"
        "assert gc.get_freeze_count() > 10_000, gc.get_freeze_count()\n"
        "from retriever.heap import THRESHOLDS\n"
        "assert gc.get_threshold() == THRESHOLDS\n"
        "print(BlockAnswerer(r, SearchOptions(k=2))([(1, 'Aristotle was a philosopher.'), (2, 'Plato taught.')])[0]['status'])\n"
    )
    p = subprocess.run([sys.executable, "-c", code, str(gensim_store)], cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "ok" and "leaked" not in p.stderr


def test_a_block_fetches_each_round_of_dependent_lookups_with_one_query(gensim_store, monkeypatch):
    """Calls whose second lookup depends on the first's answer (titles, then their pages' lead passages): one store
    query per lookup for all of them, the same results as one call after the other, and a call's own error raised
    for it."""
    from collections import Counter

    from indexer.store import Store
    from retriever.batch_search import _BlockStore

    queries: Counter = Counter()
    for name in ("resolve_titles", "lead_passage_ids"):
        orig = getattr(Store, name)

        def counted(self, *args, _orig=orig, _name=name, **kwargs):
            queries[_name] += 1
            return _orig(self, *args, **kwargs)

        monkeypatch.setattr(Store, name, counted)

    def leads(store, names: str):
        found = store.resolve_titles(names.split(","))
        if not found:
            raise LookupError(f"no page for {names!r}")
        ids = store.lead_passage_ids(sorted({r.page_id for r in found.values()}))
        return sorted(pid for pid, _ in ids.values())

    names = ["Aristotle,Algae", "Acid", "Alabama,Aristotle,Nowhere at all"]
    with Store.open(gensim_store) as store:
        expected = [leads(store, n) for n in names]
        assert all(expected)
        queries.clear()
        block = _BlockStore(store)
        assert block.each([lambda n=n: leads(block, n) for n in names]) == expected
        assert dict(queries) == {"resolve_titles": 1, "lead_passage_ids": 1}
        block = _BlockStore(store)
        with pytest.raises(LookupError, match="Nowhere"):
            block.each([lambda n=n: leads(block, n) for n in ["Acid", "Nowhere at all"]])
