"""The evidence server (``python -m retriever.serve``): one real server process over the gensim index, and the
reload / timeout machinery in-process."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[1]
CLAIM = "Aristotle tutored Alexander the Great."


def _comparable(line: dict) -> dict:
    """An output line without its timings (they differ between two runs of one search)."""
    return {k: v for k, v in line.items() if k != "timings_ms"}


# -- servers ---------------------------------------------------------------------------------------------


class ThreadServer:
    """The application over ``state``, served by uvicorn in a thread of the test process on a free port."""

    def __init__(self, state, *, threads: int = 4):
        import uvicorn

        from retriever.serve.app import create_app

        self.state = state
        config = uvicorn.Config(create_app(state, threads=threads), host="127.0.0.1", port=0, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "uvicorn did not start"
            time.sleep(0.02)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


def light_state(index: Path, channels: str = "tfidf,title"):
    """A started ServerState over ``index`` with channels that need no JVM and no model (quick to open)."""
    from retriever.api import Retriever
    from retriever.serve.state import ServerState

    state = ServerState(lambda: Retriever.open(index, channels=channels))
    state.start()
    return state


def start_server(index: Path, *extra: str, timeout: float = 180.0) -> tuple[subprocess.Popen, str, float]:
    """``python -m retriever.serve --index INDEX --port 0``; returns the process, its URL and the ready time."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "retriever.serve", "--index", str(index), "--port", "0", *extra],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    lines: list[str] = []
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
        if line.startswith("ready: "):
            url, seconds = line.split()[1], float(line.split()[3])
            threading.Thread(target=lambda: [lines.append(x) for x in proc.stderr], daemon=True).start()
            proc.lines = lines  # type: ignore[attr-defined]
            return proc, url, seconds
    proc.kill()
    raise AssertionError(f"the server did not get ready: {''.join(lines)}")


@pytest.fixture(scope="module")
def server(gensim_index):
    proc, url, seconds = start_server(gensim_index, "--timeout", "60")
    yield proc, url, seconds
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)


@pytest.fixture(scope="module")
def url(server) -> str:
    return server[1]


@pytest.fixture(scope="module")
def local(gensim_index):
    from retriever.api import Retriever

    with Retriever.open(gensim_index) as r:
        yield r


def test_ready_line_names_url_and_seconds(server):
    proc, url, seconds = server
    assert url.startswith("http://127.0.0.1:")
    assert 0 < seconds < 180
    assert httpx.get(f"{url}/health").json() == {"status": "ok", "generation": 1}


def test_search_answers_exactly_the_cli_line(url, local):
    got = httpx.post(f"{url}/search", json={"claim": CLAIM, "k": 5}, timeout=60)
    assert got.status_code == 200
    want = local.search(CLAIM, 5).to_dict()
    assert _comparable(got.json()) == _comparable(want)
    assert got.json()["evidence"] and "timings_ms" in got.json()


def test_search_options_channels_and_multihop(url, local):
    got = httpx.post(f"{url}/search", json={"claim": CLAIM, "k": 3, "indexes": "bm25,title"}, timeout=60).json()
    assert _comparable(got) == _comparable(local.search(CLAIM, 3, channels="bm25,title").to_dict())
    hop = httpx.post(f"{url}/search", json={"claim": CLAIM, "k": 4, "multihop": True}, timeout=60).json()
    assert "hops" in hop and len(hop["evidence"]) <= 4


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        ({"claim": "x" * 2001}, 400, "2001 characters long; the limit is 2000"),
        ({"claim": CLAIM, "k": 0}, 400, "k must be a whole number from 1 to"),
        ({"claim": CLAIM, "k": 100000}, 400, "k must be a whole number from 1 to"),
        ({"claim": CLAIM, "k": "ten"}, 422, "body.k"),
        ({"claim": 12}, 422, "body.claim"),
        ({"claim": CLAIM, "colour": "red"}, 422, "body.colour"),
        ({"claim": CLAIM, "indexes": "nosuch"}, 400, "unknown index/channel nosuch"),
        ({"claim": CLAIM, "on_the_fly": True}, 400, "on_the_fly needs a fallback"),
    ],
)
def test_bad_requests_get_a_4xx_with_a_clear_message(url, body, status, words):
    r = httpx.post(f"{url}/search", json=body, timeout=60)
    assert r.status_code == status, r.text
    assert words in r.json()["error"]["message"]


