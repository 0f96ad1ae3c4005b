"""The one exception hierarchy of wikiground.

Every error the library raises on purpose derives from :class:`WikigroundError`;
lower-level errors (OSError, duckdb.Error, httpx.HTTPError, json errors, ...)
are wrapped with ``raise ... from exc`` so callers catch one tree.
"""

from __future__ import annotations

__all__ = [
    "WikigroundError",
    "ConfigError",
    "InputError",
    "BuildError",
    "IndexMissingError",
    "IndexCorruptError",
    "IndexFormatError",
    "IndexChangedError",
    "IndexLockedError",
    "QueryError",
    "FallbackError",
    "ContactRequiredError",
    "ApiError",
    "TransportError",
    "RetryExhaustedError",
    "CacheMissError",
    "ForbiddenHostError",
    "DeadlineExceededError",
    "CircuitOpenError",
    "ResponseTooLargeError",
    "JvmError",
    "ModelError",
    "PlannerError",
    "ServerBusyError",
    "ServerAnswerError",
]


class WikigroundError(Exception):
    """Base class of all wikiground errors."""


class ConfigError(WikigroundError):
    """Invalid option or environment setting."""


class InputError(WikigroundError):
    """Bad input data: names the file and the place (byte offset, line, page)."""

    def __init__(self, message: str, *, path: str | None = None, where: str | None = None):
        self.path = path
        self.where = where
        parts = [p for p in (path, where) if p]
        prefix = ": ".join(parts)
        super().__init__(f"{prefix}: {message}" if prefix else message)


class BuildError(WikigroundError):
    """An index build failed (the previous index, if any, is left untouched)."""


class IndexMissingError(WikigroundError):
    """A requested index (or the store) does not exist in the index folder."""


class IndexCorruptError(WikigroundError):
    """An index folder exists but cannot be read (wrong version, missing files)."""


class IndexFormatError(IndexCorruptError):
    """An index folder (or a cache) written by an older wikiground, in a format this version no longer reads.

    ``found`` and ``reads`` name the two formats: a format number (``format N``), or, where a layout changed
    under the same number, words for each layout."""

    def __init__(
        self,
        where: object,
        found: int | str,
        reads: int | str,
        *,
        remedy: str = "rebuild it with `wikiground index ...`",
    ):
        self.where = str(where)
        self.found = found
        self.reads = reads
        super().__init__(
            f"{where}: built by an older wikiground ({_format(found)}); this version reads {_format(reads)}: {remedy}"
        )


def _format(version: int | str) -> str:
    return f"format {version}" if isinstance(version, int) else version


class IndexChangedError(WikigroundError):
    """The index folder was rebuilt after it was opened: reopen it (one reader never mixes two builds)."""


class IndexLockedError(BuildError):
    """Another build (or a delta writer) holds the index folder's lock."""


class QueryError(WikigroundError):
    """A query could not be answered (bad arguments, unreadable query file)."""


class FallbackError(WikigroundError):
    """Base class of the live MediaWiki fallback's errors."""


class ContactRequiredError(FallbackError, ConfigError):
    """Live requests need a contact for the User-Agent (Wikimedia policy)."""


class ApiError(FallbackError):
    """The API answered with an ``error`` body, or a body that is not JSON."""

    def __init__(self, message: str, *, code: str | None = None, status: int | None = None):
        self.code = code
        self.status = status
        super().__init__(message)


class TransportError(FallbackError):
    """Network failure: timeout, connection reset, refused host."""


class RetryExhaustedError(FallbackError):
    """Retries (429, 503, maxlag, timeouts) ran out."""


class CacheMissError(FallbackError):
    """Replay mode: the request is not in the cache."""


class ForbiddenHostError(FallbackError):
    """A request was about to leave for a host other than the configured API host."""


class DeadlineExceededError(FallbackError):
    """A claim's overall live deadline ran out; what was found before it is kept."""


class CircuitOpenError(FallbackError):
    """The live fallback is off for a while after consecutive transport failures (the circuit breaker)."""


class ResponseTooLargeError(FallbackError):
    """A live response (decompressed) exceeded the size cap."""


class JvmError(WikigroundError):
    """The Java 21 VM that Lucene/Anserini needs cannot be found or started."""


class ModelError(ConfigError):
    """The embedding model is missing, fails its pinned sha256, or cannot be loaded."""


class PlannerError(WikigroundError):
    """The multi-hop planner's LM could not answer (unreachable, refused, or an answer in no readable shape)."""


class ServerBusyError(WikigroundError):
    """The server's queue for live and multi-hop work is full: ask again after ``retry_after`` seconds."""

    def __init__(self, message: str, *, retry_after: int = 1):
        self.retry_after = retry_after
        super().__init__(message)


class ServerAnswerError(WikigroundError):
    """A wikiground server (a client's ``url``) could not be reached, or what answered is not a wikiground server
    (a wrong address or base path), or it answered with an error."""

    def __init__(self, message: str, *, url: str, status: int | None = None):
        self.url = url
        self.status = status
        self.kind: str | None = None  # the server's error type, when it answered with one
        self.route_missing = False  # a 404 for the route itself (a wrong base path), not for a page
        super().__init__(f"{url}: {message}")
