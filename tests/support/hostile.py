"""MediaWiki servers that misbehave, for the live fallback's fault tests: real HTTP on 127.0.0.1, random ports.

``HostileServer(kind)`` answers every request the same bad way:

- ``drip``: headers, then one body byte every ``interval`` seconds (each read is quick; the body never ends);
- ``drip_headers``: the status line and headers themselves, one byte every ``interval`` seconds;
- ``hang``: accepts the connection, reads the request, never answers;
- ``429``: ``429 Too Many Requests`` with ``Retry-After: 299``;
- ``maxlag``: the API's ``maxlag`` error body (HTTP 200, ``Retry-After: 5``), forever;
- ``gzip_bomb``: a gzip body that inflates to ``size`` bytes (600 MB by default), compressed as it is sent;
- ``big_body``: a ``size``-byte JSON body (50 MB by default) with its Content-Length;
- ``big_body_undeclared``: the same without Content-Length (read until the connection closes);
- ``redirect``: ``302`` to another host;
- ``bad_json``: HTTP 200 with an HTML page that is not UTF-8;
- ``endless_continue``: valid answers that always carry a ``continue``.

``down_url()`` is an API URL on a port where nothing listens. Handlers stop at ``stop()``, so nothing outlives a test.
"""

from __future__ import annotations

import json
import socket
import threading
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlsplit

KINDS = (
    "drip",
    "drip_headers",
    "hang",
    "429",
    "maxlag",
    "gzip_bomb",
    "big_body",
    "big_body_undeclared",
    "redirect",
    "bad_json",
    "endless_continue",
)
CHUNK = 64 * 1024


