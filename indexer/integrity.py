"""The index's files checked cheaply: when an index is opened, and before each search of an open one.

**At open** every file the manifest lists (``files``: :mod:`indexer.verify`) is compared with its record: a file of
at most SMALL_FILE bytes (params.json, vocabularies, small arrays) is hashed whole against its sha256; a bigger one
(the memory-mapped arrays, the vectors) has its size checked and SAMPLED_BLOCKS blocks of BLOCK_BYTES read at fixed
places (its first and last block, the rest evenly between) against the blake2b digests its build recorded
(``blocks``). A file cut, lengthened or overwritten in any sampled block is found without reading the whole file
(``wikiground verify`` reads every byte). The store itself is not sampled: DuckDB checks each block's own checksum
as it reads it, and its size is checked against the manifest's ``store_bytes``.

**While open** the index's files are read through memory maps: a file cut under a running process makes the next
read of a page past its new end a SIGBUS, which kills the process (Python cannot catch it). :class:`FileGuard`
remembers each file's identity and size when the index is opened; a search first checks (one ``stat`` a file) the
files it is about to read, and a file cut since is an :class:`IndexCorruptError` naming it, not a dead process. A
cut that lands during a search is not caught: index files are immutable, and replaced only by the build's atomic
swap of the whole folder.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from wikiground.errors import IndexCorruptError
from wikiground.layout import LOOKUPS_DIR, STORE_FILE

BLOCK_BYTES = 4096
SAMPLED_BLOCKS = 16  # 64 KiB read of each big file at open
SMALL_FILE = 64 * 1024  # files up to this size are hashed whole at open
BLOCKS_KEY = "blocks"


def block_offsets(size: int) -> list[int]:
    """Where the sampled blocks of a file of ``size`` bytes start: the first and the last block, the rest evenly
    between (fixed by the size alone, so the build and every open read the same places)."""
    last = max(0, size - BLOCK_BYTES)
    n = min(SAMPLED_BLOCKS, size // BLOCK_BYTES + 1)
    return sorted({last * i // max(1, n - 1) for i in range(n)})


def block_digests(path: Path, size: int) -> list[str]:
    """The blake2b (8 bytes, hex) of each sampled block of ``path`` (``size`` bytes when it was recorded)."""
    out = []
    with Path(path).open("rb") as fh:
        for offset in block_offsets(size):
            fh.seek(offset)
            out.append(hashlib.blake2b(fh.read(BLOCK_BYTES), digest_size=8).hexdigest())
    return out


def sample_record(path: Path, size: int) -> dict[str, Any]:
    """What the manifest records of a file besides its size and sha256: its sampled blocks when it is big."""
    return {BLOCKS_KEY: block_digests(path, size)} if size > SMALL_FILE else {}


def listed_records(manifest: Mapping[str, Any], where: Path, key: str = "files") -> dict[str, dict[str, Any]] | None:
    """The manifest's file records (None when it lists none), refused when malformed or naming a file outside the
    index folder (an absolute path, or one through ``..``)."""
    files = manifest.get(key)
    if files is None:
        return None
    if not isinstance(files, dict) or not all(isinstance(v, dict) for v in files.values()):
        raise IndexCorruptError(f"{where}: '{key}' is not an object of file records")
    for rel in files:
        parts = Path(rel).parts
        if not rel or rel.startswith(("/", "\\")) or ".." in parts or ":" in rel.split("/")[0]:
            raise IndexCorruptError(f"{where}: '{key}' names {rel[:80]!r}, outside the index folder")
    return files


def sampled_problems(index_dir: Path, files: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """``{relative path: what is wrong}`` for each listed file (the store aside) that is of another size or differs
    from its record: whole for a small file, in a sampled block for a big one. A missing file is left to its reader
    (a channel whose folder is gone is skipped with a warning, or refused when asked for by name)."""
    root = Path(index_dir)
    problems = {}
    for rel, record in files.items():
        if rel == STORE_FILE:
            continue
        why = _problem(root / rel, record)
        if why:
            problems[rel] = why
    return problems


def _problem(path: Path, record: Mapping[str, Any]) -> str | None:
    try:
        info = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return None  # its reader says so: a channel folder gone is skipped with a warning, lookups fall back
    except OSError as exc:
        return f"unreadable ({exc.strerror})"
    size = record.get("bytes")
    if info.st_size != size:
        return f"{info.st_size} bytes, the build wrote {size}"
    if size <= SMALL_FILE:
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        return None if digest == record.get("sha256") else "its content changed since the build (sha256 differs)"
    blocks = record.get(BLOCKS_KEY)
    if not isinstance(blocks, list):
        return None  # recorded before blocks were sampled: its size is all there is to check
    got = block_digests(path, size)
    bad = [at for at, a, b in zip(block_offsets(size), got, blocks) if a != b]
    return f"its content changed since the build (the block at byte {bad[0]:,} differs)" if bad else None


def refuse_damaged(index_dir: Path, problems: Mapping[str, str]) -> None:
    """IndexCorruptError naming the first damaged file that is not an optional lookups file (those fall back)."""
    for rel, why in problems.items():
        if not rel.startswith(f"{LOOKUPS_DIR}/"):
            raise IndexCorruptError(
                f"{Path(index_dir) / rel}: {why}; `wikiground verify {index_dir}` lists every damaged file: "
                "rebuild the index (or restore it from a copy)"
            )


class FileGuard:
    """The identity and size of every file of an opened index, checked before the files are read again."""

    MAX_GROUPS = 64  # the sets of folders a search names: the channel sets in use, a handful

    def __init__(self, index_dir: Path, paths: Iterable[Path]):
        self.index_dir = Path(index_dir)
        # relative path -> (the path to stat, device, inode, size at open)
        self._seen: dict[str, tuple[str, int, int, int]] = {}
        for path in paths:
            try:
                st = os.stat(path)
            except OSError:
                continue
            rel = Path(path).relative_to(self.index_dir).as_posix()
            self._seen[rel] = (os.fspath(path), st.st_dev, st.st_ino, st.st_size)
        # The files each set of folders covers, listed once: a search's check is then one stat a file and no more.
        self._groups: dict[tuple[str, ...], tuple[tuple[str, str, int, int, int], ...]] = {}

    def _group(self, folders: Iterable[str]) -> tuple[tuple[str, str, int, int, int], ...]:
        key = tuple(sorted(set(folders)))
        group = self._groups.get(key)
        if group is None:
            prefixes = tuple(f"{f}/" for f in key)
            group = tuple(
                (rel, *record) for rel, record in self._seen.items() if rel == STORE_FILE or rel.startswith(prefixes)
            )
            if len(self._groups) >= self.MAX_GROUPS:
                self._groups.clear()
            self._groups[key] = group
        return group

    def cut(self, folders: Iterable[str]) -> list[tuple[str, int, int]]:
        """(relative path, size now, size at open) of each file under ``folders`` (and the store) that has shrunk
        or grown since the index was opened. A file replaced by another (a new inode) is not the one the open
        maps read: it is not reported."""
        out = []
        for rel, path, dev, ino, size in self._group(folders):
            try:
                st = os.stat(path)
            except OSError:
                continue  # removed: the open file (and its map) stay whole until closed
            if st.st_size != size and st.st_ino == ino and st.st_dev == dev:
                out.append((rel, st.st_size, size))
        return out

    def check(self, folders: Iterable[str]) -> None:
        """IndexCorruptError naming the first file under ``folders`` (or the store) cut since the index was opened.
        The message names the file within the index folder (a server sends it to its clients)."""
        for rel, now, was in self.cut(folders):
            raise IndexCorruptError(
                f"{rel} of the index {self.index_dir.name!r} is {now:,} bytes, {was:,} when it was opened: it was "
                "changed under the running process; restore the index (`wikiground verify` checks it), then reload "
                "or restart"
            )
