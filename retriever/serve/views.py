"""What the server shows of itself: its answers name the index by its folder's name and build id, never by a path
on the server's disk (a client has no business knowing where the server keeps its files)."""

from __future__ import annotations

import re
from pathlib import PurePosixPath, PureWindowsPath
from typing import Any

_ABSOLUTE = re.compile(r"^(/|~/|[A-Za-z]:[\\/]|\\\\)")


def scrub_path(value: str) -> str:
    """An absolute path as its last part (``/srv/dumps/enwiki.xml.bz2`` -> ``enwiki.xml.bz2``); other text as is."""
    if not _ABSOLUTE.match(value):
        return value
    windows = "\\" in value and "/" not in value
    return (PureWindowsPath(value) if windows else PurePosixPath(value)).name or value


def scrub(obj: Any) -> Any:
    """``obj`` (JSON) with every string that is an absolute path replaced by its last part."""
    if isinstance(obj, str):
        return scrub_path(obj)
    if isinstance(obj, dict):
        return {k: scrub(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [scrub(v) for v in obj]
    return obj


def public_stats(stats: dict[str, Any]) -> dict[str, Any]:
    """``/stats`` as clients see it: the index by folder name and build id, no path anywhere."""
    manifest = stats.get("manifest")
    build_id = manifest.get("build_id") if isinstance(manifest, dict) else None
    index = stats.get("index")
    named = {"index": scrub_path(index) if isinstance(index, str) else index, "build_id": build_id}
    if isinstance(manifest, dict):  # its file list is for `wikiground verify`, not for clients
        named["manifest"] = {k: v for k, v in manifest.items() if k != "files"}
    return scrub({**stats, **named})