def down_url() -> str:
    """An API URL on 127.0.0.1 where nothing listens (the port was free a moment ago)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/w/api.php"


def _padded_json(size: int) -> tuple[bytes, bytes, int]:
    """A JSON object of ``size`` bytes as (head, tail) around ``pad`` bytes of "a"."""
    head, tail = b'{"batchcomplete":true,"pad":"', b'"}'
    return head, tail, max(0, size - len(head) - len(tail))


_BOMB_PREFIX: dict[tuple[bytes, int], tuple[bytes, object, int]] = {}
_BOMB_LOCK = threading.Lock()


def _bomb_prefix(head: bytes, pad: int) -> tuple[bytes, object, int]:
    """The gzip stream of ``head`` and the first 16 MB of padding, compressed once per process (every request
    sends it: a client that stops at its cap costs the server nothing), the compressor there, and the bytes done."""
    key = (head, pad)
    with _BOMB_LOCK:
        if key not in _BOMB_PREFIX:
            packer = zlib.compressobj(1, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
            done = min(pad, 16 * 1024 * 1024)
            data = packer.compress(head) + packer.compress(b"a" * done)
            _BOMB_PREFIX[key] = (data, packer, done)
        return _BOMB_PREFIX[key]


class HostileServer:
    def __init__(self, kind: str, *, interval: float = 1.0, size: int | None = None):
        if kind not in KINDS:
            raise ValueError(f"unknown hostile server kind {kind!r}")
        self.kind = kind
        self.interval = interval
        self.size = size if size is not None else (600 if kind == "gzip_bomb" else 50) * 1024 * 1024
        self.stopped = threading.Event()
        self.requests = 0
        self.bytes_sent = 0
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name=f"hostile-{kind}", daemon=True)

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/w/api.php"

    def __enter__(self) -> HostileServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        self.stopped.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def _count(self, sent: int = 0, request: bool = False) -> None:
        with self._lock:
            self.bytes_sent += sent
            self.requests += int(request)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet
                pass

            def do_GET(self) -> None:  # noqa: N802 - the http.server name
                owner._count(request=True)
                params = dict(parse_qsl(urlsplit(self.path).query))
                try:
                    getattr(owner, f"_serve_{owner.kind}")(self, params)
                except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
                    pass  # the client gave up: what it should do

        return Handler

    # -- the misbehaviours -------------------------------------------------------------------------

    def _send(self, h: BaseHTTPRequestHandler, data: bytes) -> None:
        h.wfile.write(data)
        h.wfile.flush()
        self._count(len(data))

    def _drip(self, h: BaseHTTPRequestHandler, data: bytes) -> None:
        for i in range(len(data)):
            if self.stopped.wait(self.interval):
                return
            self._send(h, data[i : i + 1])

    def _serve_drip(self, h, params) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "application/json; charset=utf-8")
        h.send_header("Content-Length", "1000000")
        h.end_headers()
        h.wfile.flush()
        self._drip(h, b" " * 1_000_000)

    def _serve_drip_headers(self, h, params) -> None:
        self._drip(h, b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Padding: " + b"x" * 1000 + b"\r\n")

    def _serve_hang(self, h, params) -> None:
        self.stopped.wait(120)

    def _serve_429(self, h, params) -> None:
        body = b"<html><body>Too many requests</body></html>"
        h.send_response(429)
        h.send_header("Retry-After", "299")
        h.send_header("Content-Type", "text/html")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        self._send(h, body)

    def _json(self, h, obj: object, *, headers: dict[str, str] | None = None) -> None:
        body = json.dumps(obj).encode("utf-8")
        h.send_response(200)
        h.send_header("Content-Type", "application/json; charset=utf-8")
        for name, value in (headers or {}).items():
            h.send_header(name, value)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        self._send(h, body)

    def _serve_maxlag(self, h, params) -> None:
        error = {"code": "maxlag", "info": "Waiting for 10.64.48.1: 7 seconds lagged.", "host": "db1", "lag": 7}
        self._json(h, {"error": error, "servedby": "mw1"}, headers={"Retry-After": "5", "X-Database-Lag": "7"})

    def _serve_gzip_bomb(self, h, params) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "application/json; charset=utf-8")
        h.send_header("Content-Encoding", "gzip")
        h.send_header("Connection", "close")
        h.end_headers()
        head, tail, pad = _padded_json(self.size)
        prefix, packer, done = _bomb_prefix(head, pad)
        self._send(h, prefix)
        packer = packer.copy()  # a client that reads on gets the rest, compressed as it is sent
        block = b"a" * (1024 * 1024)
        for start in range(done, pad, len(block)):
            if self.stopped.is_set():
                return
            out = packer.compress(block[: pad - start])
            if out:
                self._send(h, out)
        self._send(h, packer.compress(tail) + packer.flush())

    def _big(self, h, *, declared: bool) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "application/json; charset=utf-8")
        if declared:
            h.send_header("Content-Length", str(self.size))
        h.send_header("Connection", "close")
        h.end_headers()
        head, tail, pad = _padded_json(self.size)
        self._send(h, head)
        block = b"a" * CHUNK
        for start in range(0, pad, CHUNK):
            if self.stopped.is_set():
                return
            self._send(h, block[: pad - start])
        self._send(h, tail)

    def _serve_big_body(self, h, params) -> None:
        self._big(h, declared=True)

    def _serve_big_body_undeclared(self, h, params) -> None:
        self._big(h, declared=False)

    def _serve_redirect(self, h, params) -> None:
        h.send_response(302)
        h.send_header("Location", "http://example.com/w/api.php?" + urlsplit(h.path).query)
        h.send_header("Content-Length", "0")
        h.end_headers()

    def _serve_bad_json(self, h, params) -> None:
        body = b"<!DOCTYPE html><html><body>Service \xff\xfe unavailable</body></html>"
        h.send_response(200)
        h.send_header("Content-Type", "application/json; charset=utf-8")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        self._send(h, body)

    def _serve_endless_continue(self, h, params) -> None:
        n = self.requests
        titles = [t for t in params.get("titles", "").split("|") if t]
        query = {"pages": [{"title": t, "missing": True, "ns": 0} for t in titles], "search": []}
        cont = {"continue": "||", "clcontinue": f"{n}|Endless", "plcontinue": f"{n}|0|Endless", "sroffset": n}
        self._json(h, {"continue": cont, "query": query})