@pytest.mark.parametrize("raw", [b"{not json", b'{"claim": "x"', b"\xff\xfe", b"[1, 2]", b""])
def test_malformed_json_is_a_4xx_never_a_traceback(url, raw):
    r = httpx.post(f"{url}/search", content=raw, headers={"content-type": "application/json"}, timeout=60)
    assert 400 <= r.status_code < 500, r.text
    assert "Traceback" not in r.text and r.json()["error"]["type"] == "InvalidRequest"


def test_batch_streams_one_line_per_claim(url, local):
    items = [{"id": "a", "claim": CLAIM}, {"id": 7, "question": "Who was Alan Turing?"}, {"claim": "   "}]
    r = httpx.post(f"{url}/search/batch?k=3", json=items, timeout=60)
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/x-ndjson")
    lines = {json.dumps(d["id"]): d for d in map(json.loads, r.text.splitlines())}
    assert set(lines) == {'"a"', "7", "3"}  # an item without id gets its position (from 1, as a line number)
    assert _comparable(lines['"a"']) == _comparable(local.search(CLAIM, 3).to_dict("a"))
    assert lines["3"]["status"] == "empty_query"


def test_batch_bounds(url):
    r = httpx.post(f"{url}/search/batch", json=[{"claim": "x"}] * 1001, timeout=60)
    assert r.status_code == 400 and "limit is 1000" in r.json()["error"]["message"]
    r = httpx.post(f"{url}/search/batch", json=[{"id": 1}], timeout=60)
    assert r.status_code == 400 and "no 'claim' or 'question'" in r.json()["error"]["message"]
    r = httpx.post(f"{url}/search/batch", json={"claim": "x"}, timeout=60)
    assert r.status_code == 422


def test_page_after_redirect_with_its_parts(url, local):
    store = local.store
    redirect, target = store._all(
        "SELECT r.source_title, r.target_title FROM redirects r JOIN pages p ON p.title = r.target_title "
        "JOIN categories c ON c.page_id = p.page_id LIMIT 1"
    )[0]
    page = httpx.get(f"{url}/pages/{redirect}", timeout=60).json()
    assert page["title"] == target and page["redirected_from"] == redirect
    pid = page["page_id"]
    assert page["categories"] == store.categories(pid)
    assert page["see_also"] == store.see_also(pid)
    assert [(x["title"], x["anchor"]) for x in page["links"]] == store.links(pid)
    assert page["sections"][0]["index"] == 0 and page["lead"] == store.page(pid).lead
    assert sum(len(v) for v in page["infobox"].values()) == len(store.infobox(pid))
    missing = httpx.get(f"{url}/pages/No such page at all", timeout=60)
    assert missing.status_code == 404 and "No such page at all" in missing.json()["error"]["message"]


def test_disambiguation_page_lists_its_options(url, local):
    rows = local.store._all("SELECT title FROM pages WHERE is_disambiguation LIMIT 1")
    if not rows:
        pytest.skip("no disambiguation page in this index")
    page = httpx.get(f"{url}/pages/{rows[0][0]}", timeout=60).json()
    assert page["is_disambiguation"] and page["options"]
    assert page["options"] == list(dict.fromkeys(t for t, _ in local.store.links(page["page_id"])))


def test_stats_report_index_counts_and_requests(url, local):
    before = httpx.get(f"{url}/stats", timeout=60).json()
    httpx.get(f"{url}/health")
    httpx.post(f"{url}/search", json={"claim": CLAIM, "k": 1}, timeout=60)
    stats = httpx.get(f"{url}/stats", timeout=60).json()
    assert stats["counts"]["pages"] == local.store.count("pages")
    assert stats["manifest"]["indexes"] and set(stats["channels"]) == set(local.channels)
    assert stats["versions"]["fastapi"] and stats["uptime_seconds"] > 0
    assert stats["requests"]["search"] == before["requests"].get("search", 0) + 1


def test_openapi_docs(url):
    assert httpx.get(f"{url}/docs").status_code == 200
    paths = httpx.get(f"{url}/openapi.json").json()["paths"]
    assert {"/search", "/search/batch", "/pages/{title}", "/health", "/stats", "/api/search", "/w/api.php"} <= set(
        paths
    )


