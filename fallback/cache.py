"""Record/replay cache of API responses: one JSON file per normalised request.

The key is the endpoint plus the sorted request parameters, without volatile ones
(``maxlag`` changes nothing in the answer). Each entry keeps the fetch time, the HTTP
status and the revision ids the body carries, so a replayed run reproduces the
recorded run's provenance exactly. Only successful answers are ever stored: an error body, a body that is not
a JSON object or a status other than 200 is refused, and an unreadable entry (invalid UTF-8, empty, cut short,
not ours) is a miss, never an answer. ``endpoints.json`` lists the APIs the cache holds answers from, so a replay
that names none can use the only one; it is written before the first entry of an API, so a folder holding entries
without it was written by an older version, and is refused.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wikiground.errors import IndexCorruptError, IndexFormatError, InputError
from wikiground.layout import atomic_write

log = logging.getLogger(__name__)

VOLATILE_PARAMS = frozenset({"maxlag", "requestid", "curtimestamp", "smaxage", "maxage"})
CACHE_FORMAT = 1
ENDPOINTS_FILE = "endpoints.json"
# An entry holds one response (at most the live client's response cap, 8 MiB by default) re-encoded as JSON, with its
# key and provenance: anything far larger was not written by this cache, and is not read whole.
DEFAULT_MAX_ENTRY_BYTES = 2 * 8 * 1024 * 1024 + 64 * 1024


def request_key(endpoint: str, params: Mapping[str, str]) -> str:
    """Canonical text of a request: endpoint, then sorted non-volatile params."""
    items = sorted((k, str(v)) for k, v in params.items() if k not in VOLATILE_PARAMS)
    return json.dumps([endpoint, items], ensure_ascii=False, separators=(",", ":"))


def key_endpoint(key: str) -> str | None:
    """The endpoint a request key names (None for a key that is not one of ours)."""
    try:
        endpoint = json.loads(key)[0]
    except (ValueError, TypeError, IndexError, KeyError):
        return None
    return endpoint if isinstance(endpoint, str) else None


def body_problem(status: Any, body: Any) -> str | None:
    """Why an answer must not be cached or served from the cache, or None when it is a usable answer."""
    if status != 200:
        return f"HTTP status {status!r}"
    if not isinstance(body, dict):
        return f"body is {type(body).__name__}, not a JSON object"
    if "error" in body:
        return "body is an API error"
    return None


def revision_ids(body: Any) -> list[int]:
    """Every revision id a response carries (``lastrevid``, ``revid``), sorted, unique."""
    found: set[int] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("lastrevid", "revid") and isinstance(value, int) and value > 0:
                    found.add(value)
                elif isinstance(value, (dict, list)):
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(body)
    return sorted(found)


@dataclass(frozen=True, slots=True)
class CacheEntry:
    key: str
    status: int
    fetched_at: str
    rev_ids: tuple[int, ...]
    body: Any


def _parse_entry(raw: bytes, check: Callable[[Any, Any], str | None] = body_problem) -> CacheEntry:
    """An entry file's bytes as a CacheEntry; ValueError says what is wrong with it."""
    if not raw.strip():
        raise ValueError("empty file")
    data = json.loads(raw.decode("utf-8"))  # UnicodeDecodeError and JSONDecodeError are ValueErrors
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    try:
        entry = CacheEntry(
            key=data["key"],
            status=data["status"],
            fetched_at=data["fetched_at"],
            rev_ids=tuple(data.get("rev_ids", ())),
            body=data["body"],
        )
    except (KeyError, TypeError) as exc:
        raise ValueError(f"no {exc}") from exc
    if not isinstance(entry.key, str) or not isinstance(entry.fetched_at, str):
        raise ValueError("key or fetch time is not text")
    problem = check(entry.status, entry.body)
    if problem:
        raise ValueError(problem)
    return entry


