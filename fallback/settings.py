"""Fallback settings: defaults and the environment, read in one place, every value checked.

A :class:`FallbackSettings` is checked once, when it is made; the client (``fallback.client.WikiApi``) and
``fallback.live.open_fallback`` take it whole and trust it. A changed setting is a new object
(``dataclasses.replace(settings, rate=2.0)``), checked again as it is made.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from wikiground.errors import ConfigError

CacheMode = Literal["record", "replay", "off"]
CACHE_MODES: tuple[str, ...] = ("record", "replay", "off")
ReplayMiss = Literal["error", "skip"]  # in replay, a request the cache lacks: an error, or an empty answer
REPLAY_MISSES: tuple[str, ...] = ("error", "skip")

DEFAULT_API_URL = "https://en.wikipedia.org/w/api.php"
DEFAULT_RATE = 1.0  # requests per second (token bucket refill)
MIN_RATE = 0.01  # requests per second: slower than this, one request waits over 100 s for its token
DEFAULT_TIMEOUT = 10.0  # seconds, per HTTP request (and per socket read), never past the live deadline
DEFAULT_MAXLAG = 5  # Wikimedia's recommended value for non-interactive clients
DEFAULT_MAX_TRIES = 5  # HTTP tries per logical request (first try included)
DEFAULT_MAX_CONTINUE = 10  # continuation requests followed per logical call
MIN_RETRY_WAIT = 5.0  # seconds: floor for 429 / 503 / maxlag waits
DEFAULT_BACKOFF_BASE = 1.0  # seconds: the first exponential backoff wait after a transport failure
DEFAULT_BACKOFF_CAP = 60.0  # seconds: exponential backoff ceiling
DEFAULT_MAX_WAIT = 300.0  # seconds: a wait longer than this gives up instead of sleeping
DEFAULT_LIVE_DEADLINE = 30.0  # seconds: all of one claim's live lookups, retries, waits and reads included
DEFAULT_MAX_RETRY_AFTER = 30.0  # seconds: a longer Retry-After is cut to this (and the cut logged)
DEFAULT_BREAKER_FAILURES = 3  # consecutive transport failures that turn the live fallback off ...
DEFAULT_BREAKER_COOLDOWN = 60.0  # ... for this many seconds (then one request tries again)
DEFAULT_MAX_RESPONSE_BYTES = 8 * 1024 * 1024  # one response, decompressed; the API's largest answers are ~2 MB

ENV_CONTACT = "WIKIGROUND_CONTACT"
ENV_API_URL = "WIKIGROUND_API_URL"
ENV_CACHE_DIR = "WIKIGROUND_CACHE_DIR"
ENV_CACHE_MODE = "WIKIGROUND_CACHE_MODE"
ENV_RATE = "WIKIGROUND_RATE"
ENV_LIVE_DEADLINE = "WIKIGROUND_LIVE_DEADLINE"


def check_number(name: str, value: object, *, minimum: float | None = None, integer: bool = False) -> float:
    """``value`` as a finite number above 0 (or, given ``minimum``, at least that), or a ConfigError naming it."""
    ok_type = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok_type:
        raise ConfigError(f"{name} must be {'an integer' if integer else 'a number'}, not {value!r}")
    number = float(value)  # type: ignore[arg-type]
    if not math.isfinite(number):
        raise ConfigError(f"{name} must be finite, not {value!r}")
    if (number <= 0 and minimum is None) or (minimum is not None and number < minimum):
        raise ConfigError(f"{name} must be {'above 0' if minimum is None else f'at least {minimum:g}'}, not {value!r}")
    return number


@dataclass(frozen=True, slots=True)
class FallbackSettings:
    """The live fallback's options, every one checked here. ``api_url`` None: English Wikipedia, or in replay the one
    host the cache holds. ``maxlag`` None: requests carry no ``maxlag``."""

    api_url: str | None = None
    contact: str | None = None
    cache_dir: Path | None = None
    cache_mode: CacheMode = "record"
    rate: float = DEFAULT_RATE
    timeout: float = DEFAULT_TIMEOUT
    live_deadline: float = DEFAULT_LIVE_DEADLINE
    max_retry_after: float = DEFAULT_MAX_RETRY_AFTER
    breaker_failures: int = DEFAULT_BREAKER_FAILURES
    breaker_cooldown: float = DEFAULT_BREAKER_COOLDOWN
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    max_tries: int = DEFAULT_MAX_TRIES
    max_continue: int = DEFAULT_MAX_CONTINUE
    maxlag: int | None = DEFAULT_MAXLAG
    backoff_base: float = DEFAULT_BACKOFF_BASE
    backoff_cap: float = DEFAULT_BACKOFF_CAP
    max_wait: float = DEFAULT_MAX_WAIT
    replay_miss: ReplayMiss = "error"

    def __post_init__(self) -> None:
        self._check_text()
        self._check_numbers()

    def _check_text(self) -> None:
        for name in ("api_url", "contact"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise ConfigError(f"{name.replace('_', ' ')} must be text, not {value!r}")
        if self.cache_dir is not None:
            if not isinstance(self.cache_dir, (str, os.PathLike)):
                raise ConfigError(f"cache directory must be a path, not {self.cache_dir!r}")
            object.__setattr__(self, "cache_dir", Path(self.cache_dir))  # frozen: the one place it is set
        if self.cache_mode not in CACHE_MODES:
            raise ConfigError(f"cache mode must be one of {', '.join(CACHE_MODES)}, not {self.cache_mode!r}")
        if self.replay_miss not in REPLAY_MISSES:
            raise ConfigError(f"replay_miss must be 'error' or 'skip', not {self.replay_miss!r}")
        if self.cache_mode == "replay" and self.cache_dir is None:
            raise ConfigError("cache mode 'replay' needs a cache directory (--cache DIR or WIKIGROUND_CACHE_DIR)")

    def _check_numbers(self) -> None:
        check_number("rate (requests/s)", self.rate, minimum=MIN_RATE)
        check_number("timeout (s)", self.timeout)
        check_number("live deadline (s)", self.live_deadline)
        check_number("max Retry-After (s)", self.max_retry_after)
        check_number("circuit breaker failures", self.breaker_failures, minimum=1, integer=True)
        check_number("circuit breaker cool-down (s)", self.breaker_cooldown)
        check_number("max response size (bytes)", self.max_response_bytes, minimum=1, integer=True)
        check_number("max tries", self.max_tries, minimum=1, integer=True)
        check_number("max continuations", self.max_continue, minimum=0, integer=True)
        if self.maxlag is not None:
            check_number("maxlag (s)", self.maxlag, minimum=1, integer=True)
        check_number("backoff base (s)", self.backoff_base)
        check_number("backoff cap (s)", self.backoff_cap)
        check_number("max wait (s)", self.max_wait)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides) -> FallbackSettings:
        """Settings from ``WIKIGROUND_*`` variables; explicit non-None overrides win."""
        env = os.environ if env is None else env
        base: dict = {}
        if env.get(ENV_API_URL):
            base["api_url"] = env[ENV_API_URL]
        if env.get(ENV_CONTACT):
            base["contact"] = env[ENV_CONTACT]
        if env.get(ENV_CACHE_DIR):
            base["cache_dir"] = Path(env[ENV_CACHE_DIR])
        if env.get(ENV_CACHE_MODE):
            base["cache_mode"] = env[ENV_CACHE_MODE]
        for name, field in ((ENV_RATE, "rate"), (ENV_LIVE_DEADLINE, "live_deadline")):
            if env.get(name):
                try:
                    base[field] = float(env[name])
                except ValueError as exc:
                    raise ConfigError(f"{name}={env[name]!r} is not a number") from exc
        base.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**base)

    def with_(self, **changes) -> FallbackSettings:
        return replace(self, **changes)
