"""The pool for slow work: live-fallback and multi-hop searches run on threads of their own, apart from the
local searches' pool, so that a claim waiting on the live API never holds a thread a local claim needs.

The pool is bounded twice: ``threads`` claims run at once (the live client sends its requests one at a time at
the rate limit, so more at once only split the rate and spend every claim's live deadline), and at most ``queue``
more wait. A claim waits in the queue before its live deadline starts; one that finds the queue full is refused
at once (:class:`~wikiground.errors.ServerBusyError`: 503 with ``Retry-After``).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from wikiground.errors import ServerBusyError

DEFAULT_THREADS = 2
DEFAULT_QUEUE = 16
FIRST_GUESS_SECONDS = 5.0  # a live claim's time before one has been measured
MAX_RETRY_AFTER = 300


class SlowPool:
    """``threads`` workers and a queue of ``queue`` for live and multi-hop searches."""

    def __init__(self, threads: int = DEFAULT_THREADS, queue: int = DEFAULT_QUEUE):
        self.threads, self.queue = max(1, threads), max(0, queue)
        self.executor = ThreadPoolExecutor(max_workers=self.threads, thread_name_prefix="live")
        self._lock = threading.Lock()
        self._in = 0  # running or waiting
        self._seconds = FIRST_GUESS_SECONDS  # a moving average of a job's time
        self.refused = 0

    @property
    def waiting(self) -> int:
        return max(0, self._in - self.threads)

    def retry_after(self) -> int:
        """Seconds until a place in the queue is likely free: the queue's jobs shared over the threads."""
        ahead = max(1, self._in - self.threads + 1)
        return min(MAX_RETRY_AFTER, max(1, math.ceil(self._seconds * ahead / self.threads)))

    def check(self) -> None:
        """ServerBusyError when the queue is full."""
        with self._lock:
            if self._in >= self.threads + self.queue:
                raise self._busy()

    def _busy(self) -> ServerBusyError:
        self.refused += 1
        return ServerBusyError(
            f"the server is busy: {self.threads} live or multi-hop searches running and {self.queue} waiting; "
            "ask again later",
            retry_after=self.retry_after(),
        )

    def submit(self, fn: Callable[[], Any], *, force: bool = False) -> Future:
        """``fn()`` on the pool; ServerBusyError when the queue is full (``force``: queued all the same, for the
        claims of a batch already admitted, which go in a window of ``threads``)."""
        with self._lock:
            if not force and self._in >= self.threads + self.queue:
                raise self._busy()
            self._in += 1

        def timed() -> Any:
            t0 = time.monotonic()
            try:
                return fn()
            finally:
                with self._lock:
                    self._seconds = 0.8 * self._seconds + 0.2 * (time.monotonic() - t0)

        try:
            fut = self.executor.submit(timed)
        except BaseException:
            self._leave()
            raise
        fut.add_done_callback(lambda _: self._leave())
        return fut

    def _leave(self) -> None:
        with self._lock:
            self._in -= 1

    def stats(self) -> dict[str, Any]:
        return {"threads": self.threads, "queue": self.queue, "waiting": self.waiting, "refused": self.refused}

    def shutdown(self, wait: bool = True) -> None:
        self.executor.shutdown(wait=wait, cancel_futures=True)