def test_eight_concurrent_clients_get_the_serial_answers(url):
    claims = [CLAIM, "Alan Turing broke the Enigma code.", "Anarchism is a political philosophy.", "Apollo 11"]
    serial = {c: _comparable(httpx.post(f"{url}/search", json={"claim": c}, timeout=60).json()) for c in claims}

    def client(n: int) -> list[bool]:
        with httpx.Client(timeout=60) as h:
            return [
                _comparable(h.post(f"{url}/search", json={"claim": c}).json()) == serial[c]
                for c in claims[n % 4 :] + claims[: n % 4]
            ]

    with ThreadPoolExecutor(8) as pool:
        results = [ok for oks in pool.map(client, range(8)) for ok in oks]
    assert results == [True] * 32


def test_reload_from_localhost_and_sighup(server, url):
    proc = server[0]
    r = httpx.post(f"{url}/reload", timeout=120)
    assert r.status_code == 200 and r.json()["generation"] == 2
    assert httpx.post(f"{url}/search", json={"claim": CLAIM, "k": 2}, timeout=60).json()["evidence"]
    proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 120
    while httpx.get(f"{url}/health").json()["generation"] != 3:
        assert time.monotonic() < deadline, "SIGHUP did not reload"
        time.sleep(0.2)
    assert httpx.get(f"{url}/stats", timeout=60).json()["reloads"] == 2


def test_sigterm_is_graceful(server, url):
    """The last test of the server process (it stops it): a batch in flight at SIGTERM is answered whole."""
    proc = server[0]
    results: list[int] = []

    def batch() -> None:
        r = httpx.post(f"{url}/search/batch", json=[{"claim": CLAIM}] * 40, timeout=120)
        results.extend([r.status_code, len(r.text.splitlines())])

    def batches() -> int:
        return httpx.get(f"{url}/stats", timeout=60).json()["requests"].get("search/batch", 0)

    before = batches()  # earlier tests of this module sent batches too: wait for this one's
    t = threading.Thread(target=batch)
    t.start()
    while batches() == before:
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)  # the batch is in flight
    assert proc.wait(timeout=60) == 0
    t.join()
    assert results == [200, 40]  # the request in flight finished, every line of it
    assert "Traceback" not in "".join(proc.lines)


def test_host_warning_and_bad_index_through_the_wikiground_command(tmp_path, capsys):
    from wikiground.cli import main

    assert main(["serve", "--index", str(tmp_path / "nope"), "--host", "0.0.0.0"]) == 2
    err = capsys.readouterr().err
    assert "warning: binding 0.0.0.0" in err and "error: no store at" in err
    assert main(["serve", "--index", str(tmp_path), "--k", "0"]) == 2
    assert "--k must be a whole number from 1 to 1000" in capsys.readouterr().err


# -- generations and timeouts, in-process ---------------------------------------------------------------


@pytest.fixture
def title_state(gensim_index):
    from retriever.api import Retriever
    from retriever.serve.state import Limits, ServerState

    state = ServerState(lambda: Retriever.open(gensim_index, channels="title"), limits=Limits(timeout=0.2))
    state.start()
    yield state
    state.close()


def test_reload_swaps_atomically_and_closes_the_old_one_after_its_last_request(title_state):
    old = title_state.acquire()
    number, _ = title_state.reload()
    new = title_state.acquire()
    assert (old.number, new.number, number) == (1, 2, 2)
    assert not old.closed and old.retriever.search(CLAIM, 3).evidence  # in flight: still answers
    old.leave()
    assert old.closed and not new.closed
    new.leave()
    assert title_state.acquire() is new
    new.leave()


def test_timeout_answers_504_and_releases_the_generation(title_state):
    from retriever.serve.app import RequestTimeout, Runner

    runner = Runner(title_state, threads=1)
    gen = title_state.generation
    with pytest.raises(RequestTimeout, match="longer than 0.2 s"):
        asyncio.run(runner.run(lambda r: time.sleep(0.6)))
    with pytest.raises(RequestTimeout):  # queued behind the first: never runs, and its reference is returned
        asyncio.run(runner.run(lambda r: None))
    runner.executor.shutdown(wait=True)
    assert gen.refs == 0


