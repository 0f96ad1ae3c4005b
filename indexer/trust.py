"""What an index folder must be before it is read: the files its build wrote, none of them a link. A symbolic link
inside the folder (another store linked into ``delta/``, a lookups array linked to a file elsewhere) would be read
as this build's own and answered as ``origin: local``; the build never writes one, so any link is refused."""

from __future__ import annotations

import os
from pathlib import Path

from wikiground.errors import IndexCorruptError
from wikiground.layout import MANIFEST_FILE

MAX_DEPTH = 8  # the build's folders are at most a few levels deep; deeper is not an index this project wrote


def refuse_links(index_dir: Path) -> None:
    """IndexCorruptError naming the first symbolic link (or junction) inside ``index_dir``, a manifest below its top
    (an index nested in another), or a folder nested deeper than any build writes (a link loop's copy). The folder
    itself may be a link (a symlinked ``--out``)."""
    root = Path(index_dir)
    stack = [(root, 0)]
    while stack:
        folder, depth = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError as exc:
            raise IndexCorruptError(f"{folder}: cannot list the index folder ({exc.strerror})") from exc
        for entry in entries:
            if entry.is_symlink() or (hasattr(entry, "is_junction") and entry.is_junction()):
                raise IndexCorruptError(
                    f"{entry.path}: a symbolic link inside the index folder (its build writes none): rebuild the "
                    "index, or remove the link"
                )
            if depth and entry.name == MANIFEST_FILE:
                raise IndexCorruptError(
                    f"{entry.path}: a manifest inside the index folder (another index, or a copy of one, nested in "
                    f"this one; the build writes one manifest, at the top): move that folder out, or rebuild"
                )
            if entry.is_dir(follow_symlinks=False):
                if depth + 1 > MAX_DEPTH:
                    raise IndexCorruptError(f"{entry.path}: nested deeper than any index folder")
                stack.append((Path(entry.path), depth + 1))
