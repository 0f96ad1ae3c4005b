"""Every file an index's build wrote, with its size and sha256, in the manifest (``files``); and
``wikiground verify DIR`` (``python -m indexer.verify DIR``), which reads every one of them whole and reports each
that differs, as ``git fsck`` does. A file over SMALL_FILE bytes also has sampled blocks recorded (``blocks``),
which opening an index checks (:mod:`indexer.integrity`: small files whole, big ones by size and samples; a damaged
lookups file falls back to the store with a warning, any other is an error).

Not listed: ``manifest.json`` itself, the build's stage journal, ``delta/`` (pages ingested live after the
build), ``dense/shards/`` (an embedding's resumable shards) and hidden files (locks). A file whose size and
modification time are those of its record keeps its sha256 when the manifest is written again (``indexer.embed``
adds a channel): only new or changed files are read.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

from indexer.integrity import BLOCKS_KEY, SMALL_FILE, listed_records, sample_record
from wikiground.errors import IndexCorruptError, IndexMissingError, WikigroundError
from wikiground.layout import MANIFEST_FILE

FILES_KEY = "files"
SKIPPED_DIRS = ("delta",)
SKIPPED_FILES = (MANIFEST_FILE, "stages.json")  # the manifest, and the build's stage journal (removed at its end)
SKIPPED_SUBDIRS = ("shards",)  # dense/shards: an embedding's resumable shards, not read by queries
CHUNK = 8 * 1024 * 1024


def listed_files(index_dir: Path) -> list[Path]:
    """The files a manifest lists: every regular file under ``index_dir`` but the manifest, delta/ and hidden ones."""
    root = Path(index_dir)
    found = []
    for folder, dirs, files in os.walk(root):
        rel = Path(folder).relative_to(root)
        skipped = SKIPPED_DIRS if rel == Path(".") else SKIPPED_SUBDIRS
        dirs[:] = [d for d in dirs if d not in skipped and not d.startswith(".")]
        for name in files:
            path = Path(folder) / name
            if name.startswith(".") or (rel == Path(".") and name in SKIPPED_FILES) or not path.is_file():
                continue
            found.append(path)
    return sorted(found)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def file_records(index_dir: Path, before: Any = None) -> dict[str, dict[str, Any]]:
    """``{relative path: {"bytes", "mtime_ns", "sha256"}}`` of every file the manifest lists; a record of
    ``before`` (the previous manifest's) is kept for a file of the same size and modification time."""
    root = Path(index_dir)
    old = before if isinstance(before, dict) else {}
    records = {}
    for path in listed_files(root):
        rel, info = path.relative_to(root).as_posix(), path.stat()
        prev = old.get(rel)
        if (
            isinstance(prev, dict)
            and prev.get("bytes") == info.st_size
            and prev.get("mtime_ns") == info.st_mtime_ns
            and (info.st_size <= SMALL_FILE or BLOCKS_KEY in prev)
        ):
            records[rel] = prev
        else:
            record = {"bytes": info.st_size, "mtime_ns": info.st_mtime_ns, "sha256": sha256_of(path)}
            records[rel] = {**record, **sample_record(path, info.st_size)}
    return records


def _read_manifest(path: Path) -> dict[str, Any]:
    """The manifest as JSON (indexer.manifest writes it through this module: it is not imported back)."""
    if not path.is_file():
        raise IndexMissingError(f"{path}: no manifest (not an index folder)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise IndexCorruptError(f"{path}: unreadable manifest ({exc})") from exc
    if not isinstance(data, dict):
        raise IndexCorruptError(f"{path}: not a wikiground manifest")
    return data


def verify(index_dir: Path) -> list[str]:
    """Every problem with the index's files, each naming the file: missing, of another size, another sha256, or
    not listed. Reads every listed file whole."""
    root = Path(index_dir)
    manifest = _read_manifest(root / MANIFEST_FILE)
    files = listed_records(manifest, root / MANIFEST_FILE, FILES_KEY)
    if files is None:
        return [f"{root / MANIFEST_FILE}: lists no files (built before they were listed): rebuild to verify it"]
    problems = []
    for rel, record in files.items():
        path = root / rel
        if path.is_symlink() or not path.is_file():
            problems.append(f"{path}: missing, or not a regular file")
        elif path.stat().st_size != record.get("bytes"):
            problems.append(f"{path}: {path.stat().st_size} bytes, the build wrote {record.get('bytes')}")
        elif sha256_of(path) != record.get("sha256"):
            problems.append(f"{path}: its content changed since the build (sha256 differs)")
    for path in listed_files(root):
        if path.relative_to(root).as_posix() not in files:
            problems.append(f"{path}: not written by the build (not in the manifest)")
    return problems


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="wikiground verify", description="check every file of an index folder")
    p.add_argument("index", type=Path, help="the index folder")
    args = p.parse_args(argv)
    try:
        problems = verify(args.index)
    except WikigroundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for line in problems:
        print(line)
    if problems:
        print(f"{len(problems)} problem{'s' if len(problems) > 1 else ''} in {args.index}", file=sys.stderr)
        return 1
    print(f"ok: every file of {args.index} is as its build wrote it", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
