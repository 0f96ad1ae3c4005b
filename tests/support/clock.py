"""A clock that only moves when slept on, for retry and rate-limit tests without real sleeping."""

from __future__ import annotations

from datetime import UTC, datetime


class FakeClock:
    """A clock that only moves when slept on; records every sleep (for tests and benchmarks)."""

    def __init__(self, start: float = 1000.0, *, wall_start: float = 1_767_225_600.0):  # 2026-01-01T00:00:00Z
        self.t = start
        self._wall0 = wall_start - start
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.t += max(0.0, seconds)

    def now_iso(self) -> str:
        return datetime.fromtimestamp(self._wall0 + self.t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
