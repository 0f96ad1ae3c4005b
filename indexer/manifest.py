"""``manifest.json`` of an index folder: what was built, from which inputs, with which parameters."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from wikiground.errors import IndexCorruptError, IndexMissingError
from wikiground.layout import MANIFEST_FILE, atomic_write_json


def write_manifest(index_dir: str | Path, manifest: dict[str, Any]) -> Path:
    """The manifest, with every file of the folder listed by size and sha256 (:mod:`indexer.verify`)."""
    from indexer.verify import FILES_KEY, file_records

    path = Path(index_dir) / MANIFEST_FILE
    manifest[FILES_KEY] = file_records(Path(index_dir), manifest.get(FILES_KEY))
    atomic_write_json(path, manifest)
    return path


def read_manifest(index_dir: str | Path) -> dict[str, Any]:
    """The manifest of an index folder; clear errors when it is missing or unreadable."""
    path = Path(index_dir) / MANIFEST_FILE
    if not path.is_file():
        raise IndexMissingError(f"{path}: no manifest (not an index folder; build one with `python -m indexer build`)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise IndexCorruptError(f"{path}: unreadable manifest ({exc})") from exc
    if not isinstance(data, dict) or "schema_version" not in data:
        raise IndexCorruptError(f"{path}: not a wikiground manifest (no schema_version)")
    return data
