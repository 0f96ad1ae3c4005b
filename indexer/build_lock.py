"""One writer at a time per index folder: the lock a build holds, and whatever else swaps a part of the folder
(``indexer.dense_later`` joining its dense channel)."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from wikiground.errors import IndexLockedError
from wikiground.layout import FILE_MODE, build_lock_path


@contextlib.contextmanager
def build_lock(out: Path) -> Iterator[None]:
    """One build at a time per ``out``: an exclusive lock on ``.NAME.lock`` beside it (released if the build dies).

    The lock file is removed when the build ends, while still locked; a build that opened it just before then holds
    a lock on a file no longer at that path, notices, and locks the path's file instead.
    """
    path = build_lock_path(out)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip() or "?"
            os.close(fd)
            raise IndexLockedError(
                f"{out}: another build is writing this index (pid {holder}, lock {path}); "
                "wait for it to finish, or stop it, and build again"
            ) from exc
        if _is_file_at(fd, path):
            break
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        os.close(fd)


def _is_file_at(fd: int, path: Path) -> bool:
    try:
        return os.fstat(fd).st_ino == os.stat(path).st_ino
    except FileNotFoundError:
        return False