BM25_THREADS = """
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import backends

b = backends.load("bm25", Path(sys.argv[1]))
queries = ["Aristotle tutored Alexander", "Apollo 11", "Anarchism political philosophy", "Alan Turing Enigma",
           "Ayn Rand novels", "Albedo of snow", "Autism spectrum", "Abraham Lincoln president"]
want = {q: [(h.passage_id, h.page_id, h.rank) for h in b.search(q, 20)] for q in queries}

def work(n):
    bad = 0
    for i in range(60):
        q = queries[(n + i) % len(queries)]
        try:
            bad += [(h.passage_id, h.page_id, h.rank) for h in b.search(q, 20)] != want[q]
        except Exception:
            bad += 1
    return bad

with ThreadPoolExecutor(8) as pool:
    print("wrong", sum(pool.map(work, range(8))))
"""


def test_bm25_searches_from_many_threads_are_right(gensim_index):
    """The server's threads share one Lucene searcher: unguarded, concurrent searches answered another query's
    hits, raised NullPointerException, or crashed the JVM (SIGSEGV), so this runs in a process of its own."""
    done = subprocess.run(
        [sys.executable, "-c", BM25_THREADS, str(gensim_index)], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert done.stdout.split() == ["wrong", "0"]


def test_import_retriever_stays_light():
    code = "import sys, retriever, retriever.serve; print(sorted(m for m in ('fastapi', 'uvicorn', 'dspy') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# -- concurrent searches answered in blocks ---------------------------------------------------------------


def test_coalescer_answers_queued_claims_together_and_each_its_own_error():
    from retriever.serve.coalesce import Coalescer

    calls: list[list[str]] = []
    gate = threading.Event()

    def answer(items):
        texts = [t for _, t in items]
        calls.append(texts)
        gate.wait(10)
        if "bad" in texts:
            raise ValueError("bad claim")
        return [{"claim": t} for t in texts]

    with ThreadPoolExecutor(8) as pool:
        co = Coalescer(pool, lanes=2)
        first = [co.submit("k", answer, c) for c in ("a", "b")]  # both lanes busy, held at the gate
        while len(calls) < 2:
            time.sleep(0.01)
        queued = [co.submit("k", answer, c) for c in ("c", "bad", "d")]
        dropped = co.submit("k", answer, "gone")
        assert dropped.cancel()  # its client gave up before its block started
        gate.set()
        assert [f.result(10)["claim"] for f in first] == ["a", "b"]
        assert queued[0].result(10) == {"claim": "c"} and queued[2].result(10) == {"claim": "d"}
        with pytest.raises(ValueError, match="bad claim"):
            queued[1].result(10)
    assert sorted(calls[:2]) == [["a"], ["b"]]
    assert calls[2] == ["c", "bad", "d"]  # one block for the three that waited, then one by one after its error
    assert sorted(map(tuple, calls[3:])) == [("bad",), ("c",), ("d",)]
    assert "gone" not in {t for c in calls for t in c}
    assert co.stats()["waiting"] == 0


def test_concurrent_searches_are_answered_in_blocks_with_the_serial_answers(gensim_index):
    state = light_state(gensim_index)
    claims = [CLAIM, "Alan Turing broke the Enigma code.", "Anarchism is a political philosophy.", "Apollo 11"]
    gen = state.generation
    try:
        with ThreadServer(state, threads=8) as url:
            serial = {c: _comparable(httpx.post(f"{url}/search", json={"claim": c}).json()) for c in claims}

            def client(n: int) -> list[bool]:
                with httpx.Client(timeout=60) as h:
                    return [
                        _comparable(h.post(f"{url}/search", json={"claim": claims[(n + i) % 4]}).json())
                        == serial[claims[(n + i) % 4]]
                        for i in range(25)
                    ]

            with ThreadPoolExecutor(8) as pool:
                results = [ok for oks in pool.map(client, range(8)) for ok in oks]
            stats = httpx.get(f"{url}/stats").json()["coalesced"]
        assert results == [True] * 200
        assert stats["claims"] == 204 and stats["waiting"] == 0
        assert stats["blocks"] < stats["claims"]  # some requests waited and were answered together
        assert gen.refs == 0 and gen.closed  # every request left it; the server's shutdown closed it
    finally:
        state.close()


def test_search_answers_render_the_same_json_object_with_orjson():
    from retriever.serve.app import LineResponse

    line = {"id": 2**70, "query": "Café \u2014 \U0001f600", "score": 0.1 + 0.2, "evidence": [{"ranks": {"bm25": 1}}]}
    assert json.loads(LineResponse(line).body) == line  # an id beyond 64 bits: the standard library writes it
    del line["id"]
    body = LineResponse(line).body
    assert json.loads(body) == line and "Café".encode() in body  # UTF-8, not \u escapes
