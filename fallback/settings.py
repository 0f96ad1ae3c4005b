"""Fallback settings: defaults and the environment, read in one place."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from wikiground.errors import ConfigError

CacheMode = Literal["record", "replay", "off"]
CACHE_MODES: tuple[str, ...] = ("record", "replay", "off")

DEFAULT_API_URL = "https://en.wikipedia.org/w/api.php"
DEFAULT_RATE = 1.0  # requests per second (token bucket refill)
DEFAULT_TIMEOUT = 10.0  # seconds, per HTTP request
DEFAULT_MAXLAG = 5  # Wikimedia's recommended value for non-interactive clients
DEFAULT_MAX_TRIES = 5  # HTTP tries per logical request (first try included)
DEFAULT_MAX_CONTINUE = 10  # continuation requests followed per logical call
MIN_RETRY_WAIT = 5.0  # seconds: floor for 429 / 503 / maxlag waits
DEFAULT_BACKOFF_CAP = 60.0  # seconds: exponential backoff ceiling
DEFAULT_MAX_WAIT = 300.0  # seconds: a Retry-After longer than this gives up instead of sleeping

ENV_CONTACT = "WIKIGROUND_CONTACT"
ENV_API_URL = "WIKIGROUND_API_URL"
ENV_CACHE_DIR = "WIKIGROUND_CACHE_DIR"
ENV_CACHE_MODE = "WIKIGROUND_CACHE_MODE"
ENV_RATE = "WIKIGROUND_RATE"


@dataclass(frozen=True, slots=True)
class FallbackSettings:
    api_url: str = DEFAULT_API_URL
    contact: str | None = None
    cache_dir: Path | None = None
    cache_mode: CacheMode = "record"
    rate: float = DEFAULT_RATE
    timeout: float = DEFAULT_TIMEOUT

    def __post_init__(self) -> None:
        if self.cache_mode not in CACHE_MODES:
            raise ConfigError(f"cache mode must be one of {', '.join(CACHE_MODES)}, not {self.cache_mode!r}")
        if not self.rate > 0:
            raise ConfigError(f"rate must be > 0 requests/s, not {self.rate!r}")
        if self.cache_mode == "replay" and self.cache_dir is None:
            raise ConfigError("cache mode 'replay' needs a cache directory (--cache DIR or WIKIGROUND_CACHE_DIR)")

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
        if env.get(ENV_RATE):
            try:
                base["rate"] = float(env[ENV_RATE])
            except ValueError as exc:
                raise ConfigError(f"{ENV_RATE}={env[ENV_RATE]!r} is not a number") from exc
        base.update({k: v for k, v in overrides.items() if v is not None})
        if "cache_dir" in base and base["cache_dir"] is not None:
            base["cache_dir"] = Path(base["cache_dir"])
        return cls(**base)

    def with_(self, **changes) -> FallbackSettings:
        return replace(self, **changes)