class ResponseCache:
    """A folder of ``<hash[:2]>/<hash>.json`` entries, and ``endpoints.json``."""

    def __init__(
        self,
        root: Path,
        *,
        check: Callable[[Any, Any], str | None] = body_problem,
        max_entry_bytes: int = DEFAULT_MAX_ENTRY_BYTES,
    ):
        """``check(status, body)`` says why an answer is unusable (None when it is usable): by default a MediaWiki
        answer must be an HTTP 200 JSON object without an ``error``. An entry over ``max_entry_bytes``, or one that
        is not a regular file (a link, a FIFO, a device), is a miss, never read."""
        self.root = Path(root)
        self.check = check
        self.max_entry_bytes = max_entry_bytes
        self._endpoints: set[str] | None = None
        if not (self.root / ENDPOINTS_FILE).is_file() and self._has_entries():
            raise IndexFormatError(
                self.root,
                f"cache format {CACHE_FORMAT} without {ENDPOINTS_FILE}",
                f"cache format {CACHE_FORMAT} with it",
                remedy="record into a new --cache folder",
            )

    def _has_entries(self) -> bool:
        return self.root.is_dir() and next(self.root.glob("*/*.json"), None) is not None

    def path_for(self, key: str) -> Path:
        # surrogatepass: a title with a lone surrogate (valid JSON "\ud800") still has a file of its own.
        digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()
        return self.root / digest[:2] / f"{digest}.json"

    _path = path_for

    def get(self, key: str) -> CacheEntry | None:
        """The entry for ``key``; None when there is none or it is unusable (a miss: logged, never fatal)."""
        path = self.path_for(key)
        try:
            raw = self._read_regular(path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise InputError(f"cannot read cache entry: {exc}", path=str(path)) from exc
        if raw is None:
            return None
        try:
            entry = _parse_entry(raw, self.check)
        except ValueError as exc:
            log.warning("cache entry %s is unusable (%s): treated as a miss", path, exc)
            return None
        if entry.key != key:  # a hash collision or a hand-edited file: never serve the wrong answer
            log.warning("cache entry %s holds another request; ignoring it", path)
            return None
        return entry

    def _read_regular(self, path: Path) -> bytes | None:
        """The entry's bytes; None (a miss, logged) when it is not a regular file or is over the size bound. Opened
        without following a link and without blocking, so a FIFO put in an entry's place cannot hold the reader."""
        flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
        try:
            fd = os.open(path, flags)
        except OSError as exc:
            if path.is_symlink():
                log.warning("cache entry %s is a link, not a file: treated as a miss", path)
                return None
            raise exc from None
        with os.fdopen(fd, "rb") as fh:
            info = os.fstat(fh.fileno())
            if not stat.S_ISREG(info.st_mode):
                log.warning("cache entry %s is not a regular file: treated as a miss", path)
                return None
            if info.st_size > self.max_entry_bytes:
                log.warning("cache entry %s is over %d bytes: treated as a miss", path, self.max_entry_bytes)
                return None
            raw = fh.read(self.max_entry_bytes + 1)
        if len(raw) > self.max_entry_bytes:  # grew after the check
            log.warning("cache entry %s is over %d bytes: treated as a miss", path, self.max_entry_bytes)
            return None
        return raw

    def put(self, key: str, *, status: int, fetched_at: str, body: Any) -> CacheEntry | None:
        """Store a usable answer atomically; anything else is refused (logged, nothing written, None returned)."""
        problem = self.check(status, body)
        if problem:
            log.warning("not caching an unusable answer (%s)", problem)
            return None
        entry = CacheEntry(key=key, status=status, fetched_at=fetched_at, rev_ids=tuple(revision_ids(body)), body=body)
        path = self.path_for(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        payload = {
            "format": CACHE_FORMAT,
            "key": key,
            "status": status,
            "fetched_at": fetched_at,
            "rev_ids": list(entry.rev_ids),
            "body": body,
        }
        try:
            text = json.dumps(payload, ensure_ascii=False, sort_keys=True)
            data = text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate in the body: escaped, it is still valid UTF-8 JSON
            data = json.dumps(payload, ensure_ascii=True, sort_keys=True).encode("ascii")
        self._remember(key_endpoint(key))  # before the entry: no entry is ever in the folder without its API listed
        atomic_write(path, data)
        return entry

    def _remember(self, endpoint: str | None) -> None:
        if endpoint is None:
            return
        known = self.endpoints()
        if endpoint not in known:
            known.add(endpoint)
            self.root.mkdir(parents=True, exist_ok=True)
            atomic_write(self.root / ENDPOINTS_FILE, json.dumps(sorted(known), ensure_ascii=False) + "\n")

    def endpoints(self) -> set[str]:
        """The APIs this cache holds answers from (``endpoints.json``; none for a cache not written yet)."""
        if self._endpoints is None:
            self._endpoints = self._read_endpoints()
        return self._endpoints

    def _read_endpoints(self) -> set[str]:
        path = self.root / ENDPOINTS_FILE
        try:
            listed = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return set()
        except (OSError, ValueError) as exc:
            raise IndexCorruptError(f"{path}: unreadable ({exc}); record into a new --cache folder") from exc
        if not isinstance(listed, list) or not all(isinstance(e, str) for e in listed):
            raise IndexCorruptError(f"{path}: not a list of API URLs; record into a new --cache folder")
        return set(listed)

    def __len__(self) -> int:
        return sum(1 for _ in self.root.glob("*/*.json")) if self.root.is_dir() else 0
