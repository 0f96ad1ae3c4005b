"""Time as a dependency: a clock the client sleeps on, and the token bucket that spaces requests.

Tests inject a fake clock so retry waits and rate limiting are checked without real sleeping.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from typing import Protocol

from wikiground.errors import DeadlineExceededError


class Clock(Protocol):
    def monotonic(self) -> float: ...
    def sleep(self, seconds: float) -> None: ...
    def now_iso(self) -> str: ...


class SystemClock:
    """The real clock."""

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)

    def now_iso(self) -> str:
        return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class TokenBucket:
    """``rate`` tokens per second, at most ``burst`` banked; ``acquire`` sleeps until one is free."""

    def __init__(self, rate: float, *, burst: float = 1.0, clock: Clock | None = None):
        if not rate > 0:
            raise ValueError(f"rate must be > 0, not {rate!r}")
        self.rate = rate
        self.burst = max(1.0, burst)
        self.clock = clock or SystemClock()
        self._tokens = self.burst
        self._last = self.clock.monotonic()
        self._lock = threading.Lock()

    def acquire(self, limit: float | None = None) -> float:
        """Take one token; returns the seconds slept for it. ``limit``: the longest acceptable wait; a token that
        is further away is not waited for (DeadlineExceededError), and nothing is taken."""
        with self._lock:
            now = self.clock.monotonic()
            self._tokens = min(self.burst, self._tokens + (now - self._last) * self.rate)
            self._last = now
            waited = 0.0
            if self._tokens < 1.0:
                waited = (1.0 - self._tokens) / self.rate
                if limit is not None and waited > limit:
                    raise DeadlineExceededError(
                        f"the next request may leave in {waited:.1f}s (rate {self.rate:g}/s), after the live "
                        f"deadline ({max(0.0, limit):.1f}s left)"
                    )
                self.clock.sleep(waited)
                now = self.clock.monotonic()
                self._tokens = min(self.burst, self._tokens + (now - self._last) * self.rate)
                self._last = now
            self._tokens -= 1.0
            return waited
