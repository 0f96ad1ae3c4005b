"""``manifest.json`` of an index folder: what was built, from which inputs, with which parameters."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from retriever.errors import IndexCorruptError, IndexMissingError

MANIFEST_NAME = "manifest.json"
STORE_NAME = "wiki.duckdb"


def write_json_atomic(path: str | Path, data: Any) -> None:
    """Write JSON to ``path`` through a temp file in the same folder and ``os.replace``."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2, ensure_ascii=False, sort_keys=False)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_manifest(index_dir: str | Path, manifest: dict[str, Any]) -> Path:
    path = Path(index_dir) / MANIFEST_NAME
    write_json_atomic(path, manifest)
    return path


def read_manifest(index_dir: str | Path) -> dict[str, Any]:
    """The manifest of an index folder; clear errors when it is missing or unreadable."""
    path = Path(index_dir) / MANIFEST_NAME
    if not path.is_file():
        raise IndexMissingError(f"{path}: no manifest (not an index folder; build one with `python -m indexer build`)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise IndexCorruptError(f"{path}: unreadable manifest ({exc})") from exc
    if not isinstance(data, dict) or "schema_version" not in data:
        raise IndexCorruptError(f"{path}: not a wikiground manifest (no schema_version)")
    return data
