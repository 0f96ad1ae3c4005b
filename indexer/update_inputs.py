"""The inputs of ``wikiground update``: Wikimedia dumps read page by page keeping each page's newest revision
(adds-changes files, ``pages-meta-hist-incr``, hold several per page; ``pages-articles`` exports one), and
``mediawiki.page_change.v1`` events as JSON lines."""

from __future__ import annotations

import bz2
import gzip
import hashlib
import json
import lzma
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from indexer.readers import RawPage
from wikiground.errors import InputError
from wikiground.text import canonical_title

EVENT_KINDS = ("create", "edit", "move", "delete", "undelete", "visibility_change")


@dataclass(frozen=True, slots=True)
class PageEvent:
    """One ``page_change`` event, as far as the delta needs it."""

    kind: str  # page_change_kind
    page_id: int
    title: str  # canonical (spaces, first letter upper)
    namespace: int
    rev_id: int | None
    dt: str  # when it happened (ISO 8601)
    prior_title: str | None = None  # a move's old title
    line: int = 0


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def open_input(path: Path) -> IO[bytes]:
    """The file's bytes, decompressed by its suffix (.bz2, .xz, .gz)."""
    name = path.name.lower()
    try:
        if name.endswith(".bz2"):
            return bz2.open(path, "rb")
        if name.endswith(".xz"):
            return lzma.open(path, "rb")
        if name.endswith(".gz"):
            return gzip.open(path, "rb")
        return open(path, "rb")
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", path=str(path)) from exc


@dataclass(slots=True)
class DumpStats:
    max_rev_id: int | None = None
    newest_timestamp: str | None = None
    revisions: int = 0
    pages: int = 0

    def saw(self, rev_id: int | None, stamp: str | None) -> None:
        self.revisions += 1
        if rev_id is not None and (self.max_rev_id is None or rev_id > self.max_rev_id):
            self.max_rev_id = rev_id
        if stamp and (self.newest_timestamp is None or stamp > self.newest_timestamp):
            self.newest_timestamp = stamp


def dump_pages(path: Path, namespaces: frozenset[int], stats: DumpStats) -> Iterator[RawPage]:
    """The pages of a MediaWiki XML dump in ``namespaces``, each at its newest revision (highest ``rev_id``: an
    adds-changes file lists a page's revisions oldest first, but nothing promises it)."""
    import mwxml
    from mwxml.errors import MalformedXML

    label = "at the start"
    try:
        with open_input(path) as fh:
            dump = mwxml.Dump.from_file(fh)
            base = getattr(dump.site_info, "base", None)
            for page in dump.pages:
                label = f"in page {page.title!r} (id {page.id})"
                newest = None
                for rev in page:
                    stamp = rev.timestamp.long_format() if rev.timestamp else None
                    stats.saw(rev.id, stamp)
                    if newest is None or (rev.id or 0) > (newest[0].id or 0):
                        newest = (rev, stamp)
                stats.pages += 1
                if page.namespace not in namespaces or newest is None:
                    continue
                yield _raw(page, newest[0], newest[1], path, base)
    except (MalformedXML, ValueError, AssertionError, EOFError, OSError, lzma.LZMAError) as exc:
        raise InputError(f"not a readable MediaWiki XML export ({exc})", path=str(path), where=label) from exc


def _raw(page: Any, rev: Any, stamp: str | None, path: Path, base: str | None) -> RawPage:
    if page.id is None:
        raise InputError("page without <id>", path=str(path), where=f"page {page.title!r}")
    return RawPage(
        page_id=int(page.id),
        title=page.title,
        namespace=page.namespace,
        kind="wikitext",
        text=rev.text or "",
        rev_id=rev.id,
        rev_timestamp=stamp,
        redirect=page.redirect,
        source_file=path.name,
        base_url=base,
    )


def read_events(path: Path) -> list[PageEvent]:
    """The events of a JSON-lines file in the ``mediawiki.page_change.v1`` shape, in the order they happened (by
    ``dt``, then as listed: the stream orders a page's events). A line that is not such an event is an
    :class:`InputError` naming the file and line."""
    out: list[PageEvent] = []
    with open_input(path) as fh:
        for n, raw in enumerate(fh, 1):
            if raw.strip():
                out.append(_event(raw, path, n))
    return sorted(out, key=lambda e: (e.dt, e.line))


def _event(raw: bytes, path: Path, n: int) -> PageEvent:
    where = f"line {n}"
    try:
        data = json.loads(raw)
        page = data["page"]
        kind = data["page_change_kind"]
        prior = ((data.get("prior_state") or {}).get("page") or {}).get("page_title")
        revision = data.get("revision") or {}
        event = PageEvent(
            kind=str(kind),
            page_id=int(page["page_id"]),
            title=canonical_title(str(page["page_title"]).replace("_", " ")),
            namespace=int(page["namespace_id"]),
            rev_id=None if revision.get("rev_id") is None else int(revision["rev_id"]),
            dt=str(data.get("dt") or (data.get("meta") or {})["dt"]),
            prior_title=canonical_title(str(prior).replace("_", " ")) if prior else None,
            line=n,
        )
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise InputError(f"not a page_change event ({type(exc).__name__}: {exc})", path=str(path), where=where) from exc
    if event.kind not in EVENT_KINDS:
        raise InputError(f"unknown page_change_kind {event.kind!r}", path=str(path), where=where)
    if event.kind == "move" and not event.prior_title:
        raise InputError("a move without prior_state.page.page_title", path=str(path), where=where)
    return event
