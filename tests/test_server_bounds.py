"""The server against hostile clients (issue 40): live work on its own pool and queue, bounds on the request head
and body before any work, Host and Origin checks, the error shape on every refusal, strict JSON, no paths.

Each server is the real application under uvicorn with the real protocol class, in a thread of the test process,
over the gensim store (title channel: no JVM, no model)."""

from __future__ import annotations

import json
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from fallback.settings import FallbackSettings
from retriever.api import Retriever
from retriever.serve.limits import Access, HttpLimits, protocol_class
from retriever.serve.state import ServerState
from retriever.service import SearchOptions
from tests.support.hostile import HostileServer

LOCAL = {"claim": "Aristotle tutored Alexander the Great.", "on_the_fly": False}
LIVE = {"claim": "Zorblax Quintero wrote a book about Aristotle."}  # its subject is on no page: looked up live
MB = 1024 * 1024


class Served:
    """``create_app(state, **kw)`` under uvicorn with the bounded protocol, on a free port of 127.0.0.1."""

    def __init__(self, state: ServerState, *, http: HttpLimits | None = None, **kw):
        import uvicorn

        from retriever.serve.app import create_app

        http = http or HttpLimits()
        app = create_app(state, http=http, **kw)
        config = uvicorn.Config(
            app, host="127.0.0.1", port=0, log_level="warning", http=protocol_class(http), timeout_graceful_shutdown=30
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> Served:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "uvicorn did not start"
            time.sleep(0.02)
        self.port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


def raw(port: int, data: bytes, *, read: bool = True, timeout: float = 10.0) -> tuple[int, dict, float]:
    """Send ``data`` on a fresh connection; the answer's status, JSON body and the seconds until it came."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        t0 = time.monotonic()
        try:
            sock.sendall(data)
        except OSError:  # the server refused and closed while we were still sending
            pass
        got = b""
        while read:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            got += chunk
        elapsed = time.monotonic() - t0
    head, _, body = got.partition(b"\r\n\r\n")
    status = int(head.split()[1]) if head else 0
    return status, json.loads(body) if body.startswith(b"{") else {}, elapsed


def assert_error_shape(body: dict, kind: str | None = None) -> None:
    assert set(body) == {"error", "message"} and {"type", "message"} <= set(body["error"]), body
    assert body["message"] == body["error"]["message"], body  # the top level is what DSPy's client shows
    assert kind is None or body["error"]["type"] == kind, body


@pytest.fixture(scope="module")
def plain(gensim_store):
    state = ServerState(lambda: Retriever.open(gensim_store))
    state.start()
    with Served(state, http=HttpLimits(read_timeout=1.0), access=Access(hosts=("wiki.internal",))) as s:
        yield s


# -- the slow pool ----------------------------------------------------------------------------------


def live_state(store: Path, api_url: str, cache: Path, deadline: float = 2.0) -> ServerState:
    settings = FallbackSettings(api_url=api_url, contact="tests@example.org", cache_dir=cache, live_deadline=deadline)
    opener = lambda: Retriever.open(store, on_the_fly=True, fallback=settings)  # noqa: E731
    state = ServerState(opener, defaults=SearchOptions(), warm_up=False)  # on_the_fly unset: the server's (on)
    state.start()
    return state


def test_live_claims_do_not_hold_up_local_ones(gensim_store, tmp_path):
    """Six live claims stalled on an API that never answers, on a server with two local threads: a local claim
    is still answered at once (its pool is not the live claims')."""
    with HostileServer("hang") as api, Served(live_state(gensim_store, api.api_url, tmp_path), threads=2) as s:
        with httpx.Client(base_url=s.url, timeout=30) as client:
            idle = min(_timed(client, LOCAL) for _ in range(3))
            with ThreadPoolExecutor(6) as pool:
                live = [pool.submit(client.post, "/search", json=LIVE) for _ in range(6)]
                time.sleep(0.3)  # the live claims hold their threads now
                loaded = max(_timed(client, LOCAL) for _ in range(3))
                answers = [f.result() for f in live]
    assert loaded < max(1.0, 4 * idle), f"a local claim took {loaded:.2f} s beside live ones (idle {idle:.2f} s)"
    assert all(a.status_code == 200 for a in answers)


def _timed(client: httpx.Client, body: dict) -> float:
    t0 = time.monotonic()
    assert client.post("/search", json=body).status_code == 200
    return time.monotonic() - t0


def test_a_full_live_queue_answers_503_with_retry_after(gensim_store, tmp_path):
    with (
        HostileServer("hang") as api,
        Served(live_state(gensim_store, api.api_url, tmp_path, deadline=1.5), live_threads=1, live_queue=1) as s,
    ):
        with httpx.Client(base_url=s.url, timeout=30) as client, ThreadPoolExecutor(5) as pool:
            answers = list(pool.map(lambda _: client.post("/search", json=LIVE), range(5)))
            batch = None
            with ThreadPoolExecutor(2) as more:
                busy = [more.submit(client.post, "/search", json=LIVE) for _ in range(2)]
                time.sleep(0.2)
                batch = client.post("/search/batch", json=[LIVE])
                [f.result() for f in busy]
    codes = sorted(a.status_code for a in answers)
    assert codes.count(200) == 2 and codes.count(503) == 3, codes
    refused = next(a for a in answers if a.status_code == 503)
    assert int(refused.headers["retry-after"]) >= 1
    assert_error_shape(refused.json(), "ServerBusyError")
    assert batch.status_code == 503 and "retry-after" in batch.headers


# -- bounds before work ---------------------------------------------------------------------------------


def test_a_huge_header_is_refused_431_while_it_arrives(plain):
    head = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: " + b"a" * (20 * MB) + b"\r\n\r\n"
    status, body, elapsed = raw(plain.port, head)
    assert status == 431 and elapsed < 5, (status, elapsed)
    assert_error_shape(body, "HeaderTooLarge")
    assert httpx.get(plain.url + "/health").status_code == 200  # the server goes on


def test_a_big_body_is_refused_413_before_it_is_read(plain):
    declared = b"POST /search HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    status, body, elapsed = raw(plain.port, declared + b"Content-Length: 52428800\r\n\r\n{")
    assert status == 413 and elapsed < 2
    assert_error_shape(body, "BodyTooLarge")
    chunked = declared + b"Transfer-Encoding: chunked\r\n\r\n"
    piece = b'{"claim": "' + b"a" * (256 * 1024)
    stream = chunked + b"".join(f"{len(piece):x}\r\n".encode() + piece + b"\r\n" for _ in range(6))
    status, body, _ = raw(plain.port, stream)
    assert status == 413
    assert_error_shape(body, "BodyTooLarge")


def test_a_batch_body_bound_is_in_proportion_to_the_batch(plain):
    items = [{"id": n, "claim": "Aristotle tutored Alexander the Great. " * 40} for n in range(700)]
    answer = httpx.post(plain.url + "/search/batch", json=items, timeout=120)  # ~1.1 MB: over the single bound
    assert answer.status_code == 200 and len(answer.text.splitlines()) == 700
    one = {"claim": "a" * 1500, "padding": "b" * (2 * MB)}
    assert httpx.post(plain.url + "/search", json=one).status_code == 413


def test_a_slow_head_or_body_is_cut_by_the_read_timeout(plain):
    status, body, elapsed = raw(plain.port, b"POST /search HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    assert status == 408 and elapsed < 5
    assert_error_shape(body, "RequestTimeout")
    head = b"POST /search HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 50\r\n\r\n{"
    status, body, elapsed = raw(plain.port, head)
    assert status == 408 and elapsed < 5
    with socket.create_connection(("127.0.0.1", plain.port)) as silent:
        silent.settimeout(5)
        assert silent.recv(10) == b""  # a client that sends nothing is closed after the read timeout


# -- the error shape and strict JSON -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "content", "status"),
    [
        ("GET", "/no/such/route", None, 404),
        ("GET", "/search", None, 405),
        ("DELETE", "/reload", None, 405),
        ("POST", "/search", b"\xff\xfe not json", 400),
        ("POST", "/search", b'{"claim": ', 422),
    ],
)
def test_every_error_has_the_documented_shape(plain, method, path, content, status):
    answer = httpx.request(method, plain.url + path, content=content, headers={"content-type": "application/json"})
    assert answer.status_code == status
    assert_error_shape(answer.json())


def test_batch_ids_that_json_cannot_hold_are_refused(plain):
    huge = b'[{"id": 1e999, "claim": "Aristotle"}]'
    answer = httpx.post(plain.url + "/search/batch", content=huge, headers={"content-type": "application/json"})
    assert answer.status_code == 400 and "finite" in answer.json()["error"]["message"]
    lone = b'[{"id": "\\ud800x", "claim": "Aristotle"}]'  # a lone surrogate, escaped as JSON allows
    lines = httpx.post(plain.url + "/search/batch", content=lone, headers={"content-type": "application/json"}).text
    assert json.loads(lines.splitlines()[0])["id"] == "\ufffdx"  # strict UTF-8 JSON on every line


# -- who may ask ----------------------------------------------------------------------------------------


def test_only_served_host_names_are_answered(plain):
    for host in ("attacker.example", "attacker.example:80", "127.0.0.1.nip.io"):
        answer = httpx.get(plain.url + "/stats", headers={"host": host})
        assert answer.status_code == 421, host
        assert_error_shape(answer.json(), "MisdirectedRequest")
    for host in (f"127.0.0.1:{plain.port}", f"localhost:{plain.port}", "wiki.internal", "[::1]:80"):
        assert httpx.get(plain.url + "/health", headers={"host": host}).status_code == 200, host


def test_cross_site_requests_and_reloads_are_refused(plain):
    evil = {"origin": "http://attacker.example", "content-type": "application/x-www-form-urlencoded"}
    assert httpx.post(plain.url + "/reload", headers=evil).status_code == 403
    assert (
        httpx.get(plain.url + "/api/search?query=Aristotle", headers={"origin": "http://evil.test"}).status_code == 403
    )
    sneaky = {"sec-fetch-site": "cross-site"}
    assert httpx.get(plain.url + "/api/search?query=Aristotle", headers=sneaky).status_code == 403
    own = {"origin": plain.url, "sec-fetch-site": "same-origin"}
    assert httpx.post(plain.url + "/reload", headers=own).status_code == 200
    answer = httpx.get(plain.url + "/api/search?query=Aristotle", headers={"origin": plain.url})
    assert answer.status_code == 200 and "access-control-allow-origin" not in answer.headers


def test_cors_only_for_the_origin_given(gensim_store):
    state = ServerState(lambda: Retriever.open(gensim_store))
    state.start()
    with Served(state, access=Access(cors="http://localhost:3000")) as s:
        ok = httpx.get(s.url + "/api/search?query=Aristotle", headers={"origin": "http://localhost:3000"})
        assert ok.status_code == 200 and ok.headers["access-control-allow-origin"] == "http://localhost:3000"
        pre = httpx.options(s.url + "/search", headers={"origin": "http://localhost:3000"})
        assert pre.status_code == 204 and "POST" in pre.headers["access-control-allow-methods"]
        assert httpx.get(s.url + "/health", headers={"origin": "http://other:3000"}).status_code == 403
        assert httpx.post(s.url + "/reload", headers={"origin": "http://localhost:3000"}).status_code == 403


def test_answers_name_no_path_on_the_servers_disk(plain, gensim_store):
    stats = httpx.get(plain.url + "/stats").json()
    text = json.dumps(stats)
    assert str(gensim_store) not in text and str(gensim_store.parent) not in text
    assert stats["index"] == gensim_store.name and stats["build_id"]


# -- text parameters ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["sroffset", "srlimit", "gsroffset", "excontinue"])
def test_mediawiki_integers_are_ascii_digits_or_badinteger(plain, name):
    params = {"action": "query", "list": "search", "srsearch": "Aristotle", "format": "json", name: "\u00b2"}
    if name == "gsroffset":
        params.update(generator="search", gsrsearch="Aristotle")
    answer = httpx.get(plain.url + "/w/api.php", params=params).json()
    assert answer["error"]["code"] == "badinteger" and name in answer["error"]["info"]
    huge = httpx.get(plain.url + "/w/api.php", params={"action": "query", "pageids": "99999999999999999999"})
    assert "error" not in huge.json() and huge.status_code == 200  # past BIGINT: no such page, not a crash
    byid = httpx.get(plain.url + "/w/api.php", params={"action": "query", "pageids": "1|\u00b2"})
    assert byid.json()["error"]["code"] == "badinteger" and "pageids" in byid.json()["error"]["info"]


def test_search_texts_and_titles_are_capped(plain):
    form = {"action": "query", "list": "search", "srsearch": "Aristotle " * 5000}
    answer = httpx.post(plain.url + "/w/api.php", data=form).json()
    assert answer["error"]["code"] == "cirrussearch-query-too-long"
    long_title = httpx.get(plain.url + "/pages/" + "A" * 3000)
    assert long_title.status_code == 400
    assert_error_shape(long_title.json(), "QueryError")


def test_shutdown_does_not_wait_for_clients_that_never_send(gensim_store):
    state = ServerState(lambda: Retriever.open(gensim_store))
    state.start()
    served = Served(state, http=HttpLimits(read_timeout=1.0))
    with served:
        head = (
            b"POST /search HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 40\r\n\r\n"
        )
        silent = [socket.create_connection(("127.0.0.1", served.port)) for _ in range(3)]
        silent[0].sendall(head)  # a head, and never its body
        silent[1].sendall(b"GET /health HTTP/1.1\r\n")  # half a head
        time.sleep(0.2)
        t0 = time.monotonic()
    stopped = time.monotonic() - t0
    for sock in silent:
        sock.close()
    assert not served.thread.is_alive() and stopped < 5, f"the shutdown took {stopped:.1f} s"
