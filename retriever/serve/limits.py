"""Bounds the server holds before it does any work: the request head's size and read time (in the HTTP protocol, so
that a huge or slow head is refused while it arrives), the body's size and read time (an ASGI layer, before the
body is parsed), and who may ask (the Host names it serves, same-origin state changes, CORS only when asked for).

Each refusal is the documented error shape, ``{"error": {"type", "message"}, "message"}``: 431 for a head over its
bound, 413 for a body over its bound, 408 for a head or body that does not arrive in time, 421 for a Host name the
server does not serve, 403 for a cross-site request.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

MIB = 1024 * 1024
BODY_BYTES_PER_CLAIM = 4 * 2000 + 512  # a batch item: a claim of the default longest, UTF-8, with its id and keys
LOCAL_NAMES = ("127.0.0.1", "localhost", "::1")
REASONS = {408: "Request Timeout", 413: "Content Too Large", 421: "Misdirected Request", 431: "Header Too Large"}


@dataclass(frozen=True, slots=True)
class HttpLimits:
    """What the HTTP layer reads of one request: its head (request line and headers) and its body, each within a
    size and a time. ``max_batch_body_bytes``: the body bound of ``/search/batch`` (None: in proportion to the
    largest batch, :func:`batch_body_bytes`)."""

    max_header_bytes: int = 64 * 1024
    max_body_bytes: int = MIB
    max_batch_body_bytes: int | None = None
    read_timeout: float = 10.0  # seconds for the head, and between two pieces of the body


def batch_body_bytes(limits: HttpLimits, max_batch: int, max_claim_chars: int) -> int:
    """The body bound of ``/search/batch``: the single-request bound, or room for the largest batch of the
    longest claims (UTF-8, four bytes a character at most, plus each item's id and keys), whichever is more."""
    if limits.max_batch_body_bytes is not None:
        return limits.max_batch_body_bytes
    return max(limits.max_body_bytes, max_batch * (4 * max_claim_chars + 512))


def error_bytes(kind: str, message: str) -> bytes:
    return json.dumps({"error": {"type": kind, "message": message}, "message": message}).encode()


async def send_error(send: Any, status: int, kind: str, message: str, headers: list | None = None) -> None:
    """An error answer from an ASGI layer (the application's handlers are not reached)."""
    body = error_bytes(kind, message)
    head = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": head + (headers or [])})
    await send({"type": "http.response.body", "body": body})


def raw_error(status: int, kind: str, message: str) -> bytes:
    """A whole HTTP/1.1 error answer that closes the connection (from the protocol, before any application)."""
    body = error_bytes(kind, message)
    head = (
        f"HTTP/1.1 {status} {REASONS.get(status, 'Error')}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


def protocol_class(limits: HttpLimits) -> type:
    """uvicorn's httptools protocol, refusing a request head over ``max_header_bytes`` (431) or not complete within
    ``read_timeout`` (408; a connection that sends nothing is closed after it). The parser keeps a header value
    it has not finished in memory, so the bound is counted on the bytes received while the head is incomplete."""
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class BoundedHttpToolsProtocol(HttpToolsProtocol):
        def connection_made(self, transport: Any) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._in_head, self._head_bytes, self._head_timer, self._head_seen = True, 0, None, False
            self._arm_head_timer()

        def _arm_head_timer(self) -> None:
            if self._head_timer is None:
                self._head_timer = self.loop.call_later(limits.read_timeout, self._head_timed_out)

        def _cancel_head_timer(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_timed_out(self) -> None:
            self._head_timer = None
            if self._in_head and not self.transport.is_closing():
                if self._head_seen:
                    message = f"the request head did not arrive within {limits.read_timeout:g} s"
                    self.transport.write(raw_error(408, "RequestTimeout", message))
                self.transport.close()

        def data_received(self, data: bytes) -> None:
            if self.transport.is_closing():
                return
            if self._in_head:
                self._head_bytes += len(data)
            super().data_received(data)
            if self._in_head and self._head_bytes > limits.max_header_bytes and not self.transport.is_closing():
                message = f"the request head is over {limits.max_header_bytes} bytes"
                self.transport.write(raw_error(431, "HeaderTooLarge", message))
                self.transport.close()
            elif self._in_head:
                self._arm_head_timer()

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._in_head, self._head_seen = True, True

        def on_headers_complete(self) -> None:
            self._in_head, self._head_seen, self._head_bytes = False, False, 0
            self._cancel_head_timer()
            super().on_headers_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            self._cancel_head_timer()
            super().connection_lost(exc)

    return BoundedHttpToolsProtocol


def _body_errors() -> tuple[type, type]:
    """The body's two refusals as Starlette HTTP exceptions, so that the application's parsing of the body lets them
    through to its error handler (any other exception there becomes a 400); they close the connection."""
    from starlette.exceptions import HTTPException

    class BodyTooLarge(HTTPException):
        def __init__(self, cap: int):
            super().__init__(413, f"the request body is over {cap} bytes", {"connection": "close"})

    class BodyTimeout(HTTPException):
        def __init__(self, seconds: float):
            super().__init__(408, f"the request body did not arrive within {seconds:g} s", {"connection": "close"})

    return BodyTooLarge, BodyTimeout


_BodyTooLarge, _BodyTimeout = _body_errors()


class BodyLimit:
    """An ASGI layer bounding each request body: a ``Content-Length`` over the bound is refused before a byte of
    the body is read, and a body that grows past it (chunked) is refused as it arrives; each piece must come within
    the read timeout."""

    def __init__(self, app: Any, *, max_bytes: int, batch_bytes: int, read_timeout: float):
        self.app = app
        self.max_bytes, self.batch_bytes, self.read_timeout = max_bytes, batch_bytes, read_timeout

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        cap = self.batch_bytes if scope["path"].rstrip("/") == "/search/batch" else self.max_bytes
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > cap):
            return await _too_large(send, cap)
        state = {"bytes": 0, "done": False, "started": False}

        async def bounded_receive() -> Any:
            if state["done"]:
                return await receive()
            try:
                message = await asyncio.wait_for(receive(), self.read_timeout)
            except TimeoutError:
                raise _BodyTimeout(self.read_timeout) from None
            if message["type"] == "http.request":
                state["bytes"] += len(message.get("body", b""))
                state["done"] = not message.get("more_body", False)
                if state["bytes"] > cap:
                    raise _BodyTooLarge(cap)
            return message

        async def watched_send(message: Any) -> None:
            state["started"] = state["started"] or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, bounded_receive, watched_send)
        except _BodyTooLarge:
            if not state["started"]:
                await _too_large(send, cap)
        except _BodyTimeout as exc:
            if not state["started"]:
                await send_error(send, 408, "RequestTimeout", exc.detail, [(b"connection", b"close")])


async def _too_large(send: Any, cap: int) -> None:
    await send_error(send, 413, "BodyTooLarge", f"the request body is over {cap} bytes", [(b"connection", b"close")])


@dataclass(frozen=True, slots=True)
class Access:
    """Who may ask: the Host names the server answers (besides 127.0.0.1, localhost and ::1), and the one origin
    allowed cross-origin requests (CORS), if any."""

    hosts: tuple[str, ...] = ()
    cors: str | None = None


def host_name(value: str) -> str:
    """The name in a Host header, without its port (``[::1]:8765`` -> ``::1``), lower-cased."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1:].partition("]")[0]
    return value.rpartition(":")[0] if value.count(":") == 1 else value


class AccessCheck:
    """An ASGI layer refusing requests for Host names the server does not serve (a DNS-rebinding page's requests
    carry its own name: 421), and cross-site requests a browser makes on a page's behalf (an ``Origin`` that is not
    the server's own, or ``Sec-Fetch-Site: cross-site``: 403), unless ``--cors`` allowed that origin. A state change
    (``POST /reload``) from a browser must come from the server's own origin. Clients that are not browsers send
    neither header and are not refused."""

    def __init__(self, app: Any, access: Access):
        self.app = app
        self.hosts = frozenset(h.lower() for h in (*LOCAL_NAMES, *access.hosts))
        self.cors = access.cors.rstrip("/").lower() if access.cors else None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        host = headers.get("host")
        if host is not None and host_name(host) not in self.hosts:
            message = f"this server does not serve the host name {host_name(host)[:100]!r} (see --allow-host)"
            return await send_error(send, 421, "MisdirectedRequest", message)
        origin = headers.get("origin", "").rstrip("/").lower()
        allowed = bool(self.cors) and origin == self.cors and scope["path"] != "/reload"
        if self._cross_site(headers, origin, host) and not allowed:
            return await send_error(send, 403, "Forbidden", "cross-origin requests are refused (see --cors)")
        if allowed and scope["method"] == "OPTIONS":
            return await self._preflight(send, origin)
        if allowed:
            send = _with_cors(send, origin)
        return await self.app(scope, receive, send)

    @staticmethod
    def _cross_site(headers: dict[str, str], origin: str, host: str | None) -> bool:
        if headers.get("sec-fetch-site", "").lower() in ("cross-site", "same-site"):
            return True
        if not origin:
            return False
        parts = urlsplit(origin)
        return origin == "null" or host is None or parts.netloc != host.strip().lower()

    @staticmethod
    async def _preflight(send: Any, origin: str) -> None:
        headers = [
            (b"access-control-allow-origin", origin.encode("latin-1")),
            (b"access-control-allow-methods", b"GET, POST"),
            (b"access-control-allow-headers", b"content-type"),
            (b"access-control-max-age", b"600"),
            (b"vary", b"origin"),
        ]
        await send({"type": "http.response.start", "status": 204, "headers": headers})
        await send({"type": "http.response.body", "body": b""})


def _with_cors(send: Any, origin: str) -> Any:
    async def cors_send(message: Any) -> None:
        if message["type"] == "http.response.start":
            extra = [(b"access-control-allow-origin", origin.encode("latin-1")), (b"vary", b"origin")]
            message = {**message, "headers": [*message.get("headers", []), *extra]}
        await send(message)

    return cors_send
