"""The server's state: the open index (one *generation* at a time), its reload, and the counters.

A request takes a reference on the current generation and keeps it until its work ends (also when the client
has given up waiting); a reload opens a new generation beside the old one and swaps it in under a lock, so each
request sees exactly one of the two. The old generation is closed when its last request ends.

An index published with a channel pending (indexer.dense_later) is served without it; once the channel has joined
the folder, the next request (at most once every JOIN_CHECK_SECONDS) starts such a reload, and the requests after
it get a generation with the channel.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from retriever.service import MAX_K, Retriever, SearchOptions, check_k, pending_channels, warm_up
from wikiground.errors import QueryError

log = logging.getLogger(__name__)

JOIN_CHECK_SECONDS = 1.0  # how often requests look whether a pending channel has joined the index (a stat or two)


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds on what one request may ask (each beyond its bound is a 4xx)."""

    max_claim_chars: int = 2000
    max_k: int = MAX_K
    max_batch: int = 1000
    timeout: float = 60.0  # seconds a request may take before it is answered 504


class Generation:
    """One opened Retriever with a reference count; closed once retired and no request holds it."""

    def __init__(self, number: int, retriever: Retriever, *, close_fallback: bool = True):
        self.number = number
        self.retriever = retriever
        self.opened_at = time.time()
        self._close_fallback = close_fallback
        self._refs = 0
        self._retired = False
        self._closed = False
        self._lock = threading.Lock()

    @property
    def refs(self) -> int:
        return self._refs

    @property
    def closed(self) -> bool:
        return self._closed

    def enter(self) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError(f"generation {self.number} is closed")
            self._refs += 1

    def leave(self) -> None:
        with self._lock:
            self._refs -= 1
            last = self._retired and self._refs == 0 and not self._closed
            if last:
                self._closed = True
        if last:
            self._close()

    def retire(self) -> None:
        """No new request gets this generation; it closes now if idle, else when its last request leaves."""
        with self._lock:
            self._retired = True
            idle = self._refs == 0 and not self._closed
            if idle:
                self._closed = True
        if idle:
            self._close()

    def _close(self) -> None:
        log.info("closing index generation %d", self.number)
        fallback = self.retriever.fallback
        try:
            self.retriever.close()
        finally:
            if self._close_fallback and fallback is not None:
                fallback.close()


class ServerState:
    """The current generation, its reload, and the counters that ``/stats`` reports.

    ``opener`` opens a fresh Retriever (the same options each time: :meth:`retriever.service.OpenOptions.open`);
    ``defaults``: what a request gets for the options it leaves out (the server's command-line options). The live
    fallback's HTTP client (and so its rate limit and request lock) is shared by every generation: a reload never
    resets the rate limit. ``planner`` plans multi-hop requests (None: the local planner); it is shared by every
    request and generation.
    """

    def __init__(
        self,
        opener: Callable[[], Retriever],
        *,
        defaults: SearchOptions | None = None,
        limits: Limits | None = None,
        warm_up: bool = True,
        planner: Any | None = None,
    ):
        self.opener = opener
        self.planner = planner
        self.defaults = defaults or SearchOptions(on_the_fly=False)
        self.limits = limits or Limits()
        self.warm_up = warm_up
        self.started_at = time.time()
        self.ready_seconds: float | None = None
        self.reloads = 0
        self.requests: dict[str, int] = {}
        self._current: Generation | None = None
        self._shared_api: Any | None = None
        self._lock = threading.Lock()
        self._reload_lock = threading.Lock()
        self._count_lock = threading.Lock()
        self._join_checked = 0.0

    # -- generations ---------------------------------------------------------------------------
    def start(self) -> float:
        """Open the first generation (and warm it up); returns the seconds it took."""
        t0 = time.perf_counter()
        with self._reload_lock:
            gen = self._open(1)
            with self._lock:
                self._current = gen
        self.ready_seconds = time.perf_counter() - t0
        return self.ready_seconds

    def _open(self, number: int) -> Generation:
        retriever = self.opener()
        try:
            fallback = retriever.fallback
            if fallback is not None:
                if self._shared_api is None:
                    self._shared_api = fallback.api
                elif fallback.api is not self._shared_api:
                    fallback.api.close()
                    fallback.api = self._shared_api
            if self.warm_up:
                warm_up(retriever, jit=True, search=True)
        except BaseException:
            retriever.close()
            raise
        return Generation(number, retriever, close_fallback=False)

    def acquire(self) -> Generation:
        """The current generation, with a reference taken: the caller must ``leave()`` it."""
        self._notice_joined()
        with self._lock:
            gen = self._current
            if gen is None:
                raise QueryError("the server is not ready (no index open)")
            gen.enter()
        try:
            gen.retriever.store.check_files()  # the store and lookups every route reads: not cut under us
        except BaseException:
            gen.leave()
            raise
        return gen

    def _notice_joined(self) -> None:
        """Reload in the background when a channel the current generation was opened without, as pending, has
        joined the index folder since; the request at hand still gets the current generation."""
        gen = self._current
        if gen is None or not getattr(gen.retriever, "pending", ()) or gen.retriever.index_dir is None:
            return
        now = time.monotonic()
        if now - self._join_checked < JOIN_CHECK_SECONDS:
            return
        self._join_checked = now
        if pending_channels(gen.retriever.index_dir) != gen.retriever.pending and self.reload_soon():
            log.info("a pending channel joined %s: opening a new generation with it", gen.retriever.index_dir)

    @property
    def generation(self) -> Generation | None:
        return self._current

    def reload(self) -> tuple[int, float]:
        """Open the index folder again and swap it in; returns (generation number, seconds). One at a time."""
        t0 = time.perf_counter()
        with self._reload_lock:
            number = (self._current.number if self._current else 0) + 1
            new = self._open(number)
            with self._lock:
                old, self._current = self._current, new
                self.reloads += 1
        if old is not None:
            old.retire()
        log.info("reloaded: index generation %d", number)
        return number, time.perf_counter() - t0

    def reload_soon(self) -> bool:
        """Reload in the background (the folder was rebuilt under the open generation), unless one is running."""
        if self._reload_lock.locked():
            return False

        def run() -> None:
            try:
                self.reload()
            except Exception:
                log.exception("reload after a rebuild failed; still serving the previous index")

        threading.Thread(target=run, name="reload", daemon=True).start()
        return True

    def close(self) -> None:
        """Retire the current generation (closed once its requests end) and close the shared live client."""
        with self._lock:
            gen, self._current = self._current, None
        if gen is not None:
            gen.retire()
        if self._shared_api is not None:
            self._shared_api.close()
            self._shared_api = None

    # -- counters ------------------------------------------------------------------------------
    def count(self, endpoint: str, n: int = 1) -> None:
        with self._count_lock:
            self.requests[endpoint] = self.requests.get(endpoint, 0) + n

    def uptime(self) -> float:
        return time.time() - self.started_at

    # -- checks --------------------------------------------------------------------------------
    def check_claim(self, claim: Any, *, what: str = "claim") -> str:
        if not isinstance(claim, str):
            raise QueryError(f"{what} must be a string")
        if len(claim) > self.limits.max_claim_chars:
            raise QueryError(f"{what} is {len(claim)} characters long; the limit is {self.limits.max_claim_chars}")
        return claim

    def check_k(self, k: Any) -> int:
        k = check_k(k)
        if k > self.limits.max_k:
            raise QueryError(f"k must be a whole number from 1 to {self.limits.max_k}, got {k!r}")
        return k
