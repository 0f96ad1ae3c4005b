"""Record/replay cache of API responses: one JSON file per normalised request.

The key is the endpoint plus the sorted request parameters, without volatile ones
(``maxlag`` changes nothing in the answer). Each entry keeps the fetch time, the HTTP
status and the revision ids the body carries, so a replayed run reproduces the
recorded run's provenance exactly. Only successful answers are ever stored.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wikiground.errors import InputError
from wikiground.layout import atomic_write

log = logging.getLogger(__name__)

VOLATILE_PARAMS = frozenset({"maxlag", "requestid", "curtimestamp", "smaxage", "maxage"})
CACHE_FORMAT = 1


def request_key(endpoint: str, params: Mapping[str, str]) -> str:
    """Canonical text of a request: endpoint, then sorted non-volatile params."""
    items = sorted((k, str(v)) for k, v in params.items() if k not in VOLATILE_PARAMS)
    return json.dumps([endpoint, items], ensure_ascii=False, separators=(",", ":"))


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


class ResponseCache:
    """A folder of ``<hash[:2]>/<hash>.json`` entries."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def _path(self, key: str) -> Path:
        digest = hashlib.sha256(key.encode("utf-8")).hexdigest()
        return self.root / digest[:2] / f"{digest}.json"

    def get(self, key: str) -> CacheEntry | None:
        path = self._path(key)
        try:
            raw = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise InputError(f"cannot read cache entry: {exc}", path=str(path)) from exc
        try:
            data = json.loads(raw)
            entry = CacheEntry(
                key=data["key"],
                status=int(data["status"]),
                fetched_at=data["fetched_at"],
                rev_ids=tuple(data.get("rev_ids", ())),
                body=data["body"],
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise InputError(f"corrupt cache entry: {exc}", path=str(path)) from exc
        if entry.key != key:  # a hash collision or a hand-edited file: never serve the wrong answer
            log.warning("cache entry %s holds another request; ignoring it", path)
            return None
        return entry

    def put(self, key: str, *, status: int, fetched_at: str, body: Any) -> CacheEntry:
        entry = CacheEntry(key=key, status=status, fetched_at=fetched_at, rev_ids=tuple(revision_ids(body)), body=body)
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        payload = {
            "format": CACHE_FORMAT,
            "key": key,
            "status": status,
            "fetched_at": fetched_at,
            "rev_ids": list(entry.rev_ids),
            "body": body,
        }
        atomic_write(path, json.dumps(payload, ensure_ascii=False, sort_keys=True))
        return entry

    def __len__(self) -> int:
        return sum(1 for _ in self.root.glob("*/*.json")) if self.root.is_dir() else 0
